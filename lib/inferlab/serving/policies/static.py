"""Static batching: wait for `batch_size` requests (or `timeout_s` after the oldest arrived), prefill
them padded to the longest prompt, decode all of them (finished ones as padding) until the longest
output is done; KV for prompt + output reserved up front. No request joins mid-batch."""
from __future__ import annotations

from dataclasses import dataclass

from inferlab.serving.kv import blocks_for
from inferlab.serving.policies.base import Policy, StepPlan, count, option, seconds_or_none


@dataclass(frozen=True)
class StaticBatching(Policy):
    batch_size: int = option(8, "requests per batch", count)
    timeout_s: float | None = option(None, "start a partial batch this long after its oldest request arrived "
                                           "(unset: wait until the batch is full or arrivals end)", seconds_or_none)
    name = "static"

    def plan_step(self, state) -> StepPlan:
        """Decode the running batch to its longest output. With none running, form a new one when
        `batch_size` wait, when the oldest has waited `timeout_s`, or (no timeout) once arrivals
        have ended; otherwise there is nothing to do yet."""
        if state.static_batch:
            return StepPlan(decode=True)
        if not state.waiting:
            return StepPlan()
        if len(state.waiting) >= self.batch_size:
            ready = state.clock
        elif self.timeout_s is not None:  # the server cannot know no one else is coming
            ready = max(state.clock, state.waiting[0].arrival + self.timeout_s)
        elif state.arrivals_over:  # no timeout: the last partial batch starts when arrivals end
            ready = state.clock
        else:
            return StepPlan()
        return StepPlan(form_batch=self.batch_size, start_s=ready)

    def fits_alone(self, prompt, output, total_blocks, watermark_blocks, block_tokens) -> bool:
        """The whole sequence is reserved up front; no admission watermark applies."""
        return blocks_for(prompt + output, block_tokens) <= total_blocks

    def check_runs_with(self, feature: str) -> None:
        raise ValueError(f"{feature} applies to the iteration-level policies (every policy but static); "
                         f"got policy static")

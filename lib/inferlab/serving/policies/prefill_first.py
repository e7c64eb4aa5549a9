"""Prefill first (vLLM's default without chunking): a step either prefills newly admitted prompts
(up to `max_batched_tokens`) or decodes every running sequence; prefills go first, so decodes
stall while prompts arrive."""
from __future__ import annotations

from dataclasses import dataclass

from inferlab.serving.policies.base import Policy, StepPlan, count, count_or_none, option


@dataclass(frozen=True)
class PrefillFirst(Policy):
    max_num_seqs: int = option(256, "sequences running at once", count)
    max_batched_tokens: int | None = option(8192, "prompt tokens admitted per step", count_or_none)
    name = "prefill-first"

    def plan_step(self, state) -> StepPlan:
        """Admitted prompts prefill whole in a step of their own; only without any, decode."""
        state.admit(self.max_batched_tokens, self.max_num_seqs)
        if state.prefilling:
            return StepPlan(tuple((r, state.left(r)) for r in state.prefilling))
        if state.n_decoding:
            state.reserve_decode()
            return StepPlan(decode=state.n_decoding > 0)
        return StepPlan()

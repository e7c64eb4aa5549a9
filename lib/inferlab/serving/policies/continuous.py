"""Continuous batching (Orca): iteration-level; at every step waiting requests join, their whole
prompts prefilled in the same step as the running sequences' decode tokens."""
from __future__ import annotations

from dataclasses import dataclass

from inferlab.serving.policies.base import Policy, StepPlan, count, count_or_none, option


@dataclass(frozen=True)
class ContinuousBatching(Policy):
    max_num_seqs: int = option(256, "sequences running at once", count)
    max_batched_tokens: int | None = option(None, "prompt tokens admitted per step (unset: no limit)", count_or_none)
    name = "continuous"

    def plan_step(self, state) -> StepPlan:
        """Running sequences decode; waiting prompts join whole in the same step (none in a step
        that had to evict, as vLLM)."""
        preempted = decode = False
        if state.n_decoding:
            preempted = state.reserve_decode()
            decode = state.n_decoding > 0
        if not preempted:
            state.admit(self.max_batched_tokens, self.max_num_seqs)
        return StepPlan(tuple((r, state.left(r)) for r in state.prefilling), decode)

"""Chunked prefill (Sarathi-Serve): each step carries every decode token, then fills the rest of a
`token_budget` with prompt chunks (in-progress prompts first, then new ones)."""
from __future__ import annotations

from dataclasses import dataclass

from inferlab.serving.policies.base import Policy, StepPlan, count, fill, option


@dataclass(frozen=True)
class ChunkedPrefill(Policy):
    token_budget: int = option(512, "tokens per step: every decode token, then prompt chunks", count)
    max_num_seqs: int = option(256, "sequences running at once", count)
    name = "chunked"

    @classmethod
    def check_relations(cls, values: dict, label) -> None:
        """Every running sequence decodes each step, so the budget holds max_num_seqs decode tokens."""
        if values["token_budget"] < values["max_num_seqs"]:
            raise ValueError(
                f"{label('token_budget')} must be >= {label('max_num_seqs')}={values['max_num_seqs']} so every "
                f"running sequence decodes each step; got {label('token_budget')}={values['token_budget']}")

    def plan_step(self, state) -> StepPlan:
        """Every decode token first, then the budget left to prompt chunks: in-progress prompts,
        then newly admitted ones (none admitted in a step that had to evict)."""
        preempted = decode = False
        if state.n_decoding:
            preempted = state.reserve_decode()
            decode = state.n_decoding > 0
        chunks = []
        budget = fill(state, self.token_budget - state.n_decoding, state.prefilling, chunks)
        if budget > 0 and not preempted:
            n0 = len(state.prefilling)
            state.admit(None, self.max_num_seqs, budget, self.whole_prompts)
            fill(state, budget, state.prefilling[n0:], chunks)
        return StepPlan(tuple(chunks), decode)

    @property
    def whole_prompts(self) -> bool:
        """Whether a prompt waits until all of it fits the budget left (never split): no."""
        return False

    def largest_prefill(self, prompt: int) -> int:
        return min(prompt, self.token_budget)

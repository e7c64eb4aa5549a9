"""Hugging Face transformers' continuous-batching FIFO scheduler, as the simulator runs it.

Read from transformers 5.24.0, generation/continuous_batching/scheduler.py, FIFOScheduler: each step
takes the decoding requests first (one token each), then the partly prefilled ones, then the waiting
ones in arrival order, giving each min(its remaining prompt, the token budget left) tokens, so a
prompt longer than what is left is split (chunked) and continued next step; at most
`max_requests_per_batch` requests per step and `max_batch_tokens` tokens per step. With a KV pool too
large to fill (the adapter sizes it so), its safety margin (no new prefill under 15 % free blocks) and
its offloading never act, and the schedule is Sarathi's chunked prefill with token_budget =
max_batch_tokens and max_num_seqs = max_requests_per_batch. `page_size` is its KV block (page) size
in tokens. The validation study (study.validate) builds it from the engine's settings; it is not a
`--policy` of `inferlab serve`.
"""
from __future__ import annotations

from dataclasses import dataclass

from inferlab.serving.policies.base import count, option
from inferlab.serving.policies.chunked import ChunkedPrefill


@dataclass(frozen=True)
class TransformersFIFO(ChunkedPrefill):
    """transformers' FIFOScheduler (5.24.0); token_budget is its max_batch_tokens, max_num_seqs its
    max_requests_per_batch. Plans its steps as ChunkedPrefill."""

    page_size: int = option(16, "KV page size in tokens", count)
    name = "transformers-fifo"
    engine = "transformers"
    version_read = "5.24.0"

    @property
    def max_batch_tokens(self) -> int:
        return self.token_budget

    @property
    def max_requests_per_batch(self) -> int:
        return self.max_num_seqs

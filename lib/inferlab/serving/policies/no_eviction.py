"""No eviction (TensorRT-LLM's default capacity scheduler, GUARANTEED_NO_EVICT): a request is admitted
only when the KV blocks of its whole sequence, prompt plus maximum output tokens, are free, and it
holds them until it finishes, so a running sequence never needs a block it cannot get and nothing is
preempted. The steps are planned as chunked prefill (every decode token, then prompt chunks up to
`token_budget`, TensorRT-LLM's max_num_tokens with chunked context).

The price is capacity: a paged engine that admits on the prompt's blocks alone (vLLM) runs more
sequences at once while outputs are short of their maximum, and preempts when they grow; this one
runs fewer and never recomputes. The pool's "blocks in use" counts the reserved blocks.
"""
from __future__ import annotations

from dataclasses import dataclass

from inferlab.serving.policies.chunked import ChunkedPrefill


@dataclass(frozen=True)
class NoEviction(ChunkedPrefill):
    name = "no-evict"

    def kv_tokens_at_admission(self, r) -> int:
        """The prompt and every output token it may generate: the whole sequence, reserved at once."""
        return r.target + r.output - r.generated

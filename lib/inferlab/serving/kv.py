"""Paged KV cache (vLLM's PagedAttention): memory as blocks of `block_tokens` tokens.

A sequence holding n tokens occupies ceil(n / block_tokens) blocks; only the last block has slack.
Blocks per device = floor((usable - weights) / (KV bytes per token * block_tokens)), usable memory as
`core.usable_memory` defines it (vLLM's utilisation of the datasheet or the reported capacity), with
weights and KV bytes per token per device under tensor parallelism (`memory`).
"""
from __future__ import annotations

from inferlab.core.memory import kv_cache_bytes_per_token, weight_bytes
from inferlab.core.specs import BF16, Precision, check_accelerator, check_model
from inferlab.core.usable_memory import MemoryConvention
from inferlab.base.units import GB
from inferlab.base.input_checks import DoesNotFitError, fraction, positive_int


def blocks_for(tokens: int, block_tokens: int) -> int:
    """ceil(tokens / block_tokens)."""
    return -(-tokens // block_tokens)


def kv_capacity_blocks(model, accelerator, precision: Precision = BF16, tp: int = 1,
                       block_tokens: int = 16, memory_utilization: float = 0.9,
                       memory_capacity: str = "datasheet") -> int:
    """KV blocks that fit beside the weights on each device: `memory_utilization` (vLLM's
    gpu_memory_utilization, default 0.9) of the `memory_capacity` ("datasheet" or "reported") leaves the
    rest for activations and the allocator."""
    model, acc = check_model(model), check_accelerator(accelerator)
    positive_int("block_tokens", block_tokens)
    fraction("memory_utilization", memory_utilization)
    w = weight_bytes(model, precision, tp)
    convention = MemoryConvention("vllm", memory_capacity, memory_utilization)
    free = convention.usable_bytes(acc, w) - w
    per_block = kv_cache_bytes_per_token(model, precision, tp) * block_tokens
    n = int(free // per_block) if free > 0 else 0
    per_token = per_block / block_tokens
    if n < 1 and free >= per_token:  # the weights fit; one block of this size does not
        raise DoesNotFitError(
            f"block_tokens={block_tokens}: one KV block of that many tokens needs {per_block / GB:.3g} GB per "
            f"device, but {free / GB:.1f} GB is left beside the weights of {model.name} on {acc.name} (tp={tp}); "
            f"allowed: block_tokens <= {int(free // per_token)}")
    if n < 1:
        raise DoesNotFitError(
            f"{model.name} weights take {w / GB:.1f} GB per device (tp={tp}) of the "
            f"{convention.describe(acc)} usable on {acc.name}: no room "
            "for a KV block; use more devices (tp), a smaller weight dtype or a smaller model")
    return n

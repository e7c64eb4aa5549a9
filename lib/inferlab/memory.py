"""What must sit in accelerator memory: weights, KV cache, and the batch that fits beside them.

KV cache bytes = 2 (K and V) * L * n_kv_heads * head_dim * S * B * bytes per KV element.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from inferlab.context import check_context, context_flag
from inferlab.parallel import tp_shard
from inferlab.specs import BF16, Precision, check_precision, check_accelerator, check_model
from inferlab.units import GB, bytes_per_element
from inferlab.input_checks import DoesNotFitError, positive_float, positive_int, scalar


def weight_bytes(model, precision: Precision = BF16, tp: int = 1) -> float:
    """Bytes of all parameters (embeddings and norms included) on one of `tp` devices."""
    shard = tp_shard(check_model(model), tp)
    return shard.n_params * bytes_per_element(check_precision(precision).weights)


def kv_cache_bytes_per_token(model, precision: Precision = BF16, tp: int = 1) -> float:
    """2 * L * n_kv_heads * head_dim * bytes per element (per device under tensor parallelism)."""
    shard = tp_shard(check_model(model), tp)
    return 2.0 * shard.n_layers * shard.kv_dim * bytes_per_element(check_precision(precision).kv)


@context_flag
def kv_cache_bytes(model, seq_len, batch=1, precision: Precision = BF16, tp: int = 1):
    """KV cache of `batch` sequences of `seq_len` tokens: per-token bytes * seq_len * batch.
    seq_len beyond the model's maximum context: ContextLengthWarning (beyond_context=True: none)."""
    check_model(model)
    check_precision(precision)
    positive_int("seq_len", seq_len)
    positive_int("batch", batch)
    check_context(model, seq_len, stacklevel=4)
    out = kv_cache_bytes_per_token(model, precision, tp) * np.asarray(seq_len, dtype=float) * np.asarray(batch, dtype=float)
    return out if out.ndim else float(out)


@dataclass(frozen=True)
class MemoryBudget:
    """One device's memory split, in bytes. `free` is negative when the configuration overflows."""

    capacity_bytes: float
    weight_bytes: float
    kv_bytes: object
    reserved_bytes: float

    @property
    def used_bytes(self):
        return self.weight_bytes + self.kv_bytes + self.reserved_bytes

    @property
    def free_bytes(self):
        return self.capacity_bytes - self.used_bytes

    @property
    def fits(self):
        return self.free_bytes >= 0


@context_flag
def memory_budget(model, accelerator, batch, seq_len, precision: Precision = BF16, tp: int = 1,
                  reserved_bytes: float = 0.0) -> MemoryBudget:
    """Weights + KV cache + a reserved margin (activations, allocator slack) on one device."""
    check_model(model)
    check_precision(precision)
    acc = check_accelerator(accelerator)
    scalar("reserved_bytes", reserved_bytes)
    positive_float("reserved_bytes", reserved_bytes, allow_zero=True)
    return MemoryBudget(acc.memory_bytes, weight_bytes(model, precision, tp),
                        kv_cache_bytes(model, seq_len, batch, precision, tp), float(reserved_bytes))


@context_flag
def max_batch(model, accelerator, seq_len, precision: Precision = BF16, tp: int = 1,
              reserved_bytes: float = 0.0, allow_zero: bool = False):
    """Largest B with weights + B * KV(seq_len) + reserved <= capacity (floor, per device).
    Raises DoesNotFitError when the weights alone do not fit, and (unless allow_zero) when not
    even one sequence of seq_len tokens fits beside them."""
    check_precision(precision)
    model = check_model(model)
    acc = check_accelerator(accelerator)
    scalar("reserved_bytes", reserved_bytes)
    positive_float("reserved_bytes", reserved_bytes, allow_zero=True)
    w = weight_bytes(model, precision, tp)
    free = acc.memory_bytes - w - reserved_bytes
    if free < 0:
        raise DoesNotFitError(
            f"{model.name} weights need {w / GB:.1f} GB per device (tp={tp}, {precision.weights}) "
            f"plus reserved_bytes={reserved_bytes / GB:.3g} GB, but {acc.name} has {acc.memory_bytes / GB:.0f} GB; "
            "use more devices (tp), a smaller weight dtype or a smaller model")
    per_seq = kv_cache_bytes(model, seq_len, 1, precision, tp)
    b = np.floor(free / np.asarray(per_seq)).astype(np.int64)
    if not allow_zero and np.any(b < 1):
        worst = float(np.max(per_seq))
        raise DoesNotFitError(
            f"one sequence of seq_len={np.max(seq_len)} needs {worst / GB:.2f} GB of KV cache but only "
            f"{free / GB:.2f} GB is left beside the weights on {acc.name}; shorten seq_len, "
            "quantise the KV cache or add devices")
    return b if b.ndim else int(b)

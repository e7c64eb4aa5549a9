"""Does a configuration fit once a server keeps headroom? One answer, with the condition that flips it.

    from inferlab.core.memory_headroom import headroom_fit
    fit = headroom_fit("llama-2-70b", "h100-sxm", batch=32, seq_len=2048, tp=2)
    fit.free_bytes("datasheet"), fit.free_bytes("reported")   # 0.28 GB and 5.80 GB
    fit.max_batch_at_utilisation()                            # 23 with vLLM's default 0.9

Two capacity conventions meet here: the datasheet's (80 GB = 80e9 bytes for an H100, the book's) and
what the device reports (nvidia-smi: 81,559 MiB = 85.52e9 bytes). A serving engine does not hand all
of it to weights and KV cache: vLLM keeps `gpu_memory_utilization` (default 0.9) of the reported
total for itself and leaves the rest for the CUDA context and other processes, then subtracts the
weights and its measured activation peak before sizing the KV pool.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from inferlab.core.memory import kv_cache_bytes, weight_bytes
from inferlab.core.boundary import enters
from inferlab.core.specs import BF16, Accelerator, ModelConfig, Precision
from inferlab.base.input_checks import positive_float, positive_int

# vLLM's default `gpu_memory_utilization` (vllm.config.CacheConfig): the share of the device's
# reported memory the engine may use for weights, activations and the KV pool.
VLLM_DEFAULT_UTILISATION = 0.9
CAPACITIES = ("datasheet", "reported")


@dataclass(frozen=True)
class HeadroomFit:
    """Per-device bytes of one configuration (weights + KV cache) against both capacities."""

    model: str
    accelerator: str
    batch: int
    seq_len: int
    tp: int
    weight_bytes: float
    kv_bytes: float
    kv_bytes_per_seq: float
    datasheet_bytes: float
    reported_bytes: float | None

    @property
    def used_bytes(self) -> float:
        return self.weight_bytes + self.kv_bytes

    def capacity_bytes(self, capacity: str = "datasheet") -> float:
        if capacity not in CAPACITIES:
            raise ValueError(f"capacity must be one of {', '.join(CAPACITIES)}; got {capacity!r}")
        if capacity == "reported":
            if self.reported_bytes is None:
                raise ValueError(f"capacity='reported': {self.accelerator} has no reported_memory_bytes "
                                 "in data/accelerators.toml; use capacity='datasheet'")
            return self.reported_bytes
        return self.datasheet_bytes

    def free_bytes(self, capacity: str = "datasheet") -> float:
        """capacity - weights - KV cache, per device (negative: does not fit even on paper)."""
        return self.capacity_bytes(capacity) - self.used_bytes

    def starts(self, headroom_bytes: float, capacity: str = "reported") -> bool:
        """True when free_bytes(capacity) >= headroom_bytes: the flip condition of the answer."""
        positive_float("headroom_bytes", headroom_bytes, allow_zero=True)
        return self.free_bytes(capacity) >= headroom_bytes

    def max_batch_at_utilisation(self, utilisation: float = VLLM_DEFAULT_UTILISATION,
                                 capacity: str = "reported") -> int:
        """floor((utilisation * capacity - weights) / KV per sequence), per device, at least 0: the
        batch a vLLM-style pool holds (the activation peak, which vLLM also subtracts, left out)."""
        positive_float("utilisation", utilisation)
        if utilisation > 1:
            raise ValueError(f"utilisation must be in (0, 1]; got {utilisation}")
        free = utilisation * self.capacity_bytes(capacity) - self.weight_bytes
        return max(0, math.floor(free / self.kv_bytes_per_seq))


@enters(precision=Precision, model=ModelConfig, accelerator=Accelerator)
def headroom_fit(model, accelerator, batch: int, seq_len: int, precision: Precision = BF16,
                 tp: int = 1) -> HeadroomFit:
    """Weights/tp + KV cache/tp of `batch` sequences of `seq_len` tokens on one device, with the
    accelerator's datasheet and reported capacities. Assumes TP splits weights and KV heads evenly."""
    positive_int("batch", batch)
    positive_int("seq_len", seq_len)
    m, a = model, accelerator
    return HeadroomFit(
        model=m.name, accelerator=a.name, batch=int(batch), seq_len=int(seq_len), tp=int(tp),
        weight_bytes=float(weight_bytes(m, precision, tp)),
        kv_bytes=float(kv_cache_bytes(m, seq_len, batch, precision, tp)),
        kv_bytes_per_seq=float(kv_cache_bytes(m, seq_len, 1, precision, tp)),
        datasheet_bytes=float(a.memory_bytes), reported_bytes=a.reported_memory_bytes)

"""How many bytes a deployment may use on each device: one definition, three named parts.

    usable = fraction × capacity                               (engine keeps a fraction of the total)
    usable = weights + fraction × (capacity − weights)         (engine keeps a fraction of what is free)

`capacity` is the accelerator's datasheet figure (`memory_bytes`, 80e9 on an H100 SXM, the book's) or
what the card reports (`reported_memory_bytes`, 81,559 MiB = 85.52e9 bytes); `fraction` and what it is
a fraction of are an engine's defaults (data/engines.toml: vLLM 0.9 of the total, TensorRT-LLM 0.9 of
the free memory, the book's arithmetic 1.0). What is left over, capacity − usable, is what the engine
leaves for the CUDA context, NCCL, the allocator and (for "total") the activations.

The library's default is `SERVING`: vLLM's 0.9 of the datasheet capacity (72 GB on an H100). It is the
KV pool the simulator has always sized, it exists for every accelerator (the reported capacity is
recorded for only some), and it is conservative: vLLM on a real H100 keeps 0.9 × 85.52 = 77.0 GB.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from inferlab.base.input_checks import choice, positive_float
from inferlab.base.units import GB
from inferlab.core.specs import Accelerator, _load

CAPACITIES = ("datasheet", "reported")
OF = ("total", "free")


@functools.cache
def engines() -> dict:
    """{name: table} of data/engines.toml."""
    return dict(_load("engines"))


@dataclass(frozen=True)
class MemoryConvention:
    """Which capacity, and which engine's fraction of it (`utilization` overrides the engine's default,
    as vLLM's --gpu-memory-utilization does)."""

    engine: str = "vllm"
    capacity: str = "datasheet"
    utilization: float | None = None

    def __post_init__(self):
        choice("engine", self.engine, engines())
        choice("capacity", self.capacity, CAPACITIES)
        if self.utilization is not None:
            positive_float("utilization", self.utilization, maximum=1.0, minimum=1e-9)

    @property
    def fraction(self) -> float:
        return float(self.engine_table["fraction"] if self.utilization is None else self.utilization)

    @property
    def of(self) -> str:
        return self.engine_table["of"]

    @property
    def engine_table(self) -> dict:
        return engines()[self.engine]

    def capacity_bytes(self, accelerator: Accelerator) -> float:
        if self.capacity == "reported":
            if accelerator.reported_memory_bytes is None:
                raise ValueError(f"capacity='reported': {accelerator.name} has no reported_memory_bytes in "
                                 "data/accelerators.toml; allowed: capacity='datasheet'")
            return float(accelerator.reported_memory_bytes)
        return float(accelerator.memory_bytes)

    def usable_bytes(self, accelerator: Accelerator, weight_bytes: float = 0.0) -> float:
        """fraction × capacity ("total"), or weights + fraction × (capacity − weights) ("free")."""
        capacity = self.capacity_bytes(accelerator)
        if self.of == "free":
            return weight_bytes + self.fraction * max(capacity - weight_bytes, 0.0)
        return capacity * self.fraction

    def describe(self, accelerator: Accelerator, weight_bytes: float = 0.0) -> str:
        """'0.9 × 80 GB = 72.0 GB (vLLM's gpu_memory_utilization of the datasheet capacity)'."""
        capacity, usable = self.capacity_bytes(accelerator), self.usable_bytes(accelerator, weight_bytes)
        which = "datasheet capacity" if self.capacity == "datasheet" else "capacity the card reports"
        if self.engine == "book" and self.utilization is None:
            return f"all {capacity / GB:.1f} GB of the {which} (the chapter's arithmetic)"
        name = self.engine_table["description"]
        option = self.engine_table["option"] or "fraction"
        if self.of == "free":
            return (f"{usable / GB:.1f} GB: the weights plus {self.fraction:g} of the {(capacity - weight_bytes) / GB:.1f} GB "
                    f"left of the {capacity / GB:.1f} GB {which} ({name}'s {option})")
        return f"{self.fraction:g} × {capacity / GB:.1f} GB = {usable / GB:.1f} GB ({name}'s {option} of the {which})"


BOOK = MemoryConvention("book")
SERVING = MemoryConvention("vllm", "datasheet")          # the library's default for a server
VLLM_ON_CARD = MemoryConvention("vllm", "reported")      # what vLLM keeps on the card itself


def usable_bytes(accelerator: Accelerator, convention: MemoryConvention = SERVING, weight_bytes: float = 0.0) -> float:
    """Bytes per device the deployment may fill with weights, activations and KV cache."""
    return convention.usable_bytes(accelerator, weight_bytes)


def max_batch_usable(model, accelerator: Accelerator, seq_len: int, precision, tp: int = 1,
                     convention: MemoryConvention = SERVING, **yard) -> int:
    """floor((usable − weights) / KV per sequence), per device, at least 0."""
    from inferlab.core.memory import kv_cache_bytes, weight_bytes
    w = float(weight_bytes(model, precision, tp))
    free = convention.usable_bytes(accelerator, w) - w
    per_seq = float(kv_cache_bytes(model, seq_len, 1, precision, tp, **yard))
    return max(0, int(free // per_seq))

"""A deployment: the hardware and settings a model is served on, as one frozen value.

    accelerator          the device (Accelerator: peak FLOP/s per dtype, HBM bandwidth, interconnect)
    precision            the bytes of weights, KV cache and compute (Precision; default bf16 throughout)
    tp                   tensor-parallel devices per replica (parallel.py)
    mfu, mbu             the shares of peak FLOP/s and of HBM bandwidth reached, in (0, 1]
    overlap              how compute and memory time combine (roofline.OVERLAP_MODES)
    allreduce            whether the TP all-reduces are counted at all
    allreduce_latency_s  the start-up latency of one all-reduce (0: the book's idealisation)

The core's time functions take one (`latency.prefill_time_s(model, deployment, prompt_len)`); an
`Accelerator` in its place means `Deployment(accelerator)` with every default, so the short call
`latency.prefill_time_s(MODEL, GPU, 2048)` stays short.
"""
from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass

import numpy as np

from inferlab.parallel import DEFAULT_ALLREDUCE_LATENCY_S
from inferlab.roofline import OVERLAP_MODES
from inferlab.specs import BF16, Accelerator, Precision
from inferlab.input_checks import choice, fraction, positive_float, positive_int


@dataclass(frozen=True)
class Deployment:
    """Where and how a model runs (module doc). Validated on construction: a wrong value raises with
    the field's name and its allowed range."""

    accelerator: Accelerator
    precision: Precision = BF16
    tp: int = 1
    mfu: float = 1.0
    mbu: float = 1.0
    overlap: str = "per_operator"
    allreduce: bool = True
    allreduce_latency_s: float = DEFAULT_ALLREDUCE_LATENCY_S

    def __post_init__(self):
        for name, cls, how in (("accelerator", Accelerator, "resolve names with inferlab.specs.get_accelerator"),
                               ("precision", Precision, "build one with inferlab.specs.Precision(weights=..., kv=...)")):
            value = getattr(self, name)
            if not isinstance(value, cls):
                raise TypeError(f"deployment.Deployment({name}=...): expected {cls.__name__}, got {type(value).__name__} "
                                f"{_short(value)}; {how}")
        object.__setattr__(self, "tp", int(positive_int("tp", self.tp, maximum=1 << 16)))
        fraction("mfu", self.mfu)
        fraction("mbu", self.mbu)
        if isinstance(self.overlap, (bool, np.bool_)) or not isinstance(self.overlap, str):
            raise ValueError(f"overlap must be one of {', '.join(repr(m) for m in OVERLAP_MODES)}; "
                             f"got {self.overlap!r}")
        choice("overlap", self.overlap, OVERLAP_MODES)
        if not isinstance(self.allreduce, (bool, np.bool_)):
            raise ValueError(f"allreduce must be True or False; got {self.allreduce!r}")
        positive_float("allreduce_latency_s", self.allreduce_latency_s, allow_zero=True)

    def with_(self, **changes) -> "Deployment":
        """A copy with `changes` applied (validated again)."""
        return dataclasses.replace(self, **changes)


def as_deployment(deployment, precision: Precision | None = None, param: str = "deployment") -> Deployment:
    """`deployment` itself when it is a Deployment (then `precision` must be None: it already holds
    one); an Accelerator becomes Deployment(accelerator, precision or BF16). Anything else: a
    TypeError naming the calling core function, the parameter and what to pass."""
    caller = sys._getframe(1)  # the core function that was handed the value
    where = f"{caller.f_globals.get('__name__', '?').removeprefix('inferlab.')}.{caller.f_code.co_qualname}"
    if precision is not None and not isinstance(precision, Precision):
        raise TypeError(f"{where}(precision=...): expected Precision, got {type(precision).__name__} "
                        f"{_short(precision)}; build one with inferlab.specs.Precision(weights=..., kv=...)")
    if isinstance(deployment, Deployment):
        if precision is not None:
            raise ValueError(f"precision: give it inside the Deployment "
                             f"(deployment.with_(precision=...)), not beside it; got {precision!r}")
        return deployment
    if isinstance(deployment, Accelerator):
        return Deployment(deployment, BF16 if precision is None else precision)
    raise TypeError(f"{where}({param}=...): expected Deployment or Accelerator, "
                    f"got {type(deployment).__name__} {_short(deployment)}; resolve names with "
                    f"inferlab.specs.get_accelerator")


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


__all__ = ["Deployment", "as_deployment"]

"""A deployment: the hardware and settings a model is served on, as one frozen value.

    accelerator          the device (Accelerator: peak FLOP/s per dtype, HBM bandwidth, interconnect)
    precision            the bytes of weights, KV cache and compute (Precision; default bf16 throughout)
    tp                   tensor-parallel devices per replica (parallel.py)
    mfu, mbu             the shares of peak FLOP/s and of HBM bandwidth reached, in (0, 1]
    overlap              how compute and memory time combine (roofline.OVERLAP_MODES)
    allreduce            whether the TP all-reduces are counted at all
    allreduce_latency_s  the start-up latency of one all-reduce: None, the accelerator's (its node's measured
                         one where published, else parallel.DEFAULT_ALLREDUCE_LATENCY_S); 0: the book's idealisation
    efficiency           how fast each kernel runs (efficiency.py): None is Roofline(mfu, mbu), the
                         ideal roofline or fixed knobs; MeasuredKernels() times the products and small
                         kernels as measured (mfu = mbu = 1, an accelerator with profiles or carried from
                         one; 16-bit, or FP8 weights and activations where FP8 products were measured)
    step_overhead        the CPU time of each engine step (kernels.StepOverhead); None: none counted

The core's time functions take one (`latency.prefill_time_s(model, deployment, prompt_len)`); an
`Accelerator` in its place means `Deployment(accelerator)` with every default, so the short call
`latency.prefill_time_s(MODEL, GPU, 2048)` stays short.
"""
from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass

import numpy as np

from inferlab.core.efficiency import MeasuredKernels, Roofline, check_measured_precision
from inferlab.core.kernels import StepOverhead, allreduce_time_s, check_measured
from inferlab.core.kernels.attention_published import check_published_attention
from inferlab.core.roofline import OVERLAP_MODES
from inferlab.core.specs import BF16, Accelerator, Precision, function_name
from inferlab.base.input_checks import choice, fraction, positive_float, positive_int


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
    allreduce_latency_s: float | None = None
    efficiency: Roofline | MeasuredKernels | None = None
    step_overhead: StepOverhead | None = None

    def __post_init__(self):
        for name, cls, how in (("accelerator", Accelerator, "resolve names with inferlab.core.specs.get_accelerator"),
                               ("precision", Precision, "build one with inferlab.core.specs.Precision(weights=..., kv=...)")):
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
        if self.allreduce_latency_s is not None:
            positive_float("allreduce_latency_s", self.allreduce_latency_s, allow_zero=True)
        self._check_efficiency()
        if self.step_overhead is not None and not isinstance(self.step_overhead, StepOverhead):
            raise ValueError(f"step_overhead must be None or a kernels.StepOverhead (StepOverhead.constant(seconds) "
                             f"or StepOverhead.from_profile()); got {_short(self.step_overhead)}")

    def _check_efficiency(self) -> None:
        eff = self.efficiency
        if isinstance(eff, Roofline):
            # One place for the knobs: a Roofline given here becomes the mfu and mbu fields.
            if (self.mfu, self.mbu) not in ((1.0, 1.0), (eff.mfu, eff.mbu)):
                raise ValueError(f"efficiency={eff!r} and mfu={self.mfu}, mbu={self.mbu} disagree; give the "
                                 f"knobs once (mfu and mbu, or efficiency=Roofline(mfu, mbu))")
            object.__setattr__(self, "mfu", float(eff.mfu))
            object.__setattr__(self, "mbu", float(eff.mbu))
            object.__setattr__(self, "efficiency", None)
        elif isinstance(eff, MeasuredKernels):
            if (self.mfu, self.mbu) != (1.0, 1.0):
                raise ValueError(f"efficiency=MeasuredKernels() times kernels as measured; mfu and mbu (the "
                                 f"roofline's knobs) must be 1; got mfu={self.mfu}, mbu={self.mbu}")
            try:
                check_measured(self.accelerator)
            except ValueError as err:
                raise ValueError(f"efficiency=MeasuredKernels(): {err}") from None
            try:
                check_measured_precision(self.precision, self.accelerator)
                if self.efficiency.attention == "published":
                    check_published_attention(self.accelerator, self.precision.compute_dtype)
            except ValueError as err:
                raise ValueError(f"efficiency=MeasuredKernels(): {err}") from None
            if self.overlap != "per_operator":
                raise ValueError(f"efficiency=MeasuredKernels() runs the measured kernels back to back; overlap "
                                 f"must be 'per_operator'; got {self.overlap!r}")
            if self.allreduce and self.tp > 1:
                try:  # a GPU count the collective profiles lack: refused now, not at the first time asked
                    allreduce_time_s(self.accelerator, 1.0, self.tp, node="nvswitch")
                except ValueError as err:
                    raise ValueError(f"efficiency=MeasuredKernels() with tp={self.tp}: {err}") from None
            if self.allreduce_latency_s is not None:
                raise ValueError(f"efficiency=MeasuredKernels() times each all-reduce as measured (its latency "
                                 f"included); leave allreduce_latency_s at its default; got {self.allreduce_latency_s}")
        elif eff is not None:
            raise ValueError(f"efficiency must be None (the roofline at mfu, mbu), efficiency.Roofline(mfu, mbu) "
                             f"or efficiency.MeasuredKernels(); got {_short(eff)}")

    @property
    def efficiency_model(self) -> Roofline | MeasuredKernels:
        """The efficiency object every time goes through: `efficiency`, or Roofline(mfu, mbu) when None."""
        return Roofline(self.mfu, self.mbu) if self.efficiency is None else self.efficiency

    def describe(self) -> str:
        """One line: which efficiency and which step overhead the times use."""
        overhead = self.step_overhead.label if self.step_overhead is not None else "none"
        return (f"efficiency: {self.efficiency_model.label_on(self.accelerator, self.precision)}; "
                f"step overhead: {overhead}")

    def with_(self, **changes) -> "Deployment":
        """A copy with `changes` applied (validated again)."""
        return dataclasses.replace(self, **changes)


def as_deployment(deployment, precision: Precision | None = None, param: str = "deployment") -> Deployment:
    """`deployment` itself when it is a Deployment (then `precision` must be None: it already holds
    one); an Accelerator becomes Deployment(accelerator, precision or BF16). Anything else: a
    TypeError naming the calling core function, the parameter and what to pass."""
    caller = sys._getframe(1)  # the core function that was handed the value
    where = function_name(caller)
    if precision is not None and not isinstance(precision, Precision):
        raise TypeError(f"{where}(precision=...): expected Precision, got {type(precision).__name__} "
                        f"{_short(precision)}; build one with inferlab.core.specs.Precision(weights=..., kv=...)")
    if isinstance(deployment, Deployment):
        if precision is not None:
            raise ValueError(f"precision: give it inside the Deployment "
                             f"(deployment.with_(precision=...)), not beside it; got {precision!r}")
        return deployment
    if isinstance(deployment, Accelerator):
        return Deployment(deployment, BF16 if precision is None else precision)
    raise TypeError(f"{where}({param}=...): expected Deployment or Accelerator, "
                    f"got {type(deployment).__name__} {_short(deployment)}; resolve names with "
                    f"inferlab.core.specs.get_accelerator")


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


__all__ = ["Deployment", "as_deployment"]

"""The roofline model (Williams, Waterman & Patterson 2009) and the time it predicts.

attainable FLOP/s = min(peak, intensity * bandwidth); ridge point = peak / bandwidth.
An efficiency below 1 (MFU for compute, MBU for memory) scales the ceiling it applies to.
"""
from __future__ import annotations

import numpy as np

from inferlab.core.costs import ForwardCosts, decode_costs, group_costs
from inferlab.core.boundary import enters
from inferlab.core.specs import BF16, Accelerator, ModelConfig, Precision
from inferlab.base.input_checks import choice, finite_result, fraction, positive_float, positive_int

OVERLAP_MODES = ("per_operator", "whole_model", "none")


@enters(accelerator=Accelerator)
def ridge_point(accelerator: Accelerator, dtype: str = "bf16") -> float:
    """FLOPs per byte at which compute and memory time are equal: peak / bandwidth."""
    acc = accelerator
    return acc.peak(dtype) / acc.hbm_bytes_per_s


@enters(accelerator=Accelerator)
def memory_time_s(bytes_moved, accelerator):
    """Time to move `bytes_moved` at the accelerator's HBM bandwidth: bytes / bandwidth (e.g. the
    weight-read floor of a decode step, M / BW)."""
    acc = accelerator
    positive_float("bytes_moved", bytes_moved, allow_zero=True)
    out = np.asarray(bytes_moved, dtype=float) / acc.hbm_bytes_per_s
    return out if out.ndim else float(out)


@enters(model=ModelConfig, accelerator=Accelerator, precision=Precision)
def mlp_ridge_batch(model, accelerator, precision: Precision = BF16, context_len=1024,
                    max_batch_searched: int = 1 << 16):
    """Smallest decode batch at which the MLP's intensity (`costs.group_costs`, the MLP group of one
    layer) reaches the ridge point; None if none up to max_batch_searched. The MLP's intensity is ~B,
    so this is ~ the ridge point."""
    positive_int("context_len", context_len)
    positive_int("max_batch_searched", max_batch_searched)
    ridge = ridge_point(accelerator, precision.compute_dtype)
    b = np.arange(1, max_batch_searched + 1)
    flops, nbytes = group_costs(decode_costs(model, b, context_len, precision))["MLP"]
    hit = np.nonzero(np.asarray(flops / nbytes) >= ridge)[0]
    return int(b[hit[0]]) if hit.size else None


@enters(accelerator=Accelerator)
def attainable_flops_per_s(intensity, accelerator, dtype: str = "bf16", mfu: float = 1.0,
                           mbu: float = 1.0):
    """min(mfu * peak, intensity * mbu * bandwidth), elementwise over `intensity`."""
    acc = accelerator
    positive_float("intensity", intensity, allow_zero=True)
    fraction("mfu", mfu)
    fraction("mbu", mbu)
    with np.errstate(over="ignore"):  # an overflow to inf is reported below, by name
        out = np.minimum(mfu * acc.peak(dtype), np.asarray(intensity, dtype=float) * mbu * acc.hbm_bytes_per_s)
    return out


@enters(accelerator=Accelerator)
def bound(intensity, accelerator, dtype: str = "bf16"):
    """'compute' where intensity >= ridge point, else 'memory' (a str, or an array of them)."""
    positive_float("intensity", intensity, allow_zero=True)
    out = np.where(np.asarray(intensity) >= ridge_point(accelerator, dtype), "compute", "memory")
    return str(out) if out.ndim == 0 else out


def _check_overlap(overlap) -> str:
    if isinstance(overlap, (bool, np.bool_)):
        raise ValueError(f"overlap must be one of {', '.join(repr(m) for m in OVERLAP_MODES)}; got {overlap!r} "
                         "(True is 'per_operator', False is 'none')")
    return choice("overlap", overlap, OVERLAP_MODES)


@enters(accelerator=Accelerator)
def roofline_time_s(flops, bytes_moved, accelerator, dtype: str = "bf16", mfu: float = 1.0,
                    mbu: float = 1.0, overlap: str = "per_operator"):
    """Time of one kernel (or of a whole pass treated as one): compute = flops / (mfu * peak),
    memory = bytes / (mbu * bandwidth). overlap, the same vocabulary as pass_time_s:
    'per_operator' or 'whole_model': max(compute, memory), transfers hidden under compute;
    'none': compute + memory, the upper bound of no overlap."""
    acc = accelerator
    positive_float("flops", flops, allow_zero=True)
    positive_float("bytes_moved", bytes_moved, allow_zero=True)
    fraction("mfu", mfu)
    fraction("mbu", mbu)
    overlap = _check_overlap(overlap)
    compute_s = np.asarray(flops, dtype=float) / (mfu * acc.peak(dtype))
    memory_s = np.asarray(bytes_moved, dtype=float) / (mbu * acc.hbm_bytes_per_s)
    out = compute_s + memory_s if overlap == "none" else np.maximum(compute_s, memory_s)
    finite_result("roofline_time_s", out, flops=flops, bytes_moved=bytes_moved)
    return out if out.ndim else float(out)


def _check_costs(costs) -> ForwardCosts:
    if not isinstance(costs, ForwardCosts):
        raise ValueError(f"costs must be a ForwardCosts (from forward_costs, prefill_costs or "
                         f"decode_costs); got {costs!r}")
    return costs


@enters(accelerator=Accelerator)
def pass_time_s(costs: ForwardCosts, accelerator, dtype: str = "bf16", mfu: float = 1.0,
                mbu: float = 1.0, overlap: str = "per_operator"):
    """Time of a forward pass under the roofline.
    per_operator: each kernel takes max(compute, memory), kernels run back to back (default);
    whole_model: max(total compute, total memory), the optimistic bound of perfect overlap;
    none: total compute + total memory, the pessimistic bound of no overlap at all."""
    _check_costs(costs)
    _check_overlap(overlap)
    if overlap == "per_operator":
        times = [roofline_time_s(c.flops, c.bytes, accelerator, dtype, mfu, mbu)
                 for c in costs.operators().values()]
        return sum(times)
    total = costs.total
    return roofline_time_s(total.flops, total.bytes, accelerator, dtype, mfu, mbu, overlap=overlap)


@enters(accelerator=Accelerator)
def operator_regimes(costs: ForwardCosts, accelerator, dtype: str = "bf16") -> dict:
    """{operator: 'compute' | 'memory'} for every operator of a pass (FLOP-free ops: 'memory')."""
    _check_costs(costs)
    return {name: bound(c.intensity, accelerator, dtype) for name, c in costs.operators().items()}


@enters(accelerator=Accelerator)
def time_weighted_regime(costs: ForwardCosts, accelerator, dtype: str = "bf16") -> str:
    """The regime of the whole pass: 'compute' if compute-bound kernels take most of its roofline time."""
    _check_costs(costs)
    acc = accelerator
    compute_s = memory_s = 0.0
    for c in costs.operators().values():
        t = roofline_time_s(c.flops, c.bytes, acc, dtype)
        is_compute = np.asarray(c.flops / acc.peak(dtype)) >= np.asarray(c.bytes / acc.hbm_bytes_per_s)
        compute_s = compute_s + np.where(is_compute, t, 0.0)
        memory_s = memory_s + np.where(is_compute, 0.0, t)
    out = np.where(compute_s >= memory_s, "compute", "memory")
    return str(out) if out.ndim == 0 else out

"""Time of one FP8 (W8A8) linear product on a Hopper GPU, fitted on DeepGEMM's published H800 SXM5
timings (`data/deepgemm/fp8_gemm.csv`, MIT): e4m3 weights and activations with fine-grained scales,
BF16 output, dense and grouped (mixture-of-experts) products.

The curve is the 16-bit one (`kernels.linear`, module doc) at the FP8 peak, with 1-byte weights and
inputs and a 2-byte output: t_m = (k n + T k + 2 T n) / (e_m BW), and without the wave padding
(w = 0): DeepGEMM picks its block size per shape to fill the SMs (its README), so the 128 x 128 wave
count of the 16-bit kernels does not apply (fitted free, w moved between 0.0 and 0.3 from one left-out
shape to the next and the held-out median error rose from 9 % to 14 %). Its four numbers (e_c, e_m, t0,
p) are fitted in log space on the published rows, dense and grouped together (a grouped row is one
launch over every group's tiles). An H800 SXM5 has an H100 SXM5's SMs, clocks, HBM and dense peaks, so the fit is the
H100 SXM's; the H200 takes it by the transfer of `kernels.measured`.
Assumptions: DeepSeek-V3's shapes (K 512-16384, N 2112-32768, M 64-4096 per group) stand for the
shapes of other models; the scale factors' reads (one per 128 x 128 weight block and 1 x 128 input
tile) are left out of the bytes (under 1 % of them); quantising the activations to FP8 is fused into
the kernel before (as in DeepGEMM's own use), not timed.
"""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

from inferlab.core.kernels.fit import fit_log
from inferlab.core.kernels.linear import LinearFit, _curve
from inferlab.core.kernels.measured import TRANSFERS, check_measured, source_accelerator
from inferlab.core.kernels.profiles import fp8_rows
from inferlab.core.specs import Accelerator

FP8_BYTES = (1.0, 1.0, 2.0)  # weight, input, output (BF16) bytes per element
# The accelerators the published FP8 table stands for directly (the H800 SXM5's twin in SMs, clocks,
# HBM and peaks); others with FP8 kernels are carried from it (kernels.measured.TRANSFERS: the H200).
FP8_MEASURED = ("h100-sxm",)


def shape_of(k, n) -> str:
    """The name of a weight shape, 'K x N', as the leave-one-shape-out table writes it."""
    return f"{int(k)} x {int(n)}"


@functools.cache
def fp8_fit(accelerator: Accelerator, exclude_shape: str | None = None) -> LinearFit:
    """The FP8 curve (module doc) for `accelerator` (h100-sxm, or a part carried from it), fitted on every
    published row but those of weight shape `exclude_shape` ('K x N', for a leave-one-shape-out check)."""
    acc = check_fp8(accelerator)
    if acc.name in TRANSFERS:
        return dataclasses.replace(fp8_fit(source_accelerator(acc), exclude_shape), accelerator=acc)
    rows = fp8_rows()
    shapes = np.array([shape_of(k, n) for k, n in zip(rows.k, rows.n)])
    keep = shapes != exclude_shape
    g, t, k, n, meas = rows.groups[keep], rows.rows_per_group[keep], rows.k[keep], rows.n[keep], rows.time_s[keep]

    def predict(theta):
        e_c, e_m, launch_s, p_minus_1 = theta
        return _curve(t, k, n, acc, e_c, e_m, launch_s, 1.0 + p_minus_1, 0.0, g, "fp8", FP8_BYTES)

    with np.errstate(over="ignore"):  # a trial step may overflow; the fit rejects it
        theta = np.exp(fit_log(predict, np.log([0.7, 0.8, 5e-6, 2.0]), meas))
    return LinearFit(acc, float(theta[0]), float(theta[1]), float(theta[2]), 1.0 + float(theta[3]),
                     0.0, tuple(sorted(set(shapes[keep].tolist()))), "fp8", FP8_BYTES)


def check_fp8(accelerator, param: str = "accelerator") -> Accelerator:
    """`accelerator` if FP8 kernel times exist for it (FP8_MEASURED, or carried from one), else one line."""
    acc = check_measured(accelerator, param)
    if acc.name not in FP8_MEASURED and TRANSFERS.get(acc.name) not in FP8_MEASURED:
        have = ", ".join(FP8_MEASURED + tuple(a for a, s in TRANSFERS.items() if s in FP8_MEASURED))
        raise ValueError(f"{param}: no FP8 kernel times for {acc.name!r} (DeepGEMM's published FP8 products were "
                         f"timed on an H800, a Hopper part); FP8 measured kernels exist for {have}")
    return acc

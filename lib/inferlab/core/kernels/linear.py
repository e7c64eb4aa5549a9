"""Time of one linear product (T x k) @ (k x n) on a real accelerator, fitted on Vidur's published
16-bit kernel profiles (`data/vidur/compute.csv`); FP8 products on DeepGEMM's (`kernels.fp8`).

    t = t0 + (t_c^p + t_m^p)^(1/p)
    t_c = 2 k [T n + w (W - T n)] / (e_c * peak),   W = waves * SMs * 128 * 128,
          waves = ceil(ceil(T / 128) * ceil(n / 128) / SMs)
    t_m = (b_w k n + T (b_a k + b_o n)) / (e_m * BW)      (16-bit: b_w = b_a = b_o = 2)

A grouped product (a mixture of experts' routed experts in one kernel: G groups of m rows, each with
its own k x n weight) is the same curve with one launch, the tiles of every group in the wave count
(G ceil(m / 128) ceil(n / 128)), G m n useful outputs and G weights read.

The roofline's two times (compute, and weights plus activations read and written once) with a
fitted compute efficiency e_c and bandwidth efficiency e_m, joined smoothly by the exponent p
(p -> infinity is the roofline's max; a small p is the dip near the ridge point, where neither
unit runs flat out), plus a launch floor t0 that a tiny product never beats. The compute term
counts a share w of the work a GPU does when the output is cut into 128 x 128 tiles spread over its
SMs in whole waves (a last wave half full costs a full one). Five numbers per accelerator, fitted
in log space on every profiled product (four operators, three models, four tensor-parallel shards,
1-4096 tokens); peak, BW and the SM count are the accelerator's datasheet values. With the smooth
join the two times partly add, so e_m is a fitted constant, not an MBU: it may exceed 1.
Assumptions: 16-bit weights and activations (fp16 and bf16 run at one peak); one kernel per
product (cuBLAS's choice of tile is not modelled, so a single shape can sit 20-40 % off the
curve); beyond 4096 tokens the curve extrapolates along its compute-bound asymptote.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import numpy as np

from inferlab.base.input_checks import finite_result, positive_int
from inferlab.core.kernels.fit import fit_log
from inferlab.core.kernels.measured import SM_COUNT, TRANSFERS, check_measured, source_accelerator
from inferlab.core.kernels.profiles import linear_rows
from inferlab.core.specs import Accelerator

BYTES_16BIT = 2
TILE = 128  # output tile edge of the wave count (module doc)


@dataclass(frozen=True)
class LinearFit:
    """The fitted linear-kernel model of one accelerator (module doc), and the models it was fitted on."""

    accelerator: Accelerator
    compute_efficiency: float
    bandwidth_efficiency: float
    launch_s: float
    sharpness: float
    wave_share: float
    fitted_on: tuple
    # The operands' format: the peak the compute term runs at and the bytes (weight, input, output) per element.
    peak_dtype: str = "fp16"
    element_bytes: tuple = (BYTES_16BIT, BYTES_16BIT, BYTES_16BIT)

    def time_s(self, tokens, k, n):
        """Seconds of one product; tokens == 0 gives 0 (an operator that does not run)."""
        return self.grouped_time_s(1.0, tokens, k, n)

    def grouped_time_s(self, groups, rows_per_group, k, n):
        """Seconds of one grouped product: `groups` weights of k x n, each over `rows_per_group` rows, in one
        kernel (module doc); groups = 1 is time_s. rows_per_group == 0 gives 0."""
        t = np.asarray(rows_per_group, dtype=float)
        return _curve(t, np.asarray(k, dtype=float), np.asarray(n, dtype=float), self.accelerator,
                      self.compute_efficiency, self.bandwidth_efficiency, self.launch_s, self.sharpness,
                      self.wave_share, np.asarray(groups, dtype=float), self.peak_dtype, self.element_bytes)


def _curve(t, k, n, acc: Accelerator, e_c, e_m, launch_s, p, wave_share, groups=1.0, peak_dtype="fp16",
           element_bytes=(BYTES_16BIT, BYTES_16BIT, BYTES_16BIT)):
    """t0 + (C^p + M^p)^(1/p): compute C = 2 k (useful + w (padded - useful)) / (e_c peak) over whole waves
    of TILE x TILE tiles, memory M = groups (b_w k n + t (b_a k + b_o n)) / (e_m BW), joined by a p-norm.
    Reason: the fit's five numbers (e_c, e_m, t0, p, w) are positional so the least-squares fit and the
    curve read them in one order; the shape and formats beside them are the product being timed."""
    sms = SM_COUNT[acc.name]
    b_w, b_a, b_o = element_bytes
    tiles = groups * np.ceil(t / TILE) * np.ceil(n / TILE)
    padded = np.ceil(tiles / sms) * sms * TILE * TILE  # output elements computed, whole waves
    useful = groups * t * n
    with np.errstate(divide="ignore", invalid="ignore"):
        compute_s = 2.0 * k * (useful + wave_share * (padded - useful)) / (e_c * acc.peak(peak_dtype))
        memory_s = groups * (b_w * k * n + t * (b_a * k + b_o * n)) / (e_m * acc.hbm_bytes_per_s)
        # Scaled by the larger term, so the p-norm neither overflows nor underflows.
        big = np.maximum(compute_s, memory_s)
        joined = big * ((compute_s / big) ** p + (memory_s / big) ** p) ** (1.0 / p)
    return np.where(t > 0, launch_s + joined, 0.0)


@functools.cache
def linear_fit(accelerator: Accelerator, exclude_model: str | None = None) -> LinearFit:
    """Fit the module doc's five numbers on `accelerator`'s profiled products (without
    `exclude_model`'s rows, for a leave-one-model-out check)."""
    acc = check_measured(accelerator)
    if acc.name in TRANSFERS:  # the profiled part's fit, evaluated at this part's peak and bandwidth (kernels.measured)
        return dataclasses.replace(linear_fit(source_accelerator(acc), exclude_model), accelerator=acc)
    rows = linear_rows(acc.name)
    keep = rows.model != exclude_model
    t, k, n, meas = rows.tokens[keep], rows.k[keep], rows.n[keep], rows.time_s[keep]

    def predict(theta):
        e_c, e_m, launch_s, p_minus_1, wave_share = theta
        return _curve(t, k, n, acc, e_c, e_m, launch_s, 1.0 + p_minus_1, wave_share)

    with np.errstate(over="ignore"):  # a trial step may overflow; the fit rejects it
        theta = np.exp(fit_log(predict, np.log([0.7, 0.8, 5e-6, 2.0, 0.5]), meas))
    return LinearFit(acc, float(theta[0]), float(theta[1]), float(theta[2]), 1.0 + float(theta[3]),
                     float(theta[4]), tuple(sorted(set(rows.model[keep].tolist()))))


def linear_times_s(accelerator, tokens, k, n):
    """linear_time_s where `tokens` may be 0 (0 seconds: an operator that does not run this pass);
    for the library's own pass models. Arrays broadcast."""
    acc = check_measured(accelerator)
    positive_int("k", k)
    positive_int("n", n)
    positive_int("tokens", tokens, minimum=0)
    out = linear_fit(acc).time_s(tokens, k, n)
    finite_result("linear_time_s", out, tokens=tokens, k=k, n=n)
    return out if np.ndim(out) else float(out)


def linear_time_s(accelerator, tokens, k, n):
    """Seconds for one (tokens x k) @ (k x n) product in 16-bit on `accelerator` (an Accelerator with
    profiles: kernels.MEASURED_ACCELERATORS), from the fitted curve of the module doc."""
    positive_int("tokens", tokens)
    return linear_times_s(accelerator, tokens, k, n)

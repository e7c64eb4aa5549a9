"""Time of one 16-bit linear product (T x k) @ (k x n) on a real accelerator, fitted on Vidur's
published kernel profiles (`data/vidur/compute.csv`).

    t = t0 + (t_c^p + t_m^p)^(1/p)
    t_c = 2 k [T n + w (W - T n)] / (e_c * peak),   W = waves * SMs * 128 * 128,
          waves = ceil(ceil(T / 128) * ceil(n / 128) / SMs)
    t_m = 2 (k n + T (k + n)) / (e_m * BW)

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

import functools
from dataclasses import dataclass

import numpy as np

from inferlab.base.input_checks import finite_result, positive_int
from inferlab.core.kernels.fit import fit_log
from inferlab.core.kernels.measured import SM_COUNT, check_measured
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

    def time_s(self, tokens, k, n):
        """Seconds of one product; tokens == 0 gives 0 (an operator that does not run)."""
        t = np.asarray(tokens, dtype=float)
        return _curve(t, np.asarray(k, dtype=float), np.asarray(n, dtype=float), self.accelerator,
                      self.compute_efficiency, self.bandwidth_efficiency, self.launch_s, self.sharpness,
                      self.wave_share)


def _curve(t, k, n, acc: Accelerator, e_c, e_m, launch_s, p, wave_share):
    sms = SM_COUNT[acc.name]
    tiles = np.ceil(t / TILE) * np.ceil(n / TILE)
    padded = np.ceil(tiles / sms) * sms * TILE * TILE  # output elements computed, whole waves
    with np.errstate(divide="ignore", invalid="ignore"):
        compute_s = 2.0 * k * (t * n + wave_share * (padded - t * n)) / (e_c * acc.peak("fp16"))
        memory_s = BYTES_16BIT * (k * n + t * (k + n)) / (e_m * acc.hbm_bytes_per_s)
        # Scaled by the larger term, so the p-norm neither overflows nor underflows.
        big = np.maximum(compute_s, memory_s)
        joined = big * ((compute_s / big) ** p + (memory_s / big) ** p) ** (1.0 / p)
    return np.where(t > 0, launch_s + joined, 0.0)


@functools.cache
def linear_fit(accelerator: Accelerator, exclude_model: str | None = None) -> LinearFit:
    """Fit the module doc's five numbers on `accelerator`'s profiled products (without
    `exclude_model`'s rows, for a leave-one-model-out check)."""
    acc = check_measured(accelerator)
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

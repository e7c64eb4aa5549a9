"""Calibrations that bracket each live run: an engine's step time fitted beside every rate, so the
host's drift over a validation cancels instead of landing on the rates timed last.

For n rates the validation runs, in this order (`plan`):

    C0, R0, C1, R1, C2, ..., R(n-1), Cn          n + 1 calibrations, n live runs

Rate k is predicted from the calibrations just before and just after it, C_k and C_(k+1)
(`brackets_of`); consecutive rates share the calibration between them, so bracketing costs one
calibration per rate plus one. C0 alone sets the capacity, hence the rates (they must be fixed
before the first live run).

Combining the two brackets (`mean_fit`): the MEAN OF THE TWO FITS (coefficients and floors
averaged; the prediction of a step is then the mean of the two fits' predictions, except where the
floor binds). Why not one least-squares fit over both brackets' steps pooled: the fit weighs each
step by 1 / its duration (relative error), so pooling pulls the result toward the faster bracket:
brackets timed at speeds 1 and 2 (every step twice as long in the second) pool to 1.2, whereas the
live run between them, under a drift that is linear in time, ran at their mean, 1.5. The mean also
weighs both ends equally when their step counts differ (the calibration's schedule follows the wall
clock, so a slower host takes other steps). Each calibration has enough steps to be fitted alone.

The drift over a validation (`speed`, `drift`): each calibration's speed is the median, over its
steps, of measured / predicted by C0's fit (1.2: its steps took 20 % longer than C0's fit says);
the drift is max / min - 1 over every calibration's speed (C0's own median included), the same
figure as `measure.drift`'s. A live run's speed on the same scale says where it sat between its
brackets.
"""
from __future__ import annotations

import numpy as np

from inferlab.study.fitted import FittedStepTime
from inferlab.base.input_checks import positive_int


def plan(n_rates: int) -> list:
    """The order of a bracketed validation: [("calibrate", 0), ("serve", 0), ("calibrate", 1), ...,
    ("serve", n - 1), ("calibrate", n)]."""
    n = positive_int("n_rates", n_rates)
    out = [("calibrate", 0)]
    for k in range(n):
        out += [("serve", k), ("calibrate", k + 1)]
    return out


def brackets_of(rate_index: int, n_rates: int) -> tuple:
    """(calibration before, calibration after) of rate `rate_index` (0-based) among `n_rates`."""
    n = positive_int("n_rates", n_rates)
    if isinstance(rate_index, bool) or not isinstance(rate_index, (int, np.integer)) or not 0 <= rate_index < n:
        raise ValueError(f"rate_index must be an integer in 0..{n - 1}; got {rate_index!r}")
    return int(rate_index), int(rate_index) + 1


def mean_fit(fits) -> FittedStepTime:
    """The mean of fitted step times (module doc): coefficients and floor_s averaged; fit stats
    {"mean_of": number of fits, "fits": each fit's own stats}."""
    fits = list(fits)
    if not fits or not all(isinstance(f, FittedStepTime) for f in fits):
        raise ValueError(f"fits must be one or more FittedStepTime; got {fits!r}")
    return FittedStepTime(np.mean([f.coefficients for f in fits], axis=0),
                          float(np.mean([f.floor_s for f in fits])),
                          {"mean_of": len(fits), "fits": [f.fit_stats for f in fits]})


def speed(reference: FittedStepTime, steps: list, durations_s) -> float:
    """The host's speed during `steps` on the reference fit's scale: median of measured / predicted
    (2.0: the steps took twice what `reference` predicts)."""
    y = np.asarray(durations_s, dtype=float)
    if len(steps) != len(y) or len(y) == 0:
        raise ValueError(f"steps and durations_s must be as long and not empty; got {len(steps)} and {len(y)}")
    if not np.all(np.isfinite(y)) or np.any(y <= 0):
        raise ValueError("durations_s must be positive finite seconds")
    pred = np.array([reference.step_time_s(s, 0.0) for s in steps])
    if np.any(pred <= 0):
        raise ValueError("the reference fit predicts a step of no time; it cannot set a speed")
    return float(np.median(y / pred))


def drift(speeds) -> float:
    """max / min - 1 over the calibrations' speeds (0.3: the slowest ran 30 % longer than the fastest)."""
    s = np.asarray(list(speeds), dtype=float)
    if s.size == 0 or not np.all(np.isfinite(s)) or np.any(s <= 0):
        raise ValueError(f"speeds must be one or more positive finite numbers; got {speeds!r}")
    return float(s.max() / s.min() - 1.0)

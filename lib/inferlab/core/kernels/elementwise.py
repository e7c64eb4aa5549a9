"""Time of the small kernels the roofline leaves out (norms, rotary, activation, residual add,
embedding lookup), fitted on Vidur's published profiles (`data/vidur/compute.csv`).

    t = (t0^q + (b * T * width)^q)^(1/q)          (per accelerator and kind)

a floor t0 (launch and a minimum of work: flat up to a few hundred tokens in the profiles) joined
smoothly (exponent q) to a per-element cost b, each of these kernels streaming its T x width 16-bit
elements through HBM. Fitted in log space over the three profiled models and four tensor-parallel
shards. `width` is the elements per token the kernel writes:
- norm: d (one RMSNorm; a layer has two);  add: d (one residual add; a layer has two);
- rope: (query heads + KV heads of the shard) x head dim;  act: f of the shard (a gated MLP's SiLU-and-
  multiply reads 2f, writes f: the profiles are all gated);  embedding: d (the lookup, once per pass).
A part carried from a profiled one (`kernels.measured`) keeps t0 and q; b scales by the HBM bandwidths.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import numpy as np

from inferlab.base.input_checks import choice, finite_result, positive_int
from inferlab.core.kernels.fit import fit_affine_relative, fit_log
from inferlab.core.kernels.measured import check_measured, hbm_ratio, profiled_name, source_accelerator
from inferlab.core.kernels.profiles import small_rows

KINDS = ("norm", "rope", "act", "add", "embedding")


@dataclass(frozen=True)
class ElementwiseFit:
    """t = (launch_s^q + (per_element_s * tokens * width)^q)^(1/q) for one kernel kind on one accelerator."""

    accelerator: str
    kind: str
    launch_s: float
    per_element_s: float
    sharpness: float

    def time_s(self, tokens, width):
        t = np.asarray(tokens, dtype=float)
        return np.where(t > 0, _curve(t * np.asarray(width, dtype=float), self.launch_s, self.per_element_s,
                                      self.sharpness), 0.0)


def _curve(elements, launch_s, per_element_s, q):
    work = per_element_s * elements
    big = np.maximum(launch_s, work)
    with np.errstate(divide="ignore", invalid="ignore"):
        return big * ((launch_s / big) ** q + (work / big) ** q) ** (1.0 / q)


@functools.cache
def elementwise_fit(accelerator_name: str, kind: str, exclude_model: str | None = None) -> ElementwiseFit:
    """Fit `kind` on `accelerator_name` (without `exclude_model`'s rows, for a leave-one-model-out check)."""
    rows = small_rows(accelerator_name)
    keep = (rows.kind == kind) & (rows.model != exclude_model)
    elements, measured = rows.tokens[keep] * rows.width[keep], rows.time_s[keep]
    a, b = fit_affine_relative(elements, measured)  # the start: a straight line's floor and slope

    def predict(theta):
        return _curve(elements, theta[0], theta[1], 1.0 + theta[2])

    with np.errstate(over="ignore"):  # a trial step may overflow; the fit rejects it
        theta = np.exp(fit_log(predict, np.log([max(a, 1e-6), max(b, 1e-15), 2.0]), measured))
    return ElementwiseFit(accelerator_name, kind, float(theta[0]), float(theta[1]), 1.0 + float(theta[2]))


def elementwise_time_s(accelerator, kind: str, tokens, width):
    """Seconds of one small kernel of `kind` (kernels.KINDS) over tokens x width 16-bit elements on
    `accelerator` (one with profiles). tokens may be 0 (0 seconds); arrays broadcast."""
    acc = check_measured(accelerator)
    choice("kind", kind, KINDS)
    positive_int("tokens", tokens, minimum=0)
    positive_int("width", width)
    fit = elementwise_fit(profiled_name(acc), kind)
    if profiled_name(acc) != acc.name:  # a part carried from a profiled one: its per-element (HBM) term scaled
        fit = dataclasses.replace(fit, accelerator=acc.name,
                                  per_element_s=fit.per_element_s * hbm_ratio(acc, source_accelerator(acc)))
    out = fit.time_s(tokens, width)
    finite_result("elementwise_time_s", out, tokens=tokens, width=width)
    return out if np.ndim(out) else float(out)

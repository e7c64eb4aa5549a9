"""Time of the small kernels the roofline leaves out (norms, rotary, activation, residual add,
embedding lookup), fitted on Vidur's published profiles (`data/vidur/compute.csv`).

    t = a + b * T * width          (per accelerator and kind)

a launch-and-sync floor plus a per-element cost: each of these kernels streams its T x width 16-bit
elements through HBM. Fitted by relative least squares over the three profiled models and four
tensor-parallel shards. `width` is the elements per token the kernel writes:
- norm: d (one RMSNorm; a layer has two);  add: d (one residual add; a layer has two);
- rope: (query heads + KV heads of the shard) x head dim;  act: f of the shard (a gated MLP's SiLU-and-
  multiply reads 2f, writes f: the profiles are all gated);  embedding: d (the lookup, once per pass).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from inferlab.input_checks import choice, finite_result, positive_int
from inferlab.kernels.fit import fit_affine_relative
from inferlab.kernels.measured import check_measured
from inferlab.kernels.profiles import small_rows

KINDS = ("norm", "rope", "act", "add", "embedding")


@dataclass(frozen=True)
class ElementwiseFit:
    """t = launch_s + per_element_s * tokens * width for one kernel kind on one accelerator."""

    accelerator: str
    kind: str
    launch_s: float
    per_element_s: float

    def time_s(self, tokens, width):
        t = np.asarray(tokens, dtype=float)
        return np.where(t > 0, self.launch_s + self.per_element_s * t * np.asarray(width, dtype=float), 0.0)


@functools.cache
def elementwise_fit(accelerator_name: str, kind: str, exclude_model: str | None = None) -> ElementwiseFit:
    """Fit `kind` on `accelerator_name` (without `exclude_model`'s rows, for a leave-one-model-out check)."""
    rows = small_rows(accelerator_name)
    keep = (rows.kind == kind) & (rows.model != exclude_model)
    a, b = fit_affine_relative(rows.tokens[keep] * rows.width[keep], rows.time_s[keep])
    return ElementwiseFit(accelerator_name, kind, a, b)


def elementwise_time_s(accelerator, kind: str, tokens, width):
    """Seconds of one small kernel of `kind` (kernels.KINDS) over tokens x width 16-bit elements on
    `accelerator` (one with profiles). tokens may be 0 (0 seconds); arrays broadcast."""
    acc = check_measured(accelerator)
    choice("kind", kind, KINDS)
    positive_int("tokens", tokens, minimum=0)
    positive_int("width", width)
    out = elementwise_fit(acc.name, kind).time_s(tokens, width)
    finite_result("elementwise_time_s", out, tokens=tokens, width=width)
    return out if np.ndim(out) else float(out)

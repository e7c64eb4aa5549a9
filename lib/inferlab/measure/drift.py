"""Drift probes: the host's speed, measured in the same rounds as every predicted point.

A shared virtual machine changes speed within a run, even with nothing else running in it: on the
2-vCPU Xeon VM, a decode-like read of 2 GB (42 row-1 linears), timed as 12 consecutive points of
~1.5 s each, moved by 22-75 % (max / min - 1) in four trials; its neighbours share the host's
memory. The calibrated prediction comes from an operator profile timed minutes before a point; a
point timed while the host runs at half speed then reads as a prediction error of 100 %. So each
end-to-end point is timed round-robin with a probe of its dominant operator, the same kernel at the
same shape the profile timed (one point call, one probe call, per round: `probed`; the kernel is
measure.probe.LinearProbe, the profile's own):

    probe        the linear layer with the largest calibrated time in the point's pass (summed over
                 its uses: q, k and v share a shape), at the profiled row count nearest (in log) to
                 the pass's rows; its weight copies rotate as in the profile, so every call reads its
                 weight from DRAM (cpu-0.5b, fp32: 13 copies of the 46 MB 2048 x 5632 weight, 600 MB,
                 read at the DRAM's ~22 GB/s at one row)
    ratio        the probe's median over those rounds / the profile's time of that operator and rows
    corrected    calibrated_s * ratio   (the prediction at the host's speed of the moment), where
                 `correction` says 'applied' (see below)
    drift        max / min - 1 over the run's ratios and 1 (the profile's moment)

Why interleaved, not a probe before and one after: the host moves within the 1.5 s of a point. In
the same four trials, the point's time over its interleaved probe's varied by 12-19 % (max / min
- 1 over 12 points), over the geometric mean of a probe before and one after by 14-46 %.

The first point of a phase. In a quick run traced call by call (every sample of every
point and probe, warm-up included, in order), the 1-row probe of the first ITL point and of the
first batch point read 2.3-8.2 ms (most 3-4.5 ms) for their first 11-13 rounds, then 2.0-2.4 ms (the
profile's 2.2 ms) for the rest, and every later point's probe read 2.0-2.5 ms from its first round.
13 rounds is one rotation of the probe's 13 weight copies: each copy was slow the first time it was
read in the phase and fast from the second time on. The copies were last read in the previous phase,
a minute earlier. The ratio of such a probe (its median, with half its samples in the slow rotation)
was 1.2-4.2, with IQR / median 0.3-1.1, which `probe_trusted` already refuses. What was ruled out,
standalone, on the same VM: the phase's ceiling re-measurement and allocating, filling and freeing 1
GiB just before (the probe's 2.5 s trace after each stayed at 2.1-2.4 ms); compiling the decode step
and alternating compiled steps with the probe (2.1-2.5 ms from the first call: MKL does not run slow
after inductor's kernels); gaps of 10-40 s (asleep, or reading other memory) before the copies are
read again (first pass 0-11 % slower than the second). Twice, after a 2 s and a 5 s sleep, every
probe call read 8 ms (3.6x) for three whole rotations; 4 later trials of sleeping 3 s (and 4 of
computing in cache) did not repeat it: the host has such spells of its own. The mechanism of the
slow first rotation is not established. What removes it from the timing does not depend on it:
`around` reads every weight copy once, untimed, before the first timed round (`warm_calls`), and
each probe's samples are recorded (`probe_samples_s`) so a slow start shows in the run's own record.

When a probe corrects its point (`correction`): its ratio must be trusted (samples' IQR / median at
most PROBE_MAX_REL_IQR) and depart from 1 by more than PROBE_NOISE (0.19), the difference two probe
medians show on a host that has not moved; within that band the point keeps the profile's prediction
(the ratio still counts toward the run's drift). Without the band, a probe reading 1.18-1.22 beside a
prefill that ran at the profile's speed moved that prediction by +13 % and +20 % (a recorded run).

DRIFT_TOLERANCE: a probe on a host that does not move varies by its own noise only, which is at
most the point-over-probe spread above (it holds the point's noise too): 12-19 % over 12 points.
A run whose probes moved more than 25 % is marked drifting (summary.drift, and a note): the host
moved beyond the probe's noise and the predictions were corrected for it. On that VM this is the
common case: the host's memory speed moves by more than that within a run. The probe reads one
operator: drift that slows other operators differently (e.g. attention under a neighbour's cache
pressure) is not seen.
"""
from __future__ import annotations

import math
from fractions import Fraction

from inferlab.measure.calibrate import linear_shapes, pass_breakdown, shape_key
from inferlab.measure.probe import LinearProbe, warm_rotation

DRIFT_TOLERANCE = 0.25  # a run whose probes moved more than this (max / min - 1) is drifting: see above


def nearest_size(rows: int, sizes) -> int:
    """The profiled size nearest to `rows` in log space (the smaller one on a tie)."""
    sizes = sorted(int(x) for x in sizes)
    if not sizes:
        raise ValueError("nearest_size: the profile has no sizes for this operator")
    if rows <= 0:
        raise ValueError(f"rows must be a positive integer; got {rows!r}")
    rows = int(rows)
    # |log(m / rows)| compared exactly, as the ratio of the larger to the smaller (a Fraction)
    return min(sizes, key=lambda m: (Fraction(max(m, rows), min(m, rows)), m))


def dominant_linear(profile: dict, cfg, precision, accelerator, batch: int, q_len: int,
                    past_len: int) -> tuple[str, int]:
    """(shape key 'KxN', profiled rows M) of the probe of one pass: the linear shape whose layers
    take the largest calibrated time in it, at the profiled row count nearest the pass's rows
    (batch for the LM head, batch x q_len for the others)."""
    cal = pass_breakdown(profile, cfg, precision, accelerator, batch, q_len, past_len)["calibrated"]
    per_shape, rows = {}, {}
    for name, (k, n) in linear_shapes(cfg).items():
        key = shape_key(k, n)
        per_shape[key] = per_shape.get(key, 0.0) + cal[name]
        rows.setdefault(key, int(batch) if name == "lm_head" else int(batch) * int(q_len))
    key = max(per_shape, key=lambda k: (per_shape[k], k))
    sizes = [p["size"] for p in profile["linear"][key]]
    return key, nearest_size(rows[key], sizes)


def reference_s(profile: dict, key: str, m: int) -> float:
    """The profile's time of linear shape `key` at `m` rows (the probe's reference)."""
    for p in profile["linear"][key]:
        if int(p["size"]) == int(m):
            return float(p["time_s"])
    raise ValueError(f"the profile has no {key} linear at {m} rows")


def drift_ratio(probe_s: float, ref_s: float) -> float:
    """probe / reference: the host's slowness at a point relative to the profile (2.0: the probe
    took twice its profiled time in the point's rounds)."""
    for name, v in (("probe_s", probe_s), ("ref_s", ref_s)):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            raise ValueError(f"{name} must be a positive, finite time in seconds; got {v!r}")
    return probe_s / ref_s


PROBE_MAX_REL_IQR = 0.25  # a probe whose own samples spread more than this (IQR / median) is not trusted


def probe_trusted(probe: dict) -> bool:
    """Whether a point's probe is steady enough to correct its prediction: its samples' IQR / median
    at most PROBE_MAX_REL_IQR. In the first quick run of cpu-0.5b with round-robin probes (2-vCPU Xeon
    VM), 8 of 12 probes spread 0.06-0.16 and followed their points; 4 spread 0.28-0.62, read 1.2-2.3x
    the profile while their points ran at the speed of their neighbours, and would have put those
    points' predictions 22-47 % off. Probes recorded before the spread was kept count as trusted."""
    return probe.get("probe_rel_iqr", 0.0) <= PROBE_MAX_REL_IQR


PROBE_NOISE = 0.19  # a probe ratio within [1 / 1.19, 1.19] is the probe's own noise: the point keeps its prediction


def correction(probe: dict | None, noise: float = PROBE_NOISE) -> str:
    """How a point's probe acts on its calibrated prediction: 'applied' (calibrated_s x ratio), 'untrusted' (its
    samples spread more than PROBE_MAX_REL_IQR: nothing applied) or 'within noise' (max(ratio, 1 / ratio) - 1 <=
    `noise`: nothing applied; the ratio still counts toward the run's drift). 'none' without a probe.

    The rule, fixed before the five-run measurement from the probe's noise measured standalone on the
    idle 2-vCPU Xeon VM (the probe kernel alone, no point, nothing else running): the median of a probe over a
    2.5-3 s window moved between windows a few seconds apart by max / min = 1.10, 1.14 and 1.19 in three
    traces (10, 9 and 12 windows), and the point over its interleaved probe by 12-19 % over 12 points. The profile's reference is one such median and the probe's another, so a ratio up to 1.19 either
    way is what two medians on an unmoved host differ by; only a ratio beyond that says the host moved."""
    if not probe:
        return "none"
    if not (isinstance(noise, (int, float)) and 0 <= noise < 10):
        raise ValueError(f"noise must lie in [0, 10); got {noise!r}")
    if not probe_trusted(probe):
        return "untrusted"
    r = float(probe["ratio"])
    return "applied" if max(r, 1 / r) - 1 > noise else "within noise"


def drift_summary(ratios, tolerance: float = DRIFT_TOLERANCE) -> dict:
    """{'n', 'min', 'max', 'drift', 'tolerance', 'drifting'}: drift = max / min - 1 over the
    ratios and 1 (the profile's moment); drifting when drift > tolerance."""
    rs = [float(r) for r in ratios]
    if any(not (math.isfinite(r) and r > 0) for r in rs):
        raise ValueError(f"drift ratios must be positive and finite; got {rs}")
    if not (isinstance(tolerance, (int, float)) and 0 < tolerance < 10):
        raise ValueError(f"tolerance must lie in (0, 10); got {tolerance!r}")
    span = rs + [1.0]
    drift = max(span) / min(span) - 1.0
    return {"n": len(rs), "min": min(rs) if rs else None, "max": max(rs) if rs else None,
            "drift": drift, "tolerance": float(tolerance), "drifting": drift > tolerance}


def probed(fn, pool, probe_fn, probe_pool, timer):
    """(point Timing, probe Timing): `timer` (time_interleaved, or a wrapper of it) over the point
    and its probe, so each round calls the point once, then the probe once; the host's speed of
    every round falls on both."""
    point, probe = timer([(fn, pool), (probe_fn, probe_pool)])
    return point, probe


class LinearProbes:
    """The drift probes of one run: a measure.probe.LinearProbe per linear shape, built once, its
    weight copies rotating as the profile's (same copy rule, same cache and pool bytes)."""

    def __init__(self, profile, cfg, kind: str, dtype: str, *, cache_bytes: float, pool_bytes: float,
                 seed: int = 0):
        self.profile, self.cfg, self.kind, self.dtype = profile, cfg, kind, dtype
        self.cache_bytes, self.pool_bytes, self.seed = cache_bytes, pool_bytes, seed
        self._probes = {}

    def _pool(self, key: str, m: int):
        if key not in self._probes:
            k, n = (int(x) for x in key.split("x"))
            self._probes[key] = LinearProbe(k, n, self.dtype, self.kind, cache_bytes=self.cache_bytes,
                                            pool_bytes=self.pool_bytes, seed=self.seed + 101)
        return self._probes[key].pool(m)

    def around(self, key: str, m: int, fn, pool, timer, probe_fn=None):
        """(point Timing, {'operator', 'rows', 'probe_s', 'probe_rel_iqr', 'probe_samples_s', 'warm_calls',
        'reference_s', 'ratio'}): the point `fn` over `pool` timed by `timer` round-robin with the probe
        (`probed`), after one untimed probe call on every entry of the probe's pool (`warm_calls` of them:
        every weight copy read once before any timed call; see the module docstring). `probe_fn`: the
        probe kernel (default F.linear; tests pass a stand-in)."""
        if probe_fn is None:
            import torch.nn.functional as F
            probe_fn = F.linear
        probe_pool = self._pool(key, m)
        warm_rotation(probe_fn, probe_pool)  # one full rotation of the weight copies, untimed
        t, probe = probed(fn, pool, probe_fn, probe_pool, timer)
        ref = reference_s(self.profile, key, m)
        return t, {"operator": key, "rows": int(m), "probe_s": probe.median_s, "probe_rel_iqr": probe.rel_iqr,
                   "probe_samples_s": [float(x) for x in probe.samples_s], "warm_calls": len(probe_pool),
                   "reference_s": ref, "ratio": drift_ratio(probe.median_s, ref)}

    def release(self):
        self._probes.clear()


__all__ = ["DRIFT_TOLERANCE", "PROBE_MAX_REL_IQR", "PROBE_NOISE", "LinearProbes", "correction", "probe_trusted",
           "dominant_linear", "drift_ratio", "drift_summary", "nearest_size", "probed", "reference_s"]

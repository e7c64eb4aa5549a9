"""The host's speed inside a live run: a short probe kernel timed at every engine step, and the
simulator's step time scaled by it over time.

Why: a shared host's speed moves within a validation, and within the minute or two of one rate,
often beyond the speeds of the calibrations taken right before and right after it (how far, on the
runs recorded before the probe existed: docs/lab-notes.md). A step time fitted outside the live run
cannot follow that; a probe inside it can.

The probe (`measure.probe.LinearProbe.for_model`, the profile's and the drift probes' kernel): one
row through `F.linear` of the model's MLP up-projection shape (d_model -> d_ff), in the run's dtype:
the kernel that dominates a decode step of the engine (every linear layer of a decode step is such a
one-row product), at a shape the engine runs. Its weight copies rotate past the last-level cache
(measure.probe's copy rule), so every call reads its weight from DRAM as the engine's steps do;
every copy is read once, untimed, before the first timed call, since first reads of fresh copies
ran slow (measure.drift's docstring). cpu-0.5b in bf16: a 5632 x 2048 weight of 23 MB, a few ms
per call on a 2-core CPU host.

Where it runs (serving.study.engines.transformers_cb._instrument): in the engine's own thread, serially,
once per step, INSIDE the logged step window (after the scheduler has picked the step's batch,
before its forward). So its cost lands the same way in the calibrations and in the live runs: the
fitted step time absorbs it (a near-constant term, mostly in the fit's b0), the live tokens are
delayed by it, and the simulator, stepping on the fit, delays its tokens alike. Never concurrent: on
2 cores a probe beside the engine would take the engine's CPU. Every step rather than every k-th:
a few ms against steps of a hundred ms or more costs a few % of a step (`probe_share`: each record
reports its own), and it gives several samples per second for the running median.

The speed track (`SpeedTrack`): the probe log of a live run, (time since t0, probe seconds) per
step, and a reference probe time, the median probe of the calibration(s) the step time was fitted
to (`reference_probe_s`: for the mean of two fits, the mean of the two calibrations' medians, so
that a host at the speed of both calibrations reads 1.0):

    speed(t) = median{probe_s of the samples within window_s / 2 of t} / reference_s

(with fewer than `min_samples` samples in the window, the `min_samples` samples nearest t in time).
The window is centred: the track is built after the run from its whole log, so it has no lag.
`SpeedTrackedStepTime` makes any step-time model follow the host, fitted step x speed(t) at the
simulator's own clock t (the step's start, which the simulator's Replica passes to every
step-time model). The simulated clock and the live run share t0 (the workload's
arrivals), so speed(t) is read at the wall-clock moment the live run was in at that simulated time.

What the probe cannot see: a slowdown of the step's other work (attention over the cache, the
scheduler's Python) that does not slow a one-row linear alike.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from inferlab.base.input_checks import positive_float, positive_int
from inferlab.serving.steptime import StepShape, StepTimeModel, check_step_time

SPEED_WINDOW_S = 4.0      # the running median's window: ~25 probes at ~6 steps per second
SPEED_MIN_SAMPLES = 8     # fewer in the window: the nearest this many


def _times(name, values, *, positive: bool) -> np.ndarray:
    """`values` as a 1-d float array of finite (and, if `positive`, > 0) seconds, else a one-line error."""
    try:
        a = np.asarray(values, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a list of seconds; got {str(values)[:80]!r}") from None
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-d list of seconds; got shape {a.shape}")
    bad = ~np.isfinite(a) | ((a <= 0) if positive else np.zeros(a.shape, dtype=bool))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{name} must be {'positive ' if positive else ''}finite seconds; got {float(a[i])!r} at index {i}")
    return a


@dataclass(frozen=True)
class ProbeLog:
    """Probe samples of one run: times_s (start of each probe, seconds since the run's t0) and
    probe_s (its duration, seconds), one per engine step."""

    times_s: np.ndarray = field(hash=False)
    probe_s: np.ndarray = field(hash=False)

    def __post_init__(self):
        t = _times("times_s", self.times_s, positive=False)
        p = _times("probe_s", self.probe_s, positive=True)
        if t.shape != p.shape:
            raise ValueError(f"times_s and probe_s must be as long; got {t.size} and {p.size}")
        object.__setattr__(self, "times_s", t)
        object.__setattr__(self, "probe_s", p)

    @classmethod
    def from_dict(cls, d: dict) -> "ProbeLog":
        return cls(d["times_s"], d["probe_s"])

    def to_dict(self) -> dict:
        return {"times_s": self.times_s.tolist(), "probe_s": self.probe_s.tolist()}


def probe_summary(log: ProbeLog) -> dict:
    """{n, median_s, p10_s, p90_s, rel_iqr (IQR / median)} of a probe log."""
    if not isinstance(log, ProbeLog):
        raise ValueError(f"log must be a ProbeLog; got {type(log).__name__}")
    p = log.probe_s
    q25, q75 = np.percentile(p, [25, 75])
    med = float(np.median(p))
    return {"n": int(p.size), "median_s": med, "p10_s": float(np.percentile(p, 10)),
            "p90_s": float(np.percentile(p, 90)), "rel_iqr": float((q75 - q25) / med)}


def probe_share(probe_s, step_s) -> float:
    """The probe's cost as a share of the steps it ran in: sum(probe_s) / sum(step_s) (both
    measured, the probe inside each step's window)."""
    p = _times("probe_s", probe_s, positive=True)
    s = _times("step_s", step_s, positive=True)
    if p.sum() > s.sum():
        raise ValueError(f"probe_s must lie inside the steps' time: {p.sum():.6g} s of probes in "
                         f"{s.sum():.6g} s of steps")
    return float(p.sum() / s.sum())


def reference_probe_s(logs) -> float:
    """The reference of a step time fitted to the calibrations with these probe logs: the mean of
    their medians (one log: its median)."""
    logs = list(logs)
    if not logs or not all(isinstance(x, ProbeLog) for x in logs):
        raise ValueError(f"logs must be one or more ProbeLog; got {logs!r}")
    return float(np.mean([np.median(x.probe_s) for x in logs]))


@dataclass(frozen=True)
class SpeedTrack:
    """speed(t) = running median of the probe over `window_s` centred on t / `reference_s`
    (module doc); at least `min_samples` samples (the nearest in time) in each median."""

    log: ProbeLog
    reference_s: float
    window_s: float = SPEED_WINDOW_S
    min_samples: int = SPEED_MIN_SAMPLES

    def __post_init__(self):
        if not isinstance(self.log, ProbeLog):
            raise ValueError(f"log must be a ProbeLog; got {type(self.log).__name__}")
        positive_float("reference_s", self.reference_s)
        positive_float("window_s", self.window_s, maximum=3600.0)
        positive_int("min_samples", self.min_samples, maximum=10_000)
        order = np.argsort(self.log.times_s, kind="stable")
        object.__setattr__(self, "_t", self.log.times_s[order])
        object.__setattr__(self, "_p", self.log.probe_s[order])

    def speed_at(self, t_s: float) -> float:
        """The host's speed at time t_s (seconds since t0) relative to the reference (2.0: twice as
        slow as during the calibrations)."""
        if isinstance(t_s, bool) or not isinstance(t_s, (int, float, np.integer, np.floating)) \
                or not math.isfinite(t_s):
            raise ValueError(f"t_s must be a finite time in seconds; got {t_s!r}")
        t, p = self._t, self._p
        lo, hi = np.searchsorted(t, t_s - self.window_s / 2, "left"), np.searchsorted(t, t_s + self.window_s / 2,
                                                                                        "right")
        if hi - lo >= self.min_samples or hi - lo == t.size:
            sel = p[lo:hi]
        else:
            sel = p[np.argsort(np.abs(t - t_s), kind="stable")[:self.min_samples]]
        return float(np.median(sel) / self.reference_s)

    def speeds(self, times_s) -> np.ndarray:
        return np.array([self.speed_at(float(x)) for x in np.asarray(times_s, dtype=float)])

    def to_dict(self, every_s: float = 1.0) -> dict:
        """The track as recorded: its settings and speed(t) every `every_s` over the log's span."""
        t = np.arange(float(self._t[0]), float(self._t[-1]) + every_s, every_s)
        return {"reference_s": self.reference_s, "window_s": self.window_s, "min_samples": self.min_samples,
                "times_s": t.tolist(), "speed": self.speeds(t).tolist()}


class SpeedTrackedStepTime:
    """A StepTimeModel that follows the host: `base`'s step time x track.speed_at(t_s), t_s the
    simulated step's start."""

    def __init__(self, base: StepTimeModel, track: SpeedTrack):
        if not isinstance(track, SpeedTrack):
            raise ValueError(f"track must be a SpeedTrack; got {type(track).__name__}")
        self.base, self.track = check_step_time("base", base), track

    def step_time_s(self, step: StepShape, t_s: float) -> float:
        return self.base.step_time_s(step, t_s) * self.track.speed_at(t_s)


def normalized_durations(durations_s, log: ProbeLog) -> np.ndarray:
    """A calibration's step durations referred to its own median probe: each step's duration over the
    calibration's speed at that step, the running median of its own probes (SpeedTrack, default
    window) over their median,

        d_i' = d_i / speed(t_i),   speed(t) = median{probe_s within window_s / 2 of t} / median(probe_s)

    one probe per step, in step order (`log.times_s[i]` is step i's probe). A fit to d' predicts the
    steps of a host whose probe reads that median, which is what the reference of a probe-tracked
    prediction (`reference_probe_s`) says it does: the fit and the probe then agree on what speed 1
    means even when the host moved during the calibration. (Fitted to the raw durations, the fit
    averages over the calibration's moves while its reference is the probe's median, and the two
    disagree on what speed 1 means.)"""
    d = _times("durations_s", durations_s, positive=True)
    if not isinstance(log, ProbeLog):
        raise ValueError(f"log must be a ProbeLog; got {type(log).__name__}")
    if log.probe_s.size != d.size:
        raise ValueError(f"one probe per step: got {log.probe_s.size} probes for {d.size} steps")
    track = SpeedTrack(log, float(np.median(log.probe_s)))
    return d / track.speeds(log.times_s)


# The exponent of the host's speed applied to the prompt-chunk part of a step (SplitSpeedStepTime).
# Chosen on the development records only (data/measurements/serving/development/), re-simulated from
# their recorded step models and probe logs, and frozen before any later run was simulated with it;
# it is recorded beside the judged prediction (serving.study.validate.PREDICTION). The counts that
# chose it, and how it did since: docs/lab-notes.md.
CHUNK_SPEED_EXPONENT = 0.5


class SplitSpeedStepTime:
    """A time-aware StepTimeModel that scales only the memory-bound part of a step by the probe:

        step(t) = decode_part x speed(t) + (full - decode_part) x speed(t) ** chunk_exponent

    full: `base`'s step time; decode_part: `base`'s time of the same step without its prompt chunks
    (its decoding sequences alone, at most `full`; 0 in a step without decodes); the rest is what the
    prompt chunks add. Why: the probe is a one-row linear, a weight read, the kernel a decode step is
    made of; a prompt chunk's added cost is matrix-matrix work, bound by compute, which the host's
    memory speed moves less: in the recorded runs the probe's moves followed decode steps with a slope
    near 1 and prefill steps with a smaller one (docs/lab-notes.md); the exponent is
    CHUNK_SPEED_EXPONENT (see there how it was chosen)."""

    def __init__(self, base: StepTimeModel, track: SpeedTrack, chunk_exponent: float = CHUNK_SPEED_EXPONENT):
        check_step_time("base", base)
        if not isinstance(track, SpeedTrack):
            raise ValueError(f"track must be a SpeedTrack; got {type(track).__name__}")
        if isinstance(chunk_exponent, bool) or not isinstance(chunk_exponent, (int, float)) \
                or not 0.0 <= chunk_exponent <= 1.0:
            raise ValueError(f"chunk_exponent must be a number in [0, 1]; got {chunk_exponent!r}")
        self.base, self.track, self.chunk_exponent = base, track, float(chunk_exponent)

    def parts(self, step: StepShape, t_s: float) -> tuple:
        """(decode part, chunk part) of `base`'s step time, seconds."""
        full = self.base.step_time_s(step, t_s)
        if not step.chunks:
            return full, 0.0
        if int(step.decode_seqs) <= 0:
            return 0.0, full
        alone = StepShape(step.decode_seqs, step.decode_kv_tokens, (), step.decode_seqs)
        dec = min(full, self.base.step_time_s(alone, t_s))
        return dec, full - dec

    def step_time_s(self, step: StepShape, t_s: float) -> float:
        s = self.track.speed_at(t_s)
        dec, chunk = self.parts(step, t_s)
        return dec * s + chunk * s ** self.chunk_exponent


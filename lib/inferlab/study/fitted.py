"""Step time of an engine fitted to its own timed steps: the simulator stepping on what a real
engine's forward costs, for an engine whose operators we did not write (transformers' continuous
batching, `serving.study.engines.transformers_cb`).

A step of T tokens from n requests (decoding ones: one query after c cached keys; prefill chunks:
q queries after p cached keys), K keys read from the paged cache in all (the c's and p's), s
sequences sampling a token, costs

    step_s = b0 + b1 T + b2 max(T - 16, 0) + b3 max(T - 64, 0)     linear layers: weight reads
                                                                   (flat in T) turn compute-bound
           + b4 n                                                  per-request scheduling and indexing
           + b5 K                                                  gathering cached keys and values
           + b6 T (T + K)                                          one attention over the whole step:
                                                                   every query against every key,
                                                                   masked to its own request
           + b7 s                                                  LM head rows and sampling

(transformers' sdpa path on CPU runs ONE attention per layer per step over all T queries and
T + K keys with a block mask, so its cost grows with T (T + K), not with each request's own
q (q + p) as in the project's loop.) The b's are the least-squares fit to steps timed on the
engine itself (a calibration run, never the workload being predicted); the fit's residuals are
kept so its error can be reported. A cost that fits negative is dropped (set to 0) and the rest
refitted; the hinges' slope changes may take either sign. The piecewise-linear body (knots at 16 and 64 tokens) stands
in for the memory-bound to compute-bound turn of the linear layers; a prediction is never below
the fastest step timed.
"""
from __future__ import annotations

import numpy as np

from inferlab.serving.steptime import StepShape, check_step_time

FEATURES = ("step", "tokens", "tokens_over_16", "tokens_over_64", "requests", "cached_keys_read",
            "attention_pairs", "sampled")
HINGES = (2, 3)  # indices of the slope changes (either sign)


def step_features(step: StepShape) -> np.ndarray:
    """The FEATURES of one step: its decoding sequences over `decode_kv_tokens` keys in all (each its
    cached keys plus its own), its prefill chunks (q new tokens, p cached), its sampled sequences."""
    T = int(step.decode_seqs) + sum(int(q) for q, _ in step.chunks)
    K = float(step.decode_kv_tokens) - int(step.decode_seqs) + sum(float(p) for _, p in step.chunks)
    n = int(step.decode_seqs) + len(step.chunks)
    return np.array([1.0, T, max(T - 16, 0), max(T - 64, 0), n, K, T * (T + K), float(step.sampled)])


class FittedStepTime:
    """A StepTimeModel (serving.steptime) from coefficients fitted to an engine's timed steps.

    coefficients: one per FEATURES entry (seconds per unit); floor_s: the least a step takes."""

    def __init__(self, coefficients, floor_s: float = 0.0, fit: dict | None = None):
        c = np.asarray(coefficients, dtype=float)
        if c.shape != (len(FEATURES),) or not np.all(np.isfinite(c)):
            raise ValueError(f"coefficients must be {len(FEATURES)} finite numbers ({', '.join(FEATURES)}); "
                             f"got {coefficients!r}")
        if not (np.isfinite(floor_s) and floor_s >= 0):
            raise ValueError(f"floor_s must be a finite number >= 0; got {floor_s!r}")
        self.coefficients, self.floor_s, self.fit_stats = c, float(floor_s), dict(fit or {})

    @classmethod
    def fit(cls, steps: list, durations_s) -> "FittedStepTime":
        """Least squares over timed steps: `steps` [StepShape], `durations_s` their measured times. Needs at least 3 steps per coefficient."""
        y = np.asarray(durations_s, dtype=float)
        if len(steps) != len(y):
            raise ValueError(f"steps and durations_s must be as long; got {len(steps)} and {len(y)}")
        if len(y) < 3 * len(FEATURES):
            raise ValueError(f"fitting {len(FEATURES)} coefficients needs at least {3 * len(FEATURES)} timed "
                             f"steps; got {len(y)}")
        if not np.all(np.isfinite(y)) or np.any(y <= 0):
            raise ValueError("durations_s must be positive finite seconds")
        X = np.array([step_features(s) for s in steps])
        scale = np.abs(X).max(axis=0)
        scale[scale == 0] = 1.0
        # relative error matters: weight each step by 1 / its duration. A cost that comes out
        # negative is dropped and the rest refitted (a cost cannot be negative); the hinges are
        # slope changes and may take either sign.
        w = 1.0 / y
        keep = np.ones(len(FEATURES), dtype=bool)
        coef = np.zeros(len(FEATURES))
        while True:
            sol, *_ = np.linalg.lstsq((X[:, keep] / scale[keep]) * w[:, None], y * w, rcond=None)
            coef = np.zeros(len(FEATURES))
            coef[keep] = sol / scale[keep]
            negative = [i for i in np.flatnonzero(keep) if coef[i] < 0 and i not in HINGES]
            if not negative:
                break
            keep[min(negative, key=lambda i: coef[i] * scale[i])] = False
        model = cls(coef, float(y.min()))
        pred = np.array([model.step_time_s(s, 0.0) for s in steps])
        r = pred / y - 1
        model.fit_stats = {"n": int(len(y)), "median_abs": float(np.median(np.abs(r))),
                           "p90_abs": float(np.percentile(np.abs(r), 90)),
                           "tokens_range": [int(X[:, 1].min()), int(X[:, 1].max())]}
        return model

    def to_dict(self) -> dict:
        return {"features": list(FEATURES), "coefficients": self.coefficients.tolist(),
                "floor_s": self.floor_s, "fit": self.fit_stats}

    @classmethod
    def from_dict(cls, d: dict) -> "FittedStepTime":
        if list(d.get("features", ())) != list(FEATURES):
            raise ValueError(f"a fitted step time needs features {FEATURES}; got {d.get('features')!r}")
        return cls(d["coefficients"], d["floor_s"], d.get("fit"))

    def step_time_s(self, step: StepShape, t_s: float) -> float:
        """The fitted time of `step` (the same at any t_s), never below floor_s."""
        if step.tokens <= 0:
            return 0.0
        return max(float(self.coefficients @ step_features(step)), self.floor_s)


def logged_steps(log: dict) -> tuple:
    """([StepShape], durations_s) back from a record's step log (serving.study.validate.step_log's JSON
    columns: n_decode, decode_kv_tokens, chunks, sampled, step_s)."""
    steps = [StepShape(int(n), float(kv), tuple((int(q), int(p)) for q, p in ch), int(sm))
             for n, kv, ch, sm in zip(log["n_decode"], log["decode_kv_tokens"], log["chunks"], log["sampled"])]
    return steps, np.asarray(log["step_s"], dtype=float)


def live_steps(live) -> tuple:
    """([StepShape], durations_s) of a LiveResult's steps."""
    st = live.steps
    steps = [StepShape(int(n), float(kv), tuple((int(q), int(p)) for q, p in ch), int(lg)) for n, kv, ch, lg in
             zip(st["n_decode"], st["decode_kv_tokens"], live.chunks, st["logits"])]
    return steps, np.asarray(st["step_s"], dtype=float)


class ReplayStepTime:
    """A diagnostic StepTimeModel: each simulated step takes the measured time of the live step
    with the same work (decoding sequences, their keys, prefill chunks (q, p)), taken in the live
    run's order; a step the live run never took falls back to `fallback` and counts as unmatched.

    Simulating a workload on it separates the two sources of a latency error: if every simulated
    step is matched and the latencies then agree, the simulator's schedule is the engine's and the
    error left is the step-time model's; unmatched steps are a scheduling difference."""

    def __init__(self, live, fallback):
        from collections import defaultdict, deque
        steps, durations = live_steps(live)
        self._times = defaultdict(deque)
        for s, t in zip(steps, durations):
            self._times[self.key(s)].append(float(t))
        self.fallback = check_step_time("fallback", fallback)
        self.matched = self.unmatched = 0

    @staticmethod
    def key(step: StepShape) -> tuple:
        return (int(step.decode_seqs), int(round(float(step.decode_kv_tokens))),
                tuple((int(q), int(p)) for q, p in step.chunks))

    def step_time_s(self, step: StepShape, t_s: float) -> float:
        q = self._times.get(self.key(step))
        if q:
            self.matched += 1
            return q.popleft()
        self.unmatched += 1
        return self.fallback.step_time_s(step, t_s)

"""Request streams for the serving simulator: arrival times, prompt lengths, output lengths.

Arrivals: inter-arrival gaps are gamma-distributed with mean 1/rate and coefficient of variation
`cv` (shape 1/cv^2, as vLLM's `--burstiness` = 1/cv^2): cv = 1 is a Poisson process, cv > 1 is
burstier, cv = 0 a constant gap. Or a trace: given arrival times and lengths, one row per request.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass, field

import numpy as np

from inferlab.validation import choice, positive_float, positive_int

LENGTH_KINDS = ("fixed", "uniform", "lognormal")


@dataclass(frozen=True)
class LengthDist:
    """Token counts: 'fixed' (always `mean`), 'uniform' (integers in [low, high]) or 'lognormal'
    (mean `mean`, coefficient of variation `cv`, clipped to [low, high])."""

    kind: str = "fixed"
    mean: float = 512
    cv: float = 0.0
    low: int = 1
    high: int | None = None

    def __post_init__(self):
        choice("length distribution", self.kind, LENGTH_KINDS)
        positive_float("mean length", self.mean)
        positive_float("length cv", self.cv, allow_zero=True)
        positive_int("low", self.low)
        if self.high is not None:
            positive_int("high", self.high, minimum=self.low)
        if self.kind == "fixed":
            positive_int("fixed length", self.mean)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.kind == "fixed":
            return np.full(n, int(self.mean), dtype=np.int64)
        high = self.high if self.high is not None else int(10 * self.mean)
        if self.kind == "uniform":
            return rng.integers(self.low, high + 1, size=n)
        sigma2 = np.log1p(self.cv ** 2)  # lognormal with the given mean and cv
        x = rng.lognormal(np.log(self.mean) - sigma2 / 2, np.sqrt(sigma2), size=n)
        return np.clip(np.rint(x), self.low, high).astype(np.int64)


def fixed(n: int) -> LengthDist:
    return LengthDist("fixed", n)


@dataclass(frozen=True)
class Workload:
    """One row per request, sorted by arrival: seconds, prompt tokens, tokens to generate (>= 1)."""

    arrival_s: np.ndarray = field(hash=False)
    prompt_tokens: np.ndarray = field(hash=False)
    output_tokens: np.ndarray = field(hash=False)

    def __post_init__(self):
        a = np.asarray(self.arrival_s, dtype=float)
        p = np.asarray(self.prompt_tokens)
        o = np.asarray(self.output_tokens)
        if not (a.ndim == p.ndim == o.ndim == 1 and len(a) == len(p) == len(o)):
            raise ValueError(f"arrival_s, prompt_tokens and output_tokens must be 1-D of one length; "
                             f"got lengths {a.size}, {p.size}, {o.size}")
        if len(a) == 0:
            raise ValueError("a workload needs at least one request; got 0")
        positive_float("arrival_s", a, allow_zero=True)
        positive_int("prompt_tokens", p)
        positive_int("output_tokens", o)
        order = np.argsort(a, kind="stable")
        object.__setattr__(self, "arrival_s", a[order])
        object.__setattr__(self, "prompt_tokens", p.astype(np.int64)[order])
        object.__setattr__(self, "output_tokens", o.astype(np.int64)[order])

    def __len__(self) -> int:
        return len(self.arrival_s)


def arrival_times_s(rate_per_s: float, n_requests: int, cv: float = 1.0, seed: int = 0,
                    start_s: float = 0.0) -> np.ndarray:
    """n arrival times: cumulative gamma gaps of mean 1/rate and coefficient of variation cv,
    the first at start_s + one gap (cv = 0: exactly every 1/rate)."""
    positive_float("rate", rate_per_s)
    positive_int("n_requests", n_requests)
    positive_float("cv", cv, allow_zero=True)
    if cv == 0:
        gaps = np.full(int(n_requests), 1.0 / rate_per_s)
    else:
        shape = 1.0 / cv ** 2
        gaps = np.random.default_rng(seed).gamma(shape, 1.0 / (rate_per_s * shape), size=int(n_requests))
    return start_s + np.cumsum(gaps)


def synthetic(rate_per_s: float, *, n_requests: int | None = None, duration_s: float | None = None,
              prompt: LengthDist = LengthDist("fixed", 512), output: LengthDist = LengthDist("fixed", 128),
              cv: float = 1.0, seed: int = 0) -> Workload:
    """Requests at `rate_per_s` (gamma gaps, see module doc) for `n_requests` or, if given,
    every arrival before `duration_s` (n = about rate * duration)."""
    positive_float("rate", rate_per_s)
    if (n_requests is None) == (duration_s is None):
        raise ValueError("give exactly one of n_requests and duration_s")
    if duration_s is not None:
        positive_float("duration_s", duration_s)
        n_draw = int(rate_per_s * duration_s * 1.5 + 10 * np.sqrt(rate_per_s * duration_s) + 10)
        a = arrival_times_s(rate_per_s, n_draw, cv, seed)
        while a[-1] < duration_s:  # bursty gaps can fall short of the duration: draw more
            n_draw *= 2
            a = arrival_times_s(rate_per_s, n_draw, cv, seed)
        a = a[a < duration_s]
        if len(a) == 0:
            raise ValueError(f"no request arrives within duration_s={duration_s} at rate={rate_per_s}/s; "
                             "raise the rate or the duration")
    else:
        a = arrival_times_s(rate_per_s, n_requests, cv, seed)
    rng = np.random.default_rng(seed + 1)
    return Workload(a, prompt.sample(rng, len(a)), np.maximum(output.sample(rng, len(a)), 1))


def burst(n_requests: int, prompt_tokens: int, output_tokens: int, at_s: float = 0.0) -> Workload:
    """n identical requests arriving together (a closed batch, as in offline benchmarks)."""
    positive_int("n_requests", n_requests)
    positive_float("at_s", at_s, allow_zero=True)
    return Workload(np.full(n_requests, float(at_s)), np.full(n_requests, prompt_tokens),
                    np.full(n_requests, output_tokens))


def load_trace(path) -> Workload:
    """A CSV trace with columns arrival_s, prompt_tokens, output_tokens (a header row)."""
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    need = ("arrival_s", "prompt_tokens", "output_tokens")
    if not rows or any(k not in rows[0] for k in need):
        raise ValueError(f"trace {path}: needs a header with columns {', '.join(need)}; "
                         f"got {list(rows[0]) if rows else 'no rows'}")
    try:
        cols = {k: np.array([float(r[k]) for r in rows]) for k in need}
    except ValueError as err:
        raise ValueError(f"trace {path}: every value must be a number ({err})") from None
    return Workload(cols["arrival_s"], cols["prompt_tokens"], cols["output_tokens"])

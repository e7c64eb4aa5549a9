"""Request streams for the serving simulator: arrival times, prompt lengths, output lengths.

Arrivals: inter-arrival gaps are gamma-distributed with mean 1/rate and coefficient of variation
`cv` (shape 1/cv^2, as vLLM's `--burstiness` = 1/cv^2): cv = 1 is a Poisson process, cv > 1 is
burstier, cv = 0 a constant gap. Or a trace: given arrival times and lengths, one row per request.

Shared prefixes (for prefix caching, `simulate(..., prefix_caching=True)`): a request may start with
a prefix it shares with others (a system prompt): `prefix_id` names the prefix (-1: none) and
`prefix_tokens` its length, counted inside `prompt_tokens`. `with_shared_prefix` adds one.

Priorities (for `policies.PriorityScheduling`): each request may carry a class of PRIORITY_CLASSES,
stored as its index (0 the most urgent, as vLLM's lower-value-first); None: every request 'normal'.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass, field

import numpy as np

from inferlab.base.input_checks import choice, positive_float, positive_int

LENGTH_KINDS = ("fixed", "uniform", "lognormal")
PRIORITY_CLASSES = ("high", "normal", "low")  # index = priority level, 0 served first
NORMAL = PRIORITY_CLASSES.index("normal")


def priority_levels(classes) -> np.ndarray:
    """Class names (PRIORITY_CLASSES) to levels; an unknown name raises one line naming `priority`."""
    return np.array([PRIORITY_CLASSES.index(choice("priority", str(c), PRIORITY_CLASSES)) for c in classes],
                    dtype=np.int64)

# The most requests one workload may hold. A workload's arrays, the simulator's per-request state
# and its run time grow linearly with the count; 1,000,000 requests is a long day of traffic for one
# deployment and about a minute of simulation (measured: 1M requests in 64 s on one core).
MAX_REQUESTS = 1_000_000
# Coefficient of variation of the gaps: 0 (constant), or MIN_CV <= cv <= MAX_CV.
# Below MIN_CV the gamma shape 1/cv^2 exceeds 1e12 (and at cv < 1e-154, cv^2 underflows to 0): the
# gaps equal 1/rate to 6 digits, so cv = 0 says the same thing exactly.
# Above MAX_CV a renewal process of gamma gaps brings about (cv^2 - 1) / 2 extra requests at its
# start (Cox, Renewal Theory): 5,000 at cv = 100, 5e11 at cv = 1e6, beyond any workload.
MIN_CV = 1e-6
MAX_CV = 100.0
# Token counts up to 2**63 / 8: the lognormal clip (4 x the mean) and prompt + output stay in int64.
MAX_TOKENS = (2**63 - 1) // 8


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
    """One row per request, sorted by arrival: seconds, prompt tokens, tokens to generate (>= 1).
    Optional, for prefix caching: `prefix_id` (which shared prefix the prompt starts with, -1 for
    none) and `prefix_tokens` (its length, part of the prompt and shorter than it; one length per
    id). Both None: no request shares a prefix."""

    arrival_s: np.ndarray = field(hash=False)
    prompt_tokens: np.ndarray = field(hash=False)
    output_tokens: np.ndarray = field(hash=False)
    prefix_id: np.ndarray | None = field(default=None, hash=False)
    prefix_tokens: np.ndarray | None = field(default=None, hash=False)
    priority: np.ndarray | None = field(default=None, hash=False)  # levels, index of PRIORITY_CLASSES

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
        if (self.prefix_id is None) != (self.prefix_tokens is None):
            raise ValueError("give both prefix_id and prefix_tokens, or neither")
        if self.prefix_id is not None:
            pid, plen = np.asarray(self.prefix_id), np.asarray(self.prefix_tokens)
            if not (pid.shape == plen.shape == a.shape):
                raise ValueError(f"prefix_id and prefix_tokens must be 1-D with one entry per request ({a.size}); "
                                 f"got shapes {pid.shape} and {plen.shape}")
            positive_int("prefix_id", pid, minimum=-1)
            positive_int("prefix_tokens", plen, minimum=0)
            pid, plen = pid.astype(np.int64), plen.astype(np.int64)
            plen = np.where(pid < 0, 0, plen)
            bad = np.flatnonzero(plen >= p)
            if len(bad):
                i = int(bad[0])
                raise ValueError(f"prefix_tokens must be < prompt_tokens (at least one token of the request's own); "
                                 f"request {i} has prefix_tokens={int(plen[i])}, prompt_tokens={int(p[i])}")
            for k in np.unique(pid[pid >= 0]):
                lens = np.unique(plen[pid == k])
                if len(lens) > 1:
                    raise ValueError(f"prefix_id {int(k)} must have one length; got prefix_tokens {lens.tolist()}")
            object.__setattr__(self, "prefix_id", pid[order])
            object.__setattr__(self, "prefix_tokens", plen[order])
        if self.priority is not None:
            pr = np.asarray(self.priority)
            if pr.dtype.kind in "UO":
                pr = priority_levels(pr.tolist())
            if pr.shape != a.shape:
                raise ValueError(f"priority must be 1-D with one entry per request ({a.size}); got shape {pr.shape}")
            positive_int("priority", pr, minimum=0, maximum=len(PRIORITY_CLASSES) - 1)
            object.__setattr__(self, "priority", pr.astype(np.int64)[order])

    def __len__(self) -> int:
        return len(self.arrival_s)


def with_shared_prefix(workload: Workload, prefix_tokens: int, prefix_id: int = 0,
                       every: int = 1) -> Workload:
    """`workload` with a shared prefix of `prefix_tokens` tokens (say, a system prompt) put in front
    of every `every`-th request's prompt (its own tokens unchanged, so its prompt grows by the prefix)."""
    positive_int("prefix_tokens", prefix_tokens)
    positive_int("prefix_id", prefix_id, minimum=0)
    positive_int("every", every)
    n = len(workload)
    has = np.arange(n) % every == 0
    pid = np.where(has, prefix_id, -1) if workload.prefix_id is None else np.where(has, prefix_id, workload.prefix_id)
    plen = (np.where(has, prefix_tokens, 0) if workload.prefix_tokens is None
            else np.where(has, prefix_tokens, workload.prefix_tokens))
    if workload.prefix_id is not None and np.any(has & (workload.prefix_id >= 0)):
        raise ValueError("with_shared_prefix: some requests already have a prefix; give them one prefix each")
    return Workload(workload.arrival_s, workload.prompt_tokens + np.where(has, prefix_tokens, 0),
                    workload.output_tokens, pid, plen)


def with_priority(workload: Workload, classes) -> Workload:
    """`workload` with a priority class per request (names of PRIORITY_CLASSES, one per request,
    in arrival order)."""
    classes = list(classes)
    if len(classes) != len(workload):
        raise ValueError(f"priority needs one class per request ({len(workload)}); got {len(classes)}")
    return Workload(workload.arrival_s, workload.prompt_tokens, workload.output_tokens, workload.prefix_id,
                    workload.prefix_tokens, priority_levels(classes))


def check_cv(name: str, cv) -> float:
    """cv = 0 or MIN_CV <= cv <= MAX_CV (see their comment); ValueError naming `name` otherwise."""
    return positive_float(name, cv, allow_zero=True, minimum=MIN_CV, maximum=MAX_CV)


def check_request_count(expected: float, what: str) -> None:
    """Refuse a workload expected to hold more than MAX_REQUESTS requests, before drawing it."""
    if not expected <= MAX_REQUESTS:
        raise ValueError(f"{what} = {expected:.4g} requests; allowed: <= {MAX_REQUESTS:,} "
                         "(memory and run time grow with every request)")


def arrival_times_s(rate_per_s: float, n_requests: int, cv: float = 1.0, seed: int = 0,
                    start_s: float = 0.0) -> np.ndarray:
    """n arrival times: cumulative gamma gaps of mean 1/rate and coefficient of variation cv,
    the first at start_s + one gap (cv = 0: exactly every 1/rate)."""
    positive_float("rate", rate_per_s)
    positive_int("n_requests", n_requests, maximum=8 * MAX_REQUESTS)
    check_cv("cv", cv)
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
    check_cv("cv", cv)
    if duration_s is not None:
        positive_float("duration_s", duration_s)
        expected = rate_per_s * duration_s + max(0.0, (cv ** 2 - 1) / 2)  # renewal count, see MAX_CV
        check_request_count(expected, f"rate x duration_s = {rate_per_s:g}/s x {duration_s:g} s"
                                      + (f" (+ {(cv ** 2 - 1) / 2:.6g} for cv={cv:g})" if cv > 1 else ""))
        n_draw = int(expected * 1.5 + 10 * np.sqrt(expected) + 10)
        a = arrival_times_s(rate_per_s, n_draw, cv, seed)
        while a[-1] < duration_s:  # bursty gaps can fall short of the duration: draw more
            n_draw *= 2
            if n_draw > 8 * MAX_REQUESTS:
                raise ValueError(f"cv={cv:g} at rate={rate_per_s:g}/s: {n_draw // 2:,} gaps fall short of "
                                 f"duration_s={duration_s:g}; allowed: a smaller cv or duration")
            a = arrival_times_s(rate_per_s, n_draw, cv, seed)
        a = a[a < duration_s]
        check_request_count(len(a), "the arrivals drawn")
        if len(a) == 0:
            raise ValueError(f"no request arrives within duration_s={duration_s} at rate={rate_per_s}/s; "
                             "raise the rate or the duration")
    else:
        positive_int("n_requests", n_requests, maximum=MAX_REQUESTS)
        a = arrival_times_s(rate_per_s, n_requests, cv, seed)
    rng = np.random.default_rng(seed + 1)
    return Workload(a, prompt.sample(rng, len(a)), np.maximum(output.sample(rng, len(a)), 1))


def burst(n_requests: int, prompt_tokens: int, output_tokens: int, at_s: float = 0.0) -> Workload:
    """n identical requests arriving together (a closed batch, as in offline benchmarks)."""
    positive_int("n_requests", n_requests)
    positive_float("at_s", at_s, allow_zero=True)
    return Workload(np.full(n_requests, float(at_s)), np.full(n_requests, prompt_tokens),
                    np.full(n_requests, output_tokens))


def load_trace(path, name: str = "trace") -> Workload:
    """A CSV trace (UTF-8) with a header row naming arrival_s, prompt_tokens and output_tokens (other
    columns are ignored), then one request per row: arrival_s a finite number of seconds >= 0, token
    counts whole numbers >= 1 (output_tokens >= 1: a request generates at least one token). An
    optional `priority` column holds a class of PRIORITY_CLASSES per row. At most MAX_REQUESTS rows.
    Every error names `name`, the file, the line and the field."""
    need = ("arrival_s", "prompt_tokens", "output_tokens")
    where = f"{name} {str(path)!r}"
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            if header is None or any(k not in header for k in need):
                raise ValueError(f"{where}: line 1 must be a header naming the columns {', '.join(need)}; "
                                 f"got {header if header is not None else 'an empty file'}")
            cols = [header.index(k) for k in need]
            values = {k: [] for k in need}
            pcol = header.index("priority") if "priority" in header else None
            classes = []
            for row in reader:
                line = reader.line_num
                if not row or all(not c.strip() for c in row):
                    continue  # blank lines carry no request
                if len(values["arrival_s"]) >= MAX_REQUESTS:
                    raise ValueError(f"{where}: more than {MAX_REQUESTS:,} requests; allowed: <= {MAX_REQUESTS:,}")
                if len(row) != len(header):
                    raise ValueError(f"{where} line {line}: {len(row)} fields; the header has {len(header)}")
                for k, c in zip(need, cols):
                    values[k].append(_trace_value(where, line, k, row[c]))
                if pcol is not None:
                    if row[pcol].strip() not in PRIORITY_CLASSES:
                        raise ValueError(f"{where} line {line}: priority must be one of {', '.join(PRIORITY_CLASSES)}; "
                                         f"got {row[pcol].strip()!r}")
                    classes.append(row[pcol].strip())
    except UnicodeDecodeError:
        raise ValueError(f"{where}: not a UTF-8 text file (a CSV with arrival_s, prompt_tokens, "
                         "output_tokens columns is expected)") from None
    except csv.Error as err:
        raise ValueError(f"{where}: not a readable CSV ({err})") from None
    except OSError as err:
        raise ValueError(f"{where}: cannot be read ({err.strerror or err})") from None
    if not values["arrival_s"]:
        raise ValueError(f"{where}: no request rows after the header; allowed: at least one")
    return Workload(np.array(values["arrival_s"], dtype=float), np.array(values["prompt_tokens"], dtype=np.int64),
                    np.array(values["output_tokens"], dtype=np.int64),
                    priority=priority_levels(classes) if pcol is not None else None)


def _trace_value(where: str, line: int, field_name: str, text: str):
    """One field of a trace row, checked: arrival_s a finite float >= 0; counts whole, 1..MAX_TOKENS."""
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        value = None
    if field_name == "arrival_s":
        if value is None or not np.isfinite(value) or value < 0:
            raise ValueError(f"{where} line {line}: arrival_s must be a finite number of seconds >= 0; got {text!r}")
        return value
    if value is None or not np.isfinite(value) or value != np.floor(value) or not 1 <= value <= MAX_TOKENS:
        raise ValueError(f"{where} line {line}: {field_name} must be a whole number >= 1 and <= {MAX_TOKENS}; "
                         f"got {text!r}")
    return int(value)

"""The serving lab's experiments (chapters/15_2_3_serving_lab): each runs the simulator over a
small fixed-seed workload and returns its numbers as a frozen dataclass; `serving.labplots`
draws them. Everything is a function of a `Scenario` (model, accelerator, precision, request
lengths, SLO), so the notebook's What-if cell reaches every experiment.

- `policy_sweep`: one workload per request rate through several policies (static vs continuous
  batching; tail latency against QPS): the SimResult summaries, per policy and rate.
- `long_prompt`: one long prompt arriving into steady decode traffic, without chunking and with
  chunked prefill at several chunk sizes: the others' ITL tail and the long request's TTFT.
- `slo_capacity`: for each deployment (replicas x tensor parallelism x policy), the highest rate
  at which `attainment` of the requests meet the SLO (bisection over the rate); per GPU and per
  dollar at a price per GPU-hour (cost = GPUs x hours x price: GPUs of one kind).
- `prefix_sweep`: requests sharing a long system prompt, with and without prefix caching.

A model too large for one accelerator (Llama-2 70B's 138 GB of bf16 weights on an 80 GB H100) is
not an error: `Scenario(tp=None)` runs every experiment on the smallest tensor-parallel layout that
holds the weights and one longest request (`smallest_tp`), and `slo_capacity` reports a deployment
that does not fit as such (capacity 0, `Capacity.fits` False) with the smallest TP that would.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from inferlab.core.context import beyond_context
from inferlab.serving.kv import blocks_for, kv_capacity_blocks
from inferlab.serving.metrics import SLO, SimResult
from inferlab.serving.policies import ChunkedPrefill, ContinuousBatching, PrefillFirst
from inferlab.serving.simulate import simulate
from inferlab.serving.workload import LengthDist, Workload, synthetic, with_shared_prefix
from inferlab.core.specs import BF16, Precision, check_model, get_accelerator, get_model
from inferlab.base.input_checks import DoesNotFitError, fraction, positive_float, positive_int

# ShareGPT-like lengths (lognormal, cv 1), clipped to fit Llama-2's 4,096-token context.
LAB_PROMPT = LengthDist("lognormal", 512, cv=1.0, low=16, high=3000)
LAB_OUTPUT = LengthDist("lognormal", 128, cv=1.0, low=1, high=1000)


LAB_BLOCK_TOKENS = 16  # the simulator's default KV block
LAB_WATERMARK = 0.01   # and its admission watermark (simulate's default)


def fits(model, accelerator, precision: Precision = BF16, tp: int = 1, tokens: int = 1) -> bool:
    """Whether one replica on `tp` devices holds its weights and, in its KV pool (90 % of memory
    minus the weights, `kv_capacity_blocks`, less the 1 % admission watermark), one request of
    `tokens` tokens: the simulator would admit it rather than reject it. False also where `tp` cannot
    split the model evenly (`parallel.check_tp`)."""
    from inferlab.core.parallel import check_tp
    positive_int("tokens", tokens)
    try:
        check_tp(model, tp)
        pool = kv_capacity_blocks(model, accelerator, precision, tp, LAB_BLOCK_TOKENS)
    except DoesNotFitError:
        return False
    except ValueError as err:
        if "tp" in str(err):
            return False
        raise
    return blocks_for(int(tokens), LAB_BLOCK_TOKENS) <= pool - int(LAB_WATERMARK * pool)


def smallest_tp(model, accelerator, precision: Precision = BF16, tokens: int = 1) -> int | None:
    """The smallest tensor-parallel degree (1, 2, 4, ... up to the model's head count) at which
    `fits(model, accelerator, precision, tp, tokens)`; None if none does."""
    model = check_model(model)
    tp = 1
    while tp <= model.n_heads:
        if fits(model, accelerator, precision, tp, tokens):
            return tp
        tp *= 2
    return None


def _devices(n: int, accelerator) -> str:
    words = {1: "one", 2: "two", 4: "four", 8: "eight", 16: "sixteen"}
    return f"{words.get(n, str(n))} {accelerator.name}{'s' if n > 1 else ''}"


@dataclass(frozen=True)
class Scenario:
    """What every experiment of the lab shares: the model on its accelerator, the request lengths,
    the number of requests per run, the seed and the SLO (the chapter's TTFT < 500 ms and ITL <
    50 ms, the ITL target applied to each request's mean ITL, its TPOT). `model` and `accelerator` may
    be names: the scenario is the lab's edge and resolves them once (like reader.what_if)."""

    model: object = "llama-2-13b"
    accelerator: object = "h100-sxm"
    precision: Precision = BF16
    prompt: LengthDist = LAB_PROMPT
    output: LengthDist = LAB_OUTPUT
    n_requests: int = 1000
    seed: int = 0
    slo: SLO = SLO()
    tp: int | None = 1  # devices per replica; None: the smallest that fits (`smallest_tp`)

    def __post_init__(self):
        object.__setattr__(self, "model", get_model(self.model))
        object.__setattr__(self, "accelerator", get_accelerator(self.accelerator))
        positive_int("n_requests", self.n_requests)
        need = self.longest_tokens
        smallest = smallest_tp(self.model, self.accelerator, self.precision, need)
        if self.tp is None:
            if smallest is None:
                raise DoesNotFitError(f"{self.model.name} does not fit on {self.accelerator.name} at any "
                                      f"tensor-parallel degree up to {self.model.n_heads} with a {need:,}-token request")
            object.__setattr__(self, "tp", smallest)
        positive_int("tp", self.tp)
        if not fits(self.model, self.accelerator, self.precision, self.tp, need):
            hint = f"the smallest that fits is tp={smallest}" if smallest else "no tp fits"
            raise DoesNotFitError(f"{self.model.name} with a {need:,}-token request does not fit on tp={self.tp} x "
                                  f"{self.accelerator.name}; {hint} (or pass tp=None)")

    @property
    def longest_tokens(self) -> int:
        """The longest request the scenario's lengths can draw: prompt and output at their clip."""
        return int((self.prompt.high or 10 * self.prompt.mean) + (self.output.high or 10 * self.output.mean))

    @property
    def layout(self) -> str:
        """The replica the experiments run on, in words: 'one H100-SXM' or 'TP = 2 over two H100-SXMs'."""
        return (_devices(1, self.accelerator) if self.tp == 1
                else f"TP = {self.tp} over {_devices(self.tp, self.accelerator)}")

    def layout_note(self) -> str:
        """'' when the model fits on one device; otherwise a sentence saying why the lab runs it on
        `tp` devices (weights per device against the usable memory)."""
        if self.tp == 1:
            return ""
        from inferlab.core.memory import weight_bytes
        from inferlab.base.units import GB
        w = weight_bytes(self.model, self.precision, 1)
        return (f" {self.model.name} does not fit on one {self.accelerator.name}: its weights take {w / GB:.0f} GB "
                f"against 90 % of {self.accelerator.memory_bytes / GB:.0f} GB usable, so every experiment runs it "
                f"with tensor parallelism, TP = {self.tp} (the smallest degree that holds the weights and a "
                f"{self.longest_tokens:,}-token request).")

    def workload(self, rate_per_s: float, n_requests: int | None = None) -> Workload:
        return synthetic(rate_per_s, n_requests=n_requests or self.n_requests, prompt=self.prompt,
                         output=self.output, seed=self.seed)

    def run(self, workload: Workload, policy=ContinuousBatching(), **kw) -> SimResult:
        return simulate(workload, self.model, self.accelerator, policy, precision=self.precision,
                        **({"tp": self.tp} | kw))


def _percentile(x, q) -> float:
    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x)]
    return float(np.percentile(x, q)) if len(x) else float("nan")


# -- policies against the request rate --------------------------------------------------------------

@dataclass(frozen=True)
class Sweep:
    """Summaries (SimResult.summary) per policy label and rate: `summaries[label][i]` at rates[i]."""

    rates: tuple
    labels: tuple
    summaries: dict = field(hash=False)
    slo: SLO = SLO()

    def column(self, label: str, key: str, stat: str | None = None) -> np.ndarray:
        """One number per rate: summary[key] (or summary[key][stat], e.g. ('ttft_s', 'p99'))."""
        return np.array([s[key] if stat is None else (s[key] or {}).get(stat, np.nan)
                         for s in self.summaries[label]], dtype=float)

    def max_rate_within(self, label: str, ttft_s: float | None = None, itl_s: float | None = None,
                        pct: str = "p99") -> float:
        """The highest rate of the sweep whose `pct` TTFT and ITL are within the targets (default: the
        SLO's TTFT and TPOT values), every lower rate too; 0.0 if even the lowest misses."""
        ttft_s = self.slo.ttft_s if ttft_s is None else ttft_s
        itl_s = self.slo.tpot_s if itl_s is None else itl_s
        ok = (self.column(label, "ttft_s", pct) <= ttft_s) & (self.column(label, "itl_s", pct) <= itl_s)
        n = int(np.argmin(ok)) if not ok.all() else len(ok)
        return float(self.rates[n - 1]) if n else 0.0


def policy_sweep(scenario: Scenario, rates, policies: dict) -> Sweep:
    """Each rate's workload (same seed: the same requests, arriving faster) through each policy."""
    rates = tuple(float(positive_float("rate", r)) for r in rates)
    if not policies:
        raise ValueError("policies must name at least one policy; got none")
    out = {label: [] for label in policies}
    for rate in rates:
        w = scenario.workload(rate)
        for label, policy in policies.items():
            out[label].append(scenario.run(w, policy).summary(scenario.slo))
    return Sweep(rates, tuple(policies), out, scenario.slo)


# -- a long prompt into steady decode traffic ---------------------------------------------------------

@dataclass(frozen=True)
class LongPrompt:
    """One long prompt of `long_tokens` arriving mid-way into traffic at `rate_per_s`: per schedule
    ('unchunked' = prefill-first, then each chunk size), the others' largest and p99 ITL, their
    p99 TTFT, and the long request's own TTFT (seconds)."""

    long_tokens: int
    rate_per_s: float
    chunks: tuple
    others_max_itl_s: dict = field(hash=False)
    others_p99_itl_s: dict = field(hash=False)
    others_p99_ttft_s: dict = field(hash=False)
    long_ttft_s: dict = field(hash=False)
    prefill_alone_s: float = 0.0

    @property
    def labels(self) -> tuple:
        return ("unchunked",) + tuple(f"C={c}" for c in self.chunks)


def long_prompt(scenario: Scenario, long_tokens: int, rate_per_s: float, chunks=(256, 512, 1024, 2048),
                output_tokens: int = 128) -> LongPrompt:
    """Unchunked prefill-first (whole prompts in a step of their own, decodes wait) against
    ChunkedPrefill(token_budget=C) per chunk size C (every decode, then prompt chunks up to C)."""
    positive_int("long_tokens", long_tokens)
    chunks = tuple(int(positive_int("chunk", c)) for c in chunks)
    base = scenario.workload(rate_per_s)
    n = len(base)
    t_long = float(base.arrival_s[n // 2]) + 1e-6
    w = Workload(np.append(base.arrival_s, t_long), np.append(base.prompt_tokens, long_tokens),
                 np.append(base.output_tokens, output_tokens))
    idx = int(np.flatnonzero((w.prompt_tokens == long_tokens) & (w.arrival_s == t_long))[0])
    others = np.ones(len(w), bool)
    others[idx] = False
    out = {k: {} for k in ("max_itl", "p99_itl", "p99_ttft", "long")}
    schedules = [("unchunked", PrefillFirst(max_batched_tokens=None))] + [
        (f"C={c}", ChunkedPrefill(token_budget=c, max_num_seqs=min(256, c))) for c in chunks]
    for label, policy in schedules:
        r = scenario.run(w, policy)
        itl = [r.itls_s[i] for i in np.flatnonzero(others) if len(r.itls_s[i])]
        out["max_itl"][label] = float(max(float(np.max(x)) for x in itl))
        out["p99_itl"][label] = _percentile(np.concatenate(itl), 99)
        out["p99_ttft"][label] = _percentile(r.ttft_s[others], 99)
        out["long"][label] = float(r.ttft_s[idx])
    from inferlab.serving.steptime import RooflineStepTime
    alone = RooflineStepTime(scenario.model, scenario.accelerator, scenario.precision,
                             tp=scenario.tp).prefill_s(long_tokens)
    return LongPrompt(int(long_tokens), float(rate_per_s), chunks, out["max_itl"], out["p99_itl"],
                      out["p99_ttft"], out["long"], alone)


# -- SLO capacity of deployments, per GPU and per dollar ----------------------------------------------

@dataclass(frozen=True)
class Deployment:
    """`replicas` copies of the model, each on `tp` GPUs, under `policy` (least-loaded routing).
    `requests_per_gpu`: the run length for `slo_capacity` (default the scenario's n_requests); a
    deployment at B = 1 saturates within a few hundred requests and simulates one step per token."""

    label: str
    replicas: int = 1
    tp: int = 1
    policy: object = ContinuousBatching()
    requests_per_gpu: int | None = None
    start_rate_per_gpu: float | None = None

    def __post_init__(self):
        positive_int("replicas", self.replicas)
        positive_int("tp", self.tp)
        if self.requests_per_gpu is not None:
            positive_int("requests_per_gpu", self.requests_per_gpu)
        if self.start_rate_per_gpu is not None:
            positive_float("start_rate_per_gpu", self.start_rate_per_gpu)

    @property
    def gpus(self) -> int:
        return self.replicas * self.tp


@dataclass(frozen=True)
class Capacity:
    """Per deployment: the highest rate (requests/s) at which `attainment` of the requests meet the
    SLO, that rate per GPU, and SLO-meeting requests per dollar at `usd_per_gpu_hour`
    (rate x 3600 s / (GPUs x price))."""

    deployments: tuple
    rate_per_s: tuple
    attainment: float
    usd_per_gpu_hour: float
    # per deployment: whether it holds the model and a longest request (None: all do), and the
    # smallest TP that would (None where none does)
    fits: tuple | None = None
    smallest_tp: tuple | None = None

    def __post_init__(self):
        if self.fits is None:
            object.__setattr__(self, "fits", tuple(True for _ in self.deployments))
        if self.smallest_tp is None:
            object.__setattr__(self, "smallest_tp", tuple(d.tp for d in self.deployments))

    @property
    def all_fit(self) -> bool:
        return all(self.fits)

    @property
    def per_gpu(self) -> tuple:
        return tuple(r / d.gpus for r, d in zip(self.rate_per_s, self.deployments))

    @property
    def requests_per_usd(self) -> tuple:
        return tuple(r * 3600.0 / (d.gpus * self.usd_per_gpu_hour) for r, d in zip(self.rate_per_s, self.deployments))

    def best(self) -> int:
        """Index of the deployment with the most SLO-meeting requests per dollar among those that fit
        (first of equals)."""
        usd = np.where(np.array(self.fits), np.array(self.requests_per_usd, dtype=float), -1.0)
        return int(np.argmax(usd))

    def status(self, i: int) -> str:
        """'fits', or 'does not fit (needs TP >= n)' for deployment i."""
        if self.fits[i]:
            return "fits"
        need = self.smallest_tp[i]
        return f"does not fit (needs TP >= {need})" if need else "does not fit at any TP"


def attains(scenario: Scenario, deployment: Deployment, rate_per_s: float) -> float:
    """The fraction of requests meeting the SLO at `rate_per_s`: a fixed-seed run of the scenario's
    n requests per GPU (a run long enough per GPU that a queue growing past capacity shows)."""
    w = scenario.workload(rate_per_s, (deployment.requests_per_gpu or scenario.n_requests) * deployment.gpus)
    r = simulate(w, scenario.model, scenario.accelerator, deployment.policy, precision=scenario.precision,
                 tp=deployment.tp, replicas=deployment.replicas, router="least-loaded")
    return float(r.meets(scenario.slo).mean())


def slo_capacity(scenario: Scenario, deployments, *, attainment: float = 0.9, usd_per_gpu_hour: float = 4.0,
                 start_rate: float = 1.0, rel_tol: float = 0.05) -> Capacity:
    """Bisection on the rate for each deployment: double from `start_rate` (or the deployment's own)
    x GPUs until the attainment
    falls below `attainment`, then halve the bracket until it is within `rel_tol` (its lower end is
    the capacity: a rate that was run and met the target). 0.0 when even `start_rate` / 64 misses."""
    fraction("attainment", attainment)
    positive_float("usd_per_gpu_hour", usd_per_gpu_hour)
    positive_float("start_rate", start_rate)
    positive_float("rel_tol", rel_tol)
    deployments = tuple(deployments)
    scenario = scenario if scenario is not None else Scenario()
    need = scenario.longest_tokens
    ok = tuple(fits(scenario.model, scenario.accelerator, scenario.precision, d.tp, need) for d in deployments)
    least = smallest_tp(scenario.model, scenario.accelerator, scenario.precision, need)
    rates = []
    for d, d_fits in zip(deployments, ok):
        if not d_fits:  # shown as such, with the smallest TP that would fit; no run
            rates.append(0.0)
            continue
        start = d.start_rate_per_gpu or start_rate
        lo, hi = 0.0, float(start) * d.gpus
        while attains(scenario, d, hi) >= attainment:
            lo, hi = hi, 2 * hi
            if hi > 1e5:
                raise ValueError(f"{d.label}: meets the SLO beyond 1e5 requests/s; check the scenario")
        if lo == 0.0:  # the start already misses: look below it
            floor = start * d.gpus / 64
            while hi > floor and attains(scenario, d, hi / 2) < attainment:
                hi /= 2
            lo = hi / 2 if hi > floor else 0.0
        while lo > 0 and (hi - lo) > rel_tol * lo:
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if attains(scenario, d, mid) >= attainment else (lo, mid)
        rates.append(lo)
    return Capacity(deployments, tuple(rates), float(attainment), float(usd_per_gpu_hour), ok,
                    tuple(d.tp if f else least for d, f in zip(deployments, ok)))


def capacity_note(capacity: Capacity, scenario: Scenario) -> str:
    """In words, for a comparison where some deployments do not fit: which, why and what would,
    then those that fit with their requests per dollar, highest first."""
    from inferlab.core.memory import weight_bytes
    from inferlab.base.units import GB
    out = [i for i, f in enumerate(capacity.fits) if not f]
    names = ", ".join(f"**{capacity.deployments[i].label}**" for i in out)
    w = weight_bytes(scenario.model, scenario.precision, 1) / GB
    text = (f"{names} {'does' if len(out) == 1 else 'do'} not fit: {scenario.model.name}'s weights take {w:.0f} GB, "
            f"and one replica needs at least TP = {capacity.smallest_tp[out[0]]} on {scenario.accelerator.name} to hold "
            f"them beside a {scenario.longest_tokens:,}-token request, so they serve nothing. ")
    if capacity.all_fit or len(out) == len(capacity.fits):
        return text + "No deployment tried fits." if len(out) == len(capacity.fits) else text
    # Listed by requests per dollar, without a superlative: whether the first beats the second is for
    # the caller to say against the capacities' uncertainty (inferlab.base.qualitative_words.ranking).
    fit = sorted((i for i, f in enumerate(capacity.fits) if f), key=lambda i: -capacity.requests_per_usd[i])
    return (text + "Those that fit, in SLO-meeting requests per dollar: "
            + "; ".join(f"**{capacity.deployments[i].label}** {capacity.requests_per_usd[i]:,.0f} "
                        f"({capacity.per_gpu[i]:.3g} requests/s per GPU)" for i in fit) + ".")


# -- prefix caching of a shared system prompt ---------------------------------------------------------

@dataclass(frozen=True)
class PrefixSweep:
    """Requests whose prompts start with one shared `prefix_tokens` system prompt, per rate, with
    caching off and on: p50 and p99 TTFT (s), p50 TPOT (s, a request's mean ITL), SLO attainment,
    mean KV blocks in use (fraction) and the mean prompt tokens served from the cache."""

    prefix_tokens: int
    rates: tuple
    p50_ttft_s: dict = field(hash=False)
    p99_ttft_s: dict = field(hash=False)
    p50_tpot_s: dict = field(hash=False)
    attainment: dict = field(hash=False)
    kv_mean_fraction: dict = field(hash=False)
    cached_tokens_mean: dict = field(hash=False)
    prompt_tokens_mean: float = 0.0

    def max_rate(self, label: str, attainment: float = 0.9) -> float:
        """The highest rate of the sweep with at least `attainment` of requests in the SLO, every lower
        rate too; 0.0 if even the lowest misses."""
        ok = np.asarray(self.attainment[label]) >= attainment
        n = int(np.argmin(ok)) if not ok.all() else len(ok)
        return float(self.rates[n - 1]) if n else 0.0


def prefix_sweep(scenario: Scenario, prefix_tokens: int, rates, policy=ContinuousBatching()) -> PrefixSweep:
    """The scenario's requests with a `prefix_tokens` system prompt in front of every prompt (the
    scenario's prompt lengths are the users' own tokens), at each rate, caching off and on. Lengths
    beyond the model's context are computed as yardsticks (no warning: the notebook says so)."""
    positive_int("prefix_tokens", prefix_tokens)
    rates = tuple(float(positive_float("rate", r)) for r in rates)
    keys = ("off", "on")
    out = {k: {label: [] for label in keys} for k in ("p50", "p99", "tpot", "att", "kv", "cached")}
    prompt_mean = 0.0
    with beyond_context():
        for rate in rates:
            w = with_shared_prefix(scenario.workload(rate), prefix_tokens)
            prompt_mean = float(w.prompt_tokens.mean())
            for label in keys:
                r = scenario.run(w, policy, prefix_caching=label == "on")
                s = r.summary(scenario.slo)
                out["p50"][label].append(s["ttft_s"]["p50"])
                out["p99"][label].append(s["ttft_s"]["p99"])
                out["tpot"][label].append(s["tpot_s"]["p50"])
                out["att"][label].append(s["slo_attainment"])
                out["kv"][label].append(s["kv_use"]["mean_fraction"])
                out["cached"][label].append(float(r.cached_prompt_tokens.mean()))
    tup = {k: {label: tuple(v) for label, v in d.items()} for k, d in out.items()}
    return PrefixSweep(int(prefix_tokens), rates, tup["p50"], tup["p99"], tup["tpot"], tup["att"], tup["kv"],
                       tup["cached"], prompt_mean)


# -- disaggregated prefill and decode -------------------------------------------------------------------

SHARED_LAYOUTS = ("shared, unchunked", "shared, chunked 512")
MIXES = ("short prompts only", "with long prompts")


@dataclass(frozen=True)
class Disaggregation:
    """The scenario's traffic on `replicas` replicas, shared (unchunked continuous batching, or chunked
    prefill with a 512-token budget) or split into a prefill pool and a decode pool (P:D), with and
    without a share of long prompts: per (layout, mix) the p99 ITL of the requests (their decode
    gaps), the p99 and p50 TTFT (s), and the mean KV transfer (s) under disaggregation."""

    replicas: int
    rate_per_s: float
    long_tokens: int
    long_share: float
    layouts: tuple
    p99_itl_s: dict = field(hash=False)
    p99_ttft_s: dict = field(hash=False)
    p50_ttft_s: dict = field(hash=False)
    transfer_s: float = 0.0
    link_gbps: float = 0.0
    link_latency_s: float = 0.0
    mean_prompt_tokens: float = 0.0   # of the mix: transfer_s is the transfer of a prompt this long


def with_long_prompts(workload: Workload, long_tokens: int, share: float, seed: int = 0) -> Workload:
    """`workload` with a `share` of its requests (drawn with `seed`) given `long_tokens`-token prompts."""
    positive_int("long_tokens", long_tokens)
    positive_float("share", share, maximum=1.0)
    pick = np.random.default_rng(seed + 7).random(len(workload)) < share
    return Workload(workload.arrival_s, np.where(pick, int(long_tokens), workload.prompt_tokens),
                    workload.output_tokens)


def _split_label(p: int, d: int) -> str:
    return f"disaggregated {p}:{d}"


def disaggregation(scenario: Scenario, rate_per_s: float, *, replicas: int = 4, long_tokens: int = 3000,
                   long_share: float = 0.1, splits=((1, 3), (2, 2)), kv_link=None) -> Disaggregation:
    """Shared pools against prefill/decode splits of the same `replicas` (each the scenario's tp GPUs),
    each mix (the scenario's prompts; a `long_share` of them `long_tokens` long) at `rate_per_s`.
    kv_link: a disaggregation.KVLink (None: InfiniBand NDR, `disaggregation.link('infiniband')`)."""
    from inferlab.serving.disaggregation import Pool, link, simulate_disaggregated, transfer_time_s
    positive_int("replicas", replicas)
    splits = tuple((int(p), int(d)) for p, d in splits)
    for p, d in splits:
        positive_int("prefill replicas", p)
        positive_int("decode replicas", d)
    kv_link = link("infiniband") if kv_link is None else kv_link
    base = scenario.workload(rate_per_s)
    loads = {MIXES[0]: base, MIXES[1]: with_long_prompts(base, long_tokens, long_share, scenario.seed)}
    labels = SHARED_LAYOUTS + tuple(_split_label(p, d) for p, d in splits)
    p99_itl, p99_ttft, p50_ttft = {}, {}, {}
    sc = scenario
    for mix, w in loads.items():
        runs = {SHARED_LAYOUTS[0]: sc.run(w, ContinuousBatching(), replicas=replicas, router="least-loaded"),
                SHARED_LAYOUTS[1]: sc.run(w, ChunkedPrefill(512), replicas=replicas, router="least-loaded")}
        for p, d in splits:
            runs[_split_label(p, d)] = simulate_disaggregated(
                w, sc.model, sc.accelerator, prefill=Pool(p, sc.tp, None, sc.precision, PrefillFirst()),
                decode=Pool(d, sc.tp, None, sc.precision, ContinuousBatching()), kv_link=kv_link)
        for label, r in runs.items():
            p99_itl[label, mix] = _percentile(r.all_itls_s, 99)
            p99_ttft[label, mix] = _percentile(r.ttft_s, 99)
            p50_ttft[label, mix] = _percentile(r.ttft_s, 50)
    moved = float(np.mean(transfer_time_s(sc.model, sc.precision, loads[MIXES[1]].prompt_tokens, kv_link, sc.tp)))
    return Disaggregation(int(replicas), float(rate_per_s), int(long_tokens), float(long_share), labels,
                          p99_itl, p99_ttft, p50_ttft, moved, kv_link.gbps, kv_link.latency_s,
                          float(loads[MIXES[1]].prompt_tokens.mean()))


@dataclass(frozen=True)
class PoolSizing:
    """SLO attainment of every prefill:decode split of 2..`max_replicas` replicas at one rate, and the
    smallest deployment meeting `attainment` (None: none up to max_replicas)."""

    rate_per_s: float
    attainment_target: float
    attainment: dict = field(hash=False)   # {(P, D): fraction of requests within the SLO}
    best: tuple | None = None


def pool_sizing(scenario: Scenario, rate_per_s: float, *, max_replicas: int = 5, attainment: float = 0.9,
                workload: Workload | None = None, kv_link=None) -> PoolSizing:
    """Each split P:D with P + D <= max_replicas, smallest totals first, stopping after the first total
    where some split meets `attainment` of the scenario's SLO; best: that total's best split."""
    from inferlab.serving.disaggregation import Pool, simulate_disaggregated
    positive_int("max_replicas", max_replicas, minimum=2)
    fraction("attainment", attainment)
    w = scenario.workload(rate_per_s) if workload is None else workload
    sc = scenario
    att, best = {}, None
    for total in range(2, int(max_replicas) + 1):
        for p in range(1, total):
            r = simulate_disaggregated(w, sc.model, sc.accelerator,
                                       prefill=Pool(p, sc.tp, None, sc.precision, PrefillFirst()),
                                       decode=Pool(total - p, sc.tp, None, sc.precision, ContinuousBatching()),
                                       kv_link=kv_link)
            att[p, total - p] = float(r.meets(sc.slo).mean())
        meeting = [(a, k) for k, a in att.items() if sum(k) == total and a >= attainment]
        if meeting:
            best = max(meeting)[1]
            break
    return PoolSizing(float(rate_per_s), float(attainment), att, best)


# -- speculative decoding -------------------------------------------------------------------------------

@dataclass(frozen=True)
class SpeculativeSweep:
    """Speculative decoding's speed-up of a decode step per batch (at `context_tokens`), and p50 TPOT
    (s) of the scenario's traffic at each rate without and with it."""

    k: int
    acceptance: float
    tokens_per_verification: float
    context_tokens: int
    batches: tuple
    speedup: tuple
    rates: tuple
    p50_tpot_s: dict = field(hash=False)   # {"plain" | "speculative": (one per rate)}
    mean_batch: dict = field(hash=False)

    @property
    def break_even_batch(self) -> int | None:
        """The first batch of the sweep at which speculation no longer pays (speed-up <= 1); None if none."""
        for b, s in zip(self.batches, self.speedup):
            if s <= 1.0:
                return int(b)
        return None


def speculative_sweep(scenario: Scenario, *, k: int = 4, acceptance: float = 0.7, draft="mtp",
                      batches=(1, 4, 16, 64, 256, 1024), context_tokens: int = 128, rates=()) -> SpeculativeSweep:
    """speculative.speedup at each batch (one replica of the scenario); then the scenario's traffic at
    each of `rates`, plain and speculative (draft: 'mtp' or a ModelConfig)."""
    from inferlab.serving.speculative import Speculative, speedup
    from inferlab.serving.steptime import RooflineStepTime
    sc = scenario
    spec = Speculative(k, acceptance, draft)
    st = RooflineStepTime(sc.model, sc.accelerator, sc.precision, tp=sc.tp)
    draft_st = None if spec.draft == "mtp" else RooflineStepTime(spec.draft, sc.accelerator, sc.precision, tp=sc.tp)
    gains = tuple(float(speedup(st, spec, int(b), int(context_tokens), draft_st, sc.model.n_layers)) for b in batches)
    rates = tuple(float(positive_float("rate", r)) for r in rates)
    tpot = {"plain": [], "speculative": []}
    batch = {"plain": [], "speculative": []}
    for rate in rates:
        w = sc.workload(rate)
        for label, s in (("plain", None), ("speculative", spec)):
            summ = sc.run(w, ChunkedPrefill(), speculative=s).summary(sc.slo)
            tpot[label].append(summ["tpot_s"]["p50"])
            batch[label].append(summ["batch"]["mean"])
    return SpeculativeSweep(int(k), float(acceptance), spec.tokens_per_verification, int(context_tokens),
                            tuple(int(b) for b in batches), gains, rates,
                            {key: tuple(v) for key, v in tpot.items()}, {key: tuple(v) for key, v in batch.items()})


# -- priorities -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PriorityLoad:
    """The scenario's traffic at one rate with a `high_share` of latency-sensitive ('high') requests,
    first come first served (chunked prefill) against priority order: per policy and class the p99
    TTFT and p99 TPOT (s)."""

    rate_per_s: float
    high_share: float
    p99_ttft_s: dict = field(hash=False)   # {(policy, class): s}
    p99_tpot_s: dict = field(hash=False)


def priority_load(scenario: Scenario, rate_per_s: float, *, high_share: float = 0.2) -> PriorityLoad:
    """FIFO (ChunkedPrefill) and PriorityScheduling on the same requests; classes 'high' and 'normal'."""
    from inferlab.serving.policies import PriorityScheduling
    from inferlab.serving.workload import with_priority
    positive_float("high_share", high_share, maximum=1.0)
    w = scenario.workload(rate_per_s)
    hi = np.random.default_rng(scenario.seed + 11).random(len(w)) < high_share
    w = with_priority(w, np.where(hi, "high", "normal"))
    ttft, tpot = {}, {}
    for label, policy in (("FIFO", ChunkedPrefill()), ("priority", PriorityScheduling())):
        r = scenario.run(w, policy)
        for cls, mask in (("high", hi), ("normal", ~hi)):
            ttft[label, cls] = _percentile(r.ttft_s[mask], 99)
            tpot[label, cls] = _percentile(r.tpot_s[mask], 99)
    return PriorityLoad(float(rate_per_s), float(high_share), ttft, tpot)


def request_time_s(scenario: Scenario, batch: int | None = None) -> float:
    """Seconds of one replica's time a mean request costs: one prefill of the mean prompt plus the mean
    output's share of decode steps at `batch` (None: the largest batch the KV pool holds at the mean
    context, at most 256). Its inverse is what one replica sustains, requests/s."""
    from inferlab.core.deployment import Deployment as _Dep
    from inferlab.core.latency import decode_step_time_s, prefill_time_s
    sc = scenario
    dep = _Dep(sc.accelerator, sc.precision, tp=sc.tp)
    prompt, out = sc.prompt.mean, sc.output.mean
    ctx = int(prompt + out)
    if batch is None:
        batch = max(1, min(256, int(kv_capacity_blocks(sc.model, sc.accelerator, sc.precision, sc.tp,
                                                       LAB_BLOCK_TOKENS) * LAB_BLOCK_TOKENS // ctx)))
    positive_int("batch", batch)
    return prefill_time_s(sc.model, dep, int(prompt)) + out * decode_step_time_s(sc.model, dep, ctx, batch) / batch


def sustainable_rate(scenario: Scenario, load: float = 1.0) -> float:
    """`load` times the requests/s one replica of the scenario sustains (`request_time_s` at the largest
    batch that fits), to 2 significant digits."""
    positive_float("load", load)
    return float(f"{load / request_time_s(scenario):.2g}")

"""The measurement suite: ceilings, the measured roofline, TTFT, ITL, one request, the batch
sweep, MBU and MFU, each beside the library's prediction from the measured ceilings.

Definitions (as vLLM's serving benchmark, benchmarks/benchmark_serving.py, uses them):
  TTFT  time to first token: from sending a request to receiving its first output token. Here
        (no queue, no network, no tokenizer) it is the prefill pass that yields the first token.
  ITL   inter-token latency: each gap between two consecutive output tokens of one request.
        Here one decode step: every sequence in the batch gets one token per step.
  TPOT  time per output token: (end-to-end latency - TTFT) / (output tokens - 1) of a request,
        i.e. the mean of its ITLs.
  MBU   bytes the library says one decode step moves (weights + KV cache + activations)
        / step time / measured read-only stream (ceilings.read_bandwidth; `mbu_copy`: / copy).
  MFU   FLOPs the library counts for the pass / its time / measured matmul FLOP/s.
"""
from __future__ import annotations

import gc
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone

from inferlab.core.costs import decode_costs, prefill_costs
from inferlab.core.latency import prefill_time_s
from inferlab.measure import device as _device
from inferlab.measure import plan as _plan
from inferlab.measure.ceilings import (STREAM_FREE_SHARE, bound_ceiling, ceiling_spread, choose_dtype, generator,
                                       measure_ceilings, robust_ceiling, roofline_sweep, torch_dtype)
from inferlab.measure.breakdown import profile_pass
from inferlab.measure.budget import StageBudgets
from inferlab.measure.fastpath import check_fast_path, device_probe
from inferlab.measure.drift import LinearProbes, dominant_linear
from inferlab.measure.paired import PairedRead
from inferlab.measure.profile import RESIDUAL_PROBES, measure_profile, pass_residual, time_probes
from inferlab.measure.runner import (decode_runner, decode_step, drop_kv_cache, fill_kv_cache_, random_model,
                                     token_pool)
from inferlab.measure.result import TARGETS, SCHEMA, SuiteResult
from inferlab.measure.timing import current_clock, time_fn, time_interleaved, using_clock
from inferlab.core.memory import weight_bytes
from inferlab.core.specs import get_accelerator
from inferlab.base.units import bytes_per_element
from inferlab.base.input_checks import positive_int
from inferlab.measure.derived import _decode_pred, _repredict, ceiling_estimates, finish, validity_reasons

CONTENTION_RETRY = 0.25  # re-measure a CPU point once if others took this much of our CPUs
CONTENTION_NOTE = 0.10   # list points measured while others took more than this of our CPUs
CONTENTION_CLEAN = 0.05  # efficiency rounds count only below this
PHASE_CEILING_S = 0.5    # time budget of each ceiling re-measured before and after a phase
PROFILE_MAX_KV = 16384   # decode attention profiled up to this many cached positions


def encroachment(contention, threads=None) -> float:
    """How much of the CPUs this run uses other processes took: their share of the machine
    beyond what `threads` threads leave spare (0 when unknown)."""
    import torch

    if contention is None:
        return 0.0
    return max(contention - _device.spare_share(threads or torch.get_num_threads()), 0.0)


def timed(fn, pool, kind: str, **kwargs):
    """time_fn, measured once more on a CPU if other processes took a large share of this
    run's CPUs meanwhile; the less disturbed of the two is kept (its contention is recorded)."""
    t = time_fn(fn, pool, device=kind, **kwargs)
    if kind == "cpu" and current_clock(kwargs.get("clock")) == "wall" and encroachment(t.contention) > CONTENTION_RETRY:
        again = time_fn(fn, pool, device=kind, **kwargs)
        if (again.contention or 0.0) < t.contention:
            t = again
    return t


def timed_interleaved(points, kind: str, **kwargs) -> list:
    """time_interleaved (every point once per round), measured once more on a CPU if other processes took a
    large share of this run's CPUs meanwhile (wall clock only: CPU time is not inflated by waiting); the less
    disturbed of the two sweeps is kept."""
    ts = time_interleaved(points, device=kind, **kwargs)
    if (kind == "cpu" and current_clock(kwargs.get("clock")) == "wall"
            and encroachment(ts[0].contention) > CONTENTION_RETRY):
        again = time_interleaved(points, device=kind, **kwargs)
        if (again[0].contention or 0.0) < ts[0].contention:
            ts = again
    return ts


class _Progress:
    """A tqdm bar on stderr (or nothing) over the plan's stage budgets in seconds (measure.budget): its total is
    their sum, so its estimate is honest from the first stage; messages are written above it. `budget` keeps the
    seconds each stage took (recorded in the run as `stage_elapsed_s`) and what each left out."""

    def __init__(self, budget: StageBudgets, enabled: bool, log):
        self.bar = None
        self.log = log
        self.budget = budget
        if enabled:
            from tqdm.auto import tqdm
            self.bar = tqdm(total=round(budget.total_s), file=sys.stderr, desc="measure", unit="s", leave=False,
                            dynamic_ncols=True)
            budget.on_check = self.update

    @property
    def stages(self) -> dict:
        return self.budget.elapsed_s

    def stage(self, name: str, text: str | None = None):
        self.budget.start(name)
        self.update()
        if self.bar is not None:
            self.bar.set_description(text or name)
        if self.log:
            self.log(text or name)

    def update(self, n: int = 1):
        if self.bar is not None:
            self.bar.n = min(round(self.budget.progress_s()), self.bar.total)
            self.bar.refresh()

    def close(self):
        self.budget.end()
        if self.bar is not None:
            self.bar.close()


def _auto_candidates(kind: str) -> list:
    import torch

    if kind == "cpu":
        return ["fp32", "bf16"]
    if kind == "cuda":
        return ["bf16"] if torch.cuda.is_bf16_supported() else ["fp16"]
    return ["fp16"]


def _resolve_plan(kind, info, free, *, quick, dtype, model, decode_mode, plan):
    """The plan, checked against free memory with the smallest candidate dtype, before any
    allocation (the exact dtype is checked again once the ceilings have chosen it)."""
    candidates = [dtype] if dtype != "auto" else _auto_candidates(kind)
    smallest = min(candidates, key=bytes_per_element)
    if plan is None:
        if model is None and kind != "cpu":
            plan = _plan.largest_fitting_plan(kind, smallest, free, quick=quick,
                                              cache_bytes=info.cache_bytes, decode_mode=decode_mode)
        else:
            plan = _plan.make_plan(kind, smallest, quick=quick, model=model,
                                   cache_bytes=info.cache_bytes, decode_mode=decode_mode)
    _plan.check_fits(replace(plan, dtype=smallest), free, f"{kind} ({info.name})")
    return plan, candidates


@dataclass(frozen=True)
class SuiteConfig:
    """One run of the suite, as asked for (run_suite). device: auto | cuda | mps | cpu. dtype: auto (bf16 on a
    GPU; on a CPU fp32 unless bf16's measured product is faster) or fp32 | bf16 | fp16; on a CPU a dtype whose
    product has no fast path (fastpath.py: under a quarter of fp32's rate in a one-second probe) is no candidate,
    and asked for by name it is refused with the probe's figures. model: a preset (cpu-0.5b, tiny) or a
    data/models.toml name; default cpu-0.5b on a CPU, the largest of llama-2-13b / llama-2-7b that fits on a GPU.
    plan: a measure.plan.Plan instead of the one made from quick, model and decode_mode. threads: CPU threads for
    this run (default: torch's, one per core). log: called with each stage's name. clock: "wall", or
    "thread-cpu" (a CPU device and threads=1 only): every timing of the run (ceilings, operator profile, points)
    by the CPU time of the thread that runs it, which a busy machine does not inflate (`timing.time_fn`); the
    streamed request (`_generate`) stays on the wall clock. drift_correction: rescale each calibrated prediction
    by its point's drift probe (drift.py; off by default: see docs/measuring.md)."""

    quick: bool = False
    device: str = "auto"
    dtype: str = "auto"
    model: object = None
    decode_mode: str = "auto"
    plan: object = None
    seed: int = 0
    progress: bool = True
    threads: int | None = None
    log: object = None
    clock: str = "wall"
    drift_correction: bool = False

    def __post_init__(self):
        if self.clock not in ("wall", "thread-cpu"):
            raise ValueError(f"clock must be 'wall' or 'thread-cpu'; got {self.clock!r}")
        if self.threads is not None:
            positive_int("threads", self.threads)
        if self.dtype != "auto":
            torch_dtype(self.dtype)


def run_suite(config: SuiteConfig | None = None, /, **options) -> SuiteResult:
    """Measure everything on one device and return the run (SuiteResult; .save(path) for JSON).
    `config` (a SuiteConfig), with any of its fields given as keywords on top (run_suite(quick=True, ...)).
    Raises DoesNotFitError before allocating anything if the plan cannot fit."""
    import torch

    config = replace(config or SuiteConfig(), **options)
    t_start = time.perf_counter()
    if config.threads is not None:
        saved_threads = torch.get_num_threads()
        torch.set_num_threads(int(config.threads))
        try:
            return run_suite(replace(config, threads=None))
        finally:
            torch.set_num_threads(saved_threads)
    kind = _device.resolve_kind(config.device)
    if config.clock == "thread-cpu" and (kind != "cpu" or torch.get_num_threads() != 1):
        raise ValueError(f"clock 'thread-cpu' needs a CPU device and threads=1 (one thread does all the work); got "
                         f"device {kind!r} with {torch.get_num_threads()} thread(s)")
    info = _device.describe(kind)
    free = _device.free_memory_bytes(kind)
    plan, candidates = _resolve_plan(kind, info, free, quick=config.quick, dtype=config.dtype, model=config.model,
                                     decode_mode=config.decode_mode, plan=config.plan)
    # Which dtypes have a fast product here (a second on a slow path): one without is no candidate, and asked for
    # by name it is refused before the run rather than timed for an hour.
    probe = device_probe(kind) if kind == "cpu" else None
    if probe is not None:
        if config.dtype != "auto":
            check_fast_path(kind, config.dtype, "dtype", probe)
        candidates = probe.usable(candidates)
    notes = [f"not measured: {reason}" for reason in (probe.excluded.values() if probe else ())]
    budgets = plan.budgets_s()
    if not plan.generate_tokens:
        budgets.pop("one request", None)
    bar = _Progress(StageBudgets(budgets), config.progress, config.log)
    try:
        with torch.inference_mode():
            with using_clock(config.clock):  # every timing of the run by one clock: ceilings, profile and points
                result = _measure(_Run(config, plan, kind, info, free, candidates, bar, notes, probe))
    finally:
        bar.close()
    if probe is not None:
        result.data["dtype_probe"] = probe.to_dict()
    result.data["stage_elapsed_s"] = {name: round(t, 3) for name, t in bar.stages.items()}
    result.data["stage_budget"] = bar.budget.to_dict()
    result.data["notes"].extend(bar.budget.notes())
    result.data["elapsed_s"] = time.perf_counter() - t_start
    return result


def quick_suite(**kwargs) -> SuiteResult:
    """run_suite(quick=True, ...): fewer points, each stage within its budget (under 5 min on two CPU cores;
    docs/measuring.md)."""
    return run_suite(quick=True, **kwargs)


@dataclass
class _Run:
    """What the stages of one run share: set by run_suite, then filled in stage by stage (_measure)."""

    config: SuiteConfig
    plan: object
    kind: str
    info: object
    free: float
    candidates: list
    bar: object
    notes: list
    probe: object = None
    ceil: object = None
    chosen: str = ""
    reason: str = ""
    acc: object = None
    need: dict = None
    copy_bytes: float = 0.0
    free_now: float = 0.0
    model: object = None
    mode: str = "eager"
    shared_cache: bool = False
    prof: dict = None
    probes: object = None
    paired: object = None
    gen: object = None
    step: dict = None
    ceil_best: object = None
    ceil_after: object = None
    roof: list = field(default_factory=list)
    phases: list = field(default_factory=list)
    breakdown: list = field(default_factory=list)
    used_modes: set = field(default_factory=set)
    points: dict = field(default_factory=dict)  # ttft, itl, batch (and their predictions), generation

    @property
    def budget(self):
        return self.bar.budget

    @property
    def interleave(self) -> bool:
        """How each sweep's points are timed. By a thread's CPU time (the notebooks' live checks, on a machine
        that may be busy): round-robin over the sweep, so a change in the host's load falls on every point
        alike. By the wall clock (`inferlab measure`): each point round-robin with a probe of its dominant
        operator (drift.py), whose ratio to the profile rescales that point's calibrated prediction."""
        return self.config.clock == "thread-cpu"

    def around(self, phase: str, when: str) -> None:
        """The ceilings re-measured before or after a phase (PHASE_CEILING_S each)."""
        c = measure_ceilings(self.kind, [self.chosen], copy_bytes=self.copy_bytes, matmul_n=self.plan.matmul_n,
                             memory_bytes=self.free, seed=self.config.seed + 5 + len(self.phases), max_time_s=PHASE_CEILING_S)
        self.phases.append({"phase": phase, "when": when, "copy_bytes_per_s": c.copy_bytes_per_s,
                            "read_bytes_per_s": c.read_bytes_per_s,
                            "matmul_flops_per_s": c.matmul_flops_per_s[self.chosen],
                            "contention": c.copy_timing.contention})

    def around_point(self, batch_, q_len, past, fn, pool, paired=None, **timing):
        """The point timed round-robin with the probe of its dominant operator (drift.py), and with
        the read-only stream `paired` (a PairedRead, paired.py) where given."""
        key, m = dominant_linear(self.prof, self.plan.model, self.plan.precision, self.ceil.accelerator(),
                                 batch_, q_len, past)
        # time_interleaved's budget is per call of a round; the probe's calls are short, so half of it
        # leaves the point the time it had alone
        timing["max_time_s"] = timing["max_time_s"] / 2
        inner = lambda pts: timed_interleaved(pts, self.kind, **timing)  # noqa: E731
        return self.probes.around(key, m, fn, pool, paired.timer(inner) if paired is not None else inner)

    def runner(self, batch: int, start_pos: int, n_inputs: int) -> tuple:
        """(fn, pool, mode used) of a decode step (decode_runner: a compiled step is checked first), noting why
        a mode fell back."""
        pool = token_pool(self.plan.model, batch, 1, n_inputs, self.kind, self.gen)
        fn, used, note = decode_runner(self.model, pool, start_pos, self.mode, self.kind)
        self.used_modes.add(used)
        if note and note not in self.notes:
            self.notes.append(note)
        return fn, pool, used


def _measure(run: _Run) -> SuiteResult:
    """The stages in order, each within its budget (plan.stage_budget_s; measure.budget)."""
    for stage in (_ceilings_stage, _roofline_stage, _build_stage, _profile_stage, _ttft_stage, _itl_stage,
                  _request_stage, _batch_stage):
        stage(run)
    return _final_stage(run)


def _ceilings_stage(run: _Run) -> None:
    """Ceilings first, in a share of the free memory (the copy buffer is several times the cache), and the
    dtype chosen from them. Never cut by its budget: the dtype choice does not depend on the time."""
    plan, kind = run.plan, run.kind
    run.bar.stage("ceilings")
    mm_dtypes = sorted(set(run.candidates) | ({"fp32", "bf16"} if kind == "cpu" else set()))
    if run.probe is not None:
        mm_dtypes = run.probe.usable(mm_dtypes)
    run.copy_bytes = min(plan.copy_bytes, STREAM_FREE_SHARE * run.free)
    run.ceil = ceil = measure_ceilings(kind, mm_dtypes, copy_bytes=run.copy_bytes, matmul_n=plan.matmul_n,
                                       memory_bytes=run.free, seed=run.config.seed)
    run.notes.extend(s["reason"] for s in ceil.matmul_shrunk.values())
    run.bar.update(1)
    if run.config.dtype == "auto":
        run.chosen, run.reason = choose_dtype(kind, ceil.matmul_flops_per_s)
        if run.probe is not None and run.probe.excluded:  # the excluded dtypes were never timed at the planned size
            run.reason = f"{run.chosen}: " + "; ".join(run.probe.excluded.values())
    else:
        run.chosen, run.reason = run.config.dtype, "requested"
    run.plan = plan = replace(plan, dtype=run.chosen)
    run.free_now = _device.free_memory_bytes(kind)
    run.need = _plan.check_fits(plan, run.free_now, f"{kind} ({run.info.name})")
    run.acc = ceil.accelerator(f"measured-{kind}")
    wbytes = weight_bytes(plan.model, plan.precision)
    if run.info.cache_bytes and wbytes < 2 * run.info.cache_bytes:
        run.notes.append(f"the weights ({wbytes / 2**20:.0f} MiB) are less than twice the cache "
                         f"({run.info.cache_bytes / 2**20:.0f} MiB): decode times may be flattered by it")


def _roofline_stage(run: _Run) -> None:
    run.bar.stage("roofline")
    run.roof = roofline_sweep(run.kind, run.chosen, run.plan.roofline_shape, run.plan.roofline_ms, run.acc,
                              cache_bytes=run.info.cache_bytes, max_pool_bytes=min(2e9, 0.2 * run.free_now),
                              seed=run.config.seed, max_time_s=run.plan.point_time_s / 2, budget=run.budget)


def _build_stage(run: _Run) -> None:
    plan = run.plan
    run.bar.stage("building", f"building {plan.model.name}")
    run.model = random_model(plan.model, run.kind, run.chosen, run.config.seed)
    run.mode = _plan.resolve_decode_mode(plan.decode_mode, run.kind)
    # A compiled step recompiles for every new KV-cache shape (a minute each on two cores): one
    # cache with room for the residual probes' batches and the B = 1 phase serves both.
    run.shared_cache = run.mode == "compile"
    if run.shared_cache:
        run.model.setup_cache(max(b for b, _ in RESIDUAL_PROBES), plan.max_seq_len)


def _profile_stage(run: _Run) -> None:
    """The operator profile (profile.measure_profile: as many rounds as its budget allows, at least one), with
    the pass residual probed after each round, then the drift probes and the paired read stream."""
    plan, kind, cfg, seed = run.plan, run.kind, run.plan.model, run.config.seed
    run.bar.stage("operator profile")
    fitted = _plan.fit_batches(plan, run.free_now).batches
    e2e_sizes = set(plan.prompt_lens) | {1} | set(plan.contexts) | set(fitted) | {b * plan.batch_context
                                                                                  for b in fitted}
    # After each profile round, one decode pass at each residual probe: what composing the
    # operators into a pass costs beyond them, at shapes no point uses, under the same drift.
    probe_rounds = []
    prof = measure_profile(cfg, kind, run.chosen, max_tokens=max(max(plan.prompt_lens), plan.generate_prompt),
                           max_batch=plan.batch_cap,
                           max_kv_positions=min(max(max(plan.contexts), plan.batch_cap * plan.batch_context),
                                                PROFILE_MAX_KV),
                           e2e_sizes=e2e_sizes, cache_bytes=run.info.cache_bytes,
                           pool_bytes=min(1e9, 0.1 * run.free_now), point_time_s=plan.point_time_s / 4,
                           seed=seed + 3, budget=run.budget,
                           after_round=lambda r: probe_rounds.append(
                               time_probes(run.model, kind, seed=seed + r, point_time_s=plan.point_time_s / 4,
                                           mode=run.mode, keep_cache=run.shared_cache)))
    # Compiled steps can beat their operators timed alone: the residual is then signed and
    # belongs to decode passes only (the prefill passes run eager).
    compiled = all(p.get("decode_mode") == "compile" for r in probe_rounds for p in r)
    prof["residual_s"], prof["residual"] = pass_residual(prof, cfg, plan.precision, run.ceil.accelerator(),
                                                         probe_rounds, signed=compiled)
    if compiled:
        prof["residual_scope"] = "decode"
    run.prof = prof
    # Drift probes: each point is timed between two probes of its dominant operator (drift.py).
    run.probes = LinearProbes(prof, cfg, kind, run.chosen, cache_bytes=run.info.cache_bytes,
                              pool_bytes=min(1e9, 0.1 * run.free_now), seed=seed + 9)
    # Decode MBU at B = 1 against the read-only stream timed in the same rounds as the step (paired.py),
    # with the stream's kernel that read fastest at the start and the ceilings' buffer size.
    if run.config.clock != "thread-cpu":
        rk = run.ceil.read_by_kernel
        run.paired = PairedRead(kind, run.copy_bytes, max(rk, key=rk.get) if rk else "sum", seed=seed + 11)
    run.bar.update(1)
    if not run.shared_cache:
        run.model.setup_cache(1, plan.max_seq_len)
    run.gen = generator(kind, seed + 1)
    fill_kv_cache_(run.model, run.gen)
    run.bar.update(1)


def _sweep(run: _Run, label: str, sizes, runs, *, prediction, pair=None, **timing):
    """Yields (size, Timing, drift probe or None) of every point of a sweep that its stage's budget allows: all
    of them round-robin by a thread's CPU time, else one point at a time with its drift probe (the first always; a
    later one only while the budget lasts, each point's time limit shrunk to share what is left). A generator:
    a point's paired read stream (`pair(size)`) is recorded by the caller before the next point is timed."""
    if run.interleave:  # round-robin over the sweep: a change in the host's load falls on every point alike
        ts = timed_interleaved([(fn, pool) for fn, pool, _ in runs], run.kind, clock=run.config.clock, **timing)
        yield from ((s, t, None) for s, t in zip(sizes, ts))
        return
    point_time_s = timing.pop("max_time_s")
    for i, (s, (fn, pool, _)) in enumerate(zip(sizes, runs)):
        if i and run.budget.spent():
            run.budget.skip(f"{label} {s}")
            continue
        t, probe = run.around_point(*prediction(s), fn, pool,
                                    paired=run.paired if pair is not None and pair(s) else None,
                                    max_time_s=run.budget.share_s(point_time_s, len(sizes) - i), **timing)
        yield s, t, probe


def _breakdown(run: _Run, label: str, entry: dict, fn, call_s: float) -> None:
    """The per-operator breakdown (torch.profiler) of one pass, on a CPU: one warm-up and up to three profiled
    calls, fewer (or none, recorded as skipped) when the stage's budget has no room for them at `call_s` a call."""
    if run.kind != "cpu":  # CPU time per op is the op's time only where ops run synchronously
        return
    repeats = min(3, int(run.budget.left_s() / max(call_s, 1e-9)) - 1)
    if repeats < 1:
        run.budget.skip(f"per-operator breakdown at {label}")
        return
    run.breakdown.append({**entry, **profile_pass(run.model, fn, repeats=repeats)})


def _ttft_stage(run: _Run) -> None:
    """TTFT against prompt length, B = 1."""
    plan, kind, cfg, prec, model = run.plan, run.kind, run.plan.model, run.plan.precision, run.model
    run.bar.stage("TTFT")
    run.around("ttft", "before")
    ttft, ttft_pred = [], []
    prefill = lambda tok: model(tok, 0, all_logits=False)  # noqa: E731
    runs = [(prefill, token_pool(cfg, 1, s, 3, kind, run.gen), "eager") for s in plan.prompt_lens]
    for s, t, probe in _sweep(run, "prompt", plan.prompt_lens, runs, prediction=lambda s: (1, s, 0),
                              warmup=1, repeats=10, min_repeats=3, max_time_s=plan.point_time_s):
        c = prefill_costs(cfg, 1, s, prec).total
        ttft.append({"prompt_len": s, "batch": 1, "timing": t.to_dict(), "flops": float(c.flops),
                     "bytes": float(c.bytes), "mfu": float(c.flops) / t.median_s / run.acc.peak(run.chosen),
                     "drift": probe})
        ttft_pred.append({"prompt_len": s, "predicted_s": float(prefill_time_s(cfg, run.acc, s, 1, prec))})
        run.bar.update(1)
    big = max(ttft, key=lambda p: p["prompt_len"])
    big_tok = token_pool(cfg, 1, big["prompt_len"], 1, kind, run.gen)[0]
    if kind != "cpu":
        run.notes.append("per-operator breakdown (torch.profiler) is taken on CPUs only: on a GPU the "
                         "CPU time of an op is its launch, and kernel attribution is not implemented")
    _breakdown(run, f"prefill S = {big['prompt_len']}", {"batch": 1, "q_len": big["prompt_len"], "past_len": 0},
               lambda: model(big_tok, 0, all_logits=False), big["timing"]["median_s"])
    run.around("ttft", "after")
    run.points.update(ttft=ttft, ttft_pred=ttft_pred)


def _itl_stage(run: _Run) -> None:
    """ITL against context length, B = 1, the eager step timed beside a compiled one while the budget lasts."""
    plan, kind, cfg, prec, model = run.plan, run.kind, run.plan.model, run.plan.precision, run.model
    run.bar.stage("ITL")
    run.around("itl", "before")
    itl, itl_pred = [], []
    fill_kv_cache_(model, run.gen)
    runs = [run.runner(1, ctx - 1, 8) for ctx in plan.contexts]
    by_ctx = dict(zip(plan.contexts, runs))
    for ctx, t, probe in _sweep(run, "context", plan.contexts, runs, prediction=lambda c: (1, 1, c - 1),
                                pair=lambda c: True, warmup=2, repeats=30, min_repeats=5,
                                max_time_s=plan.point_time_s):
        _, pool, used = by_ctx[ctx]
        itl.append(_decode_point(cfg, prec, run.acc, run.chosen, 1, ctx, t))
        itl[-1]["decode_mode"] = used
        itl[-1]["drift"] = probe
        if run.paired is not None:
            itl[-1]["paired"] = run.paired.record(itl[-1]["bytes"], t)
        if used != "eager":  # the same step as eager code, right after: both are recorded
            if run.budget.spent():
                run.budget.skip(f"the eager step beside context {ctx}")
            else:
                itl[-1]["eager"] = _eager_beside(model, pool, ctx - 1, kind, plan.point_time_s)
        itl_pred.append(_decode_pred(cfg, prec, run.acc, 1, ctx))
        run.bar.update(1)
    runs = by_ctx = None  # the decode runners (CUDA graphs) are freed here
    ctx0 = min(plan.contexts)
    one = token_pool(cfg, 1, 1, 1, kind, run.gen)[0]
    _breakdown(run, f"decode context {ctx0}", {"batch": 1, "q_len": 1, "past_len": ctx0 - 1},
               lambda: model(one, ctx0 - 1, all_logits=False), itl[0]["timing"]["median_s"])
    run.around("itl", "after")
    run.points.update(itl=itl, itl_pred=itl_pred)


def _request_stage(run: _Run) -> None:
    """One request as a server streams it: prefill, then one token per step."""
    run.points["generation"] = {}
    if run.plan.generate_tokens:
        run.bar.stage("one request")
        run.points["generation"] = _generate(run.model, run.plan.model, run.plan, run.kind, run.gen, run.mode)
        run.bar.update(1)


def _batch_stage(run: _Run) -> None:
    """The decode step against batch size at a fixed context, up to the memory limit, while the budget lasts."""
    kind, cfg, prec, model = run.kind, run.plan.model, run.plan.precision, run.model
    run.bar.stage("batch sweep")
    drop_kv_cache(model, kind)
    # The weights are allocated already: what is free now plus them is what fit_batches divides.
    run.plan = plan = _plan.fit_batches(run.plan, _device.free_memory_bytes(kind) + weight_bytes(cfg, prec))
    batch, batch_pred = [], []
    run.around("batch", "before")
    if plan.batches:
        model.setup_cache(max(plan.batches), plan.batch_context)
        fill_kv_cache_(model, run.gen)
        runs = [run.runner(b, plan.batch_context - 1, 4) for b in plan.batches]
        by_b = dict(zip(plan.batches, runs))
        for b, t, probe in _sweep(run, "batch", plan.batches, runs, prediction=lambda b: (b, 1, plan.batch_context - 1),
                                  pair=lambda b: b == 1, warmup=2, repeats=20, min_repeats=3,
                                  max_time_s=plan.point_time_s):
            _, pool, used = by_b[b]
            point = _decode_point(cfg, prec, run.acc, run.chosen, b, plan.batch_context, t)
            point["drift"] = probe
            if run.paired is not None and b == 1:
                point["paired"] = run.paired.record(point["bytes"], t)
            point["throughput_tokens_per_s"] = b / t.median_s
            point["decode_mode"] = used
            if used != "eager" and b == 1:
                point["eager"] = _eager_beside(model, pool, plan.batch_context - 1, kind, plan.point_time_s)
            batch.append(point)
            pred = _decode_pred(cfg, prec, run.acc, b, plan.batch_context)
            pred["predicted_tokens_per_s"] = b / pred["predicted_s"]
            batch_pred.append(pred)
            if b > 1:  # the per-operator view of each batch size (B = 1: the ITL entry)
                toks = pool[0]
                _breakdown(run, f"batch {b}", {"batch": b, "q_len": 1, "past_len": plan.batch_context - 1},
                           lambda: model(toks, plan.batch_context - 1, all_logits=False), t.median_s)
            run.bar.update(1)
        runs = by_b = None
    else:
        run.notes.append("no batch fits beside the weights at the batch context")
    run.around("batch", "after")
    run.step = decode_step(model)  # which decode step was timed (a compiled one only if it matched eager's logits)
    run.model = model = None
    run.probes.release()
    if run.paired is not None:
        run.paired.release()
        run.paired = None
    _release(kind)
    run.points.update(batch=batch, batch_pred=batch_pred)


def _final_stage(run: _Run) -> SuiteResult:
    """The ceilings again (a drift between start and end means the machine changed under us), the robust
    ceilings, every point re-predicted at them, and the run's document."""
    kind, chosen, ceil, notes, pts = run.kind, run.chosen, run.ceil, run.notes, run.points
    run.bar.stage("ceilings again")
    after = measure_ceilings(kind, [chosen], copy_bytes=run.copy_bytes, matmul_n=run.plan.matmul_n,
                             memory_bytes=run.free, seed=run.config.seed + 2, max_time_s=1.0)
    run.bar.update(1)
    for what, a, b in (("copy bandwidth", ceil.copy_bytes_per_s, after.copy_bytes_per_s),
                       (f"{chosen} matmul rate", ceil.matmul_flops_per_s[chosen],
                        after.matmul_flops_per_s[chosen])):
        if abs(b / a - 1) > 0.15:
            notes.append(f"{what} changed {b / a - 1:+.0%} between the start and the end of the run: "
                         "the machine's speed varied (shared host?); ratios carry that uncertainty")
    if kind == "cpu":
        _contention_note(notes, ceil, after, run.roof, pts["ttft"], pts["itl"], pts["batch"], clock=run.config.clock)
    # The ceilings every ratio and prediction uses: the median of the estimates taken in the run
    # (start, before and after each phase, end), so one taken during a burst of the host does not
    # move them; the highest of each serves only the validity check (MBU, MFU <= 1 against it).
    est = ceiling_estimates(ceil, after, run.phases, chosen)
    best = replace(ceil, copy_bytes_per_s=robust_ceiling(est["copy"], "copy bandwidth"),
                   read_bytes_per_s=robust_ceiling(est["read"], "read stream"),
                   matmul_flops_per_s={**ceil.matmul_flops_per_s,
                                       chosen: robust_ceiling(est["matmul"], "matmul rate")})
    run.acc = best.accelerator(f"measured-{kind}")
    pts["ttft_pred"], pts["itl_pred"], pts["batch_pred"] = _repredict(
        run.plan.model, run.plan.precision, run.acc, chosen, pts["ttft"], pts["itl"], pts["batch"],
        best.read_bytes_per_s)
    run.ceil_best, run.ceil_after = best, after
    data = _assemble(run)
    data["ceilings_start"] = ceil.to_dict()
    data["ceilings_max"] = {k: bound_ceiling(v) for k, v in est.items()}
    data["summary"]["ceilings"] = {k: ceiling_spread(v) for k, v in est.items()}
    data["ceilings_phases"] = run.phases
    data["profile"] = run.prof
    finish(data, run.breakdown)
    dr = data["summary"].get("drift")
    if dr and dr["drifting"]:
        notes.append(f"DRIFTING: the drift probes moved {dr['drift']:.0%} (tolerance {dr['tolerance']:.0%}; "
                     f"the host ran at {dr['min']:.2f}-{dr['max']:.2f}x the profile's time): "
                     + ("the calibrated predictions are corrected by each point's probe, but a host moving this "
                        "much is not followed exactly" if run.config.drift_correction else
                        "the calibrated predictions are not corrected (drift_correction off) and carry it"))
    result = SuiteResult(data)
    data["checks"] = {k: c.to_dict() for k, c in result.checks().items()}
    return result


def _contention_note(notes, ceil, after, *sweeps, clock="wall"):
    shares = [p["timing"].get("contention") for sweep in sweeps for p in sweep]
    for c in (ceil, after):
        shares += [c.copy_timing.contention] + [t.contention for t in c.matmul_timing.values()]
    shares = [encroachment(x) for x in shares if x is not None]
    bad = [x for x in shares if x > CONTENTION_NOTE]
    if bad:
        notes.append(f"{len(bad)} of {len(shares)} timings ran while other processes took more than "
                     f"{CONTENTION_NOTE:.0%} of the CPUs this run uses (up to {max(bad):.0%}; read from "
                     "/proc/stat): " + ("timed by the thread's CPU time, so waiting for a CPU is not counted, "
                                        "but caches and memory bandwidth shared with them may still slow them"
                                        if clock == "thread-cpu" else
                                        "those times are inflated; rerun on a quiet machine, or with fewer threads"))


def _release(kind: str) -> None:
    import torch

    gc.collect()
    if kind == "cuda":
        torch.cuda.empty_cache()


def _decode_point(cfg, prec, acc, dtype, b, ctx, t) -> dict:
    c = decode_costs(cfg, b, ctx, prec).total
    return {"batch": b, "context_len": ctx, "timing": t.to_dict(), "flops": float(c.flops),
            "bytes": float(c.bytes), "mbu": float(c.bytes) / t.median_s / acc.hbm_bytes_per_s,
            "mfu": float(c.flops) / t.median_s / acc.peak(dtype)}


def _eager_beside(model, pool, start_pos, kind, point_time_s) -> dict:
    """The eager decode step at the same point, timed right after the compiled one."""
    t = timed(lambda tok: model(tok, start_pos, all_logits=False), pool, kind, warmup=1, repeats=30,
              min_repeats=5, max_time_s=point_time_s)
    return {"decode_mode": "eager", "timing": t.to_dict()}


def _generate(model, cfg, plan, kind, gen, mode) -> dict:
    """Greedy generation of one request, timed as a streaming client sees it: TTFT until the
    first token is on the host, then each ITL until the next one is. Eager unless the decode
    mode is compile (a CUDA graph is per position, so a fresh one per token would be unfair);
    compiled, only the decode steps run compiled (the prefill runs eager, as the TTFT sweep)."""
    import torch

    _device_sync = _device.synchronize
    run = model
    used = "eager"
    if mode == "compile" and model.__dict__.get("_inferlab_compiled") is not None:
        run, used = model.__dict__["_inferlab_compiled"], "compile"
    p, n = plan.generate_prompt, plan.generate_tokens

    def once(prompt, n_tokens):
        _device_sync(kind)
        t0 = time.perf_counter()
        nxt = model(prompt, 0, all_logits=False).argmax(-1)
        nxt.cpu()  # the token is on the host: it could be streamed
        t_first = time.perf_counter()
        gaps, last = [], t_first
        for i in range(n_tokens - 1):
            nxt = run(nxt, p + i, all_logits=False).argmax(-1)
            nxt.cpu()
            now = time.perf_counter()
            gaps.append(now - last)
            last = now
        return t_first - t0, gaps, last - t0

    prompts = token_pool(cfg, 1, p, 2, kind, gen)
    once(prompts[0], min(n, 3))  # warm-up: first-call costs are not part of a request
    ttft, gaps, e2e = once(prompts[1], n)
    return {"prompt_len": p, "output_tokens": n, "ttft_s": ttft, "itl_s": gaps,
            "tpot_s": (e2e - ttft) / max(n - 1, 1), "e2e_s": e2e, "decode_mode": used}


def _assemble(run: _Run) -> dict:
    """The run's document (schema inferlab.measure/1) from its stages' results, before `finish`."""
    import torch

    plan, kind, info, ceil, after, acc, notes = run.plan, run.kind, run.info, run.ceil_best, run.ceil_after, run.acc, run.notes
    pts = run.points
    ttft, itl, batch = pts["ttft"], pts["itl"], pts["batch"]
    datasheet = None
    if info.datasheet:
        a = get_accelerator(info.datasheet)
        datasheet = {"name": a.name, "hbm_bytes_per_s": a.hbm_bytes_per_s, "memory_bytes": a.memory_bytes,
                     "peak_flops_per_s": dict(a.peak_flops_per_s), "source": a.source,
                     "reported_memory_bytes": a.reported_memory_bytes,
                     "reported_memory_source": a.reported_memory_source}
    b1 = next((p for p in batch if p["batch"] == 1), itl[0] if itl else None)
    big = max(ttft, key=lambda p: p["prompt_len"]) if ttft else None
    decode_used = "/".join(sorted(run.used_modes)) or run.mode
    config = {"model": asdict(plan.model), "dtype": plan.dtype, "dtype_reason": run.reason,
              "decode_mode": decode_used, "decode_step": run.step, "drift_correction": run.config.drift_correction,
              "threads": torch.get_num_threads(),
              "clock": run.config.clock, "plan": plan.to_dict(), "memory_needed": run.need}
    return {
        "schema": SCHEMA,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "elapsed_s": 0.0,
        "device": info.to_dict(),
        "versions": _device.versions(),
        "config": config,
        "ceilings": ceil.to_dict(),
        "ceilings_after": after.to_dict(),
        "measurements": {"roofline": run.roof, "ttft": ttft, "itl": itl, "batch": batch,
                         "batch_memory_limit": plan.batch_limit,
                         "generation": pts["generation"]},
        "predictions": {
            "accelerator": {"name": acc.name, "memory_bytes": acc.memory_bytes,
                            "hbm_bytes_per_s": acc.hbm_bytes_per_s,
                            "peak_flops_per_s": dict(acc.peak_flops_per_s)},
            "method": "inferlab.core.latency.prefill_time_s / decode_step_time_s: per-operator roofline "
                      "at the measured ceilings with MFU = MBU = 1; calibrated_s: "
                      "inferlab.measure.calibrate (roofline / profiled efficiency per operator, "
                      "plus the uncounted operators and the per-step overhead, measured)",
            "datasheet": datasheet,
            "ttft": pts["ttft_pred"], "itl": pts["itl_pred"], "batch": pts["batch_pred"]},
        "summary": {
            "mbu_b1": (b1["paired"]["mbu"] if b1 and b1.get("paired") else b1["mbu"] if b1 else None),
            "mbu_context": b1["context_len"] if b1 else None,
            "mbu_b1_against": ("read-only stream timed in the same rounds as the step (median of the rounds' "
                               "ratios; measure.paired)" if b1 and b1.get("paired")
                               else "read-only stream (median of the run's estimates)"),
            "mbu_b1_run_median": b1["mbu"] if b1 else None,
            "mbu_b1_copy": b1.get("mbu_copy") if b1 else None,
            "mbu_b1_eager": (b1.get("eager") or {}).get("mbu") if b1 else None,
            "mfu_prefill": big["mfu"] if big else None,
            "mfu_prompt_len": big["prompt_len"] if big else None,
            "targets": TARGETS.get(kind),
            "weights_bytes": weight_bytes(plan.model, plan.precision)},
        "notes": notes,
    }

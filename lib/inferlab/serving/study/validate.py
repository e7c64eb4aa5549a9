"""Does the simulator predict a real server? The live loop against the simulation of its workload.

On the device present: time every operator class of the model alone (`measure.profile`), then at
each arrival rate run the same workload twice, live (`serving.study.live`: the torch decoder serving
requests on the wall clock) and simulated (`serving.simulate` stepping on `ProfileStepTime`: the
profile composed into step times, never a live step), and compare the percentiles users see:

    error = simulated / live - 1    for p50 and p99 of TTFT and of ITL, at each rate

Bounds: |error| <= 15 % at p50 and <= 25 % at p99. Rates are set from the capacity
the profile predicts (the throughput of a simulated saturating burst): 0.3x (light), 0.6x
(moderate), 0.85x (near saturation) and 1.3x (overloaded: reported, not bounded, since queueing
there amplifies any step error without limit), unless given. Every live step's duration is also
set beside the profile's prediction of that step's work (`steps` error), which separates a
step-time error from a scheduling difference.

Engines (`serving.study.engines`): 'inferlab', the project's own loop (`serving.study.live`) simulated on the
operator profile (`serving.study.profiled`); 'transformers', Hugging Face transformers' continuous
batching (`serving.study.engines.transformers_cb`), simulated with its scheduler
(`policies.TransformersFIFO`) on a step time fitted to a calibration run of that engine
(`serving.study.fitted`: a burst and a few lone prompts, a workload other than the ones predicted),
one before and one after each rate (`serving.study.bracketing`), and scaled over time by the host's
speed from a probe the engine runs at every step (`serving.study.hostspeed`), on the brackets'
probe-normalized fits: `comparison` and `summary.rates` are the judged prediction's (PREDICTION,
'probe-tracked'), `split` the other probe prediction's, `bracketed` the prediction without the probe.
Each run also records `sensitivity` (step_sensitivity: how far a uniform 5 % step error moves each
simulated percentile), and `repredict` re-simulates a record's runs on another step time.
Each record's `summary` names the engine, its version and, per rate fraction, the four errors.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from inferlab.serving.metrics import SLO
from inferlab.serving.steptime import StepShape
from inferlab.serving.study.hostspeed import SpeedTrackedStepTime, SplitSpeedStepTime
from inferlab.serving.study.checks import (BOUNDS, P50_BOUND, P99_BOUND, QUANTILES, STEP_SENSITIVITY,  # noqa: F401
                                           SimSetup, capacity_requests_per_s, compare, quantiles,
                                           relative_error, replay_check, step_errors, step_sensitivity)
from inferlab.serving.workload import LengthDist, Workload, synthetic
from inferlab.specs import ModelConfig, Precision, check_model

LOAD_FACTORS = (0.3, 0.6, 0.85, 1.3)
LOAD_NAMES = ("light", "moderate", "near saturation", "overloaded")
STEP_MODELS = ("profile", "fitted")  # what the simulator steps on: the operator profile, or a fit to calibrations
BOUNDED_UP_TO = 1.0  # fractions of capacity above this are reported, not held to the bounds
# Requests served at each rate. A TTFT p99 over n requests interpolates between the two slowest
# (numpy's linear percentile puts it 0.99 (n - 1) ranks up): it is close to the max, and one
# request decides it. 20 keeps a whole transformers validation, calibrations included, within
# minutes on a 2-core host (its durations: docs/lab-notes.md).
REQUESTS_PER_RATE = 20
# transformers' token budget per step (its max_batch_tokens) in the validation. With a budget that
# holds a whole prompt, a burst arriving just after a step began waits that whole prefill, and the
# TTFT p99 turns on which side of a step boundary the burst falls (knife-edged: docs/glossary.md);
# chunks of 64 make the steps short enough that a 5 % step error no longer moves it past its bound,
# for somewhat less capacity (the runs that showed it: docs/lab-notes.md).
MAX_BATCH_TOKENS = 64
# The predictions a transformers run makes from its probe (serving.study.hostspeed), both on the mean of
# its two brackets' probe-normalized fits (docs/glossary.md): every step x the host's speed
# ('probe-tracked', judged), or only its decode part x the speed and its prompt-chunk part x speed ** 0.5
# ('split'). Of predictions that did equally well on the development records, the simpler is judged
# (the counts: docs/lab-notes.md). PREDICTION is the one judged against the bounds (the run's
# `comparison` and summary.rates), and the only one a run computes. Older records also kept the others
# beside it (under PREDICTION_KEYS[name], `bracketed`: the brackets' raw fits without the probe, and
# `first_calibration_only`); `alternatives` recomputes all of them from what every record keeps
# (benchmarks/serving_alternatives.py).
PREDICTIONS = ("probe-tracked", "split")
PREDICTION = "probe-tracked"
PREDICTION_KEYS = {"probe-tracked": "tracked", "split": "split"}
PREDICTION_MODELS = {"probe-tracked": SpeedTrackedStepTime, "split": SplitSpeedStepTime}
ALTERNATIVES = ("split", "bracketed", "first-calibration-only")

# The transformers engine's calibration run (one per bracket, serving.study.bracketing): lone prompts, then
# a burst. A burst of 8 fits the steps as well as a longer one in a fraction of the time. Each lone
# prompt, with few output tokens, is served alone before the next arrives, so the calibration holds
# steps that are a prompt chunk alone, and the chunk sizes a 64-token budget cuts (a whole 64, a 32
# remainder, three 64s and an 8) are among them: live runs at light load are full of such steps, which
# fits without them over-predict (the runs behind both choices: docs/lab-notes.md).
CALIBRATION_BURST = 8         # requests arriving at once in the transformers engine's calibration run
CALIBRATION_LONE = (16, 48, 64, 96, 200)  # prompts served alone before the burst, each in its own steps
CALIBRATION_LONE_OUTPUT = 4   # output tokens of each lone prompt
CALIBRATION_LONE_GAP_S = 2.0  # seconds between lone prompts: longer than the longest one takes to serve
                              # on a 2-core host, so none overlaps the next


def quantile_plot(record: dict):
    """TTFT and ITL distributions (percentile curves), live against simulated, one colour per rate.

    The panels are stacked (each reads at a text column's width) and the legend sits under them:
    one entry per rate (its colour) and one per line style (live solid, simulated dashed)."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.ticker import NullFormatter

    fig = Figure(figsize=(6.6, 6.4), layout="constrained")
    axes = fig.subplots(2, 1)
    handles = []
    for i, r in enumerate(record["runs"]):
        q = r["quantiles"]
        c = f"C{i}"
        for ax, m in ((axes[0], "ttft_s"), (axes[1], "itl_s")):
            ax.plot(np.asarray(q["live"][m]) * 1e3, q["live"]["percent"], "-", color=c)
            ax.plot(np.asarray(q["simulated"][m]) * 1e3, q["simulated"]["percent"], "--", color=c)
        handles.append(Line2D([], [], color=c, label=f"{r['rate_per_s']:.2f}/s ({r['load']})"))
    handles += [Line2D([], [], color="0.3", ls="-", label="live"),
                Line2D([], [], color="0.3", ls="--", label="simulated")]
    for ax, label in ((axes[0], "TTFT"), (axes[1], "ITL")):
        ax.set_xlabel(f"{label} (ms)")
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())   # minor labels on a log axis collide
        ax.set_ylabel("percentile")
        ax.grid(True, which="both", alpha=0.3)
    fig.legend(handles=handles, loc="outside lower center", ncols=min(3, len(handles)), fontsize=9)
    return fig


@dataclass(frozen=True)
class ValidationConfig:
    """One validation's settings; `validate` documents each (its keywords are these fields)."""

    model: ModelConfig | None = None
    dtype: str = "auto"
    device: str = "cpu"
    engine: str = "inferlab"
    step_model: str | None = None
    rates: tuple | None = None
    fractions: tuple = LOAD_FACTORS
    duration_s: float | None = None
    requests_per_rate: int | None = None
    prompt: LengthDist = LengthDist("lognormal", 128, 0.5, 16, 384)
    output: LengthDist = LengthDist("lognormal", 32, 0.5, 4, 96)
    policy: str = "prefill-first"
    max_num_seqs: int = 8
    max_len: int = 512
    cv: float = 1.0
    seed: int = 0
    slo: SLO = SLO()
    max_batch_tokens: int = MAX_BATCH_TOKENS
    page_size: int = 16
    calibration_gap_s: float = CALIBRATION_LONE_GAP_S
    repeat_disturbed: int | None = None   # engine 'vllm' only: VllmValidation.repeat_disturbed (None: its default)

    def workload(self, rate: float) -> Workload:
        """The workload served at `rate` requests per second (the same seed at every rate)."""
        if self.requests_per_rate is not None:
            return synthetic(rate, n_requests=self.requests_per_rate, prompt=self.prompt, output=self.output,
                             cv=self.cv, seed=self.seed)
        return synthetic(rate, duration_s=self.duration_s, prompt=self.prompt, output=self.output, cv=self.cv,
                         seed=self.seed)


@dataclass(frozen=True)
class _Host:
    """The device a validation runs on: its kind, the dtype chosen, its measured ceilings."""

    kind: str
    dtype: str
    dtype_reason: str
    info: object
    precision: Precision
    free_bytes: float
    ceilings: object
    accelerator: object


@dataclass
class _Engine:
    """What a pipeline has set up before the first rate: the step time that sets the capacity, the
    profile or first fit as recorded, the scheduler, the KV pool, the model served, and for a fitted
    step time its calibration runs (`calibrate(index)` adds one) and the host-speed probe."""

    step_time: object
    profile: dict
    policy: object
    kv_blocks: int
    block_tokens: int
    model_obj: object
    calibrate: object = None
    cals: list = field(default_factory=list)
    probe: object = None


def validate(config: ValidationConfig | None = None, *, log=print, **options) -> dict:
    """Measure the profile, then run live and simulated at each rate; return the record (JSON-able).
    The settings: a ValidationConfig, or its fields as keywords (`options`, over `config`'s).
    model: a ModelConfig (None: the cpu-0.5b preset; resolve a name with measure.plan.resolve_model).
    dtype: 'auto' (bf16 where its product has a fast path, else fp32: measure.fastpath, as the suite chooses),
    or fp32 | bf16 | fp16 (one without a fast path on this CPU is refused with the probe's figures).
    engine: 'inferlab' (policy, max_num_seqs, max_len: the live loop's), 'transformers'
    (max_num_seqs is its max_requests_per_batch, max_batch_tokens its token budget, page_size its
    KV page; policy does not apply: its FIFO scheduler runs; its step time is fitted to calibrations
    bracketing each rate, `serving.study.bracketing`) or 'vllm' (`validate_vllm`). step_model: 'profile' (the operator profile; the
    default for 'inferlab') or 'fitted' (a step time fitted to calibrations of the engine itself,
    bracketing each rate; the only one for 'transformers'). calibration_gap_s: seconds between a
    calibration's lone prompts (`calibration_workload`; each must be served before the next comes,
    the tests' tiny model needs far less than the default). rates: requests per second; None: `fractions` of the
    predicted capacity. Each rate serves `requests_per_rate` requests (default
    REQUESTS_PER_RATE: the same count, hence the same sample behind each p99, at every rate) or,
    if `duration_s` is given instead, every arrival within that many seconds."""
    from inferlab.serving.study.engines import check_engine
    c = ValidationConfig(**options) if config is None else replace(config, **options)
    t_start = time.perf_counter()
    log = log or (lambda message: None)  # log=None: quiet
    check_engine(c.engine)
    if c.engine != "vllm" and c.repeat_disturbed is not None:
        raise ValueError(f"repeat_disturbed applies to engine 'vllm' only; got engine {c.engine!r}")
    if c.engine == "vllm":  # its own server and client (validate_vllm); the model is the one `make vllm` wrote
        return _vllm_pipeline(c, log)
    c = _checked(c)
    host = _measure_host(c, log)
    if c.step_model == "profile":
        eng = _inferlab_profile(c, host, log)
    else:
        eng = (_transformers_pipeline if c.engine == "transformers" else _inferlab_fitted)(c, host, log)
        _add_calibrations(eng, c, host, t_start, log)
    setup = SimSetup(c.model, host.accelerator, eng.policy, host.precision, eng.kv_blocks, eng.block_tokens, c.slo)
    cap = capacity_requests_per_s(setup, eng.step_time, c.prompt, c.output, c.seed)
    if c.rates is None:
        rates = [f * cap for f in c.fractions]
        names = [LOAD_NAMES[LOAD_FACTORS.index(f)] if f in LOAD_FACTORS else f"{f:.2f}x capacity"
                 for f in c.fractions]
    else:
        rates, names = list(c.rates), [f"{r / cap:.2f}x capacity" for r in c.rates]
    log(f"{c.engine}: predicted capacity {cap:.2f} requests/s; rates {', '.join(f'{r:.2f}' for r in rates)}")
    runs = [_serve_rate(c, host, eng, setup, (k, len(rates)), (rate, name, cap), log)
            for k, (rate, name) in enumerate(zip(rates, names))]
    return _record(c, host, eng, runs, cap, t_start)


def _vllm_pipeline(c: ValidationConfig, log) -> dict:
    from inferlab.serving.study.engines.vllm import VllmSettings
    if c.model is not None or c.dtype not in ("auto", "bf16") or c.device != "cpu" or c.step_model not in (None, "fitted"):
        raise ValueError("engine 'vllm' serves build/vllm-model in bf16 on the cpu, on a fitted step time; "
                         "leave out model, dtype, device and step_model")
    if c.repeat_disturbed is not None:
        from inferlab.input_checks import positive_int
        positive_int("repeat_disturbed", c.repeat_disturbed, minimum=0, maximum=VLLM_REPEAT_DISTURBED_MAX)
    if c.duration_s is not None:
        raise ValueError("engine 'vllm' serves requests_per_rate requests at each rate; leave out duration_s")
    return validate_vllm(VllmValidation(
        settings=VllmSettings(max_num_seqs=c.max_num_seqs, max_num_batched_tokens=c.max_batch_tokens,
                              max_model_len=c.max_len),
        rates=c.rates, fractions=c.fractions,
        requests_per_rate=REQUESTS_PER_RATE if c.requests_per_rate is None else c.requests_per_rate,
        prompt=c.prompt, output=c.output, cv=c.cv, seed=c.seed, slo=c.slo,
        repeat_disturbed=VLLM_REPEAT_DISTURBED if c.repeat_disturbed is None else c.repeat_disturbed), log=log)


def _checked(c: ValidationConfig) -> ValidationConfig:
    """`c` with its defaults resolved (step model, model, requests per rate), or a one-line error."""
    from inferlab.measure.plan import CPU_MODEL
    from inferlab.input_checks import positive_float, positive_int
    step_model = ("profile" if c.engine == "inferlab" else "fitted") if c.step_model is None else c.step_model
    if step_model not in STEP_MODELS:
        raise ValueError(f"step_model must be one of {', '.join(STEP_MODELS)}; got {step_model!r}")
    if c.engine == "transformers" and step_model != "fitted":
        raise ValueError(f"engine 'transformers' steps on a fitted step time only (its operators are not ours to "
                         f"profile); got step_model {step_model!r}")
    model = CPU_MODEL if c.model is None else check_model(c.model)  # None: the cpu-0.5b preset
    requests_per_rate = c.requests_per_rate
    if c.duration_s is not None and requests_per_rate is not None:
        raise ValueError(f"give one of duration_s ({c.duration_s!r}) and requests_per_rate ({requests_per_rate!r}), "
                         "not both")
    if c.duration_s is None and requests_per_rate is None:
        requests_per_rate = REQUESTS_PER_RATE
    if requests_per_rate is not None:
        positive_int("requests_per_rate", requests_per_rate, minimum=2, maximum=10_000)
    else:
        positive_float("duration_s", c.duration_s)
    positive_float("calibration_gap_s", c.calibration_gap_s, maximum=600.0)
    fractions = c.fractions
    if c.rates is None:
        fractions = tuple(positive_float("fractions", f) for f in fractions)
        if not fractions:
            raise ValueError("fractions must hold at least one fraction of capacity; got none")
    return replace(c, step_model=step_model, model=model, requests_per_rate=requests_per_rate, fractions=fractions)


def _measure_host(c: ValidationConfig, log) -> _Host:
    """The device, the dtype (`auto`: bf16 where it has a fast path) and the ceilings measured on it."""
    from inferlab.measure import device as _device
    from inferlab.measure.ceilings import measure_ceilings
    from inferlab.measure.fastpath import check_fast_path, preferred_dtype
    kind = _device.resolve_kind(c.device)
    if c.engine == "transformers" and kind != "cpu":
        raise ValueError(f"engine 'transformers' is validated on the cpu only; got device {c.device!r}")
    if c.dtype == "auto":
        dtype, dtype_reason = preferred_dtype(kind, "bf16")
        log(f"dtype {dtype_reason}")
    else:
        check_fast_path(kind, c.dtype, "dtype")
        dtype, dtype_reason = c.dtype, "requested"
    info = _device.describe(kind)
    free = _device.free_memory_bytes(kind)
    log(f"ceilings of {info.name}")
    ceil = measure_ceilings(kind, [dtype], copy_bytes=min(256e6, 0.1 * free), matmul_n=2048,
                            memory_bytes=free, seed=c.seed, max_time_s=1.0)
    return _Host(kind, dtype, dtype_reason, info, Precision(dtype, dtype, dtype), free, ceil,
                 ceil.accelerator(f"measured-{kind}"))


def _inferlab_fitted(c: ValidationConfig, host: _Host, log) -> _Engine:
    """The project's loop on a step time fitted to its own calibrations."""
    from inferlab.measure.runner import random_model
    from inferlab.serving.policies import make_policy
    pol = make_policy(c.policy, max_num_seqs=c.max_num_seqs, max_batched_tokens=c.max_num_seqs * c.max_len)
    log(f"inferlab: {c.model.name} ({host.dtype}), step time fitted to calibrations")
    return _Engine(None, {}, pol, c.max_num_seqs * -(-c.max_len // 16) + 1, 16,  # as _inferlab_profile's
                   random_model(c.model, host.kind, host.dtype, c.seed))


def _transformers_pipeline(c: ValidationConfig, host: _Host, log) -> _Engine:
    """transformers' continuous batching (LlamaForCausalLM) with the host-speed probe at every step."""
    from inferlab.serving.policies import TransformersFIFO
    from inferlab.serving.study.engines.transformers_cb import build_model
    from inferlab.measure.probe import LinearProbe
    cfg, dtype = c.model, host.dtype
    pol = TransformersFIFO(token_budget=c.max_batch_tokens, max_num_seqs=c.max_num_seqs, page_size=c.page_size)
    log(f"transformers: {cfg.name} ({dtype}) as LlamaForCausalLM")
    eng = _Engine(None, {}, pol, 0, c.page_size, build_model(cfg, dtype, c.seed))
    eng.probe = LinearProbe.for_model(cfg, dtype, host.info.cache_bytes, c.seed + 5)
    log(f"host-speed probe: one row through a {cfg.d_ff} x {cfg.d_model} {dtype} linear, "
        f"{len(eng.probe.weights)} copies ({eng.probe.weight_bytes / 1e6:.0f} MB), at every step")
    return eng


def _add_calibrations(eng: _Engine, c: ValidationConfig, host: _Host, t_start: float, log) -> None:
    """Give a fitted pipeline its `calibrate(index)` and run the first calibration, which sets the step
    time of the capacity (and, for transformers, the KV pool: the engine's page pool)."""

    def calibrate(index):
        log(f"calibration {index}")
        t = time.perf_counter()
        w = calibration_workload(c.prompt, c.output, c.seed, gap_s=c.calibration_gap_s)
        cal = _calibrate(index, _serve_live(c, host, eng, w, c.seed + 1), t - t_start, time.perf_counter() - t)
        fs = cal["fit"].fit_stats
        log(f"  {cal['elapsed_s']:.0f} s, fitted on {fs['n']} steps: median |error| {fs['median_abs']:.1%}, "
            f"p90 {fs['p90_abs']:.1%}")
        return cal

    eng.calibrate = calibrate
    eng.cals.append(calibrate(0))
    eng.step_time = eng.cals[0]["fit"]
    if c.engine == "transformers":
        eng.kv_blocks = eng.cals[0]["num_blocks"]
    eng.profile = {"kind": f"{c.engine}-fitted", **eng.step_time.to_dict(),
                   "calibration_steps": eng.step_time.fit_stats["n"]}


def _serve_rate(c: ValidationConfig, host: _Host, eng: _Engine, setup: SimSetup, index: tuple, rate: tuple,
                log) -> dict:
    """Serve one rate live, predict it, judge the prediction: the run's record. index: (k, number of
    rates); rate: (requests per second, its name, the predicted capacity)."""
    (k, n_rates), (rate_per_s, name, cap) = index, rate
    w = c.workload(rate_per_s)
    log(f"live: {len(w)} requests at {rate_per_s:.2f}/s ({name})")
    live = _serve_live(c, host, eng, w, c.seed)
    run_extra, st_k = {}, eng.step_time
    if eng.calibrate is not None:  # the step time of this rate: its two brackets' fits, averaged
        from inferlab.serving.study.bracketing import brackets_of, mean_fit, speed
        from inferlab.serving.study.fitted import live_steps
        cals = eng.cals
        cals.append(eng.calibrate(k + 1))
        before, after = brackets_of(k, n_rates)
        st_k = mean_fit([cals[before]["fit"], cals[after]["fit"]])
        run_extra = {"calibrations": [before, after], "step_model": st_k.to_dict(),
                     "step_log": step_log(*live_steps(live)),  # to refit or re-judge later
                     "live_speed": speed(eng.step_time, *live_steps(live))}
    st_j = st_k  # the step time of the prediction judged
    if eng.calibrate is not None and "probe" in live.config:  # the judged host-speed prediction (serving.study.hostspeed)
        from inferlab.serving.study.hostspeed import SpeedTrack
        track = SpeedTrack(_probe_log(live.config), _bracket_reference(cals, before, after))
        st_n = mean_fit([cals[before]["fit_normalized"], cals[after]["fit_normalized"]])
        st_j = PREDICTION_MODELS[PREDICTION](st_n, track)
        run_extra.update({"step_model_normalized": st_n.to_dict(), "prediction": PREDICTION,
                          "probe": _probe_record(live.config["probe"], track)})
    sim = setup.simulate(w, st_j)
    ls, ss = live.result.summary(c.slo), sim.summary(c.slo)
    cmp, steps = compare(ls, ss), step_errors(live, st_j)
    fraction = rate_per_s / cap
    run = {"rate_per_s": rate_per_s, "load": name, "fraction": fraction, "bounded": fraction <= BOUNDED_UP_TO,
           "requests": len(w), "live": ls, "simulated": ss, "comparison": cmp, "step_time_error": steps,
           "replay": replay_check(setup, live, w, st_k), "sensitivity": step_sensitivity(setup, w, st_j),
           **run_extra, "quantiles": {"live": quantiles(live.result), "simulated": quantiles(sim)}}
    _log_run(run, log)
    return run


def _log_run(run: dict, log) -> None:
    cmp, steps, sens, replay = run["comparison"], run["step_time_error"], run["sensitivity"], run["replay"]
    if "probe" in run:
        pr = run["probe"]
        log(f"  probe: {pr['summary']['n']} samples, median {pr['summary']['median_s'] * 1e3:.2f} ms, "
            f"{pr['share']:.1%} of the steps' time; speed {min(pr['speed_track']['speed']):.2f} to "
            f"{max(pr['speed_track']['speed']):.2f} of the brackets' probe")
    log(f"  {run['prediction'] + ' (judged): ' if 'prediction' in run else ''}"
        f"TTFT p50 {cmp['ttft_s']['p50']['error']:+.1%}, p99 {cmp['ttft_s']['p99']['error']:+.1%}; "
        f"ITL p50 {cmp['itl_s']['p50']['error']:+.1%}, p99 {cmp['itl_s']['p99']['error']:+.1%}; "
        f"steps: median |error| {steps['median_abs']:.1%}")
    log(f"  a uniform {sens['scale']:.0%} step-time error moves the simulated TTFT p50 by "
        f"{_moves(sens, 'ttft_s', 'p50')}, p99 by {_moves(sens, 'ttft_s', 'p99')}; ITL p50 by "
        f"{_moves(sens, 'itl_s', 'p50')}, p99 by {_moves(sens, 'itl_s', 'p99')}")
    rc = replay["comparison"]
    log(f"  replay (live step times on the simulated schedule, {replay['matched']} of {replay['steps']} steps "
        f"matched): TTFT p50 {rc['ttft_s']['p50']['error']:+.1%}, p99 {rc['ttft_s']['p99']['error']:+.1%}; "
        f"ITL p50 {rc['itl_s']['p50']['error']:+.1%}, p99 {rc['itl_s']['p99']['error']:+.1%}")


def _length_record(d: LengthDist) -> dict:
    return {"kind": d.kind, "mean": d.mean, "cv": d.cv, "low": d.low, "high": d.high}


def _record(c: ValidationConfig, host: _Host, eng: _Engine, runs: list, cap: float, t_start: float) -> dict:
    """The validation's record (schema inferlab.serving.validate/1)."""
    import torch

    from inferlab.measure import device as _device
    from inferlab.serving.study.engines import engine_version
    config = {"model": c.model.name, "dtype": host.dtype, "dtype_reason": host.dtype_reason,
              "policy": eng.policy.name if c.engine == "inferlab" else "transformers-fifo",
              "max_num_seqs": c.max_num_seqs, "max_len": c.max_len, "duration_s": c.duration_s,
              "requests_per_rate": c.requests_per_rate, "cv": c.cv, "seed": c.seed,
              "prompt": _length_record(c.prompt), "output": _length_record(c.output),
              "kv_blocks": eng.kv_blocks, "block_tokens": eng.block_tokens}
    summary = {"engine": c.engine, "engine_version": engine_version(c.engine), "rates": rates_summary(runs)}
    calibrations = None
    if c.engine == "transformers":
        config.update({"max_batch_tokens": c.max_batch_tokens, "page_size": c.page_size})
    if eng.calibrate is not None:
        config["calibration"] = {"lone_prompts": list(CALIBRATION_LONE), "lone_output": CALIBRATION_LONE_OUTPUT,
                                 "gap_s": c.calibration_gap_s, "burst": CALIBRATION_BURST}
        calibrations = _calibrations_record(eng.cals, eng.step_time)
        summary["calibration"] = {"method": "bracketed", "combined": "mean of the two fits", "count": len(eng.cals),
                                  "speeds": [x["speed"] for x in calibrations],
                                  "drift": calibration_drift(calibrations)}
        if eng.probe is not None:
            summary["probe"] = _probe_overall(eng.probe, eng.cals, runs)
    return {"schema": "inferlab.serving.validate/1",
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "elapsed_s": time.perf_counter() - t_start,
            "device": {"kind": host.kind, "name": host.info.name, "threads": torch.get_num_threads()},
            "versions": _device.versions(),
            "config": config,
            "bounds": {"p50": P50_BOUND, "p99": P99_BOUND, "up_to_fraction": BOUNDED_UP_TO},
            "capacity_requests_per_s": cap, "ceilings": host.ceilings.to_dict(), "profile": eng.profile,
            **({"calibrations": calibrations} if calibrations is not None else {}),
            "runs": runs,
            "within_bounds": all(r["comparison"]["within_bounds"] for r in runs if r["bounded"]),
            "summary": summary}


def _moves(sens: dict, metric: str, p: str) -> str:
    a, b = sens[metric][p]
    return f"{a:+.0%}/{b:+.0%}" + (" (knife-edged)" if sens["knife_edge"][metric][p] else "")


def _length_dist(d: dict) -> LengthDist:
    """A record's config.prompt / config.output as a LengthDist; records made before their bounds
    were kept take the CLI's (low = mean // 8, high = 3 x mean)."""
    mean = d["mean"]
    return LengthDist(d["kind"], mean, d["cv"], d.get("low", max(1, int(mean) // 8)), d.get("high", 3 * int(mean)))


def repredict(record: dict, model: ModelConfig, make_step_time, fit_key: str = "step_model") -> list:
    """Re-simulate every probe-tracked run of a recorded validation on another step time, from what the
    record keeps (its workload's config and seed, each run's averaged fit `step_model` and probe log),
    with `model` the record's ModelConfig (resolve config.model at the edge):
    `make_step_time(fit, track)` -> a step-time model (fit: serving.study.fitted.FittedStepTime, track:
    serving.study.hostspeed.SpeedTrack; fit_key: the run's fit to use, 'step_model' (the brackets' mean
    fit) or 'step_model_normalized' (their probe-normalized fits' mean)). Returns per run {fraction, bounded, comparison (with the live
    percentiles the record holds)}. A prediction first made this way, after the live runs, says so
    where it is reported."""
    from inferlab.serving.study.fitted import FittedStepTime
    return _resimulate(record, model, lambda r, f, t: make_step_time(FittedStepTime.from_dict(r[fit_key]), t))


def _resimulate(record: dict, model: ModelConfig, make_step_time) -> list:
    """repredict's loop: `make_step_time(run, its raw mean fit, its speed track)` per probe-tracked run."""
    from inferlab.measure.ceilings import Ceilings
    from inferlab.serving.study.fitted import FittedStepTime
    from inferlab.serving.study.hostspeed import ProbeLog, SpeedTrack
    from inferlab.serving.policies import TransformersFIFO
    from inferlab.specs import Precision
    c = record["config"]
    if record_engine(record) != "transformers" or not any("probe" in r for r in record["runs"]):
        raise ValueError("record must be a probe-tracked transformers validation (serving.study.hostspeed)")
    cfg = check_model(model, "model")
    if cfg.name != c["model"]:
        raise ValueError(f"model must be the record's ({c['model']}); got {cfg.name}")
    acc = Ceilings.from_dict(record["ceilings"]).accelerator("measured-cpu")
    pol = TransformersFIFO(token_budget=c["max_batch_tokens"], max_num_seqs=c["max_num_seqs"],
                           page_size=c["page_size"])
    prompt, output = _length_dist(c["prompt"]), _length_dist(c["output"])
    prec = Precision(c["dtype"], c["dtype"], c["dtype"])
    setup = SimSetup(cfg, acc, pol, prec, c["kv_blocks"], c["block_tokens"])
    out = []
    for r in record["runs"]:
        if "probe" not in r:
            continue
        w = synthetic(r["rate_per_s"], n_requests=r["requests"], prompt=prompt, output=output, cv=c["cv"],
                      seed=c["seed"])
        pr = r["probe"]
        track = SpeedTrack(ProbeLog(pr["times_s"], pr["probe_s"]), pr["speed_track"]["reference_s"], pr["speed_track"]["window_s"],
                           pr["speed_track"]["min_samples"])
        sim = setup.simulate(w, make_step_time(r, FittedStepTime.from_dict(r["step_model"]), track))
        out.append({"fraction": float(r["fraction"]), "bounded": bool(r["bounded"]),
                    "comparison": compare(r["live"], sim.summary())})
    return out


def normalized_fits(record: dict) -> list:
    """Per run of a probe-tracked record, the mean of its two brackets' probe-normalized fits
    (hostspeed.normalized_durations), recomputed from the calibrations' step and probe logs: what
    `step_model_normalized` holds in records made since, for records made before it."""
    from inferlab.serving.study.bracketing import mean_fit
    from inferlab.serving.study.fitted import FittedStepTime
    from inferlab.serving.study.hostspeed import ProbeLog, normalized_durations
    fits = []
    for c in record["calibrations"]:
        sl = c["step_log"]
        steps = [StepShape(n, kv, tuple(tuple(x) for x in ch), s) for n, kv, ch, s in
                 zip(sl["n_decode"], sl["decode_kv_tokens"], sl["chunks"], sl["sampled"])]
        log = ProbeLog(c["probe"]["times_s"], c["probe"]["probe_s"])
        fits.append(FittedStepTime.fit(steps, normalized_durations(sl["step_s"], log)))
    return [mean_fit([fits[b], fits[a]]) for b, a in (r["calibrations"] for r in record["runs"])]


def prediction_counts(records: list, model: ModelConfig) -> dict:
    """How many bounded (repeat, rate) pairs of probe-tracked records each probe prediction puts within
    both bounds, re-simulated from the records (repredict; `model` their ModelConfig): {"pairs", "probe-tracked (raw fits)",
    "probe-tracked", "split"} (the last two on probe-normalized fits, normalized_fits)."""
    from inferlab.serving.study.hostspeed import SpeedTrackedStepTime, SplitSpeedStepTime
    out = {"pairs": 0, "probe-tracked (raw fits)": 0, "probe-tracked": 0, "split": 0}
    for rec in records:
        norm = normalized_fits(rec)
        bounded = [i for i, r in enumerate(rec["runs"]) if r["bounded"]]
        out["pairs"] += len(bounded)
        for i in bounded:
            one = {**rec, "runs": [rec["runs"][i]]}
            for name, make in (("probe-tracked (raw fits)", lambda f, t: SpeedTrackedStepTime(f, t)),
                               ("probe-tracked", lambda f, t: SpeedTrackedStepTime(norm[i], t)),
                               ("split", lambda f, t: SplitSpeedStepTime(norm[i], t))):
                out[name] += repredict(one, model, make)[0]["comparison"]["within_bounds"]
    return out


def alternatives(record: dict, model: ModelConfig) -> dict:
    """The judged prediction and the ALTERNATIVES a run no longer computes, re-simulated from a probe-tracked
    record (repredict; `model` its ModelConfig): {"probe-tracked", "split", "bracketed",
    "first-calibration-only": [per probe run {fraction, bounded, comparison}]}. probe-tracked and split step
    on the brackets' probe-normalized fits (the record's `step_model_normalized`, recomputed from its
    calibrations where it has none) x the host's speed; bracketed on their raw mean fit and
    first-calibration-only on the first calibration's fit, neither with the probe. For records that kept
    them, these are the recorded `comparison` (the judged one), `split`, `bracketed` and
    `first_calibration_only` (a test checks)."""
    from inferlab.serving.study.fitted import FittedStepTime
    norm = normalized_fits(record) if any("step_model_normalized" not in r for r in record["runs"]) else None

    def normalized(i):
        r = record["runs"][i]
        return FittedStepTime.from_dict(r["step_model_normalized"]) if norm is None else norm[i]

    index = {id(r): i for i, r in enumerate(record["runs"])}
    first = FittedStepTime.from_dict(record["calibrations"][0])
    makers = {"probe-tracked": lambda r, f, t: SpeedTrackedStepTime(normalized(index[id(r)]), t),
              "split": lambda r, f, t: SplitSpeedStepTime(normalized(index[id(r)]), t),
              "bracketed": lambda r, f, t: f,
              "first-calibration-only": lambda r, f, t: first}
    return {name: _resimulate(record, model, make) for name, make in makers.items()}


def alternative_counts(records: list, model: ModelConfig) -> dict:
    """{"pairs": bounded (repeat, rate) pairs of the probe-tracked records, and per prediction of
    `alternatives` how many of them it puts within both bounds}."""
    out = {"pairs": 0}
    for rec in records:
        for name, runs in alternatives(rec, model).items():
            out.setdefault(name, 0)
            out[name] += sum(r["comparison"]["within_bounds"] for r in runs if r["bounded"])
        out["pairs"] += sum(bool(r["bounded"]) for r in rec["runs"] if "probe" in r)
    return out


def rates_summary(runs: list) -> list:
    """summary.rates of a record: per run {fraction, bounded, requests (the sample behind each
    TTFT percentile), ttft_p50_error, ttft_p99_error, itl_p50_error, itl_p99_error} (errors:
    simulated / live - 1); with a host-speed probe, those are the judged prediction's (`prediction`:
    'probe-tracked' or 'split'), and `bracketed` (the same four errors without the probe) and the other
    probe prediction's (under its PREDICTION_KEYS name, in records that have it) are added."""
    out = []
    for r in runs:
        row = {"fraction": float(r["fraction"]), "bounded": bool(r["bounded"]), "requests": int(r["requests"])}
        for m, short in (("ttft_s", "ttft"), ("itl_s", "itl")):
            for p in ("p50", "p99"):
                row[f"{short}_{p}_error"] = float(r["comparison"][m][p]["error"])
        if "probe" in r:  # the errors above are the judged prediction's; the others beside them (older records)
            row["prediction"] = r.get("prediction", "probe-tracked")
            for key in ("bracketed", *(PREDICTION_KEYS[k] for k in PREDICTIONS if k != row["prediction"])):
                if key in r:
                    row[key] = {f"{short}_{p}_error": float(r[key]["comparison"][m][p]["error"])
                                for m, short in (("ttft_s", "ttft"), ("itl_s", "itl")) for p in ("p50", "p99")}
        out.append(row)
    return out


def _inferlab_profile(c: ValidationConfig, host: _Host, log) -> _Engine:
    """The project's loop: its operator profile composed into step times (serving.study.profiled)."""
    import torch

    from inferlab.measure.profile import measure_profile, pass_residual, time_probes
    from inferlab.measure.runner import random_model
    from inferlab.serving.policies import make_policy
    from inferlab.serving.study.profiled import ProfileStepTime
    cfg, kind, dtype, seed = c.model, host.kind, host.dtype, c.seed
    pol = make_policy(c.policy, max_num_seqs=c.max_num_seqs, max_batched_tokens=c.max_num_seqs * c.max_len)
    block_tokens = 16
    kv_blocks = c.max_num_seqs * -(-c.max_len // block_tokens) + 1  # every admitted request fits: no preemption
    log(f"operator profile of {cfg.name} ({dtype})")
    max_step_tokens = c.max_num_seqs * int(min(c.max_len, c.prompt.mean * 4))
    model_obj = random_model(cfg, kind, dtype, seed)
    probe_rounds = []  # the residual's probes, timed between the profile's rounds (same drift)
    with torch.inference_mode():
        prof = measure_profile(cfg, kind, dtype, max_tokens=max_step_tokens, max_batch=c.max_num_seqs,
                               max_kv_positions=c.max_len, cache_bytes=host.info.cache_bytes,
                               pool_bytes=min(1e9, 0.1 * host.free_bytes), point_time_s=0.3, seed=seed + 3,
                               after_round=lambda r: probe_rounds.append(
                                   time_probes(model_obj, kind, seed=seed + r, point_time_s=0.3)))
    prof["residual_s"], prof["residual"] = pass_residual(prof, cfg, host.precision, host.accelerator, probe_rounds)
    return _Engine(ProfileStepTime(prof, cfg, host.precision, host.accelerator), prof, pol, kv_blocks, block_tokens,
                   model_obj)


def calibration_workload(prompt: LengthDist, output: LengthDist, seed: int, burst: int | None = None,
                         gap_s: float = CALIBRATION_LONE_GAP_S) -> Workload:
    """The workload a transformers step time is fitted to: prompts of CALIBRATION_LONE tokens (capped
    at the prompt distribution's high; CALIBRATION_LONE_OUTPUT output tokens each) `gap_s` apart,
    each meant to be served alone (its chunks with no other request beside them), then
    CALIBRATION_BURST requests of the run's length distributions (seeded apart from the predicted
    workloads) arriving together `gap_s` / 4 after the last lone prompt's slot ends."""
    from inferlab.input_checks import positive_float
    positive_float("gap_s", gap_s, maximum=600.0)
    rng = np.random.default_rng(seed + 7)
    burst = CALIBRATION_BURST if burst is None else burst
    n_lone = len(CALIBRATION_LONE)
    lone_p = np.minimum(np.array(CALIBRATION_LONE), prompt.high or max(CALIBRATION_LONE))
    arrival = np.concatenate([gap_s * np.arange(n_lone), np.full(burst, gap_s * (n_lone + 0.25))])
    p = np.concatenate([lone_p, prompt.sample(rng, burst)])
    o = np.concatenate([np.full(n_lone, CALIBRATION_LONE_OUTPUT), output.sample(rng, burst)])
    return Workload(arrival, p.astype(np.int64), o.astype(np.int64))


def _calibrate(index: int, cal, started_s: float, elapsed_s: float) -> dict:
    """A calibration run `cal` (the engine's LiveResult of calibration_workload) and the step time
    fitted to it: {index, started_s (since the validation began), elapsed_s, steps, durations, fit,
    num_blocks (the engine's page pool; None for the project's loop)}."""
    from inferlab.serving.study.fitted import FittedStepTime, live_steps
    steps, durations = live_steps(cal)
    out = {"index": index, "started_s": started_s, "elapsed_s": elapsed_s, "steps": steps, "durations": durations,
           "fit": FittedStepTime.fit(steps, durations), "num_blocks": cal.config.get("num_blocks"),
           "probe": cal.config.get("probe")}
    if out["probe"]:  # the fit the probe predictions step on: durations referred to the median probe
        from inferlab.serving.study.hostspeed import ProbeLog, normalized_durations
        log = ProbeLog(out["probe"]["times_s"], out["probe"]["probe_s"])
        out["fit_normalized"] = FittedStepTime.fit(steps, normalized_durations(durations, log))
    return out


def _calibrations_record(cals: list, reference) -> list:
    """The record's calibrations: per calibration its timing, fit, speed on `reference`'s scale
    (serving.study.bracketing.speed) and its step log (to refit later)."""
    from inferlab.serving.study.bracketing import speed
    out = [{"index": c["index"], "started_s": c["started_s"], "elapsed_s": c["elapsed_s"],
            "speed": speed(reference, c["steps"], c["durations"]), **c["fit"].to_dict(),
            "step_log": step_log(c["steps"], c["durations"])}
           for c in cals]
    if all(c.get("probe") for c in cals):  # each calibration's probe, and its median on the first's scale
        ref0 = cals[0]["probe"]["summary"]["median_s"]
        for o, c in zip(out, cals):
            pr = c["probe"]
            o["probe"] = {"summary": pr["summary"], "share": pr["share"], "ratio": pr["summary"]["median_s"] / ref0,
                          "times_s": pr["times_s"], "probe_s": pr["probe_s"]}
            if "fit_normalized" in c:
                o["fit_normalized"] = c["fit_normalized"].to_dict()
    return out


def _probe_log(config: dict):
    """The ProbeLog of a run's config["probe"] (serving.study.engines.transformers_cb)."""
    from inferlab.serving.study.hostspeed import ProbeLog
    return ProbeLog(config["probe"]["times_s"], config["probe"]["probe_s"])


def _bracket_reference(cals: list, before: int, after: int) -> float:
    """The reference probe time of the mean of two calibrations' fits: the mean of their probe medians."""
    from inferlab.serving.study.hostspeed import reference_probe_s
    return reference_probe_s([_probe_log(cals[k]) for k in (before, after)])


def _probe_record(probe: dict, track) -> dict:
    """A live run's probe, as recorded: its log, summary, share of the steps' time and the speed track."""
    return {"summary": probe["summary"], "share": probe["share"], "times_s": probe["times_s"],
            "probe_s": probe["probe_s"], "speed_track": track.to_dict(),
            "speed_median": float(np.median(track.speeds(probe["times_s"])))}


def _probe_overall(probe, cals: list, runs: list) -> dict:
    """summary.probe: the kernel, and its share of all timed steps' time (calibrations and live runs)."""
    from inferlab.serving.study.hostspeed import SPEED_MIN_SAMPLES, SPEED_WINDOW_S
    p = sum(sum(c["probe"]["probe_s"]) for c in cals if c.get("probe")) + sum(
        sum(r["probe"]["probe_s"]) for r in runs if "probe" in r)
    s = sum(float(np.sum(c["durations"])) for c in cals if c.get("probe")) + sum(
        float(np.sum(r["step_log"]["step_s"])) for r in runs if "probe" in r)
    return {"kernel": f"one-row linear {probe.d_in} -> {probe.d_out}, {probe.dtype}, {len(probe.weights)} copies",
            "weight_bytes": probe.weight_bytes, "where": "every step, inside its window",
            "share": p / s if s > 0 else 0.0, "window_s": SPEED_WINDOW_S, "min_samples": SPEED_MIN_SAMPLES}


def step_log(steps: list, durations_s) -> dict:
    """Timed steps as JSON columns: {n_decode, decode_kv_tokens, chunks [[q, p], ...], sampled, step_s}."""
    return {"n_decode": [int(s.decode_seqs) for s in steps], "decode_kv_tokens": [float(s.decode_kv_tokens) for s in steps],
            "chunks": [[[int(q), int(p)] for q, p in s.chunks] for s in steps], "sampled": [int(s.sampled) for s in steps],
            "step_s": [float(x) for x in durations_s]}


def calibration_drift(calibrations: list) -> float:
    """How much the calibrations of one validation moved: serving.study.bracketing.drift over their speeds."""
    from inferlab.serving.study.bracketing import drift
    return drift([c["speed"] for c in calibrations])


def _serve_live(c: ValidationConfig, host: _Host, eng: _Engine, w: Workload, seed: int):
    """Serve `w` live on the validation's engine."""
    if c.engine == "inferlab":
        from inferlab.serving.study.live import LiveSettings, run_live
        return run_live(w, eng.model_obj, LiveSettings(policy=c.policy, max_num_seqs=c.max_num_seqs, max_len=c.max_len,
                                                       max_batched_tokens=getattr(eng.policy, "max_batched_tokens", None),
                                                       device=host.kind, dtype=host.dtype, seed=seed))
    from inferlab.serving.study.engines.transformers_cb import TransformersSettings, run_transformers
    settings = TransformersSettings(max_batch_tokens=c.max_batch_tokens, max_requests_per_batch=c.max_num_seqs,
                                    page_size=c.page_size, max_len=c.max_len, dtype=host.dtype, seed=seed)
    return run_transformers(w, eng.model_obj, settings, probe=eng.probe)


def table(record: dict) -> str:
    """The comparison as text: one row per rate and metric."""
    lines = [f"live vs simulated ({record['config']['model']}, {record['config']['dtype']}, "
             f"{record['config']['policy']}, {record['device']['name']}); bounds: p50 within "
             f"{record['bounds']['p50']:.0%}, p99 within {record['bounds']['p99']:.0%}",
             f"{'rate/s':>7s} {'load':16s} {'n':>4s} {'metric':6s} {'live p50':>10s} {'sim p50':>10s} {'err':>7s} "
             f"{'live p99':>10s} {'sim p99':>10s} {'err':>7s}  (ms; n: requests)"]
    for r in record["runs"]:
        for m, label in (("ttft_s", "TTFT"), ("itl_s", "ITL")):
            c = r["comparison"][m]
            lines.append(f"{r['rate_per_s']:7.2f} {r['load']:16s} {r['requests']:4d} {label:6s} "
                         f"{c['p50']['live_s'] * 1e3:10.1f} {c['p50']['simulated_s'] * 1e3:10.1f} "
                         f"{c['p50']['error']:+7.1%} {c['p99']['live_s'] * 1e3:10.1f} "
                         f"{c['p99']['simulated_s'] * 1e3:10.1f} {c['p99']['error']:+7.1%}")
    lines.append("all within bounds" if record["within_bounds"] else "NOT all within bounds")
    if any("bracketed" in r for r in record["runs"]):  # records that kept the prediction without the probe
        judged = next(r.get("prediction", "probe-tracked") for r in record["runs"] if "bracketed" in r)
        lines.append(f"errors above: {judged} (the host's speed from a probe at every step"
                     + ("; steps' decode part x speed, prompt-chunk part x speed^0.5" if judged == "split" else "")
                     + "); bracketed "
                     "calibrations alone, TTFT p50 / p99, ITL p50 / p99:")
        for r in record["runs"]:
            if "bracketed" in r:
                c = r["bracketed"]["comparison"]
                lines.append(f"{r['rate_per_s']:7.2f} {r['load']:16s} " + " / ".join(
                    f"{c[m][p]['error']:+.1%}" for m, p, _ in ERROR_KEYS)
                    + f"   (probe {r['probe']['summary']['median_s'] * 1e3:.2f} ms median, {r['probe']['share']:.1%} "
                      f"of the steps; speed {min(r['probe']['speed_track']['speed']):.2f}-"
                      f"{max(r['probe']['speed_track']['speed']):.2f})")
    sens = [r for r in record["runs"] if "sensitivity" in r]
    if sens:
        lines.append(f"simulated percentiles with every step {sens[0]['sensitivity']['scale']:.0%} shorter / longer "
                     "(knife-edged: a move beyond the bound), TTFT p50, p99, ITL p50, p99:")
        for r in sens:
            lines.append(f"{r['rate_per_s']:7.2f} {r['load']:16s} " + ", ".join(
                _moves(r["sensitivity"], m, p) for m, p, _ in ERROR_KEYS))
    cal = record.get("summary", {}).get("calibration")
    if cal:
        lines.append(f"{cal['count']} calibrations, one before and one after each rate: speeds "
                     f"{', '.join(f'{x:.2f}' for x in cal['speeds'])} (on the first's fit); drift {cal['drift']:.0%}")
    return "\n".join(lines)


def record_engine(record: dict) -> str:
    """The engine a record validated: summary.engine; 'inferlab' for records made before engines."""
    return record.get("summary", {}).get("engine", "inferlab")


def record_step_model(record: dict) -> str:
    """What a record's simulation stepped on: 'fitted' (calibrations of the engine) or 'profile'."""
    return "fitted" if str(record.get("profile", {}).get("kind", "")).endswith("-fitted") else "profile"


def recorded(directory=None, engine: str | None = "inferlab", step_model: str | None = None) -> list:
    """The recorded validation runs (data/measurements/serving/*.json) of `engine` (None: all) whose
    simulation stepped on `step_model` ('profile', 'fitted'; None: either), oldest first."""
    import json

    from inferlab.measure.result import recorded_dir
    d = directory or recorded_dir() / "serving"
    runs = [json.loads(p.read_text()) for p in sorted(d.glob("*.json"))] if d.exists() else []
    runs = [r for r in runs if r.get("schema") == "inferlab.serving.validate/1"]
    if engine is not None:
        from inferlab.serving.study.engines import check_engine
        check_engine(engine)
        runs = [r for r in runs if record_engine(r) == engine]
    if step_model is not None:
        if step_model not in STEP_MODELS:
            raise ValueError(f"step_model must be one of {', '.join(STEP_MODELS)}; got {step_model!r}")
        runs = [r for r in runs if record_step_model(r) == step_model]
    return sorted(runs, key=lambda r: r["created"])


METRIC_NAMES = {"ttft_s": "TTFT", "itl_s": "ITL"}


def _worst(record: dict, p: str) -> tuple:
    """(|error|, error, metric, run) of the largest |error| at percentile `p` over the bounded rates
    (all rates of records made before the overloaded rate was left unbounded) and metrics."""
    runs = [r for r in record["runs"] if r.get("bounded", True)] or record["runs"]
    return max(((abs(r["comparison"][m][p]["error"]), r["comparison"][m][p]["error"], m, r)
                for r in runs for m in METRIC_NAMES), key=lambda x: x[0])


def misses(record: dict) -> list:
    """[(rate_per_s, load, metric name, percentile, error)] of every comparison outside its bound."""
    return [(r["rate_per_s"], r["load"], METRIC_NAMES[m], p, r["comparison"][m][p]["error"])
            for r in record["runs"] if r.get("bounded", True) for m in METRIC_NAMES for p in ("p50", "p99")
            if abs(r["comparison"][m][p]["error"]) > record["bounds"][p]]


def runs_table(records: list) -> str:
    """One row per recorded validation: when, the pass residual its profile used, the worst error
    at p50 and p99 (metric and rate), the range of median predicted / measured step time over the
    rates, and whether every comparison was within its bound."""
    from inferlab.tables import text_table

    rows = []
    for rec in records:
        w50, w99 = _worst(rec, "p50"), _worst(rec, "p99")
        ratios = [r["step_time_error"]["median_ratio"] for r in rec["runs"]]
        rows.append((rec["created"][:16].replace("T", " "), rec["profile"].get("residual_s", 0.0) * 1e3,
                     f"{w50[1]:+.1%} {METRIC_NAMES[w50[2]]} @ {w50[3]['rate_per_s']:.2f}/s",
                     f"{w99[1]:+.1%} {METRIC_NAMES[w99[2]]} @ {w99[3]['rate_per_s']:.2f}/s",
                     f"{min(ratios):.2f}-{max(ratios):.2f}", "yes" if rec["within_bounds"] else "no"))
    return text_table(("recorded (UTC)", "residual ms", "worst p50 error", "worst p99 error",
                       "step pred/meas", "within bounds"), rows, ("s", ".1f", "s", "s", "s", "s"))


def repeatability(records: list) -> str:
    """How the recorded runs of one validation agree, in words (Markdown), every number from them."""
    if not records:
        return "No recorded validation run."
    ok = sum(rec["within_bounds"] for rec in records)
    s = f"{ok} of {len(records)} recorded runs are within both bounds."
    missed = [(rec, m) for rec in records for m in misses(rec)]
    if missed:
        loads = sorted({m[1] for _, m in missed})
        s += (" The misses: " + "; ".join(f"{m[2]} {m[3]} {m[4]:+.0%} at {m[0]:.2f}/s ({m[1]})"
                                          for _, m in missed)
              + f", all at the {' and '.join(loads)} rate{'s' if len(loads) > 1 else ''}.")
    ratios = [r["step_time_error"]["median_ratio"] for rec in records for r in rec["runs"]]
    side = ("shorter than the live ones in every run and at every rate" if max(ratios) < 1 else
            "longer than the live ones in every run and at every rate" if min(ratios) > 1 else
            "on both sides of the live ones")
    s += (f" The simulated steps were {side} (median predicted / measured {min(ratios):.2f} to "
          f"{max(ratios):.2f}): the profile is timed minutes before the live runs on a machine whose speed "
          "drifts, and a server a few percent slower than predicted queues disproportionately longer near "
          "and beyond its capacity.")
    return s


def capacity_uncertainty(records: list) -> dict:
    """The simulator's own error, carried to a capacity, from the recorded validations.

    At a fixed batch a server's capacity scales as 1 / step time, so a simulated step time off by
    the ratio r = predicted / measured puts a simulated capacity off by 1/r - 1. Over every recorded
    run and rate (each run's median ratio):

        rel_error = max |1 / r - 1|,   sign_changes = (min r < 1 < max r)

    `sign_changes` says whether the error flips sign between runs: a bias that flips cannot be
    counted on to cancel between two simulated deployments. Raises on no records."""
    if not records:
        raise ValueError("records must hold at least one recorded validation; got none")
    ratios = [float(r["step_time_error"]["median_ratio"]) for rec in records for r in rec["runs"]]
    if not ratios or any(not np.isfinite(x) or x <= 0 for x in ratios):
        raise ValueError(f"records must hold positive finite step-time ratios; got {ratios!r}")
    return {"rel_error": max(abs(1 / x - 1) for x in ratios), "ratio_min": min(ratios),
            "ratio_max": max(ratios), "sign_changes": min(ratios) < 1 < max(ratios),
            "runs": len(records)}


def conclusion(record: dict) -> str:
    """What the comparison says, in words, every number from the record (Markdown)."""
    worst = {p: _worst(record, p) for p in ("p50", "p99")}
    name = METRIC_NAMES
    steps = [r["step_time_error"]["median_abs"] for r in record["runs"]]
    rates = ", ".join(f"{r['rate_per_s']:.2f} ({r['load']})" for r in record["runs"])
    c = record["config"]
    fitted = record_step_model(record) == "fitted"
    how = ("the operator profile" if not fitted else "a step time fitted to calibrations of that engine, one "
           "before and one after each rate" if "calibrations" in record else
           "a step time fitted to a calibration run of that engine")
    if any("probe" in r for r in record["runs"]):
        how += ", scaled over time by the host's speed from a probe timed at every step of the live run"
    s = (f"At {len(record['runs'])} rates, {rates} requests/s, the live {c['model']} ({c['dtype']}, "
         f"{c['policy']}, {c['max_num_seqs']} {'requests per step' if c['policy'] == 'transformers-fifo' else 'slots'})"
         f" and its simulation on {how} "
         f"differ by at most "
         f"{worst['p50'][0]:.0%} at the median ({name[worst['p50'][2]]} at {worst['p50'][3]['rate_per_s']:.2f}/s: "
         f"simulated {worst['p50'][1]:+.0%}) and {worst['p99'][0]:.0%} at p99 ({name[worst['p99'][2]]} at "
         f"{worst['p99'][3]['rate_per_s']:.2f}/s: {worst['p99'][1]:+.0%}). The bounds are "
         f"{record['bounds']['p50']:.0%} and {record['bounds']['p99']:.0%}: ")
    s += ("**within both**." if record["within_bounds"] else "**not met**: the simulator does not yet predict "
          "this server within them.")
    free = [r for r in record["runs"] if not r.get("bounded", True)]
    if free:
        s += " Not held to them: " + "; ".join(
            f"{r['rate_per_s']:.2f}/s ({r['fraction']:.2f}x capacity), TTFT p50 {r['comparison']['ttft_s']['p50']['error']:+.0%}"
            f" and p99 {r['comparison']['ttft_s']['p99']['error']:+.0%}, ITL p50 "
            f"{r['comparison']['itl_s']['p50']['error']:+.0%} and p99 {r['comparison']['itl_s']['p99']['error']:+.0%}"
            for r in free) + ", beyond capacity, where the queue grows without limit."
    ratios = [r["step_time_error"]["median_ratio"] for r in record["runs"]]
    side = ("shorter than measured" if max(ratios) < 1 else "longer than measured" if min(ratios) > 1
            else "on both sides of the measurement")
    s += (f" Step by step, the {'fitted step time' if fitted else 'profile'}'s prediction of each live step's duration is off by a median "
          f"{min(steps):.0%} to {max(steps):.0%} across the rates, {side} (median predicted / measured "
          f"{min(ratios):.2f} to {max(ratios):.2f}). Near saturation a few percent of step time matter most: "
          "the queueing delay grows like 1 / (1 - load), so a server that is slightly slower than predicted "
          "sits closer to its capacity than the simulation and queues longer.")
    return s


def all_served(record: dict) -> bool:
    """True if, at every rate, the live server and the simulator both finished every request."""
    return all(r["live"]["completed"] == r["simulated"]["completed"] == r["requests"] for r in record["runs"])


ERROR_KEYS = (("ttft_s", "p50", "ttft_p50"), ("ttft_s", "p99", "ttft_p99"), ("itl_s", "p50", "itl_p50"),
              ("itl_s", "p99", "itl_p99"))


def live_spread(values) -> float:
    """Run-to-run spread of a live percentile over repeats: (max - min) / median."""
    v = np.asarray(values, dtype=float)
    if v.size == 0 or not np.all(np.isfinite(v)) or np.any(v <= 0):
        raise ValueError(f"values must be positive finite percentiles of at least one run; got {values!r}")
    return float((v.max() - v.min()) / np.median(v))


def engines_summary(records: list) -> dict:
    """The recorded validations of every engine set side by side, per fraction of capacity.

    {engine ('inferlab (fitted step time)' for our loop's bracketed runs): {"version", "repeats": number of records, "fractions": {fraction (2 decimals):
      {"bounded", "error": {ttft_p50: [per repeat], ...}, "live_spread": {ttft_p50: (max - min) /
      median of the live percentile over the repeats, ...}, "within": [per repeat: every error within
      its bound], "step_ratio": [per repeat: median predicted / measured step time], "replay": [per
      repeat that has one: (simulated steps matched by a live step of the same work, simulated
      steps, largest |error| of the simulation on the live step times)], "requests": [per repeat:
      requests served at that rate], "within_first_calibration": [per bracketed repeat: every
      error within its bound had the first calibration alone set the step time], "live_between": [per
      bracketed repeat: the live run's speed within its two calibrations' speeds], for probe-tracked
      repeats (serving.study.hostspeed): "bracketed_error" {ttft_p50: [...], ...} and "within_bracketed"
      [...] (the same run predicted without the probe), "within_tracked" [...] (with it), "probe_speed" [(min, max) of its speed
      track]}}, "drift": [per bracketed repeat: how much its calibrations moved,
      serving.study.bracketing.drift], "probe_share": [per probe-tracked repeat: the probe's share of the
      steps' time]}}. The "error" and "within" of a probe-tracked repeat are the probe-tracked ones.
    Records made before engines count as 'inferlab'; only records with a summary (rates set as
    fractions) are used; records made before bracketing have no drift or first-calibration errors."""
    out: dict = {}
    for rec in records:
        if "summary" not in rec:
            continue
        name = record_engine(rec)
        if name == "inferlab" and record_step_model(rec) == "fitted":
            name = "inferlab (fitted step time)"  # beside, not mixed with, its runs on the operator profile
        e = out.setdefault(name, {"version": rec["summary"]["engine_version"], "repeats": 0,
                                  "fractions": {}, "drift": [], "probe_share": []})
        e["repeats"] += 1
        if "calibration" in rec["summary"]:
            e["drift"].append(float(rec["summary"]["calibration"]["drift"]))
        if "probe" in rec["summary"]:
            e["probe_share"].append(float(rec["summary"]["probe"]["share"]))
        for run in rec["runs"]:
            f = e["fractions"].setdefault(round(float(run["fraction"]), 2), {
                "bounded": bool(run["bounded"]), "error": {k: [] for *_, k in ERROR_KEYS},
                "live": {k: [] for *_, k in ERROR_KEYS}, "within": [], "step_ratio": [], "replay": [],
                "requests": [], "within_first_calibration": [], "live_between": [], "within_bracketed": [], "within_tracked": [],
                "bracketed_error": {k: [] for *_, k in ERROR_KEYS}, "probe_speed": [], "knife_edge": []})
            # per repeat (aligned with "error"): the keys a uniform 5 % step error moves past their bound;
            # None for a repeat recorded before the sensitivity was
            ke = run.get("sensitivity", {}).get("knife_edge")
            f["knife_edge"].append(None if ke is None else [k for m, p, k in ERROR_KEYS if ke[m][p]])
            f["step_ratio"].append(float(run["step_time_error"]["median_ratio"]))
            f["requests"].append(int(run["requests"]))
            if "live_speed" in run:  # the live run's speed inside the range of its two brackets' speeds?
                b = [rec["calibrations"][k]["speed"] for k in run["calibrations"]]
                f["live_between"].append(min(b) <= run["live_speed"] <= max(b))
            if "bracketed" in run:  # a probe-tracked run that kept the bracketed prediction's errors beside
                bc = run["bracketed"]["comparison"]
                for m, p, k in ERROR_KEYS:
                    f["bracketed_error"][k].append(float(bc[m][p]["error"]))
                f["within_bracketed"].append(all(abs(bc[m][p]["error"]) <= rec["bounds"][p] for m, p, _ in ERROR_KEYS))
            if "probe" in run:
                sp = run["probe"]["speed_track"]["speed"]
                f["probe_speed"].append((float(min(sp)), float(max(sp))))
            if "first_calibration_only" in run:
                f["within_first_calibration"].append(all(
                    abs(run["first_calibration_only"][m][p]["error"]) <= rec["bounds"][p] for m, p, _ in ERROR_KEYS))
            if "replay" in run:  # (matched steps, steps, largest |error| with the live step times)
                rp = run["replay"]
                f["replay"].append((int(rp["matched"]), int(rp["steps"]), max(
                    abs(rp["comparison"][m][p]["error"]) for m, p, _ in ERROR_KEYS)))
            ok = True
            for m, p, k in ERROR_KEYS:
                c = run["comparison"][m][p]
                f["error"][k].append(float(c["error"]))
                f["live"][k].append(float(c["live_s"]))
                ok &= abs(c["error"]) <= rec["bounds"][p]
            f["within"].append(bool(ok))
            if "probe" in run:
                f["within_tracked"].append(bool(ok))
    for e in out.values():
        for f in e["fractions"].values():
            f["live_spread"] = {k: live_spread(v) for k, v in f.pop("live").items()}
    return out


def engines_table(summary: dict) -> str:
    """engines_summary as text: one row per engine and fraction; each error as its range over the
    repeats, the live spread beside it."""
    from inferlab.tables import text_table
    rows = []
    for name, e in summary.items():
        for frac, f in sorted(e["fractions"].items()):
            cells = []
            for *_, k in ERROR_KEYS:
                errs = f["error"][k]
                cells.append(f"{min(errs):+.0%}..{max(errs):+.0%} ({f['live_spread'][k]:.0%})")
            n = f["requests"]
            rows.append((f"{name} {e['version']}", f"{frac:.2f}x" + ("" if f["bounded"] else " (unbounded)"),
                         f"{min(n)}" if min(n) == max(n) else f"{min(n)}-{max(n)}",
                         *cells, f"{sum(f['within'])}/{len(f['within'])}"))
    return text_table(("engine", "load", "requests", "TTFT p50 err (spread)", "TTFT p99 err (spread)",
                       "ITL p50 err (spread)", "ITL p99 err (spread)", "repeats within"), rows,
                      ("s",) * 8)


def probe_table(records: list) -> str:
    """The probe-tracked records (serving.study.hostspeed) run by run: per repeat and rate, the four errors
    (TTFT p50 / p99, ITL p50 / p99) of the judged probe prediction and bracketed, each marked * where outside its bound,
    the probe's share of the live steps' time and the range of its speed track."""
    from inferlab.tables import text_table
    rows = []
    for i, rec in enumerate([r for r in records if any("probe" in x for x in r["runs"])]):
        for r in rec["runs"]:
            if "probe" not in r:
                continue
            cells = []
            for cmp in (r["comparison"], r.get("bracketed", {}).get("comparison")):
                cells.append("-" if cmp is None else " / ".join(f"{cmp[m][p]['error']:+.0%}" + ("*" if abs(cmp[m][p]["error"]) >
                                        rec["bounds"][p] else "") for m, p, _ in ERROR_KEYS))
            sp = r["probe"]["speed_track"]["speed"]
            rows.append((rec["created"][:16].replace("T", " "), f"{r['fraction']:.2f}x" +
                         ("" if r["bounded"] else " (unbounded)"), *cells, f"{r['probe']['share']:.1%}",
                         f"{min(sp):.2f}-{max(sp):.2f}"))
    return text_table(("recorded (UTC)", "load", "judged err", "bracketed err", "probe share",
                       "speed"), rows, ("s",) * 6)


def _span(lo: float, hi: float, fmt: str) -> str:
    """'lo to hi' in `fmt`, or the one value where both print alike ('1.5%', not '1.5% to 1.5%')."""
    a, b = format(lo, fmt), format(hi, fmt)
    return a if a == b else f"{a} to {b}"


def _pct(x: float) -> str:
    """A signed whole percent with a typographic minus (−7, +0, +61)."""
    return f"{x:+.0%}".replace("-", "\u2212").rstrip("%")


def repeats_markdown(records: list) -> str:
    """The probe-tracked records as a Markdown table, one row per repeat and prediction (the judged
    one, the other probe prediction where the record has it, bracketed) and one column per rate: TTFT p50 / p99, ITL p50 / p99 errors in %, an error outside
    its bound at a bounded rate in bold, a percentile the run's `sensitivity` calls knife-edged marked †, and ✓ where
    all four are within their bounds. The README's table is this function's output (a test checks)."""
    recs = [r for r in records if any("probe" in x for x in r["runs"])]
    if not recs:
        return "No probe-tracked record."
    fr = [r for r in recs[0]["runs"]]
    head = "| run | " + " | ".join(f"{r['fraction']:.2g}x" + ("" if r["bounded"] else " (not bounded)")
                                   for r in fr) + " |"
    lines = [head, "|---" * (len(fr) + 1) + "|"]
    for i, rec in enumerate(recs, 1):
        judged = next(r.get("prediction", "probe-tracked") for r in rec["runs"] if "probe" in r)
        rows = [(f"{judged} (judged)", None)] + [(label, key) for label, key in [
            (k, PREDICTION_KEYS[k]) for k in PREDICTIONS if k != judged] + [("bracketed", "bracketed")]
            if all(key in r for r in rec["runs"])]
        for label, key in rows:
            cells = []
            for r in rec["runs"]:
                cmp = r["comparison"] if key is None else r[key]["comparison"]
                edge = r.get("sensitivity", {}).get("knife_edge", {}) if key is None else {}
                vals = []
                for m, p, _ in ERROR_KEYS:
                    e = cmp[m][p]["error"]
                    v = _pct(e) + ("\u2020" if edge.get(m, {}).get(p) else "")
                    vals.append(f"**{v}**" if r["bounded"] and abs(e) > rec["bounds"][p] else v)
                ok = all(abs(cmp[m][p]["error"]) <= rec["bounds"][p] for m, p, _ in ERROR_KEYS)
                cells.append(" / ".join(vals) + " %" + (" \u2713" if ok and r["bounded"] else ""))
            lines.append(f"| {i}, {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def engines_conclusion(summary: dict) -> str:
    """What the engines' recorded validations say, in words (Markdown), every number from `summary`
    (engines_summary): per engine, how many (repeat, bounded rate) pairs met both bounds, the worst
    bounded error, how many bounded errors lie inside the live run-to-run spread, and the median
    step-time ratio's range."""
    if not summary:
        return "No recorded validation with an engine summary."
    parts = []
    for name, e in summary.items():
        bounded = {f: x for f, x in e["fractions"].items() if x["bounded"]}
        if not bounded:
            continue
        pairs = sum(len(x["within"]) for x in bounded.values())
        ok = sum(sum(x["within"]) for x in bounded.values())
        worst = max(((abs(v), v, k, f) for f, x in bounded.items() for k, vs in x["error"].items() for v in vs),
                    key=lambda t: t[0])
        inside = sum(abs(v) <= x["live_spread"][k] for x in bounded.values() for k, vs in x["error"].items()
                     for v in vs)
        n_err = sum(len(vs) for x in bounded.values() for vs in x["error"].values())
        ratios = [r for x in e["fractions"].values() for r in x["step_ratio"]]
        replays = [r for x in e["fractions"].values() for r in x["replay"]]
        replay = "" if not replays else (
            f" Replayed on the live step times, the simulated schedule matched the live one step for step in "
            f"{sum(m == n for m, n, _ in replays)} of {len(replays)} runs ({sum(m for m, _, _ in replays)} of "
            f"{sum(n for _, n, _ in replays)} steps), with latency errors of at most {max(x for *_, x in replays):.1%}.")
        first = [w for x in bounded.values() for w in x["within_first_calibration"]]
        if e["drift"]:
            replay += (f" Its calibrations, one before and one after each rate, moved by "
                       f"{_span(min(e['drift']), max(e['drift']), '.0%')} within a repeat (slowest over fastest - 1)")
            replay += (f"; had the first calibration alone set the step time, {sum(first)} of {len(first)} pairs "
                       "would have been within both bounds." if first else ".")
            between = [w for x in bounded.values() for w in x["live_between"]]
            if between:
                replay += (f" The live run's own speed (on the first calibration's fit) lay between its two "
                           f"brackets' speeds in {sum(between)} of {len(between)} bounded runs; a change of speed that neither "
                           "calibration saw is one bracketing cannot cancel.")
        tracked = [w for x in bounded.values() for w in x["within_tracked"]]
        if tracked:
            ok_t, alone = sum(tracked), [w for x in bounded.values() for w in x["within_bracketed"]]
            speeds = [s for x in e["fractions"].values() for s in x["probe_speed"]]
            replay += (f" In {len(e['probe_share'])} repeat{'s' if len(e['probe_share']) != 1 else ''} the "
                       f"prediction followed the host with a probe timed inside the engine's every step "
                       f"(its cost {_span(min(e['probe_share']), max(e['probe_share']), '.1%')} of the steps' time; the "
                       f"host's speed on it {_span(min(a for a, _ in speeds), max(b for _, b in speeds), '.2f')} of the "
                       f"calibrations'): {ok_t} of {len(tracked)} of those pairs within both bounds with it"
                       + (f", {sum(alone)} of {len(alone)} with the bracketing calibrations alone." if alone else "."))
        edged = [(x, i) for x in bounded.values() for i, ke in enumerate(x["knife_edge"]) if ke is not None]
        if edged:
            miss = [(k, k in x["knife_edge"][i]) for x, i in edged for m, p, k in ERROR_KEYS
                    if abs(x["error"][k][i]) > BOUNDS[p]]
            n_edge = sum(len(x["knife_edge"][i]) for x, i in edged)
            replay += (f" In the {len(edged)} (repeat, rate) pairs that recorded it, a uniform {STEP_SENSITIVITY:.0%} "
                       f"step-time error would move {n_edge} of {4 * len(edged)} simulated percentiles past their "
                       f"bound (knife-edged)" + (f"; {sum(e for _, e in miss)} of {len(miss)} misses among them at "
                                                 "such a percentile." if miss else "; none of them missed."))
        n = [k for x in bounded.values() for k in x["requests"]]
        replay += (f" Each TTFT p99 is taken over {min(n)}{'' if min(n) == max(n) else f' to {max(n)}'} requests"
                   + (": it lies between the two slowest, so one request decides it." if max(n) <= 101 else "."))
        label = {"ttft_p50": "TTFT p50", "ttft_p99": "TTFT p99", "itl_p50": "ITL p50", "itl_p99": "ITL p99"}
        parts.append(
            f"**{name} {e['version']}**: {e['repeats']} recorded repeat{'s' if e['repeats'] != 1 else ''}; "
            f"{ok} of {pairs} (repeat, rate) pairs at {', '.join(f'{f:.2f}x' for f in sorted(bounded))} capacity "
            f"within both bounds; the worst error {worst[1]:+.0%} ({label[worst[2]]} at {worst[3]:.2f}x); "
            f"{inside} of {n_err} errors no larger than the live runs' own spread at that rate; the simulated "
            f"steps {_span(min(ratios), max(ratios), '.2f')} of the measured ones (median per run)." + replay)
    return "\n".join(f"- {p}" for p in parts)


# -- engine 'vllm' (serving.study.engines.vllm): its server, its benchmark client, its scheduler ---------------------
# vLLM's client sees requests, not steps; its engine's step log (engines.vllm_steps, a plugin `make vllm`
# installs) times every step. A calibration serves timed requests of two kinds, lone prompts (a prefill of L
# tokens alone, L within the token budget) and bursts of b short prompts decoding together, then two Poisson
# runs with seeds of their own (the mixed steps the workloads are made of); the step time is fitted to every
# step the log timed. One calibration before the rates, one after; the prediction steps on one fit over both
# (`_vllm_prediction`), with the front end's delays drawn per request from the calibrations' (SampledFrontend)
# and the steps' spread drawn from their Poisson runs (VLLM_SPREAD_FROM) (serving.study.served). The server's
# engine core runs reniced (engines.vllm.ENGINE_NICE: on 2 cores its busy wait starved the front end).
# `vllm_calibration_steps` is the method of the records made before the step log existed: steps
# inferred from the client's times (a lone prompt's TTFT; a burst's last token less a lone prompt's TTFT).
VLLM_CAL_LONE = (8, 16, 32, 48, 64)   # prompt tokens of the lone prefills (those within the token budget)
VLLM_CAL_REPEATS = 4                  # each lone prompt this many times
VLLM_CAL_LONE_GAP_S = 0.5             # between lone prompts: each served before the next arrives
VLLM_CAL_BURSTS = (1, 2, 4, 8)        # requests decoding together (those within max_num_seqs)
VLLM_CAL_BURST_PROMPT, VLLM_CAL_BURST_OUTPUT = 8, 32
VLLM_CAL_BURST_REPEATS = 4
VLLM_CAL_BURST_GAP_S = 1.5
# A gap between two tokens shorter than this is a delivery artefact (several tokens in one message): no
# decode step of the served model is this short. Each run records the share of such gaps.
VLLM_BUNCHED_GAP_S = 0.5e-3
# The repeat rule (docs/vllm.md; when it was committed and the runs its thresholds came from:
# docs/lab-notes.md): a rate's run that its own measurements show disturbed (docs/glossary.md;
# engines.vllm.disturbances_of: the engine waiting
# 50 ms or more with work in hand, a request's way in or out that long, or its first 15 steps at 1.5x
# or more calibration 0's fit) is served again, the same workload, up to VLLM_REPEAT_DISTURBED times; the
# first undisturbed run is judged (the last if none is), and every disturbed run stays in the record
# (its run's `disturbed_attempts`, compared with the same prediction). The rule reads no prediction.
VLLM_REPEAT_DISTURBED = 2
VLLM_REPEAT_DISTURBED_MAX = 5


def vllm_calibration_workload(settings) -> tuple:
    """(Workload, groups) of a vLLM calibration (see above); groups: per request ('lone', L) or
    ('burst', b, index of its burst)."""
    budget, seqs = settings.max_num_batched_tokens, settings.max_num_seqs
    arrival, prompt, output, groups, t = [], [], [], [], 0.0
    for _ in range(VLLM_CAL_REPEATS):
        for n in (x for x in VLLM_CAL_LONE if x <= budget):
            arrival.append(t), prompt.append(n), output.append(1), groups.append(("lone", n))
            t += VLLM_CAL_LONE_GAP_S
    k = 0
    for b in (x for x in VLLM_CAL_BURSTS if x <= seqs and x * VLLM_CAL_BURST_PROMPT <= budget):
        for _ in range(VLLM_CAL_BURST_REPEATS):
            for _ in range(b):
                arrival.append(t), prompt.append(VLLM_CAL_BURST_PROMPT), output.append(VLLM_CAL_BURST_OUTPUT)
                groups.append(("burst", b, k))
            k += 1
            t += VLLM_CAL_BURST_GAP_S
    return Workload(np.array(arrival), np.array(prompt, dtype=np.int64), np.array(output, dtype=np.int64)), groups


def vllm_calibration_steps(result, groups) -> tuple:
    """([StepShape], durations_s) from a calibration's vLLM
    result (a SimResult, serving.study.engines.vllm.result_of, requests in the workload's order): a lone
    prompt of L tokens is the step StepShape(0, 0, ((L, 0),), 1) lasting its TTFT; a burst of b prompts of P
    tokens and N output tokens is one prefill of b P tokens, then N - 1 decode steps (j = 1 .. N - 1,
    each sequence reading its P + j keys), so its mean decode step is StepShape(b, b (P + N / 2), (), b), lasting

        (median over the burst of its last token's time - median TTFT of the lone b P-token prompts) / (N - 1)

    (the same prefill and the same fixed costs of a request on both sides, so they cancel). A burst
    whose b P tokens no lone prompt had, or whose estimate is not positive, is left out."""
    steps, durations, bursts, lone = [], [], {}, {}
    ttft, e2e = result.ttft_s, result.e2e_s
    for i, g in enumerate(groups):
        if g[0] == "lone":
            steps.append(StepShape(0, 0.0, ((int(g[1]), 0),), 1))
            durations.append(float(ttft[i]))
            lone.setdefault(int(g[1]), []).append(float(ttft[i]))
        else:
            bursts.setdefault(g[2], (g[1], []))[1].append(i)
    for b, members in bursts.values():
        n = int(result.output_tokens[members[0]])
        p = int(result.prompt_tokens[members[0]])
        if b * p not in lone or n < 2:
            continue
        d = (float(np.median(e2e[members])) - float(np.median(lone[b * p]))) / (n - 1)
        if d > 0:
            steps.append(StepShape(b, float(b * (p + n / 2)), (), b))
            durations.append(d)
    return steps, np.asarray(durations)


VLLM_CAL_MIX_FRACTIONS = (0.5, 1.0)  # Poisson calibration runs at these fractions of the first capacity estimate
VLLM_CAL_MIX_SEED = 1000             # their seeds: VLLM_CAL_MIX_SEED + 10 k + j (calibration k, run j), never the workloads'


def _client_span(data: dict) -> tuple:
    """(first send, last token) of a vLLM client result, on its perf_counter clock."""
    start = np.asarray(data["start_times"], dtype=float)
    end = start + np.asarray(data["ttfts"], dtype=float) + np.array([float(np.sum(x)) for x in data["itls"]])
    return float(start.min()), float(end.max())


def _logged(server_log, data: dict):
    """The part of the server's step log (engines.vllm_steps) one client run covers."""
    from inferlab.serving.study.engines.vllm_steps import read_step_log
    t0, t1 = _client_span(data)
    return read_step_log(server_log).between(t0 - 0.05, t1 + 0.25)


def _vllm_calibrate(ctx, k: int, mix_rates, log) -> dict:
    """Calibration k: the timed requests of `vllm_calibration_workload` (lone prompts, bursts), then a
    Poisson run at each of `mix_rates` (None: VLLM_CAL_MIX_FRACTIONS of the capacity the first part's fit
    predicts) with its own seed, so that the steps the workloads are made of (prompt chunks beside
    decodes) are timed too. Every step is timed by vLLM's step log; the fit is over all of them."""
    from inferlab.serving.study.engines.vllm import bench_serve, check_served
    from inferlab.serving.study.engines.vllm_steps import frontend_delays
    from inferlab.serving.study.fitted import FittedStepTime
    name = f"calibration-{k}"
    w, _ = vllm_calibration_workload(ctx.settings)
    log(f"{name}: {len(w)} timed requests")
    data = bench_serve(ctx.python, ctx.server, ctx.model_dir, w, ctx.work, name, base_id=0)
    check_served(data, w, name)
    parts = [_logged(ctx.steplog, data)]
    delays = frontend_delays(parts[0], data)
    if mix_rates is None:
        first = FittedStepTime.fit(parts[0].shapes(), parts[0].periods_s())
        cap = capacity_requests_per_s(ctx.setup, first, ctx.v.prompt, ctx.v.output, ctx.v.seed)
        mix_rates = [f * cap for f in VLLM_CAL_MIX_FRACTIONS]
    for j, rate in enumerate(mix_rates):
        mw = synthetic(rate, n_requests=ctx.v.requests_per_rate, prompt=ctx.v.prompt, output=ctx.v.output, cv=ctx.v.cv,
                       seed=VLLM_CAL_MIX_SEED + 10 * k + j)
        log(f"{name}: {len(mw)} Poisson requests at {rate:.2f}/s")
        mdata = bench_serve(ctx.python, ctx.server, ctx.model_dir, mw, ctx.work, f"{name}-mix-{j}",
                            base_id=(100 + 10 * k + j) * 1_000_000)
        check_served(mdata, mw, f"{name}-mix-{j}")
        parts.append(_logged(ctx.steplog, mdata))
        for key, values in frontend_delays(parts[-1], mdata).items():
            delays[key] += values
    steps = [s for part in parts for s in part.shapes()]
    periods = np.concatenate([part.periods_s() for part in parts])
    probe = _probe_columns(parts, parts[0].steps[0].t0_s)
    fit = FittedStepTime.fit(steps, periods)
    log(f"  fitted on {fit.fit_stats['n']} logged steps: median |error| {fit.fit_stats['median_abs']:.1%}, "
        f"p90 {fit.fit_stats['p90_abs']:.1%}; front end in {np.median(delays['in_s']) * 1e3:.1f} ms, "
        f"out {np.median(delays['out_s']) * 1e3:.1f} ms")
    return {"name": name, "fit": fit, "steps": steps, "durations_s": periods, "mix_rates": list(mix_rates),
            "part_steps": [len(part.steps) for part in parts],
            "frontend_samples": delays, "step_probe": probe}


def run_waits(logged, data: dict) -> dict:
    """What disturbed a served run, from its step log and its client result: the engine's longest wait
    with work in hand (engines.vllm_steps.StepLog.longest_wait_s) and the front end's longest ways in
    (in_any) and out (engines.vllm_steps.frontend_delays), seconds."""
    from inferlab.serving.study.engines.vllm_steps import frontend_delays
    d = frontend_delays(logged, data)
    return {"engine_wait_max_s": float(logged.longest_wait_s()),
            "in_max_s": float(max(d["in_any_s"], default=0.0)), "out_max_s": float(max(d["out_s"], default=0.0))}


def _probe_columns(parts, t0_s: float) -> dict | None:
    """The host-speed probe of logged steps (benchmarks/vllm_steplog.py) as the record keeps it: {t_s (each
    step's start less t0_s), probe_s}, or None for a log without the probe."""
    from inferlab.serving.study.engines.vllm_steps import PROBES
    try:
        logs = [part.probe_log(PROBES[0], t0_s) for part in parts]
    except RuntimeError:
        return None
    return {"probe": PROBES[0], "t_s": [float(x) for g in logs for x in g.times_s],
            "probe_s": [float(x) for g in logs for x in g.probe_s]}


def _fit_error(fit, steps, durations_s) -> dict:
    """|predicted / measured - 1| of `fit` over timed steps: n, median, p90, and the median ratio."""
    r = np.array([fit.step_time_s(s, 0.0) for s in steps]) / np.asarray(durations_s)
    return {"n": int(len(r)), "median_abs": float(np.median(np.abs(r - 1))),
            "p90_abs": float(np.percentile(np.abs(r - 1), 90)), "median_ratio": float(np.median(r))}


def _vllm_result_subset(data: dict) -> dict:
    """What a record keeps of a vLLM result: enough to compare it again (serving.compare)."""
    keys = ("input_lens", "output_lens", "ttfts", "itls", "start_times", "errors", "request_rate", "burstiness",
            "request_throughput", "completed", "duration")
    return {k: data[k] for k in keys if k in data}


@dataclass(frozen=True)
class VllmValidation:
    """What `validate_vllm` runs: vLLM's server settings (serving.study.engines.vllm.VllmSettings;
    None: its defaults), the rates (or `fractions` of the predicted capacity), the requests at each
    rate, the length distributions, the arrivals' coefficient of variation, the seed and the SLO."""

    settings: object = None
    rates: object = None
    fractions: tuple = LOAD_FACTORS
    requests_per_rate: int = REQUESTS_PER_RATE
    prompt: LengthDist = LengthDist("lognormal", 128, 0.5, 16, 384)
    output: LengthDist = LengthDist("lognormal", 32, 0.5, 4, 96)
    cv: float = 1.0
    seed: int = 0
    slo: SLO = SLO()
    repeat_disturbed: int = VLLM_REPEAT_DISTURBED


@dataclass
class _VllmRun:
    """What one vLLM validation's steps share: the vLLM venv's python, the server, the model directory,
    its settings, the work directory, the server's step log (its path), the simulations' setup and the
    validation's options."""

    python: object
    server: object
    model_dir: object
    settings: object
    work: Path
    steplog: Path
    setup: object = None
    v: VllmValidation = None


def _vllm_serve_rates(ctx: _VllmRun, rates, names, fit0, log) -> list:
    """Each rate's workload through vLLM's benchmark client, served again while its own measurements show
    it disturbed (engines.vllm.disturbances_of against calibration 0's fit `fit0`), up to
    ctx.v.repeat_disturbed times (the repeat rule, VLLM_REPEAT_DISTURBED): (rate, name, workload, result,
    the part of the step log it covers, {disturbances: the judged run's, disturbed: [(result, log part,
    disturbances)] of the runs served before it}). The judged run is the first undisturbed one, else the last."""
    from inferlab.serving.study.engines import vllm as V
    lives = []
    for k, (rate, name) in enumerate(zip(rates, names)):
        v = ctx.v
        w = synthetic(rate, n_requests=v.requests_per_rate, prompt=v.prompt, output=v.output, cv=v.cv, seed=v.seed)
        disturbed = []
        for attempt in range(1 + v.repeat_disturbed):
            again = f" again ({attempt} of at most {v.repeat_disturbed})" if attempt else ""
            log(f"live: {len(w)} requests at {rate:.2f}/s ({name}) through vLLM's benchmark client{again}")
            label = f"rate-{k}" + (f"-again-{attempt}" if attempt else "")
            data = V.bench_serve(ctx.python, ctx.server, ctx.model_dir, w, ctx.work, label,
                                 base_id=(k + 1) * 1_000_000 + attempt * 100_000)
            V.check_served(data, w, label)
            logged = _logged(ctx.steplog, data)
            reasons = V.disturbances_of(run_waits(logged, data), logged.shapes(), logged.periods_s(), fit0)
            if not reasons or attempt == v.repeat_disturbed:
                break
            log(f"  disturbed ({'; '.join(reasons)}): kept, and served again")
            disturbed.append((data, logged, reasons))
        if reasons:
            log(f"  disturbed ({'; '.join(reasons)}), and no repeat left: judged as it is")
        lives.append((rate, name, w, data, logged, {"disturbances": reasons, "disturbed": disturbed}))
    return lives


def _disturbed_attempt(data: dict, logged, reasons: list, simulated: dict, slo) -> dict:
    """What a record keeps of a disturbed run the repeat rule served again: its disturbances, waits, live
    percentiles and their comparison with the same prediction as the judged run's (None where a live
    percentile is 0), its step log and its client result."""
    from inferlab.serving.study.engines import vllm as V
    ls = V.result_of(data, "disturbed").summary(slo)
    usable = all(ls[m][p] > 0 for m in ("ttft_s", "itl_s") for p in ("p50", "p99"))
    return {"disturbances": list(reasons), "waits": run_waits(logged, data), "live": ls,
            "comparison": compare(ls, simulated) if usable else None,
            "step_log": step_log(logged.shapes(), logged.periods_s()),
            "step_probe": _probe_columns([logged], _client_span(data)[0]), "vllm_result": _vllm_result_subset(data)}


@dataclass(frozen=True)
class _VllmPrediction:
    """The simulator's model of the served engine: the fitted step time, the measured spread of the
    calibration's steps around it (serving.study.served), the front end (judged: its delays sampled per
    request, `SampledFrontend`, where the calibrations timed every request's way in; records made before
    that: their medians) and the front end of the medians."""

    fit: object
    ratios: np.ndarray
    frontend: object
    median_frontend: object

    def summary(self, setup, w: Workload, frontend=None) -> dict:
        from inferlab.serving.study.served import mean_summary
        return mean_summary(setup, w, self.fit, self.ratios, frontend or self.frontend)

    def one_replica(self, setup, w: Workload):
        """The first of the averaged simulations (seed 0), for its distributions."""
        from inferlab.serving.study.served import JitteredStepTime
        return self.frontend.simulate(setup, w, JitteredStepTime(self.fit, self.ratios, 0), 0)


# Whose steps the steps' spread (serving.study.served.JitteredStepTime) is drawn from: "poisson", the
# calibrations' Poisson runs only (the steps made as the workloads' are), or "all" their logged steps (the
# older records). The timed requests (lone prompts and bursts after idle gaps) scatter wider around the
# fit than the Poisson runs and the live runs do, so drawing from them made every ITL p99 long (the
# repeats that showed it: docs/lab-notes.md).
VLLM_SPREAD_FROM = "poisson"
VLLM_SPREADS_FROM = ("poisson", "all")


def _spread_steps(c: dict, spread_from: str) -> tuple:
    """(steps, durations) of calibration `c` the spread is drawn from (VLLM_SPREAD_FROM)."""
    if spread_from not in VLLM_SPREADS_FROM:
        raise ValueError(f"spread_from must be one of {', '.join(VLLM_SPREADS_FROM)}; got {spread_from!r}")
    first = c["part_steps"][0] if spread_from == "poisson" else 0
    return c["steps"][first:], np.asarray(c["durations_s"])[first:]


def _vllm_prediction(cals: list, spread_from: str = VLLM_SPREAD_FROM):
    """The prediction from calibrations: one fit over all their logged steps, the spread around it of
    their steps that `spread_from` names (VLLM_SPREAD_FROM), their front-end delays (sampled per request
    where every calibration timed every request's way in, "in_any_s"; else their medians)."""
    from inferlab.serving.study.fitted import FittedStepTime
    from inferlab.serving.study.served import Frontend, SampledFrontend, spread_ratios
    steps = [s for c in cals for s in c["steps"]]
    periods = np.concatenate([c["durations_s"] for c in cals])
    fit = FittedStepTime.fit(steps, periods)
    ins = [x for c in cals for x in c["frontend_samples"]["in_s"]]
    outs = [x for c in cals for x in c["frontend_samples"]["out_s"]]
    if not ins or not outs:
        raise RuntimeError("the calibrations timed no request's way into or out of the engine (step log and "
                           "client results do not match)")
    medians = Frontend(float(np.median(ins)), float(np.median(outs)))
    sampled = medians
    if all("in_any_s" in c["frontend_samples"] for c in cals):
        sampled = SampledFrontend([x for c in cals for x in c["frontend_samples"]["in_any_s"]], outs)
    spread = [_spread_steps(c, spread_from) for c in cals]
    ratios = spread_ratios(fit, [x for st, _ in spread for x in st], np.concatenate([d for _, d in spread]))
    return _VllmPrediction(fit, ratios, sampled, medians)


def _vllm_compare_rate(setup, pred: _VllmPrediction, pred0: _VllmPrediction, cap, live_run, slo, log):
    """One rate's live run against its prediction: ("run", record) or ("unusable", record). Beside the
    judged prediction (jittered steps, sampled front end), the record keeps the same with the front end
    at its medians ("frontend_medians"), the same fit without the spreads ("deterministic": the front end
    at its medians, no jitter) and without the front end either ("engine_only"), the fit's error on the
    run's own logged steps, which no calibration saw, and the run's probe of the host's speed."""
    from inferlab.serving.study.engines import vllm as V
    rate, name, w, data, logged = live_run[:5]
    live = V.result_of(data, name)
    ls = live.summary(slo)
    ss = pred.summary(setup, w)
    det = pred.median_frontend.simulate(setup, w, pred.fit)
    engine_only = setup.simulate(w, pred.fit)
    gaps = live.all_itls_s
    bunched = float(np.mean(gaps < VLLM_BUNCHED_GAP_S)) if len(gaps) else 0.0
    steps = {"live": len(logged.steps), "simulated": int(len(det.traces[0].step_s))}
    if not all(ls[m][p] > 0 for m in ("ttft_s", "itl_s") for p in ("p50", "p99")):
        log(f"  {rate:.2f}/s ({name}): a live percentile is 0 ({bunched:.0%} of the gaps under "
            f"{VLLM_BUNCHED_GAP_S * 1e3:.1f} ms: tokens delivered in bunches); not compared")
        return "unusable", {"rate_per_s": rate, "load": name, "fraction": rate / cap, "requests": len(w), "live": ls,
                            "simulated": ss, "bunched_fraction": bunched, "engine_steps": steps,
                            "vllm_result": _vllm_result_subset(data)}
    cmp = compare(ls, ss)
    fraction = rate / cap
    run = {"rate_per_s": rate, "load": name, "fraction": fraction, "bounded": fraction <= BOUNDED_UP_TO,
           "requests": len(w), "live": ls, "simulated": ss, "comparison": cmp,
           "step_time_error": {**_fit_error(pred.fit, logged.shapes(), logged.periods_s()),
                               "of": "this run's own steps, from vLLM's step log"},
           "sensitivity": step_sensitivity(setup, w, pred.fit), "calibrations": [0, 1],
           "deterministic": compare(ls, det.summary(slo)), "engine_only": compare(ls, engine_only.summary(slo)),
           "first_calibration_only": compare(ls, pred0.summary(setup, w)),
           "frontend_medians": compare(ls, pred.summary(setup, w, pred.median_frontend)),
           "quantiles": {"live": quantiles(live), "simulated": quantiles(pred.one_replica(setup, w))},
           "bunched_fraction": bunched, "engine_steps": steps,
           "step_log": step_log(logged.shapes(), logged.periods_s()),   # the run's own steps, from vLLM's log
           "step_probe": _probe_columns([logged], _client_span(data)[0]),   # engines.vllm.probe_timeline
           "waits": run_waits(logged, data),
           "vllm_result": _vllm_result_subset(data)}
    log(f"  {rate:.2f}/s ({name}): engine steps, vLLM {steps['live']}, simulated {steps['simulated']}; the fit on "
        f"them: median |error| {run['step_time_error']['median_abs']:.1%}")
    log(f"  {rate:.2f}/s ({name}): TTFT p50 {cmp['ttft_s']['p50']['error']:+.1%}, p99 "
        f"{cmp['ttft_s']['p99']['error']:+.1%}; ITL p50 {cmp['itl_s']['p50']['error']:+.1%}, p99 "
        f"{cmp['itl_s']['p99']['error']:+.1%}")
    return "run", run


def vllm_repredict(record: dict, spread_from: str | None = None) -> list:
    """Re-make every prediction of a vLLM validation record made with the step log ('vllm-steplog-fitted')
    from the record alone: the fit over its calibrations' logged steps, their spread, the medians of
    their front-end samples, the workloads from their config and seed, vLLM's settings and KV pool.
    Returns per run {load, fraction, bounded, comparison}: equal to the recorded ones when the record
    holds everything its predictions were made from (tests check it). spread_from (VLLM_SPREADS_FROM): whose
    steps the spread is drawn from; None: the record's own (config.calibration.spread_from; 'all' before it
    was recorded)."""
    from inferlab.measure.ceilings import Ceilings
    from inferlab.serving.study.engines.vllm import VllmSettings
    from inferlab.specs import ModelConfig
    if record_engine(record) != "vllm" or record.get("profile", {}).get("kind") != "vllm-steplog-fitted":
        raise ValueError("record must be a vLLM validation made with vLLM's step log (profile.kind "
                         "'vllm-steplog-fitted')")
    c, dims = record["config"], record["config"]["model_dims"]
    cfg = ModelConfig(name=c["model"], gated_mlp=True, tied_embeddings=False, **dims)
    vs = c["vllm"]
    settings = VllmSettings(**{k: vs[k] for k in ("max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill",
                                                  "block_size", "kv_cache_space_gib", "max_model_len", "dtype")})
    setup = SimSetup(cfg, Ceilings.from_dict(record["ceilings"]).accelerator("measured-cpu"), settings.policy(),
                     Precision("bf16", "bf16", "bf16"), c["kv_blocks"], c["block_tokens"], watermark=0.0)
    cals = []
    for cal in record["calibrations"]:
        from inferlab.serving.study.fitted import logged_steps
        steps, durations = logged_steps(cal["step_log"])
        cals.append({"steps": steps, "durations_s": durations, "frontend_samples": cal["frontend"],
                     "part_steps": cal.get("part_steps", [0])})
    if spread_from is None:
        spread_from = c["calibration"].get("spread_from", "all")
    pred = _vllm_prediction(cals, spread_from)
    prompt, output = _length_dist(c["prompt"]), _length_dist(c["output"])
    out = []
    for r in record["runs"]:
        w = synthetic(r["rate_per_s"], n_requests=r["requests"], prompt=prompt, output=output, cv=c["cv"], seed=c["seed"])
        out.append({"load": r["load"], "fraction": float(r["fraction"]), "bounded": bool(r["bounded"]),
                    "comparison": compare(r["live"], pred.summary(setup, w))})
    return out


def _vllm_config(v: VllmValidation, settings, cfg, kv_blocks: int) -> dict:
    """The record's config of a vLLM validation."""
    prompt, output = v.prompt, v.output
    return {"model": cfg.name, "model_dims": {"d_model": cfg.d_model, "n_layers": cfg.n_layers, "n_heads": cfg.n_heads,
                                              "n_kv_heads": cfg.n_kv_heads, "head_dim": cfg.head_dim, "d_ff": cfg.d_ff,
                                              "vocab_size": cfg.vocab_size},
            "dtype": "bf16", "policy": "vllm-v1", "max_num_seqs": settings.max_num_seqs,
            "max_len": settings.max_model_len, "duration_s": None, "requests_per_rate": v.requests_per_rate,
            "cv": v.cv, "seed": v.seed,
            "prompt": {"kind": prompt.kind, "mean": prompt.mean, "cv": prompt.cv, "low": prompt.low, "high": prompt.high},
            "output": {"kind": output.kind, "mean": output.mean, "cv": output.cv, "low": output.low, "high": output.high},
            "kv_blocks": kv_blocks, "block_tokens": settings.block_size, "vllm": settings.to_dict(),
            "calibration": {"lone_prompts": list(VLLM_CAL_LONE), "repeats": VLLM_CAL_REPEATS,
                            "bursts": list(VLLM_CAL_BURSTS), "burst_prompt": VLLM_CAL_BURST_PROMPT,
                            "burst_output": VLLM_CAL_BURST_OUTPUT, "burst_repeats": VLLM_CAL_BURST_REPEATS,
                            "mix_fractions": list(VLLM_CAL_MIX_FRACTIONS), "mix_seed": VLLM_CAL_MIX_SEED,
                            "spread_from": VLLM_SPREAD_FROM,
                            "steps_timed_by": "vLLM's step log (benchmarks/vllm_steplog.py)"},
            "repeat_disturbed": repeat_rule(v.repeat_disturbed)}


def repeat_rule(max_repeats: int) -> dict:
    """The repeat rule as a record keeps it (VLLM_REPEAT_DISTURBED, engines.vllm.disturbances_of)."""
    from inferlab.serving.study.engines import vllm as V
    return {"max_repeats": int(max_repeats), "wait_s": V.DISTURBED_WAIT_S, "slow_start_ratio": V.SLOW_START_RATIO,
            "slow_start_steps": V.SLOW_START_STEPS, "fit": "calibration 0's",
            "judged": "the first undisturbed run of a rate, else its last"}


def validate_vllm(v: VllmValidation = VllmValidation(), *, root=None, work_dir=None, log=print) -> dict:
    """engine 'vllm': start vLLM's server (serving.study.engines.vllm; `make vllm` first) with its step log
    on (serving.study.engines.vllm_steps), calibrate (`_vllm_calibrate`: timed requests and two Poisson
    runs of other seeds, every step timed by the log), replay the Poisson workloads of the other engines
    through vLLM's own benchmark client at each rate (`v.fractions` of the capacity the calibration
    predicts, or `v.rates`), calibrate again, and predict every run on the simulator with vLLM's scheduler
    (policies.VllmV1 from `v.settings`, serving.study.engines.vllm.VllmSettings) and KV pool (the size vLLM
    logs), on one fit over both calibrations' steps, their measured spread and the front end's delays
    (serving.study.served). The server is stopped on return, on an error and on Ctrl-C; its log, its step
    log and every trace and result stay under work_dir (default build/vllm-logs/<UTC time>). Returns the
    record, in validate's schema, summary.engine 'vllm'."""
    from inferlab.serving.study.engines import vllm as V
    from inferlab.input_checks import positive_int

    t_start = time.perf_counter()
    log = log or (lambda message: None)
    settings = v.settings or V.VllmSettings()
    positive_int("requests_per_rate", v.requests_per_rate, minimum=2, maximum=10_000)
    positive_int("repeat_disturbed", v.repeat_disturbed, minimum=0, maximum=VLLM_REPEAT_DISTURBED_MAX)
    if v.rates is None and not v.fractions:
        raise ValueError("fractions must hold at least one fraction of capacity; got none")
    if v.prompt.high + v.output.high > settings.max_model_len:
        raise ValueError(f"max_model_len must hold the longest prompt + output ({v.prompt.high + v.output.high} "
                         f"tokens); got {settings.max_model_len}")
    root = V.ROOT if root is None else root
    python, model_dir = V.require_vllm(root)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    work = Path(work_dir) if work_dir is not None else Path(root) / "build" / "vllm-logs" / stamp
    ctx = _VllmRun(python, None, model_dir, settings, work, work / "steps.jsonl", v=v)
    measured = _vllm_measure(ctx, log)
    return _vllm_record(ctx, measured, t_start, log)


def _vllm_measure(ctx: _VllmRun, log) -> dict:
    """The live half of validate_vllm: ceilings, server, calibration 0, the rates, calibration 1."""
    from inferlab.measure import device as _device
    from inferlab.measure.ceilings import measure_ceilings
    from inferlab.serving.study.engines import vllm as V
    v, settings = ctx.v, ctx.settings
    info = _device.describe("cpu")
    free = _device.free_memory_bytes("cpu")
    log(f"ceilings of {info.name}")
    ceil = measure_ceilings("cpu", ["bf16"], copy_bytes=min(256e6, 0.1 * free), matmul_n=1024,
                            memory_bytes=free, seed=v.seed, max_time_s=1.0)
    cfg = V.model_config(ctx.model_dir)
    with V.VllmServer(ctx.python, ctx.model_dir, settings, ctx.work / "server.log", log=log,
                      steplog=ctx.steplog) as server:
        ctx.server = server
        kv_tokens = V.kv_tokens_from_log(server.log_text())
        if kv_tokens is None:
            raise RuntimeError(f"the vLLM server's log {server.log_path} names no KV cache size")
        kv_blocks = settings.kv_blocks(kv_tokens)
        log(f"vLLM {V.installed_version(ctx.python)}: KV pool {kv_tokens:,} tokens = {kv_blocks:,} blocks of "
            f"{settings.block_size}")
        ctx.setup = SimSetup(cfg, ceil.accelerator("measured-cpu"), settings.policy(), Precision("bf16", "bf16", "bf16"),
                             kv_blocks, settings.block_size, v.slo, watermark=0.0)
        cals = [_vllm_calibrate(ctx, 0, None, log)]
        cap = capacity_requests_per_s(ctx.setup, cals[0]["fit"], v.prompt, v.output, v.seed)
        if v.rates is None:
            rates = [f * cap for f in v.fractions]
            names = [LOAD_NAMES[LOAD_FACTORS.index(f)] if f in LOAD_FACTORS else f"{f:.2f}x capacity" for f in v.fractions]
        else:
            rates, names = list(v.rates), [f"{r / cap:.2f}x capacity" for r in v.rates]
        log(f"vllm: predicted capacity {cap:.2f} requests/s; rates {', '.join(f'{r:.2f}' for r in rates)}")
        lives = _vllm_serve_rates(ctx, rates, names, cals[0]["fit"], log)
        cals.append(_vllm_calibrate(ctx, 1, cals[0]["mix_rates"], log))
        startup_s, front_cpus = server.startup_s, server.front_cpus
    return {"cals": cals, "cap": cap, "lives": lives, "startup_s": startup_s, "ceilings": ceil, "info": info,
            "cfg": cfg, "kv_blocks": kv_blocks, "front_cpus": front_cpus}


def _vllm_record(ctx: _VllmRun, m: dict, t_start: float, log) -> dict:
    """The prediction half of validate_vllm: each rate's live run against the simulator, as the record."""
    import torch

    from inferlab.measure import device as _device
    from inferlab.serving.study.bracketing import drift as _drift, speed as _speed
    from inferlab.serving.study.engines import vllm as V
    cals, cap, setup, v = m["cals"], m["cap"], ctx.setup, ctx.v
    pred, pred0 = _vllm_prediction(cals), _vllm_prediction(cals[:1])
    runs, unusable = [], []  # unusable: runs whose live ITLs are mostly 0 (tokens delivered in bunches)
    for live_run in m["lives"]:
        which, rec = _vllm_compare_rate(setup, pred, pred0, cap, live_run, v.slo, log)
        rec["disturbances"] = live_run[5]["disturbances"]   # the repeat rule's reading of this run ([]: none)
        rec["disturbed_attempts"] = [_disturbed_attempt(d, lg, why, rec["simulated"], v.slo)
                                     for d, lg, why in live_run[5]["disturbed"]]
        (runs if which == "run" else unusable).append(rec)
    speeds = [float(_speed(cals[0]["fit"], c["steps"], c["durations_s"])) for c in cals]
    version = V.installed_version(ctx.python)
    config = _vllm_config(v, ctx.settings, m["cfg"], m["kv_blocks"])
    config["vllm"]["front_cpus"] = m.get("front_cpus")   # where the front end ran (pin_front; None: anywhere)
    calibrations = [{"name": c["name"], "fit": c["fit"].to_dict(), "mix_rates": c["mix_rates"],
                     "part_steps": c["part_steps"],  # the step log's parts: the timed requests, each Poisson run
                     "frontend": {k: [float(x) for x in xs] for k, xs in c["frontend_samples"].items()},
                     "step_log": step_log(c["steps"], c["durations_s"]), "step_probe": c.get("step_probe")} for c in cals]
    ratios = pred.ratios
    summary = {"engine": "vllm", "engine_version": version, "rates": rates_summary(runs),
               "calibration": {"method": "before and after the rates, every step timed by vLLM's step log",
                               "combined": "one fit over both calibrations' steps", "count": len(cals),
                               "speeds": speeds, "drift": float(_drift(speeds))},
               "frontend": pred.frontend.to_dict(),
               "repeats": repeats_summary(runs, v.repeat_disturbed),
               "step_spread": {"n": int(len(ratios)), "median": float(np.median(ratios)),
                               "p90": float(np.percentile(ratios, 90)), "p99": float(np.percentile(ratios, 99))}}
    return {"schema": "inferlab.serving.validate/1",
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "elapsed_s": time.perf_counter() - t_start, "server_startup_s": m["startup_s"],
            "device": {"kind": "cpu", "name": m["info"].name, "threads": torch.get_num_threads()},
            "versions": {**_device.versions(), "vllm": version}, "config": config,
            "bounds": {"p50": P50_BOUND, "p99": P99_BOUND, "up_to_fraction": BOUNDED_UP_TO},
            "capacity_requests_per_s": cap, "ceilings": m["ceilings"].to_dict(),
            "profile": {"kind": "vllm-steplog-fitted", **pred.fit.to_dict(), "calibration_steps": len(cals[0]["steps"]),
                        "frontend": pred.frontend.to_dict()},
            "calibrations": calibrations, "runs": runs, "unusable_runs": unusable,
            "within_bounds": all(r["comparison"]["within_bounds"] for r in runs if r["bounded"]),
            "within_bounds_every_run": within_bounds_every_run(runs),
            "work_dir": str(ctx.work), "summary": summary}


def repeats_summary(runs: list, max_repeats: int) -> dict:
    """summary.repeats of a vLLM record: the repeat rule's limit (VLLM_REPEAT_DISTURBED), how many rates
    were served again, how many disturbed runs the record keeps, and how many judged runs were still
    disturbed (no repeat left)."""
    return {"max_repeats": int(max_repeats),
            "rates_served_again": sum(bool(r.get("disturbed_attempts")) for r in runs),
            "disturbed_runs_kept": sum(len(r.get("disturbed_attempts", [])) for r in runs),
            "judged_disturbed": sum(bool(r.get("disturbances")) for r in runs)}


def within_bounds_every_run(runs: list) -> bool:
    """Whether every bounded run served, the disturbed ones the repeat rule served again included, was
    within all bounds (a disturbed run with a live percentile of 0 counts as outside them)."""
    for r in runs:
        if not r["bounded"]:
            continue
        if not r["comparison"]["within_bounds"]:
            return False
        for a in r.get("disturbed_attempts", []):
            if a["comparison"] is None or not a["comparison"]["within_bounds"]:
                return False
    return True

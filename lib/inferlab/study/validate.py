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

This module holds the pipelines of the project's own loop and of transformers, and `validate`, which
runs the pipeline of the engine asked for. vLLM's pipeline: `serving.study.engines.vllm_validate`. What
a record holds and how records are read: `serving.study.records`; the tables and sentences made from
records: `serving.study.reports`. Their names stay importable from here (`validate.table`,
`validate.vllm_repredict`, ...) for the notebooks, pages and tests that read them so.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone

import numpy as np

from inferlab.serving.metrics import SLO
from inferlab.serving.steptime import StepShape
from inferlab.study.hostspeed import SpeedTrackedStepTime, SplitSpeedStepTime
from inferlab.study.checks import (BOUNDS, P50_BOUND, P99_BOUND, QUANTILES, STEP_SENSITIVITY,  # noqa: F401
                                           SimSetup, capacity_requests_per_s, compare, quantiles,
                                           relative_error, replay_check, step_errors, step_sensitivity)
from inferlab.serving.workload import LengthDist, Workload, synthetic
from inferlab.core.specs import ModelConfig, Precision, check_model
from inferlab.study.records import (LOAD_FACTORS, LOAD_NAMES, STEP_MODELS, BOUNDED_UP_TO,
                                            REQUESTS_PER_RATE, PREDICTION, PREDICTION_MODELS, _length_record,
                                            _length_dist, rates_summary, step_log, calibration_drift,
                                            record_engine)
from inferlab.study.reports import _moves
from inferlab.study.engines.vllm_validate import (VLLM_REPEAT_DISTURBED, VLLM_REPEAT_DISTURBED_MAX,
                                                          VllmValidation, validate_vllm)

# Re-exported: the notebooks, pages and tests read these as `validate.X`; each is defined in the
# module it is imported from.
from inferlab.study.records import (PREDICTIONS, PREDICTION_KEYS, ALTERNATIVES, record_step_model,
                                            recorded, METRIC_NAMES, ERROR_KEYS)  # noqa: F401
from inferlab.study.reports import (quantile_plot, table, misses, runs_table, repeatability,
                                            capacity_uncertainty, conclusion, all_served, live_spread,
                                            engines_summary, engines_table, probe_table, repeats_markdown,
                                            engines_conclusion, _worst)  # noqa: F401
from inferlab.study.engines.vllm_validate import (VLLM_CAL_LONE, VLLM_CAL_REPEATS,
                                                          VLLM_CAL_LONE_GAP_S, VLLM_CAL_BURSTS,
                                                          VLLM_CAL_BURST_PROMPT, VLLM_CAL_BURST_OUTPUT,
                                                          VLLM_CAL_BURST_REPEATS, VLLM_CAL_BURST_GAP_S,
                                                          VLLM_BUNCHED_GAP_S, vllm_calibration_workload,
                                                          vllm_calibration_steps, VLLM_CAL_MIX_FRACTIONS,
                                                          VLLM_CAL_MIX_SEED, run_waits, VLLM_SPREAD_FROM,
                                                          VLLM_SPREADS_FROM, vllm_repredict, repeat_rule,
                                                          repeats_summary, within_bounds_every_run)  # noqa: F401

# transformers' token budget per step (its max_batch_tokens) in the validation. With a budget that
# holds a whole prompt, a burst arriving just after a step began waits that whole prefill, and the
# TTFT p99 turns on which side of a step boundary the burst falls (knife-edged: docs/glossary.md);
# chunks of 64 make the steps short enough that a 5 % step error no longer moves it past its bound,
# for somewhat less capacity (the runs that showed it: docs/lab-notes.md).
MAX_BATCH_TOKENS = 64

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
    from inferlab.study.engines import check_engine
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
    from inferlab.study.engines.vllm import VllmSettings
    if c.model is not None or c.dtype not in ("auto", "bf16") or c.device != "cpu" or c.step_model not in (None, "fitted"):
        raise ValueError("engine 'vllm' serves build/vllm-model in bf16 on the cpu, on a fitted step time; "
                         "leave out model, dtype, device and step_model")
    if c.repeat_disturbed is not None:
        from inferlab.base.input_checks import positive_int
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
    from inferlab.base.input_checks import positive_float, positive_int
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
    from inferlab.study.live import live_policy
    pol = live_policy(c.policy, c.max_num_seqs, max_batched_tokens=c.max_num_seqs * c.max_len)
    log(f"inferlab: {c.model.name} ({host.dtype}), step time fitted to calibrations")
    return _Engine(None, {}, pol, c.max_num_seqs * -(-c.max_len // 16) + 1, 16,  # as _inferlab_profile's
                   random_model(c.model, host.kind, host.dtype, c.seed))


def _transformers_pipeline(c: ValidationConfig, host: _Host, log) -> _Engine:
    """transformers' continuous batching (LlamaForCausalLM) with the host-speed probe at every step."""
    from inferlab.serving.policies import TransformersFIFO
    from inferlab.study.engines.transformers_cb import build_model
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
        from inferlab.study.bracketing import brackets_of, mean_fit, speed
        from inferlab.study.fitted import live_steps
        cals = eng.cals
        cals.append(eng.calibrate(k + 1))
        before, after = brackets_of(k, n_rates)
        st_k = mean_fit([cals[before]["fit"], cals[after]["fit"]])
        run_extra = {"calibrations": [before, after], "step_model": st_k.to_dict(),
                     "step_log": step_log(*live_steps(live)),  # to refit or re-judge later
                     "live_speed": speed(eng.step_time, *live_steps(live))}
    st_j = st_k  # the step time of the prediction judged
    if eng.calibrate is not None and "probe" in live.config:  # the judged host-speed prediction (serving.study.hostspeed)
        from inferlab.study.hostspeed import SpeedTrack
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


def _record(c: ValidationConfig, host: _Host, eng: _Engine, runs: list, cap: float, t_start: float) -> dict:
    """The validation's record (schema inferlab.serving.validate/1)."""
    import torch

    from inferlab.measure import device as _device
    from inferlab.study.engines import engine_version
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


def repredict(record: dict, model: ModelConfig, make_step_time, fit_key: str = "step_model") -> list:
    """Re-simulate every probe-tracked run of a recorded validation on another step time, from what the
    record keeps (its workload's config and seed, each run's averaged fit `step_model` and probe log),
    with `model` the record's ModelConfig (resolve config.model at the edge):
    `make_step_time(fit, track)` -> a step-time model (fit: serving.study.fitted.FittedStepTime, track:
    serving.study.hostspeed.SpeedTrack; fit_key: the run's fit to use, 'step_model' (the brackets' mean
    fit) or 'step_model_normalized' (their probe-normalized fits' mean)). Returns per run {fraction, bounded, comparison (with the live
    percentiles the record holds)}. A prediction first made this way, after the live runs, says so
    where it is reported."""
    from inferlab.study.fitted import FittedStepTime
    return _resimulate(record, model, lambda r, f, t: make_step_time(FittedStepTime.from_dict(r[fit_key]), t))


def _resimulate(record: dict, model: ModelConfig, make_step_time) -> list:
    """repredict's loop: `make_step_time(run, its raw mean fit, its speed track)` per probe-tracked run."""
    from inferlab.measure.ceilings import Ceilings
    from inferlab.study.fitted import FittedStepTime
    from inferlab.study.hostspeed import ProbeLog, SpeedTrack
    from inferlab.serving.policies import TransformersFIFO
    from inferlab.core.specs import Precision
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
    from inferlab.study.bracketing import mean_fit
    from inferlab.study.fitted import FittedStepTime
    from inferlab.study.hostspeed import ProbeLog, normalized_durations
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
    from inferlab.study.hostspeed import SpeedTrackedStepTime, SplitSpeedStepTime
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
    from inferlab.study.fitted import FittedStepTime
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


def _inferlab_profile(c: ValidationConfig, host: _Host, log) -> _Engine:
    """The project's loop: its operator profile composed into step times (serving.study.profiled)."""
    import torch

    from inferlab.measure.profile import measure_profile, pass_residual, time_probes
    from inferlab.measure.runner import random_model
    from inferlab.study.live import live_policy
    from inferlab.study.profiled import ProfileStepTime
    cfg, kind, dtype, seed = c.model, host.kind, host.dtype, c.seed
    pol = live_policy(c.policy, c.max_num_seqs, max_batched_tokens=c.max_num_seqs * c.max_len)
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
    from inferlab.base.input_checks import positive_float
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
    from inferlab.study.fitted import FittedStepTime, live_steps
    steps, durations = live_steps(cal)
    out = {"index": index, "started_s": started_s, "elapsed_s": elapsed_s, "steps": steps, "durations": durations,
           "fit": FittedStepTime.fit(steps, durations), "num_blocks": cal.config.get("num_blocks"),
           "probe": cal.config.get("probe")}
    if out["probe"]:  # the fit the probe predictions step on: durations referred to the median probe
        from inferlab.study.hostspeed import ProbeLog, normalized_durations
        log = ProbeLog(out["probe"]["times_s"], out["probe"]["probe_s"])
        out["fit_normalized"] = FittedStepTime.fit(steps, normalized_durations(durations, log))
    return out


def _calibrations_record(cals: list, reference) -> list:
    """The record's calibrations: per calibration its timing, fit, speed on `reference`'s scale
    (serving.study.bracketing.speed) and its step log (to refit later)."""
    from inferlab.study.bracketing import speed
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
    from inferlab.study.hostspeed import ProbeLog
    return ProbeLog(config["probe"]["times_s"], config["probe"]["probe_s"])


def _bracket_reference(cals: list, before: int, after: int) -> float:
    """The reference probe time of the mean of two calibrations' fits: the mean of their probe medians."""
    from inferlab.study.hostspeed import reference_probe_s
    return reference_probe_s([_probe_log(cals[k]) for k in (before, after)])


def _probe_record(probe: dict, track) -> dict:
    """A live run's probe, as recorded: its log, summary, share of the steps' time and the speed track."""
    return {"summary": probe["summary"], "share": probe["share"], "times_s": probe["times_s"],
            "probe_s": probe["probe_s"], "speed_track": track.to_dict(),
            "speed_median": float(np.median(track.speeds(probe["times_s"])))}


def _probe_overall(probe, cals: list, runs: list) -> dict:
    """summary.probe: the kernel, and its share of all timed steps' time (calibrations and live runs)."""
    from inferlab.study.hostspeed import SPEED_MIN_SAMPLES, SPEED_WINDOW_S
    p = sum(sum(c["probe"]["probe_s"]) for c in cals if c.get("probe")) + sum(
        sum(r["probe"]["probe_s"]) for r in runs if "probe" in r)
    s = sum(float(np.sum(c["durations"])) for c in cals if c.get("probe")) + sum(
        float(np.sum(r["step_log"]["step_s"])) for r in runs if "probe" in r)
    return {"kernel": f"one-row linear {probe.d_in} -> {probe.d_out}, {probe.dtype}, {len(probe.weights)} copies",
            "weight_bytes": probe.weight_bytes, "where": "every step, inside its window",
            "share": p / s if s > 0 else 0.0, "window_s": SPEED_WINDOW_S, "min_samples": SPEED_MIN_SAMPLES}


def _serve_live(c: ValidationConfig, host: _Host, eng: _Engine, w: Workload, seed: int):
    """Serve `w` live on the validation's engine."""
    if c.engine == "inferlab":
        from inferlab.study.live import LiveSettings, run_live
        return run_live(w, eng.model_obj, LiveSettings(policy=eng.policy, max_num_seqs=c.max_num_seqs, max_len=c.max_len,
                                                       device=host.kind, dtype=host.dtype, seed=seed))
    from inferlab.study.engines.transformers_cb import TransformersSettings, run_transformers
    settings = TransformersSettings(max_batch_tokens=c.max_batch_tokens, max_requests_per_batch=c.max_num_seqs,
                                    page_size=c.page_size, max_len=c.max_len, dtype=host.dtype, seed=seed)
    return run_transformers(w, eng.model_obj, settings, probe=eng.probe)


"""The vLLM validation's pipeline: calibrate the engine from its step log, serve each rate live
through its own benchmark client (under the repeat rule), predict each rate, and write the record.

vLLM's client sees requests, not steps; its engine's step log (engines.vllm_steps, a plugin `make vllm`
installs) times every step. A calibration serves timed requests of two kinds, lone prompts (a prefill of L
tokens alone, L within the token budget) and bursts of b short prompts decoding together, then two Poisson
runs with seeds of their own (the mixed steps the workloads are made of); the step time is fitted to every
step the log timed. One calibration before the rates, one after; the prediction steps on one fit over both
(`_vllm_prediction`), with the front end's delays drawn per request from the calibrations' (SampledFrontend)
and the steps' spread drawn from their Poisson runs (VLLM_SPREAD_FROM) (serving.study.served). The server's
engine core runs reniced (engines.vllm.ENGINE_NICE: on 2 cores its busy wait starved the front end).
`vllm_calibration_steps` is the method of the records made before the step log existed: steps
inferred from the client's times (a lone prompt's TTFT; a burst's last token less a lone prompt's TTFT).

The server and the client it drives: `serving.study.engines.vllm`; what disturbed a run:
`serving.study.engines.vllm_disturbances`; the tables and sentences of its records:
`serving.study.engines.vllm_report`. The study's terms: docs/glossary.md.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from inferlab.serving.metrics import SLO
from inferlab.serving.steptime import StepShape
from inferlab.study.checks import (P50_BOUND, P99_BOUND, SimSetup, capacity_requests_per_s,
                                           compare, quantiles, step_sensitivity)
from inferlab.serving.workload import LengthDist, Workload, synthetic
from inferlab.core.specs import Precision
from inferlab.study.engines.vllm_disturbances import (DISTURBED_WAIT_S, SLOW_START_RATIO,
                                                              SLOW_START_STEPS, disturbances_of)
from inferlab.study.records import (LOAD_FACTORS, LOAD_NAMES, BOUNDED_UP_TO, REQUESTS_PER_RATE,
                                            _length_dist, rates_summary, step_log, record_engine)


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
    from inferlab.study.engines.vllm_steps import read_step_log
    t0, t1 = _client_span(data)
    return read_step_log(server_log).between(t0 - 0.05, t1 + 0.25)


def _vllm_calibrate(ctx, k: int, mix_rates, log) -> dict:
    """Calibration k: the timed requests of `vllm_calibration_workload` (lone prompts, bursts), then a
    Poisson run at each of `mix_rates` (None: VLLM_CAL_MIX_FRACTIONS of the capacity the first part's fit
    predicts) with its own seed, so that the steps the workloads are made of (prompt chunks beside
    decodes) are timed too. Every step is timed by vLLM's step log; the fit is over all of them."""
    from inferlab.study.engines.vllm import bench_serve, check_served
    from inferlab.study.engines.vllm_steps import frontend_delays
    from inferlab.study.fitted import FittedStepTime
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
    from inferlab.study.engines.vllm_steps import frontend_delays
    d = frontend_delays(logged, data)
    return {"engine_wait_max_s": float(logged.longest_wait_s()),
            "in_max_s": float(max(d["in_any_s"], default=0.0)), "out_max_s": float(max(d["out_s"], default=0.0))}


def _probe_columns(parts, t0_s: float) -> dict | None:
    """The host-speed probe of logged steps (benchmarks/vllm_steplog.py) as the record keeps it: {t_s (each
    step's start less t0_s), probe_s}, or None for a log without the probe."""
    from inferlab.study.engines.vllm_steps import PROBES
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
    from inferlab.study.engines import vllm as V
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
            reasons = disturbances_of(run_waits(logged, data), logged.shapes(), logged.periods_s(), fit0)
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
    from inferlab.study.engines import vllm as V
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
        from inferlab.study.served import mean_summary
        return mean_summary(setup, w, self.fit, self.ratios, frontend or self.frontend)

    def one_replica(self, setup, w: Workload):
        """The first of the averaged simulations (seed 0), for its distributions."""
        from inferlab.study.served import JitteredStepTime
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
    from inferlab.study.fitted import FittedStepTime
    from inferlab.study.served import Frontend, SampledFrontend, spread_ratios
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
    from inferlab.study.engines import vllm as V
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
    from inferlab.study.engines.vllm import VllmSettings
    from inferlab.core.specs import ModelConfig
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
        from inferlab.study.fitted import logged_steps
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
    return {"max_repeats": int(max_repeats), "wait_s": DISTURBED_WAIT_S, "slow_start_ratio": SLOW_START_RATIO,
            "slow_start_steps": SLOW_START_STEPS, "fit": "calibration 0's",
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
    from inferlab.study.engines import vllm as V
    from inferlab.base.input_checks import positive_int

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
    from inferlab.study.engines import vllm as V
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
    from inferlab.study.bracketing import drift as _drift, speed as _speed
    from inferlab.study.engines import vllm as V
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

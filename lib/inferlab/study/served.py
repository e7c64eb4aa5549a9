"""What a served engine adds to the simulator's steps, measured on the engine itself: the delays of its
front end, and the spread of its step times around the fitted model.

A client of an HTTP server (vLLM's OpenAI server, `serving.study.engines.vllm`) sees more than the
engine's steps:

- `Frontend(in_s, out_s)`: a request reaches the engine `in_s` after the client sends it (HTTP, the API
  server, the hand-over to the engine's process), and each token reaches the client `out_s` after the
  step that made it ends (the output's way back and its streaming). Simulated as arrivals moved later
  by in_s, and first token and finish moved later by out_s, the TTFT still counted from the client's
  send:

      TTFT_client = (first token of the simulation at arrival + in_s) + out_s - arrival

  A constant out_s moves every token alike, so it leaves the gaps between tokens (ITL) as they were.
  Both are medians measured by the engine's step log (`engines.vllm_steps.frontend_delays`) on the
  calibration runs, never on the workloads predicted.

- `SampledFrontend(in_samples_s, out_samples_s)`: the same two delays, each request's drawn (with
  replacement, seeded) from the delays the calibrations measured, rather than their medians. Why: the
  way in scatters (by milliseconds with vLLM's engine core reniced, engines.vllm.ENGINE_NICE, and by
  hundreds of ms without: docs/lab-notes.md), and a TTFT p99 of 20 requests, one of the slowest two,
  picks up that tail. Draws are independent per request: a stall that holds several
  requests at once is not modelled.

- `JitteredStepTime(base, ratios, seed)`: each step takes the base model's time times a ratio drawn
  (with replacement, from a seeded generator) from `ratios`, the measured / fitted times of the
  calibration's own steps. A deterministic model predicts the median step well and no tail; the
  engine's steps scatter (other processes, the allocator, the client on the same host), and the p99 of
  the gaps between tokens is made of that scatter. Draws are independent: slow steps in a row, if the
  engine has them, are not modelled.

- `mean_summary`: a jittered prediction is random, so each percentile is the mean over `replicas`
  seeded simulations of that percentile (the expectation of the statistic the live run measured once,
  on as many requests).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from inferlab.base.input_checks import positive_int
from inferlab.serving.steptime import StepShape, check_step_time
from inferlab.serving.workload import Workload

REPLICAS = 8          # seeded simulations averaged per prediction


@dataclass(frozen=True)
class Frontend:
    """The delays outside the engine (module docstring): in_s before a request reaches it, out_s after
    a token leaves it; seconds, each finite and >= 0."""

    in_s: float = 0.0
    out_s: float = 0.0

    def __post_init__(self):
        for name in ("in_s", "out_s"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and np.isfinite(v) and 0 <= v <= 10.0):
                raise ValueError(f"{name} must be a number of seconds in [0, 10]; got {v!r}")

    def delays(self, n: int, seed: int = 0) -> tuple:
        """(in_s, out_s) of n requests: the constants (seed unused)."""
        return np.full(n, float(self.in_s)), np.full(n, float(self.out_s))

    def simulate(self, setup, workload: Workload, step_time, seed: int = 0):
        return _through_frontend(self, setup, workload, step_time, seed)

    def to_dict(self) -> dict:
        return {"in_s": float(self.in_s), "out_s": float(self.out_s)}


def _through_frontend(frontend, setup, workload: Workload, step_time, seed: int):
    """The SimResult of `workload` as the client sees it: simulated at arrivals + in_s, its first tokens
    and finishes + out_s (per request, frontend.delays), its arrivals the client's."""
    ins, outs = frontend.delays(len(workload), seed)
    moved = Workload(workload.arrival_s + ins, workload.prompt_tokens, workload.output_tokens)
    sim = setup.simulate(moved, step_time)
    return replace(sim, arrival_s=np.asarray(workload.arrival_s, dtype=float),
                   first_token_s=sim.first_token_s + outs, finish_s=sim.finish_s + outs)


def _delay_samples(name: str, values) -> tuple:
    a = np.asarray(values, dtype=float)
    if a.ndim != 1 or len(a) < 10 or not np.all(np.isfinite(a)) or np.any(a < 0) or np.any(a > 10.0):
        raise ValueError(f"{name} must be at least 10 delays, each a number of seconds in [0, 10]; got "
                         f"{len(np.atleast_1d(a))} values")
    return tuple(float(x) for x in a)


@dataclass(frozen=True)
class SampledFrontend:
    """The front end's delays drawn per request (module docstring) from measured samples (seconds, at
    least 10 of each, each in [0, 10]); draws from numpy's generator seeded with [seed, 1]."""

    in_samples_s: tuple
    out_samples_s: tuple

    def __post_init__(self):
        object.__setattr__(self, "in_samples_s", _delay_samples("in_samples_s", self.in_samples_s))
        object.__setattr__(self, "out_samples_s", _delay_samples("out_samples_s", self.out_samples_s))

    def delays(self, n: int, seed: int = 0) -> tuple:
        """(in_s, out_s) of n requests, drawn with replacement."""
        rng = np.random.default_rng([int(seed), 1])
        ins, outs = np.asarray(self.in_samples_s), np.asarray(self.out_samples_s)
        return ins[rng.integers(len(ins), size=n)], outs[rng.integers(len(outs), size=n)]

    def simulate(self, setup, workload: Workload, step_time, seed: int = 0):
        return _through_frontend(self, setup, workload, step_time, seed)

    def to_dict(self) -> dict:
        """The medians and the p99 of the samples (the samples themselves are in the calibrations)."""
        return {"in_s": float(np.median(self.in_samples_s)), "out_s": float(np.median(self.out_samples_s)),
                "in_p99_s": float(np.percentile(self.in_samples_s, 99)),
                "out_p99_s": float(np.percentile(self.out_samples_s, 99)), "sampled": True}


class JitteredStepTime:
    """A StepTimeModel: `base`'s time of each step times a ratio drawn from `ratios` (measured / fitted
    times of timed steps, each > 0), from numpy's generator seeded with `seed`."""

    def __init__(self, base, ratios, seed: int = 0):
        self.base = check_step_time("base", base)
        r = np.asarray(ratios, dtype=float)
        if r.ndim != 1 or len(r) < 10 or not np.all(np.isfinite(r)) or np.any(r <= 0):
            raise ValueError(f"ratios must be at least 10 positive finite numbers; got {len(np.atleast_1d(r))} "
                             f"(finite and > 0: {bool(np.all(np.isfinite(r)) and np.all(r > 0))})")
        self.ratios, self.seed = r, int(seed)
        self.rng = np.random.default_rng(self.seed)

    def step_time_s(self, step: StepShape, t_s: float) -> float:
        base = self.base.step_time_s(step, t_s)
        return base * float(self.ratios[self.rng.integers(len(self.ratios))]) if base > 0 else base


def spread_ratios(fit, steps, periods_s) -> np.ndarray:
    """measured / fitted time of each timed step (the draws of JitteredStepTime)."""
    pred = np.array([fit.step_time_s(s, 0.0) for s in steps])
    return np.asarray(periods_s, dtype=float) / pred


def mean_summary(setup, workload: Workload, base, ratios, frontend, replicas: int = REPLICAS) -> dict:
    """The summary (SimResult.summary under setup.slo) of the first of `replicas` jittered simulations
    (seeds 0 .. replicas - 1, of the steps and of a SampledFrontend's draws) through `frontend`, its TTFT
    and ITL p50 and p99 replaced by their mean over all replicas; "replicas" and each percentile's spread
    (min, max) over them are added."""
    positive_int("replicas", replicas, maximum=1000)
    summaries = [frontend.simulate(setup, workload, JitteredStepTime(base, ratios, seed), seed).summary(setup.slo)
                 for seed in range(replicas)]
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in summaries[0].items()}
    spread = {}
    for m in ("ttft_s", "itl_s"):
        spread[m] = {}
        for p in ("p50", "p99"):
            values = [s[m][p] for s in summaries]
            out[m][p] = float(np.mean(values))
            spread[m][p] = [float(min(values)), float(max(values))]
    out["replicas"], out["replica_spread"] = int(replicas), spread
    return out

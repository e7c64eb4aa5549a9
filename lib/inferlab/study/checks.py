"""What a prediction is judged by: the simulation set-up one validation shares, the comparison of
simulated with live percentiles, and the checks beside it (each live step against its prediction,
the replay of the live step times, the sensitivity to a uniform step-time error).

    error = simulated / live - 1    for p50 and p99 of TTFT and of ITL, at each rate

Bounds: |error| <= 15 % at p50 and <= 25 % at p99.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from inferlab.serving.metrics import SLO, SimResult
from inferlab.serving.simulate import simulate
from inferlab.serving.steptime import ScaledStepTime, StepTimeModel
from inferlab.serving.workload import LengthDist, Workload
from inferlab.core.specs import Accelerator, ModelConfig, Precision
from inferlab.base.input_checks import positive_float

P50_BOUND, P99_BOUND = 0.15, 0.25
BOUNDS = {"p50": P50_BOUND, "p99": P99_BOUND}
# How far the simulated percentiles move under a uniform step-time error of this size (each run's
# `sensitivity`): a percentile that a 5 % step error moves past its bound is knife-edged, decided by
# where a step boundary falls against an arrival, not by how long the steps take on average.
STEP_SENSITIVITY = 0.05
QUANTILES = tuple(range(1, 100))


@dataclass(frozen=True)
class SimSetup:
    """Everything the simulations of one validation share but the workload and the step time: the
    model, the accelerator (the measured ceilings), the engine's scheduler (`policy`), the dtypes,
    its KV pool (`kv_blocks` of `block_tokens`), the watermark and the SLO its summaries count."""

    model: ModelConfig
    accelerator: Accelerator
    policy: object
    precision: Precision
    kv_blocks: int
    block_tokens: int
    slo: SLO = SLO()
    watermark: float = 0.01

    def simulate(self, workload: Workload, step_time: StepTimeModel) -> SimResult:
        return simulate(workload, self.model, self.accelerator, self.policy, precision=self.precision,
                        kv_blocks=self.kv_blocks, block_tokens=self.block_tokens, watermark=self.watermark,
                        step_time=step_time)

    def summary(self, workload: Workload, step_time: StepTimeModel) -> dict:
        return self.simulate(workload, step_time).summary(self.slo)


def relative_error(simulated: float, live: float) -> float:
    """simulated / live - 1 (positive: the simulator is slower than the live run)."""
    if not (live > 0 and simulated > 0):
        raise ValueError(f"percentiles must be positive to compare; got simulated {simulated}, live {live}")
    return float(simulated / live - 1.0)


def compare(live_summary: dict, sim_summary: dict) -> dict:
    """{metric: {p50: {live, simulated, error}, p99: {...}}} for TTFT and ITL, and 'within' bounds
    (whether every error is within its bound; the caller decides whether the rate is held to them)."""
    out, ok = {}, True
    for metric in ("ttft_s", "itl_s"):
        out[metric] = {}
        for p, bound in (("p50", P50_BOUND), ("p99", P99_BOUND)):
            lv, sv = live_summary[metric][p], sim_summary[metric][p]
            e = relative_error(sv, lv)
            out[metric][p] = {"live_s": lv, "simulated_s": sv, "error": e, "bound": bound,
                              "within": abs(e) <= bound}
            ok &= abs(e) <= bound
    out["within_bounds"] = bool(ok)
    return out


def capacity_requests_per_s(setup: SimSetup, step_time: StepTimeModel, prompt: LengthDist, output: LengthDist,
                            seed: int = 0, n: int = 64) -> float:
    """Requests per second the server sustains, simulated: n requests arriving at once."""
    rng = np.random.default_rng(seed + 99)
    w = Workload(np.zeros(n), prompt.sample(rng, n), output.sample(rng, n))
    return float(n / np.nanmax(setup.simulate(w, step_time).finish_s))


def quantiles(result) -> dict:
    """Percentiles 1..99 of TTFT and of every ITL (seconds), for plotting distributions."""
    done = result.completed
    return {"percent": list(QUANTILES),
            "ttft_s": np.percentile(result.ttft_s[done], QUANTILES).tolist(),
            "itl_s": np.percentile(result.all_itls_s, QUANTILES).tolist()}


def step_errors(live, step_time: StepTimeModel) -> dict:
    """Each live step's measured duration against the step time's prediction of the same work at the
    live step's start: the median and p90 of |predicted / measured - 1| and the median signed ratio."""
    from inferlab.study.fitted import live_steps
    steps, meas = live_steps(live)
    pred = np.array([step_time.step_time_s(s, float(t)) for s, t in zip(steps, live.steps["start_s"])])
    r = pred / meas
    return {"n": int(len(r)), "median_abs": float(np.median(np.abs(r - 1))),
            "p90_abs": float(np.percentile(np.abs(r - 1), 90)), "median_ratio": float(np.median(r))}


def replay_check(setup: SimSetup, live, workload: Workload, step_time: StepTimeModel) -> dict:
    """The simulation of `workload` with each step timed as the live step of the same work
    (serving.study.fitted.ReplayStepTime): {matched, steps, comparison with the live run}. All steps
    matched and errors near 0: the schedule is the engine's, the error is the step time's."""
    from inferlab.study.fitted import ReplayStepTime
    rp = ReplayStepTime(live, step_time)
    r = setup.simulate(workload, rp)
    return {"matched": rp.matched, "steps": rp.matched + rp.unmatched,
            "comparison": compare(live.result.summary(setup.slo), r.summary(setup.slo))}


def step_sensitivity(setup: SimSetup, workload: Workload, step_time: StepTimeModel,
                     scale: float = STEP_SENSITIVITY) -> dict:
    """How much the simulated percentiles move when every step is `scale` shorter or longer:

        move = percentile simulated on step_time x (1 -/+ scale) / percentile on step_time - 1

    {scale, ttft_s: {p50: [shorter, longer], p99: [...]}, itl_s: {...}, knife_edge: {ttft_s: {p50:
    bool, p99: bool}, itl_s: ...}}; knife_edge: either move is larger than that percentile's bound
    (P50_BOUND, P99_BOUND), so a step-time error of `scale` alone could break it: where the step
    boundaries fall against the arrivals decides that percentile. Simulation only (no live run)."""
    positive_float("scale", scale, maximum=0.5)
    base, lo, hi = (setup.summary(workload, ScaledStepTime(step_time, f)) for f in (1.0, 1.0 - scale, 1.0 + scale))
    out = {"scale": float(scale)}
    edge = {}
    for m in ("ttft_s", "itl_s"):
        out[m], edge[m] = {}, {}
        for p, bound in (("p50", P50_BOUND), ("p99", P99_BOUND)):
            moves = [relative_error(x[m][p], base[m][p]) for x in (lo, hi)]
            out[m][p] = moves
            edge[m][p] = bool(max(abs(x) for x in moves) > bound)
    out["knife_edge"] = edge
    return out

"""What disturbed a served vLLM run, read from its own measurements only (never from a prediction of
it): the engine waiting with work in hand, a request's way in or out, or a slow start against the
calibration's fit. The repeat rule (`serving.study.engines.vllm_validate`) serves a disturbed rate
again; the reports (`serving.study.engines.vllm_report`) say what disturbed each run. The term:
docs/glossary.md ("disturbed").
"""
from __future__ import annotations

import numpy as np


DISTURBED_WAIT_S = 0.05    # an engine wait with work in hand, or a way in or out, this long: about a dozen steps
SLOW_START_RATIO = 1.5     # a run whose first SLOW_START_STEPS steps took this many times the fit's time (median)
SLOW_START_STEPS = 15


def disturbances(run: dict, fit) -> list:
    """What disturbed one served run (its `waits`, vllm_validate.run_waits, and its step log against `fit`), as
    phrases (`disturbances_of`)."""
    from inferlab.study.fitted import logged_steps
    steps, durations = logged_steps(run["step_log"])
    return disturbances_of(run.get("waits") or {}, steps, durations, fit)


def disturbances_of(waits: dict, steps: list, durations_s, fit) -> list:
    """What disturbed one served run, as phrases, from what was measured only (never from a prediction of
    it): the engine waiting DISTURBED_WAIT_S or more with work in hand, a way in or out that long
    (`waits`, vllm_validate.run_waits), a start whose first SLOW_START_STEPS steps took SLOW_START_RATIO times
    `fit`'s time or more (the median over those steps of measured / fitted). [] for an undisturbed run."""
    w, out = waits, []
    if w.get("engine_wait_max_s", 0.0) >= DISTURBED_WAIT_S:
        out.append(f"the engine waited {w['engine_wait_max_s'] * 1e3:.0f} ms between two steps with work in hand")
    for key, way in (("in_max_s", "in"), ("out_max_s", "out")):
        if w.get(key, 0.0) >= DISTURBED_WAIT_S:
            out.append(f"a request's way {way} took {w[key] * 1e3:.0f} ms")
    n = min(SLOW_START_STEPS, len(steps))
    if n:
        r = float(np.median(np.asarray(durations_s[:n]) / np.array([fit.step_time_s(x, 0.0) for x in steps[:n]])))
        if r >= SLOW_START_RATIO:
            out.append(f"its first {n} steps took {r:.1f} times the fit's time")
    return out

"""Stage budgets (measure/budget.py, plan.stage_budget_s): a stage past its budget takes no new size, round or
repeat and records what it left out; the progress estimate is the sum of the budgets. Clocks are stand-ins
(a list the test advances), so nothing here depends on how fast or busy the machine is."""
from __future__ import annotations

from dataclasses import replace

import pytest

from inferlab.measure import plan as _plan
from inferlab.measure.budget import StageBudgets


class StandInClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_progress_is_the_finished_stages_budgets_plus_the_current_stage_capped():
    clock = StandInClock()
    b = StageBudgets({"a": 10, "b": 30}, clock=clock)
    assert b.total_s == 40
    b.start("a")
    clock.now = 4
    assert b.progress_s() == 4 and b.left_s() == 6 and not b.spent()
    clock.now = 25  # stage a overran: the bar does not run past its budget
    assert b.progress_s() == 10 and b.spent() and b.left_s() == -15
    b.start("b")
    clock.now = 30
    assert b.progress_s() == 15 and b.fits(25) and not b.fits(25.5)
    assert b.share_s(2.0, 4) == 2.0 and b.share_s(10.0, 5) == 5.0  # 25 s left over 5 points
    b.skip("x")
    b.end()
    assert b.elapsed_s == {"a": 25, "b": 5} and b.skipped == {"b": ["x"]}
    notes = b.notes()
    assert any("'a' took 25 s, over its 10 s budget" in n for n in notes)
    assert any("'b' ran out of its 30 s budget and left out: x" in n for n in notes)


def test_bad_budgets_are_refused_by_name():
    with pytest.raises(ValueError, match=r"budgets_s\['a'\]"):
        StageBudgets({"a": 0})
    with pytest.raises(ValueError, match="budgets_s"):
        StageBudgets({})
    with pytest.raises(ValueError, match="stage 'c' has no budget"):
        StageBudgets({"a": 1}).start("c")


def test_the_profile_takes_only_the_rounds_that_fit(monkeypatch):
    from inferlab.measure import profile

    clock = StandInClock()
    budget = StageBudgets({"operator profile": 99}, clock=clock)
    budget.start("operator profile")

    def stand_in_round(*args, **kwargs):  # one round of the profile takes 30 s on this stand-in
        clock.now += 30
        return {"linear": {"2048x2048": [{"size": 1, "time_s": clock.now}]}, "overhead_s": 0.0, "overhead": {},
                "attention": {"prefill": [], "decode": []}, "elementwise": {"layer": []}}

    def after_round(r):  # the first one compiles (40 s); the later ones take 5 s
        clock.now += 40 if r == 0 else 5
    monkeypatch.setattr(profile, "_profile_round", stand_in_round)
    out = profile.measure_profile(None, "cpu", "fp32", max_tokens=4, max_batch=2, max_kv_positions=4,
                                  budget=budget, rounds=3, after_round=after_round)
    # round 1 and the compile end at 70 s; round 2 is predicted at 30 s (the compile not counted) > 29 s left
    assert out["rounds"] == 1 and out["rounds_planned"] == 3
    assert budget.skipped == {"operator profile": ["profile rounds 2-3 of 3 (one takes ~30 s)"]}

    clock.now = 0.0
    budget = StageBudgets({"operator profile": 139}, clock=clock)
    budget.start("operator profile")
    out = profile.measure_profile(None, "cpu", "fp32", max_tokens=4, max_batch=2, max_kv_positions=4,
                                  budget=budget, rounds=3, after_round=after_round)
    # round 2 ends at 105 s; round 3 is predicted at 30 + 5 = 35 s > 34 s left
    assert out["rounds"] == 2 and budget.skipped["operator profile"] == ["profile rounds 3-3 of 3 (one takes ~35 s)"]
    out = profile.measure_profile(None, "cpu", "fp32", max_tokens=4, max_batch=2, max_kv_positions=4, rounds=3,
                                  after_round=after_round)
    assert out["rounds"] == 3  # no budget: every round


def test_the_roofline_stops_taking_sizes_when_its_budget_is_spent(monkeypatch):
    torch = pytest.importorskip("torch")
    from inferlab.measure import ceilings
    from inferlab.core.specs import Accelerator

    clock = StandInClock()
    budget = StageBudgets({"roofline": 10}, clock=clock)
    budget.start("roofline")
    real = ceilings.time_fn

    def slow_kernel_timing(*args, **kwargs):  # every size's timing takes 4 s on this stand-in
        clock.now += 4
        return real(*args, **kwargs)
    monkeypatch.setattr(ceilings, "time_fn", slow_kernel_timing)
    acc = Accelerator(name="x", memory_bytes=1e9, hbm_bytes_per_s=1e10, peak_flops_per_s={"fp32": 1e11})
    with torch.inference_mode():
        pts = ceilings.roofline_sweep("cpu", "fp32", (8, 16), (1, 2, 4, 8), acc, max_time_s=0.01, budget=budget)
    # 4 s, 8 s: time left; at 12 s the budget is spent, so M = 8 is left out
    assert [p["m"] for p in pts] == [1, 2, 4]
    assert budget.skipped == {"roofline": ["M = 8"]}


def test_every_stage_has_a_stated_budget_and_a_quick_cpu_run_fits_in_five_minutes():
    for kind, quick in (("cpu", True), ("cpu", False), ("cuda", True), ("cuda", False)):
        p = _plan.make_plan(kind, "fp32", quick=quick, model="cpu-0.5b" if kind == "cpu" else None)
        assert tuple(p.budgets_s()) == _plan.STAGES
    quick = _plan.make_plan("cpu", "fp32", quick=True)
    assert sum(quick.budgets_s().values()) < 300
    assert quick.to_dict()["stage_budget_s"]  # recorded with the plan


def test_the_progress_bar_counts_budget_seconds_from_the_first_stage():
    from inferlab.measure.suite import _Progress

    clock = StandInClock()
    budgets = StageBudgets(_plan.make_plan("cpu", "fp32", quick=True).budgets_s(), clock=clock)
    bar = _Progress(budgets, True, None)
    try:
        assert bar.bar.total == 270
        bar.stage("ceilings")
        clock.now = 100.0  # the ceilings overran their 15 s: the bar stops at 15, it does not claim 100
        bar.update()
        assert bar.bar.n == 15
        bar.stage("roofline")
        clock.now = 105.0
        bar.update()
        assert bar.bar.n == 20
    finally:
        bar.close()


def test_a_suite_out_of_budget_keeps_each_sweeps_first_point_and_says_what_it_skipped():
    """Budgets of a microsecond: every stage is spent at once, so each sweep keeps its first point only, the profile
    one round, and the run says what was left out; the ceilings (and so the dtype choice) are never cut."""
    from inferlab import measure

    tiny = _plan.make_plan("cpu", "fp32", quick=True, model="tiny")
    spent = replace(tiny, decode_mode="eager", stage_budget_s=tuple((name, 1e-6) for name in _plan.STAGES))
    run = measure.run_suite(device="cpu", plan=spent, progress=False, threads=1, decode_mode="eager")
    d = run.data
    m = d["measurements"]
    assert [p["prompt_len"] for p in m["ttft"]] == [tiny.prompt_lens[0]]
    assert [p["context_len"] for p in m["itl"]] == [tiny.contexts[0]]
    assert [p["batch"] for p in m["batch"]] == [1]
    assert [p["m"] for p in m["roofline"]] == [tiny.roofline_ms[0]]
    assert d["profile"]["rounds"] == 1
    skipped = d["stage_budget"]["skipped"]
    assert skipped["TTFT"][0] == f"prompt {tiny.prompt_lens[1]}"
    assert "per-operator breakdown at prefill S = 64" in skipped["TTFT"]
    assert skipped["operator profile"][0].startswith("profile rounds 2-3 of 3")
    assert any("ran out of its 0 s budget" in n for n in d["notes"])
    # the ceilings stage is not cut: fp32 and bf16 (where it has a fast path) are both timed, as without budgets
    usable = measure.fastpath.device_probe("cpu").usable(["fp32", "bf16"])
    assert set(d["ceilings_start"]["matmul_flops_per_s"]) == set(usable)

"""Any CPU: every product priced before it is timed, and a dtype with no fast path kept out of a run.

The slow hardware is played by stand-in kernels that sleep (a sleep is wall time, so a busy machine only
lengthens it a little; every margin below is a factor of 2 or more). Nothing here times a real bf16 product.
"""
from __future__ import annotations

import time

import pytest
import torch

from inferlab import measure
from inferlab.measure import ceilings, fastpath, suite
from inferlab.measure.ceilings import affordable_n, matmul_rate


def sleeping_product(seconds_at, calls=None):
    """A product that takes `seconds_at(n, dtype)` of wall time per call and records each call's size."""
    def product(a, b, out):
        n = a.shape[0]
        if calls is not None:
            calls.append(n)
        time.sleep(seconds_at(n, a.dtype))
        return out
    return product


def test_the_ladder_stops_before_a_call_whose_price_exceeds_the_budget():
    """t(n) = 0.01 (n / 256)^3 s: 256 costs 0.01 s, so 512 is priced at 0.08 s, x 5 calls = 0.4 s <= 1 s: timed;
    1024 is then priced at 0.64 s x 5 = 3.2 s > 1 s: never called. A ladder that timed the planned size
    (2048: 5.1 s a call) or predicted without timing each rung fails here."""
    calls = []
    slow = sleeping_product(lambda n, dt: 0.01 * (n / 256) ** 3, calls)
    n, ladder = affordable_n("cpu", "fp32", 2048, budget_s=1.0, calls=5, product=slow)
    assert n == 512
    assert calls == [256, 512]
    assert [size for size, _ in ladder] == [256, 512]


def test_a_rate_falling_with_size_is_carried_forward_not_one_that_rises():
    """A slow path's rate falls with size: 256 takes 1 ms, 512 takes 100 ms (100x for 8x the work, growth 12.5).
    1024 is priced at 0.1 x 8 x 12.5 = 10 s, x 2 calls > 2 s: not called. Without the growth it would be priced at
    0.8 s x 2 = 1.6 s <= 2 s and called (0.5 s of sleep here; 99 s on the real CPU the issue names)."""
    calls = []
    table = {256: 0.001, 512: 0.1, 1024: 0.5}
    n, _ = affordable_n("cpu", "fp32", 1024, budget_s=2.0, calls=2,
                        product=sleeping_product(lambda n, dt: table[n], calls))
    assert n == 512 and 1024 not in calls
    # A rate that rises with size (a fast path warming up: 256 at 8 ms, 512 at 16 ms) is not extrapolated upwards:
    # 1024 is priced at 16 ms x 8 = 0.128 s, x 2 = 0.26 s <= 0.5 s: called, and the planned size is kept.
    calls = []
    rising = {256: 0.008, 512: 0.016, 1024: 0.064}
    n, _ = affordable_n("cpu", "fp32", 1024, budget_s=0.5, calls=2,
                        product=sleeping_product(lambda n, dt: rising[n], calls))
    assert n == 1024 and calls == [256, 512, 1024]


def test_matmul_rate_shrinks_to_its_budget_and_says_why():
    """The FLOP/s ceiling of a kernel too slow for its planned size is taken at the size that fits, with the
    reason recorded: 2 warm-ups + 3 repeats at 2048 would be 5 x 5.1 s."""
    slow = sleeping_product(lambda n, dt: 0.01 * (n / 256) ** 3)
    rate, timing, shrunk = matmul_rate("cpu", "fp32", 2048, budget_s=1.0, product=slow, max_time_s=0.1)
    assert shrunk["n"] == 512 and shrunk["planned_n"] == 2048
    assert "shrunk from 2048^2 to 512^2" in shrunk["reason"] and "1 s budget" in shrunk["reason"]
    assert rate == pytest.approx(2 * 512 ** 3 / timing.median_s)
    assert timing.n >= 3
    # Where the planned size fits, nothing is shrunk (what a CPU with fast products records is unchanged).
    _, _, none = matmul_rate("cpu", "fp32", 256, budget_s=10.0, max_time_s=0.05)
    assert none is None
    with pytest.raises(ValueError, match="budget_s must be positive"):
        affordable_n("cpu", "fp32", 256, budget_s=0.0, calls=1)


def by_dtype(seconds):
    return sleeping_product(lambda n, dt: seconds[dt])


def test_the_probe_excludes_a_dtype_with_no_fast_path_and_keeps_one_with():
    """At the probe's size, fp32 takes 1 ms a product; a bf16 at 100 ms is 1/100 of it (< 1/4): excluded, with its
    figures. A bf16 at 2 ms (1/2 of fp32) is kept."""
    slow = fastpath.probe_dtypes("cpu", ["bf16"], product=by_dtype({torch.float32: 0.001, torch.bfloat16: 0.1}))
    assert set(slow.flops_per_s) == {"fp32", "bf16"}
    assert list(slow.excluded) == ["bf16"]
    assert "no fast path on this CPU; not a candidate" in slow.excluded["bf16"]
    ratio = slow.flops_per_s["fp32"] / slow.flops_per_s["bf16"]  # about 100 (sleeps overshoot a little)
    assert 25 < ratio < 110 and f"1/{ratio:.0f} of fp32" in slow.excluded["bf16"]
    assert slow.usable(["fp32", "bf16"]) == ["fp32"]
    fast = fastpath.probe_dtypes("cpu", ["bf16"], product=by_dtype({torch.float32: 0.001, torch.bfloat16: 0.002}))
    assert fast.excluded == {} and fast.usable(["fp32", "bf16"]) == ["fp32", "bf16"]
    # On a GPU the half types are the tensor-core path: never excluded by this rule.
    assert fastpath.check_fast_path("cuda", "bf16", probe=slow) is None


def test_a_dtype_without_a_fast_path_is_refused_by_name_or_replaced_by_fp32():
    slow = fastpath.DtypeProbe("cpu", 512, {"fp32": 2e11, "bf16": 1e9},
                               {"bf16": fastpath.no_fast_path_reason("bf16", 1e9, 2e11)})
    with pytest.raises(ValueError, match=r"dtype 'bf16' cannot be measured in reasonable time here: bf16 product: "
                                         r"1 GFLOP/s, 1/200 of fp32 .*allowed on this CPU: fp32"):
        fastpath.check_fast_path("cpu", "bf16", probe=slow)
    assert fastpath.preferred_dtype("cpu", "bf16", probe=slow)[0] == "fp32"
    assert "no fast path" in fastpath.preferred_dtype("cpu", "bf16", probe=slow)[1]
    fast = fastpath.DtypeProbe("cpu", 512, {"fp32": 2e11, "bf16": 3e11})
    assert fastpath.preferred_dtype("cpu", "bf16", probe=fast)[0] == "bf16"


def _two_requests():
    from inferlab.serving.workload import burst
    return burst(2, 8, 2)


WORKLOAD = _two_requests()


SLOW_BF16 = fastpath.DtypeProbe("cpu", 512, {"fp32": 4e10, "bf16": 1e8},
                                {"bf16": fastpath.no_fast_path_reason("bf16", 1e8, 4e10)})


def test_the_suite_never_times_a_dtype_the_probe_excluded(monkeypatch):
    """With the probe saying bf16 has no fast path, a tiny suite takes no bf16 ceiling, chooses fp32 and says
    why; asked for bf16 by name, it refuses before any ceiling is measured."""
    monkeypatch.setattr(suite, "device_probe", lambda kind: SLOW_BF16)
    timed = []
    real = suite.measure_ceilings

    def spy(kind, dtypes, **kw):
        timed.extend(dtypes)
        return real(kind, dtypes, **kw)
    monkeypatch.setattr(suite, "measure_ceilings", spy)
    made = []
    real_model = suite.random_model
    monkeypatch.setattr(suite, "random_model", lambda cfg, kind, dt, seed: made.append(dt) or real_model(cfg, kind, dt, seed))
    run = measure.quick_suite(model="tiny", progress=False, threads=1, clock="thread-cpu", decode_mode="eager")
    d = run.data
    assert "bf16" not in timed and set(timed) == {"fp32"}
    assert made == ["fp32"]
    assert d["config"]["dtype"] == "fp32"
    assert d["config"]["dtype_reason"].startswith("fp32: bf16 product: 0.1 GFLOP/s, 1/400 of fp32")
    assert "bf16" not in d["ceilings"]["matmul_flops_per_s"]
    assert d["dtype_probe"]["excluded"] == SLOW_BF16.excluded
    assert any(n.startswith("not measured: bf16 product") for n in d["notes"])
    # each stage's seconds are kept, and together they are the run (less its set-up and the dtype probe)
    stages = d["stage_elapsed_s"]
    assert list(stages)[:2] == ["ceilings", "roofline"] and "ceilings again" in stages
    # (each stage is stored rounded to the millisecond: their sum may pass the run's own total by half a ms each)
    assert 0 < sum(stages.values()) <= d["elapsed_s"] + 0.0005 * len(stages)

    def must_not_run(*a, **k):
        raise AssertionError("measured before refusing the dtype")
    monkeypatch.setattr(suite, "measure_ceilings", must_not_run)
    with pytest.raises(ValueError, match="dtype 'bf16' cannot be measured in reasonable time here"):
        measure.run_suite(model="tiny", dtype="bf16", device="cpu", progress=False)


def test_serving_validation_and_the_live_loop_choose_by_the_same_probe(monkeypatch):
    """validate's 'auto' falls back to fp32 where bf16 has no fast path; an explicit bf16 is refused before its
    ceilings; the live loop refuses it too (both consult fastpath.device_probe, as the suite does)."""
    from inferlab.measure.plan import TINY_MODEL
    from inferlab.study import live, validate
    monkeypatch.setattr(fastpath, "device_probe", lambda kind: SLOW_BF16)

    def must_not_run(*a, **k):
        raise AssertionError("measured before refusing the dtype")
    monkeypatch.setattr(ceilings, "measure_ceilings", must_not_run)
    with pytest.raises(ValueError, match="dtype 'bf16' cannot be measured in reasonable time here"):
        validate.validate(model=TINY_MODEL, dtype="bf16", log=None)
    with pytest.raises(ValueError, match="dtype 'bf16' cannot be measured in reasonable time here"):
        live.run_live(WORKLOAD, TINY_MODEL, live.LiveSettings(device="cpu", dtype="bf16"))
    seen = []
    with pytest.raises(AssertionError, match="measured before refusing"):
        validate.validate(model=TINY_MODEL, log=seen.append)
    assert seen and seen[0].startswith("dtype fp32: bf16 product")


def test_one_dtype_table_both_ways():
    """ceilings.torch_dtype and dtype_name are the project's one table of dtypes (the suite, the live loop, the
    transformers adapter and the host-speed probe use it): each name round-trips, a subset narrows what is
    allowed, an unknown torch dtype is named as torch prints it."""
    from inferlab.measure.ceilings import dtype_name, torch_dtype
    for name, t in (("fp32", torch.float32), ("bf16", torch.bfloat16), ("fp16", torch.float16)):
        assert torch_dtype(name) is t and dtype_name(t) == name
    with pytest.raises(ValueError, match=r"dtype 'fp16' cannot be measured \(allowed: fp32, bf16\)"):
        torch_dtype("fp16", allowed=("fp32", "bf16"))
    with pytest.raises(ValueError, match=r"dtype 'int8' cannot be measured \(allowed: fp32, bf16, fp16\)"):
        torch_dtype("int8")
    assert dtype_name(torch.float64) == "torch.float64"

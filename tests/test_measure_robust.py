"""Issue #27's pure parts, on hand-derived values: ceilings that estimate (median) rather than
chase bursts (max only for validity), decode MBU against the read-only stream, the drift
probes (ratio, summary, nearest profiled size, dominant operator, interleaving order), the
decode-only signed residual of compiled steps, and the CPU's default decode mode."""
import math

import pytest

from inferlab import measure

from inferlab.measure import calibrate, ceilings, drift, plan, runner, suite
from inferlab.measure.profile import pass_residual
from inferlab.specs import Accelerator

from test_measure_calibrate import ACC, CFG, FP32, _points, _profile

GB = 1e9


# Ceilings: median to divide by, max to bound -----------------------------------------------------

def test_the_ratio_divides_by_the_median_estimate_not_a_burst():
    # Five copy estimates of one run, one of them a 53 GB/s burst: sorted 24, 30, 31, 48, 53.
    est = [30 * GB, 53 * GB, 24 * GB, 31 * GB, 48 * GB]
    assert ceilings.robust_ceiling(est) == 31 * GB
    assert ceilings.bound_ceiling(est) == 53 * GB
    sp = ceilings.ceiling_spread(est)
    assert sp == pytest.approx({"median": 31 * GB, "min": 24 * GB, "max": 53 * GB, "n": 5,
                                "rel_spread": 29 / 31})
    # an even count: the mean of the middle two
    assert ceilings.robust_ceiling([1.0, 4.0, 2.0, 3.0]) == 2.5


@pytest.mark.parametrize("bad, match", [([], "at least one"), ([1e9, -1.0], "positive"),
                                        ([float("nan")], "positive")])
def test_ceiling_estimates_are_checked(bad, match):
    with pytest.raises(ValueError, match=match):
        ceilings.robust_ceiling(bad, "copy bandwidth")


def test_estimates_are_gathered_in_order_and_the_copy_stands_in_for_a_missing_read():
    start = ceilings.Ceilings(10.0, {"bf16": 100.0}, 1.0, read_bytes_per_s=20.0)
    end = ceilings.Ceilings(12.0, {"bf16": 120.0}, 1.0, read_bytes_per_s=22.0)
    phases = [{"copy_bytes_per_s": 11.0, "read_bytes_per_s": 21.0, "matmul_flops_per_s": 110.0}]
    est = suite.ceiling_estimates(start, end, phases, "bf16")
    assert est == {"copy": [10.0, 11.0, 12.0], "read": [20.0, 21.0, 22.0], "matmul": [100.0, 110.0, 120.0]}
    old = ceilings.Ceilings(10.0, {"bf16": 100.0}, 1.0)  # a run from before the read stream
    assert suite.ceiling_estimates(old, old, [], "bf16")["read"] == [10.0, 10.0]


def test_decode_mbu_divides_by_the_read_stream_and_mfu_by_the_median_matmul():
    # 1 GB in 0.1 s = 10 GB/s: against a 20 GB/s read stream 0.5, against a 40 GB/s copy 0.25.
    # 1 TFLOP in 0.1 s = 10 TFLOP/s against 50 TFLOP/s: 0.2.
    acc = Accelerator(name="m", memory_bytes=1e12, hbm_bytes_per_s=40 * GB, peak_flops_per_s={"fp32": 50e12})
    p = {"batch": 1, "context_len": 16, "bytes": 1e9, "flops": 1e12, "timing": {"median_s": 0.1},
         "eager": {"timing": {"median_s": 0.2}}}
    suite._repredict(CFG, FP32, acc, "fp32", [], [p], [], read_bytes_per_s=20 * GB)
    assert p["mbu"] == pytest.approx(0.5) and p["mbu_copy"] == pytest.approx(0.25)
    assert p["mfu"] == pytest.approx(0.2)
    assert p["eager"]["mbu"] == pytest.approx(0.25)  # the eager step, twice as slow


def test_validity_is_checked_against_the_highest_estimate():
    # 1 GB in 0.05 s = 20 GB/s: under a 25 GB/s highest read stream (0.8), over a 15 GB/s one (1.33).
    meas = {"ttft": [], "batch": [],
            "itl": [{"batch": 1, "context_len": 64, "bytes": 1e9, "flops": 1e9, "timing": {"median_s": 0.05}}]}
    assert suite.validity_reasons(meas, {"read": 25 * GB, "matmul": 1e15}) == []
    (reason,) = suite.validity_reasons(meas, {"read": 15 * GB, "matmul": 1e15})
    assert reason.startswith("MBU 1.33 > 1 at itl B = 1, context 64")
    # 1 GFLOP in 0.05 s = 20 GFLOP/s over a 10 GFLOP/s highest matmul: MFU 2.00
    (reason,) = suite.validity_reasons(meas, {"read": 25 * GB, "matmul": 10e9})
    assert reason.startswith("MFU 2.00 > 1 at itl")


# Drift probes -------------------------------------------------------------------------------------

def test_drift_ratio_is_the_geometric_mean_of_the_probes_over_the_profile():
    # sqrt(2 ms * 8 ms) = 4 ms against a 2 ms profile: the host ran at half speed.
    assert drift.drift_ratio(2e-3, 8e-3, 2e-3) == pytest.approx(2.0)
    assert drift.drift_ratio(1e-3, 1e-3, 2e-3) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="before_s must be a positive"):
        drift.drift_ratio(0.0, 1e-3, 1e-3)


def test_a_run_is_drifting_when_its_probes_move_more_than_the_tolerance():
    # 0.9 and 1.2 with the profile's 1: 1.2 / 0.9 - 1 = 1/3 > 0.15.
    s = drift.drift_summary([0.9, 1.2])
    assert s["drift"] == pytest.approx(1 / 3) and s["drifting"] is True
    assert (s["min"], s["max"], s["n"], s["tolerance"]) == (0.9, 1.2, 2, drift.DRIFT_TOLERANCE)
    # 1.05 / 0.98 - 1 = 0.0714: steady
    s = drift.drift_summary([1.05, 0.98])
    assert s["drift"] == pytest.approx(1.05 / 0.98 - 1) and s["drifting"] is False
    # steady within the run but 20 % slower than at the profile: the profile's moment counts
    assert drift.drift_summary([1.2, 1.2])["drift"] == pytest.approx(0.2)
    assert drift.drift_summary([1.2, 1.2], tolerance=0.25)["drifting"] is False
    with pytest.raises(ValueError, match="tolerance"):
        drift.drift_summary([1.0], tolerance=0.0)


def test_each_point_is_timed_between_its_two_probes():
    calls = []
    result, before, after = drift.probed(lambda: calls.append("point") or "t",
                                         lambda: calls.append("probe") or len(calls))
    assert calls == ["probe", "point", "probe"]
    assert (result, before, after) == ("t", 1, 3)


def test_the_probe_size_is_the_nearest_profiled_one_in_log():
    # 512 between 384 and 768: log(512/384) = 0.288 < log(768/512) = 0.405
    assert drift.nearest_size(512, [768, 384, 1536]) == 384
    assert drift.nearest_size(1, [3, 12]) == 3
    assert drift.nearest_size(6, [4, 9]) == 4  # log(6/4) = log(9/6): the smaller
    with pytest.raises(ValueError, match="no sizes"):
        drift.nearest_size(4, [])


def test_the_probe_is_the_linear_shape_with_the_largest_calibrated_time():
    # Decode, B = 1, efficiency 0.5 everywhere: memory-bound bytes 4 (KN + M (K + N)) per use:
    # 8x8 (q, k, v, o): 4 * 320 * 2 layers = 2560; 8x16 (gate, up): 2 * 608 * 2 = 2432;
    # 16x8 (down): 1216; 8x32 (head): 1184. The 8x8 shape dominates; rows 1 -> profiled 3.
    prof = _profile({3: 0.5, 12: 0.5})
    assert drift.dominant_linear(prof, CFG, FP32, ACC, 1, 1, 1) == ("8x8", 3)
    # The gate/up shape at efficiency 0.25: 2432 / 0.25 = 9728 > 2560 / 0.5 = 5120.
    prof["linear"]["8x16"] = _points(8, 16, {3: 0.25, 12: 0.25})
    assert drift.dominant_linear(prof, CFG, FP32, ACC, 1, 1, 1) == ("8x16", 3)
    # A prefill of 48 tokens: rows 48, nearest profiled 12.
    assert drift.dominant_linear(prof, CFG, FP32, ACC, 1, 48, 0) == ("8x16", 12)
    assert drift.reference_s(prof, "8x16", 12) == prof["linear"]["8x16"][1]["time_s"]
    with pytest.raises(ValueError, match="no 8x16 linear at 5 rows"):
        drift.reference_s(prof, "8x16", 5)


# Compiled decode ------------------------------------------------------------------------------------

def test_a_compiled_steps_residual_is_signed_and_added_to_decode_passes_only():
    prof = _profile({3: 0.5, 12: 0.5})
    pred = calibrate.calibrated_time_s(prof, CFG, FP32, ACC, 1, 1, 7)
    # one probe, one round, measured 1 ms faster than its operators: -1 ms, or 0 clamped
    rounds = [[{"batch": 1, "context": 8, "measured_s": pred - 1e-3}]]
    assert pass_residual(prof, CFG, FP32, ACC, rounds)[0] == 0.0
    res, details = pass_residual(prof, CFG, FP32, ACC, rounds, signed=True)
    assert res == pytest.approx(-1e-3) and details["signed"] is True
    prof.update(residual_s=res, residual_scope="decode")
    assert calibrate.calibrated_time_s(prof, CFG, FP32, ACC, 1, 1, 7) == pytest.approx(pred - 1e-3)
    prefill = calibrate.calibrated_time_s({**prof, "residual_s": 0.0}, CFG, FP32, ACC, 1, 6, 0)
    assert calibrate.calibrated_time_s(prof, CFG, FP32, ACC, 1, 6, 0) == pytest.approx(prefill)
    # B = 1 and B > 1 run different graphs: each takes the residual of its own probes.
    pred3 = calibrate.calibrated_time_s({**prof, "residual_s": 0.0, "residual_scope": None}, CFG, FP32, ACC, 3, 1, 7)
    pred6 = calibrate.calibrated_time_s({**prof, "residual_s": 0.0, "residual_scope": None}, CFG, FP32, ACC, 6, 1, 7)
    base = {**prof, "residual_s": 0.0}
    base.pop("residual_scope")
    rounds = [[{"batch": 1, "context": 8, "measured_s": pred - 4e-3},
               {"batch": 3, "context": 8, "measured_s": pred3 - 1e-3},
               {"batch": 6, "context": 8, "measured_s": pred6 - 2e-3}]]
    res, details = pass_residual(base, CFG, FP32, ACC, rounds, signed=True)
    # overall median of -4, -1, -2 ms: -2 ms; B = 1: -4 ms; B > 1: median of -1, -2 = -1.5 ms
    assert (res, details["b1_s"], details["batched_s"]) == pytest.approx((-2e-3, -4e-3, -1.5e-3))
    split = {**base, "residual_s": res, "residual": details, "residual_scope": "decode"}
    assert calibrate.calibrated_time_s(split, CFG, FP32, ACC, 1, 1, 7) == pytest.approx(pred - 4e-3)
    assert calibrate.calibrated_time_s(split, CFG, FP32, ACC, 3, 1, 7) == pytest.approx(pred3 - 1.5e-3)
    # without the scope (eager runs), the residual is every pass's
    del prof["residual_scope"]
    assert calibrate.calibrated_time_s(prof, CFG, FP32, ACC, 1, 6, 0) == pytest.approx(prefill - 1e-3)


def test_the_cpu_decodes_compiled_with_freezing_by_default():
    assert plan.resolve_decode_mode("auto", "cpu") == "compile"
    assert plan.resolve_decode_mode("auto", "cuda") == "graph"
    assert plan.resolve_decode_mode("auto", "mps") == "eager"
    assert plan.resolve_decode_mode("eager", "cpu") == "eager"
    with pytest.raises(ValueError, match="decode_mode"):
        plan.resolve_decode_mode("jit", "cpu")
    opts = runner.compile_options("cpu")
    assert opts["dynamic"] is True and opts["options"] == {"freezing": True}
    assert runner.compile_options("cuda")["mode"] == "reduce-overhead"
    assert math.isfinite(runner.RECOMPILE_LIMIT)


@pytest.fixture(scope="module")
def tiny_default_run():
    # The default decode mode: compiled on a CPU (one thread, as tests/test_measure.py's run).
    return measure.run_suite(quick=True, device="cpu", model="tiny", progress=False, threads=1)


def test_the_cpu_step_runs_compiled_and_eager_is_timed_beside_it(tiny_default_run):
    d = tiny_default_run.data
    assert d["config"]["decode_mode"] == "compile", d["notes"]
    for p in d["measurements"]["itl"]:
        assert p["decode_mode"] == "compile" and p["eager"]["timing"]["n"] >= 5
    b1 = next(p for p in d["measurements"]["batch"] if p["batch"] == 1)
    assert tiny_default_run.summary["mbu_b1_eager"] == b1["eager"]["mbu"]
    assert d["profile"]["residual_scope"] == "decode" and d["profile"]["residual"]["signed"] is True
    assert "eager ms" in tiny_default_run.table()
    # both MBUs divide the point's bytes by the same (median) read stream
    p = d["measurements"]["itl"][0]
    assert p["mbu"] * p["timing"]["median_s"] == pytest.approx(p["eager"]["mbu"] * p["eager"]["timing"]["median_s"])


def test_the_compiled_step_computes_what_the_eager_one_does():
    import torch

    from inferlab.measure.ceilings import generator
    model = runner.random_model(measure.TINY_MODEL, "cpu", "fp32")
    model.setup_cache(2, 32)
    runner.fill_kv_cache_(model, generator("cpu", 0))
    with torch.inference_mode():
        pool = runner.token_pool(measure.TINY_MODEL, 1, 1, 2, "cpu", generator("cpu", 1))
        fn, used, note = runner.decode_runner(model, pool, 20, "compile", "cpu")
        assert used == "compile", note
        # the same position again: the cache write is idempotent, so the logits must agree
        assert torch.allclose(fn(pool[1]), model(pool[1], 20, all_logits=False), atol=1e-4, rtol=1e-4)

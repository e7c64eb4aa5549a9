"""Issue #27's pure parts, on hand-derived values: ceilings that estimate (median) rather than
chase bursts (max only for validity), decode MBU against the read-only stream, the drift
probes (ratio, summary, nearest profiled size, dominant operator, interleaving order), the
decode-only signed residual of compiled steps, and the CPU's default decode mode."""
import math
import numpy as np

import pytest

from inferlab import measure

from inferlab.measure import calibrate, ceilings, drift, plan, runner, suite
from inferlab.measure.profile import pass_residual
from inferlab.core.specs import Accelerator

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


# Stream buffers, the read stream, the bytes of a decode step ---------------------------------------

MiB = 2 ** 20


def test_stream_buffers_are_four_times_the_last_level_cache_within_free_memory():
    # The 2-vCPU Xeon VM: L3 260 MiB, 22 GB free: 4 x 260 MiB = 1040 MiB = 1,090,519,040 bytes.
    assert ceilings.stream_buffer_bytes(260 * MiB, 22e9) == 1_090_519_040
    # Cache unknown (0): the 256 MiB floor; little free memory: 10 % of it (the copy holds two buffers).
    assert ceilings.stream_buffer_bytes(0.0, 22e9) == 256 * MiB
    assert ceilings.stream_buffer_bytes(260 * MiB, 4e9) == pytest.approx(4e8)
    assert plan.make_plan("cpu", "fp32", cache_bytes=260 * MiB).copy_bytes == 1_090_519_040
    with pytest.raises(ValueError, match="cache_bytes must be a non-negative"):
        ceilings.stream_buffer_bytes(-1.0)


def test_the_read_stream_is_the_fastest_read_kernel(monkeypatch):
    # A 4 MiB buffer (4,194,304 bytes) read by sum in 10 ms, dot in 20 ms, gemv in 5 ms:
    # 419.4, 209.7 and 838.9 MB/s; the stream is gemv's 838,860,800 B/s.
    import torch
    from inferlab.measure.timing import Timing
    times = {torch.sum: 10e-3, torch.dot: 20e-3, torch.mv: 5e-3}
    monkeypatch.setattr(ceilings, "time_fn", lambda fn, pool, **kw: Timing((times[fn],) * 3))
    rate, t, by = ceilings.read_bandwidth("cpu", 4 * MiB)
    assert by == pytest.approx({"sum": 419_430_400, "dot": 209_715_200, "gemv": 838_860_800})
    assert rate == pytest.approx(838_860_800) and t.median_s == 5e-3
    with pytest.raises(ValueError, match="read kernel 'max' is unknown"):
        ceilings.read_bandwidth("cpu", 4 * MiB, kernels=("max",))


def test_each_read_kernel_reads_the_whole_buffer():
    import torch
    src = torch.arange(4096, dtype=torch.float32) / 4096
    gen = ceilings.generator("cpu", 0)
    for name in ceilings.READ_KERNELS:
        fn, ((*args,),) = ceilings.read_kernel(name, src, gen)
        out = fn(*args)
        if name == "gemv":  # 2 rows of 2048 against one vector: every element is used
            assert args[0].shape == (2, 2048) and args[0].data_ptr() == src.data_ptr()
            assert torch.allclose(out, args[0] @ args[1])
        else:
            want = src.sum() if name == "sum" else (src * src).sum()
            assert float(out) == pytest.approx(float(want), rel=1e-5)


def test_a_decode_step_reads_the_weights_once_the_embedding_rows_and_the_kv_cache():
    # cpu-0.5b (d 2048, 8 layers, MHA 16 x 128, d_ff 5632, vocab 32000), fp32, B = 2, context 256.
    # Weights per layer: q, k, v, o 4 x 2048^2 = 16,777,216; gate, up, down 3 x 2048 x 5632 =
    # 34,603,008; 8 layers: 411,041,792 x 4 B = 1,644,167,168. LM head 2048 x 32000 x 4 = 262,144,000.
    # Embedding: 2 rows of 2048 x 4 B = 16,384 (not the 262 MB table). KV read: 2 (K, V) x 8 layers x
    # 2 x 256 x 2048 x 4 B = 67,108,864. Activations per layer (T = 2 tokens, 4 B): q, o 2 x 2 x 4096 x
    # 4 = 65,536; k, v in + cache write 2 x (16,384 + 16,384) = 65,536; QK^T, PV read q 2 x 16,384;
    # gate, up, down 3 x 2 x 7680 x 4 = 184,320: 348,160 x 8 = 2,785,280; embedding out 16,384; LM
    # head in + out 2 x 34,048 x 4 = 272,384. Total 1,976,510,464 bytes.
    from inferlab.core.costs import decode_costs
    from inferlab.core.memory import weight_bytes
    from dataclasses import replace
    cfg = plan.CPU_MODEL
    assert float(decode_costs(cfg, 2, 256, FP32).total.bytes) == 1_976_510_464
    # The model's weights hold the whole table: 262,144,000 - 16,384 more than the step reads of it.
    assert weight_bytes(cfg, FP32) == 1_644_167_168 + 2 * 262_144_000 + 17 * 2048 * 4
    # Tied embeddings: the table is stored once, and still read once by the LM head (plus the rows).
    tied = replace(cfg, tied_embeddings=True)
    assert float(decode_costs(tied, 2, 256, FP32).total.bytes) == 1_976_510_464
    assert weight_bytes(tied, FP32) == weight_bytes(cfg, FP32) - 262_144_000


# Drift probes -------------------------------------------------------------------------------------

def test_drift_ratio_is_the_probe_over_the_profile():
    # 4 ms in the point's rounds against a 2 ms profile: the host ran at half speed.
    assert drift.drift_ratio(4e-3, 2e-3) == pytest.approx(2.0)
    assert drift.drift_ratio(1e-3, 2e-3) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="probe_s must be a positive"):
        drift.drift_ratio(0.0, 1e-3)


def test_a_run_is_drifting_when_its_probes_move_more_than_the_tolerance():
    # 0.9 and 1.2 with the profile's 1: 1.2 / 0.9 - 1 = 1/3 > 0.25.
    s = drift.drift_summary([0.9, 1.2])
    assert s["drift"] == pytest.approx(1 / 3) and s["drifting"] is True
    assert (s["min"], s["max"], s["n"], s["tolerance"]) == (0.9, 1.2, 2, drift.DRIFT_TOLERANCE)
    # 1.05 / 0.98 - 1 = 0.0714: steady
    s = drift.drift_summary([1.05, 0.98])
    assert s["drift"] == pytest.approx(1.05 / 0.98 - 1) and s["drifting"] is False
    # steady within the run but 30 % slower than at the profile: the profile's moment counts
    assert drift.drift_summary([1.3, 1.3])["drift"] == pytest.approx(0.3)
    assert drift.drift_summary([1.3, 1.3])["drifting"] is True
    assert drift.drift_summary([1.3, 1.3], tolerance=0.35)["drifting"] is False
    with pytest.raises(ValueError, match="tolerance"):
        drift.drift_summary([1.0], tolerance=0.0)


def test_the_tolerance_sits_above_the_probes_idle_noise_and_below_a_2x_host():
    # The probe's idle noise (drift.py): point / probe varied by at most 19 % over 12 points.
    assert 0.19 < drift.DRIFT_TOLERANCE < 1.0


def test_each_point_is_timed_round_robin_with_its_probe():
    from inferlab.measure.timing import time_interleaved
    calls = []
    point, probe = drift.probed(lambda: calls.append("point"), None, lambda: calls.append("probe"), None,
                                lambda pts: time_interleaved(pts, warmup=0, repeats=3))
    assert calls == ["point", "probe"] * 3
    assert point.n == probe.n == 3


class _Host:
    """A simulated host: the probe's calls take reference x speed x noise; the timer returns Timings
    as time_interleaved would (point first, probe second)."""

    def __init__(self, ref_s, speeds, noise):
        self.ref_s, self.speeds, self.noise, self.i = ref_s, list(speeds), list(noise), 0

    def timer(self, pts):
        from inferlab.measure.timing import Timing
        speed, noise = self.speeds[self.i], self.noise[self.i]
        self.i += 1
        probe = tuple(self.ref_s * speed * n for n in (noise, 1.0, 2 - noise))  # median: ref x speed
        return [Timing((0.1 * speed,) * 3), Timing(probe)]


def _probe_run(speeds, noise):
    prof = _profile({3: 0.5, 12: 0.5})
    probes = drift.LinearProbes(prof, CFG, "cpu", "fp32", cache_bytes=0.0, pool_bytes=1e6)
    key, m = drift.dominant_linear(prof, CFG, FP32, ACC, 1, 1, 1)
    host = _Host(drift.reference_s(prof, key, m), speeds, noise)
    ratios = []
    for _ in speeds:
        t, p = probes.around(key, m, lambda: None, None, host.timer)
        assert (p["operator"], p["rows"]) == (key, m) and p["probe_s"] == pytest.approx(p["ratio"] * p["reference_s"])
        ratios.append(p["ratio"])
    return ratios, drift.drift_summary(ratios)


def test_every_weight_copy_is_read_once_before_the_first_timed_round():
    # The first point of a phase read its probe slow for exactly one rotation of the weight copies (drift.py):
    # `around` must call the probe once on each entry of its pool before the timer runs, and record the samples.
    prof = _profile({3: 0.5, 12: 0.5})
    probes = drift.LinearProbes(prof, CFG, "cpu", "fp32", cache_bytes=0.0, pool_bytes=1e6)
    key, m = drift.dominant_linear(prof, CFG, FP32, ACC, 1, 1, 1)
    pool = probes._pool(key, m)
    seen = []  # (weight copy id) of every probe call, and "timer" when the timed rounds begin

    def probe_fn(x, w):
        seen.append(id(w))

    def timer(pts):
        from inferlab.measure.timing import Timing
        seen.append("timer")
        (fn, _), (pfn, ppool) = pts
        assert pfn is probe_fn and ppool == pool
        return [Timing((0.1,) * 3), Timing((1e-3, 2e-3, 4e-3))]

    _, p = probes.around(key, m, lambda: None, None, timer, probe_fn=probe_fn)
    copies = {id(w) for _, w in pool}
    assert len(copies) >= 2
    assert seen[-1] == "timer" and len(seen) == len(pool) + 1
    assert set(seen[:-1]) == copies and p["warm_calls"] == len(pool)
    assert p["probe_samples_s"] == [1e-3, 2e-3, 4e-3] and p["probe_s"] == 2e-3


@pytest.mark.parametrize("ratio, rel_iqr, expected", [
    (1.19, 0.1, "within noise"),    # 1.19 - 1 = 0.19: not beyond the noise band
    (1.2, 0.1, "applied"),          # 0.20 > 0.19
    (1 / 1.19, 0.1, "within noise"),  # 1 / ratio - 1 = 0.19
    (0.8, 0.1, "applied"),          # 1 / 0.8 - 1 = 0.25 > 0.19
    (0.85, 0.1, "within noise"),    # 1 / 0.85 - 1 = 0.176
    (2.0, 0.3, "untrusted"),        # spread 0.3 > 0.25, however far the ratio
    (1.0, 0.25, "within noise"),
])
def test_a_probe_corrects_its_point_only_beyond_its_noise(ratio, rel_iqr, expected):
    assert drift.PROBE_NOISE == 0.19
    assert drift.correction({"ratio": ratio, "probe_rel_iqr": rel_iqr}) == expected


def test_no_probe_no_correction_and_a_bad_band_is_refused():
    assert drift.correction(None) == "none" and drift.correction({}) == "none"
    # exactly on the band (1.5 - 1 = 0.5, exact in binary): not beyond it
    assert drift.correction({"ratio": 1.5, "probe_rel_iqr": 0.1}, noise=0.5) == "within noise"
    assert drift.correction({"ratio": 0.5, "probe_rel_iqr": 0.1}, noise=1.0) == "within noise"  # 1 / 0.5 - 1 = 1
    with pytest.raises(ValueError, match="noise must lie in"):
        drift.correction({"ratio": 1.5, "probe_rel_iqr": 0.1}, noise=-0.1)


def test_a_host_at_half_speed_is_flagged_and_an_idle_one_is_not():
    # Idle: the probe's median moves by its noise only, +-8 % (range 1.08 / 0.93 - 1 = 16 % < 25 %).
    idle = [1.0, 0.93, 1.05, 1.08, 0.97, 1.02, 0.95, 1.04, 1.0, 0.96, 1.06, 0.99]
    ratios, s = _probe_run(idle, [0.9] * 12)
    assert ratios == pytest.approx(idle)
    assert s["drift"] == pytest.approx(1.08 / 0.93 - 1) and s["drifting"] is False
    # The same noise, and from the seventh point on the host at half speed (every call 2x longer):
    # range 2 x 1.06 / 0.93 - 1 = 1.28.
    slow = idle[:6] + [2 * r for r in idle[6:]]
    ratios, s = _probe_run(slow, [0.9] * 12)
    assert s["drift"] == pytest.approx(2 * 1.06 / 0.93 - 1) and s["drifting"] is True


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


def test_b1_decode_mbu_pairs_the_step_with_the_stream_of_its_own_rounds(tiny_default_run):
    # On the wall clock every B = 1 decode point is timed round-robin with the read stream; its paired MBU is
    # the median of each round's (bytes / step) / (buffer / read), recomputed here from the recorded samples.
    d, s = tiny_default_run.data, tiny_default_run.summary
    b1 = next(p for p in d["measurements"]["batch"] if p["batch"] == 1)
    for p in d["measurements"]["itl"] + [b1]:
        pr, step = p["paired"], p["timing"]["samples_s"]
        assert pr["rounds"] == len(step) == len(pr["read_samples_s"])
        by_hand = sorted(p["bytes"] * r / (pr["buffer_bytes"] * t) for t, r in zip(step, pr["read_samples_s"]))
        assert pr["mbu"] == pytest.approx(float(np.median(by_hand)))
        assert pr["kernel"] == max(d["ceilings"]["read_by_kernel"], key=d["ceilings"]["read_by_kernel"].get)
    assert all("paired" not in p for p in d["measurements"]["batch"] if p["batch"] > 1)
    assert s["mbu_b1"] == b1["paired"]["mbu"] and s["mbu_b1_run_median"] == b1["mbu"]
    assert "same rounds" in s["mbu_b1_against"] and "same rounds" in tiny_default_run.table()

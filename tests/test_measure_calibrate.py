"""The calibrated prediction: interpolation, profile sizes, error summaries and the per-operator
arithmetic, on hand-made profiles whose answers are derived by hand."""
import math

import pytest

from inferlab.core.costs import linear_cost
from inferlab.measure import calibrate
from inferlab.measure.profile import linear_sizes, profile_sizes
from inferlab.core.roofline import roofline_time_s
from inferlab.core.specs import Accelerator, ModelConfig, Precision

FP32 = Precision("fp32", "fp32", "fp32")
# 1 GB/s and 1 GFLOP/s: a linear layer of K x N at M rows takes max(2MKN, 4(KN + M(K+N))) ns.
ACC = Accelerator(name="unit", memory_bytes=1e12, hbm_bytes_per_s=1e9, peak_flops_per_s={"fp32": 1e9})
# d 8, two heads of 4, d_ff 16, vocab 32, two layers.
CFG = ModelConfig(name="toy", d_model=8, n_layers=2, n_heads=2, n_kv_heads=2, head_dim=4, d_ff=16,
                  gated_mlp=True, vocab_size=32, description="toy", source="test")


def test_log_interpolation_and_its_ends():
    # y = x^2 through (1, 1) and (4, 16): at 2 (the log midpoint) y = 4.
    assert calibrate.interp_log(2, [1, 4], [1, 16]) == pytest.approx(4.0)
    assert calibrate.interp_log(8, [1, 4], [1, 16]) == pytest.approx(16.0)  # held beyond the end
    assert calibrate.interp_log(8, [1, 4], [1, 16], extrapolate=True) == pytest.approx(64.0)  # slope 2
    assert calibrate.interp_log(0.5, [4, 1], [16, 1]) == pytest.approx(1.0)  # unsorted input
    with pytest.raises(ValueError, match="positive"):
        calibrate.interp_log(2, [0, 4], [1, 16])


def test_profile_sizes_bracket_the_range_and_are_never_powers_of_two():
    assert profile_sizes(1, 512) == [3, 6, 12, 24, 48, 96, 192, 384, 768]
    assert profile_sizes(1, 3) == [3]
    assert profile_sizes(100, 200) == [96, 192, 384]
    assert not any(s & (s - 1) == 0 for s in profile_sizes(1, 1 << 20))


def test_linear_sizes_are_dense_where_kernels_switch_then_never_powers_of_two():
    assert linear_sizes(5) == [1, 2, 3, 4, 5]
    # dense up to 16 (MKL switches kernels between 12 and 24 rows on the Xeon VM), then 3 x 2^k
    assert linear_sizes(100) == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 24, 48, 96, 192]
    assert linear_sizes(20) == list(range(1, 17)) + [24]
    assert not any(s & (s - 1) == 0 for s in linear_sizes(1 << 20) if s > 16)


def test_error_summary_by_hand():
    # errors |m/p - 1|: 0.1, 0.2, 0, 1.0; sorted 0, .1, .2, 1.0: median .15;
    # p90 at rank 0.9 * 3 = 2.7: 0.2 + 0.7 * (1.0 - 0.2) = 0.76; max 1.0.
    s = calibrate.error_summary([1.1, 0.8, 1.0, 2.0], [1.0, 1.0, 1.0, 1.0])
    assert s == pytest.approx({"median": 0.15, "p90": 0.76, "max": 1.0, "n": 4})
    pe = calibrate.prediction_error([{"median_s": 2.0, "predicted_s": 1.0, "calibrated_s": 2.5},
                                     {"median_s": 1.0, "predicted_s": 1.0, "calibrated_s": 1.0}])
    assert pe["roofline"]["max"] == pytest.approx(1.0) and pe["calibrated"]["max"] == pytest.approx(0.2)
    assert "calibrated" not in calibrate.prediction_error([{"median_s": 2.0, "predicted_s": 1.0}])
    with pytest.raises(ValueError, match="pair up"):
        calibrate.relative_errors([1.0], [1.0, 2.0])


def _points(k, n, effs: dict):
    """Profile points of a K x N linear layer with the given efficiency at each M."""
    out = []
    for m, eff in effs.items():
        c = linear_cost(m, k, n, FP32)
        r = roofline_time_s(float(c.flops), float(c.bytes), ACC, "fp32")
        out.append({"size": m, "flops": float(c.flops), "bytes": float(c.bytes), "time_s": r / eff})
    return out


def _profile(linear_eff: dict, attn_eff: float = 0.25):
    prof = {"linear": {}, "attention": {}, "overhead_s": 5e-3,
            "elementwise": {"layer": [{"tokens": 3, "time_s": 1e-3}, {"tokens": 6, "time_s": 1e-3}],
                            "head": [{"tokens": 3, "time_s": 2e-4}, {"tokens": 6, "time_s": 2e-4}]}}
    for k, n in calibrate.linear_shapes(CFG).values():
        prof["linear"][calibrate.shape_key(k, n)] = _points(k, n, linear_eff)
    for phase in ("prefill", "decode"):
        # flops/bytes of 1 each: roofline 1 ns, so time = 1 ns / efficiency.
        prof["attention"][phase] = [{"size": s, "flops": 1.0, "bytes": 1.0, "time_s": 1e-9 / attn_eff}
                                    for s in (3, 12)]
    return prof


def test_decode_step_by_hand():
    # Decode, B = 1, one cached position: every linear layer is memory-bound at 1 GB/s.
    # q_proj 8 x 8: 4 * (64 + 1 * (8 + 8)) = 320 bytes -> 320 ns per layer, 640 ns for 2 layers.
    # Efficiency 0.5 at every profiled M -> calibrated 1280 ns.
    prof = _profile({3: 0.5, 12: 0.5})
    b = calibrate.pass_breakdown(prof, CFG, FP32, ACC, batch=1, q_len=1, past_len=1)
    assert b["roofline"]["q_proj"] == pytest.approx(640e-9)
    assert b["calibrated"]["q_proj"] == pytest.approx(1280e-9)
    # lm_head 8 x 32 once: 4 * (256 + 40) = 1184 bytes -> 1184 ns roofline, 2368 ns calibrated.
    assert b["calibrated"]["lm_head"] == pytest.approx(2368e-9)
    # Attention: roofline / 0.25; uncounted: 2 layers x 1 ms + 0.2 ms head; overhead 5 ms.
    assert b["calibrated"]["attention"] == pytest.approx(4 * b["roofline"]["attention"])
    assert b["calibrated"]["elementwise"] == pytest.approx(2.2e-3)
    assert b["roofline"]["elementwise"] == 0.0 and b["calibrated"]["overhead"] == 5e-3
    lin = sum(b["roofline"][k] for k in calibrate.linear_shapes(CFG))
    total = calibrate.calibrated_time_s(prof, CFG, FP32, ACC, 1, 1, 1)
    assert total == pytest.approx(2 * lin + 4 * b["roofline"]["attention"] + 2.2e-3 + 5e-3)


def test_efficiency_is_interpolated_between_profiled_sizes():
    # Efficiency 0.5 at M = 3 and 0.125 at M = 12: at M = 6, the log midpoint, sqrt(0.5 * 0.125) = 0.25.
    prof = _profile({3: 0.5, 12: 0.125})
    b = calibrate.pass_breakdown(prof, CFG, FP32, ACC, batch=6, q_len=1, past_len=0)
    assert b["calibrated"]["q_proj"] == pytest.approx(b["roofline"]["q_proj"] / 0.25)
    # M = 48 lies beyond the last profiled size: the efficiency of M = 12 holds.
    b = calibrate.pass_breakdown(prof, CFG, FP32, ACC, batch=1, q_len=48, past_len=0)
    assert b["calibrated"]["mlp_up"] == pytest.approx(b["roofline"]["mlp_up"] / 0.125)
    assert math.isclose(b["calibrated"]["lm_head"], b["roofline"]["lm_head"] / 0.5)  # M = B = 1


def test_profile_rounds_keep_each_points_median_round():
    from inferlab.measure.profile import _median_round

    def prof(t1, t2, te, tag):
        return {"method": "m", "linear": {"8x8": [{"size": 1, "time_s": t1, "timing": tag + "1"},
                                                 {"size": 2, "time_s": t2, "timing": tag + "2"}]},
                "elementwise": {"layer": [{"tokens": 3, "time_s": te}]}, "sizes": [1, 2]}
    m = _median_round([prof(2.0, 1.0, 5.0, "a"), prof(1.5, 3.0, 4.0, "b"), prof(9.0, 2.0, 6.0, "c")])
    # size 1: 1.5 < 2.0 < 9.0 -> a; size 2: 1.0 < 2.0 < 3.0 -> c; elementwise 4 < 5 < 6 -> 5.0
    assert [p["timing"] for p in m["linear"]["8x8"]] == ["a1", "c2"]
    assert m["elementwise"]["layer"][0]["time_s"] == 5.0 and m["sizes"] == [1, 2]
    # two rounds: the lower middle, i.e. the faster
    assert _median_round([prof(2.0, 1.0, 5.0, "a"), prof(1.5, 3.0, 4.0, "b")])["linear"]["8x8"][0]["timing"] == "b1"


def test_profile_reads_every_new_copy_before_timing_it(monkeypatch):
    """Every weight copy and attention KV copy is read once, untimed, before the first timed call
    on it (probe.warm_rotation): a first read is slow on a VM, and the 1-row linear, timed first on
    fresh copies, then served as the drift probe's reference at 1.4x its true time. Fails when the
    warm rotation is removed (the fake timer finds a copy never read before)."""
    import torch
    import torch.nn.functional as F

    from inferlab.measure import profile

    seen, timed_pools = set(), []
    real_linear, real_sdpa = F.linear, F.scaled_dot_product_attention

    def linear(x, w, *a, **k):
        seen.add(id(w))
        return real_linear(x, w, *a, **k)

    def sdpa(q, k_, v, *a, **kw):
        seen.add(id(k_))
        return real_sdpa(q, k_, v, *a, **kw)

    real_time_fn = profile.time_fn

    def checking_time_fn(fn, pool, **kw):
        for args in pool:
            if isinstance(args, tuple) and len(args) in (2, 3) and all(isinstance(a, torch.Tensor) for a in args):
                copy = args[1]  # the weight of a linear, the keys of an attention call
                if copy.dim() == 2 or (copy.dim() == 4 and len(args) == 3):
                    assert id(copy) in seen, f"a copy of shape {tuple(copy.shape)} was timed before it was read"
        timed_pools.append(len(pool))
        return real_time_fn(fn, pool, **kw)

    monkeypatch.setattr(F, "linear", linear)
    monkeypatch.setattr(F, "scaled_dot_product_attention", sdpa)
    monkeypatch.setattr(profile, "time_fn", checking_time_fn)
    monkeypatch.setattr(profile, "step_overhead", lambda *a, **k: (0.0, {}))
    profile._profile_round(CFG, "cpu", "fp32", max_tokens=4, max_batch=2, max_kv_positions=4,
                           cache_bytes=4096, pool_bytes=1e6, point_time_s=0.001)
    assert len(timed_pools) > 10  # the check ran over the linear and attention points


def test_warm_rotation_calls_each_entry_once_in_order():
    from inferlab.measure.probe import warm_rotation

    calls = []
    assert warm_rotation(lambda a, b: calls.append((a, b)), [(1, 2), (3, 4), (5, 6)]) == 3
    assert calls == [(1, 2), (3, 4), (5, 6)]
    assert warm_rotation(calls.append, ["x"]) == 1 and calls[-1] == "x"

"""The simulator's step time from a measured operator profile (serving.profiled)."""
import numpy as np
import pytest

from inferlab.core.costs import ATTENTION_OPS, forward_costs, linear_cost
from inferlab.measure import calibrate
from inferlab.measure.calibrate import linear_shapes, shape_key
from inferlab.core.roofline import roofline_time_s
from inferlab.serving import PrefillFirst, Workload, simulate
from inferlab.study.profiled import ProfileStepTime
from inferlab.serving.steptime import StepShape
from inferlab.core.specs import Accelerator, ModelConfig, Precision

FP32 = Precision("fp32", "fp32", "fp32")
ACC = Accelerator(name="unit", memory_bytes=1e12, hbm_bytes_per_s=1e10, peak_flops_per_s={"fp32": 1e11})
CFG = ModelConfig(name="unit-2l", d_model=64, n_layers=2, n_heads=4, n_kv_heads=4, head_dim=16, d_ff=128,
                  gated_mlp=True, vocab_size=512)
SIZES = [1, 2, 3, 4, 6, 12, 24, 48, 96, 192, 384]


def _roof(m, k, n):
    c = linear_cost(m, k, n, FP32)
    return float(roofline_time_s(float(c.flops), float(c.bytes), ACC, "fp32"))


def _attn_roof(q, p, layers=1):
    """Roofline seconds of QK^T and PV for one sequence, q new tokens after p cached, `layers` layers."""
    c = forward_costs(CFG, 1, q, p, FP32)
    return layers * sum(float(roofline_time_s(float(c.per_layer[o].flops), float(c.per_layer[o].bytes),
                                              ACC, "fp32")) for o in ATTENTION_OPS)


def _profile(eff=0.5, attn_eff=0.25):
    """Linear layers and attention at constant efficiencies `eff` and `attn_eff` (so the
    interpolated efficiency is exact anywhere); elementwise per layer 1e-6 * T, head elementwise
    2e-6 * T, sampling 1e-7 * b (power laws: log-log interpolation is exact); overhead 1e-4."""
    lin = {}
    for name, (k, n) in linear_shapes(CFG).items():
        lin[shape_key(k, n)] = [{"size": m, "flops": float(linear_cost(m, k, n, FP32).flops),
                                 "bytes": float(linear_cost(m, k, n, FP32).bytes),
                                 "time_s": _roof(m, k, n) / eff} for m in SIZES]

    def attn_point(size, q, p):
        c = forward_costs(CFG.with_(n_layers=1), 1, q, p, FP32)
        f = sum(float(c.per_layer[o].flops) for o in ATTENTION_OPS)
        b = sum(float(c.per_layer[o].bytes) for o in ATTENTION_OPS)
        return {"size": size, "flops": f, "bytes": b, "time_s": _attn_roof(q, p) / attn_eff}

    return {"linear": lin,
            "attention": {"decode": [attn_point(c, 1, c - 1) for c in (3, 48, 768)],
                          "prefill": [attn_point(s, s, 0) for s in (3, 48, 768)]},
            "elementwise": {"layer": [{"tokens": t, "time_s": 1e-6 * t} for t in (3, 48)],
                            "head": [{"tokens": t, "time_s": 2e-6 * t} for t in (3, 48)],
                            "sampling": [{"tokens": b, "time_s": 1e-7 * b} for b in (3, 48)]},
            "overhead_s": 1e-4}


def test_a_mixed_step_by_hand():
    st = ProfileStepTime(_profile(), CFG, FP32, ACC)
    # Two decoding sequences (100 and 300 keys: 400 in all, mean 200), one prefill chunk q = 10, p = 0;
    # three sequences sample. T = 12 tokens through the layers.
    L = 2
    lin = sum(2 * _roof(12, k, n) for name, (k, n) in linear_shapes(CFG).items() if name != "lm_head")
    k, n = linear_shapes(CFG)["lm_head"]
    expected = (L * lin + L * 1e-6 * 12 + 2e-6 * 12          # layers' linears and elementwise, head norm
                + 2 * _roof(3, k, n) + 1e-7 * 3              # LM head on 3 rows, argmax
                + 2 * _attn_roof(1, 199, L) / 0.25           # 2 decode attentions at the mean context 200
                + _attn_roof(10, 0, L) / 0.25                # the chunk's causal attention
                + 1e-4)
    assert st.step_time_s(StepShape(2, 400.0, ((10, 0),), 3), 0.0) == pytest.approx(expected, rel=1e-9)
    # A chunk after a prefix (q = 5 after p = 10) is costed as its own pairs and keys, at the efficiency
    # profiled for prefill (constant here); a one-token chunk is a decode attention.
    assert st.chunk_attention_s(5, 10) == pytest.approx(_attn_roof(5, 10, L) / 0.25, rel=1e-9)
    assert st.chunk_attention_s(1, 10) == pytest.approx(_attn_roof(1, 10, L) / 0.25, rel=1e-9)


def test_one_sequence_agrees_with_the_calibrated_pass():
    """The same profile, composed by two code paths: a B = 1 pass (measure.calibrate, as the
    measurement suite predicts TTFT and ITL) and a serving step (plus the argmax the suite skips)."""
    prof = _profile(eff=0.3)
    st = ProfileStepTime(prof, CFG, FP32, ACC)
    for s in (7, 100):
        assert st.prefill_s(s) == pytest.approx(
            calibrate.calibrated_time_s(prof, CFG, FP32, ACC, 1, s, 0) + 1e-7, rel=1e-9)
    for ctx in (5, 333):
        assert st.decode_s(ctx) == pytest.approx(
            calibrate.calibrated_time_s(prof, CFG, FP32, ACC, 1, 1, ctx - 1) + 1e-7, rel=1e-9)


def test_simulator_with_a_profile_one_request_takes_prefill_then_decode_steps():
    st = ProfileStepTime(_profile(), CFG, FP32, ACC)
    w = Workload(np.array([0.0]), np.array([40]), np.array([4]))
    r = simulate(w, CFG, ACC, PrefillFirst(), precision=FP32, kv_blocks=64, step_time=st)
    assert r.first_token_s[0] == pytest.approx(st.prefill_s(40), rel=1e-12)
    # decode step j feeds token j and reads 40 + j keys (vLLM's accounting: the cache holds S + j - 1)
    assert r.itls_s[0] == pytest.approx([st.decode_s(40 + j) for j in (1, 2, 3)], rel=1e-12)


def test_profile_of_another_model_is_refused():
    other = CFG.with_(d_model=128, name="other")
    with pytest.raises(ValueError, match="another model"):
        ProfileStepTime(_profile(), other, FP32, ACC)
    with pytest.raises(ValueError, match="lacks 'overhead_s'"):
        ProfileStepTime({k: v for k, v in _profile().items() if k != "overhead_s"}, CFG, FP32, ACC)


def test_a_chunk_after_a_prefix_takes_the_prefill_efficiency_at_equal_pairs():
    prof = _profile()
    # prefill attention efficiency 0.1 at S = 3 and 0.4 at S = 768 (log-log line between them)
    for pt, eff in zip(prof["attention"]["prefill"], (0.1, None, 0.4)):
        pt["time_s"] = _attn_roof(pt["size"], 0) / eff if eff else None
    prof["attention"]["prefill"] = [p for p in prof["attention"]["prefill"] if p["time_s"]]
    st = ProfileStepTime(prof, CFG, FP32, ACC)
    # q = 5 after p = 10: 5*10 + 5*6/2 = 65 pairs = S(S+1)/2 at S = (sqrt(521) - 1)/2 = 10.913
    s_eq = (521 ** 0.5 - 1) / 2
    eff = calibrate.interp_log(s_eq, [3, 768], [0.1, 0.4])
    assert st.chunk_attention_s(5, 10) == pytest.approx(_attn_roof(5, 10, 2) / eff, rel=1e-9)
    # the slip of reading the efficiency at q = 5 would give a different answer
    assert abs(calibrate.interp_log(5, [3, 768], [0.1, 0.4]) / eff - 1) > 0.05


def test_the_pass_residual_is_a_fixed_cost_of_every_step():
    prof = _profile()
    base = ProfileStepTime(prof, CFG, FP32, ACC)
    prof["residual_s"] = 2e-3
    with_residual = ProfileStepTime(prof, CFG, FP32, ACC)
    for args in ((2, 400.0, ((10, 0),), 3), (1, 50.0, (), 1), (0, 0.0, ((64, 0),), 1)):
        s = StepShape(*args)
        assert with_residual.step_time_s(s, 0.0) - base.step_time_s(s, 0.0) == pytest.approx(2e-3, rel=1e-9)
    assert calibrate.calibrated_time_s(prof, CFG, FP32, ACC, 1, 1, 9) == pytest.approx(
        calibrate.calibrated_time_s({**prof, "residual_s": 0.0}, CFG, FP32, ACC, 1, 1, 9) + 2e-3, rel=1e-12)

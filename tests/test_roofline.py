"""The roofline (inferlab.core.roofline): ridge point, attainable FLOP/s, kernel and pass times."""
import numpy as np
import pytest

from inferlab.core.costs import Cost, ForwardCosts, decode_costs, prefill_costs
from inferlab.core.roofline import (attainable_flops_per_s, bound, operator_regimes, pass_time_s,
                               ridge_point, roofline_time_s, time_weighted_regime)
from inferlab.core.specs import get_accelerator, get_model

pytestmark = pytest.mark.core

A100_80GB = get_accelerator("a100-80gb")
H100_SXM = get_accelerator("h100-sxm")

BOOK = get_model("llama-2-13b-book")
PEAK, BW = 989.4e12, 3.35e12  # H100 SXM dense bf16 and HBM3 (datasheet)
d, f = 5120, 20480


def test_ridge_point_h100_is_about_295():
    assert ridge_point(H100_SXM) == PEAK / BW
    assert ridge_point(H100_SXM) == pytest.approx(295, abs=0.5)  # the book's 989 / 3.35
    assert ridge_point(H100_SXM, "fp8") == pytest.approx(2 * 295.3, rel=1e-3)
    assert ridge_point(A100_80GB) == 312e12 / 2.039e12


def test_attainable_flops_is_the_lower_ceiling():
    assert attainable_flops_per_s(1.0, H100_SXM) == BW
    assert attainable_flops_per_s(10_000.0, H100_SXM) == PEAK
    assert attainable_flops_per_s(PEAK / BW, H100_SXM) == pytest.approx(PEAK, rel=1e-12)
    assert attainable_flops_per_s(1.0, H100_SXM, mbu=0.5) == BW / 2
    assert attainable_flops_per_s(10_000.0, H100_SXM, mfu=0.4) == pytest.approx(0.4 * PEAK)
    np.testing.assert_allclose(attainable_flops_per_s(np.array([0.0, 100.0, 1e4]), H100_SXM),
                               [0.0, 100 * BW, PEAK])


def test_bound_switches_at_the_ridge():
    r = PEAK / BW
    assert bound(r * 0.999, H100_SXM) == "memory"
    assert bound(r, H100_SXM) == "compute"
    assert list(bound(np.array([1.0, 1e4]), H100_SXM)) == ["memory", "compute"]


def test_roofline_time_is_max_of_compute_and_memory():
    flops, nbytes = 1e12, 1e9
    compute, memory = flops / PEAK, nbytes / BW  # 1.01 ms and 0.30 ms
    assert roofline_time_s(flops, nbytes, H100_SXM) == compute
    assert roofline_time_s(1e9, 1e12, H100_SXM) == 1e12 / BW
    assert roofline_time_s(flops, nbytes, H100_SXM, overlap="none") == pytest.approx(compute + memory)
    assert roofline_time_s(flops, nbytes, H100_SXM, mfu=0.5) == pytest.approx(2 * compute)
    assert roofline_time_s(1e9, 1e12, H100_SXM, mbu=0.5) == pytest.approx(2e12 / BW)


def test_pass_time_overlap_modes_by_hand():
    # Two layers of a compute-heavy op A and a memory-heavy op B, plus a head op.
    a = Cost(flops=PEAK * 3.0, weight_bytes=BW * 1.0)   # 3 s compute, 1 s memory
    b = Cost(flops=PEAK * 1.0, activation_bytes=BW * 2.0)  # 1 s compute, 2 s memory
    h = Cost(flops=0.0, kv_bytes=BW * 0.5)               # 0.5 s memory
    fc = ForwardCosts({"a": a, "b": b}, {"h": h}, 2)
    assert pass_time_s(fc, H100_SXM) == pytest.approx(2 * (3 + 2) + 0.5)          # per operator
    assert pass_time_s(fc, H100_SXM, overlap="whole_model") == pytest.approx(8.0)   # max(8, 6.5)
    assert pass_time_s(fc, H100_SXM, overlap="none") == pytest.approx(8.0 + 6.5)
    assert operator_regimes(fc, H100_SXM) == {"a": "compute", "b": "memory", "h": "memory"}
    assert time_weighted_regime(fc, H100_SXM) == "compute"  # 6 s compute-bound vs 4.5 s memory


def test_decode_at_batch_one_is_memory_bound_everywhere():
    regimes = operator_regimes(decode_costs(BOOK, 1, 1000), H100_SXM)
    assert set(regimes.values()) == {"memory"}
    assert time_weighted_regime(decode_costs(BOOK, 1, 1000), H100_SXM) == "memory"


def test_prefill_is_compute_bound_and_causal_attention_crosses_near_S_1180():
    # Projections at S = 1024: 1/(1/1024 + 1/d + 1/d) = 731 > 295.
    regimes = operator_regimes(prefill_costs(BOOK, 1, 1024), H100_SXM)
    for op in ("q_proj", "k_proj", "v_proj", "o_proj", "mlp_up", "mlp_down"):
        assert regimes[op] == "compute"
    # Causal attention intensity is (S+1)/4: 256.25 at S = 1024 is still below the ridge,
    # 512.25 at S = 2048 is above (the book's "comfortably compute-bound" holds for S = 2048).
    assert regimes["attn_scores"] == "memory"
    assert operator_regimes(prefill_costs(BOOK, 1, 2048), H100_SXM)["attn_scores"] == "compute"
    # (S+1)/4 = 295.3 at S = 4*295.3 - 1 = 1180.4.
    assert operator_regimes(prefill_costs(BOOK, 1, 1180), H100_SXM)["attn_scores"] == "memory"
    assert operator_regimes(prefill_costs(BOOK, 1, 1181), H100_SXM)["attn_scores"] == "compute"
    assert time_weighted_regime(prefill_costs(BOOK, 1, 1024), H100_SXM) == "compute"


def test_decode_mlp_crosses_the_ridge_just_above_B_318():
    # The book: MLP intensity ~ B, so it crosses at B = 295. With the activations read and
    # written, intensity is 1/(1/B + 1/d + 1/f); equal to 295.3 at B = 1/(1/295.3 - 1/d - 1/f).
    crossing = 1 / (BW / PEAK - 1 / d - 1 / f)
    assert 318 < crossing < 319
    assert operator_regimes(decode_costs(BOOK, 318, 100), H100_SXM)["mlp_up"] == "memory"
    assert operator_regimes(decode_costs(BOOK, 319, 100), H100_SXM)["mlp_up"] == "compute"


def test_per_operator_time_lies_between_the_overlap_bounds():
    for costs in (decode_costs(BOOK, 64, 1024), prefill_costs(BOOK, 1, 1024)):
        low = pass_time_s(costs, H100_SXM, overlap="whole_model")
        mid = pass_time_s(costs, H100_SXM)
        high = pass_time_s(costs, H100_SXM, overlap="none")
        assert low <= mid <= high
        total = costs.total
        assert low == pytest.approx(max(total.flops / PEAK, total.bytes / BW), rel=1e-12)

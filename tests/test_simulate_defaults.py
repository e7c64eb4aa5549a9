"""`simulate(workload)` runs on its own defaults: the chapter's scenario, given as objects."""
import pytest

from inferlab.serving import burst, simulate, synthetic
from inferlab.core.specs import get_accelerator, get_model

pytestmark = pytest.mark.simulator


def test_simulate_with_only_a_workload_is_the_books_scenario():
    w = synthetic(5, duration_s=20, seed=3)
    default = simulate(w).summary()
    explicit = simulate(w, get_model("llama-2-13b-book"), get_accelerator("h100-sxm")).summary()
    assert default["completed"] == default["requests"] == len(w.arrival_s) > 0
    assert default == explicit


def test_a_lone_prompt_takes_the_books_prefill_time_by_hand():
    # Llama-2 13B as the book counts it: d = 5120, L = 40, f = 4d with two MLP matrices, so
    # 4 d^2 (Q, K, V, O) + 8 d^2 (MLP) = 12 d^2 weights per layer; the LM head (d x V, V = 32,000)
    # runs on every prompt row. A lone 512-token prompt on one H100 at 989.4 TFLOP/s bf16 (dense) is
    # compute-bound: 2 (12 d^2 L + d V) S / peak = 13.19 ms, plus causal attention
    # (QK^T and PV: 2 * 2 * S^2/2 * d * L = 1.07e11 FLOPs, 0.11 ms).
    d, layers, vocab, s, peak = 5120, 40, 32000, 512, 989.4e12
    by_hand_s = (2 * (12 * d * d * layers + d * vocab) * s + 2 * 2 * s * s / 2 * d * layers) / peak
    ttft_s = simulate(burst(1, s, 1)).summary()["ttft_s"]["p50"]
    assert ttft_s == pytest.approx(by_hand_s, rel=0.01)


def test_a_name_is_still_refused_by_the_core():
    with pytest.raises(TypeError, match="get_model"):
        simulate(burst(1, 16, 1), "llama-2-13b-book")
    with pytest.raises(TypeError, match="get_accelerator"):
        simulate(burst(1, 16, 1), accelerator="h100-sxm")

"""Operator FLOPs and bytes (inferlab.core.costs) against counts worked out by hand.

Every expectation is arithmetic on the architecture numbers, written out here from the formula
in the docstring; none is copied from the library's output.
"""
import numpy as np
import pytest

from inferlab import Precision, get_model
from inferlab.core.costs import (Cost, ForwardCosts, attention_pairs, chunked_prefill_costs,
                            decode_costs, forward_costs, linear_cost, prefill_costs, total_cost)
from inferlab.core.latency import prefill_flops_rule

pytestmark = pytest.mark.core

LLAMA_2_13B = get_model("llama-2-13b")
LLAMA_3_8B = get_model("llama-3-8b")

BOOK = get_model("llama-2-13b-book")
# The book's Llama-2 13B (section 15.1.1): d = 5120, f = 4d, L = 40, N = 40 heads of H = 128.
d, f, L, N, H, V = 5120, 20480, 40, 40, 128, 32000
# Matrix parameters of one layer: W_q, W_k, W_v, W_o (d x d each, MHA) + W_up, W_down (d x f).
LAYER_MATMUL = 4 * d * d + 2 * d * f
assert LAYER_MATMUL == 314_572_800


def test_linear_cost_small_case():
    c = linear_cost(3, 4, 5)
    assert c.flops == 2 * 3 * 4 * 5 == 120
    assert c.weight_bytes == 4 * 5 * 2  # W in bf16
    assert c.activation_bytes == 3 * (4 + 5) * 2  # x read, y written
    assert c.kv_bytes == 0
    assert c.bytes == 40 + 54


def test_linear_cost_respects_each_dtype():
    c = linear_cost(3, 4, 5, Precision(weights="int4", activations="fp32"))
    assert c.weight_bytes == 4 * 5 * 0.5
    assert c.activation_bytes == 3 * (4 + 5) * 4


def test_linear_intensity_is_harmonic_in_tokens_and_widths():
    # FLOPs 2*T*d*f over bytes 2*(d*f + T*(d + f)) = 1 / (1/T + 1/d + 1/f).
    T = 2048
    assert linear_cost(T, d, f).intensity == pytest.approx(1 / (1 / T + 1 / d + 1 / f), rel=1e-12)


def test_book_prefill_mlp_intensity_is_below_BS_once_activations_count():
    # The book quotes B*S = 2048 for the MLP at S = 2048, neglecting activation traffic.
    # With it: 2048*d*f / (d*f + 2048*(d + f)) = 1365.3, still far above the ridge (295).
    mlp = prefill_costs(BOOK, 1, 2048).mlp
    assert mlp.intensity == pytest.approx(2048 * d * f / (d * f + 2048 * (d + f)), rel=1e-12)
    assert mlp.intensity == pytest.approx(1365.33, abs=0.01)


def test_mlp_intensity_approaches_tokens_when_activations_are_negligible():
    # Widths far larger than T: 1/d and 1/f vanish beside 1/T.
    for T in (1, 64, 2048):
        assert linear_cost(T, 10**8, 10**8).intensity == pytest.approx(T, rel=1e-4)


def test_decode_mlp_intensity_is_about_the_batch():
    for B in (1, 8, 64):
        up = decode_costs(BOOK, B, 1000).per_layer["mlp_up"]
        assert up.intensity == pytest.approx(1 / (1 / B + 1 / d + 1 / f), rel=1e-12)
        assert up.intensity == pytest.approx(B, rel=0.02)


@pytest.mark.parametrize("q, past, causal, pairs", [
    (4, 6, True, 4 * 6 + 4 * 5 / 2),   # query i sees the 6 cached keys and i + 1 new ones
    (4, 6, False, 4 * 10),
    (1, 999, True, 1000),              # a decode step: one query over 1000 positions
    (1, 999, False, 1000),
    (2048, 0, True, 2048 * 2049 / 2),
    (2048, 0, False, 2048 ** 2),
])
def test_attention_pairs(q, past, causal, pairs):
    assert attention_pairs(q, past, causal) == pairs


def test_prefill_attention_intensity_is_S_T_over_S_plus_T_without_a_mask():
    # QK^T for T queries against S keys, per head: 2*S*T*H FLOPs over (T + S)*H*2 bytes
    # (Q and K in bf16; the scores stay on chip) = S*T/(S + T): S/2 when T = S (book, 15.1.1).
    full = prefill_costs(BOOK, 1, 2048, causal=False)
    assert full.per_layer["attn_scores"].intensity == pytest.approx(2048 / 2, rel=1e-12)
    assert full.attention.intensity == pytest.approx(1024, rel=1e-12)  # PV has the same ratio
    # A later chunk: T = 512 queries against S = 1536 + 512 keys.
    chunk = forward_costs(BOOK, 1, 512, 1536, causal=False).per_layer["attn_scores"]
    assert chunk.intensity == pytest.approx(512 * 2048 / (512 + 2048), rel=1e-12)


def test_causal_prefill_attention_intensity_is_half_as_large():
    # A causal kernel scores S(S+1)/2 pairs but still reads all of Q and K once:
    # 2*H*S(S+1)/2 / (4*S*H) = (S + 1)/4 per head.
    for S in (128, 1024, 2048):
        assert prefill_costs(BOOK, 1, S).attention.intensity == pytest.approx((S + 1) / 4, rel=1e-12)


def test_prefill_attention_flops_are_quadratic():
    # Two products (QK^T, PV) x 2 FLOPs x N heads x H x S(S+1)/2 pairs, per layer.
    S = 1024
    assert prefill_costs(BOOK, 1, S).attention.flops == L * 2 * 2 * N * H * S * (S + 1) / 2


def test_prefill_linear_flops_are_2PS():
    # Without the quadratic attention terms, every matrix parameter does one multiply-add per
    # token; the LM head runs only on the last token (its logits sample the first output token).
    S = 1024
    linear = prefill_costs(BOOK, 1, S).without("attn_scores", "attn_values").total.flops
    assert linear == 2 * S * L * LAYER_MATMUL + 2 * d * V
    assert linear == 25_769_803_776_000 + 327_680_000
    # With every position's logits (a training-style forward): exactly 2 * P_matmul * S.
    all_logits = prefill_costs(BOOK, 1, S, all_logits=True).without("attn_scores", "attn_values")
    assert all_logits.total.flops == 2 * S * (L * LAYER_MATMUL + V * d)


def test_prefill_flops_are_2PS_not_the_books_6PS():
    # The book's 6 * N_params * S is the training rule (forward + backward). A forward pass is
    # 2 * P * S: with P = 12.91e9 exact parameters, S = 2048 -> 5.29e13 FLOPs, not 1.6e14.
    P, S = get_model(BOOK).n_params, 2048
    assert P == 12_911_006_720
    total = prefill_costs(BOOK, 1, S).total.flops
    assert total == pytest.approx(2 * P * S, rel=0.03)
    assert total < 0.4 * 6 * 13e9 * 2048
    assert prefill_flops_rule(P, S) == 2 * P * S
    assert prefill_flops_rule(P, S, flops_per_param_token=6) == 6 * P * S


def test_decode_step_bytes_by_hand():
    # One step, B = 1, context 1000 (999 cached + the new token), bf16 throughout.
    S = 1000
    per_layer_weights = 2 * LAYER_MATMUL
    # x in / y out of q_proj (d+d), k_proj and v_proj read x (d each), Q read by QK^T (d),
    # O written by PV (d), o_proj (d+d), up (d+f), down (f+d).
    per_layer_acts = 2 * (2 * d + d + d + d + d + 2 * d + (d + f) + (f + d))
    # New K and V written (d each), then all S positions of K and of V read.
    per_layer_kv = 2 * (2 * d + 2 * S * d)
    head = 2 * d + 2 * d + 2 * d * V + 2 * (d + V)  # one embedding row in and out; LM head
    total = decode_costs(BOOK, 1, S).total
    assert total.weight_bytes == L * per_layer_weights + 2 * d + 2 * d * V
    assert total.kv_bytes == L * per_layer_kv
    assert total.bytes == L * (per_layer_weights + per_layer_acts + per_layer_kv) + head


def test_decode_attention_intensity_is_about_one_for_mha():
    # Per head and step: 2 * 2*H*S FLOPs over (K + V) = 2*S*H*2 bytes, plus Q and O (2*H*2):
    # N*S / (N + S*N_kv) overall; exactly N/N_kv counting the KV bytes alone. The book's
    # "intensity ~ 0.5" at B = 64, S = 1000 contradicts its own "~ 1"; the count gives 1.
    S = 1000
    for B in (1, 64):
        attn = decode_costs(BOOK, B, S).attention
        assert attn.intensity == pytest.approx(N * S / (N + S * N), rel=1e-12)
        assert attn.flops / attn.kv_bytes == pytest.approx(N / N, rel=1e-12)


def test_decode_attention_intensity_is_group_size_for_gqa():
    # Llama-3-8B: 32 query heads share 8 KV heads, so each KV byte serves 4 heads.
    h, kv, S = 32, 8, 8192
    attn = decode_costs(LLAMA_3_8B, 16, S).attention
    assert attn.flops / attn.kv_bytes == pytest.approx(h / kv, rel=1e-12)
    assert attn.intensity == pytest.approx(h * S / (h + S * kv), rel=1e-12)
    assert attn.intensity == pytest.approx(4, rel=1e-3)


def test_int8_kv_halves_kv_traffic_and_doubles_attention_intensity():
    bf16 = decode_costs(LLAMA_3_8B, 4, 4096).attention
    int8 = decode_costs(LLAMA_3_8B, 4, 4096, Precision(kv="int8")).attention
    assert int8.kv_bytes == bf16.kv_bytes / 2
    assert int8.flops / int8.kv_bytes == pytest.approx(2 * 32 / 8, rel=1e-12)


def test_gqa_shrinks_kv_projections():
    m = get_model("llama-3-8b")
    k = decode_costs(m, 1, 10).per_layer["k_proj"]
    assert k.weight_bytes == 4096 * 8 * 128 * 2
    assert k.flops == 2 * 4096 * 8 * 128


def test_gated_mlp_has_three_matrices():
    c = prefill_costs(LLAMA_2_13B, 2, 100).mlp
    assert c.flops == 40 * 3 * 2 * (2 * 100) * 5120 * 13824
    assert c.weight_bytes == 40 * 3 * 5120 * 13824 * 2


def test_embedding_reads_one_row_per_token_up_to_the_table():
    assert decode_costs(BOOK, 7, 5).head["embedding"].weight_bytes == 7 * d * 2
    assert prefill_costs(BOOK, 1, 40_000).head["embedding"].weight_bytes == V * d * 2
    assert decode_costs(BOOK, 7, 5).head["embedding"].flops == 0


def test_weights_are_read_once_per_pass_whatever_the_batch():
    a, b = decode_costs(BOOK, 1, 100).total, decode_costs(BOOK, 64, 100).total
    assert a.weight_bytes == b.weight_bytes - 63 * d * 2  # only the embedding rows differ
    assert b.kv_bytes == 64 * a.kv_bytes
    assert b.flops == pytest.approx(64 * a.flops, rel=1e-12)


def test_chunked_prefill_total_flops_equal_one_shot_causal_prefill():
    # Chunk i scores C*iC + C(C+1)/2 pairs; the sum over chunks is S(S+1)/2, as in one pass.
    for S, C in ((1024, 256), (1000, 256), (1000, 1), (1000, 1000), (1000, 4096)):
        chunked = chunked_prefill_costs(BOOK, S, C).total
        assert chunked.flops == pytest.approx(prefill_costs(BOOK, 1, S).total.flops, rel=1e-12)


def test_chunked_prefill_bytes_grow_as_chunks_shrink():
    # S = 1024 in n = 4 chunks of C = 256: the layer weights are read 4 times, the LM head once
    # (only the last chunk needs logits), and chunk i reads K and V of its (i+1)*C positions.
    S, C, n = 1024, 256, 4
    one = prefill_costs(BOOK, 1, S).total
    ch = chunked_prefill_costs(BOOK, S, C)
    assert ch.n_chunks == n
    assert list(ch.past_len) == [0, 256, 512, 768]
    assert ch.total.weight_bytes == n * L * 2 * LAYER_MATMUL + S * d * 2 + d * V * 2
    reads = 2 * 2 * d * C * sum(i + 1 for i in range(n))  # K and V, bf16
    writes = 2 * 2 * d * S
    assert ch.total.kv_bytes == L * (reads + writes)
    assert one.kv_bytes == L * (2 * 2 * d * S + writes)
    sizes = [chunked_prefill_costs(BOOK, S, c).total.bytes for c in (1024, 512, 256, 64)]
    assert sizes == sorted(sizes) and sizes[0] == pytest.approx(one.bytes, rel=1e-12)


def test_forward_costs_broadcast_over_a_grid():
    B = np.array([[1], [4], [16]])
    S = np.array([[10, 100, 1000]])
    grid = decode_costs(BOOK, B, S).total
    assert np.shape(grid.flops) == (3, 3)
    for i, b in enumerate(B[:, 0]):
        for j, s in enumerate(S[0]):
            point = decode_costs(BOOK, int(b), int(s)).total
            assert grid.flops[i, j] == point.flops
            assert grid.bytes[i, j] == point.bytes


def test_cost_algebra():
    a = Cost(flops=1.0, weight_bytes=2.0, activation_bytes=3.0, kv_bytes=4.0)
    assert a.bytes == 9.0
    assert a.intensity == 1 / 9
    assert (a + a) == a * 2 == 2 * a == Cost(2.0, 4.0, 6.0, 8.0)
    assert total_cost([a, a, a]) == a * 3
    assert total_cost([]) == Cost()


def test_forward_costs_structure():
    fc = ForwardCosts({"x": Cost(1.0, 1.0), "y": Cost(2.0, 0.0)}, {"h": Cost(5.0, 5.0)}, 3)
    assert fc.operators() == {"x": Cost(3.0, 3.0), "y": Cost(6.0, 0.0), "h": Cost(5.0, 5.0)}
    assert fc.total == Cost(14.0, 8.0)
    assert fc.layer == Cost(3.0, 1.0)
    assert fc.without("y", "h").total == Cost(3.0, 3.0)

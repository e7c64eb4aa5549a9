"""The one attention account, MoE's expert reads and KV bytes, against hand counts.

Every expected value is counted here by hand (positions listed, widths multiplied out), never taken
from the code under test.
"""
import numpy as np
import pytest

from inferlab.core import attention
from inferlab.core.costs import decode_costs, forward_costs, prefill_costs
from inferlab.core.memory import kv_cache_bytes, kv_cache_bytes_per_token, max_batch, weight_bytes
from inferlab.core.moe import expected_experts
from inferlab.core.specs import ModelConfig, Precision, from_hf_config, data_dir, get_accelerator, get_model
from inferlab.core.context import beyond_context

pytestmark = pytest.mark.core

HF = data_dir() / "hf-configs"


def test_sliding_window_pairs_keys_and_cache():
    # W = 4. Prefill of 6 tokens: the queries at positions 0..5 see 1, 2, 3, 4, 4, 4 keys.
    assert attention.pairs("sliding", 4, 6, 0) == 1 + 2 + 3 + 4 + 4 + 4
    assert attention.keys_read("sliding", 4, 6, 0) == 6
    # A chunk of 3 after 5 cached: positions 5, 6, 7 see 4 keys each; keys 2..7 are read.
    assert attention.pairs("sliding", 4, 3, 5) == 12
    assert attention.keys_read("sliding", 4, 3, 5) == 6
    # A decode at position 9 sees the last 4 keys; the cache holds 4 of the 10 tokens.
    assert attention.pairs("sliding", 4, 1, 9) == 4
    assert attention.keys_read("sliding", 4, 1, 9) == 4
    assert attention.keys_held("sliding", 4, 10) == 4
    assert attention.keys_held("sliding", 4, 3) == 3


def test_chunked_pairs_keys_and_cache():
    # C = 4. Prefill of 6: positions 0..5 see (i mod 4) + 1 = 1, 2, 3, 4, 1, 2 keys.
    assert attention.pairs("chunked", 4, 6, 0) == 13
    # A chunk of 3 after 5 cached: positions 5, 6, 7 see 2, 3, 4 keys; keys 4..7 are read.
    assert attention.pairs("chunked", 4, 3, 5) == 9
    assert attention.keys_read("chunked", 4, 3, 5) == 4
    # Decode at position 9: its chunk starts at 8, so 2 keys.
    assert attention.pairs("chunked", 4, 1, 9) == 2
    assert attention.keys_read("chunked", 4, 1, 9) == 2
    assert attention.keys_held("chunked", 4, 10) == 4


def test_full_attention_is_the_old_count():
    assert attention.pairs("full", None, 6, 0) == 21 and attention.pairs("full", None, 3, 5) == 3 * 5 + 6
    assert attention.keys_read("full", None, 3, 5) == 8


TINY = ModelConfig(name="tiny-mixed", d_model=64, n_layers=4, n_heads=4, n_kv_heads=2, head_dim=24, d_ff=96,
                   gated_mlp=True, vocab_size=128, layer_types=("sliding", "full", "sliding", "full"),
                   sliding_window=8, max_context_tokens=256)


def test_kv_bytes_of_a_mixed_model_by_hand():
    # Per layer per key: K and V of 2 heads x 24 in bf16 = 2 * 48 * 2 = 192 bytes.
    # 20 tokens: 2 full layers hold 20 keys, 2 sliding layers 8 keys.
    assert kv_cache_bytes(TINY, 20, 1) == 2 * 20 * 192 + 2 * 8 * 192
    assert kv_cache_bytes(TINY, 5, 3) == 3 * 4 * 5 * 192           # under the window: all layers hold all
    assert kv_cache_bytes_per_token(TINY) == 4 * 192                 # the paged pool's per-token bound


def test_deepseek_v3_mla_kv_bytes_per_token():
    ds = from_hf_config(HF / "deepseek-v3")
    # MLA caches the 512-wide latent and the 64-wide rope key once per layer: 61 * 576 * 2 bytes (bf16).
    assert kv_cache_bytes_per_token(ds) == 61 * (512 + 64) * 2 == 70_272
    assert kv_cache_bytes(ds, 1000, 2, Precision(kv="fp8")) == 2 * 1000 * 61 * 576
    # Decode attention intensity (FLOPs per KV byte): 128 heads share the latent. Absorbed MLA scores
    # 2 * 128 * 576 and values 2 * 128 * 512 FLOPs per key, reading 576 * 2 bytes.
    attn = decode_costs(ds, 1, 4096).attention
    assert attn.flops / attn.kv_bytes == pytest.approx((2 * 128 * 576 + 2 * 128 * 512) / (576 * 2))


def test_windowed_decode_reads_at_most_the_window():
    m = from_hf_config(HF / "mistral-7b-v0.1")            # 32 layers, all sliding, W = 4096
    per_key = 2 * 8 * 128 * 2                               # K and V of 8 heads x 128, bf16
    at_8k = decode_costs(m, 1, 8192).attention.kv_bytes
    assert at_8k == 32 * 4096 * per_key
    assert decode_costs(m, 1, 1000).attention.kv_bytes == 32 * 1000 * per_key
    assert kv_cache_bytes(m, 8192) == 32 * 4096 * per_key


def test_expected_experts():
    assert expected_experts(8, 2, 1) == 2                    # one token: its k experts
    assert expected_experts(8, 2, 2) == pytest.approx(8 * (1 - (6 / 8) ** 2))   # 3.5
    assert expected_experts(8, 2, 10_000) == pytest.approx(8)


def test_mixtral_expert_bytes_by_hand():
    m = from_hf_config(HF / "mixtral-8x7b-v0.1")             # 32 layers, 8 experts of 3 x 4096 x 14336, top 2
    expert = 3 * 4096 * 14336 * 2                             # bytes of one expert, bf16
    one = decode_costs(m, 1, 100).mlp.weight_bytes           # router + the experts a step reads
    router = 4096 * 8 * 2
    assert one == pytest.approx(32 * (router + 2 * expert))
    many = decode_costs(m, 256, 100).mlp.weight_bytes
    assert many == pytest.approx(32 * (router + 8 * expert * (1 - (6 / 8) ** 256)))
    # FLOPs follow the active experts only: 2 FLOPs x 2 experts x 3 d f_e per token (+ the router).
    assert decode_costs(m, 4, 100).mlp.flops == pytest.approx(32 * 4 * (2 * 4096 * 8 + 2 * 2 * 3 * 4096 * 14336))
    # A long prefill touches every expert.
    assert prefill_costs(m, 1, 2048).mlp.weight_bytes == pytest.approx(32 * (router + 8 * expert))


def test_moe_with_shared_and_dense_layers_by_hand(tmp_path):
    cfg = dict(model_type="deepseek_v3", hidden_size=64, intermediate_size=96, moe_intermediate_size=16,
               num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4, n_routed_experts=8,
               num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=1, kv_lora_rank=32,
               q_lora_rank=None, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16, vocab_size=100,
               max_position_embeddings=512)
    import json
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    m = from_hf_config(tmp_path)
    # Attention per layer: W_q 64 x 4 x 24, kv_a 64 x 40 + norm 32, kv_b 32 x 4 x 32, W_o 64 x 64.
    attn = 64 * 96 + 64 * 40 + 32 + 32 * 128 + 64 * 64
    dense = 3 * 64 * 96
    moe = 64 * 8 + 8 * 3 * 64 * 16 + 3 * 64 * 16            # router, 8 experts, 1 shared
    total = 4 * (attn + 2 * 64) + dense + 3 * moe + 2 * 100 * 64 + 64
    assert m.n_params == total
    assert m.n_params_active == total - 3 * 6 * 3 * 64 * 16   # 6 unused experts in 3 MoE layers
    # KV: one latent of 32 + rope key of 8 per layer and token.
    assert kv_cache_bytes(m, 10) == 4 * 40 * 2 * 10


def test_chunked_model_kv_bytes(tmp_path):
    m = TINY.with_(layer_types=("chunked", "chunked", "chunked", "full"), sliding_window=None, attention_chunk=16)
    assert kv_cache_bytes(m, 100) == 3 * 16 * 192 + 100 * 192


def test_bad_architecture_fields_one_line():
    with pytest.raises(ValueError, match="sliding_window=512 is longer than the context"):
        TINY.with_(sliding_window=512)
    with pytest.raises(ValueError, match="sliding_window is needed"):
        TINY.with_(sliding_window=None)
    with pytest.raises(ValueError, match="experts_per_token=3 exceeds n_experts=2"):
        TINY.with_(n_experts=2, experts_per_token=3, expert_d_ff=8)
    with pytest.raises(ValueError, match="sliding_window must be an integer >= 1"):
        TINY.with_(sliding_window=0)


def test_moe_fits_and_weights():
    m = from_hf_config(HF / "mixtral-8x7b-v0.1")
    assert weight_bytes(m) == 2 * 46_702_792_704
    assert max_batch(m, get_accelerator("h200"), 4096) == int((141e9 - 2 * 46_702_792_704) // (4096 * 32 * 2 * 8 * 128 * 2))   # K and V, 8 heads x 128, bf16


@pytest.mark.parametrize("name", ["mistral-7b-v0.1", "gemma-2-9b", "mixtral-8x7b-v0.1", "deepseek-v2-lite"])
def test_simulator_step_time_is_the_latency_model(name):
    """The simulator's step (serving.steptime, through attention.step_account) and latency's pass
    (costs.forward_costs, through attention.account) count the same attention and the same experts."""
    from inferlab.core.latency import decode_step_time_s, prefill_time_s
    from inferlab.serving.steptime import RooflineStepTime
    from inferlab.core.specs import resolve_model
    m, g = resolve_model(name), get_accelerator("h200")
    st = RooflineStepTime(m, g)
    for ctx, b in ((100, 1), (6000, 8), (8000, 64)):
        assert st.decode_s(ctx, b) == pytest.approx(decode_step_time_s(m, g, ctx, b), rel=1e-9)
    assert st.prefill_s(5000) == pytest.approx(prefill_time_s(m, g, 5000), rel=1e-9)


def test_a_window_caps_the_decode_step():
    """All of Mistral 7B's layers slide over 4,096 keys: past the window a decode step stops growing;
    the same model with full attention keeps growing."""
    from inferlab.serving.steptime import RooflineStepTime
    m = from_hf_config(HF / "mistral-7b-v0.1")
    g = get_accelerator("h100-sxm")
    st, full = RooflineStepTime(m, g), RooflineStepTime(m.with_(layer_types=(), sliding_window=None), g)
    assert st.decode_s(8000, 16) == pytest.approx(st.decode_s(4096, 16), rel=1e-12)
    assert full.decode_s(8000, 16) > 1.1 * full.decode_s(4096, 16)
    with pytest.raises(ValueError, match="call step_time_s"):
        st(16, 16, 16 * 8000, 16 * 8000)


def test_the_architecture_table_by_hand():
    """15.1.2's table of architectures at 8,192 tokens on an H100 (bf16 unless named)."""
    from inferlab.notebook import reader
    rows = {(r[0], r[2]): r for r in reader.architecture_rows(get_accelerator("h100-sxm"), 8192)}
    # Llama-2 13B, MHA: 2 x 40 layers x 40 heads x 128 x 2 bytes per token; 1 FLOP per KV byte.
    assert rows[("llama-2-13b", "bf16")][3] == 2 * 40 * 40 * 128 * 2 and rows[("llama-2-13b", "bf16")][4] == pytest.approx(1.0)
    # Mistral 7B: every layer keeps 4,096 of the 8,192 tokens, so half of 2 x 32 x 8 x 128 x 2 per token.
    assert rows[("mistral-7b-v0.1", "bf16")][3] == 2 * 32 * 8 * 128 * 2 / 2
    # Gemma 2 9B: 21 full and 21 sliding layers of 8 KV heads x 256.
    assert rows[("gemma-2-9b", "bf16")][3] == (21 * 8192 + 21 * 4096) * 2 * 8 * 256 * 2 / 8192
    # DeepSeek-V3: 61 x (512 + 64) x 2 bytes; (2 x 128 x 576 + 2 x 128 x 512) / (576 x 2) FLOP per byte; no fit.
    ds = rows[("deepseek-v3", "bf16")]
    assert ds[3] == 61 * 576 * 2 and ds[4] == pytest.approx((2 * 128 * 576 + 2 * 128 * 512) / 1152) and ds[5] is None
    assert rows[("llama-3-8b", "int8")][4] == pytest.approx(2 * rows[("llama-3-8b", "bf16")][4])


def test_tensor_parallel_splits_experts_and_keeps_the_latent():
    from inferlab.core.parallel import tp_shard
    mix = from_hf_config(HF / "mixtral-8x7b-v0.1")
    # tp = 2: each device holds 4 of the 8 KV heads, and half of every expert's columns (14336 / 2).
    assert kv_cache_bytes_per_token(mix, tp=2) == 2 * 32 * 4 * 128 * 2
    assert tp_shard(mix, 2).expert_d_ff == 7168
    # MLA's latent is not split: every device keeps 61 x 576 x 2 bytes per token.
    ds = from_hf_config(HF / "deepseek-v3")
    assert kv_cache_bytes_per_token(ds, tp=8) == 61 * 576 * 2


def test_attention_flops_are_one_file(monkeypatch):
    """A newcomer's change count (ARCHITECTURE.md): attention's FLOPs per query-key pair are set in
    core/attention.py (`layer_shape`) alone. Tripling the PV kernel's FLOPs there moves the operator
    costs, the latency and the simulator's step time together, and the step time still equals the
    prefill time (the simulator reads no attention FLOPs of its own). Scenario: Llama-2 13B, an
    8,192-token prompt, where attention is compute-bound."""
    import dataclasses

    from inferlab.core import attention
    from inferlab.core.costs import prefill_costs
    from inferlab.core.latency import prefill_time_s
    from inferlab.serving.steptime import RooflineStepTime, prefill_shape
    m, g, s = get_model("llama-2-13b"), get_accelerator("h100-sxm"), 8192

    def measured():
        with beyond_context():
            return (float(prefill_costs(m, 1, s).per_layer["attn_values"].flops), prefill_time_s(m, g, s),
                    RooflineStepTime(m, g).step_time_s(prefill_shape(s), 0.0))

    flops, t_latency, t_sim = measured()
    assert t_sim == pytest.approx(t_latency, rel=1e-12)
    real = attention.layer_shape
    monkeypatch.setattr(attention, "layer_shape", lambda model, precision: dataclasses.replace(
        real(model, precision), value_flops_per_pair=3 * real(model, precision).value_flops_per_pair))
    flops3, t_latency3, t_sim3 = measured()
    assert flops3 == pytest.approx(3 * flops)
    assert t_latency3 > t_latency and t_sim3 == pytest.approx(t_latency3, rel=1e-12)

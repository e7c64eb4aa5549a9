"""Any Hugging Face config: `from_hf_config` against transformers' own parameter count.

Each family's small config is written by transformers' own config class (`save_pretrained`), the
model is built from it on the meta device (no memory, no weights), and transformers' count
sum(p.numel() for p in model.parameters()) (tied embeddings counted once) must equal `n_params`.
"""
import json

import pytest

from inferlab.specs import from_hf_config, get_model, resolve_model

pytestmark = pytest.mark.core

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

BASE = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=128, head_dim=24, max_position_embeddings=256)
MLA = dict(kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=12, n_group=1, topk_group=1)
FAMILIES = {
    "llama": {}, "llama-bias": dict(attention_bias=True), "mistral": dict(sliding_window=32),
    "mixtral": dict(num_local_experts=4, num_experts_per_tok=2),
    "qwen2": {}, "qwen3": {}, "qwen3-tied": dict(tie_word_embeddings=True),
    "qwen2_moe": dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=48,
                      shared_expert_intermediate_size=80, mlp_only_layers=[0]),
    "qwen3_moe": dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=48, decoder_sparse_step=2),
    "gemma2": dict(sliding_window=32), "gemma3_text": dict(sliding_window=32),
    "deepseek_v2": dict(n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=48, n_shared_experts=2,
                        first_k_dense_replace=1, q_lora_rank=None, **MLA),
    "deepseek_v3": dict(n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=48, n_shared_experts=1,
                        first_k_dense_replace=1, q_lora_rank=24, **MLA),
    "gpt_oss": dict(num_local_experts=4, num_experts_per_tok=2, sliding_window=32),
    "llama4_text": dict(num_local_experts=4, num_experts_per_tok=1, intermediate_size_mlp=112,
                        interleave_moe_layer_step=2, attention_chunk_size=32),
    "glm4_moe": dict(n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=48, n_shared_experts=1,
                     first_k_dense_replace=1, n_group=1, topk_group=1, attention_bias=True, use_qk_norm=True),
}


def _write(tmp_path, key):
    family = key.split("-")[0]
    cfg = transformers.CONFIG_MAPPING[family](**BASE, **FAMILIES[key])
    cfg.save_pretrained(tmp_path)
    return cfg


def _transformers_count(cfg) -> int:
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    return sum(p.numel() for p in model.parameters())   # a tied head is one Parameter, counted once


@pytest.mark.parametrize("key", list(FAMILIES))
def test_params_total_equals_transformers(tmp_path, key):
    cfg = _write(tmp_path, key)
    model = from_hf_config(tmp_path)
    assert model.n_params == _transformers_count(cfg), key
    assert from_hf_config(tmp_path / "config.json") == model


def test_kinds_read_from_the_configs(tmp_path):
    _write(tmp_path, "gemma2")
    g = from_hf_config(tmp_path)
    assert g.layer_kinds == ("sliding", "full", "sliding", "full") and g.sliding_window == 32
    (tmp_path / "l4").mkdir()
    _write(tmp_path / "l4", "llama4_text")
    l4 = from_hf_config(tmp_path / "l4")
    assert l4.layer_kinds == ("chunked", "chunked", "chunked", "full") and l4.attention_chunk == 32
    assert l4.dense_layers == (0, 2) and l4.n_experts == 4
    (tmp_path / "ds").mkdir()
    _write(tmp_path / "ds", "deepseek_v3")
    ds = from_hf_config(tmp_path / "ds")
    assert ds.is_mla and ds.kv_lora_rank == 16 and ds.qk_rope_head_dim == 8 and ds.dense_layers == (0,)


def test_params_active_by_hand(tmp_path):
    """Active = total - (E - k) routed experts of 3 d f_e in each MoE layer; everything else counts."""
    cfg = _write(tmp_path, "mixtral")
    m = from_hf_config(tmp_path)
    total = _transformers_count(cfg)
    assert m.n_params_active == total - 4 * (4 - 2) * 3 * 64 * 96
    (tmp_path / "q").mkdir()
    cfg = _write(tmp_path / "q", "qwen2_moe")   # layer 0 dense; 3 MoE layers of 4 experts, top 2, + shared
    m = from_hf_config(tmp_path / "q")
    assert m.n_params_active == _transformers_count(cfg) - 3 * (4 - 2) * 3 * 64 * 48
    dense = get_model("llama-2-7b")
    assert dense.n_params_active == dense.n_params


def _json(tmp_path, **cfg):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return path


LLAMA = dict(model_type="llama", hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             intermediate_size=96, vocab_size=100, max_position_embeddings=128)


@pytest.mark.parametrize("change, words", [
    (dict(model_type="bert"), "model_type 'bert' is not supported"),
    (dict(hidden_size=None), "missing field 'hidden_size'"),
    (dict(intermediate_size=0), "intermediate_size must be a positive integer"),
    (dict(num_hidden_layers=-2), "num_hidden_layers must be a positive integer"),
    (dict(model_type="mistral", sliding_window=4096), "sliding_window=4096 is longer than the context"),
])
def test_bad_configs_one_line(tmp_path, change, words):
    cfg = {**LLAMA, **change}
    cfg = {k: v for k, v in cfg.items() if v is not None}
    with pytest.raises(ValueError) as e:
        from_hf_config(_json(tmp_path, **cfg))
    assert words in str(e.value) and "\n" not in str(e.value)


def test_no_config_and_not_json(tmp_path):
    with pytest.raises(ValueError, match="no config.json"):
        from_hf_config(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="not JSON"):
        from_hf_config(tmp_path)


def test_resolve_model_takes_a_name_or_a_path(tmp_path):
    assert resolve_model("llama-2-7b") == get_model("llama-2-7b")
    assert resolve_model(_json(tmp_path, **LLAMA)).d_model == 64


SHIPPED = {  # the counts the model cards and safetensors metadata publish (data/hf-configs/README.md)
    "mistral-7b-v0.1": 7_241_732_096, "mixtral-8x7b-v0.1": 46_702_792_704, "gemma-2-9b": 9_241_705_984}


def test_shipped_configs_match_published_counts():
    from inferlab.specs import data_dir
    for name, published in SHIPPED.items():
        assert from_hf_config(data_dir() / "hf-configs" / name).n_params == published, name
    ds = from_hf_config(data_dir() / "hf-configs" / "deepseek-v3")
    assert 670e9 < ds.n_params < 672e9 and 37e9 < ds.n_params_active < 38e9   # "671B, 37B activated"

"""Any Hugging Face config: `from_hf_config` against transformers' own parameter count.

Each family's small config is written by transformers' own config class (`save_pretrained`), the
model is built from it on the meta device (no memory, no weights), and transformers' count
sum(p.numel() for p in model.parameters()) (tied embeddings counted once) must equal `n_params`.
"""
import json

import pytest

from inferlab.core.specs import from_hf_config, get_model, resolve_model

pytestmark = pytest.mark.core

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

BASE = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=128, head_dim=24, max_position_embeddings=256)
MLA = dict(kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=12, n_group=1, topk_group=1)
FAMILIES = {
    "llama": {}, "llama-bias": dict(attention_bias=True), "llama-mlpbias": dict(mlp_bias=True),
    "mistral": dict(sliding_window=32), "phi3": dict(sliding_window=32, pad_token_id=0),
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
    # transformers fills a Llama config's missing hidden_size with its default; a type it does not know
    # (kimi_k2) is read as written, and a field missing there is named
    (dict(model_type="kimi_k2", hidden_size=None), "missing field 'hidden_size'"),
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
# DeepSeek-V2-Lite: "15.7B total, 2.4B activated" (model card; the activated count leaves out the embeddings)


def test_shipped_configs_match_published_counts():
    from inferlab.core.specs import data_dir
    for name, published in SHIPPED.items():
        assert from_hf_config(data_dir() / "hf-configs" / name).n_params == published, name
    ds = from_hf_config(data_dir() / "hf-configs" / "deepseek-v3")
    assert 670e9 < ds.n_params < 672e9 and 37e9 < ds.n_params_active < 38e9   # "671B, 37B activated"


def _estimate(capsys, *argv):
    from inferlab.cli import main
    rc = main(["estimate", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("key", list(FAMILIES))
def test_estimate_json_takes_a_config_path(tmp_path, capsys, key):
    _write(tmp_path, key)
    rc, out, err = _estimate(capsys, "--model", str(tmp_path), "--gpu", "h100-sxm", "--prompt", "64", "--json")
    assert rc == 0, err
    got = json.loads(out)
    model = from_hf_config(tmp_path)
    assert got["params_total"] == model.n_params and got["params_active"] == model.n_params_active
    assert got["fits"] is True and got["itl_s"] > 0


def test_mixtral_on_h200_itl_between_active_and_all_expert_reads(capsys):
    """B = 1 reads the 2 active experts of 8 (about 12.9e9 parameters); B = 256 touches all 8 in every
    layer (8 (1 - (6/8)^256) = 8.000), so its step reads at least every weight (46.7e9 parameters)."""
    from inferlab.core.specs import data_dir
    path = str(data_dir() / "hf-configs" / "mixtral-8x7b-v0.1")
    bw = 4.8e12   # H200 HBM3e, bytes/s (data/accelerators.toml)
    # Active parameters by hand: 32 layers x (attention 2 x 4096 x 4096 + 2 x 4096 x 1024, router 4096 x 8,
    # 2 experts of 3 x 4096 x 14336, 2 norms of 4096) + embedding and head 2 x 32000 x 4096 + final norm.
    active = 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 4096 * 8 + 2 * 3 * 4096 * 14336 + 2 * 4096) + 2 * 32000 * 4096 + 4096
    total = active + 32 * 6 * 3 * 4096 * 14336
    rc, out, _ = _estimate(capsys, "--model", path, "--gpu", "h200", "--batch", "1", "--prompt", "1024", "--json")
    one = json.loads(out)
    assert one["params_active"] == active and one["params_total"] == total
    assert one["itl_s"] == pytest.approx(2 * active / bw, rel=0.03)     # near the active-expert read
    rc, out, _ = _estimate(capsys, "--model", path, "--gpu", "h200", "--batch", "256", "--prompt", "1024", "--json")
    assert json.loads(out)["itl_s"] >= 2 * total / bw * 0.99            # at least the all-expert read


def test_estimate_bad_config_is_one_line(tmp_path, capsys):
    rc, out, err = _estimate(capsys, "--model", str(_json(tmp_path, **{**LLAMA, "model_type": "bert"})), "--json")
    assert rc == 2 and err.count("\n") == 1 and "model_type 'bert' is not supported" in err and "Traceback" not in err


def test_fp8_weights_activations_and_kv(capsys):
    """FP8 where the accelerator has an FP8 peak (H100, H200, B200, MI300X; data/accelerators.toml cites the
    datasheets): one byte per weight and per cached element, prefill at the FP8 peak; an A100 has none."""
    from inferlab.core.specs import data_dir
    path = str(data_dir() / "hf-configs" / "mixtral-8x7b-v0.1")
    fp8 = ["--weights-dtype", "fp8", "--activations-dtype", "fp8", "--kv-dtype", "fp8"]
    for gpu in ("h100-sxm", "h200", "b200", "mi300x"):
        rc, out, err = _estimate(capsys, "--model", path, "--gpu", gpu, "--prompt", "4096", *fp8, "--json")
        got = json.loads(out)
        assert got["weights_bytes"] == 46_702_792_704                     # 1 byte per parameter
        assert got["kv_cache_bytes_per_sequence"] == 4096 * 32 * 2 * 8 * 128  # K and V, 8 heads x 128, 1 byte
    # Prefill on the H100 is compute-bound at the FP8 peak, 1,978.9 TFLOP/s: at least 2 x active x S / peak.
    rc, out, _ = _estimate(capsys, "--model", path, "--gpu", "h100-sxm", "--prompt", "4096", *fp8, "--json")
    active = json.loads(out)["params_active"]
    assert json.loads(out)["ttft_s"] >= 2 * (active - 32000 * 4096) * 4096 / 1978.9e12
    rc, out, err = _estimate(capsys, "--model", path, "--gpu", "a100-80gb", *fp8, "--json")
    # One line naming the option (issue 61): FP8 compute on a GPU without FP8 tensor cores.
    assert rc == 2 and "--activations-dtype fp8: the a100-80gb has no FP8 tensor cores" in err and err.count("\n") == 1


def test_what_if_takes_a_config_path(monkeypatch):
    from inferlab.notebook import reader
    from inferlab.core.specs import data_dir
    path = str(data_dir() / "hf-configs" / "deepseek-v3")
    monkeypatch.setenv(reader.WHATIF_ENV, f"{path}@h200")
    model, acc, _ = reader.what_if("llama-2-13b-book", "h100-sxm")
    assert model.is_mla and model.n_experts == 256 and acc.name == "h200"


def test_deepseek_v2_lite_published_counts():
    from inferlab.core.specs import data_dir
    m = from_hf_config(data_dir() / "hf-configs" / "deepseek-v2-lite")
    assert round(m.n_params / 1e9, 1) == 15.7
    assert round((m.n_params_active - m.embedding_params) / 1e9, 1) == 2.2 or \
        round((m.n_params_active - m.vocab_size * m.d_model) / 1e9, 1) == 2.4

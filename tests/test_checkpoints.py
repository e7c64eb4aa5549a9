"""Checkpoints as they are published: quantized weights by hand, configs as transformers reads them,
RoPE-scaled context limits, what is counted, and an exit status a script can trust.

Every expected byte count below is worked out in the comment beside it from the format's definition
(values x bits / 8, plus the scales the format stores), never read back from the library.
"""
import json
import math

import pytest

from inferlab.core.memory import weight_bytes
from inferlab.core.quantization import weight_bytes_by_format
from inferlab.core.specs import Precision, data_dir, from_hf_config

pytestmark = pytest.mark.core

GiB = 2 ** 30
SHIPPED = data_dir() / "hf-configs"

# A small Llama: d 256, f 384, 2 layers, 4 heads of 64, 2 KV heads, vocabulary 1000, no tied head.
TINY = dict(model_type="llama", hidden_size=256, intermediate_size=384, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=64, vocab_size=1000, max_position_embeddings=512, torch_dtype="bfloat16")
# Its matrices per layer (out x in): q 256x256, k 128x256, v 128x256, o 256x256, gate 384x256, up 384x256,
# down 256x384; 2 layers. Outside them: embedding and head 2 x 1000 x 256 = 512,000 parameters in bf16
# (1,024,000 bytes) and the norms (2 per layer + the final one) 5 x 256 = 1,280 parameters (2,560 bytes).
MATRICES = [(256, 256), (128, 256), (128, 256), (256, 256), (384, 256), (384, 256), (256, 384)]
PLAIN_BYTES = 1_024_000 + 2_560


def _checkpoint(tmp_path, quantization_config, **extra):
    (tmp_path / "config.json").write_text(json.dumps({**TINY, **extra, "quantization_config": quantization_config}))
    model = from_hf_config(tmp_path)
    q = model.quantization
    return model, Precision(weights=q.fmt, checkpoint=q)


def _by_hand(per_matrix):
    """2 layers x the matrices' bytes (per_matrix(out, in)) + the bf16 embedding, head and norms."""
    return 2 * sum(per_matrix(o, i) for o, i in MATRICES) + PLAIN_BYTES


def test_fp8_block_scales_by_hand(tmp_path):
    """DeepSeek-V3's format: one byte a value, one FP32 scale per 128 x 128 block (ceil on each side).
    q 256x256: 65,536 + 2x2x4 = 65,552; k, v 128x256: 32,768 + 1x2x4 = 32,776; o 65,552;
    gate, up 384x256: 98,304 + 3x2x4 = 98,328; down 256x384: 98,304 + 2x3x4 = 98,328.
    A layer 2 x 65,552 + 2 x 32,776 + 3 x 98,328 = 491,640; two layers 983,280; + 1,026,560 = 2,009,840."""
    model, prec = _checkpoint(tmp_path, {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                         "weight_block_size": [128, 128]})
    assert weight_bytes(model, prec) == 2_009_840
    assert _by_hand(lambda o, i: o * i + math.ceil(o / 128) * math.ceil(i / 128) * 4) == 2_009_840
    assert prec.checkpoint.activations == "fp8"          # dynamic activation scheme: W8A8


def test_fp8_per_tensor_compressed_tensors_by_hand(tmp_path):
    """compressed-tensors FP8 per tensor with static input scales: a byte a value + two FP32 scales a
    matrix (weight and input); lm_head ignored stays bf16. Values 2 x (2 x 65,536 + 2 x 32,768 + 3 x 98,304)
    = 983,040; scales 2 x 7 x 8 = 112; + 1,026,560 = 2,009,712."""
    qc = {"quant_method": "compressed-tensors", "format": "float-quantized", "ignore": ["lm_head"],
          "config_groups": {"group_0": {"targets": ["Linear"],
                                        "weights": {"num_bits": 8, "type": "float", "strategy": "tensor"},
                                        "input_activations": {"num_bits": 8, "type": "float", "dynamic": False}}}}
    model, prec = _checkpoint(tmp_path, qc)
    assert weight_bytes(model, prec) == 2_009_712


def test_fp8_per_channel_fbgemm_by_hand(tmp_path):
    """FBGEMM FP8 (Llama-4-Maverick-FP8's method): a byte a value + one FP32 scale per output row.
    Scales a layer 4 x (256 + 128 + 128 + 256 + 384 + 384 + 256) = 4 x 1,792 = 7,168; values 491,520 a layer.
    Two layers 2 x 498,688 = 997,376; + 1,026,560 = 2,023,936. The second layer's attention is left out
    (modules_to_not_convert names it): its q, k, v, o stay bf16, 2 x 196,608 = 393,216 bytes instead of
    196,608 + 4 x 768 = 199,680: 2,023,936 + 393,216 - 199,680 = 2,217,472."""
    qc = {"quant_method": "fbgemm_fp8", "modules_to_not_convert": ["model.layers.1.self_attn", "lm_head"]}
    model, prec = _checkpoint(tmp_path, qc)
    assert weight_bytes(model, prec) == 2_217_472


def test_mxfp4_by_hand(tmp_path):
    """MXFP4 (OCP MX): half a byte a value + one E8M0 byte per 32 values along the input.
    in 256: 8 scales a row; in 384: 12. q 256x256: 32,768 + 2,048; k, v: 16,384 + 1,024; o: 34,816;
    gate, up: 49,152 + 3,072 = 52,224; down: 49,152 + 256 x 12 = 52,224. A layer 2 x 34,816 + 2 x 17,408
    + 3 x 52,224 = 261,120 = 4.25 bits x 491,520 values; two 522,240; + 1,026,560 = 1,548,800."""
    model, prec = _checkpoint(tmp_path, {"quant_method": "mxfp4", "modules_to_not_convert": ["lm_head"]})
    assert weight_bytes(model, prec) == 1_548_800
    assert 2 * 491_520 * 4.25 / 8 + PLAIN_BYTES == 1_548_800   # the per-value figure of units.DTYPES agrees


def test_nvfp4_by_hand(tmp_path):
    """NVFP4: half a byte a value + one E4M3 byte per 16 values + FP32 global scales (weight and input).
    A layer's values 491,520 x 0.5 = 245,760, block scales 491,520 / 16 = 30,720, global 7 x 8 = 56:
    276,536; two layers 553,072; + 1,026,560 = 1,579,632."""
    qc = {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized", "ignore": ["lm_head"],
          "config_groups": {"group_0": {"targets": ["Linear"],
                                        "weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16},
                                        "input_activations": {"num_bits": 4, "type": "float", "strategy": "tensor_group",
                                                              "group_size": 16, "dynamic": "local"}}}}
    model, prec = _checkpoint(tmp_path, qc)
    assert weight_bytes(model, prec) == 1_579_632
    assert prec.checkpoint.activations == "nvfp4"


@pytest.mark.parametrize("method, extra_per_matrix", [
    # AWQ: per 128 input values a fp16 scale and a 4-bit zero point (2.5 bytes), no group index
    ("awq", lambda o, i: o * math.ceil(i / 128) * 2.5),
    # GPTQ: the same, plus its int32 group index per input column (4 bytes x in)
    ("gptq", lambda o, i: o * math.ceil(i / 128) * 2.5 + 4 * i),
])
def test_int4_groups_by_hand(tmp_path, method, extra_per_matrix):
    """Half a byte a value + per-group scales and zeros. AWQ: a layer 245,760 + 2.5 x (2 x 512 + 2 x 256 +
    2 x 768 + 768) = 245,760 + 9,600 = 255,360; two 510,720; total 1,537,280. GPTQ adds 4 x (4 x 256 + 2 x 256
    + 384) = 7,680 a layer: 1,552,640."""
    qc = {"quant_method": method, "bits": 4, "group_size": 128, "zero_point": True}
    model, prec = _checkpoint(tmp_path, qc)
    expected = {"awq": 1_537_280, "gptq": 1_552_640}[method]
    assert weight_bytes(model, prec) == expected == _by_hand(lambda o, i: o * i / 2 + extra_per_matrix(o, i))


def test_gpt_oss_checkpoints_match_their_published_sizes(capsys):
    """gpt-oss: only the experts are MXFP4 (attention, router, embedding and head stay bf16). 120b by hand:
    experts 36 layers x 128 x 3 matrices of 2880 x 2880, each 2880 x 2880 / 2 + 2880 x 90 scale bytes =
    4,406,400 bytes; everything else 2 bytes a parameter. Published checkpoints: 60.8 GiB and 12.8 GiB
    (model cards); within 3 %. And 120b fits one 80 GB H100 with room for a KV cache."""
    expert_matrix = 2880 * 2880 // 2 + 2880 * (2880 // 32)
    attention = 4096 * 2880 * 2 + 512 * 2880 * 2 + (4096 + 512 + 512 + 2880) + 64   # q, o, k, v, biases, sinks
    for name, layers, experts, published_gib in (("gpt-oss-120b", 36, 128, 60.8), ("gpt-oss-20b", 24, 32, 12.8)):
        model = from_hf_config(SHIPPED / name)
        prec = Precision(weights="mxfp4", checkpoint=model.quantization)
        # per layer: attention, router (E x 2880 + E bias), expert biases E x (2 x 2880 + 2880), two norms
        per_layer = attention + experts * 2880 + experts + experts * 3 * 2880 + 2 * 2880
        rest = layers * per_layer + 2 * 201088 * 2880 + 2880                 # + embedding, head, final norm
        by_hand = layers * experts * 3 * expert_matrix + 2 * rest
        assert weight_bytes(model, prec) == by_hand, name
        assert abs(by_hand / GiB / published_gib - 1) < 0.03, (name, by_hand / GiB)
    from inferlab.cli import main
    rc = main(["estimate", "--model", "gpt-oss-120b", "--gpu", "h100-sxm", "--prompt", "8192", "--json"])
    got = json.loads(capsys.readouterr().out)
    assert rc == 0 and got["fits"] is True and got["max_batch"] >= 8 and got["per_device"]["free_bytes"] > 10e9
    assert got["weights"]["compute_dtype"] == "bf16" and "weight-only" in got["weights"]["stored_as"]


def test_gpt_oss_int4_override_is_said(capsys):
    """--weights-dtype overrides the checkpoint: every parameter at that format, and the output says so."""
    from inferlab.cli import main
    rc = main(["estimate", "--model", "gpt-oss-20b", "--weights-dtype", "bf16", "--json"])
    got = json.loads(capsys.readouterr().out)
    assert rc == 0 and got["weights_bytes"] == 2 * got["params_total"] and got["weights"]["overrides_checkpoint"]
    assert "overrides the checkpoint's mxfp4 (experts" in got["weights"]["stored_as"]


def test_deepseek_v3_fp8_near_one_byte_a_parameter(capsys):
    """DeepSeek-V3's FP8 release: the linear layers one byte a value plus an FP32 scale per 128 x 128
    block (4 / 16,384 bytes a value); embedding and head (2 x 129,280 x 7,168) and the norms bf16.
    The multi-token-prediction layer is not counted and is named: one MoE layer (MLA attention 187,107,328,
    two norms 14,336, router 7,168 x 256, 256 experts and 1 shared of 3 x 7,168 x 2,048) + eh_proj
    2 x 7,168^2 + three norms = 11,610,067,968 parameters."""
    model = from_hf_config(SHIPPED / "deepseek-v3")
    prec = Precision(weights="fp8", checkpoint=model.quantization)
    formats = weight_bytes_by_format(model, prec)
    # bf16: embedding and head 2 x 129,280 x 7,168; the routers of the 58 MoE layers 58 x 256 x 7,168; the
    # norms 61 x (2 x 7,168 + the q and kv latents' 1,536 + 512) + the final 7,168. Two bytes each.
    head, routers, norms = 2 * 129_280 * 7_168, 58 * 256 * 7_168, 61 * (2 * 7_168 + 1_536 + 512) + 7_168
    assert formats["bf16"] == 2 * (head + routers + norms) == 3_921_590_272
    fp8_params = model.n_params - formats["bf16"] / 2
    assert fp8_params < formats["fp8"] < fp8_params * (1 + 4 / 16_384) * 1.01   # scales: about 0.024 %
    assert 1.0 < weight_bytes(model, prec) / model.n_params < 1.01
    mla = 7168 * 1536 + 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 + 512 * 128 * 256 + 128 * 128 * 7168
    moe = 7168 * 256 + 256 * 3 * 7168 * 2048 + 3 * 7168 * 2048
    assert mla == 187_107_328
    assert model.not_counted == (("multi-token prediction layers (1)", mla + 2 * 7168 + moe + 2 * 7168 ** 2 + 3 * 7168),)
    from inferlab.cli import main
    main(["estimate", "--model", "deepseek-v3", "--gpu", "h200", "--tp", "8"])
    out = capsys.readouterr().out
    assert "not counted: multi-token prediction layers (1) (11,610,067,968 parameters)" in out


def _meta_count(model_cls, config) -> int:
    torch = pytest.importorskip("torch")
    with torch.device("meta"):
        model = model_cls(config)
    return sum(p.numel() for p in model.parameters())


def test_gemma3_27b_as_published(capsys):
    """Google's config leaves vocab_size, max_position_embeddings and sliding_window_pattern out of
    text_config: transformers' Gemma3TextConfig supplies them (262,208, 131,072, every sixth layer full).
    The text model's count equals transformers' own; the SigLIP tower and projector are named, not counted,
    and their count equals transformers' (full model - text model)."""
    transformers = pytest.importorskip("transformers")
    model = from_hf_config(SHIPPED / "gemma-3-27b-it")
    cfg = transformers.AutoConfig.from_pretrained(SHIPPED / "gemma-3-27b-it")
    text = _meta_count(transformers.Gemma3ForCausalLM, cfg.text_config)
    assert model.n_params == text and model.vocab_size == 262_208
    full = _meta_count(transformers.Gemma3ForConditionalGeneration, cfg)
    assert model.not_counted == (("vision tower and projector", full - text),)
    assert model.max_context_tokens == 131_072 and "Gemma3Config" in model.max_context_source
    assert model.layer_kinds[:6] == ("sliding",) * 5 + ("full",) and model.sliding_window == 1024
    from inferlab.cli import main
    rc = main(["estimate", "--model", "gemma-3-27b-it", "--prompt", "200000", "--json"])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and "131072 tokens" in err and "absent from" in err


@pytest.mark.parametrize("name, cls, published", [
    ("phi-3-mini-4k-instruct", "Phi3ForCausalLM", 3.8e9),   # model card: 3.8B parameters
    ("phi-4", "Phi3ForCausalLM", 14.7e9),                   # model card: 14B (safetensors: 14.7B)
    ("qwen3-8b", "Qwen3ForCausalLM", 8.2e9),               # model card: 8.2B
])
def test_published_dense_counts(name, cls, published):
    transformers = pytest.importorskip("transformers")
    model = from_hf_config(SHIPPED / name)
    cfg = transformers.AutoConfig.from_pretrained(SHIPPED / name)
    assert model.n_params == _meta_count(getattr(transformers, cls), cfg)
    assert round(model.n_params / 1e8) == round(published / 1e8)


def test_phi3_window_clamped_to_the_context(tmp_path):
    """Phi-3-mini-128k's sliding_window (262,144) exceeds its context (131,072): full attention, accepted."""
    raw = json.loads((SHIPPED / "phi-3-mini-4k-instruct" / "config.json").read_text())
    raw.update(sliding_window=262144, max_position_embeddings=131072)
    (tmp_path / "config.json").write_text(json.dumps(raw))
    assert from_hf_config(tmp_path).layer_kinds == ("full",) * 32
    assert from_hf_config(SHIPPED / "phi-3-mini-4k-instruct").sliding_window == 2047


def test_kimi_k2_is_deepseek_v3():
    """Model card: 1T total, 32B activated parameters (activated without the input embedding)."""
    model = from_hf_config(SHIPPED / "kimi-k2-instruct")
    assert model.is_mla and model.n_experts == 384 and model.family == "deepseek_v3"
    assert round(model.n_params / 1e12) == 1
    assert round((model.n_params_active - 163_840 * 7_168) / 1e9) == 32
    assert "inferlab's reader" in model.config_reader


def test_qwen3_8b_yarn_takes_a_100k_prompt(tmp_path, capsys):
    """Qwen3-8B's model card: rope_scaling yarn, factor 4.0, original_max_position_embeddings 32,768 for
    131,072 tokens (4 x 32,768). Without it the limit is max_position_embeddings 40,960, and the refusal
    names config.json's field, not data/models.toml."""
    from inferlab.cli import main
    raw = json.loads((SHIPPED / "qwen3-8b" / "config.json").read_text())
    raw["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    (tmp_path / "config.json").write_text(json.dumps(raw))
    assert from_hf_config(tmp_path).max_context_tokens == 4 * 32768
    rc = main(["estimate", "--model", str(tmp_path), "--prompt", "100000", "--json"])
    out, err = capsys.readouterr()
    assert rc == 0 and json.loads(out)["max_context_tokens"] == 131_072
    assert "RoPE yarn factor 4" in json.loads(out)["max_context_source"]
    rc = main(["estimate", "--model", "qwen3-8b", "--prompt", "100000", "--json"])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and "max_position_embeddings of" in err and "data/models.toml" not in err


def test_estimate_json_exit_status(tmp_path, capsys):
    """0 whenever it answered, fits true or false; 2 with nothing on stdout for a refused config."""
    from inferlab.cli import main
    rc = main(["estimate", "--model", "llama-2-70b", "--gpu", "l4", "--json"])
    out, err = capsys.readouterr()
    assert rc == 0 and json.loads(out)["fits"] is False and "does not fit" in err
    (tmp_path / "config.json").write_text(json.dumps({**TINY, "model_type": "bert"}))
    rc = main(["estimate", "--model", str(tmp_path), "--json"])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and err.count("\n") == 1 and "model_type 'bert' is not supported" in err


def test_counts_a_publisher_quotes(capsys):
    """gpt-oss-20b: OpenAI quotes 3.6B active; with the input embedding (201,088 x 2,880) it is 4.19B."""
    from inferlab.cli import main
    main(["estimate", "--model", "gpt-oss-20b", "--json"])
    got = json.loads(capsys.readouterr().out)
    assert got["params_active_with_input_embedding"] - got["params_active_without_input_embedding"] == 201_088 * 2_880
    assert round(got["params_active_without_input_embedding"] / 1e8) == 36
    assert got["not_counted"] == [] and sum(got["weights_bytes_by_format"].values()) == got["weights_bytes"]


def test_a_different_architecture_is_refused_in_one_line(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({**TINY, "model_type": "qwen3_next"}))
    with pytest.raises(ValueError) as e:
        from_hf_config(tmp_path)
    assert "linear-attention" in str(e.value) and "\n" not in str(e.value)


def test_unsupported_quantization_is_refused(tmp_path):
    with pytest.raises(ValueError, match="quant_method 'bitsandbytes' is not supported"):
        _checkpoint(tmp_path, {"quant_method": "bitsandbytes", "load_in_4bit": True})

"""The ModelConfig fields of a Hugging Face `config.json` on disk (never the hub).

`hf_fields(path)` reads `path` (a config.json, or a folder holding one) the way transformers reads
it: where transformers is installed and knows the `model_type`, its own config class fills the
defaults a published config leaves out (Gemma-3's `vocab_size`), nests `text_config`, and renames
fields (`rope_scaling` -> `rope_parameters`); otherwise inferlab's own reader takes the file as
written. `config_reader` says which. The fields are then mapped onto `specs.ModelConfig`'s for the
families FAMILIES lists (aliases: `kimi_k2` is DeepSeek-V3; `phi3` is Llama with fused projections).
The context limit follows the RoPE scaling (`context_limit`), the checkpoint's `quantization_config`
becomes a `quantization.Quantization` (`checkpoint_quantization`), and the parts of the checkpoint
the counts leave out (vision and audio towers, multi-token-prediction layers) are named. An unknown
or different architecture, a missing field, a size <= 0 or a window longer than the context is one
ValueError naming it.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from inferlab.core.quantization import LINEAR_PARTS, Quantization

FAMILIES = ("llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "gemma2", "gemma3_text",
            "gemma3", "deepseek_v2", "deepseek_v3", "gpt_oss", "llama4_text", "llama4", "glm4_moe", "phi3", "kimi_k2")
# the same architecture under another name: read as the family it is
ALIASES = {"kimi_k2": "deepseek_v3"}
# architectures whose layers are not attention with a KV cache: refused, naming what is missing
DIFFERENT = {"qwen3_next": "linear-attention (Gated DeltaNet) layers", "mamba": "state-space layers",
             "mamba2": "state-space layers", "jamba": "state-space (Mamba) layers", "bamba": "state-space layers",
             "falcon_h1": "state-space layers", "nemotron_h": "state-space layers", "zamba2": "state-space layers",
             "granitemoehybrid": "state-space layers", "lfm2": "short-convolution layers", "rwkv": "recurrent (RWKV) layers",
             "minimax": "linear-attention layers", "recurrent_gemma": "recurrent layers"}
# model_types whose text model sits in `text_config` (multimodal wrappers: only the text decoder is read)
_TEXT_WRAPPERS = {"gemma3": "gemma3_text", "llama4": "llama4_text"}
_TIED_DEFAULT = {"gemma2": True, "gemma3_text": True}
_LAYER_TYPE = {"full_attention": "full", "sliding_attention": "sliding", "chunked_attention": "chunked"}
# RoPE scalings whose context is factor x the original length (where the config gives that length)
_SCALED_ROPE = ("yarn", "linear", "dynamic", "llama3")


def _read(path) -> tuple[dict, str]:
    if not isinstance(path, (str, Path)) or not str(path).strip():
        raise ValueError(f"path must be a Hugging Face config.json or a folder holding one; got {path!r}")
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    if not p.is_file():
        raise ValueError(f"path {str(path)!r}: no config.json there; it must be a Hugging Face config.json "
                         "or a folder holding one")
    try:
        raw = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{p}: not JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{p}: a config.json holds one JSON object; got {type(raw).__name__}")
    return raw, str(p)


def _need(cfg: dict, key: str, where: str):
    if cfg.get(key) is None:
        raise ValueError(f"{where}: missing field {key!r} (needed for model_type {cfg.get('model_type')!r})")
    return cfg[key]


def _size(cfg: dict, key: str, where: str, default=None):
    value = cfg.get(key, default) if default is not None else _need(cfg, key, where)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{where}: {key} must be a positive integer; got {value!r}")
    return value


def _any(cfg: dict, keys: tuple, where: str):
    """The first of `keys` the config has (the same field under different names across versions)."""
    for key in keys:
        if cfg.get(key) is not None:
            return _size(cfg, key, where)
    return _size(cfg, keys[0], where)


def _transformers_view(raw: dict, where: str) -> tuple[dict, str]:
    """(the config as transformers' config class holds it, defaults filled, as a dict; which reader).
    inferlab's own reader (the file as written) where transformers is absent or does not know the type."""
    model_type = raw.get("model_type")
    try:
        import transformers
        from transformers import CONFIG_MAPPING
    except ImportError:
        return raw, "inferlab's reader (transformers is not installed)"
    if model_type not in CONFIG_MAPPING:
        return raw, f"inferlab's reader (transformers {transformers.__version__} does not know model_type {model_type!r})"
    cls = CONFIG_MAPPING[model_type]
    quiet = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()   # its advice on RoPE fields is not ours to print
    try:
        view = cls.from_dict(json.loads(json.dumps(raw))).to_dict()
    except Exception as err:   # transformers' own validation: one line, naming the class
        text = " ".join(str(err).split())[:300]
        raise ValueError(f"{where}: transformers' {cls.__name__} refuses it: {text}") from None
    finally:
        transformers.logging.set_verbosity(quiet)
    return view, f"transformers {transformers.__version__} {cls.__name__}"


def _layer_types(cfg: dict, family: str, n_layers: int, context) -> tuple:
    """Per-layer attention, from `layer_types` where the config lists it, else the family's rule."""
    if cfg.get("layer_types"):
        types = tuple(_LAYER_TYPE.get(t, t) for t in cfg["layer_types"])
        return types if any(t != "full" for t in types) else ()
    window = cfg.get("sliding_window")
    if family in ("mistral", "mixtral") and window:
        return ("sliding",) * n_layers
    if family == "phi3" and window and (context is None or window < context):
        return ("sliding",) * n_layers     # a window as long as the context is full attention
    if family == "gemma2":   # sliding on even layers (0, 2, ...), as transformers does
        return tuple("sliding" if (i + 1) % 2 else "full" for i in range(n_layers))
    if family == "gemma3_text":
        pattern = cfg.get("sliding_window_pattern", 6)
        return tuple("full" if (i + 1) % pattern == 0 else "sliding" for i in range(n_layers))
    if family in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe") and cfg.get("use_sliding_window") and window:
        first = cfg.get("max_window_layers", n_layers)
        return tuple("sliding" if i >= first else "full" for i in range(n_layers))
    if family == "llama4_text" and cfg.get("attention_chunk_size"):
        interval = cfg.get("no_rope_layer_interval", 4)
        return tuple("full" if (i + 1) % interval == 0 else "chunked" for i in range(n_layers))
    return ()


def context_limit(cfg: dict, where: str) -> tuple:
    """(the longest context, where it came from). `max_position_embeddings`, or, where the RoPE
    scaling (`rope_parameters` / `rope_scaling`: yarn, linear, dynamic, llama3) gives an original
    length, factor x original_max_position_embeddings when that is longer: Qwen3-8B with YaRN
    factor 4 over 32,768 reaches 131,072 (its model card) beyond its 40,960."""
    mpe = cfg.get("max_position_embeddings")
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    if isinstance(rope, dict) and isinstance(rope.get("full_attention"), dict):
        rope = rope["full_attention"]   # per-layer-type parameters (Gemma-3): the full-attention layers'
    kind = (rope.get("rope_type") or rope.get("type")) if isinstance(rope, dict) else None
    factor = rope.get("factor") if isinstance(rope, dict) else None
    original = (rope.get("original_max_position_embeddings") if isinstance(rope, dict) else None) \
        or cfg.get("original_max_position_embeddings")
    if kind in _SCALED_ROPE and isinstance(factor, (int, float)) and factor > 0 and isinstance(original, int):
        scaled = int(factor * original)
        if mpe is None or scaled > mpe:
            return scaled, (f"RoPE {kind} factor {factor:g} x original_max_position_embeddings {original:,} "
                            f"in {where}")
    return mpe, (f"max_position_embeddings of {where}" if mpe else "")


# -- the checkpoint's quantization_config --------------------------------------------------------------------

def _part_of(name: str) -> list:
    """The parts a module name of a not-converted / ignore list covers ([] for a vision module)."""
    n = name.removeprefix("re:").lower()
    if any(w in n for w in ("vision", "multi_modal", "mm_projector", "visual", "audio")):
        return []
    if "embed" in n:
        return ["embedding"]
    if "lm_head" in n or "output_layer" in n:
        return ["lm_head"]
    if "router" in n or re.search(r"\.gate(\$|$|\.weight)", n) or n.endswith("gate"):
        return ["router"]
    if "shared_expert" in n:
        return ["shared"]
    if "experts" in n:
        return ["experts"]
    if "attn" in n or "attention" in n:
        return ["attention"]
    if "mlp" in n or "feed_forward" in n:
        return ["mlp", "experts", "shared", "router"]
    return []


def _excluded(names, where: str) -> tuple:
    """(part, layer) pairs (layer None: every layer) from a list of module names or patterns."""
    if names is None:
        return ()
    if not isinstance(names, (list, tuple)):
        raise ValueError(f"{where}: quantization_config's module list must be a list of names; got {names!r}")
    out = []
    for name in names:
        m = re.search(r"layers\.(\d+)\.", str(name))
        layer = int(m.group(1)) if m else None
        out += [(part, layer) for part in _part_of(str(name))]
    return tuple(out)


def checkpoint_quantization(qc, unquantized: str, where: str):
    """The `Quantization` a `quantization_config` describes (None where there is none). Methods: fp8
    (block-wise with `weight_block_size`, else per tensor), fbgemm_fp8 (per channel), compressed-tensors
    (FP8 per tensor / channel / block, NVFP4, int4 groups), modelopt (FP8, NVFP4), mxfp4, awq and gptq
    (int4 groups with zero points). Another method is one ValueError naming the allowed ones."""
    if not qc:
        return None
    if not isinstance(qc, dict):
        raise ValueError(f"{where}: quantization_config must be an object; got {qc!r}")
    method = str(qc.get("quant_method", "")).lower()
    src = f"quantization_config of {where}: quant_method {method}"
    common = dict(unquantized=unquantized, source=src)
    if method == "fp8":
        block = qc.get("weight_block_size")
        static = qc.get("activation_scheme") == "static"
        skip = _excluded(qc.get("modules_to_not_convert"), where)
        if block:
            if not (isinstance(block, (list, tuple)) and len(block) == 2 and all(isinstance(b, int) and b > 0 for b in block)):
                raise ValueError(f"{where}: weight_block_size must be two positive integers; got {block!r}")
            return Quantization("fp8-block", "fp8", 8, scale_bytes=4, block=tuple(block), activations="fp8",
                                tensor_scales=1 if static else 0, excluded=skip, **common)
        return Quantization("fp8-tensor", "fp8", 8, tensor_scales=2 if static else 1, activations="fp8",
                            excluded=skip, **common)
    if method == "fbgemm_fp8":
        return Quantization("fp8-channel", "fp8", 8, scale_bytes=4, per_channel=True, activations="fp8",
                            excluded=_excluded(qc.get("modules_to_not_convert"), where), **common)
    if method == "mxfp4":
        return Quantization("mxfp4", "mxfp4", 4, scale_bytes=1, group=32,
                            excluded=_excluded(qc.get("modules_to_not_convert"), where), **common)
    if method in ("awq", "gptq"):
        bits, group = qc.get("bits", qc.get("w_bit", 4)), qc.get("group_size", qc.get("q_group_size", 128))
        if bits != 4:
            raise ValueError(f"{where}: {method} with bits={bits!r} is not supported; allowed: bits 4")
        parts = LINEAR_PARTS | ({"lm_head"} if qc.get("lm_head") else set())
        per_channel = not isinstance(group, int) or group <= 0
        return Quantization(method, "int4", 4, scale_bytes=2, group=0 if per_channel else group, per_channel=per_channel,
                            zero_points=method == "gptq" or bool(qc.get("zero_point", True)),
                            group_index=method == "gptq", parts=parts,
                            excluded=_excluded(qc.get("modules_to_not_convert"), where), **common)
    if method == "modelopt":
        algo = str(qc.get("quant_algo", "")).upper()
        skip = _excluded(qc.get("exclude_modules") or qc.get("ignore"), where)
        if algo == "NVFP4":
            return Quantization("nvfp4", "nvfp4", 4, scale_bytes=1, group=qc.get("group_size", 16), tensor_scales=2,
                                activations="nvfp4", excluded=skip, **common)
        if algo == "FP8":
            return Quantization("fp8-tensor", "fp8", 8, tensor_scales=2, activations="fp8", excluded=skip, **common)
        raise ValueError(f"{where}: modelopt quant_algo {algo!r} is not supported; allowed: FP8, NVFP4")
    if method == "compressed-tensors":
        return _compressed_tensors(qc, where, common)
    raise ValueError(f"{where}: quantization_config quant_method {method!r} is not supported; allowed: fp8, "
                     "fbgemm_fp8, compressed-tensors, modelopt, mxfp4, awq, gptq (or give --weights-dtype)")


def _compressed_tensors(qc: dict, where: str, common: dict) -> Quantization:
    groups = [g for g in (qc.get("config_groups") or {}).values() if isinstance(g, dict) and g.get("weights")]
    if len(groups) != 1:
        raise ValueError(f"{where}: compressed-tensors with {len(groups)} weight groups is not supported; allowed: one")
    w, a = groups[0]["weights"], groups[0].get("input_activations") or {}
    bits, kind, strategy = w.get("num_bits"), w.get("type", "int"), w.get("strategy", "tensor")
    ignore = list(qc.get("ignore") or [])
    parts = LINEAR_PARTS | ({"lm_head"} if not any("lm_head" in str(n) for n in ignore) else set())
    skip = tuple(p for p in _excluded(ignore, where) if p[0] != "lm_head")
    act = "fp8" if (a.get("num_bits") == 8 and a.get("type") == "float") else "bf16"
    base = dict(parts=parts, excluded=skip, **common)
    if bits == 8 and kind == "float":
        static = 1 if a and not a.get("dynamic", True) else 0
        if strategy == "block":
            block = tuple(w.get("block_structure") or (128, 128))
            return Quantization("fp8-block", "fp8", 8, scale_bytes=4, block=block, activations=act, tensor_scales=static, **base)
        if strategy == "channel":
            return Quantization("fp8-channel", "fp8", 8, scale_bytes=4, per_channel=True, activations=act,
                                tensor_scales=static, **base)
        return Quantization("fp8-tensor", "fp8", 8, tensor_scales=1 + static, activations=act, **base)
    if bits == 8 and kind == "int":
        return Quantization("int8-channel", "int8", 8, scale_bytes=4, per_channel=True, **base)
    if bits == 4 and kind == "float":   # NVFP4: 16 values per FP8 scale, one global FP32 scale (and one for the input)
        return Quantization("nvfp4", "nvfp4", 4, scale_bytes=1, group=w.get("group_size") or 16,
                            tensor_scales=2 if a else 1, activations="nvfp4" if a.get("num_bits") == 4 else "bf16", **base)
    if bits == 4 and kind == "int":
        group = w.get("group_size") or 0
        return Quantization("gptq", "int4", 4, scale_bytes=2, group=group if group > 0 else 0, per_channel=group <= 0,
                            zero_points=not w.get("symmetric", True), **base)
    raise ValueError(f"{where}: compressed-tensors weights of {bits!r} bits ({kind}) are not supported; allowed: "
                     "8-bit float or int, 4-bit float (NVFP4) or int")


# -- what the counts leave out --------------------------------------------------------------------------------

def _siglip_params(vc: dict, text_d: int) -> int | None:
    """A SigLIP vision tower and Gemma-3's projector: patch embedding (C p^2 d + d), positions
    ((image/p)^2 d), per layer 4 (d^2 + d) attention + (d f + f) + (f d + d) MLP + 2 LayerNorms (4 d),
    a final LayerNorm (2 d); the projector d x d_text and its RMSNorm d."""
    try:
        d, f, layers = vc["hidden_size"], vc["intermediate_size"], vc["num_hidden_layers"]
        p, image, channels = vc["patch_size"], vc["image_size"], vc.get("num_channels", 3)
    except (KeyError, TypeError):
        return None
    if vc.get("vision_use_head"):
        return None
    tower = channels * p * p * d + d + (image // p) ** 2 * d + layers * (4 * (d * d + d) + 2 * d * f + f + d + 4 * d) + 2 * d
    return tower + d * text_d + d


def _not_counted(raw: dict, view: dict, text_d: int) -> tuple:
    out = []
    vc = view.get("vision_config") or raw.get("vision_config")
    if vc:
        kind = vc.get("model_type", "") if isinstance(vc, dict) else ""
        params = _siglip_params(vc, text_d) if kind in ("siglip_vision_model", "siglip") else None
        out.append(("vision tower and projector", params))
    if view.get("audio_config") or raw.get("audio_config"):
        out.append(("audio tower", None))
    return tuple(out)


def hf_fields(path, name: str | None = None) -> dict:
    """The ModelConfig fields of the Hugging Face config at `path` (a config.json or a folder holding one).
    Families: FAMILIES (text decoders only). Biases, norms, sinks and tied embeddings follow each
    family's transformers implementation, so `n_params` equals transformers' parameter count.
    `_mtp_layers` (popped by `specs.from_hf_config`): the multi-token-prediction layers the
    checkpoint holds beside the counted ones."""
    raw, where = _read(path)
    family = raw.get("model_type")
    if family in DIFFERENT:
        raise ValueError(f"{where}: model_type {family!r} is not supported: its {DIFFERENT[family]} keep no "
                         "per-token KV cache inferlab can represent (only attention decoders are)")
    if family not in FAMILIES:
        raise ValueError(f"{where}: model_type {family!r} is not supported; allowed: {', '.join(FAMILIES)}")
    view, reader = _transformers_view(raw, where)
    family = ALIASES.get(family, family)
    cfg = view
    if family in _TEXT_WRAPPERS:
        cfg = dict(view.get("text_config") or {})
        if not cfg:
            raise ValueError(f"{where}: missing field 'text_config' (needed for model_type {family!r})")
        family = _TEXT_WRAPPERS[family]
        cfg.setdefault("model_type", family)
        if cfg.get("tie_word_embeddings") is None:
            cfg["tie_word_embeddings"] = view.get("tie_word_embeddings")
    d = _size(cfg, "hidden_size", where)
    n_layers = _size(cfg, "num_hidden_layers", where)
    n_heads = _size(cfg, "num_attention_heads", where)
    n_kv = _size(cfg, "num_key_value_heads", where, default=n_heads)
    head_dim = cfg.get("head_dim") or d // n_heads
    d_ff = _size(cfg, "intermediate_size", where)
    vocab = _size(cfg, "vocab_size", where)
    tied = cfg.get("tie_word_embeddings")
    tied = _TIED_DEFAULT.get(family, False) if tied is None else bool(tied)
    context, context_source = context_limit(cfg, where)
    written = raw.get("text_config", raw) if family in ("gemma3_text", "llama4_text") else raw
    if context and "max_position_embeddings" in context_source and "max_position_embeddings" not in (written or {}):
        context_source = f"max_position_embeddings {context:,}: the default of {reader} (absent from {where})"
    types = _layer_types(cfg, family, n_layers, context)
    bias = bool(cfg.get("attention_bias", False))
    dtype = str(raw.get("torch_dtype") or raw.get("dtype") or cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
    unquantized = {"float16": "fp16", "float32": "fp32"}.get(dtype, "bf16")
    qc = raw.get("quantization_config") or cfg.get("quantization_config")
    fields = dict(
        name=name or Path(where).parent.name or family, family=family, d_model=d, n_layers=n_layers,
        n_heads=n_heads, n_kv_heads=n_kv, head_dim=head_dim, d_ff=d_ff, gated_mlp=True, vocab_size=vocab,
        tied_embeddings=tied, max_context_tokens=context, max_context_source=context_source,
        layer_types=types,
        sliding_window=_size(cfg, "sliding_window", where) if "sliding" in types else None,
        attention_chunk=_size(cfg, "attention_chunk_size", where) if "chunked" in types else None,
        source=f"{where} (model_type {raw.get('model_type')}; read by {reader})", description=f"Read from {where}.",
        config_reader=reader, quantization=checkpoint_quantization(qc, unquantized, where),
        not_counted=_not_counted(raw, view, d))
    if family in ("llama", "qwen3", "qwen3_moe", "gpt_oss"):
        fields.update(attention_bias=bias, o_bias=bias)
    elif family in ("qwen2", "qwen2_moe"):
        fields.update(attention_bias=True)
    elif family == "glm4_moe":
        fields.update(attention_bias=bias, qk_norm=bool(cfg.get("use_qk_norm", False)))
    if family == "llama":
        fields.update(mlp_bias=bool(cfg.get("mlp_bias", False)))
    if family in ("qwen3", "qwen3_moe", "gemma3_text"):
        fields.update(qk_norm=True)
    if family in ("gemma2", "gemma3_text"):
        fields.update(norms_per_layer=4)
    if family == "gpt_oss":
        fields.update(attention_sinks=True, router_bias=True, expert_bias=True)
    experts = cfg.get("num_local_experts") or cfg.get("num_experts") or cfg.get("n_routed_experts")
    if family in ("mixtral", "gpt_oss", "llama4_text"):
        fields.update(n_experts=_any(cfg, ("num_local_experts", "num_experts"), where), expert_d_ff=d_ff,
                      experts_per_token=_any(cfg, ("num_experts_per_tok", "experts_per_token"), where))
    if family == "llama4_text":
        moe = cfg.get("moe_layers")
        if moe is None:
            step = cfg.get("interleave_moe_layer_step", 1)
            moe = list(range(step - 1, n_layers, step))
        fields.update(d_ff=_size(cfg, "intermediate_size_mlp", where), shared_d_ff=d_ff,
                      dense_layers=tuple(i for i in range(n_layers) if i not in set(moe)))
    if family in ("qwen2_moe", "qwen3_moe") and experts:
        step, only = cfg.get("decoder_sparse_step", 1) or 1, set(cfg.get("mlp_only_layers") or ())
        fields.update(n_experts=_any(cfg, ("num_experts", "num_local_experts"), where), experts_per_token=_size(cfg, "num_experts_per_tok", where),
                      expert_d_ff=_size(cfg, "moe_intermediate_size", where),
                      dense_layers=tuple(i for i in range(n_layers) if i in only or (i + 1) % step))
        if family == "qwen2_moe":
            fields.update(shared_d_ff=_size(cfg, "shared_expert_intermediate_size", where), shared_expert_gate=True)
    if family in ("deepseek_v2", "deepseek_v3", "glm4_moe"):
        first, freq = cfg.get("first_k_dense_replace", 0) or 0, cfg.get("moe_layer_freq", 1) or 1
        fe = _size(cfg, "moe_intermediate_size", where)
        fields.update(n_experts=_any(cfg, ("n_routed_experts", "num_local_experts"), where),
                      experts_per_token=_size(cfg, "num_experts_per_tok", where), expert_d_ff=fe,
                      shared_d_ff=fe * (cfg.get("n_shared_experts") or 0),
                      dense_layers=tuple(i for i in range(n_layers) if i < first or i % freq))
        fields["_mtp_layers"] = int(cfg.get("num_nextn_predict_layers") or 0)
    if family in ("deepseek_v2", "deepseek_v3"):
        q_rank = cfg.get("q_lora_rank")
        fields.update(n_kv_heads=n_heads, head_dim=_size(cfg, "qk_nope_head_dim", where),
                      kv_lora_rank=_size(cfg, "kv_lora_rank", where), q_lora_rank=q_rank or None,
                      qk_rope_head_dim=_size(cfg, "qk_rope_head_dim", where), v_head_dim=_size(cfg, "v_head_dim", where))
        if q_rank is not None:
            _size(cfg, "q_lora_rank", where)
    return fields

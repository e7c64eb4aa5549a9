"""The ModelConfig fields of a Hugging Face `config.json` on disk (never the hub).

`hf_fields(path)` reads `path` (a config.json, or a folder holding one) and maps its fields onto
`specs.ModelConfig`'s for the families FAMILIES lists (`specs.from_hf_config` builds the object). An unknown model_type, a missing field, a zero or
negative size or a window longer than the context is one ValueError naming it.
"""
from __future__ import annotations

import json
from pathlib import Path

FAMILIES = ("llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "gemma2", "gemma3_text",
            "gemma3", "deepseek_v2", "deepseek_v3", "gpt_oss", "llama4_text", "llama4", "glm4_moe")
# model_types whose text model sits in `text_config` (multimodal wrappers: only the text decoder is read)
_TEXT_WRAPPERS = {"gemma3": "gemma3_text", "llama4": "llama4_text"}
_TIED_DEFAULT = {"gemma2": True, "gemma3_text": True}
_LAYER_TYPE = {"full_attention": "full", "sliding_attention": "sliding", "chunked_attention": "chunked"}


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
        return json.loads(p.read_text()), str(p)
    except json.JSONDecodeError as e:
        raise ValueError(f"{p}: not JSON ({e.msg} at line {e.lineno})") from None


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


def _layer_types(cfg: dict, family: str, n_layers: int) -> tuple:
    """Per-layer attention, from `layer_types` where the config lists it, else the family's rule."""
    if cfg.get("layer_types"):
        types = tuple(_LAYER_TYPE.get(t, t) for t in cfg["layer_types"])
        return types if any(t != "full" for t in types) else ()
    window = cfg.get("sliding_window")
    if family in ("mistral", "mixtral") and window:
        return ("sliding",) * n_layers
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


def hf_fields(path, name: str | None = None) -> dict:
    """The ModelConfig fields of the Hugging Face config at `path` (a config.json or a folder holding one).
    Families: FAMILIES (text decoders only). Biases, norms, sinks and tied embeddings follow each
    family's transformers implementation, so `n_params` equals transformers' parameter count."""
    raw, where = _read(path)
    family = raw.get("model_type")
    if family not in FAMILIES:
        raise ValueError(f"{where}: model_type {family!r} is not supported; allowed: {', '.join(FAMILIES)}")
    cfg = raw
    if family in _TEXT_WRAPPERS:
        cfg = dict(raw.get("text_config") or {})
        if not cfg:
            raise ValueError(f"{where}: missing field 'text_config' (needed for model_type {family!r})")
        family = _TEXT_WRAPPERS[family]
        cfg.setdefault("model_type", family)
        cfg.setdefault("tie_word_embeddings", raw.get("tie_word_embeddings"))
    d = _size(cfg, "hidden_size", where)
    n_layers = _size(cfg, "num_hidden_layers", where)
    n_heads = _size(cfg, "num_attention_heads", where)
    n_kv = _size(cfg, "num_key_value_heads", where, default=n_heads)
    head_dim = cfg.get("head_dim") or d // n_heads
    d_ff = _size(cfg, "intermediate_size", where)
    vocab = _size(cfg, "vocab_size", where)
    tied = cfg.get("tie_word_embeddings")
    tied = _TIED_DEFAULT.get(family, False) if tied is None else bool(tied)
    context = cfg.get("max_position_embeddings")
    types = _layer_types(cfg, family, n_layers)
    bias = bool(cfg.get("attention_bias", False))
    fields = dict(
        name=name or Path(where).parent.name or family, family=family, d_model=d, n_layers=n_layers,
        n_heads=n_heads, n_kv_heads=n_kv, head_dim=head_dim, d_ff=d_ff, gated_mlp=True, vocab_size=vocab,
        tied_embeddings=tied, max_context_tokens=context,
        max_context_source=f"max_position_embeddings of {where}" if context else "",
        layer_types=types,
        sliding_window=_size(cfg, "sliding_window", where) if "sliding" in types else None,
        attention_chunk=_size(cfg, "attention_chunk_size", where) if "chunked" in types else None,
        source=f"{where} (model_type {raw.get('model_type')})", description=f"Read from {where}.")
    if family in ("llama", "qwen3", "qwen3_moe", "gpt_oss"):
        fields.update(attention_bias=bias, o_bias=bias)
    elif family in ("qwen2", "qwen2_moe"):
        fields.update(attention_bias=True)
    elif family == "glm4_moe":
        fields.update(attention_bias=bias, qk_norm=bool(cfg.get("use_qk_norm", False)))
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
    if family in ("deepseek_v2", "deepseek_v3"):
        q_rank = cfg.get("q_lora_rank")
        fields.update(n_kv_heads=n_heads, head_dim=_size(cfg, "qk_nope_head_dim", where),
                      kv_lora_rank=_size(cfg, "kv_lora_rank", where), q_lora_rank=q_rank or None,
                      qk_rope_head_dim=_size(cfg, "qk_rope_head_dim", where), v_head_dim=_size(cfg, "v_head_dim", where))
        if q_rank is not None:
            _size(cfg, "q_lora_rank", where)
    return fields

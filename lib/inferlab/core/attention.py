"""The one attention account: per layer and step, the query-key pairs scored, the K/V bytes read and
the cache bytes held, for full, sliding-window, chunked and latent (MLA) attention.

A block of q new tokens at positions p..p+q-1 (p already cached), causal:
- full: query i sees i+1 keys; pairs q p + q (q+1)/2; keys read p + q; held n = p + q.
- sliding window W: query i sees min(i+1, W) keys; keys read min(p+q, q+W-1); held min(n, W).
- chunked C: query i sees the keys of its own C-token chunk up to i, (i mod C) + 1; keys read
  p + q - C floor(p/C); held at most min(n, C).
Bytes per key per layer: 2 n_kv_heads head_dim (K and V); MLA keeps its latent and rope key once,
kv_lora_rank + qk_rope_head_dim, costed in the absorbed form (queries scored against the latent:
2 (r + h_r) FLOPs per pair and head for the scores, 2 r for the values; the latent read once).
`costs`, `memory`, the simulator's step time and KV pool, and the live loop all count with it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from inferlab.core.boundary import enters
from inferlab.core.specs import ModelConfig, Precision
from inferlab.base.units import bytes_per_element


@enters(model=ModelConfig)
def layer_groups(model: ModelConfig) -> dict:
    """{(kind, span): layers}: 'full' (span None), 'sliding' (the window) and 'chunked' (the chunk)."""
    out: dict = {}
    for kind in model.layer_kinds:
        span = model.sliding_window if kind == "sliding" else model.attention_chunk if kind == "chunked" else None
        out[(kind, span)] = out.get((kind, span), 0) + 1
    return out


def _seen(kind: str, span, n):
    """Pairs of a causal block from position 0 to n-1: sum of the keys each query sees."""
    n = np.asarray(n, dtype=float)
    if kind == "full":
        return n * (n + 1) / 2
    if kind == "sliding":
        w = float(span)
        return np.where(n <= w, n * (n + 1) / 2, w * (w + 1) / 2 + (n - w) * w)
    c = float(span)
    m, r = np.floor(n / c), n - c * np.floor(n / c)
    return m * c * (c + 1) / 2 + r * (r + 1) / 2


def causal_pairs(q_len, past_len):
    """Query-key pairs of full causal attention per head per sequence: q p + q (q + 1) / 2 (query i
    of the block sees the p cached keys and i + 1 new ones). Python numbers or numpy arrays alike:
    the simulator's step shapes call it on plain ints, `pairs` on arrays."""
    return q_len * past_len + q_len * (q_len + 1) / 2


def pairs(kind: str, span, q_len, past_len, causal: bool = True):
    """Query-key pairs per head per sequence when q_len new tokens follow past_len cached ones
    (module doc); non-causal (full attention only): q (p + q)."""
    q, p = np.asarray(q_len, dtype=float), np.asarray(past_len, dtype=float)
    if kind == "full":
        out = causal_pairs(q, p) if causal else q * p + q * q
    else:
        out = _seen(kind, span, p + q) - _seen(kind, span, p)
    return out if np.ndim(out) else float(out)


def keys_read(kind: str, span, q_len, past_len):
    """Distinct cached or new keys the block's queries read, per sequence and layer."""
    q, p = np.asarray(q_len, dtype=float), np.asarray(past_len, dtype=float)
    if kind == "full":
        out = q + p
    elif kind == "sliding":
        out = np.minimum(p + q, q + float(span) - 1)
    else:
        out = p + q - float(span) * np.floor(p / float(span))
    return out if np.ndim(out) else float(out)


def keys_held(kind: str, span, tokens):
    """Keys a serving engine keeps per sequence and layer after `tokens` tokens: all of them, at most
    the window, at most the chunk."""
    n = np.asarray(tokens, dtype=float)
    out = n if kind == "full" else np.minimum(n, float(span))
    return out if np.ndim(out) else float(out)


@dataclass(frozen=True)
class LayerShape:
    """One layer's attention widths: FLOPs per pair (all heads) of the scores and of the values, bytes
    per key of the scores' and the values' reads, per token of the query read and the output written
    (activation dtype), and per key held in the cache."""

    score_flops_per_pair: float
    value_flops_per_pair: float
    score_bytes_per_key: float
    value_bytes_per_key: float
    query_bytes_per_token: float
    output_bytes_per_token: float
    cache_bytes_per_key: float


@enters(model=ModelConfig, precision=Precision)
def layer_shape(model: ModelConfig, precision: Precision) -> LayerShape:
    """Per-layer widths (module doc): GQA/MHA/MQA from n_kv_heads and head_dim, MLA from its latent."""
    ab, kvb = bytes_per_element(precision.activations), bytes_per_element(precision.kv)
    H = model.n_heads
    if model.is_mla:
        r, rope = model.kv_lora_rank, model.qk_rope_head_dim
        return LayerShape(2.0 * H * (r + rope), 2.0 * H * r, (r + rope) * kvb, 0.0,
                          H * (r + rope) * ab, H * r * ab, (r + rope) * kvb)
    per_key = model.kv_dim * kvb
    return LayerShape(2.0 * H * model.head_dim, 2.0 * H * model.head_dim, per_key, per_key,
                      model.q_dim * ab, model.q_dim * ab, 2.0 * per_key)


@dataclass(frozen=True)
class AttentionAccount:
    """One pass's attention per layer (the mean over the layers, so that L times it is the whole
    model), summed over the batch: `pairs` scored (per head), the two kernels' FLOPs and KV bytes
    read, the query and output activation bytes, and the cache bytes held after the pass."""

    pairs: object
    score_flops: object
    value_flops: object
    score_kv_bytes: object
    value_kv_bytes: object
    query_bytes: object
    output_bytes: object
    cache_bytes: object

    def __add__(self, other: "AttentionAccount") -> "AttentionAccount":
        return AttentionAccount(*(getattr(self, f) + getattr(other, f) for f in self.__dataclass_fields__))


@enters(model=ModelConfig, precision=Precision)
def account(model: ModelConfig, batch=1, q_len=1, past_len=0, precision: Precision | None = None, *,
            causal: bool = True) -> AttentionAccount:
    """The attention of `batch` sequences each adding q_len tokens after past_len cached ones, per
    layer (arrays broadcast). Each layer group is counted with its own kind (module doc) and weighted
    by its share of the layers."""
    precision = precision if precision is not None else Precision()
    shape = layer_shape(model, precision)
    b, q = np.asarray(batch, dtype=float), np.asarray(q_len, dtype=float)
    n_pairs = n_read = n_held = 0.0
    for (kind, span), layers in layer_groups(model).items():
        if not causal and kind != "full":
            raise ValueError(f"non-causal attention is full attention; {model.name} has {kind} layers")
        share = layers / model.n_layers
        n_pairs = n_pairs + share * np.asarray(pairs(kind, span, q_len, past_len, causal))
        n_read = n_read + share * np.asarray(keys_read(kind, span, q_len, past_len))
        n_held = n_held + share * np.asarray(keys_held(kind, span, q + np.asarray(past_len, dtype=float)))
    tokens = b * q
    return AttentionAccount(pairs=b * n_pairs,
                            score_flops=b * shape.score_flops_per_pair * n_pairs,
                            value_flops=b * shape.value_flops_per_pair * n_pairs,
                            score_kv_bytes=b * n_read * shape.score_bytes_per_key,
                            value_kv_bytes=b * n_read * shape.value_bytes_per_key,
                            query_bytes=tokens * shape.query_bytes_per_token,
                            output_bytes=tokens * shape.output_bytes_per_token,
                            cache_bytes=b * n_held * shape.cache_bytes_per_key)


@enters(model=ModelConfig, precision=Precision)
def cache_bytes_per_sequence(model: ModelConfig, tokens, precision: Precision | None = None):
    """KV cache one sequence of `tokens` tokens holds, all layers: full layers every token, sliding
    layers at most the window, chunked at most the chunk; MLA its latent and rope key once."""
    precision = precision if precision is not None else Precision()
    per_key = layer_shape(model, precision).cache_bytes_per_key
    groups = layer_groups(model)
    if len(groups) == 1 and ("full", None) in groups:   # as before: per-token bytes x tokens
        out = cache_bytes_per_token(model, precision) * np.asarray(tokens, dtype=float)
    else:
        out = sum(n * keys_held(kind, span, tokens) for (kind, span), n in groups.items()) * per_key
    return out if np.ndim(out) else float(out)


@enters(model=ModelConfig, precision=Precision)
def cache_bytes_per_token(model: ModelConfig, precision: Precision | None = None) -> float:
    """Cache bytes per token of every layer, a window or chunk not applied: exact for full attention,
    an upper bound (what a paged pool that never frees out-of-window blocks allocates) otherwise."""
    precision = precision if precision is not None else Precision()
    if model.is_mla:
        return float(model.n_layers * layer_shape(model, precision).cache_bytes_per_key)
    return 2.0 * model.n_layers * model.kv_dim * bytes_per_element(precision.kv)


def step_account(model: ModelConfig, precision: Precision, decode_seqs: int, decode_kv_tokens: float,
                 chunks=()) -> AttentionAccount:
    """A serving step's attention (per layer, as `account`): `decode_seqs` single-token decodes over
    `decode_kv_tokens` keys in all, plus prefill chunks ((q, p), ...). A windowed layer's decode keys
    come from the mean context, n min(K/n, W): an upper bound of the sum of min(k_i, W) (min is concave)."""
    parts = []
    if decode_seqs:
        ctx = float(decode_kv_tokens) / decode_seqs
        parts.append(account(model, decode_seqs, 1, max(ctx - 1.0, 0.0), precision))
    for q, p in chunks:
        parts.append(account(model, 1, q, p, precision))
    if not parts:
        return AttentionAccount(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    out = parts[0]
    for a in parts[1:]:
        out = out + a
    return AttentionAccount(*(float(getattr(out, f)) for f in AttentionAccount.__dataclass_fields__))

"""FLOPs and bytes moved by each operator of one forward pass (prefill, decode step or chunk).

One general pass: each of `batch` sequences feeds `q_len` new tokens while `past_len` tokens of
it already sit in the KV cache. Prefill is (q_len=S, past_len=0); a decode step is (q_len=1,
past_len=context-1); a prefill chunk is (q_len=C, past_len=i*C). All arguments broadcast as numpy
arrays, so one call evaluates a whole (B, S) sweep.

Assumptions, stated once:
- FLOPs are those of matrix products (2 per multiply-add), as torch's FlopCounterMode counts them;
  norms, rotary, activation functions and residual adds are O(T*d) and left out.
- Each operator reads its inputs from HBM and writes its outputs once (no cross-operator fusion);
  attention is fused (FlashAttention style): the S x S score matrix never reaches HBM.
- Bytes are split into weights, activations and KV cache, each in its own dtype (`Precision`).
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np

from inferlab.core import attention
from inferlab.core.context import check_context, context_flag
from inferlab.core.moe import expected_experts
from inferlab.core.boundary import enters
from inferlab.core.specs import BF16, ModelConfig, Precision
from inferlab.core.quantization import bytes_per_param
from inferlab.base.units import bytes_per_element
from inferlab.base.input_checks import nonneg_int, positive_float, positive_int

ATTENTION_OPS = ("attn_scores", "attn_values")

# The operators of a layer in three groups, as the roofline figures place them: the attention
# projections, the MLP (dense, router, experts and shared expert) and attention's two products.
OPERATOR_GROUPS = {
    "QKV/O projections": ("q_proj", "k_proj", "v_proj", "o_proj", "q_a_proj", "q_b_proj", "kv_a_proj", "kv_b_proj"),
    "MLP": ("mlp_gate", "mlp_up", "mlp_down", "mlp_router", "mlp_experts", "mlp_shared"),
    "attention QK\u1d40, PV": ATTENTION_OPS,
}


@dataclass(frozen=True)
class Cost:
    """FLOPs and HBM bytes of one operator (scalars or broadcast numpy arrays)."""

    flops: object = 0.0
    weight_bytes: object = 0.0
    activation_bytes: object = 0.0
    kv_bytes: object = 0.0

    @property
    def bytes(self):
        """All bytes moved to or from HBM: weights + activations + KV cache."""
        return self.weight_bytes + self.activation_bytes + self.kv_bytes

    @property
    def intensity(self):
        """Arithmetic intensity, FLOPs per byte moved; 0 where nothing is moved (an operator that
        does not run, e.g. the LM head of a prefill chunk other than the last: never 0/0 = NaN)."""
        flops = np.asarray(self.flops, dtype=float)
        nbytes = np.asarray(self.bytes, dtype=float)
        out = np.divide(flops, nbytes, out=np.zeros(np.broadcast(flops, nbytes).shape), where=nbytes > 0)
        return out if out.ndim else float(out)

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def __mul__(self, k) -> "Cost":
        return Cost(*(getattr(self, f.name) * k for f in fields(self)))

    __rmul__ = __mul__


def total_cost(costs) -> Cost:
    """Sum of an iterable of Costs."""
    out = Cost()
    for c in costs:
        out = out + c
    return out


@dataclass(frozen=True)
class ForwardCosts:
    """Per-operator costs of one forward pass: `per_layer` ops repeat n_layers times; `head` ops
    (embedding lookup, LM head) run once.
    dims: each matrix product's weight shape, {op: (K, N)} (x: rows x K times W: K x N), so a
    kernel-time model can look the product up by shape; its rows are flops / (2 K N) (`rows`).
    tokens: T, the rows through every per-layer projection (None: not known, a pass built by hand).
    Neither takes part in equality: they follow from the costs of the ops they describe."""

    per_layer: dict = field(hash=False)
    head: dict = field(hash=False)
    n_layers: int
    dims: dict = field(default_factory=dict, hash=False, compare=False)
    tokens: object = field(default=None, hash=False, compare=False)

    def operators(self) -> dict:
        """Whole-model cost of each operator (per-layer ones multiplied by n_layers)."""
        ops = {name: c * self.n_layers for name, c in self.per_layer.items()}
        ops.update(self.head)
        return ops

    @property
    def layer(self) -> Cost:
        """One transformer layer."""
        return total_cost(self.per_layer.values())

    @property
    def total(self) -> Cost:
        return total_cost(self.operators().values())

    @property
    def attention(self) -> Cost:
        """The two attention products (QK^T and PV) over all layers, without projections."""
        return total_cost(self.per_layer[n] for n in ATTENTION_OPS) * self.n_layers

    @property
    def mlp(self) -> Cost:
        return total_cost(c for n, c in self.per_layer.items() if n.startswith("mlp_")) * self.n_layers

    def without(self, *names: str) -> "ForwardCosts":
        """The same pass with some operators dropped (e.g. the quadratic attention terms)."""
        return ForwardCosts({n: c for n, c in self.per_layer.items() if n not in names},
                            {n: c for n, c in self.head.items() if n not in names}, self.n_layers,
                            {n: kn for n, kn in self.dims.items() if n not in names}, self.tokens)

    def rows(self, name: str):
        """Rows of the matrix product `name` (tokens it multiplies): flops / (2 K N), with (K, N) = dims[name];
        0 where the product does not run (the LM head of a prefill chunk other than the last)."""
        if name not in self.dims:
            raise ValueError(f"rows: {name!r} is not a matrix product of this pass; allowed: "
                             f"{', '.join(self.dims) or 'none (a pass built without dims)'}")
        k, n = self.dims[name]
        cost = self.per_layer.get(name, self.head.get(name))
        out = np.asarray(cost.flops, dtype=float) / (2.0 * k * n)
        return out if out.ndim else float(out)


def group_costs(costs: "ForwardCosts") -> dict:
    """{group: (FLOPs, bytes)} of one layer: the operators of each OPERATOR_GROUPS group present in
    `costs` summed."""
    if not isinstance(costs, ForwardCosts):
        raise ValueError(f"costs must be a ForwardCosts (costs.prefill_costs, decode_costs, forward_costs); got {costs!r}")
    out = {}
    for name, ops in OPERATOR_GROUPS.items():
        present = [costs.per_layer[o] for o in ops if o in costs.per_layer]
        out[name] = (sum(c.flops for c in present), sum(c.bytes for c in present))
    return out


@enters(precision=Precision)
def linear_cost(tokens, d_in: int, d_out: int, precision: Precision = BF16, bytes_per_weight: float | None = None) -> Cost:
    """y = x W for x: tokens x d_in, W: d_in x d_out.
    FLOPs 2*tokens*d_in*d_out; bytes: W once, x read and y written (activation dtype).
    bytes_per_weight: W's stored bytes per parameter, scales included (a quantized checkpoint's part,
    `quantization.bytes_per_param`); None: bytes_per_element(precision.weights)."""
    positive_int("tokens", tokens)
    positive_int("d_in", d_in)
    positive_int("d_out", d_out)
    if bytes_per_weight is not None:
        positive_float("bytes_per_weight", bytes_per_weight, maximum=8.0)
    wb = bytes_per_element(precision.weights) if bytes_per_weight is None else float(bytes_per_weight)
    ab = bytes_per_element(precision.activations)
    tokens = np.asarray(tokens, dtype=float) if np.ndim(tokens) else float(tokens)
    return Cost(flops=2.0 * tokens * d_in * d_out,
                weight_bytes=float(d_in * d_out) * wb + 0.0 * tokens,
                activation_bytes=tokens * (d_in + d_out) * ab)


def attention_pairs(q_len, past_len, causal: bool = True):
    """Query-key pairs scored per head per sequence when q_len new tokens follow past_len cached ones.
    Dense: q_len*(past_len+q_len). Causal: query i of the block sees past_len+i+1 keys,
    q_len*past_len + q_len*(q_len+1)/2 in total (what a causal FlashAttention kernel computes)."""
    positive_int("q_len", q_len)
    nonneg_int("past_len", past_len)
    return attention.pairs("full", None, q_len, past_len, causal)


@enters(model=ModelConfig, precision=Precision)
@context_flag
def forward_costs(model: ModelConfig, batch=1, q_len=1, past_len=0,
                  precision: Precision = BF16, *, causal: bool = True,
                  all_logits: bool = False) -> ForwardCosts:
    """Per-operator FLOPs and bytes for `batch` sequences each adding `q_len` tokens after
    `past_len` cached ones. T = batch*q_len tokens flow through every projection.
    all_logits: apply the LM head to every new token (training-style forward) instead of only
    the last one per sequence (what a server needs to sample)."""
    positive_int("batch", batch)
    positive_int("q_len", q_len)
    nonneg_int("past_len", past_len)
    b = np.asarray(batch, dtype=float)
    q = np.asarray(q_len, dtype=float)
    kv_len = q + np.asarray(past_len, dtype=float)
    check_context(model, kv_len)  # beyond the model's maximum context: a warning
    tokens = b * q
    ab = bytes_per_element(precision.activations)
    kvb = bytes_per_element(precision.kv)
    bpw = bytes_per_param(model, precision)   # stored bytes per weight of each part (one value unless a checkpoint)
    wa, wm = bpw["attention"], bpw["mlp"]
    d, f = model.d_model, model.d_ff

    def kv_proj(width: int) -> Cost:
        # The projection's output goes straight into the KV cache, in the KV dtype.
        lin = linear_cost(tokens, d, width, precision, wa)
        return Cost(lin.flops, lin.weight_bytes, tokens * d * ab, tokens * width * kvb)

    per_layer, dims = {}, {}
    if model.is_mla:   # absorbed MLA (attention's module doc): kv_b_proj maps queries into the latent and back
        H, r, rope = model.n_heads, model.kv_lora_rank, model.qk_rope_head_dim
        qk, v = model.head_dim + rope, model.v_head_dim or model.head_dim
        if model.q_lora_rank:
            dims.update(q_a_proj=(d, model.q_lora_rank), q_b_proj=(model.q_lora_rank, H * qk))
        else:
            dims.update(q_proj=(d, H * qk))
        for name, (k, n) in dims.items():
            per_layer[name] = linear_cost(tokens, k, n, precision, wa)
        per_layer["kv_a_proj"] = kv_proj(r + rope)
        per_layer["kv_b_proj"] = linear_cost(tokens, r, H * (model.head_dim + v), precision, wa)
        dims.update(kv_a_proj=(d, r + rope), kv_b_proj=(r, H * (model.head_dim + v)))
        o_in = H * v
    else:
        per_layer = {"q_proj": linear_cost(tokens, d, model.q_dim, precision, wa),
                     "k_proj": kv_proj(model.kv_dim), "v_proj": kv_proj(model.kv_dim)}
        dims = {"q_proj": (d, model.q_dim), "k_proj": (d, model.kv_dim), "v_proj": (d, model.kv_dim)}
        o_in = model.q_dim
    att = attention.account(model, b, q, past_len, precision, causal=causal)
    per_layer["attn_scores"] = Cost(att.score_flops, 0.0, att.query_bytes, att.score_kv_bytes)   # Q K^T
    per_layer["attn_values"] = Cost(att.value_flops, 0.0, att.output_bytes, att.value_kv_bytes)  # P V -> O
    per_layer["o_proj"] = linear_cost(tokens, o_in, d, precision, wa)
    dims["o_proj"] = (o_in, d)
    dense_share = 1.0 if not model.is_moe else len(model.dense_layers) / model.n_layers
    if dense_share > 0:
        mlp = {"mlp_up": linear_cost(tokens, d, f, precision, wm), "mlp_down": linear_cost(tokens, f, d, precision, wm)}
        if model.gated_mlp:
            mlp = {"mlp_gate": linear_cost(tokens, d, f, precision, wm), **mlp}
            dims["mlp_gate"] = (d, f)
        per_layer.update(mlp if dense_share == 1.0 else {n: c * dense_share for n, c in mlp.items()})
        dims.update(mlp_up=(d, f), mlp_down=(f, d))
    if model.is_moe:
        per_layer.update(_moe_costs(model, tokens, precision, bpw))
        dims.update(mlp_router=(d, model.n_experts), mlp_experts=(d, 3 * model.expert_d_ff))
        if model.shared_d_ff:
            dims["mlp_shared"] = (d, 3 * model.shared_d_ff)
    dims["lm_head"] = (d, model.vocab_size)
    logit_tokens = tokens if all_logits else b
    head = {
        # A lookup: one row of the table per token, no FLOPs.
        "embedding": Cost(0.0 * tokens, np.minimum(tokens, model.vocab_size) * d * bpw["embedding"],
                          tokens * d * ab, 0.0),
        "lm_head": linear_cost(logit_tokens, d, model.vocab_size, precision,
                               bpw["embedding" if model.tied_embeddings else "lm_head"]),
    }
    return ForwardCosts(per_layer, head, model.n_layers, dims, tokens if tokens.ndim else float(tokens))


def _moe_costs(model: ModelConfig, tokens, precision: Precision, bpw: dict) -> dict:
    """The mixture-of-experts MLP per layer (weighted by the share of MoE layers): the router
    (d x E), the routed experts (each token through k experts of 3 d f_e; the weights of the expected
    distinct experts the T tokens touch read once, `moe.expected_experts`) and the shared experts."""
    share = model.moe_layers / model.n_layers
    d, fe = model.d_model, model.expert_d_ff
    ab = bytes_per_element(precision.activations)
    routed = tokens * model.experts_per_token
    touched = expected_experts(model.n_experts, model.experts_per_token, tokens)
    out = {"mlp_router": linear_cost(tokens, d, model.n_experts, precision, bpw["router"]),
           "mlp_experts": Cost(2.0 * routed * 3 * d * fe, touched * 3 * d * fe * bpw["experts"], routed * 3 * (d + fe) * ab, 0.0)}
    if model.shared_d_ff:
        s = model.shared_d_ff
        out["mlp_shared"] = Cost(2.0 * tokens * 3 * d * s, 3.0 * d * s * bpw["shared"] + 0.0 * tokens, tokens * 3 * (d + s) * ab, 0.0)
    return {n: c * share for n, c in out.items()} if share != 1.0 else out


@enters(model=ModelConfig, precision=Precision)
@context_flag
def prefill_costs(model, batch=1, prompt_len=1, precision: Precision = BF16, *,
                  causal: bool = True, all_logits: bool = False) -> ForwardCosts:
    """One prefill pass: `batch` prompts of `prompt_len` tokens, empty cache."""
    positive_int("prompt_len", prompt_len)
    return forward_costs(model, batch, prompt_len, 0, precision, causal=causal, all_logits=all_logits)


@enters(model=ModelConfig, precision=Precision)
@context_flag
def decode_costs(model, batch=1, context_len=1, precision: Precision = BF16) -> ForwardCosts:
    """One decode step: each of `batch` sequences adds one token and attends over
    `context_len` positions (the cached ones plus the new token)."""
    positive_int("context_len", context_len)
    past = np.asarray(context_len) - 1
    return forward_costs(model, batch, 1, past if past.ndim else int(past), precision)


@dataclass(frozen=True)
class ChunkedPrefill:
    """Prefill of one prompt in chunks of `chunk_len` tokens; `chunks` holds per-chunk arrays
    (index i: q_len = chunk length, past_len = i*chunk_len)."""

    chunk_len: int
    q_len: np.ndarray
    past_len: np.ndarray
    chunks: ForwardCosts

    @property
    def n_chunks(self) -> int:
        return len(self.q_len)

    @property
    def per_chunk(self) -> Cost:
        return self.chunks.total

    @property
    def total(self) -> Cost:
        c = self.per_chunk
        return Cost(*(np.sum(getattr(c, f.name)) for f in fields(c)))


@enters(model=ModelConfig, precision=Precision)
@context_flag
def chunked_prefill_costs(model, prompt_len: int, chunk_len: int, batch=1,
                          precision: Precision = BF16, *, causal: bool = True) -> ChunkedPrefill:
    """Prefill of `prompt_len` tokens in ceil(S/C) chunks of C. Total FLOPs equal one-shot causal
    prefill (each key-query pair is scored once, logits only for the last chunk); bytes grow: every chunk re-reads the weights
    (S/C times) and the KV cache of all earlier chunks (O(S^2/C) bytes)."""
    positive_int("prompt_len", prompt_len)
    positive_int("chunk_len", chunk_len)
    n = -(-int(prompt_len) // int(chunk_len))
    past = np.arange(n) * int(chunk_len)
    q = np.minimum(int(chunk_len), int(prompt_len) - past)
    costs = forward_costs(model, batch, q, past, precision, causal=causal)
    # Only the final chunk needs logits (to sample the first token).
    last = (np.arange(n) == n - 1).astype(float)
    head = dict(costs.head, lm_head=costs.head["lm_head"] * last)
    return ChunkedPrefill(int(chunk_len), q, past, ForwardCosts(costs.per_layer, head, costs.n_layers, costs.dims,
                                                                costs.tokens))

"""Weights as a quantized checkpoint stores them: each matrix in its own format, scales included.

A `Quantization` is what a checkpoint's `quantization_config` says (read by `core.hf_config`): the
format of the quantized matrices, how their scales are laid out, and which parts of the model stay
in the unquantized format. `stored_weight_bytes(model, precision)` sums, matrix by matrix,

    values:  out x in x bits / 8
    scales:  block (r, c): ceil(out / r) ceil(in / c) scales; group g: out ceil(in / g) scales;
             per channel: out scales; per tensor: `tensor_scales` FP32 scales a matrix
    zeros:   a 4-bit zero point per scale (AWQ, GPTQ), and GPTQ's int32 group index per input column

and every other parameter (embedding, LM head, norms, biases, routers, the parts left out) at the
unquantized format. A model run without a checkpoint (`Precision.checkpoint is None`) stores every
parameter at `Precision.weights`, as before: `n_params x bytes_per_element(weights)`.

Assumptions: the router of a mixture of experts is never quantized (DeepSeek's gate is not a
linear layer; elsewhere it is a few million parameters); fused projections (Phi-3's qkv and gate-up,
gpt-oss's gate-up) have their scales counted on the separate matrices, which differs only where a
dimension is not a multiple of the block.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

from inferlab.base.units import DTYPES, bytes_per_element
from inferlab.base.input_checks import choice

# The parts of a decoder whose matrices a checkpoint may quantize (or leave out).
PARTS = ("attention", "mlp", "experts", "shared", "router", "embedding", "lm_head")
LINEAR_PARTS = frozenset({"attention", "mlp", "experts", "shared"})
METHODS = ("fp8-block", "fp8-tensor", "fp8-channel", "mxfp4", "nvfp4", "awq", "gptq", "int8-channel")


@dataclass(frozen=True)
class Quantization:
    """The weights of a quantized checkpoint: `fmt` (a DTYPES name) for the matrices of `parts`, minus
    the (part, layer) pairs of `excluded` (layer None: every layer); the rest in `unquantized`.
    Scales of `scale_bytes` each: one per `block` (rows, cols), per `group` input values, or per output
    channel; `tensor_scales` FP32 scales per matrix; 4-bit `zero_points` per scale; `group_index`:
    GPTQ's int32 per input column. `activations`: 'fp8' where the checkpoint quantizes them too (W8A8)."""

    method: str
    fmt: str
    value_bits: float
    scale_bytes: float = 0.0
    block: tuple = ()
    group: int = 0
    per_channel: bool = False
    tensor_scales: int = 0
    zero_points: bool = False
    group_index: bool = False
    activations: str = "bf16"
    parts: frozenset = LINEAR_PARTS
    excluded: tuple = ()
    unquantized: str = "bf16"
    source: str = field(default="", compare=False)

    def __post_init__(self):
        choice("quantization method", self.method, METHODS)
        choice("quantized format", self.fmt, DTYPES)
        choice("unquantized format", self.unquantized, DTYPES)
        for part in self.parts:
            choice("quantized part", part, PARTS)
        object.__setattr__(self, "parts", frozenset(self.parts))
        object.__setattr__(self, "excluded", tuple(sorted(set(self.excluded), key=str)))

    def quantizes(self, part: str, layer: int | None) -> bool:
        """Whether the matrices of `part` in `layer` (None: outside the layers) are stored quantized."""
        if part not in self.parts:
            return False
        return (part, None) not in self.excluded and (layer is None or (part, layer) not in self.excluded)

    def matrix_bytes(self, out: int, inp: int) -> float:
        """One quantized out x in matrix: values, scales, zero points and group index, in bytes."""
        values = out * inp * self.value_bits / 8
        if self.block:
            n_scales = math.ceil(out / self.block[0]) * math.ceil(inp / self.block[1])
        elif self.group:
            n_scales = out * math.ceil(inp / self.group)
        elif self.per_channel:
            n_scales = out
        else:
            n_scales = 0
        extra = n_scales * self.scale_bytes + 4.0 * self.tensor_scales
        if self.zero_points:
            extra += n_scales * 0.5
        if self.group_index:
            extra += 4.0 * inp
        return values + extra

    def describe(self, model=None) -> str:
        """'mxfp4 (experts; mxfp4), the rest bf16': the stored formats in words; with `model`, only the
        parts it has, and the count of single layers' parts left unquantized."""
        whole = {p for p, layer in self.excluded if layer is None}
        present = {m[0] for m in layer_matrices(model)} | {"embedding", "lm_head"} if model is not None else set(PARTS)
        parts = ", ".join(p for p in PARTS if p in self.parts and p not in whole and p in present) or "nothing"
        single = sum(1 for p, layer in self.excluded if layer is not None and p in present)
        note = f"; {single} single-layer part(s) left {self.unquantized}" if single else ""
        return f"{self.fmt} ({parts}; {self.method}), the rest {self.unquantized}{note}"


def layer_matrices(model) -> list:
    """[(part, layer, out, in, count)]: every weight matrix of the decoder layers (no embedding or head).
    Attention: q, k, v, o (MLA: q_a and q_b or q, kv_a, kv_b, o); a dense layer's MLP gate, up, down; a
    mixture-of-experts layer's router, its experts' gate, up, down, and its shared experts'."""
    d, out = model.d_model, []
    mlp = [(model.d_ff, d), (model.d_ff, d), (d, model.d_ff)] if model.gated_mlp else [(model.d_ff, d), (d, model.d_ff)]
    if model.is_mla:
        H, rope, r = model.n_heads, model.qk_rope_head_dim, model.kv_lora_rank
        qk, v = model.head_dim + rope, model.v_head_dim or model.head_dim
        q = [(model.q_lora_rank, d), (H * qk, model.q_lora_rank)] if model.q_lora_rank else [(H * qk, d)]
        attn = q + [(r + rope, d), (H * (model.head_dim + v), r), (d, H * v)]
    else:
        attn = [(model.q_dim, d), (model.kv_dim, d), (model.kv_dim, d), (d, model.q_dim)]
    dense = set(model.dense_layers) if model.is_moe else set(range(model.n_layers))
    for i in range(model.n_layers):
        out += [("attention", i, o, n, 1) for o, n in attn]
        if i in dense:
            out += [("mlp", i, o, n, 1) for o, n in mlp]
            continue
        fe, fs = model.expert_d_ff, model.shared_d_ff or 0
        out.append(("router", i, model.n_experts, d, 1))
        out += [("experts", i, o, n, model.n_experts) for o, n in ((fe, d), (fe, d), (d, fe))]
        if fs:
            out += [("shared", i, o, n, 1) for o, n in ((fs, d), (fs, d), (d, fs))]
    return out


@functools.lru_cache(maxsize=256)
def part_bytes(model, precision) -> dict:
    """{part: (parameters, stored bytes)} for the matrices of each part, plus 'embedding', 'lm_head'
    and 'small' (norms, biases, sinks: every parameter in no matrix), under `precision`."""
    q = precision.checkpoint
    plain = bytes_per_element(q.unquantized if q else precision.weights)
    params = {p: 0 for p in (*PARTS, "small")}
    stored = {p: 0.0 for p in (*PARTS, "small")}
    for part, layer, o, n, count in layer_matrices(model):
        params[part] += o * n * count
        stored[part] += count * (q.matrix_bytes(o, n) if q and q.quantizes(part, layer) else o * n * plain)
    vd = model.vocab_size * model.d_model
    heads = [("embedding", vd)] + ([] if model.tied_embeddings else [("lm_head", vd)])
    for part, n in heads:
        params[part] = n
        stored[part] = q.matrix_bytes(model.vocab_size, model.d_model) if q and q.quantizes(part, None) else n * plain
    params["small"] = model.n_params - sum(params.values())
    stored["small"] = params["small"] * plain
    return {p: (params[p], stored[p]) for p in params}


def stored_weight_bytes(model, precision) -> float:
    """Bytes of every parameter as stored: n_params x bytes_per_element(weights) without a checkpoint;
    with one, each matrix in its part's format with its scales (`part_bytes`)."""
    if precision.checkpoint is None:
        return model.n_params * bytes_per_element(precision.weights)
    return sum(b for _, b in part_bytes(model, precision).values())


def bytes_per_param(model, precision) -> dict:
    """{part: stored bytes per parameter} (scales included): what an operator of that part reads per
    weight. Without a checkpoint every part is bytes_per_element(weights)."""
    if precision.checkpoint is None:
        b = bytes_per_element(precision.weights)
        return {p: b for p in (*PARTS, "small")}
    plain = bytes_per_element(precision.checkpoint.unquantized)
    return {p: (b / n if n else plain) for p, (n, b) in part_bytes(model, precision).items()}


def weight_bytes_by_format(model, precision) -> dict:
    """{format: bytes}: the stored weights split by the format they are in (scales with their values)."""
    q = precision.checkpoint
    if q is None:
        return {precision.weights: stored_weight_bytes(model, precision)}
    out: dict = {}
    plain = bytes_per_element(q.unquantized)
    for part, layer, o, n, count in layer_matrices(model):
        fmt = q.fmt if q.quantizes(part, layer) else q.unquantized
        out[fmt] = out.get(fmt, 0.0) + count * (q.matrix_bytes(o, n) if fmt == q.fmt else o * n * plain)
    parts = part_bytes(model, precision)
    for part in ("embedding", "lm_head", "small"):
        fmt = q.fmt if part != "small" and q.quantizes(part, None) else q.unquantized
        out[fmt] = out.get(fmt, 0.0) + parts[part][1]
    return out


def checkpoint_compute(q: Quantization, accelerator) -> tuple[str, str]:
    """(compute dtype, how it runs): W8A8 (or W4A4) on the low-precision tensor cores where the checkpoint
    quantizes the activations too (`q.activations`) and `accelerator` has a peak in that format;
    otherwise weight-only, dequantized to the unquantized format (`q.unquantized`)."""
    quantized = q.activations != q.unquantized and q.activations != "bf16"
    if quantized and q.activations in accelerator.peak_flops_per_s:
        return q.activations, (f"computed in {q.activations} ({q.fmt} weights, activations quantized as the "
                               f"checkpoint says) on {accelerator.name}'s {q.activations} tensor cores")
    why = (f"{accelerator.name} has no {q.activations} peak" if quantized
           else "the checkpoint keeps activations in " + q.unquantized)
    return q.unquantized, f"weight-only: {q.fmt} weights dequantized to {q.unquantized} ({why})"

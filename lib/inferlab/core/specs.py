"""Model architectures, accelerators and precisions: frozen dataclasses loaded from `data/`.

Every accelerator number is dense (no structured sparsity) and carries its source.
"""
from __future__ import annotations

import functools
import os
import re
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from inferlab.base.units import DTYPES
from inferlab.core.quantization import Quantization
from inferlab.base.input_checks import _short, choice, positive_float, positive_int


def _set(obj, name, value):
    object.__setattr__(obj, name, value)  # normalising a field of a frozen dataclass in __post_init__


def _check_int_field(obj, name, *, optional=False):
    """An integer field: Python or numpy integer (stored as int), > 0; bool and floats refused."""
    value = getattr(obj, name)
    if optional and value is None:
        return
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be a positive integer{' or None' if optional else ''}; "
                         f"got {_short(value)} ({type(value).__name__})")
    positive_int(name, value)
    _set(obj, name, int(value))


def _check_bool_field(obj, name):
    value = getattr(obj, name)
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False; got {_short(value)} ({type(value).__name__})")
    _set(obj, name, bool(value))


def _check_str_field(obj, name, *, nonempty=False):
    value = getattr(obj, name)
    if not isinstance(value, str) or (nonempty and not value.strip()):
        raise ValueError(f"{name} must be a{' non-empty' if nonempty else ''} string; got {_short(value)}")


def _check_float_field(obj, name, *, allow_zero=False):
    """A real number field (Python or numpy, int or float; stored as float); bool refused."""
    value = getattr(obj, name)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a finite number {'>= 0' if allow_zero else '> 0'}; "
                         f"got {_short(value)} ({type(value).__name__})")
    positive_float(name, value, allow_zero=allow_zero)
    _set(obj, name, float(value))


def data_dir() -> Path:
    """The repository's `data/` folder (override with the INFERLAB_DATA environment variable)."""
    env = os.environ.get("INFERLAB_DATA")
    path = Path(env) if env else Path(__file__).resolve().parents[3] / "data"
    if not path.is_dir():
        raise FileNotFoundError(
            f"inferlab data folder not found at {path}; install with `pip install -e .` from the "
            "repository root, or set INFERLAB_DATA to the repository's data/ folder")
    return path


@dataclass(frozen=True)
class ModelConfig:
    """A decoder-only transformer (Llama family): RMSNorm, rotary positions, no biases."""

    name: str
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_ff: int
    gated_mlp: bool
    vocab_size: int
    tied_embeddings: bool = False
    max_context_tokens: int | None = None
    max_context_source: str = ""
    description: str = ""
    source: str = ""
    # -- architecture beyond dense Llama (the defaults are dense Llama: every existing model) --------
    # attention per layer: "full", "sliding" (the last `sliding_window` keys) or "chunked" (keys of
    # its own `attention_chunk`-token chunk); () means every layer full
    layer_types: tuple = ()
    sliding_window: int | None = None
    attention_chunk: int | None = None
    # multi-head latent attention (DeepSeek-V2/V3): K and V come from a kv_lora_rank latent (cached)
    # plus a shared rope key of qk_rope_head_dim; head_dim is then the non-rope query/key width
    kv_lora_rank: int | None = None
    q_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    v_head_dim: int | None = None
    # mixture of experts: n_experts routed experts of expert_d_ff (gated), experts_per_token per
    # token, shared experts of shared_d_ff in all (0: none); dense_layers keep a d_ff MLP
    n_experts: int | None = None
    experts_per_token: int | None = None
    expert_d_ff: int | None = None
    shared_d_ff: int | None = None
    shared_expert_gate: bool = False
    dense_layers: tuple = ()
    router_bias: bool = False
    expert_bias: bool = False
    # small parameters: q/k/v biases, an output-projection bias, per-head q/k norms, per-head
    # attention sinks, RMSNorm vectors per layer (Gemma: 4)
    attention_bias: bool = False
    o_bias: bool = False
    qk_norm: bool = False
    attention_sinks: bool = False
    norms_per_layer: int = 2
    family: str = ""
    # biases on the MLP's gate, up and down projections (Llama's `mlp_bias`)
    mlp_bias: bool = False
    # -- the checkpoint beyond the architecture (Hugging Face configs only) -----------------------
    # how its weights are stored (core.quantization.Quantization; None: one format, Precision.weights)
    quantization: object = None
    # parts of the checkpoint the counts leave out: (("vision tower", 427_000_000), ("multi-token
    # prediction layer", None), ...), the parameter count None where the config does not describe it
    not_counted: tuple = ()
    # which reader turned the config into these fields (transformers' config class, or inferlab's own)
    config_reader: str = ""

    def __post_init__(self):
        """Every field's type is checked: integers (Python or numpy) > 0, booleans True/False (not
        "no" or 0), strings for the texts."""
        _check_str_field(self, "name", nonempty=True)
        for name in ("d_model", "n_layers", "n_heads", "n_kv_heads", "head_dim", "d_ff", "vocab_size"):
            _check_int_field(self, name)
        _check_int_field(self, "max_context_tokens", optional=True)
        for name in ("gated_mlp", "tied_embeddings"):
            _check_bool_field(self, name)
        for name in ("max_context_source", "description", "source"):
            _check_str_field(self, name)
        self._check_architecture()
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"n_kv_heads must divide n_heads; got n_heads={self.n_heads}, "
                f"n_kv_heads={self.n_kv_heads} (allowed: a divisor of {self.n_heads})")

    def _check_architecture(self):
        """The fields beyond dense Llama: sizes > 0 where given, a layer type per layer, a window or
        chunk for the layers that use one (and no longer than the context), top-k <= experts."""
        for name in ("sliding_window", "attention_chunk", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim",
                     "v_head_dim", "n_experts", "experts_per_token", "expert_d_ff"):
            _check_int_field(self, name, optional=True)
        if self.shared_d_ff is not None and self.shared_d_ff != 0:
            _check_int_field(self, "shared_d_ff")
        _check_int_field(self, "norms_per_layer")
        for name in ("shared_expert_gate", "router_bias", "expert_bias", "attention_bias", "o_bias", "qk_norm",
                     "attention_sinks", "mlp_bias"):
            _check_bool_field(self, name)
        _check_str_field(self, "family")
        _check_str_field(self, "config_reader")
        if self.quantization is not None and not isinstance(self.quantization, Quantization):
            raise ValueError(f"quantization must be a core.quantization.Quantization or None; got {_short(self.quantization)}")
        _set(self, "not_counted", tuple((str(n), None if p is None else int(p)) for n, p in self.not_counted))
        types = tuple(self.layer_types)
        for t in types:
            if t not in ("full", "sliding", "chunked"):
                raise ValueError(f"layer_types: each must be 'full', 'sliding' or 'chunked'; got {t!r}")
        if types and len(types) != self.n_layers:
            raise ValueError(f"layer_types must name one type per layer ({self.n_layers}); got {len(types)}")
        _set(self, "layer_types", types)
        for kind, span in (("sliding", "sliding_window"), ("chunked", "attention_chunk")):
            if kind in types and getattr(self, span) is None:
                raise ValueError(f"{span} is needed for the {kind!r} layers of {self.name}")
            size = getattr(self, span)
            if size is not None and self.max_context_tokens is not None and size > self.max_context_tokens:
                raise ValueError(f"{span}={size} is longer than the context max_context_tokens="
                                 f"{self.max_context_tokens} of {self.name}")
        dense = tuple(int(i) for i in self.dense_layers)
        if any(i < 0 or i >= self.n_layers for i in dense):
            raise ValueError(f"dense_layers must be layer indices 0..{self.n_layers - 1}; got {list(dense)}")
        _set(self, "dense_layers", tuple(sorted(set(dense))))
        if self.kv_lora_rank is not None and self.qk_rope_head_dim is None:
            raise ValueError(f"qk_rope_head_dim is needed with kv_lora_rank (MLA) for {self.name}")
        if self.n_experts is not None:
            if self.experts_per_token is None or self.expert_d_ff is None:
                raise ValueError(f"experts_per_token and expert_d_ff are needed with n_experts for {self.name}")
            if self.experts_per_token > self.n_experts:
                raise ValueError(f"experts_per_token={self.experts_per_token} exceeds n_experts={self.n_experts}")

    # Architecture ------------------------------------------------------------------------------
    @property
    def layer_kinds(self) -> tuple:
        """The attention of each layer: 'full', 'sliding' or 'chunked' (all 'full' by default)."""
        return self.layer_types or ("full",) * self.n_layers

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def is_moe(self) -> bool:
        return self.n_experts is not None

    @property
    def full_attention_only(self) -> bool:
        """Every layer attends to the whole context with per-head K and V (the cache grows linearly)."""
        return not self.is_mla and all(k == "full" for k in self.layer_kinds)

    @property
    def moe_layers(self) -> int:
        """Layers whose MLP is the mixture of experts (0 for a dense model)."""
        return self.n_layers - len(self.dense_layers) if self.is_moe else 0

    @property
    def expert_params(self) -> int:
        """One routed expert: gate, up and down (3 d f_e), plus its biases where it has them."""
        if not self.is_moe:
            return 0
        return 3 * self.d_model * self.expert_d_ff + ((2 * self.expert_d_ff + self.d_model) if self.expert_bias else 0)

    @property
    def moe_params_per_layer(self) -> int:
        """Router (d E, + E bias) + E experts + shared experts (3 d f_s) + the shared-expert gate (d)."""
        if not self.is_moe:
            return 0
        return (self.d_model * self.n_experts + (self.n_experts if self.router_bias else 0)
                + self.n_experts * self.expert_params + 3 * self.d_model * (self.shared_d_ff or 0)
                + (self.d_model if self.shared_expert_gate else 0))

    @property
    def q_dim(self) -> int:
        """Width of the concatenated query heads, n_heads * head_dim."""
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of the concatenated key (or value) heads, n_kv_heads * head_dim."""
        return self.n_kv_heads * self.head_dim

    @property
    def group_size(self) -> int:
        """Query heads per KV head: 1 for MHA, n_heads for MQA."""
        return self.n_heads // self.n_kv_heads

    @property
    def attention_kind(self) -> str:
        """MHA, GQA or MQA by KV heads; MLA for latent attention."""
        if self.is_mla:
            return "MLA"
        if self.n_kv_heads == self.n_heads:
            return "MHA"
        return "MQA" if self.n_kv_heads == 1 else "GQA"

    @property
    def n_mlp_matrices(self) -> int:
        return 3 if self.gated_mlp else 2

    # Parameter counts -------------------------------------------------------------------------
    @property
    def attention_params_per_layer(self) -> int:
        """W_q, W_o: d x (n_heads*head_dim); W_k, W_v: d x (n_kv_heads*head_dim); plus biases,
        q/k norms and sinks where the model has them. MLA: q_a (d r_q) + its norm + q_b
        (r_q H (h + h_r)), or W_q (d H (h + h_r)); kv_a (d (r_kv + h_r)) + its norm; kv_b
        (r_kv H (h + h_v)); W_o (H h_v d)."""
        d, H = self.d_model, self.n_heads
        if self.is_mla:
            qk, rope, r = self.head_dim + self.qk_rope_head_dim, self.qk_rope_head_dim, self.kv_lora_rank
            v = self.v_head_dim or self.head_dim
            q = (d * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * H * qk) if self.q_lora_rank else d * H * qk
            return q + d * (r + rope) + r + r * H * (self.head_dim + v) + H * v * d
        n = 2 * d * self.q_dim + 2 * d * self.kv_dim
        if self.attention_bias:
            n += self.q_dim + 2 * self.kv_dim
        if self.o_bias:
            n += d
        if self.qk_norm:
            n += 2 * self.head_dim
        if self.attention_sinks:
            n += H
        return n

    @property
    def mlp_params_per_layer(self) -> int:
        """(3 if gated else 2) matrices of d x d_ff, plus their biases (d_ff each on gate and up, d on
        down) where `mlp_bias`."""
        bias = ((self.n_mlp_matrices - 1) * self.d_ff + self.d_model) if self.mlp_bias else 0
        return self.n_mlp_matrices * self.d_model * self.d_ff + bias

    @property
    def params_per_layer(self) -> int:
        """Attention + MLP matrices + RMSNorm weight vectors (two per layer by default), averaged
        over the layers when dense and mixture-of-experts layers differ."""
        if self.is_moe:
            return self.layers_params // self.n_layers
        return self.attention_params_per_layer + self.mlp_params_per_layer + self.norms_per_layer * self.d_model

    @property
    def layers_params(self) -> int:
        """All transformer layers: dense layers with their d_ff MLP, the others with their experts."""
        n_dense = len(self.dense_layers) if self.is_moe else self.n_layers
        per = self.attention_params_per_layer + self.norms_per_layer * self.d_model
        return self.n_layers * per + n_dense * self.mlp_params_per_layer + self.moe_layers * self.moe_params_per_layer

    @property
    def embedding_params(self) -> int:
        """Input embedding V x d, plus the LM head V x d unless tied."""
        return self.vocab_size * self.d_model * (1 if self.tied_embeddings else 2)

    @property
    def n_params(self) -> int:
        """Exact parameter count (as transformers counts it): layers + embeddings (+ head) + final norm."""
        return self.layers_params + self.embedding_params + self.d_model

    @property
    def n_params_active(self) -> int:
        """Parameters one token uses: all but the n_experts - experts_per_token routed experts it
        is not sent to, in every mixture-of-experts layer (= n_params for a dense model)."""
        if not self.is_moe:
            return self.n_params
        return self.n_params - self.moe_layers * (self.n_experts - self.experts_per_token) * self.expert_params

    @property
    def n_matmul_params(self) -> int:
        """Parameters that take part in a matrix product per token (everything but the
        embedding lookup and the norms): the P of the 2*P FLOPs-per-token rule. Mixture of
        experts: the active experts only (router and shared experts included)."""
        head = self.vocab_size * self.d_model
        if not self.is_moe and self.norms_per_layer == 2 and not (self.qk_norm or self.attention_sinks or self.is_mla):
            return self.n_layers * (self.attention_params_per_layer + self.mlp_params_per_layer) + head
        small = self.n_layers * self.norms_per_layer * self.d_model + self.d_model
        small += self.n_layers * ((2 * self.head_dim if self.qk_norm else 0) + (self.n_heads if self.attention_sinks else 0))
        if self.is_mla:
            small += self.n_layers * ((self.q_lora_rank or 0) + self.kv_lora_rank)
        return self.n_params_active - self.embedding_params + head - small

    def gqa_variant(self, n_kv_heads: int) -> "ModelConfig":
        """The same model with `n_kv_heads` KV heads at (almost) the same parameter count: the K and
        V projection weights saved widen the MLP, as Llama-3 does, so only the KV cache changes.
        d_ff grows by round(2*d*(kv_old - kv_new)*head_dim / (n_mlp_matrices*d))."""
        positive_int("n_kv_heads", n_kv_heads)
        n_kv_heads = int(n_kv_heads)
        if n_kv_heads == self.n_kv_heads or self.is_mla:   # latent attention has no KV heads to group
            return self
        saved = 2 * self.d_model * (self.n_kv_heads - n_kv_heads) * self.head_dim
        wider = self.d_ff + round(saved / (self.n_mlp_matrices * self.d_model))
        return self.with_(name=f"{self.name}-gqa{n_kv_heads}", n_kv_heads=n_kv_heads, d_ff=wider)

    def with_(self, **changes) -> "ModelConfig":
        """A copy with some fields changed, e.g. `cfg.with_(n_kv_heads=8)` for a GQA variant."""
        from dataclasses import replace
        if "name" not in changes:
            changes["name"] = self.name + "(" + ",".join(f"{k}={v}" for k, v in changes.items()) + ")"
        return replace(self, **changes)


@dataclass(frozen=True)
class Accelerator:
    """One accelerator: dense peak per dtype, memory bandwidth and capacity, with the source."""

    name: str
    memory_bytes: float
    hbm_bytes_per_s: float
    peak_flops_per_s: dict = field(hash=False)
    interconnect_bytes_per_s: float = 0.0
    description: str = ""
    source: str = ""
    # What the device reports (nvidia-smi's total = torch's total_memory), beside the datasheet's
    # marketing figure: the "80 GB" H100 reports 81,559 MiB = 85.52e9 bytes. The library sizes with
    # memory_bytes (the book's decimal figure); this is documentation and a check on recorded runs.
    reported_memory_bytes: float | None = None
    reported_memory_source: str = ""
    # A measured all-reduce of the node this accelerator sits in (the ring formula's start-up latency
    # per call and bus bandwidth), where one was published; None: parallel's defaults (8 us start-up,
    # the interconnect's datasheet bandwidth).
    allreduce_latency_s: float | None = None
    allreduce_bus_bytes_per_s: float | None = None
    allreduce_source: str = ""
    # The device as torch.cuda.get_device_name reports it (e.g. 'NVIDIA H100 80GB HBM3'): a regular
    # expression searched in that name; "" for a device a measurement never meets. No two rows may
    # match one name (`accelerator_for_device`).
    device_name_pattern: str = ""

    def __post_init__(self):
        """Every field's type is checked; numbers may be Python or numpy (stored as float). A
        capacity, bandwidth or peak must be at least 1 (byte, byte/s, FLOP/s): a subnormal one would
        turn every time into inf."""
        _check_str_field(self, "name", nonempty=True)
        for name in ("memory_bytes", "hbm_bytes_per_s"):
            _check_float_field(self, name)
            positive_float(name, getattr(self, name), minimum=1.0)
        _check_float_field(self, "interconnect_bytes_per_s", allow_zero=True)
        positive_float("interconnect_bytes_per_s", self.interconnect_bytes_per_s, allow_zero=True, minimum=1.0)
        if not isinstance(self.peak_flops_per_s, dict) or not self.peak_flops_per_s:
            raise ValueError(f"peak_flops_per_s must be a non-empty dict {{dtype: FLOP/s}}; "
                             f"got {_short(self.peak_flops_per_s)}")
        for dtype, peak in self.peak_flops_per_s.items():
            choice("dtype", dtype, DTYPES)
            if isinstance(peak, (bool, np.bool_)) or not isinstance(peak, (int, float, np.integer, np.floating)):
                raise ValueError(f"peak_flops_per_s[{dtype}] must be a finite number >= 1; got {_short(peak)}")
            positive_float(f"peak_flops_per_s[{dtype}]", peak, minimum=1.0)
        for name in ("description", "source", "reported_memory_source", "allreduce_source", "device_name_pattern"):
            _check_str_field(self, name)
        try:
            re.compile(self.device_name_pattern)
        except re.error as e:
            raise ValueError(f"device_name_pattern of {self.name!r} must be a regular expression; "
                             f"got {self.device_name_pattern!r} ({e})") from None
        if (self.allreduce_latency_s is None) != (self.allreduce_bus_bytes_per_s is None):
            raise ValueError("allreduce_latency_s and allreduce_bus_bytes_per_s come together (a measured "
                             f"all-reduce); got {self.allreduce_latency_s!r} and {self.allreduce_bus_bytes_per_s!r}")
        if self.allreduce_latency_s is not None:
            _check_float_field(self, "allreduce_latency_s", allow_zero=True)
            _check_float_field(self, "allreduce_bus_bytes_per_s")
            positive_float("allreduce_bus_bytes_per_s", self.allreduce_bus_bytes_per_s, minimum=1.0)
            if not self.allreduce_source.strip():
                raise ValueError(f"allreduce_source: a measured all-reduce of {self.name!r} needs its source")
        if self.reported_memory_bytes is not None:
            _check_float_field(self, "reported_memory_bytes")
            positive_float("reported_memory_bytes", self.reported_memory_bytes, minimum=1.0)

    def peak(self, dtype: str = "bf16") -> float:
        """Dense peak FLOP/s of matrix products in `dtype`."""
        if dtype not in self.peak_flops_per_s:
            choice("dtype", dtype, DTYPES)
            raise ValueError(
                f"dtype {dtype!r} has no peak on accelerator {self.name!r}; allowed: "
                f"{', '.join(self.peak_flops_per_s)}")
        return self.peak_flops_per_s[dtype]


@dataclass(frozen=True)
class Precision:
    """Number formats per tensor class. `compute` is the format the matrix units run in
    (defaults to the activations' format: weight-only int8/int4 is dequantised to it).
    `checkpoint`: the weights as a quantized checkpoint stores them (core.quantization.Quantization:
    each part in its own format, scales included; `weights` then names its quantized format); None:
    every parameter in `weights`."""

    weights: str = "bf16"
    activations: str = "bf16"
    kv: str = "bf16"
    compute: str | None = None
    checkpoint: object = None

    def __post_init__(self):
        for name in ("weights", "activations", "kv"):
            choice(f"{name} dtype", getattr(self, name), DTYPES)
        if self.compute is not None:
            choice("compute dtype", self.compute, DTYPES)
        if self.checkpoint is not None and not isinstance(self.checkpoint, Quantization):
            raise ValueError(f"checkpoint must be a core.quantization.Quantization or None; got {_short(self.checkpoint)}")

    @property
    def compute_dtype(self) -> str:
        return self.compute or self.activations


BF16 = Precision()


def as_precision(precision) -> Precision:
    """Check that `precision` is a Precision. A bare dtype string is refused: which tensors it
    would apply to is ambiguous (Precision(...) itself rejects unknown dtypes with a suggestion)."""
    if not isinstance(precision, Precision):
        raise ValueError(
            f"precision must be a Precision, e.g. Precision(weights='int8', kv='int8'); "
            f"got {precision!r}")
    return precision


# -- the core takes objects: one clear error at the edge ------------------------------------------
# The library's core (costs, memory, roofline, latency, parallel, context, memory_headroom, serving's engine
# and step times, measure's internals) computes with ModelConfig / Accelerator / Precision objects
# only; names are resolved once, at the edges (the CLIs, reader.what_if, the panels, the claims
# registry, the exercises' variant builders) with get_model / get_accelerator / Precision(...).

_RESOLVERS = {
    ModelConfig: "resolve names with inferlab.core.specs.get_model",
    Accelerator: "resolve names with inferlab.core.specs.get_accelerator",
    Precision: "build one with inferlab.core.specs.Precision(weights=..., kv=...)",
}


def function_label(module: str, qualname: str) -> str:
    """'costs.prefill_costs' for inferlab.core.costs.prefill_costs: the name a reader calls the function by
    (the layer packages core, base and notebook are folders, not part of it)."""
    module = module.removeprefix("inferlab.")
    if module.split(".")[0] in ("core", "base", "notebook") and "." in module:
        module = module.split(".", 1)[1]
    return f"{module}.{qualname}"


def function_name(frame) -> str:
    """function_label of the function running in `frame`."""
    return function_label(frame.f_globals.get("__name__", "?"), frame.f_code.co_qualname)


def wrong_type(label: str, param: str, value, cls) -> TypeError:
    """The TypeError for a `value` given where a `cls` object belongs, naming the function, the
    parameter and the resolver (or constructor) to call."""
    return TypeError(f"{label}({param}=...): expected {cls.__name__}, "
                     f"got {type(value).__name__} {_short(value)}; {_RESOLVERS[cls]}")


def _expect(value, cls, param: str, depth: int):
    if isinstance(value, cls):
        return value
    raise wrong_type(function_name(sys._getframe(depth)), param, value, cls)  # the function handed it


def check_model(model, param: str = "model") -> ModelConfig:
    """`model` itself when it is a ModelConfig; otherwise a TypeError naming the calling function,
    the parameter and the resolver (get_model). The core's guard: it never resolves a name."""
    return _expect(model, ModelConfig, param, 2)


def check_accelerator(accelerator, param: str = "accelerator") -> Accelerator:
    """`accelerator` itself when it is an Accelerator; otherwise a TypeError naming the calling
    function, the parameter and the resolver (get_accelerator)."""
    return _expect(accelerator, Accelerator, param, 2)


def check_precision(precision, param: str = "precision") -> Precision:
    """`precision` itself when it is a Precision; otherwise a TypeError naming the calling function,
    the parameter and how to build one (a bare dtype string is ambiguous: which tensors?)."""
    return _expect(precision, Precision, param, 2)


def model_variant(model: ModelConfig, n_kv_heads: int | None = None) -> ModelConfig:
    """`model`, or its parameter-preserving GQA variant (`ModelConfig.gqa_variant`): 15.2.2 keeps
    M = 26 GB when it moves Llama-2 13B to 8 KV heads."""
    model = check_model(model)
    return model if n_kv_heads is None else model.gqa_variant(n_kv_heads)


@functools.cache
def _load(kind: str) -> dict:
    with open(data_dir() / f"{kind}.toml", "rb") as fh:
        return tomllib.load(fh)


def list_models() -> list[str]:
    return list(_load("models"))


def list_accelerators() -> list[str]:
    return list(_load("accelerators"))


def accelerator_for_device(device_name: str) -> str | None:
    """The data/accelerators.toml entry whose `device_name_pattern` is found in `device_name` (a
    device name as torch reports it), or None. Two entries matching one name is an error in the data."""
    if not isinstance(device_name, str):
        raise ValueError(f"device_name must be a string (the device's name as torch reports it); got {device_name!r}")
    found = [name for name in list_accelerators()
             if (pattern := get_accelerator(name).device_name_pattern) and re.search(pattern, device_name)]
    if len(found) > 1:
        raise ValueError(f"device name {device_name!r} matches the device_name_pattern of {', '.join(found)} "
                         "in data/accelerators.toml; each device must match one entry")
    return found[0] if found else None


def get_model(name: str | ModelConfig) -> ModelConfig:
    """The named architecture from data/models.toml (a ModelConfig is passed through)."""
    if isinstance(name, ModelConfig):
        return name
    table = _load("models")
    choice("model", name, table)
    return ModelConfig(name=name, **table[name])


def from_hf_config(path, name: str | None = None) -> ModelConfig:
    """The ModelConfig of a Hugging Face config.json on disk (a file or a folder holding one; never
    the hub): Llama, Mistral, Mixtral, Qwen2/3 and their MoE, Gemma 2/3, DeepSeek-V2/V3, gpt-oss,
    Llama 4, GLM-4 MoE, Phi-3/Phi-4 and Kimi-K2 (`hf_config.FAMILIES`). A bad config is one ValueError
    naming the field. Multi-token-prediction layers (`num_nextn_predict_layers`) are not counted and are
    named in `not_counted` with their parameters: one decoder layer (MoE where the model has experts),
    the 2d x d projection and three norms of d each (their copies of the embedding and head aside)."""
    from dataclasses import replace

    from inferlab.core.hf_config import hf_fields
    fields = hf_fields(path, name)
    mtp = fields.pop("_mtp_layers", 0)
    model = ModelConfig(**fields)
    if mtp:   # DeepSeek-V3 / GLM-4.5: the next-token-prediction module beside the counted layers
        layer = (model.attention_params_per_layer + model.norms_per_layer * model.d_model
                 + (model.moe_params_per_layer if model.is_moe else model.mlp_params_per_layer))
        per = layer + 2 * model.d_model * model.d_model + 3 * model.d_model   # + eh_proj (2d x d), enorm, hnorm, head norm
        model = replace(model, not_counted=model.not_counted + ((f"multi-token prediction layers ({mtp})", mtp * per),))
    return model


def resolve_model(name_or_path) -> ModelConfig:
    """A ModelConfig from a registered name (data/models.toml), the name of a config shipped in
    data/hf-configs (`list_hf_configs`), or a path to a Hugging Face config.json (or a folder holding
    one): what `--model` and the What-if cells accept."""
    if isinstance(name_or_path, ModelConfig):
        return name_or_path
    text = str(name_or_path)
    if text in _load("models"):
        return get_model(text)
    if text in list_hf_configs():
        return from_hf_config(data_dir() / "hf-configs" / text, name=text)
    if "/" in text or text.endswith(".json") or (text.strip() and Path(text).exists()):
        if not Path(text).exists():
            raise ValueError(f"model {text!r}: no such file or folder; it must be a registered or shipped model "
                             f"name ({', '.join([*_load('models'), *list_hf_configs()])}) or a path to a Hugging "
                             "Face config.json or a folder holding one")
        return from_hf_config(text)
    choice("model", text, [*_load("models"), *list_hf_configs()])
    return get_model(text)


def list_hf_configs() -> list[str]:
    """The Hugging Face configs shipped in data/hf-configs (each a folder holding a config.json),
    which `resolve_model` (so --model and the What-if cells) also takes by folder name."""
    root = data_dir() / "hf-configs"
    return sorted(p.parent.name for p in root.glob("*/config.json")) if root.is_dir() else []


def book_scenario() -> tuple[ModelConfig, Accelerator]:
    """The chapter's worked scenario as objects: Llama-2 13B as the book counts it
    (`llama-2-13b-book`) on one H100 SXM. The default of core functions that run a scenario
    (`serving.simulate`), so that a default is an object, never a name."""
    return get_model("llama-2-13b-book"), get_accelerator("h100-sxm")


def get_accelerator(name: str | Accelerator) -> Accelerator:
    """The named accelerator from data/accelerators.toml (an Accelerator is passed through)."""
    if isinstance(name, Accelerator):
        return name
    table = _load("accelerators")
    choice("accelerator", name, table)
    return Accelerator(name=name, **table[name])

"""Model architectures, accelerators and precisions: frozen dataclasses loaded from `data/`.

Every accelerator number is dense (no structured sparsity) and carries its source.
"""
from __future__ import annotations

import functools
import os
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from inferlab.units import DTYPES
from inferlab.input_checks import _short, choice, positive_float, positive_int


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
    path = Path(env) if env else Path(__file__).resolve().parents[2] / "data"
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
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"n_kv_heads must divide n_heads; got n_heads={self.n_heads}, "
                f"n_kv_heads={self.n_kv_heads} (allowed: a divisor of {self.n_heads})")

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
        if self.n_kv_heads == self.n_heads:
            return "MHA"
        return "MQA" if self.n_kv_heads == 1 else "GQA"

    @property
    def n_mlp_matrices(self) -> int:
        return 3 if self.gated_mlp else 2

    # Parameter counts -------------------------------------------------------------------------
    @property
    def attention_params_per_layer(self) -> int:
        """W_q, W_o: d x (n_heads*head_dim); W_k, W_v: d x (n_kv_heads*head_dim)."""
        return 2 * self.d_model * self.q_dim + 2 * self.d_model * self.kv_dim

    @property
    def mlp_params_per_layer(self) -> int:
        """(3 if gated else 2) matrices of d x d_ff."""
        return self.n_mlp_matrices * self.d_model * self.d_ff

    @property
    def params_per_layer(self) -> int:
        """Attention + MLP matrices + two RMSNorm weight vectors."""
        return self.attention_params_per_layer + self.mlp_params_per_layer + 2 * self.d_model

    @property
    def embedding_params(self) -> int:
        """Input embedding V x d, plus the LM head V x d unless tied."""
        return self.vocab_size * self.d_model * (1 if self.tied_embeddings else 2)

    @property
    def n_params(self) -> int:
        """Exact parameter count: L * per-layer + embeddings (+ head) + final norm."""
        return self.n_layers * self.params_per_layer + self.embedding_params + self.d_model

    @property
    def n_matmul_params(self) -> int:
        """Parameters that take part in a matrix product per token (everything but the
        embedding lookup and the norms): the P of the 2*P FLOPs-per-token rule."""
        head = self.vocab_size * self.d_model
        return self.n_layers * (self.attention_params_per_layer + self.mlp_params_per_layer) + head

    def gqa_variant(self, n_kv_heads: int) -> "ModelConfig":
        """The same model with `n_kv_heads` KV heads at (almost) the same parameter count: the K and
        V projection weights saved widen the MLP, as Llama-3 does, so only the KV cache changes.
        d_ff grows by round(2*d*(kv_old - kv_new)*head_dim / (n_mlp_matrices*d))."""
        positive_int("n_kv_heads", n_kv_heads)
        n_kv_heads = int(n_kv_heads)
        if n_kv_heads == self.n_kv_heads:
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
        for name in ("description", "source", "reported_memory_source", "allreduce_source"):
            _check_str_field(self, name)
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
    (defaults to the activations' format: weight-only int8/int4 is dequantised to it)."""

    weights: str = "bf16"
    activations: str = "bf16"
    kv: str = "bf16"
    compute: str | None = None

    def __post_init__(self):
        for name in ("weights", "activations", "kv"):
            choice(f"{name} dtype", getattr(self, name), DTYPES)
        if self.compute is not None:
            choice("compute dtype", self.compute, DTYPES)

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
    ModelConfig: "resolve names with inferlab.specs.get_model",
    Accelerator: "resolve names with inferlab.specs.get_accelerator",
    Precision: "build one with inferlab.specs.Precision(weights=..., kv=...)",
}


def _expect(value, cls, param: str, depth: int):
    if isinstance(value, cls):
        return value
    frame = sys._getframe(depth)  # the core function that was handed the wrong type
    module = frame.f_globals.get("__name__", "?").removeprefix("inferlab.")
    raise TypeError(f"{module}.{frame.f_code.co_qualname}({param}=...): expected {cls.__name__}, "
                    f"got {type(value).__name__} {_short(value)}; {_RESOLVERS[cls]}")


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


def get_model(name: str | ModelConfig) -> ModelConfig:
    """The named architecture from data/models.toml (a ModelConfig is passed through)."""
    if isinstance(name, ModelConfig):
        return name
    table = _load("models")
    choice("model", name, table)
    return ModelConfig(name=name, **table[name])


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

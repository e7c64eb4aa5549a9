"""Tensor parallelism over K devices (Megatron-style): heads, MLP columns and vocabulary split.

Each device holds n_heads/K query heads, max(n_kv_heads/K, 1) KV heads (KV heads are replicated
when K exceeds them), d_ff/K MLP columns and ceil(V/K) vocabulary rows, so per-device weights and
KV cache shrink about K-fold. Each layer then needs two all-reduces of the T x d activations
(after the attention output projection and after the MLP down projection).
"""
from __future__ import annotations

import numpy as np

from inferlab.core.boundary import enters
from inferlab.core.specs import BF16, Accelerator, ModelConfig, Precision
from inferlab.base.units import bytes_per_element
from inferlab.base.input_checks import positive_float, positive_int

ALLREDUCES_PER_LAYER = 2

# Start-up latency of one all-reduce (seconds per call) for an accelerator whose spec has no measured
# all-reduce: the peer inference calculators assume 5-10 us per call. Where a node was measured (the
# H100 and A100 NVSwitch nodes of Vidur's published profiles, data/accelerators.toml) the spec's
# fitted latency and bus bandwidth are used instead: 22.6 us and 324 GB/s on the H100 node, so a
# decode step's kilobyte messages cost 3-5x what this constant with the datasheet's 450 GB/s said.
# Pass 0 to reproduce the book's idealisation (communication costs bandwidth only).
DEFAULT_ALLREDUCE_LATENCY_S = 8e-6


@enters(model=ModelConfig)
def check_tp(model: ModelConfig, tp: int) -> int:
    """Check that `tp` devices can split `model` evenly; return tp as an int."""
    positive_int("tp", tp)
    tp = int(tp)
    if model.n_heads % tp or model.d_ff % tp:
        raise ValueError(
            f"tp must divide n_heads={model.n_heads} and d_ff={model.d_ff} of {model.name}; got tp={tp}")
    for name in ("expert_d_ff", "shared_d_ff"):
        size = getattr(model, name)
        if size and size % tp:
            raise ValueError(f"tp must divide {name}={size} of {model.name}; got tp={tp}")
    kv = model.n_kv_heads
    if (kv >= tp and kv % tp) or (kv < tp and tp % kv):
        raise ValueError(
            f"tp={tp} and n_kv_heads={kv} of {model.name}: one must be a multiple of the other")
    return tp


@enters(model=ModelConfig)
def tp_shard(model: ModelConfig, tp: int) -> ModelConfig:
    """The slice of `model` that one of `tp` devices holds and computes."""
    tp = check_tp(model, tp)
    if tp == 1:
        return model
    return model.with_(
        name=f"{model.name}/tp{tp}",
        n_heads=model.n_heads // tp,
        n_kv_heads=max(model.n_kv_heads // tp, 1),
        d_ff=model.d_ff // tp,
        vocab_size=-(-model.vocab_size // tp),
        # experts split their columns like the MLP (expert parallelism is not modelled); MLA's latent
        # is not split: every device keeps the whole latent cache
        **({"expert_d_ff": model.expert_d_ff // tp,
            "shared_d_ff": (model.shared_d_ff or 0) // tp or None} if model.is_moe else {}),
    )


@enters(accelerator=Accelerator)
def allreduce_latency_s(accelerator) -> float:
    """The default start-up latency of one all-reduce on `accelerator`: its node's measured one where
    the spec carries it (Accelerator.allreduce_latency_s), else DEFAULT_ALLREDUCE_LATENCY_S."""
    acc = accelerator
    return DEFAULT_ALLREDUCE_LATENCY_S if acc.allreduce_latency_s is None else acc.allreduce_latency_s


@enters(accelerator=Accelerator)
def allreduce_bus_bytes_per_s(accelerator) -> float:
    """The bandwidth a ring all-reduce moves its 2(K-1)/K share at: the node's measured bus bandwidth
    where the spec carries it (Accelerator.allreduce_bus_bytes_per_s), else the interconnect's datasheet
    bandwidth."""
    acc = accelerator
    return acc.interconnect_bytes_per_s if acc.allreduce_bus_bytes_per_s is None else acc.allreduce_bus_bytes_per_s


@enters(accelerator=Accelerator)
def allreduce_time_s(message_bytes, tp: int, accelerator, latency_s: float | None = None):
    """Ring all-reduce: each device sends and receives 2(K-1)/K of the message over its link.
    time = 2(K-1)/K * bytes / bus bandwidth + latency_s (0 for K = 1). The bus bandwidth and the
    default latency_s (None) are the accelerator's measured all-reduce where its spec has one (H100
    and A100 NVSwitch nodes, fitted on Vidur's published profiles), else the interconnect's datasheet
    bandwidth and DEFAULT_ALLREDUCE_LATENCY_S; latency_s 0 drops the start-up cost (the book's
    idealisation)."""
    positive_int("tp", tp)
    positive_float("message_bytes", message_bytes, allow_zero=True)
    acc = accelerator
    latency_s = allreduce_latency_s(acc) if latency_s is None else latency_s
    positive_float("latency_s", latency_s, allow_zero=True)
    if tp == 1:
        return 0.0 * np.asarray(message_bytes, dtype=float)
    bus = allreduce_bus_bytes_per_s(acc)
    if bus <= 0:
        raise ValueError(f"accelerator {acc.name!r} has no interconnect bandwidth for tp={tp}")
    return 2 * (tp - 1) / tp * np.asarray(message_bytes, dtype=float) / bus + latency_s


@enters(accelerator=Accelerator, model=ModelConfig, precision=Precision)
def tp_communication_time_s(model, tokens, tp: int, accelerator, precision: Precision = BF16,
                            latency_s: float | None = None):
    """All-reduce time of one forward pass over `tokens` tokens: 2 per layer of tokens*d activations."""
    positive_int("tokens", tokens)
    message = np.asarray(tokens, dtype=float) * model.d_model * bytes_per_element(precision.activations)
    return model.n_layers * ALLREDUCES_PER_LAYER * allreduce_time_s(message, tp, accelerator, latency_s)

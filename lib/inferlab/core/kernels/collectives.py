"""All-reduce and send/recv time against message size, fitted on Vidur's published collective
profiles (`data/vidur/network.csv`; NCCL on H100 and A100 nodes).

    t = latency_s + message_bytes / algorithm_bytes_per_s     (per accelerator, node kind, GPU count)

fitted by relative least squares over every profiled size (2 kB-64 MB; small messages are noisy).
latency_s is what a decode-sized message (kilobytes) pays per call; algorithm_bytes_per_s is the
message size over the time (NCCL's "algbw"); a ring's bus bandwidth is 2 (K - 1) / K of it.
A part carried from a profiled one (`kernels.measured`) keeps the latency; its algorithm bandwidth
scales by its NVLink bandwidth over the profiled part's.
Node kinds: 'nvswitch' (every GPU reaches every other at full NVLink bandwidth, a DGX/HGX node) and
'pairwise_nvlink' (GPUs linked in pairs). Only the GPU counts profiled are answered.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import numpy as np

from inferlab.base.input_checks import choice, finite_result, positive_float, positive_int
from inferlab.core.kernels.fit import fit_affine_relative
from inferlab.core.kernels.measured import check_measured, link_ratio, profiled_name, source_accelerator
from inferlab.core.kernels.profiles import collective_rows, profiled_collectives

NODES = ("nvswitch", "pairwise_nvlink")


@dataclass(frozen=True)
class CollectiveFit:
    """t = latency_s + bytes / algorithm_bytes_per_s for one collective, node kind and GPU count."""

    accelerator: str
    collective: str
    node: str
    n_gpus: int
    latency_s: float
    algorithm_bytes_per_s: float

    @property
    def bus_bytes_per_s(self) -> float:
        """The ring's bus bandwidth, 2 (K - 1) / K x algbw for an all-reduce (what nccl-tests prints)."""
        k = self.n_gpus
        return self.algorithm_bytes_per_s * (2 * (k - 1) / k if self.collective == "all_reduce" else 1.0)

    def time_s(self, message_bytes):
        return self.latency_s + np.asarray(message_bytes, dtype=float) / self.algorithm_bytes_per_s


@functools.cache
def collective_fit(accelerator_name: str, collective: str, node: str, n_gpus: int) -> CollectiveFit:
    """Fit one profiled curve (module doc); a GPU count or node kind not profiled: one line naming those that are."""
    available = profiled_collectives(accelerator_name).get((collective, node), ())
    if n_gpus not in available:
        known = {key: v for key, v in profiled_collectives(accelerator_name).items() if key[0] == collective}
        listing = "; ".join(f"{nd}: {', '.join(map(str, v))} GPUs" for (_, nd), v in sorted(known.items()))
        raise ValueError(f"n_gpus: no profiled {collective} of {n_gpus} GPUs on a {node} {accelerator_name} node "
                         f"(profiled: {listing})")
    size, t = collective_rows(accelerator_name, collective, node, n_gpus)
    a, b = fit_affine_relative(size, t)
    return CollectiveFit(accelerator_name, collective, node, n_gpus, a, 1.0 / b if b > 0 else float("inf"))


def allreduce_time_s(accelerator, message_bytes, n_gpus: int, node: str = "nvswitch"):
    """Seconds of one all-reduce of `message_bytes` over `n_gpus` GPUs of one node of kind `node`
    (NODES), on `accelerator` (one with profiles). n_gpus 1: 0 (no communication)."""
    acc = check_measured(accelerator)
    positive_float("message_bytes", message_bytes, allow_zero=True)
    positive_int("n_gpus", n_gpus)
    choice("node", node, NODES)
    if int(n_gpus) == 1:
        return 0.0 * np.asarray(message_bytes, dtype=float) if np.ndim(message_bytes) else 0.0
    fit = collective_fit(profiled_name(acc), "all_reduce", node, int(n_gpus))
    if profiled_name(acc) != acc.name:  # carried from a profiled part: the bandwidth by the NVLink ratio
        fit = dataclasses.replace(fit, accelerator=acc.name, algorithm_bytes_per_s=fit.algorithm_bytes_per_s
                                  * link_ratio(acc, source_accelerator(acc)))
    out = fit.time_s(message_bytes)
    out = np.where(np.asarray(message_bytes) > 0, out, 0.0)
    finite_result("allreduce_time_s", out, message_bytes=message_bytes)
    return out if np.ndim(out) else float(out)


def send_recv_time_s(accelerator, message_bytes, across_nodes: bool = False):
    """Seconds to send `message_bytes` from one GPU to another (a pipeline stage's activations, a KV
    cache moved between pools): inside an NVSwitch node, or between two nodes (across_nodes)."""
    acc = check_measured(accelerator)
    positive_float("message_bytes", message_bytes, allow_zero=True)
    node = "across_nodes" if across_nodes else "nvswitch"
    fit = collective_fit(profiled_name(acc), "send_recv", node, 2)
    if profiled_name(acc) != acc.name and node == "nvswitch":  # inside a node: NVLink, carried by its ratio
        fit = dataclasses.replace(fit, accelerator=acc.name, algorithm_bytes_per_s=fit.algorithm_bytes_per_s
                                  * link_ratio(acc, source_accelerator(acc)))
    out = fit.time_s(message_bytes)
    out = np.where(np.asarray(message_bytes) > 0, out, 0.0)
    return out if np.ndim(out) else float(out)


@dataclass(frozen=True)
class RingFit:
    """One (latency, bus bandwidth) pair for every GPU count of a node: the ring all-reduce formula
    t = latency_s + 2 (K - 1) / K * bytes / bus_bytes_per_s fitted on all the node's profiled counts."""

    accelerator: str
    node: str
    latency_s: float
    bus_bytes_per_s: float
    n_gpus: tuple


@functools.cache
def ring_fit(accelerator_name: str, node: str = "nvswitch") -> RingFit:
    """The ring formula's two numbers (RingFit) by relative least squares over every profiled
    all-reduce of `node` on `accelerator_name`: what `parallel.allreduce_time_s` uses by default
    for an accelerator whose spec carries them (data/accelerators.toml, tested against this fit)."""
    counts = profiled_collectives(accelerator_name).get(("all_reduce", node), ())
    ring, measured = [], []
    for k in counts:
        size, t = collective_rows(accelerator_name, "all_reduce", node, k)
        ring.append(2 * (k - 1) / k * size)
        measured.append(t)
    latency_s, per_byte_s = fit_affine_relative(np.concatenate(ring), np.concatenate(measured))
    return RingFit(accelerator_name, node, latency_s, 1.0 / per_byte_s, tuple(counts))

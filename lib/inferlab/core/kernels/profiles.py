"""The vendored Vidur profiles (`data/vidur/`, MIT), loaded as numpy columns in SI units.

One loader per file; each returns plain arrays (seconds, bytes) and caches them. The accelerator
names are the library's (`h100-sxm`; the profiles' unnamed A100 is taken as `a100-80gb`).
"""
from __future__ import annotations

import csv
import functools
from dataclasses import dataclass

import numpy as np

from inferlab.core.specs import data_dir

# The four linear operators of a transformer block as the profiles name them.
LINEAR_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
# The small kernels: profile column -> the library's kind (two columns are layer norms).
SMALL_OPS = {"input_layernorm": "norm", "post_attention_layernorm": "norm", "attn_rope": "rope",
             "mlp_act": "act", "add": "add", "emb": "embedding"}
NODE_KINDS = {"nvswitch": "dgx", "pairwise_nvlink": "pairwise_nvlink"}
_PROFILE_PREFIX = {"h100-sxm": "h100", "a100-80gb": "a100"}


@dataclass(frozen=True)
class LinearRows:
    """Profiled linear products: one row per (model, operator, tokens, TP shard)."""

    model: np.ndarray
    op: np.ndarray
    tokens: np.ndarray
    k: np.ndarray
    n: np.ndarray
    time_s: np.ndarray


@dataclass(frozen=True)
class SmallRows:
    """Profiled small kernels: one row per (model, kind, tokens, TP shard); width = elements per token."""

    model: np.ndarray
    kind: np.ndarray
    tokens: np.ndarray
    width: np.ndarray
    time_s: np.ndarray


def _read(name: str) -> list[dict]:
    with (data_dir() / "vidur" / name).open() as fh:
        return list(csv.DictReader(fh))


def shapes(row: dict) -> dict:
    """(tokens, k, n) of each linear operator and the width of each small kernel, for one profile row
    (a TP-k row is one shard: heads, KV heads and MLP columns divided by k)."""
    h, kv, d, f = (int(row[c]) for c in ("n_head", "n_kv_head", "n_embd", "n_expanded_embd"))
    tp, t = int(row["num_tensor_parallel_workers"]), int(row["num_tokens"])
    hd = d // h
    kv_shard = max(kv // tp, 1)
    up = (2 if row["use_gated_mlp"] == "True" else 1) * f // tp
    linear = {"attn_pre_proj": (t, d, (h // tp + 2 * kv_shard) * hd), "attn_post_proj": (t, h // tp * hd, d),
              "mlp_up_proj": (t, d, up), "mlp_down_proj": (t, f // tp, d)}
    width = {"input_layernorm": d, "post_attention_layernorm": d, "attn_rope": (h // tp + kv_shard) * hd,
             "mlp_act": f // tp, "add": d, "emb": d}
    return {"linear": linear, "width": width, "tokens": t}


@functools.cache
def linear_rows(accelerator_name: str) -> LinearRows:
    """The linear products profiled on `accelerator_name`."""
    cols = {c: [] for c in ("model", "op", "tokens", "k", "n", "time_s")}
    for row in _read("compute.csv"):
        if row["accelerator"] != accelerator_name:
            continue
        for op, (t, k, n) in shapes(row)["linear"].items():
            for c, v in zip(cols, (row["model"], op, t, k, n, float(row[f"{op}_ms"]) * 1e-3)):
                cols[c].append(v)
    return LinearRows(**{c: np.array(v) if c in ("model", "op") else np.array(v, dtype=float)
                         for c, v in cols.items()})


@functools.cache
def small_rows(accelerator_name: str) -> SmallRows:
    """The small kernels profiled on `accelerator_name`."""
    cols = {c: [] for c in ("model", "kind", "tokens", "width", "time_s")}
    for row in _read("compute.csv"):
        if row["accelerator"] != accelerator_name:
            continue
        sh = shapes(row)
        for op, kind in SMALL_OPS.items():
            for c, v in zip(cols, (row["model"], kind, sh["tokens"], sh["width"][op], float(row[f"{op}_ms"]) * 1e-3)):
                cols[c].append(v)
    return SmallRows(**{c: np.array(v) if c in ("model", "kind") else np.array(v, dtype=float)
                        for c, v in cols.items()})


@functools.cache
def collective_rows(accelerator_name: str, collective: str, node: str, n_gpus: int) -> tuple:
    """(message bytes, seconds) of one collective on a node of `node` kind with `n_gpus` GPUs taking
    part (send/recv: n_gpus 2, `node` 'nvswitch' inside a node, 'across_nodes' between two)."""
    prefix = _PROFILE_PREFIX[accelerator_name]
    if collective == "send_recv":
        folder, per_node = f"{prefix}_dgx", (1 if node == "across_nodes" else 2)
    else:
        folder, per_node = f"{prefix}_{NODE_KINDS[node]}", n_gpus
    size, time_s = [], []
    for row in _read("network.csv"):
        if (row["node"] == folder and row["collective"] == collective and int(row["num_workers"]) == n_gpus
                and int(row["devices_per_node"]) == per_node):
            size.append(float(row["size_bytes"]))
            time_s.append(float(row["median_ms"]) * 1e-3)
    return np.array(size), np.array(time_s)


def profiled_collectives(accelerator_name: str) -> dict:
    """{(collective, node): sorted GPU counts} available for `accelerator_name`."""
    prefix = _PROFILE_PREFIX[accelerator_name]
    found: dict = {}
    for row in _read("network.csv"):
        folder = row["node"]
        if not folder.startswith(prefix + "_"):
            continue
        kind = folder.removeprefix(prefix + "_")
        if row["collective"] == "send_recv":
            node = "across_nodes" if row["devices_per_node"] == "1" else "nvswitch"
        else:
            node = {v: k for k, v in NODE_KINDS.items()}[kind]
        found.setdefault((row["collective"], node), set()).add(int(row["num_workers"]))
    return {key: tuple(sorted(v)) for key, v in found.items()}


@functools.cache
def cpu_overhead_rows() -> dict:
    """{(model, tp): (batch sizes, seconds per step)} of the A100 scheduler profile, the step's CPU
    time taken as schedule + sampler + input preparation + output processing (medians)."""
    out: dict = {}
    for row in _read("cpu_overheads.csv"):
        key = (row["model"], int(row["tensor_parallel_degree"]))
        total_ms = sum(float(row[c]) for c in row if c.endswith("_median_ms"))
        out.setdefault(key, []).append((int(row["batch_size"]), total_ms * 1e-3))
    return {k: (np.array([b for b, _ in sorted(v)], dtype=float), np.array([t for _, t in sorted(v)]))
            for k, v in out.items()}


@dataclass(frozen=True)
class GroupedRows:
    """Published FP8 products (data/deepgemm/): one row per shape; groups = 1 for a dense product."""

    layout: np.ndarray
    groups: np.ndarray
    rows_per_group: np.ndarray
    k: np.ndarray
    n: np.ndarray
    time_s: np.ndarray


@functools.cache
def fp8_rows() -> GroupedRows:
    """DeepGEMM's FP8 products on an H800 SXM5, time recovered from the printed TFLOPS:
    t = 2 M N K groups / (TFLOPS 1e12)."""
    with (data_dir() / "deepgemm" / "fp8_gemm.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    g, m, n, k, tflops = (np.array([float(r[c]) for r in rows]) for c in ("groups", "m_per_group", "n", "k", "tflops"))
    return GroupedRows(np.array([r["layout"] for r in rows]), g, m, k, n, 2.0 * m * n * k * g / (tflops * 1e12))

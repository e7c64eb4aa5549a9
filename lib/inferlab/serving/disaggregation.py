"""Disaggregated prefill and decode: a prefill pool and a decode pool, the KV cache sent between them.

Each request is prefilled in the prefill pool (its own replicas, tensor parallelism, accelerator,
precision and policy), which samples its first token; its prompt's KV cache then crosses a link
to a decode replica, which admits it once the cache has arrived and decodes the rest.

    transfer_time_s = latency_s + S * kv_bytes_per_token(model, precision, tp) / link_bytes_per_s

Assumptions, one a line:
- each of the prefill replica's tp devices sends its KV shard over a link of its own, in parallel
  (kv_bytes_per_token per device, `memory.kv_cache_bytes_per_token(model, precision, tp)`);
- by default the cache moves after the prefill's last step; one link per prefill replica carries
  one transfer at a time (first come, first sent), latency paid by each;
- streaming (`streaming=True`): layer l's cache is sent as soon as layer l is computed, the layers
  taking equal shares of the prefill's span: arrival = latency + max(end + x / L, start + (end - start) / L + x),
  x = S * bytes per token / bandwidth (the last layer's share after the end, or the link's whole
  time after the first layer), with no queueing between transfers;
- the first token is delivered when the decode pool admits the request (after its cache arrived),
  as behind vLLM's disaggregated-prefill proxy, which streams the decode instance's tokens; a
  one-token request ends in the prefill pool (no transfer);
- a decode replica admits arrived caches in arrival order before its policy plans the step, while
  its KV blocks (the prompt's) and max_num_seqs allow; a request it preempts recomputes its
  prompt there (vLLM's recompute).
"""
from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass, field, replace

import numpy as np

from inferlab.core.memory import kv_cache_bytes_per_token
from inferlab.serving.engine import Replica, Req
from inferlab.serving.kv import kv_capacity_blocks
from inferlab.serving.metrics import SimResult
from inferlab.serving.policies import ChunkedPrefill, PrefillFirst
from inferlab.serving.simulate import ROUTERS, _result, serve
from inferlab.serving.steptime import RooflineStepTime
from inferlab.serving.workload import Workload
from inferlab.core.specs import BF16, Accelerator, Precision, book_scenario, check_accelerator, check_model, \
    check_precision, data_dir
from inferlab.base.input_checks import choice, fraction, positive_float, positive_int

LINKS = ("nvlink", "infiniband")
BITS_PER_BYTE = 8


@functools.cache
def _links() -> dict:
    with open(data_dir() / "kv_links.toml", "rb") as fh:
        return tomllib.load(fh)


@dataclass(frozen=True)
class KVLink:
    """The link a KV cache crosses: bytes per second one way, seconds before the first byte arrives."""

    link_bytes_per_s: float
    latency_s: float = 0.0

    def __post_init__(self):
        positive_float("kv link bandwidth (bytes/s)", self.link_bytes_per_s)
        positive_float("kv link latency (s)", self.latency_s, allow_zero=True)

    @classmethod
    def from_gbps(cls, gbps: float, latency_us: float = 0.0) -> "KVLink":
        """From the CLI's units: Gbit/s and microseconds (one-line errors name them)."""
        positive_float("--kv-link-gbps (the KV link's bandwidth, Gbit/s)", gbps)
        positive_float("--kv-link-latency-us (the KV link's latency, microseconds)", latency_us, allow_zero=True)
        return cls(gbps * 1e9 / BITS_PER_BYTE, latency_us * 1e-6)

    @property
    def gbps(self) -> float:
        return self.link_bytes_per_s * BITS_PER_BYTE / 1e9


def link(name: str) -> KVLink:
    """A sourced default link of data/kv_links.toml: 'nvlink' (inside a node) or 'infiniband' (NDR, between nodes)."""
    choice("kv link", name, LINKS)
    row = _links()[name]
    return KVLink.from_gbps(row["gbps"], row["latency_us"])


@dataclass(frozen=True)
class Pool:
    """One pool of a disaggregated deployment: replicas, tensor parallelism, accelerator (None: the
    book's scenario's), precision and scheduling policy (an iteration-level one)."""

    replicas: int = 1
    tp: int = 1
    accelerator: Accelerator | None = None
    precision: Precision = BF16
    policy: object = field(default_factory=ChunkedPrefill)

    def __post_init__(self):
        positive_int("pool replicas", self.replicas)
        positive_int("pool tp", self.tp)
        if self.accelerator is not None:
            check_accelerator(self.accelerator)
        check_precision(self.precision)
        if not hasattr(self.policy, "plan_step"):
            raise ValueError(f"a pool's policy must be a serving.policies class; got {self.policy!r}")
        self.policy.check_runs_with("a disaggregated pool")


def transfer_time_s(model, precision: Precision, prompt_tokens, kv_link: KVLink, tp: int = 1):
    """latency + S * KV bytes per token (per device, tp-sharded) / link bandwidth (module doc)."""
    per_token = kv_cache_bytes_per_token(check_model(model), precision, tp)
    return kv_link.latency_s + np.asarray(prompt_tokens, dtype=float) * per_token / kv_link.link_bytes_per_s


def _engines(model, acc, pool: Pool, block_tokens, memory_utilization, watermark, mfu, mbu, efficiency, offset=0):
    acc = pool.accelerator or acc
    blocks = kv_capacity_blocks(model, acc, pool.precision, pool.tp, block_tokens, memory_utilization)
    st = RooflineStepTime(model, acc, pool.precision, tp=pool.tp, mfu=mfu, mbu=mbu, efficiency=efficiency)
    return [Replica(st, pool.policy, blocks, block_tokens, int(watermark * blocks), offset + i)
            for i in range(pool.replicas)]


def simulate_disaggregated(workload: Workload, model=None, accelerator: Accelerator | None = None, *,
                           prefill: Pool = Pool(policy=PrefillFirst()), decode: Pool = Pool(),
                           kv_link: KVLink | None = None, streaming: bool = False,
                           router: str = "least-loaded", block_tokens: int = 16,
                           memory_utilization: float = 0.9, watermark: float = 0.01,
                           mfu: float = 1.0, mbu: float = 1.0, efficiency=None) -> SimResult:
    """Run `workload` through a prefill pool and a decode pool (module doc). model, accelerator:
    objects (None: the book's scenario); a pool's own accelerator wins over `accelerator`.
    kv_link: a KVLink (None: `link('infiniband')`). The result is a SimResult as `simulate`'s: its
    traces are the prefill replicas' then the decode replicas', `replica` indexes them so, and
    `kv_arrival_s` holds when each request's cache reached the decode pool (NaN: never sent).
    Reason: `simulate`'s counterpart for two pools, called by keyword from the lab, the CLI and the claims;
    beyond the pools and the link, its options are `simulate`'s own (a server's launch flags, each with a
    working default), kept by the same names so that a run moves between the two unchanged."""
    if not isinstance(workload, Workload):
        raise ValueError(f"workload must be a serving.Workload; got {type(workload).__name__}")
    for name, pool in (("prefill", prefill), ("decode", decode)):
        if not isinstance(pool, Pool):
            raise ValueError(f"{name} must be a serving.disaggregation.Pool; got {pool!r}")
    book_model, book_acc = book_scenario()
    model = book_model if model is None else check_model(model)
    acc = book_acc if accelerator is None else check_accelerator(accelerator)
    kv_link = link("infiniband") if kv_link is None else kv_link
    if not isinstance(kv_link, KVLink):
        raise ValueError(f"kv_link must be a serving.disaggregation.KVLink; got {kv_link!r}")
    if not isinstance(streaming, bool):
        raise ValueError(f"streaming must be True or False; got {streaming!r}")
    choice("router", router, ROUTERS)
    positive_int("block_tokens", block_tokens)
    fraction("memory_utilization", memory_utilization)
    positive_float("watermark", watermark, maximum=0.5, allow_zero=True)
    common = (block_tokens, memory_utilization, watermark, mfu, mbu, efficiency)
    p_engines = _engines(model, acc, prefill, *common)
    d_engines = _engines(model, acc, decode, *common)

    arrivals = workload.arrival_s.tolist()
    prompts = workload.prompt_tokens.tolist()
    outputs = workload.output_tokens.tolist()
    prio = workload.priority.tolist() if workload.priority is not None else [1] * len(arrivals)
    first = [Req(i, a, p, 1, prio=k) for i, (a, p, k) in enumerate(zip(arrivals, prompts, prio))]
    serve(p_engines, first, router)

    per_token = kv_cache_bytes_per_token(model, prefill.precision, prefill.tp)
    n_layers = model.n_layers
    link_free = [0.0] * len(p_engines)
    arrive = [float("nan")] * len(first)
    for r in sorted(first, key=lambda r: (r.finish if r.finish is not None else float("inf"), r.i)):
        if r.rejected or r.finish is None or outputs[r.i] == 1:
            continue
        x = prompts[r.i] * per_token / kv_link.link_bytes_per_s
        if streaming:
            start, end = r.first_sched, r.finish
            arrive[r.i] = kv_link.latency_s + max(end + x / n_layers, start + (end - start) / n_layers + x)
        else:
            send = max(r.finish, link_free[r.replica])
            link_free[r.replica] = send + x
            arrive[r.i] = send + kv_link.latency_s + x
    second = []
    for i in sorted((i for i in range(len(first)) if np.isfinite(arrive[i])), key=lambda i: (arrive[i], i)):
        r = Req(i, arrive[i], prompts[i], outputs[i], prio=prio[i])
        r.kv_ready = True
        second.append(r)
    if second:
        serve(d_engines, second, router)
    second.sort(key=lambda r: r.i)
    return _merge(workload, first, second, p_engines, d_engines, arrive, _describe(model, acc, prefill, decode, kv_link))


def _describe(model, acc, prefill: Pool, decode: Pool, kv_link: KVLink) -> str:
    """The run's description: the model, each pool's replicas, TP and accelerator, and the KV link."""
    return (f"{model.name} disaggregated: prefill {prefill.replicas} x {prefill.tp} x "
            f"{(prefill.accelerator or acc).name}, decode {decode.replicas} x {decode.tp} x "
            f"{(decode.accelerator or acc).name}, KV link {kv_link.gbps:g} Gbit/s + {kv_link.latency_s * 1e6:g} us")


def _merge(workload, first, second, p_engines, d_engines, arrive, desc: str):
    """One SimResult (described by `desc`): arrival and first scheduling from the prefill pool, tokens from
    the decode pool."""
    n_p = len(p_engines)
    pre = _result(first, p_engines, desc, workload.priority)
    if not second:
        return replace(pre, output_tokens=workload.output_tokens, kv_arrival_s=np.array(arrive, dtype=float))
    dec = _result(second, d_engines, desc, None)
    idx = np.array([r.i for r in second])
    first_token, finish = pre.first_token_s.copy(), pre.finish_s.copy()
    itls = [np.zeros(0) for _ in first]
    replica = pre.replica.copy()
    preempt = pre.preemptions.copy()
    first_token[idx] = dec.first_token_s
    finish[idx] = dec.finish_s
    replica[idx] = dec.replica + n_p
    preempt[idx] += dec.preemptions
    for j, i in enumerate(idx.tolist()):
        itls[i] = dec.itls_s[j]
    return replace(pre, output_tokens=workload.output_tokens, first_token_s=first_token, finish_s=finish,
                   itls_s=itls, replica=replica, preemptions=preempt, traces=pre.traces + dec.traces,
                   kv_arrival_s=np.array(arrive, dtype=float))

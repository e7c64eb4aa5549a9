"""Serving under load: an iteration-level simulator of an LLM server on the library's step time.

workload (arrivals, lengths, priority classes) -> policies (one class each, registered by name in
`policies.POLICIES`: static, continuous, prefill-first, chunked, priority, no-evict; each plans a
step: `plan_step`) -> engine
(one replica: scheduler, paged KV, preemption) -> simulate (replicas, router) -> metrics
(TTFT, ITL, TPOT, E2E, queueing; percentiles, throughput, goodput). `compare` reads a vLLM
`bench serve` result and sets it beside the simulation of the same workload. `speculative` (a draft's
k tokens verified in one target step) and `disaggregation` (prefill and decode pools, the KV cache
sent between them) are options of the same run.

The validation study (`inferlab.study`: live engines on the wall clock, set against this simulator)
is imported from its own modules, never from here, so importing the simulator loads neither the
study nor torch.
"""
from inferlab.serving.kv import blocks_for, kv_capacity_blocks
from inferlab.serving.metrics import SLO, SimResult
from inferlab.serving.disaggregation import KVLink, Pool, simulate_disaggregated
from inferlab.serving.policies import (ChunkedPrefill, ContinuousBatching, NoEviction, PrefillFirst,
                                       PriorityScheduling, StaticBatching, make_policy)
from inferlab.serving.simulate import simulate
from inferlab.serving.speculative import Speculative
from inferlab.serving.steptime import RooflineStepTime
from inferlab.serving.workload import (LengthDist, Workload, burst, load_trace, synthetic, with_priority,
                                       with_shared_prefix)

__all__ = ["SLO", "SimResult", "ChunkedPrefill", "ContinuousBatching", "PrefillFirst", "StaticBatching",
           "make_policy", "simulate", "RooflineStepTime", "LengthDist", "Workload", "burst",
           "load_trace", "synthetic", "with_shared_prefix", "blocks_for", "kv_capacity_blocks",
           "PriorityScheduling", "NoEviction", "with_priority", "Speculative", "KVLink", "Pool", "simulate_disaggregated"]

"""simulate(): a workload through one or more replicas of a model under a scheduling policy.

Each replica is one model instance on `tp` devices (its step time includes the tensor-parallel
all-reduces); a router sends each arriving request to a replica: 'round-robin' in turn, or
'least-loaded', the one with the fewest unfinished requests at that moment (ties: lowest index).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from inferlab.serving.engine import Replica, Req
from inferlab.serving.kv import kv_capacity_blocks
from inferlab.serving.metrics import ReplicaTrace, SimResult
from inferlab.serving.policies import ContinuousBatching
from inferlab.serving.speculative import MTP, Speculative, SpeculativeStepTime, token_times
from inferlab.serving.steptime import RooflineStepTime, check_step_time
from inferlab.serving.workload import Workload
from inferlab.core.specs import BF16, Accelerator, ModelConfig, Precision, book_scenario, check_accelerator, check_model
from inferlab.base.input_checks import choice, fraction, positive_float, positive_int

ROUTERS = ("round-robin", "least-loaded")


def simulate(workload: Workload, model: ModelConfig | None = None, accelerator: Accelerator | None = None,
             policy=ContinuousBatching(), *, precision: Precision = BF16, tp: int = 1,
             replicas: int = 1, router: str = "round-robin", block_tokens: int = 16,
             kv_blocks: int | None = None, memory_utilization: float = 0.9,
             memory_capacity: str = "datasheet", watermark: float = 0.01, mfu: float = 1.0, mbu: float = 1.0,
             step_time=None, prefix_caching: bool = False, efficiency=None,
             step_overhead=None, speculative: Speculative | None = None) -> SimResult:
    """Run `workload` to completion. model, accelerator: objects (`specs.get_model`, `get_accelerator`);
    None for either is the chapter's scenario (`specs.book_scenario`: Llama-2 13B as the book counts it,
    one H100 SXM), so `simulate(workload)` runs. KV blocks per replica: `kv_blocks`, or what fits beside the
    weights (`kv.kv_capacity_blocks`: `memory_utilization` of the "datasheet" or "reported" `memory_capacity`,
    `core.usable_memory`). watermark: fraction of blocks kept free at admission
    (vLLM's 1 %). step_time: a StepTimeModel (`step_time_s(step, t_s)`); default the roofline (`RooflineStepTime`).
    efficiency, step_overhead: the default step time's kernel times and CPU time per step, as
    `deployment.Deployment` takes them (None: the roofline at mfu, mbu; no CPU term).
    prefix_caching: reuse the KV blocks of shared prefixes (`Workload.prefix_id`; see engine.py);
    off, the prefixes are computed in every prefill like any other prompt tokens.
    speculative: a speculative.Speculative (draft tokens k, acceptance alpha, draft model or 'mtp');
    decode steps become verifications yielding E tokens each (serving.speculative). None: plain decoding.
    Reason: the simulator's one entry point, called by keyword from the notebooks, the lab and the CLI;
    its options are a server's launch flags (vLLM's), each with a working default."""
    if not isinstance(workload, Workload):
        raise ValueError(f"workload must be a serving.Workload; got {type(workload).__name__}")
    if not hasattr(policy, "plan_step"):
        raise ValueError(f"policy must be a serving.policies class (one with plan_step); got {policy!r}")
    book_model, book_accelerator = book_scenario()
    model = book_model if model is None else check_model(model)
    acc = book_accelerator if accelerator is None else check_accelerator(accelerator)
    positive_int("replicas", replicas)
    positive_int("block_tokens", block_tokens)
    choice("router", router, ROUTERS)
    positive_float("watermark", watermark, maximum=0.5, allow_zero=True)
    if kv_blocks is None:
        kv_blocks = kv_capacity_blocks(model, acc, precision, tp, block_tokens, memory_utilization,
                                       memory_capacity)
    else:
        positive_int("kv_blocks", kv_blocks)
        fraction("memory_utilization", memory_utilization)
    if step_time is None:
        step_time = RooflineStepTime(model, acc, precision, tp=tp, mfu=mfu, mbu=mbu, efficiency=efficiency,
                                     step_overhead=step_overhead)
    else:
        check_step_time("step_time", step_time)
        for name, value in (("efficiency", efficiency), ("step_overhead", step_overhead)):
            if value is not None:
                raise ValueError(f"{name} applies to the default step time (RooflineStepTime); a step_time "
                                 f"given has its own: leave out one of them")
    if not isinstance(prefix_caching, (bool, np.bool_)):
        raise ValueError(f"prefix_caching must be True or False; got {prefix_caching!r}")
    if prefix_caching:
        policy.check_runs_with("prefix_caching")
    if speculative is not None:
        if not isinstance(speculative, Speculative):
            raise ValueError(f"speculative must be a serving.speculative.Speculative or None; got {speculative!r}")
        policy.check_runs_with("speculative")
        draft = None if speculative.draft == MTP else RooflineStepTime(
            speculative.draft, acc, precision, tp=tp, mfu=mfu, mbu=mbu, efficiency=efficiency)
        step_time = SpeculativeStepTime(step_time, speculative, draft, model.n_layers)
    wm = int(watermark * kv_blocks)
    engines = [Replica(step_time, policy, kv_blocks, block_tokens, wm, i, bool(prefix_caching))
               for i in range(int(replicas))]

    arrivals = workload.arrival_s.tolist()
    prompts = workload.prompt_tokens.tolist()
    outputs = workload.output_tokens.tolist()
    if speculative is not None:  # the engine steps verifications: 1 + ceil((N - 1) / E) "tokens" each
        outputs = [1 + speculative.verifications(o) for o in outputs]
    if prefix_caching and workload.prefix_id is not None:
        bs = int(block_tokens)
        reqs = [Req(i, a, p, o, k, n, bs) for i, (a, p, o, k, n) in enumerate(zip(
            arrivals, prompts, outputs, workload.prefix_id.tolist(), workload.prefix_tokens.tolist()))]
    else:
        reqs = [Req(i, a, p, o) for i, (a, p, o) in enumerate(zip(arrivals, prompts, outputs))]
    if workload.priority is not None:
        for r, level in zip(reqs, workload.priority.tolist()):
            r.prio = level
    serve(engines, reqs, router)
    result = _result(reqs, engines, f"{model.name} on {replicas} x {tp} x {acc.name}, {policy}", workload.priority)
    if speculative is None:
        return result
    return _speculative_result(result, workload.output_tokens, speculative)


def _speculative_result(result: SimResult, outputs, spec: Speculative) -> SimResult:
    """The engine's verification times turned into token times (speculative.token_times)."""
    e = spec.tokens_per_verification
    itls = []
    for first, gaps, n in zip(result.first_token_s.tolist(), result.itls_s, outputs.tolist()):
        if not np.isfinite(first):
            itls.append(gaps)
            continue
        times = np.concatenate([[first], first + np.cumsum(gaps)])
        itls.append(np.diff(token_times(times, n, e)))
    return replace(result, output_tokens=np.asarray(outputs, dtype=np.int64), itls_s=itls,
                   description=f"{result.description}, speculative k={spec.k} alpha={spec.acceptance:g} "
                               f"draft={getattr(spec.draft, 'name', spec.draft)}")


def serve(replicas, requests, router: str = "least-loaded") -> None:
    """The simulator's loop. Requests arrive in time order; before each arrival every replica runs
    the steps that start earlier (`Replica.run_until`: admit what fits in the batch and the KV
    cache, one forward pass, one token for every running request, finished ones leave), then the
    router hands the request to a replica's queue. After the last arrival every replica runs dry."""
    for i, request in enumerate(requests):
        if len(replicas) == 1 or router == "round-robin":
            replica = replicas[i % len(replicas)]
            replica.run_until(request.arrival)
        else:                          # least-loaded: every replica must be up to date to compare
            for r in replicas:
                r.run_until(request.arrival)
            replica = min(replicas, key=lambda r: r.outstanding())
        replica.add(request)
    for replica in replicas:
        replica.run_until(float("inf"), final=True)


def _result(reqs, engines, description, priority=None) -> SimResult:
    n = len(reqs)
    nan = float("nan")
    ends = [np.asarray(e.dec_end) for e in engines]
    itls = []
    for r in reqs:
        if r.rejected or r.finish is None:
            itls.append(np.zeros(0))
            continue
        dec = ends[r.replica]
        pieces = [np.array([p]) if isinstance(p, float) else dec[p[0]:p[0] + p[1]] for p in r.parts]
        times = np.concatenate(pieces) if len(pieces) > 1 else pieces[0]
        itls.append(np.diff(times))

    def col(attr):
        return np.array([nan if getattr(r, attr) is None or r.rejected else getattr(r, attr) for r in reqs],
                        dtype=float)

    traces = tuple(ReplicaTrace(np.asarray(e.log_start), np.asarray(e.log_dt), np.asarray(e.log_batch),
                                np.asarray(e.log_tokens), np.asarray(e.log_kv), e.total_blocks)
                   for e in engines)
    return SimResult(
        arrival_s=np.array([r.arrival for r in reqs], dtype=float),
        prompt_tokens=np.array([r.prompt for r in reqs], dtype=np.int64),
        output_tokens=np.array([r.output for r in reqs], dtype=np.int64),
        first_scheduled_s=col("first_sched"), first_token_s=col("first_token"), finish_s=col("finish"),
        preemptions=np.array([r.preemptions for r in reqs], dtype=np.int64),
        replica=np.array([r.replica for r in reqs], dtype=np.int64),
        itls_s=itls, traces=traces, description=description,
        cached_prompt_tokens=np.array([r.hit for r in reqs], dtype=np.int64), priority=priority)

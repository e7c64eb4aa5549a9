"""The serving lab's metrics and settings, defined once: one Markdown table for the notebook.

Conventions follow vLLM's serving benchmark (`vllm bench serve`, vllm/benchmarks/serve.py:
BenchmarkMetrics reports mean, median and percentiles of TTFT, TPOT and ITL, and request goodput
against per-request SLOs) and vLLM's `gpu_memory_utilization` for the KV pool.
"""
from __future__ import annotations

from dataclasses import dataclass

from inferlab.core.memory import max_batch
from inferlab.serving.kv import kv_capacity_blocks
from inferlab.base.units import GB, MS


@dataclass(frozen=True)
class CapacitySearch:
    """How the lab's capacity is found: the SLO attainment a rate must reach, and the relative
    width the bisection stops at."""

    attainment: float = 0.9
    bisection_rel_tol: float = 0.05


def metrics_table(slo, *, static_timeout_s: float, memory_utilization: float, model, accelerator,
                  precision, context_tokens: int = 2048, block_tokens: int = 16, tp: int = 1,
                  capacity: CapacitySearch = CapacitySearch()) -> str:
    """A Markdown table: each metric or setting of the lab, its definition with the values in use,
    where the lab uses it, and the source of the convention. The KV-pool row computes the pool at
    `memory_utilization` and the whole-memory B_max of 15.1.2 at `context_tokens`, side by side, for
    one replica of `tp` devices (the lab's scenario: 1, or the smallest TP that holds the model).
    capacity: the attainment and bisection tolerance the capacity row states."""
    pool_tokens = kv_capacity_blocks(model, accelerator, precision, tp, block_tokens, memory_utilization) * block_tokens
    whole = max_batch(model, accelerator, context_tokens, precision, tp=tp, allow_zero=True)
    per = "" if tp == 1 else f" per device, weights and KV split over the TP = {tp} replica's {tp} devices"
    ttft_ms, tpot_ms = slo.ttft_s / MS, slo.tpot_s / MS
    attainment, bisection_rel_tol = capacity.attainment, capacity.bisection_rel_tol
    rows = [
        ("TTFT", "arrival of a request to its first output token (queueing + prefill)",
         "every section", "vLLM bench: TTFT"),
        ("ITL", "each gap between two consecutive output tokens of a request; the mean and p99 are "
                "taken over the gaps of all requests", "§3 (p99), §2 (largest gap)", "vLLM bench: ITL"),
        ("TPOT", "one request's (finish − first token) / (output tokens − 1): its mean ITL",
         "the SLO (§1, §4, §5)", "vLLM bench: TPOT"),
        ("SLO", f"per request: TTFT ≤ {ttft_ms:.0f} ms and TPOT ≤ {tpot_ms:.0f} ms. §3 holds the run's "
                f"p99 TTFT and p99 ITL to the same numbers; §2 holds the largest gap in the other "
                f"requests' streams to {tpot_ms:.0f} ms", "§1, §4, §5 (per request); §2, §3 as stated",
         "the chapter's targets; per-request SLOs as in vLLM bench's goodput"),
        ("goodput", "requests per second that meet the SLO", "§4, §5", "vLLM bench: request goodput"),
        ("capacity", f"highest rate at which ≥ {attainment:.0%} of requests meet the SLO, found by "
                     f"bisection to within ±{bisection_rel_tol:.0%}", "§4", "this lab"),
        ("static batch timeout", f"a static batch starts when it is full or {static_timeout_s:g} s after its "
                                 "oldest request arrived", "§1", "this lab (static batching has no standard value)"),
        ("KV pool", f"(u × {accelerator.memory_bytes / GB:.0f} GB − weights) / KV bytes per token{per}, in blocks of "
                    f"{block_tokens} tokens, u = {memory_utilization:g}: {pool_tokens:,} tokens, "
                    f"{pool_tokens // context_tokens} sequences of {context_tokens:,}; 15.1.2's B_max uses all "
                    f"the memory (u = 1): {whole}", "every simulation",
         "vLLM's gpu_memory_utilization (default 0.9)"),
    ]
    out = ["| quantity | definition (values in use) | used in | convention |", "|---|---|---|---|"]
    out += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    return "\n".join(out)

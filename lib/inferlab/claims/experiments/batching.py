"""Experiments on the KV cache, memory and batching: what a bigger batch buys, the crossover batch
B*, the largest batch that fits and the levers that move it (quantization, GQA, prefix caching).
"""
from __future__ import annotations

import numpy as np

from inferlab.core.costs import chunked_prefill_costs, decode_costs, forward_costs, prefill_costs
from inferlab.core.latency import decode_step_time_s, kv_crossover_batch, prefill_time_s, throughput_tokens_per_s
from inferlab.core.memory import kv_cache_bytes, max_batch, weight_bytes
from inferlab.core.specs import get_accelerator, get_model

from inferlab.claims.experiments.common import ACC, Case, MODEL, Outcome, _f, _gqa, _ms, _precision


def recompute_vs_cache(context_lens=(1024, 4096), min_ratio_per_token: float = 0.5, model: str = MODEL):
    """Holds at each S where recomputing the prefix costs at least min_ratio * S times the FLOPs of a
    cached decode step (the saving grows with the context)."""
    model = get_model(model)
    cases = []
    for s in context_lens:
        no_cache = float(prefill_costs(model, 1, s + 1).total.flops)
        cached = float(decode_costs(model, 1, s).total.flops)
        r = no_cache / cached
        cases.append(Case(f"S={s}", r >= min_ratio_per_token * s, f"recompute costs x{_f(r)} the FLOPs"))
    return Outcome(tuple(cases), "context length")


def batching_amortizes(batch: int = 32, context_len: int = 1024, max_step_ratio: float = 3.0,
                       model: str = MODEL, accelerator: str = ACC):
    """Holds when a batch of B decode tokens takes under max_step_ratio times one token's step
    (B serial steps would take B times)."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    r = decode_step_time_s(model, accelerator, context_len, batch) / decode_step_time_s(model, accelerator, context_len)
    return Outcome((Case(f"B={batch}", r <= max_step_ratio, f"step x{_f(r)} for x{batch} tokens"),))


def batch_tradeoff(batches=(1, 8, 32, 64), context_len: int = 1024, model: str = MODEL, accelerator: str = ACC):
    """Holds when, as B grows, both the step time (latency) and the throughput rise."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    t = np.asarray(decode_step_time_s(model, accelerator, context_len, np.asarray(batches)))
    thr = np.asarray(batches) / t
    ok = bool(np.all(np.diff(t) > 0) and np.all(np.diff(thr) > 0))
    return Outcome((Case("batches " + ", ".join(map(str, batches)), ok,
                         "step " + ", ".join(_ms(x) for x in t) + "; tokens/s " + ", ".join(f"{x:,.0f}" for x in thr)),))


def batch_doubling(batches=(1, 4, 16), context_len: int = 1024, min_gain: float = 1.5, max_gain: float = 2.0,
                   model: str = MODEL, accelerator: str = ACC):
    """Holds at each B where doubling B multiplies throughput by a factor in [min_gain, max_gain]."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    cases = []
    for b in batches:
        g = (throughput_tokens_per_s(model, accelerator, context_len, 2 * b)
             / throughput_tokens_per_s(model, accelerator, context_len, b))
        cases.append(Case(f"B={b} -> {2 * b}", min_gain <= g <= max_gain, f"throughput x{_f(g)}"))
    bstar = kv_crossover_batch(model, context_len)
    return Outcome(tuple(cases), "batch relative to B*", {"bstar": bstar})


def crossover_behaviour(batches=(2, 8, 64, 128), context_len: int = 1024, threshold: float = 1.5,
                        model: str = MODEL, accelerator: str = ACC):
    """Holds at each B where doubling B gains at least `threshold` in throughput below B* and less
    than `threshold` above it (memory capacity ignored)."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    bstar = kv_crossover_batch(model, context_len)
    cases = []
    for b in batches:
        g = (throughput_tokens_per_s(model, accelerator, context_len, 2 * b)
             / throughput_tokens_per_s(model, accelerator, context_len, b))
        ok = g >= threshold if b < bstar else g < threshold
        side = "below" if b < bstar else "above"
        cases.append(Case(f"B={b} ({side} B*={bstar:.0f})", ok, f"doubling gives x{_f(g)}"))
    return Outcome(tuple(cases), "batch relative to B*")


def throughput_ceiling(context_len: int = 1024, batch: int = 100_000, min_share: float = 0.85,
                       model: str = MODEL, accelerator: str = ACC):
    """Holds when throughput at a huge batch (memory capacity ignored) reaches min_share of BW / C_kv."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    acc = accelerator
    ceiling = acc.hbm_bytes_per_s / kv_cache_bytes(model, context_len)
    x = throughput_tokens_per_s(model, accelerator, context_len, batch)
    return Outcome((Case(f"B={batch}", x / ceiling >= min_share, f"{x:,.0f} tok/s vs BW/C_kv {ceiling:,.0f}"),))


def crossover_stop(context_len: int = 1024, max_gain: float = 1.1, itl_slo_s: float = 0.05,
                   model: str = MODEL, accelerator: str = ACC):
    """Holds when going from B* to the memory-limited batch gains under `max_gain` in throughput or
    breaks the ITL target (so that B* is where to stop)."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    bstar = int(round(kv_crossover_batch(model, context_len)))
    bmax = int(max_batch(model, accelerator, context_len))
    g = (throughput_tokens_per_s(model, accelerator, context_len, bmax)
         / throughput_tokens_per_s(model, accelerator, context_len, bstar))
    step = decode_step_time_s(model, accelerator, context_len, bmax)
    return Outcome((Case(f"B*={bstar} vs max B={bmax}", g < max_gain or step > itl_slo_s,
                         f"throughput x{_f(g)} more at max B, step {_ms(step)}"),), "",
                   {"bstar": bstar, "bmax": bmax, "gain": g, "step_ms": step * 1e3})


def max_batch_formula(context_len: int = 1000, rel: float = 0.05, model: str = MODEL, accelerator: str = ACC):
    """Holds when the library's max batch equals (memory - weights) / KV per sequence within `rel`."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    acc = accelerator
    f = (acc.memory_bytes - weight_bytes(model)) / kv_cache_bytes(model, context_len)
    b = int(max_batch(model, accelerator, context_len))
    return Outcome((Case(f"S={context_len}", abs(b / f - 1) <= rel, f"max batch {b} vs formula {_f(f)}"),))


def max_batch_levers(context_len: int = 1024, model: str = MODEL, accelerator: str = ACC):
    """Holds for each lever (shorter context, 8 KV heads, int8 KV) that raises the memory-limited batch."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    base = int(max_batch(model, accelerator, context_len))
    levers = {"half the context": int(max_batch(model, accelerator, context_len // 2)),
              "8 KV heads (GQA)": int(max_batch(_gqa(model, 8), accelerator, context_len)),
              "int8 KV cache": int(max_batch(model, accelerator, context_len, _precision(kv="int8")))}
    return Outcome(tuple(Case(k, v > base, f"max batch {base} -> {v}") for k, v in levers.items()), "lever")


def kv_quant_batch(context_len: int = 1000, expected: float = 2.0, rel: float = 0.05, model: str = MODEL,
                   accelerator: str = ACC):
    """Holds when an int8 KV cache raises the memory-limited batch by `expected` (within `rel`)."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    a = int(max_batch(model, accelerator, context_len))
    b = int(max_batch(model, accelerator, context_len, _precision(kv="int8")))
    return Outcome((Case(f"S={context_len}", abs(b / a / expected - 1) <= rel, f"max batch {a} -> {b}"),))


def gqa_factor(n_kv_heads: int = 8, context_len: int = 1024, rel: float = 0.05, model: str = MODEL,
               accelerator: str = ACC, what=("kv", "bstar", "max_batch")):
    """Holds for each quantity where going from N to n_kv_heads KV heads scales it by N / n_kv_heads."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    m, g = model, _gqa(model, n_kv_heads)
    factor = m.n_kv_heads / n_kv_heads
    got = {"kv": kv_cache_bytes(m, context_len) / kv_cache_bytes(g, context_len),
           "bstar": kv_crossover_batch(g, context_len) / kv_crossover_batch(m, context_len),
           "max_batch": int(max_batch(g, accelerator, context_len)) / int(max_batch(m, accelerator, context_len))}
    names = {"kv": "KV cache shrinks", "bstar": "B* grows", "max_batch": "max batch grows"}
    return Outcome(tuple(Case(names[k], abs(got[k] / factor - 1) <= rel, f"x{_f(got[k])} (G = {_f(factor)})")
                         for k in what), "quantity")


def quant_raises_bstar_and_maxb(context_len: int = 1024, model: str = MODEL, accelerator: str = ACC):
    """Holds for each int8 variant (weights, KV cache) that raises both B* and the memory-limited batch."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    base = (kv_crossover_batch(model, context_len), int(max_batch(model, accelerator, context_len)))
    cases = []
    for label, p in (("int8 weights", _precision(weights="int8")), ("int8 KV cache", _precision(kv="int8"))):
        bs, mb = kv_crossover_batch(model, context_len, p), int(max_batch(model, accelerator, context_len, p))
        cases.append(Case(label, bs > base[0] and mb > base[1],
                          f"B* {_f(base[0])} -> {_f(bs)}, max B {base[1]} -> {mb}"))
    return Outcome(tuple(cases), "what is quantised")


def cost_levers(context_len: int = 1024, model: str = MODEL, accelerator: str = ACC):
    """Holds when raising B from 1 to the memory limit lowers cost per token more than int8 weights
    or int8 KV at B = 1 do."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    bmax = int(max_batch(model, accelerator, context_len))
    one = throughput_tokens_per_s(model, accelerator, context_len, 1)
    batch_gain = throughput_tokens_per_s(model, accelerator, context_len, bmax) / one
    w8 = throughput_tokens_per_s(model, accelerator, context_len, 1, _precision(weights="int8")) / one
    return Outcome((Case("batch vs int8 weights", batch_gain > w8,
                         f"max batch {bmax}: x{_f(batch_gain)}; int8 weights: x{_f(w8)}"),))


def prefix_cache(shared_tokens: int = 10_000, suffixes=(1, 200, 2000), max_share: float = 0.05,
                 model: str = MODEL, accelerator: str = ACC):
    """Holds for each user suffix where prefilling it against a cached shared prefix takes at most
    max_share of prefilling prefix + suffix."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    from inferlab.core.roofline import pass_time_s
    cases = []
    for q in suffixes:
        cached = pass_time_s(forward_costs(model, 1, q, shared_tokens), accelerator)
        full = prefill_time_s(model, accelerator, shared_tokens + q)
        cases.append(Case(f"suffix {q} tokens", cached / full <= max_share,
                          f"TTFT {_ms(cached)} cached vs {_ms(full)}"))
    return Outcome(tuple(cases), "length of the request's own tokens after the shared prefix")


def chunked_prefill_flops(prompt_len: int = 10_000, chunk_len: int = 512, min_extra: float = 0.05,
                          model: str = MODEL):
    """Holds when chunking raises total prefill FLOPs by at least min_extra (the statement's
    'recomputation'); bytes are reported beside."""
    model = get_model(model)
    ch = chunked_prefill_costs(model, prompt_len, chunk_len).total
    one = prefill_costs(model, 1, prompt_len).total
    fr, br = float(ch.flops / one.flops), float(ch.bytes / one.bytes)
    return Outcome((Case(f"S={prompt_len}, C={chunk_len}", fr - 1 >= min_extra,
                         f"FLOPs x{fr:.4f}, bytes x{_f(br)}"),), "",
                   {"flops_ratio": fr, "bytes_ratio": br, "prompt_len": prompt_len, "chunk_len": chunk_len})


def replicas_vs_batch_latency(replicas: int = 3, context_len: int = 1024, model: str = MODEL, accelerator: str = ACC):
    """Holds when M replicas at B = 1 give a lower per-token latency than one replica at B = M."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    a = decode_step_time_s(model, accelerator, context_len, 1)
    b = decode_step_time_s(model, accelerator, context_len, replicas)
    return Outcome((Case(f"M={replicas}", a < b, f"B=1 step {_ms(a)} vs B={replicas} step {_ms(b)}"),))

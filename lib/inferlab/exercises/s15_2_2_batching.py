"""Exercises for 15.2.2, throughput under batching.

Each `solve_*` body is, word for word, the instructor's solution cell: imports inside, one `return`.
"""
import dataclasses
import math

import numpy as np

from inferlab.core.deployment import Deployment
from inferlab.exercises.core import LOW_WEIGHT, Exercise, Mistake, integer, letters, number, one_of, register, vary
from inferlab.core.latency import decode_step_rule_s, decode_step_time_s, kv_crossover_batch, prefill_time_s
from inferlab.core.memory import kv_cache_bytes, max_batch, weight_bytes
from inferlab.core.specs import get_accelerator, get_model
from inferlab.base.units import GB, GiB


def _mha(model):
    model = get_model(model)
    m = model
    return m.with_(n_kv_heads=m.n_heads)


# Variants of ex1 and ex2 share their draws (ex2 says "same model and GPU as exercise 1"): GQA models
# that fit one card with room for a batch; S on a 256-token grid (B* = M_weights / C_kv is 1/S: a fine grid
# keeps it different between most pairs of students), less the lengths where ex2's gain for Llama 3 8B on an
# H200 is 1.173, a number the chapter prints (the student notebook would show that variant's answer).
_PRINTED_GAIN_S = (5632, 6656, 7168, 7936)
_CROSSOVER_OPTIONS = (("model", ["llama-3-8b", "mistral-7b"]),
                      ("accelerator", ["h200", "h100-sxm", "mi300x", "b200", "a100-80gb"]),
                      ("seq_len", [s for s in range(1024, 8193, 256) if s not in _PRINTED_GAIN_S]))
_CROSSOVER = vary(*_CROSSOVER_OPTIONS)


# Settings whose throughput at 2B is a number the chapter prints (a leak the student build refuses): the batch
# after them is taken instead.
_PRINTED_THROUGHPUT = {("llama-3-8b", "h100-sxm", 5120, 29), ("llama-3-8b", "h100-sxm", 5376, 33),
                       ("mistral-7b", "h100-sxm", 4864, 36)}


def _batch_beyond_b_star(model, accelerator, seq_len, f):
    """ex2's batch: a fraction f of the way from B* to the largest batch that can still be doubled, so that
    the KV caches dominate and 2B fits in memory."""
    m, acc = get_model(model), get_accelerator(accelerator)  # the params keep the names
    b_star = kv_crossover_batch(m, seq_len)
    batch = math.floor(b_star + f * (max_batch(m, acc, seq_len) // 2 - b_star))
    if (model, accelerator, seq_len, batch) in _PRINTED_THROUGHPUT:
        batch += 1
    return dict(model=model, accelerator=accelerator, seq_len=seq_len, batch=batch)


# ex1: recompute -----------------------------------------------------------------------------------

def solve_crossover(model, accelerator, seq_len):
    from inferlab.core.latency import kv_crossover_batch
    from inferlab.core.memory import max_batch
    from inferlab.core.specs import get_accelerator, get_model
    model = get_model(model)
    accelerator = get_accelerator(accelerator)

    # B* = weight bytes / KV bytes of one sequence; max batch = floor((capacity - weights) / KV per sequence)
    return {"b_star": kv_crossover_batch(model, seq_len), "max_batch": max_batch(model, accelerator, seq_len)}


def mistakes_crossover(model, accelerator, seq_len):
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    acc = accelerator
    gib = dataclasses.replace(acc, memory_bytes=acc.memory_bytes / GB * GiB)
    w, kv = weight_bytes(model), kv_cache_bytes(model, seq_len)
    heads = "you cached every query head; only the n_kv_heads K and V heads are stored"
    kv_mha = kv_cache_bytes(_mha(model), seq_len)  # n_heads in the KV formula, the weights unchanged
    return [
        Mistake(w / kv_mha, heads, "b_star"),
        Mistake(kv_crossover_batch(_mha(model), seq_len), heads, "b_star"),  # the MHA model's weights too
        Mistake(max(math.floor((acc.memory_bytes - w) / kv_mha), 0), heads, "max_batch"),
        Mistake(max_batch(_mha(model), accelerator, seq_len, allow_zero=True), heads, "max_batch"),
        Mistake(max_batch(model, gib, seq_len), "the datasheet's GB are 1e9 bytes, not GiB", "max_batch"),
        Mistake(math.floor(acc.memory_bytes / kv), "the weights sit in the same memory: subtract them first",
                "max_batch"),
    ] + ([Mistake(rounded, "a batch that fits is a floor, not a rounded value", "max_batch")]
         if (rounded := round((acc.memory_bytes - w) / kv)) != math.floor((acc.memory_bytes - w) / kv) else [])


register(Exercise(
    id="15.2.2-ex1", kind="recompute", points=1,
    title="B* and the memory wall for {model} on an {accelerator}",
    params=dict(model="llama-3-8b", accelerator="h200", seq_len=4096),
    parts=(number("b_star", "the KV-crossover batch B*", "sequences", rel_tol=0.01),
           integer("max_batch", "the largest batch that fits", "sequences")),
    statement="""\
The chapter computes B* = M_weights / C_kv ≈ 31 for Llama-2 13B on an H100 at S = 1024. Recompute B* and the
largest batch that fits in memory for `{model}` (grouped-query attention) on one `{accelerator}`, bf16 weights
and cache, sequences of S = {seq_len} tokens, nothing else in memory. GB = 10⁹ bytes.""",
    solve=solve_crossover, mistakes=mistakes_crossover, vary=_CROSSOVER))


# ex2: predict --------------------------------------------------------------------------------------

def solve_doubling(model, accelerator, seq_len, batch):
    import numpy as np

    from inferlab.core import memory
    from inferlab.core.latency import decode_step_rule_s
    from inferlab.core.specs import get_accelerator, get_model
    model = get_model(model)
    accelerator = get_accelerator(accelerator)

    w, kv = memory.weight_bytes(model), memory.kv_cache_bytes(model, seq_len)
    dominant = "kv" if batch * kv > w else "weights"
    # B tokens per step of (weights + B caches) / bandwidth, at B and at 2B
    B = np.array([batch, 2 * batch])
    throughput = B / decode_step_rule_s(w, kv, B, accelerator)
    return {"dominant": dominant, "gain": throughput[1] / throughput[0], "tokens_per_s": throughput[1]}


def mistakes_doubling(model, accelerator, seq_len, batch):
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    w, kv = weight_bytes(model), kv_cache_bytes(model, seq_len)
    gain = (2 * batch / decode_step_rule_s(w, kv, 2 * batch, accelerator)) / (
        batch / decode_step_rule_s(w, kv, batch, accelerator))
    return [
        Mistake("weights", "compare B with B* (exercise 1): which is larger at B = {b}?".format(b=batch), "dominant"),
        Mistake(2.0, "doubling B doubles throughput only far below B*", "gain"),
        Mistake(1 / gain, "upside down: the gain is throughput(2B) / throughput(B)", "gain"),
        Mistake(batch / decode_step_rule_s(w, kv, batch, accelerator), "that is the throughput at B = {b}; the "
                "question asks for it at 2 × {b}".format(b=batch), "tokens_per_s"),
        Mistake(2 * batch * accelerator.hbm_bytes_per_s / w, "each sequence reads its own cache every step: "
                "count 2B caches beside the weights", "tokens_per_s"),
    ]


register(Exercise(
    id="15.2.2-ex2", kind="predict", points=1,
    title="What does doubling the batch buy?",
    params=dict(model="llama-3-8b", accelerator="h200", seq_len=4096, batch=64),
    parts=(one_of("dominant", "what dominates the bytes read per step at B = {batch}", ("weights", "kv")),
           # Between 1 and 4/3 for every batch above B*: few values, so it weighs as little as a choice.
           number("gain", "throughput at B = 2 × {batch} divided by throughput at B = {batch}", "", rel_tol=0.01,
                  weight=LOW_WEIGHT),
           number("tokens_per_s", "the throughput at B = 2 × {batch}", "tokens/s", rel_tol=0.01)),
    statement="""\
Same model and GPU as exercise 1 (`{model}`, `{accelerator}`, S = {seq_len}). The server runs at B = {batch}
and could double it. **Predict first:** at B = {batch}, do the weights or the KV caches dominate the bytes read
per decode step? Then compute the throughput at 2 × {batch} and its gain over B = {batch} with the chapter's rule
throughput(B) = B · BW / (M_weights + B·C_kv) (`inferlab.core.latency.decode_step_rule_s`).""",
    solve=solve_doubling, mistakes=mistakes_doubling,
    vary=vary(*_CROSSOVER_OPTIONS, ("f", [0.25, 0.5, 0.75]), derive=_batch_beyond_b_star, seed="15.2.2-ex1")))


# ex3: find the inconsistency ---------------------------------------------------------------------

def solve_tp_budget(model, accelerator, batch, seq_len, tp):
    from inferlab.core.memory import kv_cache_bytes, max_batch
    from inferlab.core.specs import get_accelerator, get_model
    model = get_model(model)
    accelerator = get_accelerator(accelerator)

    # Tensor parallelism splits the KV heads across the GPUs, like the attention weights;
    # only the n_kv_heads heads of grouped-query attention are cached.
    kv_per_gpu = kv_cache_bytes(model, seq_len, batch, tp=tp)
    return {"kv_gb_per_gpu": kv_per_gpu / 1e9, "max_batch": max_batch(model, accelerator, seq_len, tp=tp),
            "true": {"A", "B"}}


def _memo_budget(model, accelerator, batch, seq_len, tp):
    """The memo's figures: every query head cached, the cache not split, weights split."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    m = model
    kv_total = kv_cache_bytes(_mha(m), seq_len, batch)
    w_gpu = weight_bytes(m, tp=tp)
    free = accelerator.memory_bytes - w_gpu
    return m, kv_total, w_gpu, max(math.floor(free / (kv_total / batch)), 0)


def mistakes_tp_budget(model, accelerator, batch, seq_len, tp):
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    acc = accelerator
    m, kv_total, w_gpu, memo_b = _memo_budget(model, accelerator, batch, seq_len, tp)
    return [
        Mistake(kv_total / GB, "that is the memo's cache: every query head, not split", "kv_gb_per_gpu"),
        Mistake(kv_cache_bytes(model, seq_len, batch) / GB,
                "that is the cache of all the GPUs together; tensor parallelism splits the KV heads", "kv_gb_per_gpu"),
        Mistake(kv_cache_bytes(_mha(model), seq_len, batch, tp=tp) / GB,
                "you cached every query head; the model has grouped-query attention", "kv_gb_per_gpu"),
        Mistake(memo_b, "that is the memo's batch", "max_batch"),
        Mistake(math.floor((acc.memory_bytes - w_gpu) / kv_cache_bytes(model, seq_len, 1)),
                "the cache is split across the GPUs too", "max_batch"),
        # Hints that never narrow the set down to one or two candidates.
        Mistake(frozenset("A"), "not the right set of statements: test each one against your own numbers", "true"),
        Mistake(frozenset("B"), "not the right set of statements: test each one against your own numbers", "true"),
    ]


def statement_tp_budget(model, accelerator, batch, seq_len, tp):
    m, kv_total, w_gpu, memo_b = _memo_budget(model, accelerator, batch, seq_len, tp)
    cap = get_accelerator(accelerator).memory_bytes
    return f"""\
A colleague budgets `{model}` at B = {batch}, S = {seq_len:,} on {tp} `{accelerator}` GPUs with tensor
parallelism: *"KV cache: 2 × {m.n_layers} × {m.n_heads} × {m.head_dim} × {seq_len} × 2 × {batch}
≈ {kv_total / GB:,.0f} GB, which tensor parallelism does not shard. Weights: {w_gpu / GB:.1f} GB per GPU.
It does not fit in {cap / GB:.0f} GB; the batch must drop to {memo_b}."*

1. Compute the KV cache per GPU at B = {batch} (`inferlab.core.memory.kv_cache_bytes(..., tp={tp})`) and the largest batch
   that fits per GPU (`inferlab.core.memory.max_batch(..., tp={tp})`; GB = 10⁹ bytes).
2. Which of these statements are true?
   - **A** `{model}` has grouped-query attention: only its n_kv_heads K/V heads are cached, not all {m.n_heads}.
   - **B** Tensor parallelism splits the KV heads across the GPUs, so each holds 1/{tp} of the cache.
   - **C** bf16 weights take 4 bytes per parameter.
   - **D** The KV cache does not grow with the batch size.
   - **E** Under tensor parallelism every GPU holds a full copy of the weights."""


register(Exercise(
    id="15.2.2-ex3", kind="inconsistency", points=2,
    title="Check a colleague's memory budget",
    params=dict(model="llama-3-70b", accelerator="h100-sxm", batch=48, seq_len=4096, tp=4),
    parts=(number("kv_gb_per_gpu", "the KV cache per GPU at B = {batch}", "GB", rel_tol=0.01),
           integer("max_batch", "the largest batch that fits at tp = {tp}", "sequences"),
           letters("true", "the letters of every true statement", "ABCDE",
                   hint="test each statement against the model's config and the chapter's KV formula")),
    statement=statement_tp_budget,
    solve=solve_tp_budget, mistakes=mistakes_tp_budget,
    # Variants: 70B GQA models on 80-141 GB cards where the memo's own batch is at least 1 and below B; no
    # batch * S / tp = 65,536 (its KV per GPU, 21.47 GB, is printed in the chapter: a leak the builder refuses).
    vary=vary(("model", ["llama-3-70b", "llama-2-70b"]), ("accelerator", ["h100-sxm", "h200", "a100-80gb"]),
              ("batch", [40, 48, 56]), ("seq_len", list(range(2048, 8193, 256))), ("tp", [4, 8]))))


# ex4: design ---------------------------------------------------------------------------------------

def solve_serving_plan(model, accelerator, prompt_len, output_len, ttft_slo_ms, itl_slo_ms, load_tokens_per_s,
                       tp_options):
    import math

    import numpy as np

    from inferlab.core.deployment import Deployment
    from inferlab.core.latency import decode_step_time_s, prefill_time_s
    from inferlab.core.memory import max_batch
    from inferlab.core.specs import get_accelerator, get_model
    model = get_model(model)
    accelerator = get_accelerator(accelerator)

    context = prompt_len + output_len  # the longest cache a sequence reaches
    # The TP degrees whose TTFT meets the target, and the ITL of every batch that fits at each
    on = {tp: Deployment(accelerator, tp=tp) for tp in tp_options}
    fast = [tp for tp in tp_options if prefill_time_s(model, on[tp], prompt_len) * 1e3 <= ttft_slo_ms]
    B = {tp: np.arange(1, max_batch(model, accelerator, context, tp=tp) + 1) for tp in fast}
    itl_ms = {tp: decode_step_time_s(model, on[tp], context, B[tp]) * 1e3 for tp in fast}
    # A replica runs the largest batch within the ITL target: batch / ITL tokens per second
    batch = {tp: int(B[tp][itl_ms[tp] <= itl_slo_ms].max()) for tp in fast if itl_ms[tp][0] <= itl_slo_ms}
    n_gpus = {tp: tp * math.ceil(load_tokens_per_s / (b / (itl_ms[tp][b - 1] / 1e3))) for tp, b in batch.items()}
    tp = min(n_gpus, key=n_gpus.get)  # the first of equals is the smaller tp
    return {"tp": tp, "batch": batch[tp], "n_gpus": n_gpus[tp]}


def mistakes_serving_plan(model, accelerator, prompt_len, output_len, ttft_slo_ms, itl_slo_ms, load_tokens_per_s,
                          tp_options):
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    best = solve_serving_plan(model, accelerator, prompt_len, output_len, ttft_slo_ms, itl_slo_ms,
                              load_tokens_per_s, tp_options)
    tp = best["tp"]
    out = [
        Mistake(max_batch(model, accelerator, prompt_len + output_len, tp=tp),
                "that batch fits in memory, but its ITL breaks the target", "batch"),
    ]
    B = np.arange(1, max_batch(model, accelerator, prompt_len, tp=tp) + 1)
    itl_ms = decode_step_time_s(model, Deployment(accelerator, tp=tp), prompt_len, B) * 1e3
    out.append(Mistake(int(B[itl_ms <= itl_slo_ms].max()),
                       "size the cache for prompt + output: the last token attends over both", "batch"))
    for other in tp_options:
        if other == tp:
            continue
        if prefill_time_s(model, Deployment(accelerator, tp=other), prompt_len) * 1e3 > ttft_slo_ms:
            why = f"tp = {other} misses the TTFT target"
        else:
            why = f"tp = {other} meets both targets but needs more GPUs for this load"
        out += [Mistake(other, why, "tp")]
    return out


register(Exercise(
    id="15.2.2-ex4", kind="design", points=3,
    title="Choose TP degree and batch for a latency target at the lowest cost",
    params=dict(model="llama-3-70b", accelerator="h100-sxm", prompt_len=2048, output_len=512, ttft_slo_ms=150,
                itl_slo_ms=25, load_tokens_per_s=5000, tp_options=(2, 4, 8)),
    # tp and n_gpus take a few small values (TP 1-8): they weigh little (LOW_WEIGHT), the batch carries it.
    parts=(integer("tp", "the tensor-parallel degree of a replica", weight=LOW_WEIGHT),
           number("batch", "the batch each replica runs", "sequences", rel_tol=0.02),
           integer("n_gpus", "the GPUs needed for the load", "GPUs", weight=LOW_WEIGHT)),
    statement="""\
Serve `{model}` (bf16) on `{accelerator}` GPUs: prompts of {prompt_len} tokens, {output_len} output tokens each, a
steady load of {load_tokens_per_s:,} generated tokens per second. Targets: TTFT ≤ {ttft_slo_ms} ms (one prompt on an
idle replica) and ITL ≤ {itl_slo_ms} ms at the longest context (prompt + output). A replica is tp GPUs,
tp ∈ {tp_options}; you pay per GPU.

For each tp: check TTFT with `inferlab.core.latency.prefill_time_s(model, Deployment(accelerator, tp=tp), prompt_len)`; the replica's batch is the largest that
both fits (`inferlab.core.memory.max_batch`) and meets the ITL target (`inferlab.core.latency.decode_step_time_s`, which
includes the all-reduces); its throughput is batch / ITL. Pick the tp whose replicas carry the load with the fewest
GPUs (on a tie, the smaller tp).""",
    solve=solve_serving_plan, mistakes=mistakes_serving_plan,
    # Variants: ITL targets tight enough to bind before memory does (checked for every draw), on a 1 ms grid
    # so that the batch (the part that carries the points) differs between most pairs of students.
    vary=vary(("model", ["llama-3-70b", "llama-2-70b"]), ("accelerator", ["h100-sxm", "h200"]),
              ("load_tokens_per_s", [3000, 5000, 8000]), ("itl_slo_ms", list(range(20, 27))),
              ("ttft_slo_ms", [150, 250]))))

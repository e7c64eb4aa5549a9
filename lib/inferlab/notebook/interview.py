"""The chapter's interview questions as drills: each subsection of the book ends with three ("How This
Shows Up in Interviews"), the third a senior follow-up. A chapter notebook poses each in its own words
and leaves a cell for the reader's answer; `answer` is the folded strong answer, every number computed
here for the page's scenario (the What-if cell changes them):

    interview.answer("15.2.2", 3, MODEL, GPU, PREC)      # Markdown: <details class="interview-answer">

An answer has the chapter's points with the scenario's numbers, what the numbers correct where the
registry's verdict on the question's paragraph is an erratum, an approximation or depends on the
setting (each with its link to the errata page), a follow-up question with its answer, and, where the
library cannot answer yet, one sentence saying what is not modelled (`NOT_MODELLED`).
`DRILLS` holds each question's place in the chapter: its section, number (1-3, the chapter's order),
the line of the chapter text it sits on (the statements registry's `line`) and the claims of its
paragraph; `drill.anchor` is the id a page gives it (interview-15-1-1-1 ... interview-15-2-2-3).
The drills, the registry's verdicts on them and the `Answer` they fold into are `interview_drills`
(re-exported here); this module computes each answer's numbers.
"""
from __future__ import annotations

import math

import numpy as np

from inferlab.core.deployment import Deployment
from inferlab.notebook.figures import BOOK_USD_PER_GPU_HOUR
from inferlab.core.latency import (chunked_prefill_time_s, cost_per_1k_tokens_usd, decode_step_time_s, extend_time_s,
                              kv_crossover_batch, prefill_time_s, throughput_tokens_per_s, ttft_rule_s)
from inferlab.core.memory import fit_advice, kv_cache_bytes, kv_cache_bytes_per_token, max_batch, weight_bytes
from inferlab.core.memory_headroom import headroom_fit
from inferlab.core.usable_memory import SERVING, VLLM_ON_CARD, max_batch_usable
from inferlab.core.roofline import ridge_point
from inferlab.core.specs import BF16, Precision, check_accelerator, check_model, check_precision, get_accelerator, get_model
from inferlab.base.units import GB
from inferlab.notebook.interview_drills import (Answer, DRILLS, Drill, NOT_MODELLED, SECTIONS, _claims, drill, link,
                                       to_correct, verdicts)
from inferlab.core.context import yardstick  # @yardstick: sweeps past a model's context on purpose, no warning


# Reading pace, for the streaming-chat question: silent reading of English non-fiction, 238 words per
# minute (Brysbaert 2019, a meta-analysis of 190 studies); and about 4/3 tokens per English word
# (OpenAI's rule of thumb for its tokenizers: a token is about 3/4 of a word).
READING_WORDS_PER_MIN = 238.0
TOKENS_PER_WORD = 4 / 3
CHAT_ANSWER_TOKENS = 300      # a streamed chat answer, for the end-to-end arithmetic

SYSTEM_PROMPT = 10_000        # 15.1.1's premise
USER_TURN = 200               # the request's own tokens after a shared system prompt
CHUNK = 512                   # the chapter's chunk size (15.1.1 practice; 15.2.1's S^2/C)
LONG_MIX_TOKENS = 3000        # the long prompts mixed into the disaggregation drill's traffic (fits a 4k context)
LONG_PROMPT = SYSTEM_PROMPT   # the long prompt that lands in steady traffic (15.1.1-3, 15.2.1-3): the chapter's
SPECULATIVE_DRAFTS = 4        # draft tokens verified per step in the speculative-decoding point (15.1.2-3)
TP_DEGREES = (2, 4, 8)


# ---------------------------------------------------------------------------------------------
# Numbers in words
# ---------------------------------------------------------------------------------------------

def _time_words(seconds: float) -> str:
    """A time as a reader says it: '7.93 ms', '298 ms', '10.2 s'."""
    s = float(seconds)
    if s >= 1:
        return f"{s:.3g} s" if s < 100 else f"{s:,.0f} s"
    ms = s * 1e3
    return f"{ms:.3g} ms" if ms >= 0.01 else f"{ms:.2g} ms"


def _gb_words(nbytes: float) -> str:
    x = float(nbytes) / GB
    return f"{x:.3g} GB" if x < 100 else f"{x:,.0f} GB"


def _ratio_words(ratio: float) -> str:
    return f"{ratio:.2g}×" if ratio < 10 else f"{ratio:,.0f}×"


def _deployment_words(model, dep: Deployment) -> str:
    n = {1: "one", 2: "two", 4: "four", 8: "eight", 16: "sixteen"}.get(dep.tp, str(dep.tp))
    return f"{model.name} on {n} {dep.accelerator.name}{'s' if dep.tp > 1 else ''}" + (
        f" (tensor parallelism {dep.tp})" if dep.tp > 1 else "")


# ---------------------------------------------------------------------------------------------
# The answer
# ---------------------------------------------------------------------------------------------


def _setup(model, accelerator, precision, seq_len: int):
    """(model, accelerator, precision, deployment, note): the deployment is one device when the weights
    and one sequence of `seq_len` tokens fit in its usable memory (`usable_memory.SERVING`), else the
    smallest power-of-two tensor-parallel degree that holds them; `note` says so ('' on one device)."""
    model, acc, precision = check_model(model), check_accelerator(accelerator), check_precision(precision)
    tp = 1
    while _largest_batch(model, acc, seq_len, precision, tp) < 1 and tp < 64:
        tp *= 2
    note = "" if tp == 1 else (
        f"{model.name} does not fit on one {acc.name} ({weight_bytes(model, precision) / GB:.0f} GB of weights "
        f"against {SERVING.describe(acc)}), so these numbers are for tensor parallelism {tp}. ")
    return model, acc, precision, Deployment(acc, precision, tp=tp), note


def _measured(dep: Deployment):
    """The same deployment on the measured kernels (efficiency.MeasuredKernels), or (None, why not)."""
    from inferlab.core.measured_latency import deployments, measured_reason
    reason = measured_reason(dep.accelerator, dep.precision)
    if reason:
        return None, reason
    try:
        return deployments(dep.accelerator, dep.precision, tp=dep.tp)[1], ""
    except ValueError as err:          # a TP degree the measured all-reduces lack
        return None, f"No measured kernels for this layout ({err})."


def _usable_sentence(acc) -> str:
    """'the usable 72.0 GB (vLLM's default 0.9 of the 80 GB datasheet capacity, 77.0 GB of the 85.5 GB the
    card reports)': the page's usable-memory convention with the condition that flips a fit."""
    text = (f"the usable {SERVING.usable_bytes(acc) / GB:.1f} GB (vLLM's default {SERVING.fraction:g} of the "
            f"{acc.memory_bytes / GB:.0f} GB datasheet capacity")
    if acc.reported_memory_bytes is not None:
        text += (f", {VLLM_ON_CARD.usable_bytes(acc) / GB:.1f} GB of the {acc.reported_memory_bytes / GB:.1f} GB "
                 "the card reports")
    return text + ")"


def _largest_batch(model, acc, context: int, prec, tp: int = 1) -> int:
    """The largest batch of `context`-token sequences a server holds: the page's usable memory
    (`usable_memory.SERVING`) less the weights, over one sequence's cache."""
    return max_batch_usable(model, acc, context, prec, tp, SERVING)


def _context_note(model, tokens: int) -> str:
    limit = model.max_context_tokens
    if limit is None or tokens <= limit:
        return ""
    return (f" ({tokens:,} tokens is beyond {model.name}'s context window of {limit:,}: the number is "
            "the arithmetic, a yardstick)")


# ---------------------------------------------------------------------------------------------
# 15.1.1
# ---------------------------------------------------------------------------------------------

def _long_system_prompt_and_slow_ttft(model, accelerator, precision, **_) -> Answer:
    drill = DRILLS["15.1.1-1"]
    model, acc, prec, dep, note = _setup(model, accelerator, precision, SYSTEM_PROMPT)
    S, q = SYSTEM_PROMPT, USER_TURN
    t = prefill_time_s(model, dep, S)
    meas, why = _measured(dep)
    t_meas = prefill_time_s(model, meas, S) if meas else None
    t_cached = extend_time_s(model, dep, q, S)
    t_chunked = chunked_prefill_time_s(model, dep, S, CHUNK)
    kv_prompt = kv_cache_bytes(model, S, 1, prec)
    from inferlab.core.costs import prefill_costs
    peak = acc.peak(prec.compute_dtype) * dep.tp
    flops = float(prefill_costs(model, 1, S, prec, beyond_context=True).total.flops)   # matrices and attention
    share_at_4s = flops / 4.0 / peak
    tp2 = Deployment(acc, prec, tp=2 * dep.tp)
    t_tp2 = prefill_time_s(model, tp2, S)
    comm_share = 1 - prefill_time_s(model, tp2.with_(allreduce=False), S) / t_tp2   # what the all-reduces add
    practice = (f"; on the kernels measured on an H100 it is {_time_words(t_meas)}" if t_meas else "")
    strong = (
        f"{note}Start from the arithmetic: prefilling {S:,} tokens takes {_time_words(t)} on the ideal roofline"
        f"{practice}{_context_note(model, S)}. A 4 s TTFT is {_ratio_words(4 / t)} that, so most of the 4 s is not "
        "this prompt's compute: look for queueing behind other prefills and for a GPU running far below "
        f"peak (the prompt's {flops / 1e12:,.0f} TFLOP, attention included, in 4 s would be {share_at_4s:.1%} of "
        "peak FLOP/s).",
        f"Prompt caching: when requests share the system prompt, compute its KV cache ({_gb_words(kv_prompt)}) "
        f"once; each request then prefills only its own {q} tokens against it, {_time_words(t_cached)} instead of "
        f"{_time_words(extend_time_s(model, dep, S + q, 0))}.",
        f"Tensor parallelism: on {2 * dep.tp} GPUs the prefill takes {_time_words(t_tp2)}, of which the all-reduces are "
        f"{comm_share:.0%}; check that they do not dominate.",
        "Utilisation: measure the achieved FLOP/s of the prefill; far below peak means the time goes "
        "elsewhere (the scheduler, small kernels, waiting).",
    )
    corrected = []
    for rid in to_correct(drill):
        if rid == "15.1.1-s20":
            corrected.append(
                f"Chunked prefill does not shorten this request's TTFT ({link(rid, drill)}): alone on the GPU, "
                f"{math.ceil(S / CHUNK)} chunks of {CHUNK} take {_time_words(t_chunked)} against {_time_words(t)} in one pass, "
                "each chunk re-reading the weights; chunking protects the other requests' token gaps.")
        elif rid == "15.1.1-s21":
            corrected.append(
                f"Caching removes the shared part only ({link(rid, drill)}): the request's own {q} tokens "
                f"still cost {_time_words(t_cached)}, and a system prompt that changes per request gains nothing.")
    b1000 = kv_cache_bytes(model, 1000, 1, prec)
    follow = ("Every request shares that system prompt. What does caching it cost in memory?",
              f"One copy of its KV cache, {_gb_words(kv_prompt)} per model replica, as much as "
              f"{kv_prompt / b1000:.1f} sequences of 1,000 tokens would hold; shared by every request "
              "instead of recomputed by each.")
    return Answer(drill, _deployment_words(model, dep), strong, tuple(corrected), follow)


def _why_prefill_is_compute_bound(model, accelerator, precision, prompt: int = 2048, **_) -> Answer:
    from inferlab.core.costs import decode_costs, prefill_costs
    from inferlab.core.roofline import mlp_ridge_batch
    drill = DRILLS["15.1.1-2"]
    model, acc, prec, dep, note = _setup(model, accelerator, precision, prompt)
    ridge = ridge_point(acc, prec.compute_dtype)
    pre = _mlp_op(prefill_costs(model, 1, prompt, prec)).intensity
    dec = _mlp_op(decode_costs(model, 1, prompt, prec)).intensity
    ttft = prefill_time_s(model, dep, prompt)
    step = decode_step_time_s(model, dep, prompt)
    cross = mlp_ridge_batch(model, acc, prec, context_len=1)
    meas, why = _measured(dep)
    strong = (
        f"{note}In prefill one weight matrix multiplies all {prompt:,} prompt tokens: the MLP does "
        f"{pre:,.0f} FLOPs per byte it reads, above the {acc.name}'s ridge point of {ridge:.0f} FLOP/byte, so "
        f"the arithmetic units set the pace ({_time_words(ttft)} for the whole prompt, {_time_words(ttft / prompt)} per token).",
        f"In decode the same matrix multiplies one token: {dec:.2f} FLOP per byte, {dec / ridge:.2%} of the "
        f"ridge, so the memory bus sets the pace ({_time_words(step)} per step, a whole read of the weights for one "
        "token).",
    )
    if meas is not None:
        from inferlab.core.measured_latency import decode_bandwidth
        bw = decode_bandwidth(model, meas, prompt, 1)
        t_meas = prefill_time_s(model, meas, prompt)
        flops = 2 * model.n_matmul_params * prompt
        strong += (f"In practice (the kernels measured on an H100): the prefill reaches "
                   f"{flops / t_meas / (acc.peak(prec.compute_dtype) * dep.tp):.0%} of peak FLOP/s, the decode step "
                   f"{bw / (acc.hbm_bytes_per_s):.0%} of the datasheet's bandwidth: each is limited by the "
                   "resource the roofline names.",)
    follow = ("Below what prompt length is prefill memory-bound too?",
              f"Where the tokens in flight no longer reach the ridge: the MLP's intensity meets "
              f"{ridge:.0f} FLOP/byte at about {cross:,} tokens (the same count whether they are one prompt "
              "or a batch of decode steps).")
    return Answer(drill, _deployment_words(model, dep), strong, (), follow)


def _pick_accelerators(model, dep, prompt: int, context: int):
    """{name: (prefill s, decode step s)} on every accelerator of data/accelerators.toml at the
    scenario's tensor-parallel degree."""
    from inferlab.core.specs import list_accelerators
    out = {}
    for name in list_accelerators():
        a = get_accelerator(name)
        if dep.precision.compute_dtype not in a.peak_flops_per_s:
            continue
        d = Deployment(a, dep.precision, tp=dep.tp)
        out[a.name] = (prefill_time_s(model, d, prompt), decode_step_time_s(model, d, context))
    return out


def _separate_prefill_and_decode_pools(model, accelerator, precision, prompt: int = 2048, **_) -> Answer:
    from inferlab.notebook import lab
    drill = DRILLS["15.1.1-3"]
    model, acc, prec, dep, note = _setup(model, accelerator, precision, prompt)
    times = _pick_accelerators(model, dep, prompt, 1024)
    here_pre, here_dec = times[acc.name]
    gains = {n: (here_pre / p, here_dec / d) for n, (p, d) in times.items() if n != acc.name}
    # a decode pool's GPU decodes faster and gains more on decode than on prefill; a prefill pool's the reverse
    decode_side = {n: g for n, g in gains.items() if g[1] > 1 and g[1] > g[0]}
    prefill_side = {n: g for n, g in gains.items() if g[0] > 1 and g[0] > g[1]}
    sides = []
    for pool, side, k in (("decode", decode_side, 1), ("prefill", prefill_side, 0)):
        if side:
            best = max(side, key=lambda n: side[n][k] / side[n][1 - k])
            other = side[best][1 - k]
            pace = "at the same speed" if abs(other - 1) < 0.05 else f"{_ratio_words(other)} as fast"
            sides.append(f"the {best} {pool}s {_ratio_words(side[best][k])} as fast but "
                         f"{'prefills' if k else 'decodes'} {pace}, a {pool} pool's GPU")
        else:
            sides.append(f"no other accelerator of the library gains more on {pool} than on "
                         f"{'prefill' if k else 'decode'} against the {acc.name}, itself the {pool} side of such a pair")
    long_tokens = LONG_PROMPT
    sc = lab.Scenario(model, acc, prec, n_requests=200, tp=None)
    lp = lab.long_prompt(sc, long_tokens, lab.sustainable_rate(sc, 0.3), chunks=(CHUNK,))
    kv_move = kv_cache_bytes(model, prompt, 1, prec)
    link_s = kv_move / (acc.interconnect_bytes_per_s or float("inf"))
    from inferlab.serving.disaggregation import link as kv_link, transfer_time_s
    ib = kv_link("infiniband")
    ib_s = float(transfer_time_s(model, prec, prompt, ib, sc.tp))
    split = lab.disaggregation(sc, 4 * lab.sustainable_rate(sc, 0.45), replicas=4, long_tokens=LONG_MIX_TOKENS, long_share=0.2,
                               splits=((1, 3),))
    mix = lab.MIXES[1]
    strong = (
        f"{note}Prefill time follows peak FLOP/s, decode time follows memory bandwidth. Against the {acc.name} "
        f"(prefill of {prompt:,} tokens {_time_words(here_pre)}, decode step {_time_words(here_dec)}): {sides[0]}; {sides[1]}.",
        "Each pool scales with its own load: the prefill pool with prompt tokens per second, the decode "
        "pool with the sequences in flight (output lengths).",
        f"No head-of-line blocking: in one shared pool a {long_tokens:,}-token prompt (prefilled first, unchunked) "
        f"holds every running request's next token for up to {_time_words(lp.others_max_itl_s['unchunked'])} "
        f"(simulated on {sc.layout}), against {_time_words(decode_step_time_s(model, dep, 1024))} for a decode step"
        f"{_context_note(model, long_tokens)}.",
        f"Simulated on four replicas at {split.rate_per_s:g} requests/s with a fifth of the prompts "
        f"{LONG_MIX_TOKENS:,} tokens long: p99 ITL of the running requests {_time_words(split.p99_itl_s['shared, unchunked', mix])} "
        f"shared (unchunked), {_time_words(split.p99_itl_s['shared, chunked 512', mix])} shared with 512-token chunks, "
        f"{_time_words(split.p99_itl_s['disaggregated 1:3', mix])} split 1 prefill : 3 decode.",
    )
    corrected = (f"The price the chapter leaves out: each request's KV cache moves from one pool to the other, "
                 f"{_gb_words(kv_move)} for a {prompt:,}-token prompt, {_time_words(link_s)} over the {acc.name}'s "
                 f"{acc.interconnect_bytes_per_s / 1e9:.0f} GB/s interconnect inside a node and {_time_words(ib_s)} over "
                 f"InfiniBand NDR ({ib.gbps:.0f} Gbit/s) between nodes if it is copied after the prefill. Those are "
                 f"upper bounds: sent layer by layer while the prefill ({_time_words(here_pre)}) is still computing the "
                 f"next layers, only the last layer's share, {_time_words(ib_s / model.n_layers)} over InfiniBand, "
                 f"waits{' (the link is slower than the prefill, so ' + _time_words(ib_s - here_pre) + ' more)' if ib_s > here_pre else ''}. "
                 "In the run above (copied whole) "
                 f"the split's p99 TTFT is {_time_words(split.p99_ttft_s['disaggregated 1:3', mix])} against "
                 f"{_time_words(split.p99_ttft_s['shared, chunked 512', mix])} shared with chunks, until the prefill pool is "
                 "sized for the prompts.",)
    follow = ("When is disaggregation not worth it?",
              f"When prompts are short next to the answers: a {prompt:,}-token prefill costs {_time_words(here_pre)}, "
              f"{here_pre / here_dec:.0f} decode steps; with chunked prefill a shared pool already keeps the "
              f"others' gaps short (largest gap {_time_words(lp.others_max_itl_s[f'C={CHUNK}'])} with {CHUNK}-token "
              "chunks in the run above).")
    return Answer(drill, _deployment_words(model, dep), strong, corrected, follow, NOT_MODELLED.get(drill.id, ""),
                  corrected_heading="What the numbers add")


# ---------------------------------------------------------------------------------------------
# 15.1.2
# ---------------------------------------------------------------------------------------------

def _attention_intensity(model, prec, context: int, batch: int = 1) -> float:
    from inferlab.core.costs import decode_costs
    c = decode_costs(model, batch, context, prec).per_layer
    flops = c["attn_scores"].flops + c["attn_values"].flops
    nbytes = c["attn_scores"].bytes + c["attn_values"].bytes
    return float(flops / nbytes)


def _verification_attention_intensity(model, prec, context: int, query_tokens: int) -> float:
    """Attention's FLOPs per byte when `query_tokens` new tokens of one sequence are scored against its
    cache of `context` tokens in one pass (a speculative verification)."""
    from inferlab.core.costs import forward_costs
    c = forward_costs(model, 1, query_tokens, context, prec).per_layer
    flops = c["attn_scores"].flops + c["attn_values"].flops
    nbytes = c["attn_scores"].bytes + c["attn_values"].bytes
    return float(flops / nbytes)


def _mlp_op(costs):
    """The MLP's weight product whose intensity the answers quote: the up projection of a dense MLP,
    the routed experts of a mixture of experts (their weights are what a decode step reads)."""
    return costs.per_layer["mlp_experts"] if "mlp_experts" in costs.per_layer else costs.per_layer["mlp_up"]


def _mlp_intensity(model, prec, context: int, batch: int) -> float:
    from inferlab.core.costs import decode_costs
    return float(_mlp_op(decode_costs(model, batch, context, prec)).intensity)


def _contrast(model, dep: Deployment, context: int):
    """(accelerator, decode step s): among the accelerators with at least the scenario's peak, the one
    whose peak and bandwidth ratios to it differ most (the step follows one of them, not both)."""
    from inferlab.core.specs import list_accelerators
    acc, dtype = dep.accelerator, dep.precision.compute_dtype
    others = [get_accelerator(n) for n in list_accelerators()]
    others = [a for a in others if a.name != acc.name and dtype in a.peak_flops_per_s and a.peak(dtype) >= acc.peak(dtype)]
    if not others:
        others = [a for a in map(get_accelerator, list_accelerators()) if a.name != acc.name and dtype in a.peak_flops_per_s]
    pick = max(others, key=lambda a: abs(math.log(a.peak(dtype) / acc.peak(dtype))
                                         - math.log(a.hbm_bytes_per_s / acc.hbm_bytes_per_s)))
    return pick, decode_step_time_s(model, dep.with_(accelerator=pick), context)


def _why_generation_is_slow(model, accelerator, precision, context: int = 1000, **_) -> Answer:
    drill = DRILLS["15.1.2-1"]
    model, acc, prec, dep, note = _setup(model, accelerator, precision, context)
    ridge = ridge_point(acc, prec.compute_dtype)
    from inferlab.core.costs import decode_costs
    from inferlab.core.parallel import tp_shard
    step = decode_step_time_s(model, dep, context)
    step_costs = decode_costs(tp_shard(model, dep.tp), 1, context, prec).total
    w = float(step_costs.weight_bytes)  # the embedding: one row
    compute_s = float(step_costs.flops) / acc.peak(prec.compute_dtype)   # the step's arithmetic at peak
    mlp = _mlp_intensity(model, prec, context, 1)
    attn = _attention_intensity(model, prec, context)
    per_gpu = " per GPU" if dep.tp > 1 else ""
    strong = (
        f"{note}Decode is memory-bound: at $B$ = 1 each step reads {_gb_words(w)} of weights{per_gpu} (all of them but "
        f"the embedding table's unused rows) to produce one token: {_time_words(step)} per step at $S$ = "
        f"{context:,}, of which "
        f"{w / acc.hbm_bytes_per_s / step:.0%} is that read at {acc.hbm_bytes_per_s / 1e12:.2f} TB/s; "
        f"{1 / step:,.0f} tokens/s.",
        f"The intensities: the MLP's {mlp:.2f} and attention's {attn:.2f} FLOP/byte, against the "
        f"{acc.name}'s ridge point of {ridge:.0f}: the tensor cores are used at about {mlp / ridge:.2%} of "
        "their peak.",
    )
    meas, why = _measured(dep)
    if meas is not None:
        from inferlab.core.measured_latency import decode_bandwidth
        t_meas = decode_step_time_s(model, meas, context)
        strong += (f"In practice (the kernels measured on an H100) the step takes {_time_words(t_meas)}, the weights "
                   f"streaming at {decode_bandwidth(model, meas, context, 1) / acc.hbm_bytes_per_s:.0%} of the "
                   "datasheet's bandwidth: still the memory bus, only slower.",)
    other, t_other = _contrast(model, dep, context)
    peak_ratio = other.peak(prec.compute_dtype) / acc.peak(prec.compute_dtype)
    follow = ("Would a GPU with more FLOP/s help?",
              f"Not at $B$ = 1: the step's arithmetic, {float(step_costs.flops) / 1e9:,.1f} GFLOP, takes "
              f"{compute_s * 1e6:.0f} µs at the {acc.name}'s peak, {compute_s / step:.1%} of the "
              f"{_time_words(step)} step; infinite FLOP/s would save at most that. Bandwidth is what moves it: the "
              f"{other.name} has {peak_ratio:.2g}× the peak and {other.hbm_bytes_per_s / acc.hbm_bytes_per_s:.2g}× "
              f"the bandwidth, and its step is {step / t_other:.2g}× as fast.")
    return Answer(drill, _deployment_words(model, dep), strong, (), follow)


def _what_batching_buys(model, accelerator, precision, context: int = 1000, **_) -> Answer:
    from inferlab.core.roofline import mlp_ridge_batch
    drill = DRILLS["15.1.2-2"]
    model, acc, prec, dep, note = _setup(model, accelerator, precision, context)
    ridge = ridge_point(acc, prec.compute_dtype)
    b_max = _largest_batch(model, acc, context, prec, dep.tp)
    b_paper = max_batch(model, acc, context, prec, tp=dep.tp)
    mlp = {b: _mlp_intensity(model, prec, context, b) for b in (1, 16, b_max)}
    attn = {b: _attention_intensity(model, prec, context, b) for b in (1, b_max)}
    thr1 = throughput_tokens_per_s(model, dep, context, 1)
    thr_max = throughput_tokens_per_s(model, dep, context, b_max)
    cross = mlp_ridge_batch(model, acc, prec, context_len=context)
    strong = (
        f"{note}Batching shares each weight read among $B$ sequences: the MLP's intensity is "
        + ", ".join(f"{v:.1f} at $B$ = {b}" for b, v in mlp.items())
        + f" FLOP/byte, and throughput grows from {thr1:,.0f} to {thr_max:,.0f} tokens/s "
        f"({_ratio_words(thr_max / thr1)}) at the largest batch that fits.",
        f"Attention gains nothing: each sequence reads its own cache, {attn[1]:.2f} FLOP/byte at $B$ = 1 and "
        f"{attn[b_max]:.2f} at $B$ = {b_max}.",
        f"The wall is memory: weights plus $B$ caches of {context:,} tokens fill {_usable_sentence(acc)} at "
        f"$B_\\text{{max}}$ = {b_max} ({b_paper} with all {acc.memory_bytes / GB:.0f} GB, the chapter's formula, "
        "nothing left for activations or the runtime), "
        + (f"before the MLP would reach the ridge ({ridge:.0f} FLOP/byte) near $B$ ≈ {cross:,}." if cross > b_max else
           f"past the batch at which the MLP reaches the ridge ({ridge:.0f} FLOP/byte, $B$ ≈ {cross:,}): from there "
           "the MLP is compute-bound while attention stays memory-bound."),
    )
    corrected = []
    for rid in to_correct(drill):
        if rid == "15.1.2-s17":
            formula = (f"its intensity is $2/b_\\text{{kv}} \\cdot N/N_\\text{{kv}}$ whatever $B$")
            if model.n_kv_heads == model.n_heads and prec.kv in ("bf16", "fp16"):
                variant = model.gqa_variant(8) if model.n_kv_heads > 8 else None
                corrected.append(
                    f"\"Attention stays near 1\" holds here and only for multi-head attention with a 16-bit cache "
                    f"({link(rid, drill)}): {formula}, {attn[1]:.2f} FLOP/byte for {model.name} ({model.n_heads} query "
                    f"heads, each with its own KV head)"
                    + (f"; with 8 KV heads it would be {_attention_intensity(variant, prec, context):.2f}, "
                       "still flat in $B$." if variant is not None else "."))
            else:
                corrected.append(
                    f"\"Attention stays near 1\" holds for multi-head attention with a 16-bit cache only "
                    f"({link(rid, drill)}): {formula}, {attn[1]:.2f} FLOP/byte for {model.name} ({model.n_heads} "
                    f"query heads sharing {model.n_kv_heads} KV heads, a {prec.kv} cache): flat in $B$, but not 1.")
    bstar = kv_crossover_batch(model, context, prec, tp=dep.tp)
    ceiling = acc.hbm_bytes_per_s / kv_cache_bytes(model, context, 1, prec, tp=dep.tp)
    # half the ceiling in the memory-bound model; read off the library's step time, which may be
    # compute-bound there (a large batch of a mixture of experts)
    share = throughput_tokens_per_s(model, dep, context, max(round(bstar), 1)) / ceiling
    at_bstar = "already half its ceiling" if abs(share - 0.5) < 0.02 else f"{share:.0%} of its ceiling"
    follow = ("Does batching pay all the way to the memory wall?",
              f"Less and less: past $B^*$ = {bstar:.0f} the caches are most of each step's reads, and throughput "
              f"at $B^*$ is {at_bstar} of {ceiling:,.0f} tokens/s (bandwidth over one sequence's cache).")
    return Answer(drill, _deployment_words(model, dep), strong, tuple(corrected), follow)


def _architectural_fix_for_attention(model, accelerator, precision, context: int = 1000, **_) -> Answer:
    drill = DRILLS["15.1.2-3"]
    model, acc, prec, dep, note = _setup(model, accelerator, precision, context)
    groups = 8
    variant = model.gqa_variant(groups) if model.n_kv_heads > groups else None
    attn = _attention_intensity(model, prec, context)
    int8 = Precision(prec.weights, prec.activations, "int8", prec.compute)
    b_here = _largest_batch(model, acc, context, prec, dep.tp)
    strong = [f"{note}Shrink the cache each step reads. Grouped-query attention shares a KV head among several "
              "query heads, so each cached byte serves several heads: "]
    if variant is not None:
        b_var = _largest_batch(variant, acc, context, prec, dep.tp)
        strong[0] += (f"{model.name} with {groups} KV heads instead of {model.n_kv_heads} (a variant whose MLP is "
                      f"widened by the K and V weights it saves, so its weights stay "
                      f"{weight_bytes(variant, prec) / GB:.1f} GB) caches "
                      f"{kv_cache_bytes_per_token(model, prec) / kv_cache_bytes_per_token(variant, prec):.0f}× "
                      f"fewer bytes per token, raises attention's intensity from {attn:.2f} to "
                      f"{_attention_intensity(variant, prec, context):.2f} FLOP/byte and the batch a server holds in "
                      f"{_usable_sentence(acc)} from {b_here} to {b_var}.")
    else:
        strong[0] += (f"{model.name} already does ({model.n_heads} query heads on {model.n_kv_heads} KV heads): "
                      f"attention runs at {attn:.2f} FLOP/byte instead of the 1 of full multi-head attention.")
    strong.append(f"A narrower number format does the same per byte: an int8 cache gives "
                  f"{_attention_intensity(model, int8, context):.2f} FLOP/byte and room for "
                  f"{_largest_batch(model, acc, context, int8, dep.tp)} sequences instead of {b_here}.")
    k = SPECULATIVE_DRAFTS
    strong.append(f"Or score several tokens per read: speculative decoding (a draft model, or the model's own "
                  f"multi-token-prediction heads) verifies {k} drafted tokens and the next one in one pass, so each "
                  f"sequence's cache is read once for {k + 1} query tokens: attention's intensity rises to "
                  f"{_verification_attention_intensity(model, prec, context, k + 1):.2f} FLOP/byte (the tokens kept "
                  "depend on how often the drafts are accepted).")
    window, long_ctx = 1024, 8192
    from inferlab.notebook.reader import architecture_rows
    from inferlab.core.specs import resolve_model
    rows = {(r[0], r[2]): r for r in architecture_rows(acc, long_ctx, prec)}
    mla, swa, gqa = rows["deepseek-v3", "bf16"], rows["mistral-7b-v0.1", "bf16"], rows["llama-3-8b", "bf16"]
    v3, mistral = resolve_model("deepseek-v3"), resolve_model("mistral-7b-v0.1")
    strong.append(
        f"Multi-head latent attention (MLA, DeepSeek-V3) caches one latent of {v3.kv_lora_rank} + "
        f"{v3.qk_rope_head_dim} numbers per token and layer instead of keys and values for every head: "
        f"{mla[3]:,.0f} bytes per token over its {v3.n_layers} layers, and since all {v3.n_heads} query heads "
        f"score against that one latent, its decode attention does {mla[4]:.0f} FLOPs per byte it reads "
        f"(grouped-query Llama-3 8B: {gqa[4]:.0f}). A sliding window caps what a layer holds: Mistral 7B "
        f"(W = {mistral.sliding_window:,}) keeps {swa[3]:,.0f} bytes per token at {long_ctx:,} tokens and fits "
        f"{swa[5]:,} such sequences on one {acc.name}, half the cache Llama-3 8B's full attention holds with the same "
        f"KV heads ({gqa[3]:,.0f} bytes per token).")
    strong.append("Diffusion language models drop token-by-token decoding (the chapter's 5-10× is not checkable "
                  "here).")
    corrected = []
    for rid in to_correct(drill):
        if rid == "15.1.2-s30":
            full = _attention_intensity(model, prec, long_ctx)
            win = _attention_intensity(model, prec, window)
            corrected.append(
                f"A sliding window does not lift the intensity ({link(rid, drill)}): reading {window:,} "
                f"positions instead of {long_ctx:,} cuts attention's bytes {long_ctx / window:.0f}× and its FLOPs "
                f"as much, {full:.2f} → {win:.2f} FLOP/byte. It shortens the step, it does not change the "
                "regime.")
        elif rid == "15.1.2-s28":
            corrected.append(
                f"The premise holds for multi-head attention only ({link(rid, drill)}): with "
                f"{model.n_kv_heads} KV heads for {model.n_heads} query heads it is {attn:.2f}.")
    follow = ("Why does GQA raise the intensity when a sliding window does not?",
              "GQA keeps every query head's FLOPs and divides the bytes they read by the group size; a window "
              "divides both by the same factor.")
    return Answer(drill, _deployment_words(model, dep), tuple(strong), tuple(corrected), follow, NOT_MODELLED[drill.id])


# ---------------------------------------------------------------------------------------------
# 15.2.1
# ---------------------------------------------------------------------------------------------

def _ttft_or_itl_for_streaming_chat(model, accelerator, precision, prompt: int = 1024, context: int = 1024,
                                    **_) -> Answer:
    from inferlab.serving.metrics import SLO
    drill = DRILLS["15.2.1-1"]
    model, acc, prec, dep, note = _setup(model, accelerator, precision, context)
    ttft = prefill_time_s(model, dep, prompt)
    b_max = _largest_batch(model, acc, context, prec, dep.tp)
    itl1 = decode_step_time_s(model, dep, context, 1)
    itl_max = decode_step_time_s(model, dep, context, b_max)
    reading_tokens_per_s = READING_WORDS_PER_MIN / 60 * TOKENS_PER_WORD
    slowest_itl = 1 / reading_tokens_per_s
    e2e = ttft + (CHAT_ANSWER_TOKENS - 1) * itl_max
    streaming = e2e - ttft
    strong = (
        f"{note}TTFT is the prefill: compute-bound, growing with the prompt and the model ({_time_words(ttft)} for "
        f"{prompt:,} tokens). ITL is a decode step: bandwidth-bound, growing with the weight bytes and the "
        f"batch's caches: {_time_words(itl1)} at $B$ = 1, {_time_words(itl_max)} at the largest batch a server "
        f"holds, {b_max}, in {_usable_sentence(acc)}.",
        f"ITL decides how long the answer takes: a {CHAT_ANSWER_TOKENS}-token answer at $B$ = {b_max} ends after "
        f"{_time_words(e2e)}, of which {_time_words(streaming)} ({streaming / e2e:.1%}) is streaming and "
        f"{_time_words(ttft)} is TTFT. That is the chapter's point, and it is right about completion time and cost.",
        f"My position for a streaming chat: keep ITL under a budget and spend the effort on TTFT. A reader takes in "
        f"about {reading_tokens_per_s:.1f} tokens/s, so while ITL stays under {_time_words(slowest_itl)} the text "
        f"arrives faster than it is read ({_ratio_words(slowest_itl / itl_max)} faster here even at $B$ = {b_max}) "
        "and the only wait the user notices is the silence before the first token. Within that budget a longer ITL "
        "buys a larger batch and a cheaper token; lower it by quantising the weights and shrinking the KV cache, "
        "and lower TTFT with more GPUs for prefill, prompt caching or a shorter prompt.",
        f"It flips when nobody reads along: an agent's tool call, code completion or a non-streaming API waits "
        f"for the whole answer, TTFT + (N − 1) × ITL, and ITL ({streaming / e2e:.1%} of it here) is the number "
        "to cut; it flips too once ITL approaches reading pace.",
    )
    corrected = (
        f"The chapter's 200 ms and 100 ms are judgements ({link('15.2.1-z', drill)}; "
        f"{link('15.2.1-s21', drill)}); reading pace is a measurement: about {READING_WORDS_PER_MIN:.0f} words a "
        "minute ([Brysbaert 2019](../book/references.md#brysbaert2019)) at about 4/3 tokens a word "
        "([OpenAI](../book/references.md#openaitokens)).",
    )
    itl_target = SLO().tpot_s
    b = np.arange(1, b_max + 1)
    within = b[np.asarray(decode_step_time_s(model, dep, context, b)) <= itl_target]
    largest = int(within.max()) if within.size else 0
    follow = ("Which ITL target would you set, and what batch does it allow?",
              f"One well under reading pace ({_time_words(slowest_itl)}) and set by cost: at {itl_target * 1e3:.0f} ms "
              f"(the serving lab's) the {acc.name} runs up to {largest} sequences ("
              + ("the memory limit, so the target does not bind)." if largest == b_max
                 else f"under the memory limit of {b_max}).") if largest else
              f"One well under reading pace ({_time_words(slowest_itl)}); at {itl_target * 1e3:.0f} ms no batch fits: "
              f"even $B$ = 1 takes {_time_words(itl1)}.")
    return Answer(drill, _deployment_words(model, dep), strong, corrected, follow, corrected_heading="What the numbers add")


def _long_prompt_on_a_70b_model(model, accelerator, precision, **_) -> Answer:
    drill = DRILLS["15.2.1-2"]
    S = 50_000
    big, h100 = get_model("llama-2-70b"), get_accelerator("h100-sxm")
    rule = ttft_rule_s(70e9, S, h100)
    ours = prefill_time_s(big, h100, S, beyond_context=True)
    linear = prefill_time_s(big, h100, S, include_attention=False, beyond_context=True)
    def per_gpu(k):      # weights and the prompt's cache on each of k GPUs
        return float(weight_bytes(big, BF16, k) + kv_cache_bytes(big, S, 1, BF16, k, beyond_context=True))
    fit_tp = next((k for k in TP_DEGREES
                   if max_batch_usable(big, h100, S, BF16, k, SERVING, beyond_context=True) >= 1), None)
    tp_times = {k: prefill_time_s(big, Deployment(h100, tp=k), S, beyond_context=True) for k in TP_DEGREES}
    under_1s = next((k for k, t in tp_times.items() if t <= 1.0), None)
    strong = (
        f"TTFT ≈ 2PS/peak: the chapter's 2 × 70e9 × {S:,} / 989 TFLOP/s is {_time_words(rule)}; with the model's own "
        f"matrices and attention's quadratic term it is {_time_words(ours)}, of which attention is "
        f"{1 - linear / ours:.0%} at this length (Llama-2 70B's window is {big.max_context_tokens:,} tokens: "
        "50k is the arithmetic of a longer-context model of its size).",
        "Too slow for interactive use. Spread the prefill over several GPUs: "
        + ", ".join(f"{_time_words(t)} on {k}" for k, t in tp_times.items() if fit_tp and k >= fit_tp)
        + f" H100s (tensor parallelism, all-reduces included; {fit_tp} is the fewest that hold it, below); or "
        "shorten the prompt.",
    )
    corrected = []
    for rid in to_correct(drill):
        if rid == "15.2.1-ab":
            corrected.append(f"The chapter's 7 s leaves out attention, {1 - linear / ours:.0%} of the pass at "
                             f"{S:,} tokens: {_time_words(ours)} ({link(rid, drill)}).")
        elif rid == "15.2.1-s39":
            corrected.append(
                f"It cannot run on one H100 at all ({link(rid, drill)}): the weights are "
                f"{_gb_words(weight_bytes(big))} and the prompt's KV cache adds "
                f"{_gb_words(kv_cache_bytes(big, S, beyond_context=True))}. Against {_usable_sentence(h100)} of each GPU, "
                f"two GPUs hold {_gb_words(per_gpu(2))} each, too much on either count; tensor parallelism "
                f"{fit_tp} ({_gb_words(per_gpu(fit_tp))} per GPU, {_gb_words(SERVING.usable_bytes(h100) - per_gpu(fit_tp))} "
                "left for activations) is the smallest layout that holds it, or FP8 weights on two.")
        elif rid == "15.2.1-s40":
            t_chunk = chunked_prefill_time_s(big, Deployment(h100, tp=fit_tp), S, 2048, beyond_context=True)
            corrected.append(f"Chunked prefill does not bring this TTFT down ({link(rid, drill)}): on "
                             f"{fit_tp} H100s, 2,048-token chunks take {_time_words(t_chunk)} against "
                             f"{_time_words(tp_times[fit_tp])} in one pass.")
        elif rid == "15.2.1-s22":
            corrected.append(f"More GPUs help, but not {TP_DEGREES[-1]}-fold ({link(rid, drill)}): "
                             f"{_ratio_words(tp_times[fit_tp] / tp_times[TP_DEGREES[-1]])} from {fit_tp} to "
                             f"{TP_DEGREES[-1]} GPUs for {_ratio_words(TP_DEGREES[-1] / fit_tp)} the hardware.")
    model, acc, prec, dep, note = _setup(model, accelerator, precision, S)
    here = prefill_time_s(model, dep, S, beyond_context=True)
    meas, why = _measured(dep)
    practice = f", {_time_words(prefill_time_s(model, meas, S, beyond_context=True))} on the kernels measured on an H100" \
        if meas else ""
    strong += (f"{note}On this page's scenario, {_deployment_words(model, dep)}: {_time_words(here)}{practice}"
               f"{_context_note(model, S)}.",)
    follow = ("How many GPUs bring it under a second?",
              f"{under_1s} H100s ({_time_words(tp_times[under_1s])})." if under_1s else
              f"More than {TP_DEGREES[-1]}: even {TP_DEGREES[-1]} H100s take {_time_words(tp_times[TP_DEGREES[-1]])}.")
    return Answer(drill, "Llama-2 70B on H100s, then " + _deployment_words(model, dep), strong, tuple(corrected), follow)


def _chunked_prefill_and_the_others_tail(model, accelerator, precision, **_) -> Answer:
    from inferlab.core.costs import chunked_prefill_costs, prefill_costs
    from inferlab.notebook import lab
    drill = DRILLS["15.2.1-3"]
    S = SYSTEM_PROMPT
    model, acc, prec, dep, note = _setup(model, accelerator, precision, S)
    ch = chunked_prefill_costs(model, S, CHUNK, 1, prec, beyond_context=True).total
    one = prefill_costs(model, 1, S, prec, beyond_context=True).total
    sc = lab.Scenario(model, acc, prec, n_requests=200, tp=None)
    lp = lab.long_prompt(sc, S, lab.sustainable_rate(sc, 0.3), chunks=(256, CHUNK, 2048))
    base, chunked = lp.others_p99_itl_s["unchunked"], lp.others_p99_itl_s[f"C={CHUNK}"]
    strong = (
        f"{note}A prompt of $S$ = {S:,} tokens{_context_note(model, S)} in chunks of $C$ = {CHUNK} is "
        f"{math.ceil(S / CHUNK)} passes; each "
        "appends its keys and values to the cache, so at the end the cache is the same "
        f"{_gb_words(kv_cache_bytes(model, S, 1, prec, beyond_context=True))} as after one pass.",
        f"Between chunks the scheduler runs the other requests' decode steps: with that prompt "
        f"arriving into steady traffic (simulated on {sc.layout}), the others' p99 ITL is {_time_words(base)} unchunked "
        f"and {_time_words(chunked)} with {CHUNK}-token chunks, their largest gap {_time_words(lp.others_max_itl_s['unchunked'])} "
        f"→ {_time_words(lp.others_max_itl_s[f'C={CHUNK}'])}.",
        f"The long request pays: its own TTFT goes from {_time_words(lp.long_ttft_s['unchunked'])} to "
        f"{_time_words(lp.long_ttft_s[f'C={CHUNK}'])}.",
    )
    corrected = []
    flops_ids = [rid for rid in to_correct(drill) if rid in ("15.2.1-ac", "15.2.1-s24")]
    if flops_ids:
        corrected.append(
            f"Chunking adds no FLOPs ({'; '.join(link(rid, drill) for rid in flops_ids)}): every query-key pair is "
            f"still scored once (FLOPs ×{float(ch.flops / one.flops):.4f} at $S$ = {S:,}, $C$ = {CHUNK}). What grows "
            f"is memory traffic, bytes ×{float(ch.bytes / one.bytes):.2f}, in two parts: each of the "
            f"{math.ceil(S / CHUNK)} chunks re-reads the weights, which grows as $S/C$ (weight bytes "
            f"×{float(ch.weight_bytes / one.weight_bytes):.1f}), and the cache of the chunks before it, which grows as "
            f"$S^2/C$ (cache bytes {_gb_words(one.kv_bytes)} → {_gb_words(ch.kv_bytes)}).")
    from inferlab.notebook.lab_conclusions import largest_chunk_within
    target = 0.05
    best = largest_chunk_within(lp, target)
    follow = ("How do you choose $C$?",
              (f"The largest chunk that keeps the others' largest gap under the ITL target: with "
               f"{target * 1e3:.0f} ms here that is $C$ = {best:,} (of {', '.join(map(str, lp.chunks))} tried)."
               if best else f"No chunk size tried ({', '.join(map(str, lp.chunks))}) keeps the others' largest gap "
               f"under {target * 1e3:.0f} ms here: smaller chunks, or fewer sequences per replica."))
    return Answer(drill, _deployment_words(model, dep), strong, tuple(corrected), follow)


# ---------------------------------------------------------------------------------------------
# 15.2.2
# ---------------------------------------------------------------------------------------------

def _maximise_throughput(model, accelerator, precision, context: int = 1024, usd_per_gpu_hour: float = BOOK_USD_PER_GPU_HOUR,
                **_) -> Answer:
    drill = DRILLS["15.2.2-1"]
    model, acc, prec, dep, note = _setup(model, accelerator, precision, context)
    bstar = kv_crossover_batch(model, context, prec, tp=dep.tp)
    b_max = _largest_batch(model, acc, context, prec, dep.tp)
    thr1 = throughput_tokens_per_s(model, dep, context, 1)
    thr = throughput_tokens_per_s(model, dep, context, b_max)
    int8 = Precision(prec.weights, prec.activations, "int8", prec.compute)
    w8 = Precision("int8", prec.activations, prec.kv, prec.compute)
    variant = model.gqa_variant(8) if model.n_kv_heads > 8 else None
    strong = [
        f"{note}Memory first: at {context:,} tokens of context $B^*$ = $M_\\text{{weights}}/C_\\text{{kv}}$ = "
        f"{bstar:.0f} and the largest batch a server holds in {_usable_sentence(acc)} is {b_max}; throughput goes from {thr1:,.0f} tokens/s at "
        f"$B$ = 1 to {thr:,.0f} there ({_ratio_words(thr / thr1)}).",
        "Continuous batching keeps the batch near that limit (a finished sequence's slot is refilled at the "
        "next step).",
        f"An int8 KV cache halves $C_\\text{{kv}}$: $B^*$ = {kv_crossover_batch(model, context, int8, tp=dep.tp):.0f}, "
        f"$B_\\text{{max}}$ = {_largest_batch(model, acc, context, int8, dep.tp)}."
        + (f" Grouped-query attention with 8 KV heads (the variant whose MLP is widened to keep the parameter "
           f"count): $B_\\text{{max}}$ = {_largest_batch(variant, acc, context, prec, dep.tp)}."
           if variant is not None else ""),
        f"Then replicas: $M$ copies give $M$ × {thr:,.0f} tokens/s on "
        + (f"$M$ × {dep.tp} GPUs." if dep.tp > 1 else "$M$ GPUs, at the same latency."),
    ]
    meas, why = _measured(dep)
    if meas is not None:
        strong.append(f"In practice (the kernels measured on an H100) the largest batch gives "
                      f"{throughput_tokens_per_s(model, meas, context, b_max):,.0f} tokens/s.")
    corrected = []
    for rid in to_correct(drill):
        if rid == "15.2.2-s18":
            corrected.append(
                f"Int8 *weights* (weight-only, the cache still {prec.kv}) move $B^*$ the other way ({link(rid, drill)}): "
                f"they halve $M_\\text{{weights}}$, so $B^*$ falls to {kv_crossover_batch(model, context, w8, tp=dep.tp):.0f} "
                f"while $B_\\text{{max}}$ rises to {_largest_batch(model, acc, context, w8, dep.tp)}; only a smaller cache "
                "raises both.")
    c1, cmax = (cost_per_1k_tokens_usd(t, usd_per_gpu_hour, dep.tp) for t in (thr1, thr))
    follow = ("What does a token cost at each end?",
              f"At US\\${usd_per_gpu_hour:g} per GPU-hour, US\\${c1:.4f} per thousand tokens at $B$ = 1 and "
              f"US\\${cmax:.5f} at $B$ = {b_max}: {_ratio_words(c1 / cmax)} cheaper.")
    return Answer(drill, _deployment_words(model, dep), tuple(strong), tuple(corrected), follow)


PEAK_LOAD, QUIET_LOAD = 0.7, 0.1   # 15.2.2-2: the peak and quiet rates, as fractions of what one replica sustains
INTERFERENCE_SHARE = 0.5          # the slowest 1 % of steps carry prompts at least this often: prefill interference
TTFT_STEADY = 0.10                # a p99 TTFT that moves less than this between loads "barely moves"


def _length_words(dist) -> str:
    if dist.kind == "lognormal":
        return f"lognormal, mean {dist.mean:,.0f} tokens (coefficient of variation {dist.cv:g}, {dist.low:,}–{dist.high:,})"
    return f"{dist.kind}, mean {dist.mean:,.0f} tokens"


def _tail_latency_at_peak(model, accelerator, precision, **_) -> Answer:
    """15.2.2, question 2: the workload and its load factors, the diagnosis read off the peak run's
    slowest steps, the fixes in the order the evidence ranks them, and the capped run's stability.
    Reason: one answer's paragraphs, each from the simulations it runs; split, each piece would need
    the same six runs passed in."""
    from inferlab.notebook import lab
    from inferlab.serving.metrics import SLO
    from inferlab.serving.policies import ChunkedPrefill, ContinuousBatching
    drill = DRILLS["15.2.2-2"]
    sc = lab.Scenario(model, accelerator, precision, n_requests=300, tp=None)
    quiet, peak = lab.sustainable_rate(sc, QUIET_LOAD), lab.sustainable_rate(sc, PEAK_LOAD)
    per_replica = 1 / lab.request_time_s(sc)

    def run(rate, replicas=1, policy=ContinuousBatching()):    # the same requests at `rate`
        return sc.run(sc.workload(rate), policy, replicas=replicas)

    def stats(res):
        s = res.summary(sc.slo)
        steps = np.concatenate([t.step_s for t in res.traces])
        return s["batch"]["mean"], float(np.percentile(steps, 50)), float(np.percentile(steps, 99)), \
            s["itl_s"]["p99"], s["ttft_s"]["p99"]

    def slowest_steps(res):
        """(share of the slowest 1 % of steps that carry prompt tokens, mean prompt tokens they carry)."""
        steps = np.concatenate([t.step_s for t in res.traces])
        tokens = np.concatenate([t.tokens for t in res.traces])
        batch = np.concatenate([t.batch for t in res.traces])
        slow = steps >= np.percentile(steps, 99)
        prompt_tokens = tokens[slow] - batch[slow]
        return float(np.mean(prompt_tokens > 0)), float(np.mean(prompt_tokens))

    at_peak = run(peak)
    q, p = stats(run(quiet)), stats(at_peak)
    share, slow_prompt_tokens = slowest_steps(at_peak)
    chunked = stats(run(peak, policy=ChunkedPrefill(token_budget=CHUNK)))
    two = stats(run(peak, replicas=2))
    cap = max(2, int(round(0.75 * p[0])))
    capped = stats(run(peak, policy=ContinuousBatching(max_num_seqs=cap)))
    load_capped = peak * lab.request_time_s(sc, cap)       # demand over what a replica capped at `cap` serves
    load_peak = peak * lab.request_time_s(sc)
    out_mean = sc.output.mean
    burst = lab.sustainable_rate(sc, 2.0)                   # twice what one replica sustains: a queue forms
    prio = lab.priority_load(sc, burst, high_share=0.2)
    dep = Deployment(sc.accelerator, sc.precision, tp=sc.tp)
    interference = share >= INTERFERENCE_SHARE and p[3] / q[3] > p[1] / q[1]
    ttft_move = p[4] / q[4] - 1
    strong = [
        f"{sc.layout_note().strip()} The workload: {sc.n_requests} requests arriving at random (Poisson), prompts "
        f"{_length_words(sc.prompt)}, outputs {_length_words(sc.output)}, continuous batching on {sc.layout}. One "
        f"replica sustains about {per_replica:.1f} requests/s; quiet is {quiet:g} requests/s, peak {peak:g} "
        f"(load factors {quiet / per_replica:.2f} and {load_peak:.2f}).".strip(),
        f"What the run shows: from quiet to peak the mean batch grows from {q[0]:.1f} to {p[0]:.1f} sequences and "
        f"the median step only {p[1] / q[1] - 1:.0%} ({_time_words(q[1])} → {_time_words(p[1])}), but p99 ITL grows "
        f"{_ratio_words(p[3] / q[3])} ({_time_words(q[3])} → {_time_words(p[3])}). Of the slowest 1 % of steps "
        f"({_time_words(p[2])} and more) {share:.0%} carry a prompt, {slow_prompt_tokens:,.0f} prompt tokens on "
        "average. "
        + ("The tail is prefill interference, prompts joining the batch whole and stalling every running sequence "
           "for a step, not batch growth." if interference else
           "The tail follows the batch: the slow steps are mostly plain decode steps of a larger batch."),
        (f"p99 TTFT barely moves ({_time_words(q[4])} → {_time_words(p[4])}): at a load factor of {load_peak:.2f} the "
         "queue stays short, so the wait is not in the queue." if abs(ttft_move) < TTFT_STEADY else
         f"p99 TTFT moves {ttft_move:+.0%} ({_time_words(q[4])} → {_time_words(p[4])}): requests queue at peak."),
    ]
    fixes = [
        ("chunked prefill", f"{CHUNK}-token chunks at the same {peak:g} requests/s: p99 ITL "
         f"{_time_words(chunked[3])}, p99 TTFT {_time_words(chunked[4])}"),
        ("replicas", f"two replicas at the same {peak:g} requests/s run {two[0]:.1f} sequences each, p99 ITL "
         f"{_time_words(two[3])}, p99 TTFT {_time_words(two[4])}, at twice the GPUs"),
    ]
    if not interference:
        fixes.reverse()
    strong += [f"Fix {i}, {name}: {text}." for i, (name, text) in enumerate(fixes, 1)]
    strong.append(
        f"Fix 3, a priority queue, for bursts: at {burst:g} requests/s (twice what one replica sustains) with a fifth "
        f"of the requests latency-sensitive and admitted first, their p99 TTFT is "
        f"{_time_words(prio.p99_ttft_s['priority', 'high'])} against {_time_words(prio.p99_ttft_s['FIFO', 'high'])} first "
        f"come, first served, the others' {_time_words(prio.p99_ttft_s['priority', 'normal'])} against "
        f"{_time_words(prio.p99_ttft_s['FIFO', 'normal'])} (simulated, chunked prefill).")
    corrected = []
    for rid in to_correct(drill):
        if rid == "15.2.2-s21":
            stable = load_capped < 1
            corrected.append(
                f"Capping the batch at {cap} trades one tail for the other ({link(rid, drill)}): p99 ITL "
                f"{_time_words(p[3])} → {_time_words(capped[3])}, "
                + (f"p99 TTFT {_time_words(p[4])} → {_time_words(capped[4])} while the queue stays stable (load factor "
                   f"{load_capped:.2f})." if stable else
                   f"and the queue is no longer stable: {peak * out_mean:,.0f} output tokens/s demanded against about "
                   f"{out_mean / lab.request_time_s(sc, cap):,.0f} a capped replica serves (load factor "
                   f"{load_capped:.2f}), so requests wait longer the longer the run lasts; its p99 TTFT of "
                   f"{_time_words(capped[4])} measures this run's {sc.n_requests} requests, not a steady state."))
        elif rid == "15.2.2-s22":
            corrected.append(
                f"A priority queue shortens the wait, not the batch ({link(rid, drill)}): the latency-sensitive "
                f"requests decode beside the others, p99 TPOT {_time_words(prio.p99_tpot_s['FIFO', 'high'])} first come, "
                f"first served and {_time_words(prio.p99_tpot_s['priority', 'high'])} by priority.")
    target = SLO().tpot_s
    ctx = int(sc.prompt.mean + sc.output.mean)
    b_fit = max(1, _largest_batch(sc.model, sc.accelerator, ctx, sc.precision, sc.tp))
    b = np.arange(1, b_fit + 1)
    within = b[np.asarray(decode_step_time_s(sc.model, dep, ctx, b)) <= target]
    step_at_fit = float(decode_step_time_s(sc.model, dep, ctx, b_fit))
    threshold = (f"no batch that fits reaches the {target * 1e3:.0f} ms ITL target: the step at the largest, "
                 f"$B$ = {b_fit} at the mean context of {ctx:,} tokens, is {_time_words(step_at_fit)}, so the batch "
                 "is not the early warning here" if within.size == b_fit else
                 f"the step reaches the {target * 1e3:.0f} ms ITL target at $B$ = {int(within.max()) + 1 if within.size else 1} "
                 f"(mean context {ctx:,} tokens), against a mean of {p[0]:.1f} at peak")
    follow = ("Which number do you watch to catch it early?",
              f"Two. The load factor, arrival rate × the time a request costs a replica ({load_peak:.2f} at peak here): "
              "near 1 the queue, and TTFT, grow without bound. And the p99 step split by what it carries: "
              f"{threshold}; the steps that carry prompts are.")
    return Answer(drill, _deployment_words(sc.model, dep), tuple(strong), tuple(corrected), follow,
                  NOT_MODELLED.get(drill.id, ""))


def _memory_budget_of_70b_on_two_h100s(model, accelerator, precision, **_) -> Answer:
    drill = DRILLS["15.2.2-3"]
    big, h100 = get_model("llama-2-70b"), get_accelerator("h100-sxm")
    B, S = 32, 2048
    fit = headroom_fit(big, h100, B, S, BF16, tp=2)
    usable = SERVING.usable_bytes(h100)
    b_usable = max_batch_usable(big, h100, S, BF16, 2, SERVING)
    b_card = max_batch_usable(big, h100, S, BF16, 2, VLLM_ON_CARD)
    fp8 = Precision("fp8", "bf16", "bf16", "bf16")
    b_fp8 = max_batch_usable(big, h100, S, fp8, 2, SERVING)
    four = headroom_fit(big, h100, B, S, BF16, tp=4)
    strong = (
        f"Weights: {_gb_words(weight_bytes(big))} in bf16, {_gb_words(fit.weight_bytes)} per GPU at tensor parallelism 2.",
        f"KV cache: $2 \\cdot L \\cdot N_\\text{{kv}} \\cdot H \\cdot S \\cdot B \\cdot 2$ bytes = 2 × {big.n_layers} × "
        f"{big.n_kv_heads} × {big.head_dim} × {S:,} × {B} × 2 = {_gb_words(kv_cache_bytes(big, S, B))}: Llama-2 70B "
        f"caches {big.n_kv_heads} KV heads, not its {big.n_heads} query heads. Tensor parallelism splits the KV "
        f"heads with the attention weights: {_gb_words(fit.kv_bytes)} per GPU.",
        f"Per GPU {_gb_words(fit.used_bytes)}: on paper it fits the {h100.memory_bytes / GB:.0f} GB with "
        f"{_gb_words(fit.free_bytes('datasheet'))} to spare, which leaves nothing for activations, the CUDA "
        f"context and NCCL's buffers. Against {_usable_sentence(h100)}, it does not start: the weights "
        f"leave room for {b_usable} such sequences ({b_card} on the card's own capacity).",
        f"So: {b_usable} sequences on two GPUs, or tensor parallelism 4 ({_gb_words(four.used_bytes)} per GPU, "
        f"{_gb_words(usable - four.used_bytes)} left of the usable {_gb_words(usable)}), or FP8 weights on two "
        f"({b_fp8} sequences).",
    )
    ids = to_correct(drill)
    as_counted = big.gqa_variant(big.n_heads)      # the chapter counts every query head as a KV head
    corrected = (
        "The chapter's budget goes wrong at its first step: it counts 64 KV heads and leaves the cache "
        f"unsharded, so its 68 GB (its own product is "
        f"{_gb_words(kv_cache_bytes(as_counted, S, B))}) and the "
        "104 GB per GPU fall. Its conclusion survives for another reason: at 32 sequences the configuration "
        f"leaves {_gb_words(fit.free_bytes('datasheet'))}, so a server does reduce the batch, to {b_usable}, not 14 ("
        + ", ".join(link(rid, drill) for rid in ids) + ").",) if ids else ()
    model, acc, prec, dep, note = _setup(model, accelerator, precision, S)
    here = headroom_fit(model, acc, B, S, prec, tp=dep.tp)
    tp_here = dep.tp
    usable_here = SERVING.usable_bytes(acc)
    while here.used_bytes > usable_here and tp_here < 64:
        tp_here *= 2
        here = headroom_fit(model, acc, B, S, prec, tp=tp_here)
    strong += (f"On this page's scenario, {model.name} at $B$ = {B}, $S$ = {S:,} on "
               f"{_deployment_words(model, dep.with_(tp=tp_here)).removeprefix(model.name + ' on ')}: weights "
               f"{_gb_words(here.weight_bytes)} and KV cache {_gb_words(here.kv_bytes)} per GPU, "
               f"{_gb_words(here.used_bytes)} of the {_gb_words(usable_here)} usable"
               + (" (the smallest power-of-two layout that holds them)." if tp_here > 1 else "."),)
    longest = int((usable - fit.weight_bytes) // (kv_cache_bytes_per_token(big, BF16, tp=2) * B))
    follow = ("How long a context could the same two GPUs hold at $B$ = 32?",
              f"{longest:,} tokens per sequence in the usable {_gb_words(usable)} per GPU "
              f"({int((h100.memory_bytes - fit.weight_bytes) // (kv_cache_bytes_per_token(big, BF16, tp=2) * B)):,} "
              f"with all {h100.memory_bytes / GB:.0f} GB, nothing kept for activations or the runtime).")
    return Answer(drill, "Llama-2 70B on two H100s, then " + _deployment_words(model, dep), strong, corrected, follow)


_ANSWERS = {"15.1.1-1": _long_system_prompt_and_slow_ttft, "15.1.1-2": _why_prefill_is_compute_bound, "15.1.1-3": _separate_prefill_and_decode_pools,
            "15.1.2-1": _why_generation_is_slow, "15.1.2-2": _what_batching_buys, "15.1.2-3": _architectural_fix_for_attention,
            "15.2.1-1": _ttft_or_itl_for_streaming_chat, "15.2.1-2": _long_prompt_on_a_70b_model, "15.2.1-3": _chunked_prefill_and_the_others_tail,
            "15.2.2-1": _maximise_throughput, "15.2.2-2": _tail_latency_at_peak, "15.2.2-3": _memory_budget_of_70b_on_two_h100s}


@yardstick
def answer(section: str, number: int, model, accelerator, precision: Precision = BF16, **page) -> Answer:
    """The folded strong answer to `section`'s interview question `number`, with the numbers of the
    scenario (`model`, `accelerator`, `precision`: objects, as the What-if cell resolves them) and the
    page's own settings where a question uses them (`context`, `prompt`, `usd_per_gpu_hour`)."""
    d = drill(section, number)
    return _ANSWERS[d.id](model, accelerator, precision, **page)



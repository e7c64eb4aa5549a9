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
TP_DEGREES = (2, 4, 8)


# ---------------------------------------------------------------------------------------------
# Numbers in words
# ---------------------------------------------------------------------------------------------

def _t(seconds: float) -> str:
    """A time as a reader says it: '7.93 ms', '298 ms', '10.2 s'."""
    s = float(seconds)
    if s >= 1:
        return f"{s:.3g} s" if s < 100 else f"{s:,.0f} s"
    ms = s * 1e3
    return f"{ms:.3g} ms" if ms >= 0.01 else f"{ms:.2g} ms"


def _gb(nbytes: float) -> str:
    x = float(nbytes) / GB
    return f"{x:.3g} GB" if x < 100 else f"{x:,.0f} GB"


def _x(ratio: float) -> str:
    return f"{ratio:.2g}×" if ratio < 10 else f"{ratio:,.0f}×"


def _on(model, dep: Deployment) -> str:
    n = {1: "one", 2: "two", 4: "four", 8: "eight", 16: "sixteen"}.get(dep.tp, str(dep.tp))
    return f"{model.name} on {n} {dep.accelerator.name}{'s' if dep.tp > 1 else ''}" + (
        f" (tensor parallelism {dep.tp})" if dep.tp > 1 else "")


# ---------------------------------------------------------------------------------------------
# The answer
# ---------------------------------------------------------------------------------------------


def _setup(model, accelerator, precision, seq_len: int):
    """(model, accelerator, precision, deployment, note): the deployment is one device when a sequence
    of `seq_len` fits there, else the smallest tensor-parallel degree that holds one (`fit_advice`);
    `note` says so ('' on one device)."""
    model, acc, precision = check_model(model), check_accelerator(accelerator), check_precision(precision)
    fit = fit_advice(model, acc, seq_len, precision)
    tp = 1 if fit.fits or fit.tp is None else fit.tp
    note = "" if tp == 1 else (f"{model.name} does not fit on one {acc.name} ({fit.weight_gb:.0f} GB of weights "
                               f"against {fit.memory_gb:.0f} GB), so these numbers are for tensor parallelism {tp}. ")
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


def _context_note(model, tokens: int) -> str:
    limit = model.max_context_tokens
    if limit is None or tokens <= limit:
        return ""
    return (f" ({tokens:,} tokens is beyond {model.name}'s context window of {limit:,}: the number is "
            "the arithmetic, a yardstick)")


# ---------------------------------------------------------------------------------------------
# 15.1.1
# ---------------------------------------------------------------------------------------------

def _prefill_1(model, accelerator, precision, **_) -> Answer:
    drill = DRILLS["15.1.1-1"]
    model, acc, prec, dep, note = _setup(model, accelerator, precision, SYSTEM_PROMPT)
    S, q = SYSTEM_PROMPT, USER_TURN
    t = prefill_time_s(model, dep, S)
    meas, why = _measured(dep)
    t_meas = prefill_time_s(model, meas, S) if meas else None
    t_cached = extend_time_s(model, dep, q, S)
    t_chunked = chunked_prefill_time_s(model, dep, S, CHUNK)
    kv_prompt = kv_cache_bytes(model, S, 1, prec)
    peak = acc.peak(prec.compute_dtype) * dep.tp
    mfu_at_4s = 2 * model.n_matmul_params * S / 4.0 / peak
    tp2 = Deployment(acc, prec, tp=2 * dep.tp)
    t_tp2 = prefill_time_s(model, tp2, S)
    comm_share = 1 - prefill_time_s(model, tp2.with_(allreduce=False), S) / t_tp2   # what the all-reduces add
    practice = (f"; on the kernels measured on an H100 it is {_t(t_meas)}" if t_meas else "")
    strong = (
        f"{note}Start from the arithmetic: prefilling {S:,} tokens takes {_t(t)} on the ideal roofline"
        f"{practice}{_context_note(model, S)}. A 4 s TTFT is {_x(4 / t)} that, so most of the 4 s is not "
        "this prompt's compute: look for queueing behind other prefills and for a GPU running far below "
        f"peak (4 s would mean {mfu_at_4s:.1%} of peak FLOP/s).",
        f"Prompt caching: when requests share the system prompt, compute its KV cache ({_gb(kv_prompt)}) "
        f"once; each request then prefills only its own {q} tokens against it, {_t(t_cached)} instead of "
        f"{_t(extend_time_s(model, dep, S + q, 0))}.",
        f"Tensor parallelism: on {2 * dep.tp} GPUs the prefill takes {_t(t_tp2)}, of which the all-reduces are "
        f"{comm_share:.0%}; check that they do not dominate.",
        "Utilisation: measure the achieved FLOP/s of the prefill; far below peak means the time goes "
        "elsewhere (the scheduler, small kernels, waiting).",
    )
    corrected = []
    for rid in to_correct(drill):
        if rid == "15.1.1-s20":
            corrected.append(
                f"Chunked prefill does not shorten this request's TTFT ({link(rid, drill)}): alone on the GPU, "
                f"{math.ceil(S / CHUNK)} chunks of {CHUNK} take {_t(t_chunked)} against {_t(t)} in one pass, "
                "each chunk re-reading the weights; chunking protects the other requests' token gaps.")
        elif rid == "15.1.1-s21":
            corrected.append(
                f"Caching removes the shared part only ({link(rid, drill)}): the request's own {q} tokens "
                f"still cost {_t(t_cached)}, and a system prompt that changes per request gains nothing.")
    b1000 = kv_cache_bytes(model, 1000, 1, prec)
    follow = ("Every request shares that system prompt. What does caching it cost in memory?",
              f"One copy of its KV cache, {_gb(kv_prompt)} per model replica, as much as "
              f"{kv_prompt / b1000:.1f} sequences of 1,000 tokens would hold; shared by every request "
              "instead of recomputed by each.")
    return Answer(drill, _on(model, dep), strong, tuple(corrected), follow)


def _prefill_2(model, accelerator, precision, prompt: int = 2048, **_) -> Answer:
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
        f"the arithmetic units set the pace ({_t(ttft)} for the whole prompt, {_t(ttft / prompt)} per token).",
        f"In decode the same matrix multiplies one token: {dec:.2f} FLOP per byte, {dec / ridge:.2%} of the "
        f"ridge, so the memory bus sets the pace ({_t(step)} per step, a whole read of the weights for one "
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
    return Answer(drill, _on(model, dep), strong, (), follow)


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


def _prefill_3(model, accelerator, precision, prompt: int = 2048, **_) -> Answer:
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
            sides.append(f"the {best} {pool}s {_x(side[best][k])} as fast but "
                         f"{'prefills' if k else 'decodes'} {_x(side[best][1 - k])} as fast, a {pool} pool's GPU")
        else:
            sides.append(f"no other accelerator of the library gains more on {pool} than on "
                         f"{'prefill' if k else 'decode'} against the {acc.name}, itself the {pool} side of such a pair")
    long_tokens = 16_000
    sc = lab.Scenario(model, acc, prec, n_requests=200, tp=None)
    lp = lab.long_prompt(sc, long_tokens, _rate(sc, 0.3), chunks=(CHUNK,))
    kv_move = kv_cache_bytes(model, prompt, 1, prec)
    link_s = kv_move / (acc.interconnect_bytes_per_s or float("inf"))
    from inferlab.serving.disaggregation import link as kv_link, transfer_time_s
    ib = kv_link("infiniband")
    ib_s = float(transfer_time_s(model, prec, prompt, ib, sc.tp))
    split = lab.disaggregation(sc, 4 * _rate(sc, 0.45), replicas=4, long_tokens=LONG_MIX_TOKENS, long_share=0.2,
                               splits=((1, 3),))
    mix = lab.MIXES[1]
    strong = (
        f"{note}Prefill time follows peak FLOP/s, decode time follows memory bandwidth. Against the {acc.name} "
        f"(prefill of {prompt:,} tokens {_t(here_pre)}, decode step {_t(here_dec)}): {sides[0]}; {sides[1]}.",
        "Each pool scales with its own load: the prefill pool with prompt tokens per second, the decode "
        "pool with the sequences in flight (output lengths).",
        f"No head-of-line blocking: in one shared pool a {long_tokens:,}-token prompt (prefilled first, unchunked) "
        f"holds every running request's next token for up to {_t(lp.others_max_itl_s['unchunked'])} "
        f"(simulated on {sc.layout}), against {_t(decode_step_time_s(model, dep, 1024))} for a decode step.",
        f"Simulated on four replicas at {split.rate_per_s:g} requests/s with a fifth of the prompts "
        f"{LONG_MIX_TOKENS:,} tokens long: p99 ITL of the running requests {_t(split.p99_itl_s['shared, unchunked', mix])} "
        f"shared (unchunked), {_t(split.p99_itl_s['shared, chunked 512', mix])} shared with 512-token chunks, "
        f"{_t(split.p99_itl_s['disaggregated 1:3', mix])} split 1 prefill : 3 decode.",
    )
    corrected = (f"The price the chapter leaves out: each request's KV cache moves from one pool to the other, "
                 f"{_gb(kv_move)} for a {prompt:,}-token prompt, {_t(link_s)} over the {acc.name}'s "
                 f"{acc.interconnect_bytes_per_s / 1e9:.0f} GB/s interconnect inside a node and {_t(ib_s)} over "
                 f"InfiniBand NDR ({ib.gbps:.0f} Gbit/s) between nodes, on every request's TTFT; in the run above "
                 f"the split's p99 TTFT is {_t(split.p99_ttft_s['disaggregated 1:3', mix])} against "
                 f"{_t(split.p99_ttft_s['shared, chunked 512', mix])} shared with chunks, until the prefill pool is "
                 "sized for the prompts.",)
    follow = ("When is disaggregation not worth it?",
              f"When prompts are short next to the answers: a {prompt:,}-token prefill costs {_t(here_pre)}, "
              f"{here_pre / here_dec:.0f} decode steps; with chunked prefill a shared pool already keeps the "
              f"others' gaps short (largest gap {_t(lp.others_max_itl_s[f'C={CHUNK}'])} with {CHUNK}-token "
              "chunks in the run above).")
    return Answer(drill, _on(model, dep), strong, corrected, follow, NOT_MODELLED.get(drill.id, ""),
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


def _decode_1(model, accelerator, precision, context: int = 1000, **_) -> Answer:
    drill = DRILLS["15.1.2-1"]
    model, acc, prec, dep, note = _setup(model, accelerator, precision, context)
    ridge = ridge_point(acc, prec.compute_dtype)
    from inferlab.core.costs import decode_costs
    from inferlab.core.parallel import tp_shard
    step = decode_step_time_s(model, dep, context)
    w = float(decode_costs(tp_shard(model, dep.tp), 1, context, prec).total.weight_bytes)  # the embedding: one row
    mlp = _mlp_intensity(model, prec, context, 1)
    attn = _attention_intensity(model, prec, context)
    per_gpu = " per GPU" if dep.tp > 1 else ""
    strong = (
        f"{note}Decode is memory-bound: at $B$ = 1 each step reads {_gb(w)} of weights{per_gpu} (all of them but "
        f"the embedding table's unused rows) to produce one token: {_t(step)} per step, of which "
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
        strong += (f"In practice (the kernels measured on an H100) the step takes {_t(t_meas)}, the weights "
                   f"streaming at {decode_bandwidth(model, meas, context, 1) / acc.hbm_bytes_per_s:.0%} of the "
                   "datasheet's bandwidth: still the memory bus, only slower.",)
    other, t_other = _contrast(model, dep, context)
    peak_ratio = other.peak(prec.compute_dtype) / acc.peak(prec.compute_dtype)
    follow = ("Would a GPU with more FLOP/s help?",
              f"Not at $B$ = 1: the {other.name} has {peak_ratio:.2g}× the {acc.name}'s peak and "
              f"{other.hbm_bytes_per_s / acc.hbm_bytes_per_s:.2g}× its bandwidth, and its step is "
              f"{step / t_other:.2g}× as fast: the bandwidth ratio, not the FLOP/s ratio.")
    return Answer(drill, _on(model, dep), strong, (), follow)


def _decode_2(model, accelerator, precision, context: int = 1000, **_) -> Answer:
    from inferlab.core.roofline import mlp_ridge_batch
    drill = DRILLS["15.1.2-2"]
    model, acc, prec, dep, note = _setup(model, accelerator, precision, context)
    ridge = ridge_point(acc, prec.compute_dtype)
    b_max = max_batch(model, acc, context, prec, tp=dep.tp)
    mlp = {b: _mlp_intensity(model, prec, context, b) for b in (1, 16, b_max)}
    attn = {b: _attention_intensity(model, prec, context, b) for b in (1, b_max)}
    thr1 = throughput_tokens_per_s(model, dep, context, 1)
    thr_max = throughput_tokens_per_s(model, dep, context, b_max)
    cross = mlp_ridge_batch(model, acc, prec, context_len=context)
    strong = (
        f"{note}Batching shares each weight read among $B$ sequences: the MLP's intensity is "
        + ", ".join(f"{v:.1f} at $B$ = {b}" for b, v in mlp.items())
        + f" FLOP/byte, and throughput grows from {thr1:,.0f} to {thr_max:,.0f} tokens/s "
        f"({_x(thr_max / thr1)}) at the largest batch that fits.",
        f"Attention gains nothing: each sequence reads its own cache, {attn[1]:.2f} FLOP/byte at $B$ = 1 and "
        f"{attn[b_max]:.2f} at $B$ = {b_max}.",
        f"The wall is memory: weights plus $B$ caches of {context:,} tokens fill the {acc.name}'s "
        f"{acc.memory_bytes / GB:.0f} GB at $B_\\text{{max}}$ = {b_max}, "
        + (f"before the MLP would reach the ridge ({ridge:.0f} FLOP/byte) near $B$ ≈ {cross:,}." if cross > b_max else
           f"past the batch at which the MLP reaches the ridge ({ridge:.0f} FLOP/byte, $B$ ≈ {cross:,}): from there "
           "the MLP is compute-bound while attention stays memory-bound."),
    )
    corrected = []
    for rid in to_correct(drill):
        if rid == "15.1.2-s17":
            corrected.append(
                f"\"Attention stays near 1\" holds for multi-head attention only ({link(rid, drill)}): its "
                f"intensity is $2/b_\\text{{kv}} \\cdot N/N_\\text{{kv}}$, {attn[1]:.2f} FLOP/byte for {model.name} "
                f"({model.n_heads} query heads sharing {model.n_kv_heads} KV heads, a {prec.kv} cache), flat in $B$ "
                "but not 1.")
    bstar = kv_crossover_batch(model, context, prec, tp=dep.tp)
    ceiling = acc.hbm_bytes_per_s / kv_cache_bytes(model, context, 1, prec, tp=dep.tp)
    # half the ceiling in the memory-bound model; read off the library's step time, which may be
    # compute-bound there (a large batch of a mixture of experts)
    share = throughput_tokens_per_s(model, dep, context, max(round(bstar), 1)) / ceiling
    at_bstar = "already half its ceiling" if abs(share - 0.5) < 0.02 else f"{share:.0%} of its ceiling"
    follow = ("Does batching pay all the way to the memory wall?",
              f"Less and less: past $B^*$ = {bstar:.0f} the caches are most of each step's reads, and throughput "
              f"at $B^*$ is {at_bstar} of {ceiling:,.0f} tokens/s (bandwidth over one sequence's cache).")
    return Answer(drill, _on(model, dep), strong, tuple(corrected), follow)


def _decode_3(model, accelerator, precision, context: int = 1000, **_) -> Answer:
    drill = DRILLS["15.1.2-3"]
    model, acc, prec, dep, note = _setup(model, accelerator, precision, context)
    groups = 8
    variant = model.gqa_variant(groups) if model.n_kv_heads > groups else None
    attn = _attention_intensity(model, prec, context)
    int8 = Precision(prec.weights, prec.activations, "int8", prec.compute)
    b_here = max_batch(model, acc, context, prec, tp=dep.tp)
    strong = [f"{note}Shrink the cache each step reads. Grouped-query attention shares a KV head among several "
              "query heads, so each cached byte serves several heads: "]
    if variant is not None:
        b_var = max_batch(variant, acc, context, prec, tp=dep.tp)
        strong[0] += (f"{model.name} with {groups} KV heads instead of {model.n_kv_heads} caches "
                      f"{kv_cache_bytes_per_token(model, prec) / kv_cache_bytes_per_token(variant, prec):.0f}× "
                      f"fewer bytes per token, raises attention's intensity from {attn:.2f} to "
                      f"{_attention_intensity(variant, prec, context):.2f} FLOP/byte and the batch that fits from "
                      f"{b_here} to {b_var}.")
    else:
        strong[0] += (f"{model.name} already does ({model.n_heads} query heads on {model.n_kv_heads} KV heads): "
                      f"attention runs at {attn:.2f} FLOP/byte instead of the 1 of full multi-head attention.")
    strong.append(f"A narrower number format does the same per byte: an int8 cache gives "
                  f"{_attention_intensity(model, int8, context):.2f} FLOP/byte and room for "
                  f"{max_batch(model, acc, context, int8, tp=dep.tp)} sequences instead of {b_here}.")
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
    return Answer(drill, _on(model, dep), tuple(strong), tuple(corrected), follow, NOT_MODELLED[drill.id])


# ---------------------------------------------------------------------------------------------
# 15.2.1
# ---------------------------------------------------------------------------------------------

def _latency_1(model, accelerator, precision, prompt: int = 1024, context: int = 1024, **_) -> Answer:
    from inferlab.serving.metrics import SLO
    drill = DRILLS["15.2.1-1"]
    model, acc, prec, dep, note = _setup(model, accelerator, precision, context)
    ttft = prefill_time_s(model, dep, prompt)
    b_max = max_batch(model, acc, context, prec, tp=dep.tp)
    itl1 = decode_step_time_s(model, dep, context, 1)
    itl_max = decode_step_time_s(model, dep, context, b_max)
    reading_tokens_per_s = READING_WORDS_PER_MIN / 60 * TOKENS_PER_WORD
    slowest_itl = 1 / reading_tokens_per_s
    strong = (
        f"{note}TTFT is the prefill: compute-bound, growing with the prompt and the model ({_t(ttft)} for "
        f"{prompt:,} tokens). ITL is a decode step: bandwidth-bound, growing with the weight bytes and the "
        f"batch's caches ({_t(itl1)} at $B$ = 1, {_t(itl_max)} at the largest batch, {b_max}).",
        "The chapter's answer: ITL matters more for streaming chat; lower it by quantising the weights and "
        "shrinking the KV cache, and TTFT by more GPUs for prefill or a shorter prompt.",
    )
    e2e = ttft + (CHAT_ANSWER_TOKENS - 1) * itl_max
    corrected = (
        f"The chapter's 200 ms and 100 ms are judgements ({link('15.2.1-z', drill)}; "
        f"{link('15.2.1-s21', drill)}); reading pace is a number: a reader takes in about "
        f"{READING_WORDS_PER_MIN:.0f} words a minute, {reading_tokens_per_s:.1f} tokens/s "
        "([Brysbaert 2019](../book/references.md#brysbaert2019); about 4/3 tokens a word, "
        "[OpenAI](../book/references.md#openaitokens)), so a stream keeps "
        f"ahead of the reader while ITL is under {_t(slowest_itl)}. Here ITL is {_t(itl_max)} even at "
        f"$B$ = {b_max}, {_x(slowest_itl / itl_max)} faster than reading: once text flows, ITL is invisible, "
        f"and the wait the user sees is TTFT. ITL matters through cost: it sets how large a batch, and how "
        f"cheap a token, stays under the ITL target ({SLO().tpot_s * 1e3:.0f} ms in the serving lab).",
        f"A {CHAT_ANSWER_TOKENS}-token answer at $B$ = {b_max} ends after {_t(e2e)}: TTFT {_t(ttft)}, "
        f"then {_t(e2e - ttft)} of streaming.",
    )
    itl_target = SLO().tpot_s
    b = np.arange(1, b_max + 1)
    within = b[np.asarray(decode_step_time_s(model, dep, context, b)) <= itl_target]
    largest = int(within.max()) if within.size else 0
    follow = ("Which ITL target would you set, and what batch does it allow?",
              f"One the reader never notices, well under {_t(slowest_itl)}; at {itl_target * 1e3:.0f} ms the "
              f"{acc.name} runs up to {largest} sequences ("
              + ("the memory limit)." if largest == b_max else f"under the memory limit of {b_max})."))
    return Answer(drill, _on(model, dep), strong, corrected, follow, corrected_heading="What the numbers add")


def _latency_2(model, accelerator, precision, **_) -> Answer:
    drill = DRILLS["15.2.1-2"]
    S = 50_000
    big, h100 = get_model("llama-2-70b"), get_accelerator("h100-sxm")
    rule = ttft_rule_s(70e9, S, h100)
    ours = prefill_time_s(big, h100, S, beyond_context=True)
    linear = prefill_time_s(big, h100, S, include_attention=False, beyond_context=True)
    fit = fit_advice(big, h100, S, BF16, beyond_context=True)
    tp_times = {k: prefill_time_s(big, Deployment(h100, tp=k), S, beyond_context=True) for k in TP_DEGREES}
    under_1s = next((k for k, t in tp_times.items() if t <= 1.0), None)
    strong = (
        f"TTFT ≈ 2PS/peak: the chapter's 2 × 70e9 × {S:,} / 989 TFLOP/s is {_t(rule)}; with the model's own "
        f"matrices and attention's quadratic term it is {_t(ours)}, of which attention is "
        f"{1 - linear / ours:.0%} at this length (Llama-2 70B's window is {big.max_context_tokens:,} tokens: "
        "50k is the arithmetic of a longer-context model of its size).",
        "Too slow for interactive use. Spread the prefill over several GPUs: "
        + ", ".join(f"{_t(t)} on {k}" for k, t in tp_times.items())
        + " H100s (tensor parallelism, all-reduces included); or shorten the prompt.",
    )
    corrected = []
    for rid in to_correct(drill):
        if rid == "15.2.1-ab":
            corrected.append(f"The chapter's 7 s leaves out attention, {1 - linear / ours:.0%} of the pass at "
                             f"{S:,} tokens: {_t(ours)} ({link(rid, drill)}).")
        elif rid == "15.2.1-s39":
            corrected.append(f"It cannot run on one H100 at all ({link(rid, drill)}): the weights are "
                             f"{_gb(weight_bytes(big))} against 80 GB, and the prompt's KV cache adds "
                             f"{_gb(kv_cache_bytes(big, S, beyond_context=True))}; the smallest layout that holds both is "
                             f"tensor parallelism {fit.tp}.")
        elif rid == "15.2.1-s40":
            t_chunk = chunked_prefill_time_s(big, Deployment(h100, tp=fit.tp), S, 2048, beyond_context=True)
            corrected.append(f"Chunked prefill does not bring this TTFT down ({link(rid, drill)}): on "
                             f"{fit.tp} H100s, 2,048-token chunks take {_t(t_chunk)} against "
                             f"{_t(tp_times[fit.tp])} in one pass.")
        elif rid == "15.2.1-s22":
            corrected.append(f"More GPUs help, but not {TP_DEGREES[-1]}-fold ({link(rid, drill)}): "
                             f"{_x(tp_times[fit.tp] / tp_times[TP_DEGREES[-1]])} from {fit.tp} to "
                             f"{TP_DEGREES[-1]} GPUs for {_x(TP_DEGREES[-1] / fit.tp)} the hardware.")
    model, acc, prec, dep, note = _setup(model, accelerator, precision, 1)
    here = prefill_time_s(model, dep, S, beyond_context=True)
    meas, why = _measured(dep)
    practice = f", {_t(prefill_time_s(model, meas, S, beyond_context=True))} on the kernels measured on an H100" \
        if meas else ""
    strong += (f"{note}On this page's scenario, {_on(model, dep)}: {_t(here)}{practice}"
               f"{_context_note(model, S)}.",)
    follow = ("How many GPUs bring it under a second?",
              f"{under_1s} H100s ({_t(tp_times[under_1s])})." if under_1s else
              f"More than {TP_DEGREES[-1]}: even {TP_DEGREES[-1]} H100s take {_t(tp_times[TP_DEGREES[-1]])}.")
    return Answer(drill, "Llama-2 70B on H100s, then " + _on(model, dep), strong, tuple(corrected), follow)


def _latency_3(model, accelerator, precision, **_) -> Answer:
    from inferlab.core.costs import chunked_prefill_costs, prefill_costs
    from inferlab.notebook import lab
    drill = DRILLS["15.2.1-3"]
    S = SYSTEM_PROMPT
    model, acc, prec, dep, note = _setup(model, accelerator, precision, 1)
    shard_model = model
    ch = chunked_prefill_costs(shard_model, S, CHUNK, 1, prec, beyond_context=True).total
    one = prefill_costs(shard_model, 1, S, prec, beyond_context=True).total
    sc = lab.Scenario(model, acc, prec, n_requests=200, tp=None)
    lp = lab.long_prompt(sc, 16_000, _rate(sc, 0.3), chunks=(256, CHUNK, 2048))
    base, chunked = lp.others_p99_itl_s["unchunked"], lp.others_p99_itl_s[f"C={CHUNK}"]
    strong = (
        f"{note}A prompt of $S$ = {S:,} tokens in chunks of $C$ = {CHUNK} is {math.ceil(S / CHUNK)} passes; each "
        "appends its keys and values to the cache, so at the end the cache is the same "
        f"{_gb(kv_cache_bytes(model, S, 1, prec, beyond_context=True))} as after one pass.",
        f"Between chunks the scheduler runs the other requests' decode steps: with a 16,000-token prompt "
        f"arriving into steady traffic (simulated on {sc.layout}), the others' p99 ITL is {_t(base)} unchunked "
        f"and {_t(chunked)} with {CHUNK}-token chunks, their largest gap {_t(lp.others_max_itl_s['unchunked'])} "
        f"→ {_t(lp.others_max_itl_s[f'C={CHUNK}'])}.",
        f"The long request pays: its own TTFT goes from {_t(lp.long_ttft_s['unchunked'])} to "
        f"{_t(lp.long_ttft_s[f'C={CHUNK}'])}.",
    )
    corrected = []
    flops_ids = [rid for rid in to_correct(drill) if rid in ("15.2.1-ac", "15.2.1-s24")]
    if flops_ids:
        corrected.append(
            f"Chunking adds no FLOPs ({'; '.join(link(rid, drill) for rid in flops_ids)}): every query-key pair is "
            f"still scored once (FLOPs ×{float(ch.flops / one.flops):.4f} at $S$ = {S:,}, $C$ = {CHUNK}). What grows "
            "as $S^2/C$ is memory traffic: each chunk re-reads the weights and the cache of the chunks before it, "
            f"bytes ×{float(ch.bytes / one.bytes):.2f}.")
    from inferlab.notebook.lab_conclusions import largest_chunk_within
    target = 0.05
    best = largest_chunk_within(lp, target)
    follow = ("How do you choose $C$?",
              (f"The largest chunk that keeps the others' largest gap under the ITL target: with "
               f"{target * 1e3:.0f} ms here that is $C$ = {best:,} (of {', '.join(map(str, lp.chunks))} tried)."
               if best else f"No chunk size tried ({', '.join(map(str, lp.chunks))}) keeps the others' largest gap "
               f"under {target * 1e3:.0f} ms here: smaller chunks, or fewer sequences per replica."))
    return Answer(drill, _on(model, dep), strong, tuple(corrected), follow)


# ---------------------------------------------------------------------------------------------
# 15.2.2
# ---------------------------------------------------------------------------------------------

def _batching_1(model, accelerator, precision, context: int = 1024, usd_per_gpu_hour: float = BOOK_USD_PER_GPU_HOUR,
                **_) -> Answer:
    drill = DRILLS["15.2.2-1"]
    model, acc, prec, dep, note = _setup(model, accelerator, precision, context)
    bstar = kv_crossover_batch(model, context, prec, tp=dep.tp)
    b_max = max_batch(model, acc, context, prec, tp=dep.tp)
    thr1 = throughput_tokens_per_s(model, dep, context, 1)
    thr = throughput_tokens_per_s(model, dep, context, b_max)
    int8 = Precision(prec.weights, prec.activations, "int8", prec.compute)
    w8 = Precision("int8", prec.activations, prec.kv, prec.compute)
    variant = model.gqa_variant(8) if model.n_kv_heads > 8 else None
    strong = [
        f"{note}Memory first: at {context:,} tokens of context $B^*$ = $M_\\text{{weights}}/C_\\text{{kv}}$ = "
        f"{bstar:.0f} and the largest batch that fits is {b_max}; throughput goes from {thr1:,.0f} tokens/s at "
        f"$B$ = 1 to {thr:,.0f} there ({_x(thr / thr1)}).",
        "Continuous batching keeps the batch near that limit (a finished sequence's slot is refilled at the "
        "next step).",
        f"An int8 KV cache halves $C_\\text{{kv}}$: $B^*$ = {kv_crossover_batch(model, context, int8, tp=dep.tp):.0f}, "
        f"$B_\\text{{max}}$ = {max_batch(model, acc, context, int8, tp=dep.tp)}."
        + (f" Grouped-query attention with 8 KV heads: $B_\\text{{max}}$ = "
           f"{max_batch(variant, acc, context, prec, tp=dep.tp)}." if variant is not None else ""),
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
                f"Int8 *weights* move $B^*$ the other way ({link(rid, drill)}): they halve $M_\\text{{weights}}$, so "
                f"$B^*$ falls to {kv_crossover_batch(model, context, w8, tp=dep.tp):.0f} while $B_\\text{{max}}$ rises to "
                f"{max_batch(model, acc, context, w8, tp=dep.tp)}; only a smaller cache raises both.")
    c1, cmax = (cost_per_1k_tokens_usd(t, usd_per_gpu_hour, dep.tp) for t in (thr1, thr))
    follow = ("What does a token cost at each end?",
              f"At US\\${usd_per_gpu_hour:g} per GPU-hour, US\\${c1:.4f} per thousand tokens at $B$ = 1 and "
              f"US\\${cmax:.5f} at $B$ = {b_max}: {_x(c1 / cmax)} cheaper.")
    return Answer(drill, _on(model, dep), tuple(strong), tuple(corrected), follow)


def _rate(sc, load: float) -> float:
    """A request rate at `load` times the rate one replica of the lab's scenario can sustain: one prefill
    of the mean prompt plus the mean output's share of decode steps at the largest batch that fits."""
    from inferlab.serving.kv import kv_capacity_blocks
    dep = Deployment(sc.accelerator, sc.precision, tp=sc.tp)
    prompt, out = sc.prompt.mean, sc.output.mean
    ctx = int(prompt + out)
    b = max(1, min(256, int(kv_capacity_blocks(sc.model, sc.accelerator, sc.precision, sc.tp, 16) * 16 // ctx)))
    per_request = prefill_time_s(sc.model, dep, int(prompt)) + out * decode_step_time_s(sc.model, dep, ctx, b) / b
    return float(f"{load / per_request:.2g}")


def _batching_2(model, accelerator, precision, **_) -> Answer:
    from inferlab.notebook import lab
    from inferlab.serving.policies import ContinuousBatching
    drill = DRILLS["15.2.2-2"]
    sc = lab.Scenario(model, accelerator, precision, n_requests=300, tp=None)
    quiet, peak = _rate(sc, 0.1), _rate(sc, 0.7)

    def run(rate, replicas=1, cap=None):       # the same requests at `rate`, over `replicas` replicas
        policy = ContinuousBatching(max_num_seqs=cap) if cap else ContinuousBatching()
        return sc.run(sc.workload(rate), policy, replicas=replicas)

    def stats(res):
        s = res.summary(sc.slo)
        steps = np.concatenate([t.step_s for t in res.traces])
        return s["batch"]["mean"], float(np.percentile(steps, 50)), float(np.percentile(steps, 99)), \
            s["itl_s"]["p99"], s["ttft_s"]["p99"]

    def slow_with_prompts(res) -> float:
        """The share of the slowest 1 % of steps that carry prompt tokens (more tokens than sequences)."""
        steps = np.concatenate([t.step_s for t in res.traces])
        tokens = np.concatenate([t.tokens for t in res.traces])
        batch = np.concatenate([t.batch for t in res.traces])
        slow = steps >= np.percentile(steps, 99)
        return float(np.mean(tokens[slow] > batch[slow]))
    at_peak = run(peak)
    q, p = stats(run(quiet)), stats(at_peak)
    two = stats(run(peak, replicas=2))
    cap = max(2, int(round(0.75 * p[0])))
    capped = stats(run(peak, cap=cap))
    burst = _rate(sc, 2.0)                   # twice what one replica sustains: a queue forms
    prio = lab.priority_load(sc, burst, high_share=0.2)
    dep = Deployment(sc.accelerator, sc.precision, tp=sc.tp)
    step_at_mean = decode_step_time_s(sc.model, dep, int(sc.prompt.mean + sc.output.mean / 2), max(1, round(p[0])))
    strong = (
        f"{sc.layout_note().strip()} Batch growth: from {quiet:g} to {peak:g} requests/s the mean batch "
        f"grows from {q[0]:.1f} to {p[0]:.1f} sequences, the median step from {_t(q[1])} to {_t(p[1])}, "
        f"p99 ITL from {_t(q[3])} to {_t(p[3])} and p99 TTFT from {_t(q[4])} to {_t(p[4])} (simulated, "
        f"{sc.layout}, continuous batching).".strip(),
        f"Confirm it with the step-time histogram: at peak the median step, {_t(p[1])}, is within "
        f"{abs(p[1] / step_at_mean - 1):.0%} of the roofline's step for the peak's mean batch, {_t(step_at_mean)}: "
        "the steps are longer because the batch is bigger, not because the GPU is slower. Of the slowest 1 % "
        f"({_t(p[2])} and more), {slow_with_prompts(at_peak):.0%} also prefill prompts.",
        f"Fix 1, replicas: two replicas at the same {peak:g} requests/s run {two[0]:.1f} sequences each, "
        f"p99 ITL {_t(two[3])}, p99 TTFT {_t(two[4])}.",
        f"Fix 2, cap the batch (preempting beyond it): at most {cap} sequences, p99 ITL {_t(capped[3])}.",
        f"Fix 3, a priority queue: when a burst of {burst:g} requests/s (twice what one replica sustains) builds a "
        f"queue and a fifth of the requests are latency-sensitive and admitted first, their p99 TTFT is "
        f"{_t(prio.p99_ttft_s['priority', 'high'])} against {_t(prio.p99_ttft_s['FIFO', 'high'])} first come, "
        f"first served, the others' {_t(prio.p99_ttft_s['priority', 'normal'])} against "
        f"{_t(prio.p99_ttft_s['FIFO', 'normal'])} (simulated, chunked prefill).",
    )
    corrected = []
    for rid in to_correct(drill):
        if rid == "15.2.2-s21":
            corrected.append(
                f"Capping trades one tail for the other ({link(rid, drill)}): p99 ITL {_t(p[3])} → "
                f"{_t(capped[3])}, but the requests that wait for a slot see p99 TTFT {_t(p[4])} → {_t(capped[4])}.")
        elif rid == "15.2.2-s22":
            corrected.append(
                f"A priority queue shortens the wait, not the batch ({link(rid, drill)}): the latency-sensitive "
                f"requests decode beside the others, p99 TPOT {_t(prio.p99_tpot_s['FIFO', 'high'])} first come, "
                f"first served and {_t(prio.p99_tpot_s['priority', 'high'])} by priority.")
    follow = ("Which number do you watch to catch it early?",
              f"The running batch per replica against the batch at which the step reaches the ITL target: at "
              f"peak it averages {p[0]:.1f} here.")
    return Answer(drill, _on(sc.model, dep), strong, tuple(corrected), follow, NOT_MODELLED.get(drill.id, ""))


def _batching_3(model, accelerator, precision, **_) -> Answer:
    from inferlab.core.memory_headroom import VLLM_DEFAULT_UTILISATION, headroom_fit
    drill = DRILLS["15.2.2-3"]
    big, h100 = get_model("llama-2-70b"), get_accelerator("h100-sxm")
    B, S = 32, 2048
    fit = headroom_fit(big, h100, B, S, BF16, tp=2)
    strong = (
        f"Weights: {_gb(weight_bytes(big))} in bf16, {_gb(fit.weight_bytes)} per GPU at tensor parallelism 2.",
        f"KV cache: $2 \\cdot L \\cdot N_\\text{{kv}} \\cdot H \\cdot S \\cdot B \\cdot 2$ bytes = 2 × {big.n_layers} × "
        f"{big.n_kv_heads} × {big.head_dim} × {S:,} × {B} × 2 = {_gb(kv_cache_bytes(big, S, B))}: Llama-2 70B "
        f"caches {big.n_kv_heads} KV heads, not its {big.n_heads} query heads. Tensor parallelism splits the KV "
        f"heads with the attention weights: {_gb(fit.kv_bytes)} per GPU.",
        f"Per GPU {_gb(fit.used_bytes)} of {h100.memory_bytes / GB:.0f} GB: it fits on paper, with "
        f"{_gb(fit.free_bytes('datasheet'))} to spare; a server that keeps {(1 - VLLM_DEFAULT_UTILISATION):.0%} "
        f"of the reported memory free (vLLM's default) holds {fit.max_batch_at_utilisation(VLLM_DEFAULT_UTILISATION)} "
        "such sequences.",
    )
    ids = to_correct(drill)
    corrected = (
        "The chapter's budget goes wrong at its first step: it counts 64 KV heads and leaves the cache "
        f"unsharded, so its 68 GB (its own product is {_gb(2 * 80 * 64 * 128 * S * B * 2)}), the 104 GB per GPU "
        "and \"reduce the batch to 14\" all fall: the configuration fits as it is, and grouped-query attention "
        "is already in the model (" + ", ".join(link(rid, drill) for rid in ids) + ").",) if ids else ()
    model, acc, prec, dep, note = _setup(model, accelerator, precision, S)
    here = headroom_fit(model, acc, B, S, prec, tp=dep.tp)
    tp_here = dep.tp
    while here.free_bytes("datasheet") < 0 and tp_here < 16:
        tp_here *= 2
        here = headroom_fit(model, acc, B, S, prec, tp=tp_here)
    strong += (f"On this page's scenario, {model.name} at $B$ = {B}, $S$ = {S:,} on "
               f"{_on(model, dep.with_(tp=tp_here)).removeprefix(model.name + ' on ')}: weights "
               f"{_gb(here.weight_bytes)} and KV cache {_gb(here.kv_bytes)} per GPU, {_gb(here.used_bytes)} of "
               f"{acc.memory_bytes / GB:.0f} GB"
               + (" (the smallest power-of-two layout that holds them)." if tp_here > 1 else "."),)
    follow = ("How long a context could the same two GPUs hold at $B$ = 32?",
              f"{int((h100.memory_bytes - fit.weight_bytes) // (kv_cache_bytes_per_token(big, BF16, tp=2) * B)):,} "
              "tokens per sequence, on paper (the datasheet's 80 GB, nothing kept free).")
    return Answer(drill, "Llama-2 70B on two H100s, then " + _on(model, dep), strong, corrected, follow)


_ANSWERS = {"15.1.1-1": _prefill_1, "15.1.1-2": _prefill_2, "15.1.1-3": _prefill_3,
            "15.1.2-1": _decode_1, "15.1.2-2": _decode_2, "15.1.2-3": _decode_3,
            "15.2.1-1": _latency_1, "15.2.1-2": _latency_2, "15.2.1-3": _latency_3,
            "15.2.2-1": _batching_1, "15.2.2-2": _batching_2, "15.2.2-3": _batching_3}


@yardstick
def answer(section: str, number: int, model, accelerator, precision: Precision = BF16, **page) -> Answer:
    """The folded strong answer to `section`'s interview question `number`, with the numbers of the
    scenario (`model`, `accelerator`, `precision`: objects, as the What-if cell resolves them) and the
    page's own settings where a question uses them (`context`, `prompt`, `usd_per_gpu_hour`)."""
    d = drill(section, number)
    return _ANSWERS[d.id](model, accelerator, precision, **page)



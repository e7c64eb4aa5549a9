"""Experiments for sentence-level claims: orders of growth, per-step costs, what chunking leaves
unchanged, attention variants, and the levers that cut ITL.
"""
from __future__ import annotations

import numpy as np

from inferlab.core.costs import ATTENTION_OPS, decode_costs, prefill_costs
from inferlab.core.deployment import Deployment
from inferlab.core.latency import decode_step_time_s, prefill_time_s
from inferlab.core.memory import kv_cache_bytes, memory_budget
from inferlab.core.roofline import ridge_point, roofline_time_s
from inferlab.core.specs import get_accelerator, get_model

from inferlab.claims.experiments.common import ACC, Case, MODEL, Outcome, _f, _gqa, _ms, _precision
from inferlab.claims.experiments.simulated import _long_prompt


GROWTH_QUANTITIES = ("recompute", "cached_attention_flops", "cached_attention_bytes", "kv_projection",
                     "recompute_total", "cached_total", "prefill_attention_intensity")


def _growth_quantity(quantity: str, model, s: int) -> float:
    model = get_model(model)
    if not model.full_attention_only:   # the chapter's orders of growth are those of full attention
        raise ValueError(f"the growth claims are stated for full attention with per-head K and V; {model.name} "
                         "has windowed, chunked or latent attention (its cache stops growing or is a latent)")
    if quantity == "recompute":  # no cache: a forward pass over the S-token prefix and the new token
        return float(prefill_costs(model, 1, s + 1).total.flops)
    if quantity in ("cached_attention_flops", "cached_attention_bytes"):
        ops = decode_costs(model, 1, s).operators()
        attr = "flops" if quantity.endswith("flops") else "bytes"
        return sum(float(getattr(ops[name], attr)) for name in ATTENTION_OPS)
    if quantity == "kv_projection":  # the K and V projections of S tokens (what the cache stores)
        ops = prefill_costs(model, 1, s).operators()
        return float(ops["k_proj"].flops) + float(ops["v_proj"].flops)
    if quantity == "prefill_attention_intensity":  # QK^T and PV of a prefill over S tokens (fused)
        return float(prefill_costs(model, 1, s).attention.intensity)
    if quantity in ("recompute_total", "cached_total"):  # all FLOPs of generating S tokens after one
        t = np.arange(1, s + 1)                            # prompt token: a pass per generated token,
        if quantity == "recompute_total":                  # over the whole prefix (no cache) ...
            return float(np.sum(prefill_costs(model, 1, t + 1).total.flops))
        return float(np.sum(decode_costs(model, 1, t + 1).total.flops))  # ... or over one token (cache)
    raise ValueError(f"quantity must be one of {', '.join(GROWTH_QUANTITIES)}; got {quantity!r}")


def growth_order(quantity: str = "recompute", context_lens=(1024, 4096), expected: float = 2.0,
                 model: str = MODEL):
    """Holds at each S where the quantity's local growth exponent k = log2(F(2S) / F(S)) is nearer
    `expected` than any other whole order (|k - expected| < 0.5): "order S²" needs k > 1.5.
    Quantities (batch 1): recompute (FLOPs per output token without a cache: a forward pass over
    the whole prefix), cached_attention_flops / cached_attention_bytes (one cached decode step's
    attention), kv_projection (the K and V projection FLOPs over S tokens), recompute_total and
    cached_total (all FLOPs of generating S tokens, without and with the cache),
    prefill_attention_intensity (FLOPs per byte of a prefill's two attention products)."""
    model = get_model(model)
    import math
    cases = []
    for s in context_lens:
        k = math.log2(_growth_quantity(quantity, model, 2 * s) / _growth_quantity(quantity, model, s))
        cases.append(Case(f"S={s}", abs(k - expected) < 0.5, f"{quantity} grows as S^{k:.2f}"))
    values = {}
    if quantity in ("recompute", "recompute_total", "cached_total"):  # attention's S² term = 2·P·S
        m = model
        values["crossover"] = m.n_matmul_params / (m.n_layers * m.n_heads * m.head_dim)  # 2PS = 2LdS²
    return Outcome(tuple(cases), "context length", values)


def _tp_step_time(phase, model, accelerator, prompt_len, context_len, allreduce_latency_s):
    """(time on K devices as a function of K, the all-reduce latency used): the prefill of
    `prompt_len` tokens or one decode step at `context_len`, all-reduces at `allreduce_latency_s`
    (None: the accelerator's default start-up latency, its node's measured one where published)."""
    from inferlab.core.parallel import allreduce_latency_s as default_latency_s
    lat = default_latency_s(accelerator) if allreduce_latency_s is None else allreduce_latency_s

    def t(k):
        on = Deployment(accelerator, tp=k, allreduce_latency_s=lat)
        if phase == "prefill":
            return prefill_time_s(model, on, prompt_len)
        return decode_step_time_s(model, on, context_len)
    return t, lat


def tp_improves(phase: str = "decode", tps=(2, 4, 8), allreduce_latency_s: float | None = None,
                prompt_len: int = 2048, context_len: int = 1024, model: str = MODEL, accelerator: str = ACC):
    """Holds at each degree K where the phase is faster on K devices than on one, all-reduces at
    `allreduce_latency_s` (None: the library's default start-up latency)."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    t, lat = _tp_step_time(phase, model, accelerator, prompt_len, context_len, allreduce_latency_s)
    cases = [Case(f"K={k}", t(1) / t(k) > 1, f"{phase} x{_f(t(1) / t(k))} faster, all-reduce latency "
                                              f"{lat * 1e6:.0f} us") for k in tps]
    return Outcome(tuple(cases), "tensor-parallel degree")


def chunked_kv_memory(prompt_lens=(1000, 10_000), chunk_len: int = 512, block_tokens: int = 16,
                      model: str = MODEL):
    """Holds at each S where the KV cache after a prefill in ceil(S/C) chunks of C tokens (each
    appending its tokens, stored in blocks of `block_tokens`) equals the unchunked prefill's."""
    model = get_model(model)
    cases = []
    for s in prompt_lens:
        chunks = [min(chunk_len, s - i) for i in range(0, s, chunk_len)]
        stored = sum(chunks)
        blocks_chunked, blocks_whole = -(-stored // block_tokens), -(-s // block_tokens)
        same = (blocks_chunked == blocks_whole
                and float(kv_cache_bytes(model, stored)) == float(kv_cache_bytes(model, s)))
        cases.append(Case(f"S={s}, C={chunk_len}", same,
                          f"{len(chunks)} chunks store {stored:,} tokens in {blocks_chunked:,} blocks "
                          f"against {blocks_whole:,} unchunked"))
    return Outcome(tuple(cases), "prompt length")


def weight_reads_per_request(output_lens=(128, 512), batch: int = 1, prompt_len: int = 512,
                             model: str = MODEL):
    """Holds at each output length n where a request served at `batch` reads the weights once in
    all: the prefill reads them once and each of the n - 1 decode steps once more, shared by the
    batch, so a request accounts for n / batch weight reads (weight bytes from the cost model)."""
    model = get_model(model)
    w_prefill = float(prefill_costs(model, batch, prompt_len).total.weight_bytes)
    w_step = float(decode_costs(model, batch, prompt_len + 1).total.weight_bytes)
    cases = []
    for n in output_lens:
        reads = (w_prefill + (n - 1) * w_step) / w_step / batch
        cases.append(Case(f"{n} output tokens", abs(reads - 1) < 0.5,
                          f"{reads:,.0f} reads of the {w_step / 1e9:.1f} GB of weights per request "
                          f"({reads * w_step / 1e12:.2f} TB)"))
    return Outcome(tuple(cases), "output length", {"reads": reads, "weight_gb": w_step / 1e9})


def unfused_attention_regime(prompt_lens=(2048, 8192), score_bytes: float = 2.0, model: str = MODEL,
                             accelerator: str = ACC):
    """Holds at each S where prefill attention *without* fusion is compute-bound. Unfused, per head
    and sequence: FLOPs 4·S²·d_h (QK^T and PV over the full S x S matrix, masked afterwards); bytes
    Q, K, V read and O written (4·S·d_h·2) plus the scores written, read by the softmax, the
    probabilities written and read by PV (4·S²·score_bytes): intensity -> d_h/score_bytes."""
    m = model = get_model(model)
    accelerator = get_accelerator(accelerator)
    ridge = ridge_point(accelerator)
    cases = []
    for s in prompt_lens:
        flops = 4.0 * s * s * m.head_dim
        nbytes = 4.0 * s * s * score_bytes + 8.0 * s * m.head_dim
        i = flops / nbytes
        cases.append(Case(f"S={s}", i >= ridge, f"unfused attention {i:.0f} FLOP/byte against the ridge "
                                                f"{ridge:.0f}: {'compute' if i >= ridge else 'memory'}-bound"))
    return Outcome(tuple(cases), "prompt length", {"intensity": i, "ridge": ridge, "limit": m.head_dim / score_bytes})


def flash_attention_gain(prompt_lens=(2048, 4096, 16384, 32768), low: float = 2.0, high: float = 3.0,
                         score_bytes: float = 2.0, model: str = MODEL, accelerator: str = ACC):
    """Holds at each S where the roofline's whole-prefill speed-up from fusing attention lies in
    [low, high]: the fused pass is the library's prefill_time_s; the unfused one replaces its two
    attention products by unfused attention (FLOPs 4·S²·d_h per head, 4·S²·score_bytes bytes of
    score traffic, see unfused_attention_regime), each at max(compute, memory)."""
    m = model = get_model(model)
    acc = accelerator = get_accelerator(accelerator)
    cases = []
    for s in prompt_lens:
        fused = prefill_time_s(model, accelerator, s)
        att = prefill_costs(model, 1, s).attention
        fused_att = roofline_time_s(att.flops, att.bytes, acc)
        heads = m.n_heads * m.n_layers
        unfused_att = roofline_time_s(heads * 4.0 * s * s * m.head_dim,
                                      heads * (4.0 * s * s * score_bytes + 8.0 * s * m.head_dim), acc)
        gain = (fused - fused_att + unfused_att) / fused
        cases.append(Case(f"S={s}", low <= gain <= high, f"prefill x{gain:.2f} faster fused "
                                                          f"({_ms(fused - fused_att + unfused_att)} -> {_ms(fused)})"))
    return Outcome(tuple(cases), "prompt length")


def window_attention_intensity(window: int = 1024, context_len: int = 8192, batches=(1, 64),
                               min_gain: float = 1.1, model: str = MODEL):
    """Holds at each batch where local attention over the last `window` positions raises a decode
    step's attention intensity (QK^T and PV FLOPs per byte) by at least min_gain over full attention:
    the window caps the KV read at W positions, and the FLOPs fall with it."""
    model = get_model(model)
    cases = []
    for b in batches:
        full = decode_costs(model, b, context_len).attention
        local = decode_costs(model, b, min(window, context_len)).attention
        i_full, i_local = full.intensity, local.intensity
        cases.append(Case(f"B={b}", i_local >= min_gain * i_full,
                          f"{i_full:.2f} -> {i_local:.2f} FLOP/byte; bytes per step "
                          f"x{float(full.bytes) / float(local.bytes):.1f} fewer"))
    return Outcome(tuple(cases), "batch", {"bytes_ratio": float(full.bytes) / float(local.bytes),
                                           "intensity": i_local})


def itl_levers(lever: str = "int8", others=("int4", "tp2"), context_len: int = 1024, batch: int = 1,
               model: str = MODEL, accelerator: str = ACC):
    """One case: holds when `lever` gives a lower ITL than every other lever (the highest leverage).
    Levers: int8 / int4 (weight-only quantisation), tp2 / tp4 (tensor parallelism, default
    all-reduce latency); ITL is the decode step time at `batch` and `context_len`. Values: each
    lever's ITL as a fraction of bf16 on one GPU."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    def itl(name):
        if name in ("int8", "int4"):
            return decode_step_time_s(model, accelerator, context_len, batch, _precision(name))
        if name in ("tp2", "tp4"):
            return decode_step_time_s(model, Deployment(accelerator, tp=int(name[2:])), context_len, batch)
        raise ValueError(f"lever must be one of int8, int4, tp2, tp4; got {name!r}")
    base = decode_step_time_s(model, accelerator, context_len, batch)
    factors = {name: itl(name) / base for name in (lever, *others)}
    best = min(factors, key=factors.get)
    return Outcome((Case(f"{lever} against {', '.join(others)}", best == lever,
                         "ITL x" + ", x".join(f"{_f(v)} with {k}" for k, v in factors.items())),),
                   "the levers compared", factors)


def gqa_still_open(model: str = "llama-2-70b", target_kv_heads: int = 8, context_len: int = 2048,
                   batch: int = 32):
    """Holds when converting `model` to `target_kv_heads` KV heads would shrink its KV cache (it still
    has more KV heads than that); values: its KV cache as it is (data/models.toml) at `batch` x
    `context_len`, and with one KV head per query head (the multi-head attention a reader might assume)."""
    model = get_model(model)
    m = get_model(model)
    as_is = float(kv_cache_bytes(m, context_len, batch))
    mha = float(kv_cache_bytes(_gqa(m, m.n_heads), context_len, batch))
    return Outcome((Case(m.name, m.n_kv_heads > target_kv_heads,
                         f"{m.n_kv_heads} KV heads for {m.n_heads} query heads: {as_is / 1e9:.1f} GB of KV cache "
                         f"at B={batch}, S={context_len}; {mha / 1e9:.1f} GB with {m.n_heads} KV heads"),),
                   "the model", {"kv_heads": m.n_kv_heads, "heads": m.n_heads, "kv_gb": as_is / 1e9,
                                 "mha_gb": mha / 1e9})


def chunked_cost_size(chunks=(512, 2048), words=("small",), long_prompts=(4_000, 16_000), rate: float = 4.0,
                      n: int = 200):
    """Holds at each long-prompt length S and chunk size C where the long request's own TTFT rises
    by an amount that inferlab.base.qualitative_words.size_of_change calls one of `words` (small <= 10 %,
    moderate <= 30 %, large beyond), chunked against unchunked (the run of chunked_long_prompt)."""
    from inferlab.base.qualitative_words import size_of_change
    cases = []
    for s in long_prompts:
        res, idx = _long_prompt(("prefill-first",), s, rate, n)
        base = float(res.ttft_s[idx])
        for c in chunks:
            res, idx = _long_prompt(("chunked", ("token_budget", c)), s, rate, n)
            rel = float(res.ttft_s[idx]) / base - 1
            cases.append(Case(f"S={s:,}, C={c}", size_of_change(rel) in words,
                              f"long TTFT {_ms(base)} -> {_ms(float(res.ttft_s[idx]))} ({rel:+.0%}, "
                              f"{size_of_change(rel)})"))
    return Outcome(tuple(cases), "prompt length and chunk size")


def decode_intensity_within_batch(models=(MODEL, "llama-2-70b"), batches=(1, 64), context_len: int = 1024):
    """Holds for each model and batch B where both decode operations, the MLP and attention (QK^T
    and PV), have an intensity of at most B FLOP/byte (cost model, bf16)."""
    cases = []
    for m in map(get_model, models):
        for b in batches:
            ops = decode_costs(m, b, context_len)
            att, mlp = float(ops.attention.intensity), float(ops.mlp.intensity)
            cases.append(Case(f"{get_model(m).name}, B={b}", max(att, mlp) <= b,
                              f"attention {att:.2f}, MLP {mlp:.2f} FLOP/byte"))
    return Outcome(tuple(cases), "model (KV heads shared by query heads) and batch")


def fits_on_device(model: str = "llama-2-70b", accelerator: str = ACC, context_len: int = 50_000, batch: int = 1):
    """Holds when the weights and the KV cache of `batch` sequences of `context_len` tokens fit in
    one device's memory (datasheet capacity, nothing reserved)."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    b = memory_budget(model, accelerator, batch, context_len)
    acc = get_accelerator(accelerator)
    w, kv, cap = float(b.weight_bytes), float(b.kv_bytes), float(b.capacity_bytes)
    return Outcome((Case(f"{get_model(model).name} on one {acc.name}", w + kv <= cap,
                         f"weights {w / 1e9:.0f} GB + KV {kv / 1e9:.1f} GB against {cap / 1e9:.0f} GB"),),
                   "the device", {"weights_gb": w / 1e9, "kv_gb": kv / 1e9, "capacity_gb": cap / 1e9})


def gqa_across(family: str = "llama-3"):
    """Holds for each model of data/models.toml whose name starts with `family` that shares its KV
    heads among query heads (n_kv_heads < n_heads): grouped-query attention at that size."""
    from inferlab.core.specs import list_models
    models = [get_model(name) for name in list_models() if name.startswith(family)]
    if not models:
        raise ValueError(f"family must name models of data/models.toml; no model starts with {family!r}")
    cases = [Case(m.name, m.n_kv_heads < m.n_heads, f"{m.n_kv_heads} KV heads for {m.n_heads} query heads")
             for m in models]
    return Outcome(tuple(cases), "model size")


def tp_short_of_k(phase: str = "decode", tps=(2, 4), min_shortfall: float = 0.1,
                  allreduce_latency_s: float | None = None, prompt_len: int = 2048, context_len: int = 1024,
                  model: str = MODEL, accelerator: str = ACC):
    """Holds at each degree K where the phase's speed-up on K devices falls short of K by at least
    min_shortfall (speed-up <= (1 - min_shortfall)·K), all-reduces at the library's default latency."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    t, lat = _tp_step_time(phase, model, accelerator, prompt_len, context_len, allreduce_latency_s)
    cases = [Case(f"K={k}", t(1) / t(k) <= (1 - min_shortfall) * k,
                  f"{phase} x{_f(t(1) / t(k))} faster on {k} GPUs ({t(1) / t(k) / k:.0%} of K)") for k in tps]
    return Outcome(tuple(cases), "tensor-parallel degree")

"""The operator profile: each operator class the model runs, timed alone on this device.

  linear       every (K, N) shape of the model's linear layers, against rows M
  attention    SDPA for prefill (causal, against the query length S) and for decode (one query
               against `size` cached positions: B x context summed over a batch)
  elementwise  what the library does not count, per layer (two RMSNorms, rotary on Q and K,
               the KV-cache write, SiLU x up, two residual adds, the head reshape) and once per
               pass (embedding lookup, final norm), against tokens; sampling (argmax over the
               vocabulary) is recorded beside it (the suite's timed passes do not sample)
  overhead_s   the fixed per-step cost the isolated operators do not see (module calls, views,
               Python): a decode step of a model with the same layers at negligible width, less
               its operators timed alone at that width

Sizes are 3 x 2^k: disjoint from the powers of two of the suite's end-to-end points (the profile
predicts them without having seen them), with one exception. A linear layer is also timed at every
row count M = 1 ... 16, because CPU BLAS switches kernels there and no neighbour predicts a switch:
fp32 runs M = 1 as a matrix-vector product, M = 2 and 3 as M of them (time ~ M), and M >= 4 as a
blocked GEMM that reads the weights once but at a lower bandwidth (measured on the 2-core EPYC:
1.2, 2.4, 3.4 and 1.9 ms for a 2048 x 2048 fp32 layer at M = 1, 2, 3, 4). MKL on the 2-vCPU Xeon
switches again above 12 rows: a 2048 x 5632 fp32 layer took 6.3-7.2 ms at M = 8, 6.2-8.4 ms at
12 and 5.3-5.6 ms at 24 (three quick runs), so a batch of 16 interpolated between 12 and
24 came out 20-26 % slow in every run; the dense range was 1 ... 8 until then. So end-to-end points
at batch 1, 2, 4, 8 and 16 share their linear row counts with the profile (`shared_sizes`); every
other size is disjoint (`disjoint` checks that nothing else is shared). The prediction is still of a
whole pass the profile never timed: the operators composed, plus what they leave out. Weights and KV blocks
rotate through copies that together exceed twice the last-level cache, as each layer's own
weights do in the model: no timing is flattered by a cache. Every new set of copies is read once,
untimed, before its first timed call (`warm_rotation`): a buffer's first read is slow on a VM.
"""
from __future__ import annotations

import math

from inferlab.core.costs import Cost, forward_costs, linear_cost
from inferlab.measure.calibrate import linear_shapes, shape_key
from inferlab.measure.ceilings import generator, random_tensor, torch_dtype
from inferlab.measure.probe import LinearProbe, warm_rotation, weight_copies
from inferlab.measure.timing import time_fn
from inferlab.core.specs import ModelConfig, Precision

KERNEL_SWITCH_ROWS = 16  # linear layers are timed at every row count up to this (see above)


def profile_sizes(lo: int, hi: int) -> list[int]:
    """3 x 2^k from the largest one <= max(lo, 3) ... up to the first one >= hi: brackets [lo, hi]
    with sizes that are never powers of two."""
    sizes, k = [], 0
    while 3 * 2 ** (k + 1) <= max(lo, 3):
        k += 1
    while True:
        sizes.append(3 * 2 ** k)
        if 3 * 2 ** k >= hi:
            return sizes
        k += 1


def linear_sizes(hi: int) -> list[int]:
    """Row counts of a linear layer's profile up to `hi`: every M in 1..KERNEL_SWITCH_ROWS, then
    the 3 x 2^k beyond it that bracket `hi`."""
    rows = list(range(1, min(int(hi), KERNEL_SWITCH_ROWS) + 1))
    if hi > KERNEL_SWITCH_ROWS:
        rows += [s for s in profile_sizes(KERNEL_SWITCH_ROWS + 1, hi) if s > KERNEL_SWITCH_ROWS]
    return rows


def _point(size, cost: Cost, t) -> dict:
    return {"size": int(size), "flops": float(cost.flops), "bytes": float(cost.bytes),
            "time_s": t.median_s, "timing": t.to_dict()}


PROFILE_ROUNDS = 3  # each point is timed once per round; the round with the median time is kept


def _median_round(rounds):
    """Merge rounds of the same profile: per point, the round whose time_s is the median (the
    lower middle one for an even count)."""
    a = rounds[0]
    if isinstance(a, dict) and "time_s" in a:
        return sorted(rounds, key=lambda p: p["time_s"])[(len(rounds) - 1) // 2]
    if isinstance(a, dict):
        return {k: _median_round([r[k] for r in rounds]) if all(k in r for r in rounds) else a[k] for k in a}
    if isinstance(a, list) and a and isinstance(a[0], dict):
        return [_median_round(list(points)) for points in zip(*rounds)]
    return a


def measure_profile(cfg: ModelConfig, kind: str, dtype: str, *, max_tokens: int, max_batch: int,
                    max_kv_positions: int, e2e_sizes=(), cache_bytes: float = 0.0,
                    pool_bytes: float = 1e9, point_time_s: float = 0.5, seed: int = 0,
                    budget=None, rounds: int = PROFILE_ROUNDS, after_round=None) -> dict:
    """The profile of `cfg` in `dtype` on `kind`, sized to predict passes of up to `max_tokens`
    tokens, decode batches up to `max_batch` and `max_kv_positions` cached positions per step.
    `e2e_sizes`: the sizes (M, S, B x context) of the end-to-end points, to record disjointness.

    Every operator is timed in `rounds` rounds over the whole profile (seconds apart), and each
    point keeps the round with the median time, as does the overhead: a virtual machine's memory
    bandwidth drifts with its neighbours' load (by 30 % for seconds at a time on the 2-core EPYC
    VM, invisible to /proc/stat). A burst during one round cannot mis-state an operator, and,
    unlike the fastest round, the median does not bias the profile towards the machine's best
    moments.
    after_round(r), if given, is called after each round r (e.g. to time the residual's probes
    under the same drift: time_probes).
    budget (a measure.budget.StageBudgets, its stage started): a round after the first is taken only if it fits
    in what is left, predicted as the last round's time plus the shortest after_round so far, the first one not
    counted (a compiled step compiles there); the rounds left out are recorded there. `rounds` in the
    result is the number taken, `rounds_planned` the number asked for.
    Reason: the profile's sizes, buffers and timing are one call's scenario (14 parameters); kept flat because
    the suite and the serving validation call it with keywords."""
    import time

    clock = budget.clock if budget is not None else time.perf_counter
    done, round_s, after_s = [], [], []
    for r in range(int(rounds)):
        if r and budget is not None:
            need_s = round_s[-1] + (min(after_s[1:]) if len(after_s) > 1 else 0.0)
            if not budget.fits(need_s):
                budget.skip(f"profile rounds {r + 1}-{int(rounds)} of {int(rounds)} (one takes ~{need_s:.0f} s)")
                break
        t0 = clock()
        done.append(_profile_round(cfg, kind, dtype, max_tokens=max_tokens, max_batch=max_batch,
                                   max_kv_positions=max_kv_positions,
                                   cache_bytes=cache_bytes, pool_bytes=pool_bytes,
                                   point_time_s=point_time_s, seed=seed))
        t1 = clock()
        round_s.append(t1 - t0)
        if after_round is not None:
            after_round(r)
            after_s.append(clock() - t1)
    out = _median_round(done)
    mid = sorted(done, key=lambda d: d["overhead_s"])[(len(done) - 1) // 2]
    out["overhead_s"], out["overhead"] = mid["overhead_s"], mid["overhead"]
    out["rounds"] = len(done)
    out["rounds_planned"] = int(rounds)
    _disjointness(out, e2e_sizes)
    return out


def _profile_round(cfg: ModelConfig, kind: str, dtype: str, *, max_tokens: int, max_batch: int,
                   max_kv_positions: int, cache_bytes: float = 0.0,
                   pool_bytes: float = 1e9, point_time_s: float = 0.5, seed: int = 0) -> dict:
    """One round of measure_profile."""
    import torch
    import torch.nn.functional as F

    from inferlab.measure.model import RMSNorm

    prec = Precision(dtype, dtype, dtype)
    gen = generator(kind, seed)
    tdt = torch_dtype(dtype)

    def timed(fn, pool):
        return time_fn(fn, pool, device=kind, warmup=2, repeats=15, min_repeats=3, max_time_s=point_time_s)

    def warm(fn, pool):  # every new buffer read once, untimed, before any timed call (see below)
        warm_rotation(fn, pool)

    out = {"method": __doc__.split("\n\n")[0], "dtype": dtype, "linear": {}, "attention": {},
           "elementwise": {}}
    # Linear layers ------------------------------------------------------------------------------
    for name, (k, n) in linear_shapes(cfg).items():
        key = shape_key(k, n)
        if key in out["linear"]:
            continue
        hi = max_batch if name == "lm_head" else max_tokens
        probe = LinearProbe(k, n, dtype, kind, cache_bytes=cache_bytes, pool_bytes=pool_bytes, gen=gen)
        probe.warm(1)  # the copies are new: read each once (one row) first
        pts = []
        for m in linear_sizes(hi):
            t = timed(F.linear, probe.pool(m))
            pts.append(_point(m, linear_cost(m, k, n, prec), t))
            probe.release_inputs()
        out["linear"][key] = pts
        del probe
    # Attention -----------------------------------------------------------------------------------
    h, hk, hd = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    gqa = hk != h

    def attn_cost(q_len, past):
        c = forward_costs(cfg.with_(n_layers=1), 1, q_len, past, prec)
        return c.per_layer["attn_scores"] + c.per_layer["attn_values"]

    pre = []
    for s in profile_sizes(1, max_tokens):
        blk = (2 * hk + h) * s * hd * torch.tensor([], dtype=tdt).element_size()
        n_c = weight_copies(blk, cache_bytes, pool_bytes)
        pool = [(random_tensor((1, h, s, hd), dtype, kind, gen), random_tensor((1, hk, s, hd), dtype, kind, gen),
                 random_tensor((1, hk, s, hd), dtype, kind, gen)) for _ in range(n_c)]
        fn = lambda q, k_, v: F.scaled_dot_product_attention(q, k_, v, is_causal=True, enable_gqa=gqa)  # noqa: E731
        warm(fn, pool)
        t = timed(fn, pool)
        pre.append(_point(s, attn_cost(s, 0), t))
        del pool
    dec = []
    for c in profile_sizes(1, max_kv_positions):
        blk = 2 * hk * c * hd * torch.tensor([], dtype=tdt).element_size()
        n_c = weight_copies(blk, cache_bytes, pool_bytes)
        pool = [(random_tensor((1, h, 1, hd), dtype, kind, gen), random_tensor((1, hk, c, hd), dtype, kind, gen),
                 random_tensor((1, hk, c, hd), dtype, kind, gen)) for _ in range(n_c)]
        fn = lambda q, k_, v: F.scaled_dot_product_attention(q, k_, v, enable_gqa=gqa)  # noqa: E731
        warm(fn, pool)
        t = timed(fn, pool)
        dec.append(_point(c, attn_cost(1, c - 1), t))
        del pool
    out["attention"] = {"prefill": pre, "decode": dec}
    # Uncounted elementwise work ------------------------------------------------------------------
    layer_pts, head_pts, sample_pts = [], [], []
    norm = RMSNorm(cfg.d_model).to(kind, tdt)
    emb = torch.nn.Embedding(cfg.vocab_size, cfg.d_model).to(kind, tdt)
    for tokens in profile_sizes(1, max_tokens):
        t = timed(*elementwise_layer(cfg, tokens, kind, dtype, gen))
        layer_pts.append({"tokens": tokens, "time_s": t.median_s, "timing": t.to_dict()})
        toks = [torch.randint(0, cfg.vocab_size, (1, tokens), generator=gen, device=kind) for _ in range(2)]
        t = timed(lambda tok: norm(emb(tok)[:, -1:]), toks)
        head_pts.append({"tokens": tokens, "time_s": t.median_s, "timing": t.to_dict()})
    for b in profile_sizes(1, max_batch):
        logits = [random_tensor((b, 1, cfg.vocab_size), dtype, kind, gen) for _ in range(2)]
        t = timed(lambda z: z.argmax(-1), logits)
        sample_pts.append({"tokens": b, "time_s": t.median_s, "timing": t.to_dict()})
    out["elementwise"] = {"layer": layer_pts, "head": head_pts, "sampling": sample_pts}
    del emb
    # Fixed per-step overhead ---------------------------------------------------------------------
    out["overhead_s"], out["overhead"] = step_overhead(cfg, kind, dtype, seed=seed, point_time_s=point_time_s)
    return out


def _disjointness(out: dict, e2e_sizes) -> None:
    """Record in a profile which of its sizes the end-to-end points share (`disjoint` checks the rule)."""
    linear_rows = {p["size"] for pts in out["linear"].values() for p in pts}
    att = out["attention"]
    sizes = sorted(linear_rows | {p["size"] for p in att["prefill"]} | {p["size"] for p in att["decode"]}
                   | {p["tokens"] for p in out["elementwise"]["layer"]})
    e2e = sorted({int(x) for x in e2e_sizes})
    shared = sorted(set(sizes) & set(e2e))
    out["sizes"] = sizes
    out["e2e_sizes"] = e2e
    out["shared_sizes"] = shared
    out["disjoint"] = all(s <= KERNEL_SWITCH_ROWS and s in linear_rows for s in shared)
    out["disjoint_rule"] = (f"profile sizes are disjoint from the end-to-end points except linear row "
                            f"counts <= {KERNEL_SWITCH_ROWS}, timed at every count because kernels switch there")


def elementwise_layer(cfg: ModelConfig, tokens: int, kind: str, dtype: str, gen):
    """(fn, input pool): one layer's uncounted work at `tokens` tokens, as Block and Attention
    run it: attention RMSNorm, rotary on Q and K, the KV-cache write of K and V, the head merge
    (transpose + reshape copy), a residual add, the MLP RMSNorm, SiLU(gate) x up, a residual add.
    The linear layers and SDPA are left out (they are profiled on their own)."""
    import torch
    import torch.nn.functional as F

    from inferlab.measure.model import RMSNorm, apply_rope, rope_tables

    tdt = torch_dtype(dtype)
    h, hk, hd = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    norm1, norm2 = RMSNorm(cfg.d_model).to(kind, tdt), RMSNorm(cfg.d_model).to(kind, tdt)
    cos, sin = rope_tables(hd, tokens, kind)
    cache = [torch.empty((1, hk, tokens, hd), dtype=tdt, device=kind) for _ in range(2)]

    def make():
        return (random_tensor((1, tokens, cfg.d_model), dtype, kind, gen),
                random_tensor((1, h, tokens, hd), dtype, kind, gen),
                random_tensor((1, hk, tokens, hd), dtype, kind, gen),
                random_tensor((1, hk, tokens, hd), dtype, kind, gen),
                random_tensor((1, tokens, cfg.d_ff), dtype, kind, gen),
                random_tensor((1, tokens, cfg.d_ff), dtype, kind, gen),
                random_tensor((1, h, tokens, hd), dtype, kind, gen))

    def layer(x, q, k, v, g, u, y):
        norm1(x)
        apply_rope(q, cos, sin)
        cache[0][:, :, :tokens] = apply_rope(k, cos, sin)
        cache[1][:, :, :tokens] = v
        x = x + y.transpose(1, 2).reshape(1, tokens, -1)
        norm2(x)
        F.silu(g) * u
        return x + x

    return layer, [make() for _ in range(2)]


def skeleton(cfg: ModelConfig) -> ModelConfig:
    """The same depth and layer structure at negligible width: one 8-wide head, d_ff 8, 16 words."""
    return cfg.with_(name=f"{cfg.name}-skeleton", d_model=8, n_heads=1, n_kv_heads=1, head_dim=8,
                     d_ff=8, vocab_size=16)


def step_overhead(cfg: ModelConfig, kind: str, dtype: str, *, seed: int = 0,
                  point_time_s: float = 0.5) -> tuple[float, dict]:
    """(seconds, details): the skeleton model's decode step, less its operators timed alone at
    the same width (linear x (7 per layer + LM head), SDPA x layers, the elementwise work),
    clamped at 0. What remains is what a pass costs beyond its operators: module calls, views."""
    import torch
    import torch.nn.functional as F

    from inferlab.measure.runner import random_model

    sk = skeleton(cfg)
    model = random_model(sk, kind, dtype, seed)
    model.setup_cache(1, 64)
    gen = generator(kind, seed + 7)
    toks = [torch.randint(0, sk.vocab_size, (1, 1), generator=gen, device=kind) for _ in range(4)]
    reps = 50

    def many(fn):
        def run(*args):
            for _ in range(reps):
                fn(*args)
        return run

    def t_of(fn, pool):
        return time_fn(many(fn), pool, device=kind, warmup=2, repeats=15, min_repeats=3,
                       max_time_s=point_time_s).median_s / reps

    with torch.inference_mode():
        step = t_of(lambda tok: model(tok, 32, all_logits=False), toks)
        x = random_tensor((1, 8), dtype, kind, gen)
        w = random_tensor((8, 8), dtype, kind, gen)
        lin = t_of(F.linear, [(x, w)])
        q = random_tensor((1, 1, 1, 8), dtype, kind, gen)
        kv = random_tensor((1, 1, 33, 8), dtype, kind, gen)
        attn = t_of(lambda a, b: F.scaled_dot_product_attention(a, b, b), [(q, kv)])
        n_linear = len(linear_shapes(sk)) - 1
        fn, pool = elementwise_layer(sk, 1, kind, dtype, gen)
        elem = t_of(fn, pool)
    ops = sk.n_layers * (n_linear * lin + attn + elem) + lin
    overhead = max(step - ops, 0.0)
    del model
    return overhead, {"skeleton_step_s": step, "linear_call_s": lin, "attention_call_s": attn,
                      "elementwise_layer_s": elem,
                      "operator_calls_s": ops}


# (batch, context) of the decode passes the residual is probed at: one per CPU linear-kernel regime
# (B = 1 a matrix-vector product, B = 3 row by row, B = 6 a GEMM; see KERNEL_SWITCH_ROWS), all at
# context 96, which no end-to-end point uses.
RESIDUAL_PROBES = ((1, 96), (3, 96), (6, 96))
RESIDUAL_RULE = ("per probe, the median over the rounds of the pass time, less the calibrated prediction "
                 "of its operators; the residual is the median of that over the probes, clamped at 0")


def time_probes(model, kind: str, *, probes=RESIDUAL_PROBES, seed: int = 0, point_time_s: float = 0.5,
                mode: str = "eager", keep_cache: bool = False) -> list:
    """One full decode pass of `model` timed at each probe (batch, context) of `probes`: a list of
    {'batch', 'context', 'measured_s', 'timing', 'decode_mode'}. measure_profile calls this between
    its rounds (`after_round`), so the probes see the same drift of the machine as the profile does.
    `mode`: how the pass runs (runner.decode_runner: eager, compile, graph), as the suite's decode
    steps run, so the residual is that of the steps it is added to.
    The model's KV cache is replaced for the probes and dropped afterwards (call setup_cache again),
    unless `keep_cache` and the cache has room for every probe: then the probes write into it and
    it stays (a compiled step recompiles for every new cache shape, a minute each on two cores)."""
    import torch

    from inferlab.measure.runner import decode_runner, fill_kv_cache_, token_pool

    if not probes:
        raise ValueError("probes: at least one (batch, context) is needed")
    cfg = model.cfg
    cache = model.layers[0].attention.kv_cache
    keep = bool(keep_cache and cache is not None
                and all(b <= cache.k_cache.shape[0] and c <= cache.k_cache.shape[2] for b, c in probes))
    out = []
    for i, (batch, context) in enumerate(probes):
        if not keep:
            model.setup_cache(batch, context)
        gen = generator(kind, seed + 11 + i)
        fill_kv_cache_(model, gen)
        pool = token_pool(cfg, batch, 1, 4, kind, gen)
        with torch.inference_mode():
            fn, used, _ = decode_runner(model, pool, context - 1, mode, kind)
            t = time_fn(fn, pool, device=kind, warmup=2, repeats=15, min_repeats=5, max_time_s=point_time_s)
            del fn
        if not keep:
            for layer in model.layers:
                layer.attention.kv_cache = None
        out.append({"batch": int(batch), "context": int(context), "measured_s": t.median_s,
                    "timing": t.to_dict(), "decode_mode": used})
    return out


def pass_residual(profile: dict, cfg: ModelConfig, precision, accelerator, probe_rounds, *,
                  signed: bool = False) -> tuple[float, dict]:
    """(seconds, details): what a full decode pass costs beyond its operators timed alone.

        residual = max(0, median over probes p of [median over rounds r of T(p, r) - T_cal(p)])
        (signed=True: without the max(0, ...))

    signed: for compiled decode steps (inductor with freezing), which can run faster than their
    operators timed alone in eager mode (pre-packed weights, fused elementwise work, no Python
    per module): the residual is then negative, the step's saving, and calibrate adds it to
    decode passes only (profile['residual_scope'] = 'decode', set by the suite). The details then
    also hold 'b1_s' and 'batched_s': the median over the probes at B = 1 and at B > 1 (the two
    graphs a compiled step runs; the overall median when a side has no probe).

    T(p, r): the pass at probe p timed in round r (time_probes, run between the profile's rounds);
    T_cal(p): calibrated_time_s of that pass from `profile` with no residual.

    The operators timed alone miss what only composing them costs: the switch from one weight
    matrix to the next, thread wake-ups between small and large ops, the pass's Python. That
    residual is added to every calibrated step as a fixed cost (it is nearly constant across
    decode batches on a CPU; prefill passes are long enough not to notice it).

    Why medians, twice. Over rounds: the residual is a few percent of a step, while this VM's speed
    drifts by ~30 % for seconds at a time; probes timed at one moment read 18 ms on all three shapes
    in one bf16 run (a slow spell), against ~2-5 ms between profile rounds. Over probes: one probe
    can land where composing costs something the others do not; in fp32 a single probe at B = 3
    (row-by-row kernel) read 48 ms, which was then added to 120 ms B = 1 steps."""
    import statistics

    from inferlab.measure.calibrate import calibrated_time_s

    rounds = [list(r) for r in probe_rounds]
    if not rounds or not rounds[0]:
        raise ValueError("probe_rounds: at least one round of at least one probe is needed")
    shapes = [(p["batch"], p["context"]) for p in rounds[0]]
    if any([(p["batch"], p["context"]) for p in r] != shapes for r in rounds):
        raise ValueError(f"probe_rounds: every round must time the same probes {shapes}")
    base = {**profile, "residual_s": 0.0}
    per_probe = []
    for i, (batch, context) in enumerate(shapes):
        measured = statistics.median(r[i]["measured_s"] for r in rounds)
        predicted = calibrated_time_s(base, cfg, precision, accelerator, batch, 1, context - 1)
        per_probe.append({"batch": batch, "context": context, "measured_s": measured,
                          "rounds_s": [r[i]["measured_s"] for r in rounds],
                          "predicted_s": predicted, "residual_s": measured - predicted})
    residual = statistics.median(p["residual_s"] for p in per_probe)
    details = {"probes": per_probe, "rounds": len(rounds), "signed": bool(signed),
               "rule": RESIDUAL_RULE + ("; signed (compiled steps): not clamped, and split by graph: "
                                        "B = 1 (a graph of its own) and B > 1" if signed else "")}
    if not signed:
        return max(residual, 0.0), details
    # A compiled step at B = 1 runs a graph of its own (dynamic shapes specialise a size of 1),
    # with other kernels than the graph every B > 1 shares: each gets the residual of its probes.
    for key, keep in (("b1_s", lambda b: b == 1), ("batched_s", lambda b: b > 1)):
        vals = [p["residual_s"] for p in per_probe if keep(p["batch"])]
        details[key] = statistics.median(vals) if vals else residual
    return residual, details

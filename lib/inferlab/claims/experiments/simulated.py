"""Experiments that run the serving simulator (inferlab.serving) on small fixed-seed workloads,
cached so that `inferlab verify` stays fast: tail latency under load, replicas, batch caps,
chunked prefill, disaggregation, priorities and speculative decoding.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from inferlab.core.costs import forward_costs
from inferlab.core.efficiency import MeasuredKernels, communication_time_s
from inferlab.core.latency import decode_step_time_s, prefill_time_s
from inferlab.core.specs import BF16, get_accelerator, get_model

from inferlab.claims.experiments.common import ACC, Case, MODEL, Outcome, _f, _ms
from inferlab.claims.experiments.tensor_parallel import _node, _node_name, _node_text


@lru_cache(maxsize=None)
def _sim(rate: float, n: int, prompt: int, output: int, policy: tuple, replicas: int = 1,
         out_cv: float = 0.0, cv: float = 1.0, measured: bool = False):
    """`n` requests of `prompt` + `output` tokens (output lognormal with `out_cv`, or fixed) arriving
    at `rate` per second (inter-arrival CV `cv`), simulated for the registry's model and accelerator
    on `replicas` replicas under `policy` (name, then (keyword, value) pairs); seed 0. measured: every
    step timed by the measured kernels (efficiency.MeasuredKernels), not the roofline."""
    model = get_model(MODEL)
    accelerator = get_accelerator(ACC)
    from inferlab.serving import LengthDist, make_policy, simulate, synthetic
    out = LengthDist("lognormal", output, out_cv, 1, 8 * output) if out_cv else LengthDist("fixed", output)
    w = synthetic(rate, n_requests=n, prompt=LengthDist("fixed", prompt), output=out, cv=cv, seed=0)
    name, kw = policy[0], dict(policy[1:])
    pol = make_policy(name, **kw)
    return simulate(w, model, accelerator, pol, replicas=replicas, router="least-loaded",
                    efficiency=MeasuredKernels() if measured else None)


def _p(x, q):
    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x)]
    return float(np.percentile(x, q)) if len(x) else float("nan")


def tail_latency_vs_qps(rates=(1.0, 6.0, 12.0), n: int = 300, prompt: int = 512, output: int = 128):
    """Holds when the mean batch, p99 ITL and p99 TTFT all rise with the request rate (continuous batching)."""
    rs = [_sim(r, n, prompt, output, ("continuous",)) for r in rates]
    batch = [r.summary()["batch"]["mean"] for r in rs]
    itl = [_p(r.all_itls_s, 99) for r in rs]
    ttft = [_p(r.ttft_s, 99) for r in rs]
    ok = all(np.diff(batch) > 0) and all(np.diff(itl) > 0) and all(np.diff(ttft) > 0)
    detail = "; ".join(f"{q:g}/s: batch {b:.1f}, p99 ITL {_ms(i)}, p99 TTFT {_ms(t)}"
                       for q, b, i, t in zip(rates, batch, itl, ttft))
    return Outcome((Case("rates " + ", ".join(f"{q:g}/s" for q in rates), ok, detail),))


def replicas_cut_tail(rate: float = 12.0, replicas: int = 2, n: int = 300, prompt: int = 512, output: int = 128):
    """Holds when M replicas at the same total rate lower the batch per replica and the p99 ITL."""
    one = _sim(rate, n, prompt, output, ("continuous",))
    many = _sim(rate, n, prompt, output, ("continuous",), replicas)
    b1, bm = one.summary()["batch"]["mean"], many.summary()["batch"]["mean"]
    i1, im = _p(one.all_itls_s, 99), _p(many.all_itls_s, 99)
    return Outcome((Case(f"{rate:g}/s on {replicas} replicas", bm < b1 and im < i1,
                         f"batch {b1:.1f} -> {bm:.1f}, p99 ITL {_ms(i1)} -> {_ms(im)}"),))


def batch_cap(rate: float = 12.0, cap: int = 16, n: int = 300, prompt: int = 512, output: int = 128):
    """One case per latency: holds where capping the running batch at `cap` lowers its p99."""
    free = _sim(rate, n, prompt, output, ("continuous",))
    capped = _sim(rate, n, prompt, output, ("continuous", ("max_num_seqs", cap)))
    i0, i1 = _p(free.all_itls_s, 99), _p(capped.all_itls_s, 99)
    t0, t1 = _p(free.ttft_s, 99), _p(capped.ttft_s, 99)
    return Outcome((Case("p99 ITL", i1 < i0, f"{_ms(i0)} -> {_ms(i1)}"),
                    Case("p99 TTFT", t1 < t0, f"{_ms(t0)} -> {_ms(t1)}")), "which latency")


def replica_scaling(rate: float = 4.0, replicas: int = 3, rel: float = 0.05, n: int = 300, prompt: int = 512,
                    output: int = 128, measured_node: bool = False):
    """Holds when M replicas at M times the rate give M times the throughput and the same p50 TTFT and
    ITL (within `rel`). Arrivals at constant gaps (cv = 0), so that the two runs differ only in scale.
    With measured_node, once more with every step timed by the measured kernels (a replica has no
    all-reduce to pay); its detail names the all-reduce time a 2-GPU tensor-parallel copy would pay
    per decode step on the measured node (values: tp2_comm_ms, tp2_comm_share)."""
    def ratios(measured):  # throughput, p50 TTFT and p50 ITL of M replicas over one
        one = _sim(rate, n, prompt, output, ("continuous",), cv=0.0, measured=measured)
        many = _sim(rate * replicas, n * replicas, prompt, output, ("continuous",), replicas, cv=0.0, measured=measured)
        s1, sm = one.summary(), many.summary()
        return (sm["throughput_output_tokens_per_s"] / s1["throughput_output_tokens_per_s"],
                sm["ttft_s"]["p50"] / s1["ttft_s"]["p50"], sm["itl_s"]["p50"] / s1["itl_s"]["p50"])

    def case(label, thr, ttft, itl, more=""):
        ok = abs(thr / replicas - 1) <= rel and abs(ttft - 1) <= rel and abs(itl - 1) <= rel
        return Case(label, ok, f"throughput x{_f(thr)}, p50 TTFT x{_f(ttft)}, p50 ITL x{_f(itl)}{more}")
    cases = [case(f"M={replicas}", *ratios(False))]
    if not measured_node:
        return Outcome(tuple(cases))
    model, accelerator = get_model(MODEL), get_accelerator(ACC)
    tp2 = _node(accelerator, 2)
    comm = float(communication_time_s(model, 1, tp2))
    share = comm / decode_step_time_s(model, tp2, prompt)
    thr, ttft, itl = ratios(True)
    cases.append(case(f"M={replicas} {_node_name(accelerator)}", thr, ttft, itl,
                      f"; no all-reduce (a 2-GPU tensor-parallel copy would pay {_ms(comm)} of each decode step, "
                      f"{share:.0%}, in all-reduces)"))
    return Outcome(tuple(cases), "kernel times",
                   {"replicas": replicas, "node_throughput": thr, "node_ttft": ttft, "node_itl": itl,
                    "tp2_comm_ms": comm * 1e3, "tp2_comm_share": share}, node=_node_text(accelerator))


def replicas_first(rate: float = 6.0, n: int = 150, prompt: int = 512, output: int = 128,
                   gpu_counts=(1, 2, 4, 8), attainment: float = 0.9):
    """Holds when serving `rate` within the chapter's SLO (TTFT < 500 ms, TPOT < 50 ms) for at least
    `attainment` of requests takes no more GPUs with replicas at B = 1 than with batching (the fewest
    of `gpu_counts` that meet it)."""
    max_gpus = max(gpu_counts)

    def gpus(cap):
        for m in gpu_counts:
            pol = ("continuous", ("max_num_seqs", cap)) if cap else ("continuous",)
            if _sim(rate, n, prompt, output, pol, m).summary()["slo_attainment"] >= attainment:
                return m
        return None
    rep, bat = gpus(1), gpus(None)
    shown = lambda m: f"{m}" if m else f"more than {max_gpus}"
    ok = rep is not None and bat is not None and rep <= bat
    # the largest count tried that replicas at B = 1 do not meet: they need more than this
    rep_short = max([m for m in gpu_counts if rep is None or m < rep], default=0)
    return Outcome((Case(f"{rate:g} requests/s", ok,
                         f"replicas at B=1 meet it first at {shown(rep)} of {list(gpu_counts)} GPUs, "
                         f"batching at {shown(bat)}"),), "",
                   {"replica_gpus": rep or float("nan"), "batch_gpus": bat or float("nan"),
                    "replica_short": rep_short, "max_gpus": max_gpus})


def continuous_vs_static(rate: float = 8.0, batch: int = 16, n: int = 300, prompt: int = 512, output: int = 128,
                         out_cv: float = 1.0):
    """With output lengths that vary (lognormal, cv 1): holds per metric where continuous batching beats
    static batching (fixed B, full batch or 0.5 s timeout)."""
    st = _sim(rate, n, prompt, output, ("static", ("batch_size", batch), ("timeout_s", 0.5)), 1, out_cv)
    co = _sim(rate, n, prompt, output, ("continuous",), 1, out_cv)
    a, b = st.summary(), co.summary()
    return Outcome((
        Case("output tokens/s", b["throughput_output_tokens_per_s"] > a["throughput_output_tokens_per_s"],
             f"static {a['throughput_output_tokens_per_s']:,.0f} vs continuous {b['throughput_output_tokens_per_s']:,.0f}"),
        Case("p50 end-to-end latency", b["e2e_s"]["p50"] < a["e2e_s"]["p50"],
             f"static {_ms(a['e2e_s']['p50'])} vs continuous {_ms(b['e2e_s']['p50'])}")), "metric")


def low_load_cost(low_rate: float = 1.0, high_rate: float = 12.0, n: int = 300, prompt: int = 512,
                  output: int = 128, min_ratio: float = 5.0):
    """Holds when cost per token (GPU time per output token) at the low rate is at least min_ratio
    times that at the high rate on the same GPU."""
    lo = _sim(low_rate, n, prompt, output, ("continuous",)).summary()
    hi = _sim(high_rate, n, prompt, output, ("continuous",)).summary()
    r = hi["throughput_output_tokens_per_s"] / lo["throughput_output_tokens_per_s"]
    return Outcome((Case(f"{low_rate:g}/s vs {high_rate:g}/s", r >= min_ratio,
                         f"cost per token x{_f(r)}; mean batch {lo['batch']['mean']:.1f} vs {hi['batch']['mean']:.1f}"),))


def ttft_is_prefill(rates=(1.0, 14.0), n: int = 300, prompt: int = 512, output: int = 128, min_share: float = 0.8):
    """Holds at each rate where the single-prompt prefill time is at least min_share of the median TTFT."""
    pre = prefill_time_s(get_model(MODEL), get_accelerator(ACC), prompt)
    cases = []
    for r in rates:
        t = _p(_sim(r, n, prompt, output, ("continuous",)).ttft_s, 50)
        cases.append(Case(f"{r:g} requests/s", pre / t >= min_share, f"prefill {_ms(pre)} of median TTFT {_ms(t)}"))
    return Outcome(tuple(cases), "load")


@lru_cache(maxsize=None)
def _long_prompt(policy: tuple, long_prompt: int, rate: float, n: int, seed: int = 0):
    """Steady traffic (512-token prompts, 128 output tokens, Poisson `rate`) with one `long_prompt`
    request arriving at the middle of it; returns (result, index of the long request)."""
    from inferlab.serving import LengthDist, Workload, make_policy, simulate, synthetic
    base = synthetic(rate, n_requests=n, prompt=LengthDist("fixed", 512), output=LengthDist("fixed", 128),
                     seed=seed)
    t_long = float(base.arrival_s[n // 2]) + 1e-6
    w = Workload(np.append(base.arrival_s, t_long), np.append(base.prompt_tokens, long_prompt),
                 np.append(base.output_tokens, 128))
    idx = int(np.flatnonzero((w.prompt_tokens == long_prompt) & (w.arrival_s == t_long))[0])
    res = simulate(w, get_model(MODEL), get_accelerator(ACC), make_policy(policy[0], **dict(policy[1:])))
    return res, idx


def chunked_long_prompt(metric: str = "others_max_itl", expect: str = "lower", chunks=(512, 2048),
                        long_prompt: int = 16_000, rate: float = 4.0, n: int = 200):
    """A long prompt arrives into steady decode traffic. For each chunk size C (ChunkedPrefill with a
    C-token budget) against unchunked prefill-first scheduling: holds where `metric` comes out
    `expect` ('lower' or 'higher'). Metrics: others_max_itl (largest ITL of the other requests),
    others_p99_ttft, long_ttft (the long request's TTFT), others_ttft_std (spread of others' TTFT)."""
    def measure(res, idx):
        others = np.ones(len(res.arrival_s), bool)
        others[idx] = False
        itl = [res.itls_s[i] for i in np.flatnonzero(others) if len(res.itls_s[i])]
        return {"others_max_itl": float(max(float(np.max(x)) for x in itl)),
                "others_p99_itl": _p(np.concatenate(itl), 99),
                "others_p99_ttft": _p(res.ttft_s[others], 99),
                "others_ttft_std": float(np.nanstd(res.ttft_s[others])),
                "long_ttft": float(res.ttft_s[idx])}
    base = measure(*_long_prompt(("prefill-first",), long_prompt, rate, n))
    cases = []
    for c in chunks:
        got = measure(*_long_prompt(("chunked", ("token_budget", c)), long_prompt, rate, n))
        ok = got[metric] < base[metric] if expect == "lower" else got[metric] > base[metric]
        cases.append(Case(f"C={c}", ok, f"{metric.replace('_', ' ')} {_ms(base[metric])} unchunked -> {_ms(got[metric])}"))
    return Outcome(tuple(cases), "chunk size", {"base": base[metric]})


def disaggregation_removes_stall(long_prompt: int = 16_000, rate: float = 4.0, n: int = 200,
                                 min_share: float = 0.8, max_share: float = 0.2, link: str = "infiniband"):
    """A long prompt arriving into steady decode traffic on two H100s, shared against disaggregated. Case
    'shared pool' (2 replicas, prefill-first): holds when some other request's ITL reaches min_share
    of the long prefill (the stall). Case 'disaggregated 1:1' (a prefill and a decode replica, the
    KV cache over `link`): holds when no other request's ITL reaches max_share of it (the stall
    gone); its detail names the long request's KV transfer."""
    from inferlab.serving import LengthDist, Workload, make_policy, simulate, synthetic
    from inferlab.serving.disaggregation import Pool, link as kv_link, simulate_disaggregated, transfer_time_s
    model, acc = get_model(MODEL), get_accelerator(ACC)
    base = synthetic(rate, n_requests=n, prompt=LengthDist("fixed", 512), output=LengthDist("fixed", 128), seed=0)
    t_long = float(base.arrival_s[n // 2]) + 1e-6
    w = Workload(np.append(base.arrival_s, t_long), np.append(base.prompt_tokens, long_prompt),
                 np.append(base.output_tokens, 128))
    idx = int(np.flatnonzero((w.prompt_tokens == long_prompt) & (w.arrival_s == t_long))[0])
    pre = prefill_time_s(model, acc, long_prompt)

    def worst(res):
        return max(float(np.max(x)) for i, x in enumerate(res.itls_s) if i != idx and len(x))
    shared = simulate(w, model, acc, make_policy("prefill-first"), replicas=2, router="least-loaded")
    lk = kv_link(link)
    dis = simulate_disaggregated(w, model, acc, prefill=Pool(1, policy=make_policy("prefill-first")),
                                 decode=Pool(1, policy=make_policy("prefill-first")), kv_link=lk)
    move = float(transfer_time_s(model, BF16, long_prompt, lk))
    ws, wd = worst(shared), worst(dis)
    return Outcome((Case("shared pool, 2 replicas", ws >= min_share * pre,
                         f"largest ITL of others {_ms(ws)}; the long prefill takes {_ms(pre)}"),
                    Case("disaggregated 1:1", wd <= max_share * pre,
                         f"largest ITL of others {_ms(wd)}; the long prompt's KV cache crosses {link} in "
                         f"{_ms(move)}, added to its own TTFT only")), "pool layout",
                   {"shared_worst_ms": ws * 1e3, "disaggregated_worst_ms": wd * 1e3, "transfer_ms": move * 1e3})


def priority_queues(rate: float = 28.0, n: int = 1500, high_share: float = 0.2, prompt: int = 512,
                    output: int = 128):
    """A loaded H100 (Poisson `rate`, `high_share` of the requests latency-sensitive) under chunked
    prefill, FIFO against priority order (policies.PriorityScheduling). Case 'queueing': holds when
    the latency-sensitive class's p99 TTFT falls. Case 'batch': holds when the batch its requests
    decode in (steps between their first and last token, time-weighted) gets smaller."""
    from inferlab.serving import ChunkedPrefill, LengthDist, PriorityScheduling, simulate, synthetic, with_priority
    model, acc = get_model(MODEL), get_accelerator(ACC)
    w = synthetic(rate, n_requests=n, prompt=LengthDist("fixed", prompt), output=LengthDist("fixed", output), seed=0)
    hi = np.random.default_rng(1).random(n) < high_share
    w = with_priority(w, np.where(hi, "high", "normal"))

    def measure(res):
        tr = res.traces[0]
        ends = tr.start_s + tr.step_s
        batches = []
        for i in np.flatnonzero(hi):
            a, b = np.searchsorted(ends, res.first_token_s[i], "right"), np.searchsorted(ends, res.finish_s[i], "right")
            if b > a:
                batches.append(float(np.average(tr.batch[a:b], weights=tr.step_s[a:b])))
        return _p(res.ttft_s[hi], 99), float(np.mean(batches))
    t0, b0 = measure(simulate(w, model, acc, ChunkedPrefill()))
    t1, b1 = measure(simulate(w, model, acc, PriorityScheduling()))
    return Outcome((Case("queueing", t1 < t0, f"latency-sensitive p99 TTFT {_ms(t0)} FIFO -> {_ms(t1)} by priority"),
                    Case("batch", b1 < 0.95 * b0, f"batch they decode in {b0:.1f} FIFO -> {b1:.1f} by priority "
                                                  f"(one continuous batch holds both classes)")), "which effect",
                   {"ttft_fifo_ms": t0 * 1e3, "ttft_priority_ms": t1 * 1e3, "batch_fifo": b0, "batch_priority": b1})


def speculative_intensity(k: int = 4, alpha: float = 0.7, context: int = 512, batches=(1, 16),
                          large_batch: int = 1024, large_context: int = 128):
    """Speculative decoding (mtp draft, k tokens, acceptance alpha) against plain decoding on one H100.
    One case per batch: holds when a verification step does more FLOPs per byte than a decode step
    (about k + 1 times) and yields more tokens per second. Sweep: a large batch of short contexts,
    where the step is compute-bound and speculation stops paying."""
    from inferlab.serving.speculative import Speculative, SpeculativeStepTime, speedup
    from inferlab.serving.steptime import RooflineStepTime
    model, acc = get_model(MODEL), get_accelerator(ACC)
    st = RooflineStepTime(model, acc)
    spec = Speculative(k, alpha)

    def intensity(b, tokens, c):  # FLOPs per byte of a step feeding `tokens` per sequence to b sequences
        costs = forward_costs(model, b, tokens, c)
        return float(costs.total.flops) / float(costs.total.bytes)

    def case(b, c=context):
        gain = speedup(st, spec, b, c, None, model.n_layers)
        ratio = intensity(b, k + 1, c) / intensity(b, 1, c)
        return Case(f"B={b}, context {c}", ratio > 1 and gain > 1,
                    f"FLOPs per byte x{_f(ratio)}; {spec.tokens_per_verification:.2f} tokens per verification, "
                    f"decode x{_f(gain)} faster")
    return Outcome(tuple(case(b) for b in batches), "batch", {"tokens_per_verification": spec.tokens_per_verification},
                   sweep=(case(large_batch, large_context),))

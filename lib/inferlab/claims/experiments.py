"""Experiments that check the chapter's statements (mechanisms, comparisons, advice).

Each experiment is a pure function of its keyword inputs that returns an Outcome: one Case per
scenario it tries (a prompt length, a batch, an accelerator, a load), each saying whether the
statement holds there and what was measured. `statements.verdict` turns the cases into a verdict
(all hold: consistent; none: erratum; some: depends). Analytic experiments call the library's
roofline, cost and memory functions; simulated ones run the serving simulator (inferlab.serving)
on small fixed-seed workloads, cached so that `inferlab verify` stays fast.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from inferlab.costs import ATTENTION_OPS, chunked_prefill_costs, decode_costs, forward_costs, prefill_costs
from inferlab.deployment import Deployment
from inferlab.efficiency import MeasuredKernels, communication_time_s
from inferlab.latency import decode_step_time_s, kv_crossover_batch, prefill_time_s, throughput_tokens_per_s
from inferlab.memory import kv_cache_bytes, max_batch, memory_budget, weight_bytes
from inferlab.roofline import ridge_point, roofline_time_s, time_weighted_regime
from inferlab.specs import BF16, Precision, get_accelerator, get_model

MODEL = "llama-2-13b"
ACC = "h100-sxm"


@dataclass(frozen=True)
class Case:
    """One scenario of an experiment: its label, whether the statement holds there, and the numbers."""

    label: str
    holds: bool
    detail: str


@dataclass(frozen=True)
class Outcome:
    cases: tuple
    varies: str = ""                                   # what the cases vary over ("prompt length")
    values: dict = field(default_factory=dict, hash=False)  # named numbers for templates
    sweep: tuple = ()   # Cases shown beside the verdict, never deciding it: what would make it flip
    node: str = ""      # the measured node the deciding cases ran on ("" : the roofline's cases only)


def _f(x, digits=3) -> str:
    return f"{x:.{digits}g}"


def _ms(x) -> str:
    return f"{x * 1e3:.3g} ms"


def _gqa(model, n_kv_heads: int):
    m = get_model(model)
    return dataclasses.replace(m, name=f"{m.name} with {n_kv_heads} KV heads", n_kv_heads=int(n_kv_heads))


def _precision(weights="bf16", kv="bf16", compute=None) -> Precision:
    return Precision(weights=weights, kv=kv, compute=compute)


# --------------------------------------------------------------------------------------------------
# Regimes and intensities
# --------------------------------------------------------------------------------------------------

def prefill_regime(prompt_lens=(2048,), batch: int = 1, model: str = MODEL, accelerator: str = ACC):
    """Holds where a prefill pass is compute-bound (compute-bound kernels take most of its time)."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    cases = []
    for s in prompt_lens:
        costs = prefill_costs(model, batch, s)
        regime = time_weighted_regime(costs, accelerator)
        t = prefill_time_s(model, accelerator, s, batch)
        share = float(costs.total.flops) / accelerator.peak("bf16") / t
        cases.append(Case(f"S={s}, B={batch}", regime == "compute",
                          f"{regime}-bound, {share:.0%} of peak FLOP/s"))
    return Outcome(tuple(cases), "prompt length")


def decode_regime(batches=(1,), context_len: int = 1024, accelerators=(ACC,), model: str = MODEL):
    """Holds where a decode step is memory-bound."""
    model = get_model(model)
    cases = []
    for acc in accelerators:
        for b in batches:
            regime = time_weighted_regime(decode_costs(model, b, context_len), get_accelerator(acc))
            cases.append(Case(f"{acc}, B={b}", regime == "memory", f"{regime}-bound"))
    return Outcome(tuple(cases), "accelerator and batch")


def phase_regimes(prompt_len: int = 1024, context_len: int = 1024, batch: int = 1,
                  model: str = MODEL, accelerator: str = ACC):
    """Holds when prefill is compute-bound and decode memory-bound in the same setting."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    p = time_weighted_regime(prefill_costs(model, batch, prompt_len), accelerator)
    d = time_weighted_regime(decode_costs(model, batch, context_len), accelerator)
    return Outcome((Case(f"S={prompt_len}, B={batch}", p == "compute" and d == "memory",
                         f"prefill {p}-bound, decode {d}-bound"),), "")


def decode_attention_intensity(models=(MODEL,), batches=(1, 64), context_len: int = 1000,
                               low: float = 0.5, high: float = 2.0):
    """Holds where the decode attention intensity lies in [low, high] at every batch."""
    cases = []
    for m in models:
        cfg = get_model(m)
        xs = [float(decode_costs(cfg, b, context_len).attention.intensity) for b in batches]
        ok = all(low <= x <= high for x in xs)
        kv = cfg.n_heads // cfg.n_kv_heads
        cases.append(Case(f"{m} ({kv} query heads per KV head)", ok,
                          ", ".join(f"B={b}: {_f(x)} FLOP/byte" for b, x in zip(batches, xs))))
    return Outcome(tuple(cases), "KV heads (MHA vs GQA)")


def decode_mlp_intensity(batches=(1, 16, 64), context_len: int = 1024, rel: float = 0.25,
                         model: str = MODEL):
    """Holds at each batch B where the decode MLP intensity is within `rel` of B."""
    model = get_model(model)
    cases = []
    for b in batches:
        x = float(decode_costs(model, b, context_len).mlp.intensity)
        cases.append(Case(f"B={b}", abs(x / b - 1) <= rel, f"MLP intensity {_f(x)} FLOP/byte"))
    return Outcome(tuple(cases), "batch")


def mlp_ridge_batch(expected: float = 295, rel: float = 0.15, context_len: int = 1024,
                    model: str = MODEL, accelerator: str = ACC):
    """The smallest decode batch at which the MLP is compute-bound; holds within `rel` of `expected`."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    ridge = ridge_point(accelerator)
    b = np.arange(1, 4097)
    x = np.asarray(decode_costs(model, b, context_len).mlp.intensity)
    first = int(b[np.argmax(x >= ridge)])
    return Outcome((Case("ridge crossing", abs(first / expected - 1) <= rel,
                         f"MLP reaches the ridge ({_f(ridge)}) at B={first}"),), "", {"batch": first})


def decode_op_regimes(batch: int = 512, context_len: int = 1024, model: str = MODEL, accelerator: str = ACC):
    """Holds when, at a batch large enough for the MLP to be compute-bound, attention is still memory-bound."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    costs = decode_costs(model, batch, context_len)
    ridge = ridge_point(accelerator)
    mlp, att = float(costs.mlp.intensity), float(costs.attention.intensity)
    return Outcome((Case(f"B={batch}", mlp >= ridge and att < ridge,
                         f"MLP {_f(mlp)} vs attention {_f(att)} FLOP/byte, ridge {_f(ridge)}"),))


def prefill_mlp_intensity(prompt_lens=(128, 2048), rel: float = 0.5, model: str = MODEL):
    """Holds at each prompt length S where the prefill MLP intensity is within `rel` of B*S (B = 1)."""
    model = get_model(model)
    cases = []
    for s in prompt_lens:
        x = float(prefill_costs(model, 1, s).mlp.intensity)
        cases.append(Case(f"S={s}", abs(x / s - 1) <= rel, f"MLP intensity {_f(x)} (B*S = {s})"))
    return Outcome(tuple(cases), "prompt length (the intensity saturates near d*f/(d+f))")


def one_pass_vs_sequential(prompt_len: int = 2048, max_ratio: float = 0.1, model: str = MODEL,
                           accelerator: str = ACC):
    """Holds when one parallel prefill pass takes under `max_ratio` of feeding the prompt one token per step."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    one = prefill_time_s(model, accelerator, prompt_len)
    seq = float(np.sum(decode_step_time_s(model, accelerator, np.arange(1, prompt_len + 1))))
    return Outcome((Case(f"S={prompt_len}", one / seq <= max_ratio,
                         f"one pass {_ms(one)} vs token by token {_ms(seq)}"),))


# --------------------------------------------------------------------------------------------------
# Scaling of TTFT and ITL
# --------------------------------------------------------------------------------------------------

def ttft_scaling(prompt_lens=(1024,), factor: float = 4, rel: float = 0.15, model: str = MODEL,
                 accelerator: str = ACC):
    """Holds at each S where TTFT(factor*S)/TTFT(S) is within `rel` of `factor`."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    cases = []
    for s in prompt_lens:
        r = prefill_time_s(model, accelerator, int(s * factor)) / prefill_time_s(model, accelerator, s)
        cases.append(Case(f"S={s} -> {int(s * factor)}", abs(r / factor - 1) <= rel, f"TTFT x{_f(r)}"))
    return Outcome(tuple(cases), "prompt length (attention's S^2 term grows)")


def ttft_batch_scaling(prompt_lens=(2048,), batches=(2, 4), rel: float = 0.15, model: str = MODEL,
                       accelerator: str = ACC):
    """Holds where the prefill time of B prompts is within `rel` of B times one prompt's."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    cases = []
    for s in prompt_lens:
        one = prefill_time_s(model, accelerator, s, 1)
        for b in batches:
            r = prefill_time_s(model, accelerator, s, b) / one
            cases.append(Case(f"S={s}, B={b}", abs(r / b - 1) <= rel, f"TTFT x{_f(r)}"))
    return Outcome(tuple(cases), "prompt length")


def prefill_batching_gain(prompt_lens=(128, 2048), batch: int = 8, min_gain: float = 1.2,
                          model: str = MODEL, accelerator: str = ACC):
    """Holds where batching `batch` prompts raises prefill tokens/s by at least `min_gain`."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    cases = []
    for s in prompt_lens:
        g = batch * prefill_time_s(model, accelerator, s, 1) / prefill_time_s(model, accelerator, s, batch)
        cases.append(Case(f"S={s}", g >= min_gain, f"prefill tokens/s x{_f(g)} at B={batch}"))
    return Outcome(tuple(cases), "prompt length (batching pays only below the ridge)")


def ttft_vs_params(models=("llama-2-13b", "llama-2-70b"), prompt_len: int = 2048, rel: float = 0.15,
                   accelerator: str = ACC):
    """Holds when TTFT grows in proportion to the parameter count (within `rel`)."""
    accelerator = get_accelerator(accelerator)
    a, b = (get_model(m) for m in models)
    r = prefill_time_s(b, accelerator, prompt_len) / prefill_time_s(a, accelerator, prompt_len)
    p = b.n_params / a.n_params
    return Outcome((Case(f"{a.name} -> {b.name}", abs(r / p - 1) <= rel,
                         f"TTFT x{_f(r)} for parameters x{_f(p)}"),))


def ttft_levers(prompt_len: int = 4096, min_speedup: float = 1.3, model: str = MODEL, accelerator: str = ACC):
    """Holds when no lever other than a shorter prompt or more devices speeds TTFT by `min_speedup`
    (tried: fp8 matrix units on the same device)."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    base = prefill_time_s(model, accelerator, prompt_len)
    fp8 = prefill_time_s(model, accelerator, prompt_len,
                         precision=Precision(weights="fp8", activations="fp8", kv="bf16"))
    s = base / fp8
    return Outcome((Case("fp8 compute, same device", s < min_speedup, f"TTFT x{_f(1 / s)} (speed-up {_f(s)})"),),
                   "", {"speedup": s})


def itl_vs_prompt(batches=(1, 32), context_len: int = 2048, factor: float = 0.5, rel: float = 0.05,
                  model: str = MODEL, accelerator: str = ACC):
    """Holds at each batch where changing the context by `factor` moves ITL by at most `rel`."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    cases = []
    for b in batches:
        r = (decode_step_time_s(model, accelerator, int(context_len * factor), b)
             / decode_step_time_s(model, accelerator, context_len, b))
        cases.append(Case(f"B={b}", abs(r - 1) <= rel, f"ITL x{_f(r)} for context x{factor:g}"))
    return Outcome(tuple(cases), "batch (the KV read grows with B)")


def quantized_itl(weights: str = "int8", expected: float = 0.5, batches=(1, 32), context_len: int = 1024,
                  rel: float = 0.15, model: str = MODEL, accelerator: str = ACC):
    """Holds at each batch where ITL with `weights` over bf16 ITL is within `rel` of `expected`."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    cases = []
    for b in batches:
        r = (decode_step_time_s(model, accelerator, context_len, b, _precision(weights))
             / decode_step_time_s(model, accelerator, context_len, b))
        cases.append(Case(f"B={b}", abs(r / expected - 1) <= rel, f"ITL x{_f(r)}"))
    return Outcome(tuple(cases), "batch (the KV read is not quantised)")


def quantized_ttft(weights: str = "int8", prompt_len: int = 1024, rel: float = 0.05, model: str = MODEL,
                   accelerator: str = ACC):
    """Holds when weight-only quantisation leaves TTFT within `rel` (prefill is compute-bound)."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    r = (prefill_time_s(model, accelerator, prompt_len, precision=_precision(weights))
         / prefill_time_s(model, accelerator, prompt_len))
    return Outcome((Case(f"S={prompt_len}", abs(r - 1) <= rel, f"TTFT x{_f(r)}"),))


def itl_rule(batches=(1, 16, 64), context_len: int = 1024, rel: float = 0.1, model: str = MODEL,
             accelerator: str = ACC):
    """Holds where (weight bytes + B * KV bytes) / bandwidth is within `rel` of the full step time."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    acc = accelerator
    cases = []
    for b in batches:
        rule = (weight_bytes(model) + b * kv_cache_bytes(model, context_len)) / acc.hbm_bytes_per_s
        t = decode_step_time_s(model, accelerator, context_len, b)
        cases.append(Case(f"B={b}", abs(rule / t - 1) <= rel, f"rule {_ms(rule)} vs model {_ms(t)}"))
    return Outcome(tuple(cases), "batch")


def bandwidth_bound_decode(accelerators=(ACC, "h200", "a100-80gb"), context_len: int = 1024, rel: float = 0.1,
                           model: str = MODEL):
    """Holds on each device where the B = 1 step is within `rel` of weight bytes / bandwidth."""
    model = get_model(model)
    cases = []
    for a in accelerators:
        acc = get_accelerator(a)
        rule = weight_bytes(model) / acc.hbm_bytes_per_s
        t = decode_step_time_s(model, acc, context_len, 1)
        cases.append(Case(a, abs(rule / t - 1) <= rel, f"step {_ms(t)} vs weights/BW {_ms(rule)}"))
    return Outcome(tuple(cases), "accelerator")


def device_speedups(pairs=(("h100-sxm", "h200"),), phase: str = "decode", tracks: str = "bandwidth",
                    rel: float = 0.1, prompt_len: int = 2048, context_len: int = 1024, model: str = MODEL):
    """Holds for each device pair where the phase's speed-up is within `rel` of the ratio of
    `tracks` ('bandwidth' or 'flops') between the two devices."""
    model = get_model(model)
    cases = []
    for a, b in pairs:
        A, Bc = get_accelerator(a), get_accelerator(b)
        if phase == "decode":
            s = decode_step_time_s(model, A, context_len) / decode_step_time_s(model, Bc, context_len)
        else:
            s = prefill_time_s(model, A, prompt_len) / prefill_time_s(model, Bc, prompt_len)
        ratio = (Bc.hbm_bytes_per_s / A.hbm_bytes_per_s if tracks == "bandwidth"
                 else Bc.peak("bf16") / A.peak("bf16"))
        cases.append(Case(f"{a} -> {b}", abs(s / ratio - 1) <= rel,
                          f"{phase} x{_f(s)} faster; {tracks} ratio {_f(ratio)}"))
    return Outcome(tuple(cases), "device pair")


# --------------------------------------------------------------------------------------------------
# Tensor parallelism
# --------------------------------------------------------------------------------------------------

def _node(accelerator, k: int) -> Deployment:
    """K GPUs of one NVSwitch node as Vidur profiled it: every matrix product and small kernel at its
    measured time, every all-reduce on the measured curve of K GPUs (efficiency.MeasuredKernels,
    kernels.allreduce_time_s); attention on the ideal roofline (no attention kernels were published)."""
    return Deployment(accelerator, tp=k, efficiency=MeasuredKernels())


def _node_name(accelerator) -> str:
    """How a case names the measured node (after its degree: "K=2 (measured h100-sxm node)")."""
    return f"(measured {accelerator.name} node)"


def _node_text(accelerator) -> str:
    """Outcome.node: the measured node in words."""
    return (f"an 8-GPU {accelerator.name} NVSwitch node, kernels and all-reduces as measured (Vidur's "
            "published profiles; attention on the ideal roofline)")


def _fitted_allreduce(accelerator) -> str:
    """The ring formula's all-reduce of `accelerator` (parallel.allreduce_time_s's default), in words."""
    from inferlab.parallel import allreduce_bus_bytes_per_s
    return (f"{accelerator.name} all-reduce as fitted ({_fitted_latency_us(accelerator):.1f} us, "
            f"{allreduce_bus_bytes_per_s(accelerator) / 1e9:.0f} GB/s), ideal kernels")


def _fitted_latency_us(accelerator) -> float:
    from inferlab.parallel import allreduce_latency_s
    return allreduce_latency_s(accelerator) * 1e6


def _crossing(f, lo: float = 0.0, hi: float = 1e-3, steps: int = 60) -> float:
    """The x in [lo, hi] where the increasing function f crosses 0, by bisection: lo when f(lo) >= 0
    already, nan when f(hi) < 0 still."""
    if f(lo) >= 0:
        return lo
    if f(hi) < 0:
        return float("nan")
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if f(mid) >= 0 else (mid, hi)
    return hi


def _phase_time(phase: str, model, on: Deployment, prompt_len: int, context_len: int) -> float:
    if phase == "prefill":
        return prefill_time_s(model, on, prompt_len)
    return decode_step_time_s(model, on, context_len)


def tp_speedup(phase: str = "prefill", tps=(2, 4), rel: float = 0.2, allreduce_latency_s: float = 0.0,
               prompt_len: int = 2048, context_len: int = 1024, model: str = MODEL, accelerator: str = ACC,
               measured_node: bool = False):
    """Holds at each degree K where the phase's speed-up is within `rel` of K: on the roofline with
    all-reduces at `allreduce_latency_s` (0: the book's idealisation) and, with measured_node, on a
    measured node too (`_node`: kernels and all-reduces as Vidur measured them). Values: each
    speed-up, roofline_k<K> and node_k<K>."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    setups = [("roofline", "", lambda k: Deployment(accelerator, tp=k, allreduce_latency_s=allreduce_latency_s))]
    if measured_node:
        setups.append(("node", f" {_node_name(accelerator)}", lambda k: _node(accelerator, k)))
    cases, values = [], {}
    for key, suffix, on in setups:
        one = _phase_time(phase, model, on(1), prompt_len, context_len)
        for k in tps:
            s = one / _phase_time(phase, model, on(k), prompt_len, context_len)
            values[f"{key}_k{k}"] = s
            cases.append(Case(f"K={k}{suffix}", abs(s / k - 1) <= rel, f"{phase} x{_f(s)} faster"))
    return Outcome(tuple(cases), "tensor-parallel degree", values,
                   node=_node_text(accelerator) if measured_node else "")


def tp_decode_vs_prefill(tp: int = 2, latencies_s=(0.0, 1e-5, 3e-5), prompt_len: int = 2048, context_len: int = 1024,
                         model: str = MODEL, accelerator: str = ACC, measured_node: bool = False):
    """Holds where TP over `tp` devices speeds decode up less than prefill (by 5 % or more). Without
    measured_node: one case per all-reduce latency of `latencies_s`, on the roofline's kernels. With
    it, one case decides, the measured node (`_node`); the latency sweep and the node's fitted
    all-reduce on the roofline's kernels are shown beside it (Outcome.sweep), with the latency from
    which the roofline's kernels make it hold (values: flip_us)."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)

    def speedups(on):
        p = prefill_time_s(model, on(1), prompt_len) / prefill_time_s(model, on(tp), prompt_len)
        d = decode_step_time_s(model, on(1), context_len) / decode_step_time_s(model, on(tp), context_len)
        return p, d

    def case(label, on):
        p, d = speedups(on)
        return Case(label, d <= 0.95 * p, f"prefill x{_f(p)}, decode x{_f(d)} at K={tp}")

    at = lambda lat: (lambda k: Deployment(accelerator, tp=k, allreduce_latency_s=lat))  # noqa: E731
    by_latency = [case(f"all-reduce latency {lat * 1e6:g} us", at(lat)) for lat in latencies_s]
    if not measured_node:
        return Outcome(tuple(by_latency), "all-reduce latency (the roofline alone splits both phases K ways)")
    on_node = lambda k: _node(accelerator, k)  # noqa: E731
    p, d = speedups(on_node)
    step = decode_step_time_s(model, on_node(tp), context_len)
    share = float(communication_time_s(model, 1, on_node(tp))) / step
    decided = Case(f"K={tp} {_node_name(accelerator)}", d <= 0.95 * p,
                   f"prefill x{_f(p)}, decode x{_f(d)}; all-reduces {share:.0%} of the decode step")

    def margin(lat):
        pl, dl = speedups(at(lat))
        return 0.95 * pl - dl
    flip = _crossing(margin)
    sweep = [*by_latency, case(_fitted_allreduce(accelerator), lambda k: Deployment(accelerator, tp=k))]
    return Outcome((decided,), "", {"tp": tp, "node_prefill": p, "node_decode": d, "node_comm_share": share,
                                    "flip_us": flip * 1e6, "fitted_latency_us": _fitted_latency_us(accelerator)},
                   sweep=tuple(sweep), node=_node_text(accelerator))


def tp_comm_dominates(tps=(4, 8), latencies_s=(0.0, 1e-5, 2e-5, 3e-5), context_len: int = 1024, model: str = MODEL,
                      accelerator: str = ACC, measured_node: bool = False):
    """Holds where communication takes at most half the decode step at the smaller degree and more
    than half at the larger. Without measured_node: one case per all-reduce latency (the roofline's
    kernels, the ring all-reduce). With it, one case decides, the measured node (`_node`); the sweep
    and the node's fitted all-reduce on the roofline's kernels are shown beside it, with the window
    in which it would hold: latencies window_low_us-window_high_us on the roofline's kernels, and the
    node's all-reduces slower by scale_low-scale_high times on its own kernels."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)

    def parts(on):  # (all-reduce seconds, step seconds) of one decode step per degree
        out = []
        for k in tps:
            d = on(k)
            out.append((float(communication_time_s(model, 1, d)), decode_step_time_s(model, d, context_len)))
        return out

    def case(label, on):
        shares = [c / t for c, t in parts(on)]
        return Case(label, shares[0] <= 0.5 < shares[-1],
                    ", ".join(f"K={k}: {s:.0%} of the step" for k, s in zip(tps, shares)))

    at = lambda lat: (lambda k: Deployment(accelerator, tp=k, allreduce_latency_s=lat))  # noqa: E731
    by_latency = [case(f"all-reduce latency {lat * 1e6:g} us", at(lat)) for lat in latencies_s]
    if not measured_node:
        return Outcome(tuple(by_latency), "all-reduce latency")
    node = parts(lambda k: _node(accelerator, k))
    shares = [c / t for c, t in node]
    decided = Case(" and ".join(f"K={k}" for k in tps) + f" {_node_name(accelerator)}",
                   shares[0] <= 0.5 < shares[-1],
                   ", ".join(f"K={k}: {s:.0%} of the step ({_ms(c)} of {_ms(t)})"
                             for k, s, (c, t) in zip(tps, shares, node)))
    share_at = lambda i: (lambda lat: float(communication_time_s(model, 1, at(lat)(tps[i])))  # noqa: E731
                          / decode_step_time_s(model, at(lat)(tps[i]), context_len) - 0.5)
    sweep = [*by_latency, case(_fitted_allreduce(accelerator), lambda k: Deployment(accelerator, tp=k))]
    values = {f"node_share_k{k}": s for k, s in zip(tps, shares)}
    values.update({f"node_comm_ms_k{k}": c * 1e3 for k, (c, _) in zip(tps, node)})
    values.update({f"node_step_ms_k{k}": t * 1e3 for k, (_, t) in zip(tps, node)})
    values.update({f"node_kernel_ms_k{k}": (t - c) * 1e3 for k, (c, t) in zip(tps, node)})
    values["node_kernel_ms_k1"] = decode_step_time_s(model, _node(accelerator, 1), context_len) * 1e3
    values["fitted_latency_us"] = _fitted_latency_us(accelerator)
    values.update({
        # the roofline's kernels: above window_low_us the larger degree passes half, above window_high_us the smaller
        "window_low_us": _crossing(share_at(-1)) * 1e6, "window_high_us": _crossing(share_at(0)) * 1e6,
        # the node's kernels: all-reduces this many times slower put the larger degree past half, the smaller not yet
        "scale_low": (node[-1][1] - node[-1][0]) / node[-1][0], "scale_high": (node[0][1] - node[0][0]) / node[0][0]})
    return Outcome((decided,), "", values, sweep=tuple(sweep), node=_node_text(accelerator))


def tp_kv_sharded(tp: int = 2, model: str = "llama-2-70b", context_len: int = 2048, batch: int = 32):
    """Holds when tensor parallelism leaves the KV cache per device unsharded (as much as on one device)."""
    model = get_model(model)
    one = kv_cache_bytes(model, context_len, batch)
    per = kv_cache_bytes(model, context_len, batch, tp=tp)
    return Outcome((Case(f"TP={tp}", per >= 0.99 * one, f"KV per device {per / 1e9:.3g} GB of {one / 1e9:.3g} GB"),),
                   "", {"per_device_gb": per / 1e9, "total_gb": one / 1e9})


# --------------------------------------------------------------------------------------------------
# KV cache, memory, batching
# --------------------------------------------------------------------------------------------------

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
    from inferlab.roofline import pass_time_s
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


# --------------------------------------------------------------------------------------------------
# Serving simulations (small, fixed seeds, cached)
# --------------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------------
# Sentence-level claims: orders of growth, per-step costs, what chunking leaves unchanged
# --------------------------------------------------------------------------------------------------

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
    from inferlab.parallel import allreduce_latency_s as default_latency_s
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
    by an amount that inferlab.qualitative_words.size_of_change calls one of `words` (small <= 10 %,
    moderate <= 30 %, large beyond), chunked against unchunked (the run of chunked_long_prompt)."""
    from inferlab.qualitative_words import size_of_change
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
    from inferlab.specs import list_models
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


EXPERIMENTS = {f.__name__: f for f in (
    prefill_regime, decode_regime, phase_regimes, decode_attention_intensity, decode_mlp_intensity,
    mlp_ridge_batch, decode_op_regimes, prefill_mlp_intensity, one_pass_vs_sequential, ttft_scaling,
    ttft_batch_scaling, prefill_batching_gain, ttft_vs_params, ttft_levers, itl_vs_prompt, quantized_itl,
    quantized_ttft, itl_rule, bandwidth_bound_decode, device_speedups, tp_speedup, tp_decode_vs_prefill,
    tp_comm_dominates, tp_kv_sharded, recompute_vs_cache, batching_amortizes, batch_tradeoff,
    batch_doubling, crossover_behaviour, throughput_ceiling, crossover_stop, max_batch_formula, max_batch_levers,
    kv_quant_batch, gqa_factor, quant_raises_bstar_and_maxb, cost_levers, prefix_cache,
    chunked_prefill_flops, replicas_vs_batch_latency, tail_latency_vs_qps, replicas_cut_tail, batch_cap,
    replica_scaling, replicas_first, continuous_vs_static, low_load_cost, ttft_is_prefill,
    chunked_long_prompt, growth_order, tp_improves, chunked_kv_memory, weight_reads_per_request,
    unfused_attention_regime, flash_attention_gain, window_attention_intensity, itl_levers, tp_short_of_k,
    gqa_still_open, chunked_cost_size, decode_intensity_within_batch, fits_on_device,
    gqa_across, disaggregation_removes_stall, priority_queues, speculative_intensity)}
SIMULATED = {"tail_latency_vs_qps", "replicas_cut_tail", "batch_cap", "replica_scaling", "replicas_first",
             "continuous_vs_static", "low_load_cost", "ttft_is_prefill", "chunked_long_prompt",
             "chunked_cost_size", "disaggregation_removes_stall", "priority_queues"}


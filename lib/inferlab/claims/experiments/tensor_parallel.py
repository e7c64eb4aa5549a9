"""Experiments on tensor parallelism: the speedup of TP = k in prefill and decode, the all-reduce's
share of a step, and the KV cache sharded across devices (on the roofline or on measured kernels).
"""
from __future__ import annotations

from inferlab.core.deployment import Deployment
from inferlab.core.efficiency import MeasuredKernels, communication_time_s
from inferlab.core.latency import decode_step_time_s, prefill_time_s
from inferlab.core.memory import kv_cache_bytes
from inferlab.core.specs import get_accelerator, get_model

from inferlab.claims.experiments.common import ACC, Case, MODEL, Outcome, _f, _ms


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
    from inferlab.core.parallel import allreduce_bus_bytes_per_s
    return (f"{accelerator.name} all-reduce as fitted ({_fitted_latency_us(accelerator):.1f} us, "
            f"{allreduce_bus_bytes_per_s(accelerator) / 1e9:.0f} GB/s), ideal kernels")


def _fitted_latency_us(accelerator) -> float:
    from inferlab.core.parallel import allreduce_latency_s
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

"""The chapter's operator and tensor-parallel tables, as plain text for notebooks and nbval."""
from __future__ import annotations

from inferlab.base.text_tables import fmt, text_table
from inferlab.core.costs import ForwardCosts
from inferlab.core.roofline import bound, roofline_time_s
from inferlab.core.specs import check_accelerator, check_model, check_precision


def operator_table(costs: ForwardCosts, accelerator, dtype: str = "bf16") -> str:
    """Per-operator FLOPs, bytes, intensity, regime and roofline time of one (scalar) forward pass,
    whole model (per-layer operators times n_layers). The total row's time is the sum of the
    operator times (kernels back to back, as `roofline.pass_time_s` per_operator)."""
    acc = check_accelerator(accelerator)
    rows, total_s = [], 0.0
    for name, c in costs.operators().items():
        t = roofline_time_s(c.flops, c.bytes, acc, dtype)
        total_s += t
        intensity = float(c.intensity) if float(c.bytes) else 0.0
        rows.append((name, float(c.flops) / 1e9, float(c.bytes) / 1e6, intensity,
                     bound(intensity, acc, dtype), t * 1e3))
    c = costs.total
    rows.append(("total", float(c.flops) / 1e9, float(c.bytes) / 1e6, float(c.intensity), "-",
                 total_s * 1e3))
    return text_table(("operator", "GFLOP", "MB moved", "FLOP/byte", "bound", "roofline ms"), rows,
                      ("s", ",.1f", ",.1f", ",.1f", "s", ".3f"))


def tensor_parallel_table(model, accelerator, prompt_len, context_len, batch=1, precision=None,
                          tps=(1, 2, 4, 8), allreduce_latency_s: float | None = None) -> str:
    """TTFT and ITL on 1, 2, 4, ... devices with tensor parallelism, and each one's speed-up over
    one device. The two all-reduces per layer cost bytes / interconnect bandwidth plus
    `allreduce_latency_s` each (a fixed start-up cost; None: the accelerator's, its node's measured
    latency where published, parallel.allreduce_latency_s; 0: bandwidth only, the book's idealisation)."""
    check_model(model)
    check_accelerator(accelerator)
    if precision is not None:
        check_precision(precision)
    from inferlab.core.deployment import Deployment
    from inferlab.core.latency import decode_step_time_s, prefill_time_s
    from inferlab.core.parallel import allreduce_latency_s as default_latency_s

    if allreduce_latency_s is None:
        allreduce_latency_s = default_latency_s(accelerator)
    from inferlab.core.specs import BF16

    precision = precision or BF16
    rows, base = [], None
    for tp in tps:
        dep = Deployment(accelerator, precision, tp=tp, allreduce_latency_s=allreduce_latency_s)
        ttft = prefill_time_s(model, dep, prompt_len, batch)
        itl = decode_step_time_s(model, dep, context_len, batch)
        base = base or (ttft, itl)
        rows.append((tp, ttft * 1e3, base[0] / ttft, itl * 1e3, base[1] / itl))
    return text_table(("devices", "TTFT ms", "TTFT speed-up", "ITL ms", "ITL speed-up"), rows,
                      ("d", ".2f", ".2f", ".3f", ".2f"))

"""How well the kernel curves predict the published profiles: on their own rows, and leave one
model out (fit on two models, predict the third), beside the ideal roofline's error (the baseline).

Errors are |predicted / measured - 1| per profiled row; a row is one operator of one model at one
token count and TP shard. "Near the ridge" is 128-512 tokens, where the roofline's kink sits.
"""
from __future__ import annotations

import numpy as np

from inferlab.core.kernels.collectives import collective_fit
from inferlab.core.kernels.elementwise import KINDS, elementwise_fit
from inferlab.core.kernels.fp8 import FP8_MEASURED, fp8_fit, shape_of
from inferlab.core.kernels.linear import linear_fit
from inferlab.core.kernels.measured import MEASURED_ACCELERATORS
from inferlab.core.kernels.profiles import (LINEAR_OPS, collective_rows, fp8_rows, linear_rows, profiled_collectives,
                                            small_rows)
from inferlab.core.specs import get_accelerator

OP_CLASSES = {"attn_pre_proj": "QKV", "attn_post_proj": "output projection", "mlp_up_proj": "MLP up/gate",
              "mlp_down_proj": "MLP down"}
RIDGE_TOKENS = (128, 512)
TARGET_MEDIAN, TARGET_P90 = 0.10, 0.25  # what a leave-one-model-out prediction must meet per operator class


def _roofline_s(acc, t, k, n):
    return np.maximum(2 * t * k * n / acc.peak("fp16"), 2 * (k * n + t * (k + n)) / acc.hbm_bytes_per_s)


def linear_errors(accelerator_name: str) -> dict:
    """{'roofline' | 'own' | 'held_out': |relative error| per row} and the rows' op and tokens."""
    rows = linear_rows(accelerator_name)
    acc = get_accelerator(accelerator_name)
    own = linear_fit(acc).time_s(rows.tokens, rows.k, rows.n)
    held = np.empty_like(rows.time_s)
    for model in sorted(set(rows.model.tolist())):
        mask = rows.model == model
        held[mask] = linear_fit(acc, model).time_s(rows.tokens[mask], rows.k[mask], rows.n[mask])
    rel = lambda p: np.abs(p / rows.time_s - 1.0)  # noqa: E731
    return {"roofline": rel(_roofline_s(acc, rows.tokens, rows.k, rows.n)), "own": rel(own), "held_out": rel(held),
            "op": rows.op, "tokens": rows.tokens}


def linear_table() -> list[dict]:
    """One row per accelerator and operator class: medians and 90th percentiles of each error."""
    out = []
    for name in MEASURED_ACCELERATORS:
        e = linear_errors(name)
        for op in LINEAR_OPS:
            m = e["op"] == op
            ridge = m & (e["tokens"] >= RIDGE_TOKENS[0]) & (e["tokens"] <= RIDGE_TOKENS[1])
            out.append({"accelerator": name, "operator": OP_CLASSES[op], "rows": int(m.sum()),
                        "roofline_median": float(np.median(e["roofline"][m])),
                        "own_median": float(np.median(e["own"][m])), "own_p90": float(np.percentile(e["own"][m], 90)),
                        "held_out_median": float(np.median(e["held_out"][m])),
                        "held_out_p90": float(np.percentile(e["held_out"][m], 90)),
                        "held_out_ridge_median": float(np.median(e["held_out"][ridge])),
                        "held_out_ridge_p90": float(np.percentile(e["held_out"][ridge], 90))})
    return out


def small_table() -> list[dict]:
    """The small kernels: median |error| on own rows and leave one model out, per accelerator and kind."""
    out = []
    for name in MEASURED_ACCELERATORS:
        rows = small_rows(name)
        for kind in KINDS:
            m = rows.kind == kind
            own = elementwise_fit(name, kind).time_s(rows.tokens[m], rows.width[m])
            held = np.empty(int(m.sum()))
            models = rows.model[m]
            for model in sorted(set(models.tolist())):
                mm = models == model
                held[mm] = elementwise_fit(name, kind, model).time_s(rows.tokens[m][mm], rows.width[m][mm])
            meas = rows.time_s[m]
            out.append({"accelerator": name, "kind": kind, "rows": int(m.sum()),
                        "own_median": float(np.median(np.abs(own / meas - 1))),
                        "held_out_median": float(np.median(np.abs(held / meas - 1)))})
    return out


def collective_table() -> list[dict]:
    """Each profiled all-reduce curve: its fitted latency and bandwidth, and its median |error|."""
    out = []
    for name in MEASURED_ACCELERATORS:
        for (collective, node), counts in sorted(profiled_collectives(name).items()):
            for n in counts:
                fit = collective_fit(name, collective, node, n)
                size, t = collective_rows(name, collective, node, n)
                err = np.abs(fit.time_s(size) / t - 1)
                out.append({"accelerator": name, "collective": collective, "node": node, "n_gpus": n,
                            "latency_s": fit.latency_s, "bus_bytes_per_s": fit.bus_bytes_per_s,
                            "median": float(np.median(err)), "p90": float(np.percentile(err, 90))})
    return out


FP8_LAYOUTS = ("dense", "grouped-contiguous")


def fp8_table() -> list[dict]:
    """DeepGEMM's FP8 rows per layout: the ideal roofline at the FP8 peak, the fit on every row, and leave one
    weight shape (K x N) out (fit on the other shapes, dense and grouped, predict the held-out shape's rows)."""
    rows = fp8_rows()
    acc = get_accelerator(FP8_MEASURED[0])
    shapes = np.array([shape_of(k, n) for k, n in zip(rows.k, rows.n)])
    own = fp8_fit(acc).grouped_time_s(rows.groups, rows.rows_per_group, rows.k, rows.n)
    held = np.empty_like(rows.time_s)
    for shape in sorted(set(shapes.tolist())):
        m = shapes == shape
        held[m] = fp8_fit(acc, shape).grouped_time_s(rows.groups[m], rows.rows_per_group[m], rows.k[m], rows.n[m])
    g, t, k, n = rows.groups, rows.rows_per_group, rows.k, rows.n
    ideal = np.maximum(2 * g * t * k * n / acc.peak("fp8"), g * (k * n + t * k + 2 * t * n) / acc.hbm_bytes_per_s)
    out = []
    for layout in FP8_LAYOUTS:
        m = rows.layout == layout
        err = {name: np.abs(p[m] / rows.time_s[m] - 1) for name, p in (("roofline", ideal), ("own", own), ("held", held))}
        out.append({"layout": layout, "rows": int(m.sum()), "shapes": len(set(shapes[m].tolist())),
                    "roofline_median": float(np.median(err["roofline"])), "own_median": float(np.median(err["own"])),
                    "held_out_median": float(np.median(err["held"])), "held_out_max": float(np.max(err["held"]))})
    return out


def fp8_markdown() -> str:
    """The FP8 fit's numbers and its leave-one-shape-out table (docs/kernels.md)."""
    f = fp8_fit(get_accelerator(FP8_MEASURED[0]))
    lines = ["| e_c (of the FP8 peak) | e_m | launch floor t0 | join exponent p | wave share w | fitted on |",
             "|---|---|---|---|---|---|",
             f"| {f.compute_efficiency:.3f} | {f.bandwidth_efficiency:.3f} | {f.launch_s * 1e6:.2f} us | {f.sharpness:.2f} "
             f"| {f.wave_share:.2f} (fixed) | {len(f.fitted_on)} weight shapes |", "",
             "| layout | rows | weight shapes | ideal roofline, median | fit on every row, median "
             "| leave one shape out, median / max |", "|---|---|---|---|---|---|"]
    for r in fp8_table():
        lines.append(f"| {r['layout']} | {r['rows']} | {r['shapes']} | {_pct(r['roofline_median'])} | {_pct(r['own_median'])} "
                     f"| {_pct(r['held_out_median'])} / {_pct(r['held_out_max'])} |")
    return "\n".join(lines) + "\n"


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def fitted_markdown() -> str:
    """The fitted numbers of each accelerator's linear and small-kernel curves (docs/kernels.md)."""
    lines = ["| accelerator | e_c | e_m | launch floor t0 | join exponent p | wave share w | fitted on |",
             "|---|---|---|---|---|---|---|"]
    for name in MEASURED_ACCELERATORS:
        f = linear_fit(get_accelerator(name))
        lines.append(f"| {name} | {f.compute_efficiency:.3f} | {f.bandwidth_efficiency:.3f} | {f.launch_s * 1e6:.2f} us "
                     f"| {f.sharpness:.2f} | {f.wave_share:.2f} | {', '.join(f.fitted_on)} |")
    lines += ["", "| accelerator | small kernel | floor t0 | per element b | join exponent q |", "|---|---|---|---|---|"]
    for name in MEASURED_ACCELERATORS:
        for kind in KINDS:
            f = elementwise_fit(name, kind)
            lines.append(f"| {name} | {kind} | {f.launch_s * 1e6:.2f} us | {f.per_element_s * 1e12:.2f} ps "
                         f"| {f.sharpness:.2f} |")
    return "\n".join(lines) + "\n"


def markdown() -> str:
    """The three error tables of docs/kernels.md, generated."""
    lines = ["| accelerator | operator | rows | ideal roofline, median | fit on own rows, median / p90 "
             "| leave one model out, median / p90 | held out, 128-512 tokens, median / p90 |",
             "|---|---|---|---|---|---|---|"]
    for r in linear_table():
        lines.append(f"| {r['accelerator']} | {r['operator']} | {r['rows']} | {_pct(r['roofline_median'])} "
                     f"| {_pct(r['own_median'])} / {_pct(r['own_p90'])} "
                     f"| {_pct(r['held_out_median'])} / {_pct(r['held_out_p90'])} | {_pct(r['held_out_ridge_median'])} / {_pct(r['held_out_ridge_p90'])} |")
    lines += ["", "| accelerator | small kernel | rows | fit on own rows, median | leave one model out, median |",
              "|---|---|---|---|---|"]
    for r in small_table():
        lines.append(f"| {r['accelerator']} | {r['kind']} | {r['rows']} | {_pct(r['own_median'])} "
                     f"| {_pct(r['held_out_median'])} |")
    lines += ["", "| accelerator | collective | node | GPUs | latency per call | bus bandwidth | median / p90 error |",
              "|---|---|---|---|---|---|---|"]
    for r in collective_table():
        lines.append(f"| {r['accelerator']} | {r['collective']} | {r['node']} | {r['n_gpus']} "
                     f"| {r['latency_s'] * 1e6:.1f} us | {r['bus_bytes_per_s'] / 1e9:.0f} GB/s "
                     f"| {_pct(r['median'])} / {_pct(r['p90'])} |")
    return "\n".join(lines) + "\n"

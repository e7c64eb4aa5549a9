"""Figures of measured runs, each measured curve beside the library's prediction.

Every function takes one SuiteResult or a list (a live run beside recorded ones) and returns
an inferlab.notebook.plots.Plot: the Figure, the plotted points as a text table, and the points in
`data`. Measured points are solid markers with interquartile bars; predictions (the library
at the ceilings measured in the same run) are dashed lines of the same colour.
"""
from __future__ import annotations

import numpy as np

from inferlab.notebook.plots import FIGSIZE, Plot, _figure

# Run labels are long: the legend goes under the axes, full width, never over the measured points.
LEGEND_BELOW = dict(fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.16), borderaxespad=0.0)
TALL = (FIGSIZE[0] - 0.2, FIGSIZE[1] + 1.6)   # the legend under the axes overhangs a little
from inferlab.core.roofline import attainable_flops_per_s, ridge_point
from inferlab.core.specs import get_accelerator
from inferlab.base.text_tables import text_table

COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown")


def _runs(results) -> list:
    return list(results) if isinstance(results, (list, tuple)) else [results]


def short_label(r) -> str:
    """'live cpu-0.5b bf16 (Intel Xeon)' / 'recorded 2026-05-01 llama-2-13b bf16 (NVIDIA H100 ...)'."""
    c = r.data["config"]
    when = f"recorded {r.data['created'][:10]}" if r.recorded else "live"
    return f"{when} {c['model']['name']} {c['dtype']} ({r.device['name']})"


def _sweep_plot(results, kind, x, xlabel, ylabel, title, *, y_of=None, pred_of=None,
                y_scale=1e3, table_cols=("ms", "pred. ms")):
    runs = _runs(results)
    fig, ax = _figure(TALL)
    rows, data = [], {}
    for i, r in enumerate(runs):
        pts = r.points(kind)
        if not pts:
            continue
        color = COLORS[i % len(COLORS)]
        xs = np.array([p[x] for p in pts], dtype=float)
        ys = np.array([(y_of or (lambda p: p["median_s"]))(p) for p in pts]) * y_scale
        lo = np.array([p["q1_s"] for p in pts]) * y_scale
        hi = np.array([p["q3_s"] for p in pts]) * y_scale
        pred = np.array([(pred_of or (lambda p: p["predicted_s"]))(p) for p in pts]) * y_scale
        if y_of is not None:  # a rate: the quartiles of time swap ends
            lo, hi = (np.array([p[x] for p in pts]) / np.array([p["q3_s"] for p in pts]),
                      np.array([p[x] for p in pts]) / np.array([p["q1_s"] for p in pts]))
        label = short_label(r)
        ax.errorbar(xs, ys, yerr=[np.maximum(ys - lo, 0), np.maximum(hi - ys, 0)], fmt="o-",
                    color=color, label=f"{label}: measured", capsize=3)
        ax.plot(xs, pred, "--", color=color, alpha=0.8,
                label="dashed: the library at each run's measured ceilings" if not data else None)
        rows += [(label, xv, yv, pv, yv / pv) for xv, yv, pv in zip(xs, ys, pred)]
        data[label] = {"x": xs, "measured": ys, "predicted": pred}
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(**LEGEND_BELOW)
    table = text_table(("run", x, *table_cols, "meas/pred"), rows, ("s", "d", ".4g", ".4g", ".2f"))
    return Plot(fig, table, data)


def ttft_plot(results) -> Plot:
    """TTFT (prefill at B = 1) against prompt length: measured and predicted."""
    return _sweep_plot(results, "ttft", "prompt_len", "prompt length S (tokens)", "TTFT (ms)",
                       "TTFT grows with the prompt")


def itl_plot(results) -> Plot:
    """ITL (one decode step at B = 1) against context length: measured and predicted."""
    return _sweep_plot(results, "itl", "context_len", "context length (tokens)", "ITL (ms)",
                       "ITL barely moves with context at B = 1")


def throughput_plot(results) -> Plot:
    """Decode throughput (tokens/s) against batch size at a fixed context."""
    return _sweep_plot(results, "batch", "batch", "batch size B", "decode throughput (tokens/s)",
                       "Throughput grows with batch", y_of=lambda p: p["batch"] / p["median_s"],
                       pred_of=lambda p: p["batch"] / p["predicted_s"], y_scale=1.0,
                       table_cols=("tokens/s", "pred. tokens/s"))


def step_time_plot(results) -> Plot:
    """Decode step time against batch size: flat while weights dominate, then rising."""
    return _sweep_plot(results, "batch", "batch", "batch size B", "decode step time (ms)",
                       "Step time against batch")


def roofline_plot(result, *, datasheet: bool = True) -> Plot:
    """Measured roofline: M-row products against a d x f weight, achieved FLOP/s against
    arithmetic intensity, over the roofline of the measured ceilings (solid) and, where the
    device is in data/accelerators.toml, its datasheet roofline (dashed). Ridge point marked."""
    r = result
    pts = r.points("roofline")
    dtype = r.dtype
    acc = r.accelerator()
    fig, ax = _figure(TALL)
    inten = np.array([p["intensity"] for p in pts])
    achieved = np.array([p["achieved_flops_per_s"] for p in pts])
    ridge = ridge_point(acc, dtype)
    grid = np.logspace(np.log10(min(inten.min(), ridge) / 2), np.log10(max(inten.max(), ridge) * 2), 200)
    ax.plot(grid, attainable_flops_per_s(grid, acc, dtype) / 1e12, "-", color="black",
            label=f"measured ceilings: {acc.hbm_bytes_per_s / 1e9:.3g} GB/s, "
                  f"{acc.peak(dtype) / 1e12:.3g} TFLOP/s")
    ax.axvline(ridge, color="black", ls=":", lw=1, label=f"ridge {ridge:.0f} FLOP/byte")
    ds = r.data["predictions"].get("datasheet")
    if datasheet and ds:
        sheet = get_accelerator(ds["name"])
        top = max(grid[-1], ridge_point(sheet, dtype) * 2)
        grid2 = np.logspace(np.log10(grid[0]), np.log10(top), 200)
        ax.plot(grid2, attainable_flops_per_s(grid2, sheet, dtype) / 1e12, "--",
                color="gray", label=f"datasheet {ds['name']}")
    ax.scatter(inten, achieved / 1e12, color="tab:red", zorder=5,
               label=f"M x ({pts[0]['d']} x {pts[0]['f']}) products, {dtype}")
    step = 2 if len(pts) > 8 else 1  # label every other point when they crowd
    for p in pts[::step]:  # below-right of each point: the roof runs above-left of a point on it
        ax.annotate(f"M={p['m']}", (p["intensity"], p["achieved_flops_per_s"] / 1e12),
                    textcoords="offset points", xytext=(4, -4), fontsize=9, ha="left", va="top")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.set_title(f"Measured roofline: {short_label(r)}", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(**LEGEND_BELOW)
    rows = [(p["m"], p["intensity"], p["achieved_flops_per_s"] / 1e12, p["attainable_flops_per_s"] / 1e12,
             p["achieved_flops_per_s"] / p["attainable_flops_per_s"]) for p in pts]
    table = text_table(("M", "FLOP/byte", "achieved TFLOP/s", "roofline TFLOP/s", "fraction"), rows,
                       ("d", ".3g", ".3g", ".3g", ".2f"))
    return Plot(fig, table, {"intensity": inten, "achieved_flops_per_s": achieved, "ridge": ridge})

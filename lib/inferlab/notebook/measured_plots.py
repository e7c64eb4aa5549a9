"""The chapter on a real GPU, drawn: the measured kernels beside the ideal roofline, for the four
subsection notebooks' sections "The same on a real GPU". The numbers come from
`core.measured_latency` (ideal, measured and profiled times, module doc there); this module draws
them and writes their worked equations and tables.

    IDEAL, MEASURED = measured_latency.deployments(GPU, PREC)
    reader.draw(measured_plots.kernel_roofline_plot, MODEL, GPU, PREC)
"""
from __future__ import annotations

import numpy as np
from IPython.display import Markdown

from inferlab.core import kernels
from inferlab.core.costs import linear_cost
from inferlab.core.latency import decode_step_time_s, kv_crossover_batch, prefill_time_s, throughput_tokens_per_s
from inferlab.core.measured_latency import (MAX_PROFILED_TOKENS, PROFILE_COLUMNS, ROOFLINE_TOKENS, KernelPoint,
                                            Measured, TensorParallel, bandwidth_share,
                                            decode_bandwidth, deployments, itl, kernel_point, kernel_points,
                                            layer_kernels_s, measured_reason, profile_for, profiled_decode_step_time_s,
                                            profiled_prefill_time_s, profiled_tokens, ttft)
from inferlab.core.memory import fit_limit
from inferlab.core.roofline import attainable_flops_per_s, ridge_point
from inferlab.core.specs import BF16, Precision, check_accelerator, check_model
from inferlab.notebook.plots import Plot, _figure, legend_below, shade_context_window
from inferlab.base.text_tables import text_table
from inferlab.base.units import MS, TFLOP
from inferlab.notebook.worked_examples import equation
from inferlab.core.context import yardstick  # @yardstick: sweeps past a model's context on purpose, no warning

OP_COLORS = {"qkv": "tab:blue", "o_proj": "tab:cyan", "mlp_up": "tab:orange", "mlp_down": "tab:red"}
COLORS = {"ideal": "tab:blue", "measured": "tab:purple", "profiled": "black", "overhead": "tab:gray"}
PROFILED_STYLE = dict(marker="o", s=22, facecolors="none", edgecolors="black", linewidths=1.0, zorder=5)


# ---------------------------------------------------------------------------------------------
# Worked equations and tables
# ---------------------------------------------------------------------------------------------

@yardstick
def efficiency_worked(point: KernelPoint, accelerator, precision: Precision = BF16):
    """The efficiency of one product (`kernel_point`) as a worked equation: achieved FLOP/s (FLOPs over
    its measured time: the profiled row where there is one, the fitted curve's beside it) over what the
    roofline allows at its intensity. Without measured kernels, the reason in words."""
    acc = check_accelerator(accelerator)
    reason = measured_reason(acc, precision)
    if reason or point.measured_s is None:
        return Markdown(reason or f"No measured time for {point.label} at T = {point.tokens:,}.")
    tex = (r"\text{efficiency} = \frac{2T d_\text{in} d_\text{out} \,/\, t_\text{kernel}}"
           r"{\min(\text{peak},\ I \cdot \text{BW})} "
           r"= \frac{2 \cdot <T> \cdot <k> \cdot <n> \,/\, <t>\ \text{ms}}"
           r"{\min(<peak>\ \text{TFLOP/s},\ <I>\ \text{FLOP/byte} \cdot <bw>\ \text{TB/s})} = <eff>\%")
    values = dict(T=point.tokens, k=point.k, n=point.n, t=point.measured_s / MS,
                  peak=acc.peak(precision.compute_dtype) / TFLOP, I=point.intensity, bw=acc.hbm_bytes_per_s / 1e12,
                  eff=100 * point.efficiency)
    if point.profiled_s is not None:
        tex += r"\quad (\text{profiled; the fitted curve: } <tf>\ \text{ms},\ <ef>\%)"
        values.update(tf=point.fitted_s / MS, ef=100 * point.fitted_efficiency)
    return equation(tex, **values)


@yardstick
def bandwidth_worked(nbytes: float, step: "Measured", accelerator):
    """The bandwidth a decode step gets as a worked equation: `nbytes` (`step_bytes`) over the step's
    measured time (`itl`: the profiled rows where there are, the fitted curve's beside them), against
    the datasheet bandwidth. Without measured kernels, the reason in words."""
    acc = check_accelerator(accelerator)
    t = step.profiled_s if step.profiled_s is not None else step.measured_s
    if t is None:
        return Markdown(step.reason)
    bw = acc.hbm_bytes_per_s
    # Symbols rather than words on the left, and the fitted curve's figure in prose: the display
    # equation must fit a laptop's column without scrolling.
    tex = (r"\text{BW}_\text{achieved} = \frac{<gb>\ \text{GB}}{<ms>\ \text{ms}} = <gbs>\ \text{GB/s} "
           r"= <pct>\%\ \text{of}\ <bw>\ \text{TB/s}")
    values = dict(gb=nbytes / 1e9, ms=t / MS, gbs=nbytes / t / 1e9, pct=100 * bandwidth_share(nbytes, t, acc),
                  bw=bw / 1e12)
    shown = equation(tex, **values)
    if step.profiled_s is None:
        return shown
    fitted_pct = 100 * bandwidth_share(nbytes, step.measured_s, acc)
    return Markdown(f"{shown.data}\n\nThat step time sums the profiled kernel times; the curve fitted through "
                    f"them gives {fitted_pct:.1f} % of the datasheet bandwidth.")


@yardstick
def bandwidth_table(model, accelerator, precision: Precision = BF16, tokens: int = 1) -> str:
    """Each product of a layer at `tokens` rows (a decode step of that batch): the bytes it moves, its
    profiled and fitted time, and the share of the datasheet bandwidth each gives; then one layer's
    kernels other than attention (the products, norms, rotary, activation, residual adds) against the
    products' bytes."""
    m, acc = check_model(model), check_accelerator(accelerator)
    reason = measured_reason(acc, precision)
    if reason:
        return reason
    pts = [kernel_point(m, acc, precision, op, tokens) for op in PROFILE_COLUMNS]

    def share(nbytes, t):
        return None if t is None else 100 * bandwidth_share(nbytes, t, acc)

    rows = [(p.label, p.bytes / 1e6, None if p.profiled_s is None else p.profiled_s * 1e6, p.fitted_s * 1e6,
             share(p.bytes, p.profiled_s), share(p.bytes, p.fitted_s)) for p in pts]
    profiled, fitted = layer_kernels_s(m, acc, tokens)
    nbytes = sum(p.bytes for p in pts)
    rows.append(("one layer, no attention", nbytes / 1e6, None if profiled is None else profiled * 1e6,
                 fitted * 1e6, share(nbytes, profiled), share(nbytes, fitted)))
    return (f"T = {tokens:,} rows on the {acc.name}; profiled: {profile_for(m) or 'no profile with these shapes'}\n"
            + text_table(("kernel", "MB moved", "profiled us", "fitted us", "profiled % of BW", "fitted % of BW"),
                         rows, ("s", ",.1f", ",.1f", ",.1f", ".0f", ".0f")))


@yardstick
def tensor_parallel_table(tp: TensorParallel) -> str:
    """`measured_latency.tensor_parallel`'s numbers as a text table: times in ms, the speed-up over K = 1
    and the all-reduces' share of the measured ITL."""
    rows = []
    for i, k in enumerate(tp.tps):
        meas = (None,) * 4 if tp.itl_measured_s is None else (
            tp.ttft_measured_s[i] / MS, tp.itl_measured_s[i] / MS,
            tp.itl_measured_s[0] / tp.itl_measured_s[i], 100 * tp.allreduce_share[i])
        rows.append((k, tp.ttft_ideal_s[i] / MS, tp.itl_ideal_s[i] / MS,
                     tp.itl_ideal_s[0] / tp.itl_ideal_s[i], *meas))
    # Short headers (times in ms) so the table fits a page's column without shrinking its text.
    return text_table(("K", "TTFT ideal", "ITL ideal", "speed-up", "TTFT meas.", "ITL meas.", "speed-up",
                       "all-reduce %"), rows,
                      ("d", ".2f", ".3f", ".2f", ".2f", ".3f", ".2f", ".0f"))


# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------

def _no_measured_title(acc) -> str:
    return f"no measured kernels for the {acc.name}: the ideal roofline only"


@yardstick
def kernel_roofline_plot(model, accelerator, precision: Precision = BF16, *, tokens=ROOFLINE_TOKENS) -> Plot:
    """The roofline (log-log) with a layer's four linear products at their intensity, at each token
    count T of `tokens`: achieved FLOP/s (FLOPs / time) of the profiled rows (filled; where a profile has
    the model's shapes), and of the fitted curve (a line per product over T = 1-4,096; open markers
    where there is no profile). Without measured kernels, the products on the roof."""
    m, acc = check_model(model), check_accelerator(accelerator)
    dtype = precision.compute_dtype
    ridge = ridge_point(acc, dtype)
    reason = measured_reason(acc, precision)
    profile = None if reason else profile_for(m)
    pts = kernel_points(m, acc, precision, tokens)
    fig, ax = _figure((7.0, 5.4))
    xs = [p.intensity for p in pts]
    x = np.geomspace(min(xs + [ridge]) / 3, max(xs + [ridge]) * 3, 300)
    ax.plot(x, attainable_flops_per_s(x, acc, dtype) / TFLOP, color="0.2", lw=2, label=f"{acc.name} roofline ({dtype})")
    ax.axvline(ridge, color="0.5", ls=":", lw=1, label=f"ridge point {ridge:.0f} FLOP/byte")
    sweep = np.unique(np.geomspace(1, MAX_PROFILED_TOKENS, 80).round().astype(np.int64))
    for op in PROFILE_COLUMNS:
        mine = [p for p in pts if p.op == op]
        color = OP_COLORS[op]
        if reason:
            ax.scatter([p.intensity for p in mine], [p.attainable_flops_per_s / TFLOP for p in mine], marker="s",
                       s=26, facecolors="none", edgecolors=color, label=mine[0].label, zorder=4)
            continue
        k, n = mine[0].k, mine[0].n
        c = linear_cost(sweep, k, n, precision)
        fitted = np.asarray(kernels.linear_time_s(acc, sweep, k, n))
        ax.plot(np.asarray(c.flops / c.bytes), np.asarray(c.flops) / fitted / TFLOP, color=color, lw=1.2,
                label=mine[0].label)
        shown = [p for p in mine if p.profiled_s is not None]
        if shown:
            ax.scatter([p.intensity for p in shown], [p.flops / p.profiled_s / TFLOP for p in shown],
                       marker="o", s=30, color=color, edgecolors="black", linewidths=0.6, zorder=5)
        else:
            ax.scatter([p.intensity for p in mine], [p.flops / p.fitted_s / TFLOP for p in mine],
                       marker="o", s=30, facecolors="none", edgecolors=color, zorder=5)
    if not reason:
        ax.plot([], [], color="0.4", lw=1.2, label="fitted curve, T = 1 to 4,096 tokens")
        if profile:
            ax.scatter([], [], marker="o", color="0.6", edgecolors="black", linewidths=0.6,
                       label=f"profiled rows ({profile}, TP 1)")
    peak = acc.peak(dtype) / TFLOP
    eff = [p.efficiency for p in pts if p.efficiency is not None]
    ax.set(xscale="log", yscale="log", xlabel="arithmetic intensity (FLOP/byte)",
           ylabel="achieved TFLOP/s" if not reason else "attainable TFLOP/s",
           xlim=(x[0], x[-1]), ylim=(None, peak * 3),
           title=(f"{m.name}'s matrix products on the {acc.name}\n"
                  + (f"measured kernels reach {min(eff):.0%} to {max(eff):.0%} of the roof" if eff
                     else _no_measured_title(acc))))
    legend_below(fig)
    ax.grid(True, which="major", alpha=0.3)
    rows = [(p.label, p.tokens, p.intensity, p.attainable_flops_per_s / TFLOP,
             None if p.profiled_s is None else p.flops / p.profiled_s / TFLOP,
             None if p.fitted_s is None else p.flops / p.fitted_s / TFLOP,
             None if p.efficiency is None else 100 * p.efficiency) for p in pts]
    head = (f"no measured kernels for the {acc.name}" if reason else
            f"profiled rows: {profile} on the {acc.name}, TP 1" if profile else
            f"no profiled model has {m.name}'s shapes: the fitted curve only")
    table = head + "\n" + text_table(("product", "T", "FLOP/byte", "roof TFLOP/s", "profiled TFLOP/s",
                                      "fitted TFLOP/s", "% of roof"), rows,
                                     ("s", "d", ",.1f", ",.1f", ",.1f", ",.1f", ".0f"))
    return Plot(fig, table, {"points": pts, "ridge": ridge, "profile": profile})


@yardstick
def ttft_measured_plot(model, accelerator, precision: Precision = BF16, *, batch: int = 1, prompt_lens=None,
                       table_lens=(128, 512, 1024, 2048, 4096)) -> Plot:
    """TTFT against prompt length S (log-log): the ideal roofline and the measured kernels (dashed where
    B x S passes the profiles' 4,096 tokens: the curve extrapolates), with the profiled rows summed at
    the profiled lengths where a profile has the model's shapes."""
    m, acc = check_model(model), check_accelerator(accelerator)
    ideal, meas = deployments(acc, precision)
    lens = (np.asarray(prompt_lens, dtype=np.int64) if prompt_lens is not None else
            np.unique(np.concatenate([np.geomspace(16, 16384, 100).round(), table_lens]).astype(np.int64)))
    fig, ax = _figure()
    t_ideal = np.asarray(prefill_time_s(m, ideal, lens, batch))
    ax.plot(lens, t_ideal / MS, color=COLORS["ideal"], label="ideal roofline")
    data = {"prompt_lens": lens, "ideal_s": t_ideal}
    inside = batch * lens <= MAX_PROFILED_TOKENS
    if meas is not None:
        t_meas = np.asarray(prefill_time_s(m, meas, lens, batch))
        ax.plot(lens, np.where(inside, t_meas, np.nan) / MS, color=COLORS["measured"], label="measured kernels")
        if not inside.all():   # dashed from the last profiled length on: the curve extrapolates
            edge = max(int(np.sum(inside)) - 1, 0)
            ax.plot(lens[edge:], t_meas[edge:] / MS, color=COLORS["measured"], ls="--",
                    label="measured, beyond the profiled 4,096 tokens")
        marks = [s for s in (16, 32, 64, 128, 256, 512, 1024, 2048, 4096) if batch * s <= MAX_PROFILED_TOKENS]
        prof = [(s, profiled_prefill_time_s(m, meas, s, batch)) for s in marks]
        prof = [(s, t) for s, t in prof if t is not None]
        if prof:
            ax.scatter([s for s, _ in prof], [t / MS for _, t in prof], **PROFILED_STYLE,
                       label=f"profiled rows summed ({profile_for(m)})")
        data.update(measured_s=t_meas, profiled=prof)
    shade_context_window(ax, m, lens[-1])
    ratio = (np.asarray(data["measured_s"])[inside] / t_ideal[inside]) if meas is not None and inside.any() else None
    ax.set(xscale="log", yscale="log", xlabel="prompt length S (tokens)", ylabel="TTFT (ms)", xlim=(lens[0], lens[-1]),
           title=f"{m.name} on the {acc.name}, B = {batch}\n"
                 + (f"measured TTFT {ratio.min():.1f} to {ratio.max():.1f}× the ideal up to 4,096 tokens"
                    if ratio is not None else _no_measured_title(acc)))
    legend_below(fig)
    ax.grid(True, which="major", alpha=0.3)
    rows = []
    for s in table_lens:
        r = ttft(m, acc, precision, int(s), batch)
        rows.append((int(s), r.ideal_s / MS, None if r.measured_s is None else r.measured_s / MS,
                     None if r.profiled_s is None else r.profiled_s / MS, r.ratio))
    table = text_table(("S", "ideal ms", "measured ms", "profiled ms", "measured / ideal"), rows,
                       ("d", ",.1f", ",.1f", ",.1f", ".2f"))
    return Plot(fig, table, data)


def _decode_batches(limit: int, batches):
    if batches is not None:
        return np.asarray(batches, dtype=np.int64)
    return np.arange(1, max(2 * limit, 64) + 1, dtype=np.int64)


@yardstick
def decode_measured_plot(model, accelerator, context_len: int, precision: Precision = BF16, *, batches=None,
                         table_batches=(1, 8, 16, 32, 64)) -> Plot:
    """Two stacked panels against the decode batch B (linear axes): the step time, ideal and measured
    (with the profiled rows summed at the profiled batches), and the share of the datasheet bandwidth
    the step gets (bytes moved / step time / BW); the largest batch that fits is marked."""
    m, acc = check_model(model), check_accelerator(accelerator)
    ideal, meas = deployments(acc, precision)
    limit = fit_limit(m, acc, context_len, precision)
    b = _decode_batches(limit, batches)
    bw = acc.hbm_bytes_per_s
    fig, (a1, a2) = _figure(ncols=2)
    t_ideal = np.asarray(decode_step_time_s(m, ideal, context_len, b))
    a1.plot(b, t_ideal / MS, color=COLORS["ideal"], label="ideal roofline")
    a2.plot(b, 100 * np.asarray(decode_bandwidth(m, ideal, context_len, b)) / bw, color=COLORS["ideal"])
    data = {"batches": b, "ideal_s": t_ideal, "max_batch": limit}
    if meas is not None:
        t_meas = np.asarray(decode_step_time_s(m, meas, context_len, b))
        a1.plot(b, t_meas / MS, color=COLORS["measured"], label="measured kernels")
        a2.plot(b, 100 * np.asarray(decode_bandwidth(m, meas, context_len, b)) / bw, color=COLORS["measured"])
        marks = [int(x) for x in profiled_tokens(acc, profile_for(m)) if x <= b[-1]]
        prof = [(x, profiled_decode_step_time_s(m, meas, context_len, x)) for x in marks[::2] or marks]
        if prof:
            a1.scatter([x for x, _ in prof], [t / MS for _, t in prof], **PROFILED_STYLE,
                       label=f"profiled rows summed ({profile_for(m)})")
        data.update(measured_s=t_meas, profiled=prof)
    for ax in (a1, a2):
        if limit and limit <= b[-1]:
            ax.axvline(limit, color="tab:red", ls="--", lw=1, label=f"memory limit B = {limit}")
        ax.set(xlabel="batch size B (sequences)", xlim=(0, b[-1]))
        ax.grid(True, which="major", alpha=0.3)
    a1.set(ylabel="decode step time (ms)", ylim=(0, None),
           title=f"{m.name} on the {acc.name}, context {context_len:,}: step time"
                 + ("" if meas is not None else f"\n{_no_measured_title(acc)}"))
    a2.set(ylabel="% of the datasheet bandwidth", ylim=(0, 110),
           title="bytes moved / step time, against the datasheet")
    legend_below(fig)
    tb = sorted({int(x) for x in table_batches} | ({limit} if limit else set()))
    rows = []
    for x in tb:
        r = itl(m, acc, precision, context_len, x)
        rows.append((x, r.ideal_s / MS, None if r.measured_s is None else r.measured_s / MS,
                     None if r.profiled_s is None else r.profiled_s / MS,
                     100 * decode_bandwidth(m, ideal, context_len, x) / bw,
                     None if meas is None else 100 * decode_bandwidth(m, meas, context_len, x) / bw, bool(x <= limit)))
    table = text_table(("B", "ideal ms", "measured ms", "profiled ms", "ideal % of BW", "measured % of BW", "fits"),
                       rows, ("d", ".2f", ".2f", ".2f", ".0f", ".0f", "s"))
    return Plot(fig, table, data)


@yardstick
def latency_measured_plot(model, accelerator, precision: Precision = BF16, *, prompt_len: int = 1024,
                          context_len: int = 1024, batch: int = 1, step_overhead=None) -> Plot:
    """TTFT (top) and ITL (bottom) as horizontal bars: the ideal roofline, the measured kernels, and the
    measured kernels plus `step_overhead` (a kernels.StepOverhead; the bar is left out when None)."""
    m, acc = check_model(model), check_accelerator(accelerator)
    results = (ttft(m, acc, precision, prompt_len, batch, step_overhead),
               itl(m, acc, precision, context_len, batch, step_overhead))
    fig, axes = _figure(ncols=2)
    names = ["ideal roofline", "measured kernels", "measured + step overhead"]
    colors = [COLORS["ideal"], COLORS["measured"], COLORS["overhead"]]
    rows = []
    for ax, r, sub in zip(axes, results, (f"TTFT, S = {prompt_len:,}", f"ITL, context {context_len:,}")):
        values = [r.ideal_s, r.measured_s, r.overhead_s]
        keep = [i for i, v in enumerate(values) if v is not None][::-1]   # top to bottom: ideal first
        ax.barh([names[i] for i in keep], [values[i] / MS for i in keep], color=[colors[i] for i in keep])
        ax.set(xlabel=f"{r.what} (ms)", title=sub)
        ax.grid(True, axis="x", alpha=0.3)
        rows.append((r.what, r.ideal_s / MS, None if r.measured_s is None else r.measured_s / MS,
                     None if r.overhead_s is None else r.overhead_s / MS, r.ratio))
    fig.suptitle(f"{m.name} on the {acc.name}, B = {batch}\n"
                 + (f"measured: TTFT {results[0].ratio:.2f}×, ITL {results[1].ratio:.2f}× the ideal"
                    if results[0].measured_s is not None else _no_measured_title(acc)))
    table = text_table(("", "ideal ms", "measured ms", "measured + overhead ms", "measured / ideal"), rows,
                       ("s", ".2f", ".2f", ".2f", ".2f"))
    return Plot(fig, table, {"ttft": results[0], "itl": results[1]})


@yardstick
def throughput_measured_plot(model, accelerator, context_len: int, precision: Precision = BF16, *,
                             batches=None, table_batches=(1, 8, 16, 32, 64)) -> Plot:
    """Decode throughput against batch B (linear axes), ideal and measured (with the profiled rows summed
    at the profiled batches), B* and the largest batch that fits marked."""
    m, acc = check_model(model), check_accelerator(accelerator)
    ideal, meas = deployments(acc, precision)
    limit = fit_limit(m, acc, context_len, precision)
    bstar = kv_crossover_batch(m, context_len, precision)
    b = _decode_batches(limit, batches)
    fits = b <= limit
    fig, ax = _figure()
    curves = {"ideal roofline": (ideal, COLORS["ideal"])}
    if meas is not None:
        curves["measured kernels"] = (meas, COLORS["measured"])
    data = {"batches": b, "max_batch": limit, "b_star": bstar}
    for label, (dep, color) in curves.items():
        t = np.asarray(throughput_tokens_per_s(m, dep, context_len, b))
        ax.plot(b, np.where(fits, t, np.nan), color=color, label=label)
        ax.plot(b, np.where(fits, np.nan, t), color=color, ls=":")
        data[label] = t
    if meas is not None:
        marks = [int(x) for x in profiled_tokens(acc, profile_for(m)) if x <= b[-1]]
        prof = [(x, x / profiled_decode_step_time_s(m, meas, context_len, x)) for x in marks[::2] or marks]
        if prof:
            ax.scatter([x for x, _ in prof], [t for _, t in prof], **PROFILED_STYLE,
                       label=f"profiled rows summed ({profile_for(m)})")
    ax.plot([], [], color="0.4", ls=":", label="does not fit in memory")
    ax.axvline(bstar, color="tab:green", ls="--", lw=1, label=f"B* = {bstar:.1f}")
    if limit and limit <= b[-1]:
        ax.axvline(limit, color="tab:red", ls="--", lw=1, label=f"memory limit B = {limit}")
    share = (data["measured kernels"] / data["ideal roofline"])[fits] if meas is not None and fits.any() else None
    ax.set(xlabel="batch size B (sequences)", ylabel="throughput (tokens/s)", xlim=(0, b[-1]), ylim=(0, None),
           title=f"{m.name} on the {acc.name}, context {context_len:,}\n"
                 + (f"measured throughput {share.min():.0%} to {share.max():.0%} of the ideal where it fits"
                    if share is not None else _no_measured_title(acc)))
    legend_below(fig)
    ax.grid(True, which="major", alpha=0.3)
    tb = sorted({int(x) for x in table_batches} | ({limit} if limit else set()))
    rows = []
    for x in tb:
        r = itl(m, acc, precision, context_len, x)
        rows.append((x, x / r.ideal_s, None if r.measured_s is None else x / r.measured_s,
                     None if r.profiled_s is None else x / r.profiled_s,
                     None if r.measured_s is None else r.ideal_s / r.measured_s, bool(x <= limit)))
    table = text_table(("B", "ideal tokens/s", "measured tokens/s", "profiled tokens/s", "measured / ideal", "fits"),
                       rows, ("d", ",.0f", ",.0f", ",.0f", ".2f", "s"))
    return Plot(fig, table, data)

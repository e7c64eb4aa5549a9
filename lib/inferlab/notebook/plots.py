"""The chapter's figures: one function per figure, each computing its points through the library.

Every function takes the inputs (model, accelerator, precision, ranges) and returns a `Plot`:
the matplotlib Figure, the plotted points as a plain-text table (rounded, deterministic: what a
notebook prints so nbval checks the figure's data) and the points themselves in `data`.
`fig, table = plots.ttft_plot(...)` unpacks the first two.

The book's own numbers are passed in as `book_points` [(x, y, label), ...] in display units and
drawn as black crosses on our curves. Figures are `matplotlib.figure.Figure` objects (no pyplot
state), so they work headless and in a notebook alike.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import matplotlib.ticker
import numpy as np
from matplotlib.figure import Figure

from inferlab.core.costs import decode_costs, group_costs, prefill_costs
from inferlab.core.deployment import Deployment
from inferlab.core.latency import (ThroughputShape, cost_per_1k_tokens_usd, decode_step_time_s, kv_crossover_batch,
                                   prefill_time_s, throughput_shape, throughput_tokens_per_s, ttft_curve,
                                   weight_read_floor_s)
from inferlab.core.memory import fit_limit, kv_cache_bytes, kv_variants, memory_budget, weight_bytes
from inferlab.core.moe import experts_filled_batch
from inferlab.core.roofline import attainable_flops_per_s, mlp_ridge_batch, ridge_point
from inferlab.core.specs import BF16, Precision, check_accelerator, check_model
from inferlab.base.text_tables import text_table
from inferlab.base.units import GB, MS, TFLOP, bytes_per_element
from inferlab.core.context import yardstick  # @yardstick: sweeps past a model's context on purpose, no warning

GROUP_COLORS = {"QKV/O projections": "tab:blue", "MLP": "tab:orange", "attention QK\u1d40, PV": "tab:green"}
GROUP_MARKER_SIZE = {"QKV/O projections": 18, "MLP": 70, "attention QK\u1d40, PV": 36}
GROUP_ZORDER = {"QKV/O projections": 6, "MLP": 4, "attention QK\u1d40, PV": 5}
BOOK_STYLE = dict(marker="X", s=70, color="black", zorder=5, label="book")
FIGSIZE = (7.0, 4.2)
DISPLAY_DPI = 96  # the width a notebook shows a figure at, in CSS pixels per inch
RETINA_DPI = 2 * DISPLAY_DPI
WIDE = (10.5, 4.0)
# Legends sit outside the axes, right of the frame: never over data. (Kept for callers; the
# chapter's figures use legend_below, which does not take width from a narrow column.)


@yardstick
def legend_below(fig, ncols: int | None = None):
    """One legend for the whole figure, under its axes (the constrained layout makes room): never
    over the data, and not beside the axes, where it would take ~40 % of a narrow column's width.
    A label drawn in several panels (the same series) is listed once. Columns: 3 for short labels,
    2 for medium, 1 for long ones (longer than 50 characters). Returns None when nothing is labelled."""
    seen = {}
    for ax in fig.axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            if label and not label.startswith("_"):
                seen.setdefault(label, handle)
    if not seen:
        return None
    longest = max(len(label) for label in seen)
    n = ncols or min(len(seen), 3 if longest <= 24 else 2 if longest <= 50 else 1)
    return fig.legend(list(seen.values()), list(seen), loc="outside lower center", ncols=n, fontsize=9)


@dataclass
class Plot:
    """A figure, its plotted points as text, and the points as arrays (`data`). `alt`, when given,
    replaces the alt text read from the figure's artists (a diagram says what it shows in words);
    `narrow`, when given, is the figure's own phone layout (else phone_figures.narrow_copy lays one out)."""

    fig: Figure
    table: str
    data: dict = field(default_factory=dict)
    alt: str | None = None
    narrow: Figure | None = None

    def __iter__(self):
        return iter((self.fig, self.table))

    def png(self, dpi: int = RETINA_DPI) -> bytes:
        """The figure as PNG bytes at `dpi` (twice the display resolution: sharp on a retina screen)."""
        import io
        buf = io.BytesIO()
        self.fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None})
        return buf.getvalue()

    def _repr_mimebundle_(self, include=None, exclude=None):
        """In a notebook: one retina PNG (shown at DISPLAY_DPI, its "alt" metadata what the figure
        draws: alttext.describe; its phone variant and smallest text: phone_figures.image_metadata) and, as text/plain, the plotted points (what nbval compares; a
        reader sees the image)."""
        import base64
        from inferlab.notebook.alttext import describe
        w, _ = self.fig.get_size_inches()
        data = {"image/png": base64.b64encode(self.png()).decode("ascii"), "text/plain": self.table}
        from inferlab.notebook.phone_figures import image_metadata
        return data, {"image/png": {"width": int(round(w * DISPLAY_DPI)), "alt": self.alt or describe(self.fig),
                                    **image_metadata(self.fig, narrow_fig=self.narrow)}}


def _plain_tick(v, _pos):
    return f"{v:g}"


def _usd_tick(v, _pos):      # module-level, not a lambda: a figure stays picklable (phone_figures.narrow_copy)
    return f"${v:g}"


@yardstick
def does_not_fit_plot(message: str, table: str = "") -> Plot:
    """A figure that says, in words, why there is nothing to draw (e.g. the weights exceed the
    device): shown instead of an empty plot, so that Run All never stops."""
    fig, ax = _figure((7.0, 1.6))
    ax.set_axis_off()
    ax.text(0.5, 0.5, "does not fit: " + message, ha="center", va="center", wrap=True,
            fontsize=11, color="tab:red", transform=ax.transAxes)
    return Plot(fig, table or f"does not fit: {message}", {"does_not_fit": message})


# A panel of a multi-panel figure: the panels are stacked, so that the figure is as wide as a
# single one (it reads at a text column's width; side by side they would shrink to unreadable).
PANEL = (FIGSIZE[0], 3.3)
LEGEND_ROOM_IN = 0.9   # height added under stacked panels for the legend


def _figure(size=FIGSIZE, ncols=1):
    """A figure of `ncols` panels, stacked top to bottom when more than one (`size` is then
    ignored: each panel is PANEL high, at the single figure's width)."""
    if ncols > 1:
        fig = Figure(figsize=(PANEL[0], PANEL[1] * ncols + LEGEND_ROOM_IN), layout="constrained")
        return fig, fig.subplots(ncols, 1)
    fig = Figure(figsize=size, layout="constrained")
    return fig, fig.subplots(1, 1)


def _book(ax, book_points, annotate=False):
    """Mark the book's values [(x, y, label), ...] on `ax`."""
    pts = [(float(x), float(y), str(label)) for x, y, label in (book_points or ())]
    if not pts:
        return
    ax.scatter([p[0] for p in pts], [p[1] for p in pts], **BOOK_STYLE)
    if annotate:
        for x, y, label in pts:
            ax.annotate(label, (x, y), textcoords="offset points", xytext=(7, 4), fontsize=9)


def _book_rows(book_points):
    return [(float(x), float(y), str(label)) for x, y, label in (book_points or ())]


def _with_book(table, book_points, x_name, y_name, x_fmt=".6g", y_fmt=".4g"):
    rows = _book_rows(book_points)
    if not rows:
        return table
    return table + "\n\nbook's points\n" + text_table((x_name, y_name, "label"), rows, (x_fmt, y_fmt, "s"))


@yardstick
def shade_context_window(ax, model, x_max):
    """Grey band right of the model's maximum context (ModelConfig.max_context_tokens): lengths the
    model cannot serve, drawn as arithmetic only."""
    limit = check_model(model).max_context_tokens
    if limit and limit < x_max:
        ax.axvspan(limit, x_max, color="0.9", zorder=0, lw=0,
                   label=f"beyond the {limit:,}-token context window")


# 15.1.1 / 15.1.2: the roofline ---------------------------------------------------------------------

@yardstick
def roofline_plot(model, accelerator, precision: Precision = BF16, *,
                  prompt_lens=(128, 512, 2048, 8192), prefill_batch=1,
                  decode_batches=(1, 16, 64, 256), context_len=1024,
                  intensity_range=(0.1, 1e5)) -> Plot:
    """Williams-style roofline (log-log, ridge marked) with each operator group of a prefill
    (at several prompt lengths S) and of a decode step (at several batches B) placed at its
    arithmetic intensity, on the roof it attains."""
    model, acc = check_model(model), check_accelerator(accelerator)
    dtype = precision.compute_dtype
    ridge = ridge_point(acc, dtype)
    fig, ax = _figure((7.0, 5.8))   # room for the legend under the axes
    x = np.geomspace(*intensity_range, 400)
    ax.plot(x, attainable_flops_per_s(x, acc, dtype) / TFLOP, color="0.2", lw=2,
            label=f"{acc.name} roofline ({dtype})")
    ax.axvline(ridge, color="0.5", ls=":", lw=1, label=f"ridge point {ridge:.0f} FLOP/byte")
    rows = []
    points = []
    for phase, sweep, marker in (("prefill", prompt_lens, "o"), ("decode", decode_batches, "s")):
        for value in sweep:
            if phase == "prefill":
                b, s = int(prefill_batch), int(value)
                costs = prefill_costs(model, b, s, precision)
                tag = f"S={s}"
            else:
                b, s = int(value), int(context_len)
                costs = decode_costs(model, b, s, precision)
                tag = f"B={b}"
            for group, (flops, nbytes) in group_costs(costs).items():
                intensity = float(flops / nbytes)
                perf = float(attainable_flops_per_s(intensity, acc, dtype)) / TFLOP
                regime = "compute" if intensity >= ridge else "memory"
                rows.append((phase, b, s, group, intensity, perf, regime))
                points.append((phase, b, s, group, intensity, perf))
                # QKV/O and the MLP share an intensity (both are weight matmuls over the same
                # tokens): the projections are drawn smaller, on top, so neither hides the other.
                ax.scatter([intensity], [perf], marker=marker, s=GROUP_MARKER_SIZE[group],
                           color=GROUP_COLORS[group],
                           facecolors=GROUP_COLORS[group] if phase == "prefill" else "none",
                           zorder=GROUP_ZORDER[group])
                if phase == "prefill" and "attention" in group:  # attention's intensity moves with S
                    # above the point; pushed sideways when it would sit on the ridge line
                    near = abs(np.log10(intensity / ridge)) < 0.15
                    dx = (9 if intensity >= ridge else -9) if near else 0
                    ax.annotate(tag, (intensity, perf), textcoords="offset points",
                                xytext=(dx, 8), fontsize=9, rotation=90, ha="center", va="bottom",
                                color=GROUP_COLORS[group])
    for group, color in GROUP_COLORS.items():
        ax.scatter([], [], marker="o", color=color, label=group)
    ax.scatter([], [], marker="o", color="0.4", label=f"prefill, B={prefill_batch}, S = {', '.join(str(x) for x in prompt_lens)} (filled)")
    ax.scatter([], [], marker="s", facecolors="none", color="0.4", label=f"decode, context {context_len}, B = {', '.join(str(x) for x in decode_batches)} (open)")
    ax.scatter([], [], marker="s", facecolors="none", color=GROUP_COLORS["attention QK\u1d40, PV"],
               label="decode attention: every B at one point")
    xs = [p[4] for p in points]
    ax.set(xscale="log", yscale="log", xlabel="arithmetic intensity (FLOP/byte)",
           ylabel="attainable performance (TFLOP/s)", ylim=(None, acc.peak(dtype) / TFLOP * 20),
           xlim=(min(xs + [ridge]) / 3, max(xs + [ridge]) * 3),
           title=f"{model.name} on {acc.name}\noperators on the roofline")
    legend_below(fig)
    ax.grid(True, which="major", alpha=0.3)
    table = text_table(("phase", "B", "S", "operator group", "FLOP/byte", "TFLOP/s", "bound"), rows,
                       ("s", "d", "d", "s", ",.1f", ",.1f", "s"))
    table = f"ridge point {ridge:.1f} FLOP/byte; peak {acc.peak(dtype) / TFLOP:.1f} TFLOP/s\n" + table
    return Plot(fig, table, {"ridge": ridge, "points": points})


@yardstick
def decode_intensity_plot(model, accelerator, precision: Precision = BF16, *,
                          batches=tuple(2 ** np.arange(0, 11)), context_len=1024) -> Plot:
    """Arithmetic intensity of each operator group of one decode step against batch B (log-log):
    the weight-bound groups climb with B towards the ridge, attention stays pinned near 1."""
    model, acc = check_model(model), check_accelerator(accelerator)
    dtype = precision.compute_dtype
    ridge = ridge_point(acc, dtype)
    b = np.asarray(batches, dtype=np.int64)
    costs = decode_costs(model, b, context_len, precision)
    groups = group_costs(costs)
    fig, ax = _figure()
    series = {}
    for group, (flops, nbytes) in groups.items():
        series[group] = np.asarray(flops / nbytes, dtype=float) * np.ones(b.shape)
        ax.plot(b, series[group], marker="o", ms=3, color=GROUP_COLORS[group], label=group)
    whole = costs.layer
    series["whole step (one layer)"] = np.asarray(whole.intensity, dtype=float) * np.ones(b.shape)
    ax.plot(b, series["whole step (one layer)"], color="0.3", ls="--", label="whole layer")
    ax.axhline(ridge, color="0.5", ls=":")
    ax.annotate(f"ridge {ridge:.0f} FLOP/byte: compute-bound above", (b[0], ridge), xytext=(2, 4),
                textcoords="offset points", fontsize=9)
    mlp_cross = mlp_ridge_batch(model, acc, precision, context_len)
    if mlp_cross:
        ax.axvline(mlp_cross, color=GROUP_COLORS["MLP"], ls=":", lw=1)
        ax.annotate(f"MLP reaches the ridge at B={mlp_cross}", (mlp_cross, 1.5), xytext=(-6, 0),
                    textcoords="offset points", fontsize=9, ha="right", color=GROUP_COLORS["MLP"])
    ax.set(xscale="log", yscale="log", xlabel="batch size B (sequences per decode step)",
           ylabel="arithmetic intensity (FLOP/byte)",
           title=f"Decode at context {context_len}: batching lifts MLP, not attention" + (
               "" if not model.is_moe else "\n(the MLP slowly: each expert sees B·k/E of the tokens)"))
    legend_below(fig)
    ax.grid(True, which="major", alpha=0.3)
    names = list(series)
    rows = [(int(bi), *(series[n][i] for n in names)) for i, bi in enumerate(b)]
    table = text_table(["B"] + names, rows, ["d"] + [",.2f"] * len(names))
    table = (f"ridge point {ridge:.1f} FLOP/byte; MLP reaches it at B={mlp_cross}\n" + table)
    return Plot(fig, table, {"batches": b, "intensity": series, "ridge": ridge, "mlp_ridge_batch": mlp_cross})


# 15.1.1 / 15.2.1: TTFT ----------------------------------------------------------------------------

@yardstick
def ttft_plot(model, accelerator, precision: Precision = BF16, *, batch=1,
              prompt_lens=None, table_lens=(512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072),
              book_points=(), mfu: float = 1.0, title=None) -> Plot:
    """TTFT (one prefill pass, no queueing) against prompt length S, log-log: the linear model
    (projections and MLP only, ~2*P*S/peak) and the full count with causal attention's S^2 term.
    book_points: [(S, TTFT in ms, label)]."""
    model, acc = check_model(model), check_accelerator(accelerator)
    table_lens = sorted({int(s) for s in table_lens} | {int(p[0]) for p in (book_points or ())})
    lens = np.unique(np.concatenate([np.geomspace(16, 131072, 140).round().astype(np.int64),
                                     np.asarray(table_lens, dtype=np.int64)]))
    if prompt_lens is not None:
        lens = np.asarray(prompt_lens, dtype=np.int64)
    dep = Deployment(acc, precision, mfu=mfu)
    curve = ttft_curve(model, dep, lens, batch)
    linear, full = curve.without_attention_s, curve.with_attention_s
    fig, ax = _figure()
    # A mixture of experts' prompt computes with its active parameters and reads the experts its S
    # tokens touch (all of them soon): the floor grows with S until every expert is read.
    p_name = "P_active" if model.is_moe else "P"
    ax.plot(lens, linear / MS, ls="--", color="tab:blue", label=f"TTFT without attention (≈ 2·{p_name}·S / peak)")
    ax.plot(lens, full / MS, color="tab:red", label="TTFT with causal attention (S² term)")
    if model.is_moe:
        floor_ms = weight_read_floor_s(model, acc, precision, tokens=lens * batch) / MS
        ax.plot(lens, floor_ms, color="0.5", ls=":", lw=1,
                label=f"weight-read floor (experts the prompt touches), up to {floor_ms.max():.1f} ms")
    else:
        floor_ms = weight_read_floor_s(model, acc, precision) / MS
        ax.axhline(floor_ms, color="0.5", ls=":", lw=1, label=f"weight-read floor M/BW = {floor_ms:.1f} ms")
    shade_context_window(ax, model, lens[-1])
    _book(ax, book_points)
    ax.set(xscale="log", yscale="log", xlabel="prompt length S (tokens)", ylabel="TTFT at 100% of peak (ms)",
           xlim=(lens[0], lens[-1]),
           title=title or f"{model.name} on {acc.name}, B={batch}\nTTFT ∝ S until attention takes over")
    legend_below(fig)
    ax.grid(True, which="major", alpha=0.3)
    at_table = ttft_curve(model, dep, np.asarray(table_lens), batch)
    t_lin, t_full = at_table.without_attention_s, at_table.with_attention_s
    rows = [(s, a / MS, f / MS, 100 * (f - a) / f) for s, a, f in zip(table_lens, t_lin, t_full)]
    table = text_table(("S", "linear ms", "with attention ms", "attention share %"), rows,
                       ("d", ",.1f", ",.1f", ".1f"))
    return Plot(fig, _with_book(table, book_points, "S", "book ms"),
                {"prompt_lens": lens, "linear_s": linear, "full_s": full})


# 15.1.2: memory ----------------------------------------------------------------------------------

@yardstick
def memory_budget_plot(model, accelerator, context_len, precision: Precision = BF16, *,
                       batches=None, table_batches=(1, 8, 16, 32, 64), book_points=()) -> Plot:
    """Stacked device memory against batch B at one context length: weights, KV cache and what is
    left free; the largest batch that fits is marked. book_points: [(B, GB, label)]."""
    model, acc = check_model(model), check_accelerator(accelerator)
    limit = fit_limit(model, acc, context_len, precision)
    if batches is None:
        batches = np.arange(1, max(2 * limit, 16) + 1)
    b = np.asarray(batches, dtype=float)
    budget = memory_budget(model, acc, b.astype(np.int64), context_len, precision)
    w, kv, cap = budget.weight_bytes / GB, budget.kv_bytes / GB, budget.capacity_bytes / GB
    free = np.maximum(budget.free_bytes / GB, 0.0)
    fig, ax = _figure()
    ax.stackplot(b, np.full_like(b, w), kv, free, labels=("weights", "KV cache", "free"),
                 colors=("tab:blue", "tab:orange", "0.85"))
    ax.axhline(cap, color="black", lw=1)
    ax.annotate(f"{acc.name}: {cap:.0f} GB", (b[0], cap), xytext=(2, 4), textcoords="offset points", fontsize=9)
    if limit:
        ax.axvline(limit, color="tab:red", ls="--")
        ax.annotate(f"max batch {limit}", (limit, cap * 0.5), xytext=(4, 0), textcoords="offset points",
                    color="tab:red", fontsize=9)
    ax.axvspan(limit + 0.5, b[-1], color="tab:red", alpha=0.08, label="does not fit")
    _book(ax, book_points)
    ax.set(xlabel="batch size B (sequences)", ylabel="memory (GB = 1e9 bytes)",
           xlim=(b[0], b[-1]), ylim=(0, max(cap, w + kv[-1]) * 1.05),
           title=f"{model.name}, context {context_len}: " + (
               "the KV cache eats the free memory" if limit else f"the weights alone exceed {cap:.0f} GB"))
    legend_below(fig)
    tb = sorted({int(x) for x in table_batches} | ({limit} if limit else set()))
    at_table = memory_budget(model, acc, np.asarray(tb), context_len, precision)
    rows = [(bi, w, k / GB, f / GB, bool(ok)) for bi, k, f, ok in
            zip(tb, at_table.kv_bytes, at_table.free_bytes, at_table.fits)]
    table = text_table(("B", "weights GB", "KV GB", "free GB", "fits"), rows,
                       ("d", ".2f", ".2f", ".2f", "s"))
    table = f"capacity {cap:.0f} GB; max batch at context {context_len}: {limit}\n" + table
    return Plot(fig, _with_book(table, book_points, "B", "book GB"),
                {"batches": b, "weights_gb": w, "kv_gb": kv, "free_gb": free, "max_batch": limit})


@yardstick
def kv_variants_plot(model, accelerator, context_len, precision: Precision = BF16, *,
                     gqa_kv_heads: int = 8, batches=None, book_points=()) -> Plot:
    """Total memory (weights + KV) against batch for MHA vs GQA vs int8 KV; each variant's largest
    batch that fits is marked where its line crosses the device capacity.
    book_points: [(B, GB, label)]."""
    acc = check_accelerator(accelerator)
    variants = kv_variants(model, precision, gqa_kv_heads)
    limits = {k: fit_limit(m, acc, context_len, p) for k, (m, p) in variants.items()}
    if batches is None:
        batches = np.unique(np.geomspace(1, max(1024, 2 * max(limits.values())), 200).round())
    b = np.asarray(batches, dtype=np.int64)
    cap = acc.memory_bytes / GB
    fig, ax = _figure()
    rows = []
    for (label, (m, p)), color in zip(variants.items(), ("tab:red", "tab:orange", "tab:blue", "tab:cyan")):
        total = memory_budget(m, acc, b, context_len, p).used_bytes / GB
        lim = limits[label]
        ax.plot(b, total, color=color, label=f"{label}: max B = {lim}")
        if lim:
            ax.scatter([lim], [memory_budget(m, acc, lim, context_len, p).used_bytes / GB],
                       color=color, zorder=4)
        rows.append((label, kv_cache_bytes(m, context_len, 1, p) / GB, weight_bytes(m, p) / GB,
                     kv_crossover_batch(m, context_len, p), lim))
    ax.axhline(cap, color="black", lw=1)
    ax.lines[-1].set_label(f"{acc.name} capacity, {cap:.0f} GB")
    _book(ax, book_points, annotate=False)
    ax.set(xlabel="batch size B (sequences)", ylabel="weights + KV cache (GB)",
           xlim=(0, max(max(limits.values()), 1) * 1.1), ylim=(0, cap * 1.3),
           title=f"Context {context_len}\nfewer KV heads or bytes move the memory wall")
    legend_below(fig)
    ax.grid(True, which="major", alpha=0.3)
    table = text_table(("variant", "KV/seq GB", "weights GB", "B*", "max batch"), rows,
                       ("s", ".3f", ".2f", ".1f", "d"))
    return Plot(fig, _with_book(table, book_points, "B", "book GB", x_fmt="d"),
                {"batches": b, "max_batch": limits})


# 15.2.1: ITL ------------------------------------------------------------------------------------

@yardstick
def itl_plot(model, accelerator, precision: Precision = BF16, *, batches=(1, 8, 32, 64),
             context_lens=None, table_contexts=(512, 1024, 4096, 16384, 32768), book_points=()) -> Plot:
    """ITL (decode step time) against context length for several batches, log x: solid where the
    batch's KV cache fits on the device, dotted where it does not. book_points: [(S, ms, label)]."""
    model, acc = check_model(model), check_accelerator(accelerator)
    if context_lens is None:
        context_lens = np.unique(np.geomspace(128, 131072, 100).round())
    s = np.asarray(context_lens, dtype=np.int64)
    fig, ax = _figure()
    rows = []
    series = {}
    for bi, color in zip(batches, ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown")):
        t = decode_step_time_s(model, acc, s, int(bi), precision) / MS
        fits = fit_limit(model, acc, s, precision) >= bi
        series[int(bi)] = (t, fits)
        ax.plot(s, np.where(fits, t, np.nan), color=color, label=f"B={bi}")
        ax.plot(s, np.where(fits, np.nan, t), color=color, ls=":")
        tc = np.asarray(table_contexts, dtype=np.int64)
        t_tab = decode_step_time_s(model, acc, tc, int(bi), precision) / MS
        fit_tab = fit_limit(model, acc, tc, precision) >= bi
        rows += [(int(bi), int(c), x, bool(f)) for c, x, f in zip(tc, t_tab, fit_tab)]
    shade_context_window(ax, model, s[-1])
    _book(ax, book_points)
    ax.plot([], [], color="0.4", ls=":", label="does not fit in memory")
    ax.set(xscale="log", yscale="log", xlabel="context length (tokens in the KV cache)",
           ylabel="ITL = decode step time (ms)",
           title=f"{model.name} on {acc.name}\nITL is set by weights until B·context grows")
    legend_below(fig)
    ax.grid(True, which="major", alpha=0.3)
    table = text_table(("B", "context", "ITL ms", "fits"), rows, ("d", "d", ".2f", "s"))
    return Plot(fig, _with_book(table, book_points, "context", "book ms"),
                {"context_lens": s, "itl_ms": series})


@yardstick
def weight_dtype_plot(model, accelerator, precision: Precision = BF16, *, prompt_len=1024,
                      context_len=1024, batch=1, dtypes=("bf16", "int8", "int4"), book_points=()) -> Plot:
    """TTFT and ITL for weight-only quantisation: `precision` with only its weight dtype changed
    (activations, KV cache and compute stay as they are). The weight dtype moves ITL
    (memory-bound), barely TTFT (compute-bound). book_points: [(bar index, ITL ms, label)]."""
    model, acc = check_model(model), check_accelerator(accelerator)
    ttft, itl = [], []
    for dt in dtypes:
        p = Precision(dt, precision.activations, precision.kv, precision.compute)
        ttft.append(prefill_time_s(model, acc, prompt_len, batch, p) / MS)
        itl.append(decode_step_time_s(model, acc, context_len, batch, p) / MS)
    fig, (a1, a2) = _figure(WIDE, 2)
    x = np.arange(len(dtypes))
    a1.bar(x, ttft, color="tab:red")
    # Titles read off the bars: a prompt whose weight read outweighs its compute (a large mixture of
    # experts reads every expert for few active FLOPs) speeds up with smaller weights too.
    ttft_gain, itl_gain = ttft[0] / ttft[-1], itl[0] / itl[-1]
    a1.set(xticks=x, xticklabels=dtypes, xlabel="weight dtype", ylabel="TTFT (ms)",
           title=f"TTFT, S={prompt_len}: " + ("compute-bound, barely moves" if ttft_gain < 1.25
                                              else f"weight reads show, {ttft_gain:.1f}× at {dtypes[-1]}"))
    a2.bar(x, itl, color="tab:blue")
    _book(a2, book_points)
    a2.set(xticks=x, xticklabels=dtypes, xlabel="weight dtype", ylabel="ITL (ms)",
           title=f"ITL, context {context_len}: " + ("follows the weight bytes" if itl_gain >= 0.5 * _bytes_ratio(dtypes)
                                                    else f"KV reads damp it, {itl_gain:.1f}× at {dtypes[-1]}"))
    fig.suptitle(f"{model.name} on {acc.name}, B={batch}: weight-only quantisation")
    rows = [(dt, a, b_, itl[0] / b_) for dt, a, b_ in zip(dtypes, ttft, itl)]
    table = text_table(("weights", "TTFT ms", "ITL ms", "ITL speed-up"), rows, ("s", ".2f", ".2f", ".2f"))
    return Plot(fig, _with_book(table, book_points, "bar", "book ms", x_fmt="d"),
                {"dtypes": list(dtypes), "ttft_ms": ttft, "itl_ms": itl})


def _bytes_ratio(dtypes) -> float:
    """Bytes per weight of the first dtype over the last: the most a weight-bound step can gain."""
    return bytes_per_element(dtypes[0]) / bytes_per_element(dtypes[-1])


# 15.2.2: batching -----------------------------------------------------------------------------------

def _batches(limit, batches, at_least: float = 256):
    """Default batch sweep: dense on a log scale up to twice the memory limit (and at least
    `at_least`, rounded up to a power of two), every power of two and the limit itself included."""
    if batches is not None:
        return np.asarray(batches, dtype=np.int64)
    top = max(2 ** int(np.ceil(np.log2(max(at_least, 1)))), 2 ** int(np.ceil(np.log2(max(limit, 1) * 2))))
    powers = 2 ** np.arange(int(np.log2(top)) + 1)
    return np.unique(np.concatenate([np.geomspace(1, top, 120).round(), powers,
                                     [limit] if limit else []])).astype(np.int64)


@yardstick
def step_time_title(model) -> str:
    """What the step-time panel shows: linear in B when every step reads all the weights (dense);
    a knee for a mixture of experts, whose weight read grows until the batch touches every expert."""
    filled = experts_filled_batch(model)
    if filled is None:
        return "step time: linear in B"
    return f"step time: a knee at B ≈ {filled:.0f} (95 % of experts read)"


@yardstick
def at_b_star_words(shape: ThroughputShape) -> str:
    """'half' or 'NN%': the share of the ceiling at B* (`latency.ThroughputShape`)."""
    return "half" if shape.half_at_b_star else f"{shape.share_at_b_star:.0%}"


@yardstick
def shape_words(shape: ThroughputShape) -> str:
    """'concave in $B$' or why not (Markdown)."""
    if shape.concave:
        return "concave in $B$"
    if shape.experts_filled_batch is None:
        return "not concave in $B$ here"
    return (f"not concave in $B$ here: up to $B$ ≈ {shape.experts_filled_batch:.0f} each new sequence brings "
            "in experts of its own, so the first sequences cost more than the later ones")


@yardstick
def throughput_title(shape: ThroughputShape) -> str:
    """The throughput panel's title, read off the curve."""
    where = "half its ceiling at B*" if shape.half_at_b_star else f"{shape.share_at_b_star:.0%} of its ceiling at B*"
    return f"throughput: {'concave' if shape.concave else 'not concave'}, {where}"


@yardstick
def throughput_plot(model, accelerator, context_len, precision: Precision = BF16, *, batches=None,
                    table_batches=(1, 8, 16, 32, 64, 128), book_step=(), book_throughput=()) -> Plot:
    """Decode step time and throughput against batch B (linear axes; log x for a mixture of experts,
    whose knee sits at a few sequences), with the KV-crossover B* and the memory limit marked;
    batches beyond the limit are dotted; for a mixture of experts, the batch that touches 95 % of
    its experts too. The panels' titles are read off the curves
    (`step_time_title`, `throughput_shape`). book_step: [(B, ms, label)],
    book_throughput: [(B, tokens/s, label)]."""
    model, acc = check_model(model), check_accelerator(accelerator)
    limit = fit_limit(model, acc, context_len, precision)
    bstar = kv_crossover_batch(model, context_len, precision)
    x_max = max(2 * limit, 4 * bstar, 8)
    b = _batches(limit, batches, at_least=x_max)
    step = decode_step_time_s(model, acc, context_len, b, precision) / MS
    tput = throughput_tokens_per_s(model, acc, context_len, b, precision)
    fits = b <= limit
    shape = throughput_shape(model, acc, context_len, precision, up_to=int(x_max))
    filled, at_bstar, ceiling = shape.experts_filled_batch, shape.tokens_per_s_at_b_star, shape.ceiling_tokens_per_s
    fig, (a1, a2) = _figure(WIDE, 2)
    for ax, y, ylabel, book in ((a1, step, "decode step time = ITL (ms)", book_step),
                                (a2, tput, "throughput (tokens/s)", book_throughput)):
        ax.plot(b, np.where(fits, y, np.nan), color="tab:blue", label="fits in memory")
        ax.plot(b, np.where(fits, np.nan, y), color="tab:blue", ls=":", label="does not fit")
        ax.axvline(bstar, color="tab:green", ls="--", lw=1, label=f"B* = {bstar:.1f}")
        if limit:
            ax.axvline(limit, color="tab:red", ls="--", lw=1, label=f"memory limit B = {limit}")
        _book(ax, book)
        # linear axes show the dense curve's shape; a mixture of experts' knee sits at a few
        # sequences, visible only on a log axis
        log_x = filled is not None
        ax.set(xlabel="batch size B (sequences" + (", log scale)" if log_x else ")"), ylabel=ylabel,
               xscale="log" if log_x else "linear", xlim=(1 if log_x else 0, x_max), ylim=(0, None))
        ax.grid(True, which="major", alpha=0.3)
    if filled is not None:
        a1.axvline(filled, color="tab:orange", ls="-.", lw=1, label=f"95 % of experts touched, B ≈ {filled:.0f}")
    a2.axhline(ceiling, color="tab:purple", ls="--", lw=1, label=f"ceiling BW/C_kv = {ceiling:,.0f}")
    a2.scatter([bstar], [at_bstar], color="tab:green", zorder=5, label=f"at B*: {at_bstar / ceiling:.0%} of the ceiling")
    a2.set_ylim(0, ceiling * 1.08)
    a1.set_title(step_time_title(model))
    a2.set_title(throughput_title(shape))
    legend_below(fig)
    fig.suptitle(f"{model.name} on {acc.name}, context {context_len}")
    tb = sorted({int(x) for x in table_batches} | ({limit} if limit else set()))
    ts = decode_step_time_s(model, acc, context_len, np.asarray(tb), precision) / MS
    tt = throughput_tokens_per_s(model, acc, context_len, np.asarray(tb), precision)
    rows = [(bi, s_, t_, bool(bi <= limit)) for bi, s_, t_ in zip(tb, ts, tt)]
    head = f"B* = {bstar:.1f}; memory limit B = {limit}"
    if filled is not None:
        head += f"; 95 % of experts touched at B ≈ {filled:.1f}"
    table = (head + "\n" + text_table(("B", "step ms", "tokens/s", "fits"), rows, ("d", ".2f", ",.0f", "s")))
    table = _with_book(table, book_step, "B", "book step ms", x_fmt="d")
    table = _with_book(table, book_throughput, "B", "book tokens/s", x_fmt="d")
    return Plot(fig, table, {"batches": b, "step_ms": step, "tokens_per_s": tput, "b_star": bstar,
                             "max_batch": limit, "tokens_per_s_at_b_star": at_bstar, "experts_filled_batch": filled})


@yardstick
def cost_plot(model, accelerator, context_len, usd_per_gpu_hour: float, precision: Precision = BF16, *,
              batches=None, table_batches=(1, 8, 32, 64), book_points=()) -> Plot:
    """Dollars per 1000 generated tokens against batch B (log-log), memory limit marked.
    book_points: [(B, $ per 1k tokens, label)]."""
    model, acc = check_model(model), check_accelerator(accelerator)
    limit = fit_limit(model, acc, context_len, precision)
    b = _batches(limit, batches)
    cost = cost_per_1k_tokens_usd(throughput_tokens_per_s(model, acc, context_len, b, precision),
                                  usd_per_gpu_hour)
    fits = b <= limit
    fig, ax = _figure()
    ax.plot(b, np.where(fits, cost, np.nan), color="tab:purple", label="fits in memory")
    ax.plot(b, np.where(fits, np.nan, cost), color="tab:purple", ls=":", label="does not fit")
    if limit:
        ax.axvline(limit, color="tab:red", ls="--", lw=1, label=f"memory limit B = {limit}")
    _book(ax, book_points)
    ax.set(xscale="log", yscale="log", xlabel="batch size B (sequences)",
           ylabel="cost (US$ per 1000 output tokens)",
           title=f"{model.name} on {acc.name} at ${usd_per_gpu_hour:g}/h\nbatching is the cost lever")
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(_plain_tick))
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(_usd_tick))
    ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    legend_below(fig)
    ax.grid(True, which="major", alpha=0.3)
    tb = sorted({int(x) for x in table_batches} | ({limit} if limit else set()))
    tt = throughput_tokens_per_s(model, acc, context_len, np.asarray(tb), precision)
    tc = cost_per_1k_tokens_usd(tt, usd_per_gpu_hour)
    rows = [(bi, t_, c_, tc[0] / c_, bool(bi <= limit)) for bi, t_, c_ in zip(tb, tt, tc)]
    table = text_table(("B", "tokens/s", "$ per 1k", "cheaper than B=%d" % tb[0], "fits"), rows,
                       ("d", ",.0f", ".5f", ".1f", "s"))
    return Plot(fig, _with_book(table, book_points, "B", "book $/1k", x_fmt="d", y_fmt=".4f"),
                {"batches": b, "usd_per_1k": cost, "max_batch": limit})


@yardstick
def latency_throughput_plot(model, accelerator, context_len, precision: Precision = BF16, *,
                            batches=None, label_batches=(1, 8, 16, 32, 128, 256),
                            book_points=()) -> Plot:
    """The latency-throughput trade-off: per-token latency (ITL) against throughput, one point per
    batch B; dotted beyond the memory limit. book_points: [(ITL ms, tokens/s, label)]."""
    model, acc = check_model(model), check_accelerator(accelerator)
    limit = fit_limit(model, acc, context_len, precision)
    b = _batches(limit, batches)
    itl = decode_step_time_s(model, acc, context_len, b, precision) / MS
    tput = throughput_tokens_per_s(model, acc, context_len, b, precision)
    fits = b <= limit
    fig, ax = _figure()
    ax.plot(np.where(fits, itl, np.nan), tput, color="tab:blue", label="fits in memory")
    ax.plot(np.where(fits, np.nan, itl), tput, color="tab:blue", ls=":", label="does not fit")
    lb = sorted({int(x) for x in label_batches} | ({limit} if limit else set()))
    li = decode_step_time_s(model, acc, context_len, np.asarray(lb), precision) / MS
    lt = throughput_tokens_per_s(model, acc, context_len, np.asarray(lb), precision)
    x_right = float(np.nanmax(itl)) * 1.05
    y_top = float(np.nanmax(tput))
    labelled = []  # (x, y) as fractions of the axes: a label too close to one already placed is skipped
    for bi, x, y in zip(lb, li, lt):
        at_limit = bi == limit
        ax.scatter([x], [y], color="tab:red" if at_limit else "tab:blue", s=30 if at_limit else 16, zorder=4)
        right = x > 0.75 * x_right  # near the right frame: label to the left of the point
        fx, fy = x / x_right, y / y_top
        if any(abs(fx - ox) < 0.15 and abs(fy - oy) < 0.1 for ox, oy in labelled) and not at_limit:
            continue
        labelled.append((fx, fy))
        ax.annotate(f"memory limit B={bi}" if at_limit else f"B={bi}", (x, y),
                    xytext=(-6 if right else 6, 6 if y < 0.15 * float(np.nanmax(tput)) else -12),
                    textcoords="offset points", fontsize=9,
                    ha="right" if right else "left", color="tab:red" if at_limit else "black")
    _book(ax, book_points)
    ax.set(xlabel="per-token latency ITL (ms)", ylabel="throughput (tokens/s)", xlim=(0, x_right), ylim=(0, None),
           title=f"{model.name} on {acc.name}, context {context_len}\nthroughput costs latency")
    legend_below(fig)
    ax.grid(True, which="major", alpha=0.3)
    rows = [(bi, x, y, bool(bi <= limit)) for bi, x, y in zip(lb, li, lt)]
    table = text_table(("B", "ITL ms", "tokens/s", "fits"), rows, ("d", ".2f", ",.0f", "s"))
    return Plot(fig, _with_book(table, book_points, "book ITL ms", "book tokens/s", x_fmt=".3g"),
                {"batches": b, "itl_ms": itl, "tokens_per_s": tput, "max_batch": limit})


@yardstick
def kv_variants_throughput_plot(model, accelerator, context_len, precision: Precision = BF16, *,
                                gqa_kv_heads: int = 8, batches=None, book_points=()) -> Plot:
    """Throughput against batch for MHA vs GQA vs int8 KV, each curve stopping at the largest batch
    that fits: fewer KV bytes per sequence raise both B* and the reachable batch.
    book_points: [(B, tokens/s, label)]."""
    acc = check_accelerator(accelerator)
    variants = kv_variants(model, precision, gqa_kv_heads)
    limits = {k: fit_limit(m, acc, context_len, p) for k, (m, p) in variants.items()}
    b = _batches(max(limits.values()), batches)
    fig, ax = _figure()
    rows = []
    for (label, (m, p)), color in zip(variants.items(), ("tab:red", "tab:orange", "tab:blue", "tab:cyan")):
        lim = limits[label]
        bb = b[b <= lim] if lim else b[:0]
        if bb.size:
            t = throughput_tokens_per_s(m, acc, context_len, bb, p)
            ax.plot(bb, t, color=color, label=f"{label}: max B = {lim}")
            t_lim = throughput_tokens_per_s(m, acc, context_len, lim, p)
            ax.scatter([lim], [t_lim], color=color, zorder=4)
        t1 = throughput_tokens_per_s(m, acc, context_len, 1, p)
        t_max = throughput_tokens_per_s(m, acc, context_len, lim, p) if lim else float("nan")
        rows.append((label, kv_crossover_batch(m, context_len, p), lim, t1, t_max))
    _book(ax, book_points)
    ax.set(xscale="log", yscale="log", xlabel="batch size B (sequences)", ylabel="throughput (tokens/s)",
           title=f"Context {context_len}\nsmaller KV per sequence, larger batch")
    legend_below(fig)
    ax.grid(True, which="major", alpha=0.3)
    table = text_table(("variant", "B*", "max batch", "tok/s at B=1", "tok/s at max batch"), rows,
                       ("s", ".1f", "d", ",.0f", ",.0f"))
    return Plot(fig, _with_book(table, book_points, "B", "book tokens/s", x_fmt="d"),
                {"max_batch": limits})

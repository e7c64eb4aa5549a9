"""Every figure of the chapter, laid out by matplotlib's renderer: no text (label, legend,
annotation, tick label) over data, over another text or across the axes frame; no legend (of an
axes or of the figure) over any panel's data; no text under 9 pt. Figures: the chapter's
(inferlab.notebook.figures), the What-if scenarios, the panels, the measured figures and breakdowns, and
the serving lab's (labplots, the live-vs-simulated quantiles).

Bounding boxes come from the Agg renderer after a full draw (`fig.draw_without_rendering` would
skip the constrained layout's final pass), in display pixels. Data are the vertices of every
line and the offsets of every scatter collection, in the same pixels. Each check is also run on
a hand-made figure with the defect it names, so the check itself is tested.
"""
from __future__ import annotations

import itertools

import matplotlib.ticker
import numpy as np
import pytest
from matplotlib.collections import PathCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.text import Text

from inferlab.notebook import panel, plots
from inferlab.notebook.figures import FIGURES
from inferlab.core.specs import BF16, get_accelerator, get_model

H100_SXM = get_accelerator("h100-sxm")
LLAMA_2_13B = get_model("llama-2-13b")

MIN_PT = 9.0
PAD = 1.0  # pixels of tolerance: boxes that only touch do not overlap


def _render(fig):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return canvas.get_renderer()


def _visible_texts(fig):
    """The texts the renderer draws: tick labels only of the ticks inside the view limits (the
    others exist as artists but are not drawn)."""
    ticks_all, ticks_drawn = set(), []
    for ax in fig.axes:
        for axis in ax._axis_map.values():
            if not ax.axison:  # an axes switched off draws no ticks
                for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                    ticks_all.update({id(tick.label1), id(tick.label2)})
                continue
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                ticks_all.update({id(tick.label1), id(tick.label2)})
            for tick in axis._update_ticks():
                ticks_drawn += [t for t in (tick.label1, tick.label2) if t.get_visible()]
    out = [t for t in fig.findobj(Text) if id(t) not in ticks_all] + ticks_drawn
    return [t for t in out if t.get_visible() and t.get_text().strip() and t.figure is not None]


def _shrink(bb, pad=PAD):
    from matplotlib.transforms import Bbox
    return Bbox.from_extents(bb.x0 + pad, bb.y0 + pad, bb.x1 - pad, bb.y1 - pad)


def _data_points(ax):
    pts = []
    for line in ax.get_lines():
        if not line.get_visible():
            continue
        xy = line.get_xydata()
        if len(xy) == 0:
            continue
        # Reference lines spanning the axes (axhline/axvline) are in axes coordinates on one side.
        try:
            disp = line.get_transform().transform(xy)
        except ValueError:
            continue
        pts.append(disp[np.all(np.isfinite(disp), axis=1)])
        # Sample along straight segments so a legend laid over a line's middle is caught too.
        if len(disp) >= 2 and line.get_linestyle() not in ("None", "", " "):
            a, b = disp[:-1], disp[1:]
            t = np.linspace(0, 1, 12)[:, None, None]
            seg = (a[None] + (b - a)[None] * t).reshape(-1, 2)
            pts.append(seg[np.all(np.isfinite(seg), axis=1)])
    for coll in ax.collections:
        if isinstance(coll, PathCollection) and coll.get_visible():
            off = coll.get_offsets()
            if len(off):
                disp = coll.get_offset_transform().transform(off)
                pts.append(disp[np.all(np.isfinite(disp), axis=1)])
    pts = np.concatenate(pts) if pts else np.zeros((0, 2))
    # Only what is inside the axes is drawn (the rest is clipped).
    bb = ax.get_window_extent()
    inside = (pts[:, 0] >= bb.x0) & (pts[:, 0] <= bb.x1) & (pts[:, 1] >= bb.y0) & (pts[:, 1] <= bb.y1)
    return pts[inside]


def _covers(bb, pts) -> int:
    bb = _shrink(bb)
    return int(np.sum((pts[:, 0] > bb.x0) & (pts[:, 0] < bb.x1) & (pts[:, 1] > bb.y0) & (pts[:, 1] < bb.y1)))


def layout_problems(fig) -> list[str]:
    """Every layout defect of `fig`, in words (empty when it is clean)."""
    r = _render(fig)
    problems = []
    fig_bb = fig.bbox
    texts = _visible_texts(fig)
    legends = [lg for ax in fig.axes for lg in ([ax.get_legend()] if ax.get_legend() else [])] + list(fig.legends)
    legend_texts = {id(t) for lg in legends for t in lg.get_texts()} | {id(lg.get_title()) for lg in legends}
    for t in texts:
        if t.get_fontsize() < MIN_PT - 1e-6:
            problems.append(f"text {t.get_text()!r} is {t.get_fontsize():.1f} pt (< {MIN_PT:g})")
        bb = t.get_window_extent(r)
        if bb.x0 < fig_bb.x0 - PAD or bb.x1 > fig_bb.x1 + PAD or bb.y0 < fig_bb.y0 - PAD or bb.y1 > fig_bb.y1 + PAD:
            problems.append(f"text {t.get_text()!r} runs off the figure")
    # Boxes that must not overlap each other: every text outside legends, and each legend whole.
    boxes = [(f"text {t.get_text()!r}", t.get_window_extent(r)) for t in texts if id(t) not in legend_texts]
    boxes += [(f"legend {i}", lg.get_window_extent(r)) for i, lg in enumerate(legends)]
    for (na, a), (nb, b) in itertools.combinations(boxes, 2):
        if _shrink(a).overlaps(_shrink(b)):
            problems.append(f"{na} overlaps {nb}")
    for ax in fig.axes:
        if not ax.get_visible() or not ax.axison:
            continue
        pts = _data_points(ax)
        ax_bb = ax.get_window_extent(r)
        lg = ax.get_legend()
        if lg is not None and lg.get_visible():
            n = _covers(lg.get_window_extent(r), pts)
            if n:
                problems.append(f"the legend of axes {ax.get_title()!r} covers {n} data points")
        for i, flg in enumerate(fig.legends):   # a figure legend may sit over any panel's data
            n = _covers(flg.get_window_extent(r), pts) if flg.get_visible() else 0
            if n:
                problems.append(f"figure legend {i} covers {n} data points of axes {ax.get_title()!r}")
        for t in ax.texts:
            if not t.get_visible() or not t.get_text().strip():
                continue
            bb = t.get_window_extent(r)
            n = _covers(bb, pts)
            if n:
                problems.append(f"annotation {t.get_text()!r} covers {n} data points")
            inside = ax_bb.contains(bb.x0, bb.y0) and ax_bb.contains(bb.x1, bb.y1)
            outside = not _shrink(bb).overlaps(ax_bb)
            if not (inside or outside):
                problems.append(f"annotation {t.get_text()!r} crosses the axes frame")
    return problems


# ---- the checks catch what they name --------------------------------------------------------

def _toy(**kw):
    fig = Figure(figsize=(5, 3), layout="constrained")
    ax = fig.add_subplot()
    x = np.linspace(0, 1, 50)
    ax.plot(x, x, label="a line")
    ax.set_xlabel("x", fontsize=10)
    ax.set_ylabel("y", fontsize=10)
    ax.tick_params(labelsize=9)
    return fig, ax


def test_check_catches_a_legend_over_data():
    fig, ax = _toy()
    ax.legend(loc="center", fontsize=10)
    assert any("legend" in p and "covers" in p for p in layout_problems(fig))


def test_check_catches_an_annotation_over_data_and_small_text():
    fig, ax = _toy()
    ax.text(0.5, 0.5, "on the line", fontsize=10)
    ax.text(0.05, 0.9, "tiny", fontsize=6)
    problems = layout_problems(fig)
    assert any("'on the line' covers" in p for p in problems)
    assert any("'tiny' is 6.0 pt" in p for p in problems)


def test_check_catches_overlapping_labels_and_the_frame():
    fig, ax = _toy()
    ax.text(0.02, 0.95, "first label", fontsize=10, transform=ax.transAxes, va="top")
    ax.text(0.04, 0.94, "second label", fontsize=10, transform=ax.transAxes, va="top")
    ax.text(1.0, 0.1, "across the frame", fontsize=10, transform=ax.transAxes, ha="center")
    problems = layout_problems(fig)
    assert any("overlaps" in p and "first label" in p for p in problems)
    assert any("'across the frame' crosses the axes frame" in p for p in problems)


def test_check_catches_a_figure_legend_over_data_and_colliding_tick_labels():
    fig, ax = _toy()
    fig.legend(*ax.get_legend_handles_labels(), loc="center", fontsize=10)
    assert any(p.startswith("figure legend 0 covers") for p in layout_problems(fig))
    fig2 = Figure(figsize=(3, 2), layout="constrained")
    ax2 = fig2.add_subplot()
    ax2.plot([150, 700], [0, 1])
    ax2.set_xscale("log")
    ax2.tick_params(labelsize=10)
    ax2.xaxis.set_minor_formatter(matplotlib.ticker.LogFormatterSciNotation(labelOnlyBase=False))
    assert any("overlaps text" in p for p in layout_problems(fig2))


def test_a_clean_figure_passes():
    fig, ax = _toy()
    ax.legend(loc="upper left", fontsize=10)
    assert layout_problems(fig) == []


# ---- every figure of the chapter ------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(FIGURES))
def test_chapter_figure_layout(name):
    assert layout_problems(FIGURES[name]().fig) == []


@pytest.mark.parametrize("model, gpu", [("llama-3-8b", "h200"), ("llama-2-70b", "h100-sxm")])
@pytest.mark.parametrize("name", sorted(FIGURES))
def test_chapter_figure_layout_in_other_scenarios(name, model, gpu):
    """The What-if scenarios of tests/test_reader_notebooks.py, without the book's markers."""
    import inferlab.notebook.figures as f
    from inferlab.core import kernels
    from inferlab.notebook import measured_plots, reader
    model, gpu = get_model(model), get_accelerator(gpu)  # the What-if cell's objects
    build = {
        "15.1.1-fig1-roofline": lambda: plots.roofline_plot(model, gpu, BF16, prompt_lens=(128, 512, 2048, 8192),
                                                            decode_batches=(1, 16, 64, 256), context_len=2048),
        "15.1.1-fig2-ttft-vs-prompt": lambda: plots.ttft_plot(model, gpu, BF16),
        "15.1.2-fig1-decode-intensity": lambda: plots.decode_intensity_plot(model, gpu, BF16, context_len=1000),
        "15.1.2-fig2-memory-budget": lambda: plots.memory_budget_plot(model, gpu, 1000, BF16),
        "15.1.2-fig3-kv-variants": lambda: plots.kv_variants_plot(model, gpu, 1000, BF16),
        "15.2.1-fig1-ttft-vs-prompt": lambda: plots.ttft_plot(model, gpu, BF16),
        "15.2.1-fig2-itl-vs-context": lambda: plots.itl_plot(model, gpu, BF16),
        "15.2.1-fig3-weight-dtype": lambda: plots.weight_dtype_plot(model, gpu, BF16, prompt_len=1024,
                                                                    context_len=1024),
        "15.2.2-fig1-throughput-vs-batch": lambda: plots.throughput_plot(model, gpu, 1024, BF16),
        "15.2.2-fig2-latency-throughput": lambda: plots.latency_throughput_plot(model, gpu, 1024, BF16),
        "15.2.2-fig3-cost-vs-batch": lambda: plots.cost_plot(model, gpu, 1024, f.BOOK_USD_PER_GPU_HOUR, BF16),
        "15.2.2-fig4-kv-variants-throughput": lambda: plots.kv_variants_throughput_plot(model, gpu, 1024, BF16),
        # the measured figures: the h200 has no profiles (the ideal alone); llama-2-70b was profiled itself
        "15.1.1-fig3-kernels-roofline": lambda: measured_plots.kernel_roofline_plot(model, gpu, BF16),
        "15.1.1-fig4-kernels-ttft": lambda: measured_plots.ttft_measured_plot(model, gpu, BF16),
        "15.1.2-fig4-kernels-step-time": lambda: measured_plots.decode_measured_plot(model, gpu, 1000, BF16),
        "15.2.1-fig4-kernels-latency": lambda: measured_plots.latency_measured_plot(
            model, gpu, BF16, prompt_len=1024, context_len=1024, step_overhead=kernels.StepOverhead.from_profile()),
        "15.2.2-fig5-kernels-throughput": lambda: measured_plots.throughput_measured_plot(model, gpu, 1024, BF16),
    }[name]
    # as the notebooks: the figures that need a sequence beside the weights are drawn only if it fits
    needs_fit = not name.startswith(("15.1.1", "15.2.1-fig1", "15.2.1-fig3", "15.2.1-fig4", "15.1.2-fig1"))
    message = reader.fit_message(model, gpu, 1000, BF16) if needs_fit else ""
    fig = reader.draw_if_fits(message, build).fig
    assert layout_problems(fig) == []


@pytest.mark.parametrize("make", [panel.prefill_panel, panel.latency_panel])
def test_panel_layout(make):
    p = make(LLAMA_2_13B, H100_SXM, BF16, prompt=2048)
    assert layout_problems(p.fig) == []


@pytest.mark.parametrize("make", [panel.decode_panel, panel.batching_panel])
def test_panel_layout_decode(make):
    p = make(LLAMA_2_13B, H100_SXM, BF16, context=1000, batch=16)
    assert layout_problems(p.fig) == []


def test_does_not_fit_figure_layout():
    assert layout_problems(plots.does_not_fit_plot("llama-2-70b weights need 138.0 GB, h100-sxm has 80 GB").fig) == []


def _recorded():
    from inferlab import measure
    return measure.recorded_runs()


@pytest.mark.parametrize("kind", ["ttft_plot", "itl_plot", "step_time_plot", "throughput_plot", "roofline_plot"])
def test_measured_figure_layout(kind):
    """The measured figures of the notebooks, drawn from the recorded runs (the live run adds one
    more series of the same kind)."""
    from inferlab import measure
    runs = _recorded()
    if not runs:
        pytest.skip("no recorded runs in data/measurements/")
    plot = getattr(measure.plots, kind)(runs[0] if kind == "roofline_plot" else runs)
    assert layout_problems(plot.fig) == []


def test_roofline_markers_that_share_a_point_stay_visible():
    """QKV/O and the MLP sit at nearly the same intensity: the projections are drawn smaller and on
    top, so neither hides the other (they were the same size, the MLP's on top)."""
    from matplotlib.collections import PathCollection
    fig = FIGURES["15.1.1-fig1-roofline"]().fig
    by_color = {}
    for c in fig.axes[0].collections:
        if isinstance(c, PathCollection) and len(c.get_offsets()):
            by_color.setdefault(tuple(np.round(c.get_edgecolor()[0][:3], 3)), []).append((c.get_sizes()[0], c.get_zorder()))
    import matplotlib.colors as mcolors
    qkv = by_color[tuple(np.round(mcolors.to_rgb(plots.GROUP_COLORS["QKV/O projections"]), 3))]
    mlp = by_color[tuple(np.round(mcolors.to_rgb(plots.GROUP_COLORS["MLP"]), 3))]
    assert max(sz for sz, _ in qkv) < min(sz for sz, _ in mlp) / 2
    assert min(z for _, z in qkv) > max(z for _, z in mlp)


def test_multi_panel_figures_keep_a_single_figure_width():
    """Panels are stacked: a multi-panel figure is no wider than a single one (it reads at column width)."""
    for name in ("15.2.2-fig1-throughput-vs-batch", "15.2.1-fig3-weight-dtype"):
        fig = FIGURES[name]().fig
        assert len([a for a in fig.axes if a.get_visible()]) >= 2
        assert fig.get_size_inches()[0] <= plots.FIGSIZE[0] + 1e-9, name


# ---- the serving lab's figures (small runs of the lab's experiments; the notebook's are larger)
def _lab_figures():
    from inferlab.serving import ChunkedPrefill, ContinuousBatching, StaticBatching
    from inferlab.study import validate
    from inferlab.notebook import lab, labplots
    small = lab.Scenario(n_requests=120)
    policies = lab.policy_sweep(small, (2.0, 4.0, 8.0), {
        "static, B = 16 (0.5 s timeout)": StaticBatching(16, timeout_s=0.5), "continuous": ContinuousBatching()})
    tails = lab.policy_sweep(small, (4.0, 8.0, 12.0), {"continuous": ContinuousBatching(),
                                                        "chunked, C = 512": ChunkedPrefill(512)})
    cap = lab.Capacity((lab.Deployment("one GPU, batching"), lab.Deployment("2 replicas, batching", replicas=2),
                        lab.Deployment("TP = 2, batching", tp=2)), (23.0, 50.0, 30.0), 0.9, 4.0)
    figs = {
        "policy": lambda: labplots.policy_plot(policies).fig,
        "tail": lambda: labplots.tail_plot(tails).fig,
        "long prompt": lambda: labplots.long_prompt_plot(lab.long_prompt(small, 2000, 4.0, chunks=(256, 512))).fig,
        "capacity": lambda: labplots.capacity_plot(cap).fig,
        "prefix": lambda: labplots.prefix_plot(lab.prefix_sweep(small, 4000, (0.5, 1.0, 2.0))).fig,
    }
    recorded = validate.recorded()
    if recorded:
        figs["live vs simulated"] = lambda: validate.quantile_plot(recorded[-1])
    return figs


@pytest.mark.parametrize("name", ["policy", "tail", "long prompt", "capacity", "prefix", "live vs simulated"])
def test_serving_lab_figure_layout(name):
    figs = _lab_figures()
    if name not in figs:
        pytest.skip("no recorded serving validation in data/")
    assert layout_problems(figs[name]()) == []


def test_breakdown_and_regime_figures_layout():
    from inferlab.measure import breakdown
    runs = [r for r in _recorded() if r.data.get("breakdown")]
    if not runs:
        pytest.skip("no recorded run with an operator breakdown")
    fig = breakdown.breakdown_plot(runs[0])
    assert len([a for a in fig.axes if a.get_visible()]) >= 2
    assert layout_problems(fig) == []
    assert fig.get_size_inches()[0] <= 7.5, "at most two panels a row"
    regime_runs = breakdown.runs_with_regimes(_recorded())
    if regime_runs:
        assert layout_problems(breakdown.regime_plot(regime_runs)) == []

"""A figure's phone variant (inferlab.notebook.phone_figures): the copy is laid out for a phone's column and keeps
the figure's fonts; the original is untouched; every chapter figure's variant passes the layout
checks of tests/test_figure_layout.py (no text over data or over other text, no text under 9 pt)."""
from __future__ import annotations

import base64

import numpy as np
import pytest
from matplotlib.figure import Figure

from inferlab.notebook import phone_figures, plots
from inferlab.notebook.figures import FIGURES
from test_figure_layout import _lab_figures, _recorded, layout_problems


def side_by_side() -> Figure:
    fig = Figure(figsize=(10.5, 4.0), layout="constrained")
    left, right = fig.subplots(1, 2)
    for ax, name in ((left, "step time"), (right, "throughput")):
        ax.plot([1, 2, 3], [1, 4, 9], label=f"{name}, the quantity plotted in this panel")
        ax.set_title(f"{name}: a title long enough to need two lines on a phone's narrow figure")
        ax.tick_params(labelsize=9)
    plots.legend_below(fig)
    return fig


def test_min_text_px_is_the_smallest_font_at_96_px_per_inch():
    fig = Figure(figsize=(4, 3))
    ax = fig.subplots()
    ax.set_title("title", fontsize=12)
    ax.tick_params(labelsize=10)
    ax.annotate("note", (0.5, 0.5), fontsize=7.5)
    ax.text(0.1, 0.1, "   ", fontsize=5)        # blank: draws nothing, so it does not count
    assert phone_figures.min_text_px(fig) == pytest.approx(7.5 * 96 / 72)   # 10 px
    assert phone_figures.min_text_px(Figure()) == 0.0


def test_narrow_copy_stacks_side_by_side_panels_wraps_titles_and_keeps_fonts():
    fig = side_by_side()
    before = [ax.get_subplotspec().get_geometry() for ax in fig.axes]
    copy = phone_figures.narrow_copy(fig)
    # the original is untouched
    assert tuple(fig.get_size_inches()) == (10.5, 4.0)
    assert [ax.get_subplotspec().get_geometry() for ax in fig.axes] == before
    assert "\n" not in fig.axes[0].get_title()
    # the copy: 3.6 in wide, as high as a row was times two rows (8 in), one panel per row, plus
    # the legend's added lines: each label (45 characters, over the 35 that fit beside a handle at
    # 9 pt) wraps to two lines (+2), and one column instead of two adds a row (+1): 3 x 9 pt x 1.3
    assert tuple(copy.get_size_inches()) == pytest.approx((3.6, 8.0 + 3 * 9 * 1.3 / 72))
    copy.canvas.draw()
    boxes = [ax.get_position() for ax in copy.axes]
    assert boxes[0].y0 > boxes[1].y1, "the first panel sits above the second"
    assert abs(boxes[0].x0 - boxes[1].x0) < 0.02
    # titles wrapped, not shrunk; the figure legend in one column, same entries
    assert all("\n" in ax.get_title() for ax in copy.axes)
    assert phone_figures.min_text_px(copy) == phone_figures.min_text_px(fig) == pytest.approx(12.0)
    [leg] = copy.legends
    assert leg._ncols == 1
    assert [t.get_text().replace("\n", " ") for t in leg.texts] == [t.get_text() for t in fig.legends[0].texts]
    assert all(t.get_text().count("\n") == 1 for t in leg.texts)
    assert fig.legends[0]._ncols == 2


def test_image_metadata_carries_a_png_as_wide_as_the_variant():
    fig = side_by_side()
    meta = phone_figures.image_metadata(fig)
    png = base64.b64decode(meta["narrow"]["png"])
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    # 3.6 in at 192 dpi = 691 device px (691.2 rounded down by Agg), shown at 2 device px per CSS px
    assert int.from_bytes(png[16:20], "big") == 691 and meta["narrow"]["width"] == 345
    assert meta["text_px"] == 12.0


def test_a_plot_output_carries_its_phone_variant():
    p = FIGURES["15.2.2-fig1-throughput-vs-batch"]()
    _, meta = p._repr_mimebundle_()
    m = meta["image/png"]
    assert m["width"] == 672 and m["narrow"]["width"] == 345 and m["text_px"] >= 12.0
    assert m["narrow"]["width"] <= 358     # a 390 px phone's text column (the book's theme): never shrunk


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_chapter_figure_phone_variant_layout(name):
    assert layout_problems(phone_figures.narrow_copy(FIGURES[name]().fig)) == []


@pytest.mark.parametrize("name", ["policy", "tail", "long prompt", "capacity", "prefix", "live vs simulated"])
def test_serving_lab_figure_phone_variant_layout(name):
    figs = _lab_figures()
    if name not in figs:
        pytest.skip("no recorded serving validation in data/")
    assert layout_problems(phone_figures.narrow_copy(figs[name]())) == []


def test_breakdown_phone_variant_stacks_its_panels():
    from inferlab.measure import breakdown
    runs = [r for r in _recorded() if r.data.get("breakdown")]
    if not runs:
        pytest.skip("no recorded run with an operator breakdown")
    fig = breakdown.breakdown_plot(runs[0])
    copy = phone_figures.narrow_copy(fig)
    copy.canvas.draw()
    panels = [ax for ax in copy.axes if ax.get_visible() and ax.get_subplotspec() is not None]
    assert len(panels) >= 2
    assert len({round(ax.get_position().x0, 2) for ax in panels}) == 1, "one panel per row"
    assert np.all(np.diff([ax.get_position().y0 for ax in panels]) < 0)
    assert layout_problems(copy) == []


@pytest.mark.parametrize("kind", ["ttft_plot", "itl_plot", "step_time_plot", "throughput_plot", "roofline_plot"])
def test_measured_figure_phone_variant_layout_and_width(kind):
    """The measured figures (shown with a tight box): the variant passes the layout checks and,
    tight, is no wider than a phone's 358 px column (its run labels wrap, its legend goes under)."""
    from inferlab import measure
    runs = _recorded()
    if not runs:
        pytest.skip("no recorded runs in data/measurements/")
    fig = getattr(measure.plots, kind)(runs[0] if kind == "roofline_plot" else runs).fig
    assert layout_problems(phone_figures.narrow_copy(fig)) == []
    assert phone_figures.image_metadata(fig, tight=True)["narrow"]["width"] <= 358


def test_colliding_point_labels_are_thinned_in_the_variant_only():
    fig = Figure(figsize=(7, 4), layout="constrained")
    ax = fig.subplots()
    ax.plot([1, 2, 3], [1, 1, 1])
    ax.set_ylim(0, 2)
    for x in (1.0, 1.05, 2.5):
        ax.annotate(f"point at x = {x}", (x, 1.2))
    copy = phone_figures.narrow_copy(fig)
    assert [t.get_visible() for t in copy.axes[0].texts] == [True, False, True]
    assert all(t.get_visible() for t in fig.axes[0].texts)


def test_a_figure_that_cannot_be_copied_is_shown_without_a_variant():
    import matplotlib.ticker
    fig = Figure(figsize=(5, 3))
    ax = fig.subplots()
    ax.plot([1, 2], [1, 2])
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    assert phone_figures.image_metadata(fig) == {"text_px": round(10 * 96 / 72, 2)}

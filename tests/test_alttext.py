"""Alt text generated from what a figure draws (inferlab.notebook.alttext): hand-made figures whose kind,
axes and series are known, and the metadata a chapter figure carries into the book."""
from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from inferlab.notebook import alttext, plots


def _fig(nrows=1):
    fig = Figure(figsize=(5, 3 * nrows), layout="constrained")
    return fig, fig.subplots(nrows, 1)


def test_a_line_plot_names_its_axes_lines_reference_lines_and_series():
    fig, ax = _fig()
    x = np.linspace(1, 10, 5)
    ax.plot(x, x, label="measured")
    ax.plot(x, 2 * x, "--", label="predicted")
    ax.axhline(3, label="_nolegend_")
    ax.set(xlabel="prompt length (tokens)", ylabel="TTFT (ms)", yscale="log")
    ax.legend()
    text = alttext.describe(fig)
    assert text.startswith("Line plot of TTFT (ms) on a log scale against prompt length (tokens) "
                           "(2 lines, 1 reference line).")
    assert text.endswith("Series: measured; predicted.")


def test_bars_points_and_areas_are_named_as_such():
    fig, ax = _fig()
    ax.bar(["a", "b", "c", "d"], [1, 2, 3, 4])
    ax.set(xlabel="dtype", ylabel="ITL (ms)")
    assert alttext.describe(fig) == "Bar chart of ITL (ms) against dtype (4 bars)."
    fig, ax = _fig()
    ax.scatter([1, 2], [3, 4])
    ax.plot([1, 2], [1, 1], "o")
    ax.set(xlabel="x", ylabel="y")
    assert alttext.describe(fig) == "Scatter plot of y against x (2 sets of points)."
    fig, ax = _fig()
    ax.fill_between([0, 1, 2], [0, 1, 2], [1, 2, 3])
    ax.set(xlabel="B", ylabel="memory (GB)")
    assert alttext.describe(fig) == "Area chart of memory (GB) against B (1 filled area)."


def test_stacked_bars_against_categories():
    fig, ax = _fig()
    cats = ["measured", "calibrated", "roofline"]
    ax.bar(cats, [1, 2, 3], label="projections")
    ax.bar(cats, [1, 1, 1], bottom=[1, 2, 3], label="MLP")
    ax.set_ylabel("ms")
    ax.legend()
    assert alttext.describe(fig) == ("Stacked bar chart of ms against measured, calibrated, roofline "
                                     "(3 bars of 2 segments). Series: projections; MLP.")


def test_horizontal_bars_name_the_value_axis_and_the_categories():
    fig, ax = _fig()
    ax.barh(["one GPU", "TP = 2"], [20.7, 24.3])
    ax.set_xlabel("requests per dollar")
    assert alttext.describe(fig) == "Horizontal bar chart of requests per dollar for one GPU, TP = 2 (2 bars)."
    fig, ax = _fig()                     # numeric positions with fixed tick labels, top to bottom
    ax.barh([1, 0], [20.7, 24.3])
    ax.set_yticks([1, 0], ["one GPU", "TP = 2"])
    ax.set_xlabel("requests per dollar")
    assert alttext.describe(fig) == "Horizontal bar chart of requests per dollar for one GPU, TP = 2 (2 bars)."


def test_stacked_panels_and_a_figure_legend():
    """Four lines in two panels are four lines, not a bar chart; the figure legend's labels are the series."""
    fig, (a, b) = _fig(2)
    for ax, name in ((a, "TTFT"), (b, "ITL")):
        ax.plot([1, 2], [1, 2], label="live")
        ax.plot([1, 2], [2, 3], "--", label="simulated")
        ax.set(xlabel=f"{name} (ms)", ylabel="percentile", title=name)
    plots.legend_below(fig)
    text = alttext.describe(fig)
    assert text.startswith("2 panels, top to bottom. TTFT: Line plot of percentile against TTFT (ms) (2 lines). "
                           "ITL: Line plot of percentile against ITL (ms) (2 lines).")
    assert text.endswith("Series: live; simulated.")


def test_a_figure_without_axes_says_its_text():
    p = plots.does_not_fit_plot("weights need 138 GB, h100-sxm has 80 GB")
    assert alttext.describe(p.fig) == "A figure without axes: does not fit: weights need 138 GB, h100-sxm has 80 GB"


def test_a_chapter_figure_carries_its_description_as_png_metadata():
    from inferlab.notebook.figures import FIGURES
    p = FIGURES["15.2.2-fig1-throughput-vs-batch"]()
    data, meta = p._repr_mimebundle_()
    assert meta["image/png"]["alt"] == alttext.describe(p.fig)
    assert meta["image/png"]["alt"].startswith("2 panels, top to bottom.") and "B* = " in meta["image/png"]["alt"]


def test_registering_outside_ipython_is_a_no_op():
    assert alttext.register_ipython() is False


def test_in_ipython_a_figure_shows_at_96_px_per_inch_with_its_alt_text():
    """The formatter register_ipython installs: a retina PNG, shown half its pixel width (96 CSS px
    per inch, so 9 pt text is 12 px), carrying describe(fig)."""
    from IPython.core.interactiveshell import InteractiveShell
    shell = InteractiveShell.instance()
    try:
        assert alttext.register_ipython() is True
        fig, ax = _fig()                 # 5 in wide
        ax.plot([0, 1], [0, 1])
        ax.set(xlabel="x", ylabel="y")
        data, meta = shell.display_formatter.format(fig)
        png = data["image/png"]
        width_px = int.from_bytes(png[16:20], "big")
        assert meta["image/png"]["width"] == width_px // 2 and 440 <= width_px // 2 <= 500   # 5 in x 96, tight
        assert meta["image/png"]["alt"] == alttext.describe(fig)
        # and its phone variant (inferlab.notebook.phone_figures), 3.6 in at 96 px per inch with a tight box: under
        # a 390 px phone's 358 px column; its smallest text: the tick labels' 10 pt (matplotlib's
        # default), 13.33 px
        assert 300 <= meta["image/png"]["narrow"]["width"] <= 358
        assert meta["image/png"]["text_px"] == round(10 * 96 / 72, 2)
    finally:
        InteractiveShell.clear_instance()

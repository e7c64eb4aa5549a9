"""Alt text generated from what a matplotlib figure draws: the kind of plot, its axes and series.

`describe(fig)` reads the figure's artists (no pixels): per visible panel, the kind of marks
(lines, bars, filled areas, points), the axis labels with their scale, and the labelled series (from the
panel's and the figure's legends, in legend order). Reference lines (axhline/axvline, drawn in
axes coordinates on one side) count as reference lines, not as data series. Written for a reader
who cannot see the image; the caption beside it says what the figure shows.

In a notebook the figures carry it as the PNG's "alt" metadata (plots.Plot, and any matplotlib
Figure once `register_ipython` has run); the book uses it as the image's alt text.
"""
from __future__ import annotations

import numpy as np
from matplotlib.container import BarContainer
from matplotlib.collections import PathCollection, PolyCollection
from matplotlib.lines import Line2D
from matplotlib.ticker import FixedLocator

DISPLAY_DPI = 96   # CSS px per inch a notebook shows a figure at (plots.DISPLAY_DPI)


def _is_reference_line(line: Line2D) -> bool:
    """An axhline/axvline: constant x or y over two points, drawn in a blended transform."""
    x, y = line.get_xdata(), line.get_ydata()
    if len(x) != 2:
        return False
    return bool(np.all(np.asarray(x) == x[0]) or np.all(np.asarray(y) == y[0])) and \
        line.get_transform() != line.axes.transData


def _categories(axis) -> list[str]:
    """The category names of a categorical axis (bars drawn against strings, or ticks given
    fixed labels with set_xticks/set_yticks), else []."""
    mapping = getattr(axis.get_units(), "_mapping", None)
    if mapping:
        return [str(k) for k in mapping]
    locator = axis.get_major_locator()
    if isinstance(locator, FixedLocator):
        ticks = list(locator())
        labels = axis.get_major_formatter().format_ticks(ticks)
        if labels and not all(_numeric(label) for label in labels):
            return [label for _, label in sorted(zip(ticks, labels), reverse=axis is axis.axes.yaxis)]
    return []


def _numeric(label: str) -> bool:
    try:
        float(label.replace("\u2212", "-").replace("$", "").replace("\\mathdefault{", "").rstrip("}"))
    except ValueError:
        return False
    return True


def _axis_words(axis, label: str, scale: str) -> str:
    cats = _categories(axis)
    label = label.replace("\n", " ").strip() or (", ".join(cats) if cats else "an unlabelled axis")
    return f"{label} on a log scale" if scale == "log" else label


def _panel(ax) -> dict:
    containers = [c for c in ax.containers if isinstance(c, BarContainer)]
    bars = sum(len(c) for c in containers)
    horizontal = bool(containers) and all(getattr(c, "orientation", "vertical") == "horizontal" for c in containers)
    positions = {round(r.get_y() if horizontal else r.get_x(), 6) for c in containers for r in c.patches}
    stacked = len(containers) if 0 < len(positions) < bars else 0
    lines = [ln for ln in ax.get_lines() if ln.get_visible() and len(ln.get_xdata())]
    data_lines = [ln for ln in lines if not _is_reference_line(ln)]
    refs = len(lines) - len(data_lines)
    points = [c for c in ax.collections if isinstance(c, PathCollection) and len(c.get_offsets())]
    areas = [c for c in ax.collections if isinstance(c, PolyCollection) and c.get_visible() and len(c.get_paths())]
    connected = [ln for ln in data_lines if ln.get_linestyle() not in ("None", "", " ")]
    markers_only = len(data_lines) - len(connected)
    if bars:
        kind = "bar chart"
    elif areas:
        kind = "area chart"
    elif connected:
        kind = "line plot"
    elif points or markers_only:
        kind = "scatter plot"
    else:
        kind = "empty panel"
    if stacked:
        kind, bars = "stacked bar chart", len(positions)
    if bars and horizontal:
        kind = "horizontal " + kind
    return {"kind": kind, "lines": len(connected), "bars": bars, "segments": stacked, "areas": len(areas),
            "points": len(points) + markers_only,
            "refs": refs, "title": ax.get_title().replace("\n", " ").strip(),
            "x": _axis_words(ax.xaxis, ax.get_xlabel(), ax.get_xscale()),
            "y": _axis_words(ax.yaxis, ax.get_ylabel(), ax.get_yscale()), "horizontal": bool(bars and horizontal)}


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def series_labels(fig) -> list[str]:
    """The labels the figure's legends show (axes legends, then figure legends), in order, once each."""
    labels = []
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None] + list(fig.legends)
    for lg in legends:
        labels += [t.get_text() for t in lg.get_texts()]
    return list(dict.fromkeys(label for label in labels if label.strip()))


def describe(fig) -> str:
    """One paragraph: e.g. "Line plot of decode step time (ms) against batch size B (log scale):
    3 lines, 2 reference lines. Series: fits in memory; does not fit; B* = 31.0." Several panels
    are described one after the other ("2 panels, top to bottom (left to right)")."""
    axes = [ax for ax in fig.axes if ax.get_visible() and ax.axison]
    if not axes:
        texts = " ".join(t.get_text() for ax in fig.axes for t in ax.texts if t.get_text().strip())
        return f"A figure without axes: {texts}" if texts else "An empty figure."
    panels = [_panel(ax) for ax in axes]
    parts = []
    for p in panels:
        bar_words = (_count(p["bars"], "bar") + (f" of {_count(p['segments'], 'segment')}" if p["segments"] else "")
                     if p["bars"] else "")
        marks = [_count(p["lines"], "line") if p["lines"] else "", bar_words,
                 _count(p["areas"], "filled area") if p["areas"] else "",
                 _count(p["points"], "set") + " of points" if p["points"] else "",
                 _count(p["refs"], "reference line") if p["refs"] else ""]
        marks = ", ".join(m for m in marks if m)
        title = f"{p['title']}: " if p["title"] else ""
        kind = p["kind"][0].upper() + p["kind"][1:]
        what = f"of {p['x']} for {p['y']}" if p["horizontal"] else f"of {p['y']} against {p['x']}"
        parts.append(f"{title}{kind} {what}" + (f" ({marks})" if marks else "") + ".")
    if len(panels) > 1:
        rows = len({round(ax.get_position().y0, 3) for ax in axes})
        order = "top to bottom" if rows == len(panels) else "left to right" if rows == 1 else "in rows"
        parts.insert(0, f"{len(panels)} panels, {order}.")
    labels = series_labels(fig)
    if labels:
        parts.append("Series: " + "; ".join(labels) + ".")
    return " ".join(parts)


def register_ipython() -> bool:
    """In IPython, make every matplotlib Figure's PNG carry `describe(fig)` as its "alt" metadata
    (the book's alt text), and show it at DISPLAY_DPI CSS px per inch from a PNG drawn at twice
    that (tight bounding box), like plots.Plot. Returns False outside IPython."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    ip = get_ipython()
    if ip is None:
        return False
    from IPython.core.pylabtools import print_figure
    from matplotlib.figure import Figure

    def png(fig):
        # 96 CSS px per inch, drawn at twice that (as plots.Plot): 9 pt text shows at 12 px
        data = print_figure(fig, "png", bbox_inches="tight", dpi=2 * DISPLAY_DPI)
        if not data:
            return data
        width_px = int.from_bytes(data[16:20], "big")      # the PNG header's width
        from inferlab.notebook.phone_figures import image_metadata
        return data, {"alt": describe(fig), "width": width_px // 2, **image_metadata(fig, tight=True)}

    ip.display_formatter.formatters["image/png"].for_type(Figure, png)
    return True

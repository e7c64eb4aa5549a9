"""A figure's phone variant: the same figure laid out again for a 390 px phone's text column.

A figure is shown at DISPLAY_DPI CSS px per inch, so its 9 pt text is 12 CSS px; a 7 in figure
(672 px) shrunk into a phone's ~358 px column would show that text at 6.4 px. The phone variant
is drawn from a copy of the figure at NARROW_WIDTH_IN (at DISPLAY_DPI: no wider than the column,
so it is never shrunk), with panels that sat side by side stacked, titles, axis labels, long
annotations, category tick labels and legend labels wrapped, a single panel's title centred on the figure, a
linear x range widened where a bar's label would run past the frame, point labels that would
collide with another or straddle the frame left out, and legends in one column. The fonts keep their sizes: the variant's text is as large as the original's.

`image_metadata(fig)` is what a notebook output carries beside its PNG (the book picks the variant
by viewport width: book/postprocess.py): {"text_px": smallest text at the figure's own width,
"narrow": {"png": base64 PNG, "width": CSS px}}.
"""
from __future__ import annotations

import base64
import io
import pickle
import textwrap

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

DISPLAY_DPI = 96                 # CSS px per inch a figure is shown at (plots.DISPLAY_DPI)
NARROW_WIDTH_IN = 3.6            # 345.6 CSS px: inside a 390 px phone's 358 px text column
PT_PER_IN = 72
TICK_CHARS = 18                  # category tick labels (a bar chart's names) wrap at this length


def texts(fig: Figure) -> list:
    """Every visible, non-empty text artist of `fig` (titles, labels, ticks, legends, annotations)."""
    seen = fig.findobj(lambda a: hasattr(a, "get_text") and hasattr(a, "get_fontsize"))
    return [t for t in seen if t.get_visible() and str(t.get_text()).strip()]


def min_text_px(fig: Figure) -> float:
    """The smallest text of `fig` in CSS px at DISPLAY_DPI (font size pt x 96 / 72); 0 without text.
    The figure is laid out first (its tick labels exist only then)."""
    fig.draw_without_rendering()
    sizes = [float(t.get_fontsize()) for t in texts(fig)]
    return min(sizes) * DISPLAY_DPI / PT_PER_IN if sizes else 0.0


def _panels(fig: Figure) -> list:
    """The figure's grid axes (not colorbars or insets), in reading order (row, then column)."""
    out = []
    for ax in fig.axes:
        spec = ax.get_subplotspec() if hasattr(ax, "get_subplotspec") else None
        if spec is not None:
            out.append((spec.rowspan.start, spec.colspan.start, ax))
    return [ax for _, _, ax in sorted(out, key=lambda r: (r[0], r[1]))]


def narrow_copy(fig: Figure, width_in: float = NARROW_WIDTH_IN) -> Figure:
    """A copy of `fig` laid out for a phone (the module docstring lists what changes): `width_in`
    wide, side-by-side panels stacked one per row (each as high as a row was), taller by the lines
    its legends gain. Fonts keep their sizes. `fig` itself is not changed (the copy is a pickle
    round trip: a figure holding a lambda cannot be copied, see image_metadata)."""
    copy = pickle.loads(pickle.dumps(fig))
    _, h_in = copy.get_size_inches()
    panels = _panels(copy)
    height = h_in
    if panels:
        gs = panels[0].get_subplotspec().get_gridspec()
        nrows, ncols = gs.get_geometry()
        if ncols > 1:
            stacked = copy.add_gridspec(len(panels), 1)
            for k, ax in enumerate(panels):
                ax.set_subplotspec(stacked[k])
            height = h_in / nrows * len(panels)
    panels_now = _panels(copy)
    if len(panels_now) == 1 and copy._suptitle is None and panels_now[0].get_title():
        # one panel: its title centred on the figure (constrained layout makes room), not on an
        # axes that long tick labels may have narrowed
        ax = panels_now[0]
        copy.suptitle(ax.get_title(), fontsize=ax.title.get_fontsize())
        ax.set_title("")
    for ax in copy.axes:
        for t in ax.texts:
            chars = max(12, int(0.5 * width_in * PT_PER_IN / (0.6 * float(t.get_fontsize()))))
            if len(t.get_text()) > chars and "\n" not in t.get_text():     # two balanced lines
                t.set_text(textwrap.fill(t.get_text(), max(12, len(t.get_text()) // 2 + 2)))
    for t in _wrappable(copy):
        share = 0.65 if t in [a.xaxis.label for a in copy.axes] + [a.yaxis.label for a in copy.axes] else 0.9
        chars = max(16, int(share * width_in * PT_PER_IN / (0.6 * float(t.get_fontsize()))))
        text = t.get_text()
        if len(text) > chars:
            t.set_text("\n".join(textwrap.fill(line, chars) for line in text.split("\n")))
    copy.set_size_inches(width_in, height)
    extra_in = 0.0
    for owner, leg in [(copy, leg) for leg in copy.legends] + [(ax, ax.get_legend()) for ax in copy.axes
                                                               if ax.get_legend()]:
        extra_in += _one_column(owner, leg)
    copy.set_size_inches(width_in, height + extra_in)
    _wrap_category_ticks(copy)
    _room_for_labels(copy)
    _thin_labels(copy)
    return copy


def _overlap(a, b, pad: float = 1.0) -> bool:
    return a.x0 + pad < b.x1 and b.x0 + pad < a.x1 and a.y0 + pad < b.y1 and b.y0 + pad < a.y1


def _thin_labels(fig: Figure) -> None:
    """Point labels (an axes' texts) that the narrower axes make collide with an earlier one, or
    straddle the axes frame, are left out of the phone variant (the full figure keeps them all)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        frame = ax.get_window_extent(renderer)
        kept = []
        for t in ax.texts:
            if not t.get_visible() or not t.get_text().strip():
                continue
            bb = t.get_window_extent(renderer)
            inside = frame.x0 - 1 <= bb.x0 and bb.x1 <= frame.x1 + 1 and frame.y0 - 1 <= bb.y0 and bb.y1 <= frame.y1 + 1
            straddles = not inside and _overlap(bb, frame)
            if straddles or any(_overlap(bb, k) for k in kept):
                t.set_visible(False)
            else:
                kept.append(bb)


def _wrap_category_ticks(fig: Figure) -> None:
    """Tick labels that are names (a bar chart's categories, longer than TICK_CHARS; a number is
    shorter, or mathtext: `$10^{2}$`)
    wrapped to TICK_CHARS characters a line, so the axes keep most of the narrow figure's width."""
    FigureCanvasAgg(fig)
    fig.canvas.draw()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            labels = [t.get_text() for t in axis.get_majorticklabels()]
            if any(len(s) > TICK_CHARS and "\n" not in s and not s.startswith("$") for s in labels):
                axis.set_ticks(axis.get_majorticklocs(), [textwrap.fill(s, TICK_CHARS) for s in labels])


def _room_for_labels(fig: Figure, tries: int = 3) -> None:
    """Widen a linear x range where a label placed right of its point (a bar's value) now runs past
    the axes' right edge: the narrower axes give it fewer pixels per data unit."""
    FigureCanvasAgg(fig)
    for _ in range(tries):
        fig.canvas.draw()
        changed = False
        renderer = fig.canvas.get_renderer()
        for ax in fig.axes:
            if ax.get_xscale() != "linear" or not ax.texts:
                continue
            frame = ax.get_window_extent(renderer)
            over = max(t.get_window_extent(renderer).x1 for t in ax.texts) - frame.x1
            if over > 0:
                lo, hi = ax.get_xlim()
                ax.set_xlim(lo, hi + (hi - lo) * (over + 6) / frame.width)
                changed = True
        if not changed:
            return


def _wrappable(fig: Figure) -> list:
    """Titles (figure and axes) and axis labels: the texts that may be wider than a phone's figure."""
    out = [t for t in (fig._suptitle,) if t is not None]
    for ax in fig.axes:
        out += [ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label]
    return [t for t in out if t.get_text()]


def owner_width_in(owner) -> float:
    """The width a legend may take: its figure's (a figure legend, or one under a full-width axes)."""
    fig = owner if isinstance(owner, Figure) else owner.figure
    return float(fig.get_size_inches()[0])


def _one_column(owner, leg) -> float:
    """Draw legend `leg` of `owner` (a Figure or an Axes) again in one column, at the same place,
    with the same entries and font size, long labels wrapped; an axes legend anchored under its
    axes becomes a figure legend under all panels (constrained layout makes room for it).
    Returns the inches of height the added lines take."""
    labels = [t.get_text() for t in leg.texts]
    fs = float(leg.texts[0].get_fontsize()) if leg.texts else 9.0
    chars = max(16, int(0.85 * owner_width_in(owner) * PT_PER_IN / (0.6 * fs)) - 5)   # 5: the handle
    shown = [textwrap.fill(label, chars) if len(label) > chars else label for label in labels]
    handles = {}
    for ax in (owner.axes if isinstance(owner, Figure) else [owner]):
        for h, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, h)
    entries = [handles.get(label, proxy) for label, proxy in zip(labels, leg.legend_handles)]
    kw = dict(ncols=1, fontsize=leg.texts[0].get_fontsize() if leg.texts else None,
              frameon=leg.get_frame_on(), title=leg.get_title().get_text() or None)
    outside = getattr(leg, "_outside_loc", None)
    code = {v: k for k, v in leg.codes.items()}.get(leg._loc, leg._loc)
    loc = f"outside {code}" if outside else leg._loc
    # the anchor box follows its parent's transform (axes or figure fraction): it moves with the layout
    anchor = {} if outside else {"bbox_to_anchor": leg.get_bbox_to_anchor(),
                                 "borderaxespad": leg.borderaxespad}
    below = (not isinstance(owner, Figure) and not outside and leg._bbox_to_anchor is not None
             and leg._bbox_to_anchor._bbox.y1 < 0)          # anchored under the axes (axes fraction)
    leg.remove()
    if below:
        owner.figure.legend(entries, shown, loc="outside lower center", **kw)
    else:
        owner.legend(entries, shown, loc=loc, **kw, **anchor)
    extra = sum(s.count("\n") for s in shown) + (len(shown) - len(shown) // max(1, leg._ncols))
    return extra * fs * 1.3 / PT_PER_IN


def png(fig: Figure, dpi: int = 2 * DISPLAY_DPI, tight: bool = False) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None},
                **({"bbox_inches": "tight"} if tight else {}))
    return buf.getvalue()


def image_metadata(fig: Figure, tight: bool = False, narrow_fig: Figure | None = None) -> dict:
    """{"text_px", "narrow": {"png", "width"}} for a figure output's image/png metadata (module
    docstring); the narrow PNG at twice DISPLAY_DPI, its width in CSS px from its header.
    `narrow_fig`: the figure's own phone layout (a diagram drawn again at NARROW_WIDTH_IN), used
    instead of a narrow_copy."""
    try:
        data = png(narrow_fig if narrow_fig is not None else narrow_copy(fig), tight=tight)
    except (pickle.PicklingError, TypeError, AttributeError):
        # a figure that cannot be copied (a lambda formatter in a reader's own figure) is shown
        # as it is; the book's browser test fails on a chapter figure without a variant
        return {"text_px": round(min_text_px(fig), 2)}
    width_px = int.from_bytes(data[16:20], "big") // 2
    return {"text_px": round(min_text_px(fig), 2),
            "narrow": {"png": base64.b64encode(data).decode("ascii"), "width": width_px}}

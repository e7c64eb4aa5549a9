"""A chapter figure the web book can explore without a kernel: the matplotlib figure (notebooks,
print, PDF) together with a plotly.js figure spec over a precomputed grid of the scenario.

    interactive.explore(plot, interactive.memory_grid(MODEL, GPU, PREC, contexts=(512, 1000, 4096)))

`explore` returns an `Explorable`: in JupyterLab it shows the matplotlib PNG (its bundle also
carries MIME, the plotly spec as JSON, which a notebook front end ignores); text/plain is the
figure's own table (what nbval compares). The book's converter (book/convert.py) turns the spec
into a `<div class="inferlab-interactive">` drawn by the locally served plotly.js
(book/_static/interactive.js): hover values, and a slider over the grid's scenario parameter.

A grid is a `Grid`: x values, one frame per slider position ({series: y}), computed here through
the library (`latency`, `memory`); a point that does not fit (DoesNotFitError) is None, a gap.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from inferlab.latency import decode_step_time_s, prefill_time_s, throughput_tokens_per_s
from inferlab.memory import kv_cache_bytes, max_batch, weight_bytes
from inferlab.specs import BF16, Precision, check_accelerator, check_model, check_precision
from inferlab.units import GB, MS
from inferlab.input_checks import DoesNotFitError, positive_int

MIME = "application/vnd.inferlab.plotly+json"
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd")


@dataclass(frozen=True)
class Grid:
    """One series family per slider position: frames[i] = (label, {series name: y values})."""

    title: str
    x: tuple
    x_title: str
    y_title: str
    slider_label: str
    frames: tuple
    active: int = 0
    log_x: bool = False
    log_y: bool = False
    hover_unit: str = ""

    def spec(self) -> dict:
        """The plotly.js figure: every frame's traces, only the active frame's visible; one slider
        step per frame toggles the visibility (a restyle, no recomputation in the page)."""
        data, owner = [], []
        for i, (_, series) in enumerate(self.frames):
            for k, (name, ys) in enumerate(series.items()):
                data.append({"type": "scatter", "mode": "lines", "name": name, "x": list(self.x),
                             "y": [None if y is None or not np.isfinite(y) else float(y) for y in ys],
                             "visible": i == self.active, "line": {"color": COLORS[k % len(COLORS)]},
                             "hovertemplate": f"{name}<br>%{{x:,}}: %{{y:,.4g}} {self.hover_unit}<extra></extra>"})
                owner.append(i)
        steps = [{"label": str(label), "method": "restyle",
                  "args": [{"visible": [o == i for o in owner]}]} for i, (label, _) in enumerate(self.frames)]
        # text at 13 px or more (the book's smallest is 11 px); a log axis labels its decades only
        log_axis = {"type": "log", "dtick": 1}
        layout = {
            "font": {"size": 13},
            "title": {"text": self.title, "font": {"size": 15}},
            "xaxis": {"title": {"text": self.x_title}, **(log_axis if self.log_x else {"type": "linear"})},
            "yaxis": {"title": {"text": self.y_title}, **(log_axis if self.log_y else {"type": "linear"}),
                      "rangemode": "tozero"},
            "legend": {"orientation": "h", "y": -0.5},
            "margin": {"l": 60, "r": 10, "t": 40, "b": 10},
            "height": 460,
            "sliders": [{"active": self.active, "currentvalue": {"prefix": f"{self.slider_label}: "},
                         "pad": {"t": 50}, "steps": steps, "font": {"size": 13}}],
        }
        return {"data": data, "layout": layout}


def _values(fn, xs) -> list:
    out = []
    for x in xs:
        try:
            out.append(float(fn(x)))
        except DoesNotFitError:
            out.append(None)
    return out


def _check_choices(name: str, values, active: int) -> tuple:
    """The slider's values, sorted, with the scenario's own value among them."""
    values = tuple(positive_int(name, v) for v in values)
    if not values:
        raise ValueError(f"{name} must hold at least one value (got none)")
    return tuple(sorted(set(values) | {positive_int(f"active {name}", active)}))


def ttft_grid(model, accelerator, precision: Precision = BF16, *, batches=(1, 2, 4, 8, 16), active_batch: int = 1,
              prompt_lens=None) -> Grid:
    """TTFT (ms) against prompt length, one frame per batch: `latency.prefill_time_s` with and
    without attention's quadratic term."""
    model, accelerator, precision = check_model(model), check_accelerator(accelerator), check_precision(precision)
    batches = _check_choices("batches", batches, active_batch)
    xs = tuple(int(x) for x in (prompt_lens or np.unique(np.logspace(5, 15, 41, base=2).astype(int))))
    frames = []
    for b in batches:
        frames.append((b, {
            "with attention": _values(lambda s: prefill_time_s(model, accelerator, s, b, precision,
                                                               beyond_context=True) / MS, xs),
            "linear 2PS/peak": _values(lambda s: prefill_time_s(model, accelerator, s, b, precision,
                                                                include_attention=False, beyond_context=True) / MS, xs)}))
    return Grid(f"TTFT of {model.name} on one {accelerator.name}", xs, "prompt length (tokens)", "TTFT (ms)",
                "batch", tuple(frames), batches.index(active_batch),
                log_x=True, log_y=True, hover_unit="ms")


def memory_grid(model, accelerator, precision: Precision = BF16, *, contexts=(512, 1000, 2048, 4096, 8192),
                active_context: int = 1000, batches=None) -> Grid:
    """Device memory (GB) against batch, one frame per context length: the weights, the weights plus
    every sequence's KV cache (`memory.kv_cache_bytes`), and the capacity."""
    model, accelerator, precision = check_model(model), check_accelerator(accelerator), check_precision(precision)
    contexts = _check_choices("contexts", contexts, active_context)
    w = weight_bytes(model, precision)
    try:
        top = max_batch(model, accelerator, min(contexts), precision)
    except DoesNotFitError:
        top = 1
    xs = tuple(int(b) for b in (batches or np.unique(np.linspace(1, max(2, int(top * 1.25)), 60).astype(int))))
    frames = []
    for s in contexts:
        kv = [float(kv_cache_bytes(model, s, b, precision, beyond_context=True)) for b in xs]
        frames.append((s, {"weights": [w / GB] * len(xs), "weights + KV cache": [(w + k) / GB for k in kv],
                           "capacity": [accelerator.memory_bytes / GB] * len(xs)}))
    return Grid(f"Memory of {model.name} on one {accelerator.name}", xs, "batch (sequences)", "memory (GB)",
                "context (tokens)", tuple(frames), contexts.index(active_context),
                hover_unit="GB")


def itl_grid(model, accelerator, precision: Precision = BF16, *, batches=(1, 8, 32, 64), active_batch: int = 1,
             contexts=None) -> Grid:
    """ITL (ms) against context length, one frame per batch (`latency.decode_step_time_s`); a batch
    whose caches do not fit leaves a gap."""
    model, accelerator, precision = check_model(model), check_accelerator(accelerator), check_precision(precision)
    batches = _check_choices("batches", batches, active_batch)
    xs = tuple(int(x) for x in (contexts or np.unique(np.logspace(7, 15, 33, base=2).astype(int))))
    w = weight_bytes(model, precision)
    frames = []
    for b in batches:
        def itl(s, b=b):
            if w + float(kv_cache_bytes(model, s, b, precision, beyond_context=True)) > accelerator.memory_bytes:
                raise DoesNotFitError(f"batch {b} at {s} tokens")
            return decode_step_time_s(model, accelerator, s, b, precision, beyond_context=True) / MS
        frames.append((b, {"ITL": _values(itl, xs)}))
    return Grid(f"ITL of {model.name} on one {accelerator.name}", xs, "context length (tokens)", "ITL (ms)",
                "batch", tuple(frames), batches.index(active_batch),
                log_x=True, hover_unit="ms")


def throughput_grid(model, accelerator, precision: Precision = BF16, *, contexts=(512, 1024, 2048, 4096, 8192),
                    active_context: int = 1024, batches=None) -> Grid:
    """Decode throughput (tokens/s) against batch, one frame per context length
    (`latency.throughput_tokens_per_s`), up to the largest batch that fits."""
    model, accelerator, precision = check_model(model), check_accelerator(accelerator), check_precision(precision)
    contexts = _check_choices("contexts", contexts, active_context)
    try:
        top = max_batch(model, accelerator, min(contexts), precision)
    except DoesNotFitError:
        top = 1
    xs = tuple(int(b) for b in (batches or np.unique(np.linspace(1, max(2, top), 60).astype(int))))
    frames = []
    for s in contexts:
        try:
            limit = max_batch(model, accelerator, s, precision)
        except DoesNotFitError:
            limit = 0
        frames.append((s, {"throughput": [float(throughput_tokens_per_s(model, accelerator, s, b, precision,
                                                                         beyond_context=True)) if b <= limit else None
                                          for b in xs]}))
    return Grid(f"Decode throughput of {model.name} on one {accelerator.name}", xs, "batch (sequences)",
                "throughput (tokens/s)", "context (tokens)", tuple(frames),
                contexts.index(active_context), hover_unit="tokens/s")


@dataclass
class Explorable:
    """A matplotlib figure (`plot`, a plots.Plot) and the interactive spec of the same message."""

    plot: object
    grid: Grid
    extra: dict = field(default_factory=dict)

    def _repr_mimebundle_(self, include=None, exclude=None):
        data, meta = self.plot._repr_mimebundle_(include, exclude)
        data = dict(data)
        data[MIME] = json.loads(json.dumps(self.grid.spec()))
        return data, meta


def explore(plot, grid: Grid) -> Explorable:
    """`plot` for notebooks and print, `grid` for the book's interactive version."""
    if not isinstance(grid, Grid):
        raise TypeError(f"explore(grid=...): expected an interactive.Grid, got {type(grid).__name__}")
    return Explorable(plot, grid)


# The grids sweep past a model's context window on purpose (as the static figures do): every public
# function here runs inside beyond_context().
from inferlab.context import mark_yardsticks  # noqa: E402

mark_yardsticks(globals())

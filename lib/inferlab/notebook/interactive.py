"""A chapter figure the web book can explore without a kernel: the matplotlib figure (notebooks,
print, PDF) together with a plotly.js figure spec over a precomputed grid of the scenario.

    interactive.explore(plot, interactive.memory_grid(MODEL, GPU, PREC, contexts=(512, 1000, 4096)))

`explore` returns an `Explorable`: in JupyterLab it shows the matplotlib PNG (its bundle also
carries MIME, the plotly spec as JSON, which a notebook front end ignores); text/plain is the
figure's own table (what nbval compares). The book's converter (book/convert.py) turns the spec
into a `<div class="inferlab-interactive">` drawn by the locally served plotly.js
(book/_static/interactive.js): hover values, and a slider over the grid's scenario parameter. With
`models=` and `accelerators=` a grid function returns a `MenuGrid` instead: the same grid for every
model x accelerator, chosen from menus above the plot.

A grid is a `Grid`: x values, one frame per slider position ({series: y}), computed here through
the library (`latency`, `memory`); a point that does not fit (DoesNotFitError) is None, a gap.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from inferlab.core.latency import decode_step_time_s, kv_crossover_batch, throughput_tokens_per_s, ttft_curve
from inferlab.core.memory import fit_advice, fit_limit, memory_budget, weight_bytes
from inferlab.core.specs import BF16, Precision, check_accelerator, check_model, check_precision
from inferlab.base.units import GB, MS
from inferlab.base.input_checks import DoesNotFitError, positive_int
from inferlab.core.context import yardstick  # @yardstick: sweeps past a model's context on purpose, no warning

MIME = "application/vnd.inferlab.plotly+json"
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd")
MARK_COLORS = ("#d62728", "#2ca02c")   # B_max red, B* green, as the static figures
NOTE_COLOR = "#a50f15"


@dataclass(frozen=True)
class Grid:
    """One series family per slider position: frames[i] = (label, {series name: y values}).
    `marks[i]`: the vertical lines of frame i, ((label, x), ...) (B*, B_max: as the static figure
    marks them); `notes[i]`: '' or what frame i cannot show and what would fit instead, in short lines
    (memory.FitAdvice.lines), drawn over the plot so that a scenario that does not fit never leaves
    an empty or a wrong plot unexplained. Both empty: none."""

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
    marks: tuple = ()
    notes: tuple = ()

    def __post_init__(self):
        for name in ("marks", "notes"):
            value = getattr(self, name)
            if value and len(value) != len(self.frames):
                raise ValueError(f"{name} must hold one entry per frame ({len(self.frames)}); got {len(value)}")

    def note(self, i: int) -> tuple:
        """Frame i's note as lines (() for none)."""
        return tuple(self.notes[i]) if self.notes else ()

    def annotations(self, i: int) -> list:
        """The plotly annotation of frame i's note, or [] (a box over the middle of the plot)."""
        lines = self.note(i)
        if not lines:
            return []
        return [{"text": "<br>".join(lines), "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.55,
                 "showarrow": False, "align": "left", "bgcolor": "rgba(255,255,255,0.94)",
                 "bordercolor": NOTE_COLOR, "borderwidth": 1, "borderpad": 6,
                 "font": {"size": 13, "color": NOTE_COLOR}}]

    def _traces(self, i: int, series: dict) -> list:
        out = []
        for k, (name, ys) in enumerate(series.items()):
            out.append({"type": "scatter", "mode": "lines", "name": name, "x": list(self.x),
                        "y": [None if y is None or not np.isfinite(y) else float(y) for y in ys],
                        "visible": i == self.active, "line": {"color": COLORS[k % len(COLORS)]},
                        "hovertemplate": f"{name}<br>%{{x:,}}: %{{y:,.4g}} {self.hover_unit}<extra></extra>"})
        finite = [y for t in out for y in t["y"] if y is not None]
        top = max(finite) * 1.02 if finite else 1.0
        for k, (label, x) in enumerate(self.marks[i] if self.marks else ()):
            out.append({"type": "scatter", "mode": "lines", "name": label, "x": [float(x), float(x)],
                        "y": [0.0, float(top)], "visible": i == self.active,
                        "line": {"color": MARK_COLORS[k % len(MARK_COLORS)], "dash": "dash", "width": 1.5},
                        "hovertemplate": f"{label}<extra></extra>"})
        return out

    def trace_frames(self) -> list:
        """The frame each trace of the spec belongs to, in the spec's order."""
        return [i for i, (_, series) in enumerate(self.frames)
                for _ in range(len(series) + (len(self.marks[i]) if self.marks else 0))]

    def spec(self) -> dict:
        """The plotly.js figure: every frame's traces, only the active frame's visible; one slider
        step per frame toggles the visibility and shows that frame's note (an update: no
        recomputation in the page)."""
        data, owner = [], self.trace_frames()
        for i, (_, series) in enumerate(self.frames):
            data += self._traces(i, series)
        steps = [{"label": str(label), "method": "update",
                  "args": [{"visible": [o == i for o in owner]}, {"annotations": self.annotations(i)}]}
                 for i, (label, _) in enumerate(self.frames)]
        # text at 13 px or more (the book's smallest is 11 px); a log axis labels its decades only.
        # The legend sits above the plot, the slider alone under the x axis (the page's script,
        # book/_static/interactive.js, shows the title as text above the plot and fits it to a phone).
        log_axis = {"type": "log", "dtick": 1}
        layout = {
            "font": {"size": 13},
            "title": {"text": self.title, "font": {"size": 15}},
            "xaxis": {"title": {"text": self.x_title}, **(log_axis if self.log_x else {"type": "linear"})},
            "yaxis": {"title": {"text": self.y_title}, **(log_axis if self.log_y else {"type": "linear"}),
                      "rangemode": "tozero"},
            "legend": {"orientation": "h", "x": 0, "xanchor": "left", "y": 1.02, "yanchor": "bottom"},
            "margin": {"l": 60, "r": 10, "t": 40, "b": 10},
            "height": 460,
            "annotations": self.annotations(self.active),
        }
        if len(self.frames) > 1:   # one frame: nothing to slide over
            layout["sliders"] = [{"active": self.active, "currentvalue": {"prefix": f"{self.slider_label}: "},
                                  "pad": {"t": 75}, "steps": steps, "font": {"size": 13}}]
        return {"data": data, "layout": layout}


def _compact(trace: dict) -> dict:
    """A flat line (one value at every x, no gap) drawn from its two ends only."""
    ys = trace["y"]
    if len(ys) > 2 and None not in ys and len(set(ys)) == 1:
        return dict(trace, x=[trace["x"][0], trace["x"][-1]], y=[ys[0], ys[-1]])
    return trace


@dataclass(frozen=True)
class MenuGrid:
    """Grids of one figure, one per combination of menu choices (model, accelerator, scheduler...):
    `grids[(i, j, ...)]` is the Grid for the i-th value of the first menu, the j-th of the second.
    Its spec holds every grid's traces; the page's script (book/_static/interactive.js) draws the
    menus from `controls` and shows the traces of the chosen grid at the slider's position."""

    menus: tuple              # ((label, (value, ...)), ...)
    grids: dict = field(hash=False)
    active: tuple = ()

    def __post_init__(self):
        if not self.menus:
            raise ValueError("menus must hold at least one (label, values) menu; got none")
        shape = tuple(len(values) for _, values in self.menus)
        want = set(np.ndindex(*shape))
        if set(self.grids) != want:
            raise ValueError(f"grids must hold one Grid per menu combination {sorted(want)}; got {sorted(self.grids)}")
        active = self.active or tuple(0 for _ in shape)
        if active not in want:
            raise ValueError(f"active must be one of {sorted(want)}; got {active!r}")
        object.__setattr__(self, "active", active)
        sliders = {len(g.frames) for g in self.grids.values()}
        if len(sliders) != 1:
            raise ValueError(f"every grid needs the same number of slider positions; got {sorted(sliders)}")

    def spec(self) -> dict:
        """Every grid's traces (only the active grid's active frame visible), the active grid's layout
        with a slider that only reports its position (method 'skip'), and `controls`: the menus, the
        grid and frame each trace belongs to, each grid's title and each grid's notes per frame (the
        annotations the page shows for the chosen grid and frame)."""
        data, owner, titles, notes = [], [], {}, {}
        combos = sorted(self.grids)
        for c in combos:
            g = self.grids[c]
            for t in g.spec()["data"]:   # 4 significant digits: the page stays small with many grids
                data.append(_compact(dict(t, visible=t["visible"] and c == self.active,
                                          y=[None if y is None else float(f"{y:.4g}") for y in t["y"]])))
            owner += [[combos.index(c), i] for i in g.trace_frames()]
            titles[combos.index(c)] = g.title
            notes[combos.index(c)] = [g.annotations(i) for i in range(len(g.frames))]
        layout = self.grids[self.active].spec()["layout"]
        for s in layout.get("sliders", []):
            s["steps"] = [dict(step, method="skip", args=[]) for step in s["steps"]]
        controls = {"menus": [{"label": label, "values": [str(v) for v in values], "active": a}
                              for (label, values), a in zip(self.menus, self.active)],
                    "combos": [list(c) for c in combos], "owner": owner,
                    "titles": [titles[i] for i in range(len(combos))],
                    "notes": [notes[i] for i in range(len(combos))],
                    "frame": self.grids[self.active].active}
        return {"data": data, "layout": layout, "controls": controls}


def _weights_note(model, accelerator, precision, extra: str) -> tuple:
    """The lines of a note when the weights alone do not fit one device (what would: the tensor-parallel
    degree), `extra` appended; () when they fit."""
    fit = fit_advice(model, accelerator, 1, precision)
    if fit.fits or fit.longest_context:          # the weights fit: a gap in a curve says the rest
        return ()
    import textwrap
    return tuple(textwrap.wrap(fit.sentence() + (f" Here {extra}." if extra else ""), 34))


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


@yardstick
def with_menus(grid, model, accelerator, precision: Precision = BF16, *, models=(), accelerators=(),
               **kw) -> MenuGrid:
    """`grid` (ttft_grid, memory_grid, itl_grid or throughput_grid) for every model x accelerator of
    the menus, each with the same slider (`kw`); the scenario's own model and accelerator come first
    and are active (a menu entry equal to it is not repeated)."""
    ms = list({m.name: m for m in map(check_model, (model, *models))}.values())
    accs = list({a.name: a for a in map(check_accelerator, (accelerator, *accelerators))}.values())
    grids = {(i, j): grid(m, a, precision, **kw) for i, m in enumerate(ms) for j, a in enumerate(accs)}
    return MenuGrid((("model", tuple(m.name for m in ms)), ("accelerator", tuple(a.name for a in accs))), grids, (0, 0))


def _menus_or(grid, model, accelerator, precision, models, accelerators, kw):
    return with_menus(grid, model, accelerator, precision, models=models, accelerators=accelerators, **kw) \
        if (models or accelerators) else None


@yardstick
def ttft_grid(model, accelerator, precision: Precision = BF16, *, batches=(1, 2, 4, 8, 16), active_batch: int = 1,
              prompt_lens=None, models=(), accelerators=()) -> Grid | MenuGrid:
    """TTFT (ms) against prompt length, one frame per batch: `latency.prefill_time_s` with and
    without attention's quadratic term."""
    menus = _menus_or(ttft_grid, model, accelerator, precision, models, accelerators,
                      dict(batches=batches, active_batch=active_batch, prompt_lens=prompt_lens))
    if menus is not None:
        return menus
    model, accelerator, precision = check_model(model), check_accelerator(accelerator), check_precision(precision)
    batches = _check_choices("batches", batches, active_batch)
    xs = tuple(int(x) for x in (prompt_lens or np.unique(np.logspace(5, 15, 41, base=2).astype(int))))
    frames = []
    for b in batches:
        curve = ttft_curve(model, accelerator, xs, b, precision, beyond_context=True)
        frames.append((b, {"with attention": [float(t) for t in curve.with_attention_s / MS],
                           "linear 2PS/peak": [float(t) for t in curve.without_attention_s / MS]}))
    note = _weights_note(model, accelerator, precision, "the times are the arithmetic of one device")
    return Grid(f"TTFT of {model.name} on one {accelerator.name}", xs, "prompt length (tokens)", "TTFT (ms)",
                "batch", tuple(frames), batches.index(active_batch),
                log_x=True, log_y=True, hover_unit="ms", notes=(note,) * len(frames) if note else ())


@yardstick
def memory_grid(model, accelerator, precision: Precision = BF16, *, contexts=(512, 1000, 2048, 4096, 8192),
                active_context: int = 1000, batches=None, models=(), accelerators=()) -> Grid | MenuGrid:
    """Device memory (GB) against batch, one frame per context length: the weights, the weights plus
    every sequence's KV cache (`memory.memory_budget`), and the capacity."""
    menus = _menus_or(memory_grid, model, accelerator, precision, models, accelerators,
                      dict(contexts=contexts, active_context=active_context, batches=batches))
    if menus is not None:
        return menus
    model, accelerator, precision = check_model(model), check_accelerator(accelerator), check_precision(precision)
    contexts = _check_choices("contexts", contexts, active_context)
    w = weight_bytes(model, precision)
    top = fit_limit(model, accelerator, min(contexts), precision) or 16   # nothing fits (the figure's
    # note says what would): a batch axis to 16
    xs = tuple(int(b) for b in (batches or np.unique(np.linspace(1, max(2, int(top * 1.25)), 60).astype(int))))
    frames, marks, notes = [], [], []
    for s in contexts:
        used = [float(memory_budget(model, accelerator, b, s, precision, beyond_context=True).used_bytes) for b in xs]
        frames.append((s, {"weights": [w / GB] * len(xs), "weights + KV cache": [u / GB for u in used],
                           "capacity": [accelerator.memory_bytes / GB] * len(xs)}))
        fit = fit_advice(model, accelerator, s, precision, beyond_context=True)
        marks.append(((f"B_max = {fit.max_batch}", fit.max_batch),) if fit.fits else ())
        notes.append(tuple(fit.lines()))
    return Grid(f"Memory of {model.name} on one {accelerator.name}", xs, "batch (sequences)", "memory (GB)",
                "context (tokens)", tuple(frames), contexts.index(active_context),
                hover_unit="GB", marks=tuple(marks), notes=tuple(notes))


@yardstick
def itl_grid(model, accelerator, precision: Precision = BF16, *, batches=(1, 8, 32, 64), active_batch: int = 1,
             contexts=None, models=(), accelerators=()) -> Grid | MenuGrid:
    """ITL (ms) against context length, one frame per batch (`latency.decode_step_time_s`); a batch
    whose caches do not fit leaves a gap."""
    menus = _menus_or(itl_grid, model, accelerator, precision, models, accelerators,
                      dict(batches=batches, active_batch=active_batch, contexts=contexts))
    if menus is not None:
        return menus
    model, accelerator, precision = check_model(model), check_accelerator(accelerator), check_precision(precision)
    batches = _check_choices("batches", batches, active_batch)
    xs = tuple(int(x) for x in (contexts or np.unique(np.logspace(7, 15, 33, base=2).astype(int))))
    frames = []
    for b in batches:
        def itl(s, b=b):
            if not memory_budget(model, accelerator, b, s, precision, beyond_context=True).fits:
                raise DoesNotFitError(f"batch {b} at {s} tokens")
            return decode_step_time_s(model, accelerator, s, b, precision, beyond_context=True) / MS
        frames.append((b, {"ITL": _values(itl, xs)}))
    note = _weights_note(model, accelerator, precision, "")
    return Grid(f"ITL of {model.name} on one {accelerator.name}", xs, "context length (tokens)", "ITL (ms)",
                "batch", tuple(frames), batches.index(active_batch),
                log_x=True, hover_unit="ms", notes=(note,) * len(frames) if note else ())


@yardstick
def throughput_grid(model, accelerator, precision: Precision = BF16, *, contexts=(512, 1024, 2048, 4096, 8192),
                    active_context: int = 1024, batches=None, models=(), accelerators=()) -> Grid | MenuGrid:
    """Decode throughput (tokens/s) against batch, one frame per context length
    (`latency.throughput_tokens_per_s`), up to the largest batch that fits."""
    menus = _menus_or(throughput_grid, model, accelerator, precision, models, accelerators,
                      dict(contexts=contexts, active_context=active_context, batches=batches))
    if menus is not None:
        return menus
    model, accelerator, precision = check_model(model), check_accelerator(accelerator), check_precision(precision)
    contexts = _check_choices("contexts", contexts, active_context)
    top = fit_limit(model, accelerator, min(contexts), precision) or 16   # nothing fits (the figure's
    # note says what would): a batch axis to 16
    xs = tuple(int(b) for b in (batches or np.unique(np.linspace(1, max(2, top), 60).astype(int))))
    frames, marks, notes = [], [], []
    for s in contexts:
        fit = fit_advice(model, accelerator, s, precision, beyond_context=True)
        limit = fit.max_batch
        frames.append((s, {"throughput": [float(throughput_tokens_per_s(model, accelerator, s, b, precision,
                                                                         beyond_context=True)) if b <= limit else None
                                          for b in xs]}))
        bstar = float(kv_crossover_batch(model, s, precision, beyond_context=True))
        marks.append(((f"B_max = {limit}", limit), (f"B* = {bstar:.0f}", bstar)) if fit.fits else ())
        notes.append(tuple(fit.lines()))
    return Grid(f"Decode throughput of {model.name} on one {accelerator.name}", xs, "batch (sequences)",
                "throughput (tokens/s)", "context (tokens)", tuple(frames),
                contexts.index(active_context), hover_unit="tokens/s", marks=tuple(marks), notes=tuple(notes))


@yardstick
def tail_grid(sweep, percentiles=("p50", "p90", "p99")) -> MenuGrid:
    """TTFT and ITL (ms) against the request rate from a `serving.lab.Sweep`: a menu over its
    scheduling policies, a slider over the percentile, the SLO's targets as flat lines. Nothing is
    simulated here: the sweep's own summaries, as its static figure (`labplots.tail_plot`) shows them."""
    allowed = ("p50", "p90", "p99")
    bad = [p for p in percentiles if p not in allowed]
    if bad or not percentiles:
        raise ValueError(f"percentiles must be among {allowed}; got {tuple(percentiles)!r}")
    xs = tuple(float(r) for r in sweep.rates)
    ttft_ms, itl_ms = sweep.slo.ttft_s / MS, sweep.slo.tpot_s / MS
    grids = {}
    for i, label in enumerate(sweep.labels):
        frames = tuple((p, {"TTFT": [float(v) / MS for v in sweep.column(label, "ttft_s", p)],
                            "ITL": [float(v) / MS for v in sweep.column(label, "itl_s", p)],
                            "TTFT target": [ttft_ms] * len(xs), "ITL target": [itl_ms] * len(xs)})
                       for p in percentiles)
        grids[(i,)] = Grid(f"Latency against load, {label}", xs, "request rate (requests/s)", "latency (ms)",
                           "percentile", frames, len(percentiles) - 1, log_y=True, hover_unit="ms")
    return MenuGrid((("scheduler", tuple(sweep.labels)),), grids)


@dataclass
class Explorable:
    """A matplotlib figure (`plot`, a plots.Plot) and the interactive spec of the same message."""

    plot: object
    grid: Grid | MenuGrid
    extra: dict = field(default_factory=dict)

    def _repr_mimebundle_(self, include=None, exclude=None):
        data, meta = self.plot._repr_mimebundle_(include, exclude)
        data = dict(data)
        data[MIME] = json.loads(json.dumps(self.grid.spec()))
        return data, meta


@yardstick
def explore(plot, grid: Grid | MenuGrid) -> Explorable:
    """`plot` for notebooks and print, `grid` for the book's interactive version."""
    if not isinstance(grid, (Grid, MenuGrid)):
        raise TypeError(f"explore(grid=...): expected an interactive.Grid or MenuGrid, got {type(grid).__name__}")
    return Explorable(plot, grid)



"""One interactive panel per chapter notebook: model, accelerator, number formats, batch and
prompt/context as controls; the section's main curve and its key numbers redraw on every change.

    from inferlab.notebook import panel
    panel.prefill_panel(MODEL, GPU, PREC, prompt=2048, batch=1)     # the last expression of a cell

A panel is displayed as ONE output whose MIME bundle holds the live widget (JupyterLab with
ipywidgets), a PNG of the default state (any front end without widgets: nbconvert, a static
book) and, as text/plain, the default state's key numbers (what nbval compares). The figure is
built once; a change only recomputes the curve (numpy, vectorised through the library), moves
the artists and re-encodes the PNG, so a redraw stays well under 150 ms on two CPU cores
(benchmarks/panel_redraw.py measures it).

Each panel is a `Panel` with a `view(state) -> View` function: the curves to draw and the key
numbers as Markdown. Configurations that do not fit say so in the figure and the numbers.
"""
from __future__ import annotations

import base64
import io
from dataclasses import dataclass, field, replace

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import NullLocator

from inferlab.core import latency, memory
from inferlab.core.specs import DTYPES, Precision, get_accelerator, get_model, list_accelerators, list_hf_configs, list_models, resolve_model
from inferlab.base.input_checks import DoesNotFitError
from inferlab.core.context import yardstick  # @yardstick: sweeps past a model's context on purpose, no warning

# Stable colour and line style per curve label, whatever the scenario.
STYLE = {
    "with attention": dict(color="tab:blue", ls="-"),
    "linear 2PS/peak": dict(color="tab:blue", ls="--"),
    "weights": dict(color="tab:gray", ls="-"),
    "weights + KV cache": dict(color="tab:orange", ls="-"),
    "capacity": dict(color="tab:red", ls=":"),
    "ITL": dict(color="tab:green", ls="-"),
    "throughput": dict(color="tab:purple", ls="-"),
    "ceiling BW/C_kv": dict(color="tab:purple", ls="--"),
}
SIZE = (6.4, 4.2)   # the legend sits under the axes (the figure keeps a narrow column's width)
DPI = 80  # PNG of the live panel
STATIC_DPI = 96  # the static default: shown at 96 CSS px per inch, drawn at twice that


@dataclass(frozen=True)
class State:
    model: str
    accelerator: str
    weights: str
    kv: str
    batch: int
    tokens: int  # prompt (prefill panels) or context (decode panels)


@dataclass
class View:
    """What one state draws: x, named y series, an optional marked point, the x from which to
    shade (beyond the context window), a vertical line, axis labels and scales, the key numbers."""

    x: np.ndarray
    ys: dict
    xlabel: str
    ylabel: str
    numbers: str
    point: tuple | None = None
    shade_from: float | None = None
    vline: tuple | None = None  # (x, label)
    xscale: str = "linear"
    yscale: str = "linear"
    message: str = ""  # "does not fit: ..." replaces the curves
    extra: dict = field(default_factory=dict)
    point_label: str = "this scenario"  # a scenario that does not fit says so at its marker


def _precision(state: State, base: Precision) -> Precision:
    return replace(base, weights=state.weights, kv=state.kv)


# ---------------------------------------------------------------------------------------------
# The four views
# ---------------------------------------------------------------------------------------------

@yardstick
def prefill_view(state: State, base: Precision) -> View:
    """TTFT against prompt length (full per-operator model and the linear 2PS/peak rule)."""
    m, a, p = _model(state.model), get_accelerator(state.accelerator), _precision(state, base)
    s = np.unique(np.geomspace(64, 65536, 40).astype(int))
    curve = latency.ttft_curve(m, a, s, state.batch, p)
    full, rule = curve.with_attention_s * 1e3, curve.rule_s * 1e3
    ttft = float(latency.prefill_time_s(m, a, state.tokens, state.batch, p)) * 1e3
    numbers = (f"**TTFT** at S = {state.tokens:,}, B = {state.batch}: **{ttft:.1f} ms** at full peak; "
               f"KV cache written: {memory.kv_cache_bytes(m, state.tokens, state.batch, p) / 1e9:.2f} GB; "
               f"weight-read floor {latency.weight_read_floor_s(m, a, p) * 1e3:.1f} ms.")
    if m.max_context_tokens and state.tokens > m.max_context_tokens:
        numbers += f" S is beyond the {m.max_context_tokens:,}-token context window."
    return View(s, {"with attention": full, "linear 2PS/peak": rule}, "prompt length S (tokens)",
                "TTFT (ms)", numbers, point=(state.tokens, ttft), shade_from=m.max_context_tokens,
                xscale="log", yscale="log")


def _weights_do_not_fit(m, a, w: float, ylabel: str) -> View:
    """The empty view, with its sentence, of a model whose weights alone exceed the device."""
    return View(np.zeros(0), {}, "batch B", ylabel, f"**Does not fit:** {m.name}'s weights "
                f"({w / 1e9:.1f} GB) exceed the {a.name}'s {a.memory_bytes / 1e9:.0f} GB.",
                message=f"{m.name} weights {w / 1e9:.0f} GB > {a.memory_bytes / 1e9:.0f} GB on {a.name}")


@yardstick
def decode_view(state: State, base: Precision) -> View:
    """Device memory against batch: weights, weights + KV cache, capacity."""
    m, a, p = _model(state.model), get_accelerator(state.accelerator), _precision(state, base)
    w = memory.weight_bytes(m, p)
    if not memory.weights_fit(m, a, p):
        return _weights_do_not_fit(m, a, w, "GB")
    b_max = memory.fit_limit(m, a, state.tokens, p)
    b = np.arange(1, max(2 * b_max, 8, state.batch) + 1)   # the scenario's batch always on the curve
    step = float(latency.decode_step_time_s(m, a, state.tokens, state.batch, p)) * 1e3
    tput = float(latency.throughput_tokens_per_s(m, a, state.tokens, state.batch, p))
    numbers = (f"**Largest batch** at context {state.tokens:,}: **{b_max}**; "
               f"at B = {state.batch}: step {step:.2f} ms, {tput:,.0f} tokens/s"
               + (" (does not fit)" if state.batch > b_max else "") + ".")
    used = memory.memory_budget(m, a, b, state.tokens, p).used_bytes
    used_here = memory.memory_budget(m, a, state.batch, state.tokens, p).used_bytes
    return View(b, {"weights": np.full(b.shape, w / 1e9), "weights + KV cache": used / 1e9,
                    "capacity": np.full(b.shape, a.memory_bytes / 1e9)}, "batch B (sequences)",
                "device memory (GB)", numbers, point=(state.batch, used_here / 1e9),
                vline=(b_max, f"B_max = {b_max}"),
                point_label="this scenario" if state.batch <= b_max else f"B = {state.batch}: does not fit")


@yardstick
def latency_view(state: State, base: Precision) -> View:
    """ITL against context length at the chosen batch; TTFT of the chosen prompt in the numbers."""
    m, a, p = _model(state.model), get_accelerator(state.accelerator), _precision(state, base)
    ctx = np.unique(np.geomspace(128, 131072, 40).astype(int))
    itl = np.asarray(latency.decode_step_time_s(m, a, ctx, state.batch, p)) * 1e3
    fits = np.asarray(memory.memory_budget(m, a, state.batch, ctx, p).fits)
    itl = np.where(fits, itl, np.nan)
    ttft = float(latency.prefill_time_s(m, a, state.tokens, state.batch, p)) * 1e3
    one = float(latency.decode_step_time_s(m, a, state.tokens, state.batch, p)) * 1e3
    if not fits.any():
        return View(ctx, {}, "context (tokens)", "ITL (ms)", f"**Does not fit:** {m.name} with batch "
                    f"{state.batch} needs more than the {a.name}'s {a.memory_bytes / 1e9:.0f} GB at any context.",
                    message=f"{m.name}, B = {state.batch} on one {a.name}")
    point_fits = bool(memory.memory_budget(m, a, state.batch, state.tokens, p).fits)
    numbers = (f"At S = {state.tokens:,}, B = {state.batch}: **TTFT {ttft:.1f} ms** (compute), "
               f"**ITL {one:.2f} ms** (bandwidth)" + ("" if point_fits else "; this batch does not fit") + ".")
    # a scenario that does not fit has no curve under it: its marker sits at the last point that fits
    last = int(np.flatnonzero(fits)[-1])
    point = (state.tokens, one) if point_fits else (float(ctx[last]), float(itl[last]))
    return View(ctx, {"ITL": itl}, "context length (tokens)", "ITL (ms)", numbers,
                point=point, shade_from=m.max_context_tokens, xscale="log",
                point_label="this scenario" if point_fits else f"S = {state.tokens:,}: does not fit (last fit shown)")


@yardstick
def batching_view(state: State, base: Precision) -> View:
    """Decode throughput against batch (linear axes) with its ceiling BW/C_kv, B* and B_max."""
    m, a, p = _model(state.model), get_accelerator(state.accelerator), _precision(state, base)
    if not memory.weights_fit(m, a, p):
        return _weights_do_not_fit(m, a, memory.weight_bytes(m, p), "tokens/s")
    b_max = max(memory.fit_limit(m, a, state.tokens, p), 1)
    b = np.arange(1, b_max + 1)
    tput = np.asarray(latency.throughput_tokens_per_s(m, a, state.tokens, b, p))
    ceiling = latency.throughput_ceiling_tokens_per_s(m, a, state.tokens, p)
    b_star = latency.kv_crossover_batch(m, state.tokens, p)
    numbers = (f"**B\\* = {b_star:.1f}**, **B_max = {b_max}** (B_max/B\\* = {b_max / b_star:.1f}); "
               f"throughput ceiling BW/C_kv = {ceiling:,.0f} tokens/s, reached at B_max: "
               f"{tput[-1]:,.0f} tokens/s ({tput[-1] / ceiling:.0%} of it).")
    return View(b, {"throughput": tput, "ceiling BW/C_kv": np.full(b.shape, ceiling)},
                "batch B (sequences)", "decode throughput (tokens/s)", numbers,
                point=(min(state.batch, b_max), float(tput[min(state.batch, b_max) - 1])),
                vline=(b_star, "B*"),
                point_label="this scenario" if state.batch <= b_max else f"B = {state.batch}: does not fit (B_max shown)")


# ---------------------------------------------------------------------------------------------
# The panel
# ---------------------------------------------------------------------------------------------

_SCENARIO_MODELS: dict = {}


def _model(name: str):
    """The panel's model by name: the scenario's own (which may come from a config path), else a name."""
    return _SCENARIO_MODELS.get(name) or resolve_model(name)


def _model_menu(current: str) -> list:
    """The model drop-down: the registered models, the shipped Hugging Face configs (MoE, MLA, sliding
    windows), and the scenario's own model where it is none of them."""
    menu = [*list_models(), *list_hf_configs()]
    return menu if current in menu else [current, *menu]


class Panel:
    """Controls + one figure + key numbers, redrawn on every change of a control."""

    def __init__(self, view, model, accelerator, precision: Precision, *, batch: int, tokens: int,
                 tokens_label: str, tokens_max: int = 131072, batch_max: int = 512):
        self.view_fn, self.base = view, precision
        m, a = resolve_model(model), get_accelerator(accelerator)
        _SCENARIO_MODELS[m.name] = m   # a model read from a config path is found again by its name
        self.state = State(m.name, a.name, precision.weights, precision.kv, int(batch), int(tokens))
        self.tokens_label, self.tokens_max, self.batch_max = tokens_label, tokens_max, batch_max
        # A fixed layout (no constrained layout pass per redraw) and no minor log ticks: the PNG
        # encode is most of a redraw's time.
        self.fig = Figure(figsize=SIZE)
        self.ax = self.fig.add_subplot()
        self.fig.subplots_adjust(left=0.12, right=0.96, bottom=0.31, top=0.93)
        self._handle = None
        self.draw(self.state)

    # -- drawing ----------------------------------------------------------------------------
    def draw(self, state: State) -> View:
        """Recompute the view for `state` and redraw the figure (artists rebuilt on one Axes)."""
        self.state = state
        v = self.view_fn(state, self.base)
        ax = self.ax
        ax.clear()
        for old in list(self.fig.legends):     # one legend, under the axes, redrawn with them
            old.remove()
        if v.message:
            ax.set_axis_off()
            ax.text(0.5, 0.5, "does not fit:\n" + v.message, ha="center", va="center", fontsize=11,
                    color="tab:red", transform=ax.transAxes)
        else:
            ax.set_axis_on()
            for label, y in v.ys.items():
                ax.plot(v.x, y, label=label, lw=1.8, **STYLE.get(label, {}))
            if v.point is not None:
                fits = v.point_label == "this scenario"
                ax.plot(*v.point, "o" if fits else "X", color="black" if fits else "tab:red", ms=6 if fits else 8,
                        zorder=5, label=v.point_label)
            if v.vline is not None:
                ax.axvline(v.vline[0], color="tab:green", ls="-.", lw=1.2, label=v.vline[1])
            if v.shade_from and len(v.x) and v.shade_from < v.x[-1]:
                ax.axvspan(v.shade_from, v.x[-1], color="0.85", zorder=0, label="beyond context window")
            ax.set_xscale(v.xscale)
            ax.set_yscale(v.yscale)
            ax.xaxis.set_minor_locator(NullLocator())
            ax.yaxis.set_minor_locator(NullLocator())
            ax.set_xlabel(v.xlabel, fontsize=10)
            ax.set_ylabel(v.ylabel, fontsize=10)
            ax.tick_params(labelsize=9)
            ax.grid(alpha=0.3)
            self.fig.legend(*ax.get_legend_handles_labels(), loc="lower center", ncols=2, fontsize=9,
                            bbox_to_anchor=(0.5, 0.0), frameon=False)
            ax.set_title(f"{state.model} on {state.accelerator}", fontsize=10)
        self.numbers = v.numbers
        return v

    def png(self, dpi: int = DPI) -> bytes:
        buf = io.BytesIO()
        self.fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None},
                         pil_kwargs={"compress_level": 1})  # fast zlib: the PNG travels a local socket
        return buf.getvalue()

    def update(self, **changes) -> bytes:
        """Apply control changes (model=..., batch=...), redraw, return the PNG (what a widget shows)."""
        self.draw(replace(self.state, **changes))
        return self.png()

    # -- display ----------------------------------------------------------------------------
    def bundle(self, dpi: int = 2 * STATIC_DPI, width_dpi: int = STATIC_DPI):
        """The figure of the current state as a PNG at `dpi`, shown `width_dpi` CSS px per inch wide
        (the static default: a retina PNG at 96 px per inch, so its 9 pt text is 12 px), its alt
        text (what it draws: alttext.describe) and its key numbers as text/plain."""
        from inferlab.notebook.alttext import describe
        data = {"image/png": base64.b64encode(self.png(dpi=dpi)).decode("ascii"), "text/plain": self.numbers}
        from inferlab.notebook.phone_figures import image_metadata
        return data, {"image/png": {"width": int(SIZE[0] * width_dpi), "alt": describe(self.fig),
                                    **image_metadata(self.fig)}}

    def controls(self):
        """The ipywidgets controls; each change redraws the figure shown above them (an update of
        its display) and the key numbers beside them."""
        import ipywidgets as w

        s = self.state
        dtypes = [d for d in DTYPES if d != "fp32"]
        controls = {
            "model": w.Dropdown(options=_model_menu(s.model), value=s.model, description="model"),
            "accelerator": w.Dropdown(options=list_accelerators(), value=s.accelerator, description="GPU"),
            "weights": w.Dropdown(options=dtypes, value=s.weights, description="weights"),
            "kv": w.Dropdown(options=dtypes, value=s.kv, description="KV cache"),
            "batch": w.IntSlider(value=s.batch, min=1, max=self.batch_max, description="batch",
                                 continuous_update=False),
            "tokens": w.IntSlider(value=s.tokens, min=16, max=self.tokens_max, step=16,
                                  description=self.tokens_label, continuous_update=False),
        }
        numbers = w.HTML(value=_md_to_html(self.numbers))

        def on_change(change):
            key = next(k for k, c in controls.items() if c is change["owner"])
            try:
                self.draw(replace(self.state, **{key: change["new"]}))
                data, meta = self.bundle(dpi=DPI, width_dpi=DPI)
                if self._handle is not None:
                    self._handle.update(data, raw=True, metadata=meta)
                numbers.value = _md_to_html(self.numbers)
            except (ValueError, DoesNotFitError) as e:
                numbers.value = f"<b>not computable:</b> {e}"

        for c in controls.values():
            c.observe(on_change, names="value")
        return w.VBox([w.HBox([w.VBox(list(controls.values())[:4]), w.VBox(list(controls.values())[4:])]),
                       numbers])

    def _ipython_display_(self):
        """Two outputs: the figure of the default state (a static PNG any front end shows, updated
        in place by the controls) and the controls (live only where widgets render)."""
        from IPython.display import display
        data, meta = self.bundle()
        self._handle = display(data, raw=True, metadata=meta, display_id=True)
        try:
            controls = self.controls()
        except ImportError:  # no ipywidgets: the static figure alone
            return
        display(*controls_bundle(controls, self.tokens_label), raw=True)


@yardstick
def controls_bundle(box, tokens_label: str = "tokens") -> tuple[dict, dict]:
    """The widget's own MIME bundle, its text/plain (what a front end shows before the kernel has
    run the cell, or without widgets) a sentence naming the controls instead of a `VBox(...)` repr."""
    data = box._repr_mimebundle_() if hasattr(box, "_repr_mimebundle_") else {}
    if isinstance(data, tuple):
        data, meta = data
    else:
        meta = {}
    data = dict(data)
    data["text/plain"] = (f"Controls (model, GPU, weights, KV cache, batch, {tokens_label}): run the cell to use "
                          "them; the figure above shows the default state.")
    return data, meta


def _md_to_html(text: str) -> str:
    """The key numbers' light Markdown (**bold**, B\\*) as HTML for the widget."""
    import re
    text = text.replace("\\*", "*")
    return re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", text)


@yardstick
def prefill_panel(model, accelerator, precision: Precision, *, prompt: int, batch: int = 1) -> Panel:
    return Panel(prefill_view, model, accelerator, precision, batch=batch, tokens=prompt, tokens_label="prompt S",
                 batch_max=64)


@yardstick
def decode_panel(model, accelerator, precision: Precision, *, context: int, batch: int) -> Panel:
    return Panel(decode_view, model, accelerator, precision, batch=batch, tokens=context, tokens_label="context")


@yardstick
def latency_panel(model, accelerator, precision: Precision, *, prompt: int, batch: int = 1) -> Panel:
    return Panel(latency_view, model, accelerator, precision, batch=batch, tokens=prompt, tokens_label="prompt S",
                 batch_max=256)


@yardstick
def batching_panel(model, accelerator, precision: Precision, *, context: int, batch: int = 1) -> Panel:
    return Panel(batching_view, model, accelerator, precision, batch=batch, tokens=context, tokens_label="context")



"""The chapter's mechanism diagrams, drawn from a scenario: what is stored, what moves, what waits.

    diagrams.kv_cache_diagram(model, precision, prompt_len=1000)      # 15.1.2: K and V per layer, head, token
    diagrams.roofline_diagram(accelerator, precision)                 # 15.1.1: two ceilings, the ridge point
    diagrams.request_timeline(model, accelerator, precision, ...)     # 15.2.1: queue, prefill -> TTFT, decode -> ITL
    diagrams.batching_timeline(model, accelerator, [5, 2, 8, 3], ...) # 15.2.2: static vs continuous batching

Each returns a `plots.Plot` whose numbers come from the library (`memory`, `roofline`, `latency`),
whose `table` prints them (nbval compares it), whose `alt` says in words what the picture shows with
those numbers, and whose `narrow` is the same diagram laid out for a phone's column (fewer cells,
wrapped labels; the fonts keep their size).
"""
from __future__ import annotations

import textwrap
from dataclasses import dataclass

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, Rectangle

from inferlab.core.latency import decode_step_time_s, prefill_time_s
from inferlab.core.memory import kv_cache_bytes_per_token, kv_cache_rule_bytes
from inferlab.notebook.plots import FIGSIZE, Plot
from inferlab.core.roofline import ridge_point
from inferlab.core.specs import BF16, Precision, check_accelerator, check_model, check_precision
from inferlab.base.units import GB, MS, TFLOP, bytes_per_element
from inferlab.base.input_checks import positive_float, positive_int

WIDE_IN = FIGSIZE[0]      # the notebooks' figure width (7 in: 672 CSS px)
NARROW_IN = 3.6           # phone_figures.NARROW_WIDTH_IN: a 390 px phone's column
FONT = 9                  # pt: 12 CSS px at 96 px per inch, the book's body text
PREFILL_COLOR, DECODE_COLOR, NEXT_COLOR = "tab:blue", "tab:orange", "0.6"
QUEUE_COLOR = "0.75"


def _canvas(width_in: float, height_in: float, xlim, ylim) -> tuple:
    fig = Figure(figsize=(width_in, height_in), layout="constrained")
    ax = fig.subplots()
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.set_axis_off()
    return fig, ax


def _wrap(text: str, width_in: float) -> str:
    """Wrap a label to the figure's width (about 15 characters of 9 pt text per inch)."""
    return "\n".join(textwrap.wrap(text, max(20, int(width_in * 15))))


# ---------------------------------------------------------------------------------------------
# 15.1.2: the KV cache
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class KVCacheSizes:
    """The sizes the KV-cache diagram writes out, in bytes (SI units inside; text at display only)."""

    n_layers: int
    n_kv_heads: int
    head_dim: int
    bytes_per_element: float
    bytes_per_vector: float        # one K (or V) vector of one head for one token: H * b
    bytes_per_token: float         # 2 * L * N_kv * H * b
    prompt_len: int
    decode_steps: int

    @property
    def bytes_after_prefill(self) -> float:
        return self.bytes_per_token * self.prompt_len

    @property
    def bytes_after_decode(self) -> float:
        return self.bytes_per_token * (self.prompt_len + self.decode_steps)


def kv_cache_sizes(model, precision: Precision = BF16, prompt_len: int = 1000, decode_steps: int = 3) -> KVCacheSizes:
    """C_kv per token = 2 (K and V) * L * N_kv * H * b_kv; after prefill S tokens are cached, after
    n decode steps S + n (one sequence, no sliding window)."""
    model, precision = check_model(model), check_precision(precision)
    positive_int("prompt_len", prompt_len)
    positive_int("decode_steps", decode_steps)
    b = bytes_per_element(precision.kv)
    per_token = kv_cache_bytes_per_token(model, precision)
    assert per_token == kv_cache_rule_bytes(model, 1, 1, precision)
    return KVCacheSizes(model.n_layers, model.n_kv_heads, model.head_dim, b, model.head_dim * b, per_token,
                        int(prompt_len), int(decode_steps))


def _bytes_text(n: float) -> str:
    if n >= GB:
        return f"{n / GB:,.2f} GB"
    if n >= 1e6:
        return f"{n / 1e6:,.2f} MB"
    if n >= 1e3:
        return f"{n / 1e3:,.1f} kB"
    return f"{n:,.0f} B"


def _kv_grid(ax, x0, y0, cols, heads, label, n_kv, cell):
    """One K or V block: a row per shown head, a column per shown token; returns its top y."""
    for r, head in enumerate(heads):
        y = y0 + (len(heads) - 1 - r) * cell
        if head is None:
            ax.text(x0 - 0.15 * cell, y + 0.5 * cell, "\u22ee", ha="right", va="center", fontsize=FONT)
            for c, kind in enumerate(cols):
                if kind not in ("gap", "next"):
                    ax.text(x0 + (c + 0.5) * cell, y + 0.5 * cell, "\u22ee", ha="center", va="center",
                            fontsize=FONT, color="0.4")
            continue
        ax.text(x0 - 0.15 * cell, y + 0.5 * cell, f"head {head}", ha="right", va="center", fontsize=FONT)
        for c, kind in enumerate(cols):
            x = x0 + c * cell
            if kind == "gap":
                ax.text(x + 0.5 * cell, y + 0.5 * cell, "\u2026", ha="center", va="center", fontsize=FONT)
            elif kind == "next":
                ax.add_patch(Rectangle((x + 0.06 * cell, y + 0.06 * cell), 0.88 * cell, 0.88 * cell,
                                       fill=False, ls="--", ec=NEXT_COLOR, lw=1))
            else:
                color = PREFILL_COLOR if kind == "prefill" else DECODE_COLOR
                ax.add_patch(Rectangle((x + 0.06 * cell, y + 0.06 * cell), 0.88 * cell, 0.88 * cell,
                                       fc=color, ec="white", alpha=0.85 if kind == "prefill" else 0.95))
    top = y0 + len(heads) * cell
    ax.text(x0 - 0.15 * cell, top + 0.1 * cell, label, ha="right", va="bottom", fontsize=FONT, weight="bold")
    return top


def _draw_kv(sizes: KVCacheSizes, model_name: str, kv_dtype: str, width_in: float) -> Figure:
    narrow = width_in < 5
    shown_prompt, shown_decode = (2, 2) if narrow else (4, 3)
    shown_decode = min(shown_decode, sizes.decode_steps)
    # token columns: the first prompt tokens, a gap, the last prompt token, the decode tokens, the next slot
    cols = ["prefill"] * min(shown_prompt, sizes.prompt_len)
    if sizes.prompt_len > shown_prompt + 1:
        cols.append("gap")
    if sizes.prompt_len > shown_prompt:
        cols.append("prefill")
    cols += ["decode"] * shown_decode + ["next"]
    n = sizes.n_kv_heads
    heads = list(range(1, n + 1)) if n <= 3 else [1, 2, None, n]
    if narrow and n > 2:
        heads = [1, None, n]
    cell = 1.0
    label_w = 3.2                                    # room for "head 40" left of the grid, in cells
    grid_w = len(cols) * cell
    block_h = len(heads) * cell
    stack = 0.35 * cell                              # offset of the layer cards behind layer 1
    text_lines = 3 if not narrow else 8
    height_cells = 2 * block_h + 3.4 * cell + 2 * stack + text_lines * 0.62 + 0.5
    width_cells = label_w + grid_w + 2 * stack + (0.3 if narrow else 4.5)
    height_in = width_in * height_cells / width_cells
    fig, ax = _canvas(width_in, height_in, (-label_w, grid_w + 2 * stack + (0.3 if narrow else 4.5)),
                      (-(text_lines * 0.62 + 0.5), 2 * block_h + 3.4 * cell + 2 * stack))
    ax.set_aspect("equal")
    y_v, y_k = 0.0, block_h + 1.1 * cell
    for y0 in (y_k, y_v):                            # layers 2..L as cards behind layer 1
        for k in (2, 1):
            ax.add_patch(Rectangle((k * stack - 0.1, y0 + k * stack - 0.1), grid_w + 0.2, block_h + 0.2,
                                   fc="white", ec="0.55", lw=0.8, zorder=0))
        ax.add_patch(Rectangle((-0.1, y0 - 0.1), grid_w + 0.2, block_h + 0.2, fc="white", ec="0.3", lw=0.8,
                               zorder=0.5))
    _kv_grid(ax, 0.0, y_k, cols, heads, "K (keys)", n, cell)
    top = _kv_grid(ax, 0.0, y_v, cols, heads, "V (values)", n, cell)
    # braces over the token columns: what prefill writes, what each decode step appends
    head_y = y_k + block_h + 2 * stack + 0.45
    n_prefill_cols = sum(1 for c in cols if c in ("prefill", "gap"))
    first_decode = n_prefill_cols
    ax.annotate("", (0, head_y), (n_prefill_cols * cell, head_y),
                arrowprops=dict(arrowstyle="|-|", color=PREFILL_COLOR, lw=1.2, shrinkA=0, shrinkB=0))
    ax.text(n_prefill_cols * cell / 2, head_y + 0.25,
            f"prefill writes\nS = {sizes.prompt_len:,} tokens" if narrow else
            f"prefill writes S = {sizes.prompt_len:,} tokens",
            ha="center", va="bottom", fontsize=FONT, color=PREFILL_COLOR)
    ax.annotate("", (first_decode * cell, head_y), ((first_decode + shown_decode) * cell, head_y),
                arrowprops=dict(arrowstyle="|-|", color=DECODE_COLOR, lw=1.2, shrinkA=0, shrinkB=0))
    ax.text((first_decode + shown_decode / 2) * cell, head_y + 0.25,
            "+1 per\nstep" if narrow else "each decode\nstep appends one",
            ha="center", va="bottom", fontsize=FONT, color=DECODE_COLOR)
    if not narrow:
        ax.text(grid_w + 2 * stack + 0.3, y_k + block_h / 2,
                f"\u00d7 L = {sizes.n_layers} layers:\nevery layer keeps\nits own K and V", ha="left",
                va="center", fontsize=FONT)
        ax.text(grid_w + 2 * stack + 0.3, y_v + block_h / 2, "dashed: the slot\nthe next step fills",
                ha="left", va="center", fontsize=FONT, color="0.35")
    del top
    b = f"{sizes.bytes_per_element:g}"
    lines = [f"one cell = one head's vector for one token: H = {sizes.head_dim} numbers \u00d7 {b} B ({kv_dtype})"
             f" = {sizes.bytes_per_vector:,.0f} B",
             f"per token: 2 (K, V) \u00d7 L {sizes.n_layers} \u00d7 N_kv {n} \u00d7 H {sizes.head_dim} \u00d7 {b} B"
             f" = {sizes.bytes_per_token:,.0f} B ({_bytes_text(sizes.bytes_per_token)})",
             f"after prefill: {sizes.prompt_len:,} tokens = {_bytes_text(sizes.bytes_after_prefill)} per sequence;"
             f" each decode step adds {_bytes_text(sizes.bytes_per_token)}"]
    if narrow:
        lines = [ln for line in lines for ln in textwrap.wrap(line, 44)]
        lines.append(f"\u00d7 L = {sizes.n_layers} layers (cards behind)")
    ax.text(-label_w, -0.4, "\n".join(lines), ha="left", va="top", fontsize=FONT, linespacing=1.35)
    ax.set_title(_wrap(f"The KV cache of one {model_name} sequence", width_in), fontsize=FONT + 1, loc="left")
    return fig


def kv_cache_alt(sizes: KVCacheSizes, model_name: str) -> str:
    return (f"Diagram of the KV cache of one {model_name} sequence. Two grids, K and V, with a row per KV head "
            f"({sizes.n_kv_heads} heads, some drawn) and a column per token; cards behind them stand for the "
            f"{sizes.n_layers} layers, each with its own K and V. Blue columns are the S = {sizes.prompt_len:,} "
            f"prompt tokens that prefill writes in one pass; orange columns are appended one per decode step; a "
            f"dashed column is the slot the next step fills. Each cell is one head's vector of "
            f"{sizes.head_dim} numbers of {sizes.bytes_per_element:g} bytes; a token costs "
            f"{sizes.bytes_per_token:,.0f} bytes, the prompt {_bytes_text(sizes.bytes_after_prefill)}.")


def kv_cache_diagram(model, precision: Precision = BF16, *, prompt_len: int = 1000, decode_steps: int = 3) -> Plot:
    """What the KV cache holds for one sequence: per layer, a K and a V vector of H numbers per KV head
    per token; prefill writes S tokens at once, each decode step appends one. Bytes per token
    2 * L * N_kv * H * b (`memory.kv_cache_bytes_per_token`)."""
    model = check_model(model)
    sizes = kv_cache_sizes(model, precision, prompt_len, decode_steps)
    kv = check_precision(precision).kv
    table = "\n".join([
        f"layers L {sizes.n_layers}; KV heads N_kv {sizes.n_kv_heads}; head dim H {sizes.head_dim}; "
        f"bytes per element {sizes.bytes_per_element:g} ({kv})",
        f"bytes per token 2*L*N_kv*H*b = {sizes.bytes_per_token:,.0f}",
        f"after prefill of {sizes.prompt_len:,} tokens: {sizes.bytes_after_prefill:,.0f} bytes; "
        f"after {sizes.decode_steps} decode steps: {sizes.bytes_after_decode:,.0f} bytes"])
    return Plot(_draw_kv(sizes, model.name, kv, WIDE_IN), table, {"sizes": sizes},
                alt=kv_cache_alt(sizes, model.name), narrow=_draw_kv(sizes, model.name, kv, NARROW_IN))


# ---------------------------------------------------------------------------------------------
# 15.1.1: the roofline
# ---------------------------------------------------------------------------------------------

def _draw_roofline(accelerator, dtype: str, points, width_in: float) -> Figure:
    peak, bw = accelerator.peak(dtype), accelerator.hbm_bytes_per_s
    ridge = ridge_point(accelerator, dtype)
    narrow = width_in < 5
    fig = Figure(figsize=(width_in, 3.4 if not narrow else 3.6), layout="constrained")
    ax = fig.subplots()
    x = np.logspace(np.log10(ridge) - 3, np.log10(ridge) + 1.5, 200)
    ax.plot(x, np.minimum(peak, bw * x) / TFLOP, color="0.2", lw=2)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.axvline(ridge, color="tab:red", ls=":", lw=1.2)
    ax.plot([ridge], [peak / TFLOP], "o", color="tab:red")
    ax.annotate(f"ridge point\n{ridge:,.0f} FLOP/byte", (ridge, peak / TFLOP), xytext=(-8, 4),
                textcoords="offset points", fontsize=FONT, color="tab:red", ha="right", va="bottom")
    xm = x[70]
    ax.text(xm, bw * xm / TFLOP * 4, "memory-bound:\nbandwidth \u00d7 intensity" if narrow else
            f"memory-bound:\n{bw / 1e12:.2f} TB/s \u00d7 intensity", fontsize=FONT, ha="right", va="bottom")
    ax.text(x[-1], peak / TFLOP * 1.3, f"compute-bound:\n{peak / TFLOP:,.0f} TFLOP/s", fontsize=FONT,
            ha="right", va="bottom")
    for name, intensity in points:
        y = min(peak, bw * intensity) / TFLOP
        ax.plot([intensity], [y], "s", color="tab:blue", ms=5)
        ax.annotate(_wrap(name, 1.4), (intensity, y), xytext=(6, -6), textcoords="offset points", fontsize=FONT,
                    color="tab:blue", va="top")
    ax.set_xlabel("arithmetic intensity (FLOP per byte moved)", fontsize=FONT)
    ax.set_ylabel("attainable TFLOP/s", fontsize=FONT)
    ax.set_ylim(bw * x[0] / TFLOP / 2, peak / TFLOP * 12)
    ax.tick_params(labelsize=FONT)
    ax.set_title(_wrap(f"The roofline of one {accelerator.name} ({dtype})", width_in), fontsize=FONT + 1, loc="left")
    return fig


def roofline_diagram(accelerator, precision: Precision = BF16, points=()) -> Plot:
    """Attainable FLOP/s = min(peak, bandwidth * intensity); the two ceilings meet at the ridge point
    peak / bandwidth (`roofline.ridge_point`). `points`: [(label, intensity FLOP/byte)] to place."""
    accelerator, precision = check_accelerator(accelerator), check_precision(precision)
    dtype = precision.compute_dtype
    points = [(str(name), positive_float("points intensity", i)) for name, i in points]
    peak, bw = accelerator.peak(dtype), accelerator.hbm_bytes_per_s
    ridge = ridge_point(accelerator, dtype)
    table = (f"peak {peak / TFLOP:,.1f} TFLOP/s; bandwidth {bw / 1e12:.2f} TB/s; ridge point {ridge:,.1f} FLOP/byte"
             + "".join(f"\n{name}: {i:,.1f} FLOP/byte, {'compute' if i >= ridge else 'memory'}-bound"
                       for name, i in points))
    alt = (f"Log-log roofline of the {accelerator.name}: attainable TFLOP/s against arithmetic intensity. A sloped "
           f"line (memory-bound, {bw / 1e12:.2f} TB/s times the intensity) meets a flat line (compute-bound, "
           f"{peak / TFLOP:,.0f} TFLOP/s) at the ridge point, {ridge:,.0f} FLOP/byte, marked in red."
           + "".join(f" {name} sits at {i:,.0f} FLOP/byte, {'right' if i >= ridge else 'left'} of the ridge."
                     for name, i in points))
    return Plot(_draw_roofline(accelerator, dtype, points, WIDE_IN), table,
                {"ridge": ridge, "peak_flops_per_s": peak, "bandwidth_bytes_per_s": bw, "points": points},
                alt=alt, narrow=_draw_roofline(accelerator, dtype, points, NARROW_IN))


# ---------------------------------------------------------------------------------------------
# 15.2.1: one request's timeline
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RequestTimeline:
    """One request served alone after `queue_s` of waiting: prefill, then one decode step per token.
    TTFT = queue + prefill; ITL = the decode step; end-to-end = TTFT + (n_out - 1) * ITL."""

    queue_s: float
    prefill_s: float
    step_s: tuple            # each decode step's time (its context grows by one token a step)
    prompt_len: int

    @property
    def ttft_s(self) -> float:
        return self.queue_s + self.prefill_s

    @property
    def token_times_s(self) -> tuple:
        """When each output token appears: the first at the end of prefill, then one per step."""
        return tuple(self.ttft_s + float(t) for t in np.concatenate([[0.0], np.cumsum(self.step_s)]))

    @property
    def e2e_s(self) -> float:
        return self.token_times_s[-1]

    @property
    def mean_itl_s(self) -> float:
        return float(np.mean(self.step_s)) if self.step_s else 0.0


def request_timeline_times(model, accelerator, precision: Precision = BF16, *, prompt_len: int = 1024,
                           output_tokens: int = 6, queue_s: float = 0.0, batch: int = 1) -> RequestTimeline:
    """Prefill of `prompt_len` tokens (`latency.prefill_time_s`), then output_tokens - 1 decode steps,
    step i attending over prompt_len + i positions (`latency.decode_step_time_s` at `batch`)."""
    positive_int("prompt_len", prompt_len)
    positive_int("output_tokens", output_tokens)
    positive_float("queue_s", queue_s, allow_zero=True)
    positive_int("batch", batch)
    prefill = prefill_time_s(model, accelerator, prompt_len, 1, precision)
    steps = tuple(float(decode_step_time_s(model, accelerator, prompt_len + i, batch, precision))
                  for i in range(1, output_tokens))
    return RequestTimeline(float(queue_s), float(prefill), steps, int(prompt_len))


def _draw_timeline(tl: RequestTimeline, width_in: float) -> Figure:
    narrow = width_in < 5
    fig = Figure(figsize=(width_in, 2.6 if not narrow else 3.0), layout="constrained")
    ax = fig.subplots()
    y, h = 0.0, 0.5
    ms = 1 / MS
    segments = [("queue", 0.0, tl.queue_s, QUEUE_COLOR), ("prefill", tl.queue_s, tl.prefill_s, PREFILL_COLOR)]
    t = tl.ttft_s
    for i, s in enumerate(tl.step_s):
        segments.append((f"step {i + 1}" if not narrow else f"{i + 1}", t, s, DECODE_COLOR))
        t += s
    for name, start, dur, color in segments:
        if dur <= 0:
            continue
        ax.broken_barh([(start * ms, dur * ms)], (y, h), facecolors=color, edgecolors="white", lw=1)
        if name in ("queue", "prefill") or not narrow or len(tl.step_s) <= 4:
            ax.text((start + dur / 2) * ms, y + h / 2, name, ha="center", va="center", fontsize=FONT,
                    color="black" if color == QUEUE_COLOR else "white")
    for k, tt in enumerate(tl.token_times_s):
        ax.plot([tt * ms], [y + h + 0.08], "v", color="black", ms=5)
    ax.text(tl.token_times_s[0] * ms, y + h + 0.2, "token 1", ha="center", va="bottom", fontsize=FONT)
    ax.text(tl.token_times_s[-1] * ms, y + h + 0.2, f"token {len(tl.token_times_s)}", ha="center", va="bottom",
            fontsize=FONT)

    def span(x0, x1, yy, label, color):
        ax.add_patch(FancyArrowPatch((x0 * ms, yy), (x1 * ms, yy), arrowstyle="<->", mutation_scale=8,
                                     color=color, lw=1))
        ax.text((x0 + x1) / 2 * ms, yy - 0.06, label, ha="center", va="top", fontsize=FONT, color=color)
    span(0.0, tl.ttft_s, -0.15, f"TTFT {tl.ttft_s / MS:,.1f} ms", "black")
    if tl.step_s:
        t1 = tl.token_times_s[1]
        span(tl.token_times_s[0], t1, -0.75 if narrow else -0.15,
             f"ITL {tl.step_s[0] / MS:,.1f} ms", DECODE_COLOR)
    ax.set_ylim(-1.35 if narrow else -0.7, y + h + 0.75)
    ax.set_xlim(0, tl.e2e_s * ms * 1.03)
    ax.set_yticks([])
    for side in ("left", "right", "top"):
        ax.spines[side].set_visible(False)
    ax.set_xlabel("time since the request arrived (ms)", fontsize=FONT)
    ax.tick_params(labelsize=FONT)
    ax.set_title(_wrap(f"One request: end to end {tl.e2e_s / MS:,.1f} ms", width_in), fontsize=FONT + 1, loc="left")
    return fig


def request_timeline(model, accelerator, precision: Precision = BF16, *, prompt_len: int = 1024,
                     output_tokens: int = 6, queue_s: float = 0.0, batch: int = 1) -> Plot:
    """The life of one request on a time axis: waiting in the queue, prefill (ending at the first token:
    TTFT), then one decode step per further token (each step one ITL). Times from `latency`."""
    model, accelerator = check_model(model), check_accelerator(accelerator)
    tl = request_timeline_times(model, accelerator, precision, prompt_len=prompt_len,
                                output_tokens=output_tokens, queue_s=queue_s, batch=batch)
    table = (f"queue {tl.queue_s / MS:,.2f} ms; prefill of {prompt_len:,} tokens {tl.prefill_s / MS:,.2f} ms; "
             f"TTFT {tl.ttft_s / MS:,.2f} ms\n"
             f"decode steps (batch {batch}): " + ", ".join(f"{s / MS:,.2f}" for s in tl.step_s) + " ms; "
             f"end to end {tl.e2e_s / MS:,.2f} ms for {output_tokens} tokens")
    alt = (f"Timeline of one {model.name} request on one {accelerator.name}: a grey queue bar of "
           f"{tl.queue_s / MS:,.1f} ms, a blue prefill bar of {tl.prefill_s / MS:,.1f} ms ending at the first token "
           f"(TTFT {tl.ttft_s / MS:,.1f} ms), then {len(tl.step_s)} orange decode steps of about "
           f"{tl.mean_itl_s / MS:,.1f} ms, one token at the end of each (the ITL); {output_tokens} tokens in "
           f"{tl.e2e_s / MS:,.1f} ms.")
    return Plot(_draw_timeline(tl, WIDE_IN), table, {"timeline": tl}, alt=alt,
                narrow=_draw_timeline(tl, NARROW_IN))


# ---------------------------------------------------------------------------------------------
# 15.2.2: static vs continuous batching
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Slot:
    """Request `request` (index into the lengths) holds batch slot `slot` from step `start` (inclusive)
    to `end` (exclusive): one token per step."""

    request: int
    slot: int
    start: int
    end: int


def _check_lengths(lengths, slots):
    lengths = [positive_int("output_lens", n) for n in lengths]
    if not lengths:
        raise ValueError("output_lens must name at least one request (got an empty list)")
    positive_int("slots", slots)
    return lengths


def static_schedule(output_lens, slots: int) -> list[Slot]:
    """Requests in arrival order, `slots` at a time; a batch runs until its longest request ends, and only
    then does the next batch start (a finished request's slot idles meanwhile)."""
    lengths = _check_lengths(output_lens, slots)
    out, t = [], 0
    for first in range(0, len(lengths), slots):
        group = lengths[first:first + slots]
        out += [Slot(first + k, k, t, t + n) for k, n in enumerate(group)]
        t += max(group)
    return out


def continuous_schedule(output_lens, slots: int) -> list[Slot]:
    """Requests in arrival order; whenever a slot frees (its request has produced all its tokens), the
    next waiting request takes it at the next step (iteration-level scheduling)."""
    lengths = _check_lengths(output_lens, slots)
    free_at = [0] * min(slots, len(lengths))
    out = []
    for i, n in enumerate(lengths):
        k = min(range(len(free_at)), key=lambda s: (free_at[s], s))
        out.append(Slot(i, k, free_at[k], free_at[k] + n))
        free_at[k] += n
    return out


def schedule_steps(schedule) -> int:
    return max(s.end for s in schedule)


def slot_utilisation(schedule, slots: int) -> float:
    """Busy slot-steps over all slot-steps until the last request ends."""
    return sum(s.end - s.start for s in schedule) / (slots * schedule_steps(schedule))


def _draw_batching(static, cont, slots, step_s, width_in):
    narrow = width_in < 5
    fig = Figure(figsize=(width_in, 1.2 + 0.9 * slots * 0.55 * 2 + (0.4 if narrow else 0)), layout="constrained")
    axes = fig.subplots(2, 1, sharex=True)
    colors = [f"C{i % 10}" for i in range(max(s.request for s in static) + 1)]
    horizon = max(schedule_steps(static), schedule_steps(cont))
    for ax, sched, name in ((axes[0], static, "static"), (axes[1], cont, "continuous")):
        steps = schedule_steps(sched)
        for slot in range(slots):
            ax.broken_barh([(0, steps * step_s / MS)], (slot - 0.4, 0.8), facecolors="none", edgecolors="0.6",
                           hatch="///", lw=0.5)
        for s in sched:
            ax.broken_barh([(s.start * step_s / MS, (s.end - s.start) * step_s / MS)], (s.slot - 0.4, 0.8),
                           facecolors=colors[s.request], edgecolors="white", lw=1)
            ax.text((s.start + s.end) / 2 * step_s / MS, s.slot, f"R{s.request + 1}", ha="center", va="center",
                    fontsize=FONT, color="white")
        ax.axvline(steps * step_s / MS, color="black", lw=1, ls="--")
        util = slot_utilisation(sched, slots)
        ax.set_title(_wrap(f"{name}: done after {steps} steps, {steps * step_s / MS:,.0f} ms; slots busy {util:.0%}",
                           width_in), fontsize=FONT, loc="left")
        ax.set_yticks(range(slots), [f"slot {k + 1}" for k in range(slots)], fontsize=FONT)
        ax.set_ylim(slots - 0.5, -0.5)
        ax.tick_params(labelsize=FONT)
    axes[1].set_xlim(0, horizon * step_s / MS * 1.02)
    axes[1].set_xlabel("time (ms); hatched: an idle slot", fontsize=FONT)
    return fig


def batching_timeline(model, accelerator, output_lens, *, slots: int = 4, context_len: int = 1024,
                      precision: Precision = BF16) -> Plot:
    """The same requests (all waiting at t = 0, `output_lens` tokens each) decoded `slots` at a time,
    statically and continuously; every step takes `latency.decode_step_time_s` at batch `slots` and
    `context_len` (held fixed: the picture is about scheduling; prefill is left out)."""
    model, accelerator = check_model(model), check_accelerator(accelerator)
    lengths = _check_lengths(output_lens, slots)
    positive_int("context_len", context_len)
    step_s = float(decode_step_time_s(model, accelerator, context_len, slots, precision))
    static, cont = static_schedule(lengths, slots), continuous_schedule(lengths, slots)
    n_static, n_cont = schedule_steps(static), schedule_steps(cont)
    table = (f"step time {step_s / MS:.2f} ms at batch {slots}, context {context_len:,}; "
             f"{len(lengths)} requests, {sum(lengths)} tokens\n"
             f"static: {n_static} steps, {n_static * step_s / MS:,.1f} ms, slots busy {slot_utilisation(static, slots):.1%}\n"
             f"continuous: {n_cont} steps, {n_cont * step_s / MS:,.1f} ms, slots busy {slot_utilisation(cont, slots):.1%}")
    alt = (f"Two timelines, top static batching, bottom continuous batching, of {len(lengths)} requests "
           f"(R1 to R{len(lengths)}, {', '.join(map(str, lengths))} tokens) in {slots} slots, each step "
           f"{step_s / MS:.1f} ms. Static: a batch waits for its longest request, finished slots idle (hatched), "
           f"all done after {n_static} steps. Continuous: a freed slot takes the next request at once, all done "
           f"after {n_cont} steps.")
    return Plot(_draw_batching(static, cont, slots, step_s, WIDE_IN), table,
                {"static": static, "continuous": cont, "step_s": step_s}, alt=alt,
                narrow=_draw_batching(static, cont, slots, step_s, NARROW_IN))

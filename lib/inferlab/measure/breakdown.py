"""Where the time goes: one pass timed per operator with torch.profiler, beside the roofline and
the calibrated prediction of each operator.

Each linear layer of the model is wrapped (forward hooks) in a torch.profiler record_function
named after the library's operator (q_proj ... mlp_down, lm_head); SDPA is aten's
scaled_dot_product_attention; everything else inside the pass is 'uncounted' (norms, rotary,
activation, residual adds, cache writes, embedding, module calls: what the library leaves out).
Profiling adds a few microseconds per op, so the measured column runs a little slow; its shares
are what to read.
"""
from __future__ import annotations

import contextlib
import os

import numpy as np

from inferlab.measure.calibrate import LINEAR_OPS, pass_breakdown
from inferlab.base.text_tables import text_table

CLASSES = LINEAR_OPS + ("attention", "uncounted")
MODULE_OPS = {"attention.wq": "q_proj", "attention.wk": "k_proj", "attention.wv": "v_proj",
              "attention.wo": "o_proj", "feed_forward.w2": "mlp_down", "output": "lm_head"}
SDPA = "aten::scaled_dot_product_attention"
PREFIX = "inferlab::"


def _op_of(name: str, gated: bool) -> str | None:
    if name == "output":
        return "lm_head"
    for suffix, op in MODULE_OPS.items():
        if name.endswith("." + suffix):
            return op
    if name.endswith(".feed_forward.w1"):
        return "mlp_gate" if gated else "mlp_up"
    if name.endswith(".feed_forward.w3"):
        return "mlp_up"
    return None


def profile_pass(model, fn, *, repeats: int = 3) -> dict:
    """Seconds per operator class of `fn()` (one forward of `model`): of the profiled call with the
    median total among `repeats` (after one unprofiled warm-up), so the classes add up to its
    total ('uncounted' is the remainder): {'measured': {class: s}, 'measured_total_s': s}."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    handles, open_ = [], {}
    gated = model.cfg.gated_mlp
    for name, mod in model.named_modules():
        op = _op_of(name, gated)
        if op is None:
            continue

        def pre(m, args, op=op):
            rf = record_function(PREFIX + op)
            rf.__enter__()
            open_.setdefault(id(m), []).append(rf)

        def post(m, args, out):
            open_[id(m)].pop().__exit__(None, None, None)
        handles += [mod.register_forward_pre_hook(pre), mod.register_forward_hook(post)]
    rows = []
    try:
        fn()
        for _ in range(repeats):
            with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU]) as prof:
                with record_function(PREFIX + "step"):
                    fn()
            per = dict.fromkeys(CLASSES, 0.0)
            total = 0.0
            for ev in prof.events():
                if ev.name == PREFIX + "step":
                    total += ev.cpu_time_total / 1e6
                elif ev.name.startswith(PREFIX):
                    per[ev.name[len(PREFIX):]] += ev.cpu_time_total / 1e6
                elif ev.name == SDPA and not _inside_label(ev):
                    per["attention"] += ev.cpu_time_total / 1e6
            per["uncounted"] = max(total - sum(v for k, v in per.items() if k != "uncounted"), 0.0)
            rows.append((per, total))
    finally:
        for h in handles:
            h.remove()
    per, total = sorted(rows, key=lambda r: r[1])[len(rows) // 2]  # the call of median total
    return {"measured": {k: float(v) for k, v in per.items()}, "measured_total_s": float(total),
            "method": "torch.profiler, CPU time of each record_function / aten op, of the profiled "
                      f"call with the median total of {repeats}"}


@contextlib.contextmanager
def _quiet_stderr():
    """File descriptor 2 sent to /dev/null: torch 2.13's profiler logs every start and stop to it
    from C++ (no setting turns that off), which a notebook would store as stderr output.
    Python exceptions still propagate."""
    import sys

    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        yield
        return
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


def _inside_label(ev) -> bool:
    p = ev.cpu_parent
    while p is not None:
        if p.name.startswith(PREFIX) and p.name != PREFIX + "step":
            return True
        p = p.cpu_parent
    return False


def predicted_columns(profile: dict, cfg, precision, accelerator, entry: dict) -> dict:
    """The roofline and calibrated seconds of one breakdown entry, in the breakdown's classes
    (elementwise and overhead merged into 'uncounted'). The breakdown profiles the eager pass: a
    compiled run's residual (profile['residual_scope'] 'decode', the compiled step's own) is left
    out of its calibrated column, as the eager pass's residual was not measured."""
    if profile.get("residual_scope") == "decode":
        profile = {k: v for k, v in profile.items() if k not in ("residual_scope", "residual")}
        profile["residual_s"] = 0.0
    b = pass_breakdown(profile, cfg, precision, accelerator, entry["batch"], entry["q_len"],
                       entry["past_len"])
    out = {}
    for col in ("roofline", "calibrated"):
        d = b[col]
        out[col] = {k: float(d.get(k, 0.0)) for k in LINEAR_OPS + ("attention",)}
        out[col]["uncounted"] = float(d["elementwise"] + d["overhead"])
    return out


def _title(e: dict) -> str:
    if e["q_len"] > 1:
        return f"prefill B={e['batch']} S={e['q_len']}"
    return f"decode B={e['batch']} context={e['past_len'] + 1}"


def breakdown_table(run, which=None) -> str:
    """Per-operator ms of the run's profiled passes: measured (torch.profiler), roofline,
    calibrated, and each one's share of the measured pass. `which`: indices into the list. One pass
    is a table of its own; several are one table, a column per pass holding "measured / roofline /
    calibrated" (the shares follow from the total row), so that a page's audit stays short."""
    entries = [e for i, e in enumerate(run.data.get("breakdown") or []) if which is None or i in which]
    if not entries:
        return "no per-operator breakdown in this run"
    if len(entries) > 1:
        return _passes_table(entries)
    e = entries[0]
    m, r, c = e["measured"], e["roofline"], e["calibrated"]
    total = sum(m.values())
    rows = [(k, m[k] * 1e3, r[k] * 1e3, c[k] * 1e3, m[k] / total if total else float("nan"))
            for k in CLASSES if m[k] or r[k] or c[k]]
    rows.append(("total", total * 1e3, sum(r.values()) * 1e3, sum(c.values()) * 1e3, 1.0))
    return _title(e) + "\n" + text_table(
        ("operator", "measured ms", "roofline ms", "calibrated ms", "share"), rows,
        ("s", ".3g", ".3g", ".3g", ".0%"))


PASSES_PER_TABLE = 4   # columns of "measured/roofline/calibrated" that fit a 676 px text column at 11 px


def _passes_table(entries: list) -> str:
    """Several profiled passes side by side: a row per operator class, a column per pass (at most
    PASSES_PER_TABLE to a table, so that none scrolls sideways)."""
    cols = ("measured", "roofline", "calibrated")

    def cell(e, k=None):
        ms = [(sum(e[c].values()) if k is None else e[c][k]) * 1e3 for c in cols]
        return "/".join(f"{v:.0f}" if v >= 1000 else f"{v:.3g}" for v in ms)

    def head(e):
        return f"decode B={e['batch']} ctx {e['past_len'] + 1}" if e["q_len"] == 1 else f"prefill B={e['batch']} S={e['q_len']}"
    used = [k for k in CLASSES if any(e[c][k] for e in entries for c in cols)]
    tables = []
    for i in range(0, len(entries), PASSES_PER_TABLE):
        part = entries[i:i + PASSES_PER_TABLE]
        rows = [(k, *(cell(e, k) for e in part)) for k in used] + [("total", *(cell(e) for e in part))]
        tables.append(text_table(("operator", *(head(e) for e in part)), rows, ("s",) * (len(part) + 1)))
    return "ms per pass: measured/roofline/calibrated\n" + "\n\n".join(tables)


def prediction_error_table(run) -> str:
    """summary.prediction_error as a small table: median, p90 and max |measured/predicted - 1|."""
    pe = run.summary.get("prediction_error") or {}
    if not pe:
        return "no prediction error in this run"
    rows = [(k, v["median"], v["p90"], v["max"], v["n"]) for k, v in pe.items() if v.get("n")]
    return text_table(("prediction", "median error", "p90 error", "max error", "points"), rows,
                      ("s", ".1%", ".1%", ".1%", "d"))


def breakdown_plot(run, which=None):
    """Stacked bars: for each profiled pass, measured / calibrated / roofline seconds split by
    operator class. Returns the matplotlib Figure."""
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    entries = [e for i, e in enumerate(run.data.get("breakdown") or []) if which is None or i in which]
    # A bare Figure (no pyplot): a notebook shows it once, as the cell's value. At most two
    # panels a row (more wrap), the legend under them: the figure keeps a text column's width.
    n = max(len(entries), 1)
    ncols = min(n, 2)
    nrows = -(-n // ncols)
    fig = Figure(figsize=(3.2 * ncols + 0.2, 3.0 * nrows + 1.0), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    for ax in axes.flat[len(entries):]:
        fig.delaxes(ax)
    colors = colormaps["tab20"].colors
    for ax, e in zip(axes.flat, entries):
        bottoms = np.zeros(3)
        for j, k in enumerate(CLASSES):
            vals = np.array([e["measured"][k], e["calibrated"][k], e["roofline"][k]]) * 1e3
            ax.bar(["measured", "calibrated", "roofline"], vals, bottom=bottoms, color=colors[j % 20],
                   label=k)
            bottoms += vals
        ax.set_title(_title(e), fontsize=9)
        ax.set_ylabel("ms")
        ax.tick_params(axis="x", labelsize=9)
    if entries:
        handles, labels = axes.flat[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncols=3, fontsize=9)
    return fig


# Why a decode step jumps with batch: the linear layers' kernel regimes, read from the profile ----

PER_ROW = 0.75  # time(M) / time(1) >= PER_ROW * M: the kernel handles the rows one by one


def linear_regimes(run) -> dict:
    """The largest non-head linear layer of the run's profile at each row count M it timed up to
    8: seconds, weight bytes per second (the weights dominate a small-M product's traffic), and
    time(M) / time(1). Regimes: 'per-row' where time(M) >= 0.75 * M * time(1) (M matrix-vector
    products, each reading the weights again), 'weights once' otherwise."""
    prof = run.data.get("profile") or {}
    lin = prof.get("linear") or {}
    cfg = run.model()
    from inferlab.measure.calibrate import linear_shapes, shape_key
    shapes = {shape_key(k, n): (k, n) for name, (k, n) in linear_shapes(cfg).items() if name != "lm_head"}
    keys = [k for k in shapes if k in lin]
    if not keys:
        raise ValueError("this run has no linear-layer profile (recorded before operator profiles)")
    key = max(keys, key=lambda k: shapes[k][0] * shapes[k][1])
    k, n = shapes[key]
    pts = {p["size"]: p["time_s"] for p in lin[key]}
    if 1 not in pts:
        raise ValueError("this run's profile has no M = 1 point (recorded before row counts 1-8 were timed)")
    from inferlab.base.units import bytes_per_element
    wbytes = k * n * bytes_per_element(run.dtype)
    rows = []
    for m in sorted(x for x in pts if x <= 8):
        ratio = pts[m] / pts[1]
        rows.append({"rows": m, "time_s": pts[m], "weight_bytes_per_s": wbytes / pts[m], "vs_m1": ratio,
                     "regime": "per-row" if m > 1 and ratio >= PER_ROW * m else "weights once"})
    ce = run.data["ceilings"]
    return {"shape": (k, n), "dtype": run.dtype, "rows": rows,
            "copy_bytes_per_s": ce["copy_bytes_per_s"], "read_bytes_per_s": ce.get("read_bytes_per_s")}


def regime_sentence(run) -> str:
    """The regimes in words, every number from the run (Markdown)."""
    r = linear_regimes(run)
    k, n = r["shape"]
    one = r["rows"][0]
    bw = one["weight_bytes_per_s"]
    read = r["read_bytes_per_s"]
    s = (f"In {r['dtype']}, the {k:,} × {n:,} layer takes {one['time_s'] * 1e3:.2f} ms at M = 1: its weights "
         f"stream at {bw / 1e9:.1f} GB/s, {bw / r['copy_bytes_per_s']:.2f} of the copy ceiling")
    s += (f" and {bw / read:.2f} of a read-only stream ({read / 1e9:.1f} GB/s)." if read else ".")
    per_row = [x for x in r["rows"] if x["regime"] == "per-row"]
    if per_row:
        ms = ", ".join(str(x["rows"]) for x in per_row)
        ratios = ", ".join(f"{x['vs_m1']:.1f}×" for x in per_row)
        s += (f" At M = {ms} it takes {ratios} as long as at M = 1: the kernel runs the rows as separate "
              "matrix-vector products, reading every weight once per row, so a decode step at those batch "
              "sizes costs about B times the B = 1 step.")
        after = [x for x in r["rows"] if x["rows"] > per_row[-1]["rows"]]
        if after:
            a = after[0]
            last = r["rows"][-1]
            s += (f" From M = {a['rows']} a blocked matrix product reads the weights once: "
                  f"{a['vs_m1']:.1f}× the M = 1 time (its weights stream at "
                  f"{a['weight_bytes_per_s'] / 1e9:.1f} GB/s), then barely more with each row "
                  f"({last['vs_m1']:.1f}× at M = {last['rows']}). The jump in step time between B = 1 and "
                  f"B = {a['rows']} is this kernel switch, not the roofline, which has every batch size "
                  "read the weights once.")
    else:
        worst = max(r["rows"], key=lambda x: x["vs_m1"])
        s += (f" Up to M = {r['rows'][-1]['rows']} no row count takes more than {worst['vs_m1']:.2f}× the M = 1 "
              f"time (M = {worst['rows']}): the weights are read once whatever the batch, as the roofline assumes.")
    return s


def runs_with_regimes(runs, dtype: str | None = None) -> list:
    """The runs (oldest first) whose profile times linear layers at M = 1 (so linear_regimes can
    read them), optionally of one dtype."""
    out = []
    for r in runs:
        if dtype is not None and r.dtype != dtype:
            continue
        try:
            linear_regimes(r)
        except ValueError:
            continue
        out.append(r)
    return out


def regime_plot(runs):
    """Time of the largest linear layer against rows M = 1..8, relative to M = 1, one line per
    run, with the roofline's expectation (weights read once: flat at 1) and one read per row (M)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(5.6, 3.4), layout="constrained")
    ax = fig.subplots()
    ms = np.arange(1, 9)
    ax.plot(ms, ms, ":", color="grey", label="weights read once per row (time ∝ M)")
    ax.plot(ms, np.ones_like(ms), "--", color="black", label="roofline: weights read once")
    for r in runs:
        g = linear_regimes(r)
        ax.plot([x["rows"] for x in g["rows"]], [x["vs_m1"] for x in g["rows"]], "o-",
                label=f"{r.label}: {g['shape'][0]}×{g['shape'][1]}")
    ax.set_xlabel("rows M (tokens in the step: the batch size in decode)")
    ax.set_ylabel("time / time at M = 1")
    ax.set_ylim(0, 8.5)
    ax.grid(True, alpha=0.3)
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncols=1, fontsize=9)
    return fig


AT_READ_LIMIT = 0.8  # a kernel streaming weights at >= this fraction of the read-only stream


def bandwidth_sentence(run) -> str:
    """How much of the memory bandwidth the B = 1 decode step gets, against the copy ceiling and
    the read-only stream (the run's median estimate, and the stream timed in the same rounds where
    recorded: measure.paired), and whether its matrix-vector kernel is at the machine's read limit."""
    b1 = next((p for p in run.points("batch") if p["batch"] == 1), None) or run.points("itl")[0]
    ce = run.data["ceilings"]
    copy, read = ce["copy_bytes_per_s"], ce.get("read_bytes_per_s")
    achieved = b1["bytes"] / b1["median_s"]
    s = (f"At $B$ = 1 (context {b1['context_len']:,}) a decode step moves {b1['bytes'] / 1e9:.2f} GB in "
         f"{b1['median_s'] * 1e3:.1f} ms: {achieved / 1e9:.1f} GB/s, MBU {achieved / copy:.2f} against the "
         f"copy ceiling ({copy / 1e9:.1f} GB/s of reads and writes)")
    if not read:
        return s + "."
    s += f" and {achieved / read:.2f} against a read-only stream ({read / 1e9:.1f} GB/s, the median of the run's estimates)."
    pr = b1.get("paired")
    if pr:
        s += (f" Timed round by round beside the same stream ({pr['rounds']} rounds), it got {pr['mbu']:.2f} of "
              "what the stream read at that moment: the figure a drift of the host between the ceilings and "
              "the step cannot move.")
    g = linear_regimes(run)
    w = g["rows"][0]["weight_bytes_per_s"]
    if w >= AT_READ_LIMIT * read:
        s += (f" The largest layer alone streams its weights at {w / 1e9:.1f} GB/s, {w / read:.2f} of the "
              "read-only stream: the matrix-vector kernel is at this machine's read limit, and a decode step, "
              "which only reads, cannot go faster by better code; the copy ceiling overstates what reading "
              "alone can reach here.")
    else:
        s += (f" The largest layer alone streams its weights at {w / 1e9:.1f} GB/s, only {w / read:.2f} of "
              "the read-only stream: the matrix-vector kernel leaves bandwidth unused.")
    return s

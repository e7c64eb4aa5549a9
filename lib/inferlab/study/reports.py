"""Tables and sentences generated from validation records: one record's table and conclusion, the
runs of several records side by side, the live runs' spread, the engines compared and the repeats
summarised. Every number and every qualitative word comes from the records (`serving.study.records`);
nothing here runs an engine. The study's terms: docs/glossary.md.
"""
from __future__ import annotations

import numpy as np

from inferlab.study.checks import BOUNDS, STEP_SENSITIVITY
from inferlab.study.records import (PREDICTIONS, PREDICTION_KEYS, record_engine, record_step_model,
                                            METRIC_NAMES, ERROR_KEYS)


                              # on a 2-core host, so none overlaps the next


def quantile_plot(record: dict):
    """TTFT and ITL distributions (percentile curves), live against simulated, one colour per rate.

    The panels are stacked (each reads at a text column's width) and the legend sits under them:
    one entry per rate (its colour) and one per line style (live solid, simulated dashed)."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.ticker import NullFormatter

    fig = Figure(figsize=(6.6, 6.4), layout="constrained")
    axes = fig.subplots(2, 1)
    handles = []
    for i, r in enumerate(record["runs"]):
        q = r["quantiles"]
        c = f"C{i}"
        for ax, m in ((axes[0], "ttft_s"), (axes[1], "itl_s")):
            ax.plot(np.asarray(q["live"][m]) * 1e3, q["live"]["percent"], "-", color=c)
            ax.plot(np.asarray(q["simulated"][m]) * 1e3, q["simulated"]["percent"], "--", color=c)
        handles.append(Line2D([], [], color=c, label=f"{r['rate_per_s']:.2f}/s ({r['load']})"))
    handles += [Line2D([], [], color="0.3", ls="-", label="live"),
                Line2D([], [], color="0.3", ls="--", label="simulated")]
    for ax, label in ((axes[0], "TTFT"), (axes[1], "ITL")):
        ax.set_xlabel(f"{label} (ms)")
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())   # minor labels on a log axis collide
        ax.set_ylabel("percentile")
        ax.grid(True, which="both", alpha=0.3)
    fig.legend(handles=handles, loc="outside lower center", ncols=min(3, len(handles)), fontsize=9)
    return fig


def _moves(sens: dict, metric: str, p: str) -> str:
    a, b = sens[metric][p]
    return f"{a:+.0%}/{b:+.0%}" + (" (knife-edged)" if sens["knife_edge"][metric][p] else "")


def table(record: dict) -> str:
    """The comparison as text: one row per rate and metric."""
    lines = [f"live vs simulated ({record['config']['model']}, {record['config']['dtype']}, "
             f"{record['config']['policy']}, {record['device']['name']}); bounds: p50 within "
             f"{record['bounds']['p50']:.0%}, p99 within {record['bounds']['p99']:.0%}",
             f"{'rate/s':>7s} {'load':16s} {'n':>4s} {'metric':6s} {'live p50':>10s} {'sim p50':>10s} {'err':>7s} "
             f"{'live p99':>10s} {'sim p99':>10s} {'err':>7s}  (ms; n: requests)"]
    for r in record["runs"]:
        for m, label in (("ttft_s", "TTFT"), ("itl_s", "ITL")):
            c = r["comparison"][m]
            lines.append(f"{r['rate_per_s']:7.2f} {r['load']:16s} {r['requests']:4d} {label:6s} "
                         f"{c['p50']['live_s'] * 1e3:10.1f} {c['p50']['simulated_s'] * 1e3:10.1f} "
                         f"{c['p50']['error']:+7.1%} {c['p99']['live_s'] * 1e3:10.1f} "
                         f"{c['p99']['simulated_s'] * 1e3:10.1f} {c['p99']['error']:+7.1%}")
    lines.append("all within bounds" if record["within_bounds"] else "NOT all within bounds")
    if any("bracketed" in r for r in record["runs"]):  # records that kept the prediction without the probe
        judged = next(r.get("prediction", "probe-tracked") for r in record["runs"] if "bracketed" in r)
        lines.append(f"errors above: {judged} (the host's speed from a probe at every step"
                     + ("; steps' decode part x speed, prompt-chunk part x speed^0.5" if judged == "split" else "")
                     + "); bracketed "
                     "calibrations alone, TTFT p50 / p99, ITL p50 / p99:")
        for r in record["runs"]:
            if "bracketed" in r:
                c = r["bracketed"]["comparison"]
                lines.append(f"{r['rate_per_s']:7.2f} {r['load']:16s} " + " / ".join(
                    f"{c[m][p]['error']:+.1%}" for m, p, _ in ERROR_KEYS)
                    + f"   (probe {r['probe']['summary']['median_s'] * 1e3:.2f} ms median, {r['probe']['share']:.1%} "
                      f"of the steps; speed {min(r['probe']['speed_track']['speed']):.2f}-"
                      f"{max(r['probe']['speed_track']['speed']):.2f})")
    sens = [r for r in record["runs"] if "sensitivity" in r]
    if sens:
        lines.append(f"simulated percentiles with every step {sens[0]['sensitivity']['scale']:.0%} shorter / longer "
                     "(knife-edged: a move beyond the bound), TTFT p50, p99, ITL p50, p99:")
        for r in sens:
            lines.append(f"{r['rate_per_s']:7.2f} {r['load']:16s} " + ", ".join(
                _moves(r["sensitivity"], m, p) for m, p, _ in ERROR_KEYS))
    cal = record.get("summary", {}).get("calibration")
    if cal:
        lines.append(f"{cal['count']} calibrations, one before and one after each rate: speeds "
                     f"{', '.join(f'{x:.2f}' for x in cal['speeds'])} (on the first's fit); drift {cal['drift']:.0%}")
    return "\n".join(lines)


def _worst(record: dict, p: str) -> tuple:
    """(|error|, error, metric, run) of the largest |error| at percentile `p` over the bounded rates
    (all rates of records made before the overloaded rate was left unbounded) and metrics."""
    runs = [r for r in record["runs"] if r.get("bounded", True)] or record["runs"]
    return max(((abs(r["comparison"][m][p]["error"]), r["comparison"][m][p]["error"], m, r)
                for r in runs for m in METRIC_NAMES), key=lambda x: x[0])


def misses(record: dict) -> list:
    """[(rate_per_s, load, metric name, percentile, error)] of every comparison outside its bound."""
    return [(r["rate_per_s"], r["load"], METRIC_NAMES[m], p, r["comparison"][m][p]["error"])
            for r in record["runs"] if r.get("bounded", True) for m in METRIC_NAMES for p in ("p50", "p99")
            if abs(r["comparison"][m][p]["error"]) > record["bounds"][p]]


def runs_table(records: list) -> str:
    """One row per recorded validation: when, the pass residual its profile used, the worst error
    at p50 and p99 (metric and rate), the range of median predicted / measured step time over the
    rates, and whether every comparison was within its bound."""
    from inferlab.base.text_tables import text_table

    rows = []
    for rec in records:
        w50, w99 = _worst(rec, "p50"), _worst(rec, "p99")
        ratios = [r["step_time_error"]["median_ratio"] for r in rec["runs"]]
        rows.append((rec["created"][:16].replace("T", " "), rec["profile"].get("residual_s", 0.0) * 1e3,
                     f"{w50[1]:+.1%} {METRIC_NAMES[w50[2]]} @ {w50[3]['rate_per_s']:.2f}/s",
                     f"{w99[1]:+.1%} {METRIC_NAMES[w99[2]]} @ {w99[3]['rate_per_s']:.2f}/s",
                     f"{min(ratios):.2f}-{max(ratios):.2f}", "yes" if rec["within_bounds"] else "no"))
    return text_table(("recorded (UTC)", "residual ms", "worst p50 error", "worst p99 error",
                       "step pred/meas", "within bounds"), rows, ("s", ".1f", "s", "s", "s", "s"))


def repeatability(records: list) -> str:
    """How the recorded runs of one validation agree, in words (Markdown), every number from them."""
    if not records:
        return "No recorded validation run."
    ok = sum(rec["within_bounds"] for rec in records)
    s = f"{ok} of {len(records)} recorded runs are within both bounds."
    missed = [(rec, m) for rec in records for m in misses(rec)]
    if missed:
        loads = sorted({m[1] for _, m in missed})
        s += (" The misses: " + "; ".join(f"{m[2]} {m[3]} {m[4]:+.0%} at {m[0]:.2f}/s ({m[1]})"
                                          for _, m in missed)
              + f", all at the {' and '.join(loads)} rate{'s' if len(loads) > 1 else ''}.")
    ratios = [r["step_time_error"]["median_ratio"] for rec in records for r in rec["runs"]]
    side = ("shorter than the live ones in every run and at every rate" if max(ratios) < 1 else
            "longer than the live ones in every run and at every rate" if min(ratios) > 1 else
            "on both sides of the live ones")
    s += (f" The simulated steps were {side} (median predicted / measured {min(ratios):.2f} to "
          f"{max(ratios):.2f}): the profile is timed minutes before the live runs on a machine whose speed "
          "drifts, and a server a few percent slower than predicted queues disproportionately longer near "
          "and beyond its capacity.")
    return s


def capacity_uncertainty(records: list) -> dict:
    """The simulator's own error, carried to a capacity, from the recorded validations.

    At a fixed batch a server's capacity scales as 1 / step time, so a simulated step time off by
    the ratio r = predicted / measured puts a simulated capacity off by 1/r - 1. Over every recorded
    run and rate (each run's median ratio):

        rel_error = max |1 / r - 1|,   sign_changes = (min r < 1 < max r)

    `sign_changes` says whether the error flips sign between runs: a bias that flips cannot be
    counted on to cancel between two simulated deployments. Raises on no records."""
    if not records:
        raise ValueError("records must hold at least one recorded validation; got none")
    ratios = [float(r["step_time_error"]["median_ratio"]) for rec in records for r in rec["runs"]]
    if not ratios or any(not np.isfinite(x) or x <= 0 for x in ratios):
        raise ValueError(f"records must hold positive finite step-time ratios; got {ratios!r}")
    return {"rel_error": max(abs(1 / x - 1) for x in ratios), "ratio_min": min(ratios),
            "ratio_max": max(ratios), "sign_changes": min(ratios) < 1 < max(ratios),
            "runs": len(records)}


def conclusion(record: dict) -> str:
    """What the comparison says, in words, every number from the record (Markdown)."""
    worst = {p: _worst(record, p) for p in ("p50", "p99")}
    name = METRIC_NAMES
    steps = [r["step_time_error"]["median_abs"] for r in record["runs"]]
    rates = ", ".join(f"{r['rate_per_s']:.2f} ({r['load']})" for r in record["runs"])
    c = record["config"]
    fitted = record_step_model(record) == "fitted"
    how = ("the operator profile" if not fitted else "a step time fitted to calibrations of that engine, one "
           "before and one after each rate" if "calibrations" in record else
           "a step time fitted to a calibration run of that engine")
    if any("probe" in r for r in record["runs"]):
        how += ", scaled over time by the host's speed from a probe timed at every step of the live run"
    s = (f"At {len(record['runs'])} rates, {rates} requests/s, the live {c['model']} ({c['dtype']}, "
         f"{c['policy']}, {c['max_num_seqs']} {'requests per step' if c['policy'] == 'transformers-fifo' else 'slots'})"
         f" and its simulation on {how} "
         f"differ by at most "
         f"{worst['p50'][0]:.0%} at the median ({name[worst['p50'][2]]} at {worst['p50'][3]['rate_per_s']:.2f}/s: "
         f"simulated {worst['p50'][1]:+.0%}) and {worst['p99'][0]:.0%} at p99 ({name[worst['p99'][2]]} at "
         f"{worst['p99'][3]['rate_per_s']:.2f}/s: {worst['p99'][1]:+.0%}). The bounds are "
         f"{record['bounds']['p50']:.0%} and {record['bounds']['p99']:.0%}: ")
    s += ("**within both**." if record["within_bounds"] else "**not met**: the simulator does not yet predict "
          "this server within them.")
    free = [r for r in record["runs"] if not r.get("bounded", True)]
    if free:
        s += " Not held to them: " + "; ".join(
            f"{r['rate_per_s']:.2f}/s ({r['fraction']:.2f}x capacity), TTFT p50 {r['comparison']['ttft_s']['p50']['error']:+.0%}"
            f" and p99 {r['comparison']['ttft_s']['p99']['error']:+.0%}, ITL p50 "
            f"{r['comparison']['itl_s']['p50']['error']:+.0%} and p99 {r['comparison']['itl_s']['p99']['error']:+.0%}"
            for r in free) + ", beyond capacity, where the queue grows without limit."
    ratios = [r["step_time_error"]["median_ratio"] for r in record["runs"]]
    side = ("shorter than measured" if max(ratios) < 1 else "longer than measured" if min(ratios) > 1
            else "on both sides of the measurement")
    s += (f" Step by step, the {'fitted step time' if fitted else 'profile'}'s prediction of each live step's duration is off by a median "
          f"{min(steps):.0%} to {max(steps):.0%} across the rates, {side} (median predicted / measured "
          f"{min(ratios):.2f} to {max(ratios):.2f}). Near saturation a few percent of step time matter most: "
          "the queueing delay grows like 1 / (1 - load), so a server that is slightly slower than predicted "
          "sits closer to its capacity than the simulation and queues longer.")
    return s


def all_served(record: dict) -> bool:
    """True if, at every rate, the live server and the simulator both finished every request."""
    return all(r["live"]["completed"] == r["simulated"]["completed"] == r["requests"] for r in record["runs"])


def live_spread(values) -> float:
    """Run-to-run spread of a live percentile over repeats: (max - min) / median."""
    v = np.asarray(values, dtype=float)
    if v.size == 0 or not np.all(np.isfinite(v)) or np.any(v <= 0):
        raise ValueError(f"values must be positive finite percentiles of at least one run; got {values!r}")
    return float((v.max() - v.min()) / np.median(v))


def engines_summary(records: list) -> dict:
    """The recorded validations of every engine set side by side, per fraction of capacity.

    {engine ('inferlab (fitted step time)' for our loop's bracketed runs): {"version", "repeats": number of records, "fractions": {fraction (2 decimals):
      {"bounded", "error": {ttft_p50: [per repeat], ...}, "live_spread": {ttft_p50: (max - min) /
      median of the live percentile over the repeats, ...}, "within": [per repeat: every error within
      its bound], "step_ratio": [per repeat: median predicted / measured step time], "replay": [per
      repeat that has one: (simulated steps matched by a live step of the same work, simulated
      steps, largest |error| of the simulation on the live step times)], "requests": [per repeat:
      requests served at that rate], "within_first_calibration": [per bracketed repeat: every
      error within its bound had the first calibration alone set the step time], "live_between": [per
      bracketed repeat: the live run's speed within its two calibrations' speeds], for probe-tracked
      repeats (serving.study.hostspeed): "bracketed_error" {ttft_p50: [...], ...} and "within_bracketed"
      [...] (the same run predicted without the probe), "within_tracked" [...] (with it), "probe_speed" [(min, max) of its speed
      track]}}, "drift": [per bracketed repeat: how much its calibrations moved,
      serving.study.bracketing.drift], "probe_share": [per probe-tracked repeat: the probe's share of the
      steps' time]}}. The "error" and "within" of a probe-tracked repeat are the probe-tracked ones.
    Records made before engines count as 'inferlab'; only records with a summary (rates set as
    fractions) are used; records made before bracketing have no drift or first-calibration errors."""
    out: dict = {}
    for rec in records:
        if "summary" not in rec:
            continue
        name = record_engine(rec)
        if name == "inferlab" and record_step_model(rec) == "fitted":
            name = "inferlab (fitted step time)"  # beside, not mixed with, its runs on the operator profile
        e = out.setdefault(name, {"version": rec["summary"]["engine_version"], "repeats": 0,
                                  "fractions": {}, "drift": [], "probe_share": []})
        e["repeats"] += 1
        if "calibration" in rec["summary"]:
            e["drift"].append(float(rec["summary"]["calibration"]["drift"]))
        if "probe" in rec["summary"]:
            e["probe_share"].append(float(rec["summary"]["probe"]["share"]))
        for run in rec["runs"]:
            f = e["fractions"].setdefault(round(float(run["fraction"]), 2), {
                "bounded": bool(run["bounded"]), "error": {k: [] for *_, k in ERROR_KEYS},
                "live": {k: [] for *_, k in ERROR_KEYS}, "within": [], "step_ratio": [], "replay": [],
                "requests": [], "within_first_calibration": [], "live_between": [], "within_bracketed": [], "within_tracked": [],
                "bracketed_error": {k: [] for *_, k in ERROR_KEYS}, "probe_speed": [], "knife_edge": []})
            # per repeat (aligned with "error"): the keys a uniform 5 % step error moves past their bound;
            # None for a repeat recorded before the sensitivity was
            ke = run.get("sensitivity", {}).get("knife_edge")
            f["knife_edge"].append(None if ke is None else [k for m, p, k in ERROR_KEYS if ke[m][p]])
            f["step_ratio"].append(float(run["step_time_error"]["median_ratio"]))
            f["requests"].append(int(run["requests"]))
            if "live_speed" in run:  # the live run's speed inside the range of its two brackets' speeds?
                b = [rec["calibrations"][k]["speed"] for k in run["calibrations"]]
                f["live_between"].append(min(b) <= run["live_speed"] <= max(b))
            if "bracketed" in run:  # a probe-tracked run that kept the bracketed prediction's errors beside
                bc = run["bracketed"]["comparison"]
                for m, p, k in ERROR_KEYS:
                    f["bracketed_error"][k].append(float(bc[m][p]["error"]))
                f["within_bracketed"].append(all(abs(bc[m][p]["error"]) <= rec["bounds"][p] for m, p, _ in ERROR_KEYS))
            if "probe" in run:
                sp = run["probe"]["speed_track"]["speed"]
                f["probe_speed"].append((float(min(sp)), float(max(sp))))
            if "first_calibration_only" in run:
                f["within_first_calibration"].append(all(
                    abs(run["first_calibration_only"][m][p]["error"]) <= rec["bounds"][p] for m, p, _ in ERROR_KEYS))
            if "replay" in run:  # (matched steps, steps, largest |error| with the live step times)
                rp = run["replay"]
                f["replay"].append((int(rp["matched"]), int(rp["steps"]), max(
                    abs(rp["comparison"][m][p]["error"]) for m, p, _ in ERROR_KEYS)))
            ok = True
            for m, p, k in ERROR_KEYS:
                c = run["comparison"][m][p]
                f["error"][k].append(float(c["error"]))
                f["live"][k].append(float(c["live_s"]))
                ok &= abs(c["error"]) <= rec["bounds"][p]
            f["within"].append(bool(ok))
            if "probe" in run:
                f["within_tracked"].append(bool(ok))
    for e in out.values():
        for f in e["fractions"].values():
            f["live_spread"] = {k: live_spread(v) for k, v in f.pop("live").items()}
    return out


def engines_table(summary: dict) -> str:
    """engines_summary as text: one row per engine and fraction; each error as its range over the
    repeats, the live spread beside it."""
    from inferlab.base.text_tables import text_table
    rows = []
    for name, e in summary.items():
        for frac, f in sorted(e["fractions"].items()):
            cells = []
            for *_, k in ERROR_KEYS:
                errs = f["error"][k]
                cells.append(f"{min(errs):+.0%}..{max(errs):+.0%} ({f['live_spread'][k]:.0%})")
            n = f["requests"]
            rows.append((f"{name} {e['version']}", f"{frac:.2f}x" + ("" if f["bounded"] else " (unbounded)"),
                         f"{min(n)}" if min(n) == max(n) else f"{min(n)}-{max(n)}",
                         *cells, f"{sum(f['within'])}/{len(f['within'])}"))
    return text_table(("engine", "load", "requests", "TTFT p50 err (spread)", "TTFT p99 err (spread)",
                       "ITL p50 err (spread)", "ITL p99 err (spread)", "repeats within"), rows,
                      ("s",) * 8)


def probe_table(records: list) -> str:
    """The probe-tracked records (serving.study.hostspeed) run by run: per repeat and rate, the four errors
    (TTFT p50 / p99, ITL p50 / p99) of the judged probe prediction and bracketed, each marked * where outside its bound,
    the probe's share of the live steps' time and the range of its speed track."""
    from inferlab.base.text_tables import text_table
    rows = []
    for i, rec in enumerate([r for r in records if any("probe" in x for x in r["runs"])]):
        for r in rec["runs"]:
            if "probe" not in r:
                continue
            cells = []
            for cmp in (r["comparison"], r.get("bracketed", {}).get("comparison")):
                cells.append("-" if cmp is None else " / ".join(f"{cmp[m][p]['error']:+.0%}" + ("*" if abs(cmp[m][p]["error"]) >
                                        rec["bounds"][p] else "") for m, p, _ in ERROR_KEYS))
            sp = r["probe"]["speed_track"]["speed"]
            rows.append((rec["created"][:16].replace("T", " "), f"{r['fraction']:.2f}x" +
                         ("" if r["bounded"] else " (unbounded)"), *cells, f"{r['probe']['share']:.1%}",
                         f"{min(sp):.2f}-{max(sp):.2f}"))
    return text_table(("recorded (UTC)", "load", "judged err", "bracketed err", "probe share",
                       "speed"), rows, ("s",) * 6)


def _span(lo: float, hi: float, fmt: str) -> str:
    """'lo to hi' in `fmt`, or the one value where both print alike ('1.5%', not '1.5% to 1.5%')."""
    a, b = format(lo, fmt), format(hi, fmt)
    return a if a == b else f"{a} to {b}"


def _pct(x: float) -> str:
    """A signed whole percent with a typographic minus (−7, +0, +61)."""
    return f"{x:+.0%}".replace("-", "\u2212").rstrip("%")


def repeats_markdown(records: list) -> str:
    """The probe-tracked records as a Markdown table, one row per repeat and prediction (the judged
    one, the other probe prediction where the record has it, bracketed) and one column per rate: TTFT p50 / p99, ITL p50 / p99 errors in %, an error outside
    its bound at a bounded rate in bold, a percentile the run's `sensitivity` calls knife-edged marked †, and ✓ where
    all four are within their bounds. The README's table is this function's output (a test checks)."""
    recs = [r for r in records if any("probe" in x for x in r["runs"])]
    if not recs:
        return "No probe-tracked record."
    fr = [r for r in recs[0]["runs"]]
    head = "| run | " + " | ".join(f"{r['fraction']:.2g}x" + ("" if r["bounded"] else " (not bounded)")
                                   for r in fr) + " |"
    lines = [head, "|---" * (len(fr) + 1) + "|"]
    for i, rec in enumerate(recs, 1):
        judged = next(r.get("prediction", "probe-tracked") for r in rec["runs"] if "probe" in r)
        rows = [(f"{judged} (judged)", None)] + [(label, key) for label, key in [
            (k, PREDICTION_KEYS[k]) for k in PREDICTIONS if k != judged] + [("bracketed", "bracketed")]
            if all(key in r for r in rec["runs"])]
        for label, key in rows:
            cells = []
            for r in rec["runs"]:
                cmp = r["comparison"] if key is None else r[key]["comparison"]
                edge = r.get("sensitivity", {}).get("knife_edge", {}) if key is None else {}
                vals = []
                for m, p, _ in ERROR_KEYS:
                    e = cmp[m][p]["error"]
                    v = _pct(e) + ("\u2020" if edge.get(m, {}).get(p) else "")
                    vals.append(f"**{v}**" if r["bounded"] and abs(e) > rec["bounds"][p] else v)
                ok = all(abs(cmp[m][p]["error"]) <= rec["bounds"][p] for m, p, _ in ERROR_KEYS)
                cells.append(" / ".join(vals) + " %" + (" \u2713" if ok and r["bounded"] else ""))
            lines.append(f"| {i}, {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def engines_conclusion(summary: dict) -> str:
    """What the engines' recorded validations say, in words (Markdown), every number from `summary`
    (engines_summary): per engine, how many (repeat, bounded rate) pairs met both bounds, the worst
    bounded error, how many bounded errors lie inside the live run-to-run spread, and the median
    step-time ratio's range."""
    if not summary:
        return "No recorded validation with an engine summary."
    parts = []
    for name, e in summary.items():
        bounded = {f: x for f, x in e["fractions"].items() if x["bounded"]}
        if not bounded:
            continue
        pairs = sum(len(x["within"]) for x in bounded.values())
        ok = sum(sum(x["within"]) for x in bounded.values())
        worst = max(((abs(v), v, k, f) for f, x in bounded.items() for k, vs in x["error"].items() for v in vs),
                    key=lambda t: t[0])
        inside = sum(abs(v) <= x["live_spread"][k] for x in bounded.values() for k, vs in x["error"].items()
                     for v in vs)
        n_err = sum(len(vs) for x in bounded.values() for vs in x["error"].values())
        ratios = [r for x in e["fractions"].values() for r in x["step_ratio"]]
        replays = [r for x in e["fractions"].values() for r in x["replay"]]
        replay = "" if not replays else (
            f" Replayed on the live step times, the simulated schedule matched the live one step for step in "
            f"{sum(m == n for m, n, _ in replays)} of {len(replays)} runs ({sum(m for m, _, _ in replays)} of "
            f"{sum(n for _, n, _ in replays)} steps), with latency errors of at most {max(x for *_, x in replays):.1%}.")
        first = [w for x in bounded.values() for w in x["within_first_calibration"]]
        if e["drift"]:
            replay += (f" Its calibrations, one before and one after each rate, moved by "
                       f"{_span(min(e['drift']), max(e['drift']), '.0%')} within a repeat (slowest over fastest - 1)")
            replay += (f"; had the first calibration alone set the step time, {sum(first)} of {len(first)} pairs "
                       "would have been within both bounds." if first else ".")
            between = [w for x in bounded.values() for w in x["live_between"]]
            if between:
                replay += (f" The live run's own speed (on the first calibration's fit) lay between its two "
                           f"brackets' speeds in {sum(between)} of {len(between)} bounded runs; a change of speed that neither "
                           "calibration saw is one bracketing cannot cancel.")
        tracked = [w for x in bounded.values() for w in x["within_tracked"]]
        if tracked:
            ok_t, alone = sum(tracked), [w for x in bounded.values() for w in x["within_bracketed"]]
            speeds = [s for x in e["fractions"].values() for s in x["probe_speed"]]
            replay += (f" In {len(e['probe_share'])} repeat{'s' if len(e['probe_share']) != 1 else ''} the "
                       f"prediction followed the host with a probe timed inside the engine's every step "
                       f"(its cost {_span(min(e['probe_share']), max(e['probe_share']), '.1%')} of the steps' time; the "
                       f"host's speed on it {_span(min(a for a, _ in speeds), max(b for _, b in speeds), '.2f')} of the "
                       f"calibrations'): {ok_t} of {len(tracked)} of those pairs within both bounds with it"
                       + (f", {sum(alone)} of {len(alone)} with the bracketing calibrations alone." if alone else "."))
        edged = [(x, i) for x in bounded.values() for i, ke in enumerate(x["knife_edge"]) if ke is not None]
        if edged:
            miss = [(k, k in x["knife_edge"][i]) for x, i in edged for m, p, k in ERROR_KEYS
                    if abs(x["error"][k][i]) > BOUNDS[p]]
            n_edge = sum(len(x["knife_edge"][i]) for x, i in edged)
            replay += (f" In the {len(edged)} (repeat, rate) pairs that recorded it, a uniform {STEP_SENSITIVITY:.0%} "
                       f"step-time error would move {n_edge} of {4 * len(edged)} simulated percentiles past their "
                       f"bound (knife-edged)" + (f"; {sum(e for _, e in miss)} of {len(miss)} misses among them at "
                                                 "such a percentile." if miss else "; none of them missed."))
        n = [k for x in bounded.values() for k in x["requests"]]
        replay += (f" Each TTFT p99 is taken over {min(n)}{'' if min(n) == max(n) else f' to {max(n)}'} requests"
                   + (": it lies between the two slowest, so one request decides it." if max(n) <= 101 else "."))
        label = {"ttft_p50": "TTFT p50", "ttft_p99": "TTFT p99", "itl_p50": "ITL p50", "itl_p99": "ITL p99"}
        parts.append(
            f"**{name} {e['version']}**: {e['repeats']} recorded repeat{'s' if e['repeats'] != 1 else ''}; "
            f"{ok} of {pairs} (repeat, rate) pairs at {', '.join(f'{f:.2f}x' for f in sorted(bounded))} capacity "
            f"within both bounds; the worst error {worst[1]:+.0%} ({label[worst[2]]} at {worst[3]:.2f}x); "
            f"{inside} of {n_err} errors no larger than the live runs' own spread at that rate; the simulated "
            f"steps {_span(min(ratios), max(ratios), '.2f')} of the measured ones (median per run)." + replay)
    return "\n".join(f"- {p}" for p in parts)

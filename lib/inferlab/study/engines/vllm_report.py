"""The vLLM validations as tables and sentences, generated from their records: the runs and their
errors, the disturbed runs the repeat rule kept, each prediction's pieces taken away in turn, the
engine's speed through each run, and the conclusion. Nothing here runs the engine
(`serving.study.engines.vllm` does; `serving.study.engines.vllm_validate` is the pipeline).
"""
from __future__ import annotations

import numpy as np

from inferlab.study.engines.vllm_disturbances import DISTURBED_WAIT_S, SLOW_START_RATIO, disturbances


BUNCHED_GAP_S = 0.5e-3   # a gap between tokens this short is bunched delivery (vllm_validate.VLLM_BUNCHED_GAP_S)
VLLM_ERROR_COLUMNS = (("ttft_s", "p50"), ("ttft_s", "p99"), ("itl_s", "p50"), ("itl_s", "p99"))


def runs_markdown(records: list) -> str:
    """The vLLM validations `records` (validate_vllm's records) as one Markdown table: a row per
    (record, rate) with the four errors (simulated / live - 1, in %; bold where a bounded rate is
    outside its bound; a live percentile under 0.5 ms, shorter than any step, reads 'live ≈ 0'), the
    share of live token gaps under 0.5 ms (bunched delivery), and the engine steps vLLM's histogram
    counted against the simulator's; then a line counting the bounded (record, rate) pairs within all
    four bounds and, per error, how many were within its bound."""
    if not records:
        raise ValueError("records must hold at least one vLLM validation record; got none")
    head = ("| run | load | rate/s | TTFT p50 | TTFT p99 | ITL p50 | ITL p99 | gaps < 0.5 ms | steps vLLM / sim |\n"
            "|---|---|---|---|---|---|---|---|---|")
    lines, pairs, within, per = [head], 0, 0, {k: 0 for k in VLLM_ERROR_COLUMNS}
    extra_runs = extra_within = 0   # the disturbed runs the repeat rule kept
    for i, rec in enumerate(records, 1):
        if rec.get("summary", {}).get("engine") != "vllm":
            raise ValueError(f"records[{i - 1}] is not a vLLM validation (summary.engine != 'vllm')")
        for run in rec["runs"]:
            cmp, bounded = run["comparison"], run["bounded"]
            cells = []
            for m, p in VLLM_ERROR_COLUMNS:
                e = cmp[m][p]["error"]
                ok = abs(e) <= rec["bounds"][p]
                per[(m, p)] += bounded and ok
                text = f"{e * 100:+.0f}%".replace("-", "\u2212")
                if cmp[m][p]["live_s"] < BUNCHED_GAP_S:  # no step is this short: a delivery artefact, not a step
                    text = "(live \u2248 0)"
                cells.append(f"**{text}**" if bounded and not ok else text)
            steps = run.get("engine_steps") or {}   # counted by vLLM's step log
            if not steps and run.get("steps_by_tokens"):  # records before it: vLLM's histogram of tokens per step
                steps = {k: sum(run["steps_by_tokens"][k]) for k in ("live", "simulated")}
            step_cell = (f"{steps['live']} / {steps['simulated']}" if steps else "n/a")
            load = run["load"] + ("" if bounded else " (not bounded)")
            kept = run.get("disturbed_attempts") or []
            if kept:   # the repeat rule (vllm_validate.VLLM_REPEAT_DISTURBED) served this rate again
                load += f", served again after {len(kept)} disturbed run{'s' if len(kept) > 1 else ''}"
                extra_runs += bounded * len(kept)
                extra_within += sum(bool(bounded and a["comparison"] and a["comparison"]["within_bounds"])
                                    for a in kept)
            lines.append(f"| {i} | {load} | {run['rate_per_s']:.2f} | " + " | ".join(cells)
                         + f" | {run['bunched_fraction']:.0%} | {step_cell} |")
            pairs += bounded
            within += bounded and cmp["within_bounds"]
    counts = ", ".join(f"{m.split('_')[0].upper()} {p} {n} of {pairs}" for (m, p), n in per.items())
    lines.append("")
    lines.append(f"Bounded (run, rate) pairs within all four bounds: {within} of {pairs}. Within each bound: {counts}.")
    if extra_runs:
        lines.append(f"Counting the {extra_runs} disturbed bounded run{'s' if extra_runs > 1 else ''} the repeat rule "
                     f"served again and kept, {within + extra_within} of {pairs + extra_runs} bounded runs were within "
                     "all four bounds.")
    return "\n".join(lines)


def disturbed_markdown(records: list) -> str:
    """The disturbed runs the repeat rule (vllm_validate.VLLM_REPEAT_DISTURBED) served again and kept, as one
    Markdown table: a row per disturbed run (record, rate, which try), what disturbed it, and its four
    errors against the same prediction as the judged run's (bold outside a bound of a bounded rate;
    'n/a' where a live percentile was 0); then the judged run of the same rate. '' where the records kept
    none."""
    lines = ["| run | load | try | disturbed by | TTFT p50 | TTFT p99 | ITL p50 | ITL p99 |",
             "|---|---|---|---|---|---|---|---|"]

    def cells(cmp, bounded, bounds):
        if cmp is None:
            return ["n/a"] * 4
        out = []
        for m, p in VLLM_ERROR_COLUMNS:
            e = cmp[m][p]["error"]
            text = f"{e * 100:+.0f}%".replace("-", "\u2212")
            out.append(f"**{text}**" if bounded and abs(e) > bounds[p] else text)
        return out

    for i, rec in enumerate(records, 1):
        for run in rec["runs"]:
            kept = run.get("disturbed_attempts") or []
            for j, a in enumerate(kept, 1):
                lines.append(f"| {i} | {run['load']} | {j} | {'; '.join(a['disturbances'])} | "
                             + " | ".join(cells(a["comparison"], run["bounded"], rec["bounds"])) + " |")
            if kept:
                why = "; ".join(run.get("disturbances") or []) or "nothing (judged)"
                lines.append(f"| {i} | {run['load']} | {len(kept) + 1} | {why} | "
                             + " | ".join(cells(run["comparison"], run["bounded"], rec["bounds"])) + " |")
    return "\n".join(lines) if len(lines) > 2 else ""


VARIANTS = (("comparison", "judged: fit, spreads, front end"),
            ("frontend_medians", "front end at its medians"),   # records from the sampled front end on
            ("deterministic", "without the spreads"), ("engine_only", "without the front end either"))


def pieces_markdown(records: list) -> str:
    """What each piece of the step-log prediction does (serving.study.served), per bounded (record, rate)
    of vLLM validations made with the step log: the four errors of the judged prediction, of the same with
    the front end's delays at their medians (records that sample them, serving.study.served.SampledFrontend),
    of the same fit without the spreads (steps' and front end's), and without the front end's delays too;
    a bold error is outside its bound. Then, per variant, how many bounded pairs were within all four
    bounds (of the pairs that have it)."""
    rows = [r for r in records if r.get("profile", {}).get("kind") == "vllm-steplog-fitted"]
    if not rows:
        raise ValueError("records must hold at least one vLLM validation made with the step log; got none")
    lines = ["| run | load | prediction | TTFT p50 | TTFT p99 | ITL p50 | ITL p99 |", "|---|---|---|---|---|---|---|"]
    within, pairs = {key: 0 for key, _ in VARIANTS}, {key: 0 for key, _ in VARIANTS}
    for i, rec in enumerate(rows, 1):
        for run in rec["runs"]:
            if not run["bounded"]:
                continue
            for key, label in VARIANTS:
                if key not in run:
                    continue
                pairs[key] += 1
                cells, ok = [], True
                for m, p in VLLM_ERROR_COLUMNS:
                    e = run[key][m][p]["error"]
                    inside = abs(e) <= rec["bounds"][p]
                    ok &= inside
                    text = f"{e * 100:+.0f}%".replace("-", "\u2212")
                    cells.append(text if inside else f"**{text}**")
                within[key] += ok
                lines.append(f"| {i} | {run['load']} | {label} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("Bounded (run, rate) pairs within all four bounds: " + "; ".join(
        f"{label} {within[key]} of {pairs[key]}" for key, label in VARIANTS if pairs[key]) + ".")
    return "\n".join(lines)


def steplog_conclusion(records: list) -> str:
    """What the step-log repeats say, in sentences built from them: how many bounded (run, rate) pairs
    were within all four bounds, the largest p50 and p99 errors and where, the front end's measured
    delays, and what taking away the spread and the front end does to the errors (pieces_markdown)."""
    rows = [r for r in records if r.get("profile", {}).get("kind") == "vllm-steplog-fitted"]
    if not rows:
        raise ValueError("records must hold at least one vLLM validation made with the step log; got none")
    bounded = [(i, run, rec) for i, rec in enumerate(rows, 1) for run in rec["runs"] if run["bounded"]]
    within = sum(run["comparison"]["within_bounds"] for _, run, _ in bounded)

    def worst(key, p):
        e = [(abs(run[key][m][p]["error"]), run[key][m][p]["error"], m, i, run["load"])
             for i, run, _ in bounded for m in ("ttft_s", "itl_s")]
        return max(e)

    parts = [f"Over {len(rows)} repeat{'s' if len(rows) != 1 else ''}, {within} of {len(bounded)} bounded "
             f"(run, rate) pairs had all four errors within their bounds."]
    for p, bound in (("p50", rows[0]["bounds"]["p50"]), ("p99", rows[0]["bounds"]["p99"])):
        _, e, m, i, load = worst("comparison", p)
        parts.append(f"The largest {p} error was {e:+.0%} ({m.split('_')[0].upper()}, run {i}, {load}; bound "
                     f"{bound:.0%}).")
    ratios = [float(run["step_time_error"]["median_ratio"]) for _, run, _ in bounded if "step_time_error" in run]
    if ratios:
        moved = max(abs(x - 1) for x in ratios)
        parts.append(f"On each bounded run's own logged steps, which no calibration saw, the fit's median predicted / "
                     f"measured step time ranged from {min(ratios):.2f} to {max(ratios):.2f}: at the same step shapes "
                     f"the engine ran up to {moved:.0%} faster or slower than the fit of its calibrations, a few "
                     "minutes away" + (", and that alone moves a prediction about as much." if moved >= 0.10 else
                                       ", too little to move a prediction out of its bounds."))
        missed = [(run["comparison"]["itl_s"]["p50"]["error"], float(run["step_time_error"]["median_ratio"]))
                  for _, run, rec in bounded if "step_time_error" in run
                  and abs(run["comparison"]["itl_s"]["p50"]["error"]) > rec["bounds"]["p50"]]
        if missed:
            same = sum((e > 0) == (r > 1) and abs(r - 1) >= 0.1 for e, r in missed)
            parts.append(f"Of the {len(missed)} bounded runs whose ITL p50 missed its bound, {same} had the fit off by "
                         "10 % or more on the run's own steps, in the direction of the miss.")
    parts += _disturbance_sentences(bounded)
    fe = [rec["summary"]["frontend"] for rec in rows]
    parts.append(f"The front end measured {min(f['in_s'] for f in fe) * 1e3:.1f} to {max(f['in_s'] for f in fe) * 1e3:.1f} ms "
                 f"on the way in and {min(f['out_s'] for f in fe) * 1e3:.1f} to {max(f['out_s'] for f in fe) * 1e3:.1f} ms "
                 "on the way out, per request (medians).")
    if all("in_p99_s" in f for f in fe):
        parts.append(f"Their p99 over the calibrations' requests: {min(f['in_p99_s'] for f in fe) * 1e3:.0f} to "
                     f"{max(f['in_p99_s'] for f in fe) * 1e3:.0f} ms in, {min(f['out_p99_s'] for f in fe) * 1e3:.0f} to "
                     f"{max(f['out_p99_s'] for f in fe) * 1e3:.0f} ms out: the front end's stalls, which the judged "
                     "prediction draws from.")
    for key, label in VARIANTS[1:]:
        have = [(i, run, rec) for i, run, rec in bounded if key in run]
        if not have:
            continue
        ok = sum(all(abs(run[key][m][p]["error"]) <= rec["bounds"][p] for m, p in VLLM_ERROR_COLUMNS)
                 for _, run, rec in have)
        med = {mp: float(np.median([run[key][mp[0]][mp[1]]["error"] for _, run, _ in have]))
               for mp in VLLM_ERROR_COLUMNS}
        parts.append(f"{label[0].upper() + label[1:]}, {ok} of {len(have)} pairs were within all bounds, with "
                     f"median errors TTFT p50 {med[('ttft_s', 'p50')]:+.0%}, p99 {med[('ttft_s', 'p99')]:+.0%}, "
                     f"ITL p50 {med[('itl_s', 'p50')]:+.0%}, p99 {med[('itl_s', 'p99')]:+.0%}.")
    return " ".join(parts)


def _disturbance_sentences(bounded: list) -> list:
    """For step-log repeats whose runs record their waits: which bounded misses, and how many bounded
    runs within their bounds, were disturbed (the repeat rule's own reading where the run records it,
    else `disturbances` on the record's fit); for records made under the repeat rule
    (vllm_validate.VLLM_REPEAT_DISTURBED), how many rates it served again and how their disturbed runs fared."""
    from inferlab.study.fitted import FittedStepTime
    have = [(i, run, rec) for i, run, rec in bounded if "waits" in run]
    if not have:
        return []
    seen = []
    for i, run, rec in have:
        why = run["disturbances"] if "disturbances" in run else disturbances(run, FittedStepTime.from_dict(rec["profile"]))
        seen.append((i, run, run["comparison"]["within_bounds"], why))
    missed = [x for x in seen if not x[2]]
    inside = [x for x in seen if x[2]]
    text = []
    ruled = [(i, run) for i, run, _ in have if "disturbed_attempts" in run]
    if ruled:
        again = [(i, run) for i, run in ruled if run["disturbed_attempts"]]
        kept = [a for _, run in again for a in run["disturbed_attempts"]]
        ok = sum(bool(a["comparison"] and a["comparison"]["within_bounds"]) for a in kept)
        text.append(f"Under the repeat rule (a run its own measurements show disturbed is served again and kept), "
                    f"{len(again)} of {len(ruled)} bounded rates were served again"
                    + (f" ({'; '.join(f'run {i}, ' + run['load'] + ': ' + ', and '.join(a['disturbances'][0] for a in run['disturbed_attempts']) for i, run in again)}); "
                       f"{ok} of the {len(kept)} disturbed runs kept would have been within all bounds." if again else "."))
    if missed:
        named = "; ".join(f"run {i}, {run['load']}: " + (", and ".join(d) if d else "nothing of the kind")
                          for i, run, _, d in missed)
        text.append(f"Of the {len(missed)} bounded runs that missed a bound, {sum(bool(d) for *_, d in missed)} were "
                    f"disturbed ({named}).")
    text.append(f"Of the {len(inside)} bounded runs within their bounds, {sum(bool(d) for *_, d in inside)} were "
                f"disturbed so (an engine wait or a way in or out of {DISTURBED_WAIT_S * 1e3:.0f} ms or more, or a "
                f"start at {SLOW_START_RATIO} times the fit's time or more).")
    return text


def speed_timeline(record: dict) -> list:
    """The engine's speed through one step-log validation, in time order, on the record's fit: per part
    (calibration 0's timed requests and Poisson runs, each rate, calibration 1's parts), the median of
    fitted / measured time over the part's decode-only steps (1.2: its decodes ran 20 % faster than the
    fit says). The Poisson runs and the rates draw their requests alike, so a rate far from its
    calibrations' Poisson runs is the engine (or its host) running at another speed, not another
    workload. [(label, ratio, decode steps)]."""
    from inferlab.study.fitted import FittedStepTime, logged_steps
    if record.get("profile", {}).get("kind") != "vllm-steplog-fitted" or "step_log" not in (record["runs"] or [{}])[0]:
        raise ValueError("record must be a vLLM validation whose runs keep their step logs (made with the step log)")
    fit = FittedStepTime.from_dict(record["profile"])

    def ratio(steps, durations):
        dec = [i for i, st in enumerate(steps) if not st.chunks and st.decode_seqs > 0]
        r = [fit.step_time_s(steps[i], 0.0) / durations[i] for i in dec]
        return (float(np.median(r)) if r else float("nan")), len(r)

    out = []
    for k, cal in enumerate(record["calibrations"]):
        steps, durations = logged_steps(cal["step_log"])
        start = 0
        for j, n in enumerate(cal["part_steps"]):
            label = f"calibration {k}, " + ("timed requests" if j == 0 else f"Poisson run {j}")
            out.append((label, *ratio(steps[start:start + n], durations[start:start + n])))
            start += n
        if k == 0:
            for run in record["runs"]:
                out.append((f"rate {run['rate_per_s']:.2f}/s ({run['load']})", *ratio(*logged_steps(run["step_log"]))))
    return out


def probe_timeline(record: dict) -> list | None:
    """The host's speed by the step log's probe (benchmarks/vllm_steplog.py) through one validation, in the
    parts and order of speed_timeline: per part, the median probe time of the whole record over the
    part's median (1.1: the host ran the probe 10 % faster in that part). None for a record without the
    probe."""
    cals, runs = record["calibrations"], record["runs"]
    if not all(c.get("step_probe") for c in cals) or not all(r.get("step_probe") for r in runs):
        return None
    parts = []
    for k, cal in enumerate(cals):
        p, start = np.asarray(cal["step_probe"]["probe_s"]), 0
        for n in cal["part_steps"]:
            parts.append(p[start:start + n])
            start += n
        if k == 0:
            parts += [np.asarray(r["step_probe"]["probe_s"]) for r in runs]
    whole = float(np.median(np.concatenate(parts)))
    return [whole / float(np.median(x)) for x in parts]


def speed_markdown(records: list) -> str:
    """speed_timeline of each record as one Markdown table: a row per record, a column per part; below
    each record with the step log's probe, its probe_timeline."""
    rows = [speed_timeline(r) for r in records]
    if not rows:
        raise ValueError("records must hold at least one vLLM validation with step logs; got none")
    n = len(rows[0])
    head = ["run"] + [(label.split("(")[1].rstrip(")") if label.startswith("rate") else
                       label.replace("calibration", "cal.").replace("Poisson run", "Poisson").replace("timed requests", "timed"))
                      for label, _, _ in rows[0]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for i, (row, rec) in enumerate(zip(rows, records), 1):
        if len(row) != n:
            raise ValueError("records must have the same calibrations and rates to share one table")
        lines.append(f"| {i} | " + " | ".join(f"{r:.2f}" for _, r, _ in row) + " |")
        probe = probe_timeline(rec)
        if probe is not None:
            lines.append(f"| {i}, probe | " + " | ".join(f"{r:.2f}" for r in probe) + " |")
    return "\n".join(lines)

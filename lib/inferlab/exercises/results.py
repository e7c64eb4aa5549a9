"""Writing a graded class: grades.csv, the summary, the per-student feedback and the gradebook exports
(Gradescope, Canvas), each file written whole, with every name from a submission made safe first.
The scores come from `exercises.scoring`; the runs from `exercises.grade`.
"""
from __future__ import annotations

import csv
import json
import re
import statistics
from pathlib import Path

from inferlab.exercises.core import get
from inferlab.exercises.safeio import cell
from inferlab.exercises.scoring import manual_column, manual_parts


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:80] or "_"


def _fmt(x) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


MANUAL_HEADER = ["student", "exercise", "part", "points", "rubric", "score"]  # manual.csv, for the hand grades


def _write(grades, out_dir: Path, *, elapsed: float, quiet: bool, assignment=None, roster=(),
           stems=None, memory_mode: str = "") -> None:
    manual = manual_parts(grades.columns)
    header = ["student_id", *grades.columns, *(manual_column(e, m.name) for e, m in manual), "total", "max",
              *(["pending"] if manual else []), "status"]
    with open(out_dir / "grades.csv", "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=header)
        w.writeheader()
        for row in grades.rows:
            w.writerow({k: cell(_fmt(v)) for k, v in row.items()})
    with open(out_dir / "details.csv", "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=["student_id", "exercise", "score", "points", "result", "feedback", "run"],
                           extrasaction="ignore")  # "public": the student's view, in feedback/
        w.writeheader()
        for d in grades.details:
            w.writerow({k: cell(_fmt(v)) for k, v in d.items()})
    _write_exports(grades, out_dir, assignment or "inferlab exercises", {r["student_id"]: r for r in roster})
    if manual:
        with open(out_dir / "manual.csv", "w", newline="", encoding="utf-8") as fh:
            w = _SafeWriter(fh)
            w.writerow(MANUAL_HEADER)
            for row in grades.rows:
                for ex_id, m in manual:
                    w.writerow([row["student_id"], ex_id, m.name, _fmt(m.points), m.rubric, ""])
    _write_feedback(grades, out_dir / "feedback", stems or {})

    n = len(grades.rows)
    per_ex = []
    for ex_id in grades.columns:
        ds = [d for d in grades.details if d["exercise"] == ex_id]
        ex = get(ex_id)
        per_ex.append({
            "exercise": ex_id, "title": ex.heading(), "kind": ex.kind, "points": ex.points,
            "answered": sum(d["result"] not in ("no answer", "not run", "no check") for d in ds) / n,
            "pass_rate": sum(d["result"] == "pass" for d in ds) / n,
            "mean_score": sum(d["score"] for d in ds) / n,
        })
    totals = [r["total"] for r in grades.rows]
    max_total = grades.rows[0]["max"] if grades.rows else 0
    summary = {
        "students": n, "max_points": max_total, "assignment": assignment,
        "mean_total": statistics.fmean(totals) if totals else 0.0,
        "median_total": statistics.median(totals) if totals else 0.0,
        "exercises": per_ex,
        "problems": {r["student_id"]: r["status"] for r in grades.rows if r["status"] != "ok"},
        "copy_signals": {r["student_id"]: sig for r in grades.rows
                         for sig in [[x for x in str(r["status"]).split("; ") if "copy signal: " in x]] if sig},
        "failed": grades.failed,
        "memory_enforcement": memory_mode,
        "elapsed_s": round(elapsed, 1),
    }
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    lines = [
        "# Grades summary", "",
        f"{n} submission(s); mean total {summary['mean_total']:.2f} / {max_total:g}, "
        f"median {summary['median_total']:.2f}; graded in {elapsed:.0f} s."
        + (f" {grades.failed} submission(s) failed (status `failed: ...`), scored 0 where not scored." if grades.failed
           else ""), "",
        "| exercise | title | kind | points | answered | passed | mean score |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for e in per_ex:
        lines.append(f"| {e['exercise']} | {e['title']} | {e['kind']} | {e['points']} | {e['answered']:.0%} "
                     f"| {e['pass_rate']:.0%} | {e['mean_score']:.2f} |")
    if manual:
        lines += ["", f"Graded by hand, pending: {', '.join(f'{e} {m.name} ({m.points:g} points)' for e, m in manual)} "
                  "per student. Fill the score column of manual.csv, then `inferlab classroom merge-manual "
                  f"{_md(out_dir)} manual.csv`."]
    if summary["copy_signals"]:
        lines += ["", "Copy signals (for your eyes: flags, no score was changed):", ""]
        lines += [f"- {_md(s)}: {_md('; '.join(x))}" for s, x in summary["copy_signals"].items()]
    if summary["problems"]:
        lines += ["", "Runs with problems (scored anyway):", ""]
        lines += [f"- {_md(s)}: {_md(p)}" for s, p in summary["problems"].items()]
    text = "\n".join(lines) + "\n"
    (out_dir / "summary.md").write_text(text)
    if not quiet:
        print(text)
        print(f"wrote {out_dir / 'grades.csv'}, details.csv, gradescope.csv, canvas.csv, feedback/, summary.md")


def _write_exports(grades, out_dir: Path, assignment: str, roster: dict) -> None:
    """gradescope.csv (Name, SID, Email, Total Score) and canvas.csv (the gradebook import layout:
    Student, ID, SIS User ID, SIS Login ID, Section, then one column named after the assignment)."""
    with open(out_dir / "gradescope.csv", "w", newline="", encoding="utf-8") as fh:
        w = _SafeWriter(fh)
        w.writerow(["Name", "SID", "Email", "Total Score"])
        for row in grades.rows:
            r = roster.get(row["student_id"], {})
            w.writerow([r.get("name", ""), row["student_id"], r.get("email", ""), _fmt(row["total"])])
    with open(out_dir / "canvas.csv", "w", newline="", encoding="utf-8") as fh:
        w = _SafeWriter(fh)
        w.writerow(["Student", "ID", "SIS User ID", "SIS Login ID", "Section", assignment])
        w.writerow(["Points Possible", "", "", "", "", _fmt(grades.rows[0]["max"]) if grades.rows else "0"])
        for row in grades.rows:
            r = roster.get(row["student_id"], {})
            w.writerow([r.get("name", ""), r.get("canvas_id", ""), row["student_id"], r.get("email", ""),
                        r.get("section", ""), _fmt(row["total"])])


def _write_feedback(grades, folder: Path, stems: dict) -> None:
    """feedback/<student id>.md: per exercise the score and the hint (never the expected value)."""
    folder.mkdir(parents=True, exist_ok=True)
    for row in grades.rows:
        sid = row["student_id"]
        mine = [d["public"] for d in grades.details if d["student_id"] == sid]
        hidden = sum(p["hidden_points"] for p in mine)
        total = (f"Total: {_fmt(row['total'])} / {_fmt(row['max'])} points." if not hidden else
                 f"Total of the visible parts: {_fmt(round(sum(p['score'] for p in mine), 3))} / "
                 f"{_fmt(round(row['max'] - hidden, 3))} points; {_fmt(round(hidden, 3))} more in hidden parts, "
                 "shown when grades are released.")
        if row.get("pending"):
            total += f" Graded by hand later: {_md(row['pending'].split(', ')[1])}."
        lines = [f"# Feedback for {_md(sid)}", "", total, ""]
        # Copy signals are for the instructor's eyes (and one on a hidden part would say how it went).
        run = "; ".join(x for x in str(row["status"]).split("; ") if "copy signal: " not in x)
        if run and run != "ok":
            lines += [f"Run: {_md(run)}", ""]
        lines += ["| exercise | score | result | feedback |", "| --- | ---: | --- | --- |"]
        for d in grades.details:
            if d["student_id"] == sid:
                p = d["public"]
                fb = _md(p["feedback"]).replace("|", "/")
                lines.append(f"| {d['exercise']} | {_fmt(p['score'])}/{_fmt(p['points'])} | {p['result']} | {fb} |")
        (folder / f"{stems.get(sid, _safe(sid))}.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


class _SafeWriter:
    """csv.writer whose every cell goes through `safeio.cell` (no formula, no line break)."""

    def __init__(self, fh):
        self._w = csv.writer(fh)

    def writerow(self, values):
        self._w.writerow([cell(v) for v in values])


def _md(text) -> str:
    """Student-supplied text for one Markdown line: one line, no formula sign, no HTML or table markup."""
    return cell(text).replace("<", "&lt;").replace("|", "/")

"""Hand grades folded back into a graded class: `inferlab classroom merge-manual GRADES_DIR FILLED.csv`.

`grade` writes GRADES_DIR/manual.csv, one line per student and part graded by hand (student, exercise, part,
points, rubric, score left blank). The instructor fills the score column (in a copy or in place) and merges it:
grades.csv gets each score in its "<exercise> <part> (by hand)" column, its total and its `pending` cell
updated, and gradescope.csv and canvas.csv get the new totals. Every score is checked against GRADES_DIR's own
manual.csv, never against the filled file's points: a student or part it does not list, a score outside
0..points and a cell that a spreadsheet would run as a formula (leading =, +, -, @) are refused by name, and
then nothing is written. A blank score stays pending. Merging again replaces the earlier scores.
"""
from __future__ import annotations

import csv
import math
from pathlib import Path

from inferlab.exercises.results import MANUAL_HEADER
from inferlab.exercises.scoring import manual_column, pending_text
from inferlab.exercises.safeio import FORMULA_START, cell


def _read(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _allowed(grades_dir: Path) -> dict:
    """(student, exercise, part) -> points, from GRADES_DIR/manual.csv as `grade` wrote it."""
    path = grades_dir / "manual.csv"
    if not path.is_file():
        raise ValueError(f"GRADES_DIR {str(grades_dir)!r} has no manual.csv: its exercises have no part graded by "
                         "hand (or it is not a folder `inferlab classroom grade` wrote)")
    return {(_unquoted(r["student"]), r["exercise"], r["part"]): float(r["points"]) for r in _read(path)}


def _unquoted(text: str) -> str:
    """A student id as `safeio.cell` wrote it, without the quote it puts before a leading formula sign."""
    return text[1:] if text.startswith("'") else text


def read_scores(filled, allowed: dict) -> dict:
    """(student, exercise, part) -> score (None: still blank) from the filled CSV; ValueError naming the line, the
    column and the value of the first cell that is refused."""
    filled = Path(filled)
    rows = _read(filled)
    missing = [c for c in ("student", "exercise", "part", "score") if rows and c not in rows[0]]
    if not rows or missing:
        raise ValueError(f"{filled}: expected the columns {', '.join(MANUAL_HEADER)} (as in GRADES_DIR/manual.csv) "
                         f"and one line per student and part; {'missing ' + ', '.join(missing) if missing else 'empty'}")
    scores = {}
    for n, r in enumerate(rows, start=2):
        for column, value in r.items():
            if isinstance(value, str) and value.lstrip(" ").startswith(FORMULA_START):
                raise ValueError(f"{filled} line {n}: {column} {value!r} starts with {value.lstrip()[0]!r}, which a "
                                 "spreadsheet runs as a formula; write a plain number")
        student = _unquoted(r["student"])
        key = (student, r["exercise"], r["part"])
        if key not in allowed:
            what = (f"student {student!r}" if not any(k[0] == student for k in allowed)
                    else f"part {r['exercise'] + ' ' + r['part']!r}")
            raise ValueError(f"{filled} line {n}: unknown {what}; GRADES_DIR/manual.csv lists the students and parts "
                             "graded by hand")
        text = (r["score"] or "").strip()
        if not text:
            scores[key] = None
            continue
        try:
            score = float(text)
        except ValueError:
            raise ValueError(f"{filled} line {n}: score {text!r} is not a number; allowed: 0 to {allowed[key]:g} "
                             "(blank: still pending)") from None
        if not math.isfinite(score) or not 0 <= score <= allowed[key]:
            raise ValueError(f"{filled} line {n}: score {text!r} of {student} {r['exercise']} {r['part']} is out of "
                             f"range; allowed: 0 to {allowed[key]:g} points")
        scores[key] = score
    return scores


def merge_manual(grades_dir, filled) -> int:
    """Fold the filled hand grades into grades.csv, gradescope.csv and canvas.csv; returns the scores merged."""
    grades_dir = Path(grades_dir)
    allowed = _allowed(grades_dir)
    scores = read_scores(filled, allowed)
    path = grades_dir / "grades.csv"
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        header, rows = reader.fieldnames, list(reader)
    exercise_columns = [c for c in header[1:header.index("total")] if not c.endswith("(by hand)")]
    totals = {}
    for row in rows:
        sid = _unquoted(row["student_id"])
        mine = {k: v for k, v in allowed.items() if k[0] == sid}
        for (_, ex_id, part), points in mine.items():
            if (sid, ex_id, part) in scores:
                got = scores[(sid, ex_id, part)]
                row[manual_column(ex_id, part)] = "" if got is None else f"{got:g}"
        hand = [(float(row[manual_column(e, p)]) if row[manual_column(e, p)] else None, pts)
                for (_, e, p), pts in mine.items()]
        auto_max = float(row["max"]) - sum(pts for _, pts in hand)
        auto = sum(float(row[c]) for c in exercise_columns if row[c])
        row["total"] = f"{round(auto + sum(s for s, _ in hand if s is not None), 3):g}"
        row["pending"] = pending_text(auto_max, sum(pts for s, pts in hand if s is None))
        totals[sid] = row["total"]
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=header)
        w.writeheader()
        w.writerows(rows)
    _update_export(grades_dir / "gradescope.csv", "SID", "Total Score", totals)
    _update_export(grades_dir / "canvas.csv", "SIS User ID", None, totals)
    return sum(s is not None for s in scores.values())


def _update_export(path: Path, id_column: str, total_column: str | None, totals: dict) -> None:
    """Replace each student's total in an export (the last column when `total_column` is None)."""
    if not path.is_file():
        return
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    at_id = rows[0].index(id_column)
    at_total = rows[0].index(total_column) if total_column else len(rows[0]) - 1
    for r in rows[1:]:
        sid = _unquoted(r[at_id])
        if sid in totals:
            r[at_total] = cell(totals[sid])
    with open(path, "w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows(rows)

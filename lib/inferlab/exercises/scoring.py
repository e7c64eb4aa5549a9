"""Scoring a graded class: what each student's answers earn against the values the grader computes
(for the student's variant when an assignment is given), the parts left to a hand grade, the feedback
each answer gets, and the classmates whose answers match (flags for the instructor, never a score
change). Nothing here runs a notebook (`exercises.grade` supervises the runs) or writes a file
(`exercises.results`).
"""
from __future__ import annotations

from inferlab.exercises import signals
from inferlab.exercises.core import get, variant


def _answers(runs: list) -> dict:
    out = {}
    for run in runs:
        if not run.failed:
            out.update(run.answers)
    return out


def _classmate_matches(subs, runs: dict, columns: list, assignment, key) -> dict:
    """{(student, exercise id): classmate} where the student's answer fails their own variant and passes the
    classmate's in full (`signals.matches_classmate`)."""
    students = [s.student for s in subs if not s.refused]
    drawn = {}
    for ex_id in columns:
        try:
            drawn[ex_id] = {st: variant(ex_id, st, assignment, key=key) for st in students}
        except Exception:  # an id the variants cannot be drawn for: that row says so when it is scored
            continue
    out = {}
    for st in students:
        for ex_id, answer in _answers(runs.get(st, [])).items():
            if ex_id not in drawn:
                continue
            others = {o: ex for o, ex in drawn[ex_id].items() if o != st}
            try:
                other = signals.matches_classmate(answer, drawn[ex_id][st], others)
            except Exception:
                other = None
            if other:
                out[(st, ex_id)] = other
    return out


def _flag_identical_wrong(rows: list, details: list, runs: dict) -> None:
    """A copy signal on each row that shares a wrong answer with a classmate (`signals.identical_wrong`)."""
    wrong = {}
    for d in details:
        if d["result"] in ("fail", "partial"):
            answer = _answers(runs.get(d["student_id"], [])).get(d["exercise"])
            if answer is not None:
                wrong[(d["student_id"], d["exercise"])] = answer
    by_student: dict = {}
    for (ex_id, _), students in signals.identical_wrong(wrong).items():
        for st in students:
            others = ", ".join(repr(o) for o in students if o != st)
            by_student.setdefault(st, []).append(f"copy signal: the same wrong answer to {ex_id} as {others}")
    for row in rows:
        flags = by_student.get(row["student_id"])
        if flags:
            row["status"] = "; ".join(flags) if row["status"] == "ok" else row["status"] + "; " + "; ".join(flags)


def _score_student(s, runs: list, columns: list, assigned: set, assignment, key, *,
                   matched: dict | None = None, classmates: set = frozenset()) -> tuple:
    """(row, details) of one student (`s`: a submissions.Submission). Nothing raised here escapes: an answer that cannot be scored scores 0
    with the reason, and an error of the grader itself makes the row `failed`."""
    failures = [s.refused] if s.refused else []
    notes = [] if (s.notebooks or s.refused) else ["no submission"]
    answers, ids, why = {}, set(), {}
    for run in runs:
        prefix = f"{run.notebook.name}: " if len(runs) > 1 else ""
        if run.failed:
            failures.append(prefix + run.failed)
        else:
            answers.update(run.answers)
            why.update({k: (prefix + text, own) for k, (text, own) in run.why.items()})
        ids |= run.ids
        notes += [prefix + p for p in run.problems] + [prefix + "flag: " + f for f in run.flags]
        notes += [prefix + f for f in signals.claim_flags(s.student, run.claimed, set(classmates))]
    extra = sorted(ids - assigned)
    if extra:
        notes.append(f"ignored check cell(s) not in this assignment: {', '.join(extra)}")
    row, details = {"student_id": s.student}, []
    total = max_total = 0.0
    for ex_id in columns:
        try:
            ex = variant(ex_id, s.student, assignment, key=key) if assignment else get(ex_id)
        except Exception as exc:  # an id the variant cannot be drawn for: the registered exercise's points
            ex, failures = get(ex_id), failures + [f"variant not drawn ({type(exc).__name__})"]
        max_total += ex.points
        score, outcome, feedback = 0.0, "no check", "the notebook has no check cell for this exercise"
        hidden_points = ex.points * sum(ex.part_weight(p.name) for p in ex.parts if p.hidden)
        public = None  # what the student sees before release, when it differs (hidden parts)
        if failures:
            outcome, feedback = "failed", "not scored: " + failures[0]
        elif ex_id in answers:
            try:
                result = ex.evaluate(answers[ex_id])
                other = (matched or {}).get((s.student, ex_id))
                if other:
                    notes.append(f"copy signal: the answer to {ex_id} matches classmate {other!r}'s variant, "
                                 "not this student's")
                score, outcome, feedback = result.score, result.status, _feedback(result, other, why.get(ex_id))
                if result.hidden:
                    shown = result.public()
                    public = (shown.score, shown.status, _feedback(shown, other, why.get(ex_id)))
            except Exception as exc:
                outcome = "invalid"
                feedback = f"the answer could not be scored ({type(exc).__name__}); it counts as wrong"
        elif ex_id in ids:
            outcome = "not run"
            feedback = (f"its check never ran: {why[ex_id][0]}" if ex_id in why
                        else "its check never ran (an error before it, or a limit)")
        row[ex_id] = round(score, 3)
        total += score
        details.append({"student_id": s.student, "exercise": ex_id, "score": round(score, 3), "points": ex.points,
                        "result": outcome, "feedback": feedback, "run": "; ".join(failures + notes) or "ok",
                        "public": _public(public or (score, outcome, feedback), ex.points, hidden_points)})
    status = "; ".join(notes) or "ok"
    if failures:
        status = "failed: " + "; ".join(failures + notes)
    row.update(total=round(total, 3), max=max_total, status=status)
    manual = manual_parts(columns)
    if manual:  # never scored here: blank until merge-manual adds the instructor's scores
        row.update({manual_column(e, m.name): "" for e, m in manual})
        by_hand = sum(m.points for _, m in manual)
        row.update(max=max_total + by_hand, pending=pending_text(max_total, by_hand))
    return row, details


def manual_parts(columns: list) -> list:
    """(exercise id, ManualPart) of every part graded by hand, in column order."""
    return [(ex_id, m) for ex_id in columns for m in get(ex_id).manual]


def manual_column(ex_id: str, part: str) -> str:
    """The grades.csv column of a part graded by hand."""
    return f"{ex_id} {part} (by hand)"


def pending_text(auto_points: float, pending_points: float) -> str:
    """grades.csv's `pending` cell: what the total is out of while parts wait for a hand grade."""
    return f"of {auto_points:g} auto-graded points, {pending_points:g} pending by hand" if pending_points else ""


def _feedback(result, other, why) -> str:
    """One line of feedback from a CheckResult: its message, or no slip hint where the answer matches classmate
    `other`'s variant (a hint would be about their numbers); what failed before the check when it failed."""
    feedback = (f"{result.exercise_id} {result.status}: {signals.NO_HINT}" if other
                else result.message.replace("\n", " | "))
    if not result.passed and why and why[1]:
        feedback += f" | before the check: {why[0]}"
    return feedback


def _public(shown: tuple, points: float, hidden_points: float) -> dict:
    """The student's view of one detail before release: (score, result, feedback) of the visible parts, their
    points, and the points of the hidden parts (their result is not said)."""
    score, result, feedback = shown
    return {"score": round(score, 3), "points": round(points - hidden_points, 3), "result": result,
            "feedback": feedback, "hidden_points": round(hidden_points, 3)}

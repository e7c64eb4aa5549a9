"""Copy signals for the instructor's eyes: flags in the summary, never a score change.

- a submission whose `set_student(...)` call or notebook metadata names another id than its own
  (`claimed_ids`), or a classmate's;
- an answer wrong for the student's own variant but right for a classmate's (`matches_classmate`): its slip
  hint is withheld (a slip hint there would coach the copier on the classmate's numbers);
- the same wrong answer handed in by several students (`identical_wrong`).
"""
from __future__ import annotations

import json
import re

SET_STUDENT_RE = re.compile(r"""set_student\(\s*(?:student_id\s*=\s*)?["']([^"'\n]{1,80})["']""")
NO_HINT = "not the expected value for your variant"


def claimed_ids(nb: dict, code: list) -> set:
    """The student ids a notebook names: its set_student(...) calls and metadata.inferlab.student_id."""
    found = {m for src in code for m in SET_STUDENT_RE.findall(src)}
    meta = nb.get("metadata") if isinstance(nb, dict) else None
    sid = meta.get("inferlab", {}).get("student_id") if isinstance(meta, dict) and isinstance(
        meta.get("inferlab"), dict) else None
    if isinstance(sid, str):
        found.add(sid[:80])
    return found


def claim_flags(student: str, claimed: set, classmates: set) -> list:
    out = []
    for other in sorted(claimed - {student}):
        who = "classmate" if other in classmates else "id"
        out.append(f"copy signal: the notebook names {who} {other!r} (set_student or metadata), not {student!r}")
    return out


def matches_classmate(answer, own, others: dict) -> str | None:
    """The first classmate (id -> their variant of the exercise) whose variant `answer` passes in full while it
    fails `own`, else None."""
    if own.evaluate(answer).passed:
        return None
    for other, ex in others.items():
        try:
            if ex.evaluate(answer).passed:
                return other
        except Exception:
            continue
    return None


def identical_wrong(wrong: dict) -> dict:
    """{(exercise id, answer as JSON): [students]} for the wrong answers (`wrong`: (student, exercise id) ->
    answer) that two or more students gave."""
    groups: dict = {}
    for (student, ex_id), answer in wrong.items():
        groups.setdefault((ex_id, json.dumps(answer, sort_keys=True)), []).append(student)
    return {k: sorted(v) for k, v in groups.items() if len(v) > 1}

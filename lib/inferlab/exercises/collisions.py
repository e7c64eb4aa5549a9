"""How much a classmate's answers are worth: per graded part, the share of student pairs of a roster whose
expected answers agree within the part's tolerance, and what copying a classmate's answers earns.

For students i != j of the roster, part p of exercise e collides when the expected value of i's variant
matches j's within p's tolerance (`core._matches`, either way round). share(p) = colliding pairs / pairs,
pairs = n (n - 1) / 2. A copier's earnings: the score of j's expected answers on i's variant over i's
maximum, averaged over the ordered pairs (each exercise's part weights included). Both are exact for the
roster and key given: no sampling.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from inferlab.exercises.core import _matches, get, variant

SHARE_LIMIT = 0.05  # a graded part shared by more than this share of pairs is not protected by its variants


@dataclass(frozen=True)
class PartCollision:
    exercise: str
    part: str
    kind: str
    share: float  # colliding pairs / pairs
    weight: float  # the part's share of its exercise's points

    @property
    def id(self) -> str:
        return f"{self.exercise}:{self.part}"


def variants(exercise_ids, students, assignment: str, key: bytes) -> dict:
    """{exercise id: [the exercise as each student gets it]} (in roster order)."""
    return {ex_id: [variant(ex_id, s, assignment, key=key) for s in students] for ex_id in exercise_ids}


def part_collisions(drawn: dict) -> list[PartCollision]:
    """Each part's share of colliding pairs, from `variants`."""
    out = []
    for ex_id, exs in drawn.items():
        expected = [e.expected() for e in exs]
        pairs = list(itertools.combinations(range(len(exs)), 2))
        ex = get(ex_id)
        for part in ex.parts:
            hits = sum(_matches(part, expected[i][part.name], expected[j][part.name])
                       or _matches(part, expected[j][part.name], expected[i][part.name]) for i, j in pairs)
            out.append(PartCollision(ex_id, part.name, part.kind, hits / len(pairs) if pairs else 0.0,
                                     ex.part_weight(part.name)))
    return out


def copy_earnings(drawn: dict) -> dict:
    """{"mean": ..., "max": ...}: the share of the assignment's points a student earns by handing in a
    classmate's (right) answers, over every ordered pair of the roster."""
    n = len(next(iter(drawn.values()), []))
    if n < 2:
        return {"mean": 0.0, "max": 0.0}
    shares = []
    for i, j in itertools.permutations(range(n), 2):
        got = sum(drawn[e][i].evaluate(drawn[e][j].expected()).score for e in drawn)
        shares.append(got / sum(drawn[e][i].points for e in drawn))
    return {"mean": sum(shares) / len(shares), "max": max(shares)}


def report(exercise_ids, students, assignment: str, key: bytes) -> dict:
    """The JSON of `inferlab classroom collisions`: {"parts": [{"id", "exercise", "part", "kind", "share",
    "weight"}], "copy_earnings": {"mean", "max"}, "students": n, "pairs": n (n-1) / 2, "limit": SHARE_LIMIT}."""
    drawn = variants(exercise_ids, students, assignment, key)
    parts = part_collisions(drawn)
    n = len(students)
    return {"students": n, "pairs": n * (n - 1) // 2, "limit": SHARE_LIMIT, "assignment": assignment,
            "parts": [{"id": p.id, "exercise": p.exercise, "part": p.part, "kind": p.kind,
                       "share": round(p.share, 4), "weight": round(p.weight, 4)} for p in parts],
            "copy_earnings": {k: round(v, 4) for k, v in copy_earnings(drawn).items()}}


# The exercise table of docs/instructors.md --------------------------------------------------------------------

TABLE_START, TABLE_END = "<!-- exercise-table: start -->", "<!-- exercise-table: end -->"
DEMO_ROSTER = tuple(f"s{i:02d}" for i in range(1, 41))  # the page's 40 ids
DEMO_KEY = bytes(range(32))  # the page's key: a fixed, public one (a course's own key draws other variants)
DEMO_ASSIGNMENT = "demo"


def markdown_table(result: dict) -> str:
    """One row per exercise: its parts with their share of colliding pairs and their weight, the parts over
    the limit in bold."""
    from inferlab.exercises.core import get
    lines = ["| exercise | kind | points | part: share of pairs agreeing (weight in the exercise) |",
             "| --- | --- | ---: | --- |"]
    by_ex: dict = {}
    for p in result["parts"]:
        by_ex.setdefault(p["exercise"], []).append(p)
    for ex_id, parts in by_ex.items():
        ex = get(ex_id)
        cells = []
        for p in parts:
            text = f"`{p['part']}` {p['share']:.0%} ({p['weight']:.0%})"
            cells.append(f"**{text}**" if p["share"] > result["limit"] else text)
        lines.append(f"| {ex_id} | {ex.kind} | {ex.points} | {', '.join(cells)} |")
    earn = result["copy_earnings"]
    lines += ["", f"{result['students']} ids, {result['pairs']} pairs. A classmate's answers earn "
              f"{earn['mean']:.0%} of the points on average (at most {earn['max']:.0%}). In bold: parts shared by "
              f"more than {result['limit']:.0%} of pairs."]
    return "\n".join(lines)


def demo_table() -> str:
    """The table of the docs page: every exercise, on DEMO_ROSTER with DEMO_KEY."""
    from inferlab.exercises.core import exercises
    return markdown_table(report([e.id for e in exercises()], list(DEMO_ROSTER), DEMO_ASSIGNMENT, DEMO_KEY))


def update_page(path) -> bool:
    """Rewrite the table between TABLE_START and TABLE_END in `path`; True if it changed."""
    from pathlib import Path
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    start, end = text.index(TABLE_START) + len(TABLE_START), text.index(TABLE_END)
    new = text[:start] + "\n" + demo_table() + "\n" + text[end:]
    if new != text:
        path.write_text(new, encoding="utf-8")
    return new != text


if __name__ == "__main__":
    import sys
    print("changed" if update_page(sys.argv[1] if len(sys.argv) > 1 else "docs/instructors.md") else "unchanged")

"""Parts graded by hand: the grader never scores them; grades.csv shows them pending (a blank column, the total
"of N auto-graded points, M pending by hand"), manual.csv lists them with their rubric, and merge-manual folds the
instructor's scores back, refusing by name what a spreadsheet or a typo could slip in.

The fixture (tests/data/exercise_manual_part.toml, 15.1.2-ex8: 1 point auto-graded, `why` 1 point by hand) at its
registered parameters, Llama 3 8B at S = 4096, by hand: KV cache = 2 * 32 layers * 8 kv heads * 128 * 4096 * 2 bytes
= 0.536870912 GB.
"""
from __future__ import annotations

import csv
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from inferlab.exercises import data
from inferlab.exercises import sandbox as sb
from inferlab.exercises.manual import merge_manual

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "data" / "exercise_manual_part.toml"
COLUMN = "15.1.2-ex8 why (by hand)"


def table(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_a_manual_part_needs_its_points_and_rubric(tmp_path):
    for old, new, words in (("manual = true\npoints = 1", "manual = true\npoints = 11",
                             "points=11 must be a number in (0, 10]"),
                            ("rubric = ", "# rubric = ", "rubric must be a non-empty string"),
                            ("manual = true", "manual = false", "manual=False must be true")):
        assert old in FIXTURE.read_text()
        (tmp_path / "bad.toml").write_text(FIXTURE.read_text().replace(old, new, 1))
        with pytest.raises(data.ExerciseDataError, match=re.escape(words)):
            data.load(tmp_path / "bad.toml")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    if not sb.available():
        pytest.skip(f"no sandbox: {sb.unavailable_reason()}")
    from inferlab.exercises.grade import GradeConfig, grade
    base = tmp_path_factory.mktemp("manual")
    loaded = data.register_file(FIXTURE)
    try:
        (base / "subs").mkdir()
        for sid, kv in (("alice", 0.536870912), ("bob", 0.5)):
            nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in (
                "from inferlab.exercises import check", f"ex8 = {kv!r}", 'check("15.1.2-ex8", ex8)')])
            nb.cells.append(nbformat.v4.new_markdown_cell("Each token adds its keys and values in every layer."))
            nbformat.write(nb, base / "subs" / f"{sid}.ipynb")
        grades = grade([base / "subs"], base / "out", GradeConfig(exercise_ids=["15.1.2-ex8"], quiet=True,
                                                                   cell_timeout=60, time_limit=240))
        yield grades, base / "out"
    finally:
        data.unregister(loaded)


@pytest.fixture
def out(graded, tmp_path):
    shutil.copytree(graded[1], tmp_path / "out")
    return tmp_path / "out"


def test_grade_leaves_the_manual_part_pending_and_lists_it_for_the_instructor(graded):
    _, out = graded
    rows = {r["student_id"]: r for r in table(out / "grades.csv")}
    assert rows["alice"][COLUMN] == "" and rows["alice"]["total"] == "1" and rows["alice"]["max"] == "2"
    assert rows["alice"]["pending"] == "of 1 auto-graded points, 1 pending by hand"
    assert rows["bob"]["total"] == "0"
    manual = table(out / "manual.csv")
    assert [(r["student"], r["exercise"], r["part"], r["points"], r["score"]) for r in manual] == [
        ("alice", "15.1.2-ex8", "why", "1", ""), ("bob", "15.1.2-ex8", "why", "1", "")]
    assert manual[0]["rubric"].startswith("1: each token adds its own keys and values")
    assert "Total: 1 / 2 points. Graded by hand later: 1 pending by hand." in (out / "feedback" / "alice.md").read_text()
    assert "merge-manual" in (out / "summary.md").read_text()


def test_gradescope_leaves_the_manual_part_to_its_own_questions(graded):
    from inferlab.exercises.gradescope import results
    from inferlab.exercises.grade import Grades
    grades, _ = graded
    one = Grades(grades.columns, grades.rows[:1], [d for d in grades.details if d["student_id"] == "alice"])
    r = results(one)  # the module's fixture keeps 15.1.2-ex8 registered
    assert [(t["name"].split(":")[0], t["max_score"]) for t in r["tests"]] == [("15.1.2-ex8", 1)]
    assert "Graded by hand" in r["output"] and "15.1.2-ex8 why (1 points)" in r["output"]


def fill(out, scores, **changes):
    rows = table(out / "manual.csv")
    for r in rows:
        r["score"] = scores.get(r["student"], "")
        r.update(changes.get(r["student"], {}))
    with open(out / "filled.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return out / "filled.csv"


def test_merge_manual_adds_the_hand_scores_to_every_export(out):
    assert merge_manual(out, fill(out, {"alice": "1", "bob": "0.5"})) == 2
    rows = {r["student_id"]: r for r in table(out / "grades.csv")}
    assert (rows["alice"][COLUMN], rows["alice"]["total"], rows["alice"]["pending"]) == ("1", "2", "")
    assert (rows["bob"][COLUMN], rows["bob"]["total"], rows["bob"]["max"]) == ("0.5", "0.5", "2")
    assert {r["SID"]: r["Total Score"] for r in table(out / "gradescope.csv")} == {"alice": "2", "bob": "0.5"}
    canvas = list(csv.reader(open(out / "canvas.csv", newline="")))
    assert {r[2]: r[-1] for r in canvas[2:]} == {"alice": "2", "bob": "0.5"} and canvas[1][-1] == "2"
    merge_manual(out, fill(out, {"alice": "0"}))  # again: replaces; a blank score is pending again
    rows = {r["student_id"]: r for r in table(out / "grades.csv")}
    assert (rows["alice"]["total"], rows["bob"]["total"]) == ("1", "0")
    assert rows["bob"]["pending"] == "of 1 auto-graded points, 1 pending by hand"


@pytest.mark.parametrize("scores, changes, words", [
    ({"alice": "1.5"}, {}, "score '1.5' of alice 15.1.2-ex8 why is out of range; allowed: 0 to 1 points"),
    ({"alice": "-0"}, {}, "score '-0' starts with '-', which a spreadsheet runs as a formula"),
    ({"alice": "=1"}, {}, "score '=1' starts with '='"),
    ({"alice": "+1"}, {}, "score '+1' starts with '+'"),
    ({"alice": "1"}, {"bob": {"rubric": "@SUM(A1:A9)"}}, "line 3: rubric '@SUM(A1:A9)' starts with '@'"),
    ({"alice": "1"}, {"bob": {"student": "mallory"}}, "line 3: unknown student 'mallory'"),
    ({"alice": "1"}, {"bob": {"part": "how"}}, "line 3: unknown part '15.1.2-ex8 how'"),
    ({"alice": "1"}, {"bob": {"points": "5"}, }, None),  # the filled file's points are not the limit...
    ({"alice": "one"}, {}, "score 'one' is not a number; allowed: 0 to 1"),
])
def test_merge_manual_refuses_by_name_and_writes_nothing(out, scores, changes, words):
    if words is None:  # ...GRADES_DIR's manual.csv is
        scores, words = {"bob": "5"}, "score '5' of bob 15.1.2-ex8 why is out of range; allowed: 0 to 1 points"
    before = {name: (out / name).read_bytes() for name in ("grades.csv", "gradescope.csv", "canvas.csv")}
    with pytest.raises(ValueError) as err:
        merge_manual(out, fill(out, scores, **changes))
    assert words in str(err.value)
    assert {name: (out / name).read_bytes() for name in before} == before


def test_the_command_line_refuses_with_one_line_and_status_2(out):
    proc = subprocess.run([sys.executable, "-m", "inferlab.exercises", "merge-manual", str(out),
                           str(fill(out, {"alice": "7"}))], capture_output=True, text=True)
    assert proc.returncode == 2 and "out of range; allowed: 0 to 1 points" in proc.stderr, proc.stderr
    proc = subprocess.run([sys.executable, "-m", "inferlab.exercises", "merge-manual", str(out),
                           str(fill(out, {"alice": "1"}))], capture_output=True, text=True)
    assert proc.returncode == 0 and "merged 1 hand score(s)" in proc.stdout, proc.stderr


def test_the_student_notebook_gives_each_manual_part_its_own_answer_cell(register_exercises):
    from inferlab.exercises import exercises
    from inferlab.exercises.cells import exercise_cells
    if "15.1.2-ex8" not in {e.id for e in exercises("15.1.2")}:  # the module's `graded` may hold it registered
        register_exercises(FIXTURE)
    cells = exercise_cells("15.1.2", heading=False)
    i = next(k for k, c in enumerate(cells) if 'check("15.1.2-ex8"' in c)
    assert "15.1.2-ex8, `why`, graded by hand** (1 point)" in cells[i + 1]
    assert cells[i + 1].startswith("# %% [markdown]")
    others = [c for c in cells if "graded by hand**" in c]
    assert len(others) == 1                                    # no exercise without a manual part gets one

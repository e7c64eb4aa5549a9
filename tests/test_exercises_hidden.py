"""Public and hidden checks: a hidden part is graded and counted like any other, but what the student sees
before the grades are released (their own check, feedback/<id>.md, Gradescope's visible tests) never says how it
went; the instructor's grades.csv and details.csv carry it, and Gradescope gets it as an "after_published" test.

The fixture (tests/data/exercise_hidden_parts.toml, 15.1.2-ex7) at its registered parameters, Llama 3 8B on an
H100 SXM (80e9 bytes) at S = 4096, by hand:
  KV cache of one sequence = 2 (K and V) * 32 layers * 8 kv heads * 128 * 4096 * 2 bytes = 536,870,912 bytes;
  sequences that fit = floor((80e9 - 2 * 8,030,261,248) / 536,870,912) = floor(119.097) = 119 (hidden).
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

import nbformat
import pytest

from inferlab.exercises import data
from inferlab.exercises import sandbox as sb

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "data" / "exercise_hidden_parts.toml"
KV_GB, FITS = 0.536870912, 119
RIGHT = {"kv_gb": KV_GB, "max_batch": FITS}
HIDDEN_WRONG = {"kv_gb": KV_GB, "max_batch": FITS + 1}


@pytest.fixture
def hidden(register_exercises):
    return register_exercises(FIXTURE)[0]


def test_a_hidden_part_counts_in_the_score_but_not_in_what_the_student_sees(hidden):
    assert [p.hidden for p in hidden.parts] == [False, True]
    right, wrong = hidden.evaluate(RIGHT), hidden.evaluate(HIDDEN_WRONG)
    assert (right.score, wrong.score) == (2, 1) and wrong.status == "partial"  # equal weights: 1 point each
    for r in (right, wrong):
        shown = r.public()
        assert (shown.score, shown.points, shown.status) == (1, 1, "pass")
        assert [p.name for p in shown.parts] == ["kv_gb"]
        assert "max_batch" in shown.message and "released" in shown.message
    assert right.public().message == wrong.public().message


def test_the_student_s_own_check_does_not_say_how_the_hidden_part_went(hidden, capsys):
    from inferlab.exercises import check
    printed = []
    for answer in (RIGHT, HIDDEN_WRONG):
        result = check("15.1.2-ex7", answer)
        assert [p.name for p in result.parts] == ["kv_gb"] and result.score == 1
        printed.append(capsys.readouterr().out.replace("  (attempt 2)", ""))
    assert printed[0] == printed[1] and "PASS" in printed[0]


def test_the_toml_field_hidden_must_be_true_or_false(tmp_path):
    text = FIXTURE.read_text().replace("hidden = true", 'hidden = "yes"')
    (tmp_path / "bad.toml").write_text(text)
    with pytest.raises(data.ExerciseDataError, match="hidden='yes' must be true or false"):
        data.load(tmp_path / "bad.toml")


@pytest.fixture
def graded(hidden, tmp_path):
    if not sb.available():
        pytest.skip(f"no sandbox: {sb.unavailable_reason()}")
    from inferlab.exercises.grade import GradeConfig, grade
    (tmp_path / "subs").mkdir()
    for sid, answer in (("alice", HIDDEN_WRONG), ("bob", RIGHT), ("carol", HIDDEN_WRONG)):
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in (
            "from inferlab.exercises import check", f"ex7 = {answer!r}", 'check("15.1.2-ex7", ex7)')])
        nbformat.write(nb, tmp_path / "subs" / f"{sid}.ipynb")
    grades = grade([tmp_path / "subs"], tmp_path / "out", GradeConfig(exercise_ids=["15.1.2-ex7"], quiet=True,
                                                                       cell_timeout=60, time_limit=240))
    return grades, tmp_path / "out"


def test_the_instructor_s_grades_carry_the_hidden_part_and_the_student_s_feedback_does_not(graded):
    """alice and carol hand in the same wrong hidden part, bob gets it right: their feedback reads the same."""
    grades, out = graded
    with open(out / "grades.csv", newline="") as fh:
        table = {r["student_id"]: r for r in csv.DictReader(fh)}
    assert float(table["alice"]["15.1.2-ex7"]) == 1 and float(table["alice"]["total"]) == 1
    assert float(table["bob"]["15.1.2-ex7"]) == 2 and float(table["bob"]["total"]) == 2
    with open(out / "details.csv", newline="") as fh:
        details = {r["student_id"]: r for r in csv.DictReader(fh)}
    assert details["alice"]["result"] == "partial" and "max_batch" in details["alice"]["feedback"]
    assert details["bob"]["result"] == "pass"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["exercises"][0]["mean_score"] == pytest.approx(4 / 3)
    # the same wrong hidden answer: a copy signal for the instructor, never in the students' feedback
    assert "15.1.2-ex7 as 'carol'" in "; ".join(summary["copy_signals"]["alice"])
    feedback = {sid: (out / "feedback" / f"{sid}.md").read_text() for sid in ("alice", "bob", "carol")}
    assert feedback["alice"].replace("alice", "bob") == feedback["bob"] == feedback["carol"].replace("carol", "bob")
    assert "1/1 | pass" in feedback["alice"] and "1 more in hidden parts" in feedback["alice"]


def test_gradescope_gets_the_hidden_part_as_an_after_published_test(graded):
    from inferlab.exercises.gradescope import results
    from inferlab.exercises.grade import Grades
    grades, _ = graded
    shown = []
    for sid, hidden_score in (("alice", 0), ("bob", 1)):
        one = Grades(grades.columns, [r for r in grades.rows if r["student_id"] == sid],
                     [d for d in grades.details if d["student_id"] == sid])
        r = results(one)
        assert [(t["visibility"], t["score"], t["max_score"]) for t in r["tests"]] == [
            ("visible", 1, 1), ("after_published", hidden_score, 1)]
        assert "score" not in r  # Gradescope adds up the tests; a total would tell the hidden part's result
        shown.append(r["tests"][0]["output"])
    assert shown[0] == shown[1]

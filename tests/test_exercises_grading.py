"""Grading real notebooks in real kernels: the instructor version scores full marks, a student
version with some wrong answers scores exactly its partial score, and notebooks that raise, loop,
cheat or cannot be read are scored without stopping the run.

One `grade` call runs all the submissions (module fixture) to keep kernel start-ups few; the slow
one (its loops run to their cells' budgets) is named to sort, and so start, first."""
from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import nbformat
import pytest

from inferlab.exercises import get, solution_source
from inferlab.exercises.grade import grade
from inferlab.exercises.student import find_leaks, make_student

# The submissions here raise, loop and exit in cells no answer depends on: every cell runs (tests/conftest.py).

from inferlab.exercises import sandbox as sb

pytestmark = [pytest.mark.skipif(not sb.available(), reason=f"no sandbox: {sb.unavailable_reason()}"),
              pytest.mark.usefixtures("every_cell_runs")]

CELL_TIMEOUT, TIME_LIMIT = 3, 10  # seconds of a cell's, a notebook's own time (CPU, or wall less the host's waits)
SWALLOW_INTERRUPTS = """\
import time
while True:
    try:
        time.sleep(0.05)
    except KeyboardInterrupt:
        pass"""


def answer_cell_index(nb, ex_id):
    """The index of the answer cell of `ex_id`: the cell just above its check."""
    i = next(i for i, c in enumerate(nb.cells) if c.source.startswith(f'check("{ex_id}"'))
    return i - 1


def fill(nb, answers):
    """A copy of a student notebook with some answers filled in: {id: source of the answer cell}."""
    nb = nbformat.from_dict(json.loads(json.dumps(nb)))
    for ex_id, source in answers.items():
        nb.cells[answer_cell_index(nb, ex_id)].source = source
    return nb


def right(ex_id):
    """What a student who got it right writes: the solution's code, without the marker."""
    return solution_source(get(ex_id)).split("\n", 1)[1]


def value(ex_id, **changes):
    ex = get(ex_id)
    answer = dict(ex.expected(), **changes)
    answer = {k: set(v) if isinstance(v, frozenset) else v for k, v in answer.items()}
    shown = answer[ex.parts[0].name] if ex.single else answer
    return f"{ex.answer_name} = {shown!r}"


def insert_after_check(nb, ex_id, *cells):
    i = answer_cell_index(nb, ex_id) + 2
    nb.cells[i:i] = [nbformat.v4.new_code_cell(c) for c in cells]
    return nb


def mistake(ex_id, part):
    return next(m.value for m in get(ex_id).known_mistakes() if m.part == part)


# The submissions and what each must score -----------------------------------------------------------

def submissions(folder: Path, sample: Path):
    instructor = nbformat.read(sample, as_version=4)
    student = make_student(instructor)[0]
    expected = {}

    def save(name, nb, scores):
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, path)
        expected[path.stem if path.parent == folder else path.parent.name] = scores

    save("instructor.ipynb", instructor, {e: get(e).points for e in ALL_IDS})

    # Some right, some wrong, some partly right, the rest unanswered; and two attempts to cheat.
    partial = fill(student, {
        "15.1.1-ex1": right("15.1.1-ex1"),
        "15.1.2-ex5": right("15.1.2-ex5"),
        "15.1.1-ex3": value("15.1.1-ex3", true={"A"}),                                 # its number right, its letters wrong
        "15.2.2-ex1": value("15.2.2-ex1", max_batch=mistake("15.2.2-ex1", "max_batch")),  # 1 of 2 parts
        "15.2.2-ex4": value("15.2.2-ex4", tp=mistake("15.2.2-ex4", "tp"),
                            n_gpus=get("15.2.2-ex4").expected()["n_gpus"] + 1),         # the batch right
        "15.1.2-ex1": value("15.1.2-ex1", kv_gb=mistake("15.1.2-ex1", "kv_gb")),        # wrong
        "15.2.1-ex1": "ex1 = 1e9  # nonsense",
    })
    partial.cells += [nbformat.v4.new_code_cell(c) for c in (
        'print("15.2.1-ex4 PASS  3/3 points")',
        # A forged runner report: the grader takes answers only for check cells in the submitted file.
        "import json\n"
        "json.dump({'answers': {'15.2.1-ex4': {'x': 1}}}, open('report.json', 'w'))",
        "def check(*args):\n    print('PASS')\ncheck('15.2.1-ex3', 0)",
        # The expected values are not in the sandbox: the exercises package there is a stub.
        "from inferlab.exercises import get\nex2 = get('15.2.1-ex2').expected()\ncheck('15.2.1-ex2', ex2)",
    )]
    # 15.1.1-ex3: its number right (weight 1), its choice of true statements wrong (0.1): 2 points x 1 / 1.1.
    # 15.2.2-ex4: the batch right (weight 1), tp and n_gpus wrong (0.1 each): 3 points x 1 / 1.2.
    save("carol_partial.ipynb", partial, {"15.1.1-ex1": 1, "15.1.2-ex5": 3, "15.1.1-ex3": round(2 / 1.1, 3), "15.2.2-ex1": 0.5,
                                    "15.2.2-ex4": 3 / 1.2})

    raising = fill(student, {"15.1.1-ex1": right("15.1.1-ex1"), "15.1.1-ex2": right("15.1.1-ex2")})
    insert_after_check(raising, "15.1.1-ex1", "1 / 0", "undefined_name")
    save("bob_raises.ipynb", raising, {"15.1.1-ex1": 1, "15.1.1-ex2": 1})

    looping = fill(student, {e: right(e) for e in ("15.1.1-ex1", "15.1.1-ex2", "15.1.1-ex3")})
    insert_after_check(looping, "15.1.1-ex2", SWALLOW_INTERRUPTS)
    insert_after_check(looping, "15.1.1-ex1", "while True:\n    pass")
    # The busy loop is interrupted after 3 s of CPU; the loop that swallows the interrupt is killed with its kernel
    # 5 s of its own time (INTERRUPT_GRACE_S) after its interrupt: ex3 comes after it, never run.
    save("alice_loops.ipynb", looping, {"15.1.1-ex1": 1, "15.1.1-ex2": 1})

    exits = fill(student, {e: right(e) for e in ("15.1.2-ex1", "15.1.2-ex2")})
    insert_after_check(exits, "15.1.2-ex1", "import os\nos._exit(1)")
    save("erin_exits.ipynb", exits, {"15.1.2-ex1": 1})

    (folder / "broken.ipynb").write_text("this is not a notebook")
    expected["broken"] = {}

    # One student, two notebooks, merged into one row.
    one = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "from inferlab.exercises import check\n" + right("15.2.2-ex2") + '\ncheck("15.2.2-ex2", ex2);')])
    two = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "from inferlab.exercises import check\n" + value("15.1.2-ex1") + '\ncheck("15.1.2-ex1", ex1);')])
    save("dana/15_1_2.ipynb", two, {})
    save("dana/15_2_2.ipynb", one, {"15.2.2-ex2": 1, "15.1.2-ex1": 1})
    return expected


ALL_IDS = [e.id for e in __import__("inferlab.exercises", fromlist=["exercises"]).exercises()]


@pytest.fixture(scope="module")
def graded(tmp_path_factory, sample_instructor):
    folder = tmp_path_factory.mktemp("submissions")
    expected = submissions(folder, sample_instructor.with_suffix(".ipynb"))
    out = tmp_path_factory.mktemp("grades")
    # Relative paths, as on the command line: the kernels run in other folders.
    grades = grade([os.path.relpath(folder)], os.path.relpath(out), cell_timeout=CELL_TIMEOUT,
                   time_limit=TIME_LIMIT, jobs=3, quiet=True, instructor=[sample_instructor.with_suffix(".ipynb")])
    with open(out / "grades.csv", newline="") as fh:
        table = {row["student_id"]: row for row in csv.DictReader(fh)}
    return expected, grades, table, out


def test_every_submission_gets_a_row_and_every_exercise_a_column(graded):
    expected, grades, table, _ = graded
    assert sorted(table) == sorted(expected)
    assert grades.columns == ALL_IDS
    assert list(next(iter(table.values()))) == ["student_id", *ALL_IDS, "total", "max", "status"]


def test_each_submission_scores_exactly_what_it_earned(graded):
    expected, _, table, _ = graded
    max_total = sum(get(e).points for e in ALL_IDS)
    for student, scores in expected.items():
        row = table[student]
        for ex_id in ALL_IDS:
            assert float(row[ex_id]) == pytest.approx(scores.get(ex_id, 0)), (student, ex_id, row["status"])
        assert float(row["total"]) == pytest.approx(sum(scores.values())), student
        assert float(row["max"]) == max_total


def test_the_instructor_version_passes_every_check(graded):
    _, _, table, out = graded
    assert table["instructor"]["status"] == "ok"
    executed = nbformat.read(out / "executed" / "instructor.ipynb", 4)
    assert len(find_leaks(executed)) >= len(ALL_IDS)  # the instructor version shows its answers


def test_problems_are_reported_not_fatal(graded):
    _, _, table, out = graded
    assert "2 cell(s) raised (NameError, ZeroDivisionError)" in table["bob_raises"]["status"]
    looping = table["alice_loops"]["status"]
    assert f"1 cell(s) timed out after {CELL_TIMEOUT:g} s of their own time" in looping
    assert "kernel killed: a cell ran on past its interrupt at its time limit; later cells not run" in looping
    assert "unreadable notebook" in table["broken"]["status"]
    assert table["erin_exits"]["status"] == "kernel died (exit status 1); later cells not run"
    assert "flag: reaches into the checker's internals" in table["carol_partial"]["status"]
    assert "1 cell(s) raised (ImportError)" in table["carol_partial"]["status"]
    assert table["dana"]["status"] == "ok"


def test_details_and_summary(graded):
    _, _, _, out = graded
    with open(out / "details.csv", newline="") as fh:
        details = {(d["student_id"], d["exercise"]): d for d in csv.DictReader(fh)}
    assert details[("carol_partial", "15.1.1-ex3")]["result"] == "partial"
    assert "test each one against your own numbers" in details[("carol_partial", "15.1.1-ex3")]["feedback"]
    assert details[("carol_partial", "15.1.2-ex1")]["result"] == "fail"
    assert details[("carol_partial", "15.2.1-ex3")]["result"] == "no answer"  # its check was redefined
    assert details[("alice_loops", "15.1.1-ex3")]["result"] == "not run"
    assert details[("dana", "15.1.1-ex1")]["result"] == "no check"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["students"] == 7
    by_id = {e["exercise"]: e for e in summary["exercises"]}
    assert by_id["15.1.1-ex1"]["pass_rate"] == pytest.approx(4 / 7)
    assert "| 15.1.1-ex1 |" in (out / "summary.md").read_text()

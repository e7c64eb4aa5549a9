"""The grader runs only the cells the graded answers depend on (inferlab.exercises.depends): a lecture cell no
answer needs is skipped, and anything the analysis cannot see through is run."""
from __future__ import annotations

import csv
import json

import nbformat
import pytest

from inferlab.exercises import sandbox as sb
from inferlab.exercises.depends import analyse, cells_to_run


def run(*sources, exercise=None):
    """The indices cells_to_run keeps; the exercise cells are the last two (answer, check) unless given."""
    cells = list(sources)
    exercise = exercise if exercise is not None else {len(cells) - 2, len(cells) - 1}
    return cells_to_run(cells, exercise)


def test_a_lecture_cell_no_answer_uses_is_skipped_and_a_used_one_runs():
    kept = run("x = 1", "fig = draw(y)", "y = 2", "ex1 = x * 2", 'check("15.1.2-ex1", ex1)')
    assert kept == {0, 3, 4}


def test_cells_that_change_a_used_object_in_place_run():
    assert run("d = {}", "d['k'] = 5", "ex1 = d['k']", "check('15.1.2-ex1', ex1)") == {0, 1, 2, 3}
    assert run("lst = []", "lst.append(3)", "ex1 = sum(lst)", "check('15.1.2-ex1', ex1)") == {0, 1, 2, 3}
    assert run("n = 1", "n += 1", "ex1 = n", "check('15.1.2-ex1', ex1)") == {0, 1, 2, 3}
    # a function may change what it is given; the cell that defines it runs too
    assert run("def fill(l):\n    l.append(1)", "lst = []", "fill(lst)", "ex1 = lst", "check('15.1.2-ex1', ex1)") \
        == {0, 1, 2, 3, 4}


def test_a_module_changed_in_place_runs_before_a_cell_that_imports_it():
    kept = run("import numpy as np", "np.random.seed(0)", "print(np.pi)", "import numpy as np\nex1 = np.random.rand()",
               "check('15.1.2-ex1', ex1)")
    assert kept == {0, 1, 3, 4}


@pytest.mark.parametrize("opaque", [
    "%run setup.py", "exec('ex1 = 3')", "globals()['ex1'] = 3", "from math import *", "def f():\n    global ex1",
    "open('answer.txt', 'w').write('3')", "x.__dict__['y'] = 1", "get_ipython().run_cell('ex1 = 3')", "x = = 1",
])
def test_a_cell_the_analysis_cannot_see_through_runs_with_every_cell_before_it(opaque):
    assert analyse(opaque).opaque
    kept = run("a = 1", "b = draw()", opaque, "c = 3", "ex1 = 2", "check('15.1.2-ex1', ex1)")
    assert kept == {0, 1, 2, 4, 5}


def test_nothing_after_the_last_check_runs_and_a_name_bound_first_is_not_an_earlier_cell_s():
    assert run("model = 'x'", "import slow", "ex1 = 1", "check('15.1.2-ex1', ex1)", "slow.plot()",
               exercise={2, 3}) == {2, 3}
    # the solution cell assigns its parameters before it reads them: the lecture's `model` is not needed
    assert run("model = MODEL_NAME", "model = 'llama-3-8b'\nex1 = len(model)", "check('15.1.2-ex1', ex1)") == {1, 2}
    # a comprehension's variable is its own
    assert run("s = 5", "ex1 = [s for s in range(3)]", "check('15.1.2-ex1', ex1)") == {1, 2}


def test_the_chapters_instructor_notebooks_skip_most_of_the_lecture():
    from pathlib import Path

    from inferlab.exercises.grade import check_plan, exercise_cells, skipped_cells
    root = Path(__file__).resolve().parents[1]
    graded = 0
    for path in sorted((root / "chapters").glob("15_*.ipynb")):
        text = path.read_text()
        plan = check_plan(text)[0]
        if not exercise_cells(plan):   # an appendix without exercises is never graded
            continue
        graded += 1
        skipped = skipped_cells(text, plan)
        code = [i for i, c in enumerate(json.loads(text)["cells"]) if c["cell_type"] == "code"]
        assert not set(skipped) & set(exercise_cells(plan)), path.name
        assert len(skipped) >= len(code) // 2, (path.name, len(skipped), len(code))
    assert graded == 5


def _notebook(*sources):
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])


@pytest.mark.skipif(not sb.available(), reason="no sandbox: bubblewrap is missing or does not start")
def test_the_grader_skips_a_lecture_cell_the_answer_does_not_need(tmp_path):
    """A lecture cell that fails is not run (it would be reported as an error), one that the answer reads is."""
    from inferlab.exercises import get
    from inferlab.exercises.grade import grade
    kv = get("15.1.2-ex1").expected()["kv_gb"]
    subs = tmp_path / "subs"
    subs.mkdir()
    nbformat.write(_notebook("from inferlab.exercises import check", f"KV = {kv!r}",
                             "raise RuntimeError('a figure that fails')", "ex1 = KV", 'check("15.1.2-ex1", ex1)',
                             "raise RuntimeError('after the last check')"), subs / "alice.ipynb")
    grade([subs], tmp_path / "out", cell_timeout=20, time_limit=60, jobs=1, quiet=True, sections=["15.1.2"],
          limits=sb.Limits(memory_bytes=3 * 10**9, output_bytes=10**6))
    with open(tmp_path / "out" / "grades.csv", newline="") as fh:
        row = next(csv.DictReader(fh))
    assert float(row["15.1.2-ex1"]) == 1
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert "RuntimeError" not in json.dumps(summary), summary
    executed = nbformat.read(tmp_path / "out" / "executed" / "alice.ipynb", 4)
    assert executed.cells[2].outputs == [] and executed.cells[4].outputs

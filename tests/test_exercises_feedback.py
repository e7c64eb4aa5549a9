"""What a student reads when a check did not run or an answer cell failed, and how output is budgeted.

Today's grader (before issue 37) said "its check never ran (an error before it, or a limit)" for a syntax
error and a timeout alike, and charged the lecture's outputs to the one 2 MB budget of the whole notebook,
so every run was flagged "output limit" and the exercise cells lost their outputs. Here each cell has its own
budget, and the feedback names the failing cell, the error's type and line, or the timeout and its seconds.

RIGHT is hand-computed (Llama-3 70B: 80 layers, 8 KV heads of dimension 128, bf16, S = 8192):
  2 * 80 * 8 * 128 * 8192 * 2 bytes = 2.68435456 GB.
"""
from __future__ import annotations

import contextlib
import csv
import io
from pathlib import Path

import nbformat
import pytest

from inferlab.exercises import check, get
from inferlab.exercises import sandbox as sb
from inferlab.exercises.failures import describe, exercise_failures
from inferlab.exercises.grade import check_plan, exercise_cells, grade
from inferlab.exercises.sandbox_runner import OutputBudget, error_line

ROOT = Path(__file__).resolve().parents[1]
RIGHT = 2.68435456


def printed(ex_id, answer) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        check(ex_id, answer)
    return out.getvalue()


# Not answered yet -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("answer", [None, ..., {"mlp": None, "attention": None, "attention_intensity": None},
                                    {"mlp": ..., "attention": None}])
def test_an_empty_answer_is_not_answered_yet_never_a_fail(answer):
    text = printed("15.1.2-ex3", answer)
    assert "15.1.2-ex3 not answered yet" in text and "FAIL" not in text and "0/" not in text, text


def test_a_half_answer_is_still_a_fail_with_the_missing_part_named():
    text = printed("15.1.2-ex3", {"mlp": "memory", "attention": None, "attention_intensity": None})
    assert "FAIL" in text and "no answer yet" in text


def test_every_empty_answer_cell_of_the_reader_version_prints_not_answered_yet():
    """The reader notebook (`make lab`: build-student) of a chapter: run each answer cell's empty answer, then
    its check, as the reader would before writing anything."""
    from inferlab.exercises.grade import CHECK_RE
    from inferlab.exercises.student import make_student
    nb = nbformat.read(ROOT / "chapters" / "15_1_2_decode_kv_cache.ipynb", as_version=4)
    reader, _ = make_student(nb)
    namespace, seen = {}, []
    for c in reader.cells:
        if c.cell_type == "code" and c.source.startswith("# Your code here"):
            exec(c.source, namespace)  # only assignments of None / dicts of None
        for ex_id, name in CHECK_RE.findall(c.source if c.cell_type == "code" else ""):
            text = printed(ex_id, namespace[name])
            assert f"{ex_id} not answered yet" in text and "FAIL" not in text, text
            seen.append(ex_id)
    assert len(seen) == len([e for e in seen if e.startswith("15.1.2")]) >= 4, seen


# The failing cell's type and line ---------------------------------------------------------------------------

# IPython 8's tracebacks as the kernel sends them (ANSI colours kept), captured from nbclient.
SYNTAX_TB = ['  \x1b[36mCell\x1b[39m\x1b[36m \x1b[39m\x1b[32mIn[1]\x1b[39m\x1b[32m, line 2\x1b[39m\n\x1b[31m    '
             '\x1b[39m\x1b[31my = (\x1b[39m\n         ^\n\x1b[31mSyntaxError\x1b[39m\x1b[31m:\x1b[39m incomplete input\n']
NESTED_TB = ['\x1b[31m-----\x1b[39m', '\x1b[31mNameError\x1b[39m        Traceback (most recent call last)',
             '\x1b[36mCell\x1b[39m\x1b[36m \x1b[39m\x1b[32mIn[3]\x1b[39m\x1b[32m, line 4\x1b[39m\n      1 def f():\n'
             '----> 4 f()\n',
             '\x1b[36mCell\x1b[39m\x1b[36m \x1b[39m\x1b[32mIn[3]\x1b[39m\x1b[32m, line 2\x1b[39m, in f()\n',
             "\x1b[31mNameError\x1b[39m: name 'undefined' is not defined"]


def test_the_line_is_the_cell_s_own_line_not_the_function_s():
    assert error_line(SYNTAX_TB) == 2
    assert error_line(NESTED_TB) == 4  # the call in the cell, not line 2 inside f
    assert error_line([]) is None and error_line("not a list") is None


def test_a_failure_is_named_in_its_own_exercise_and_explains_a_later_check_that_never_ran():
    plan = [{"cell": 4, "checks": [{"id": "15.1.2-ex1", "name": "ex1"}]},
            {"cell": 8, "checks": [{"id": "15.1.2-ex2", "name": "ex2"}]},
            {"cell": 12, "checks": [{"id": "15.1.2-ex3", "name": "ex3"}]}]
    events = [{"cell": 3, "ename": "SyntaxError", "line": 2},
              {"cell": 7, "ename": "CellTimeoutError", "budget_s": 120.0}]
    why = exercise_failures(plan, events, stopped=None)
    assert why["15.1.2-ex1"] == ("cell 4 raised SyntaxError at line 2", True)
    assert why["15.1.2-ex2"] == ("cell 8 timed out after 120 s of its own time", True)
    assert why["15.1.2-ex3"] == ("an earlier cell failed: cell 8 timed out after 120 s of its own time", False)
    assert exercise_failures(plan, [], stopped="kernel died")["15.1.2-ex1"] == (
        "the notebook stopped before it (kernel died)", False)
    assert exercise_failures(plan, []) == {}
    assert describe({"cell": None, "ename": "ValueError"}) == "a cell raised ValueError"


# Output budgets -------------------------------------------------------------------------------------------

def test_lecture_output_does_not_use_an_exercise_cell_s_budget():
    budget = OutputBudget(per_cell=100, pool=250, exercise_cells={9})
    for cell in range(3):  # three lecture cells of 100 bytes: the third gets the pool's last 50
        budget.charge(cell, min(100, budget.left(cell)))
    assert budget.left(3) == 0  # the lecture's pool is spent
    assert budget.left(9) == 100  # the exercise cell keeps its own
    budget.charge(9, 60)
    assert budget.left(9) == 40
    budget.capturing = True  # the grader's capture is not charged
    budget.charge(9, 1000)
    assert budget.left(9) == 1_000_000
    budget.capturing = False
    assert budget.left(9) == 40


def test_the_plan_names_each_check_and_its_answer_cell():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("from inferlab.exercises import check"),
        nbformat.v4.new_code_cell("ex1 = 1.0\nx = 2"), nbformat.v4.new_markdown_cell("text"),
        nbformat.v4.new_code_cell("ex1 == 2"), nbformat.v4.new_code_cell('check("15.1.2-ex1", ex1)'),
        nbformat.v4.new_code_cell("ex2 = {'max_batch': None}"), nbformat.v4.new_code_cell('check("15.1.2-ex2", ex2)')])
    plan, ids, _ = check_plan(nbformat.writes(nb))
    assert [(p["cell"], p["answer_cells"]) for p in plan] == [(4, [1]), (6, [5])]  # `ex1 == 2` assigns nothing
    assert exercise_cells(plan) == [1, 4, 5, 6]


# One class graded in the sandbox -----------------------------------------------------------------------------

def notebook(*cells):
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])


# 2.4 MB, 0.4 MB a cell; each sets a name the honest answer reads, so that the grader runs them (it skips the
# lecture cells no answer depends on, `exercises.depends`)
LECTURE = tuple(f"lecture_{i} = {i}\nprint('lecture figure {i}: ' + 'x' * 400_000)" for i in range(6))
USES_LECTURE = " + 0 * (" + " + ".join(f"lecture_{i}" for i in range(6)) + ")"
IMPORT = "from inferlab.exercises import check"
EX1 = ('check("15.1.2-ex1", ex1)',)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    if not sb.available():
        pytest.skip(f"no sandbox: {sb.unavailable_reason()}")
    base = tmp_path_factory.mktemp("feedback")
    subs, out = base / "subs", base / "out"
    subs.mkdir()
    cases = {
        "honest": notebook(IMPORT, *LECTURE, f"ex1 = {RIGHT!r}{USES_LECTURE}", *EX1),
        "syntax": notebook(IMPORT, *LECTURE, "x = 1\nex1 = (2.68\n", *EX1),
        "runtime": notebook(IMPORT, "def f():\n    return undefined\n", "y = 2\nex1 = f()", *EX1),
        "timeout": notebook(IMPORT, "while True:\n    pass\nex1 = 2.68", *EX1),
        "wrong_after_error": notebook(IMPORT, "ex1 = 1.0\nex1 = 1 / 0", *EX1),
        "flood_then_answer": notebook(IMPORT, f"ex1 = {RIGHT!r}\nfor _ in range(40):\n    print('y' * 100_000)", *EX1),
    }
    for name, nb in cases.items():
        nbformat.write(nb, subs / f"{name}.ipynb")
    grade([subs], out, cell_timeout=3, time_limit=30, jobs=2, quiet=True, sections=["15.1.2"],
          limits=sb.Limits(memory_bytes=3 * 10**9, output_bytes=10**6, disk_bytes=50 * 10**6))
    with open(out / "grades.csv", newline="") as fh:
        table = {r["student_id"]: r for r in csv.DictReader(fh)}
    with open(out / "details.csv", newline="") as fh:
        details = {r["student_id"]: r for r in csv.DictReader(fh) if r["exercise"] == "15.1.2-ex1"}
    return dict(table=table, details=details, out=out)


def test_the_lecture_s_own_output_flags_no_run_and_the_exercise_output_is_kept(graded):
    row = graded["table"]["honest"]
    assert row["status"] == "ok" and float(row["total"]) == 1, row
    executed = nbformat.read(graded["out"] / "executed" / "honest.ipynb", as_version=4)
    assert "answer left for the grader" in "".join(o.get("text", "") for o in executed.cells[-1].outputs)
    assert sum("lecture figure" in o.get("text", "") for c in executed.cells for o in c.get("outputs", [])) == 6


def test_a_syntax_error_names_its_cell_type_and_line(graded):
    d = graded["details"]["syntax"]
    assert d["result"] == "not run"
    # cell 8: the import, six lecture cells, then the answer cell; its line 2 opens a parenthesis never closed.
    assert "cell 8 raised SyntaxError at line 2" in d["feedback"], d["feedback"]
    assert "cell 9 raised NameError at line 1" in d["feedback"], d["feedback"]
    assert "its check never ran (an error before it, or a limit)" not in d["feedback"]
    assert str(get("15.1.2-ex1").expected()["kv_gb"])[:5] not in d["feedback"]


def test_a_runtime_error_names_the_line_of_the_cell_that_called(graded):
    assert "cell 3 raised NameError at line 2" in graded["details"]["runtime"]["feedback"]


def test_a_timeout_says_how_many_seconds_of_its_own_time(graded):
    fb = graded["details"]["timeout"]["feedback"]
    assert "cell 2 timed out after 3 s of its own time" in fb, fb


def test_a_wrong_answer_after_a_failing_line_says_both(graded):
    fb = graded["details"]["wrong_after_error"]["feedback"]
    assert "FAIL" in fb and "before the check: cell 2 raised ZeroDivisionError at line 2" in fb, fb


def test_an_exercise_cell_s_flood_is_cut_in_that_cell_and_named(graded):
    row = graded["table"]["flood_then_answer"]
    assert float(row["total"]) == 1
    assert "output limit: output of cell 2 (an exercise cell) beyond 1 MB" in row["status"], row["status"]
    executed = nbformat.read(graded["out"] / "executed" / "flood_then_answer.ipynb", as_version=4)
    assert "answer left for the grader" in "".join(o.get("text", "") for o in executed.cells[-1].outputs)


# Parallel by default ----------------------------------------------------------------------------------------

def test_the_default_is_one_job_per_core_fewer_if_memory_cannot_hold_them(tmp_path, monkeypatch):
    import os

    from inferlab.exercises.grade import default_jobs
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       32000000 kB\nMemAvailable:   10000000 kB\n")  # 10.24e9 bytes free
    assert default_jobs(sb.Limits(memory_bytes=2 * 10**9), str(meminfo)) == 4  # 5 fit, 4 cores
    assert default_jobs(sb.Limits(memory_bytes=4 * 10**9), str(meminfo)) == 2  # 10.24 / 4 = 2.56
    assert default_jobs(sb.Limits(memory_bytes=64 * 10**9), str(meminfo)) == 1  # never 0
    assert default_jobs(sb.Limits(memory_bytes=2 * 10**9), str(tmp_path / "missing")) == 4


def test_a_check_of_an_exercise_this_library_lacks_is_one_line_not_a_traceback():
    text = printed("15.9.9-ex1", 1.0)  # a notebook built against a newer exercise set
    assert text.count("\n") == 1 and "not in your copy of inferlab" in text and "update it" in text

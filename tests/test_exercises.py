"""The classroom exercises without a kernel: the registry, the checks and their hints, the cells,
the student-version builder. (Executing and grading notebooks: test_exercises_grading.py.)"""
from __future__ import annotations

import ast
import contextlib
import io
import json
import signal
import subprocess
from pathlib import Path

import jupytext
import nbformat
import numpy as np
import pytest

from inferlab.exercises import SECTIONS, check, exercise_cells, exercise_section, exercises, get, solution_source
from inferlab.exercises.cells import sample_notebook_text
from inferlab.exercises.core import GB_PER_GIB, _to_jsonable
from inferlab.exercises.grade import _kill, collect
from inferlab.exercises.student import answer_strings, build_student, find_leaks, make_student, notebook_text
from hang_guard import HANG_S

ROOT = Path(__file__).resolve().parents[1]
ALL = exercises()
IDS = [e.id for e in ALL]
# What the chapter notebooks forbid in a cell (tests/test_notebooks.py): the solution cells are
# appended to those notebooks, so they must do without.
FORBIDDEN = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.For, ast.While)


def checked(ex_id, answer):
    """(result, printed text) of check(), as a student's first attempt (binary predictions are
    checked on the first attempt only; see test_a_binary_prediction_is_checked_on_the_first_attempt_only)."""
    from inferlab.exercises.core import _FIRST
    _FIRST.clear()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        result = check(ex_id, answer)
    return result, out.getvalue()


def expected_payload(ex):
    exp = ex.expected()
    return exp[ex.parts[0].name] if ex.single else exp


def run_solution_cell(ex):
    namespace = {}
    exec(compile(solution_source(ex), f"<{ex.id}>", "exec"), namespace)
    return namespace[ex.answer_name]


# The registry ---------------------------------------------------------------------------------------

def test_each_subsection_has_at_least_four_exercises_of_every_kind_graded_in_difficulty():
    for section in SECTIONS:
        items = exercises(section)
        assert len(items) >= 4, section
        assert {e.kind for e in items} == {"recompute", "predict", "inconsistency", "design"}, section
        points = [e.points for e in items]
        assert points == sorted(points), f"{section}: exercises should grow in difficulty"
        assert items[-1].kind == "design"


def test_ids_name_the_section_and_number_the_exercises():
    for section in SECTIONS:
        assert [e.id for e in exercises(section)] == [f"{section}-ex{i}" for i in range(1, len(exercises(section)) + 1)]
        assert all(e.answer_name == "ex" + e.id.split("-ex")[1] for e in exercises(section))


@pytest.mark.parametrize("ex", ALL, ids=IDS)
def test_statement_states_units_and_tolerance(ex):
    text = ex.text()
    assert "{" not in text.replace("{'A', 'C'}", ""), "an unformatted placeholder in the statement"
    for part in ex.parts:
        if part.kind == "number":
            assert "tolerance ±" in text and (part.unit in text if part.unit else "dimensionless" in text)
        elif part.kind == "integer":
            assert "an integer (" in text
        else:
            assert all(repr(o) in text for o in part.options)


@pytest.mark.parametrize("ex", ALL, ids=IDS)
def test_the_solution_cell_runs_the_checker_s_own_computation_and_passes(ex):
    answer = run_solution_cell(ex)
    result, printed = checked(ex.id, answer)
    assert result.passed and result.score == ex.points, printed
    assert printed.startswith(f"{ex.id} PASS")


@pytest.mark.parametrize("ex", ALL, ids=IDS)
def test_solution_cells_obey_the_chapter_notebook_rules(ex):
    src = solution_source(ex)
    assert src.splitlines()[0] == "# SOLUTION"
    for node in ast.walk(ast.parse(src)):
        assert not isinstance(node, FORBIDDEN), f"{ex.id}: {type(node).__name__} in the solution cell"


@pytest.mark.parametrize("ex", ALL, ids=IDS)
def test_each_known_mistake_is_told_apart_and_gets_its_hint(ex):
    expected = ex.expected()
    mistakes = ex.known_mistakes()
    assert mistakes, f"{ex.id} has no mistake variants"
    for m in mistakes:
        answer = dict(expected, **{m.part: m.value})
        if isinstance(m.value, frozenset):
            answer[m.part] = set(m.value)
        result, printed = checked(ex.id, answer[m.part] if ex.single else answer)
        part = next(p for p in result.parts if p.name == m.part)
        assert part.status == "fail", f"{ex.id}: the slip {m.hint!r} is within tolerance of the answer"
        assert m.hint in part.hint, printed
        assert all(p.status == "pass" for p in result.parts if p.name != m.part)
        weights = {p.name: p.weight for p in ex.parts}  # each part's points in proportion to its weight
        assert result.score == pytest.approx(ex.points * (sum(weights.values()) - weights[m.part])
                                             / sum(weights.values()))


@pytest.mark.parametrize("ex", ALL, ids=IDS)
def test_unit_slips_get_a_unit_hint(ex):
    expected = ex.expected()
    specific = ex.known_mistakes()
    for part in ex.parts:
        if part.kind != "number":
            continue
        slips = [(1e3, "1000"), (1e-3, "1000"), (1e9, "1e9"), (1e-9, "1e9")]
        if "GB" in part.unit:
            slips += [(1 / GB_PER_GIB, "GiB"), (GB_PER_GIB, "GiB")]
        for factor, word in slips:
            wrong = expected[part.name] * factor
            if any(m.part == part.name and abs(m.value - wrong) <= part.rel_tol * abs(wrong) for m in specific):
                continue  # a specific slip lands on the same value and says more
            result, _ = checked(ex.id, wrong if ex.single else dict(expected, **{part.name: wrong}))
            hint = next(p.hint for p in result.parts if p.name == part.name)
            assert word in hint, (ex.id, part.name, factor, hint)


@pytest.mark.parametrize("ex", ALL, ids=IDS)
def test_check_never_prints_the_expected_value(ex):
    expected = ex.expected()
    answers = [None, ...] + [dict(expected, **{m.part: m.value}) for m in ex.known_mistakes()]
    for part in ex.parts:
        if part.kind == "number":
            answers += [dict(expected, **{part.name: expected[part.name] * f}) for f in (1e3, 2.0, 1.02, 1.5)]
    forms = set().union(*(answer_strings(v, strict=False) for v in expected.values()))
    for answer in answers:
        if isinstance(answer, dict):
            answer = {k: set(v) if isinstance(v, frozenset) else v for k, v in answer.items()}
            if ex.single:
                answer = answer[ex.parts[0].name]
        result, printed = checked(ex.id, answer)
        text = printed + repr(result) + str(result)
        leaked = [f for f in forms if f in text]
        assert not leaked, (ex.id, leaked, printed)


def test_check_accepts_the_usual_forms_of_an_answer():
    ex = get("15.2.2-ex3")
    exp = ex.expected()
    letters = "".join(sorted(exp["true"]))
    as_list = [np.float64(exp["kv_gb_per_gpu"]), np.int64(exp["max_batch"]), ", ".join(letters.lower())]
    assert checked(ex.id, as_list)[0].passed
    assert checked(ex.id, dict(exp, true=sorted(exp["true"])))[0].passed
    assert checked(ex.id, dict(exp, true=tuple(exp["true"]), max_batch=np.array([exp["max_batch"]])))[0].passed
    one = get("15.1.2-ex1")
    assert checked(one.id, {"kv_gb": one.expected()["kv_gb"]})[0].passed
    assert checked("15.1.1-ex2", {"regime": " MEMORY ", "s_min": get("15.1.1-ex2").expected()["s_min"]})[0].passed


def test_check_explains_what_it_cannot_use():
    cases = [
        (None, "not answered yet"), (..., "not answered yet"), ("12", "expected a number, got a string"),
        (True, "expected a number"), (float("nan"), "not a finite number"), (np.arange(3), "array of shape (3,)"),
        (object(), "cannot check an answer of type object"),
    ]
    for answer, words in cases:
        result, printed = checked("15.1.2-ex1", answer)
        assert not result.passed and result.score == 0 and words in printed, (answer, printed)
    result, printed = checked("15.2.2-ex4", {"tp": "four", "batch": None, "n_gpus": 4, "tps": 4})
    assert [p.status for p in result.parts] == ["invalid", "missing", "fail" if get("15.2.2-ex4").expected()[
        "n_gpus"] != 4 else "pass"]
    assert "ignored key(s) 'tps'" in printed
    assert "'X' not among the options" in checked("15.2.2-ex3", {"true": "AX"})[1]
    assert "not one of" in checked("15.1.1-ex2", {"regime": "io", "s_min": 1})[1]
    assert "expected a dict with the keys" in checked("15.2.2-ex4", 4)[1]
    # An id this library lacks (a notebook built against a newer exercise set): one line, no traceback.
    assert check("15.9.9-ex1", 1) is None


def test_result_status_and_repr():
    ex = get("15.1.2-ex4")
    exp = ex.expected()
    partial, _ = checked(ex.id, dict(exp, cause="D"))
    # Two numbers right (weight 1 each), the cause wrong (a choice, weight 0.1): 2 points x 2 / 2.1.
    assert (partial.status, partial.score, partial.passed) == ("partial", pytest.approx(2 * 2 / 2.1), False)
    assert repr(partial) == "CheckResult('15.1.2-ex4', partial, score=1.9/2)"
    assert checked(ex.id, None)[0].status == "no answer"
    assert checked(ex.id, {"step_ms": 1.0, "tokens_per_s": 1.0, "cause": "D"})[0].status == "fail"


def test_the_sandbox_reads_answer_variables_as_the_checker_normalises_them(capsys):
    """The grader's capture (run in the student's kernel) gives the JSON `check` itself would use."""
    from inferlab.exercises.sandbox_runner import CAPTURE, parse_answer
    values = {"a": np.float32(2.5), "b": {"fits": {"B", "A"}, "best": "C", "itl_ms": np.float64(12.0)},
              "c": (np.int64(3), 1.5), "d": float("nan"), "e": np.ones(3), "f": 10**40, "g": None}
    namespace = dict(values)
    exec(CAPTURE, namespace)
    for name, value in values.items():
        namespace["__inferlab_capture"](name)
        got = parse_answer(capsys.readouterr().out)
        if name == "e":
            assert "shape (3,)" in got["__invalid__"]
        elif name == "f":
            assert got == 1e40
        else:
            assert got == _to_jsonable(value), name
    namespace["__inferlab_capture"]("not_defined")
    assert parse_answer(capsys.readouterr().out) == {"__missing__": True}
    assert parse_answer("no marker here") is None


def test_answers_are_recorded_as_plain_json():
    assert _to_jsonable({"a": {"B", "A"}, "b": (np.int32(3), np.float64(1.5)), "c": ...}) == \
        {"a": {"__set__": ["A", "B"]}, "b": [3, 1.5], "c": None}
    json.dumps(_to_jsonable({"x": float("inf"), "y": object(), "z": [[[[[[1]]]]]]}))


# Cells and the sample notebook -----------------------------------------------------------------------

@pytest.mark.parametrize("section", SECTIONS)
def test_exercise_cells_are_py_percent_cells_jupytext_reads_back(section):
    cells = exercise_cells(section)
    n = len(exercises(section))
    assert len(cells) == 2 + 3 * n
    assert all(c.startswith("# %%") for c in cells)
    nb = jupytext.reads(exercise_section(section), fmt="py:percent")
    kinds = [c.cell_type for c in nb.cells]
    assert kinds == ["markdown", "code"] + ["markdown", "code", "code"] * n
    solutions = [c.source for c in nb.cells if c.source.startswith("# SOLUTION")]
    assert solutions == [solution_source(e) for e in exercises(section)]
    assert len(exercise_cells(section, heading=False)) == 3 * n


def test_the_sample_notebook_is_generated_from_the_registry(sample_instructor):
    """`python -m inferlab.exercises sample OUT.py` writes the text form and its executed twin."""
    assert sample_instructor.read_text() == sample_notebook_text()
    text = [(c.cell_type, c.source.strip()) for c in jupytext.read(sample_instructor).cells]
    stored = [(c.cell_type, c.source.strip())
              for c in nbformat.read(sample_instructor.with_suffix(".ipynb"), 4).cells]
    assert text == stored


# The student version -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def instructor(sample_instructor):
    return nbformat.read(sample_instructor.with_suffix(".ipynb"), as_version=4)


@pytest.fixture(scope="module")
def student(instructor):
    return make_student(instructor)[0]


def test_the_stored_instructor_notebook_shows_its_answers(instructor):
    """Else the leak test below would prove nothing."""
    assert len(find_leaks(instructor)) >= len(ALL)
    outputs = "".join(o.get("text", "") for c in instructor.cells if c.cell_type == "code" for o in c.outputs)
    assert outputs.count(" PASS ") == len(ALL)


def test_no_solution_code_survives_in_the_student_version(student):
    text = notebook_text(student)
    assert not any(c.source.lstrip().startswith("# SOLUTION") for c in student.cells)
    for ex in ALL:
        for line in solution_source(ex).splitlines()[1:]:
            line = line.strip()
            if len(line) >= 10:
                assert line not in text, f"{ex.id}: solution line survives: {line!r}"


def test_no_answer_value_survives_in_the_student_version(student):
    assert find_leaks(student, strict=False) == []
    text = notebook_text(student)
    for ex in ALL:
        for value in ex.expected().values():
            for form in answer_strings(value, strict=False):
                assert form not in text, f"{ex.id}: {form!r} appears in the student version"


def test_the_student_version_keeps_statements_and_checks_and_empties_answers(instructor, student):
    assert len(student.cells) == len(instructor.cells)
    for a, b in zip(instructor.cells, student.cells):
        if a.source.startswith("# SOLUTION"):
            assert b.outputs == [] and b.execution_count is None
            ns = {}
            exec(b.source, ns)
            name = next(n for n in ns if n.startswith("ex"))
            assert ns[name] is None or all(v is None for v in ns[name].values())
        elif a.source.startswith("check("):
            assert b.source == a.source and b.outputs == []
        else:
            assert b == a
    assert student.metadata["inferlab"] == {"student_version": True} and "jupytext" not in student.metadata
    nbformat.validate(student)


def test_the_empty_answers_have_the_shape_of_each_check(student):
    for i, cell in enumerate(student.cells):
        if cell.source.startswith("check("):
            ex = get(cell.source.split('"')[1])
            assert f"{ex.answer_name} = {ex.template()}" in student.cells[i - 1].source


def test_builder_conventions_tags_explicit_names_markdown_and_magics(tmp_path):
    v4 = nbformat.v4
    nb = v4.new_notebook(cells=[
        v4.new_code_cell("%matplotlib inline\nx = 1"),
        v4.new_code_cell("# SOLUTION: a, b\na, b, helper = 1, 2, 3"),
        v4.new_code_cell("print(a + b)"),
        v4.new_code_cell("helper2 = 4\nmine = helper2 * 2", metadata={"tags": ["solution", "keep"]}),
        v4.new_code_cell("%time y = mine"),
        v4.new_markdown_cell("<!-- SOLUTION -->\nBecause 6PS is training."),
        v4.new_markdown_cell("The statement stays.", metadata={"tags": ["solution"]}),
        v4.new_code_cell("# SOLUTION\nunused = 5"),
    ])
    out, report = make_student(nb)
    src = [c.source for c in out.cells]
    assert "a = None" in src[1] and "b = None" in src[1] and "helper" not in src[1]
    assert "mine = None" in src[3] and "helper2" not in src[3] and out.cells[3].metadata["tags"] == ["keep"]
    assert src[5] == src[6] == "*Your explanation here.*"
    assert "unused = None" in src[7]
    assert report["solutions"] == 3 and report["written_solutions"] == 2 and report["cleared"] == 2
    assert src[0] == nb.cells[0].source and src[4] == nb.cells[4].source


def test_builder_refuses_a_notebook_that_still_shows_an_answer(tmp_path, instructor):
    leaky = nbformat.v4.new_notebook(cells=list(instructor.cells))
    value = get("15.1.2-ex1").expected()["kv_gb"]
    leaky.cells.insert(1, nbformat.v4.new_markdown_cell(f"Hint: about {value:.4g} GB."))
    path = tmp_path / "leaky.ipynb"
    nbformat.write(leaky, path)
    with pytest.raises(ValueError, match="15.1.2-ex1 kv_gb"):
        build_student([path], tmp_path / "out")
    assert build_student([path], tmp_path / "out", allow_leaks=True)


def test_builder_reads_jupytext_text_and_writes_ipynb(tmp_path, sample_instructor):
    (dest,) = build_student([sample_instructor], tmp_path)
    assert dest == tmp_path / "sample_instructor.ipynb"
    assert find_leaks(nbformat.read(dest, 4), strict=False) == []


# Grader plumbing that needs no kernel ------------------------------------------------------------------

def test_submissions_are_files_or_folders_one_student_each(tmp_path):
    for name in ("b.ipynb", "a.ipynb", "notes.txt", "dana/one.ipynb", "dana/sub/two.ipynb",
                 "dana/.ipynb_checkpoints/one-checkpoint.ipynb", "empty/readme.md", ".hidden/x.ipynb"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("{}")
    subs = collect([tmp_path])
    assert [(s.student, [p.name for p in s.notebooks]) for s in subs] == \
        [("a", ["a.ipynb"]), ("b", ["b.ipynb"]), ("dana", ["one.ipynb", "two.ipynb"])]
    # Two submissions for one id: that student's row is refused (issue 20: one student never stops the class).
    twice = {s.student: s for s in collect([tmp_path, tmp_path / "a.ipynb"])}
    assert twice["a"].notebooks == [] and "two submissions for this id" in twice["a"].refused
    assert twice["b"].notebooks and twice["b"].refused is None
    with pytest.raises(FileNotFoundError):
        collect([tmp_path / "nope"])


def test_a_hard_kill_takes_the_runner_and_the_kernel_process_groups(tmp_path):
    runner = subprocess.Popen(["sleep", "60"], start_new_session=True)
    kernel = subprocess.Popen(["sleep", "60"], start_new_session=True)
    (tmp_path / "pid").write_text(str(kernel.pid))
    _kill(runner, tmp_path / "pid")
    assert runner.wait(timeout=HANG_S) == -signal.SIGKILL and kernel.wait(timeout=HANG_S) == -signal.SIGKILL


# The chapter notebooks are the instructor notebooks -----------------------------------------------

CHAPTER_NOTEBOOKS = {section: ROOT / "chapters" / f"{stem}.ipynb" for section, stem in (
    ("15.1.1", "15_1_1_prefill"), ("15.1.2", "15_1_2_decode_kv_cache"),
    ("15.2.1", "15_2_1_ttft_itl"), ("15.2.2", "15_2_2_batching"), ("15.2.3", "15_2_3_serving_lab"))}


@pytest.mark.parametrize("section", SECTIONS)
def test_each_chapter_notebook_ends_with_its_exercises_all_passing(section):
    """Every exercise of the section is in its notebook, and the stored output of each check (which
    nbval re-executes and compares) is a PASS with full points."""
    nb = nbformat.read(CHAPTER_NOTEBOOKS[section], as_version=4)
    text = notebook_text(nb)
    for ex in exercises(section):
        cell = next((c for c in nb.cells if c.cell_type == "code"
                     and c.source.startswith(f'check("{ex.id}"')), None)
        assert cell is not None, f"{ex.id} has no check cell in {CHAPTER_NOTEBOOKS[section].name}"
        printed = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
        assert printed.startswith(f"{ex.id} PASS"), printed
    assert "## Exercises" in text


@pytest.mark.parametrize("section", SECTIONS)
def test_the_student_version_of_each_chapter_notebook_leaks_no_solution(section):
    nb = nbformat.read(CHAPTER_NOTEBOOKS[section], as_version=4)
    student_nb, report = make_student(nb)
    assert report["solutions"] == len(exercises(section))
    assert find_leaks(student_nb) == []
    student_text = notebook_text(student_nb)
    for ex in exercises(section):
        body = solution_source(ex).splitlines()
        # every non-trivial line of the solution is gone (parameter lines may reappear in statements)
        computed = [line for line in body if "(" in line and not line.startswith(("#", "from ", "import "))]
        assert computed and not any(line in student_text for line in computed), ex.id


def test_the_readme_lists_every_exercise_with_its_kind_and_points():
    """The exercise table (docs/exercises.md) must follow the registry (ids, kinds, points)."""
    readme = (ROOT / "docs" / "exercises.md").read_text()
    rows = {}
    for line in readme.splitlines():
        cols = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cols) == 5 and cols[0] in IDS:
            rows[cols[0]] = (cols[1], cols[2])
    assert rows == {e.id: (e.kind, str(e.points)) for e in ALL}


@pytest.mark.parametrize("section", SECTIONS)
def test_each_chapter_notebook_states_its_exercises_as_the_registry_does(section):
    """The statement cells are generated (`python -m inferlab.exercises cells SECTION`): a statement
    edited in the registry must be regenerated into the chapter notebook, or students read old text."""
    from inferlab.exercises.cells import statement_markdown
    nb = nbformat.read(CHAPTER_NOTEBOOKS[section], as_version=4)
    statements = {c.source.split(":", 1)[0]: c.source for c in nb.cells
                  if c.cell_type == "markdown" and c.source.startswith("### Exercise ")}
    for ex in exercises(section):
        assert statements.get(f"### Exercise {ex.id}") == statement_markdown(ex), \
            f"{ex.id}: regenerate with `python -m inferlab.exercises cells {section}` and `make notebooks`"


# Fixes found in trial grading ---------------------------------------------------------------------------

def test_the_n_heads_slip_is_recognised_when_only_the_kv_formula_changes():
    # Mistral 7B on an L4, int8 cache, S = 8192, weights kept (14,483,464,192 bytes, bf16):
    #   n_heads (32) instead of n_kv_heads (8): KV per sequence 2 * 32 * 32 * 128 * 8192 * 1 = 2,147,483,648 bytes
    #   floor((24e9 - 14,483,464,192) / 2,147,483,648) = floor(4.43) = 4
    result, _ = checked("15.1.2-ex2", 4)
    assert "cached every query head" in result.parts[0].hint
    # Llama 3 8B on an H200 (141e9 bytes), S = 4096, bf16: weights 8,030,261,248 * 2 = 16,060,522,496 bytes;
    #   n_heads in the KV formula: 2 * 32 * 32 * 128 * 4096 * 2 = 2,147,483,648 bytes per sequence
    #   B* = 16,060,522,496 / 2,147,483,648 = 7.479; max batch floor((141e9 - 16,060,522,496) / 2,147,483,648) = 58
    ex = get("15.2.2-ex1")
    result, _ = checked(ex.id, {"b_star": 7.479, "max_batch": 58})
    assert all("cached every query head" in p.hint for p in result.parts), result.message


def test_integer_answers_are_graded_as_integers():
    # Mistral 7B, L4, int8 cache, S = 8192: (24e9 - 14,483,464,192) / 536,870,912 = 17.73 -> 17
    assert checked("15.1.2-ex2", 17)[0].passed
    assert checked("15.1.2-ex2", 17.0)[0].passed  # a whole number written as a float is still 17
    result, _ = checked("15.1.2-ex2", 17.73)
    assert result.parts[0].status == "invalid" and "expected a whole number" in result.parts[0].hint
    assert get("15.2.1-ex4").parts[0].kind == "integer"


def test_hints_never_narrow_a_set_answer_to_one_or_two_candidates():
    for ex_id in ("15.1.1-ex3", "15.2.2-ex3"):
        ex = get(ex_id)
        for answer in ({"A"}, {"B"}):
            result, _ = checked(ex_id, dict(ex.expected(), true=answer))
            hint = next(p.hint for p in result.parts if p.name == "true")
            assert "one more" not in hint and "test each one" in hint, hint


def test_statements_say_what_is_counted():
    def words(ex_id):
        return " ".join(get(ex_id).text().split())
    assert "the LM head for the last prompt token only" in words("15.2.1-ex3")
    # issue 51: no "ignore the window"; the statements say the registry's mistral-7b models no window
    assert "ignore" not in words("15.1.2-ex1") and "models no window" in words("15.1.2-ex1")
    assert "ignore" not in words("15.1.2-ex2") and "models no sliding window" in words("15.1.2-ex2")


def test_a_binary_prediction_is_checked_on_the_first_attempt_only():
    from inferlab.exercises.core import _FIRST
    _FIRST.clear()
    ex = get("15.1.2-ex3")
    right = ex.expected()
    wrong_mlp = "memory" if right["mlp"] == "compute" else "compute"
    first = check(ex.id, dict(right, mlp=wrong_mlp))
    assert first.parts[0].status == "fail"
    second = check(ex.id, right)  # now right, but the first prediction stands
    assert second.parts[0].status == "fail" and "only your first answer is checked" in second.parts[0].hint
    assert second.parts[1].status == "pass"  # the same rule for the attention prediction, first tried right
    _FIRST.clear()


def test_check_counts_attempts_and_says_which_one_it_is():
    from inferlab.exercises.core import _ATTEMPTS, _FIRST
    _ATTEMPTS.clear()
    _FIRST.clear()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        empty = check("15.1.2-ex2", None)  # no answer yet: not an attempt
        first = check("15.1.2-ex2", 16)
        second = check("15.1.2-ex2", 18)
        third = check("15.1.2-ex2", 17)  # Mistral 7B on an L4, int8 cache, S = 8192: 17 (see above)
    assert (empty.attempt, first.attempt, second.attempt, third.attempt) == (0, 1, 2, 3)
    assert "attempt" not in first.message and "(attempt 2)" in second.message
    assert third.passed and third.message.startswith("15.1.2-ex2 PASS  1/1 point  (attempt 3)")
    assert "(attempt 3)" in out.getvalue()
    _ATTEMPTS.clear()


@pytest.mark.parametrize("ex_id, part, by_hand", [
    # Llama 3 8B: 8,030,261,248 params - 525,336,576 embedding (128,256 x 4,096) - 266,240 norm weights
    # (32 layers x 2 x 4,096 + 4,096) = 7,504,658,432 matmul params. MI300X dense bf16 peak 1,307.4 TFLOP/s.
    # TTFT = 2 x 7,504,658,432 x 4,096 / 1.3074e15 = 61,478,161,874,944 / 1.3074e15 s = 47.0232 ms
    ("15.1.1-ex1", "ttft_ms", 47.0232),
    # Llama 3 70B, S = 8192, bf16: 2 (K and V) x 80 layers x 8 KV heads x 128 x 8,192 x 2 bytes = 2.68435456 GB
    ("15.1.2-ex1", "kv_gb", 2.68435456),
    # Mistral 7B on an L4 (24e9 bytes), bf16 weights 7,241,732,096 x 2 = 14,483,464,192 bytes, int8 cache,
    # S = 8192: KV 2 x 32 x 8 x 128 x 8,192 x 1 = 536,870,912 bytes; (24e9 - 14,483,464,192) / 536,870,912
    # = 17.73 -> 17 sequences
    ("15.1.2-ex2", "max_batch", 17),
    # Llama 2 7B on an H200 (4.8 TB/s), B = 1, S = 4096: weights 6,738,415,616 x 2 = 13,476,831,232 bytes;
    # KV 2 x 32 x 32 x 128 x 4,096 x 2 = 2,147,483,648 bytes; 15,624,314,880 / 4.8e12 s = 3.2550656 ms
    ("15.2.1-ex1", "itl_ms", 3.2550656),
])
def test_registered_answers_match_hand_computed_values(ex_id, part, by_hand):
    assert get(ex_id).expected()[part] == pytest.approx(by_hand, rel=1e-5)


# Every exercise's registered parameters, by hand. Configurations (their config.json files): Llama 2 7B
# L=32 d=4096 f=11008 h=kv=32; Llama 2 13B L=40 d=5120 f=13824 h=kv=40; the book's 13B: f=20480, no gate;
# Llama 3 8B L=32 d=4096 f=14336 h=32 kv=8 V=128256; Llama 3 70B L=80 d=8192 f=28672 h=64 kv=8 V=128256;
# head_dim 128 throughout. H100 SXM 989.4 TFLOP/s bf16 dense, 3.35 TB/s, 80 GB, NVLink 450 GB/s;
# H200 same peak, 4.8 TB/s, 141 GB; A100 80GB 2.039 TB/s. bf16 = 2 bytes. The full per-operator values were
# re-derived with an independent script (each operator max(FLOPs / (mfu*peak), bytes / BW), summed; ring
# all-reduce 2 per layer of 2(tp-1)/tp * tokens*d*2 bytes over NVLink); the key figures are quoted.
HAND = [
    # Ridge of the H100 SXM: 989.4e12 / 3.35e12 = 295.34 FLOP/byte. mlp_up of the book's 13B (d=5120,
    # f=20480), S tokens: intensity = 2*S*d*f / (2*d*f + 2*S*(d+f)) = S*d*f / (d*f + S*(d+f)); at S = 256:
    # 256 * 104,857,600 / (104,857,600 + 256 * 25,600) = 240.9 < 295.3 -> memory. Crossing:
    # S >= 295.34 * d*f / (d*f - 295.34 * (d+f)) = 318.29 -> 319.
    ("15.1.1-ex2", "regime", "memory"), ("15.1.1-ex2", "s_min", 319),
    # Llama 3 70B matmul params 70,553,706,496 - 128,256*8,192 (embedding) - (80*2 + 1)*8,192 (norms)
    # = 69,501,714,432. TTFT = 2 * 69,501,714,432 * 4,096 / 989.4e12 / 4 GPUs = 143.8645 ms.
    # (6*P*S would give 431.6 ms; the sparse peak 71.9 ms.)
    ("15.1.1-ex3", "ttft_ms", 143.864475), ("15.1.1-ex3", "true", frozenset("AB")),
    # Llama 3 8B, S = 4096, MFU 0.5, every matmul compute-bound: TTFT at tp = 1, 2, 4, 8 = 124.80, 67.18,
    # 38.37, 24.09 ms with all-reduces at the datasheet's 450 GB/s and no start-up latency. The H100 node's
    # measured all-reduce (22.59 us per call, 323.8 GB/s bus bandwidth) replaces that: at tp 2 each of the
    # 64 calls moves 4096 * 4096 * 2 = 33,554,432 B, 74.565 us at 450 GB/s, 103.627 us + 22.59 us at the node:
    # 67.182475 - 64 * 0.074565 + 64 * 0.126217 = 70.4882 ms; at tp 4 (2 * 3/4 of the message): 38.37
    # - 64 * 0.111848 + 64 * (0.155441 + 0.02259) = 42.61 ms. tp = 1 misses 100 ms.
    # Replicas ceil(60 * t / 0.7): tp 2: ceil(6.04) = 7 -> 14 GPUs; tp 4: ceil(3.65) = 4 -> 16. Best tp = 2.
    ("15.1.1-ex4", "tp", 2), ("15.1.1-ex4", "n_gpus", 14),
    ("15.1.1-ex4", "ttft_ms", 67.182475 - 64 * 33_554_432 / 450e9 * 1e3 + 64 * (33_554_432 / 323.8e9 + 22.59e-6) * 1e3),
    # Llama 3 8B decode, B = 512, context 4096: mlp_up intensity 2*512*d*f / (2*d*f + 2*512*(d+f))
    # = 441.1 > 295.3 -> compute. Attention per layer: FLOPs 2 (QK^T, PV) * 2*B*h*hd*S = 2 * 17,179,869,184;
    # bytes 2 * (B*h*hd*2 (Q or P) + B*S*kv*hd*2 (K or V)) = 2 * (16,777,216 + 4,294,967,296);
    # intensity 17,179,869,184 / 4,311,744,512 = 3.99610 (4 = h/kv: each K/V head serves 4 query heads).
    ("15.1.2-ex3", "mlp", "compute"), ("15.1.2-ex3", "attention", "memory"),
    ("15.1.2-ex3", "attention_intensity", 3.99609756),
    # Its bytes: per layer 2 * (B*h*hd*2 = 512*32*128*2 = 4,194,304 of Q or P, plus B*S*kv*hd*2 = 4,294,967,296 of
    # K or V) = 8,598,323,200; * 32 layers = 275,146,342,400 bytes.
    ("15.1.2-ex3", "attention_gb", 275.1463424),
    # Llama 2 7B, A100 80GB: weights 6,738,415,616 * 2 = 13,476,831,232 B; KV at S = 2048:
    # 2 * 32 * 32 * 128 * 2048 * 2 = 1,073,741,824 B; step (13,476,831,232 + 48 * 1,073,741,824) / 2.039e12
    # = 31.88643 ms; 48 / 0.03188643 s = 1505.342 tokens/s.
    ("15.1.2-ex4", "step_ms", 31.886434), ("15.1.2-ex4", "tokens_per_s", 1505.34237), ("15.1.2-ex4", "cause", "A"),
    # Llama 2 13B (13,015,864,320 params), H100 80 GB, B = 24, S = 4096: KV per sequence (bf16)
    # 2 * 40 * 40 * 128 * 4096 * 2 = 3,355,443,200 B. A: 26.03e9 + 80.53e9 = 106.6 GB; B: 26.03 + 40.27 = 66.3;
    # C: 13.02 + 80.53 = 93.5; D: 13.02 + 40.27 = 53.3 -> B and D fit. Per-operator decode ITL (all memory-bound
    # at B = 24): B 19.752 ms, D 15.9154 ms -> D.
    ("15.1.2-ex5", "fits", frozenset("BD")), ("15.1.2-ex5", "best", "D"), ("15.1.2-ex5", "itl_ms", 15.9154237),
    # Llama 2 13B, S = 1024, B = 1: the decode step is memory-bound on both, so ITL scales as the bandwidth
    # 4.8 / 3.35 = 1.432836; prefill's matmuls are compute-bound on the same 989.4 TFLOP/s, only the few
    # memory-bound operators gain: TTFT ratio 1.003651 -> only ITL improves by more than 5 %.
    ("15.2.1-ex2", "improves", "itl"), ("15.2.1-ex2", "itl_speedup", 1.43283582),
    ("15.2.1-ex2", "ttft_speedup", 1.00365095),
    # ITL on the H200: every operator memory-bound at B = 1, so the bytes over 4.8e12 B/s. Per layer (d = 5120,
    # f = 13824, bf16): weights 4 * 5120^2 * 2 + 3 * 5120 * 13824 * 2 = 634,388,480; activations 195,584 (q and o
    # 20,480 each, k, v, scores and values 10,240 each, the three MLP matrices (5120 + 13824) * 2 each); KV written
    # 2 * 10,240 and read 2 * 1024 * 5120 * 2: 20,992,000. * 40 layers = 26,223,042,560; the embedding row 20,480
    # and the LM head 5120 * 32000 * 2 + (5120 + 32000) * 2 = 327,754,240: 26,550,817,280 B -> 5.5314203 ms.
    ("15.2.1-ex2", "itl_ms", 5.53142027),
    # Llama 3 8B, S = 131,072, causal: pairs S(S+1)/2 = 8,590,000,128; QK^T and PV each 2*h*hd*pairs
    # = 70,369,281,048,576 FLOPs per layer; * 2 * 32 layers = 4,503,633,987,108,864 FLOPs of
    # 6,333,222,386,401,280 in total (projections 2*S*(d*(q+2kv)+q*d+3*d*f) per layer, the LM head for one
    # token) -> share 0.711113;
    # per-operator time on the H100 SXM 6.402021 s (the 2*P*S rule says 1.99 s).
    ("15.2.1-ex3", "ttft_s", 6.40202057), ("15.2.1-ex3", "attention_share", 0.71111256), ("15.2.1-ex3", "cause", "A"),
    # Llama 2 13B, H100 SXM, MFU 0.6, 200 ms: bisection of the per-operator TTFT (attention's S^2 and, at tp = 2,
    # the all-reduces included): longest S = 4367 at tp = 1, 7730 at tp = 2 with all-reduces at the datasheet's
    # 450 GB/s and no start-up latency (not 2 * 4367 = 8734). The H100 node's measured all-reduce adds its
    # latency, 2 * 40 layers * 22.59 us = 1.807 ms, and its slower bus: each token's 80 * 10,240 B take
    # 2.53 us at 323.8 GB/s against 1.82 us, 0.71 us * ~7,500 tokens = 5.3 ms. At a slope of
    # (2 * 13.0e9 + 4 * 5120 * 40 * 7700) FLOP/token / (0.6 * 989.4e12 * 2 GPUs) + 2.53 us = 27.9 us/token
    # that is 7.1 ms / 27.9 us = 255 tokens: 7730 - 255 = 7475 by this linearised estimate; the bisection's
    # integer on the exact per-operator sum is 7480.
    ("15.2.1-ex4", "s_max_tp1", 4367), ("15.2.1-ex4", "s_max_tp2", 7480),
    # Llama 3 8B, H200, S = 4096: weights 8,030,261,248 * 2 = 16,060,522,496 B; KV 2 * 32 * 8 * 128 * 4096 * 2
    # = 536,870,912 B; B* = 29.9151; (141e9 - 16,060,522,496) / 536,870,912 = 232.72 -> 232.
    ("15.2.2-ex1", "b_star", 29.9150543), ("15.2.2-ex1", "max_batch", 232),
    # Same, B = 64 > B*: throughput(B) = B * BW / (W + B*KV); gain = 2 * (W + 64 KV) / (W + 128 KV)
    # = 2 * 50,420,260,864 / 84,779,999,232 = 1.189438.
    ("15.2.2-ex2", "dominant", "kv"), ("15.2.2-ex2", "gain", 1.18943763),
    # Throughput at 2B = 128: 128 * 4.8e12 / 84,779,999,232 = 7,246.9923 tokens/s.
    ("15.2.2-ex2", "tokens_per_s", 7246.99228),
    # Llama 3 70B, tp = 4, B = 48, S = 4096: KV per GPU 2 * 80 * (8/4) * 128 * 4096 * 2 * 48 = 16,106,127,360 B
    # = 16.1061 GB. Weights per GPU: 17,639,415,808 params (q/o/k/v/MLP and both vocab tables split 4 ways,
    # norms whole) * 2 = 35,278,831,616 B; KV per sequence per GPU 335,544,320 B;
    # (80e9 - 35,278,831,616) / 335,544,320 = 133.28 -> 133.
    ("15.2.2-ex3", "kv_gb_per_gpu", 16.10612736), ("15.2.2-ex3", "max_batch", 133), ("15.2.2-ex3", "true", frozenset("AB")),
    # Llama 3 70B on H100s, prompt 2048 + output 512 = 2560: tp = 2 TTFT 156.7 ms > 150 -> out; tp = 4 TTFT
    # 90.8 ms, max batch 213 in memory, largest with ITL <= 25 ms and all-reduces at 450 GB/s with no start-up
    # latency: 193. The H100 node's measured all-reduce costs 2 * 80 layers * 22.59 us = 3.61 ms per step
    # of latency, and its 323.8 GB/s bus raises each sequence's all-reduce bytes (8192 * 2 * 160 * 1.5 =
    # 3.9 MB) from 8.7 us to 12.1 us: 193 * 3.4 us = 0.66 ms more. The step's slope per sequence (KV
    # 2 * 80 * 2 heads * 128 * 2560 * 2 B = 209.7 MB / 3.35e12 = 62.6 us, all-reduce 12.1 us, activations
    # ~0.5 us: ~75.2 us) turns 4.27 ms into 56.8 sequences: 193 - 56.8 = 136.2 by this linearised
    # estimate; the exact per-operator sum (integer batch) puts the largest batch at 139. One replica of
    # tp = 4 still meets the target; tp = 8 needs 8 GPUs. Best tp = 4, batch 139, 4 GPUs.
    ("15.2.2-ex4", "tp", 4), ("15.2.2-ex4", "batch", 139), ("15.2.2-ex4", "n_gpus", 4),
    # Llama 3 8B on an H100 SXM (989.4 TFLOP/s, 3.35 TB/s), a 6,000-token prefix cached, q = 1,000 own tokens.
    # Matmul params per layer: 4096 * (4096 + 2 * 1024) + 4096^2 + 3 * 4096 * 14336 = 218,103,808; * 32 =
    # 6,979,321,856. Projections and MLP (compute-bound at 1,000 tokens): 2 * 6,979,321,856 * 1000 / 989.4e12
    # = 14.10819 ms. Attention: pairs 1000 * 6000 + 1000 * 1001 / 2 = 6,500,500; per kernel 2 * 32 heads * 128
    # * 6,500,500 * 32 layers = 1,704,067,072,000 FLOPs = 1.72232 ms (its bytes, (1000 * 4096 + 7000 * 1024) * 2
    # * 32 = 721 MB, take 0.215 ms), two kernels 3.44464 ms. LM head, one row: 4096 * 128256 * 2 B / 3.35e12 =
    # 0.31363 ms. Embedding rows ~0.005 ms. Sum 17.8715 ms.
    # Uncached, 7,000 tokens: 98.7573 + 2 * (2 * 32 * 128 * (7000 * 7001 / 2) * 32 / 989.4e12 = 6.49225)
    # + 0.31363 + ~0.034 = 112.0898 ms; speed-up 112.0898 / 17.8714 = 6.2720.
    ("15.2.3-ex1", "ttft_cached_ms", 17.8714415), ("15.2.3-ex1", "speedup", 6.27200715),
    # Llama 2 13B on an H100 SXM. Matmul params 40 * (4 * 5120^2 + 3 * 5120 * 13824) = 12,687,769,600.
    # Prefill of 3,968 tokens: 2 * 12,687,769,600 * 3968 / 989.4e12 = 101.7681 ms; attention pairs 3968 * 3969
    # / 2 = 7,874,496, per kernel 2 * 40 * 128 * 7,874,496 * 40 / 989.4e12 = 3.25995 ms, two 6.5199 ms; LM head
    # 5120 * 32000 * 2 B / 3.35e12 = 0.0978 ms; embedding ~0.02 ms: 108.41 ms.
    # Decode of 32 at 1,024: weights 25,375,539,200 B / 3.35e12 = 7.5748 ms; K (then V) 32 * 1024 * 5120 * 2 B
    # * 40 = 13,421,772,800 B = 4.0065 ms each, 8.0130 ms (+ queries 0.008 ms); LM head 0.098 ms; activations
    # ~0.07 ms: 15.769 ms. Stall 108.411 + 15.769 = 124.180 ms.
    # Chunked, C = 512: 32 decodes + q = 480 prompt tokens, 512 tokens, compute-bound projections
    # 2 * 12,687,769,600 * 512 / 989.4e12 = 13.1312 ms; attention memory-bound: (512 * 5120 + (32 * 1024 + 480)
    # * 5120) * 2 B * 40 = 13,828,096,000 B = 4.12779 ms per kernel (its FLOPs, pairs 32 * 1024 + 480 * 481 / 2
    # = 148,208, take 0.061 ms), 8.25558 ms; LM head 0.098 ms: 21.489 ms. Only chunked is <= 50 ms.
    ("15.2.3-ex2", "stall_ms", 124.179945), ("15.2.3-ex2", "chunked_itl_ms", 21.4887035),
    ("15.2.3-ex2", "meets_slo", "chunked"),
    # Llama 3 8B on an H100 SXM, 16 sequences at 6,000 + 1,000 = 7,000 tokens: weights read (all but the
    # embedding table) (8,030,261,248 - 525,336,576) * 2 = 15,009,849,344 B / 3.35e12 = 4.48055 ms; K (then V)
    # 16 * 7000 * 1024 * 2 B * 32 = 7,340,032,000 B = 2.19106 ms each, 4.38211 ms; activations ~0.03 ms:
    # 8.891 ms. At 1,000 tokens the KV reads are 2 * 0.31301 = 0.62602 ms: 5.135 ms; ratio 1.7314.
    # True: A (the queries attend to the prefix), C, D; B is what the kernel does not do, E is false.
    ("15.2.3-ex3", "decode_ms", 8.89138894), ("15.2.3-ex3", "ratio", 1.73142683),
    ("15.2.3-ex3", "true", frozenset("ACD")),
    # Llama 3 8B on an H100 SXM, 16-token blocks: 0.9 * 80e9 - 16,060,522,496 B of weights = 55,939,477,504 B;
    # a block 16 * 2 * 32 * 8 * 128 * 2 = 2,097,152 B -> 26,674 blocks (26,674.02). Without caching a sequence
    # takes ceil(7000 / 16) = 438 blocks: 26,674 // 438 = 60. With caching the prefix's 6000 / 16 = 375 blocks
    # are held once and each sequence takes ceil(1000 / 16) = 63: (26,674 - 375) // 63 = 26,299 // 63 = 417.
    # 1,000 users / 417 = 2.4 -> 3 GPUs (17 without caching: 1000 / 60 = 16.7).
    ("15.2.3-ex4", "max_seqs_uncached", 60), ("15.2.3-ex4", "max_seqs_cached", 417), ("15.2.3-ex4", "gpus", 3),
]


def test_every_exercise_has_hand_computed_values_for_every_part():
    covered = {(ex_id, part) for ex_id, part, _ in HAND} | {
        ("15.1.1-ex1", "ttft_ms"), ("15.1.2-ex1", "kv_gb"), ("15.1.2-ex2", "max_batch"), ("15.2.1-ex1", "itl_ms")}
    assert covered == {(ex.id, p.name) for ex in ALL for p in ex.parts}


@pytest.mark.parametrize("ex_id, part, by_hand", HAND, ids=[f"{e}-{p}" for e, p, _ in HAND])
def test_every_registered_answer_matches_its_hand_computed_value(ex_id, part, by_hand):
    got = get(ex_id).expected()[part]
    if isinstance(by_hand, float):
        assert got == pytest.approx(by_hand, rel=1e-6)
    else:
        assert got == by_hand


def test_student_versions_drop_the_instructors_live_timings():
    """Outputs of cells nbval ignores (live timings) are cleared: machine-specific, and a stored
    number could coincide with some student's variant answer (15.1.2-ex4 once did: 16.79 ms)."""
    import nbformat

    from inferlab.exercises.student import make_student
    nb = nbformat.v4.new_notebook()
    live = nbformat.v4.new_code_cell("# NBVAL_IGNORE_OUTPUT\nprint(16.79)")
    live.outputs = [nbformat.v4.new_output("stream", name="stdout", text="16.79\n")]
    kept = nbformat.v4.new_code_cell("print(1)")
    kept.outputs = [nbformat.v4.new_output("stream", name="stdout", text="1\n")]
    nb.cells = [live, kept]
    student, report = make_student(nb)
    assert student.cells[0].outputs == [] and student.cells[1].outputs == kept.outputs
    assert report["live_cleared"] == 1

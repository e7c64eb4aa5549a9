"""Per-student variants: drawn from the student id and the assignment, different between students, the
same for one student, meaningful (every known slip still told apart), and graded per student.

Expected values are hand-computed from the architectures (layers, KV heads, head dim), not from the library:
  KV cache of one sequence = 2 (K and V) * layers * n_kv_heads * head_dim * S * 2 bytes (bf16).
"""
from __future__ import annotations

import csv
import json

import nbformat
import pytest

from inferlab.exercises import exercises, get, set_student, variant
from inferlab.exercises.cells import statement_markdown
from inferlab.exercises.core import _STUDENT, _matches, variant_seed
from inferlab.exercises.student import build_for_roster
from inferlab.core.memory import memory_budget
from inferlab.core.specs import get_accelerator, get_model

KEY = bytes(range(32))  # a fixed instructor key (the real one is random, see inferlab.exercises.key)
VARIED = [e.id for e in exercises()]  # every exercise varies
# layers, n_kv_heads, head_dim: Llama 3 70B, Llama 3 8B and Mistral 7B (their configuration files)
ARCH = {"llama-3-70b": (80, 8, 128), "llama-3-8b": (32, 8, 128), "mistral-7b": (32, 8, 128)}


def kv_gb_by_hand(model, seq_len, kv_dtype="bf16"):
    assert kv_dtype == "bf16"
    layers, kv_heads, head_dim = ARCH[model]
    return 2 * layers * kv_heads * head_dim * seq_len * 2 / 1e9


def test_hand_computed_kv_cache_of_a_variant():
    # Mistral 7B, S = 4096: 2 * 32 * 8 * 128 * 4096 * 2 = 536,870,912 bytes = 0.536870912 GB.
    # Dropping the factor 2 for K and V would give 0.268 GB, outside the 1 % tolerance.
    ex = get("15.1.2-ex1").with_params(model="mistral-7b", seq_len=4096)
    assert ex.expected()["kv_gb"] == pytest.approx(0.536870912, rel=1e-9)
    assert kv_gb_by_hand("mistral-7b", 4096) == pytest.approx(0.536870912, rel=1e-12)
    # Llama 3 70B, S = 8192 (the registered parameters): 2 * 80 * 8 * 128 * 8192 * 2 = 2.68435456 GB.
    assert get("15.1.2-ex1").expected()["kv_gb"] == pytest.approx(2.68435456, rel=1e-9)


def test_hand_computed_int8_max_batch_of_a_variant():
    # Mistral 7B on an L4 (24e9 bytes), int8 cache, S = 8192:
    #   weights 7,241,732,096 params * 2 bytes = 14,483,464,192 bytes (bf16)
    #   KV per sequence 2 * 32 * 8 * 128 * 8192 * 1 byte = 536,870,912 bytes
    #   (24e9 - 14,483,464,192) / 536,870,912 = 17.73 -> 17 sequences
    ex = get("15.1.2-ex2").with_params(model="mistral-7b", accelerator="l4", seq_len=8192)
    assert ex.expected()["max_batch"] == 17
    assert ex.evaluate(17).passed and not ex.evaluate(18).passed and not ex.evaluate(17.4).passed


def test_seed_is_stable_and_depends_on_student_and_assignment():
    assert variant_seed("alice", "hw1", KEY) == variant_seed("alice", "hw1", KEY)
    assert len({variant_seed(s, a, KEY) for s in ("alice", "bob") for a in ("hw1", "hw2")}) == 4


def test_two_students_get_different_numbers_and_one_student_always_the_same():
    for ex_id in VARIED:
        params = [variant(ex_id, f"student{i}", "hw1", key=KEY).params for i in range(12)]
        assert len({json.dumps(p, sort_keys=True) for p in params}) >= 3, ex_id
        assert variant(ex_id, "student3", "hw1", key=KEY).text() != variant(ex_id, "student4", "hw1", key=KEY).text() or \
            params[3] == params[4], ex_id
        assert variant(ex_id, "student3", "hw1", key=KEY).params == params[3]
    # Without an assignment every student gets the registered exercise.
    assert variant("15.1.2-ex1", "alice", None, key=KEY) is get("15.1.2-ex1")


def _structure_holds(ex) -> bool:
    """The answer structure the exercise is written for (what a statement or a hint takes for granted)."""
    e, p = ex.expected(), ex.params
    if ex.id == "15.1.1-ex2":  # predict first: memory-bound at the quoted S, compute-bound within the sweep
        return e["regime"] == "memory" and p["prompt_len"] < e["s_min"] < p["max_len"]
    if ex.id == "15.1.2-ex3":  # the MLP crosses the ridge at this batch, attention never does
        return e["mlp"] == "compute" and e["attention"] == "memory"
    if ex.id == "15.1.2-ex5":  # "which fit": at least one plan fits and at least one does not
        return 0 < len(e["fits"]) < len(p["options"])
    if ex.id == "15.2.1-ex2":  # the upgrade keeps the bf16 peak: only ITL improves
        return e["improves"] == "itl"
    if ex.id == "15.2.1-ex4":  # both caps are real caps, not the sweep's end
        return 1024 <= e["s_max_tp1"] < e["s_max_tp2"] < p["max_len"]
    if ex.id == "15.1.2-ex4":  # the memo's batch fits in memory
        return memory_budget(get_model(p["model"]), get_accelerator(p["accelerator"]), p["batch"], p["context_len"]).fits and p["batch"] > 1
    if ex.id == "15.2.2-ex1":
        return e["max_batch"] >= 1
    if ex.id == "15.2.2-ex2":  # the KV caches dominate, and the doubled batch fits ("could double it")
        return e["dominant"] == "kv" and memory_budget(get_model(p["model"]), get_accelerator(p["accelerator"]), 2 * p["batch"], p["seq_len"]).fits
    if ex.id == "15.2.2-ex3":  # the memo's batch is a real, smaller batch
        from inferlab.exercises.s15_2_2_batching import _memo_budget
        return 1 <= _memo_budget(**p)[3] < p["batch"]
    if ex.id in ("15.1.1-ex3", "15.2.1-ex3"):  # long prompts: the memo's method is what is wrong
        return p["prompt_len"] >= 2048
    return True


@pytest.mark.parametrize("ex_id", VARIED)
def test_every_variant_stays_meaningful(ex_id):
    """Every parameter set a student can draw (not a sample): the expected answer exists (a design
    question has a feasible answer), numbers are positive, the answer has the structure the statement
    is written for, and every known slip lands outside the tolerance. The 40 students' draws are among them."""
    ex0 = get(ex_id)
    combos = ex0.vary.combinations()
    assert len(combos) >= 4, ex_id
    keys = {json.dumps(c, sort_keys=True) for c in combos}
    for i in range(40):
        drawn = variant(ex_id, f"s{i}", "course-2026", key=KEY).params
        assert json.dumps({k: drawn[k] for k in combos[0]}, sort_keys=True) in keys
    for params in combos:
        ex = ex0.with_params(**params)
        expected = ex.expected()
        assert all(v > 0 for v in expected.values() if isinstance(v, float)), ex.params
        assert _structure_holds(ex), (ex.params, expected)
        for m in ex.known_mistakes():
            assert not _matches(ex._part(m.part), m.value, expected[m.part]), (ex.params, m.hint)
        assert "{" not in ex.text().replace("{'A', 'C'}", ""), ex.params


def test_exercises_that_say_same_model_as_exercise_1_share_its_draw():
    for i in range(20):
        one, two = variant("15.2.2-ex1", f"s{i}", "hw1", key=KEY).params, variant("15.2.2-ex2", f"s{i}", "hw1", key=KEY).params
        assert {k: two[k] for k in one} == one


def test_check_uses_the_student_s_variant():
    ex = variant("15.1.2-ex1", "alice", "hw1", key=KEY)
    mine = kv_gb_by_hand(ex.params["model"], ex.params["seq_len"])
    try:
        set_student("alice", "hw1", params={"15.1.2-ex1": ex.params})
        from inferlab.exercises import check
        assert check("15.1.2-ex1", mine).passed
    finally:
        _STUDENT.clear()
    with pytest.raises(ValueError, match="student_id='../x' is not allowed"):
        set_student("../x", "hw1")


# One notebook per roster entry, each graded against its own variant (in the sandbox) -------------------

def instructor_notebook():
    ex = get("15.1.2-ex1")
    from inferlab.exercises.cells import solution_source
    return nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("from inferlab.exercises import check"),
        nbformat.v4.new_markdown_cell(statement_markdown(ex)),
        nbformat.v4.new_code_cell(solution_source(ex)),
        nbformat.v4.new_code_cell('check("15.1.2-ex1", ex1);'),
    ])


def test_roster_builds_one_notebook_per_student_with_its_own_numbers(tmp_path):
    src = tmp_path / "hw.ipynb"
    nbformat.write(instructor_notebook(), src)
    roster = tmp_path / "roster.csv"
    roster.write_text("student_id,name,email\nalice,Alice A,a@example.org\nbob,Bob B,b@example.org\n")
    build_for_roster([src], tmp_path / "out", roster=roster, assignment="hw1", key=KEY)
    texts = {}
    for sid in ("alice", "bob"):
        nb = nbformat.read(tmp_path / "out" / sid / "hw.ipynb", 4)
        ex = variant("15.1.2-ex1", sid, "hw1", key=KEY)
        statement = next(c.source for c in nb.cells if c.source.startswith("### Exercise 15.1.2-ex1"))
        assert f"`{ex.params['model']}`" in statement and f"S = {ex.params['seq_len']} tokens" in statement
        assert f"set_student({sid!r}, 'hw1', params=" in nb.cells[0].source
        assert KEY.hex() not in json.dumps(nb)
        assert nb.metadata["inferlab"]["student_id"] == sid
        texts[sid] = statement
    assert texts["alice"] != texts["bob"]


@pytest.mark.skipif(not __import__("inferlab.exercises.sandbox", fromlist=["available"]).available(),
                    reason="no sandbox: bubblewrap is missing or does not start")
def test_each_student_is_graded_against_their_own_variant(tmp_path):
    from inferlab.exercises.grade import grade
    src = tmp_path / "hw.ipynb"
    nbformat.write(instructor_notebook(), src)
    roster = tmp_path / "roster.csv"
    roster.write_text("student_id,name,email\nalice,Alice A,a@example.org\nbob,Bob B,b@example.org\n"
                      "carol,Carol C,c@example.org\n")
    build_for_roster([src], tmp_path / "built", roster=roster, assignment="hw1", key=KEY)
    own = {s: kv_gb_by_hand(**variant("15.1.2-ex1", s, "hw1", key=KEY).params) for s in ("alice", "bob")}
    assert abs(own["alice"] / own["bob"] - 1) > 0.02, "the two variants must differ beyond the tolerance"
    subs = tmp_path / "subs"
    answers = {"alice": own["alice"], "bob": own["alice"]}  # bob copies alice's number
    for sid, value in answers.items():
        nb = nbformat.read(tmp_path / "built" / sid / "hw.ipynb", 4)
        cell = next(c for c in nb.cells if "# your answer here" in c.source)
        cell.source = f"ex1 = {value!r}"
        (subs / sid).mkdir(parents=True)
        nbformat.write(nb, subs / sid / "hw.ipynb")
    out = tmp_path / "grades"
    grade([subs], out, cell_timeout=20, time_limit=60, jobs=2, quiet=True, assignment="hw1", roster=roster,
          tmp_root=tmp_path, key=KEY, instructor=[src])
    with open(out / "grades.csv", newline="") as fh:
        table = {r["student_id"]: r for r in csv.DictReader(fh)}
    assert float(table["alice"]["15.1.2-ex1"]) == 1
    assert float(table["bob"]["15.1.2-ex1"]) == 0
    assert float(table["carol"]["total"]) == 0 and table["carol"]["status"] == "no submission"
    gradescope = (out / "gradescope.csv").read_text()
    assert "Alice A,alice,a@example.org,1" in gradescope


def test_no_variant_s_answer_is_printed_in_its_chapter_s_student_notebook():
    """`make student ROSTER=...` refuses a notebook that shows a student's expected answer; a lecture output
    can print the same number for another configuration (15.2.2's claim table prints 21.47 GB, the KV per
    GPU of B * S / tp = 65,536 for a 70B GQA model). Every combination any student can draw is checked
    against the student version of its chapter, with that variant's statement in place."""
    import copy
    from pathlib import Path

    from inferlab.exercises.student import STATEMENT_RE, find_leaks, make_student

    root = Path(__file__).resolve().parents[1]
    student = {}
    for src in sorted((root / "chapters").glob("15_*.ipynb")):
        nb = make_student(nbformat.read(src, 4))[0]
        for cell in nb.cells:
            m = STATEMENT_RE.match(cell.source.lstrip()) if cell.cell_type == "markdown" else None
            if m:
                student[m.group(1)] = nb
    leaking = []
    for ex in exercises():
        for params in ex.vary.combinations():
            mine = ex.with_params(**params)
            nb = copy.deepcopy(student[ex.id])
            for cell in nb.cells:
                m = STATEMENT_RE.match(cell.source.lstrip()) if cell.cell_type == "markdown" else None
                if m and m.group(1) == ex.id:
                    cell.source = statement_markdown(mine)
            leaking += [(params, leak) for leak in find_leaks(nb, [mine])]
    assert leaking == []


def _literal(value) -> str:
    if isinstance(value, frozenset):
        return "{" + ", ".join(repr(v) for v in sorted(value)) + "}"
    if isinstance(value, float) and value.is_integer():
        return repr(int(value))
    return repr(value)


@pytest.mark.skipif(not __import__("inferlab.exercises.sandbox", fromlist=["available"]).available(),
                    reason="no sandbox: bubblewrap is missing or does not start")
def test_every_exercise_is_graded_against_each_student_s_own_variant(tmp_path):
    """One notebook with all the exercises, built for two roster entries and graded in the sandbox: alice
    answers her own variants and gets every point; bob hands in alice's answers and gets, exercise by
    exercise, exactly what they are worth against his variants."""
    from inferlab.exercises.cells import solution_source
    from inferlab.exercises.grade import grade
    cells = [nbformat.v4.new_code_cell("from inferlab.exercises import check")]
    for ex in exercises():
        cells += [nbformat.v4.new_markdown_cell(statement_markdown(ex)), nbformat.v4.new_code_cell(solution_source(ex)),
                  nbformat.v4.new_code_cell(f'check("{ex.id}", {ex.answer_name});')]
    src = tmp_path / "hw.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=cells), src)
    roster = tmp_path / "roster.csv"
    roster.write_text("student_id\nalice\nbob\n")
    build_for_roster([src], tmp_path / "built", roster=roster, assignment="hw2", key=KEY)

    def answers_of(sid):
        out = {}
        for ex in exercises():
            exp = variant(ex.id, sid, "hw2", key=KEY).expected()
            out[ex.id] = (_literal(exp[ex.parts[0].name]) if ex.single else
                          "{" + ", ".join(f"{k!r}: {_literal(v)}" for k, v in exp.items()) + "}")
        return out

    alice = answers_of("alice")
    for sid in ("alice", "bob"):
        nb = nbformat.read(tmp_path / "built" / sid / "hw.ipynb", 4)
        pending = [e for e in exercises()]
        for cell in nb.cells:
            if "# your answer here" in cell.source:
                ex = pending.pop(0)
                cell.source = f"{ex.answer_name} = {alice[ex.id]}"
        assert not pending
        (tmp_path / "subs").mkdir(exist_ok=True)
        nbformat.write(nb, tmp_path / "subs" / f"{sid}.ipynb")
    out = tmp_path / "grades"
    grade([tmp_path / "subs"], out, cell_timeout=60, time_limit=240, jobs=2, quiet=True, assignment="hw2",
          tmp_root=tmp_path, key=KEY, instructor=[src])
    with open(out / "grades.csv", newline="") as fh:
        table = {r["student_id"]: r for r in csv.DictReader(fh)}
    assert float(table["alice"]["total"]) == float(table["alice"]["max"]) == sum(e.points for e in exercises())
    differs = 0
    for ex in exercises():
        mine = variant(ex.id, "bob", "hw2", key=KEY)
        worth = mine.evaluate(json.loads(json.dumps(
            {k: sorted(v) if isinstance(v, frozenset) else v for k, v in variant(ex.id, "alice", "hw2", key=KEY).expected().items()}
        )) if not ex.single else variant(ex.id, "alice", "hw2", key=KEY).expected()[ex.parts[0].name]).score
        assert float(table["bob"][ex.id]) == pytest.approx(worth, abs=1e-3), ex.id  # grades.csv: 3 decimals
        differs += worth < ex.points
    assert differs >= 10  # most of bob's numbers are his own

"""The hand list of mutants (benchmarks/mutation.py) applies to today's code: every mutant's snippet
occurs exactly once in its file, so a mutation score always covers the whole list, and an edit that
moves a mutated line shows up here, in the fast tier, rather than halfway through a long run."""
import importlib.util
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.core

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def mutation():
    spec = importlib.util.spec_from_file_location("mutation", ROOT / "benchmarks" / "mutation.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["mutation"] = module   # its dataclass looks its module up while it is defined
    spec.loader.exec_module(module)
    return module


def test_every_mutant_applies_exactly_once(mutation):
    assert mutation.stale(mutation.MUTANTS) == []


def test_every_mutant_applied_is_still_python(mutation):
    # a mutant that breaks the syntax is "killed" by the import, not by a test: it would inflate the score
    broken = []
    for m in mutation.MUTANTS:
        source = (ROOT / "lib" / "inferlab" / m.path).read_text()
        try:
            compile(mutation.mutate(m, source), m.path, "exec")
        except SyntaxError as err:
            broken.append(f"{m.module}: {m.what}: {err}")
    assert broken == []


def test_every_mutant_names_its_tests_and_they_exist(mutation):
    assert {m.module for m in mutation.MUTANTS} <= set(mutation.TESTS)
    assert [t for tests in mutation.TESTS.values() for t in tests if not (ROOT / t).is_file()] == []


def test_a_stale_mutant_is_named_and_stops_the_run(mutation, tmp_path, capsys):
    (tmp_path / "a.py").write_text("def f():\n    x = 1\n    x = 1\n    y = 2\n\n\ndef g():\n    z = 3\n")
    gone = mutation.Mutant("costs", "a.py", "f", "z = 3", "z = 4", "z changed")   # z = 3 is in g, not f
    twice = mutation.Mutant("costs", "a.py", "f", "x = 1", "x = 2", "x changed")
    missing = mutation.Mutant("costs", "b.py", "f", "y = 2", "y = 3", "in no file")
    no_function = mutation.Mutant("costs", "a.py", "h", "y = 2", "y = 3", "in no function")
    fine = mutation.Mutant("costs", "a.py", "f", "y = 2", "y = 3", "y changed")
    assert mutation.stale([gone, twice, missing, no_function, fine], lib=tmp_path) == [
        "costs: z changed (a.py, in f): snippet found 0 times", "costs: x changed (a.py, in f): snippet found 2 times",
        "costs: in no file (b.py, which does not exist): snippet found 0 times",
        "costs: in no function (a.py, no function h): snippet found 0 times"]
    saved = mutation.MUTANTS
    try:
        mutation.MUTANTS = [*saved, mutation.Mutant("costs", "core/costs.py", "", "no such snippet", "", "planted stale")]
        assert mutation.main(["--module", "costs"]) == 1
        assert "planted stale (core/costs.py, at module level): snippet found 0 times" in capsys.readouterr().err
        assert mutation.main(["--module", "costs", "--list"]) == 1
        out = capsys.readouterr().out
        assert "STALE costs" in out and "1 stale" in out
    finally:
        mutation.MUTANTS = saved


def test_a_mutant_survives_reformatting_but_not_a_changed_token(mutation):
    m = mutation.Mutant("costs", "a.py", "C.area", "return max(w, h) * 2", "return max(w, h)", "area doubled")
    one_line = "class C:\n    def area(self, w, h):\n        return max(w, h) * 2\n"
    rewrapped = "class C:\n    def area(self, w, h):\n        return max(w,\n                   h)*2\n"
    assert mutation.mutate(m, one_line) == "class C:\n    def area(self, w, h):\n        return max(w, h)\n"
    assert mutation.mutate(m, rewrapped) == "class C:\n    def area(self, w, h):\n        return max(w, h)\n"
    changed = "class C:\n    def area(self, w, h):\n        return max(w, h) * 3\n"
    assert len(mutation.locate(m, changed)[0]) == 0
    elsewhere = "def area(w, h):\n    return max(w, h) * 2\n\n\nclass C:\n    def area(self, w, h):\n        return w + h\n"
    assert mutation.locate(m, elsewhere)[0] == []   # the same text in another function is not its target


def test_a_block_mutant_follows_the_code_when_it_is_re_indented(mutation):
    # written against code indented 12 spaces; the code now sits at 8: the mutant's lines move with it
    m = mutation.Mutant("costs", "a.py", "f", "            free += n\n            n = 0\n            if done:",
                        "            n = 0\n            if done:", "blocks leak")
    code = "def f(free, n, done):\n    if n:\n        free += n\n        n = 0\n        if done:\n            return free\n"
    mutated = mutation.mutate(m, code)
    assert mutated == "def f(free, n, done):\n    if n:\n        n = 0\n        if done:\n            return free\n"
    compile(mutated, "a.py", "exec")   # still Python: a kill must come from a test, not a syntax error


def test_the_development_pages_table_counts_the_list_as_it_is(mutation):
    # docs/development.md gives the last run's score per package as "K of N" and the equivalents; N,
    # the equivalents and the groups must be the list's own (K comes from the dated run)
    import re
    page = (ROOT / "docs" / "development.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\s*\| (\w+) \| ([^|]+) \| (\d+) of (\d+) \| (\d+) \|$", page, re.M)
    assert rows
    for package, groups, killed, total, equivalent in rows:
        mine = [m for m in mutation.MUTANTS if mutation.package(m.module) == package]
        assert sorted(re.findall(r"`([\w/]+)`", groups)) == sorted({m.module for m in mine}), package
        assert int(total) == sum(not m.equivalent for m in mine) and int(killed) <= int(total), package
        assert int(equivalent) == sum(bool(m.equivalent) for m in mine), package
    assert {r[0] for r in rows} == {mutation.package(m.module) for m in mutation.MUTANTS}

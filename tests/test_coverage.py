"""Every number printed in the chapter is accounted for by a registry entry (or a reviewed ignore rule)."""
from dataclasses import replace
from pathlib import Path

import pytest

from inferlab.claims.chapter import numbers_in
from inferlab.claims.coverage import CHAPTER_NAME, default_chapter_path, load_ignore, uncovered, unprinted
from inferlab.claims.registry import load_registry

pytestmark = pytest.mark.claims

# The chapter text is not part of the repository: INFERLAB_BOOK names it (file or folder), else
# ../shared/book/ beside the clone (where CI checks it out, so CI runs these tests).
CHAPTER = default_chapter_path()


@pytest.fixture
def chapter():
    """The chapter's path; the tests that need it are skipped, with how to supply it, when absent."""
    return CHAPTER


def _skip_reason(path: Path) -> str:
    return (f"chapter text not found at {path}: set INFERLAB_BOOK to {CHAPTER_NAME} (or its folder) "
            "or place it in ../shared/book/ beside the repository")


def _require(path: Path) -> Path:
    if not path.is_file():
        pytest.skip(_skip_reason(path))
    return path


def test_every_printed_number_is_accounted_for(chapter):
    missing = uncovered(_require(chapter))
    assert not missing, "numbers in the chapter that no claim accounts for:\n" + "\n".join(
        f"  line {n.line} ({n.section} {n.part}): {n.text}" for n in missing)


def test_every_printed_claim_is_where_it_says(chapter):
    assert not unprinted(_require(chapter)), ("claims whose book value is not printed in their section and "
                                    f"part: {unprinted(chapter)}")


def test_coverage_notices_a_missing_claim(chapter):
    _require(chapter)
    registry = load_registry()
    without = replace(registry, claims=tuple(c for c in registry.claims if c.id != "15.2.2-ag"))
    # expected, read from the text: the numbers printed in 15.2.2-ag's part that its own numbers (its
    # book value and the inputs only it prints) cover and no other claim of the part does
    [ag] = [c for c in registry.claims if c.id == "15.2.2-ag"]
    rest = [x for c in without.claims if (c.section, c.part) == (ag.section, ag.part) for x in c.numbers()]
    from inferlab.claims.chapter import chapter_numbers
    only_ag = [n.text for n in chapter_numbers(chapter, [r.pattern for r in load_ignore()])
               if (n.section, n.part) == (ag.section, ag.part)
               and any(abs(v - x) < 1e-9 * max(abs(x), 1) for v in n.values() for x in ag.numbers())
               and not any(abs(v - x) < 1e-9 * max(abs(x), 1) for v in n.values() for x in rest)]
    assert only_ag and [n.text for n in uncovered(chapter, without)] == only_ag


def test_a_missing_chapter_is_skipped_with_how_to_supply_it(tmp_path):
    with pytest.raises(pytest.skip.Exception, match="set INFERLAB_BOOK") as info:
        _require(tmp_path / CHAPTER_NAME)
    assert "\n" not in str(info.value) and str(tmp_path) in str(info.value)


def test_inferlab_book_names_the_chapter_file_or_its_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("INFERLAB_BOOK", str(tmp_path))
    assert default_chapter_path() == tmp_path / CHAPTER_NAME
    monkeypatch.setenv("INFERLAB_BOOK", str(tmp_path / "elsewhere.txt"))
    assert default_chapter_path() == tmp_path / "elsewhere.txt"
    monkeypatch.delenv("INFERLAB_BOOK")
    assert default_chapter_path().parts[-3:] == ("shared", "book", CHAPTER_NAME)


def test_every_ignore_rule_says_why():
    rules = load_ignore()
    assert rules and all(len(r.reason) > 20 for r in rules)


@pytest.mark.parametrize("text, values", [
    ("$S = 2 , 048$ tokens", [2048]),
    ("$26$ GB $+ 0 . 82$ GB", [26, 0.82]),
    ("roughly $\\sim 160$ ms", [160]),
    ("The model has 13.0B parameters", [13.0e9]),
    ("a 4$\\times$ longer prompt", [4]),
    ("$6 \\times 13 \\times 10^{9} \\times 2048 \\approx 1 . 6 \\times 10^{14}$", [6, 13e9, 2048, 1.6e14]),
    ("$2 \\times 13$B $\\times 1000 / 989$T", [2, 13e9, 1000, 989e12]),
    ("At 100k-token prompts and $\\$ 0 . 0004$/1k tokens", [1e5, 0.0004, 1e3]),
    ("an H100 in bf16 with INT8 and p99 ITL", []),
    ("$B = 50$-$70$ for 3,200 tok/s", [50, 70, 3200]),
])
def test_numbers_are_read_through_the_extraction_quirks(text, values):
    assert [n.value for n in numbers_in(text)] == pytest.approx(values)


# --- every line with a number or a quantifier is mapped ---------------------------------------------

def test_every_line_with_a_number_or_quantifier_is_mapped(chapter):
    from inferlab.claims.coverage import line_coverage, stale_line_ignores
    mapping = line_coverage(_require(chapter))
    assert len(mapping) > 80  # the chapter has ~95 such lines: the scan reads it
    missing = [m for m in mapping if not m.mapped_to]
    assert not missing, "lines with a number or quantifier mapped to no claim, statement or ignore entry:\n" + \
        "\n".join(f"  line {m.line}: numbers {list(m.numbers)}, quantifiers {list(m.quantifiers)}" for m in missing)
    assert not stale_line_ignores(chapter), "coverage_ignore [[line]] entries whose keywords left their line"


def test_line_coverage_notices_a_quantifier_with_no_statement(chapter):
    from inferlab.claims.coverage import line_coverage
    from inferlab.claims.statements import load_statements
    _require(chapter)
    reg = load_statements()
    # the line of 15.2.1-s30 ("always" set separate targets, found by its keywords) is mapped by it alone
    line = _statement_line(chapter, reg, "15.2.1-s30")
    without = replace(reg, statements=tuple(s for s in reg.statements if s.id != "15.2.1-s30"))
    [m] = [m for m in line_coverage(chapter, statements=without) if not m.mapped_to]
    assert m.line == line and [q.lower() for q in m.quantifiers] == ["always"]


def test_line_coverage_notices_a_number_no_claim_covers(chapter):
    from inferlab.claims.coverage import line_coverage
    _require(chapter)
    registry = load_registry()
    # the line of 15.2.2-h prints only C_kv = 0.84 GB, covered by 15.2.2-c alone among 15.2.2's
    # worked-example claims
    from inferlab.claims.anchors import Text, locate_claim
    line = locate_claim(Text.read(chapter), next(c for c in registry.claims if c.id == "15.2.2-h")).line
    assert dict((m.line, m.mapped_to) for m in line_coverage(chapter))[line]
    without = replace(registry, claims=tuple(c for c in registry.claims
                                             if not (c.section == "15.2.2" and 0.84 in c.numbers())))
    unmapped = [m.line for m in line_coverage(chapter, registry=without) if not m.mapped_to]
    assert line in unmapped


def test_a_quantifier_line_needs_more_than_its_numbers(tmp_path):
    """A line with 'always' is not mapped by the claims that cover its numbers: its quantifier is
    a claim of its own. Lines of a tiny chapter, checked against empty registries."""
    from inferlab.claims.coverage import QUANTIFIER, line_coverage
    from inferlab.claims.statements import load_statements
    assert [m.group(0) for m in QUANTIFIER.finditer("It always fits; O(S) per step, all of them.")] == \
        ["always", "O(", "all"]
    assert not QUANTIFIER.search("Prefill allocates the overall KV pool.")  # words, not substrings
    ch = tmp_path / CHAPTER_NAME
    ch.write_text("15.1.1 Compute-Bound Prefill\n\nThe cache is always worth it.\n\nThe pool is big.\n",
                  encoding="utf-8")
    statements = load_statements(text='[[statement]]\nid = "15.1.1-s1"\nline = 5\nkeywords = ["pool", "big"]\n'
                                      'description = "x"\nstatus = "unchecked"\nreason = "a planted entry"\n')
    mapping = line_coverage(ch, statements=statements, ignore=[], line_ignores=[])
    assert [(m.line, m.mapped_to) for m in mapping] == [(3, ())]


def test_a_line_ignore_needs_a_reason_and_keywords(tmp_path):
    from inferlab.claims.coverage import load_line_ignores
    from inferlab.claims.registry import RegistryError
    p = tmp_path / "ci.toml"
    p.write_text('[[line]]\nline = 81\nkeywords = ["a", "b"]\nreason = "short"\n', encoding="utf-8")
    with pytest.raises(RegistryError, match="needs a 'reason'"):
        load_line_ignores(p)
    p.write_text('[[line]]\nline = 81\nkeywords = ["a"]\nreason = "a definition, nothing to check here"\n',
                 encoding="utf-8")
    with pytest.raises(RegistryError, match="'keywords' must be a list of at least 2"):
        load_line_ignores(p)


# Lines with a number or quantifier whose only statements have no experiment, named by the statement
# that stands there: each is a judgement or an outside fact the library cannot compute (the entry's
# reason says which); a new one fails here until it gets an experiment or is reviewed into this list.
UNCHECKED_ONLY = {
    "15.1.1-s11": "when an engine allocates KV blocks is its policy (1.7 GB itself is number claim 15.1.1)",
    "15.2.1-s10": "SLO targets are product guidance (500 ms, 50 ms are unchecked number claims)",
    "15.2.1-s30": "'always set separate SLOs' is advice to teams",
}


def _statement_line(chapter, registry, sid) -> int:
    from inferlab.claims.statements import located
    [s] = [s for s in located(registry, chapter)[0].statements if s.id == sid]
    return s.line


def test_lines_mapped_only_by_unchecked_statements_are_reviewed(chapter):
    from inferlab.claims.coverage import line_coverage
    from inferlab.claims.statements import load_statements
    mapping = line_coverage(_require(chapter))
    reg = load_statements()
    reviewed = {_statement_line(chapter, reg, sid) for sid in UNCHECKED_ONLY}
    assert sorted(m.line for m in mapping if not m.checked) == sorted(reviewed)
    # the one experiment on the line of 15.1.2-s29 (weights read per request) removed: the line stays
    # mapped by 15.1.2-s25, which has an experiment; turning that one unchecked too makes the line
    # unchecked-only
    line = _statement_line(chapter, reg, "15.1.2-s29")
    assert _statement_line(chapter, reg, "15.1.2-s25") == line
    plain = replace(reg, statements=tuple(
        replace(s, experiment=None, inputs={}, status="unchecked", reason="planted")
        if s.id in ("15.1.2-s25", "15.1.2-s29") else s for s in reg.statements))
    assert [m.line for m in line_coverage(chapter, statements=plain) if not m.checked and m.line not in reviewed] \
        == [line]

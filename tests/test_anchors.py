"""Content anchors (inferlab.claims.anchors): every entry of the registries is found by what it says,
on exactly one line of the chapter, and a number claim reads its own printed value there."""
from pathlib import Path

import pytest

from inferlab.claims.anchors import Text, locate, locate_claim, number_after, suggest_anchor
from inferlab.claims.chapter import numbers_in
from inferlab.claims.coverage import CHAPTER_NAME, default_chapter_path, load_ignore, load_line_ignores, \
    located_line_ignores
from inferlab.claims.registry import RegistryError, load_registry
from inferlab.claims.statements import load_statements, located

pytestmark = pytest.mark.claims

CHAPTER = default_chapter_path()


@pytest.fixture(scope="module")
def text():
    if not CHAPTER.is_file():
        pytest.skip(f"chapter text not found at {CHAPTER}: set INFERLAB_BOOK to {CHAPTER_NAME} or its folder")
    return Text.read(CHAPTER)


def _same(a, b):
    return abs(a - b) <= 1e-9 * max(abs(a), abs(b), 1.0)


def test_every_printed_claim_reads_its_own_number_on_one_line(text):
    patterns = [r.pattern for r in load_ignore()]
    registry = load_registry()
    printed = [c for c in registry.claims if c.printed]
    assert len(printed) > 100 and all(c.anchor for c in printed), [c.id for c in printed if not c.anchor]
    for c in printed:
        at = locate_claim(text, c, patterns)
        assert at.line is not None and not at.problem, (c.id, at.problem, at.located.message())
        assert text.where[at.line] == (c.section, c.part), c.id
        # the number read after the anchor is the book value the registry holds (low, then high)
        wanted = (c.low, c.high) if c.is_range else (c.low,)
        assert len(at.numbers) == len(wanted), c.id
        for n, w in zip(at.numbers, wanted):
            assert any(_same(v, w) for v in n.values()), (c.id, n.text, w)
        # and it is printed on that line, read independently of the anchor
        line_values = [v for n in numbers_in(text.line(at.line), patterns) for v in n.values()]
        assert any(_same(v, c.low) for v in line_values), c.id


def test_every_statement_and_ignore_names_one_line_and_its_hint_is_current(text):
    registry = load_statements()
    found, problems = located(registry, text)
    assert not problems, "\n".join(p.message() for p in problems)
    assert [s.line for s in found.statements] == [s.line for s in registry.statements]
    assert [i.line for i in found.ignored] == [i.line for i in registry.ignored]
    lines, problems = located_line_ignores(load_line_ignores(), text)
    assert not problems and [i.line for i in lines] == [i.line for i in load_line_ignores()]


def _tiny(tmp_path, body: str) -> Text:
    p = tmp_path / "ch.txt"
    p.write_text("15.1.1 Compute-Bound Prefill\n\n" + body, encoding="utf-8")
    return Text.read(p)


def test_an_anchor_matching_nowhere_or_twice_is_reported_with_candidates(tmp_path):
    t = _tiny(tmp_path, "The ridge point is 295 here.\n\nThe ridge point moves.\n\nNothing else.\n")
    twice = locate(t, "x-1", ["ridge point"], "15.1.1")
    assert twice.line is None and "matches 2 lines" in twice.problem
    assert [l for l, _ in twice.candidates] == [3, 5]
    nowhere = locate(t, "x-2", ["ridge point", "vanished"], "15.1.1")
    assert nowhere.line is None and "matches no line" in nowhere.problem
    assert nowhere.candidates[0][0] in (3, 5) and "1/2 phrases" in nowhere.candidates[0][1]
    assert "x-2: anchor" in nowhere.message() and "line 3" in nowhere.message()
    assert locate(t, "x-3", ["ridge point", "295"], "15.1.1").line == 3


def test_the_number_after_the_anchor_in_order(tmp_path):
    line = "At $B = 1$: latency $\\approx 8$ ms, throughput $\\approx 125$; at $B = 32$: throughput $\\approx 3 , 200$."
    assert [n.value for n in number_after(line, ["throughput"])[0]] == [125]
    assert [n.value for n in number_after(line, ["32:", "throughput"])[0]] == [3200]
    # a phrase not after the previous one is looked for from the line's start
    assert [n.value for n in number_after(line, ["throughput", "latency"])[0]] == [8]
    assert number_after(line, ["absent"])[0] == []
    t = _tiny(tmp_path, line + "\n\nAnother line with throughput 4.\n")
    start = line.replace("$", "").index("3 , 200")
    anchor = suggest_anchor(t, 3, start)
    assert anchor and [n.value for n in number_after(line, anchor)[0]] == [3200]


def test_a_malformed_anchor_is_refused():
    base = ('[[claim]]\nid = "15.1.1-a"\nsection = "15.1.1"\npart = "body"\ndescription = "d"\n'
            'book = "295"\nunit = ""\nfunction = "ridge_flops_per_byte"\n')
    assert load_registry(text=base + 'anchor = ["ridge point of"]\n').claims[0].anchor == ("ridge point of",)
    with pytest.raises(RegistryError, match="at most 3 words"):
        load_registry(text=base + 'anchor = ["the ridge point of the"]\n')
    with pytest.raises(RegistryError, match="implied claim"):
        load_registry(text=base + 'printed = false\nanchor = ["ridge"]\n')

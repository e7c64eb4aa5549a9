"""`inferlab verify --book DRAFT` on drafts the tests make themselves: copies of the chapter with one
planted edit each (an erratum fixed, a new wrong number, a model swapped, a new quantitative
sentence, a paragraph deleted, moved or duplicated). Which claim or line each edit touches is
chosen from the registry and the text, never from a list typed here; the expected report follows
from the edit alone: what it touches changes as the edit says, every other entry keeps its verdict."""
import json
import time

import pytest

from inferlab.claims.anchors import Text, locate_claim
from inferlab.claims.chapter import number_spans
from inferlab.claims.coverage import CHAPTER_NAME, default_chapter_path, load_ignore
from inferlab.claims.draft import CHANGES, chapter_file, scenario_words, table, verify_text
from inferlab.claims.evaluate import evaluate_registry
from inferlab.claims.registry import load_registry
from inferlab.cli import main

pytestmark = pytest.mark.claims

CHAPTER = default_chapter_path()
PATTERNS = [r.pattern for r in load_ignore()]


@pytest.fixture(scope="module")
def text():
    if not CHAPTER.is_file():
        pytest.skip(f"chapter text not found at {CHAPTER}: set INFERLAB_BOOK to {CHAPTER_NAME} or its folder")
    return Text.read(CHAPTER)


@pytest.fixture(scope="module")
def registry():
    return load_registry()


@pytest.fixture(scope="module")
def verdicts(registry):
    return {e.id: e for e in evaluate_registry(registry)}


@pytest.fixture(scope="module")
def first(text):
    return verify_text(CHAPTER)


def _write(tmp_path, lines) -> str:
    p = tmp_path / CHAPTER_NAME
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(p)


def _replace_number(raw: str, start: int, end: int, new: str) -> str:
    """`raw` with the number at clean positions [start, end) ('$' not counted) replaced by `new`."""
    keep = [i for i, ch in enumerate(raw) if ch != "$"]
    return raw[:keep[start]] + new + raw[keep[end - 1] + 1:]


def _span(text, claim):
    at = locate_claim(text, claim, PATTERNS)
    line = text.line(at.line)
    from inferlab.claims.anchors import spans_after
    (number, start), = spans_after(line, claim.anchor, PATTERNS)[0]
    end = [e for n, s, e in number_spans(line, PATTERNS) if s == start][0]
    return at.line, start, end, number


def _edited(tmp_path, text, claim, new_number) -> tuple[int, str]:
    """(line, path) of a copy of the chapter whose number of `claim` reads `new_number(number)`."""
    line, start, end, number = _span(text, claim)
    lines = list(text.lines)
    lines[line - 1] = _replace_number(lines[line - 1], start, end, new_number(number))
    return line, _write(tmp_path, lines)


def _tripled(n) -> str:
    return str(int(n.value * 3))


def _editable(text, registry, claim) -> bool:
    """A point claim whose number is in no anchor phrase of its line (editing it moves no anchor)."""
    if not claim.anchor or claim.is_range or claim.relation or claim.status != "checked" or claim.override:
        return False
    line, start, end, number = _span(text, claim)
    phrases = [p for c in registry.claims if c.anchor and locate_claim(text, c, PATTERNS).line == line
               for p in c.anchor]
    return number.in_unit is None and not any(number.text in p.replace(" ", "") for p in phrases)


def _by_id(report):
    return {c.evaluated.id: c for c in report.claims}, {s.evaluated.id: s for s in report.statements}


def _others_untouched(report, first, touched_claims=(), touched_statements=()):
    claims, statements = _by_id(report)
    old_claims, old_statements = _by_id(first)
    for cid, c in claims.items():
        if cid not in touched_claims:
            assert c.change == "unchanged", (cid, c.change, c.anchor)
            assert c.evaluated.verdict == old_claims[cid].evaluated.verdict, cid
    for sid, s in statements.items():
        if sid not in touched_statements:
            assert s.change == "unchanged" and s.evaluated.verdict == old_statements[sid].evaluated.verdict, sid


# --- the first edition ----------------------------------------------------------------------------

def test_the_registered_text_only_confirms(first, verdicts):
    assert first.exit_code == 0 and not first.unaccounted
    assert {c.change for c in first.claims} == {"unchanged"} and {s.change for s in first.statements} == {"unchanged"}
    assert {c.evaluated.id: c.evaluated.verdict for c in first.claims} == {k: v.verdict for k, v in verdicts.items()}
    assert all(c.line for c in first.claims if c.evaluated.printed)


# --- the five kinds of edit -----------------------------------------------------------------------

def test_an_erratum_fixed_reads_as_consistent(tmp_path, text, registry, verdicts, first):
    claim = next(c for c in registry.claims if verdicts[c.id].verdict == "erratum" and verdicts[c.id].ours
                 and _editable(text, registry, c))
    line, path = _edited(tmp_path, text, claim, lambda n: f"{verdicts[claim.id].ours:.3f}")
    report = verify_text(path)
    c = _by_id(report)[0][claim.id]
    assert (c.change, c.evaluated.verdict, c.registered_verdict, c.line) == ("erratum fixed", "consistent",
                                                                              "erratum", line)
    assert "≤" in c.evaluated.band  # the band that decided it: within half a unit of the new last digit
    _others_untouched(report, first, {claim.id})
    assert report.exit_code == 0  # a fixed erratum only confirms


def test_a_new_wrong_number_reads_as_an_erratum(tmp_path, text, registry, verdicts, first):
    claim = next(c for c in registry.claims if verdicts[c.id].verdict == "consistent" and c.low > 1
                 and _editable(text, registry, c))
    line, path = _edited(tmp_path, text, claim, _tripled)
    report = verify_text(path)
    c = _by_id(report)[0][claim.id]
    assert (c.change, c.evaluated.verdict, c.evaluated.book) == ("new erratum", "erratum", _tripled(_span(text, claim)[3]))
    assert ">" in c.evaluated.band and c.worse
    _others_untouched(report, first, {claim.id})
    assert report.exit_code == 1


def test_a_model_swapped_beside_a_number_reads_as_inputs_changed(tmp_path, text, registry, first):
    anchored = {}
    for c in registry.claims:
        line = locate_claim(text, c, PATTERNS).line
        if line:
            anchored.setdefault(line, []).append(c.id)
    # a line outside the worked examples (whose set-up line names the scenario of the whole part)
    line = next(l for l in sorted(anchored) if text.where[l][1] != "example"
                and "Llama-2 13B" in scenario_words(text, l, patterns=PATTERNS))
    lines = list(text.lines)
    lines[line - 1] = lines[line - 1].replace("Llama-2 13B", "Llama-2 70B")
    report = verify_text(_write(tmp_path, lines))
    claims, statements = _by_id(report)
    for cid in anchored[line]:
        assert claims[cid].change == "inputs changed", cid
        assert "+Llama-2 70B" in claims[cid].inputs and "-Llama-2 13B" in claims[cid].inputs
    on_line = {s.evaluated.id for s in first.statements if s.line == line}
    assert all(statements[s].change == "inputs changed" for s in on_line)
    _others_untouched(report, first, set(anchored[line]), on_line)
    assert report.exit_code == 1


def test_a_new_quantitative_sentence_is_unaccounted_with_a_suggestion(tmp_path, text, registry, first):
    # the new number equals a claim's of the same part: equal values elsewhere in the part do not
    # account for a new line, only the claims anchored on it would
    like = next(c for c in registry.claims if (c.section, c.part) == ("15.1.2", "body") and c.printed and c.unit)
    after = text.block("15.1.2", "body")[0]
    sentence = f"A fresh measurement puts this at {like.book} {like.unit} per request."
    lines = list(text.lines)
    lines[after:after] = ["", sentence]
    report = verify_text(_write(tmp_path, lines))
    [u] = report.unaccounted
    assert (u.line, u.text, u.numbers) == (after + 2, sentence, (like.book,))
    assert f"same unit {like.unit}" in u.suggestion
    # the anchor it proposes reads the new number
    from inferlab.claims.anchors import number_after
    anchor = json.loads(u.suggestion.split("anchor = ", 1)[1])
    assert [n.text for n in number_after(sentence, anchor)[0]] == [like.book]
    _others_untouched(report, first)
    assert report.exit_code == 1


def _paragraph_with_entries(text, first, part="body"):
    """The first paragraph of a body holding both a claim and a statement."""
    claim_lines = {c.line for c in first.claims if c.line}
    statement_lines = {s.line for s in first.statements if s.line}
    return next(l for l in sorted(claim_lines & statement_lines) if text.where[l][1] == part)


def test_a_deleted_paragraph_removes_its_entries_and_moves_no_other(tmp_path, text, first):
    line = _paragraph_with_entries(text, first)
    lines = list(text.lines)
    del lines[line - 1:line + 1]          # the paragraph and the blank line after it
    report = verify_text(_write(tmp_path, lines))
    gone_c = {c.evaluated.id for c in first.claims if c.line == line}
    gone_s = {s.evaluated.id for s in first.statements if s.line == line}
    claims, statements = _by_id(report)
    assert gone_c and gone_s
    assert all(claims[c].change == "removed" and claims[c].line is None and claims[c].anchor for c in gone_c)
    assert all(statements[s].change == "removed" for s in gone_s)
    _others_untouched(report, first, gone_c, gone_s)
    old_c, old_s = _by_id(first)
    for cid, c in claims.items():     # every later entry two lines up, every earlier one in place
        if cid not in gone_c and c.line:
            assert c.line == old_c[cid].line - (2 if old_c[cid].line > line else 0), cid
    for sid, s in statements.items():
        if sid not in gone_s:
            assert s.line == old_s[sid].line - (2 if old_s[sid].line > line else 0), sid


def test_a_moved_paragraph_changes_nothing_but_lines(tmp_path, text, first):
    a = _paragraph_with_entries(text, first)
    body = text.block(*text.where[a])
    b = body[body.index(a) + 1]           # swap it with the next paragraph of the same part
    lines = list(text.lines)
    lines[a - 1], lines[b - 1] = lines[b - 1], lines[a - 1]
    report = verify_text(_write(tmp_path, lines))
    _others_untouched(report, first)
    assert report.exit_code == 0 and not report.unaccounted
    old_c, _ = _by_id(first)
    moved = {cid: c.line for cid, c in _by_id(report)[0].items() if old_c[cid].line in (a, b)}
    assert moved and all(line == (b if old_c[cid].line == a else a) for cid, line in moved.items())


def test_a_duplicated_paragraph_is_reported_by_name_and_changes_no_verdict(tmp_path, text, first):
    line = _paragraph_with_entries(text, first)
    lines = list(text.lines)
    lines[line:line] = ["", lines[line - 1]]
    report = verify_text(_write(tmp_path, lines))
    twice_c = {c.evaluated.id for c in first.claims if c.line == line}
    twice_s = {s.evaluated.id for s in first.statements if s.line == line}
    claims, statements = _by_id(report)
    for e in [claims[c] for c in twice_c] + [statements[s] for s in twice_s]:
        assert e.anchor.startswith(f"{e.evaluated.id}: anchor") and "matches 2 lines" in e.anchor
        assert f"line {line} " in e.anchor and f"line {line + 2} " in e.anchor and e.line == line
    _others_untouched(report, first)   # the duplicated entries keep their verdict and change too
    assert report.exit_code == 1


# --- the command ---------------------------------------------------------------------------------

def test_the_command_reads_a_file_or_a_folder_and_exits_0_1_2(tmp_path, text, capsys):
    assert main(["verify", "--book", str(CHAPTER), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {"claims", "statements", "unaccounted"} <= set(data)
    assert all({"line", "change"} <= set(c) and c["change"] in CHANGES for c in data["claims"])
    lines = list(text.lines) + ["", "Every request always needs 12 GB more."]
    (tmp_path / "draft").mkdir()
    _write(tmp_path / "draft", lines)
    assert main(["verify", "--book", str(tmp_path / "draft")]) == 1
    out = capsys.readouterr().out
    assert "Every request always needs 12 GB more." in out and "suggestion:" in out
    assert main(["verify", "--book", str(tmp_path / "nowhere.txt")]) == 2
    assert "--book" in capsys.readouterr().err
    (tmp_path / "two").mkdir()
    for name in ("a.txt", "b.txt"):
        (tmp_path / "two" / name).write_text("x\n", encoding="utf-8")
    with pytest.raises(ValueError, match="2 .txt files"):
        chapter_file(tmp_path / "two")
    assert main(["verify", "--book", str(CHAPTER), "--verdict", "erratum"]) == 2
    (tmp_path / "binary.txt").write_bytes(b"\xff\xfe\x00 not text")
    assert main(["verify", "--book", str(tmp_path / "binary.txt")]) == 2
    assert "not a UTF-8 text file" in capsys.readouterr().err


def test_against_lists_what_changed_between_two_drafts(tmp_path, text, registry, verdicts, capsys):
    claim = next(c for c in registry.claims if verdicts[c.id].verdict == "consistent" and c.low > 1
                 and _editable(text, registry, c))
    line, new = _edited(tmp_path, text, claim, _tripled)
    assert main(["verify", "--book", new, "--against", str(CHAPTER)]) == 1
    md = capsys.readouterr().out
    assert md.startswith("## Verdicts:") and "1 entries changed" in md
    assert f"| {claim.id} | new erratum | {line} → {line} |" in md
    assert main(["verify", "--book", new, "--against", str(CHAPTER), "--json"]) == 1
    [entry] = json.loads(capsys.readouterr().out)["entries"]
    assert entry["id"] == claim.id and entry["new"]["verdict"] == "erratum" and entry["old"]["verdict"] == "consistent"
    assert main(["verify", "--against", str(CHAPTER)]) == 2


def test_a_whole_report_stays_well_under_30_seconds_of_cpu(text):
    # about 2 s of CPU here; CPU time of this process, so other load on the machine does not count
    t0 = time.process_time()
    verify_text(CHAPTER)
    assert time.process_time() - t0 < 30


def test_a_number_that_now_contradicts_another_is_reported_with_both_lines(tmp_path, text, registry, verdicts,
                                                                            first):
    # two consistent claims of one quantity and inputs, one of them editable: tripling it makes the
    # pair exclude each other
    known = {c.pair for c in first.contradictions}
    pairs = {}
    for c in registry.claims:
        if c.function is not None and c.status == "checked":
            pairs.setdefault((c.function.name, repr(sorted(c.function.inputs.items())), c.unit), []).append(c)
    a, b = next((x, y) for group in pairs.values() for x in group for y in group
                if x is not y and verdicts[x.id].verdict == verdicts[y.id].verdict == "consistent"
                and x.low > 1 and _editable(text, registry, x))
    report = verify_text(_edited(tmp_path, text, a, _tripled)[1])
    new = [c for c in report.new_contradictions if {c.a, c.b} == {a.id, b.id}]
    assert new and new[0].pair not in known
    lines_of = {c.evaluated.id: c.line for c in report.claims}
    assert new[0].a_line and new[0].b_line
    assert {new[0].a_line, new[0].b_line} == {lines_of[a.id], lines_of[b.id]}
    assert report.exit_code == 1


def test_errata_for_any_text(tmp_path, text, registry, verdicts, capsys):
    from pathlib import Path
    registered = (Path(__file__).resolve().parents[1] / "ERRATA.md").read_text(encoding="utf-8")
    out = tmp_path / "ERRATA-first.md"
    assert main(["errata", "--book", str(CHAPTER), "--output", str(out)]) == 0
    lines = out.read_text(encoding="utf-8").splitlines(keepends=True)
    assert lines[4].startswith("Judged against the text")   # the registered text gives ERRATA.md itself
    # the same file, but for the lines of the contradicting claims, which only a text can give
    import re
    drop = lambda t: re.sub(r" \(line \d+\)", "", t)
    assert drop("".join(lines[:4] + lines[6:])) == drop(registered)
    claim = next(c for c in registry.claims if verdicts[c.id].verdict == "erratum" and verdicts[c.id].ours
                 and _editable(text, registry, c))
    draft = _edited(tmp_path, text, claim, lambda n: f"{verdicts[claim.id].ours:.3f}")[1]
    assert main(["errata", "--book", draft, "--output", str(out)]) == 0
    fixed = out.read_text(encoding="utf-8")
    assert f"### {claim.id}\n" in registered and f"### {claim.id}\n" not in fixed
    assert main(["errata", "--book", str(CHAPTER)]) == 2 and "needs --output" in capsys.readouterr().err


def test_without_the_registered_text_every_number_is_still_judged(tmp_path, text, first):
    report = verify_text(CHAPTER, registered=tmp_path / "absent.txt")
    assert report.registered is None and "not found (scenario words not compared)" in table(report)
    assert [(c.evaluated.id, c.evaluated.verdict, c.line) for c in report.claims] == \
        [(c.evaluated.id, c.evaluated.verdict, c.line) for c in first.claims]


def _appended_cases(text, first):
    """Two registered lines outside the worked examples holding claims: one that also holds a
    statement (a statement used to account for every number on its line) and one that does not."""
    claim_lines = {c.line for c in first.claims if c.line}
    statement_lines = {s.line for s in first.statements if s.line}
    plain = [l for l in sorted(claim_lines) if text.where[l][1] != "example"]
    return [next(l for l in plain if l in statement_lines), next(l for l in plain if l not in statement_lines)]


def test_a_sentence_appended_to_a_registered_line_reports_its_new_number(tmp_path, text, first):
    # the new sentence names another model and prints a number found nowhere on the line: the
    # number is reported alone, and the entries whose numbers come before it keep their inputs
    for line in _appended_cases(text, first):
        printed = {n.value for n, _, _ in number_spans(text.line(line), PATTERNS)}
        new = next(str(v) for v in range(37, 1000) if v not in printed)
        model = next(m for m in ("Llama-2 70B", "Mistral 7B") if m not in text.line(line))
        lines = list(text.lines)
        lines[line - 1] += f" A later run on {model} measured {new} GB."
        report = verify_text(_write(tmp_path, lines))
        [u] = report.unaccounted
        assert (u.line, u.numbers) == (line, (new,)), line
        assert "add a claim" in u.suggestion
        _others_untouched(report, first)   # the line's own claims and statements included
        assert report.exit_code == 1


def test_a_claim_that_reads_a_number_of_an_appended_sentence_leaves_its_old_one_unaccounted(tmp_path, text, first,
                                                                                             registry):
    # an anchor whose last phrase recurs in the new sentence reads the new number; the number it
    # read before is then no entry's and is reported, not kept as accounted by the registered line
    for claim in registry.claims:
        if not claim.anchor or claim.is_range:
            continue
        line = locate_claim(text, claim, PATTERNS).line
        raw = text.line(line)
        sentence = f" Again {claim.anchor[-1]} 9999 units."
        if not line or "9999" in raw:
            continue
        lines = list(text.lines)
        lines[line - 1] = raw + sentence
        if [n.text for n in locate_claim(Text(text.path, tuple(lines), text.where), claim, PATTERNS).numbers] != ["9999"]:
            continue
        report = verify_text(_write(tmp_path, lines))
        c = _by_id(report)[0][claim.id]
        assert c.evaluated.book == "9999" and c.change != "unchanged"
        old = _span(text, claim)[3].text
        assert any(u.line == line and old in u.numbers for u in report.unaccounted)
        return
    pytest.skip("no anchor of the registry reads a number appended after its line")


def test_the_draft_in_the_authors_guide_prints_what_the_guide_shows(tmp_path, text, registry):
    # docs/authors.md shows the report of a draft with five edits; the same edits made here must
    # print every line the guide shows (its '...' lines stand for rows it leaves out)
    import re
    from pathlib import Path
    guide = (Path(__file__).resolve().parents[1] / "docs" / "authors.md").read_text(encoding="utf-8")
    shown = guide.split("`inferlab verify --book second-edition/`", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    by = {c.id: c for c in registry.claims}
    lines = list(text.lines)
    fixed, wrong = by["15.2.2-ag"], by["15.2.2-z"]
    for claim, new in ((fixed, lambda n: "21.5"), (wrong, lambda n: f"{int(n.value) + 1000:,}")):
        line, start, end, _ = _span(text, claim)
        lines[line - 1] = _replace_number(lines[line - 1], start, end, new(_span(text, claim)[3]))
    swapped = locate_claim(text, by["15.1.2-af"], PATTERNS).line
    lines[swapped - 1] = lines[swapped - 1].replace("Llama-2 13B", "Llama-2 70B")
    new_sentence = re.search(r"line \d+ \[3\.3\]: (.*)", shown).group(1)
    after = locate_claim(text, by["15.1.2-a"], PATTERNS).line   # a paragraph of its own after 15.1.2-a's
    lines[after + 1:after + 1] = [new_sentence, ""]
    deleted = locate_claim(text, by["15.1.1-u"], PATTERNS).line
    del lines[deleted - 1:deleted + 1]
    printed = table(verify_text(_write(tmp_path, lines))).splitlines()
    for row in shown.splitlines():
        if "..." in row or row.startswith(("Text:", "Registered text:")):
            continue
        assert row in printed, row

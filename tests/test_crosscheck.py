"""The chapter checked against itself (inferlab.claims.crosscheck): two entries of the same quantity
under the same conditions that cannot both be right are reported, with both lines; no verdict moves."""
import math

import pytest

from inferlab.claims.crosscheck import accepted, contradictions, markdown, number_contradictions, \
    statement_contradictions
from inferlab.claims.registry import load_registry
from inferlab.claims.statements import load_statements

pytestmark = pytest.mark.claims


def _claims(*entries):
    text = ""
    for i, (book, extra) in enumerate(entries):
        text += (f'[[claim]]\nid = "15.1.1-{"abcdefgh"[i]}"\nsection = "15.1.1"\npart = "body"\n'
                 f'description = "ridge"\nbook = "{book}"\nunit = "FLOP/byte"\nfunction = "ridge_flops_per_byte"\n{extra}\n')
    return load_registry(text=text)


def test_the_interval_each_printed_value_admits():
    a, b, c, d = _claims(("295", ""), ("50-70", ""), ("80", 'relation = ">"'),
                         ("2,700", 'tolerance = { abs = 30, why = "rounded inputs" }')).claims
    assert accepted(a) == (294.5, 295.5)         # half a unit of the last digit
    assert accepted(b) == (50, 70)
    assert accepted(c) == (80, math.inf)
    assert accepted(d) == (2670, 2730)           # a stated band


@pytest.mark.parametrize("first, second, contradict", [
    (("160", ""), ("54", ""), True),
    (("160", ""), ("160.4", ""), False),          # 160.4 lies within 160's band (±0.5)
    (("2", 'relation = ">"'), ("2", 'relation = ">"'), False),   # two bounds the same way
    (("1", 'relation = "<"'), ("5", ""), True),
    (("50-70", ""), ("65", ""), False),
    (("50-70", ""), ("71", ""), True),
])
def test_two_printed_values_of_one_quantity(first, second, contradict):
    found = number_contradictions(_claims(first, second))
    assert bool(found) == contradict
    if found:
        assert (found[0].a, found[0].b) == ("15.1.1-a", "15.1.1-b")


def test_different_inputs_are_different_quantities():
    text = "".join(f'[[claim]]\nid = "15.1.1-{x}"\nsection = "15.1.1"\npart = "body"\ndescription = "r"\n'
                   f'book = "{b}"\nunit = "FLOP/byte"\nfunction = "ridge_flops_per_byte"\n{inputs}\n'
                   for x, b, inputs in (("a", "160", ""), ("b", "54", 'inputs = { accelerator = "a100-80gb" }')))
    assert not number_contradictions(load_registry(text=text))
    assert number_contradictions(load_registry(text=text.replace('inputs = { accelerator = "a100-80gb" }', "")))


def _statements(*entries):
    text = "".join(f'[[statement]]\nid = "15.2.1-s{90 + i}"\nline = {10 + i}\nkeywords = ["a", "b"]\n'
                   f'description = "d{i}"\nexperiment = "chunked_long_prompt"\ninputs = {inputs}\n'
                   for i, inputs in enumerate(entries))
    return load_statements(text=text)


def test_statements_asserting_opposite_outcomes_under_one_condition():
    found = statement_contradictions(_statements('{ metric = "long_ttft", expect = "higher" }',
                                                 '{ metric = "long_ttft", expect = "lower" }'))
    assert [(c.a, c.b, c.a_line, c.b_line) for c in found] == [("15.2.1-s90", "15.2.1-s91", 10, 11)]
    assert "expect higher" in found[0].a_says and "expect lower" in found[0].b_says
    assert not statement_contradictions(_statements('{ metric = "long_ttft", expect = "higher" }',
                                                    '{ metric = "long_ttft", expect = "higher" }'))
    assert not statement_contradictions(_statements('{ metric = "long_ttft", expect = "higher" }',
                                                    '{ metric = "others_max_itl", expect = "lower" }'))


def test_the_registered_chapter_contradictions_are_in_errata():
    from pathlib import Path
    found = contradictions(load_registry(), load_statements())
    assert found  # the chapter states the 2,048-token prefill as two values that exclude each other
    text = (Path(__file__).resolve().parents[1] / "ERRATA.md").read_text(encoding="utf-8")
    section = text.split("## Contradictions within the chapter", 1)[1].split("\n## ", 1)[0]
    for c in found:
        assert c.a in section and c.b in section
    assert markdown([]).count("| none |") == 1


def test_verify_with_a_filter_lists_only_the_contradictions_that_touch_what_it_lists(capsys):
    """`verify --section S` printed every contradiction of the chapter under a table of one section's numbers; now
    each one it prints names an entry of S (a claim it listed, or a statement of S), and unfiltered it prints
    them all."""
    from inferlab.cli import main

    def contradiction_lines(*argv):
        assert main(["verify", *argv]) == 0
        out = capsys.readouterr().out
        tail = out[out.index("Contradictions within the chapter"):].splitlines()
        return [line for line in tail[1:] if line.startswith("  ")]

    every = contradictions(load_registry(), load_statements())
    assert len(contradiction_lines()) == len(every) > 0
    for section in ("15.1.1", "15.2.2"):
        lines = contradiction_lines("--section", section)
        assert all(f"{section}-" in line for line in lines), lines
        touching = [c for c in every if c.a.startswith(section + "-") or c.b.startswith(section + "-")]
        assert len(lines) == len(touching)

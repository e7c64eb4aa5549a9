"""The notation page (book/notation.md) against the chapter notebooks: every symbol two notebooks
share has an entry with a unit and a meaning (book/notation.py reads the notebooks' TeX).

The extraction is tested on hand-written TeX first (normalisation, what is not notation), then the
real notebooks and page; the last tests remove real entries from a copy of the page and expect the
missing symbol, or the entry without a unit or meaning, to be named.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book"))
import notation  # noqa: E402  (book/notation.py)

PAGE = (ROOT / "book" / "notation.md").read_text()


def real_notebooks() -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in sorted((ROOT / "chapters").glob("15_*.ipynb"))}


# ------------------------------------------------------------------------- the extraction
@pytest.mark.parametrize("tex, expected", [
    # one symbol, however its subscript is written
    (r"C_{\text{kv}}", {"C_{kv}"}),
    (r"C_\text{kv}", {"C_{kv}"}),
    (r"C_{kv}", {"C_{kv}"}),
    (r"C_\mathrm{kv}(S)", {"C_{kv}", "S"}),
    (r"b_w", {"b_{w}"}),
    # a starred symbol keeps its star; exponents and the transpose are not part of a name
    (r"B^*", {"B^*"}),
    (r"B^{\ast}", {"B^*"}),
    (r"S^2 + QK^\top", {"S", "Q", "K"}),
    # TeX reads adjacent letters as factors
    (r"2PBS", {"P", "B", "S"}),
    # a one-word \text is a symbol, units and numbers are not
    (r"\frac{\text{peak}}{\text{BW}} = \frac{989\ \text{TFLOP/s}}{3.35\ \text{TB/s}} = 295\ \text{FLOP/byte}",
     {"peak", "BW"}),
    (r"26.0\ \text{GB} + 8.00\ \mu\text{s} = 11.7\ \text{ms}", set()),
    (r"\text{step\_time}(B)", {"step_time", "B"}),
    (r"3\ \text{tokens}_{in} + \operatorname{softmax}(x)", {"x"}),   # a unit's script, a named operator
    # a \text phrase (spaces) is words; the symbols around it stay
    (r"(K \text{ and } V,\ \text{bf16})", {"K", "V"}),
    (r"\text{cost per 1k tokens} = \frac{\text{price per GPU-hour}}{3600\ \text{s}}", set()),
    # functions, their indices, sets, brace labels, environments
    (r"\text{slot use} = \frac{\sum_i N_i}{B \cdot \max_i N_i}", {"N_{i}", "B"}),
    (r"W \in \mathbb{R}^{d \times f}", {"W", "d", "f"}),
    (r"\underbrace{2 \cdot 2 d f}_{\text{weights}} + \underbrace{2 B S}_{\text{activations}}",
     {"d", "f", "B", "S"}),
    (r"\begin{aligned} t_{\text{step}} &= x \\ \end{aligned}", {"t_{step}", "x"}),
    (r"\left\lfloor \frac{S}{C - B} \right\rfloor", {"S", "C", "B"}),
    # Greek letters and accents
    (r"\bar B \approx \lambda \cdot \overline{E2E}", {r"\bar{B}", r"\lambda", r"\overline{E2E}"}),
])
def test_symbols_in_tex(tex, expected):
    assert notation.symbols_in_tex(tex) == expected


def test_math_segments_skip_escaped_dollars():
    text = r"It costs US\$4.00 per hour for $B$ sequences, US\$0.0088 per 1k tokens; $$C_\text{kv}$$ and $d$."
    assert notation.math_segments(text) == ["B", r"C_\text{kv}", "d"]


def nb(cells: list[dict]) -> dict:
    return {"cells": cells}


def test_notebook_symbols_read_markdown_cells_and_rendered_outputs_only():
    cells = [
        {"cell_type": "markdown", "source": ["The batch $B$ and ", "$$b_w P$$"]},
        {"cell_type": "code", "source": "x = '$Z$'  # code is not notation",
         "outputs": [{"output_type": "display_data", "data": {"text/markdown": "$C_{\\text{kv}}$",
                                                               "text/latex": ["$$I_\\text{ridge}$$"],
                                                               "text/plain": "$Y$"}},
                     {"output_type": "stream", "name": "stdout", "text": "$X$"}]},
    ]
    assert notation.notebook_symbols(nb(cells)) == {"B", "b_{w}", "P", "C_{kv}", "I_{ridge}"}


def test_shared_symbols_are_those_of_two_notebooks_or_more():
    a = nb([{"cell_type": "markdown", "source": "$B$ and $C_\\text{kv}$ and $d$"}])
    b = nb([{"cell_type": "markdown", "source": "$B$ and $C_{kv}$"}])
    c = nb([{"cell_type": "markdown", "source": "$B$"}])
    assert notation.shared_symbols({"a": a, "b": b, "c": c}) == {"B": ["a", "b", "c"], "C_{kv}": ["a", "b"]}


# ------------------------------------------------------------------------- the page
TABLE_HEAD = "| symbol | unit | meaning | defined in |\n| --- | --- | --- | --- |\n"


def test_notation_entries_name_every_symbol_of_the_first_column():
    page = TABLE_HEAD + ("| $b_w$, $b_\\text{kv}$ | byte | bytes per element | 15.1.1 |\n"
                         "| MFU, MBU | dimensionless (fraction) | utilisations | 15.1.1 |\n"
                         "| $K$, tp | dimensionless | parallel degree | 15.2.1 |\n")
    rows = notation.notation_entries(page)
    assert [r["symbols"] for r in rows] == ["b_{kv},b_{w}", "MBU,MFU", "K,tp"]


@pytest.mark.parametrize("row, problem", [
    ("| $B$ |  | batch | 15.1.1 |", "entry $B$: unit '' is not one of"),
    ("| $B$ | sequences | batch | 15.1.1 |", "entry $B$: unit 'sequences' is not one of"),
    ("| $B$ | dimensionless |  | 15.1.1 |", "entry $B$: no meaning"),
    ("| $B$ | dimensionless |", "entry $B$: no meaning"),
    ("| capacity | byte; requests | two things | 15.1.2 |", "entry capacity: unit 'byte; requests'"),
])
def test_an_entry_without_unit_or_meaning_is_named(row, problem):
    problems = notation.notation_problems(TABLE_HEAD + row + "\n", {})
    assert len(problems) == 1 and problems[0].startswith(problem), problems


def test_a_good_entry_has_no_problem():
    row = "| $M_\\text{device}$ | byte | accelerator memory | 15.1.2 |\n"
    assert notation.notation_problems(TABLE_HEAD + row, {"M_{device}": ["x", "y"]}) == []


def test_an_entry_for_two_quantities_is_named():
    """The page's old `capacity` row (bytes in 15.1.2 and 15.2.2, a rate in 15.2.3): one symbol, two units."""
    row = "| capacity | byte; 1/s (requests per second) | memory; request rate | 15.1.2 |\n"
    problems = notation.notation_problems(TABLE_HEAD + row, {"capacity": ["x", "y"]})
    assert problems == ["entry capacity: one symbol for 2 quantities (byte; 1/s (requests per second)): "
                        "give each quantity its own symbol"]


# The notebooks' old mixed uses, as they were written: memory as \text{capacity} (15.1.2, 15.2.2),
# the serving rate as \text{capacity} (15.2.3), the step time as \text{step\_time} (15.2.2's
# rebuilt lost formula) beside t_\text{step} elsewhere.
OLD_USES = [
    r"$$B_\text{max} = \left\lfloor \frac{\text{capacity} - M_\text{weights}}{C_\text{kv}(S)} \right\rfloor.$$",
    r"$$\text{requests per dollar} = \frac{\text{capacity} \times 3600\ \text{s}}{\text{GPUs}}$$",
    r"$$\text{step\_time}(B) = \frac{M_{\text{weights}} + B \cdot C_{\text{kv}}}{\text{BW}}$$",
]


@pytest.mark.parametrize("tex, symbol", list(zip(OLD_USES, ["capacity", "capacity", "step_time"])))
def test_an_old_mixed_use_in_a_notebook_is_named(tex, symbol):
    as_markdown = nb([{"cell_type": "markdown", "source": tex}])
    as_output = nb([{"cell_type": "code", "source": "", "outputs": [
        {"output_type": "display_data", "data": {"text/markdown": tex}}]}])
    for planted in (as_markdown, as_output):
        uses = notation.retired_uses({"x.ipynb": planted})
        assert len(uses) == 1 and uses[0].startswith(f"x.ipynb: {symbol} (use "), uses


def test_the_notebooks_use_one_symbol_per_quantity():
    """No retired symbol in the chapter notebooks, and their replacements are there: memory as
    M_device in 15.1.2 and 15.2.2, serving capacity as lambda_SLO in 15.2.3, t_step for the step time."""
    books = real_notebooks()
    assert notation.retired_uses(books) == []
    syms = {name: notation.notebook_symbols(b) for name, b in books.items()}
    assert "M_{device}" in syms["15_1_2_decode_kv_cache.ipynb"] and "M_{device}" in syms["15_2_2_batching.ipynb"]
    assert r"\lambda_{SLO}" in syms["15_2_3_serving_lab.ipynb"]
    assert "t_{step}" in syms["15_1_2_decode_kv_cache.ipynb"] and "t_{step}" in syms["15_2_2_batching.ipynb"]


# ------------------------------------------------------------------------- the real notebooks
def test_the_extraction_finds_the_chapter_notation_in_the_real_notebooks():
    """Guards the coverage test below from passing on an empty extraction: symbols known by hand
    to appear in two notebooks or more are found, and no unit word is taken for a symbol."""
    shared = notation.shared_symbols(real_notebooks())
    assert {"C_{kv}", "M_{weights}", "b_{w}", "N_{kv}", "BW", "TTFT", "B", "S", "B_{max}"} <= set(shared)
    # (not NOT_NOTATION itself: its `B`, the unit byte in `\\text{B}`, is also the batch letter)
    assert not set(shared) & {"ms", "GB", "TB", "FLOP", "bytes", "tokens", "bf16", "us", r"\mu",
                              "max", "min", "frac", "cdot", "i", "2"}


def test_every_symbol_two_notebooks_share_has_an_entry_with_unit_and_meaning():
    problems = notation.notation_problems(PAGE, notation.shared_symbols(real_notebooks()))
    assert problems == [], "book/notation.md:\n" + "\n".join(problems)


def without_row(page: str, first_cell: str) -> str:
    lines = page.split("\n")
    kept = [line for line in lines if not line.startswith(f"| {first_cell} |")]
    assert len(kept) == len(lines) - 1, f"no row {first_cell!r} in the page"
    return "\n".join(kept)


def test_removing_a_real_entry_names_the_missing_symbol_and_its_notebooks():
    page = without_row(PAGE, r"$B_\text{max}$")
    problems = notation.notation_problems(page, notation.shared_symbols(real_notebooks()))
    assert problems == ["symbol B_{max} (used in 15_1_2_decode_kv_cache.ipynb, 15_2_2_batching.ipynb) "
                        "has no entry"]


def test_removing_the_unit_or_meaning_of_a_real_entry_is_named():
    row = next(line for line in PAGE.split("\n") if line.startswith("| BW |"))
    for broken in (re.sub(r"^\| BW \| [^|]+ \|", "| BW |  |", row), re.sub(r"\| byte/s \| [^|]+ \|", "| byte/s |  |", row)):
        assert broken != row
        problems = notation.notation_problems(PAGE.replace(row, broken), notation.shared_symbols(real_notebooks()))
        assert len(problems) == 1 and problems[0].startswith("entry BW: "), problems

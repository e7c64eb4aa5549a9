"""The chapter notebooks as files: pairs in sync, outputs stored, no logic hiding in cells.

nbval (configured in pyproject.toml) re-executes each .ipynb and compares its outputs; these
tests check what nbval cannot: that the .py people edit and the .ipynb nbval runs hold the same
cells, that every cell which should show something has a stored output from one top-to-bottom
run, and that the figures a notebook prints are the figures `inferlab figures` exports.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import jupytext
import nbformat
import pytest

CHAPTERS = Path(__file__).resolve().parents[1] / "chapters"
NOTEBOOKS = ["00_index", "15_1_1_prefill", "15_1_2_decode_kv_cache", "15_2_1_ttft_itl", "15_2_2_batching",
             "15_2_3_serving_lab", "15_2_3a_validation"]
SECTIONS = {"15_1_1_prefill": "15.1.1", "15_1_2_decode_kv_cache": "15.1.2", "15_2_1_ttft_itl": "15.2.1",
            "15_2_2_batching": "15.2.2"}
# Beyond the chapter: no claims or lost formulas of its own; it cross-references the chapter's statements.
LABS = {"15_2_3_serving_lab": "15.2.3"}
# Appendices: studies of the companion's own tools (no scenario of their own, no What-if cell).
APPENDICES = {"15_2_3a_validation": "15.2.3"}
# Statements that would make a notebook compute on its own instead of calling the library.
FORBIDDEN = {ast.FunctionDef: "def", ast.AsyncFunctionDef: "async def", ast.ClassDef: "class",
             ast.Lambda: "lambda", ast.For: "for loop", ast.While: "while loop"}
FIGURE_MARK = re.compile(r"^# figure: (fig-\S+)", re.M)  # the book-markup convention
CLAIM_ROW = re.compile(r"^(15\.\d\.\d-[a-z]+) {2,}\S", re.M)  # a row of a claims table


def cells(path: Path, fmt: str):
    return [(c.cell_type, c.source.strip()) for c in jupytext.read(path, fmt=fmt).cells]


def stored(name: str):
    return nbformat.read(CHAPTERS / f"{name}.ipynb", as_version=4)


def python_of(source: str) -> str:
    """A cell's source without IPython magics (%...) and shell escapes (!...), for ast."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())


def _code_of(source: str) -> str:
    """The source without its comments and trailing blanks (a `;` before a comment still silences)."""
    import io
    import tokenize
    comments = [t for t in tokenize.generate_tokens(io.StringIO(python_of(source)).readline) if t.type == tokenize.COMMENT]
    lines = python_of(source).splitlines()
    for t in reversed(comments):
        row, col = t.start
        lines[row - 1] = lines[row - 1][:col]
    return "\n".join(lines).rstrip()


def shows_something(source: str) -> bool:
    """True when a cell prints, displays, or ends in an expression (whose value Jupyter shows)."""
    tree = ast.parse(python_of(source))
    calls = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    ends_in_expr = bool(tree.body) and isinstance(tree.body[-1], ast.Expr) and not _code_of(source).endswith(";")
    return bool(calls & {"print", "display"}) or ends_in_expr


def test_the_chapter_folder_holds_exactly_the_paired_notebooks():
    assert sorted(p.stem for p in CHAPTERS.glob("*.py")) == NOTEBOOKS
    assert sorted(p.stem for p in CHAPTERS.glob("*.ipynb")) == NOTEBOOKS
    assert NOTEBOOKS == sorted(NOTEBOOKS), "file names must sort in reading order"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_text_and_ipynb_hold_the_same_cells(name):
    """Fails when someone edits the .py (or the .ipynb in Lab without the pairing) and does not
    sync: run `.venv/bin/jupytext --sync chapters/<name>.py` and re-execute (`make notebooks`)."""
    text = cells(CHAPTERS / f"{name}.py", "py:percent")
    nb = cells(CHAPTERS / f"{name}.ipynb", "ipynb")
    assert [c[0] for c in text] == [c[0] for c in nb], "cell types differ: the pair is out of sync"
    for i, (a, b) in enumerate(zip(text, nb)):
        assert a == b, f"cell {i} differs between {name}.py and {name}.ipynb: the pair is out of sync"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_pairing_is_declared(name):
    nb = stored(name)
    assert nb.metadata.get("jupytext", {}).get("formats", "ipynb,py:percent") == "ipynb,py:percent"
    assert nb.metadata["kernelspec"]["name"] == "python3"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_outputs_are_stored_from_one_top_to_bottom_run(name):
    code = [c for c in stored(name).cells if c.cell_type == "code" and c.source.strip()]
    assert code, f"{name} has no code"
    counts = [c.execution_count for c in code]
    assert counts == list(range(1, len(code) + 1)), \
        f"{name}: execution counts {counts}; store outputs from one clean run (make notebooks)"
    for c in code:
        if shows_something(c.source):
            assert c.outputs, f"{name}: a cell that shows something has no stored output:\n{c.source}"
        for out in c.outputs:
            assert out.output_type != "error", f"{name}: a stored output is an error:\n{c.source}"
            if out.output_type == "stream":
                assert out.name == "stdout", f"{name}: stderr output (a warning?) in:\n{c.source}"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_cells_call_the_library_instead_of_computing(name):
    for c in stored(name).cells:
        if c.cell_type != "code":
            continue
        for node in ast.walk(ast.parse(python_of(c.source))):
            for kind, label in FORBIDDEN.items():
                assert not isinstance(node, kind), \
                    f"{name}: a {label} in a cell; put the logic in lib/inferlab with a test:\n{c.source}"


@pytest.mark.parametrize("name", [n for n in NOTEBOOKS[1:] if n not in APPENDICES])
def test_each_subsection_has_a_what_if_cell_and_its_errata(name):
    nb = stored(name)
    sources = [c.source for c in nb.cells]
    assert any(s.startswith("# What if?") for s in sources if s), f"{name}: no 'What if?' cell"
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    if name in LABS:
        text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
        assert "**Beyond the chapter.**" in text, f"{name}: not marked as going beyond the chapter"
        assert re.search(r'statement_verdicts\(\s*"15\.\d\.\d-s\d+', code), f"{name}: cites no statement verdict"
        return
    assert f'"{SECTIONS[name]}"' in code, f"{name}: no claims of section {SECTIONS[name]} shown"


def printed(name: str) -> str:
    """Every text output a notebook stored (streams and the text/plain of displays)."""
    out = []
    for c in stored(name).cells:
        for o in c.get("outputs", []):
            out.append(o.text if o.output_type == "stream" else o.get("data", {}).get("text/plain", ""))
    return "\n".join(out)


def test_every_claim_of_the_chapter_is_shown_in_exactly_one_notebook_its_own():
    from inferlab.claims import evaluate_claims
    shown = {}
    for name in SECTIONS:
        for claim_id in CLAIM_ROW.findall(printed(name)):
            shown.setdefault(claim_id, []).append(name)
    registry = {c.id: c.section for c in evaluate_claims()}
    assert sorted(set(registry) - set(shown)) == [], "claims of the registry no notebook shows"
    assert sorted(set(shown) - set(registry)) == [], "notebooks show claims the registry lacks"
    for claim_id, where in shown.items():
        assert len(where) == 1, f"{claim_id} is shown {len(where)} times ({where})"
        assert SECTIONS[where[0]] == registry[claim_id], f"{claim_id} is shown in {where[0]}"


@pytest.mark.parametrize("name", list(SECTIONS))
def test_the_lost_formulas_of_the_subsection_are_shown(name):
    from inferlab.claims import lost_formulas
    formulas = lost_formulas(SECTIONS[name])
    assert formulas, f"the registry has no lost formulas for {SECTIONS[name]}"
    text = printed(name)
    for f in formulas:
        assert f.id in text and f.latex.splitlines()[0] in text, f"{name} does not show {f.id}"


def book_label(figure: str) -> str:
    """inferlab.notebook.figures' name "15.1.1-fig2-ttft-vs-prompt" -> the notebook label "fig-15-1-1-ttft-vs-prompt"."""
    section, _, slug = figure.split("-", 2)
    return "fig-" + section.replace(".", "-") + "-" + slug


def figure_cells():
    """{exported figure name: [(notebook, cell)]} for the figure cells whose label is an exported figure."""
    from inferlab.notebook.figures import FIGURES
    names = {book_label(f): f for f in FIGURES}
    out = {}
    for name in NOTEBOOKS:
        for c in stored(name).cells:
            if c.cell_type == "code":
                for fig in FIGURE_MARK.findall(c.source):
                    out.setdefault(names.get(fig, fig), []).append((name, c))
    return {k: v for k, v in out.items() if k in FIGURES}


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_figure_cells_follow_the_book_markup(name):
    """A figure cell starts with the figure / caption / alt lines (after any nbval marker) and
    produces exactly one image."""
    for c in stored(name).cells:
        if c.cell_type != "code" or not FIGURE_MARK.search(c.source):
            continue
        lines = c.source.splitlines()
        while lines and lines[0].startswith("# NBVAL_"):
            lines = lines[1:]
        assert lines[0].startswith("# figure: fig-") and lines[1].startswith("# caption: ") \
            and lines[2].startswith("# alt: "), f"{name}: figure cell without figure/caption/alt lines"
        images = [o for o in c.outputs if "image/png" in o.get("data", {}) or "image/svg+xml" in o.get("data", {})]
        assert len(images) == 1, f"{name}: {lines[0]} has {len(images)} images"


def test_every_exported_figure_is_drawn_in_exactly_one_notebook():
    from inferlab.notebook.figures import FIGURES
    found = figure_cells()
    assert sorted(found) == sorted(FIGURES), "figure names in notebooks and in inferlab.notebook.figures differ"
    for fig, where in found.items():
        assert len(where) == 1, f"{fig} is drawn in {len(where)} cells"
        name, _ = where[0]
        assert fig.startswith(SECTIONS[name] + "-"), f"{fig} is drawn in {name}"


@pytest.mark.parametrize("figure", sorted(figure_cells()))
def test_notebook_figure_prints_the_exported_figures_points(figure):
    """At the notebook defaults, the table printed under a figure is the exported figure's table."""
    from inferlab.notebook.figures import FIGURES
    (_, cell), = figure_cells()[figure]
    printed = "".join(o.text if o.output_type == "stream" else o.get("data", {}).get("text/plain", "")
                      for o in cell.outputs)
    plot = FIGURES[figure]()
    assert plot.table in printed


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_no_empty_code_cells(name):
    """JupyterLab's Run All leaves an empty code cell unexecuted (no count), and a reader sees a
    blank input box: every code cell has code."""
    empty = [i for i, c in enumerate(stored(name).cells) if c.cell_type == "code" and not c.source.strip()]
    assert empty == [], f"{name}: empty code cells at {empty}"


@pytest.mark.parametrize("name", list(SECTIONS))
def test_in_the_interview_holds_the_sections_three_drills_before_the_audit(name):
    """Each subsection's page poses the book's three interview questions of its section, in order, before
    the closing audit: the question with its anchor (interview-15-x-y-n), an answer cell, and the folded
    answer the library computes (`interview.answer`) with its numbers stored."""
    from inferlab.notebook import interview
    cells = stored(name).cells
    sources = [c.source for c in cells]
    start = next(i for i, s in enumerate(sources) if s.startswith("## In the interview"))
    audit = next(i for i, s in enumerate(sources) if s.startswith("## Checking the book's numbers"))
    assert start < audit
    section = SECTIONS[name]
    at = start
    for n in (1, 2, 3):
        anchor = interview.drill(section, n).anchor
        q = next(i for i, s in enumerate(sources) if f'<a id="{anchor}"></a>' in s)
        assert at < q < audit, f"{name}: {anchor} is not in order before the audit"
        assert cells[q + 1].cell_type == "markdown" and sources[q + 1].startswith("<!-- YOUR ANSWER -->")
        answer = cells[q + 2]
        assert answer.cell_type == "code" and f'interview.answer("{section}", {n},' in answer.source
        md = "".join(o.get("data", {}).get("text/markdown", "") for o in answer.outputs)
        assert f'<details class="interview-answer" data-drill="{anchor}">' in md and re.search(r"\d", md)
        at = q

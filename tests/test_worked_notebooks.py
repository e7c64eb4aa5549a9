"""Every key equation of the chapter notebooks is followed by the same equation with the
scenario's numbers (a cell calling `equations.<NAME>.worked`, or inferlab.notebook.worked_examples.equation,
naming it "Eq. (label)" in its first comment), and every worked example is followed by a takeaway box
(a cell calling inferlab.notebook.worked_examples.takeaway) before the next example or section heading; both
are stored as rendered Markdown. An equation a Markdown cell states is the library's definition
(inferlab.notebook.equations), written once: the cell's TeX is `equations.get(label).tex()`."""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

CHAPTERS = Path(__file__).resolve().parents[1] / "chapters"
NOTEBOOKS = ["15_1_1_prefill", "15_1_2_decode_kv_cache", "15_2_1_ttft_itl", "15_2_2_batching", "15_2_3_serving_lab"]
LABEL = re.compile(r"<!--\s*equation:\s*eq-([A-Za-z0-9_-]+)\s*-->")
NAMED = re.compile(r"Eq\. \(([A-Za-z0-9_-]+)\)")
EQUATION_CALL = re.compile(r"\b(worked(_examples)?\.equation|equations\.[A-Z_0-9]+\.worked)\(")
TAKEAWAY_CALL = re.compile(r"\bworked(_examples)?\.takeaway\(")
STATED = re.compile(r"<!--\s*equation:\s*eq-(?P<label>[A-Za-z0-9_-]+)\s*-->\s*\$\$(?P<tex>.+?)\$\$", re.S)


def _markdown_outputs(cell) -> str:
    return "\n".join(o.get("data", {}).get("text/markdown", "") for o in cell.get("outputs", []) if "data" in o)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_every_key_equation_is_substituted_after_it(name):
    nb = nbformat.read(CHAPTERS / f"{name}.ipynb", as_version=4)
    pending: dict[str, int] = {}        # label -> index of the cell that states it
    done = set()
    for i, c in enumerate(nb.cells):
        if c.cell_type == "markdown":
            for label in LABEL.findall(c.source):
                pending[label] = i
        elif EQUATION_CALL.search(c.source):
            first_comment = next((ln for ln in c.source.splitlines() if ln.startswith("#")), "")
            for label in NAMED.findall(first_comment):
                assert label in pending, f"{name}: cell {i} substitutes Eq. ({label}) before the equation is stated"
                out = _markdown_outputs(c)
                assert out.count("$$") >= 2 and re.search(r"\d", out), f"{name}: cell {i} stores no rendered equation"
                done.add(label)
    assert set(pending) - done == set(), f"{name}: equations never shown with the scenario's numbers"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_worked_results_have_takeaway_boxes(name):
    nb = nbformat.read(CHAPTERS / f"{name}.ipynb", as_version=4)
    boxes = [_markdown_outputs(c) for c in nb.cells if c.cell_type == "code" and TAKEAWAY_CALL.search(c.source)]
    assert len(boxes) >= 2 and all(b.startswith("> **Takeaway.** ") for b in boxes), boxes


def worked_examples_without_takeaway(nb) -> list[int]:
    """Indices of the cells calling worked_examples.equation (a worked example's substituted result) that no
    takeaway follows: a cell calling worked_examples.takeaway, the same cell or a later one, before the next
    worked example and before the next section heading (a Markdown cell whose first line starts
    with #)."""
    missing = []
    for i, c in enumerate(nb.cells):
        if c.cell_type != "code" or not EQUATION_CALL.search(c.source):
            continue
        found = bool(TAKEAWAY_CALL.search(c.source))
        for later in nb.cells[i + 1:]:
            if found:
                break
            if later.cell_type == "markdown" and later.source.lstrip().startswith("#"):
                break
            if later.cell_type == "code" and EQUATION_CALL.search(later.source):
                break
            found = later.cell_type == "code" and bool(TAKEAWAY_CALL.search(later.source))
        if not found:
            missing.append(i)
    return missing


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_every_worked_example_is_followed_by_its_takeaway(name):
    nb = nbformat.read(CHAPTERS / f"{name}.ipynb", as_version=4)
    n_worked = sum(c.cell_type == "code" and bool(EQUATION_CALL.search(c.source)) for c in nb.cells)
    missing = worked_examples_without_takeaway(nb)
    assert n_worked >= 2 and missing == [], (
        f"{name}: worked examples without a takeaway before the next example or heading: cells {missing} "
        f"({[nb.cells[i].source.splitlines()[0] for i in missing]})")


def test_a_worked_example_whose_takeaway_is_removed_is_named():
    """Planted defect: deleting the takeaway after 15.1.1's Eq. (roofline) names that cell; a takeaway
    placed after the next heading does not count."""
    nb = nbformat.read(CHAPTERS / "15_1_1_prefill.ipynb", as_version=4)
    eq = next(i for i, c in enumerate(nb.cells) if EQUATION_CALL.search(c.source) and "Eq. (roofline)" in c.source)
    assert worked_examples_without_takeaway(nb) == []
    take = next(i for i in range(eq + 1, len(nb.cells)) if TAKEAWAY_CALL.search(nb.cells[i].source))
    moved = nb.cells.pop(take)
    assert worked_examples_without_takeaway(nb) == [eq]
    heading = next(i for i in range(eq + 1, len(nb.cells))
                   if nb.cells[i].cell_type == "markdown" and nb.cells[i].source.startswith("#"))
    nb.cells.insert(heading + 1, moved)
    assert eq in worked_examples_without_takeaway(nb)


LIBRARY_NOTEBOOKS = ["15_1_1_prefill", "15_1_2_decode_kv_cache", "15_2_1_ttft_itl", "15_2_2_batching"]


def stated_equations_off_the_library(source: str) -> list[str]:
    """Labels of the equations a Markdown text states otherwise than inferlab.notebook.equations defines them
    (whitespace, and a closing '.' or ',', aside)."""
    from inferlab.notebook import equations

    def norm(tex: str) -> str:
        return re.sub(r"\s+", "", tex).rstrip(".,")
    return [m["label"] for m in STATED.finditer(source)
            if norm(m["tex"]) != norm(equations.get(m["label"]).tex())]


@pytest.mark.parametrize("name", LIBRARY_NOTEBOOKS)
def test_every_stated_equation_is_the_librarys_definition(name):
    nb = nbformat.read(CHAPTERS / f"{name}.ipynb", as_version=4)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert STATED.search(text), f"{name}: no labelled equation"
    assert stated_equations_off_the_library(text) == []
    # each worked cell of these notebooks is the library's equation, not a hand-kept TeX template
    assert not any("worked_examples.equation(" in c.source for c in nb.cells if c.cell_type == "code")


def test_an_equation_edited_in_the_notebook_alone_is_named():
    """Planted defect: a Markdown cell that states the ridge point with the bandwidth doubled."""
    from inferlab.notebook import equations
    good = equations.ROOFLINE.markdown() + "."
    assert stated_equations_off_the_library(good) == []
    assert stated_equations_off_the_library(good.replace(r"{\text{BW}}", r"{2\,\text{BW}}")) == ["roofline"]

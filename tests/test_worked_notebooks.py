"""Every key equation of the chapter notebooks is followed by the same equation with the
scenario's numbers (a cell calling inferlab.worked.equation, naming it "Eq. (label)" in its first
comment), and every notebook has takeaway boxes; both are stored as rendered Markdown."""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

CHAPTERS = Path(__file__).resolve().parents[1] / "chapters"
NOTEBOOKS = ["15_1_1_prefill", "15_1_2_decode_kv_cache", "15_2_1_ttft_itl", "15_2_2_batching", "15_2_3_serving_lab"]
LABEL = re.compile(r"<!--\s*equation:\s*eq-([A-Za-z0-9_-]+)\s*-->")
NAMED = re.compile(r"Eq\. \(([A-Za-z0-9_-]+)\)")


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
        elif "worked.equation(" in c.source:
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
    boxes = [_markdown_outputs(c) for c in nb.cells if c.cell_type == "code" and "worked.takeaway(" in c.source]
    assert len(boxes) >= 2 and all(b.startswith("> **Takeaway.** ") for b in boxes), boxes

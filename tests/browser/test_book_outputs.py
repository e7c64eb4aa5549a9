"""Nothing dropped: every output each chapter notebook shows in JupyterLab is in its built page
(build/book/, `make book`), in the notebook's order (book/output_check.py compares the words of
each output, and each image's bytes, with the page's HTML)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "book"))
import convert  # noqa: E402  (book/convert.py)
import output_check  # noqa: E402  (book/output_check.py)

NOTEBOOKS = sorted(p.name for p in (ROOT / "chapters").glob("*.ipynb"))


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_every_output_of_the_notebook_is_on_its_page(book_dir, name):
    nb = json.loads((ROOT / "chapters" / name).read_text())
    page = book_dir / f"{convert.stage_name(name)}.html"
    assert page.is_file(), f"{name} has no page in the book"
    outputs = output_check.notebook_outputs(nb)
    assert outputs or name == convert.INDEX_SOURCE, f"{name} has no stored outputs: run `make notebooks`"
    assert output_check.missing_outputs(nb, page) == []


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_page_offers_its_notebook_and_source_for_download(book_dir, name):
    """The reader note's buttons download this notebook's own .ipynb and .py, byte for byte."""
    import re
    html = (book_dir / f"{convert.stage_name(name)}.html").read_text()
    links = {Path(h).suffix: h for h in re.findall(r'<a class="reference download internal"[^>]*href="([^"]+)"', html)}
    assert set(links) == {".ipynb", ".py"}
    src = ROOT / "chapters" / name
    assert (book_dir / links[".ipynb"]).read_bytes() == src.read_bytes()
    assert (book_dir / links[".py"]).read_bytes() == src.with_suffix(".py").read_bytes()
    assert 'href="notation.html"' in html


def test_exercise_checks_show_hints_not_pass(book_dir):
    """21 exercises, each check cell showing a folded hint; no stored PASS/FAIL on any page."""
    import re
    hints, stored = 0, []
    for name in NOTEBOOKS:
        html = (book_dir / f"{convert.stage_name(name)}.html").read_text()
        hints += len(re.findall(r'<details class="hint">', html))
        stored += re.findall(r"\d-ex\d+ (?:PASS|FAIL)", html)
    n_checks = sum(1 for name in NOTEBOOKS for c in json.loads((ROOT / "chapters" / name).read_text())["cells"]
                   if c["cell_type"] == "code" and convert.exercise_check_id("".join(c["source"])))
    assert stored == [] and hints == n_checks >= 20

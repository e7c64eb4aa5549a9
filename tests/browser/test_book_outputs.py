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

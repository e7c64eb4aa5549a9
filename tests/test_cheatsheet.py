"""inferlab.notebook.cheatsheet: the chapter on one page. Every key equation is on it with its worked number for
the book's Llama-2 13B on one H100 SXM (recomputed here from the datasheet and the model's shape), and
the page the book builds follows the specs in data/: a changed spec changes the sheet."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from inferlab.notebook import cheatsheet, equations
from inferlab.core.specs import get_accelerator, get_model

ROOT = Path(__file__).resolve().parents[1]
L13, H100 = get_model("llama-2-13b"), get_accelerator("h100-sxm")
PEAK, BW, MEM = 989.4e12, 3.35e12, 80e9                    # H100 SXM datasheet: dense bf16, HBM3, capacity
KV_TOKEN = 2 * 40 * 40 * 128 * 2                           # K and V, 40 layers, 40 KV heads of 128, bf16


@pytest.fixture(scope="module")
def sheet() -> str:
    return cheatsheet.markdown(L13, H100)


def value(sheet: str, symbol: str) -> float:
    """The bold number after `symbol = ` on the sheet ('1{,}323' -> 1323.0)."""
    m = re.search(re.escape(symbol) + r" = \\mathbf\{\\?\$?(\d[\d,.]*(?:\{,\}\d+)*)", sheet)
    assert m, f"no worked value of {symbol!r} on the sheet"
    return float(m.group(1).replace("{,}", "").replace(",", ""))


def test_every_key_equation_is_on_the_sheet(sheet):
    joined = sheet.replace(" \\\\\n&\\quad = ", " = ")        # a long row's continuation, joined back
    for eq in equations.EQUATIONS.values():
        for part in eq.tex().split(r",\qquad "):
            assert part in joined, f"eq-{eq.label}: {part[:60]!r} is not on the sheet"


def test_the_sheets_numbers_by_hand(sheet):
    assert value(sheet, r"I_\text{ridge}") == pytest.approx(PEAK / BW, abs=0.5)                # 295
    w = L13.n_params * 2
    assert value(sheet, r"C_\text{kv}") == KV_TOKEN                                             # 819,200
    # B_max in the usable memory, vLLM's 0.9 of the 80 GB: (72e9 - 26.03e9) / 838.9e6 = 54.8 -> 54
    assert value(sheet, r"B_\text{max}") == (0.9 * MEM - w) // (KV_TOKEN * 1024)                # 54
    assert f"would hold {int((MEM - w) // (KV_TOKEN * 1024))} on paper" in sheet                # all 80 GB: 64
    assert value(sheet, "B^*") == pytest.approx(w / (KV_TOKEN * 1024), abs=0.05)                 # 31.0
    assert value(sheet, r"\text{TTFT}") == pytest.approx(2 * L13.n_matmul_params * 2048 / PEAK * 1e3, abs=0.05)
    assert f"a little more than 4×" in sheet and "Rules of thumb" in sheet


def test_a_changed_spec_changes_the_sheet_the_book_builds(tmp_path):
    """The book's page (book/build.py's cheatsheet_page) from a copy of data/ whose H100 has twice the
    bandwidth: the ridge point halves, B* and B_max (memory, not bandwidth) stay."""
    data = tmp_path / "data"
    shutil.copytree(ROOT / "data", data)
    toml = data / "accelerators.toml"
    text = toml.read_text()
    block = re.search(r'\[h100-sxm\].*?(?=\n\[)', text, re.S).group(0)
    bw_line = re.search(r"^hbm_bytes_per_s\s*=\s*(.+)$", block, re.M)
    doubled = block.replace(bw_line.group(0), f"hbm_bytes_per_s = {2 * BW:.6e}")
    toml.write_text(text.replace(block, doubled))
    code = "import sys; sys.path.insert(0, 'book'); import build; print(build.cheatsheet_page())"

    def page(env_data=None):
        env = dict(os.environ, **({"INFERLAB_DATA": str(env_data)} if env_data else {}))
        return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True,
                              capture_output=True, text=True).stdout

    before, after = page(), page(data)
    assert before != after
    assert value(before, r"I_\text{ridge}") == pytest.approx(PEAK / BW, abs=0.5)
    assert value(after, r"I_\text{ridge}") == pytest.approx(PEAK / (2 * BW), abs=0.5)       # 148
    assert value(after, "B^*") == value(before, "B^*")
    assert "6.70 TB/s" in after

"""One value for every quantity on a page, and no number attributed to the book that it does not
print (issue 26, items 2 and 3). The scans read the executed notebooks (what a reader sees: Markdown
cells and stored outputs), so a stale or self-contradicting page fails here.
"""
import json
import re
from pathlib import Path

import pytest

from inferlab.claims.registry import half_unit, load_registry
from inferlab.headroom import VLLM_DEFAULT_UTILISATION, headroom_fit

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "chapters").glob("15_*.ipynb"))
GB = 1e9


def _page_texts(nb: Path) -> list[str]:
    """Markdown cells and every text output of an executed notebook, as a reader sees them."""
    texts = []
    for cell in json.loads(nb.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] == "markdown":
            texts.append("".join(cell["source"]))
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            for kind in ("text/markdown", "text/plain"):
                if kind in data:
                    texts.append("".join(data[kind]))
            if "text" in out:
                texts.append("".join(out["text"]))
    return texts


def _plain(text: str) -> str:
    """LaTeX and Markdown markup off: '$B_\\text{max}$ = 65' -> 'B_max = 65'."""
    text = re.sub(r"\\text\{([^}]*)\}", r"\1", text)
    return re.sub(r"[$*`]", "", text).replace("\\,", "")


# --- item 2: a labelled quantity has one value per page --------------------------------------------

# The quantities the issue names (P, the 2PS time, capacity, B_max, the KV pool) and their kin, as
# "label = value": a label may carry a qualifier in parentheses (B_max(reported)), which makes it
# another label.
LABELS = r"P|B_max(?:\([a-z ]+\))?|B\*|I_ridge|C_kv|capacity(?:\([a-z ]+\))?|KV pool(?:\([a-z ]+\))?"
LABELLED = re.compile(rf"(?<![\w(·/])(?P<label>{LABELS})\s*=\s*(?P<value>\d[\d,]*(?:\.\d+)?(?:e\d+)?)(?![\d.])")


def _conflicts(texts) -> dict:
    """{label: [printed values]} for every label printed with two values that no rounding joins."""
    seen = {}
    for text in texts:
        for m in LABELLED.finditer(_plain(text)):
            seen.setdefault(m.group("label"), set()).add(m.group("value"))
    out = {}
    for label, printed in seen.items():
        values = sorted(printed, key=lambda v: float(v.replace(",", "")))
        for a in values:
            for b in values:
                if abs(float(a.replace(",", "")) - float(b.replace(",", ""))) > half_unit(a) + half_unit(b):
                    out[label] = values
    return out


def test_the_scan_catches_one_label_with_two_values():
    page = ["P = 12.85e9 matrix parameters", "$P$ = 13.0e9 in the erratum", "$B_\\text{max}$ = 65",
            "B_max(reported) = 72", "B_max = 65.0"]
    assert _conflicts(page) == {"P": ["12.85e9", "13.0e9"]}
    assert _conflicts(["B_max = 65", "B_max = 73"]) == {"B_max": ["65", "73"]}
    assert _conflicts(["I_ridge = 295.3 FLOP/byte", "I_ridge = 295 FLOP/byte"]) == {}


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_page_prints_one_named_quantity_with_two_values(nb):
    assert _conflicts(_page_texts(nb)) == {}, nb.name


# --- item 3: every number attributed to the book is in the registry for that section ---------------

# "the book's 160 ms", "the book says ... 160", "The book's \"... 512 FLOP/byte\"": a number within a few
# words of an attribution, on one line. "The book's own formula gives X" is our arithmetic, not theirs.
ATTRIBUTION = re.compile(
    r"\b[Tt]he book(?:'s(?! own) +(?:[\"“][A-Za-z][A-Za-z -]{0,40}? )?"
    r"| (?:says|gives|prints|states|quotes|reports|writes|puts|has)(?: [a-z ]{0,40}?)? +[\"“]?)"
    r"(?P<num>\d[\d,]*(?:\.\d+)?(?:e\d+)?)(?![\d.])(?P<k>k\b)?(?!B\b)"  # 100k tokens; 13B is a model's name
    r"(?: *(?P<unit>[A-Za-z/%×]+(?:/[A-Za-z]+)?))?")


def _book_values():
    """{section: [(low, high, unit)]}: the book's values with their units, then every other number
    an entry puts on the page (its inputs, `also_covers`: the coverage test's numbers) unit-free."""
    out = {}
    for c in load_registry().claims:
        rows = out.setdefault(c.section, [])
        rows.append((c.low, c.high, c.unit))
        rows += [(x, x, None) for x in c.numbers() if x not in (c.low, c.high)]
    return out


def _attributed(texts, section, values):
    """Every (number, unit) a page attributes to the book that no claim of `section` (or of a
    section the same sentence names) prints. A book value must carry the unit printed after the
    number, if any; an entry's inputs (prompt lengths, batches) carry none and match any unit."""
    wrong = []
    for text in texts:
        for sentence in re.split(r"(?<=[.!?])\s+", _plain(text)):
            sections = {section, *re.findall(r"\b(15\.\d\.\d)\b", sentence)}
            for m in ATTRIBUTION.finditer(sentence):
                num = float(m.group("num").replace(",", "")) * (1000 if m.group("k") else 1)
                unit = (m.group("unit") or "").strip()
                ok = False
                for s in sections:
                    for lo, hi, u in values.get(s, []):
                        if not lo - 1e-9 <= num <= hi + 1e-9:
                            continue
                        if not unit or u is None or not u or unit.split("/")[0] == u.split("/")[0]:
                            ok = True
                if not ok:
                    wrong.append((m.group(0), section))
    return wrong


def test_the_attribution_scan_catches_a_number_the_book_does_not_print():
    values = _book_values()
    # the defect the issue found: 512 is a chunk size in 15.1.1, not an intensity
    bad = ["The book's \"prefill attention runs at 512 FLOP/byte\" is the fused count."]
    assert _attributed(bad, "15.1.1", values)
    assert not _attributed(["The book gives prefill attention 1024 FLOP/byte (S/2)."], "15.1.1", values)
    assert not _attributed(["The book says 160 ms."], "15.1.1", values)
    assert _attributed(["The book says 650 ms."], "15.1.1", values)  # 640 is printed, 650 is not
    assert not _attributed(["The book's own formula gives 15.6 ms."], "15.1.2", values)
    assert _attributed(["The book's 100k tokens take 2.7 s."], "15.2.1", values) == []
    assert _attributed(["The book's 90k tokens."], "15.2.1", values)


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_number_attributed_to_the_book_is_in_its_sections_registry(nb):
    m = re.match(r"15_(\d)_(\d)_", nb.name)
    section = f"15.{m.group(1)}.{m.group(2)}"
    values = _book_values()
    if section not in values:  # the serving lab draws on 15.2.1 and 15.2.2
        values[section] = values["15.2.1"] + values["15.2.2"]
    assert _attributed(_page_texts(nb), section, values) == []


# --- item 3: the 70B TP = 2 case, one answer ------------------------------------------------------

def test_headroom_fit_of_llama_2_70b_at_tp_2_by_hand():
    fit = headroom_fit("llama-2-70b", "h100-sxm", batch=32, seq_len=2048, tp=2)
    # KV per sequence per GPU: 2 (K, V) x 80 layers x 8 KV heads x 128 x 2 bytes x 2,048 / 2 GPUs
    assert fit.kv_bytes_per_seq == 2 * 80 * 8 * 128 * 2 * 2048 / 2 == 335_544_320
    # weights: 68.98e9 parameters x 2 bytes / 2 GPUs = 68.98 GB; KV: 32 x 0.3355 = 10.74 GB
    assert fit.weight_bytes / GB == pytest.approx(68.98, abs=0.01)
    assert fit.free_bytes("datasheet") / GB == pytest.approx(80 - 68.98 - 10.74, abs=0.01)     # 0.28
    assert fit.free_bytes("reported") / GB == pytest.approx(85.5208 - 68.98 - 10.74, abs=0.01)  # 5.80
    # vLLM at 0.9: (0.9 x 85.5208 - 68.98) / 0.33554 = 23.8 -> 23
    assert fit.max_batch_at_utilisation(VLLM_DEFAULT_UTILISATION) == 23
    assert fit.starts(5.0e9) and not fit.starts(6.0e9) and not fit.starts(1.0e9, capacity="datasheet")
    with pytest.raises(ValueError, match="capacity must be one of"):
        fit.free_bytes("marketing")
    with pytest.raises(ValueError, match="utilisation"):
        fit.max_batch_at_utilisation(1.2)


def test_the_70b_prose_and_its_erratum_boxes_give_one_answer():
    nb = ROOT / "chapters" / "15_2_2_batching.ipynb"
    texts = [_plain(t) for t in _page_texts(nb)]
    prose = [t for t in texts if "Llama-2 70B, B = 32" in t and "per H100" in t]
    assert len(prose) == 1, "the 70B paragraph is rendered once"
    limit = re.search(r"when that headroom is at most ([\d.]+) GB", prose[0]).group(1)
    batch = re.search(r"largest batch is (\d+)", prose[0]).group(1)
    boxes = [t for t in texts if "Erratum 15.2.2-ah." in t]
    assert boxes, "the erratum boxes of 15.2.2-ah/-ai are on the page"
    box_ai = boxes[0].split("Erratum 15.2.2-ai.", 1)[1]
    assert f"at most {limit} GB" in boxes[0] and f"at most {limit} GB" in box_ai
    assert f"to {batch} with vLLM" in box_ai and "for nothing" not in box_ai
    assert "would not start this batch" not in prose[0]

"""inferlab.notebook.reader and inferlab.notebook.panel: what a notebook reader sees (claims tables, erratum boxes,
the What-if scenario, does-not-fit fallbacks, the measured-gap sentence, the interactive panels)."""
from __future__ import annotations

import base64
import re

import pytest

from inferlab.notebook import panel, plots, reader
from inferlab.claims import evaluate_claims
from inferlab.core.specs import BF16, Precision
from inferlab.core.specs import get_accelerator, get_model

H100_SXM = get_accelerator("h100-sxm")
LLAMA_2_13B = get_model("llama-2-13b")
LLAMA_2_70B = get_model("llama-2-70b")

SECTIONS = ["15.1.1", "15.1.2", "15.2.1", "15.2.2"]


# ---- claims table ----------------------------------------------------------------------------

@pytest.mark.parametrize("section", SECTIONS)
def test_claims_table_plain_text_has_one_line_per_claim_starting_with_its_id(section):
    t = reader.claims_table(section)
    lines = repr(t).splitlines()
    rows = [ln for ln in lines if not ln.startswith("  * ")]  # below the rows: widened bands, overrides
    assert [re.match(r"^(15\.\d\.\d-[a-z]+) {2,}\S", ln).group(1) for ln in rows] == [c.id for c in t.claims]
    assert all(" band " in ln for ln in rows)
    assert [ln[4:] for ln in lines if ln.startswith("  * ")] == [f"{c.id}: {c.override}" for c in t.claims
                                                                if c.override]


@pytest.mark.parametrize("section", SECTIONS)
def test_claims_table_html_rows_are_anchored_and_laid_out_without_mid_word_breaks(section):
    t = reader.claims_table(section)
    html = t._repr_html_()
    assert html.count("<tr id=\"claim-") == len(t.claims)
    for c in t.claims:
        assert f'id="claim-{c.id}"' in html
    assert "table-layout:auto" in html  # JupyterLab's default `fixed` layout is what broke words
    assert "word-break:normal" in html and "overflow-wrap:normal" in html
    # In the book's 676 px text column (1280 px window) no cell needs to break a word: the no-wrap
    # id (0.8 em) at its widest, the verdict word, and the longest words of book, ours, the
    # description and the band (0.8 em, under the verdict) fit. Widths estimated at 0.9 x 14 px
    # text with an average glyph of 0.6 em (7.6 px; generous for a sans font), 16 px of padding per cell.
    px = 0.6 * 0.9 * 14
    rows = t.rows()
    nowrap = (max(len(r[0]) for r in rows) * 0.8
              + sum(max(len(w) for r in rows for w in r[i].split()) for i in (2, 3))) * px   # book, ours wrap
    longest_word = max(len(w) for r in rows for w in r[5].split()) * px   # the description wraps
    verdict = max(max(len(r[1]) for r in rows), max(len(w) for r in rows for w in r[4].split()) * 0.8) * px
    need = nowrap + longest_word + verdict + 5 * 16
    assert need <= 676, f"{section}: the table needs {need:.0f} px"
    assert html.count("<th ") == 5


def test_erratum_boxes_follow_the_book_markup_and_cover_exactly_the_errata():
    claims = reader.claims_table("15.2.2").claims
    md = reader.errata_markdown(claims)
    boxes = [b for b in md.split("\n\n")]
    heads = re.findall(r"^> \*\*Erratum (15\.\d\.\d-[a-z]+)\.\*\*", md, re.M)
    assert heads == [c.id for c in claims if c.verdict == "erratum"]
    assert all(b.startswith("> ") for b in boxes)
    assert reader.errata_markdown([c for c in claims if c.verdict == "consistent"]) == ""


def test_erratum_boxes_link_to_the_errata_page_for_the_cause_instead_of_repeating_it():
    """Issue 39: the audit under a lecture stays short. A box keeps the book's value, the corrected one
    and the consequence; the cause, which ERRATA.md derives, is one link away, at the entry's heading."""
    from pathlib import Path
    errata_md = (Path(__file__).resolve().parents[1] / "ERRATA.md").read_text(encoding="utf-8")
    errata = [c for c in evaluate_claims() if c.verdict == "erratum"]
    assert errata
    for c in errata:
        box = reader.errata_markdown([c])
        anchor = re.search(r"\]\(\.\./ERRATA\.md#([\w-]+)\)", box)
        assert anchor, f"{c.id}: the box does not link to its ERRATA.md entry"
        heading = f"### {c.id}"
        assert heading in errata_md and c.id.replace(".", "") == anchor.group(1), (c.id, anchor.group(1))
        assert c.book_text in box and c.ours_text in box
        if c.consequence:
            assert c.consequence.strip() in box
            assert c.explanation.strip() not in box, f"{c.id}: the box repeats the cause ERRATA.md carries"


def test_verdict_marks_cover_every_verdict():
    assert {c.verdict for c in evaluate_claims()} <= set(reader.VERDICT_MARK)


# ---- What if? --------------------------------------------------------------------------------

def test_what_if_reads_the_environment_override(monkeypatch):
    monkeypatch.delenv(reader.WHATIF_ENV, raising=False)
    m, g, p = reader.what_if("llama-2-13b", "h100-sxm")
    assert (m.name, g.name, p) == ("llama-2-13b", "h100-sxm", BF16)
    assert reader.is_book_setup(m, g, p)
    monkeypatch.setenv(reader.WHATIF_ENV, "llama-3-8b@h200")
    m, g, _ = reader.what_if("llama-2-13b", "h100-sxm")
    assert (m.name, g.name) == ("llama-3-8b", "h200")
    assert not reader.is_book_setup(m, g)
    assert not reader.is_book_setup("llama-2-13b", "h100-sxm", Precision(kv="int8"))


@pytest.mark.parametrize("bad", ["llama-3-8b", "@h200", "llama-3-8b@", ""])
def test_what_if_override_must_name_model_and_accelerator(monkeypatch, bad):
    with pytest.raises(ValueError, match="INFERLAB_WHATIF must be MODEL@ACCELERATOR"):
        reader.parse_whatif(bad)


def test_book_points_only_on_the_book_setup():
    assert reader.book_points_if(False, "15.1.1", "ttft") is None
    assert len(reader.book_points_if(True, "15.1.1", "ttft")) == 3


def test_context_note_says_when_a_length_is_beyond_the_window():
    # data/models.toml: Llama-2 13B has a 4,096-token context window.
    assert reader.context_note("llama-2-13b", 4096) == ""
    assert "beyond llama-2-13b's context window of 4,096 tokens" in reader.context_note("llama-2-13b", 100_000)


def test_fit_message_and_does_not_fit_figure():
    # Llama-2 70B in bf16: 69e9 parameters x 2 bytes = 138 GB > 80 GB of one H100.
    msg = reader.fit_message("llama-2-70b", "h100-sxm", 1000)
    assert "138 GB of 80 GB" in msg and "tensor parallelism 2" in msg
    assert reader.fit_message("llama-2-13b", "h100-sxm", 1000) == ""
    p = reader.draw_if_fits(msg, plots.memory_budget_plot, LLAMA_2_70B, H100_SXM, 1000)
    assert p.table.startswith("does not fit: ") and p.data["does_not_fit"] == msg


def test_plot_displays_as_one_retina_png_with_its_table_as_text():
    p = plots.ttft_plot(LLAMA_2_13B, H100_SXM)
    data, meta = p._repr_mimebundle_()
    assert data["text/plain"] == p.table
    png = base64.b64decode(data["image/png"])
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    # FIGSIZE width 7 in at 96 px/in = 672 px shown; the PNG holds twice that.
    assert meta["image/png"]["width"] == 672
    assert int.from_bytes(png[16:20], "big") >= 2 * 672 - 4


class _Run:
    def __init__(self, ratios):
        self._pts = [{"predicted_s": 1.0, "timing": {"median_s": r}} for r in ratios]

    def points(self, kind):
        return self._pts


class _Ceilings:
    copy_bytes_per_s = 12.5e9
    matmul_flops_per_s = {"fp32": 80e9}


class _RunWithCeilings(_Run):
    def ceilings(self):
        return _Ceilings()


def test_a_gap_beyond_twice_says_what_the_host_measured_and_how_busy_it_was():
    far = reader.gap_sentence(_RunWithCeilings([1.1, 7.8]), "batch", host_load=(5.3, 2))
    assert "7.80\u00d7" in far
    assert "copy bandwidth 12.5 GB/s, matmul fp32 80.0 GFLOP/s" in far and "load average 5.3 on 2 cores" in far
    assert "shared the CPU" in far
    idle = reader.gap_sentence(_RunWithCeilings([2.5]), "itl", host_load=(0.2, 8))
    assert "load average 0.2 on 8 cores" in idle and "shared the CPU" not in idle
    assert "This host" not in reader.gap_sentence(_RunWithCeilings([1.9]), "itl", host_load=(9.0, 2))


def test_gap_sentence_explains_only_gaps_beyond_a_quarter():
    assert "within 25%" in reader.gap_sentence(_Run([1.1, 0.9, 1.2]), "itl")
    slow = reader.gap_sentence(_Run([1.1, 2.0]), "itl")
    assert "2.00\u00d7" in slow and "fixed overhead" in slow
    fast = reader.gap_sentence(_Run([0.5]), "ttft")
    assert "faster than predicted" in fast and "caches" in fast


# ---- panels ------------------------------------------------------------------------------------

def test_batching_panel_numbers_follow_the_identity():
    # Llama-2 13B, H100, context 1024: M = 13.016e9 x 2 = 26.03 GB, C_kv = 2*40*40*128*2*1024
    # = 0.8389 GB, B* = 31.0; B_max = floor((80 - 26.03)/0.8389) = 64; 64/31.0 = 2.1.
    p = panel.batching_panel("llama-2-13b", "h100-sxm", BF16, context=1024, batch=16)
    assert "B\\* = 31.0" in p.numbers and "B_max = 64" in p.numbers and "= 2.1" in p.numbers
    data, _ = p.bundle()
    assert data["text/plain"] == p.numbers


def test_panel_update_redraws_for_the_new_state_and_says_does_not_fit():
    p = panel.decode_panel("llama-2-13b", "h100-sxm", BF16, context=1000, batch=16)
    assert "**65**" in p.numbers  # floor((80 - 26.03) / 0.8192) = 65
    png = p.update(model="llama-2-70b")
    assert png[:4] == b"\x89PNG" and "Does not fit" in p.numbers
    p.update(model="llama-2-13b", accelerator="h200")
    assert "**140**" in p.numbers  # floor((141 - 26.03) / 0.8192) = 140


def test_panel_controls_change_the_state():
    pytest.importorskip("ipywidgets")
    p = panel.prefill_panel("llama-2-13b", "h100-sxm", BF16, prompt=2048)
    box = p.controls()
    dropdowns = [w for hb in box.children[:1] for vb in hb.children for w in vb.children]
    model = next(w for w in dropdowns if w.description == "model")
    model.value = "llama-3-8b"
    assert p.state.model == "llama-3-8b" and "TTFT" in p.numbers


def test_a_panel_scenario_past_the_memory_limit_stays_on_its_curve_and_says_so():
    from inferlab.notebook.panel import State, batching_view, decode_view, latency_view
    # Llama-2 13B on an H100 at S = 1024: B_max = 64 (test above); B = 200 does not fit
    state = State("llama-2-13b", "h100-sxm", "bf16", "bf16", 200, 1024)
    d = decode_view(state, BF16)
    assert d.x[-1] >= 200 and d.point[0] == 200 and "does not fit" in d.point_label
    b = batching_view(state, BF16)
    assert b.point[0] == 64 and b.point[1] == pytest.approx(b.ys["throughput"][-1]) and "does not fit" in b.point_label
    lat = latency_view(state, BF16)
    x, y = lat.point
    i = list(lat.x).index(x)
    assert y == pytest.approx(lat.ys["ITL"][i]) and "does not fit" in lat.point_label   # on the drawn curve
    ok = decode_view(State("llama-2-13b", "h100-sxm", "bf16", "bf16", 16, 1024), BF16)
    assert ok.point_label == "this scenario"

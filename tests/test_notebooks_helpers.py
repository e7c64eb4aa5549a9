"""inferlab.notebook: what the chapter notebooks show from the claims registry."""
import pytest

from inferlab.claims import evaluate_claims, lost_formulas
from inferlab.notebook import claims_text, select, show_formulas, verdict_summary


def ids(claims):
    return [c.id for c in claims]


def test_select_by_letters_and_inclusive_spans_in_registry_order():
    every = ids(evaluate_claims("15.1.2"))
    assert ids(select("15.1.2")) == every
    assert ids(select("15.1.2", "k..n")) == ["15.1.2-k", "15.1.2-l", "15.1.2-m", "15.1.2-n"]
    assert ids(select("15.1.2", "aa", "b")) == ["15.1.2-aa", "15.1.2-b"]
    # 'z..ab' follows the registry's order, where aa comes after z.
    assert ids(select("15.1.2", "z..ab")) == ["15.1.2-z", "15.1.2-aa", "15.1.2-ab"]
    assert ids(select("15.1.2", "k..l", "l")) == ["15.1.2-k", "15.1.2-l"]  # no repeats


@pytest.mark.parametrize("spans, message", [(("zz",), "no claim 15.1.2-zz"), (("n..k",), "runs backwards")])
def test_select_names_what_is_wrong(spans, message):
    with pytest.raises(ValueError, match=message):
        select("15.1.2", *spans)


def test_claims_text_shows_book_ours_verdict_and_explains_every_disagreement():
    text = claims_text("15.1.1", "k..o")
    header = text.splitlines()[0].split()
    assert header == ["id", "description", "book", "ours", "verdict", "band"]
    for c in select("15.1.1", "k..o"):
        assert c.id in text and c.verdict in text and c.band and c.band in text  # the band that decided it
        if c.verdict != "consistent":
            assert f"{c.id} [{c.verdict}]" in text
    assert "Why:" not in claims_text("15.1.1", "o")  # a consistent claim needs no explanation


def test_verdict_summary_counts_every_claim():
    lines = verdict_summary().splitlines()
    assert [line.split(":")[0] for line in lines] == ["15.1.1", "15.1.2", "15.2.1", "15.2.2", "chapter"]
    assert lines[-1].startswith(f"chapter: {len(evaluate_claims())} claims")
    assert verdict_summary("15.2.1") == lines[2]


@pytest.mark.parametrize("section", ["15.1.1", "15.1.2", "15.2.1", "15.2.2"])
def test_formulas_render_as_latex_and_as_plain_text(section):
    shown = show_formulas(section)
    md, text = shown._repr_markdown_(), repr(shown)
    for f in lost_formulas(section):
        assert f.id in md and f.id in text
        assert f"$$\n{f.latex}\n$$" in md
    assert "0x" not in text  # no object addresses: nbval compares this text


def test_measure_it_names_the_checks_it_knows():
    from inferlab.notebook import measure_it
    with pytest.raises(ValueError, match="unknown check 'fastest'; allowed: decode_slower_than_prefill"):
        measure_it("fastest")


def test_panel_controls_say_what_they_are_before_the_kernel_runs():
    """Before Run All a front end shows a widget's text/plain: a sentence, not a VBox(...) repr."""
    pytest.importorskip("ipywidgets")
    from inferlab import panel
    from inferlab.specs import BF16, get_accelerator, get_model
    p = panel.decode_panel(get_model("llama-2-13b"), get_accelerator("h100-sxm"), BF16, context=1000, batch=16)
    data, _ = panel.controls_bundle(p.controls(), p.tokens_label)
    assert "application/vnd.jupyter.widget-view+json" in data
    assert data["text/plain"].startswith("Controls (model, GPU, weights, KV cache, batch, context)")
    assert "VBox" not in data["text/plain"]

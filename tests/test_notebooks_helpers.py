"""inferlab.notebook.reader: what the chapter notebooks show from the claims registry."""
import pytest

from inferlab.claims import evaluate_claims, lost_formulas
from inferlab.notebook.reader import select, show_formulas, verdict_summary


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
    from inferlab.notebook.reader import measure_it
    with pytest.raises(ValueError, match="unknown check 'fastest'; allowed: decode_slower_than_prefill"):
        measure_it("fastest")


def test_panel_controls_say_what_they_are_before_the_kernel_runs():
    """Before Run All a front end shows a widget's text/plain: a sentence, not a VBox(...) repr."""
    pytest.importorskip("ipywidgets")
    from inferlab.notebook import panel
    from inferlab.core.specs import BF16, get_accelerator, get_model
    p = panel.decode_panel(get_model("llama-2-13b"), get_accelerator("h100-sxm"), BF16, context=1000, batch=16)
    data, _ = panel.controls_bundle(p.controls(), p.tokens_label)
    assert "application/vnd.jupyter.widget-view+json" in data
    assert data["text/plain"].startswith("Controls (model, GPU, weights, KV cache, batch, context)")
    assert "VBox" not in data["text/plain"]


@pytest.mark.parametrize("section", ["15.1.1", "15.1.2", "15.2.1", "15.2.2"])
def test_claim_groups_put_every_claim_of_a_section_in_exactly_one_topic(section):
    """data/claim_groups.toml: the notebooks' tables, by topic, show each claim once and miss none."""
    from inferlab.notebook.reader import claim_groups
    grouped = [letter for _, letters in claim_groups(section).values() for letter in letters]
    every = [c.id.split("-", 1)[1] for c in evaluate_claims(section)]
    assert sorted(grouped) == sorted(every)


def test_select_by_topic_keeps_the_groups_rows_and_names_a_wrong_topic():
    assert ids(select("15.1.2", topic="memory-wall")) == ["15.1.2-w", "15.1.2-x", "15.1.2-y", "15.1.2-z"]
    assert ids(select("15.1.1", topic="worked-example")) == [f"15.1.1-{x}" for x in "cdefghl"]
    with pytest.raises(ValueError, match="no topic 'kv' for section 15.1.2.*memory-wall"):
        select("15.1.2", topic="kv")
    with pytest.raises(ValueError, match="a topic or letters, not both"):
        select("15.1.2", "a", topic="memory-wall")

"""One rule for every verdict, shown where the verdict is read (issue 26, item 1).

The rule is published in ERRATA.md ("The verdict rule"); `inferlab.claims.evaluate.rule` is its one
implementation. These tests recompute every verdict from the published rule, written again here
independently, and check that every claims table (notebook, `inferlab verify`, ERRATA.md) shows the
band that decided it and the written reason of every widened band or override.
"""
import json
import operator
import re
from pathlib import Path

import pytest

from inferlab.notebook import reader
from inferlab.claims.evaluate import evaluate_registry
from inferlab.claims.registry import RegistryError, half_unit, load_registry
from inferlab.claims.render import errata_document, table
from inferlab.claims.quantities import METHODS

pytestmark = pytest.mark.claims

ROOT = Path(__file__).resolve().parents[1]
ERRATA = ROOT / "ERRATA.md"
OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
LIMIT = 1.5  # ERRATA.md: "within a factor 1.5"; typed here so that a changed constant fails


def _published_rule(claim, ours, method_value):
    """ERRATA.md's rule, written without the library's code."""
    def within(v):
        if claim.relation:
            return OPS[claim.relation](v, claim.low)
        if claim.low != claim.high:
            return claim.low <= v <= claim.high
        band = claim.tolerance.abs if claim.tolerance else half_unit(claim.book.replace(" ", ""))
        return abs(v - claim.low) <= band * (1 + 1e-9)

    if within(ours):
        return "consistent"
    if (claim.method is None or method_value is None or not within(method_value)
            or METHODS[claim.method.name].simplification is None):
        return "erratum"
    if claim.conclusion:
        return "approximation" if OPS[claim.conclusion[0]](ours, claim.conclusion[1]) else "erratum"
    if claim.relation or claim.low != claim.high or ours == 0 or claim.low == 0:
        return "erratum"
    return "approximation" if max(claim.low / ours, ours / claim.low) <= LIMIT else "erratum"


@pytest.fixture(scope="module")
def registry():
    return load_registry()


@pytest.fixture(scope="module")
def evaluated(registry):
    return {c.id: c for c in evaluate_registry(registry)}


def test_every_verdict_is_the_rules_output_or_an_override_with_a_reason(registry, evaluated):
    errata = ERRATA.read_text(encoding="utf-8")
    for claim in registry.claims:
        ev = evaluated[claim.id]
        if claim.status == "unchecked":
            assert ev.verdict == "unchecked"
            continue
        expected = _published_rule(claim, ev.ours, ev.method_value)
        assert ev.rule_verdict == expected, (claim.id, ev.rule_verdict, expected)
        if claim.override:
            assert ev.verdict == claim.override[0] and claim.override[1] in ev.override
        else:
            assert ev.verdict == expected, (claim.id, ev.verdict, expected)
        assert ev.band, claim.id
        if ev.override:  # a widened band or an override: its reason on the page and in ERRATA.md
            assert ev.override in errata, claim.id
            assert f"{claim.id}: {ev.override}" in repr(reader.claims_table(claim.section, claim.id.split("-")[1]))


def test_the_rule_is_stated_in_errata_and_linked_from_each_notebooks_first_claims_table():
    """The first claims table of each notebook sits in the closing audit section, whose opening (the prose between
    that section's heading and the table) links the rule: a reader meets the link before any verdict."""
    errata = ERRATA.read_text(encoding="utf-8")
    assert "\n## The verdict rule\n" in errata and "factor 1.5" in errata
    for src in sorted((ROOT / "chapters").glob("15_*.py")):
        text = src.read_text(encoding="utf-8")
        if "reader.claims(" not in text:
            continue
        before_first_table = text.split("reader.claims(", 1)[0]
        section_opening = before_first_table.rsplit("\n# ## ", 1)[1]
        markdown = "".join(cell.split("\n# %%", 1)[0] for cell in section_opening.split("# %% [markdown]"))
        assert "../ERRATA.md#the-verdict-rule" in markdown, src.name


# --- the band, hand-derived ------------------------------------------------------------------------

def _registry(entry):
    return load_registry(text=f'[defaults]\nmodel = "llama-2-13b"\naccelerator = "h100-sxm"\n\n[[claim]]\n{entry}')


KV = '''id = "15.1.2-zz"
section = "15.1.2"
part = "example"
description = "KV cache of one sequence at S = 1,000"
book = "{book}"
unit = "GB"
function = "kv_gb"
inputs = {{ seq_len = 1000 }}
{extra}
'''

MLP = '''id = "15.1.1-zz"
section = "15.1.1"
part = "example"
description = "MLP intensity of a prefill (B·S rule)"
book = "{s}"
unit = "FLOP/byte"
function = "prefill_mlp_intensity"
inputs = {{ prompt_len = {s} }}
method = "intensity_tokens"
method_inputs = {{ batch = 1, tokens = {s} }}
'''


def _one(entry):
    return evaluate_registry(_registry(entry))[0]


def test_band_of_a_consistent_number_is_the_last_printed_digit():
    # 40 layers x 40 heads x 128 x 2 (K, V) x 2 bytes x 1,000 tokens = 0.8192 GB
    c = _one(KV.format(book="0.8", extra=""))
    assert c.verdict == "consistent" and c.band == "|Δ| 0.0192 ≤ 0.05 (last digit)"
    c = _one(KV.format(book="0.83", extra=""))  # one more digit: ±0.005, and 0.0108 is outside
    assert c.verdict == "erratum" and c.band.startswith("|Δ| 0.0108 > 0.005 (last digit); no method")


def test_band_of_an_approximation_names_the_method_and_its_factor_against_the_limit():
    # MLP intensity (bf16, d = 5120, f = 13,824): T·df / (df + T(d + f)); the B·S rule says T.
    # T = 1024: 1024 · 70.78e6 / (70.78e6 + 1024 · 18,944) = 803.8 -> 1024/803.8 = 1.27x: approximation
    c = _one(MLP.format(s=1024))
    assert c.verdict == "approximation" and c.band.endswith("intensity_tokens: 1.27× ≤ 1.5×")
    # T = 2048: 1,323 -> 2048/1323 = 1.55x: beyond the limit, an erratum
    c = _one(MLP.format(s=2048))
    assert c.verdict == "erratum" and c.band.endswith("intensity_tokens: 1.55× > 1.5×")


def test_a_widened_band_carries_its_reason_into_every_table():
    c = _one(KV.format(book="0.9", extra='tolerance = { abs = 0.1, why = "rounded inputs, planted" }'))
    assert c.verdict == "consistent" and c.band == "|Δ| 0.0808 ≤ 0.1 (stated rounding)"
    assert "rounded inputs, planted" in c.override
    assert f"15.1.2-zz: {c.override}" in repr(reader.ClaimsTable([c]))
    assert c.override in table([c]) and c.override in errata_document([c])


def test_an_override_changes_the_verdict_only_with_a_reason_that_every_table_shows():
    c = _one(KV.format(book="0.8", extra='override = { verdict = "erratum", reason = "planted: a test" }'))
    assert (c.verdict, c.rule_verdict) == ("erratum", "consistent")
    assert c.band.startswith("override (rule: consistent, |Δ| 0.0192")
    for shown in (repr(reader.ClaimsTable([c])), table([c]), errata_document([c])):
        assert "planted: a test" in shown
    with pytest.raises(RegistryError, match="override must be a table"):
        _registry(KV.format(book="0.8", extra='override = { verdict = "erratum" }'))
    with pytest.raises(RegistryError, match="override must be a table"):
        _registry(KV.format(book="0.8", extra='override = { verdict = "fine", reason = "x" }'))


def test_verify_json_carries_the_band(capsys):
    from inferlab.cli import main
    assert main(["verify", "--section", "15.2.1", "--json"]) == 0
    rows = {c["id"]: c for c in json.loads(capsys.readouterr().out)["claims"]}
    assert rows["15.2.1-ab"]["band"].endswith("time_2ps: 1.46× ≤ 1.5×")
    assert rows["15.2.1-q"]["band"].endswith("linear_scaling: 2.48× > 1.5×")


# --- stored verdicts: the executed notebooks ----------------------------------------------------------

ROW = re.compile(r"^(15\.\d\.\d-[a-z]{1,2})\s+(\S) (ok|approx\.|erratum|unchecked)\s+book .*?\s+band (.*)$")


def test_every_verdict_stored_in_a_notebook_is_the_rules_current_output(evaluated):
    """A notebook's stored claims table is what a reader sees without running it: each row's verdict
    and band must be what the registry computes now (a stale notebook fails here)."""
    seen = set()
    for nb in sorted((ROOT / "chapters").glob("15_*.ipynb")):
        for cell in json.loads(nb.read_text(encoding="utf-8"))["cells"]:
            for out in cell.get("outputs", []):
                text = "".join(out.get("data", {}).get("text/plain", []))
                for line in text.splitlines():
                    m = ROW.match(line)
                    if not m:
                        continue
                    ev = evaluated[m.group(1)]
                    assert (m.group(2), m.group(3)) == (reader.VERDICT_MARK[ev.verdict],
                                                        reader.VERDICT_WORD[ev.verdict]), (nb.name, line)
                    assert m.group(4).strip() == ev.band, (nb.name, m.group(1), m.group(4), ev.band)
                    seen.add(m.group(1))
    printed = {i for i, c in evaluated.items()}
    assert len(seen) >= 0.9 * len(printed), f"only {len(seen)} of {len(printed)} claims found in the notebooks"

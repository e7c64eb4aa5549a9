"""ERRATA.md is generated from the claims registry and committed: it must match what the registry gives."""
from pathlib import Path

import pytest

from inferlab.claims.evaluate import evaluate_registry
from inferlab.claims.registry import load_registry
from inferlab.claims.render import errata_document
from inferlab.cli import main

pytestmark = pytest.mark.claims

ERRATA = Path(__file__).resolve().parents[1] / "ERRATA.md"


def test_errata_file_is_up_to_date():
    registry = load_registry()
    expected = errata_document(evaluate_registry(registry), registry.defaults)
    assert ERRATA.exists(), "ERRATA.md is missing: run `inferlab errata` and commit it"
    assert ERRATA.read_text(encoding="utf-8") == expected, (
        "ERRATA.md is stale: run `inferlab errata` and commit the result")


def test_errata_lists_every_erratum_with_what_an_author_needs():
    text = ERRATA.read_text(encoding="utf-8")
    for c in evaluate_registry(load_registry(), verdict="erratum"):
        section = text.split(f"### {c.id}\n", 1)[1].split("\n### ", 1)[0]
        for field in ("**The book says:**", "**What follows from its own numbers:**",
                      "**Full model (corrected value):**", "**Cause:**", "**Consequence for a reader:**"):
            assert field in section, (c.id, field)


def test_errata_check_command(tmp_path, capsys):
    assert main(["errata", "--check"]) == 0
    stale = tmp_path / "ERRATA.md"
    stale.write_text("# old\n")
    assert main(["errata", "--check", "--output", str(stale)]) == 1
    assert "out of date" in capsys.readouterr().err
    assert main(["errata", "--output", str(stale)]) == 0
    assert stale.read_text(encoding="utf-8") == ERRATA.read_text(encoding="utf-8")

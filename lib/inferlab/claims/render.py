"""The evaluated registry as text: the verify table, JSON, and ERRATA.md. All deterministic."""
from __future__ import annotations

import json
import textwrap
from collections import Counter

from inferlab.claims.evaluate import APPROXIMATION_LIMIT, EvaluatedClaim, display
from inferlab.claims.registry import VERDICTS

PART_TITLES = {"body": "body", "example": "A Worked Example",
               "practice": "What You Actually Decide in Practice",
               "interviews": "How This Shows Up in Interviews", "takeaways": "Key Takeaways"}


def summary_counts(claims) -> dict:
    counts = Counter(c.verdict for c in claims)
    return {v: counts.get(v, 0) for v in VERDICTS}


def summary_line(claims) -> str:
    counts = summary_counts(claims)
    return (f"{len(claims)} claims: " + ", ".join(f"{n} {v}" for v, n in counts.items()))


def table(claims: list[EvaluatedClaim]) -> str:
    """id, description, book, ours, verdict and the band that decided it (`evaluate.rule`): one row
    per claim, then the count per verdict and every widened band or override with its reason."""
    headers = ("id", "description", "book", "ours", "verdict", "band")
    rows = [(c.id, c.description, c.book_text, c.ours_text, c.verdict,
             c.band + (" *" if c.override else "")) for c in claims]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()
    out = [line(headers), line(["-" * w for w in widths])]
    out += [line(r) for r in rows]
    out += ["", summary_line(claims)]
    overrides = [f"  * {c.id}: {c.override}" for c in claims if c.override]
    if overrides:
        out += ["", "* not the plain rule (the written reason):"] + overrides
    return "\n".join(out)


def explanations(claims: list[EvaluatedClaim], width: int = 100) -> str:
    """The cause and corrected value of every claim that is not consistent, and the reason of
    every unchecked one."""
    out = []
    for c in claims:
        if c.verdict == "consistent":
            continue
        head = f"{c.id} [{c.verdict}] "
        out.append(textwrap.fill(c.explanation, width, initial_indent=head,
                                 subsequent_indent=" " * 4))
    return "\n".join(out)


def as_json(claims: list[EvaluatedClaim], extra: dict | None = None) -> str:
    """The claims as one JSON object (summary, approximation_limit, claims), plus the keys of `extra`."""
    return json.dumps({"summary": summary_counts(claims), "approximation_limit": APPROXIMATION_LIMIT,
                       "claims": [c.as_dict() for c in claims], **(extra or {})}, indent=2, ensure_ascii=False)


# -------------------------------------------------------------------------------------------------
# ERRATA.md
# -------------------------------------------------------------------------------------------------

def _where(c: EvaluatedClaim) -> str:
    return f"{c.section}, {PART_TITLES[c.part]}" if c.part != "body" else f"{c.section}, main text"


def _lower_first(text: str) -> str:
    """'Free memory ...' -> 'free memory ...' (inside parentheses); acronyms ('GB ...') kept."""
    return text[0].lower() + text[1:] if len(text) > 1 and text[0].isupper() and text[1].islower() else text


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _setup(defaults: dict) -> str:
    """One sentence naming the model and accelerator "ours" uses, with their numbers computed."""
    from inferlab.core.specs import get_accelerator, get_model
    m, a = get_model(defaults["model"]), get_accelerator(defaults["accelerator"])
    return (f"{m.name} ({display(m.n_params / 1e9)}B parameters) on one {a.name} "
            f"({display(a.peak('bf16') / 1e12)} TFLOP/s dense bf16, {display(a.hbm_bytes_per_s / 1e12)} TB/s, "
            f"{display(a.memory_bytes / 1e9)} GB)")


def errata_document(claims: list[EvaluatedClaim], defaults: dict | None = None, statements=None,
                    source: str | None = None, contradictions=None) -> str:
    """ERRATA.md: every erratum with what the book says, what follows from its own numbers, the
    cause and the consequence; then the approximations and the unchecked claims, briefly; then the
    statements of data/statements.toml (`statements` evaluated, or the default registry's). `source`
    names the text the claims were judged on when it is not the registered one (a draft);
    `contradictions` (crosscheck) those between its entries, by default the registered ones.
    (reader.errata_markdown is another thing: a notebook's erratum boxes.)"""
    defaults = defaults or {"model": "llama-2-13b", "accelerator": "h100-sxm"}
    out = _errata_preamble(claims, defaults, source) + _errata_entries(claims) + _errata_others(claims)
    from inferlab.claims import crosscheck
    from inferlab.claims.statements import errata_section, evaluate_statements
    if statements is None:
        statements = evaluate_statements()
    if contradictions is None:
        from inferlab.claims.registry import load_registry
        from inferlab.claims.statements import load_statements
        contradictions = crosscheck.contradictions(
            load_registry(), load_statements(), claim_verdicts={c.id: c.verdict for c in claims},
            statement_verdicts={s.id: s.verdict for s in statements})
    from inferlab.claims.measured import quantization_markdown
    quantization = ["## The quantization advice against measured kernels", "",
                    "15.2.1 calls quantization the highest-leverage, lowest-risk way to cut ITL. Each statement's ideal "
                    "verdict (above) beside its measured twin, where a measurement exists (docs/kernels.md):", "",
                    quantization_markdown(), ""]
    return ("\n".join(out) + "\n\n" + crosscheck.markdown(contradictions) + "\n" + "\n".join(quantization) + "\n"
            + errata_section(statements))


def _errata_preamble(claims, defaults: dict, source: str | None) -> list[str]:
    """ERRATA.md's title, the verdict rule, the setup and the summary line."""
    return [
        "# Errata: Chapter 15, \"The Inference Workload\"",
        "",
        "<!-- Generated by `inferlab errata` from data/claims.toml; do not edit by hand. "
        "tests/test_errata.py fails when this file is stale. -->",
        "",
        *([f"Judged against the text `{source}` (`inferlab errata --book`): every number as printed there.", ""]
          if source else []),
        "Every number the chapter prints is registered in `data/claims.toml` and recomputed by the",
        "`inferlab` library (`inferlab verify` prints the full table). Every verdict is the output of one",
        "rule (`inferlab.claims.evaluate.rule`), and every table shows the band that decided it.",
        "",
        "## The verdict rule",
        "",
        "With b the book's number, x the full model's value (\"ours\") and m the value of the book's own",
        "method where the registry names one:",
        "",
        "1. **consistent** when x lies within half a unit of b's last printed digit (26 → ±0.5, 0.84 → ±0.005,",
        "   1.6e14 → ±0.05e14), inside b's range, or satisfies b's relation (\"> 80\"). An entry may widen",
        "   the band only with a written reason (its inputs were themselves rounded); such bands are",
        "   marked \"stated rounding\" and listed under [Widened bands and overrides](#widened-bands-and-overrides);",
        "2. **approximation** when x misses that band but m lands in it, m is a simplification the book",
        "   states, and the simplification does not change the result: the conclusion the book draws",
        "   from b (\"above the ridge point\") still holds for x, or, where it draws none, x is within a",
        f"   factor {APPROXIMATION_LIMIT:g} of b (1.46× passes, 2.5× does not);",
        "3. **erratum** otherwise: no method of the book's gives b, or only plain arithmetic does (a wrong",
        f"   rule or input), or the simplification moves b by more than {APPROXIMATION_LIMIT:g}× or flips its conclusion;",
        "4. **unchecked** for outside facts and guidelines, with the reason.",
        "",
        "A verdict other than the rule's needs an `override` with a written reason in the registry; it is",
        "listed below. A test recomputes every verdict from this rule.",
        "",
        "\"Full model\" is the library's exact operator count under a per-operator roofline, by default for",
        f"{_setup(defaults)}; the 70B claims use llama-2-70b. GB = 10^9 bytes, as in the book.",
        "",
        f"**Summary:** {summary_line(claims)}.",
        "",
    ]


def errata_anchor(claim_id: str) -> str:
    """The anchor of a claim's entry in ERRATA.md (its `### <id>` heading): "15.2.2-t" -> "1522-t"."""
    return claim_id.replace(".", "")


def _errata_entries(claims) -> list[str]:
    """The errata: their table, then one section each."""
    errata = [c for c in claims if c.verdict == "erratum"]
    out = [
        "## Errata",
        "",
        "| id | where | the book says | its own numbers give | full model | off by | band that decided it |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in errata:
        own = f"{display(c.own_value)} {c.unit}".strip() if c.own_value is not None else "-"
        off = f"{c.off_by:.1f}x" if c.off_by else "-"
        out.append(f"| [{c.id}](#{errata_anchor(c.id)}) | {_where(c)} | {_cell(c.book_text)} | "
                   f"{_cell(own)} | {_cell(c.ours_text)} | {off} | {_cell(c.band)} |")
    out.append("")
    for c in errata:
        out += [f"### {c.id}", "",
                f"**{c.description}** ({_where(c)}).", "",
                f"- **The book says:** {c.book_text}.",
                f"- **What follows from its own numbers:** "
                + (f"{display(c.own_value)} {c.unit}".strip() + f" ({_lower_first(c.own_summary.rstrip('.'))})."
                   if c.own_value is not None else "see the cause below."),
                f"- **Full model (corrected value):** {c.ours_text}.",
                f"- **Band that decided it:** {c.band}.",
                f"- **Cause:** {c.explanation}",
                f"- **Consequence for a reader:** {c.consequence or 'see the cause.'}", ""]
    return out


def _errata_others(claims) -> list[str]:
    """The approximations, the widened bands and overrides, the notes and the unchecked claims."""
    approx = [c for c in claims if c.verdict == "approximation"]
    unchecked = [c for c in claims if c.verdict == "unchecked"]
    notes = [c for c in claims if c.note]
    out = []
    out += ["## Approximations", "",
            "The book's number follows from a simplification it states; the exact value is given beside it.",
            "", "| id | claim | book | exact | band that decided it | why they differ |",
            "|---|---|---|---|---|---|"]
    for c in approx:
        out.append(f"| {c.id} | {_cell(c.description)} | {_cell(c.book_text)} | {_cell(c.ours_text)} | "
                   f"{_cell(c.band)} | {_cell(c.explanation)} |")
    out += ["", "## Widened bands and overrides", "",
            "Every verdict that is not the plain rule's, with its written reason: a band wider than half a",
            "unit of the last digit (the book's number is computed from inputs it rounded itself), or a",
            "verdict override.", ""]
    overridden = [c for c in claims if c.override]
    out += [f"- **{c.id}** ({c.verdict}; {c.band}): {c.override}" for c in overridden] or ["- none"]
    out += ["", "## Notes", "",
            "Remarks that change no verdict: typos in expressions, and where GiB instead of GB would matter.",
            ""]
    out += [f"- **{c.id}** ({c.description}): {c.note}" for c in notes]
    out += ["", "## Not checkable from the text", "",
            "Outside facts, measurements and guidelines; listed so that every printed number is accounted for.",
            "", "| id | claim | book | reason |", "|---|---|---|---|"]
    out += [f"| {c.id} | {_cell(c.description)} | {_cell(c.book_text)} | {_cell(c.explanation)} |"
            for c in unchecked]
    return out

"""The chapter checked against itself: two entries that speak of the same quantity under the same
conditions, but cannot both be right.

  numbers     two checked claims computing the same quantity (`function`) with the same inputs
              (the registry's defaults filled in) whose printed values admit no common value: each
              is read as the interval its verdict rule accepts (half a unit of its last digit or its
              stated band, its range, or its relation), and the intervals are disjoint;
  statements  two statements whose experiment runs with the same conditions but asserts opposite
              outcomes (its `expect` or `expected` input differs: a cost said to go up in one
              section and down in another, a growth order said to be linear and quadratic).

A contradiction changes no verdict (each entry keeps the one its own check gives); it is reported
with both lines, in `inferlab verify` and ERRATA.md.
"""
from __future__ import annotations

import inspect
import json
import math
from dataclasses import dataclass

from inferlab.claims.evaluate import _band_width, display
from inferlab.claims.registry import Claim, Registry

ASSERTION_INPUTS = ("expect", "expected")  # what an experiment's statement asserts, not its conditions


@dataclass(frozen=True)
class Contradiction:
    kind: str          # "numbers" or "statements"
    quantity: str      # the function or experiment and its conditions
    a: str
    b: str
    a_line: int | None
    b_line: int | None
    a_says: str
    b_says: str
    note: str = ""     # which of the two the library's own check supports

    def as_dict(self) -> dict:
        return {"kind": self.kind, "quantity": self.quantity,
                "a": {"id": self.a, "line": self.a_line, "says": self.a_says},
                "b": {"id": self.b, "line": self.b_line, "says": self.b_says}, "note": self.note}

    @property
    def pair(self) -> tuple:
        return self.kind, self.a, self.b

    def text(self) -> str:
        where = lambda i, l: f"{i} (line {l})" if l else i
        return (f"{where(self.a, self.a_line)}: {self.a_says}; {where(self.b, self.b_line)}: {self.b_says} "
                f"[{self.quantity}]" + (f". {self.note}." if self.note else ""))


def accepted(claim: Claim) -> tuple[float, float]:
    """The interval of values the claim's verdict rule calls the book's number."""
    if claim.relation in (">", ">="):
        return claim.low, math.inf
    if claim.relation in ("<", "<="):
        return -math.inf, claim.low
    if claim.is_range:
        return claim.low, claim.high
    width, _ = _band_width(claim)
    return claim.low - width, claim.low + width


def _disjoint(a: Claim, b: Claim) -> bool:
    (lo1, hi1), (lo2, hi2) = accepted(a), accepted(b)
    if a.relation and b.relation and a.relation[0] == b.relation[0]:
        return False  # two bounds the same way never exclude each other
    strict = lambda c: c.relation in (">", "<")
    if hi1 == lo2:
        return strict(a) or strict(b)
    if hi2 == lo1:
        return strict(a) or strict(b)
    return hi1 < lo2 or hi2 < lo1


def _conditions(inputs: dict, defaults: dict, params) -> str:
    merged = {k: v for k, v in defaults.items() if k in params}
    merged.update(inputs)
    return json.dumps(merged, sort_keys=True)


def number_contradictions(registry: Registry, lines: dict | None = None, verdicts: dict | None = None) -> list:
    """Pairs of checked claims of the same quantity and inputs whose printed values exclude each other.
    `lines` maps claim ids to their lines in the text read (optional); `verdicts` ids to verdicts."""
    from inferlab.claims.quantities import QUANTITIES
    lines, verdicts = lines or {}, verdicts or {}
    groups: dict = {}
    for c in registry.claims:
        if c.status != "checked" or c.function is None:
            continue
        params = inspect.signature(QUANTITIES[c.function.name]).parameters
        key = (c.function.name, _conditions(c.function.inputs, registry.defaults, params), c.unit)
        groups.setdefault(key, []).append(c)
    out = []
    for (name, conditions, unit), claims in groups.items():
        for i, a in enumerate(claims):
            for b in claims[i + 1:]:
                if _disjoint(a, b):
                    says = lambda c: f"{c.relation + ' ' if c.relation else ''}{c.book} {c.unit}".strip()
                    held = [c.id for c in (a, b) if verdicts.get(c.id) == "consistent"]
                    note = f"The full model agrees with {held[0]}" if len(held) == 1 else ""
                    out.append(Contradiction("numbers", f"{name} with {conditions}", a.id, b.id,
                                             lines.get(a.id), lines.get(b.id), says(a), says(b), note))
    return out


def statement_contradictions(statements, lines: dict | None = None, verdicts: dict | None = None) -> list:
    """Pairs of statements whose experiment runs under the same conditions but asserts opposite
    outcomes (a different `expect`/`expected`)."""
    from inferlab.claims.experiments import EXPERIMENTS
    lines, verdicts = lines or {}, verdicts or {}
    groups: dict = {}
    for s in statements.statements:
        if s.experiment is None:
            continue
        params = inspect.signature(EXPERIMENTS[s.experiment]).parameters
        asserted = {k: s.inputs.get(k, params[k].default if k in params else None) for k in ASSERTION_INPUTS
                    if k in params}
        if not asserted:
            continue
        conditions = {k: v for k, v in s.inputs.items() if k not in ASSERTION_INPUTS}
        groups.setdefault((s.experiment, json.dumps(conditions, sort_keys=True)), []).append((s, asserted))
    out = []
    for (experiment, conditions), entries in groups.items():
        for i, (a, wa) in enumerate(entries):
            for b, wb in entries[i + 1:]:
                if wa != wb:
                    says = lambda s, w: f"{s.description} ({', '.join(f'{k} {v}' for k, v in w.items())})"
                    held = [s.id for s in (a, b) if verdicts.get(s.id) == "consistent"]
                    note = f"The experiment supports {held[0]}" if len(held) == 1 else ""
                    out.append(Contradiction("statements", f"{experiment} with {conditions}", a.id, b.id,
                                             lines.get(a.id, a.line), lines.get(b.id, b.line),
                                             says(a, wa), says(b, wb), note))
    return out


def contradictions(registry: Registry, statements, claim_lines=None, statement_lines=None,
                   claim_verdicts=None, statement_verdicts=None) -> list:
    """Every contradiction between numbers, then between statements."""
    return (number_contradictions(registry, claim_lines, claim_verdicts)
            + statement_contradictions(statements, statement_lines, statement_verdicts))


def table(found) -> str:
    """The contradictions as text, one paragraph each."""
    if not found:
        return "Contradictions within the chapter: none"
    return "\n".join([f"Contradictions within the chapter: {len(found)}"] + [f"  {c.text()}" for c in found])


def markdown(found) -> str:
    """The ERRATA.md section."""
    out = ["## Contradictions within the chapter", "",
           "Two entries that speak of the same quantity under the same conditions and cannot both be right:",
           "claims computing the same quantity with the same inputs whose printed values admit no common",
           "value (each read as the interval its verdict rule accepts), and statements whose experiment runs",
           "under the same conditions but asserts opposite outcomes. Each entry keeps its own verdict.", "",
           "| kind | first | says | second | says | quantity and conditions | note |", "|---|---|---|---|---|---|---|"]
    cell = lambda t: str(t).replace("|", "\\|")
    where = lambda i, l: f"{i} (line {l})" if l else i
    out += [f"| {c.kind} | {where(c.a, c.a_line)} | {cell(c.a_says)} | {where(c.b, c.b_line)} | {cell(c.b_says)} | "
            f"{cell(c.quantity)} | {cell(c.note)} |" for c in found] or ["| none | | | | | | |"]
    return "\n".join(out) + "\n"


__all__ = ["ASSERTION_INPUTS", "Contradiction", "accepted", "contradictions", "display", "markdown", "table"]

"""Verdicts, computed from the numbers: never typed into the registry.

For a checked claim with book value b, the full model's value x ("ours") and, where the entry
names one, the book's own method's value m:

  consistent     b agrees with x within the book's rounding;
  approximation  b does not, but m reproduces it, m is a simplification the book states, and the
                 simplification does not change the result materially: it leaves the book's
                 stated conclusion (e.g. "above the ridge point") intact, or, where the number is
                 not used for a comparison, stays within a factor APPROXIMATION_LIMIT of x;
  erratum        anything else: b follows from no method, or only from arithmetic the book
                 gets wrong (a wrong rule, a wrong input, another section's contradicted value),
                 or from a simplification that breaks down where the book applies it.

A range claim ("50-70") agrees when x lies in it; a relation claim ("< 0.4") when x satisfies it.
"""
from __future__ import annotations

from inferlab.core.context import yardstick

import inspect
import math
import operator
from dataclasses import dataclass

from inferlab.claims.registry import (SECTIONS, VERDICTS, Claim, Registry, RegistryError, half_unit,
                                      load_registry)
from inferlab.claims.quantities import METHODS, QUANTITIES

# A stated simplification that moves a number by more than half (x 1.5) changes what a reader
# decides from it (GPUs to buy, batch to cap, whether an SLO is met): then it is an erratum.
APPROXIMATION_LIMIT = 1.5
_OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
_EPS = 1e-9  # relative slack so that a value exactly half a unit away still counts as rounding


def display(x) -> str:
    """A value as the table shows it: 4 significant digits, thousands separated, e.g. 2,682,
    126.2, 0.8389, 5.33e13; deterministic for a given float."""
    if x is None:
        return "-"
    x = float(x)
    if x == 0:
        return "0"
    a = abs(x)
    if a >= 1e6 or a < 1e-3:
        mant, _, exp = f"{x:.3g}".partition("e")
        return f"{mant}e{int(exp)}" if exp else mant
    decimals = max(0, 3 - int(math.floor(math.log10(a))))
    text = f"{x:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


class _Shown(float):
    """A float whose empty format spec renders with `display` (for explanation templates)."""

    def __format__(self, spec):
        return display(self) if not spec else format(float(self), spec)


@dataclass(frozen=True)
class EvaluatedClaim:
    """A claim with its computed verdict. `ours` is the full model's value in the book's unit,
    `corrected` the value to print instead (None when the book's stands)."""

    id: str
    section: str
    part: str
    description: str
    book: str
    book_value: float | tuple
    unit: str
    ours: float | None
    verdict: str
    explanation: str
    corrected: float | None
    method_value: float | None = None
    method_simplification: str | None = None
    own_value: float | None = None
    own_summary: str = ""
    tolerance: str = ""
    consequence: str = ""
    note: str = ""
    relation: str | None = None
    printed: bool = True  # False: the book implies the number ("doubled") rather than printing it
    band: str = ""          # the test of `rule` that decided the verdict (see `rule`)
    rule_verdict: str = ""  # what `rule` computes; differs from `verdict` only under an override
    override: str = ""      # the written reason of a widened band (`tolerance`) or a verdict override

    @property
    def book_text(self) -> str:
        prefix = f"{self.relation} " if self.relation else ""
        return f"{prefix}{self.book} {self.unit}".strip()

    @property
    def ours_text(self) -> str:
        return f"{display(self.ours)} {self.unit}".strip() if self.ours is not None else "-"

    @property
    def off_by(self) -> float | None:
        """max(book/ours, ours/book) for a point claim; None for a range or a relation, or when
        either value is zero or missing."""
        if (self.ours is None or self.relation or isinstance(self.book_value, tuple) or not self.ours
                or not self.book_value):
            return None
        r = abs(self.book_value / self.ours)
        return max(r, 1 / r)

    def as_dict(self) -> dict:
        return {
            "id": self.id, "section": self.section, "part": self.part,
            "description": self.description, "book": self.book, "relation": self.relation,
            "book_value": list(self.book_value) if isinstance(self.book_value, tuple) else self.book_value,
            "unit": self.unit, "ours": self.ours, "ours_display": display(self.ours) if self.ours is not None else None,
            "verdict": self.verdict, "tolerance": self.tolerance, "method_value": self.method_value,
            "simplification": self.method_simplification, "own_value": self.own_value,
            "explanation": self.explanation, "corrected": self.corrected,
            "consequence": self.consequence, "note": self.note, "printed": self.printed,
            "band": self.band, "rule_verdict": self.rule_verdict, "override": self.override,
        }


def _invoke(claim_id: str, fn, inputs: dict, defaults: dict, what: str) -> float:
    params = inspect.signature(fn).parameters
    kwargs = {k: v for k, v in defaults.items() if k in params and k not in inputs}
    kwargs.update(inputs)
    try:
        value = fn(**kwargs)
    except TypeError as err:
        raise RegistryError(f"claims registry, entry {claim_id}: {what} {fn.__name__}() rejected its "
                            f"inputs: {err}") from None
    except ValueError as err:
        raise RegistryError(f"claims registry, entry {claim_id}: {what} {fn.__name__}() failed: {err}") from None
    value = float(value)
    if not math.isfinite(value):
        raise RegistryError(f"claims registry, entry {claim_id}: {what} {fn.__name__}() returned {value}")
    return value


def agrees(claim: Claim, value: float) -> bool:
    """Whether `value` is the book's number, within its rounding (or satisfies its range/relation)."""
    if claim.relation:
        return bool(_OPS[claim.relation](value, claim.low))
    if claim.is_range:
        return claim.low <= value <= claim.high
    tol = claim.tolerance.abs if claim.tolerance else _half_unit(claim)
    return abs(value - claim.low) <= tol * (1 + _EPS)


def _half_unit(claim: Claim) -> float:
    return half_unit(claim.book.replace(" ", ""))


def tolerance_text(claim: Claim) -> str:
    if claim.relation:
        return f"{claim.relation} {claim.book}"
    if claim.is_range:
        return f"within {claim.book}"
    if claim.tolerance:
        return f"±{display(claim.tolerance.abs)} ({claim.tolerance.why})"
    return f"±{display(_half_unit(claim))} (half a unit of the last printed digit)"


@dataclass(frozen=True)
class Ruling:
    """A verdict and the band that decided it, e.g. ("consistent", "|Δ| 0.38 ≤ 0.5 (last digit)")."""

    verdict: str
    band: str


def _ratio(a: float, b: float) -> float:
    r = abs(a / b)
    return max(r, 1 / r)


def rule(claim: Claim, ours: float, method_value: float | None) -> Ruling:
    """The verdict rule, written once (ERRATA.md, "The verdict rule"). With b the book's value,
    x ours and m the book's own method's value:

      1. consistent     x is within the band: half a unit of b's last printed digit (or the entry's
                        `tolerance`, a widened band with its written reason), inside b's range, or
                        satisfying b's relation;
      2. approximation  not 1., but m is within the same band, m is a simplification the book
                        states, and either the conclusion the book draws from b still holds for x,
                        or (no conclusion) x is within a factor APPROXIMATION_LIMIT (1.5) of b;
      3. erratum        anything else (no method reproduces b, or only plain arithmetic does, or
                        the simplification moves b by more than 1.5x or flips its conclusion).

    The band names the tests that decided: e.g. "|Δ| 0.38 ≤ 0.5 (last digit)",
    "|Δ| 3.23 > 0.5 (last digit); time_2ps: 1.46× ≤ 1.5×",
    "|Δ| 1.07e14 > 5e12 (last digit); flops_6ps: arithmetic, no stated simplification"."""
    if agrees(claim, ours):
        return Ruling("consistent", _agree_band(claim, ours))
    miss = _miss_band(claim, ours)
    if claim.method is None:
        return Ruling("erratum", f"{miss}; no method of the book's gives it")
    name = claim.method.name
    if method_value is None or not agrees(claim, method_value):
        return Ruling("erratum", f"{miss}; {name} gives {display(method_value)}, not the book's")
    if METHODS[name].simplification is None:
        return Ruling("erratum", f"{miss}; {name}: arithmetic, no stated simplification")
    if claim.conclusion is not None:
        rel, threshold = claim.conclusion
        holds = _OPS[rel](ours, threshold)
        return Ruling("approximation" if holds else "erratum",
                      f"{miss}; {name}: conclusion {rel} {display(threshold)} "
                      f"{'holds' if holds else 'fails'} for ours")
    if claim.relation or claim.is_range or ours == 0 or claim.low == 0:
        return Ruling("erratum", f"{miss}; {name}: no factor for a range, relation or zero")
    factor = _ratio(claim.low, ours)
    within = factor <= APPROXIMATION_LIMIT
    return Ruling("approximation" if within else "erratum",
                  f"{miss}; {name}: {factor:.2f}× {'≤' if within else '>'} {APPROXIMATION_LIMIT:g}×")


def _band_width(claim: Claim) -> tuple[float, str]:
    if claim.tolerance:
        return claim.tolerance.abs, "stated rounding"
    return _half_unit(claim), "last digit"


def _agree_band(claim: Claim, ours: float) -> str:
    if claim.relation:
        return f"ours {claim.relation} {claim.book}"
    if claim.is_range:
        return f"ours in {claim.book}"
    width, what = _band_width(claim)
    return f"|Δ| {display(abs(ours - claim.low))} ≤ {display(width)} ({what})"


def _miss_band(claim: Claim, ours: float) -> str:
    if claim.relation:
        return f"ours not {claim.relation} {claim.book}"
    if claim.is_range:
        return f"ours outside {claim.book}"
    width, what = _band_width(claim)
    return f"|Δ| {display(abs(ours - claim.low))} > {display(width)} ({what})"


def _render(claim: Claim, template: str, values: dict) -> str:
    try:
        return template.format(**{k: _Shown(v) for k, v in values.items() if v is not None})
    except (KeyError, IndexError, ValueError) as err:
        raise RegistryError(f"claims registry, entry {claim.id}: cannot fill the template "
                            f"{template[:60]!r}...: {err!r} (available: {', '.join(values)})") from None


@yardstick  # the book's numbers include sequences beyond a model's context (100k on Llama-2 13B)
def evaluate(claim: Claim, defaults: dict) -> EvaluatedClaim:
    """Compute one claim's values and verdict."""
    ours = method_value = own_value = None
    if claim.function is not None:
        ours = _invoke(claim.id, QUANTITIES[claim.function.name], claim.function.inputs, defaults, "function")
    if claim.method is not None:
        method_value = _invoke(claim.id, METHODS[claim.method.name].function, claim.method.inputs,
                               defaults, "method")
    if claim.own is not None:
        own_value = _invoke(claim.id, METHODS[claim.own.name].function, claim.own.inputs, defaults, "method")
    values = {"book": claim.low, "ours": ours, "method": method_value, "own": own_value}
    for name, (kind, call) in claim.derived.items():
        fn = QUANTITIES[call.name] if kind == "function" else METHODS[call.name].function
        values[name] = _invoke(f"{claim.id} (derived.{name})", fn, call.inputs, defaults, kind)

    band, rule_verdict, override = "", "", ""
    if claim.status == "unchecked":
        verdict = rule_verdict = "unchecked"
        band = "not checkable from the text"
        explanation = _render(claim, claim.reason, values)
    else:
        ruling = rule(claim, ours, method_value)
        verdict, rule_verdict, band = ruling.verdict, ruling.verdict, ruling.band
        if claim.tolerance:
            override = f"band widened to ±{display(claim.tolerance.abs)}: {claim.tolerance.why}"
        if claim.override:
            verdict, reason = claim.override
            band = f"override (rule: {rule_verdict}, {ruling.band})"
            override = f"verdict {verdict} instead of the rule's {rule_verdict}: {reason}"
        if verdict == "consistent":
            explanation = ""
        elif claim.explanation:
            explanation = _render(claim, claim.explanation, values)
        else:  # a new or planted entry without a written cause: say what the numbers show
            how = (f"its own method gives {display(method_value)}" if method_value is not None
                   else "no method of the book's is given")
            explanation = (f"The book's {claim.book} {claim.unit} does not follow from the full model "
                           f"({display(ours)}); {how}.")
    return EvaluatedClaim(
        id=claim.id, section=claim.section, part=claim.part, description=claim.description,
        book=claim.book, book_value=(claim.low, claim.high) if claim.is_range else claim.low,
        unit=claim.unit, ours=ours, verdict=verdict, explanation=explanation,
        corrected=ours if verdict in ("approximation", "erratum") else None,
        method_value=method_value,
        method_simplification=METHODS[claim.method.name].simplification if claim.method else None,
        own_value=own_value, own_summary=METHODS[claim.own.name].summary if claim.own else "",
        tolerance=tolerance_text(claim) if claim.status == "checked" else "",
        consequence=_render(claim, claim.consequence, values) if claim.consequence else "",
        note=_render(claim, claim.note, values) if claim.note else "",
        relation=claim.relation, printed=claim.printed, band=band, rule_verdict=rule_verdict,
        override=override)


def evaluate_registry(registry: Registry | None = None, section: str | None = None,
                      verdict: str | None = None) -> list[EvaluatedClaim]:
    registry = registry or load_registry()
    if section is not None and section not in SECTIONS:
        raise RegistryError(f"unknown section {section!r}; allowed: {', '.join(SECTIONS)}")
    if verdict is not None and verdict not in VERDICTS:
        raise RegistryError(f"unknown verdict {verdict!r}; allowed: {', '.join(VERDICTS)}")
    out = []
    for claim in registry.claims:
        if section is not None and claim.section != section:
            continue
        ev = evaluate(claim, registry.defaults)
        if verdict is None or ev.verdict == verdict:
            out.append(ev)
    return out

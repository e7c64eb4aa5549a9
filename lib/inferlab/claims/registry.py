"""Reading data/claims.toml: one entry per number-bearing claim, checked for shape before use.

A malformed entry (missing field, unknown key, unknown function, inputs the function refuses)
raises RegistryError naming the entry's id and what to fix.
"""
from __future__ import annotations

import inspect
import math
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from inferlab.claims.chapter import PARTS
from inferlab.claims.quantities import METHODS, QUANTITIES

VERDICTS = ("consistent", "approximation", "erratum", "unchecked")
RELATIONS = ("<", "<=", ">", ">=")
SECTIONS = ("15.1.1", "15.1.2", "15.2.1", "15.2.2")
ID_RE = re.compile(r"^(15\.\d\.\d)-([a-z]{1,2})$")
_NUM = r"\d+(?:\.\d+)?(?:e-?\d+)?"
BOOK_RE = re.compile(rf"^(?P<lo>{_NUM})(?:-(?P<hi>{_NUM}))?$")

REQUIRED = ("id", "section", "part", "description", "book", "unit")
OPTIONAL = ("status", "reason", "function", "inputs", "relation", "tolerance", "method",
            "method_inputs", "own", "own_inputs", "conclusion", "explanation", "consequence",
            "note", "printed", "also_covers", "derived", "override", "anchor")


class RegistryError(ValueError):
    """The claims registry (or one entry of it) is malformed."""


@dataclass(frozen=True)
class Tolerance:
    """How far a computed value may sit from the book's and still be the book's number."""

    abs: float
    why: str


@dataclass(frozen=True)
class Call:
    """A registered function with keyword inputs."""

    name: str
    inputs: dict = field(hash=False)


@dataclass(frozen=True)
class Claim:
    id: str
    section: str
    part: str
    description: str
    book: str
    unit: str
    low: float
    high: float
    status: str = "checked"
    reason: str = ""
    function: Call | None = None
    relation: str | None = None
    tolerance: Tolerance | None = None
    method: Call | None = None
    own: Call | None = None
    conclusion: tuple | None = None
    explanation: str = ""
    consequence: str = ""
    note: str = ""
    printed: bool = True
    also_covers: tuple = ()
    derived: dict = field(default_factory=dict, hash=False)
    override: tuple | None = None  # (verdict, reason): a verdict other than the rule's, with why
    anchor: tuple = ()  # phrases on the claim's line, the last one just before its number (claims.anchors)

    @property
    def is_range(self) -> bool:
        return self.low != self.high

    def numbers(self) -> list:
        """Every number this entry puts on the page: the book's value or range, the inputs of its
        function and method, the conclusion's threshold and `also_covers` (for the coverage test)."""
        out = [self.low, self.high, *self.also_covers]
        for call in (self.function, self.method):
            if call is not None:
                out.extend(_flatten_numbers(call.inputs))
        if self.conclusion:
            out.append(self.conclusion[1])
        return out


def _flatten_numbers(value) -> list:
    if isinstance(value, bool):
        return []
    if isinstance(value, (int, float)):
        return [float(value)]
    if isinstance(value, dict):
        return [x for v in value.values() for x in _flatten_numbers(v)]
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _flatten_numbers(v)]
    return []


def half_unit(text: str) -> float:
    """Half a unit of the last printed digit: '0.82' -> 0.005, '1.6e14' -> 0.05e14, '13' -> 0.5.
    Trailing zeros of a whole number are not significant: '130' -> 5, '2,700' -> 50."""
    mantissa, _, exp = text.replace(",", "").partition("e")
    scale = 10.0 ** int(exp) if exp else 1.0
    if "." in mantissa:
        return 0.5 * 10.0 ** -len(mantissa.split(".")[1]) * scale
    digits = mantissa.lstrip("0") or "0"
    zeros = len(digits) - len(digits.rstrip("0")) if digits != "0" else 0
    return 0.5 * 10.0 ** zeros * scale


def _fail(entry_id, message) -> RegistryError:
    return RegistryError(f"claims registry, entry {entry_id}: {message}")


def _call(entry_id, raw, name_key, inputs_key, table, kind) -> Call | None:
    name = raw.get(name_key)
    if name is None:
        if inputs_key in raw:
            raise _fail(entry_id, f"'{inputs_key}' given without '{name_key}'")
        return None
    if not isinstance(name, str) or name not in table:
        import difflib
        close = difflib.get_close_matches(str(name), list(table), n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise _fail(entry_id, f"unknown {kind} {name!r} in '{name_key}' (a {kind} must be defined "
                              f"in inferlab/claims/quantities.py{hint})")
    inputs = raw.get(inputs_key, {})
    if not isinstance(inputs, dict):
        raise _fail(entry_id, f"'{inputs_key}' must be a table of keyword arguments; got {inputs!r}")
    fn = table[name] if kind == "function" else table[name].function
    params = inspect.signature(fn).parameters
    unknown = [k for k in inputs if k not in params]
    if unknown:
        raise _fail(entry_id, f"{kind} {name}() takes no argument(s) {', '.join(unknown)}; "
                              f"it takes: {', '.join(params)}")
    return Call(name, dict(inputs))


def _check_fields(entry_id, raw: dict) -> None:
    """The entry's fields: the required ones present, none unknown, the text ones non-empty, the id
    made of its section, a known section and part."""
    missing = [k for k in REQUIRED if k not in raw]
    if missing:
        raise _fail(entry_id, f"missing required field(s): {', '.join(missing)}")
    unknown = [k for k in raw if k not in REQUIRED + OPTIONAL]
    if unknown:
        raise _fail(entry_id, f"unknown field(s): {', '.join(unknown)}; allowed: "
                              f"{', '.join(REQUIRED + OPTIONAL)}")
    for key in ("id", "section", "part", "description", "book", "unit"):
        if not isinstance(raw[key], str) or (key != "unit" and not raw[key].strip()):
            raise _fail(entry_id, f"'{key}' must be a non-empty string; got {raw[key]!r}")
    m = ID_RE.match(raw["id"])
    if not m or m.group(1) != raw["section"]:
        raise _fail(entry_id, f"id must be the section followed by letters, e.g. "
                              f"'{raw['section']}-a'; got {raw['id']!r}")
    if raw["section"] not in SECTIONS:
        raise _fail(entry_id, f"unknown section {raw['section']!r}; allowed: {', '.join(SECTIONS)}")
    if raw["part"] not in PARTS:
        raise _fail(entry_id, f"unknown part {raw['part']!r}; allowed: {', '.join(PARTS)}")


def _book_range(entry_id, raw: dict) -> tuple[float, float]:
    """(low, high) of the number the book prints: one number (low = high) or a range."""
    book = raw["book"].replace(",", "").replace(" ", "")
    bm = BOOK_RE.match(book)
    if not bm:
        raise _fail(entry_id, f"'book' must be the number as printed ('0.82', '2,689', '1.6e14') "
                              f"or a range ('50-70'); got {raw['book']!r}")
    low = float(bm.group("lo"))
    high = float(bm.group("hi")) if bm.group("hi") else low
    return low, high


def _tolerance(entry_id, raw: dict, low: float) -> Tolerance | None:
    tolerance = None
    if "tolerance" in raw:
        t = raw["tolerance"]
        if not isinstance(t, dict) or not (("abs" in t) ^ ("rel" in t)) or not str(t.get("why", "")).strip():
            raise _fail(entry_id, "tolerance must be a table with exactly one of 'abs' or 'rel' and a "
                                  "'why' that names the rounding it comes from")
        value = float(t["abs"]) if "abs" in t else float(t["rel"]) * abs(low)
        if not (value > 0 and math.isfinite(value)):
            raise _fail(entry_id, f"tolerance must be positive; got {t!r}")
        tolerance = Tolerance(value, str(t["why"]))
    return tolerance


def _conclusion(entry_id, raw: dict) -> tuple | None:
    conclusion = raw.get("conclusion")
    if conclusion is not None:
        if (not isinstance(conclusion, dict) or conclusion.get("relation") not in RELATIONS
                or not isinstance(conclusion.get("value"), (int, float))):
            raise _fail(entry_id, "conclusion must be a table {relation = '>', value = 295}: the "
                                  "comparison the book draws from the number")
        conclusion = (conclusion["relation"], float(conclusion["value"]))
    return conclusion


def _derived(entry_id, raw: dict) -> dict:
    derived = {}
    for name, spec in (raw.get("derived") or {}).items():
        if not isinstance(spec, dict) or ("function" in spec) == ("method" in spec):
            raise _fail(entry_id, f"derived.{name} must be a table with either 'function' or "
                                  "'method', and 'inputs'")
        stray = [k for k in spec if k not in ("function", "method", "inputs")]
        if stray:
            raise _fail(entry_id, f"derived.{name} has unexpected key(s) {', '.join(stray)}; a "
                                  "[claim.derived.*] table must come after all of the claim's own "
                                  "fields, or TOML files those fields under it")
        table, key, kind = ((QUANTITIES, "function", "function") if "function" in spec
                            else (METHODS, "method", "method"))
        derived[name] = (kind, _call(f"{entry_id} (derived.{name})", spec, key, "inputs", table, kind))
    return derived


def _override(entry_id, raw: dict, status: str) -> tuple | None:
    override = raw.get("override")
    if override is not None:
        if (not isinstance(override, dict) or set(override) != {"verdict", "reason"}
                or override["verdict"] not in VERDICTS[:3] or not isinstance(override["reason"], str)
                or not override["reason"].strip()):
            raise _fail(entry_id, "override must be a table {verdict = 'erratum', reason = '...'} with a "
                                  f"verdict among {', '.join(VERDICTS[:3])} and a written reason; "
                                  f"got {override!r}")
        if status == "unchecked":
            raise _fail(entry_id, "an unchecked claim has no verdict to override")
        override = (override["verdict"], " ".join(override["reason"].split()))
    return override


def _anchor_and_also(entry_id, raw: dict) -> tuple[tuple, tuple]:
    """(anchor phrases, also_covers numbers), checked; and the free-text fields are strings."""
    anchor = raw.get("anchor", [])
    if (not isinstance(anchor, list) or not all(isinstance(p, str) and p.strip() for p in anchor)
            or any(len(p.split()) > 3 for p in anchor) or len(anchor) > 3):
        raise _fail(entry_id, "anchor must be a list of 1-3 short phrases (at most 3 words each) found on "
                              f"the claim's line, the last one just before its number; got {anchor!r}")
    if anchor and not raw.get("printed", True):
        raise _fail(entry_id, "an implied claim (printed = false) has no number to anchor")
    also = raw.get("also_covers", [])
    if not isinstance(also, list) or not all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                             for x in also):
        raise _fail(entry_id, "also_covers must be a list of numbers printed in the same part")
    for key in ("reason", "explanation", "consequence", "note"):
        if key in raw and not isinstance(raw[key], str):
            raise _fail(entry_id, f"'{key}' must be a string")
    return tuple(anchor), tuple(float(x) for x in also)


def parse_claim(raw: dict) -> Claim:
    """One entry of the registry, checked."""
    if not isinstance(raw, dict):
        raise _fail("<no id>", f"an entry must be a table; got {type(raw).__name__}")
    entry_id = raw.get("id", "<no id>")
    _check_fields(entry_id, raw)
    low, high = _book_range(entry_id, raw)
    status = raw.get("status", "checked")
    if status not in ("checked", "unchecked"):
        raise _fail(entry_id, f"status must be 'checked' or 'unchecked'; got {status!r}")
    if status == "unchecked" and not str(raw.get("reason", "")).strip():
        raise _fail(entry_id, "an unchecked claim needs a 'reason'")
    function = _call(entry_id, raw, "function", "inputs", QUANTITIES, "function")
    if status == "checked" and function is None:
        raise _fail(entry_id, "a checked claim needs a 'function' (or status = 'unchecked' with a reason)")
    method = _call(entry_id, raw, "method", "method_inputs", METHODS, "method")
    own = _call(entry_id, raw, "own", "own_inputs", METHODS, "method")
    relation = raw.get("relation")
    if relation is not None and relation not in RELATIONS:
        raise _fail(entry_id, f"relation must be one of {', '.join(RELATIONS)}; got {relation!r}")
    if relation and low != high:
        raise _fail(entry_id, "a claim is either a range or a relation, not both")
    tolerance = _tolerance(entry_id, raw, low)
    conclusion = _conclusion(entry_id, raw)
    derived = _derived(entry_id, raw)
    override = _override(entry_id, raw, status)
    anchor, also = _anchor_and_also(entry_id, raw)
    return Claim(
        id=raw["id"], section=raw["section"], part=raw["part"], description=raw["description"].strip(),
        book=raw["book"], unit=raw["unit"], low=low, high=high, status=status,
        reason=raw.get("reason", "").strip(), function=function, relation=relation,
        tolerance=tolerance, method=method, own=own, conclusion=conclusion,
        explanation=" ".join(raw.get("explanation", "").split()),
        consequence=" ".join(raw.get("consequence", "").split()),
        note=" ".join(raw.get("note", "").split()), printed=bool(raw.get("printed", True)),
        also_covers=also, derived=derived, override=override, anchor=anchor)


@dataclass(frozen=True)
class Registry:
    defaults: dict = field(hash=False)
    claims: tuple
    path: Path | None = None


def read_toml_registry(what: str, path: Path, text: str | None, allowed: dict) -> dict:
    """The TOML document of registry `what` (e.g. 'claims') at `path` or parsed from `text`, with
    its top-level tables checked against `allowed` ({key: how it is written}). Every failure is a
    RegistryError that names the file: missing, not TOML, or an unknown table."""
    if text is None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise RegistryError(f"{what} registry not found at {path}") from None
        except UnicodeDecodeError:
            raise RegistryError(f"{what} registry {path} is not a UTF-8 text file (TOML expected)") from None
        except OSError as err:
            raise RegistryError(f"{what} registry {path} cannot be read ({err.strerror or err})") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise RegistryError(f"{what} registry {path or '<text>'} is not valid TOML: {err}") from None
    unknown = [k for k in data if k not in allowed]
    if unknown:
        raise RegistryError(f"{what} registry: unknown top-level table(s) {', '.join(unknown)}; "
                            f"allowed: {', '.join(allowed.values())}")
    return data


def load_registry(path: Path | str | None = None, *, text: str | None = None) -> Registry:
    """The registry at `path` (default data/claims.toml), or parsed from `text`."""
    if text is None and path is None:
        from inferlab.core.specs import data_dir
        path = data_dir() / "claims.toml"
    path = Path(path) if path is not None else None
    data = read_toml_registry("claims", path, text, {"defaults": "[defaults]", "claim": "[[claim]]"})
    claims = tuple(parse_claim(raw) for raw in data.get("claim", []))
    if not claims:  # an empty table would "pass" while checking nothing
        raise RegistryError(f"claims registry {path or '<text>'} has no [[claim]] entries; allowed: at least one")
    seen = set()
    for c in claims:
        if c.id in seen:
            raise _fail(c.id, "duplicate id")
        seen.add(c.id)
    return Registry(dict(data.get("defaults", {})), claims, path)

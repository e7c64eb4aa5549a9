"""Exercises with machine-checked answers: the registry, answer checking and result recording.

An exercise names its parameters; `solve(**params)` computes the expected answer through inferlab,
and `mistakes(**params)` recomputes it with one classic slip each (6*P*S for a forward pass,
n_heads for n_kv_heads, GiB for GB, ...), so a wrong answer that lands on a slip gets that slip's
hint. Nothing here ever prints an expected value.

`check` is formative: PASS, or FAIL with a hint. Grading never uses it: the grader runs a submission in a
sandbox where this package is replaced by a stub without answers, reads the answer variables after each
check cell, and scores them in its own process (`inferlab.exercises.grade`). Per-student variants:
`variant(id, student_id, assignment)` draws an exercise's `vary` parameters from a seed of both.
"""
from __future__ import annotations

import dataclasses
import hashlib
import hmac
import inspect
import itertools
import random
import re
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from inferlab.base.input_checks import choice as _choice

KINDS = ("recompute", "predict", "inconsistency", "design")
SECTIONS = {
    "15.1.1": "Compute-bound prefill",
    "15.1.2": "Memory-bound generation and the KV cache",
    "15.2.1": "Time-to-first-token and inter-token latency",
    "15.2.2": "Throughput under batching",
    "15.2.3": "Serving lab (beyond the chapter)",
}
GB_PER_GIB = 2.0**30 / 1e9  # 1.0737...


# Answer parts ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Part:
    """One checked value of an answer. kind: number (relative tolerance), integer (exact unless
    abs_tol), choice (one of `options`), choices (a set of option letters)."""

    name: str
    description: str
    kind: str = "number"
    unit: str = ""
    rel_tol: float = 0.0
    abs_tol: float = 0.0
    options: tuple = ()
    hint: str = ""  # shown for a wrong value that matches no known slip
    # Relative weight within the exercise (its points are shared in proportion). A part that variants
    # cannot protect (a two-way prediction, a structure the exercise is written for) weighs little.
    weight: float = 1.0
    # A hidden part is graded like any other, but what a student sees before the grades are released (their
    # own check, feedback/<id>.md, Gradescope's visible tests) never says how it went: `CheckResult.public`.
    hidden: bool = False

    def spec(self, params: Mapping) -> str:
        """What the student must give, with its unit and tolerance (for the statement)."""
        what = self.description.format(**params)
        if self.kind == "number":
            unit = f" in {self.unit}" if self.unit else " (dimensionless)"
            tol = f"±{self.rel_tol * 100:g} %" if self.rel_tol else f"±{self.abs_tol:g}"
            return f"{what}{unit}, a number (tolerance {tol})"
        if self.kind == "integer":
            unit = f" ({self.unit})" if self.unit else ""
            tol = (f"tolerance ±{self.rel_tol * 100:g} %" if self.rel_tol
                   else f"tolerance ±{self.abs_tol:g}" if self.abs_tol else "exact")
            return f"{what}{unit}, an integer ({tol})"
        opts = ", ".join(repr(o) for o in self.options)
        if self.kind == "choice":
            return f"{what}: one of {opts}"
        return f"{what}: a set of letters among {opts}, e.g. {{'A', 'C'}}"


@dataclass(frozen=True)
class ManualPart:
    """A part graded by hand (an explanation, a design's argument): the auto-grader never scores it; `grade` lists
    it in manual.csv with its points and rubric, and `merge-manual` adds the instructor's scores."""

    name: str
    description: str
    points: float
    rubric: str


# A part with few possible answers weighs this much beside a computed number (1): a choice among a few
# options (a prediction, the true statements of a memo), a small integer such as a TP degree, a value the
# same in every variant (the structure an exercise is written for). A classmate's or a guessed answer often
# earns it; `collisions` measures how often.
LOW_WEIGHT = 0.1


def number(name, description, unit="", rel_tol=0.01, hint="", weight=1.0, hidden=False):
    return Part(name, description, "number", unit, rel_tol=rel_tol, hint=hint, weight=weight, hidden=hidden)


def integer(name, description, unit="", abs_tol=0, hint="", rel_tol=0.0, weight=1.0, hidden=False):
    """A whole number: a non-integral answer is refused with a message; compared exactly unless a tolerance."""
    return Part(name, description, "integer", unit, rel_tol=rel_tol, abs_tol=abs_tol, hint=hint, weight=weight,
                hidden=hidden)


def one_of(name, description, options, hint="", weight=LOW_WEIGHT, hidden=False):
    """One of `options` (compared case-insensitively)."""
    return Part(name, description, "choice", options=tuple(str(o) for o in options), hint=hint, weight=weight,
                hidden=hidden)


def letters(name, description, options, hint="", weight=LOW_WEIGHT, hidden=False):
    return Part(name, description, "choices", options=tuple(str(o).upper() for o in options), hint=hint, weight=weight,
                hidden=hidden)


@dataclass(frozen=True)
class Mistake:
    """The value a classic slip produces, computed from the exercise's parameters, and its hint."""

    value: object
    hint: str
    part: str = ""


# Variants -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Vary:
    """The parameters a per-student variant may change: each entry of `options` is (name, values) or
    ((name, ...), (tuple of values, ...)), drawn in order with `rng.choice`; `derive(**drawn)` may then
    turn the draw into the parameters (a batch from a multiple of B*, say). The options are finite, so a
    test can check every combination a student can get (`combinations`). `seed`: draw with another
    exercise's seed, to share its draws (an exercise that says "same model as exercise 1")."""

    options: tuple
    derive: Callable | None = None
    seed: str | None = None

    def __call__(self, rng: random.Random) -> dict:
        out = {}
        for names, values in self.options:
            value = rng.choice(list(values))
            out.update(zip(names, value) if isinstance(names, tuple) else {names: value})
        return self._derived(out)

    def _derived(self, params: dict) -> dict:
        return self.derive(**params) if self.derive else params

    def combinations(self) -> list[dict]:
        """Every parameter set a student can draw."""
        out = []
        for combo in itertools.product(*(values for _, values in self.options)):
            params = {}
            for (names, _), value in zip(self.options, combo):
                params.update(zip(names, value) if isinstance(names, tuple) else {names: value})
            out.append(self._derived(params))
        return out


def vary(*options, derive=None, seed=None) -> Vary:
    """Vary(options): vary(("model", ["a", "b"]), (("accelerator", "seq_len"), [("l4", 4096), ...]))."""
    return Vary(tuple((n, tuple(v)) for n, v in options), derive, seed)


# Exercises ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Exercise:
    """One exercise: `solve(**params)` gives the expected answer (a value, or a dict by part name),
    `mistakes(**params)` the classic slips; `statement` is a format string or a function of params."""

    id: str
    title: str
    kind: str
    points: int
    params: Mapping = field(hash=False)
    parts: tuple
    statement: str | Callable = ""
    solve: Callable = field(default=None, hash=False, repr=False)
    mistakes: Callable | None = field(default=None, hash=False, repr=False)
    # Vary: the parameters a per-student variant may change, drawn within ranges that keep the exercise
    # meaningful (see `variant`; tests check every combination). None: every student gets `params`.
    vary: Vary | None = field(default=None, hash=False, repr=False)
    manual: tuple = ()  # ManualPart: graded by hand, worth their own points beside `points`

    def __post_init__(self):
        _choice("exercise kind", self.kind, KINDS)
        _choice("section", self.section, SECTIONS)
        signature = list(inspect.signature(self.solve).parameters)
        if signature != list(self.params):
            raise ValueError(f"{self.id}: solve() takes {signature} but params are {list(self.params)}")
        names = [p.name for p in self.parts] + [m.name for m in self.manual]
        if len(set(names)) != len(names):
            raise ValueError(f"{self.id}: duplicate part names")
        if not all(p.weight > 0 for p in self.parts):
            raise ValueError(f"{self.id}: every part weight must be > 0")

    @property
    def _key(self) -> tuple:
        return (self.id, repr(sorted(self.params.items())))

    def with_params(self, **changes) -> "Exercise":
        """The same exercise with some parameters changed (a variant)."""
        unknown = sorted(set(changes) - set(self.params))
        if unknown:
            raise ValueError(f"{self.id}: parameter {unknown[0]!r} is not one of {', '.join(self.params)}")
        return dataclasses.replace(self, params={**self.params, **changes})

    @property
    def section(self) -> str:
        return self.id.split("-")[0]

    @property
    def answer_name(self) -> str:
        """The notebook variable that holds the answer: 'ex3' for '15.1.2-ex3'."""
        return "ex" + self.id.split("-ex")[1]

    @property
    def single(self) -> bool:
        return len(self.parts) == 1

    def heading(self) -> str:
        return self.title.format(**self.params)

    def text(self) -> str:
        """The statement with the parameters filled in, followed by the answer's form."""
        body = self.statement(**self.params) if callable(self.statement) else self.statement.format(**self.params)
        if self.single:
            form = f"**Answer** `{self.answer_name}`: {self.parts[0].spec(self.params)}."
        else:
            keys = "\n".join(f"- `{p.name!r}`: {p.spec(self.params)}" for p in self.parts)
            form = f"**Answer** `{self.answer_name}`: a dict with the keys\n{keys}"
        for m in self.manual:
            form += (f"\n\n**Graded by hand** ({m.points:g} point{'s' if m.points != 1 else ''}): "
                     f"{m.description.format(**self.params)}. Write it in a Markdown cell after the check.")
        return body.strip() + "\n\n" + form

    def template(self) -> str:
        """The empty answer a student starts from (Python source)."""
        if self.single:
            return "None"
        return "{" + ", ".join(f"{p.name!r}: None" for p in self.parts) + "}"

    def expected(self) -> dict:
        """{part name: expected value}, computed by `solve` (cached)."""
        if self._key not in _EXPECTED:
            raw = self.solve(**self.params)
            raw = raw if not self.single else {self.parts[0].name: raw}
            out = {}
            for part in self.parts:
                value, error = _normalise(part, _to_jsonable(raw[part.name]))
                if error:
                    raise ValueError(f"{self.id}: solve() gave an invalid {part.name!r}: {error}")
                out[part.name] = value
            _EXPECTED[self._key] = out
        return dict(_EXPECTED[self._key])

    def known_mistakes(self) -> list[Mistake]:
        """The slips, their values normalised like answers (cached)."""
        if self._key not in _MISTAKES:
            out = []
            for m in (self.mistakes(**self.params) if self.mistakes else []):
                part = m.part or self.parts[0].name
                value, error = _normalise(self._part(part), _to_jsonable(m.value))
                if error:
                    raise ValueError(f"{self.id}: mistake for {part!r} has an invalid value: {error}")
                out.append(Mistake(value, m.hint, part))
            _MISTAKES[self._key] = out
        return list(_MISTAKES[self._key])

    def _part(self, name: str) -> Part:
        for p in self.parts:
            if p.name == name:
                return p
        raise ValueError(f"{self.id} has no part {name!r}; parts: {', '.join(p.name for p in self.parts)}")

    def evaluate(self, payload) -> "CheckResult":
        """Score a JSON-able answer (what `check` records): per part pass/fail and a hint."""
        values, notes = self._split(payload)
        expected = self.expected()
        mistakes = self.known_mistakes()
        results = []
        for part in self.parts:
            raw = values.get(part.name)
            if raw is None:
                results.append(PartResult(part.name, "missing", "no answer yet"))
                continue
            value, error = _normalise(part, raw)
            if error:
                results.append(PartResult(part.name, "invalid", error))
            elif _matches(part, value, expected[part.name]):
                results.append(PartResult(part.name, "pass", ""))
            else:
                hint = self._hint(part, value, expected[part.name], mistakes)
                results.append(PartResult(part.name, "fail", hint))
        score = self.weighted_score(results)
        hidden = tuple(p.name for p in self.parts if p.hidden)
        return CheckResult(self.id, score, float(self.points), tuple(results), tuple(notes), hidden=hidden,
                           hidden_points=self.points * sum(self.part_weight(n) for n in hidden),
                           hidden_score=self.weighted_score([r for r in results if r.name in hidden]))

    def part_weight(self, name: str) -> float:
        """The share of the exercise's points part `name` is worth: its weight over the weights' sum."""
        return self._part(name).weight / sum(p.weight for p in self.parts)

    def weighted_score(self, results) -> float:
        """points x (weights of the passed parts) / (all weights)."""
        return self.points * sum(self.part_weight(r.name) for r in results if r.status == "pass")

    def _split(self, payload):
        """Map an answer onto the parts: a bare value (single part), a dict, or a list in order."""
        if self.single:
            if isinstance(payload, dict) and set(payload) == {self.parts[0].name}:
                payload = payload[self.parts[0].name]
            return {self.parts[0].name: payload}, []
        if payload is None:
            return {}, []
        if isinstance(payload, list) and len(payload) == len(self.parts):
            return dict(zip((p.name for p in self.parts), payload)), []
        if isinstance(payload, dict) and "__set__" not in payload:
            names = [p.name for p in self.parts]
            extra = [k for k in payload if k not in names]
            notes = ([f"ignored key(s) {', '.join(map(repr, extra))}; expected {', '.join(map(repr, names))}"]
                     if extra else [])
            return {k: v for k, v in payload.items() if k in names}, notes
        keys = ", ".join(repr(p.name) for p in self.parts)
        return {p.name: {"__invalid__": f"expected a dict with the keys {keys}"} for p in self.parts}, []

    def _hint(self, part: Part, value, expected, mistakes) -> str:
        hints = [m.hint for m in mistakes
                 if m.part == part.name and _matches(part, value, m.value)
                 and not _matches(part, m.value, expected)]
        if hints:
            return " Or: ".join(dict.fromkeys(hints))
        if part.kind in ("number", "integer") and expected != 0:
            for factor, hint in _generic_slips(part):
                slip = expected * factor
                if _matches(part, value, slip) and not _matches(part, slip, expected):
                    return hint
            if part.kind == "number" and part.rel_tol and abs(value - expected) <= 3 * part.rel_tol * abs(expected):
                return (f"close, but outside the ±{part.rel_tol * 100:g} % tolerance: check the exact "
                        "inputs the statement names (parameter counts, dtypes, peak or bandwidth)")
        if part.hint:
            return part.hint.format(**self.params)
        return "not the expected value; recheck the formula and the units"


def _generic_slips(part: Part):
    unit = f" (the answer is in {part.unit})" if part.unit else ""
    slips = []
    if part.unit and "GB" in part.unit:
        gib = ("off by 7.4 %: GB (1e9 bytes) versus GiB (2**30 bytes)?" + unit)
        slips += [(1 / GB_PER_GIB, gib), (GB_PER_GIB, gib)]
    for k, what in ((1e3, "1000: ms versus s, or GB versus MB?"), (1e6, "a million: check the unit prefix."),
                    (1e9, "1e9: bytes versus GB, or FLOP/s versus GFLOP/s?"),
                    (1e12, "1e12: FLOP/s versus TFLOP/s, or bytes/s versus TB/s?")):
        slips += [(k, f"off by a factor of {what}{unit}"), (1 / k, f"off by a factor of {what}{unit}")]
    two = ("off by a factor of exactly 2: the factor 2 for K and V, 2 bytes per bf16 element, "
           "or 2 FLOPs per multiply-add?")
    return slips + [(2.0, two), (0.5, two)]


_EXPECTED: dict = {}
_MISTAKES: dict = {}
_REGISTRY: dict[str, Exercise] = {}


def register(exercise: Exercise) -> Exercise:
    if exercise.id in _REGISTRY:
        raise ValueError(f"exercise id {exercise.id!r} is registered twice")
    _REGISTRY[exercise.id] = exercise
    return exercise


def get(exercise_id: str) -> Exercise:
    """The exercise with this id, e.g. '15.1.2-ex3'."""
    _choice("exercise id", exercise_id, _REGISTRY)
    return _REGISTRY[exercise_id]


def variant_seed(student_id: str, assignment: str, key: bytes) -> int:
    """The seed of a student's variants: HMAC-SHA-256 under the instructor's secret `key` of the assignment
    and the student id (stable across machines and Python versions; without the key nobody, a student
    with the library included, can compute it)."""
    if not isinstance(key, (bytes, bytearray)) or len(key) < 16:
        raise ValueError("variant key must be at least 16 bytes (the instructor key, see inferlab.exercises.key)")
    digest = hmac.new(bytes(key), f"inferlab-variant\n{assignment}\n{student_id}".encode(), hashlib.sha256).digest()
    return int.from_bytes(digest[:8], "big")


def variant(exercise_id: str, student_id: str | None, assignment: str | None, *, key: bytes | None = None) -> Exercise:
    """The exercise as `student_id` gets it in `assignment`: its `vary` parameters drawn from a seed of both
    under the instructor's `key` (the same student always gets the same numbers). Without a student or an
    assignment, or for an exercise that does not vary, the registered exercise itself. Without the key a
    variant cannot be drawn: ValueError (student notebooks carry their drawn parameters instead, see
    `set_student`)."""
    exercise = get(exercise_id)
    if not student_id or not assignment or exercise.vary is None:
        return exercise
    if key is None:
        raise ValueError(f"variant({exercise_id!r}, {student_id!r}, {assignment!r}) needs the instructor key: "
                         "variants are seeded with a secret that only the instructor holds")
    seed_id = getattr(exercise.vary, "seed", None) or exercise_id
    rng = random.Random(variant_seed(str(student_id), str(assignment), key) ^ int(
        hashlib.sha256(seed_id.encode()).hexdigest()[:12], 16))
    return exercise.with_params(**exercise.vary(rng))


def invariant_parts(exercise: Exercise) -> list[str]:
    """The parts whose expected value is the same in every variant a student can draw (`Vary.combinations`):
    variants do not protect them (a constant or a classmate's answer earns them). Numbers are compared to
    9 decimals."""
    if exercise.vary is None:
        return [p.name for p in exercise.parts]
    seen = {p.name: set() for p in exercise.parts}
    for params in exercise.vary.combinations():
        for name, value in exercise.with_params(**{k: v for k, v in params.items()
                                                    if k in exercise.params}).expected().items():
            seen[name].add(round(value, 9) if isinstance(value, float) else value)
    return [p.name for p in exercise.parts if len(seen[p.name]) == 1]


def exercises(section: str | None = None) -> list[Exercise]:
    """All exercises (of one section), in id order."""
    if section is not None:
        _choice("section", section, SECTIONS)
    out = [e for e in _REGISTRY.values() if section is None or e.section == section]
    return sorted(out, key=lambda e: (e.section, int(e.id.split("-ex")[1])))


# Normalising answers ------------------------------------------------------------------------------

def _to_jsonable(x, depth: int = 0):
    """What `check` records: plain numbers, strings, lists, dicts; sets as {'__set__': [...]}."""
    if x is None or x is Ellipsis:
        return None
    if depth > 4:
        return {"__invalid__": "answer nested too deeply"}
    if isinstance(x, (bool, str)):
        return x
    if isinstance(x, int):
        return int(x)
    if isinstance(x, float):
        return x if math.isfinite(x) else {"__invalid__": f"not a finite number ({x!r})"}
    if isinstance(x, np.generic):
        return _to_jsonable(x.item(), depth + 1)
    if isinstance(x, np.ndarray):
        if x.size == 1:
            return _to_jsonable(x.reshape(()).item(), depth + 1)
        return {"__invalid__": f"expected one value, got an array of shape {x.shape}"}
    if isinstance(x, Mapping):
        return {str(k): _to_jsonable(v, depth + 1) for k, v in x.items()}
    if isinstance(x, (set, frozenset)):
        return {"__set__": sorted((_to_jsonable(v, depth + 1) for v in x), key=repr)}
    if isinstance(x, (list, tuple)):
        return [_to_jsonable(v, depth + 1) for v in x]
    try:
        return _to_jsonable(float(x), depth + 1)  # torch scalars, Fraction, Decimal
    except (TypeError, ValueError):
        return {"__invalid__": f"cannot check an answer of type {type(x).__name__}"}


def _normalise(part: Part, raw):
    """(value, None) or (None, error message)."""
    if isinstance(raw, dict) and "__invalid__" in raw:
        return None, str(raw["__invalid__"])
    if part.kind in ("number", "integer"):
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            return None, f"expected a number, got {_describe(raw)}"
        try:
            value = float(raw)  # an int too large for a float raises OverflowError: wrong, not fatal
        except (OverflowError, TypeError, ValueError):
            return None, "not a finite number (too large)"
        if not math.isfinite(value):
            return None, "not a finite number"
        if part.kind == "integer" and abs(value - round(value)) > 1e-9 * max(1.0, abs(value)):
            return None, f"expected a whole number, got {value!r}"
        return value, None
    if part.kind == "choice":
        if not isinstance(raw, str):
            return None, f"expected one of {', '.join(map(repr, part.options))}, got {_describe(raw)}"
        canonical = {o.lower(): o for o in part.options}
        value = canonical.get(raw.strip().lower())
        if value is None:
            return None, f"{raw!r} is not one of {', '.join(map(repr, part.options))}"
        return value, None
    # choices: a set of letters, also given as a list, a tuple or a string such as "A, C"
    items = raw["__set__"] if isinstance(raw, dict) and "__set__" in raw else raw
    if isinstance(items, str):
        items = [c for c in items.upper() if c.isalpha()]
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        return None, f"expected a set of letters such as {{'A', 'C'}}, got {_describe(raw)}"
    value = frozenset(i.strip().upper() for i in items)
    bad = sorted(value - set(part.options))
    if bad:
        return None, f"{', '.join(map(repr, bad))} not among the options {', '.join(map(repr, part.options))}"
    return value, None


def _describe(raw) -> str:
    if isinstance(raw, dict) and "__set__" in raw:
        return "a set"
    return {dict: "a dict", list: "a list", str: "a string", bool: "a bool"}.get(type(raw), type(raw).__name__)


def _matches(part: Part, value, expected) -> bool:
    if part.kind in ("number", "integer"):
        return abs(value - expected) <= max(part.rel_tol * abs(expected), part.abs_tol) + 1e-12 * abs(expected)
    return value == expected


# Results and the student-facing check ------------------------------------------------------------

@dataclass(frozen=True)
class PartResult:
    name: str
    status: str  # pass | fail | invalid | missing
    hint: str


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check. It holds the score and hints, never the expected value."""

    exercise_id: str
    score: float
    points: float
    parts: tuple
    notes: tuple = ()
    attempt: int = 0  # the how-manieth answered check of this exercise in this session (0: not counted)
    hidden: tuple = ()  # the names of the hidden parts, and their share of `points` and of `score`
    hidden_points: float = 0.0
    hidden_score: float = 0.0

    def public(self) -> "CheckResult":
        """What a student may see before the grades are released: the hidden parts left out, with their points
        (a note says how many are graded later; never how they went)."""
        if not self.hidden:
            return self
        n = len(self.hidden)
        note = (f"{n} hidden part{'s' if n > 1 else ''} ({', '.join(self.hidden)}, {_fmt(self.hidden_points)} "
                f"point{'s' if self.hidden_points != 1 else ''}) graded too, shown when grades are released")
        return dataclasses.replace(
            self, parts=tuple(p for p in self.parts if p.name not in self.hidden), notes=self.notes + (note,),
            score=self.score - self.hidden_score, points=self.points - self.hidden_points, hidden=(),
            hidden_points=0.0, hidden_score=0.0)

    @property
    def passed(self) -> bool:
        return all(p.status == "pass" for p in self.parts)

    @property
    def answered(self) -> bool:
        return any(p.status != "missing" for p in self.parts)

    @property
    def status(self) -> str:
        """pass | partial | fail | no answer."""
        if self.passed:
            return "pass"
        if not self.answered:
            return "no answer"
        return "partial" if self.score > 0 else "fail"

    @property
    def message(self) -> str:
        """PASS, or FAIL with a hint per wrong part; "not answered yet" when no part has an answer (the empty
        answer cell a student starts from: None, ... or a dict of them), never a "FAIL 0/n"."""
        if not self.parts:  # every part hidden
            return "\n".join([f"{self.exercise_id} checked"] + [f"  note: {n}" for n in self.notes])
        if not self.answered:
            return "\n".join([f"{self.exercise_id} not answered yet: replace None in the answer cell with your "
                               "answer, run it, then run this check again"] + [f"  note: {n}" for n in self.notes])
        head = (f"{self.exercise_id} {'PASS' if self.passed else 'FAIL'}  "
                f"{_fmt(self.score)}/{_fmt(self.points)} point{'s' if self.points != 1 else ''}"
                + (f"  (attempt {self.attempt})" if self.attempt > 1 else ""))
        if self.passed:
            lines = [head]
        elif len(self.parts) == 1:
            lines = [f"{head}: {self.parts[0].hint}"]
        else:
            width = max(len(p.name) for p in self.parts)
            lines = [head] + [f"  {p.name:<{width}}  {'ok' if p.status == 'pass' else p.hint}" for p in self.parts]
        return "\n".join(lines + [f"  note: {n}" for n in self.notes])

    def __str__(self) -> str:
        return self.message

    def _ipython_display_(self) -> None:
        # check() has already printed the verdict. Showing nothing here keeps a check cell's output
        # the same whether or not IPython honours its trailing ';' (nbval runs cells without
        # history, where the ';' is not seen and the result would otherwise be displayed).
        return None

    def __repr__(self) -> str:
        return f"CheckResult({self.exercise_id!r}, {self.status}, score={_fmt(self.score)}/{_fmt(self.points)})"


def _fmt(x: float) -> str:
    return f"{round(x, 2):g}"


def sci(x: float, digits: int = 2) -> str:
    """x as text in scientific notation, e.g. 1.72 × 10¹⁵ (for the numbers a statement quotes)."""
    mantissa, exponent = f"{x:.{digits}e}".split("e")
    superscript = str(int(exponent)).translate(str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹"))
    return f"{mantissa} × 10{superscript}"


_SESSION: dict[str, CheckResult] = {}
_STUDENT: dict = {}  # the variant `check` uses: {"student_id": ..., "assignment": ...} (set_student)
_FIRST: dict = {}  # (exercise id, part) -> the status of the first checked answer of a binary prediction
_ATTEMPTS: dict = {}  # exercise id -> answered checks so far in this session


def set_student(student_id: str, assignment: str, params: Mapping | None = None) -> None:
    """Check this session's answers against `student_id`'s variants of `assignment` (the first cell of a
    notebook built for one student calls it). `params`: {exercise id: {parameter: value}}, the parameters
    drawn for this student (written into the notebook by the builder, which holds the instructor key; the
    notebook never holds the key). The grader reads none of it: it draws the variant from the roster id."""
    if not isinstance(student_id, str) or not re.fullmatch(r"[A-Za-z0-9_.@-]{1,64}", student_id):
        raise ValueError(f"student_id={student_id!r} is not allowed; use 1 to 64 letters, digits, '_', '.', '@' or '-'")
    if not isinstance(assignment, str) or not assignment.strip():
        raise ValueError(f"assignment={assignment!r} must be a non-empty string")
    params = dict(params or {})
    for ex_id in [i for i in params if i not in _REGISTRY]:
        # A notebook built against a newer exercise set than this library: one line, not a traceback.
        print(f"{ex_id}: unknown exercise id, not in your copy of inferlab (the notebook is newer); update it (git "
              "pull, then make setup) to check that exercise")
        del params[ex_id]
    for ex_id, values in params.items():
        if not isinstance(values, Mapping):
            raise ValueError(f"params[{ex_id!r}]={values!r} must be a dict of parameter values")
        get(ex_id).with_params(**values)  # names the parameters, or says which is not the exercise's
    _STUDENT.clear()
    _STUDENT.update(student_id=student_id, assignment=assignment, params=params)


def _current(exercise_id: str) -> Exercise:
    """The exercise `check` compares with: this student's drawn parameters (set_student), else the registered one."""
    drawn = _STUDENT.get("params", {}).get(exercise_id)
    return get(exercise_id).with_params(**drawn) if drawn else get(exercise_id)


def check(exercise_id: str, answer) -> CheckResult:
    """Check `answer` for exercise `exercise_id`: prints PASS, or FAIL with a hint per wrong part
    (never the expected value), and returns the CheckResult. None or ... means 'no answer yet'.

    Attempts are counted, not silent: from the second answered check of an exercise on, the verdict says
    which attempt it is (so does its line in `summary()`). An id this library does not know (a notebook built
    against a newer exercise set) prints one line saying so and returns None. (Formative only: the grade
    is the submitted answer's, scored by the grader; a fresh kernel restarts the count.)"""
    if not isinstance(exercise_id, str) or exercise_id not in _REGISTRY:
        # A notebook built against a newer exercise set than this library: one line, not a traceback.
        print(f"{exercise_id}: unknown exercise id, not in your copy of inferlab (the notebook is newer); update "
              "it (git pull, then make setup) to check your answer")
        return None
    exercise = _current(exercise_id)
    payload = _to_jsonable(answer)
    result = _first_attempt_only(exercise, exercise.evaluate(payload)).public()
    if result.answered:
        _ATTEMPTS[exercise_id] = _ATTEMPTS.get(exercise_id, 0) + 1
        result = dataclasses.replace(result, attempt=_ATTEMPTS[exercise_id])
    _SESSION[exercise_id] = result
    print(result.message)
    return result


def _first_attempt_only(exercise: Exercise, result: CheckResult) -> CheckResult:
    """A binary prediction ('compute' or 'memory') says pass or fail on its first checked answer only;
    later checks repeat that first verdict, so trying both options teaches nothing. Formative only:
    the grader scores the submitted answer."""
    parts = []
    for part, r in zip(exercise.parts, result.parts):
        key = (exercise.id, part.name)
        if part.kind == "choice" and len(part.options) == 2 and r.status in ("pass", "fail"):
            if key in _FIRST:
                first = _FIRST[key]
                r = PartResult(part.name, first, "predict first: only your first answer is checked "
                               f"(it was {'right' if first == 'pass' else 'wrong'}); work out why")
            else:
                _FIRST[key] = r.status
        parts.append(r)
    return dataclasses.replace(result, parts=tuple(parts), score=exercise.weighted_score(parts),
                               hidden_score=exercise.weighted_score([r for r in parts if r.name in result.hidden]))


def summary() -> str:
    """This session's results so far: one line per exercise checked, and the total."""
    lines = [r.message.splitlines()[0] for r in _SESSION.values()]  # "(attempt N)" from the second on
    got, out_of = sum(r.score for r in _SESSION.values()), sum(r.points for r in _SESSION.values())
    lines.append(f"{sum(r.passed for r in _SESSION.values())} of {len(_SESSION)} checked exercises passed, "
                 f"{_fmt(got)}/{_fmt(out_of)} points")
    text = "\n".join(lines)
    print(text)
    return text

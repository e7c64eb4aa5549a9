"""Exercises written as data: a TOML entry instead of a module of Python.

An entry gives the question text, its parameters (the registered values and, under `vary`, the values a
student's variant is drawn from), its parts, each with its answer as a short expression over the parameters and
the library's quantities (`kv_cache_bytes(model, seq_len) / 1e9`), a tolerance, points, an optional hint and
optional `mistakes` (a slip's expression and its hint). The expression is parsed with `ast` and checked
against a whitelist (numbers, strings, the parameters, + - * / // % **, calls of the quantities in
`QUANTITIES`); it is evaluated by walking that tree, never by `eval`. A parameter named `model` or
`accelerator` holds a name and is resolved (`specs.get_model`, `specs.get_accelerator`) before the quantities
see it, as the generated solution cell does. Format: docs/exercises.md, "An exercise as data".

    [[exercise]]
    id = "15.1.2-ex6"
    kind = "recompute"
    points = 1
    title = "The weights of {model}"
    statement = "How many GB do the bf16 weights of `{model}` take? GB = 10⁹ bytes."
    params = { model = "llama-3-8b" }
    vary = { model = ["llama-3-8b", "mistral-7b", "llama-2-13b"] }
    [[exercise.parts]]
    name = "weights_gb"
    description = "the weights"
    unit = "GB"
    rel_tol = 0.01
    answer = "weight_bytes(model) / 1e9"
    [[exercise.mistakes]]
    part = "weights_gb"
    answer = "weight_bytes(model) / 2**30"
    hint = "GB are 10⁹ bytes, not GiB"
"""
from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import math
import operator
import tomllib
from dataclasses import dataclass
from pathlib import Path

from inferlab.exercises.core import (_EXPECTED, _MISTAKES, _REGISTRY, KINDS, LOW_WEIGHT, Exercise, ManualPart, Mistake,
                                     integer, letters, number, one_of, register, vary)

# name -> (module, function): what an answer may call. The quantities take objects; `resolve_params` turns
# the parameters `model` and `accelerator` into them first.
QUANTITIES = {
    "weight_bytes": ("inferlab.core.memory", "weight_bytes"),
    "kv_cache_bytes": ("inferlab.core.memory", "kv_cache_bytes"),
    "kv_cache_bytes_per_token": ("inferlab.core.memory", "kv_cache_bytes_per_token"),
    "max_batch": ("inferlab.core.memory", "max_batch"),
    "prefill_time_s": ("inferlab.core.latency", "prefill_time_s"),
    "decode_step_time_s": ("inferlab.core.latency", "decode_step_time_s"),
    "decode_step_rule_s": ("inferlab.core.latency", "decode_step_rule_s"),
    "kv_crossover_batch": ("inferlab.core.latency", "kv_crossover_batch"),
    "Precision": ("inferlab.core.specs", "Precision"),
    "ceil": ("math", "ceil"),
    "floor": ("math", "floor"),
    "min": ("builtins", "min"),
    "max": ("builtins", "max"),
    "abs": ("builtins", "abs"),
    "round": ("builtins", "round"),
}
RESOLVED = {"model": ("inferlab.core.specs", "get_model"), "accelerator": ("inferlab.core.specs", "get_accelerator")}
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}
ENTRY_KEYS = {"id", "kind", "points", "title", "statement", "params", "vary", "parts", "mistakes", "hint"}
PART_KEYS = {"name", "description", "kind", "unit", "rel_tol", "abs_tol", "options", "hint", "weight", "answer",
             "hidden"}
MANUAL_KEYS = {"name", "description", "manual", "points", "rubric"}  # a part graded by hand
MISTAKE_KEYS = {"part", "answer", "hint"}
SAMPLE_VARIANTS = 200  # `check_entry` solves at most this many variants (every one when there are fewer)


class ExerciseDataError(ValueError):
    """An exercise entry that cannot be used, with the entry, the field and what is allowed."""


# Expressions ------------------------------------------------------------------------------------------

def parse_answer(text: str, params, where: str) -> ast.Expression:
    """The expression's tree, after checking every node against the whitelist; ExerciseDataError names the
    first node or name that is not allowed."""
    if not isinstance(text, str) or not text.strip():
        raise ExerciseDataError(f"{where}: answer must be a non-empty expression string")
    if len(text) > 500:
        raise ExerciseDataError(f"{where}: answer is {len(text)} characters long; at most 500")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as err:
        raise ExerciseDataError(f"{where}: answer {text!r} is not an expression ({err.msg})") from None
    for node in ast.walk(tree):
        if isinstance(node, (ast.Expression, ast.Load, ast.keyword)) or type(node) in _BINARY or type(node) in _UNARY:
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str)) \
                and not isinstance(node.value, bool):
            continue
        if isinstance(node, (ast.BinOp, ast.UnaryOp)):
            continue
        if isinstance(node, ast.Name):
            if node.id not in params and node.id not in QUANTITIES:
                raise ExerciseDataError(
                    f"{where}: unknown quantity or parameter {node.id!r} in {text!r}; parameters: "
                    f"{', '.join(params) or 'none'}; quantities: {', '.join(sorted(QUANTITIES))}")
            continue
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in QUANTITIES:
                name = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)
                raise ExerciseDataError(f"{where}: unknown quantity {name!r} in {text!r}; quantities: "
                                        f"{', '.join(sorted(QUANTITIES))}")
            if any(k.arg is None for k in node.keywords):
                raise ExerciseDataError(f"{where}: ** arguments are not allowed in {text!r}")
            continue
        raise ExerciseDataError(f"{where}: {type(node).__name__} is not allowed in an answer ({text!r}); "
                                "use numbers, strings, the parameters, + - * / // % ** and calls of quantities")
    return tree


def _quantity(name: str):
    module, attr = QUANTITIES[name]
    return getattr(importlib.import_module(module), attr)


def evaluate(tree: ast.Expression, values: dict):
    """The value of a checked expression tree with the parameters bound to `values` (a tree walk, no eval)."""
    def walk(node):
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return values[node.id] if node.id in values else _quantity(node.id)
        if isinstance(node, ast.BinOp):
            left, right = walk(node.left), walk(node.right)
            if isinstance(node.op, ast.Pow) and abs(right) > 64:
                raise ExerciseDataError(f"exponent {right!r} too large (at most 64)")
            return _BINARY[type(node.op)](left, right)
        if isinstance(node, ast.UnaryOp):
            return _UNARY[type(node.op)](walk(node.operand))
        if isinstance(node, ast.Call):
            return _quantity(node.func.id)(*[walk(a) for a in node.args],
                                           **{k.arg: walk(k.value) for k in node.keywords})
        raise ExerciseDataError(f"{type(node).__name__} is not allowed")  # parse_answer let nothing else through
    return walk(tree)


def resolve_params(params: dict) -> dict:
    """The parameters with the `model` and `accelerator` names turned into their objects."""
    from inferlab.core.specs import get_accelerator, get_model
    out = dict(params)
    if "model" in out:
        out["model"] = get_model(out["model"])
    if "accelerator" in out:
        out["accelerator"] = get_accelerator(out["accelerator"])
    return out


def _value(raw):
    """A solved value as the parts take it: numpy scalars to floats, lists of letters to sets."""
    if hasattr(raw, "item") and callable(raw.item):
        raw = raw.item()
    return set(raw) if isinstance(raw, list) else raw


# Entries ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class DataSolution:
    """The solve function of a data exercise: its signature is the parameters; `source` is its solution cell's
    code (after the parameters), the same expressions `__call__` evaluates."""

    params: tuple
    answers: tuple  # (part name, tree, text)
    single: bool

    @property
    def __signature__(self):
        return inspect.Signature([inspect.Parameter(p, inspect.Parameter.POSITIONAL_OR_KEYWORD) for p in self.params])

    def __call__(self, *args, **kwargs):
        values = resolve_params(self.__signature__.bind(*args, **kwargs).arguments)
        out = {name: _value(evaluate(tree, values)) for name, tree, _ in self.answers}
        return next(iter(out.values())) if self.single else out

    def source(self, answer_name: str) -> str:
        """The solution cell's code after the parameters: imports, the resolved names, the answer."""
        imports: dict = {}
        for node in (n for _, tree, _ in self.answers for n in ast.walk(tree)):
            if isinstance(node, ast.Call) and QUANTITIES[node.func.id][0] != "builtins":
                imports.setdefault(QUANTITIES[node.func.id][0], set()).add(QUANTITIES[node.func.id][1])
        resolved = [p for p in self.params if p in RESOLVED]
        for p in resolved:
            imports.setdefault(RESOLVED[p][0], set()).add(RESOLVED[p][1])
        lines = [f"from {module} import {', '.join(sorted(names))}" for module, names in sorted(imports.items())]
        lines += [f"{p} = {RESOLVED[p][1]}({p})" for p in resolved]
        if self.single:
            return "\n".join(lines + [f"{answer_name} = {self.answers[0][2]}"])
        return "\n".join(lines + [f"{answer_name} = {{"] + [f"    {name!r}: {text}," for name, _, text in self.answers]
                         + ["}"])


def _unknown_keys(table: dict, allowed: set, where: str) -> None:
    extra = sorted(set(table) - allowed)
    if extra:
        raise ExerciseDataError(f"{where}: unknown key {extra[0]!r}; allowed: {', '.join(sorted(allowed))}")


def _values(spec, where: str) -> list:
    """A vary entry: a list of values, or {start, stop, step} (stop included)."""
    if isinstance(spec, list) and spec:
        return spec
    if isinstance(spec, dict):
        _unknown_keys(spec, {"start", "stop", "step"}, where)
        try:
            start, stop, step = spec["start"], spec["stop"], spec.get("step", 1)
        except KeyError as err:
            raise ExerciseDataError(f"{where}: a range needs start and stop (missing {err.args[0]!r})") from None
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, stop, step)) or step <= 0 \
                or stop < start:
            raise ExerciseDataError(f"{where}: a range takes integers start <= stop and step > 0, got {spec!r}")
        if (stop - start) // step + 1 > 10_000:
            raise ExerciseDataError(f"{where}: the range has more than 10,000 values")
        return list(range(start, stop + 1, step))
    raise ExerciseDataError(f"{where}: expected a non-empty list of values or {{start, stop, step}}, got {spec!r}")


def _part(table: dict, params, where: str, default_hint: str):
    _unknown_keys(table, PART_KEYS, where)
    for key in ("name", "description", "answer"):
        if not isinstance(table.get(key), str) or not table[key]:
            raise ExerciseDataError(f"{where}: {key} must be a non-empty string")
    kind = table.get("kind", "number")
    hint = table.get("hint", default_hint)
    weight = float(table.get("weight", 1.0 if kind in ("number", "integer") else LOW_WEIGHT))
    name, desc = table["name"], table["description"]
    hidden = table.get("hidden", False)
    if not isinstance(hidden, bool):
        raise ExerciseDataError(f"{where}: hidden={hidden!r} must be true or false")
    if kind == "number":
        rel_tol = table.get("rel_tol", 0.01)
        if not isinstance(rel_tol, (int, float)) or not 0 < rel_tol <= 0.1:
            raise ExerciseDataError(f"{where}: rel_tol={rel_tol!r} must be in (0, 0.1]")
        part = number(name, desc, table.get("unit", ""), rel_tol=float(rel_tol), hint=hint, weight=weight)
    elif kind == "integer":
        part = integer(name, desc, table.get("unit", ""), abs_tol=table.get("abs_tol", 0), hint=hint, weight=weight)
    elif kind in ("choice", "choices"):
        options = table.get("options")
        if not isinstance(options, (list, str)) or len(options) < 2:
            raise ExerciseDataError(f"{where}: a {kind} part needs options (a list of at least two)")
        part = (one_of if kind == "choice" else letters)(name, desc, options, hint=hint, weight=weight)
    else:
        raise ExerciseDataError(f"{where}: kind={kind!r} is not one of number, integer, choice, choices")
    return dataclasses.replace(part, hidden=hidden), parse_answer(table["answer"], params, f"{where} answer")


def _manual_part(table: dict, where: str) -> ManualPart:
    """A part graded by hand: `manual = true`, a name, a description, its points and the rubric."""
    _unknown_keys(table, MANUAL_KEYS, where)
    if table["manual"] is not True:
        raise ExerciseDataError(f"{where}: manual={table['manual']!r} must be true (or leave the field out)")
    for key in ("name", "description", "rubric"):
        if not isinstance(table.get(key), str) or not table[key].strip():
            raise ExerciseDataError(f"{where}: {key} must be a non-empty string (a part graded by hand)")
    points = table.get("points")
    if not isinstance(points, (int, float)) or isinstance(points, bool) or not 0 < points <= 10:
        raise ExerciseDataError(f"{where}: points={points!r} must be a number in (0, 10] (a part graded by hand)")
    return ManualPart(table["name"], table["description"], float(points), table["rubric"].strip())


def exercise_from_entry(entry: dict, where: str = "exercise") -> Exercise:
    """The Exercise of one TOML entry (ExerciseDataError on a field that is missing, unknown or not allowed)."""
    if not isinstance(entry, dict):
        raise ExerciseDataError(f"{where}: expected a table")
    where = f"{where} {entry.get('id', '(no id)')!s}"
    _unknown_keys(entry, ENTRY_KEYS, where)
    for key in ("id", "title", "statement", "kind"):
        if not isinstance(entry.get(key), str) or not entry[key].strip():
            raise ExerciseDataError(f"{where}: {key} must be a non-empty string")
    if entry["kind"] not in KINDS:
        raise ExerciseDataError(f"{where}: kind={entry['kind']!r} is not one of {', '.join(KINDS)}")
    points = entry.get("points")
    if not isinstance(points, int) or isinstance(points, bool) or not 1 <= points <= 10:
        raise ExerciseDataError(f"{where}: points={points!r} must be an integer from 1 to 10")
    params = entry.get("params", {})
    if not isinstance(params, dict):
        raise ExerciseDataError(f"{where}: params must be a table of parameter values")
    clash = sorted(set(params) & set(QUANTITIES))
    if clash:
        raise ExerciseDataError(f"{where}: parameter {clash[0]!r} has the name of a quantity; rename it")
    parts_spec = entry.get("parts")
    if not isinstance(parts_spec, list) or not parts_spec:
        raise ExerciseDataError(f"{where}: needs at least one [[exercise.parts]]")
    manual = tuple(_manual_part(p, f"{where} part {i + 1}") for i, p in enumerate(parts_spec)
                   if isinstance(p, dict) and p.get("manual") is not None)
    parts_spec = [p for p in parts_spec if not (isinstance(p, dict) and p.get("manual") is not None)]
    if not parts_spec:
        raise ExerciseDataError(f"{where}: needs at least one part the grader checks (manual parts come beside one)")
    built = [_part(p, params, f"{where} part {i + 1}", entry.get("hint", "")) for i, p in enumerate(parts_spec)]
    parts = tuple(p for p, _ in built)
    solution = DataSolution(tuple(params), tuple((p.name, tree, parts_spec[i]["answer"].strip())
                                                 for i, (p, tree) in enumerate(built)), len(parts) == 1)
    slips = []
    for i, m in enumerate(entry.get("mistakes", [])):
        w = f"{where} mistake {i + 1}"
        _unknown_keys(m, MISTAKE_KEYS, w)
        names = [p.name for p in parts]
        part = m.get("part", names[0] if len(names) == 1 else None)
        if part not in names:
            raise ExerciseDataError(f"{w}: part={part!r} is not one of {', '.join(names)}")
        if not isinstance(m.get("hint"), str) or not m["hint"]:
            raise ExerciseDataError(f"{w}: hint must be a non-empty string")
        slips.append((part, parse_answer(m.get("answer"), params, f"{w} answer"), m["hint"]))

    def mistakes(**values):
        resolved = resolve_params(values)
        return [Mistake(_value(evaluate(tree, resolved)), hint, part) for part, tree, hint in slips]

    options = tuple((name, tuple(_values(spec, f"{where} vary.{name}")))
                    for name, spec in entry.get("vary", {}).items())
    unknown = [n for n, _ in options if n not in params]
    if unknown:
        raise ExerciseDataError(f"{where}: vary.{unknown[0]} is not a parameter; parameters: {', '.join(params)}")
    try:
        return Exercise(id=entry["id"], title=entry["title"], kind=entry["kind"], points=points, params=params,
                        parts=parts, statement=entry["statement"], solve=solution,
                        mistakes=mistakes if slips else None, vary=vary(*options) if options else None,
                        manual=manual)
    except ValueError as err:  # the section, a duplicate part name
        raise ExerciseDataError(f"{where}: {err}") from None


def load(path) -> list[Exercise]:
    """The exercises of a TOML file (`[[exercise]]` entries), checked for form; not registered."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            doc = tomllib.load(fh)
    except FileNotFoundError:
        raise ExerciseDataError(f"exercises file {str(path)!r} does not exist") from None
    except tomllib.TOMLDecodeError as err:
        raise ExerciseDataError(f"{path}: not valid TOML ({err})") from None
    _unknown_keys(doc, {"exercise"}, str(path))
    out = [exercise_from_entry(e, str(path)) for e in doc.get("exercise", [])]
    ids = [e.id for e in out]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise ExerciseDataError(f"{path}: exercise id {dup[0]!r} appears more than once")
    return out


def sample_params(exercise: Exercise, limit: int = SAMPLE_VARIANTS) -> list[dict]:
    """Every variant's parameters when there are at most `limit`, else `limit` of them spread evenly."""
    if exercise.vary is None:
        return [dict(exercise.params)]
    combos = exercise.vary.combinations()
    step = max(1, math.ceil(len(combos) / limit))
    return combos[::step]


def check_entry(exercise: Exercise) -> list[str]:
    """What stops an exercise from being handed out (empty: it can be): an answer that cannot be solved, or is
    not a positive finite number, for a sampled variant; a slip equal to the answer; a part worth more than
    LOW_WEIGHT whose answer is the same in every variant."""
    problems = []
    sampled = sample_params(exercise)
    for params in sampled:
        ex = exercise.with_params(**params)
        try:
            expected = ex.expected()
            slips = ex.known_mistakes()
        except Exception as err:  # noqa: BLE001 - any failure of the instructor's expression is reported
            problems.append(f"{exercise.id} {params}: cannot be solved ({type(err).__name__}: {err})")
            continue
        for name, value in expected.items():
            if isinstance(value, float) and not value > 0:
                problems.append(f"{exercise.id} {params}: part {name!r} is {value!r}, not a positive number")
        for slip in slips:
            if ex.evaluate({slip.part: slip.value} if not ex.single else slip.value).parts[
                    [p.name for p in ex.parts].index(slip.part)].status == "pass":
                problems.append(f"{exercise.id} {params}: the mistake {slip.hint!r} gives the right answer of "
                                f"part {slip.part!r}")
    if problems:
        return problems[:10]
    for name in _invariant(exercise, sampled):
        if exercise._part(name).weight > LOW_WEIGHT:
            problems.append(f"{exercise.id}: part {name!r} has the same answer in every variant; add a `vary` entry "
                            f"for a parameter it depends on, or give it weight = {LOW_WEIGHT} (a classmate's answer "
                            "earns it)")
    return problems


def _invariant(exercise: Exercise, sampled: list) -> list[str]:
    """The parts whose answer is the same in every sampled variant (numbers to 9 decimals)."""
    seen = {p.name: set() for p in exercise.parts}
    for params in sampled:
        for name, value in exercise.with_params(**params).expected().items():
            seen[name].add(round(value, 9) if isinstance(value, float) else value)
    return [name for name, values in seen.items() if len(values) == 1]


def register_file(path, *, replace: bool = False) -> list[Exercise]:
    """Load, check and register the exercises of `path`; ExerciseDataError lists what stops them. An id already
    registered is refused unless `replace` (a file read twice)."""
    loaded = load(path)
    problems = [p for e in loaded for p in check_entry(e)]
    if problems:
        raise ExerciseDataError(f"{path}: " + "; ".join(problems))
    for e in loaded:
        if e.id in _REGISTRY and not replace:
            raise ExerciseDataError(f"{path}: exercise id {e.id!r} is already registered (pick another number)")
        register(e)
    return loaded


ENV_VAR = "INFERLAB_EXERCISES"


def course_files() -> list[Path]:
    """The exercise files registered on import: data/exercises.toml where the data folder is found, then each
    file named in INFERLAB_EXERCISES."""
    import os

    from inferlab.core.specs import data_dir
    try:
        default = [data_dir() / "exercises.toml"]
    except (FileNotFoundError, OSError, ValueError):
        default = []
    named = [Path(p) for p in os.environ.get(ENV_VAR, "").split(os.pathsep) if p]
    return [p for p in default if p.is_file()] + named


def register_course_files() -> list[Exercise]:
    """Register `course_files()` (a file read twice registers once)."""
    out, seen = [], set()
    for path in course_files():
        if path.resolve() not in seen:
            seen.add(path.resolve())
            out += register_file(path, replace=True)
    return out


def unregister(exercises) -> None:
    """Remove exercises registered from a file (tests)."""
    for e in exercises:
        _REGISTRY.pop(e.id, None)
        for cache in (_EXPECTED, _MISTAKES):
            for key in [k for k in cache if k[0] == e.id]:
                del cache[key]


__all__ = ["QUANTITIES", "ExerciseDataError", "parse_answer", "evaluate", "load", "check_entry", "register_file",
           "unregister", "exercise_from_entry", "sample_params"]

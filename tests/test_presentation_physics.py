"""Nothing recomputes physics outside `core`: the pages' modules (lib/inferlab/notebook) draw and format
the numbers core computes. Their source is read (AST) for two things:

1. arithmetic on a model's or an accelerator's field (`model.n_layers * ...`, `... / acc.hbm_bytes_per_s`):
   a formula written again beside the one in core. A unit conversion at display (a field divided or
   multiplied by a unit: GB, MS, TFLOP, 1e9, ...) is formatting and passes; anything else must be an
   entry of ALLOWED, with its reason;
2. a second copy of a core formula: any expression of three or more operators in a page module whose
   shape (operators, constants and field names, with variable names wiped) is an expression of core.
Each check is first run on a made-up source that breaks it, so that the check itself can fail."""
from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from inferlab.core.specs import Accelerator, ModelConfig

LIB = Path(__file__).resolve().parents[1] / "lib" / "inferlab"
PAGES = LIB / "notebook"
CORE = LIB / "core"

# Page modules whose numbers are being moved into core on their own branch (issue 59, item 2: the cheat
# sheet and the interview answers, with a test that renders them and fails when one quantity shows two
# values). Each leaves this list when that branch lands; until then this test does not read them.
NOT_YET_READ = {
    "cheatsheet.py": "the cheat sheet's numbers move into core with the consistency test of issue 59, item 2",
    "interview.py": "the interview answers' numbers move into core with the consistency test of issue 59, item 2",
}

# (module, function, expression as ast.unparse writes it): pure display, with the reason.
ALLOWED = {
    ("diagrams.py", "kv_cache_sizes", "model.head_dim * b"):
        "the KV diagram labels each factor of C_kv = 2 L n_kv d_h b: this is the d_h x b box, one head's "
        "key per token, drawn; the total comes from memory.kv_cache_bytes_per_token",
}

# Whole contexts of pure display, with the reason: (module, the call whose lambda arguments are skipped).
DISPLAY_CALLS = {
    ("equations.py", "Part"):
        "each Part's lambda is one of the chapter's equations worked in plain sight from the symbols a "
        "notebook substitutes (2 P B S / peak with the reader's numbers), the library's own value shown "
        "beside it (`worked(..., library=...)`, tests/test_equations.py): the teaching, not a computation "
        "a page relies on",
}

UNIT_NAMES = {"GB", "MB", "KB", "MS", "US", "TFLOP", "PFLOP", "GIB", "MIB"}
UNIT_CONSTANTS = {1e3, 1e6, 1e9, 1e12, 1e15, 1e-3, 1e-6, 1e-9, 100}


def _numeric_fields() -> set:
    """The fields and properties of ModelConfig and Accelerator that hold numbers."""
    out = set()
    for cls in (ModelConfig, Accelerator):
        out |= {f.name for f in dataclasses.fields(cls) if "str" not in str(f.type) and "dict" not in str(f.type)}
        out |= {name for name, v in vars(cls).items() if isinstance(v, property)}
    return out - {"attention_kind", "layer_kinds", "layer_types", "family", "name"}


FIELDS = _numeric_fields()


def _is_unit(node) -> bool:
    if isinstance(node, ast.Name):
        return node.id.upper() in UNIT_NAMES
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and node.value in UNIT_CONSTANTS


def _field(node) -> bool:
    return isinstance(node, ast.Attribute) and node.attr in FIELDS


class _Scopes(ast.NodeVisitor):
    """Every BinOp with the name of the function (or class.function) it sits in."""

    def __init__(self):
        self.stack, self.found = [], []

    def _scoped(self, node):
        self.stack.append(node.name)
        self.generic_visit(node)
        self.stack.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scoped

    def visit_BinOp(self, node):
        self.found.append((".".join(self.stack) or "<module>", node))
        self.generic_visit(node)


def _parse(source: str, module: str) -> ast.Module:
    """The module's tree without the lambda arguments of its DISPLAY_CALLS."""
    tree = ast.parse(source)
    calls = {call for mod, call in DISPLAY_CALLS if mod == module}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in calls:
            node.args = [ast.Constant(None) if isinstance(a, ast.Lambda) else a for a in node.args]
            for kw in node.keywords:
                if isinstance(kw.value, ast.Lambda):
                    kw.value = ast.Constant(None)
    return tree


def field_arithmetic(source: str, module: str) -> list[str]:
    """'module:line function: expression' for each BinOp on a model or accelerator field that is
    neither a unit conversion nor in ALLOWED."""
    scopes = _Scopes()
    scopes.visit(_parse(source, module))
    out = []
    for scope, node in scopes.found:
        sides = (node.left, node.right)
        if not any(_field(s) for s in sides):
            continue
        if isinstance(node.op, (ast.Div, ast.Mult)) and any(_is_unit(s) for s in sides):
            continue       # a unit conversion at display
        text = ast.unparse(node)
        if (module, scope.split(".")[-1], text) in ALLOWED:
            continue
        out.append(f"{module}:{node.lineno} {scope}: {text}")
    return out


class _Wipe(ast.NodeTransformer):
    """Variable names become '_' (a formula is the same whatever its variables are called); field
    names, constants and operators stay."""

    def visit_Name(self, node):
        return ast.copy_location(ast.Name("_", ast.Load()), node)

    def visit_Attribute(self, node):
        if node.attr in FIELDS:
            return ast.copy_location(ast.Attribute(ast.Name("_", ast.Load()), node.attr, ast.Load()), node)
        return ast.copy_location(ast.Name("_", ast.Load()), node)

    def visit_Call(self, node):   # a call is a value computed elsewhere: one opaque operand
        return ast.copy_location(ast.Name("_", ast.Load()), node)


def _operators(node) -> int:
    return sum(isinstance(n, ast.BinOp) for n in ast.walk(node))


def formula_shapes(source: str, module: str = "") -> dict:
    """{wiped expression: original} of every top-level BinOp of three or more operators."""
    out = {}
    for node in ast.walk(_parse(source, module)):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.BinOp) and not isinstance(node, ast.BinOp) and _operators(child) >= 3:
                wiped = ast.unparse(_Wipe().visit(ast.parse(ast.unparse(child), mode="eval")))
                if wiped.count("_") > 1:      # at least two operands from outside
                    out[wiped] = ast.unparse(child)
    return out


def _core_shapes() -> dict:
    out = {}
    for path in sorted(CORE.rglob("*.py")):
        for shape, text in formula_shapes(path.read_text()).items():
            out.setdefault(shape, f"{path.relative_to(LIB)}: {text}")
    return out


def _pages():
    return [p for p in sorted(PAGES.glob("*.py")) if p.name not in NOT_YET_READ]


# --- the checks fail on sources that break the rule ------------------------------------------------

BROKEN = '''
def ttft_floor(model, acc, precision):
    kv = 2 * model.n_layers * model.n_kv_heads * model.head_dim * 2      # C_kv again, by hand
    return weight_bytes(model, precision) / acc.hbm_bytes_per_s          # M / BW again
'''


def test_field_arithmetic_is_found_in_a_source_that_does_it():
    found = field_arithmetic(BROKEN, "made_up.py")
    assert any("weight_bytes(model, precision) / acc.hbm_bytes_per_s" in f for f in found)
    assert any("2 * model.n_layers" in f for f in found)


def test_a_unit_conversion_and_an_allowed_entry_pass():
    ok = "def f(acc, model, b):\n    return acc.memory_bytes / GB, acc.hbm_bytes_per_s / 1e12, model.head_dim * b\n"
    assert field_arithmetic(ok, "made_up.py") == ["made_up.py:2 f: model.head_dim * b"]
    assert field_arithmetic(ok, "diagrams.py").__len__() == 1          # ALLOWED names its function too
    assert field_arithmetic(ok.replace("def f", "def kv_cache_sizes"), "diagrams.py") == []


def test_a_second_copy_of_a_core_formula_is_found():
    copied = "def pairs_again(q, p):\n    return q * p + q * (q + 1) / 2\n"      # core.attention.causal_pairs
    assert set(formula_shapes(copied)) & set(_core_shapes())
    renamed = "def f(new, cached):\n    return new * cached + new * (new + 1) / 2\n"
    assert set(formula_shapes(renamed)) & set(_core_shapes())                    # names do not hide it
    shown = "X = Part('pairs', 'q p + q(q+1)/2', lambda q, p: q * p + q * (q + 1) / 2)\n"
    assert set(formula_shapes(shown)) & set(_core_shapes())                      # outside equations.py: found
    assert not set(formula_shapes(shown, "equations.py")) & set(_core_shapes())  # a worked equation there


# --- the pages ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", _pages(), ids=lambda p: p.name)
def test_pages_do_no_arithmetic_on_model_or_accelerator_fields(path):
    assert field_arithmetic(path.read_text(), path.name) == []


@pytest.mark.parametrize("path", _pages(), ids=lambda p: p.name)
def test_pages_hold_no_copy_of_a_core_formula(path):
    core = _core_shapes()
    copies = [f"{text}  (core: {core[shape]})" for shape, text in formula_shapes(path.read_text(), path.name).items()
              if shape in core]
    assert copies == []


def test_every_allowed_entry_is_still_in_the_code():
    """A stale entry would let a new formula of the same text through unseen."""
    for (module, function, text), reason in ALLOWED.items():
        assert reason.strip()
        scopes = _Scopes()
        scopes.visit(ast.parse((PAGES / module).read_text()))
        assert any(s.split(".")[-1] == function and ast.unparse(n) == text for s, n in scopes.found), (module, text)

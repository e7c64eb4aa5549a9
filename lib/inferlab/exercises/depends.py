"""Which cells of a submitted notebook the graded exercises depend on: the grader runs those and skips the rest
of the lecture (its figures and tables change no answer).

A cell is needed when it is an exercise cell (a check cell or its answer cell), or when a needed cell uses a name
it may set. Conservative, by names only (the source is parsed, never run):

- a cell *sets* every name it binds anywhere (assignments, imports, `def`, `for`, `with ... as`, `del`), the base
  name of every attribute or item it stores to (`d["k"] = 1`, `obj.x = 1`, `x += 1`), every name it passes to a
  call (`fill(lst)` may change `lst`), the object of every method call (`lst.append(1)`, `rng.normal()`) and, for
  a call made as a statement (`np.random.seed(0)`, `register(...)`), the name it calls through;
- a cell *uses* every name it reads (in its functions too) that it did not bind earlier in its own top-level
  code, and every name it imports (a module's state outlives a re-import);
- a cell the analysis cannot see through is *opaque*: it does not parse (IPython magics, a syntax error), or it
  uses `global`, `from m import *`, exec/eval/globals/locals/vars/setattr/__import__/get_ipython/open/compile,
  or an underscore attribute (`obj.__dict__`). An opaque cell before the last check cell is always run, and so
  is every cell before a needed opaque cell.

Cells after the last check cell never run: the grader reads each answer right after its check cell.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass

OPAQUE_CALLS = frozenset({"exec", "eval", "globals", "locals", "vars", "setattr", "delattr", "__import__",
                          "get_ipython", "open", "compile", "input", "breakpoint", "execfile", "runpy"})


class _Cell(ast.NodeVisitor):
    """The names one cell sets and uses, and whether it is opaque."""

    def __init__(self):
        self.sets: set = set()
        self.uses: set = set()
        self.mutates: set = set()  # names whose object is changed in place: `m.x = 1`, `m.a.f(...)` as a statement
        self.opaque = False

    def visit_Name(self, node):
        (self.sets if isinstance(node.ctx, (ast.Store, ast.Del)) else self.uses).add(node.id)

    @staticmethod
    def _base(node):
        """The name at the root of `a.b[c].d` (None for anything else, a call's result included)."""
        while isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        return node.id if isinstance(node, ast.Name) else None

    def visit_Attribute(self, node):
        if node.attr.startswith("_"):
            self.opaque = True
        if isinstance(node.ctx, (ast.Store, ast.Del)) and self._base(node):
            self.sets.add(self._base(node))
            self.mutates.add(self._base(node))
        self.generic_visit(node)

    def visit_Subscript(self, node):
        if isinstance(node.ctx, (ast.Store, ast.Del)) and self._base(node):
            self.sets.add(self._base(node))
            self.mutates.add(self._base(node))
        self.generic_visit(node)

    def visit_Call(self, node):
        if isinstance(node.func, ast.Name) and node.func.id in OPAQUE_CALLS:
            self.opaque = True
        if isinstance(node.func, ast.Attribute) and self._base(node.func):
            self.sets.add(self._base(node.func))  # a method may change its object
            if isinstance(node.func.value, (ast.Attribute, ast.Subscript)):
                self.mutates.add(self._base(node.func))  # `np.random.seed(0)`: a module's state
        for arg in [*node.args, *(k.value for k in node.keywords)]:
            if isinstance(arg, ast.Starred):
                arg = arg.value
            if self._base(arg):
                self.sets.add(self._base(arg))
        self.generic_visit(node)

    def visit_Expr(self, node):
        if isinstance(node.value, ast.Call) and self._base(node.value.func):
            self.sets.add(self._base(node.value.func))  # called for its effect
        self.generic_visit(node)

    def visit_AugAssign(self, node):
        if self._base(node.target):
            self.sets.add(self._base(node.target))
            self.mutates.add(self._base(node.target))
        self.generic_visit(node)

    def visit_Import(self, node):
        self.sets |= _binds(node)

    def visit_ImportFrom(self, node):
        if any(alias.name == "*" for alias in node.names):
            self.opaque = True
        self.sets |= _binds(node)

    def visit_FunctionDef(self, node):
        self.sets.add(node.name)
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node):
        self.sets.add(node.name)
        self.generic_visit(node)

    def visit_Global(self, node):
        self.opaque = True

    visit_Nonlocal = visit_Global


@dataclass(frozen=True)
class CellNames:
    """What one code cell may set, uses from earlier cells, imports and changes in place; opaque: not analysable."""

    sets: frozenset
    uses: frozenset
    imports: frozenset
    mutates: frozenset
    opaque: bool


OPAQUE = CellNames(frozenset(), frozenset(), frozenset(), frozenset(), True)


def analyse(source: str) -> CellNames:
    """The names of one code cell's source (parsed, never run)."""
    try:
        tree = ast.parse(source)
        whole = _Cell()
        whole.visit(tree)
        free, bound = set(), set()
        for stmt in tree.body:  # a name the cell binds before it reads it does not come from an earlier cell
            one = _Cell()
            one.visit(stmt)
            free |= one.uses - bound - _scoped(stmt)
            bound |= _binds(stmt)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return OPAQUE
    imports = {name for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
               for name in _binds(node)}
    return CellNames(frozenset(whole.sets), frozenset(free), frozenset(imports), frozenset(whole.mutates),
                     whole.opaque)


def _scoped(stmt) -> set:
    """Names local to a scope inside the statement: comprehension targets, parameters, a function's own
    assignments (`global` makes the cell opaque)."""
    out = set()
    for node in ast.walk(stmt):
        if isinstance(node, ast.comprehension):
            out |= {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.arg):
            out.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            out |= {n.id for body in ([node.body] if isinstance(node, ast.Lambda) else node.body)
                    for n in ast.walk(body) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return out


def _binds(stmt) -> set:
    """The names a top-level statement binds: assigned names, imports, `def` and `class` names."""
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return {a.asname or a.name.split(".")[0] for a in stmt.names if a.name != "*"}
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {stmt.name}
    return {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def cells_to_run(sources: list, exercise_cells) -> set[int]:
    """The indices of the code cells to run: `sources` holds each cell's source (None for a markdown cell),
    `exercise_cells` the check cells and their answer cells. Everything else is skipped."""
    exercise_cells = {int(i) for i in exercise_cells}
    if not exercise_cells:
        return set()
    last = max(exercise_cells)
    code = {i: str(s) for i, s in enumerate(sources[:last + 1]) if s is not None and str(s).strip()}
    info = {i: analyse(s) for i, s in code.items()}
    needed = {i for i in exercise_cells if i in code} | {i for i, names in info.items() if names.opaque}
    pending = sorted(needed)
    while pending:
        i = pending.pop()
        mine = info[i]
        earlier = [j for j in code if j < i and j not in needed
                   and (mine.opaque or info[j].sets & mine.uses or info[j].mutates & mine.imports)]
        needed.update(earlier)
        pending.extend(earlier)
    return needed

"""Notebook cells for the exercises, as jupytext py:percent text.

Per exercise: a markdown statement (units, tolerance), a solution cell whose first line is
`# SOLUTION`, and a check cell. The solution cell is the body of the
exercise's `solve` function with its parameters assigned first, so the notebook runs exactly the
code the checker runs. `build-student` replaces solution cells with an empty answer.
"""
from __future__ import annotations

import ast
import inspect
import textwrap

from inferlab.exercises.core import SECTIONS, Exercise, exercises

SOLUTION_MARK = "# SOLUTION"
JUPYTEXT_HEADER = """\
# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---
"""


def solution_source(exercise: Exercise) -> str:
    """The solution cell's code: parameters, then `solve`'s body with `return X` turned into `exN = X` (an
    exercise written as data gives its own code: `data.DataSolution.source`)."""
    if callable(getattr(exercise.solve, "source", None)):
        params = [f"{k} = {_literal(v)}" for k, v in exercise.params.items()]
        return "\n".join([SOLUTION_MARK, f"# parameters of {exercise.id}", *params, "",
                          exercise.solve.source(exercise.answer_name), exercise.answer_name])
    src = textwrap.dedent(inspect.getsource(exercise.solve))
    fn = ast.parse(src).body[0]
    body = fn.body
    if isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        body = body[1:]  # the docstring
    ret = body[-1]
    if not isinstance(ret, ast.Return) or any(isinstance(n, ast.Return) for s in body[:-1] for n in ast.walk(s)):
        raise ValueError(f"{exercise.id}: solve() must end with its only return statement")
    lines = src.splitlines()
    start = body[0].lineno - 1
    while start - 1 > fn.lineno - 1 and lines[start - 1].strip().startswith("#"):
        start -= 1  # keep the comments that open the body
    code = textwrap.dedent("\n".join(lines[start:ret.end_lineno])).splitlines()
    first = ret.lineno - 1 - start
    code[first] = code[first].replace("return ", f"{exercise.answer_name} = ", 1)
    params = [f"{k} = {_literal(v)}" for k, v in exercise.params.items()]
    return "\n".join([SOLUTION_MARK, f"# parameters of {exercise.id}", *params, "", *code,
                      exercise.answer_name])


def _literal(value) -> str:
    """Python source for a parameter value, with double quotes like the rest of the code."""
    text = repr(value)
    return text.replace("'", '"') if '"' not in text and "\\" not in text else text


def _markdown(text: str) -> str:
    return "# %% [markdown]\n" + "\n".join(f"# {line}" if line else "#" for line in text.splitlines())


def _code(source: str) -> str:
    # No cell metadata: the project's jupytext.toml keeps text notebooks free of it, so the
    # solution marker is the cell's first line.
    return "# %%\n" + source


def statement_markdown(exercise: Exercise) -> str:
    pts = f"{exercise.points} point{'s' if exercise.points != 1 else ''}"
    return (f"### Exercise {exercise.id}: {exercise.heading()}\n"
            f"*{exercise.kind.capitalize()} · {pts}*\n\n{exercise.text()}")


def exercise_cells(section: str, *, heading: bool = True) -> list[str]:
    """The py:percent cells of a section's exercises: optionally a heading and the import of
    `check`, then per exercise the statement, the solution cell and the check cell, and a Markdown
    cell for the answer to each part graded by hand."""
    items = exercises(section)
    cells = []
    if heading:
        total = sum(e.points for e in items)
        # what applies in JupyterLab only, and what the web page says instead (book/convert.py)
        intro = textwrap.fill(
            f"{len(items)} exercises ({total} points), from recomputing a number to a design question. "
            "<!-- lab -->Put your answer in the cell under each statement and run the check below it: it says "
            "PASS, or FAIL with a hint; it never shows the expected value.<!-- /lab --><!-- web: In JupyterLab "
            "(`make lab`) each statement has a cell for your answer and a check under it that says PASS, or FAIL "
            "with a hint, never the expected value; on this page each check shows its hints. --> Tolerances are "
            "relative unless stated; GB means 10⁹ bytes.", width=100, break_on_hyphens=False)
        cells.append(_markdown(f"## Exercises\n\n{intro}"))
        cells.append(_code("from inferlab.exercises import check"))
    for e in items:
        cells.append(_markdown(statement_markdown(e)))
        cells.append(_code(solution_source(e)))
        cells.append(_code(f'check("{e.id}", {e.answer_name});'))
        for m in e.manual:  # a part graded by hand: the student's own Markdown cell, under the check
            cells.append(_markdown(f"**{e.id}, `{m.name}`, graded by hand** ({m.points:g} point"
                                   f"{'s' if m.points != 1 else ''}): write your answer here, in place of this line."))
    return cells


def exercise_section(section: str, *, heading: bool = True) -> str:
    """The cells of `exercise_cells` as one block of text, ready to append to a py:percent notebook."""
    return "\n\n".join(exercise_cells(section, heading=heading)) + "\n"


def sample_notebook_text(sections=tuple(SECTIONS)) -> str:
    """The instructor sample notebook (`python -m inferlab.exercises sample OUT.py`): every exercise of `sections`."""
    intro = _markdown("# Classroom sample: the exercises, instructor version\n\n" + textwrap.fill(
        "Every exercise of the companion, as the chapter notebooks carry them at their end. Cells whose first "
        f"line is `{SOLUTION_MARK}` are solutions: `python -m inferlab.exercises build-student` replaces them "
        "with an empty answer and clears their outputs; the statements and the check cells stay. "
        "Generated by `python -m inferlab.exercises sample OUT.py`; do not edit by hand.",
        width=100))
    parts = [JUPYTEXT_HEADER.rstrip("\n"), intro, _code("from inferlab.exercises import check")]
    for section in sections:
        parts.append(_markdown(f"## {section} {SECTIONS[section]}"))
        parts.extend(exercise_cells(section, heading=False))
    return "\n\n".join(parts) + "\n"

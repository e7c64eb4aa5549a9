"""An exercise's solution cell never rebinds a name the lecture uses: after Run All (or after running the
exercises), re-running any lecture cell finds the lecture's own objects (15.1.2's exercise 3 once rebound
the `costs` module to a number). Checked on the chapter sources: names bound at the top level of an
exercise cell against names bound or read in the lecture's cells (an import of the same object is no clash)."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

CHAPTERS = Path(__file__).resolve().parents[1] / "chapters"
NOTEBOOKS = ["15_1_1_prefill", "15_1_2_decode_kv_cache", "15_2_1_ttft_itl", "15_2_2_batching"]


def cells(text: str) -> list[tuple[str, str]]:
    """(header, source) of each py:percent cell."""
    parts = re.split(r"^# %%(.*)$", text, flags=re.M)
    return [(parts[i].strip(), parts[i + 1]) for i in range(1, len(parts), 2)]


def _tree(source: str) -> ast.Module:
    return ast.parse("\n".join(line for line in source.splitlines() if not line.lstrip().startswith("%")))


def top_level_bindings(source: str) -> dict[str, str]:
    """{name: what binds it} for the names a cell binds at module level; an import's value is the
    object's dotted path, anything else "value"."""
    out = {}
    for node in _tree(source).body:
        if isinstance(node, ast.Import):
            for a in node.names:
                out[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            for a in node.names:
                out[a.asname or a.name] = f"{node.module}.{a.name}"
        else:
            for sub in ast.walk(node):
                if isinstance(sub, (ast.comprehension, ast.Lambda, ast.FunctionDef)):
                    break
                if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                    out[sub.id] = "value"
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                out[node.name] = "value"
    return out


def names_read(source: str) -> set[str]:
    return {n.id for n in ast.walk(_tree(source)) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def clashes(text: str) -> dict[str, int]:
    """{name: index of the exercise cell} for exercise bindings that collide with the lecture's names."""
    cs = cells(text)
    start = next(i for i, (h, s) in enumerate(cs) if "markdown" in h and re.search(r"^# ## Exercises", s, re.M))
    end = next((i for i, (h, s) in enumerate(cs) if i > start and "markdown" in h
                and re.search(r"^# ## (?!Exercise)", s, re.M)), len(cs))
    lecture_binds, lecture_reads, exercise = {}, set(), {}
    for i, (h, src) in enumerate(cs):
        if "markdown" in h:
            continue
        if start < i < end:
            for name, what in top_level_bindings(src).items():
                exercise.setdefault(name, (what, i))
        else:
            lecture_binds.update(top_level_bindings(src))
            lecture_reads |= names_read(src)
    out = {}
    for name, (what, i) in exercise.items():
        if name in lecture_binds and what != "value" and lecture_binds[name] == what:
            continue                      # the same import on both sides
        if name in lecture_binds or (name in lecture_reads and what == "value"):
            out[name] = i
        elif name in lecture_reads and name not in lecture_binds:
            out[name] = i                 # a lecture name an exercise import would shadow
    return out


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_exercises_never_rebind_a_lecture_name(name):
    assert clashes((CHAPTERS / f"{name}.py").read_text()) == {}


def test_the_costs_module_rebound_by_an_exercise_is_named():
    """Planted defect: 15.1.2's exercise 3 binding `costs` to its decode costs, as it once did."""
    text = (CHAPTERS / "15_1_2_decode_kv_cache.py").read_text()
    planted = text.replace("step_costs = decode_costs(", "costs = decode_costs(", 1)
    assert planted != text
    assert "costs" in clashes(planted)
    # and an exercise that imports the object the lecture imports is no clash
    same = text.replace("# SOLUTION\n", "# SOLUTION\nfrom inferlab.core import memory\n", 1)
    assert clashes(same) == {}

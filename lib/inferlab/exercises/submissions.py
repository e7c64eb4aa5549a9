"""What is submitted and what of it is graded, read before anything runs: the students and their notebooks
(`collect`), the check cells of a notebook and the answer cells they read (`check_plan`), the cells no
graded answer depends on (`skipped_cells`), and the assignment's exercises (`assignment_exercises`).

Submissions: a notebook file is one student (its file stem is the student id); in a folder, each
notebook is a student and each sub-folder is a student whose notebooks are merged into one row. A
submission that is a symbolic link, or holds one, is refused before anything runs.
"""
from __future__ import annotations

import os
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from inferlab.exercises import depends, signals
from inferlab.exercises.core import SECTIONS, exercises
from inferlab.exercises.safeio import loads_bounded, one_line
from inferlab.exercises.roster import CHECK_RE, GradingError


# Code that reaches into the checker instead of computing the answer; flagged for the instructor.
SUSPICIOUS = re.compile(r"\.solve\b|\.expected\(|_EXPECTED|known_mistakes|solution_source|INFERLAB_CHECK_LOG")
MAX_NOTEBOOK_BYTES = 20 * 10**6
MAX_JSON_DEPTH = 64  # a notebook or a report nested deeper is refused before json.loads sees it


@dataclass
class Submission:
    student: str
    notebooks: list
    refused: str | None = None  # why nothing of it is run (a link, two submissions for one id, ...)


def collect(paths) -> list[Submission]:
    """Students and their notebooks from files and folders (see the module docstring). Nothing is followed
    through a symbolic link: a submission that is a link, or a student folder holding one, is kept as a
    refused row (`Submission.refused`), as is a student id that two submissions claim."""
    subs = []
    for path in map(Path, paths):
        if path.is_symlink():
            subs.append(Submission(path.stem, [], refused=f"{path.name} is a symbolic link"))
        elif path.is_file():
            subs.append(Submission(path.stem, [path]))
        elif path.is_dir():
            for child in sorted(path.iterdir()):
                if child.name.startswith("."):
                    continue
                if child.is_symlink():
                    if child.suffix == ".ipynb" or child.is_dir():
                        subs.append(Submission(child.stem if child.suffix == ".ipynb" else child.name, [],
                                               refused=f"{child.name} is a symbolic link"))
                elif child.is_file() and child.suffix == ".ipynb":
                    subs.append(Submission(child.stem, [child]))
                elif child.is_dir():
                    nbs, links = _walk_notebooks(child)
                    if links:
                        subs.append(Submission(child.name, [], refused=f"{links[0]} is a symbolic link"))
                    elif nbs:
                        subs.append(Submission(child.name, nbs))
        else:
            raise FileNotFoundError(f"submission {str(path)!r} does not exist")
    for s in subs:
        if any(unicodedata.category(ch)[0] == "C" for ch in s.student):
            named = s.student.encode("unicode_escape").decode("ascii")
            s.student, s.notebooks = named, []
            s.refused = (f"the file or folder name {named!r} holds a control character: not run; rename it "
                         "(the row is listed under its escaped name)")
    merged: dict = {}
    for s in subs:
        if s.student in merged:
            first = merged[s.student]
            where = first.notebooks[0] if first.notebooks else first.student
            merged[s.student] = Submission(s.student, [], refused=f"two submissions for this id ({where} and "
                                           f"{s.notebooks[0] if s.notebooks else s.student}); rename one")
        else:
            merged[s.student] = s
    return list(merged.values())


def _walk_notebooks(folder: Path) -> tuple:
    """(notebooks, links): the .ipynb files under `folder` (no .ipynb_checkpoints), never entering a linked
    folder, and every symbolic link met there (relative paths)."""
    nbs, links = [], []
    for root, dirs, files in os.walk(folder, followlinks=False):
        dirs[:] = sorted(d for d in dirs if d != ".ipynb_checkpoints")
        for name in sorted(dirs + files):
            p = Path(root) / name
            if p.is_symlink():
                links.append(str(p.relative_to(folder.parent)))
            elif name in files and name.endswith(".ipynb"):
                nbs.append(p)
    return sorted(nbs), links


def check_plan(source_text: str) -> tuple:
    """(plan, ids, flags) from a notebook file's text: per code cell, the checks it makes
    ({cell, checks: [{id, name}]}), the exercise ids it mentions, and what looks like cheating."""
    nb = loads_bounded(source_text, max_bytes=MAX_NOTEBOOK_BYTES, max_depth=MAX_JSON_DEPTH)
    cells = nb.get("cells", []) if isinstance(nb, dict) else []
    plan, ids, code = [], set(), []
    for i, c in enumerate(cells):
        if not isinstance(c, dict) or c.get("cell_type") != "code":
            continue
        src = c.get("source", "")
        src = "".join(map(str, src)) if isinstance(src, list) else str(src)
        code.append(src)
        checks = [{"id": ex_id, "name": name} for ex_id, name in CHECK_RE.findall(src)
                  if ex_id in _known_ids()]
        if checks:
            answer_cells = sorted({j for c in checks for j in [_answer_cell(cells, i, c["name"])] if j is not None})
            plan.append({"cell": i, "checks": checks, "answer_cells": answer_cells})
            ids |= {c["id"] for c in checks}
    flags = ["reaches into the checker's internals"] if SUSPICIOUS.search("\n".join(code)) else []
    return plan, ids, flags


def _answer_cell(cells: list, check_cell: int, name: str) -> int | None:
    """The code cell before `check_cell` that last assigns `name` (the student's answer cell), or None."""
    assigns = re.compile(rf"^[ \t]*{re.escape(name)}\b[^=\n]*(?<![=!<>])=(?!=)", re.M)
    for j in range(check_cell - 1, -1, -1):
        c = cells[j]
        if isinstance(c, dict) and c.get("cell_type") == "code":
            src = c.get("source", "")
            src = "".join(map(str, src)) if isinstance(src, list) else str(src)
            if assigns.search(src):
                return j
    return None


def exercise_cells(plan) -> list:
    """The cells whose output is the student's: every check cell and its answer cell (see `check_plan`)."""
    return sorted({int(p["cell"]) for p in plan} | {int(j) for p in plan for j in p.get("answer_cells", [])})


def skipped_cells(source_text: str, plan) -> list[int]:
    """The code cells of a notebook file that no check cell's answer depends on (`depends.cells_to_run`): the
    lecture's figures and tables, and everything after the last check cell. Nothing without a check cell."""
    nb = loads_bounded(source_text, max_bytes=MAX_NOTEBOOK_BYTES, max_depth=MAX_JSON_DEPTH)
    cells = nb.get("cells", []) if isinstance(nb, dict) and isinstance(nb.get("cells"), list) else []
    sources = []
    for c in cells:
        src = c.get("source", "") if isinstance(c, dict) and c.get("cell_type") == "code" else None
        sources.append(None if src is None else "".join(map(str, src)) if isinstance(src, list) else str(src))
    if not exercise_cells(plan):
        return []
    run = depends.cells_to_run(sources, exercise_cells(plan))
    return [i for i, s in enumerate(sources) if s is not None and s.strip() and i not in run]


def _claimed(source_text: str) -> set:
    """The student ids a notebook file names (see `signals.claimed_ids`)."""
    nb = loads_bounded(source_text, max_bytes=MAX_NOTEBOOK_BYTES, max_depth=MAX_JSON_DEPTH)
    cells = nb.get("cells", []) if isinstance(nb, dict) and isinstance(nb.get("cells"), list) else []
    code = []
    for c in cells:
        if isinstance(c, dict) and c.get("cell_type") == "code":
            src = c.get("source", "")
            code.append("".join(map(str, src)) if isinstance(src, list) else str(src))
    return signals.claimed_ids(nb, code)


def _known_ids() -> set:
    return {e.id for e in exercises()}


def named_ids(source_text: str) -> set:
    """Every exercise id a code cell of the notebook checks, registered or not."""
    nb = loads_bounded(source_text, max_bytes=MAX_NOTEBOOK_BYTES, max_depth=MAX_JSON_DEPTH)
    cells = nb.get("cells", []) if isinstance(nb, dict) else []
    sources = (c.get("source", "") for c in cells if isinstance(c, dict) and c.get("cell_type") == "code")
    return {ex_id for src in sources for ex_id, _ in CHECK_RE.findall(
        "".join(map(str, src)) if isinstance(src, list) else str(src))}


def assignment_exercises(*, sections=None, instructor=None, require_known: bool = False) -> list[str]:
    """The exercise ids of the assignment, in registry order: every exercise of `sections`, or those whose
    check cells are in the instructor's notebook(s) `instructor` (the notebooks the student versions were
    built from). Never from the submissions: a check cell a submission adds changes no one's maximum.
    With `require_known`, a check cell naming an id that is not registered (an exercise written as data whose
    file was not given) is refused by name."""
    if sections:
        for section in sections:
            if section not in SECTIONS:
                raise GradingError(f"--sections: {section!r} is not a section; allowed: {', '.join(SECTIONS)}")
        return [e.id for s in sections for e in exercises(s)]
    if not instructor:
        raise GradingError("name the assignment's exercises: --instructor NOTEBOOK (the instructor notebook(s) the "
                           "student versions were built from) or --sections SECTION...")
    ids = set()
    for path in map(Path, instructor):
        try:
            if path.suffix == ".py":
                import jupytext
                import nbformat
                text = nbformat.writes(jupytext.read(path))
            else:
                text = path.read_text(encoding="utf-8")
            ids |= check_plan(text)[1]
            unknown = sorted(named_ids(text) - _known_ids()) if require_known else []
        except (OSError, ValueError) as exc:
            raise GradingError(f"--instructor {str(path)!r} cannot be read ({one_line(exc)[:120]}); expected "
                               "the instructor notebook (.ipynb or jupytext .py)")
        if unknown:
            raise GradingError(f"{str(path)!r} checks exercise {', '.join(unknown)}, which this library does not "
                               "have: an exercise written as data needs its file, --exercises FILE.toml")
    if not ids:
        raise GradingError(f"--instructor {', '.join(map(str, instructor))}: no check cell found; expected the "
                           "instructor notebook(s) of the assignment")
    return [e.id for e in exercises() if e.id in ids]

"""Build the student version of an instructor notebook: solutions out, statements and checks kept.

A solution cell is a code cell whose first line is `# SOLUTION` (optionally `# SOLUTION: name, ...`
to name the answer variables) or a cell tagged 'solution'; a markdown cell whose first line is
`<!-- SOLUTION -->` or that is tagged 'solution' is a written solution. The student version
replaces a code solution with an empty answer (`ex3 = None  # your answer here`, or a dict of
Nones for a multi-part answer) for every variable it defines that a later cell reads, and clears
its outputs and those of the cells that read it (the checks). A final scan refuses to write a
notebook in which an expected answer value still appears.
"""
from __future__ import annotations

import ast
import copy
import json
import re
from pathlib import Path

import nbformat

from inferlab.exercises.core import _REGISTRY, Exercise
from inferlab.exercises.roster import CHECK_RE, ID_RE, read_roster

SOLUTION_RE = re.compile(r"^\s*#\s*SOLUTION\b\s*:?(.*)$")
MARKDOWN_SOLUTION_RE = re.compile(r"^\s*<!--\s*SOLUTION\s*-->")
TEXT_MIMES = ("text/plain", "text/markdown", "text/html", "text/latex")


def is_solution(cell) -> bool:
    if "solution" in cell.get("metadata", {}).get("tags", []):
        return True
    first = cell.source.lstrip("\n").split("\n", 1)[0]
    if cell.cell_type == "code":
        return bool(SOLUTION_RE.match(first))
    return cell.cell_type == "markdown" and bool(MARKDOWN_SOLUTION_RE.match(first))


def _parse(source: str):
    """The AST of a cell; IPython line magics keep their code (`%time y = f(x)` -> `y = f(x)`), cell
    magics and shell escapes are blanked; None if it still does not parse."""
    lines = source.splitlines()
    if lines and lines[0].lstrip().startswith("%%"):
        lines = [""] + lines[1:]
    keep = [re.sub(r"^\s*%\w+\s*", "", line) if line.lstrip().startswith("%") else line for line in lines]
    blank = ["" if line.lstrip().startswith(("%", "!")) else line for line in lines]
    for candidate in (source, "\n".join(keep), "\n".join(blank)):
        try:
            return ast.parse(candidate)
        except SyntaxError:
            continue
    return None


def assigned_names(source: str) -> list[str]:
    """Names bound at the top level of a cell, in order (assignments, for-loop targets, defs)."""
    tree = _parse(source)
    if tree is None:
        return []
    out = []

    def targets(node):
        if isinstance(node, ast.Name):
            out.append(node.id)
        elif isinstance(node, (ast.Tuple, ast.List)):
            for elt in node.elts:
                targets(elt)
        elif isinstance(node, ast.Starred):
            targets(node.value)

    for stmt in tree.body:
        if isinstance(stmt, ast.Assign):
            for t in stmt.targets:
                targets(t)
        elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign, ast.For)):
            targets(stmt.target)
        elif isinstance(stmt, (ast.FunctionDef, ast.ClassDef)):
            out.append(stmt.name)
    return list(dict.fromkeys(out))


def read_names(source: str) -> set[str]:
    tree = _parse(source)
    if tree is None:
        return set(re.findall(r"[A-Za-z_]\w*", source))
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _placeholder(names: list[str], templates: dict) -> str:
    lines = ["# Your code here: compute the answer and assign it below (see the statement above)."]
    for name in names:
        lines.append(f"{name} = {templates.get(name, 'None')}  # your answer here")
    return "\n".join(lines)


def make_student(nb) -> tuple:
    """(student notebook, report): solutions replaced, their outputs and the checks' outputs cleared."""
    nb = copy.deepcopy(nb)
    cells = nb.cells
    checks = {}  # index -> {answer name: exercise id} of each check cell
    for i, cell in enumerate(cells):
        if cell.cell_type == "code" and not is_solution(cell):
            found = {name: ex_id for ex_id, name in CHECK_RE.findall(cell.source) if ex_id in _REGISTRY}
            if found:
                checks[i] = found
    kept_reads = {}  # index -> names read by each kept code cell
    for i, cell in enumerate(cells):
        if cell.cell_type == "code" and not is_solution(cell):
            kept_reads[i] = read_names(cell.source)
    report = {"solutions": 0, "written_solutions": 0, "answers": [], "cleared": 0}
    to_clear = set()
    for i, cell in enumerate(cells):
        if not is_solution(cell):
            continue
        if cell.cell_type == "markdown":
            cells[i] = nbformat.v4.new_markdown_cell("*Your explanation here.*")
            report["written_solutions"] += 1
            continue
        first = cell.source.lstrip("\n").split("\n", 1)[0]
        explicit = SOLUTION_RE.match(first)
        names = [n.strip() for n in explicit.group(1).split(",") if n.strip()] if explicit else []
        if not names:
            defined = assigned_names(cell.source)
            later = set().union(*(r for j, r in kept_reads.items() if j > i)) if kept_reads else set()
            names = [n for n in defined if n in later] or defined[-1:]
        for j, reads in kept_reads.items():
            if j > i and reads & set(names):
                to_clear.add(j)
        # The empty answer has the shape the next check of each name expects.
        templates = {}
        for name in names:
            nxt = next((found[name] for j, found in sorted(checks.items()) if j > i and name in found), None)
            if nxt:
                templates[name] = _REGISTRY[nxt].template()
        new = nbformat.v4.new_code_cell(_placeholder(names, templates))
        new.metadata = {k: v for k, v in cell.metadata.items() if k != "tags"}
        tags = [t for t in cell.metadata.get("tags", []) if t != "solution"]
        if tags:
            new.metadata["tags"] = tags
        if "id" in cell:
            new["id"] = cell["id"]
        cells[i] = new
        report["solutions"] += 1
        report["answers"] += names
    for j in to_clear:
        cells[j].outputs = []
        cells[j].execution_count = None
    report["cleared"] = len(to_clear)
    # Live timings (cells nbval ignores) are the instructor's machine on one day: the student's run
    # makes its own, and a stored number could happen to equal an answer of some variant.
    live = [c for c in cells if c.cell_type == "code" and "NBVAL_IGNORE_OUTPUT" in c.source and c.outputs]
    for cell in live:
        cell.outputs = []
        cell.execution_count = None
    report["live_cleared"] = len(live)
    nb.metadata.pop("jupytext", None)
    nb.metadata["inferlab"] = {"student_version": True}
    return nb, report


# Leak scan ----------------------------------------------------------------------------------------

def _significant_digits(text: str) -> int:
    mantissa = re.split(r"[eE]", text)[0]
    digits = re.sub(r"\D", "", mantissa).lstrip("0")
    return len(digits)


def answer_strings(value, *, strict: bool = True) -> set[str]:
    """The ways a numeric answer is commonly printed. strict: only forms with at least 4
    significant digits (few false alarms); otherwise also 3-digit, fixed-point and scaled forms."""
    if isinstance(value, (str, frozenset, set)) or value == 0:
        return set()
    v = float(value)
    scales = (1.0,) if strict else (1.0, 1e3, 1e-3, 1e9, 1e-9)
    out = set()
    for s in scales:
        x = v * s
        forms = {repr(x), f"{x:.6g}", f"{x:.5g}", f"{x:.4g}"}
        if abs(x) >= 1000:
            forms |= {f"{x:,.0f}", f"{x:.0f}"}
        if not strict:
            forms |= {f"{x:.3g}", f"{x:.2f}", f"{x:.1f}", f"{x:.2e}", f"{x:.3e}"}
        min_digits = 4 if strict else 3
        out |= {f for f in forms if _significant_digits(f) >= min_digits}
    return out


def notebook_text(nb) -> str:
    """Every source and every text output of a notebook (images and other binary data left out)."""
    parts = []
    for cell in nb.cells:
        parts.append(cell.source)
        for out in cell.get("outputs", []):
            if "text" in out:
                parts.append(out["text"] if isinstance(out["text"], str) else "".join(out["text"]))
            for mime in TEXT_MIMES:
                data = out.get("data", {}).get(mime)
                if data:
                    parts.append(data if isinstance(data, str) else "".join(data))
            if out.get("output_type") == "error":
                parts.append(out.get("evalue", "") + "\n" + "\n".join(out.get("traceback", [])))
    return "\n".join(parts)


def referenced_exercises(nb) -> list[Exercise]:
    ids = set()
    for cell in nb.cells:
        ids |= set(ID_RE.findall(cell.source))
    return [_REGISTRY[i] for i in sorted(ids) if i in _REGISTRY]


def find_leaks(nb, exercises=None, *, strict: bool = True) -> list[str]:
    """Expected answer values (of the exercises the notebook references) that appear in it."""
    text = notebook_text(nb)
    leaks = []
    for ex in exercises if exercises is not None else referenced_exercises(nb):
        for part, value in ex.expected().items():
            for form in sorted(answer_strings(value, strict=strict)):
                if re.search(r"(?<![\d.])" + re.escape(form) + r"(?![\d])", text):
                    leaks.append(f"{ex.id} {part}: {form!r}")
    return leaks


def build_student(sources, out_dir, *, allow_leaks: bool = False) -> list[Path]:
    """Write the student version of each instructor notebook (.ipynb, or a jupytext text file)
    into out_dir, same file name with the .ipynb suffix. Raises ValueError on a leak."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for src in map(Path, sources):
        if src.suffix == ".ipynb":
            nb = nbformat.read(src, as_version=4)
        else:
            import jupytext
            nb = jupytext.read(src)
        student, report = make_student(nb)
        leaks = find_leaks(student)
        if leaks and not allow_leaks:
            raise ValueError(f"{src}: expected answers still appear in the student version ({'; '.join(leaks)}); "
                             "clear the output or change the exercise's parameters (or pass --allow-leaks)")
        dest = out_dir / (src.stem + ".ipynb")
        nbformat.validate(student)
        dest.write_text(json.dumps(student, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        note = f"  LEAKS: {len(leaks)}" if leaks else ""
        print(f"{src} -> {dest}: {report['solutions']} solution cells replaced "
              f"({', '.join(report['answers']) or 'none'}), {report['written_solutions']} written solutions, "
              f"{report['cleared']} check outputs cleared{note}")
        written.append(dest)
    return written


# One notebook per student: each gets its own variant of every exercise ---------------------------------

STATEMENT_RE = re.compile(r"^###\s*Exercise\s+([0-9]+\.[0-9]+\.[0-9]+-ex\d+)\s*:")
IMPORT_LINE = "from inferlab.exercises import check"


def drawn_params(exercise: Exercise) -> dict:
    """The parameters of a variant that differ from the registered exercise's (what its notebook carries)."""
    base = _REGISTRY[exercise.id].params
    return {k: v for k, v in exercise.params.items() if base.get(k) != v}


def personalise(nb, student_id: str, assignment: str, key: bytes):
    """A copy of a student notebook for one student: each exercise statement rewritten with that
    student's variant (drawn under the instructor `key`), and `set_student(id, assignment, params=...)`
    after the import of `check`, carrying the drawn parameters (never the key) so that the formative
    check uses the same variant. The grader uses the roster id, not what this notebook says."""
    from inferlab.exercises.cells import statement_markdown
    from inferlab.exercises.core import set_student, variant

    set_student(student_id, assignment)  # validates both
    nb = copy.deepcopy(nb)
    drawn = {}
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            m = STATEMENT_RE.match(cell.source.lstrip())
            if m and m.group(1) in _REGISTRY:
                mine = variant(m.group(1), student_id, assignment, key=key)
                cell.source = statement_markdown(mine)
                if drawn_params(mine):
                    drawn[mine.id] = drawn_params(mine)
    for cell in nb.cells:
        if cell.cell_type == "code" and IMPORT_LINE in cell.source and "set_student(" not in cell.source:
            cell.source = cell.source.replace(
                IMPORT_LINE, f"{IMPORT_LINE}, set_student\nset_student({student_id!r}, {assignment!r}, "
                f"params={drawn!r})", 1)
    nb.metadata["inferlab"] = {"student_version": True, "student_id": student_id, "assignment": assignment}
    return nb


def build_for_roster(sources, out_dir, *, roster, assignment: str, key: bytes,
                     allow_leaks: bool = False) -> list[Path]:
    """OUT/<student_id>/<notebook>.ipynb for every roster entry: the student version with that
    student's variants under the instructor `key` (see `personalise`). Raises ValueError on a leak of
    that student's answers."""
    from inferlab.exercises.core import variant

    rows = read_roster(roster)
    notebooks = []
    for src in map(Path, sources):
        if src.suffix == ".ipynb":
            nb = nbformat.read(src, as_version=4)
        else:
            import jupytext
            nb = jupytext.read(src)
        notebooks.append((src, make_student(nb)[0]))
    written = []
    for row in rows:
        sid = row["student_id"]
        folder = Path(out_dir) / sid
        folder.mkdir(parents=True, exist_ok=True)
        for src, student in notebooks:
            mine = personalise(student, sid, assignment, key)
            own = [variant(e.id, sid, assignment, key=key) for e in referenced_exercises(mine)]
            leaks = find_leaks(mine, own)
            if leaks and not allow_leaks:
                raise ValueError(f"{src}: {sid}'s expected answers appear in their notebook ({'; '.join(leaks)}); "
                                 "clear the output (or pass --allow-leaks)")
            dest = folder / (src.stem + ".ipynb")
            nbformat.validate(mine)
            dest.write_text(json.dumps(mine, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
            written.append(dest)
    print(f"wrote {len(written)} notebook(s) for {len(rows)} student(s) of {assignment!r} into {out_dir}/<student_id>/")
    return written

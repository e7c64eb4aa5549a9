"""A Gradescope autograder bundle: `autograder.zip` with setup.sh, run_autograder and the grader's source.

Gradescope's harness (its "autograder specifications"): the zip is unpacked into /autograder/source, setup.sh
runs once when the image is built, and run_autograder runs per submission with the student's files in
/autograder/submission and /autograder/submission_metadata.json beside them; it must write
/autograder/results/results.json: {"score", "output", "visibility", "stdout_visibility", "tests": [{"name",
"score", "max_score", "output", "visibility"}]}. Here one test per exercise, with the feedback the class grader
writes (never an expected value), and one more, "after_published", for an exercise's hidden parts. The student
id that seeds the variant is the submitter's SID in the metadata (else their email). INFERLAB_AUTOGRADER_ROOT replaces /autograder (tests run the harness in a
temporary folder laid out the same way). Exercises written as data travel as their TOML files (`build_bundle`'s
`exercise_files`), registered before grading.

The bundle holds the instructor key when an assignment is given (the variants are seeded with it): keep the
zip as private as the key.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT_ENV = "INFERLAB_AUTOGRADER_ROOT"
SOURCE = "inferlab-src"  # the library inside the bundle: pyproject.toml, README.md, lib/, data/
EXERCISES = "exercises"  # the instructor's exercise files written as data (--exercises)

SETUP_SH = """#!/usr/bin/env bash
# Run once by Gradescope when it builds the autograder image (Ubuntu).
set -euo pipefail
apt-get update
apt-get install -y python3 python3-venv python3-pip bubblewrap
python3 -m venv /autograder/venv
/autograder/venv/bin/pip install -e /autograder/source/inferlab-src
"""

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Run by Gradescope for each submission: grades /autograder/submission into /autograder/results/results.json.
set -uo pipefail
ROOT="${INFERLAB_AUTOGRADER_ROOT:-/autograder}"
PY="${INFERLAB_AUTOGRADER_PYTHON:-$ROOT/venv/bin/python}"
export PYTHONPATH="$ROOT/source/inferlab-src/lib"
export INFERLAB_DATA="$ROOT/source/inferlab-src/data"
exec "$PY" -m inferlab.exercises.gradescope run
"""


def _check_data_files(exercise_ids: list, exercise_files, repo: Path) -> None:
    """Every exercise written as data must travel in the bundle: in the library's data/exercises.toml or in one
    of `exercise_files`; ValueError naming the first that would not."""
    from inferlab.exercises.core import get
    from inferlab.exercises.data import DataSolution, load
    bundled = {e.id for path in [repo / "data" / "exercises.toml", *map(Path, exercise_files)] if path.is_file()
               for e in load(path)}
    missing = [i for i in exercise_ids if isinstance(get(i).solve, DataSolution) and i not in bundled]
    if missing:
        raise ValueError(f"exercise {', '.join(missing)} is written as data in a file this bundle would not hold: "
                         "give that file with --exercises FILE.toml")


def build_bundle(exercise_ids: list, out, *, assignment: str | None = None, key: bytes | None = None,
                 repo_root=None, exercise_files=()) -> Path:
    """Write the zip: setup.sh, run_autograder, config.json ({"assignment", "exercises"}, and "exercise_files"
    when given), variant.key (with an assignment), the exercise files written as data (`EXERCISES`/NN-name.toml;
    run_autograder registers them before grading) and the library (`SOURCE`) from `repo_root` (the checkout
    holding pyproject.toml)."""
    from inferlab.exercises.sandbox import library_root
    if assignment and key is None:
        raise ValueError("--assignment needs the instructor key that seeds the variants (--key)")
    repo = Path(repo_root) if repo_root else library_root().parent
    if not (repo / "pyproject.toml").is_file():
        raise ValueError(f"no pyproject.toml in {repo}: the bundle is built from a checkout of inferlab")
    _check_data_files(exercise_ids, exercise_files, repo)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    config = {"assignment": assignment, "exercises": list(exercise_ids)}
    files = {f"{EXERCISES}/{i:02d}-{Path(f).name}": Path(f) for i, f in enumerate(exercise_files)}
    if files:
        config["exercise_files"] = list(files)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, text in (("setup.sh", SETUP_SH), ("run_autograder", RUN_AUTOGRADER)):
            info = zipfile.ZipInfo(name)
            info.external_attr = 0o755 << 16
            zf.writestr(info, text)
        zf.writestr("config.json", json.dumps(config, indent=1) + "\n")
        if assignment:
            info = zipfile.ZipInfo("variant.key")
            info.external_attr = 0o600 << 16
            zf.writestr(info, key.hex() + "\n")
        for name, path in files.items():
            zf.write(path, name)
        for top in ("pyproject.toml", "README.md"):
            if (repo / top).is_file():
                zf.write(repo / top, f"{SOURCE}/{top}")
        for folder in ("lib/inferlab", "data"):
            for path in sorted((repo / folder).rglob("*")):
                if path.is_file() and "__pycache__" not in path.parts and not path.name.endswith(".pyc"):
                    zf.write(path, f"{SOURCE}/{path.relative_to(repo)}")
    return out


def student_id(metadata: dict) -> str | None:
    """The submitter's SID in Gradescope's submission_metadata.json, else their email."""
    users = metadata.get("users") if isinstance(metadata, dict) else None
    if isinstance(users, list) and users and isinstance(users[0], dict):
        for field in ("sid", "email"):
            value = users[0].get(field)
            if isinstance(value, str) and value.strip():
                return value.strip()
    return None


def results(grades, *, note: str = "") -> dict:
    """results.json from one student's `Grades` (see the module docstring). An exercise with hidden parts is two
    tests: its visible parts ("visible", their feedback only) and its hidden parts ("after_published": shown when
    the instructor publishes the grades). With a hidden test the top-level score is left out, so that Gradescope
    adds up the tests rather than show a total that says how the hidden parts went."""
    from inferlab.exercises.core import get
    row = grades.rows[0]
    tests = []
    for d in grades.details:
        ex, shown = get(d["exercise"]), d["public"]
        tests.append({"name": f"{d['exercise']}: {ex.heading()}", "score": shown["score"],
                      "max_score": shown["points"], "output": shown["feedback"], "visibility": "visible"})
        if shown["hidden_points"]:
            names = ", ".join(p.name for p in ex.parts if p.hidden)
            tests.append({"name": f"{d['exercise']}: hidden part(s) {names}",
                          "score": round(d["score"] - shown["score"], 3), "max_score": shown["hidden_points"],
                          "output": d["feedback"], "visibility": "after_published"})
    output = "" if row["status"] == "ok" else f"Run: {row['status']}"
    by_hand = [f"{e} {m.name} ({m.points:g} points)" for e in grades.columns for m in get(e).manual]
    if by_hand:
        output = "\n".join(x for x in (output, "Graded by hand, not by this autograder (your instructor's manual "
                                       f"questions in Gradescope): {', '.join(by_hand)}.") if x)
    out = {"score": row["total"], "output": "\n".join(x for x in (note, output) if x), "visibility": "visible",
           "stdout_visibility": "hidden", "tests": tests}
    if any(t["visibility"] != "visible" for t in tests):
        del out["score"]
    return out


def run(root=None) -> dict:
    """Grade the submission under `root` (default $INFERLAB_AUTOGRADER_ROOT or /autograder) and write
    results/results.json; returns it. A submission that cannot be graded gets a results.json that says why."""
    from inferlab.exercises import sandbox as sb
    from inferlab.exercises.grade import GradeConfig, grade
    import re
    root = Path(root or os.environ.get(ROOT_ENV, "/autograder"))
    source, submission = root / "source", root / "submission"
    (root / "results").mkdir(parents=True, exist_ok=True)
    config = json.loads((source / "config.json").read_text())
    assignment = config.get("assignment")
    key = bytes.fromhex((source / "variant.key").read_text().strip()) if assignment else None
    try:
        metadata = json.loads((root / "submission_metadata.json").read_text())
    except (OSError, ValueError):
        metadata = {}
    sid = student_id(metadata) or "student"

    def refuse(why: str) -> dict:
        out = {"score": 0, "output": why, "visibility": "visible", "tests": []}
        (root / "results" / "results.json").write_text(json.dumps(out, indent=1) + "\n")
        return out

    from inferlab.exercises.data import ExerciseDataError, register_file
    for name in config.get("exercise_files", []):
        try:
            register_file(source / name, replace=True)
        except ExerciseDataError as err:
            return refuse(f"the autograder's exercise file {name} cannot be read ({err}); tell your instructor")
    if not re.fullmatch(r"[A-Za-z0-9_.@-]{1,64}", sid):
        return refuse(f"the submitter's id {sid!r} cannot seed a variant (use 1 to 64 letters, digits, '_', '.', "
                      "'@' or '-'); ask your instructor")
    notebooks = sorted(p for p in submission.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts) \
        if submission.is_dir() else []
    if not notebooks:
        return refuse("no notebook (.ipynb) in the submission: upload your notebook file(s)")
    sandbox = sb.available()
    note = "" if sandbox else ("graded without the bubblewrap sandbox (it does not start in this container: "
                               f"{sb.unavailable_reason()}); the container is this submission's alone")
    work = Path(tempfile.mkdtemp(prefix="inferlab-gradescope-"))
    try:
        folder = work / "subs" / sid
        folder.mkdir(parents=True)
        for i, nb in enumerate(notebooks):
            shutil.copyfile(nb, folder / f"{i:02d}-{nb.name}")
        grades = grade([work / "subs"], work / "out", GradeConfig(exercise_ids=config["exercises"], quiet=True,
                                                                  sandbox=sandbox, assignment=assignment, key=key))
        out = results(grades, note=note)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    (root / "results" / "results.json").write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    if sys.argv[1:] != ["run"]:
        print("usage: python -m inferlab.exercises.gradescope run", file=sys.stderr)
        sys.exit(2)
    run()

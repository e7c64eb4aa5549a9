"""A kernel that dies before it answers kernel_info has run none of the student's code (the kernel and its
spec are the grader's). On a loaded host that happens (a CI run saw "Kernel died before replying to
kernel_info" for one submission of a class); the runner tries the start again (`START_ATTEMPTS`) rather than
report the student's notebook as stopped. Here a kernel spec that exits on its first launch stands in for it."""
from __future__ import annotations

import json
import sys

import nbformat

from inferlab.exercises.grade import grade
from inferlab.exercises.sandbox_runner import START_ATTEMPTS

FLAKY = """import os, sys
marks = sys.argv[1]
n = len(os.listdir(marks))
open(os.path.join(marks, str(n)), "w").close()
if n < int(sys.argv[2]):
    sys.exit(3)  # dies before it answers kernel_info
from ipykernel import kernelapp
kernelapp.launch_new_instance(argv=sys.argv[3:])
"""


def _flaky_kernel(tmp_path, monkeypatch, failures: int):
    marks = tmp_path / "marks"
    marks.mkdir()
    script = tmp_path / "flaky_kernel.py"
    script.write_text(FLAKY)
    spec = tmp_path / "jupyter" / "kernels" / "flaky"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, str(script), str(marks), str(failures), "-f", "{connection_file}"],
        "display_name": "flaky", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    return marks


def _grade(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_code_cell("print(6 * 7)"))
    path = tmp_path / "student.ipynb"
    nbformat.write(nb, path)
    grades = grade([path], tmp_path / "out", sections=["15.1.2"], sandbox=False, kernel_name="flaky",
                   quiet=True, cell_timeout=60, time_limit=120)
    executed = nbformat.read(tmp_path / "out" / "executed" / "student.ipynb", 4)
    printed = "".join(o.get("text", "") for o in executed.cells[0].get("outputs", []))
    runs = " ".join(str(d["run"]) for d in grades.details)
    return printed, runs


def test_a_kernel_that_dies_at_its_first_start_is_started_again(tmp_path, monkeypatch):
    assert START_ATTEMPTS >= 2
    marks = _flaky_kernel(tmp_path, monkeypatch, failures=1)
    printed, runs = _grade(tmp_path)
    assert len(list(marks.iterdir())) == 2  # one start died, the second ran the notebook
    assert printed.strip() == "42" and "Kernel died" not in runs


def test_a_kernel_that_never_starts_is_reported_not_retried_for_ever(tmp_path, monkeypatch):
    marks = _flaky_kernel(tmp_path, monkeypatch, failures=10)
    printed, runs = _grade(tmp_path)
    assert len(list(marks.iterdir())) == START_ATTEMPTS
    assert printed == "" and "execution stopped" in runs and "kernel_info" in runs

"""`python -m inferlab.exercises`: bad input and file-system errors give one line naming the argument,
the value and what is allowed, exit status 2, never a traceback; grading refuses to run unsandboxed
unless told to."""
from __future__ import annotations

import subprocess
import sys

import pytest

from inferlab.exercises import sandbox as sb
from inferlab.exercises.cli import main
from inferlab.exercises.grade import GradeConfig, GradingError, grade
from hang_guard import HANG_S


def one_error_line(capsys, argv) -> str:
    with pytest.raises(SystemExit) as exc:
        code = main(argv)
        raise SystemExit(code)
    assert exc.value.code == 2, argv
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    return lines[0]


@pytest.fixture
def nb(tmp_path):
    path = tmp_path / "a.ipynb"
    path.write_text('{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}')
    return path


def test_grade_bad_paths(capsys, tmp_path, nb):
    line = one_error_line(capsys, ["grade", str(tmp_path / "missing"), "--out", str(tmp_path / "o")])
    assert "submission" in line and "missing" in line and "does not exist" in line and ".ipynb" in line
    line = one_error_line(capsys, ["grade", str(nb), "--out", str(nb)])
    assert "--out" in line and str(nb) in line and "is a file" in line and "folder" in line
    line = one_error_line(capsys, ["grade", str(nb), "--out", "/proc/inferlab-grades"])
    assert "--out '/proc/inferlab-grades' is not a writable folder" in line
    line = one_error_line(capsys, ["grade", str(nb), "--roster", str(tmp_path)])
    assert "--roster" in line and "is a folder" in line and "CSV" in line


@pytest.mark.parametrize("flag, value, allowed", [("--jobs", "0", "in (0, 64]"), ("--jobs", "two", "whole number"),
                                                  ("--time-limit", "-1", "in (0, 86400]"),
                                                  ("--memory-gb", "nan", "in (0, 1024]")])
def test_grade_bad_numbers(capsys, nb, flag, value, allowed):
    line = one_error_line(capsys, ["grade", str(nb), flag, value])
    assert flag in line and repr(value) in line and allowed in line


def test_roster_errors(capsys, tmp_path, nb):
    roster = tmp_path / "roster.csv"
    roster.write_text("name\nAlice\n")
    line = one_error_line(capsys, ["build-student", str(nb), "--roster", str(roster), "--assignment", "hw1",
                                   "--out", str(tmp_path / "o")])
    assert "no student_id column" in line and "student_id[,name,email,section]" in line
    roster.write_text("student_id\nalice\nalice\n")
    line = one_error_line(capsys, ["build-student", str(nb), "--roster", str(roster), "--assignment", "hw1",
                                   "--out", str(tmp_path / "o")])
    assert "student_id 'alice' appears twice" in line
    roster.write_text("student_id\n../../etc\n")
    line = one_error_line(capsys, ["build-student", str(nb), "--roster", str(roster), "--assignment", "hw1",
                                   "--out", str(tmp_path / "o")])
    assert "student_id '../../etc' is not allowed" in line
    line = one_error_line(capsys, ["build-student", str(nb), "--roster", str(roster), "--out", str(tmp_path / "o")])
    assert "--roster needs --assignment" in line


def test_build_student_bad_paths(capsys, tmp_path, nb):
    line = one_error_line(capsys, ["build-student", str(tmp_path / "nope.ipynb")])
    assert "source notebook" in line and "nope.ipynb" in line and "does not exist" in line
    line = one_error_line(capsys, ["build-student", str(tmp_path)])
    assert "is a folder" in line and ".ipynb or jupytext .py file" in line
    line = one_error_line(capsys, ["build-student", str(nb), "--out", "/proc/self/student"])
    assert "--out '/proc/self/student'" in line and "writable folder" in line
    line = one_error_line(capsys, ["build-student"])
    assert "no notebooks given" in line


def test_other_commands(capsys, tmp_path):
    line = one_error_line(capsys, ["list", "--section", "9.9.9"])
    assert "'9.9.9'" in line and "15.1.1" in line
    line = one_error_line(capsys, ["cells", "15.9"])
    assert "'15.9'" in line
    line = one_error_line(capsys, ["sample", str(tmp_path / "x.txt")])
    assert "must end in .py" in line
    line = one_error_line(capsys, ["sample", "/proc/nope/x.py", "--no-execute"])
    assert "'/proc/nope'" in line and "writable folder" in line
    line = one_error_line(capsys, ["frobnicate"])
    assert "invalid choice: 'frobnicate'" in line


def test_the_module_runs_as_a_command():
    proc = subprocess.run([sys.executable, "-m", "inferlab.exercises", "grade", "/nonexistent/dir"],
                          capture_output=True, text=True, timeout=HANG_S)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_grading_refuses_to_run_without_a_sandbox(tmp_path, nb, monkeypatch, capsys):
    monkeypatch.setattr(sb, "unavailable_reason", lambda: "bubblewrap (bwrap) is not installed")
    with pytest.raises(GradingError, match="cannot grade in a sandbox: bubblewrap .* pass --no-sandbox"):
        grade([nb], tmp_path / "out")
    assert not (tmp_path / "out").exists()
    line = one_error_line(capsys, ["grade", str(nb), "--out", str(tmp_path / "o2")])
    assert "--no-sandbox" in line


@pytest.mark.parametrize("name, value", [("cell_timeout", 0), ("time_limit", -5.0), ("time_limit", float("inf")),
                                         ("jobs", 0), ("limits", {"memory_bytes": 1})])
def test_the_grading_config_refuses_a_bad_field_by_name(name, value):
    """A bad limit or job count is refused where the config is built, naming the field and the allowed values."""
    with pytest.raises(ValueError, match=rf"^GradeConfig\.{name}: .* is not allowed; expected "):
        GradeConfig(**{name: value})
    with pytest.raises(ValueError, match=rf"^GradeConfig\.{name}: "):
        grade(["unused"], "unused", **{name: value})  # overrides of grade() go through the same check


def test_a_forged_runner_report_is_read_as_data():
    """The kernel can rewrite the runner's report: odd types are dropped, never a crash or a score."""
    from inferlab.exercises.grade import _causes, _sanitise
    forged = _sanitise({"timeouts": 5, "errors": ["x", {"ename": 7, "wall": "yes"}], "answers": [1], "kernel_died": "yes",
                        "kernel_exit": True, "start_error": {"a": 1}, "interrupt_ignored": 1})
    assert forged["timeouts"] == [] and forged["answers"] == {}
    assert forged["errors"] == [{"ename": "7", "enospc": False, "wall": False, "cell": None, "line": None,
                                 "budget_s": None, "killed": False}]
    assert forged["kernel_died"] is False and forged["kernel_exit"] is None and forged["interrupt_ignored"] is False
    assert _causes(forged, 1, 1, sb.Limits())[-1] == "1 cell(s) raised (7)"


def test_grading_needs_the_assignment_s_exercises_and_its_key(capsys, tmp_path, nb):
    """The maximum comes from the instructor's notebook or the sections named, never from the submissions;
    an assignment's variants need the instructor key (README, "For instructors")."""
    line = one_error_line(capsys, ["grade", str(nb), "--out", str(tmp_path / "o"), "--no-sandbox"])
    assert "--instructor NOTEBOOK" in line and "--sections" in line
    line = one_error_line(capsys, ["grade", str(nb), "--out", str(tmp_path / "o"), "--no-sandbox",
                                   "--sections", "15.9.9"])
    assert "'15.9.9' is not a section" in line
    line = one_error_line(capsys, ["grade", str(nb), "--out", str(tmp_path / "o"), "--no-sandbox", "--sections",
                                   "15.1.2", "--assignment", "hw1", "--key", str(tmp_path / "none.key")])
    assert "instructor key" in line and "none.key" in line and "does not exist" in line


@pytest.mark.parametrize("failed, status", [(0, 0), (1, 65), (2, 66), (61, 125), (500, 125)])
def test_the_exit_status_counts_failed_submissions(failed, status):
    from inferlab.exercises.cli import failed_exit_status
    assert failed_exit_status(failed) == status


@pytest.mark.skipif(not sb.available(), reason="no sandbox: the grader refuses to start")
def test_a_refused_submission_is_counted_in_the_exit_status_and_every_file_is_written(tmp_path, nb, capsys):
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "mallory.ipynb").symlink_to(nb)  # a link: refused before anything runs
    code = main(["grade", str(subs), "--out", str(tmp_path / "o"), "--sections", "15.1.2", "--quiet"])
    assert code == 65
    assert "1 of 1 submission(s) failed" in capsys.readouterr().err
    for name in ("grades.csv", "details.csv", "gradescope.csv", "canvas.csv", "summary.md", "feedback/mallory.md"):
        assert (tmp_path / "o" / name).is_file(), name
    assert "failed: mallory.ipynb is a symbolic link" in (tmp_path / "o" / "grades.csv").read_text()

"""A grader one student cannot break (issue 20): per-submission failure, nothing followed out of the sandbox,
bounded parsing, a maximum fixed by the assignment, formula-safe exports, secret variants.

The first half tests the pieces without a sandbox (bounded JSON, reading without following links, the
runner's result stream forged or flooded, the neutralised cells, the export writer, the instructor key). The second half grades one hostile class in the
bubblewrap sandbox (one `grade` call) and checks that every student gets a row, that no host file reaches
the output, and that the maximum stays the assignment's.

Hand-derived values: 15.1.2 has five exercises worth 1 + 1 + 2 + 2 + 3 = 9 points; RIGHT is the KV cache of one
Llama-3-70B sequence at S = 8192 in bf16: 2 * 80 layers * 8 KV heads * 128 * 8192 * 2 bytes = 2.68435456 GB.
"""
from __future__ import annotations

import csv
import hashlib
import hmac
import os
import stat
import subprocess
from pathlib import Path

import nbformat
import pytest

from inferlab.exercises import get, variant
from inferlab.exercises import sandbox as sb
from inferlab.exercises.core import variant_seed
from inferlab.exercises.grade import (DISK_FULL, MAX_REPORT_BYTES, Grades, Run, Submission, _collect_outputs,
                                      _score_student, _write, assignment_exercises, collect, grade)
from inferlab.exercises.key import InstructorKeyError, create_key, ensure_key, load_key
from inferlab.exercises.safeio import FrameReader, UnsafeFile, cell, json_depth, loads_bounded, read_regular


# The attacks here must run, so every cell runs (tests/conftest.py, every_cell_runs).
pytestmark = pytest.mark.usefixtures("every_cell_runs")


RIGHT = 2.68435456
POINTS_15_1_2 = 9  # 1 + 1 + 2 + 2 + 3
FORMULA = ("=", "+", "-", "@", "\t", "\r")
ROOT = Path(__file__).resolve().parent.parent


# Bounded parsing --------------------------------------------------------------------------------------

def test_json_depth_is_counted_by_hand_and_strings_do_not_count():
    assert json_depth(b'{"a": [1, {"b": "[[[{"}], "c": []}') == 3  # { [ { : three; the string's brackets skipped
    assert json_depth(b'"[[[" ') == 0
    assert json_depth(b'[[], [[]]]') == 3


def test_deep_json_is_refused_with_a_value_error_not_a_recursion_error():
    deep = b"[" * 200_000 + b"]" * 200_000
    with pytest.raises(ValueError, match="nested 200000 deep"):
        loads_bounded(deep, max_bytes=10**6, max_depth=64)
    assert loads_bounded(b"[" * 64 + b"]" * 64, max_bytes=10**6, max_depth=64) is not None


def test_huge_integers_become_inf_not_an_overflow():
    value = loads_bounded(b'{"a": ' + b"1" * 401 + b', "b": -' + b"9" * 31 + b', "c": 12}', max_bytes=10**6,
                          max_depth=8)
    assert value == {"a": float("inf"), "b": float("-inf"), "c": 12}


@pytest.mark.parametrize("answer", [10**400, -(10**400), float("inf"), float("nan")])
def test_an_answer_too_large_for_a_float_is_wrong_not_fatal(answer):
    # Before issue 20: float(10**400) raised OverflowError inside scoring and stopped the whole class.
    result = get("15.1.2-ex1").evaluate(answer)
    assert result.score == 0 and result.parts[0].status == "invalid"
    assert "not a finite number" in result.parts[0].hint


# Reading without following links ----------------------------------------------------------------------

@pytest.fixture
def folder(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    work = tmp_path / "work"
    work.mkdir()
    (work / "ok.json").write_text("{}")
    (work / "link").symlink_to(secret)
    os.mkfifo(work / "fifo")
    os.link(secret, work / "hard")
    (work / "big").write_bytes(b"x" * 2000)
    fd = os.open(work, os.O_RDONLY | os.O_DIRECTORY)
    yield fd
    os.close(fd)


@pytest.mark.parametrize("name, why", [("link", "symbolic link"), ("fifo", "fifo"), ("hard", "2 hard links"),
                                       ("big", "larger than")])
def test_a_link_fifo_hard_link_or_oversize_file_is_refused(folder, name, why):
    with pytest.raises(UnsafeFile, match=why):
        read_regular(folder, name, 1000)  # the fifo has no writer: O_NONBLOCK keeps this from hanging


def test_a_regular_file_is_read(folder):
    assert read_regular(folder, "ok.json", 1000) == b"{}"
    with pytest.raises(FileNotFoundError):
        read_regular(folder, "missing", 1000)


# Collecting: links refused, clashes kept per student --------------------------------------------------

def test_links_and_clashes_are_rows_not_crashes(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    nb = nbformat.v4.new_notebook()
    nbformat.write(nb, subs / "alice.ipynb")
    nbformat.write(nb, tmp_path / "elsewhere.ipynb")
    (subs / "mallory.ipynb").symlink_to(tmp_path / "elsewhere.ipynb")
    (subs / "bob").mkdir()
    (subs / "bob" / "hw.ipynb").symlink_to("/etc/passwd")
    (subs / "carol").mkdir()
    nbformat.write(nb, subs / "carol" / "hw.ipynb")
    nbformat.write(nb, subs / "carol.ipynb")  # two submissions for carol
    got = {s.student: s for s in collect([subs])}
    assert got["alice"].notebooks and not got["alice"].refused
    assert got["mallory"].notebooks == [] and "symbolic link" in got["mallory"].refused
    assert got["bob"].notebooks == [] and "symbolic link" in got["bob"].refused
    assert got["carol"].notebooks == [] and "two submissions" in got["carol"].refused


# The maximum comes from the assignment ----------------------------------------------------------------

def instructor_notebook(path: Path, section="15.1.2") -> Path:
    from inferlab.exercises import exercises
    from inferlab.exercises.cells import solution_source
    cells = [nbformat.v4.new_code_cell("from inferlab.exercises import check")]
    for ex in exercises(section):
        cells += [nbformat.v4.new_code_cell(solution_source(ex)),
                  nbformat.v4.new_code_cell(f'check("{ex.id}", {ex.answer_name});')]
    nbformat.write(nbformat.v4.new_notebook(cells=cells), path)
    return path


def test_the_assignment_s_exercises_come_from_the_instructor_notebook(tmp_path):
    ids = assignment_exercises(instructor=[instructor_notebook(tmp_path / "hw.ipynb")])
    assert ids == [f"15.1.2-ex{i}" for i in range(1, 6)]
    assert sum(get(i).points for i in ids) == POINTS_15_1_2
    with pytest.raises(ValueError, match="--instructor NOTEBOOK"):
        assignment_exercises()  # never guessed from the submissions


def test_added_check_cells_change_no_maximum_and_are_named():
    columns = assignment_exercises(sections=["15.1.2"])
    honest = Run(Path("a.ipynb"), answers={"15.1.2-ex1": RIGHT}, ids={"15.1.2-ex1"})
    added = Run(Path("m.ipynb"), answers={"15.1.2-ex1": RIGHT, "15.2.1-ex1": 1.0},
                ids={"15.1.2-ex1", "15.2.1-ex1", "15.1.1-ex4"})
    row_a, _ = _score_student(Submission("a", [Path("a.ipynb")]), [honest], columns, set(columns), None, None)
    row_m, det = _score_student(Submission("m", [Path("m.ipynb")]), [added], columns, set(columns), None, None)
    assert row_a["max"] == row_m["max"] == POINTS_15_1_2
    assert row_m["total"] == row_a["total"] == 1
    assert "15.2.1-ex1" not in row_m and {d["exercise"] for d in det} == set(columns)
    assert "ignored check cell(s) not in this assignment: 15.1.1-ex4, 15.2.1-ex1" in row_m["status"]


def test_an_answer_that_cannot_be_scored_and_a_failed_run_stay_in_their_row():
    columns = assignment_exercises(sections=["15.1.2"])
    weird = Run(Path("w.ipynb"), answers={"15.1.2-ex1": 10**400, "15.1.2-ex2": {"__set__": 5}},
                ids={"15.1.2-ex1", "15.1.2-ex2"})
    row, det = _score_student(Submission("w", [Path("w.ipynb")]), [weird], columns, set(columns), None, None)
    assert row["total"] == 0 and row["status"] == "ok"
    failed = Run(Path("f.ipynb"), answers={"15.1.2-ex1": RIGHT}, ids={"15.1.2-ex1"},
                 failed="invalid output: executed.ipynb is a symbolic link")
    row, det = _score_student(Submission("f", [Path("f.ipynb")]), [failed], columns, set(columns), None, None)
    assert row["total"] == 0 and row["status"].startswith("failed: invalid output")
    assert {d["result"] for d in det} == {"failed"}


# The result stream (the runner's report and executed notebook, over a pipe) ------------------------------

def frame(name: str, data: bytes) -> bytes:
    return b"inferlab-frame " + name.encode() + b" " + str(len(data)).encode() + b"\n" + data


def reader(*chunks) -> FrameReader:
    r = FrameReader({"report.json": 1000, "executed.ipynb": 5000})
    for c in chunks:
        r.feed(c)
    return r


def test_frames_are_read_across_chunk_boundaries_and_the_last_complete_report_counts():
    stream = frame("report.json", b'{"cells": 1}') + frame("report.json", b'{"cells": 2}') + frame("executed.ipynb", b"{}")
    r = reader(*[stream[i:i + 3] for i in range(0, len(stream), 3)])  # 3-byte chunks: headers split too
    assert r.error is None and r.frames == {"report.json": b'{"cells": 2}', "executed.ipynb": b"{}"}
    cut = reader(frame("report.json", b'{"cells": 1}') + frame("report.json", b'{"cells": 2}')[:-3])
    assert cut.error is None and cut.frames == {"report.json": b'{"cells": 1}'}  # the runner killed mid-record


@pytest.mark.parametrize("stream, why", [
    (frame("report.json", b"x" * 1001), "result stream: report.json larger than 0.001 MB"),
    (b"inferlab-frame report.json 99999999999999999999\n", "result stream: a record header that is not one"),
    (frame("../../etc/passwd", b"x"), "result stream: an unknown record ('../../etc/passwd')"),
    (b"x" * 10**6, "result stream: a record header that is not one"),  # a flood without a line break
    (b"GET / HTTP/1.1\n", "result stream: a record header that is not one")])
def test_a_forged_or_flooded_stream_is_refused_with_bounded_memory(stream, why):
    r = reader(frame("report.json", b"{}"), stream, frame("report.json", b'{"cells": 3}'))
    assert r.error == why
    assert len(r._buf) == 0  # nothing kept after the refusal, whatever follows
    r.feed(b"y" * 10**6)
    assert len(r._buf) == 0


def test_a_refused_stream_is_its_row_s_invalid_output_and_a_deep_report_an_unreadable_one(tmp_path):
    forged = reader(frame("report.json", b'{"answers": {"15.1.2-ex1": 2.68435456}}'), b"garbage\n")
    report = _collect_outputs(forged, 0, tmp_path / "executed.ipynb", b"")
    assert report["invalid_output"] == "result stream: a record header that is not one"
    assert report["answers"] == {} and not (tmp_path / "executed.ipynb").exists()
    r = FrameReader({"report.json": MAX_REPORT_BYTES})
    r.feed(frame("report.json", b"[" * 200_000 + b"]" * 200_000))
    report = _collect_outputs(r, -9, None, b"line 1\nkilled\n")
    assert report["start_error"] == ("the run left an unreadable report (JSON nested 200000 deep (at most 64)) "
                                     "(exit status -9; killed)")
    assert report["answers"] == {} and "invalid_output" not in report


# Formula-safe exports ---------------------------------------------------------------------------------

@pytest.mark.parametrize("text, safe", [
    ("=HYPERLINK(\"http://x\",\"y\")", "'=HYPERLINK(\"http://x\",\"y\")"), ("+1", "'+1"), ("-1+2", "'-1+2"),
    ("@SUM(A1)", "'@SUM(A1)"), ("\t=1", "'\t=1"), ("\r=1", "' =1"), (" =1", "' =1"), ("alice", "alice"),
    ("a\nb\r\nc\u2028d", "a b c d"), ("2.5", "2.5")])
def test_cells_are_neutralised(text, safe):
    assert cell(text) == safe


def test_no_export_cell_or_summary_line_is_a_formula_or_a_forged_line(tmp_path):
    columns = assignment_exercises(sections=["15.1.2"])
    evil = "=HYPERLINK(\"http://evil\",\"x\")"
    forged = "crashed\n- flag: alice reaches into the checker's internals"
    subs = [Submission(evil, [Path("e.ipynb")]), Submission("@bob", [Path("b.ipynb")])]
    runs = [Run(Path("e.ipynb"), ids={"15.1.2-ex1"}, answers={"15.1.2-ex1": RIGHT}, problems=[forged]),
            Run(Path("b.ipynb"), ids={"15.1.2-ex1"}, answers={"15.1.2-ex1": {"+x": 1}}, problems=["-1 cells"])]
    rows, details = [], []
    for s, r in zip(subs, runs):
        row, d = _score_student(s, [r], columns, set(columns), None, None)
        rows.append(row)
        details += d
    roster = [{"student_id": evil, "name": "=1+1", "email": "+cmd|' /C calc'!A0", "section": "-2"},
              {"student_id": "@bob", "name": "Bob\nEvil", "email": "@x", "canvas_id": "=3"}]
    _write(Grades(columns, rows, details), tmp_path, elapsed=1.0, quiet=True, assignment="=hw",
           roster=roster, stems={evil: "e", "@bob": "b"})
    for name in ("grades.csv", "details.csv", "gradescope.csv", "canvas.csv"):
        with open(tmp_path / name, newline="", encoding="utf-8") as fh:
            table = list(csv.reader(fh))
        cells = [c for row in table for c in row]
        assert not [c for c in cells if c.startswith(FORMULA) or "\n" in c or "\r" in c], name
    summary = (tmp_path / "summary.md").read_text().splitlines()
    assert not [line for line in summary if line.startswith("- flag")]
    assert len([line for line in summary if line.startswith("- ")]) == 2  # one line per student with problems
    for stem in ("e", "b"):
        assert not [line for line in (tmp_path / "feedback" / f"{stem}.md").read_text().splitlines()
                    if line.startswith("- flag")]


# Secret variants --------------------------------------------------------------------------------------

KEY = bytes(range(32))


def test_a_variant_needs_the_instructor_key():
    # Before issue 20 the seed was SHA-256 of public data: anyone could draw any student's variant.
    with pytest.raises(ValueError, match="needs the instructor key"):
        variant("15.1.2-ex1", "alice", "hw1")
    assert variant("15.1.2-ex1", None, None) is get("15.1.2-ex1")  # the registered exercise needs none


def test_the_seed_is_an_hmac_of_assignment_and_student_under_the_key():
    by_hand = int.from_bytes(hmac.new(KEY, b"inferlab-variant\nhw1\nalice", hashlib.sha256).digest()[:8], "big")
    assert variant_seed("alice", "hw1", KEY) == by_hand
    assert variant_seed("alice", "hw1", bytes(32)) != by_hand
    public = int.from_bytes(hashlib.sha256(b"inferlab-variant\nhw1\nalice").digest()[:8], "big")
    assert by_hand != public


def test_key_file_is_0600_never_overwritten_and_refused_when_others_can_read_it(tmp_path):
    path = tmp_path / ".instructor" / "variant.key"
    key, created = ensure_key(path)
    assert created and len(key) == 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert ensure_key(path) == (key, False) and load_key(path) == key
    with pytest.raises(InstructorKeyError, match="exists already"):
        create_key(path)
    os.chmod(path, 0o644)
    with pytest.raises(InstructorKeyError, match="mode 0644"):
        load_key(path)
    with pytest.raises(InstructorKeyError, match="does not exist"):
        load_key(tmp_path / "nope.key")


def test_the_default_key_path_is_ignored_by_git():
    proc = subprocess.run(["git", "check-ignore", "-q", ".instructor/variant.key"], cwd=ROOT)
    assert proc.returncode == 0


def test_the_readme_names_every_part_that_variants_do_not_protect():
    """The exercise table's (docs/exercises.md) column "same in every variant", against every combination a student can draw."""
    from inferlab.exercises import exercises
    from inferlab.exercises.core import invariant_parts
    rows = {}
    for line in (ROOT / "docs" / "exercises.md").read_text().splitlines():
        cols = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cols) == 5 and cols[0].startswith("15."):
            rows[cols[0]] = [] if cols[4] == "—" else [c.strip(" `") for c in cols[4].split(",")]
    assert rows == {e.id: invariant_parts(e) for e in exercises()}


def test_invariant_parts_by_hand():
    from inferlab.exercises.core import invariant_parts
    # 15.1.2-ex1 draws the model and S: the KV cache of Llama-3-70B and Mistral-7B differ (80 vs 32 layers).
    assert invariant_parts(get("15.1.2-ex1")) == []
    # A registered exercise without its vary: one variant, so every part is the same in all of them.
    import dataclasses
    fixed = dataclasses.replace(get("15.1.2-ex3"), vary=None)
    assert invariant_parts(fixed) == [p.name for p in fixed.parts]


# One hostile class in the sandbox ---------------------------------------------------------------------

TOKEN = "inferlab-host-secret-3b9d"


def notebook(*cells):
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])


HONEST = ("from inferlab.exercises import check", f"ex1 = {RIGHT!r}", 'check("15.1.2-ex1", ex1)')


def attack(code: str):
    """A submission that answers right only if `code` ran to its end without raising."""
    return notebook("from inferlab.exercises import check",
                    "ex1 = None\ntry:\n" + "".join(f"    {line}\n" for line in code.splitlines())
                    + f"    ex1 = {RIGHT!r}\nexcept BaseException as exc:\n    print('blocked:', type(exc).__name__, exc)",
                    'check("15.1.2-ex1", ex1)')


LIBC = "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
# Memory, disk and namespaces the kernel must refuse (disk_bytes = 50 MB in the fixture, /dev/shm 64 MB).
ATTACKS = {
    "memfd": "import os\nfd = os.memfd_create('x')\nos.posix_fallocate(fd, 0, 50 * 10**6)  # each under the 64 MB file-size limit",
    "sysv_shm": LIBC + "assert libc.shmget(0, 1 << 30, 0o1000 | 0o600) >= 0, ctypes.get_errno()",
    # unshare(CLONE_NEWUSER) needs a single-threaded process: a forked child tries it.
    "user_namespace": LIBC + "pid = os.fork()\nif pid == 0:\n    os._exit(0 if libc.unshare(0x10000000) == 0 else 1)\n"
                      "assert os.waitpid(pid, 0)[1] == 0, 'unshare refused'",
    # 100 MB in five files of 20 MB (each under the 64 MB file-size limit), into the working folder, /tmp, /dev/shm.
    "home_burst": "for i in range(5):\n    with open(f'/home/student/burst{i}', 'wb') as fh:\n        fh.write(b'x' * 20 * 10**6)",
    "tmp_burst": "for i in range(5):\n    with open(f'/tmp/burst{i}', 'wb') as fh:\n        fh.write(b'x' * 20 * 10**6)",
    "shm_burst": "for i in range(5):\n    with open(f'/dev/shm/burst{i}', 'wb') as fh:\n        fh.write(b'x' * 20 * 10**6)",
}
KILL_RUNNER = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)"


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    if not sb.available():
        pytest.skip(f"no sandbox: {sb.unavailable_reason()}")
    base = tmp_path_factory.mktemp("hostile")
    subs, out, scratch = base / "subs", base / "out", base / "scratch"
    for p in (subs, out, scratch):
        p.mkdir()
    secret = base / "instructor" / "answer_key.txt"
    secret.parent.mkdir()
    secret.write_text(TOKEN + "\n")
    hw = instructor_notebook(base / "instructor" / "hw.ipynb")
    cases = {
        "honest": notebook(*HONEST),
        # An int subclass whose abs() lies: the capture sends 10**400 as a JSON integer.
        "huge_int": notebook("from inferlab.exercises import check",
                             "class Big(int):\n    def __abs__(self):\n        return 0\nex1 = Big(10**400)",
                             'check("15.1.2-ex1", ex1)'),
        # A report nested too deep for json.loads, left in the working folder, the runner killed: the grader
        # reads no file there (only the runner's stream), so the honest answer sent before stands.
        "deep_report": notebook(*HONEST, "open('report.json', 'w').write('[' * 200000 + ']' * 200000)\n"
                                + KILL_RUNNER),
        # The runner's result pipe reached through /proc (same uid): refused, the runner is not dumpable.
        "forge_stream": attack("import os\nppid = os.getppid()\nfor fd in os.listdir(f'/proc/{ppid}/fd'):\n"
                               "    os.write(os.open(f'/proc/{ppid}/fd/{fd}', os.O_WRONLY), b'garbage\\n')"),
        # Honest, then 100 MB into its working folder (quota 50 MB): the write fails inside, the answer stays.
        "honest_then_burst": notebook(*HONEST, "for i in range(5):\n    with open(f'burst{i}', 'wb') as fh:\n"
                                      "        fh.write(b'x' * 20 * 10**6)"),
        # 100 MB onto the runner's log pipe (the kernel's original stdout, which ipykernel keeps a copy of; its
        # fd 1 now goes into the outputs, under the cap): the grader keeps the last 400 bytes.
        "flood_log": notebook(*HONEST, "import os, sys\n"
                              "fd = getattr(sys.stdout, '_original_stdstream_copy', None) or 1\n"
                              "for _ in range(100):\n    os.write(fd, b'x' * 10**6)"),
        # The executed notebook and the log replaced by links to host files, the runner killed.
        "link_executed": notebook(*HONEST, f"import os\nos.remove('executed.ipynb') if os.path.lexists('executed.ipynb') "
                                  f"else None\nos.symlink({str(secret)!r}, 'executed.ipynb')\n" + KILL_RUNNER),
        "link_log": notebook(*HONEST, f"import os\nos.remove('runner.log')\nos.remove('report.json')\n"
                             f"os.symlink({str(secret)!r}, 'runner.log')\n" + KILL_RUNNER),
        "proc_mem": notebook(*HONEST, "import os\nos.symlink('/proc/self/mem', 'executed.ipynb')\n" + KILL_RUNNER),
        # Check cells beyond the assignment: the maximum stays 9.
        "extra_cells": notebook(*HONEST, "ex9 = 1.0", 'check("15.2.1-ex1", ex9)', 'check("15.1.1-ex1", ex9)'),
        # Many small displays, each then updated with 400 kB: 12 MB past a 1 MB output cap before issue 20.
        "update_display": notebook(*HONEST, "from IPython.display import display\n"
                                   "hs = [display('x', display_id=True) for _ in range(30)]\n"
                                   "for h in hs:\n    h.update('y' * 400_000)"),
        **{name: attack(code) for name, code in ATTACKS.items()},
        # 60 MB (over the 50 MB quota) in a folder then made unreadable: the tmpfs is full first.
        "chmod_000": attack("import os, time\nos.mkdir('hide')\nfor i in range(6):\n"
                            "    open(f'hide/f{i}', 'wb').write(b'x' * 10**7)\nos.chmod('hide', 0)\ntime.sleep(10)"),
        # A file name that a spreadsheet would run as a formula.
        "=HYPERLINK(\"http-x\",\"y\")": notebook(*HONEST),
    }
    for name, nb in cases.items():
        nbformat.write(nb, subs / f"{name}.ipynb")
    (subs / "deep_notebook.ipynb").write_text('{"cells": ' + "[" * 100_000 + "]" * 100_000 + "}")
    nbformat.write(cases["honest"], base / "elsewhere.ipynb")
    (subs / "linked.ipynb").symlink_to(base / "elsewhere.ipynb")
    grades = grade([subs], out, cell_timeout=20, time_limit=40, jobs=2, quiet=True, instructor=[hw],
                   limits=sb.Limits(memory_bytes=3 * 10**9, output_bytes=10**6, disk_bytes=50 * 10**6),
                   tmp_root=scratch)
    with open(out / "grades.csv", newline="") as fh:
        table = {r["student_id"]: r for r in csv.DictReader(fh)}
    return dict(grades=grades, table=table, out=out, names=list(cases) + ["deep_notebook", "linked"], scratch=scratch)


def test_every_hostile_submission_gets_a_row_and_the_class_its_files(hostile):
    table, out = hostile["table"], hostile["out"]
    assert set(table) == {cell(n) for n in hostile["names"]}  # the formula name is neutralised there too
    for name in ("grades.csv", "details.csv", "gradescope.csv", "canvas.csv", "summary.md", "summary.json"):
        assert (out / name).is_file(), name
    assert len(list((out / "feedback").glob("*.md"))) == len(hostile["names"])


def test_no_hostile_submission_scores_more_than_the_honest_one(hostile):
    table = hostile["table"]
    assert float(table["honest"]["total"]) == 1 and table["honest"]["status"] == "ok"
    for name, row in table.items():
        assert float(row["total"]) <= 1, name
        assert float(row["max"]) == POINTS_15_1_2, name
    assert float(table["huge_int"]["total"]) == 0


def test_links_out_of_the_sandbox_make_the_row_invalid_output_and_copy_nothing(hostile):
    table, out = hostile["table"], hostile["out"]
    for name in ("link_executed", "link_log", "proc_mem"):
        # Before the working folder became a tmpfs the grader read these files and refused the links
        # ("failed: invalid output"); now it reads none: the report the runner sent before it was killed counts.
        assert float(table[name]["total"]) == 1, (name, table[name]["status"])
        assert not table[name]["status"].startswith("failed"), (name, table[name]["status"])
    assert not (out / "executed" / "link_executed.ipynb").exists()  # the runner was killed before sending it
    leaked = [str(p) for p in out.rglob("*") if p.is_file() and TOKEN.encode() in p.read_bytes()]
    assert leaked == []
    assert not [p for p in out.rglob("*") if p.is_symlink()]


def test_unreadable_inputs_fail_their_own_row(hostile):
    table = hostile["table"]
    assert "unreadable notebook (JSON nested 100001 deep" in table["deep_notebook"]["status"]
    assert table["linked"]["status"] == "failed: linked.ipynb is a symbolic link"
    assert hostile["grades"].failed == 1  # linked


def test_a_report_left_in_the_working_folder_is_not_read(hostile):
    row = hostile["table"]["deep_report"]  # the deep report is the stream's job: see the unit tests above
    assert float(row["total"]) == 1 and "unreadable report" not in row["status"], row["status"]


def test_a_flood_of_the_log_and_a_reach_for_the_result_pipe_only_touch_their_own_row(hostile):
    table, out = hostile["table"], hostile["out"]
    assert float(table["flood_log"]["total"]) == 1 and not table["flood_log"]["status"].startswith("failed"), \
        table["flood_log"]
    assert float(table["forge_stream"]["total"]) == 0
    assert "blocked: PermissionError" in (out / "executed" / "forge_stream.ipynb").read_text()


def test_added_check_cells_are_ignored_and_named(hostile):
    row = hostile["table"]["extra_cells"]
    assert float(row["total"]) == 1 and "ignored check cell(s) not in this assignment: 15.1.1-ex1, 15.2.1-ex1" \
        in row["status"]
    assert "15.2.1-ex1" not in row and "15.1.1-ex1" not in row


def test_the_formula_file_name_is_neutralised_in_every_export(hostile):
    out = hostile["out"]
    for name in ("grades.csv", "details.csv", "gradescope.csv", "canvas.csv"):
        with open(out / name, newline="", encoding="utf-8") as fh:
            cells = [c for row in csv.reader(fh) for c in row]
        assert not [c for c in cells if c.startswith(FORMULA)], name
        assert "'=HYPERLINK(\"http-x\",\"y\")" in cells, name


@pytest.mark.parametrize("name", list(ATTACKS))
def test_the_kernel_refuses_memory_disk_and_namespaces_outside_the_limits(hostile, name):
    row = hostile["table"][name]
    assert float(row["total"]) == 0, (name, row["status"])


@pytest.mark.parametrize("name", ["home_burst", "tmp_burst", "shm_burst"])
def test_a_disk_burst_fails_inside_the_sandbox_with_enospc(hostile, name):
    # Before issue 20, /tmp was a folder on the grader's disk, and /home/student until the change after it,
    # measured four times a second: a burst was written, then the run killed. Now the tmpfs is full first
    # and the write fails; the run goes on and its outputs come back.
    executed = (hostile["out"] / "executed" / f"{name}.ipynb").read_text()
    assert "No space left on device" in executed
    assert "disk quota" not in hostile["table"][name]["status"]


def test_an_honest_notebook_that_fills_its_folder_is_graded_and_told_why(hostile):
    # The burst cell raises ENOSPC (not caught); the answers before it still come back over the stream.
    row = hostile["table"]["honest_then_burst"]
    assert float(row["total"]) == 1, row["status"]
    with open(hostile["out"] / "details.csv", newline="", encoding="utf-8") as fh:
        runs = {r["run"] for r in csv.DictReader(fh) if r["student_id"] == "honest_then_burst"}
    assert runs and all(DISK_FULL in r for r in runs), runs


def test_an_unreadable_folder_neither_escapes_the_quota_nor_the_clean_up(hostile):
    row = hostile["table"]["chmod_000"]
    assert float(row["total"]) == 0, row["status"]
    assert "No space left on device" in (hostile["out"] / "executed" / "chmod_000.ipynb").read_text()
    assert list(hostile["scratch"].iterdir()) == []  # every private folder removed, the 000 one included


def test_updated_displays_stay_inside_the_output_cap(hostile):
    executed = hostile["out"] / "executed" / "update_display.ipynb"
    assert executed.stat().st_size < 2 * 10**6  # the 1 MB cap plus the notebook itself
    assert "output limit" in hostile["table"]["update_display"]["status"]


# cgroup v2 where the host delegates one (a folder imitating a cgroup tree) ------------------------------------

PROC_CGROUP = "12:memory:/legacy\n0::/user.slice/user-1000.slice/grader.scope\n"
MOUNTINFO = ("25 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n"
             "35 25 0:30 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n")


def fake_cgroup(tmp_path, controllers="cpuset cpu io memory pids"):
    base = tmp_path / "user.slice" / "user-1000.slice" / "grader.scope"
    base.mkdir(parents=True)
    (base / "cgroup.controllers").write_text(controllers + "\n")
    (base / "cgroup.subtree_control").write_text("")
    return base


def test_the_own_cgroup_is_found_from_proc_files():
    from inferlab.exercises.cgroup import own_cgroup
    assert own_cgroup(PROC_CGROUP, MOUNTINFO) == Path("/sys/fs/cgroup/user.slice/user-1000.slice/grader.scope")
    assert own_cgroup("4:memory:/x\n", MOUNTINFO) is None  # cgroup v1 only
    assert own_cgroup(PROC_CGROUP, "25 1 8:1 / / rw - ext4 /dev/sda1 rw\n") is None  # no cgroup2 mounted


def test_a_cgroup_without_the_memory_controller_is_not_used(tmp_path):
    from inferlab.exercises.cgroup import unusable_reason
    assert unusable_reason(fake_cgroup(tmp_path)) is None
    assert "no memory controller" in unusable_reason(fake_cgroup(tmp_path / "b", controllers="cpu pids"))
    assert "no cgroup v2 folder" in unusable_reason(tmp_path / "missing")


def test_per_submission_cgroups_are_written_as_the_kernel_expects(tmp_path):
    from inferlab.exercises.cgroup import Cgroups, detect
    base = fake_cgroup(tmp_path)
    groups = Cgroups(base)
    groups.prepare(pid=4242)
    assert (base / "inferlab-grader" / "cgroup.procs").read_text() == "4242\n"
    assert (base / "cgroup.subtree_control").read_text() == "+memory +pids\n"
    child = groups.create(3 * 10**9, 48)
    assert (child / "memory.max").read_text() == "3000000000\n" and (child / "pids.max").read_text() == "48\n"
    (child / "memory.events").write_text("low 0\nhigh 0\nmax 7\noom 2\noom_kill 3\n")
    assert Cgroups.oom_kills(child) == 3
    proc, mounts = tmp_path / "cgroup", tmp_path / "mountinfo"
    proc.write_text("0::/user.slice/user-1000.slice/grader.scope\n")
    mounts.write_text(f"35 25 0:30 / {tmp_path} rw - cgroup2 cgroup2 rw\n")
    found, why = detect(proc, mounts)
    assert why is None and found.base == base


def test_the_sandbox_starts_inside_its_cgroup(tmp_path, monkeypatch):
    if not sb.available():
        pytest.skip(f"no sandbox: {sb.unavailable_reason()}")
    import shutil
    from inferlab.exercises import grade as grading
    from inferlab.exercises.cgroup import Cgroups
    base = fake_cgroup(tmp_path)
    seen = []

    def remove(path):  # what the run left in its cgroup folder, then the folder goes (rmdir on a real cgroup)
        seen.append({f.name: f.read_text() for f in path.iterdir()})
        shutil.rmtree(path, ignore_errors=True)

    monkeypatch.setattr(Cgroups, "remove", staticmethod(remove))
    nb = tmp_path / "nb.ipynb"
    nbformat.write(notebook("x = 1"), nb)
    report = grading.execute(nb, grading.GradeConfig(limits=sb.Limits(memory_bytes=2 * 10**9, processes=32), cell_timeout=30,
                                                     time_limit=60, tmp_root=tmp_path),
                             plan=[], cgroups=Cgroups(base))
    assert report["problems"] == [], report["problems"]
    assert seen[0]["memory.max"] == "2000000000\n" and seen[0]["pids.max"] == "32\n"
    pid = int(seen[0]["cgroup.procs"])  # written by the child before it became bwrap: the sandbox starts inside
    assert pid > 0 and pid != os.getpid()
    assert [p for p in base.iterdir() if p.name.startswith("inferlab-")] == []


def test_text_that_utf_8_cannot_encode_does_not_stop_the_exports(tmp_path):
    # A forged report's start_error, or a file name with undecodable bytes, carries lone surrogates; before
    # issue 20 writing them to grades.csv raised UnicodeEncodeError and no file was written for anyone.
    columns = assignment_exercises(sections=["15.1.2"])
    sid = "stu\udcffdent"
    run = Run(Path("s.ipynb"), ids={"15.1.2-ex1"}, answers={"15.1.2-ex1": RIGHT}, problems=["bad \ud800 report"])
    row, details = _score_student(Submission(sid, [Path("s.ipynb")]), [run], columns, set(columns), None, None)
    _write(Grades(columns, [row], details), tmp_path, elapsed=1.0, quiet=True, stems={sid: "s"})
    text = (tmp_path / "grades.csv").read_text(encoding="utf-8")
    assert "stu\\udcffdent" in text and "bad \\ud800 report" in text

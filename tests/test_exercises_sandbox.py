"""Adversarial submissions, graded together in the bubblewrap sandbox: each attack is shown harmless.

Every attack notebook answers 15.1.2-ex1 with the right value *only if its attack worked*
(`ex1 = RIGHT` after the attack, `ex1 = None` when it raised), so a score of 1 means the attack
succeeded. Beside them: an honest, a wrong and an empty submission, and two file names that map to
the same safe name. One `grade` call (jobs=2) runs them all; then the tests check the scores, the
causes in details.csv, and that no file outside the grader's output changed and no process survived.

RIGHT is hand-computed (Llama-3 70B: 80 layers, 8 KV heads of dimension 128, bf16):
  2 (K and V) * 80 * 8 * 128 * 8192 tokens * 2 bytes = 2,684,354,560 bytes = 2.68435456 GB.
Without the factor 2 for K and V the library would give 1.342 GB and the honest run would fail.
"""
from __future__ import annotations

import csv
import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from inferlab.exercises import sandbox as sb
from inferlab.exercises.grade import GradingError, grade



RIGHT = 2.68435456  # GB: 2 * 80 * 8 * 128 * 8192 * 2 bytes / 1e9 (see the module docstring)
WRONG_MHA = 21.47483648  # GB: every query head cached, 64 heads instead of 8: RIGHT * 64 / 8
TOKEN = "inferlab-sandbox-test-7c1f"  # marks the processes an attack starts
CELL_TIMEOUT, TIME_LIMIT = 20, 40  # seconds of each cell's and notebook's own time (not wall)

# The attacks here must run, so every cell runs (tests/conftest.py, every_cell_runs).
pytestmark = [pytest.mark.skipif(not sb.available(), reason=f"no sandbox: {sb.unavailable_reason()}"),
              pytest.mark.usefixtures("every_cell_runs")]


def notebook(*cells) -> nbformat.NotebookNode:
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])


def attack(code: str) -> nbformat.NotebookNode:
    """A submission that answers right only if `code` ran without raising."""
    return notebook("from inferlab.exercises import check",
                    f"ex1 = None\ntry:\n" + "".join(f"    {line}\n" for line in code.splitlines())
                    + f"    ex1 = {RIGHT!r}\nexcept BaseException as exc:\n    print('blocked:', type(exc).__name__)",
                    'check("15.1.2-ex1", ex1)')


def tree_hash(*roots) -> dict:
    out = {}
    for root in roots:
        for p in sorted(Path(root).rglob("*")):
            if p.is_file() and "__pycache__" not in p.parts:
                out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def surviving(token: str) -> list:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if token.encode() in cmdline.read_bytes():
                found.append(cmdline.parent.name)
        except OSError:
            continue
    return found


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    subs = tmp_path_factory.mktemp("subs")
    out = tmp_path_factory.mktemp("grades")
    scratch = tmp_path_factory.mktemp("scratch")  # the grader's private work folders go here
    secret = tmp_path_factory.mktemp("instructor") / "secret.txt"
    secret.write_text("the answer key")
    library = sb.library_root() / "inferlab"
    honest = notebook("from inferlab.exercises import check",
                      "from inferlab import Precision\nfrom inferlab.core.memory import kv_cache_bytes\nfrom inferlab.core.specs import get_model\n"
                      "ex1 = kv_cache_bytes(get_model('llama-3-70b'), 8192, batch=1, precision=Precision(kv='bf16')) / 1e9",
                      'check("15.1.2-ex1", ex1)')
    cases = {
        "honest": honest,
        "wrong": notebook("from inferlab.exercises import check", f"ex1 = {WRONG_MHA!r}", 'check("15.1.2-ex1", ex1)'),
        "empty": notebook("from inferlab.exercises import check", "ex1 = None", 'check("15.1.2-ex1", ex1)'),
        # Answers that live in the grader's process only.
        "answer_key": attack("from inferlab.exercises import get\nget('15.1.2-ex1').expected()"),
        "solution_source": attack(f"open({str(library / 'exercises' / 's15_1_2_decode.py')!r}).read()"),
        # Files outside the submission's own folder.
        "read_outside": attack(f"open({str(secret)!r}).read()\nopen({str(subs / 'honest.ipynb')!r}).read()"),
        "write_sibling": attack(f"open({str(subs / 'honest.ipynb')!r}, 'w').write('{{}}')"),
        "patch_library": attack(f"open({str(library / 'memory.py')!r}, 'a').write('\\nBROKEN = 1\\n')"),
        "overwrite_grades": attack(f"open({str(out / 'grades.csv')!r}, 'w').write('honest,0')"),
        "network": attack("import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=3)"),
        # A process meant to outlive the grading and rewrite the grades afterwards.
        "detached": attack(
            "import subprocess\n"
            f"subprocess.Popen(['sh', '-c', 'sleep 3; echo {TOKEN} > {out / 'grades.csv'}', '{TOKEN}'],\n"
            "                 start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
            "raise RuntimeError('the process started; only the grades can show the harm')"),
        # Kill every process it can see: the runner and the kernel, never the grader.
        "kill_grader": notebook("import os, signal\nfor pid in os.listdir('/proc'):\n    if pid.isdigit() and "
                                "int(pid) != os.getpid():\n        try:\n            os.kill(int(pid), signal.SIGKILL)\n"
                                "        except OSError:\n            pass\nos.kill(os.getppid(), signal.SIGKILL)"),
        # Limits: the cell fails with its cause; the kernel lives on, so the right answer after it counts.
        "fork_bomb": notebook("import os, time\nfor _ in range(100000):\n    if os.fork() == 0:\n"
                              "        time.sleep(30)\n        os._exit(0)",
                              "from inferlab.exercises import check", f"ex1 = {RIGHT!r}", 'check("15.1.2-ex1", ex1)'),
        "memory_hog": notebook("block = bytearray(16 * 10**9)",
                               "from inferlab.exercises import check", f"ex1 = {RIGHT!r}", 'check("15.1.2-ex1", ex1)'),
        # Fills the disk: 1 MB files without end, in its own folder (a tmpfs of the quota's size: the write
        # past it fails inside the sandbox with ENOSPC).
        "disk_filler": attack("for i in range(10**6):\n    with open(f'f{i}', 'wb') as fh:\n"
                              "        fh.write(b'x' * 10**6)"),
        "huge_output": notebook("for _ in range(200):\n    print('x' * 100_000)",
                                "from inferlab.exercises import check",
                                f"ex1 = {RIGHT!r}", 'check("15.1.2-ex1", ex1)'),
    }
    for name, nb in cases.items():
        nbformat.write(nb, subs / f"{name}.ipynb")
    # Two names with one safe form ('a_b'): right and wrong, each graded as itself.
    nbformat.write(honest, subs / "a b.ipynb")
    nbformat.write(cases["wrong"], subs / "a_b.ipynb")
    before = tree_hash(subs, library, secret.parent)
    started = os.times()
    grade([subs], out, cell_timeout=CELL_TIMEOUT, time_limit=TIME_LIMIT, jobs=2, quiet=True, sections=["15.1.2"],
          limits=sb.Limits(memory_bytes=3 * 10**9, processes=48, output_bytes=10**6, disk_bytes=50 * 10**6),
          tmp_root=scratch)
    ended = os.times()
    # CPU time of every sandbox (each reaped by the grader, with what it reaped), not wall time: a busy host
    # does not count.
    children_cpu_s = ended.children_user + ended.children_system - started.children_user - started.children_system
    grades_text = (out / "grades.csv").read_text()
    time.sleep(4)  # longer than the detached process's sleep (3 s)
    with open(out / "grades.csv", newline="") as fh:
        table = {r["student_id"]: r for r in csv.DictReader(fh)}
    with open(out / "details.csv", newline="") as fh:
        details = {r["student_id"]: r for r in csv.DictReader(fh) if r["exercise"] == "15.1.2-ex1"}
    return dict(table=table, details=details, out=out, before=before, after=tree_hash(subs, library, secret.parent),
                grades_text=grades_text, children_cpu_s=children_cpu_s, subs=subs, scratch=scratch)


def score(graded, name) -> float:
    return float(graded["table"][name]["15.1.2-ex1"])


def test_honest_wrong_and_empty_get_what_they_earned(graded):
    assert score(graded, "honest") == 1
    assert score(graded, "wrong") == 0 and "cached every query head" in graded["details"]["wrong"]["feedback"]
    assert score(graded, "empty") == 0 and graded["details"]["empty"]["result"] == "no answer"
    assert graded["table"]["honest"]["status"] == "ok"


@pytest.mark.parametrize("name", ["answer_key", "solution_source", "read_outside", "write_sibling",
                                  "patch_library", "overwrite_grades", "network", "detached"])
def test_each_attack_fails_and_scores_nothing(graded, name):
    assert score(graded, name) == 0, graded["details"][name]


def test_no_file_outside_the_output_changed(graded):
    assert graded["after"] == graded["before"]


def test_nothing_outlives_the_grading(graded):
    assert (graded["out"] / "grades.csv").read_text() == graded["grades_text"]
    assert surviving(TOKEN) == []


def test_killing_everything_in_the_sandbox_spares_the_grader(graded):
    assert score(graded, "kill_grader") == 0
    assert "left no report" in graded["table"]["kill_grader"]["status"] or \
        "kernel died" in graded["table"]["kill_grader"]["status"]
    assert score(graded, "honest") == 1  # graded in the same run


def test_each_limit_is_reported_as_its_cause(graded):
    run = {name: graded["details"][name]["run"] for name in graded["details"]}
    assert "memory limit (3 GB of address space) hit: MemoryError" in run["memory_hog"]
    assert "process limit 48" in run["fork_bomb"]
    assert "output limit: output of cell 1 beyond 1 MB (each cell's budget) dropped" in run["huge_output"]
    assert "blocked: OSError" in (graded["out"] / "executed" / "disk_filler.ipynb").read_text()  # ENOSPC: below
    assert score(graded, "disk_filler") == 0
    for name in ("memory_hog", "fork_bomb", "huge_output"):  # the run went on after the limit
        assert score(graded, name) == 1, run[name]


def test_the_huge_output_is_cut_and_does_not_stall(graded):
    executed = nbformat.read(graded["out"] / "executed" / "huge_output.ipynb", 4)
    kept = sum(len(o.get("text", "")) for o in executed.cells[0].outputs)
    assert kept <= 1.2 * 10**6  # of 20 MB printed
    # The quadratic stall this guards against (nbclient's carriage-return regex on a 100 kB line) burnt minutes of
    # the runner's CPU; the whole class, 20 notebooks, takes about a minute of CPU.
    assert graded["children_cpu_s"] < 240


def test_name_clash_keeps_both_submissions_apart(graded):
    table = graded["table"]
    assert score(graded, "a b") == 1 and score(graded, "a_b") == 0
    assert "file name clash" in table["a b"]["status"] and "file name clash" in table["a_b"]["status"]
    names = sorted(p.name for p in (graded["out"] / "executed").glob("a_b*.ipynb"))
    assert len(names) == 2 and "a_b.ipynb" not in names


def test_temporary_folders_are_removed(graded):
    assert list(graded["scratch"].iterdir()) == []


def test_exports_are_keyed_by_student_id(graded):
    out = graded["out"]
    with open(out / "gradescope.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == ["Name", "SID", "Email", "Total Score"]
    assert {r["SID"]: r["Total Score"] for r in rows}["honest"] == "1"
    canvas = (out / "canvas.csv").read_text().splitlines()
    assert canvas[0].startswith("Student,ID,SIS User ID,SIS Login ID,Section,") and canvas[1].startswith("Points Possible")
    feedback = (out / "feedback" / "wrong.md").read_text()
    assert "15.1.2-ex1" in feedback and "cached every query head" in feedback and "2.684" not in feedback


def test_cpu_and_wall_time_limits_are_reported_as_their_causes(tmp_path, monkeypatch):
    from inferlab.exercises import grade as grading
    path = tmp_path / "spin.ipynb"
    nbformat.write(notebook("while True:\n    pass"), path)
    # CPU: the kernel spins past its 4 s of CPU time (RLIMIT_CPU) long before the 60 s cell budget.
    report = grading.execute(path, grading.GradeConfig(limits=sb.Limits(cpu_s=4), cell_timeout=60,
                                                       time_limit=60, tmp_root=tmp_path),
                             plan=[])
    assert "kernel died (CPU-time limit (4 s)); later cells not run" in report["problems"], report["problems"]
    # The wall-clock backstop (WALL_FACTOR x time_limit + GRACE_S, here 1 x 2 + 0 s) kills the whole sandbox: not a
    # verdict on the submission (the runner budgets its cells by their own time) but a run the grader could not
    # finish, reported as such. Without the backstop the cell would run to its 60 s budget and be reported as a
    # timeout.
    monkeypatch.setattr(grading, "GRACE_S", 0)
    monkeypatch.setattr(grading, "WALL_FACTOR", 1)
    report = grading.execute(path, grading.GradeConfig(limits=sb.Limits(), cell_timeout=60,
                                                       time_limit=2, tmp_root=tmp_path),
                             plan=[])
    assert report["not_graded"].startswith("host too busy or the run stalled: wall-clock backstop: killed after 2 s "
                                           "of wall time having used "), report
    assert not [p for p in report["problems"] if "timed out" in p], report["problems"]
    assert list(tmp_path.glob("inferlab-grade-*")) == []


def test_the_cpu_time_limit_is_the_students_not_the_runners(tmp_path):
    """RLIMIT_CPU is per process, and the runner that relays the kernel's output spends CPU time too (start-up,
    polling, parsing). With the limit on the runner as well, a slow CPU spent the student's 4 s in the runner first:
    SIGXCPU killed the runner and the run left no report. At a 1 s limit the runner's own imports and kernel start
    exceed it on any CPU, so this test fails where the runner carries the student's limit: the spinning kernel must
    still be the one stopped, and named as such; the kernel sees exactly the student's limit."""
    from inferlab.exercises import grade as grading
    path = tmp_path / "limit.ipynb"
    nbformat.write(notebook("import resource\nprint(resource.getrlimit(resource.RLIMIT_CPU))", "while True:\n    pass"),
                   path)
    executed = tmp_path / "executed.ipynb"
    report = grading.execute(path, grading.GradeConfig(limits=sb.Limits(cpu_s=1), cell_timeout=60,
                                                       time_limit=60, tmp_root=tmp_path),
                             plan=[], executed_path=executed)
    assert not report.get("not_graded"), report
    assert "kernel died (CPU-time limit (1 s)); later cells not run" in report["problems"], report["problems"]
    printed = "".join(o.get("text", "") for o in nbformat.read(executed, as_version=4).cells[0].outputs)
    assert printed.strip() == "(1, 6)", printed


def spinners(cpu: int, n: int) -> list:
    """`n` busy loops pinned to CPU `cpu`: a host made busy on purpose, for one CPU."""
    return [subprocess.Popen([sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nwhile True:\n    pass"])
            for _ in range(n)]


def test_a_busy_host_does_not_shorten_a_cells_budget(tmp_path):
    """The grader, and so the sandbox, pinned to one CPU shared with two busy loops: the kernel gets about a third
    of it. A spinning cell (cell_timeout 3 s) is still interrupted after 3 s of CPU time (the next cell prints the
    kernel's CPU time since before it: 3 s, plus at most one look of the watcher, far from the 3 + 5 s at which
    it would have been killed), where a 3 s wall-clock timeout stopped it near 1 s of CPU. A sleeping cell, using
    no CPU, is stopped after 3 s of its wall time; the third spinning cell gets what is left of the notebook's 8 s
    (8 - 3 - 3 = 2 s) and the time limit is reached: the last cell is not run."""
    from inferlab.exercises import grade as grading
    path = tmp_path / "busy.ipynb"
    nbformat.write(notebook("import time\nt0 = time.process_time()", "while True:\n    pass",
                            "print(time.process_time() - t0)", "time.sleep(1000)", "while True:\n    pass",
                            "print('not run')"), path)
    cpu = min(os.sched_getaffinity(0))
    saved = os.sched_getaffinity(0)
    loops = spinners(cpu, 2)
    try:
        os.sched_setaffinity(0, {cpu})
        report = grading.execute(path, grading.GradeConfig(limits=sb.Limits(), cell_timeout=3,
                                                           time_limit=8, tmp_root=tmp_path),
                                 plan=[], executed_path=tmp_path / "out.ipynb")
    finally:
        os.sched_setaffinity(0, saved)
        for p in loops:
            p.kill()
            p.wait()
    cells = nbformat.read(tmp_path / "out.ipynb", as_version=4).cells
    used = float(cells[2].outputs[0]["text"])
    assert 2.9 <= used < 4, (used, report)
    assert [o.get("ename") for c in (cells[1], cells[3], cells[4]) for o in c.outputs] == ["KeyboardInterrupt"] * 3
    assert cells[5].outputs == []
    assert "3 cell(s) timed out after 3 s of their own time (CPU time, or wall time less the host's waits)" in \
        report["problems"], report["problems"]
    assert "notebook time limit (8 s of its own time) reached; later cells not run" in report["problems"]
    assert "not_graded" not in report


def test_a_cell_that_ignores_its_interrupt_is_killed_at_its_budget_plus_the_grace(tmp_path):
    """SIGINT ignored, then a spin: interrupted at 2 s of CPU, killed (with the kernel) at 2 + 5 s; the kernel
    cannot outlive its budget by swallowing the interrupt, and the later cells are not run."""
    from inferlab.exercises import grade as grading
    path = tmp_path / "deaf.ipynb"
    nbformat.write(notebook("import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass",
                            "print('not run')"), path)
    report = grading.execute(path, grading.GradeConfig(limits=sb.Limits(), cell_timeout=2,
                                                       time_limit=60, tmp_root=tmp_path),
                             plan=[], executed_path=tmp_path / "out.ipynb")
    assert "kernel killed: a cell ran on past its interrupt at its time limit; later cells not run" in \
        report["problems"], report["problems"]
    assert nbformat.read(tmp_path / "out.ipynb", as_version=4).cells[1].outputs == []


def test_the_disk_quota_is_the_size_of_the_working_folder_and_of_tmp(tmp_path):
    """Writing without end into /home/student or /tmp fails inside the sandbox at the quota (ENOSPC, each
    a tmpfs of `disk_bytes`), the cause is named, and nothing lands on the grader's disk. Before the working
    folder became a tmpfs, the grader measured it four times a second and killed the run past the quota."""
    from inferlab.exercises import grade as grading
    for folder in (".", "/tmp"):
        big = tmp_path / "big.ipynb"  # 1 MB files, 10 GB in all
        nbformat.write(notebook(f"for i in range(10**4):\n    open(f'{folder}/{{i}}', 'wb').write(b'x' * 10**6)",
                                "import os\nprint(sum(os.path.getsize(f'" + folder + "/' + n) for n in os.listdir('"
                                + folder + "') if n.isdigit()))"), big)
        report = grading.execute(big, grading.GradeConfig(limits=sb.Limits(disk_bytes=20 * 10**6), cell_timeout=60,
                                                          time_limit=60, tmp_root=tmp_path),
                                 plan=[], executed_path=tmp_path / "out.ipynb")
        assert grading.DISK_FULL in report["problems"], (folder, report["problems"])
        assert not [p for p in report["problems"] if "killed" in p], report["problems"]
        executed = nbformat.read(tmp_path / "out.ipynb", as_version=4)
        held = int(executed.cells[1].outputs[0]["text"])
        assert 19 * 10**6 <= held <= 20 * 10**6, (folder, held)  # the tmpfs's 20 MB, less what else is there
        assert sorted(p.name for p in tmp_path.iterdir()) == ["big.ipynb", "out.ipynb"]
        (tmp_path / "out.ipynb").unlink()


def test_the_file_count_of_the_tmpfs_is_watched(tmp_path):
    """A million empty files (no bytes: the tmpfs size does not stop them, each an inode of kernel memory) in
    the working folder, then in /dev/shm: the grader counts the tmpfs's inodes and kills the run at the quota."""
    from inferlab.exercises import grade as grading
    for folder in (".", "/dev/shm"):
        many = tmp_path / "many.ipynb"
        nbformat.write(notebook(f"for i in range(10**6):\n    open(f'{folder}/f{{i}}', 'w').close()"), many)
        report = grading.execute(many, grading.GradeConfig(limits=sb.Limits(disk_files=2000), cell_timeout=120,
                                                           time_limit=120, tmp_root=tmp_path),
                                 plan=[])
        assert "disk quota (2000 files) exceeded: killed" in report["problems"], (folder, report["problems"])
        assert list(tmp_path.glob("inferlab-grade-*")) == []


def test_a_file_count_that_cannot_be_read_is_reported_not_silent(monkeypatch):
    """bwrap reported a process id whose /proc/<pid>/root cannot be read: the run is not killed for files,
    but its problems say the file quota was not watched."""
    from inferlab.exercises import grade as grading
    monkeypatch.setattr(grading, "DISK_POLL_S", 0.01)
    proc = subprocess.Popen(["sleep", "60"])
    unwatched = []
    try:
        why = grading._watch(proc, 2, sb.Limits(disk_files=1), bytearray(b'{"child-pid": 999999999}'), unwatched)
    finally:
        proc.kill()
        proc.wait()
    assert why == "wall-clock backstop: killed after 2 s of wall time"
    assert unwatched == ["file quota not watched: the sandbox's /proc/<pid>/root could not be read"]
    # The grader's own pid and its /tmp (more than one file on it): readable, counted, over a quota of 1.
    monkeypatch.setattr(sb, "WRITABLE", ("/tmp",))
    read = []
    proc = subprocess.Popen(["sleep", "60"])
    try:
        why = grading._watch(proc, 30, sb.Limits(disk_files=1), bytearray(f'{{"child-pid": {os.getpid()}}}'.encode()),
                             read)
    finally:
        proc.kill()
        proc.wait()
    assert why == "disk quota (1 files) exceeded: killed" and read == []

"""Grade submitted notebooks: run each in its own sandbox and supervise it, read its answer variables,
then have them scored (`exercises.scoring`) and the class's files written (`exercises.results`).

Each notebook is copied into a fresh private folder and executed there by `sandbox_runner.py` inside a
bubblewrap sandbox (see `inferlab.exercises.sandbox`: read-only environment, no network, own PID
namespace, the solutions hidden, resource limits). After each check cell the runner reads the answer
variable from the kernel. The grader takes those answers as data, only for the exercises of the assignment
(`assignment_exercises`: the instructor's notebook or the sections named, never the submissions) whose check
cells it found in the submitted file itself, and scores them in its own process against values it computes
(for the student's variant when an assignment is given). The notebook's own `check` output, its prints and
any file it writes play no part in the score. Exercises without a check cell in the submission score 0.

The grader reads no file a run leaves: the runner sends its report and executed notebook over a pipe, in
records the grader parses with each one bounded (`safeio.FrameReader`); a stream that is not such records
makes the row `failed: invalid output`. The submitted file is read without following links (`safeio`). Every failure of one submission
(refused, unreadable, invalid output, an error of the grader itself) is that student's row: the files are
always written for the whole class (`Grades.failed` counts the failed rows).

Who submitted which notebook, and which of its cells run, is read first (`exercises.submissions`).
Grading without the sandbox needs `sandbox=False` (`--no-sandbox`) and prints a warning.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from inferlab.exercises import sandbox as sb
from inferlab.exercises import cgroup, seccomp
from inferlab.exercises.failures import exercise_failures
from inferlab.exercises.core import get
from inferlab.exercises.key import DEFAULT_KEY_PATH
from inferlab.exercises.sandbox_runner import POOL_CELLS, Meter
from inferlab.exercises.safeio import FrameReader, UnsafeFile, cell, loads_bounded, one_line, read_regular
from inferlab.exercises.roster import CHECK_RE, ID_RE, GradingError, read_roster  # noqa: F401 (GradingError: re-exported)
from inferlab.exercises.results import _safe, _write
from inferlab.exercises.scoring import _classmate_matches, _flag_identical_wrong, _score_student
from inferlab.exercises.submissions import (MAX_JSON_DEPTH, MAX_NOTEBOOK_BYTES, SUSPICIOUS, Submission, _claimed,
                                            assignment_exercises, check_plan, collect, exercise_cells, named_ids,
                                            skipped_cells)


GRACE_S = 30  # CPU seconds beyond the notebook's budget before RLIMIT_CPU kills a process; wall seconds of the backstop
WALL_FACTOR = 10  # the wall-clock backstop: the sandbox is killed after WALL_FACTOR x time_limit + GRACE_S of wall time
WALL_BACKSTOP = "wall-clock backstop"
DISK_POLL_S = 0.25  # how often the grader counts the files on a running sandbox's tmpfs (Limits.disk_files)
DISK_FULL = "disk full: a write to /home/student, /tmp or /dev/shm failed (No space left on device)"
MAX_REPORT_BYTES = 5 * 10**6
MAX_ANSWER_CHARS = 20_000
# Run only the cells the graded answers depend on (`skipped_cells`); False (`grade --all-cells`, or the environment
# variable INFERLAB_GRADE_ALL_CELLS=1): every cell.
SKIP_LECTURE = os.environ.get("INFERLAB_GRADE_ALL_CELLS", "") != "1"
NO_SANDBOX_WARNING = ("WARNING: grading without a sandbox: each submitted notebook runs with your rights and "
                      "can read, change or delete your files. Use --no-sandbox only for your own notebooks.")


@dataclass
class Run:
    """What happened to one notebook."""
    notebook: Path
    answers: dict = field(default_factory=dict)
    ids: set = field(default_factory=set)  # exercise ids of the check cells in the submitted file
    problems: list = field(default_factory=list)  # each limit hit or failure, with its cause
    flags: list = field(default_factory=list)
    failed: str | None = None  # "invalid output: ...", "grader error: ...": nothing of this run is scored
    why: dict = field(default_factory=dict)  # exercise id -> (what failed before its check, own): `failures`
    claimed: set = field(default_factory=set)  # student ids the notebook names (`signals.claimed_ids`)


@dataclass
class Grades:
    columns: list  # exercise ids
    rows: list  # dicts: student_id, <id>: score, total, max, status
    details: list  # dicts: student_id, exercise, score, points, result, feedback, run

    @property
    def failed(self) -> int:
        """How many students' submissions failed (refused, unreadable output, a grader error): see `grade`."""
        return sum(str(r["status"]).startswith("failed:") for r in self.rows)


@dataclass(frozen=True)
class GradeConfig:
    """How a class is graded: the time and resource limits of each run, how many run at once, the assignment and
    where its exercises come from, and what is printed. `grade` and its helpers take one; the CLI, the Gradescope
    bundle and benchmarks/grade_class.py build it. Times are seconds of a notebook's own time (CPU, or wall less
    the host's waits)."""
    cell_timeout: float = 120  # each cell's budget
    time_limit: float = 900  # the whole notebook's budget
    jobs: int | None = None  # notebooks run at once (None: `default_jobs`)
    kernel_name: str = "python3"
    sections: tuple | None = None  # the assignment's exercises: every exercise of these sections ...
    instructor: tuple | None = None  # ... or those whose check cells are in these instructor notebooks ...
    exercise_ids: tuple | None = None  # ... or these exercises, named directly (the Gradescope bundle)
    quiet: bool = False
    sandbox: bool = True  # False: run with the caller's rights (trusted notebooks only; prints a warning)
    limits: sb.Limits = sb.Limits()
    assignment: str | None = None  # score each student's own variant of this assignment (needs `key`)
    roster: str | Path | None = None
    key: bytes | None = None  # the instructor key that seeded the variants
    tmp_root: str | Path | None = None  # where each run's private folder is made (None: the system's)
    all_cells: bool | None = None  # run every cell; None: the default (SKIP_LECTURE, INFERLAB_GRADE_ALL_CELLS)

    def __post_init__(self):
        for name in ("sections", "instructor", "exercise_ids"):  # frozen: a list given is kept as a tuple
            if getattr(self, name) is not None and not isinstance(getattr(self, name), tuple):
                object.__setattr__(self, name, tuple(getattr(self, name)))
        for name in ("cell_timeout", "time_limit"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
                raise ValueError(f"GradeConfig.{name}: {value!r} is not allowed; expected seconds > 0 (finite)")
        if self.jobs is not None and (isinstance(self.jobs, bool) or not isinstance(self.jobs, int) or self.jobs < 1):
            raise ValueError(f"GradeConfig.jobs: {self.jobs!r} is not allowed; expected an int >= 1, or None "
                             "(one per core, as memory allows)")
        if not isinstance(self.limits, sb.Limits):
            raise ValueError(f"GradeConfig.limits: {self.limits!r} is not allowed; expected a sandbox.Limits")
        if not isinstance(self.kernel_name, str) or not self.kernel_name:
            raise ValueError(f"GradeConfig.kernel_name: {self.kernel_name!r} is not allowed; expected a kernel name")

    @property
    def skip_lecture(self) -> bool:
        """Whether cells no graded answer depends on are skipped (`skipped_cells`)."""
        return SKIP_LECTURE if self.all_cells is None else not self.all_cells


def output_names(keys: list) -> dict:
    """A distinct file-name stem per key: the safe form, plus a short hash where two safe forms clash."""
    safe = {k: _safe(k) for k in keys}
    counts = {}
    for v in safe.values():
        counts[v.lower()] = counts.get(v.lower(), 0) + 1
    return {k: v if counts[v.lower()] == 1 else f"{v}-{hashlib.sha256(k.encode()).hexdigest()[:8]}"
            for k, v in safe.items()}


def _kill(proc, pidfile: Path | None = None) -> None:
    """Kill the sandbox's process group (and a kernel group named in pidfile, when there is one)."""
    pids = [proc.pid]
    if pidfile is not None:
        try:
            pids.append(int(Path(pidfile).read_text().strip()))
        except (OSError, ValueError):
            pass
    for pid in pids:
        try:
            os.killpg(os.getpgid(pid), signal.SIGKILL)
        except (OSError, ProcessLookupError):
            pass


def execute(notebook: Path, config: GradeConfig, *, plan, slot: int = 0, executed_path: Path | None = None,
            cgroups: "cgroup.Cgroups | None" = None, skip_cells=()) -> dict:
    """Run `notebook` (a copy, in a fresh private folder that is removed afterwards) under `config`'s limits and
    return the runner's report, with `problems` added: each failure or limit hit, with its cause. `skip_cells`:
    code cells not run (`skipped_cells`: lecture cells no graded answer depends on)."""
    problems, cg_path = [], None
    pipes = _Pipes(config.limits, config.sandbox)
    work = Path(tempfile.mkdtemp(prefix="inferlab-grade-", dir=config.tmp_root))
    try:
        try:
            data = _read_submission(Path(notebook))
        except (UnsafeFile, OSError) as exc:
            reason = f"submission not read: {exc.strerror if isinstance(exc, OSError) and exc.strerror else exc}"
            return {"start_error": reason, "answers": {}, "problems": [reason]}
        (work / "submission.ipynb").write_bytes(data)
        inside = Path(sb.INPUT) if config.sandbox else work
        uid = sb.sandbox_uid(slot) if config.sandbox else 0
        pipes.open()
        _write_args(work, inside, uid, config, plan=plan, skip_cells=skip_cells, result_fd=pipes.write_fds[0])
        cmd, env = _command(work, inside, config, pipes)
        if cgroups is not None:
            cg_path = _cgroup(cgroups, config.limits, problems)
        proc = _start(cmd, env, work, pipes, cg_path)
        not_graded = _wait(proc, pipes, config, problems)
        if cg_path is not None:
            killed = cgroup.Cgroups.oom_kills(cg_path)
            if killed:
                problems.append(f"memory limit ({config.limits.memory_bytes / 1e9:g} GB in all, cgroup memory.max) "
                                f"hit: {killed} process(es) killed")
        report = _collect_outputs(pipes.results, proc.returncode, executed_path, bytes(pipes.log_tail))
        if not_graded:
            report["not_graded"] = not_graded
    finally:
        pipes.close()
        _remove(work)
        if cg_path is not None:
            _remove_cgroup(cg_path)
    return _with_causes(report, problems, config)


class _Pipes:
    """The pipes from one sandbox run, each read to its end by a thread (bounded): the runner's result records, its
    log (stdout and stderr), and bwrap's process-id report (sandboxed runs only). The write ends go to the child
    and are closed here once it has started; `close` closes what is still open (on an error before that)."""

    def __init__(self, limits: sb.Limits, sandbox: bool):
        self.results = FrameReader({"report.json": MAX_REPORT_BYTES,
                                    "executed.ipynb": MAX_NOTEBOOK_BYTES + executed_output_bytes(limits)})
        self.log_tail, self.info = bytearray(), bytearray()
        self.feeds = [self.results.feed, functools.partial(_keep_tail, self.log_tail, 400)]
        if sandbox:
            self.feeds.append(functools.partial(_keep_tail, self.info, 4096))
        self.read_fds, self.write_fds = [], []

    def open(self) -> None:
        for _ in self.feeds:
            r, w = os.pipe()
            self.read_fds.append(r)
            self.write_fds.append(w)

    def close_write_ends(self) -> None:
        while self.write_fds:
            os.close(self.write_fds.pop())

    def start_readers(self) -> list:
        """One thread per stream; each closes its read end at the end of the stream."""
        readers = [threading.Thread(target=_drain, args=(fd, feed), daemon=True)
                   for fd, feed in zip(self.read_fds, self.feeds)]
        self.read_fds = []
        for t in readers:
            t.start()
        return readers

    def close(self) -> None:
        for fd in self.read_fds + self.write_fds:
            os.close(fd)
        self.read_fds, self.write_fds = [], []


def _write_args(work: Path, inside: Path, uid: int, config: GradeConfig, *, plan, skip_cells, result_fd: int) -> None:
    """The runner's arguments (args.json), readable by the sandbox's uid (bound read-only: it cannot change them)."""
    limits = config.limits
    args = {"notebook": str(inside / "submission.ipynb"), "result_fd": result_fd, "plan": plan,
            "exercise_cells": exercise_cells(plan), "skip_cells": sorted(int(i) for i in skip_cells),
            "cell_timeout": config.cell_timeout, "time_limit": config.time_limit, "kernel": config.kernel_name,
            "uid": uid, "sandboxed": bool(config.sandbox),
            "limits": dict(limits.as_dict(), cpu_s=min(limits.cpu_s, config.time_limit + GRACE_S),
                           processes=_process_limit(limits.processes, uid, config.sandbox))}
    (work / "args.json").write_text(json.dumps(args))
    if uid:
        for p in [work, *work.iterdir()]:
            os.chown(p, uid, uid)


def _command(work: Path, inside: Path, config: GradeConfig, pipes: _Pipes) -> tuple:
    """(command, environment) of the run: bwrap with the seccomp filter (its pipe joins the child's fds), or the
    runner itself without the sandbox."""
    if not config.sandbox:
        runner = Path(__file__).resolve().parent / "sandbox_runner.py"
        return [sys.executable, str(runner), str(work / "args.json")], dict(os.environ, MPLBACKEND="Agg")
    program = seccomp.program()
    seccomp_fd = None
    if program:
        seccomp_fd, write_end = os.pipe()
        os.write(write_end, program)  # a few hundred bytes: fits the pipe's buffer
        os.close(write_end)
        pipes.write_fds.append(seccomp_fd)
    cmd = sb.command(work, str(inside / "args.json"), config.limits, seccomp_fd=seccomp_fd, info_fd=pipes.write_fds[2])
    return cmd, sb.environment()


def _cgroup(cgroups: "cgroup.Cgroups", limits: sb.Limits, problems: list) -> Path | None:
    """A cgroup of this run's own (memory.max, pids.max), or None (the reason added to `problems`)."""
    try:
        return cgroups.create(limits.memory_bytes, limits.processes)
    except OSError as exc:
        problems.append(f"no cgroup for this run ({exc.strerror or exc}): rlimits only")
        return None


def _start(cmd: list, env: dict, work: Path, pipes: _Pipes, cg_path: Path | None):
    """Start the run in a session of its own (in `cg_path` when there is one); the write ends are then closed here."""
    enter = functools.partial(cgroup.enter, cg_path) if cg_path is not None else None
    log_write = pipes.write_fds[1]
    try:
        return subprocess.Popen(cmd, env=env, cwd=work, stdin=subprocess.DEVNULL, stdout=log_write, stderr=log_write,
                                start_new_session=True, pass_fds=pipes.write_fds, preexec_fn=enter)
    finally:
        pipes.close_write_ends()


def _wait(proc, pipes: _Pipes, config: GradeConfig, problems: list) -> str | None:
    """Read the run's streams to their end; kill it at a limit the grader watches (`_watch`, added to `problems`).
    Returns why the run is not the submission's verdict (the wall-clock backstop: a busy host), or None."""
    readers = pipes.start_readers()
    problem = _watch(proc, WALL_FACTOR * config.time_limit + GRACE_S, config.limits,
                     pipes.info if config.sandbox else None, problems)
    not_graded = None
    if problem and problem.startswith(WALL_BACKSTOP):
        cpu_s = Meter(sandboxed=False, root=proc.pid).sample()[0]
        not_graded = (f"host too busy or the run stalled: {problem} having used {cpu_s:.0f} s of CPU (its budget: "
                      f"{config.time_limit:g} s of its own time); not the submission's verdict, grade it again")
        problem = None
    if problem or not_graded:
        _kill(proc)
        proc.wait()
        if problem:
            problems.append(problem)
    for t in readers:  # the sandbox is gone (its PID namespace with it): both streams are at their end
        t.join(timeout=30)
    return not_graded


def _remove_cgroup(cg_path: Path) -> None:
    for _ in range(50):  # its processes may still be dying
        cgroup.Cgroups.remove(cg_path)
        if not cg_path.exists():
            break
        time.sleep(0.1)


def _with_causes(report: dict, problems: list, config: GradeConfig) -> dict:
    """The report with its `problems`: those the grader saw, then each cause read from the report (`_causes`)."""
    report["problems"] = problems + _causes(report, config.cell_timeout, config.time_limit, config.limits)
    if not report.get("not_graded") and any(t.get("wall") for t in report.get("timeouts", [])):
        report["not_graded"] = (f"host too busy or the run stalled: a cell was stopped by the {WALL_BACKSTOP} "
                                f"({WALL_FACTOR} x its budget of own time) before its budget ran out; not the "
                                "submission's verdict, grade it again")
    return report


def executed_output_bytes(limits: sb.Limits) -> int:
    """The most output an executed notebook can hold: two pools (lecture cells, exercise cells) of POOL_CELLS
    cells' budgets each (`sandbox_runner.OutputBudget`), with room for the cut marks and the JSON's escapes."""
    return int(2 * POOL_CELLS * limits.output_bytes * 1.25) + 10**6


def _read_submission(notebook: Path) -> bytes:
    """The submitted file's bytes: a regular file of at most MAX_NOTEBOOK_BYTES, not followed if a link."""
    dir_fd = os.open(notebook.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return read_regular(dir_fd, notebook.name, MAX_NOTEBOOK_BYTES, single_link=False)
    finally:
        os.close(dir_fd)


def _drain(fd: int, feed) -> None:
    """Read the pipe `fd` to its end, handing each chunk to `feed`; close it."""
    try:
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return
            feed(chunk)
    except OSError:
        return
    finally:
        os.close(fd)


def _keep_tail(tail: bytearray, limit: int, chunk: bytes) -> None:
    tail += chunk
    del tail[:max(0, len(tail) - limit)]


def _collect_outputs(results: FrameReader, exit_status, executed_path: Path | None, log_tail: bytes) -> dict:
    """The runner's report (sanitised) and executed notebook (written to `executed_path`), as the grader's
    `FrameReader` kept them from the result pipe (each bounded), and the log's last line. A stream the reader
    refused (an unknown or oversize record, a header that is not one) sets `invalid_output`: the run is not
    scored."""
    report, reason = None, "no report"
    if "report.json" in results.frames:
        try:
            value = loads_bounded(results.frames["report.json"], max_bytes=MAX_REPORT_BYTES,
                                  max_depth=MAX_JSON_DEPTH)
            if isinstance(value, dict):
                report = _sanitise(value)
            else:
                reason = "a report that is not a JSON object"
        except ValueError as exc:
            reason = f"an unreadable report ({str(exc)[:100]})"
    if executed_path is not None and "executed.ipynb" in results.frames and results.error is None:
        Path(executed_path).write_bytes(results.frames["executed.ipynb"])
    lines = log_tail.decode(errors="replace").strip().splitlines()
    tail = one_line(lines[-1][:200]) if lines else "no output"
    if report is None:
        report = _sanitise({"start_error": f"the run left {reason} (exit status {exit_status}; {tail})"})
    if results.error is not None:
        report["invalid_output"] = results.error
        report["answers"] = {}
    return report


def _remove(work: Path, tries: int = 100) -> None:
    """Remove a work folder. After a kill, processes of the sandbox may still be dying (SIGKILL reaches
    them asynchronously) and create a file while the tree is removed: retry until it is gone (<= ~10 s).
    A folder the run made unreadable (chmod 000; same uid when the grader is not root) is opened up first."""
    def reopen(func, path, exc_info):
        for p in (Path(path), Path(path).parent):
            try:  # through a descriptor opened without following links: never chmod a link's target
                fd = os.open(p, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                os.chmod(f"/proc/self/fd/{fd}", 0o700)  # an O_PATH descriptor: works on a 000 folder
            except OSError:
                pass
            finally:
                os.close(fd)

    for _ in range(tries):
        if work.exists() or work.is_symlink():
            shutil.rmtree(work, onerror=reopen)
        if not work.exists():
            return
        time.sleep(0.1)


def _watch(proc, wall_s: float, limits: sb.Limits, info: bytearray | None = None,
           unwatched: list | None = None) -> str | None:
    """Wait for the run; None when it ends by itself, else why it must be killed: the wall-clock backstop (the
    runner budgets cells by their own time, see `sandbox_runner.Meter`; this only ends a run that stalled), or
    more files than `limits.disk_files` on its tmpfs together (counted every DISK_POLL_S once bwrap has
    written the sandbox's process id to `info`; a run can overshoot by what it creates in one interval).
    Bytes need no watching: each writable folder is a tmpfs of a fixed size. If the count could not be read
    at any of ten or more polls, `unwatched` (a list) gets why, for the run's problems."""
    deadline = time.monotonic() + wall_s
    polls = counted = 0
    try:
        while True:
            try:
                proc.wait(timeout=max(0.0, min(DISK_POLL_S, deadline - time.monotonic())))
                return None
            except subprocess.TimeoutExpired:
                pass
            if time.monotonic() >= deadline:
                return f"{WALL_BACKSTOP}: killed after {wall_s:g} s of wall time"
            if info is None:
                continue
            polls += 1
            files = _tmpfs_files(info)
            if files is not None:
                counted += 1
                if files > limits.disk_files:
                    return f"disk quota ({limits.disk_files} files) exceeded: killed"
    finally:
        if unwatched is not None and polls >= 10 and counted == 0:
            unwatched.append("file quota not watched: the sandbox's /proc/<pid>/root could not be read")


def _tmpfs_files(info: bytearray) -> int | None:
    """The files (inodes, less each tmpfs's root) on the sandbox's writable tmpfs, by statvfs through
    /proc/<pid>/root of the process bwrap reported in `info` (None until it has, or once it is gone).
    statvfs reads counts, never a file: a path the sandbox could redirect would only miscount its own run."""
    try:
        pid = int(json.loads(bytes(info))["child-pid"])
    except (ValueError, KeyError, TypeError):
        return None
    used = 0
    for folder in sb.WRITABLE:
        try:
            st = os.statvfs(f"/proc/{pid}/root{folder}")
        except OSError:
            return None
        used += max(0, st.f_files - st.f_ffree - 1)
    return used


def _process_limit(processes: int, uid: int, sandbox: bool) -> int:
    """RLIMIT_NPROC counts every process of the uid: a sandbox uid of its own starts from zero; the
    caller's uid (not root, or --no-sandbox) gets its current count on top."""
    if uid:
        return processes
    if os.getuid() == 0:
        return 0  # root ignores RLIMIT_NPROC; the PID namespace still ends every process with the run
    mine = 0
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            if f"\nUid:\t{os.getuid()}\t" in status.read_text():
                mine += 1
        except OSError:
            continue
    return mine + processes


def _sanitise(report):
    """The runner's report as data of the expected shape (the kernel could have rewritten it)."""
    if report is None:
        return None

    def entries(key):
        items = report.get(key)
        return [{"ename": one_line(str(e.get("ename", "error"))[:80]), "enospc": e.get("enospc") is True,
                 "wall": e.get("wall") is True, "cell": _count(e.get("cell")), "line": _count(e.get("line")),
                 "budget_s": _seconds(e.get("budget_s")), "killed": e.get("killed") is True}
                for e in items[:1000] if isinstance(e, dict)] if isinstance(items, list) else []

    cut = report.get("truncated_cells")
    cut = [{"cell": _count(t.get("cell")), "exercise": t.get("exercise") is True}
           for t in cut[:1000] if isinstance(t, dict)] if isinstance(cut, list) else []

    exit_code = report.get("kernel_exit")
    return {"errors": entries("errors"), "timeouts": entries("timeouts"),
            "time_limit": report.get("time_limit") is True, "kernel_died": report.get("kernel_died") is True,
            "kernel_exit": exit_code if isinstance(exit_code, int) and not isinstance(exit_code, bool) else None,
            "output_truncated": report.get("output_truncated") is True, "truncated_cells": cut,
            "interrupt_ignored": report.get("interrupt_ignored") is True,
            "schedstat": report.get("schedstat") is not False,
            "start_error": one_line(str(report["start_error"])[:300]) if report.get("start_error") else None,
            "answers": report.get("answers") if isinstance(report.get("answers"), dict) else {}}


def _count(value) -> int | None:
    """A non-negative int from the runner's report, else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10**9 else None


def _seconds(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 1e7 else None


def _causes(report: dict, cell_timeout: float, time_limit: float, limits: sb.Limits) -> list:
    """Each thing that went wrong, named by its cause (one phrase each, for details.csv)."""
    out = []
    if report.get("start_error"):
        out.append(str(report["start_error"])[:300])
    errors = [e for e in report.get("errors", []) if isinstance(e, dict)]
    names = sorted({str(e.get("ename", "error"))[:40] for e in errors})
    if "MemoryError" in names:
        out.append(f"memory limit ({limits.memory_bytes / 1e9:g} GB of address space) hit: MemoryError")
    if any(e.get("enospc") for e in errors):
        out.append(DISK_FULL)
    if "BlockingIOError" in names or any(e.get("ename") == "OSError" and not e.get("enospc") for e in errors):
        out.append(f"a process could not start (process limit {limits.processes}, or an OS error)")
    if errors:
        out.append(f"{len(errors)} cell(s) raised ({', '.join(names)})")
    timeouts = [t for t in report.get("timeouts", []) if isinstance(t, dict)]
    own = [t for t in timeouts if not t.get("wall") and not t.get("killed")]  # killed: "kernel killed" below
    if own:
        out.append(f"{len(own)} cell(s) timed out after {cell_timeout:g} s of their own time (CPU time, or wall "
                   "time less the host's waits)")
    if any(t.get("wall") for t in timeouts):
        out.append(f"{sum(bool(t.get('wall')) for t in timeouts)} cell(s) stopped by the {WALL_BACKSTOP} ({WALL_FACTOR} x their budget)")
    if report.get("time_limit"):
        out.append(f"notebook time limit ({time_limit:g} s of its own time) reached; later cells not run")
    if report.get("interrupt_ignored"):
        out.append("kernel killed: a cell ran on past its interrupt at its time limit; later cells not run")
    elif report.get("kernel_died"):
        code = report.get("kernel_exit")
        cause = {-signal.SIGXCPU: f"CPU-time limit ({limits.cpu_s:g} s)", -signal.SIGKILL: "killed (SIGKILL)",
                 -signal.SIGSEGV: "crashed (SIGSEGV)"}.get(code, f"exit status {code}" if code is not None else "")
        out.append("kernel died" + (f" ({cause})" if cause else "") + "; later cells not run")
    if report.get("output_truncated"):
        cut = report.get("truncated_cells") or []
        where = ", ".join(f"cell {t['cell'] + 1}" + (" (an exercise cell)" if t["exercise"] else "")
                          for t in cut[:5] if t.get("cell") is not None) + (" ..." if len(cut) > 5 else "")
        out.append(f"output limit: output of {where or 'a cell'} beyond {limits.output_bytes / 1e6:g} MB "
                   "(each cell's budget) dropped")
    if report.get("schedstat") is False and timeouts:
        out.append("host load not discounted (no /proc/<pid>/schedstat): time limits counted in wall time")
    return out


def run_submission_notebook(student: str, notebook: Path, out_dir: Path, config: GradeConfig, *, slot: int = 0,
                            stem: str | None = None, cgroups=None) -> Run:
    """Execute one notebook in its sandbox and take the answers of its own check cells."""
    run = Run(notebook)
    stem = stem or _safe(student)
    try:
        text = _read_submission(Path(notebook)).decode("utf-8", errors="replace")
        plan, run.ids, run.flags = check_plan(text)
        run.claimed = _claimed(text)
        skip = skipped_cells(text, plan) if config.skip_lecture else []
    except (UnsafeFile, OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        run.problems = [f"unreadable notebook ({one_line(why)[:200]}): not run"]
        return run
    report = execute(notebook, config, plan=plan, slot=slot, executed_path=out_dir / "executed" / f"{stem}.ipynb",
                     cgroups=cgroups, skip_cells=skip)
    run.problems = report["problems"]
    stopped = next((p for p in run.problems if "later cells not run" in p), None)
    run.why = exercise_failures(plan, report.get("errors", []) + report.get("timeouts", []), stopped)
    if report.get("not_graded"):
        run.failed = report["not_graded"]
        return run
    if report.get("invalid_output"):
        run.failed = f"invalid output: {report['invalid_output']}"
        return run
    answers = report.get("answers") if isinstance(report.get("answers"), dict) else {}
    for ex_id in run.ids:  # only exercises whose check cell is in the submitted file
        if ex_id in answers and len(json.dumps(answers[ex_id])) <= MAX_ANSWER_CHARS:
            run.answers[ex_id] = answers[ex_id]
    return run


def default_jobs(limits: sb.Limits, meminfo: str = "/proc/meminfo") -> int:
    """Notebooks graded at once by default: one per core this process may run on, and no more than the
    available memory (MemAvailable) holds at each sandbox's memory limit; at least 1."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    jobs = cores
    try:
        with open(meminfo) as fh:
            avail = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("MemAvailable:"))
        if limits.memory_bytes:
            jobs = min(jobs, avail // limits.memory_bytes)
    except (OSError, StopIteration, ValueError, IndexError):
        pass
    return max(1, int(jobs))


def grade(paths, out_dir, config: GradeConfig | None = None, **overrides) -> Grades:
    """Run every submission in its sandbox, score it, and write into out_dir: grades.csv (by student id),
    details.csv, gradescope.csv, canvas.csv, feedback/<student id>.md, summary.md and summary.json
    (executed notebooks under out_dir/executed). `config` (default `GradeConfig()`, with any `overrides` of its
    fields by keyword) says how: the limits, the jobs, and the assignment's exercises (its `sections`, the
    `instructor` notebook(s) (`assignment_exercises`) or its `exercise_ids`); with `assignment`, each student's
    own variant is scored (seeded with the instructor `key`).

    A failure of one submission (refused, unreadable, invalid output, an error of the grader while running
    or scoring it) is that student's row, with status `failed: ...` and zero for what was not scored; every
    file is written for the whole class. `Grades.failed` counts those rows."""
    config = dataclasses.replace(config or GradeConfig(), **overrides)
    if config.sandbox and not sb.available():
        raise GradingError(f"cannot grade in a sandbox: {sb.unavailable_reason()}; install bubblewrap, or pass "
                           "--no-sandbox to run the notebooks with your own rights (trusted notebooks only)")
    columns = ([get(e).id for e in config.exercise_ids] if config.exercise_ids else
               assignment_exercises(sections=config.sections, instructor=config.instructor))
    if config.jobs is None:
        config = dataclasses.replace(config, jobs=default_jobs(config.limits))
    if config.assignment and config.key is None:
        raise GradingError("--assignment needs the instructor key that seeded the variants (--key, default "
                           f"{DEFAULT_KEY_PATH}); it is written by `make student ROSTER=... ASSIGNMENT=...`")
    if not config.sandbox:
        print(NO_SANDBOX_WARNING, file=sys.stderr)
    groups, memory_mode = _cgroups(config.sandbox)
    if not config.quiet:
        print(f"memory per submission: {memory_mode}; {config.jobs} notebook(s) at a time", flush=True)
    subs, roster_rows = _submissions(paths, config.roster)
    out_dir = Path(out_dir).resolve()
    (out_dir / "executed").mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    runs = _run_all(subs, out_dir, config, groups)

    rows, details = [], []
    assigned = set(columns)
    assignment, key = config.assignment, config.key
    matched = _classmate_matches(subs, runs, columns, assignment, key) if assignment else {}
    classmates = {s.student for s in subs}
    for s in subs:
        row, ds = _score_student(s, runs[s.student], columns, assigned, assignment, key, matched=matched,
                                 classmates=classmates)
        rows.append(row)
        details += ds
    _flag_identical_wrong(rows, details, runs)

    grades = Grades(columns, rows, details)
    _write(grades, out_dir, elapsed=time.monotonic() - started, quiet=config.quiet, assignment=assignment,
           roster=roster_rows, stems=output_names([r["student_id"] for r in rows]), memory_mode=memory_mode)
    return grades


def _cgroups(sandbox: bool) -> tuple:
    """(the delegated cgroup v2 the runs are put in, or None; how each run's memory is limited, in words)."""
    groups, why = cgroup.detect() if sandbox else (None, "no sandbox")
    if groups is not None:
        try:
            groups.prepare()
        except OSError as exc:
            groups, why = None, f"the delegated cgroup v2 at {groups.base} cannot be prepared ({exc.strerror or exc})"
    memory_mode = (f"cgroup v2 memory.max and pids.max at {groups.base}" if groups is not None else
                   f"RLIMIT_AS per process, tmpfs sizes, seccomp (no cgroup v2: {why})")
    return groups, memory_mode


def _submissions(paths, roster) -> tuple:
    """(the submissions, the roster's rows): with a roster, a submission not in it is refused, and each student of
    it without a submission gets an empty one."""
    subs = collect(paths)
    if not subs:
        raise GradingError(f"no notebooks found in {', '.join(map(str, paths))}; expected .ipynb files or "
                           "folders of them")
    roster_rows = read_roster(roster) if roster else []
    if roster_rows:
        known = {r["student_id"] for r in roster_rows}
        for s in subs:
            if s.student not in known and not s.refused:
                s.refused, s.notebooks = f"not in the roster {str(roster)!r}: not run", []
        have = {s.student for s in subs}
        subs += [Submission(r["student_id"], []) for r in roster_rows if r["student_id"] not in have]
    return subs, roster_rows


def _run_all(subs: list, out_dir: Path, config: GradeConfig, groups) -> dict:
    """Run every notebook of `subs`, `config.jobs` at a time, each in a sandbox slot of its own: student -> runs."""
    tasks = [(s.student, nb) for s in subs for nb in s.notebooks]
    keys = [s + ("" if nb.stem == s else "--" + nb.stem) for s, nb in tasks]
    stems = output_names(keys)
    clashes = {k for k in keys if stems[k] != _safe(k)}
    slots = list(range(max(1, config.jobs)))
    lock = threading.Lock()

    def one(item):
        key, (student, nb) = item
        with lock:
            slot = slots.pop()
        try:
            run = run_submission_notebook(student, nb, out_dir, config, slot=slot, stem=stems[key], cgroups=groups)
        except Exception as exc:  # anything one submission provokes stays that submission's
            run = Run(nb, failed=f"grader error while running it ({type(exc).__name__}: {one_line(exc)[:160]})")
        finally:
            with lock:
                slots.append(slot)
        if key in clashes:
            run.problems.append(f"file name clash: saved as executed/{stems[key]}.ipynb")
        if not config.quiet:
            print(cell(f"ran {nb} ({student}): {len(run.answers)} answers read"
                       + (f"; {run.failed}" if run.failed else "")
                       + (f"; {'; '.join(run.problems)}" if run.problems else "")), flush=True)
        return student, run

    with ThreadPoolExecutor(max_workers=max(1, config.jobs)) as pool:
        results = list(pool.map(one, zip(keys, tasks)))
    runs = {s.student: [] for s in subs}
    for student, run in results:
        runs[student].append(run)
    return runs


# Re-exported: the command line, the tests and exercises.manual read these as `grade.X`.
from inferlab.exercises.results import MANUAL_HEADER  # noqa: E402,F401
from inferlab.exercises.scoring import manual_column, manual_parts, pending_text  # noqa: E402,F401

"""Grade submitted notebooks: run each in its own sandbox, read its answer variables, score them here.

Each notebook is copied into a fresh private folder and executed there by `sandbox_runner.py` inside a
bubblewrap sandbox (see `inferlab.exercises.sandbox`: read-only environment, no network, own PID
namespace, the solutions hidden, resource limits). After each check cell the runner reads the answer
variable from the kernel. The grader takes those answers as data, only for the exercises whose check
cells it found in the submitted file itself, and scores them in its own process against values it
computes (for the student's variant when an assignment is given). The notebook's own `check` output,
its prints and any file it writes play no part in the score. Exercises without a check cell in the
submission score 0.

Submissions: a notebook file is one student (its file stem is the student id); in a folder, each
notebook is a student and each sub-folder is a student whose notebooks are merged into one row.
Grading without the sandbox needs `sandbox=False` (`--no-sandbox`) and prints a warning.
"""
from __future__ import annotations

import csv
import hashlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from inferlab.exercises import sandbox as sb
from inferlab.exercises.core import SECTIONS, _normalise, exercises, get, variant
from inferlab.exercises.student import CHECK_RE, ID_RE

# Code that reaches into the checker instead of computing the answer; flagged for the instructor.
SUSPICIOUS = re.compile(r"\.solve\b|\.expected\(|_EXPECTED|known_mistakes|solution_source|INFERLAB_CHECK_LOG")
GRACE_S = 30  # beyond the notebook limit, for kernel start and shutdown, before the sandbox is killed
DISK_POLL_S = 0.25  # how often the grader measures a running sandbox's writable folders (disk quota)
MAX_NOTEBOOK_BYTES = 20 * 10**6
MAX_REPORT_BYTES = 5 * 10**6
MAX_ANSWER_CHARS = 20_000
NO_SANDBOX_WARNING = ("WARNING: grading without a sandbox: each submitted notebook runs with your rights and "
                      "can read, change or delete your files. Use --no-sandbox only for your own notebooks.")


@dataclass
class Submission:
    student: str
    notebooks: list


@dataclass
class Run:
    """What happened to one notebook."""
    notebook: Path
    answers: dict = field(default_factory=dict)
    ids: set = field(default_factory=set)  # exercise ids of the check cells in the submitted file
    problems: list = field(default_factory=list)  # each limit hit or failure, with its cause
    flags: list = field(default_factory=list)


@dataclass
class Grades:
    columns: list  # exercise ids
    rows: list  # dicts: student_id, <id>: score, total, max, status
    details: list  # dicts: student_id, exercise, score, points, result, feedback, run


class GradingError(ValueError):
    """A grading request that cannot be carried out (one line, for the command line)."""


def collect(paths) -> list[Submission]:
    """Students and their notebooks from files and folders (see the module docstring)."""
    subs = []
    for path in map(Path, paths):
        if path.is_file():
            subs.append(Submission(path.stem, [path]))
        elif path.is_dir():
            for child in sorted(path.iterdir()):
                if child.name.startswith("."):
                    continue
                if child.is_file() and child.suffix == ".ipynb":
                    subs.append(Submission(child.stem, [child]))
                elif child.is_dir():
                    nbs = sorted(p for p in child.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
                    if nbs:
                        subs.append(Submission(child.name, nbs))
        else:
            raise FileNotFoundError(f"submission {str(path)!r} does not exist")
    seen = {}
    for s in subs:
        if s.student in seen:
            raise ValueError(f"two submissions for student {s.student!r}: {seen[s.student]} and {s.notebooks[0]}; "
                             "rename one")
        seen[s.student] = s.notebooks[0]
    return subs


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:80] or "_"


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


def check_plan(source_text: str) -> tuple:
    """(plan, ids, flags) from a notebook file's text: per code cell, the checks it makes
    ({cell, checks: [{id, name}]}), the exercise ids it mentions, and what looks like cheating."""
    nb = json.loads(source_text)
    cells = nb.get("cells", []) if isinstance(nb, dict) else []
    plan, ids, code = [], set(), []
    for i, c in enumerate(cells):
        if not isinstance(c, dict) or c.get("cell_type") != "code":
            continue
        src = c.get("source", "")
        src = "".join(src) if isinstance(src, list) else str(src)
        code.append(src)
        checks = [{"id": ex_id, "name": name} for ex_id, name in CHECK_RE.findall(src)
                  if ex_id in _known_ids()]
        if checks:
            plan.append({"cell": i, "checks": checks})
            ids |= {c["id"] for c in checks}
    flags = ["reaches into the checker's internals"] if SUSPICIOUS.search("\n".join(code)) else []
    return plan, ids, flags


def _known_ids() -> set:
    return {e.id for e in exercises()}


def execute(notebook: Path, *, plan, sandbox: bool, limits: sb.Limits, cell_timeout: float, time_limit: float,
            kernel_name: str = "python3", slot: int = 0, executed_path: Path | None = None,
            tmp_root=None) -> dict:
    """Run `notebook` (a copy, in a fresh private folder that is removed afterwards) and return the
    runner's report, with `problems` added: each failure or limit hit, with its cause."""
    problems = []
    work = Path(tempfile.mkdtemp(prefix="inferlab-grade-", dir=tmp_root))
    try:
        data = Path(notebook).read_bytes()[:MAX_NOTEBOOK_BYTES + 1]
        if len(data) > MAX_NOTEBOOK_BYTES:
            return {"start_error": f"notebook larger than {MAX_NOTEBOOK_BYTES / 1e6:g} MB", "answers": {},
                    "problems": [f"notebook larger than {MAX_NOTEBOOK_BYTES / 1e6:g} MB: not run"]}
        (work / "submission.ipynb").write_bytes(data)
        inside = Path(sb.HOME) if sandbox else work
        uid = sb.sandbox_uid(slot) if sandbox else 0
        args = {"notebook": str(inside / "submission.ipynb"), "report": str(inside / "report.json"),
                "executed": str(inside / "executed.ipynb"), "plan": plan, "cell_timeout": cell_timeout,
                "time_limit": time_limit, "kernel": kernel_name, "uid": uid,
                "limits": dict(limits.as_dict(), cpu_s=min(limits.cpu_s, time_limit + GRACE_S),
                               processes=_process_limit(limits.processes, uid, sandbox))}
        (work / "args.json").write_text(json.dumps(args))
        (work / "tmp").mkdir()  # the sandbox's /tmp: on disk, not a RAM-backed tmpfs
        if uid:
            for p in [work, *work.iterdir()]:
                os.chown(p, uid, uid)
        if sandbox:
            cmd, env = sb.command(work, str(inside / "args.json")), sb.environment()
        else:
            runner = Path(__file__).resolve().parent / "sandbox_runner.py"
            cmd, env = [sys.executable, str(runner), str(work / "args.json")], dict(os.environ, MPLBACKEND="Agg")
        with open(work / "runner.log", "wb") as log:
            proc = subprocess.Popen(cmd, env=env, cwd=work, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                    start_new_session=True)
            problem = _watch(proc, work, time_limit + GRACE_S, limits)
            if problem:
                _kill(proc)
                proc.wait()
                problems.append(problem)
        report = _sanitise(_read_json(work / "report.json", MAX_REPORT_BYTES))
        if report is None:
            tail = _tail(work / "runner.log")
            report = {"start_error": f"the run left no report (exit status {proc.returncode}; {tail})"}
        if executed_path is not None and (work / "executed.ipynb").is_file():
            if (work / "executed.ipynb").stat().st_size <= MAX_NOTEBOOK_BYTES + limits.output_bytes * 2:
                shutil.copyfile(work / "executed.ipynb", executed_path)
    finally:
        _remove(work)
    report["problems"] = problems + _causes(report, cell_timeout, time_limit, limits)
    return report


def _remove(work: Path, tries: int = 100) -> None:
    """Remove a work folder. After a kill, processes of the sandbox may still be dying (SIGKILL reaches
    them asynchronously) and create a file while the tree is removed: retry until it is gone (<= ~10 s)."""
    for _ in range(tries):
        shutil.rmtree(work, ignore_errors=True)
        if not work.exists():
            return
        time.sleep(0.1)


def _watch(proc, work: Path, wall_s: float, limits: sb.Limits) -> str | None:
    """Wait for the run; None when it ends by itself, else why it must be killed: the wall-time limit, or
    the disk quota (bytes or entries present in its folder, /tmp included, measured every DISK_POLL_S;
    a run can overshoot by what it writes in one interval, each file capped at `file_bytes`)."""
    deadline = time.monotonic() + wall_s
    while True:
        try:
            proc.wait(timeout=max(0.0, min(DISK_POLL_S, deadline - time.monotonic())))
            return None
        except subprocess.TimeoutExpired:
            pass
        if time.monotonic() >= deadline:
            return f"wall-time limit: killed after {wall_s:g} s"
        used, entries = _disk_usage(work, limits.disk_bytes, limits.disk_files)
        if used > limits.disk_bytes:
            return f"disk quota ({limits.disk_bytes / 1e6:g} MB written) exceeded: killed"
        if entries > limits.disk_files:
            return f"disk quota ({limits.disk_files} files) exceeded: killed"


def _disk_usage(root: Path, max_bytes: int, max_entries: int) -> tuple:
    """(bytes, entries) under `root`, without following links; stops counting once past either cap.
    Bytes are the larger of the size and the blocks allocated (a sparse file counts at its size)."""
    used = entries = 0
    stack = [str(root)]
    while stack:
        try:
            it = os.scandir(stack.pop())
        except OSError:
            continue
        with it:
            for entry in it:
                entries += 1
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                used += max(st.st_size, st.st_blocks * 512)
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                if used > max_bytes or entries > max_entries:
                    return used, entries
    return used, entries


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


def _read_json(path: Path, limit: int):
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)
        if len(data) > limit:
            return None
        value = json.loads(data)
        return value if isinstance(value, dict) else None
    except (OSError, ValueError):
        return None


def _sanitise(report):
    """The runner's report as data of the expected shape (the kernel could have rewritten it)."""
    if report is None:
        return None

    def entries(key):
        items = report.get(key)
        return [{"ename": str(e.get("ename", "error"))[:80]} for e in items[:1000] if isinstance(e, dict)] \
            if isinstance(items, list) else []

    exit_code = report.get("kernel_exit")
    return {"errors": entries("errors"), "timeouts": entries("timeouts"),
            "time_limit": report.get("time_limit") is True, "kernel_died": report.get("kernel_died") is True,
            "kernel_exit": exit_code if isinstance(exit_code, int) and not isinstance(exit_code, bool) else None,
            "output_truncated": report.get("output_truncated") is True,
            "start_error": str(report["start_error"])[:300] if report.get("start_error") else None,
            "answers": report.get("answers") if isinstance(report.get("answers"), dict) else {}}


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, path.stat().st_size - 400))
            lines = fh.read().decode(errors="replace").strip().splitlines()
        return lines[-1][:200] if lines else "no output"
    except OSError:
        return "no output"


def _causes(report: dict, cell_timeout: float, time_limit: float, limits: sb.Limits) -> list:
    """Each thing that went wrong, named by its cause (one phrase each, for details.csv)."""
    out = []
    if report.get("start_error"):
        out.append(str(report["start_error"])[:300])
    errors = [e for e in report.get("errors", []) if isinstance(e, dict)]
    names = sorted({str(e.get("ename", "error"))[:40] for e in errors})
    if "MemoryError" in names:
        out.append(f"memory limit ({limits.memory_bytes / 1e9:g} GB of address space) hit: MemoryError")
    if any(n in ("BlockingIOError", "OSError") for n in names):
        out.append(f"a process could not start (process limit {limits.processes}, or an OS error)")
    if errors:
        out.append(f"{len(errors)} cell(s) raised ({', '.join(names)})")
    if report.get("timeouts"):
        out.append(f"{len(report['timeouts'])} cell(s) timed out after {cell_timeout:g} s")
    if report.get("time_limit"):
        out.append(f"notebook time limit ({time_limit:g} s) reached; later cells not run")
    if report.get("kernel_died"):
        code = report.get("kernel_exit")
        cause = {-signal.SIGXCPU: f"CPU-time limit ({limits.cpu_s:g} s)", -signal.SIGKILL: "killed (SIGKILL)",
                 -signal.SIGSEGV: "crashed (SIGSEGV)"}.get(code, f"exit status {code}" if code is not None else "")
        out.append("kernel died" + (f" ({cause})" if cause else "") + "; later cells not run")
    if report.get("output_truncated"):
        out.append(f"output limit: output beyond {limits.output_bytes / 1e6:g} MB dropped")
    return out


def run_submission_notebook(student: str, notebook: Path, out_dir: Path, *, cell_timeout: float,
                            time_limit: float, kernel_name: str, sandbox: bool = True,
                            limits: sb.Limits = sb.Limits(), slot: int = 0, stem: str | None = None,
                            tmp_root=None) -> Run:
    """Execute one notebook in its sandbox and take the answers of its own check cells."""
    run = Run(notebook)
    stem = stem or _safe(student)
    plan = []
    try:
        with open(notebook, "rb") as fh:
            text = fh.read(MAX_NOTEBOOK_BYTES + 1).decode("utf-8", errors="replace")
        plan, run.ids, run.flags = check_plan(text)
    except (OSError, ValueError, AttributeError, TypeError):
        pass  # the runner reports unreadable notebooks
    report = execute(notebook, plan=plan, sandbox=sandbox, limits=limits, cell_timeout=cell_timeout,
                     time_limit=time_limit, kernel_name=kernel_name, slot=slot,
                     executed_path=out_dir / "executed" / f"{stem}.ipynb", tmp_root=tmp_root)
    run.problems = report["problems"]
    answers = report.get("answers") if isinstance(report.get("answers"), dict) else {}
    for ex_id in run.ids:  # only exercises whose check cell is in the submitted file
        if ex_id in answers and len(json.dumps(answers[ex_id])) <= MAX_ANSWER_CHARS:
            run.answers[ex_id] = answers[ex_id]
    return run


def _columns(runs: dict, sections) -> list[str]:
    if sections:
        return [e.id for s in sections for e in exercises(s)]
    seen = set()
    for rs in runs.values():
        for r in rs:
            seen |= r.ids
    wanted = {i.split("-")[0] for i in seen} & set(SECTIONS)
    return [e.id for e in exercises() if e.section in wanted]


def read_roster(path) -> list[dict]:
    """Rows of a roster CSV with a `student_id` column (optional: name, email, section)."""
    path = Path(path)
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            rows = list(csv.DictReader(fh))
    except IsADirectoryError:
        raise GradingError(f"roster {str(path)!r} is a folder; expected a CSV file with a student_id column")
    except FileNotFoundError:
        raise GradingError(f"roster {str(path)!r} does not exist; expected a CSV file with a student_id column")
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise GradingError(f"roster {str(path)!r} cannot be read ({exc}); expected a CSV file with a "
                           "student_id column")
    if not rows or "student_id" not in rows[0]:
        raise GradingError(f"roster {str(path)!r} has no student_id column (columns: "
                           f"{', '.join(rows[0]) if rows else 'none'}); expected student_id[,name,email,section]")
    ids = [r["student_id"].strip() for r in rows]
    bad = [i for i in ids if not re.fullmatch(r"[A-Za-z0-9_.@-]{1,64}", i)]
    if bad:
        raise GradingError(f"roster {str(path)!r}: student_id {bad[0]!r} is not allowed; use 1 to 64 letters, "
                           "digits, '_', '.', '@' or '-'")
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise GradingError(f"roster {str(path)!r}: student_id {dup[0]!r} appears twice; ids must be unique")
    return [dict(r, student_id=r["student_id"].strip()) for r in rows]


def grade(paths, out_dir, *, cell_timeout: float = 120, time_limit: float = 900, jobs: int = 1,
          kernel_name: str = "python3", sections=None, quiet: bool = False, sandbox: bool = True,
          limits: sb.Limits = sb.Limits(), assignment: str | None = None, roster=None, tmp_root=None) -> Grades:
    """Run every submission in its sandbox, score it, and write into out_dir: grades.csv (by student id),
    details.csv, gradescope.csv, canvas.csv, feedback/<student id>.md, summary.md and summary.json
    (executed notebooks under out_dir/executed). `assignment`: score each student's own variant."""
    if sandbox and not sb.available():
        raise GradingError(f"cannot grade in a sandbox: {sb.unavailable_reason()}; install bubblewrap, or pass "
                           "--no-sandbox to run the notebooks with your own rights (trusted notebooks only)")
    if not sandbox:
        print(NO_SANDBOX_WARNING, file=sys.stderr)
    subs = collect(paths)
    if not subs:
        raise GradingError(f"no notebooks found in {', '.join(map(str, paths))}; expected .ipynb files or "
                           "folders of them")
    roster_rows = read_roster(roster) if roster else []
    if roster_rows:
        known = {r["student_id"] for r in roster_rows}
        unknown = [s.student for s in subs if s.student not in known]
        if unknown:
            raise GradingError(f"submission {unknown[0]!r} is not in the roster {str(roster)!r}; name each "
                               "submission by its student_id")
        have = {s.student for s in subs}
        subs += [Submission(r["student_id"], []) for r in roster_rows if r["student_id"] not in have]
    out_dir = Path(out_dir).resolve()
    (out_dir / "executed").mkdir(parents=True, exist_ok=True)
    tasks = [(s.student, nb) for s in subs for nb in s.notebooks]
    keys = [s + ("" if nb.stem == s else "--" + nb.stem) for s, nb in tasks]
    stems = output_names(keys)
    clashes = {k for k in keys if stems[k] != _safe(k)}
    started = time.monotonic()
    slots = list(range(max(1, jobs)))
    import threading
    lock = threading.Lock()

    def one(item):
        key, (student, nb) = item
        with lock:
            slot = slots.pop()
        try:
            run = run_submission_notebook(student, nb, out_dir, cell_timeout=cell_timeout, time_limit=time_limit,
                                          kernel_name=kernel_name, sandbox=sandbox, limits=limits, slot=slot,
                                          stem=stems[key], tmp_root=tmp_root)
        finally:
            with lock:
                slots.append(slot)
        if key in clashes:
            run.problems.append(f"file name clash: saved as executed/{stems[key]}.ipynb")
        if not quiet:
            print(f"ran {nb} ({student}): {len(run.answers)} answers read"
                  + (f"; {'; '.join(run.problems)}" if run.problems else ""), flush=True)
        return student, run

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        results = list(pool.map(one, zip(keys, tasks)))
    runs = {s.student: [] for s in subs}
    for student, run in results:
        runs[student].append(run)

    columns = _columns(runs, sections)
    rows, details = [], []
    for s in subs:
        answers, ids = {}, set()
        notes = [] if s.notebooks else ["no submission"]
        for run in runs[s.student]:
            answers.update(run.answers)
            ids |= run.ids
            prefix = f"{run.notebook.name}: " if len(runs[s.student]) > 1 else ""
            notes += [prefix + p for p in run.problems] + [prefix + "flag: " + f for f in run.flags]
        row = {"student_id": s.student}
        total = max_total = 0.0
        for ex_id in columns:
            ex = variant(ex_id, s.student, assignment) if assignment else get(ex_id)
            max_total += ex.points
            if ex_id in answers:
                result = ex.evaluate(answers[ex_id])
                score, outcome, feedback = result.score, result.status, result.message.replace("\n", " | ")
            else:
                score = 0.0
                outcome = "not run" if ex_id in ids else "no check"
                feedback = ("its check never ran (an error before it, or a limit)" if ex_id in ids
                            else "the notebook has no check cell for this exercise")
            row[ex_id] = round(score, 3)
            total += score
            details.append({"student_id": s.student, "exercise": ex_id, "score": round(score, 3),
                            "points": ex.points, "result": outcome, "feedback": feedback,
                            "run": "; ".join(notes) or "ok"})
        row.update(total=round(total, 3), max=max_total, status="; ".join(notes) or "ok")
        rows.append(row)

    grades = Grades(columns, rows, details)
    _write(grades, out_dir, elapsed=time.monotonic() - started, quiet=quiet, assignment=assignment,
           roster=roster_rows, stems=output_names([r["student_id"] for r in rows]))
    return grades


def _fmt(x) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def _write(grades: Grades, out_dir: Path, *, elapsed: float, quiet: bool, assignment=None, roster=(),
           stems=None) -> None:
    header = ["student_id", *grades.columns, "total", "max", "status"]
    with open(out_dir / "grades.csv", "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=header)
        w.writeheader()
        for row in grades.rows:
            w.writerow({k: _fmt(v) for k, v in row.items()})
    with open(out_dir / "details.csv", "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=["student_id", "exercise", "score", "points", "result", "feedback", "run"])
        w.writeheader()
        for d in grades.details:
            w.writerow({k: _fmt(v) for k, v in d.items()})
    _write_exports(grades, out_dir, assignment or "inferlab exercises", {r["student_id"]: r for r in roster})
    _write_feedback(grades, out_dir / "feedback", stems or {})

    n = len(grades.rows)
    per_ex = []
    for ex_id in grades.columns:
        ds = [d for d in grades.details if d["exercise"] == ex_id]
        ex = get(ex_id)
        per_ex.append({
            "exercise": ex_id, "title": ex.heading(), "kind": ex.kind, "points": ex.points,
            "answered": sum(d["result"] not in ("no answer", "not run", "no check") for d in ds) / n,
            "pass_rate": sum(d["result"] == "pass" for d in ds) / n,
            "mean_score": sum(d["score"] for d in ds) / n,
        })
    totals = [r["total"] for r in grades.rows]
    max_total = grades.rows[0]["max"] if grades.rows else 0
    summary = {
        "students": n, "max_points": max_total, "assignment": assignment,
        "mean_total": statistics.fmean(totals) if totals else 0.0,
        "median_total": statistics.median(totals) if totals else 0.0,
        "exercises": per_ex,
        "problems": {r["student_id"]: r["status"] for r in grades.rows if r["status"] != "ok"},
        "elapsed_s": round(elapsed, 1),
    }
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    lines = [
        "# Grades summary", "",
        f"{n} submission(s); mean total {summary['mean_total']:.2f} / {max_total:g}, "
        f"median {summary['median_total']:.2f}; graded in {elapsed:.0f} s.", "",
        "| exercise | title | kind | points | answered | passed | mean score |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for e in per_ex:
        lines.append(f"| {e['exercise']} | {e['title']} | {e['kind']} | {e['points']} | {e['answered']:.0%} "
                     f"| {e['pass_rate']:.0%} | {e['mean_score']:.2f} |")
    if summary["problems"]:
        lines += ["", "Runs with problems (scored anyway):", ""]
        lines += [f"- {s}: {p}" for s, p in summary["problems"].items()]
    text = "\n".join(lines) + "\n"
    (out_dir / "summary.md").write_text(text)
    if not quiet:
        print(text)
        print(f"wrote {out_dir / 'grades.csv'}, details.csv, gradescope.csv, canvas.csv, feedback/, summary.md")


def _write_exports(grades: Grades, out_dir: Path, assignment: str, roster: dict) -> None:
    """gradescope.csv (Name, SID, Email, Total Score) and canvas.csv (the gradebook import layout:
    Student, ID, SIS User ID, SIS Login ID, Section, then one column named after the assignment)."""
    with open(out_dir / "gradescope.csv", "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["Name", "SID", "Email", "Total Score"])
        for row in grades.rows:
            r = roster.get(row["student_id"], {})
            w.writerow([r.get("name", ""), row["student_id"], r.get("email", ""), _fmt(row["total"])])
    with open(out_dir / "canvas.csv", "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["Student", "ID", "SIS User ID", "SIS Login ID", "Section", assignment])
        w.writerow(["Points Possible", "", "", "", "", _fmt(grades.rows[0]["max"]) if grades.rows else "0"])
        for row in grades.rows:
            r = roster.get(row["student_id"], {})
            w.writerow([r.get("name", ""), r.get("canvas_id", ""), row["student_id"], r.get("email", ""),
                        r.get("section", ""), _fmt(row["total"])])


def _write_feedback(grades: Grades, folder: Path, stems: dict) -> None:
    """feedback/<student id>.md: per exercise the score and the hint (never the expected value)."""
    folder.mkdir(parents=True, exist_ok=True)
    for row in grades.rows:
        sid = row["student_id"]
        lines = [f"# Feedback for {sid}", "", f"Total: {_fmt(row['total'])} / {_fmt(row['max'])} points.", ""]
        if row["status"] != "ok":
            lines += [f"Run: {row['status']}", ""]
        lines += ["| exercise | score | result | feedback |", "| --- | ---: | --- | --- |"]
        for d in grades.details:
            if d["student_id"] == sid:
                fb = str(d["feedback"]).replace("|", "/")
                lines.append(f"| {d['exercise']} | {_fmt(d['score'])}/{d['points']} | {d['result']} | {fb} |")
        (folder / f"{stems.get(sid, _safe(sid))}.md").write_text("\n".join(lines) + "\n", encoding="utf-8")

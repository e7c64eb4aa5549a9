"""Grade submitted notebooks: run each in a fresh kernel under time limits, re-check the answers
its checks recorded, and write a score table.

Each notebook runs in its own subprocess (`python -m inferlab.exercises _run`) with its own kernel,
in an empty working folder. A cell that raises does not stop the run; a cell that runs past the
per-cell timeout is interrupted and the next cell runs; at the whole-notebook limit the kernel is
killed and the checks not yet reached score 0. `check` appends each answer to a log (INFERLAB_CHECK_LOG);
the grader scores the last answer per exercise in its own process, so nothing the notebook prints or
redefines can change a score.

Submissions: a notebook file is one student (its file stem); in a folder, each notebook is a student
and each sub-folder is a student whose notebooks are merged into one row.
"""
from __future__ import annotations

import csv
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from inferlab.exercises.core import LOG_ENV, SECTIONS, exercises, get, read_log
from inferlab.exercises.student import ID_RE

# Code that reaches into the checker instead of computing the answer; flagged for the instructor.
SUSPICIOUS = re.compile(r"\.solve\b|\.expected\(|_EXPECTED|known_mistakes|solution_source|" + LOG_ENV)
GRACE_S = 60  # beyond the notebook limit, for kernel start and shutdown, before a hard kill


@dataclass
class Submission:
    student: str
    notebooks: list


@dataclass
class Run:
    """What happened to one notebook."""
    notebook: Path
    answers: dict = field(default_factory=dict)
    ids: set = field(default_factory=set)  # exercise ids its cells mention
    problems: list = field(default_factory=list)
    flags: list = field(default_factory=list)


@dataclass
class Grades:
    columns: list  # exercise ids
    rows: list  # dicts: student, <id>: score, total, max, status
    details: list  # dicts: student, exercise, score, points, result, feedback


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
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def _kill(proc, pidfile: Path) -> None:
    """Kill the runner's process group and the kernel's (which runs in its own session)."""
    pids = [proc.pid]
    try:
        pids.append(int(pidfile.read_text().strip()))
    except (OSError, ValueError):
        pass
    for pid in pids:
        try:
            if hasattr(os, "killpg"):
                os.killpg(os.getpgid(pid), signal.SIGKILL)
            else:  # pragma: no cover - Windows
                os.kill(pid, signal.SIGTERM)
        except (OSError, ProcessLookupError):
            pass


def run_submission_notebook(student: str, notebook: Path, out_dir: Path, *, cell_timeout: float,
                            time_limit: float, kernel_name: str) -> Run:
    """Execute one notebook in a runner subprocess and read back what its checks recorded."""
    run = Run(notebook)
    stem = _safe(student) + ("" if notebook.stem == student else "--" + _safe(notebook.stem))
    work = out_dir / "work"
    log, report, pidfile = work / f"{stem}.checks.jsonl", work / f"{stem}.report.json", work / f"{stem}.pid"
    for p in (log, report, pidfile):
        p.unlink(missing_ok=True)
    executed = out_dir / "executed" / f"{stem}.ipynb"
    try:
        cells = json.loads(notebook.read_text(encoding="utf-8", errors="replace")).get("cells", [])
        code = "\n".join("".join(c.get("source", "")) for c in cells if c.get("cell_type") == "code")
        run.ids = set(ID_RE.findall(code))
        if SUSPICIOUS.search(code):
            run.flags.append("reaches into the checker's internals")
    except (OSError, ValueError, AttributeError, TypeError):
        pass  # the runner reports unreadable notebooks
    cmd = [sys.executable, "-m", "inferlab.exercises", "_run", str(notebook), "--report", str(report),
           "--executed", str(executed), "--pidfile", str(pidfile), "--cell-timeout", str(cell_timeout),
           "--time-limit", str(time_limit), "--kernel", kernel_name]
    env = dict(os.environ, **{LOG_ENV: str(log), "MPLBACKEND": "Agg", "PYTHONUNBUFFERED": "1"})
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=hasattr(os, "killpg"))
    try:
        output, _ = proc.communicate(timeout=time_limit + GRACE_S)
    except subprocess.TimeoutExpired:
        _kill(proc, pidfile)
        output, _ = proc.communicate()
        run.problems.append(f"killed after {time_limit + GRACE_S:g} s")
    (work / f"{stem}.runner.log").write_bytes(output or b"")
    try:
        info = json.loads(report.read_text())
    except (OSError, ValueError):
        tail = (output or b"").decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        info = {"start_error": f"runner failed: {tail[0][:200]}"}
    if info.get("start_error"):
        run.problems.append(info["start_error"])
    if info.get("errors"):
        names = sorted(set(e["ename"] for e in info["errors"]))
        run.problems.append(f"{len(info['errors'])} cell(s) raised ({', '.join(names)})")
    if info.get("timeouts"):
        run.problems.append(f"{len(info['timeouts'])} cell(s) timed out after {cell_timeout:g} s")
    if info.get("time_limit"):
        run.problems.append(f"notebook time limit ({time_limit:g} s) reached; later cells not run")
    if info.get("kernel_died"):
        run.problems.append("kernel died; later cells not run")
    run.answers = read_log(log)
    return run


def _columns(runs: dict, sections) -> list[str]:
    if sections:
        return [e.id for s in sections for e in exercises(s)]
    seen = set()
    for rs in runs.values():
        for r in rs:
            seen |= r.ids | set(r.answers)
    wanted = {i.split("-")[0] for i in seen} & set(SECTIONS)
    return [e.id for e in exercises() if e.section in wanted]


def grade(paths, out_dir, *, cell_timeout: float = 120, time_limit: float = 900, jobs: int = 1,
          kernel_name: str = "python3", sections=None, quiet: bool = False) -> Grades:
    """Run every submission, score it, and write grades.csv, details.csv, summary.md and
    summary.json into out_dir (executed notebooks under out_dir/executed)."""
    subs = collect(paths)
    if not subs:
        raise ValueError(f"no notebooks found in {', '.join(map(str, paths))}")
    out_dir = Path(out_dir).resolve()  # the kernels run elsewhere: their log path must be absolute
    (out_dir / "executed").mkdir(parents=True, exist_ok=True)
    (out_dir / "work").mkdir(parents=True, exist_ok=True)
    tasks = [(s.student, nb) for s in subs for nb in s.notebooks]
    started = time.monotonic()

    def one(task):
        student, nb = task
        run = run_submission_notebook(student, nb, out_dir, cell_timeout=cell_timeout, time_limit=time_limit,
                                      kernel_name=kernel_name)
        if not quiet:
            print(f"ran {nb} ({student}): {len(run.answers)} checks recorded"
                  + (f"; {'; '.join(run.problems)}" if run.problems else ""), flush=True)
        return student, run

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        results = list(pool.map(one, tasks))
    runs = {s.student: [] for s in subs}
    for student, run in results:
        runs[student].append(run)

    columns = _columns(runs, sections)
    rows, details = [], []
    for s in subs:
        answers, ids = {}, set()
        notes = []
        for run in runs[s.student]:
            answers.update(run.answers)
            ids |= run.ids
            prefix = f"{run.notebook.name}: " if len(runs[s.student]) > 1 else ""
            notes += [prefix + p for p in run.problems] + [prefix + "flag: " + f for f in run.flags]
        row = {"student": s.student}
        total = max_total = 0.0
        for ex_id in columns:
            ex = get(ex_id)
            max_total += ex.points
            if ex_id in answers:
                result = ex.evaluate(answers[ex_id])
                score, outcome, feedback = result.score, result.status, result.message.replace("\n", " | ")
            else:
                score = 0.0
                outcome = "not run" if ex_id in ids else "no check"
                feedback = ("its check never ran (an error before it, or the time limit)" if ex_id in ids
                            else "the notebook has no check for this exercise")
            row[ex_id] = round(score, 3)
            total += score
            details.append({"student": s.student, "exercise": ex_id, "score": round(score, 3),
                            "points": ex.points, "result": outcome, "feedback": feedback})
        row.update(total=round(total, 3), max=max_total, status="; ".join(notes) or "ok")
        rows.append(row)

    grades = Grades(columns, rows, details)
    _write(grades, out_dir, elapsed=time.monotonic() - started, quiet=quiet)
    return grades


def _fmt(x) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def _write(grades: Grades, out_dir: Path, *, elapsed: float, quiet: bool) -> None:
    header = ["student", *grades.columns, "total", "max", "status"]
    with open(out_dir / "grades.csv", "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=header)
        w.writeheader()
        for row in grades.rows:
            w.writerow({k: _fmt(v) for k, v in row.items()})
    with open(out_dir / "details.csv", "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=["student", "exercise", "score", "points", "result", "feedback"])
        w.writeheader()
        for d in grades.details:
            w.writerow({k: _fmt(v) for k, v in d.items()})

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
        "students": n, "max_points": max_total,
        "mean_total": statistics.fmean(totals) if totals else 0.0,
        "median_total": statistics.median(totals) if totals else 0.0,
        "exercises": per_ex,
        "problems": {r["student"]: r["status"] for r in grades.rows if r["status"] != "ok"},
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
        print(f"wrote {out_dir / 'grades.csv'}, details.csv, summary.md, summary.json")


# The runner, in its own process --------------------------------------------------------------------

def run_one(notebook, *, report_path, executed_path, pidfile, cell_timeout: float, time_limit: float,
            kernel_name: str) -> dict:
    """Execute `notebook` cell by cell in a fresh kernel (errors allowed, per-cell timeout with
    interrupt, whole-notebook deadline); write a JSON report of what went wrong."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import DeadKernelError

    deadline = time.monotonic() + time_limit
    report = {"cells": 0, "errors": [], "timeouts": [], "time_limit": False, "kernel_died": False,
              "start_error": None}

    def save():
        Path(report_path).write_text(json.dumps(report))

    try:
        nb = nbformat.read(notebook, as_version=4)
    except Exception as exc:  # anything unreadable is scored 0, with the reason
        report["start_error"] = f"unreadable notebook ({type(exc).__name__}: {str(exc)[:120]})"
        save()
        return report

    def on_error(cell, cell_index, execute_reply):
        content = execute_reply.get("content", {})
        entry = {"cell": cell_index, "ename": content.get("ename", "error")}
        (report["timeouts"] if entry["ename"] == "CellTimeoutError" else report["errors"]).append(entry)

    workdir = tempfile.mkdtemp(prefix="inferlab-grade-")
    client = NotebookClient(
        nb, timeout=cell_timeout, kernel_name=kernel_name, allow_errors=True, interrupt_on_timeout=True,
        error_on_timeout={"ename": "CellTimeoutError", "evalue": f"cell ran past {cell_timeout:g} s",
                          "traceback": []},
        # iopub_timeout: how long to wait for a cell's last output after its reply; a cell that ignores
        # the timeout's interrupt never sends it, and the default (4 s) would stretch every later timeout.
        shutdown_kernel="immediate", startup_timeout=60, iopub_timeout=2, record_timing=False, coalesce_streams=True,
        resources={"metadata": {"path": workdir}},
        on_cell_error=on_error)
    try:
        with client.setup_kernel():
            pid = getattr(getattr(client.km, "provisioner", None), "pid", None)
            if pid:
                Path(pidfile).write_text(str(pid))
            for index, cell in enumerate(nb.cells):
                if cell.cell_type != "code" or not cell.source.strip():
                    continue
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    report["time_limit"] = True
                    break
                client.timeout = max(1, int(min(cell_timeout, remaining)))
                try:
                    client.execute_cell(cell, index)
                except DeadKernelError:
                    report["kernel_died"] = True
                    break
                report["cells"] += 1
            else:
                report["time_limit"] = bool(report["timeouts"]) and time.monotonic() >= deadline
    except Exception as exc:  # kernel failed to start, or nbclient gave up
        report["start_error"] = report["start_error"] or f"execution stopped ({type(exc).__name__}: {str(exc)[:120]})"
    try:
        nbformat.write(nb, executed_path)
    except Exception:
        pass
    save()
    return report

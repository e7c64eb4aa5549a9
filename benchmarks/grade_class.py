"""Grade a class of N submissions of one chapter in the sandbox and time it: seconds per submission.

Each submission is the chapter's instructor notebook (the whole lecture and every answer), copied N times
under the ids s01 ... sNN. Graded with the grader's defaults: parallel (`grade.default_jobs`, one job per core,
memory-checked), and only the cells the answers depend on (`exercises.depends`; `--all-cells` runs every lecture
cell, as before issue 37). Writes
build/bench/grade_class.json (wall seconds, per submission, jobs, CPU cores, the host's load before) and a
figure: each submission's finishing time against its rank, so the slope is the class's rate.

    nice -n 10 .venv/bin/python benchmarks/grade_class.py --n 40 --chapter chapters/15_1_2_decode_kv_cache.ipynb \\
        --figure docs/img/grade_class.png
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=40, help="submissions (default 40)")
    parser.add_argument("--chapter", default="chapters/15_1_2_decode_kv_cache.ipynb")
    parser.add_argument("--jobs", type=int, default=None, help="default: the grader's (one per core)")
    parser.add_argument("--out", default="build/bench/grade_class.json")
    parser.add_argument("--figure", default=None, help="write the figure here (.png)")
    parser.add_argument("--all-cells", action="store_true", help="run every lecture cell (no dependency analysis)")
    args = parser.parse_args(argv)
    if args.n < 1:
        parser.error(f"--n must be >= 1; got {args.n}")

    from inferlab.exercises import sandbox as sb
    from inferlab.exercises.grade import GradeConfig, default_jobs, grade
    limits = sb.Limits()
    jobs = args.jobs or default_jobs(limits)
    work = Path(tempfile.mkdtemp(prefix="grade-class-"))
    try:
        subs = work / "subs"
        subs.mkdir()
        for i in range(1, args.n + 1):
            shutil.copyfile(args.chapter, subs / f"s{i:02d}.ipynb")
        load_before = os.getloadavg()
        finished = []
        started = time.monotonic()
        import builtins
        real_print = builtins.print

        def stamp(*a, **k):  # the grader prints "ran <notebook> ..." as each one ends
            if a and str(a[0]).startswith("ran "):
                finished.append(time.monotonic() - started)
            return real_print(*a, **k)

        builtins.print = stamp
        try:
            grades = grade([subs], work / "out", GradeConfig(instructor=[args.chapter], jobs=jobs, limits=limits,
                                                             all_cells=args.all_cells))
        finally:
            builtins.print = real_print
        wall_s = time.monotonic() - started
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = {"submissions": args.n, "chapter": args.chapter, "jobs": jobs, "cores": os.cpu_count(),
              "lecture_cells": "all" if args.all_cells else "those the answers depend on",
              "wall_s": round(wall_s, 1), "s_per_submission": round(wall_s / args.n, 2),
              "failed": grades.failed, "not_ok": sum(r["status"] != "ok" for r in grades.rows),
              "load_before": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in os.getloadavg()],
              "finished_s": [round(t, 1) for t in finished]}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "finished_s"}))
    if args.figure:
        figure(result, Path(args.figure))
    return 0


def figure(result: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    done = sorted(result["finished_s"])
    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=110)
    ax.plot([t / 60 for t in done], range(1, len(done) + 1), marker="o", markersize=3)
    ax.axvline(10, color="grey", linestyle="--", linewidth=1)
    ax.annotate("10 min target", (10, 1), xytext=(4, 4), textcoords="offset points", color="grey")
    ax.set_xlabel("wall time since the start (min)")
    ax.set_ylabel("submissions graded")
    ax.set_title(f"{result['submissions']} submissions in {result['wall_s'] / 60:.1f} min "
                 f"({result['s_per_submission']:.1f} s each, {result['jobs']} jobs on {result['cores']} cores)",
                 fontsize=10)
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)


if __name__ == "__main__":
    sys.exit(main())

"""Command line of the exercises: list, cells, sample, build-student, grade (`python -m inferlab.exercises ...`,
or `inferlab classroom ...` once inferlab.cli lists this module).

    python -m inferlab.exercises build-student chapters/*.ipynb --out build/student
    python -m inferlab.exercises grade submissions/ --out build/grades
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _cmd_list(args) -> int:
    from inferlab.exercises import exercises
    for e in exercises(args.section):
        print(f"{e.id:11s} {e.kind:13s} {e.points} pt  {e.heading()}")
    return 0


def _cmd_cells(args) -> int:
    from inferlab.exercises.cells import exercise_section
    sys.stdout.write(exercise_section(args.section, heading=not args.no_heading))
    return 0


def write_sample(out, execute: bool = True) -> Path:
    """Write the instructor sample (every exercise, py:percent) to `out` and its .ipynb twin beside
    it, executed unless execute=False. Raises RuntimeError if executing it fails."""
    import jupytext
    import nbformat

    from inferlab.exercises.cells import sample_notebook_text
    from inferlab.exercises.grade import run_one

    out = Path(out)
    out.write_text(sample_notebook_text())
    ipynb = out.with_suffix(".ipynb")
    nb = jupytext.read(out)
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i}"  # stable ids: regenerating changes nothing that did not change
    nbformat.write(nb, ipynb)
    if execute:
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            report = run_one(ipynb, report_path=Path(tmp) / "r.json", executed_path=ipynb,
                             pidfile=Path(tmp) / "pid", cell_timeout=120, time_limit=600, kernel_name="python3")
        if report["errors"] or report["timeouts"] or report["start_error"]:
            raise RuntimeError(f"executing {ipynb} failed: {report}")
    return ipynb


def _cmd_sample(args) -> int:
    """Write the instructor sample (py:percent) and its executed .ipynb twin."""
    try:
        ipynb = write_sample(args.out, execute=not args.no_execute)
    except RuntimeError as err:
        print(err, file=sys.stderr)
        return 1
    print(f"wrote {args.out} and {ipynb}")
    return 0


def _cmd_build_student(args) -> int:
    from inferlab.exercises.student import build_student
    if not args.sources:
        print("build-student: no notebooks given (is chapters/*.ipynb empty?)", file=sys.stderr)
        return 2
    build_student(args.sources, args.out, allow_leaks=args.allow_leaks)
    return 0


def _cmd_grade(args) -> int:
    from inferlab.exercises.grade import grade
    grade(args.submissions, args.out, cell_timeout=args.cell_timeout, time_limit=args.time_limit,
          jobs=args.jobs, kernel_name=args.kernel, sections=args.sections, quiet=args.quiet)
    return 0


def _cmd_run(args) -> int:
    from inferlab.exercises.grade import run_one
    run_one(args.notebook, report_path=args.report, executed_path=args.executed, pidfile=args.pidfile,
            cell_timeout=args.cell_timeout, time_limit=args.time_limit, kernel_name=args.kernel)
    return 0


def add_commands(sub) -> None:
    p = sub.add_parser("list", help="the exercises, one line each")
    p.add_argument("--section", help="e.g. 15.1.2")
    p.set_defaults(func=_cmd_list)

    p = sub.add_parser("cells", help="print a section's exercise cells as jupytext py:percent text")
    p.add_argument("section", help="e.g. 15.1.2")
    p.add_argument("--no-heading", action="store_true", help="leave out the '## Exercises' heading and import")
    p.set_defaults(func=_cmd_cells)

    p = sub.add_parser("sample", help="write the instructor sample notebook (.py and executed .ipynb)")
    p.add_argument("out", help="e.g. build/sample_instructor.py")
    p.add_argument("--no-execute", action="store_true")
    p.set_defaults(func=_cmd_sample)

    p = sub.add_parser("build-student", help="student versions: solution cells emptied, checks kept")
    p.add_argument("sources", nargs="*", help="instructor notebooks (.ipynb or jupytext .py)")
    p.add_argument("--out", default="build/student", help="output folder (default build/student)")
    p.add_argument("--allow-leaks", action="store_true",
                   help="write the notebook even if an expected answer still appears in it")
    p.set_defaults(func=_cmd_build_student)

    p = sub.add_parser("grade", help="execute submitted notebooks and write a score table")
    p.add_argument("submissions", nargs="+", help="notebooks, or folders of them (a sub-folder is one student)")
    p.add_argument("--out", default="build/grades", help="output folder (default build/grades)")
    p.add_argument("--cell-timeout", type=float, default=120, help="seconds per cell before an interrupt")
    p.add_argument("--time-limit", type=float, default=900, help="seconds per notebook before the kernel is killed")
    p.add_argument("--jobs", type=int, default=1, help="notebooks run in parallel")
    p.add_argument("--kernel", default="python3", help="Jupyter kernel name")
    p.add_argument("--sections", nargs="*", help="score these sections' exercises (default: those the notebooks use)")
    p.add_argument("--quiet", action="store_true", help="print nothing but errors")
    p.set_defaults(func=_cmd_grade)

    p = sub.add_parser("_run", help=argparse.SUPPRESS)
    p.add_argument("notebook")
    for name in ("--report", "--executed", "--pidfile"):
        p.add_argument(name, required=True)
    p.add_argument("--cell-timeout", type=float, required=True)
    p.add_argument("--time-limit", type=float, required=True)
    p.add_argument("--kernel", default="python3")
    p.set_defaults(func=_cmd_run)


def register(subparsers) -> None:
    """`inferlab classroom ...`: the same commands under the main CLI (see inferlab.cli)."""
    p = subparsers.add_parser("classroom", help="exercises: student versions and grading")
    add_commands(p.add_subparsers(dest="classroom_command", required=True))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m inferlab.exercises", description=__doc__.splitlines()[0])
    add_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError) as err:
        print(f"inferlab.exercises: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

"""Command line of the exercises: list, cells, sample, build-student, collisions, gradescope, grade, merge-manual,
check-exercises (`python -m inferlab.exercises ...`,
or `inferlab classroom ...` once inferlab.cli lists this module).

    python -m inferlab.exercises build-student chapters/*.ipynb --out build/student
    python -m inferlab.exercises grade submissions/ --out build/grades
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from inferlab.exercises.key import DEFAULT_KEY_PATH


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

    out = Path(out)
    out.write_text(sample_notebook_text())
    ipynb = out.with_suffix(".ipynb")
    nb = jupytext.read(out)
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i}"  # stable ids: regenerating changes nothing that did not change
    nbformat.write(nb, ipynb)
    if execute:
        from inferlab.exercises.grade import GradeConfig, check_plan, execute as run_notebook
        from inferlab.exercises.sandbox import Limits
        # The instructor's own notebook: trusted, run without the sandbox (it needs the real package).
        config = GradeConfig(sandbox=False, limits=Limits(memory_bytes=0, cpu_s=600, processes=0), cell_timeout=120,
                             time_limit=600)
        report = run_notebook(ipynb, config, plan=check_plan(ipynb.read_text())[0], executed_path=ipynb)
        if report.get("problems"):
            raise RuntimeError(f"executing {ipynb} failed: {'; '.join(report['problems'])}")
    return ipynb


def _cmd_sample(args) -> int:
    """Write the instructor sample (py:percent) and its executed .ipynb twin."""
    if not str(args.out).endswith(".py"):
        raise ValueError(f"sample: out {args.out!r} must end in .py (the .ipynb twin is written beside it)")
    _writable_dir("sample: the folder of out", Path(args.out).parent)
    try:
        ipynb = write_sample(args.out, execute=not args.no_execute)
    except RuntimeError as err:
        print(err, file=sys.stderr)
        return 1
    print(f"wrote {args.out} and {ipynb}")
    return 0


def _cmd_build_student(args) -> int:
    from inferlab.exercises.student import build_student, build_for_roster
    if not args.sources:
        raise ValueError("build-student: no notebooks given (is chapters/*.ipynb empty?); pass .ipynb or "
                         "jupytext .py files")
    for src in args.sources:
        _readable_file("source notebook", src, ".ipynb or jupytext .py file")
        _check_notebook(src)
    _writable_dir("--out", args.out)
    if args.roster:
        if not args.assignment:
            raise ValueError("--roster needs --assignment NAME (the variants are drawn from the student id "
                             "and the assignment)")
        from inferlab.exercises.key import ensure_key
        key, created = ensure_key(args.key)
        if created:
            print(f"created the instructor key {args.key} (mode 0600): it seeds every student's variant. Keep it "
                  "and back it up: grading these notebooks needs it; never hand it out or commit it.")
        build_for_roster(args.sources, args.out, roster=args.roster, assignment=args.assignment, key=key,
                         allow_leaks=args.allow_leaks)
    else:
        build_student(args.sources, args.out, allow_leaks=args.allow_leaks)
    return 0


def _cmd_grade(args) -> int:
    from inferlab.exercises.grade import GRACE_S, GradeConfig, grade
    from inferlab.exercises.sandbox import Limits
    for path in args.submissions:
        if not Path(path).exists():
            raise ValueError(f"submission {path!r} does not exist; expected a notebook (.ipynb) or a folder of them")
    if args.roster:
        _readable_file("--roster", args.roster, "CSV file with a student_id column")
    _writable_dir("--out", args.out)
    _check_grade_limits(args)
    limits = Limits(memory_bytes=int(args.memory_gb * 1e9), cpu_s=args.time_limit + GRACE_S, processes=args.max_processes,
                    output_bytes=int(args.max_output_mb * 1e6), disk_bytes=int(args.max_disk_mb * 1e6))
    key = None
    if args.assignment:
        from inferlab.exercises.key import load_key
        key = load_key(args.key)
    config = GradeConfig(cell_timeout=args.cell_timeout, time_limit=args.time_limit, jobs=args.jobs,
                         kernel_name=args.kernel, sections=args.sections, instructor=args.instructor, quiet=args.quiet,
                         sandbox=not args.no_sandbox, limits=limits, assignment=args.assignment, roster=args.roster,
                         key=key, all_cells=True if args.all_cells else None)
    grades = grade(args.submissions, args.out, config)
    if grades.failed:
        print(f"inferlab.exercises: {grades.failed} of {len(grades.rows)} submission(s) failed (status 'failed: ...' "
              f"in grades.csv); every file was written for the whole class", file=sys.stderr)
    return failed_exit_status(grades.failed)


def _cmd_collisions(args) -> int:
    """Per graded part, the share of roster pairs whose expected answers agree (see `collisions`)."""
    import json

    from inferlab.exercises.collisions import report
    from inferlab.exercises.grade import assignment_exercises
    from inferlab.exercises.key import load_key
    from inferlab.exercises.roster import read_roster
    _readable_file("--roster", args.roster, "CSV file with a student_id column")
    students = [r["student_id"] for r in read_roster(args.roster)]
    if len(students) < 2:
        raise ValueError(f"--roster {args.roster!r} names {len(students)} student(s); pairs need at least 2")
    from inferlab.exercises import exercises
    ids = (assignment_exercises(sections=args.sections, instructor=args.instructor)
           if args.sections or args.instructor else [e.id for e in exercises()])
    result = report(ids, students, args.assignment, load_key(args.key))
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(f"{result['students']} students, {result['pairs']} pairs, assignment {args.assignment!r}: share of pairs "
          f"whose expected answers agree (limit {result['limit']:.0%})")
    for p in result["parts"]:
        flag = "  over the limit" if p["share"] > result["limit"] else ""
        print(f"  {p['id']:<34s} {p['kind']:<8s} share {p['share']:6.1%}  worth {p['weight']:4.0%} of its exercise{flag}")
    earn = result["copy_earnings"]
    print(f"a classmate's answers earn {earn['mean']:.1%} of the points on average (at most {earn['max']:.1%})")
    return 0


def _cmd_gradescope(args) -> int:
    """Write the Gradescope autograder zip for the exercises of the instructor notebook(s)."""
    from inferlab.exercises.grade import assignment_exercises
    from inferlab.exercises.gradescope import build_bundle
    for src in args.notebooks:
        _readable_file("instructor notebook", src, ".ipynb or jupytext .py file")
    key = None
    if args.assignment:
        from inferlab.exercises.key import load_key
        key = load_key(args.key)
    ids = assignment_exercises(instructor=args.notebooks, require_known=True)
    out = build_bundle(ids, args.out, assignment=args.assignment, key=key, exercise_files=args.exercises or ())
    print(f"wrote {out}: {len(ids)} exercise(s)" + (f", variants of {args.assignment!r} (the zip holds the "
          "instructor key: keep it private)" if args.assignment else ""))
    return 0


def _cmd_merge_manual(args) -> int:
    """Fold the hand grades of a filled manual.csv into GRADES_DIR's grades.csv, gradescope.csv and canvas.csv."""
    from inferlab.exercises.manual import merge_manual
    if not Path(args.grades_dir).is_dir():
        raise ValueError(f"GRADES_DIR {args.grades_dir!r} is not a folder; expected the --out folder of grade")
    _readable_file("MANUAL_CSV", args.manual_csv, "CSV file (GRADES_DIR/manual.csv with its score column filled)")
    merged = merge_manual(args.grades_dir, args.manual_csv)
    print(f"merged {merged} hand score(s) into {Path(args.grades_dir) / 'grades.csv'}, gradescope.csv, canvas.csv")
    return 0


def failed_exit_status(failed: int) -> int:
    """The grade command's exit status: 0 when every submission was graded, else 64 + the number of failed
    submissions (at most 125: 64 + 61 means 61 or more). 1 and 2 stay errors where nothing was written."""
    return 0 if failed <= 0 else 64 + min(failed, 61)


# The smallest --memory-gb a notebook can run in: a Python kernel that imports numpy and ipykernel
# maps 0.16 GB of address space (VmPeak, measured) before the first cell; 0 would mean "no limit".
MIN_MEMORY_GB = 0.2


def _check_grade_limits(args) -> None:
    """Limits that round to nothing are refused: the sandbox reads 0 bytes as "no limit"."""
    if args.memory_gb < MIN_MEMORY_GB:
        raise ValueError(f"--memory-gb must be >= {MIN_MEMORY_GB:g} (a Python kernel needs 0.16 GB of address "
                         f"space to start) and <= 1024; got {args.memory_gb:g}")
    for name, value in (("--max-output-mb", args.max_output_mb), ("--max-disk-mb", args.max_disk_mb)):
        if int(value * 1e6) < 1:
            raise ValueError(f"{name} must be at least one byte (1e-06 MB; 0 would mean no limit); got {value:g}")


def _check_notebook(src) -> None:
    """Read `src` as a notebook before any work: UTF-8, JSON (.ipynb) or jupytext (.py), and valid
    against the notebook format; ValueError naming the file otherwise."""
    import json

    import nbformat
    where = f"source notebook {str(src)!r}"
    try:
        text = Path(src).read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{where} is not a UTF-8 text file; expected a .ipynb or jupytext .py file") from None
    if str(src).endswith(".py"):
        try:
            import jupytext
            jupytext.reads(text, fmt="py:percent")
        except Exception as err:  # jupytext raises many kinds; any of them means "not a notebook"
            raise ValueError(f"{where} is not a jupytext py:percent notebook ({type(err).__name__}: "
                             f"{str(err).splitlines()[0] if str(err) else ''})") from None
        return
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as err:
        raise ValueError(f"{where} is not JSON ({str(err).splitlines()[0] if str(err) else 'nested too deeply'}); "
                         "expected a .ipynb notebook") from None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        got = type(data.get("cells")).__name__ if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"{where}: a notebook is a JSON object whose 'cells' is a list; got {got}")
    try:
        nb = nbformat.reads(text, as_version=4)
        nbformat.validate(nb)
    except Exception as err:  # nbformat's ValidationError and its readers' errors
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(f"{where} is not a valid notebook ({first})") from None


def _readable_file(name: str, value, what: str) -> None:
    p = Path(value)
    if not p.exists():
        raise ValueError(f"{name} {str(value)!r} does not exist; expected a {what}")
    if p.is_dir():
        raise ValueError(f"{name} {str(value)!r} is a folder; expected a {what}")
    if not os.access(p, os.R_OK):
        raise ValueError(f"{name} {str(value)!r} is not readable; expected a readable {what}")


def _writable_dir(name: str, value) -> None:
    """An output folder that exists or can be created, and is writable (checked before any work)."""
    p = Path(value)
    if p.exists() and not p.is_dir():
        raise ValueError(f"{name} {str(value)!r} is a file; expected a folder (it is created if missing)")
    try:
        p.mkdir(parents=True, exist_ok=True)
        probe = p / f".inferlab-write-test-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise ValueError(f"{name} {str(value)!r} is not a writable folder ({exc.strerror or exc}); "
                         "expected a folder you can write to")


def _positive(kind, name: str, maximum=None):
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}={text!r} is not a {'number' if kind is float else 'whole number'}")
        if not value > 0 or value != value or (maximum is not None and value > maximum):
            rng = f"in (0, {maximum:g}]" if maximum is not None else "> 0"
            raise argparse.ArgumentTypeError(f"{name}={text!r} is out of range; allowed: {rng}")
        return value
    return parse


def _cmd_check_exercises(args) -> int:
    """Check exercise files (TOML): every entry parses, its answers are allowed expressions of known quantities,
    sampled variants solve, slips differ from the answer, and every part worth more than a choice varies."""
    from inferlab.exercises.collisions import DEMO_ASSIGNMENT, DEMO_KEY, DEMO_ROSTER, report
    from inferlab.exercises.core import _REGISTRY
    from inferlab.exercises.data import check_entry, load, sample_params
    bad = 0
    for path in args.files:
        _readable_file("exercises file", path, "TOML file of [[exercise]] entries")
        for ex in load(path):
            problems = check_entry(ex)
            if ex.id in _REGISTRY and _REGISTRY[ex.id].solve.__class__ is not ex.solve.__class__:
                problems.append(f"{ex.id}: the id of an exercise of the library; pick another number")
            if problems:
                bad += 1
                print(f"{ex.id}: REFUSED\n" + "\n".join(f"  {p}" for p in problems))
                continue
            combos = len(ex.vary.combinations()) if ex.vary else 1
            line = f"{ex.id}: ok, {combos} variant(s), {len(sample_params(ex))} solved"
            if ex.vary is not None:
                _REGISTRY.setdefault(ex.id, ex)
                shares = report([ex.id], list(DEMO_ROSTER), DEMO_ASSIGNMENT, DEMO_KEY)["parts"]
                line += "; share of 40 students' pairs agreeing: " + ", ".join(
                    f"{p['part']} {p['share']:.0%}" for p in shares)
            print(line)
    return 1 if bad else 0


def _with_exercises(command):
    """Run `command` with the exercise files of --exercises registered (and named in the environment, so that the
    notebooks a command runs see them too)."""
    def run(args):
        files = getattr(args, "exercises", None) or []
        if files:
            from inferlab.exercises.data import ENV_VAR, register_file
            for path in files:
                _readable_file("--exercises", path, "TOML file of [[exercise]] entries")
                register_file(path, replace=True)
            known = [p for p in os.environ.get(ENV_VAR, "").split(os.pathsep) if p]
            os.environ[ENV_VAR] = os.pathsep.join(known + [str(Path(p).resolve()) for p in files])
        return command(args)
    return run


def add_commands(sub) -> None:
    p = sub.add_parser("check-exercises", help="check exercise files written as data (TOML)")
    p.add_argument("files", nargs="+", help="TOML files of [[exercise]] entries (format: docs/exercises.md)")
    p.set_defaults(func=_cmd_check_exercises)
    _add_commands(sub)
    for name, parser in sub.choices.items():
        if name != "check-exercises":
            parser.add_argument("--exercises", nargs="+", metavar="TOML",
                                help="also the exercises of these files (written as data, see check-exercises)")
            parser.set_defaults(func=_with_exercises(parser.get_default("func")))


def _add_commands(sub) -> None:
    p = sub.add_parser("list", help="the exercises, one line each")
    p.add_argument("--section", help="e.g. 15.1.2")
    p.set_defaults(func=_cmd_list)

    p = sub.add_parser("cells", help="print a section's exercise cells as jupytext py:percent text")
    p.add_argument("section", help="e.g. 15.1.2")
    p.add_argument("--no-heading", action="store_true", help="leave out the '## Exercises' heading and import")
    p.set_defaults(func=_cmd_cells)

    p = sub.add_parser("sample", help="write the instructor sample notebook (.py and executed .ipynb)")
    p.add_argument("out", help="e.g. build/sample_instructor.py")
    p.add_argument("--no-execute", action="store_true", help="write the notebook without executing it (no outputs)")
    p.set_defaults(func=_cmd_sample)

    p = sub.add_parser("build-student", help="student versions: solution cells emptied, checks kept")
    p.add_argument("sources", nargs="*", help="instructor notebooks (.ipynb or jupytext .py)")
    p.add_argument("--out", default="build/student", help="output folder (default build/student)")
    p.add_argument("--allow-leaks", action="store_true",
                   help="write the notebook even if an expected answer still appears in it")
    p.add_argument("--roster", help="CSV with a student_id column: one folder per student, OUT/<student_id>/, "
                   "with that student's variant of each exercise")
    p.add_argument("--assignment", help="assignment name; with --roster it seeds the variants")
    p.add_argument("--key", default=str(DEFAULT_KEY_PATH), help="instructor key seeding the variants, created "
                   f"(mode 0600) if missing (default {DEFAULT_KEY_PATH}; keep it and back it up)")
    p.set_defaults(func=_cmd_build_student)

    p = sub.add_parser("collisions", help="per graded part, the share of roster pairs with the same expected answer")
    p.add_argument("--roster", required=True, help="CSV with a student_id column")
    p.add_argument("--assignment", required=True, help="the assignment name that seeds the variants")
    p.add_argument("--key", default=str(DEFAULT_KEY_PATH), help=f"instructor key (default {DEFAULT_KEY_PATH})")
    p.add_argument("--instructor", nargs="+", metavar="NOTEBOOK", help="the assignment's instructor notebook(s)")
    p.add_argument("--sections", nargs="+", help="the assignment's sections (default: every exercise)")
    p.add_argument("--json", action="store_true", help='print {"parts": [{"id": ..., "share": ...}], ...}')
    p.set_defaults(func=_cmd_collisions)

    p = sub.add_parser("gradescope", help="write a Gradescope autograder zip (setup.sh, run_autograder, config)")
    p.add_argument("notebooks", nargs="+", help="the instructor notebook(s): their check cells are the exercises")
    p.add_argument("--assignment", help="grade each student's variant of this assignment (the zip holds the key)")
    p.add_argument("--key", default=str(DEFAULT_KEY_PATH), help=f"instructor key (default {DEFAULT_KEY_PATH})")
    p.add_argument("--out", default="build/autograder.zip", help="the zip to write (default build/autograder.zip)")
    p.set_defaults(func=_cmd_gradescope)

    p = sub.add_parser("merge-manual", help="add the hand grades of a filled manual.csv to a graded class")
    p.add_argument("grades_dir", help="the folder grade wrote (its grades.csv and manual.csv)")
    p.add_argument("manual_csv", help="manual.csv with its score column filled (blank: still pending)")
    p.set_defaults(func=_cmd_merge_manual)

    p = sub.add_parser("grade", help="run submitted notebooks in a sandbox and write a score table")
    p.add_argument("submissions", nargs="+", help="notebooks, or folders of them (a sub-folder is one student)")
    p.add_argument("--out", default="build/grades", help="output folder (default build/grades)")
    p.add_argument("--cell-timeout", type=_positive(float, "--cell-timeout", 3600), default=120,
                   help="seconds of a cell's own time before an interrupt: CPU time of the sandbox's processes, "
                        "or wall time less the host's run-queue waits when larger (default 120)")
    p.add_argument("--time-limit", type=_positive(float, "--time-limit", 86400), default=900,
                   help="seconds of own time per notebook (its cells' own times added up) before it stops; each process "
                        "also gets this + 30 s of CPU (RLIMIT_CPU), and a run is killed as 'host too busy' after 10 x "
                        "this + 30 s of wall time (default 900)")
    p.add_argument("--jobs", type=_positive(int, "--jobs", 64), default=None,
                   help="notebooks run in parallel (default: one per core, fewer if the free memory cannot hold "
                        "that many at --memory-gb each)")
    p.add_argument("--kernel", default="python3", help="Jupyter kernel name")
    p.add_argument("--instructor", nargs="+", metavar="NOTEBOOK",
                   help="the instructor notebook(s) the student versions were built from: their check cells "
                        "are the assignment's exercises, points and maximum (or give --sections)")
    p.add_argument("--sections", nargs="+", help="score every exercise of these sections (instead of --instructor)")
    p.add_argument("--key", default=str(DEFAULT_KEY_PATH), help="instructor key of the variants (with "
                   f"--assignment; default {DEFAULT_KEY_PATH})")
    p.add_argument("--assignment", help="score each student's variant of this assignment (as built by "
                   "build-student --roster --assignment)")
    p.add_argument("--roster", help="CSV with student_id[,name,email,section]: names the exports; a student "
                   "without a submission scores 0")
    p.add_argument("--memory-gb", type=_positive(float, "--memory-gb", 1024), default=4,
                   help="address space per process in the sandbox (default 4 GB)")
    p.add_argument("--max-processes", type=_positive(int, "--max-processes", 4096), default=64,
                   help="processes per sandbox (default 64)")
    p.add_argument("--max-output-mb", type=_positive(float, "--max-output-mb", 1024), default=2,
                   help="notebook output kept per submission; the rest is dropped (default 2 MB)")
    p.add_argument("--max-disk-mb", type=_positive(float, "--max-disk-mb", 100_000), default=256,
                   help="disk quota per submission: the size of each of its writable folders, /home/student (where "
                        "the notebook runs) and /tmp (tmpfs, held in RAM: a write past it fails with ENOSPC) "
                        "(default 256 MB)")
    p.add_argument("--no-sandbox", action="store_true",
                   help="run the notebooks with your own rights (trusted notebooks only; prints a warning)")
    p.add_argument("--quiet", action="store_true", help="print nothing but errors")
    p.add_argument("--all-cells", action="store_true", help="run every cell, not only those the graded answers "
                   "depend on (the lecture's figures included)")
    p.set_defaults(func=_cmd_grade)


def register(subparsers) -> None:
    """`inferlab classroom ...`: the same commands under the main CLI (see inferlab.cli)."""
    p = subparsers.add_parser("classroom", help="exercises: student versions and grading")
    add_commands(p.add_subparsers(dest="classroom_command", required=True))


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad argument in one line (no usage block) and exits with status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def main(argv=None) -> int:
    parser = _Parser(prog="python -m inferlab.exercises", description=__doc__.splitlines()[0])
    add_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    try:
        from inferlab.base.arguments import option_names, refuse_empty_strings
        refuse_empty_strings(args, option_names(parser))
        return args.func(args)
    except (ValueError, FileNotFoundError, RuntimeError) as err:
        print(f"inferlab.exercises: error: {str(err).splitlines()[0] if str(err) else type(err).__name__}",
              file=sys.stderr)
        return 2
    except OSError as err:
        where = f" {err.filename!r}" if getattr(err, "filename", None) else ""
        print(f"inferlab.exercises: error: {err.strerror or err}{where}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("inferlab.exercises: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

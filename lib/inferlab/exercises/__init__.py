"""Classroom exercises with machine-checked answers (one module per subsection).

    from inferlab.exercises import check
    check("15.1.2-ex1", ex1)   # prints PASS, or FAIL with a hint; never the expected value

Instructors: `python -m inferlab.exercises build-student ...` and `... grade ...` (see README.md, "For instructors").
"""
from inferlab.exercises.core import (
    SECTIONS, CheckResult, Exercise, Mistake, Part, check, exercises, get, set_student, summary, variant,
)
# Importing the subsection modules registers their exercises.
from inferlab.exercises import s15_1_1_prefill, s15_1_2_decode, s15_2_1_latency, s15_2_2_batching  # noqa: F401
from inferlab.exercises import s15_2_3_serving  # noqa: F401
from inferlab.exercises.cells import exercise_cells, exercise_section, solution_source
# Exercises written as data: data/exercises.toml, then the files INFERLAB_EXERCISES names (os.pathsep-separated).
from inferlab.exercises.data import register_course_files

register_course_files()

__all__ = ["check", "summary", "get", "exercises", "exercise_cells", "exercise_section", "solution_source",
           "Exercise", "Part", "Mistake", "CheckResult", "SECTIONS", "set_student", "variant"]

"""Shared fixtures."""
import os

import pytest

from hang_guard import HANG_S  # noqa: F401  (re-exported for fixtures)


@pytest.fixture(scope="session")
def sample_instructor(tmp_path_factory):
    """The instructor sample notebook with every exercise, generated from the registry and executed
    once per test session: returns the py:percent path; its executed .ipynb twin lies beside it."""
    from inferlab.exercises.cli import write_sample
    path = tmp_path_factory.mktemp("classroom") / "sample_instructor.py"
    write_sample(path)
    return path


@pytest.fixture(scope="module")
def every_cell_runs():
    """Grade with every cell run. The grader skips the cells no answer depends on; tests of what happens
    when a cell attacks, raises, loops or exits need those cells to run, as a student can make any cell run
    (a cell the grader cannot analyse runs, with every cell before it). Use it per module:
    `pytestmark = pytest.mark.usefixtures("every_cell_runs")`."""
    from inferlab.exercises import grade as grading
    saved, saved_env = grading.SKIP_LECTURE, os.environ.get("INFERLAB_GRADE_ALL_CELLS")
    grading.SKIP_LECTURE = False
    os.environ["INFERLAB_GRADE_ALL_CELLS"] = "1"  # the command lines these tests start
    yield
    grading.SKIP_LECTURE = saved
    if saved_env is None:
        os.environ.pop("INFERLAB_GRADE_ALL_CELLS", None)
    else:
        os.environ["INFERLAB_GRADE_ALL_CELLS"] = saved_env


def pytest_configure(config):
    # Tests sweep lengths past a model's maximum context on purpose (property tests, the book's
    # yardsticks); tests/test_context.py checks the warning itself with pytest.warns.
    config.addinivalue_line("filterwarnings", "ignore::inferlab.core.context.ContextLengthWarning")


@pytest.fixture
def register_exercises():
    """`register_exercises(path)`: the exercises of a TOML file (written as data), registered until the test ends
    (unregistering also drops their cached answers and slips)."""
    from inferlab.exercises import data
    loaded = []

    def register(path):
        new = data.register_file(path)
        loaded.extend(new)
        return new
    yield register
    data.unregister(loaded)

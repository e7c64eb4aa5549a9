"""Shared fixtures."""
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


def pytest_configure(config):
    # Tests sweep lengths past a model's maximum context on purpose (property tests, the book's
    # yardsticks); tests/test_context.py checks the warning itself with pytest.warns.
    config.addinivalue_line("filterwarnings", "ignore::inferlab.context.ContextLengthWarning")

"""inferlab.exercises as a submission sees it inside the grading sandbox: `check` without answers.

The grading sandbox mounts this folder over the real inferlab/exercises package, so a submitted
notebook cannot reach the expected values or the solution code (`get(id).expected()`, `solve`,
the `cells`/`sample` commands). `check` only says that the answer will be graded; the grader reads
the answer variable after the check cell and scores it outside the sandbox.
"""

_SEEN = []


def check(exercise_id, answer=None, *args, **kwargs):
    """Under grading: records nothing and scores nothing; the grader reads your answer variable."""
    _SEEN.append(str(exercise_id))
    print(f"{exercise_id}: answer left for the grader (checks give no feedback while grading)")


def summary():
    text = f"{len(_SEEN)} check(s) reached; scores come from the grader"
    print(text)
    return text


def set_student(*args, **kwargs):
    """Under grading the variant comes from the roster id of the submission, not from the notebook."""
    return None

"""What the grader (`grade.py`) and the student-notebook builder (`student.py`) share: how a
notebook names its exercises (`CHECK_RE`: a `check("15.1.1-ex1", name)` call; `ID_RE`: an
exercise id in quotes) and the class roster (`read_roster`). Both import it; neither imports the
other.
"""
from __future__ import annotations

import csv
import re
from pathlib import Path

CHECK_RE = re.compile(r"""check\(\s*["']([0-9.]+-ex\d+)["']\s*,\s*([A-Za-z_]\w*)""")
ID_RE = re.compile(r"""["']([0-9]+\.[0-9]+\.[0-9]+-ex\d+)["']""")


class GradingError(ValueError):
    """A grading request that cannot be carried out (one line, for the command line)."""


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

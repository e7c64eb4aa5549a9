"""Argument checks that fail early with a message naming the parameter, the value and what is allowed."""
from __future__ import annotations

import difflib
import math

import numpy as np


class DoesNotFitError(ValueError):
    """A configuration whose memory needs exceed the accelerator's capacity."""


# The largest integer count accepted anywhere (tokens, batch, sizes): int64's maximum. Beyond it
# numpy wraps around or falls back to Python objects; no physical count comes near it.
MAX_INT = 2**63 - 1
# The smallest efficiency (MFU, MBU) accepted: below it times overflow to inf (1 / 1e-320 does).
MIN_FRACTION = 1e-9


def _short(value, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _describe(value) -> str:
    """A short description of a bad value; never raises, whatever the value is."""
    try:
        arr = np.asarray(value)
    except Exception:
        return _short(value)
    if arr.ndim == 0:
        return _short(value)
    if arr.size == 0:
        return f"an empty array of shape {arr.shape}"
    if arr.dtype.kind in "iuf":
        return f"an array of shape {arr.shape} (min {arr.min().item()!r}, max {arr.max().item()!r})"
    return f"an array of shape {arr.shape} and dtype {arr.dtype} ({_short(arr.ravel()[:3].tolist(), 60)})"


def positive_int(name: str, value, *, minimum: int = 1, maximum: int = MAX_INT):
    """Return `value` (scalar or array) after checking it is integral and minimum <= value <= maximum
    (Python and numpy integers alike; integral floats too; bool, strings and objects are refused)."""
    if type(value) is int and minimum <= value <= maximum:  # fast path for the common scalar case
        return value
    allowed = f"an integer >= {minimum}" + (f" and <= {maximum}" if maximum not in (None, MAX_INT) else "")
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be {allowed}; got {value!r}")
    try:
        arr = np.asarray(value)
    except Exception:
        raise ValueError(f"{name} must be {allowed}; got {_describe(value)}") from None
    if arr.dtype.kind == "O" and arr.size and all(type(v) is int for v in arr.ravel()):
        arr = np.asarray([float(v) for v in arr.ravel()])  # Python ints beyond int64: compare as floats
    if arr.dtype.kind not in "iuf" or arr.size == 0:
        raise ValueError(f"{name} must be {allowed}; got {_describe(value)}")
    if arr.dtype.kind == "f" and not np.all(np.isfinite(arr) & (arr == np.floor(arr))):
        raise ValueError(f"{name} must be {allowed}; got {_describe(value)}")
    if np.any(arr < minimum):
        raise ValueError(f"{name} must be {allowed}; got {_describe(value)}")
    if maximum is not None and np.any(arr > maximum):
        limit = "2**63 - 1 (int64)" if maximum == MAX_INT else str(maximum)
        raise ValueError(f"{name} must be an integer >= {minimum} and <= {limit}; got {_describe(value)}")
    return value


def nonneg_int(name: str, value):
    return positive_int(name, value, minimum=0)


def positive_float(name: str, value, *, maximum: float | None = None, allow_zero: bool = False,
                   minimum: float | None = None):
    """Check a finite real number (or array) > 0 (>= 0 with allow_zero), optionally <= maximum and
    (where not 0) >= minimum. Python and numpy numbers are accepted; bool, strings, None are not."""
    if (type(value) in (int, float) and math.isfinite(value) and (value >= 0 if allow_zero else value > 0)
            and (maximum is None or value <= maximum)
            and (minimum is None or value >= minimum or (allow_zero and value == 0))):  # fast path
        return value
    low = (">= 0" if allow_zero else "> 0") if minimum is None else (
        f"0 or >= {minimum:g}" if allow_zero else f">= {minimum:g}")
    allowed = low + (f" and <= {maximum:g}" if maximum is not None else "")
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be a finite number {allowed}; got {value!r}")
    try:
        arr = np.asarray(value)
        if arr.dtype.kind == "O" and arr.size and all(type(v) is int for v in arr.ravel()):
            arr = np.asarray([float(v) for v in arr.ravel()])  # huge Python ints: compare as floats
    except Exception:
        raise ValueError(f"{name} must be a finite number {allowed}; got {_describe(value)}") from None
    if arr.dtype.kind not in "iuf" or arr.size == 0:  # strings, None and objects are not numbers
        raise ValueError(f"{name} must be a finite number {allowed}; got {_describe(value)}")
    arr = arr.astype(float)
    ok = np.isfinite(arr) & (arr >= 0 if allow_zero else arr > 0)
    if maximum is not None:
        ok &= arr <= maximum
    if minimum is not None:
        ok &= (arr >= minimum) | ((arr == 0) if allow_zero else False)
    if not np.all(ok):
        raise ValueError(f"{name} must be a finite number {allowed}; got {_describe(value)}")
    return value


def fraction(name: str, value):
    """An efficiency such as MFU or MBU: MIN_FRACTION (1e-9) <= value <= 1. Smaller values have no
    physical meaning and turn times into inf."""
    return positive_float(name, value, maximum=1.0, minimum=MIN_FRACTION)


def choice(name: str, value: str, allowed) -> str:
    """Check `value` is one of `allowed`; suggest the closest names otherwise."""
    allowed = list(allowed)
    if isinstance(value, str) and value in allowed:
        return value
    # Names that extend what was typed first (h100 -> h100-sxm), then the nearest spellings.
    typed = str(value).lower()
    lower = {a.lower(): a for a in allowed}
    close = sorted((a for a in allowed if typed and a.lower().startswith(typed)), key=len)
    close += [lower[c] for c in difflib.get_close_matches(typed, list(lower), n=3, cutoff=0.4)]
    close = list(dict.fromkeys(close))[:3]
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise ValueError(f"unknown {name} {value!r}; allowed: {', '.join(allowed)}.{hint}")


def writable_file(name: str, path) -> "Path":
    """Check, before any long work, that `path` can be written as a file: not a directory, its
    folder creatable and writable. Creates the folder; returns the Path. Errors name the argument."""
    import os
    from pathlib import Path

    p = Path(path)
    # "out/" names a folder even before it exists (Path drops the slash)
    if str(path) == "" or p.is_dir() or str(path).endswith(("/", os.sep)):
        raise ValueError(f"{name} must be a file path, not a directory; got {str(path)!r}")
    parent = p.parent
    existing = next((q for q in (parent, *parent.parents) if q.exists()), Path("."))
    if not existing.is_dir():
        raise ValueError(f"{name}: {str(existing)!r} is a file, so {str(path)!r} cannot be created; "
                         "allowed: a path inside a writable folder")
    _make_folder(name, parent, p, "a path inside a writable folder")
    if p.exists() and not p.is_file():
        raise ValueError(f"{name}: {str(path)!r} is not a regular file; allowed: a path inside a writable folder")
    try:  # a real probe: permissions alone do not tell (root, read-only mounts)
        if p.exists():
            with open(p, "a"):
                pass
        else:
            with open(p, "x"):
                pass
            p.unlink()
    except OSError as err:
        raise ValueError(f"{name}: {str(path)!r} cannot be written ({err.strerror}); "
                         "allowed: a path inside a writable folder") from None
    return p


def _make_folder(name: str, folder, target, allowed: str) -> None:
    """Create `folder` (for the output `target`), refusing kernel pseudo-filesystems before and after
    (a link may lead there); errors name the argument and what is allowed."""
    _not_pseudo(name, target)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"{name}: cannot create the folder {str(folder)!r} ({err.strerror}); "
                         f"allowed: {allowed}") from None
    _not_pseudo(name, target)


def _not_pseudo(name: str, p) -> None:
    """/proc, /sys and /dev hold kernel interfaces, not files to write results into."""
    resolved = p.resolve()
    for root in ("/proc", "/sys", "/dev"):
        if resolved.is_relative_to(root):
            raise ValueError(f"{name}: {str(p)!r} lies under {root}, a kernel pseudo-filesystem; "
                             "allowed: a path inside a writable folder")


def writable_dir(name: str, path) -> "Path":
    """Check (and create) an output folder before any long work; errors name the argument."""
    import os
    from pathlib import Path

    p = Path(path)
    if str(path) == "":
        raise ValueError(f"{name} must be a folder path; got ''")
    if p.exists() and not p.is_dir():
        raise ValueError(f"{name} must be a folder; {str(path)!r} is a file")
    existing = next((q for q in (p, *p.parents) if q.exists()), Path("."))
    if not existing.is_dir():
        raise ValueError(f"{name}: {str(existing)!r} is a file, so the folder {str(path)!r} cannot be created")
    _make_folder(name, p, p, "a writable folder")
    if not os.access(p, os.W_OK):
        raise ValueError(f"{name}: the folder {str(path)!r} is not writable; allowed: a writable folder")
    return p


def finite_result(what: str, value, **inputs):
    """Return `value` if every element is finite; else a ValueError naming the inputs that overflow
    it (each passed its own check, but together they leave float range, e.g. 1e300 FLOPs per token)."""
    arr = np.asarray(value, dtype=float)
    if np.all(np.isfinite(arr)):
        return value
    named = ", ".join(f"{k}={_describe(v)}" for k, v in inputs.items())
    raise ValueError(f"{what} overflows to a non-finite value for {named}; allowed: inputs whose "
                     "result is a finite number")


def scalar(name: str, value):
    """Refuse arrays and lists where one number is expected."""
    if np.ndim(value) if not isinstance(value, (str, bytes)) else False:
        raise ValueError(f"{name} must be a single number; got {_describe(value)}")
    return value

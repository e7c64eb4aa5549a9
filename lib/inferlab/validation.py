"""Argument checks that fail early with a message naming the parameter, the value and what is allowed."""
from __future__ import annotations

import difflib

import numpy as np


class DoesNotFitError(ValueError):
    """A configuration whose memory needs exceed the accelerator's capacity."""


def _describe(value) -> str:
    arr = np.asarray(value)
    if arr.ndim == 0:
        return repr(value)
    return f"an array of shape {arr.shape} (min {arr.min()!r}, max {arr.max()!r})"


def positive_int(name: str, value, *, minimum: int = 1):
    """Return `value` (scalar or array) after checking it is integral and >= minimum."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer >= {minimum}; got {value!r}")
    try:
        arr = np.asarray(value)
    except Exception:  # pragma: no cover - exotic objects
        raise ValueError(f"{name} must be an integer >= {minimum}; got {value!r}") from None
    if arr.dtype.kind not in "iuf" or arr.size == 0:
        raise ValueError(f"{name} must be an integer >= {minimum}; got {_describe(value)}")
    if arr.dtype.kind == "f" and not np.all(np.isfinite(arr) & (arr == np.floor(arr))):
        raise ValueError(f"{name} must be an integer >= {minimum}; got {_describe(value)}")
    if np.any(arr < minimum):
        raise ValueError(f"{name} must be an integer >= {minimum}; got {_describe(value)}")
    return value


def nonneg_int(name: str, value):
    return positive_int(name, value, minimum=0)


def positive_float(name: str, value, *, maximum: float | None = None, allow_zero: bool = False):
    """Check a finite real number (or array) > 0 (>= 0 with allow_zero), optionally <= maximum."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a positive number; got {value!r}")
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a positive number; got {value!r}") from None
    low_ok = arr >= 0 if allow_zero else arr > 0
    allowed = (">= 0" if allow_zero else "> 0") + (f" and <= {maximum}" if maximum is not None else "")
    if arr.size == 0 or not np.all(np.isfinite(arr) & low_ok):
        raise ValueError(f"{name} must be a finite number {allowed}; got {_describe(value)}")
    if maximum is not None and np.any(arr > maximum):
        raise ValueError(f"{name} must be a finite number {allowed}; got {_describe(value)}")
    return value


def fraction(name: str, value):
    """An efficiency such as MFU or MBU: 0 < value <= 1."""
    return positive_float(name, value, maximum=1.0)


def choice(name: str, value: str, allowed) -> str:
    """Check `value` is one of `allowed`; suggest the closest names otherwise."""
    allowed = list(allowed)
    if isinstance(value, str) and value in allowed:
        return value
    close = difflib.get_close_matches(str(value), allowed, n=3, cutoff=0.4)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise ValueError(f"unknown {name} {value!r}; allowed: {', '.join(allowed)}.{hint}")

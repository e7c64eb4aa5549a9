"""Argument checks that fail early with a message naming the parameter, the value and what is allowed."""
from __future__ import annotations

import difflib
import math

import numpy as np


class DoesNotFitError(ValueError):
    """A configuration whose memory needs exceed the accelerator's capacity."""


def _describe(value) -> str:
    arr = np.asarray(value)
    if arr.ndim == 0:
        return repr(value)
    if arr.size == 0:
        return f"an empty array of shape {arr.shape}"
    return f"an array of shape {arr.shape} (min {arr.min().item()!r}, max {arr.max().item()!r})"


def positive_int(name: str, value, *, minimum: int = 1):
    """Return `value` (scalar or array) after checking it is integral and >= minimum."""
    if type(value) is int and value >= minimum:  # fast path for the common scalar case
        return value
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
    if (type(value) in (int, float) and math.isfinite(value) and (value >= 0 if allow_zero else value > 0)
            and (maximum is None or value <= maximum)):  # fast path for the common scalar case
        return value
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a positive number; got {value!r}")
    try:
        arr = np.asarray(value)
    except Exception:  # pragma: no cover - exotic objects
        raise ValueError(f"{name} must be a positive number; got {value!r}") from None
    if arr.dtype.kind not in "iuf":  # strings, None and objects are not numbers
        raise ValueError(f"{name} must be a positive number; got {_describe(value)}")
    arr = arr.astype(float)
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
    # Names that extend what was typed first (h100 -> h100-sxm), then the nearest spellings.
    typed = str(value).lower()
    lower = {a.lower(): a for a in allowed}
    close = sorted((a for a in allowed if typed and a.lower().startswith(typed)), key=len)
    close += [lower[c] for c in difflib.get_close_matches(typed, list(lower), n=3, cutoff=0.4)]
    close = list(dict.fromkeys(close))[:3]
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise ValueError(f"unknown {name} {value!r}; allowed: {', '.join(allowed)}.{hint}")

"""Plain-text tables: fixed columns, rounded numbers, nothing volatile.

A notebook prints these beside every figure so that nbval, which compares text but not images,
checks the plotted data.
"""
from __future__ import annotations

import numpy as np


def fmt(value, spec: str = ".3g") -> str:
    """One cell: numbers through `spec` (a "d" spec rounds to an integer; negative zero shows as
    0), strings and bools as they are, None as "-"."""
    if isinstance(value, (str, bool, np.str_, np.bool_)):
        return str(value)
    if value is None:
        return "-"
    x = float(value)
    if not np.isfinite(x):
        return str(x)
    text = format(int(round(x)), spec) if spec.endswith("d") else format(x, spec)
    return "0" if text.lstrip("-").strip("0.") == "" and text.startswith("-") else text


def text_table(headers, rows, formats=None) -> str:
    """Rows under headers, right-aligned; `formats` gives a format spec per column (default .3g)."""
    headers = [str(h) for h in headers]
    formats = list(formats) if formats is not None else [".3g"] * len(headers)
    if len(formats) != len(headers):
        raise ValueError(f"formats must have one spec per column ({len(headers)}); got {len(formats)}")
    cells = [[fmt(v, f) for v, f in zip(row, formats)] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(headers, widths)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
    return "\n".join(lines)

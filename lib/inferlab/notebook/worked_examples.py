"""Worked examples in the notebooks' prose: an equation with the scenario's numbers substituted,
and the takeaway of a result, both rendered from computed values (a What-if change follows).

    worked_examples.equation(r"I_\\text{ridge} = \\frac{\\text{peak}}{\\text{BW}} = \\frac{<peak>\\ \\text{TFLOP/s}}"
                    r"{<bw>\\ \\text{TB/s}} = <ridge>\\ \\text{FLOP/byte}",
                    peak=989.4, bw=3.35, ridge=295.3)
    worked_examples.takeaway(f"prefill of {S} tokens is compute-bound: ...")

`equation` replaces each `<name>` of the TeX by `tex_number(value)` (values in the display unit
the TeX names: conversion happens at the call, for display only) and returns a Markdown display
equation; `takeaway` returns a Markdown blockquote starting **Takeaway.**, which the book shows as
a callout (book/convert.py). Both are plain Markdown in JupyterLab.
"""
from __future__ import annotations

import math
import numbers
import re

from IPython.display import Markdown

_PLACEHOLDER = re.compile(r"<([A-Za-z_][A-Za-z0-9_]*)>")


def tex_number(x, digits: int = 3) -> str:
    """`x` with `digits` significant digits in TeX: 295 -> "295", 0.0078 -> "0.0078",
    5.37e13 -> "5.37 \\times 10^{13}" (powers of ten from 10^5 and under 10^-3), integers as they
    are with thin-space thousands ("26{,}000")."""
    if isinstance(x, bool) or not isinstance(x, numbers.Real) or not math.isfinite(x):
        raise ValueError(f"tex_number: x must be a finite number, got {x!r}")
    x = int(x) if isinstance(x, numbers.Integral) else float(x)    # numpy scalars too
    if isinstance(x, int) and abs(x) < 10**6:
        return f"{x:,}".replace(",", "{,}")
    if x == 0:
        return "0"
    exp = math.floor(math.log10(abs(x)))
    if exp >= 5 or exp < -3:
        mant = f"{x / 10**exp:.{digits - 1}f}"
        if float(mant) >= 10:          # rounding carried into the next power
            exp += 1
            mant = f"{x / 10**exp:.{digits - 1}f}"
        return rf"{mant} \times 10^{{{exp}}}"
    decimals = max(digits - 1 - exp, 0)
    return f"{x:,.{decimals}f}".replace(",", "{,}")


def equation_tex(tex: str, **values) -> str:
    """`tex` with every `<name>` replaced by tex_number(values[name]) (strings are put in as they
    are); a placeholder without a value, or a value without a placeholder, is an error."""
    names = set(_PLACEHOLDER.findall(tex))
    missing, unused = sorted(names - set(values)), sorted(set(values) - names)
    if missing or unused:
        raise ValueError(f"equation: placeholders without a value {missing}, values without a placeholder {unused}")
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)] if isinstance(values[m.group(1)], str)
                            else tex_number(values[m.group(1)]), tex)


def equation(tex: str, **values) -> Markdown:
    """A display equation with the scenario's numbers substituted (see equation_tex)."""
    return Markdown(f"$$\n{equation_tex(tex, **values)}\n$$")


def takeaway(text: str) -> Markdown:
    """The one-sentence lesson of a worked result, as a Markdown blockquote (a callout in the book)."""
    text = " ".join(text.split())
    if not text:
        raise ValueError("takeaway: the text is empty")
    return Markdown(f"> **Takeaway.** {text}")

"""What the chapter notebooks show from the claims registry: a group of claims with their
verdicts and explanations, the lost formulas, and a section's verdict count.

    from inferlab.notebook import show_claims, show_formulas
    show_claims("15.1.2", "k..v")      # claims 15.1.2-k to 15.1.2-v, book vs ours vs verdict

All output is plain, deterministic text (nbval compares it); the formulas also render as LaTeX.
"""
from __future__ import annotations

import functools
import textwrap

from inferlab.claims import evaluate_claims, lost_formulas
from inferlab.claims.render import explanations, summary_line, table

WIDTH = 100


@functools.cache
def _section(section: str) -> tuple:
    return tuple(evaluate_claims(section))


def select(section: str, *spans: str) -> list:
    """The evaluated claims of `section` named by letters ("k") or inclusive spans in registry
    order ("k..v"); no span means the whole section."""
    claims = list(_section(section))
    letters = [c.id.split("-", 1)[1] for c in claims]
    if not spans:
        return claims
    picked = []
    for span in spans:
        first, _, last = span.partition("..")
        last = last or first
        for name in (first, last):
            if name not in letters:
                raise ValueError(f"no claim {section}-{name} in the registry; section {section} has "
                                 f"{letters[0]}..{letters[-1]}")
        i, j = letters.index(first), letters.index(last)
        if j < i:
            raise ValueError(f"span {span!r} runs backwards ({section}-{first} comes after {section}-{last})")
        picked += [c for c in claims[i:j + 1] if c not in picked]
    return picked


def claims_text(section: str, *spans: str) -> str:
    """The table (id, description, book, ours, verdict) of the selected claims, then why each
    one that is not consistent differs, with the corrected value."""
    chosen = select(section, *spans)
    out = table(chosen)
    why = explanations(chosen, WIDTH)
    if why:
        out += "\n\nWhy:\n" + why
    return out


def show_claims(section: str, *spans: str) -> None:
    """Print `claims_text` (the notebooks' book-vs-ours cell)."""
    print(claims_text(section, *spans))


def verdict_summary(section: str | None = None) -> str:
    """One line per section (or for one section): number of claims and count per verdict."""
    sections = [section] if section else ["15.1.1", "15.1.2", "15.2.1", "15.2.2"]
    lines = [f"{s}: {summary_line(list(_section(s)))}" for s in sections]
    if not section:
        lines.append(f"chapter: {summary_line([c for s in sections for c in _section(s)])}")
    return "\n".join(lines)


class Formulas:
    """The lost formulas of a section: LaTeX in JupyterLab, the same content as plain text."""

    def __init__(self, section: str):
        self.section = section
        self.items = lost_formulas(section)

    def _repr_markdown_(self) -> str:
        parts = []
        for f in self.items:
            parts.append(f"**{f.id}: {f.title}** (after *{f.after}*)\n\n$$\n{f.latex}\n$$")
            if f.remark:
                parts.append(f.remark)
            t = f.table()
            if t:
                parts.append("```text\n" + t + "\n```")
        return "\n\n".join(parts)

    def __repr__(self) -> str:
        parts = []
        for f in self.items:
            block = [f"{f.id}: {f.title} (after '{f.after}')", textwrap.indent(f.latex, "    ")]
            if f.remark:
                block.append(textwrap.fill(f.remark, WIDTH))
            t = f.table()
            if t:
                block.append(t)
            parts.append("\n".join(block))
        return "\n\n".join(parts)


def show_formulas(section: str) -> Formulas:
    """The section's lost formulas, reconstructed (display it as a cell's last expression)."""
    return Formulas(section)


def measure_it(check: str, *, attempts: int = 3, model: str = "tiny", threads: int | None = 1, **thresholds):
    """Time the chapter's effects live (`measure.quick_suite` on a tiny model, a few seconds on a
    CPU core) and evaluate one of `measure`'s checks, e.g. "itl_flat_with_context".

    Robust to a busy machine: the points a check compares are timed round-robin (`time_interleaved`), so a
    change in load falls on all of them alike, and the checks compare ratios, which a uniform slowdown leaves
    alone. One CPU thread by default (`threads`), since a busy neighbour stalls every OpenMP barrier of a
    multi-threaded op of a tiny model for a whole time slice; on a CPU that one thread's CPU time is then what
    each point is timed by (clock "thread-cpu"), which the time the host keeps it waiting does not inflate.
    A burst can still catch one run; so a failed check is measured again, up to `attempts` runs in all (a
    real regression fails every one). Returns (run, check) of the last run; `check.text` says how many runs
    it took when more than one."""
    from dataclasses import replace

    from inferlab import measure

    fn = getattr(measure, check, None)
    if fn is None or check not in {c.__name__ for c in measure.checks.CHECKS}:
        names = ", ".join(c.__name__ for c in measure.checks.CHECKS)
        raise ValueError(f"unknown check {check!r}; allowed: {names}")
    # One thread on a CPU: time each point by its thread's CPU time, which the host's load does not inflate.
    from inferlab.measure.device import resolve_kind
    clock = "thread-cpu" if threads == 1 and resolve_kind("auto") == "cpu" else "wall"
    for attempt in range(1, attempts + 1):
        # Eager decode: the tiny model sits in the cache, and compiling it (the CPU's default
        # decode mode) would take longer than the whole measurement it serves.
        run = measure.quick_suite(model=model, progress=False, threads=threads, clock=clock, decode_mode="eager")
        result = fn(run, **thresholds)
        if result:
            break
    if attempt > 1:
        result = replace(result, text=f"{result.text} [run {attempt} of {attempts}]")
    return run, result


# The notebooks' claim and formula views reproduce the book's scenarios (yardsticks).
from inferlab.context import mark_yardsticks  # noqa: E402

mark_yardsticks(globals())


# Every matplotlib Figure a notebook displays carries what it draws as its PNG's "alt" metadata
# (the book's alt text; alttext.describe). A no-op outside IPython.
from inferlab.alttext import register_ipython as _register_alt  # noqa: E402

_register_alt()

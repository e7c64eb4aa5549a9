"""What a student reads when an exercise's check did not run, or ran after a failing cell.

The runner reports each failing cell: its index, the error's type and the line of the cell it was raised on
(`sandbox_runner.error_line`), or that it was stopped at its budget of own time. An exercise's cells are those
after the previous check cell up to its own check cell (`check_plan`); a failure there is named in that
exercise's feedback ("cell 7 raised SyntaxError at line 3", "cell 7 timed out after 120 s of its own time").
Only the type and the line: the error's message could quote an expected value, and nothing here does.
Cells are counted from 1, every cell (Markdown too), as the notebook shows them from the top.
"""
from __future__ import annotations

MAX_NAMED = 3  # failing cells named in one exercise's feedback


def describe(event: dict) -> str:
    """One failing cell in words (an entry of the runner's `errors` or `timeouts`)."""
    where = f"cell {event['cell'] + 1}" if event.get("cell") is not None else "a cell"
    if event.get("ename") == "CellTimeoutError":
        budget = event.get("budget_s")
        after = f" after {budget:g} s of its own time" if budget is not None else ""
        killed = " (it ignored the interrupt and the kernel was stopped)" if event.get("killed") else ""
        return f"{where} timed out{after}{killed}"
    line = f" at line {event['line']}" if event.get("line") is not None else ""
    return f"{where} raised {event.get('ename', 'an error')}{line}"


def exercise_failures(plan: list, events: list, stopped: str | None = None) -> dict:
    """{exercise id: (text, own)}: what failed before its check. own=True: failing cells of the exercise's own
    span (see the module doc); own=False: the last failing cell before the span ("an earlier cell failed:
    ..."), else why the notebook stopped (`stopped`), which explain a check that never ran. An exercise with
    nothing to say has no entry."""
    events = sorted((e for e in events if e.get("cell") is not None), key=lambda e: e["cell"])
    out, previous = {}, -1
    for entry in sorted(plan, key=lambda p: int(p["cell"])):
        cell = int(entry["cell"])
        own = [e for e in events if previous < e["cell"] <= cell]
        before = [e for e in events if e["cell"] <= previous]
        if own:
            found = ("; ".join(describe(e) for e in own[:MAX_NAMED]) + (" ..." if len(own) > MAX_NAMED else ""), True)
        elif before:
            found = ("an earlier cell failed: " + describe(before[-1]), False)
        else:
            found = (f"the notebook stopped before it ({stopped})", False) if stopped else None
        for check in entry.get("checks", []):
            if found:
                out.setdefault(check["id"], found)
        previous = cell
    return out

"""Stage budgets: the seconds each stage of a suite run may take, and what a stage left out when they ran out.

A stage starts with `start(name)`; before each new size, round, repeat or extra it could leave out it asks
`fits(cost_s)` (or `spent()`), and what it does not take it records with `skip(what)`. What cannot be cut (a
compile, the single point a claim needs) runs anyway, so a stage can overrun: `to_dict` keeps each stage's
budget, its seconds and what it skipped. The progress estimate is the sum of the budgets, so it is honest
from the first stage: `progress_s` is the budgets of the finished stages plus the current one's seconds,
capped at its budget.
"""
from __future__ import annotations

import time

from inferlab.base.input_checks import positive_float


MIN_POINT_S = 1e-6  # a point's time limit once the budget is spent: its minimum repeats only


class StageBudgets:
    """Seconds per stage (`budgets_s`: {stage: seconds}, in run order), read from `clock` (a stand-in in tests)."""

    def __init__(self, budgets_s: dict, clock=time.perf_counter):
        if not budgets_s:
            raise ValueError("budgets_s: at least one stage is needed")
        for name, seconds in budgets_s.items():
            positive_float(f"budgets_s[{name!r}]", seconds)
        self.budgets_s = {str(k): float(v) for k, v in budgets_s.items()}
        self.clock = clock
        self.elapsed_s: dict = {}
        self.skipped: dict = {}
        self.current: str | None = None
        self._t0 = 0.0
        self.on_check = None  # called whenever a stage asks how much is left (a progress bar's refresh)

    @property
    def total_s(self) -> float:
        return sum(self.budgets_s.values())

    def start(self, name: str) -> None:
        if name not in self.budgets_s:
            raise ValueError(f"stage {name!r} has no budget (stages: {', '.join(self.budgets_s)})")
        self.end()
        self.current, self._t0 = name, self.clock()

    def end(self) -> None:
        if self.current is not None:
            self.elapsed_s[self.current] = self.elapsed_s.get(self.current, 0.0) + self.clock() - self._t0
            self.current = None

    def used_s(self) -> float:
        """Seconds of the current stage so far (0 outside a stage)."""
        if self.current is None:
            return 0.0
        return self.elapsed_s.get(self.current, 0.0) + self.clock() - self._t0

    def left_s(self) -> float:
        """The current stage's budget less its seconds so far (negative once overrun; infinite outside a stage)."""
        if self.on_check is not None:
            self.on_check()
        if self.current is None:
            return float("inf")
        return self.budgets_s[self.current] - self.used_s()

    def spent(self) -> bool:
        return self.left_s() <= 0.0

    def fits(self, cost_s: float) -> bool:
        """Whether something predicted to take `cost_s` seconds ends within the current stage's budget."""
        return cost_s <= self.left_s()

    def share_s(self, point_time_s: float, points_left: int) -> float:
        """A point's time limit: `point_time_s`, or less so that the `points_left` points still to come share
        what is left of the budget (at least MIN_POINT_S: the point then takes only its minimum repeats)."""
        return max(MIN_POINT_S, min(point_time_s, self.left_s() / max(int(points_left), 1)))

    def skip(self, what: str) -> None:
        """Record that the current stage left `what` out for want of time."""
        self.skipped.setdefault(self.current or "", []).append(str(what))

    def progress_s(self) -> float:
        """Budget seconds done: every finished stage's budget, plus the current one's seconds (capped at its
        budget). Over `total_s`, the share of the run done, as a bar shows it."""
        done = sum(self.budgets_s[name] for name in self.elapsed_s if name != self.current)
        if self.current is not None:
            done += min(self.used_s(), self.budgets_s[self.current])
        return done

    def notes(self) -> list:
        """One line per stage that skipped something or overran its budget."""
        lines = []
        for name, budget in self.budgets_s.items():
            took = self.elapsed_s.get(name)
            skipped = self.skipped.get(name)
            if skipped:
                lines.append(f"stage {name!r} ran out of its {budget:.0f} s budget and left out: "
                             + "; ".join(skipped))
            if took is not None and took > budget:
                lines.append(f"stage {name!r} took {took:.0f} s, over its {budget:.0f} s budget (what cannot be "
                             "cut, a compile or a claim's single point, runs anyway)")
        return lines

    def to_dict(self) -> dict:
        return {"budget_s": dict(self.budgets_s),
                "elapsed_s": {k: round(v, 3) for k, v in self.elapsed_s.items()},
                "skipped": {k: list(v) for k, v in self.skipped.items()}}

"""Qualitative words chosen from the numbers by stated thresholds, never typed into prose.

    size_of_change(0.46)                 -> 'large'     (|change| > LARGE_CHANGE)
    ranking({"TP = 2": 54, "one GPU": 50}, rel_uncertainty=0.05).sentence()
        -> 'TP = 2 and one GPU are tied within their uncertainty (8 % apart; each value ±5 %)'

A word describes a relative change r = new/old - 1: "small" when |r| <= SMALL_CHANGE (10 %),
"large" when |r| > LARGE_CHANGE (30 %), "moderate" between. "Best" is claimed only when the
leader's lower bound beats the runner-up's upper bound, each value known to ±rel_uncertainty:
best * (1 - u) > second * (1 + u).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from inferlab.base.input_checks import positive_float

SMALL_CHANGE = 0.10
LARGE_CHANGE = 0.30


def size_of_change(relative: float) -> str:
    """'small' (|r| <= 10 %), 'moderate' (<= 30 %) or 'large' (> 30 %) for a relative change r."""
    r = float(relative)
    if not math.isfinite(r):
        raise ValueError(f"relative must be a finite number; got {relative!r}")
    a = abs(r)
    return "small" if a <= SMALL_CHANGE else "moderate" if a <= LARGE_CHANGE else "large"


def thresholds_text() -> str:
    """The thresholds as a reader sees them beside a word."""
    return (f"small ≤ {SMALL_CHANGE:.0%}, moderate ≤ {LARGE_CHANGE:.0%}, large beyond")


@dataclass(frozen=True)
class Ranking:
    """The leader of a set of values and whether its margin beats their uncertainty."""

    leader: str
    runner_up: str | None
    margin: float            # leader / runner_up - 1
    rel_uncertainty: float   # each value known to ±this (relative)

    @property
    def decided(self) -> bool:
        """leader * (1 - u) > runner_up * (1 + u): the intervals do not overlap."""
        if self.runner_up is None:
            return True
        u = self.rel_uncertainty
        return (1 + self.margin) * (1 - u) > (1 + u)

    def sentence(self) -> str:
        if self.runner_up is None:
            return f"{self.leader} is the only one"
        u = f"each value ±{self.rel_uncertainty:.0%}"
        if self.decided and math.isinf(self.margin):
            return f"{self.leader} is best; {self.runner_up}, the next, scores zero"
        if self.decided:
            return f"{self.leader} is best, {self.margin:.0%} ahead of {self.runner_up} ({u})"
        return (f"{self.leader} and {self.runner_up} are tied within their uncertainty "
                f"({self.margin:.0%} apart; {u})")


def ranking(values: dict, rel_uncertainty: float) -> Ranking:
    """Rank `values` ({label: value >= 0}, larger is better); see `Ranking.decided` for the rule."""
    if not values:
        raise ValueError("values must name at least one candidate; got none")
    positive_float("rel_uncertainty", rel_uncertainty, allow_zero=True, maximum=0.5)
    for label, v in values.items():
        positive_float(f"value of {label!r}", v, allow_zero=True)
    order = sorted(values, key=lambda k: values[k], reverse=True)
    if len(order) == 1:
        return Ranking(order[0], None, math.inf, float(rel_uncertainty))
    first, second = order[0], order[1]
    margin = values[first] / values[second] - 1 if values[second] else math.inf
    return Ranking(first, second, margin, float(rel_uncertainty))

"""The chapter's qualitative claims, checked against a measured run.

Each function takes a SuiteResult and returns a Check, which is truthy when the claim holds
and prints as one line with the measured value and the threshold.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    value: float
    threshold: float
    text: str

    def __bool__(self) -> bool:
        return bool(self.passed)

    def __repr__(self) -> str:
        return f"{'ok' if self.passed else 'FAIL'}: {self.text}"

    def to_dict(self) -> dict:
        return {"passed": bool(self.passed), "value": float(self.value),
                "threshold": float(self.threshold), "text": self.text}


def decode_slower_than_prefill(result, min_prompt: int = 512, factor: float = 10.0) -> Check:
    """Decode costs a token many times what prefill does: ITL at B = 1 (shortest context) over
    TTFT/S, for every prompt S >= min_prompt; passes if the smallest ratio is >= factor."""
    s, ttft = result.series("ttft", "prompt_len")
    c, itl = result.series("itl", "context_len")
    keep = s >= min_prompt
    if not keep.any() or not len(itl):
        return Check("decode_slower_than_prefill", False, float("nan"), factor,
                     f"no prefill with S >= {min_prompt} or no decode step was measured")
    ratio = float(np.min(itl[np.argmin(c)] / (ttft[keep] / s[keep])))
    return Check("decode_slower_than_prefill", ratio >= factor, ratio, factor,
                 f"a decode token costs {ratio:.0f}x a prefill token at S >= {min_prompt} "
                 f"(claim: many times over, >= {factor:g}x)")


def throughput_grows_with_batch(result, min_gain: float = 2.0) -> Check:
    """Decode throughput at the largest batch is >= min_gain x that at B = 1 and >= 0.7 x the
    best measured (room for timing noise where throughput has levelled off)."""
    b, step = result.series("batch", "batch")
    if len(b) < 2:
        return Check("throughput_grows_with_batch", False, float("nan"), min_gain,
                     "fewer than two batch sizes were measured")
    tput = b / step
    gain = float(tput[np.argmax(b)] / tput[np.argmin(b)])
    ok = gain >= min_gain and tput[np.argmax(b)] >= 0.7 * tput.max()
    return Check("throughput_grows_with_batch", bool(ok), gain, min_gain,
                 f"throughput at B = {int(b.max())} is {gain:.1f}x that at B = {int(b.min())} "
                 f"(claim: grows with batch, >= {min_gain:g}x)")


def itl_flat_with_context(result, max_growth: float = 0.3, max_context: int = 2048) -> Check:
    """At B = 1, ITL barely moves with context (prompt) length: ITL at the longest context
    <= max_context grows by at most max_growth over the shortest."""
    c, itl = result.series("itl", "context_len")
    keep = c <= max_context
    if keep.sum() < 2:
        return Check("itl_flat_with_context", False, float("nan"), max_growth,
                     f"fewer than two contexts <= {max_context} were measured")
    c, itl = c[keep], itl[keep]
    growth = float(itl[np.argmax(c)] / itl[np.argmin(c)] - 1.0)
    return Check("itl_flat_with_context", growth <= max_growth, growth, max_growth,
                 f"ITL moves {growth:+.0%} from context {int(c.min())} to {int(c.max())} at B = 1 "
                 f"(claim: barely, <= {max_growth:.0%})")


def ttft_grows_with_prompt(result) -> Check:
    """TTFT rises with every longer prompt measured."""
    s, ttft = result.series("ttft", "prompt_len")
    order = np.argsort(s)
    if len(s) < 2:
        return Check("ttft_grows_with_prompt", False, float("nan"), 1.0, "fewer than two prompts measured")
    ratio = float(ttft[order][-1] / ttft[order][0])
    ok = bool(np.all(np.diff(ttft[order]) > 0))
    return Check("ttft_grows_with_prompt", ok, ratio, 1.0,
                 f"TTFT grows {ratio:.1f}x from S = {int(s.min())} to {int(s.max())} "
                 f"({s.max() / s.min():.0f}x the tokens); rises at every step: {ok}")


CHECKS = (decode_slower_than_prefill, throughput_grows_with_batch, itl_flat_with_context,
          ttft_grows_with_prompt)


def all_checks(result) -> dict:
    """{name: Check} for every check in CHECKS."""
    out = {}
    for fn in CHECKS:
        ch = fn(result)
        out[ch.name] = ch
    return out

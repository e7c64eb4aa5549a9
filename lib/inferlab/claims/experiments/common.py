"""What every experiment shares: the default model and accelerator, the Case and Outcome an
experiment returns, and the small formatters and model variants the experiments use.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from inferlab.core.specs import Precision, get_model

MODEL = "llama-2-13b"
ACC = "h100-sxm"


@dataclass(frozen=True)
class Case:
    """One scenario of an experiment: its label, whether the statement holds there, and the numbers."""

    label: str
    holds: bool
    detail: str


@dataclass(frozen=True)
class Outcome:
    cases: tuple
    varies: str = ""                                   # what the cases vary over ("prompt length")
    values: dict = field(default_factory=dict, hash=False)  # named numbers for templates
    sweep: tuple = ()   # Cases shown beside the verdict, never deciding it: what would make it flip
    node: str = ""      # the measured node the deciding cases ran on ("" : the roofline's cases only)


def _f(x, digits=3) -> str:
    return f"{x:.{digits}g}"


def _ms(x) -> str:
    return f"{x * 1e3:.3g} ms"


def _gqa(model, n_kv_heads: int):
    m = get_model(model)
    return dataclasses.replace(m, name=f"{m.name} with {n_kv_heads} KV heads", n_kv_heads=int(n_kv_heads))


def _precision(weights="bf16", kv="bf16", compute=None) -> Precision:
    return Precision(weights=weights, kv=kv, compute=compute)

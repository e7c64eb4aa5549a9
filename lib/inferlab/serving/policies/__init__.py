"""Scheduling policies of the serving simulator: one class each, registered by name.

A policy is a frozen dataclass (its fields are its options) deriving from `base.Policy`, whose
`plan_step(state)` decides each step; `base` lists the other questions the engine asks it (queue
order, eviction order, blocks at admission, whether a request can ever fit). The engine
(serving.engine.Replica) and the live loop (study.live) call those methods and nothing else.

Registered policies (the names `inferlab serve --policy` takes; the command line's options are the
classes' fields):

- static (`static.StaticBatching`), continuous (`continuous.ContinuousBatching`, Orca),
  prefill-first (`prefill_first.PrefillFirst`, vLLM without chunking), chunked
  (`chunked.ChunkedPrefill`, Sarathi-Serve), priority (`priority.PriorityScheduling`, vLLM's
  priority order) and no-evict (`no_eviction.NoEviction`, TensorRT-LLM's guaranteed no-evict).

Two more model other engines' schedulers for the validation study and are built from those engines'
settings, not by name: `transformers_fifo.TransformersFIFO` and `vllm_v1.VllmV1`.

All but static: paged KV with admission when the blocks `kv_tokens_at_admission` names are free
(beyond a watermark), and preemption by recompute (the sequence `eviction_key` ranks highest, by
default the latest admitted) when a decode needs a block.

Adding a policy: a new module here with its class (fields made with `base.option`, its
`plan_step`), its import below and its entry in POLICIES.
"""
from __future__ import annotations

from inferlab.base.input_checks import choice
from inferlab.serving.policies.base import Policy, StepPlan, option_fields
from inferlab.serving.policies.chunked import ChunkedPrefill
from inferlab.serving.policies.continuous import ContinuousBatching
from inferlab.serving.policies.no_eviction import NoEviction
from inferlab.serving.policies.prefill_first import PrefillFirst
from inferlab.serving.policies.priority import PriorityScheduling
from inferlab.serving.policies.static import StaticBatching
from inferlab.serving.policies.transformers_fifo import TransformersFIFO
from inferlab.serving.policies.vllm_v1 import VllmV1

POLICIES = {cls.name: cls for cls in (
    StaticBatching,
    ContinuousBatching,
    PrefillFirst,
    ChunkedPrefill,
    PriorityScheduling,
    NoEviction,
)}
POLICY_NAMES = tuple(POLICIES)


def make_policy(name: str, label=None, **options) -> Policy:
    """The policy registered as `name`, with `options` (its fields; one it does not have is an error
    naming the policy's options). label(field name): how errors name an option (the command line
    passes its option names)."""
    cls = POLICIES[choice("policy", name, POLICY_NAMES)]
    names = [f for f, _, _ in option_fields(cls)]
    for key in options:
        if key not in names:
            raise ValueError(f"{(label or str)(key)} does not apply to policy {name} (its options: "
                             f"{', '.join(names)})")
    cls.check_options(options, label)
    return cls(**options)


__all__ = ["POLICIES", "POLICY_NAMES", "ChunkedPrefill", "ContinuousBatching", "NoEviction", "Policy",
           "PrefillFirst", "PriorityScheduling", "StaticBatching", "StepPlan", "TransformersFIFO", "VllmV1",
           "make_policy", "option_fields"]

"""Time of one iteration of a serving engine: a mixed step of prefill chunks and decode tokens.

A step feeds T tokens in total (one per decoding sequence plus the tokens of each prefill chunk)
through every projection as one flat matrix (as vLLM and Orca batch them), scores each sequence's
new queries against its own keys, and applies the LM head to the `logits` sequences that sample a
token this step (every decode, and each prefill whose last chunk runs). Under the library's
per-operator roofline (`roofline.pass_time_s`, overlap='per_operator'):

    step_time = sum over projections, MLP, embedding of max(compute, memory)(T)
              + L * 2 * max(F_pair * pairs / peak, (T * q_dim * b_act + K * kv_dim * b_kv) / BW)
              + max(compute, memory) of the LM head over `logits` rows
              + tensor-parallel all-reduces of T tokens (`parallel.tp_communication_time_s`)

with `pairs` the query-key pairs scored (q*p + q(q+1)/2 per sequence with q new and p cached
tokens) and K the keys read (p + q per sequence). For a uniform batch this is exactly
`latency.prefill_time_s` / `latency.decode_step_time_s` (tests check it); for a mixed batch the
attention of each sequence adds its own pairs and keys, which the same two kernels process.
Any callable with the signature of `StepTimeModel.__call__` can replace it (a measured profile).
A model with `time_aware = True` (serving.hostspeed.SpeedTrackedStepTime) is called with one more
keyword, t_s=, the simulated step's start in seconds: its step time may follow the host over time.
"""
from __future__ import annotations

from typing import Protocol

import numpy as np

from inferlab.context import beyond_context
from inferlab.costs import ATTENTION_OPS, forward_costs
from inferlab.parallel import DEFAULT_ALLREDUCE_LATENCY_S, tp_communication_time_s, tp_shard
from inferlab.roofline import roofline_time_s
from inferlab.specs import BF16, Precision, check_accelerator, check_model, check_precision
from inferlab.units import bytes_per_element
from inferlab.input_checks import fraction, positive_float


class StepTimeModel(Protocol):
    def __call__(self, tokens: int, logits: int, attn_pairs: float, attn_kv_tokens: float) -> float:
        """Seconds for one step that feeds `tokens` tokens, samples `logits` tokens, scores
        `attn_pairs` query-key pairs and reads `attn_kv_tokens` cached keys (and values)."""


class RooflineStepTime:
    """The library's roofline step time for one model instance (tp devices); see the module doc.
    Token-dependent terms are tabulated once (vectorised through `costs.forward_costs`) and
    looked up per step, so a simulated step costs a few list lookups."""

    def __init__(self, model, accelerator, precision: Precision = BF16, *, tp: int = 1,
                 mfu: float = 1.0, mbu: float = 1.0, allreduce: bool = True,
                 allreduce_latency_s: float = DEFAULT_ALLREDUCE_LATENCY_S):
        self.model = check_model(model)
        self.accelerator = check_accelerator(accelerator)
        self.precision = check_precision(precision)
        fraction("mfu", mfu)
        fraction("mbu", mbu)
        positive_float("allreduce_latency_s", allreduce_latency_s, allow_zero=True)
        self.shard = tp_shard(self.model, tp)
        self.tp, self.mfu, self.mbu = int(tp), float(mfu), float(mbu)
        self.allreduce, self.allreduce_latency_s = bool(allreduce), float(allreduce_latency_s)
        dtype = self.precision.compute_dtype
        self._dtype = dtype
        s = self.shard
        # Attention constants: one of the two kernels (QK^T or PV), all layers.
        self._pair_s = s.n_layers * 2.0 * s.n_heads * s.head_dim / (mfu * self.accelerator.peak(dtype))
        bw = mbu * self.accelerator.hbm_bytes_per_s
        self._q_byte_s = s.n_layers * s.q_dim * bytes_per_element(self.precision.activations) / bw
        self._kv_byte_s = s.n_layers * s.kv_dim * bytes_per_element(self.precision.kv) / bw
        self._linear: list[float] = [0.0]
        self._head: list[float] = [0.0]

    def _grow_linear(self, tokens: int) -> None:
        n = max(2 * len(self._linear), tokens + 1, 1024)
        t = np.arange(len(self._linear), n)
        with beyond_context():  # T is the step's tokens over all its sequences, not one context
            costs = forward_costs(self.shard, 1, t, 0, self.precision).without(*ATTENTION_OPS, "lm_head")
        times = sum(roofline_time_s(c.flops, c.bytes, self.accelerator, self._dtype, self.mfu, self.mbu)
                    for c in costs.operators().values())
        if self.allreduce:
            times = times + tp_communication_time_s(self.model, t, self.tp, self.accelerator,
                                                    self.precision, self.allreduce_latency_s)
        self._linear.extend(np.asarray(times, dtype=float).tolist())

    def _grow_head(self, logits: int) -> None:
        n = max(2 * len(self._head), logits + 1, 256)
        b = np.arange(len(self._head), n)
        c = forward_costs(self.shard, b, 1, 0, self.precision).head["lm_head"]
        self._head.extend(np.asarray(roofline_time_s(c.flops, c.bytes, self.accelerator, self._dtype,
                                                     self.mfu, self.mbu), dtype=float).tolist())

    def attention_time_s(self, tokens: int, attn_pairs: float, attn_kv_tokens: float) -> float:
        """Both attention kernels over all layers: 2 * max(compute, memory) of one."""
        return 2.0 * max(self._pair_s * attn_pairs,
                         self._q_byte_s * tokens + self._kv_byte_s * attn_kv_tokens)

    def __call__(self, tokens: int, logits: int, attn_pairs: float, attn_kv_tokens: float) -> float:
        if tokens >= len(self._linear):
            self._grow_linear(tokens)
        if logits >= len(self._head):
            self._grow_head(logits)
        return (self._linear[tokens] + self._head[logits]
                + 2.0 * max(self._pair_s * attn_pairs,
                            self._q_byte_s * tokens + self._kv_byte_s * attn_kv_tokens))

    def prefill_s(self, prompt_tokens: int) -> float:
        """One prompt alone, in one step (= latency.prefill_time_s for batch 1)."""
        s = float(prompt_tokens)
        return self(int(prompt_tokens), 1, s * (s + 1) / 2, s)

    def decode_s(self, context_tokens: int, batch: int = 1) -> float:
        """A decode step of `batch` sequences at context `context_tokens` (= decode_step_time_s)."""
        return self(int(batch), int(batch), float(batch) * context_tokens, float(batch) * context_tokens)


class ScaledStepTime:
    """A what-if step time: `base`'s step time x `factor` at every step (1.05: every step 5 % longer).
    It keeps `base`'s call form: told each step's sequences if `base` is `detailed`, each step's
    start t_s= if `base` is `time_aware` (serving.hostspeed), and passes both through."""

    def __init__(self, base, factor: float):
        if not callable(base):
            raise ValueError(f"base must be a step-time model; got {base!r}")
        self.base, self.factor = base, positive_float("factor", factor, maximum=1e3)
        self.detailed = bool(getattr(base, "detailed", False))
        self.time_aware = bool(getattr(base, "time_aware", False))

    def step(self, *args, **kwargs) -> float:
        return self.base.step(*args, **kwargs) * self.factor

    def __call__(self, *args, **kwargs) -> float:
        return self.base(*args, **kwargs) * self.factor

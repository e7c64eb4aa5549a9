"""Time of one iteration of a serving engine: a mixed step of prefill chunks and decode tokens.

A step feeds T tokens in total (one per decoding sequence plus the tokens of each prefill chunk)
through every projection as one flat matrix (as vLLM and Orca batch them), scores each sequence's
new queries against its own keys, and applies the LM head to the `logits` sequences that sample a
token this step (every decode, and each prefill whose last chunk runs). Under the library's
per-operator roofline (`roofline.pass_time_s`, overlap='per_operator'):

    step_time = sum over projections, MLP, embedding of max(compute, memory)(T)
              + L * sum over QK^T and PV of max(F_pair * pairs / peak, (T * q_dim * b_act + K * kv_dim * b_kv) / BW)
              + max(compute, memory) of the LM head over `logits` rows
              + tensor-parallel all-reduces of T tokens (`efficiency.communication_time_s`)
              + the engine's CPU time for the step's sequences (a deployment's step_overhead; none by default)

The projections, MLP, embedding, LM head and all-reduces are timed by the efficiency model
(`efficiency`: the roofline above, or Vidur's measured kernels, which add the small kernels);
attention stays on the roofline in both.

with `pairs` the query-key pairs scored (q*p + q(q+1)/2 per sequence with q new and p cached
tokens) and K the keys read (p + q per sequence), full attention's counts in `attention` (the one
account). A model with sliding or chunked layers or latent attention (MLA) takes each step's pairs,
keys and kernel widths from `attention.step_account` instead, layer kind by layer kind, and adds the
two kernels' max(compute, memory) separately; its decodes' keys come from their mean context (an
upper bound under a window). For a uniform batch this is exactly
`latency.prefill_time_s` / `latency.decode_step_time_s` (tests check it); for a mixed batch the
attention of each sequence adds its own pairs and keys, which the same two kernels process.

One interface (`StepTimeModel`): the engine describes each step as a `StepShape` (its decoding
sequences and the keys they read, its prefill chunks, the sequences sampling) and asks
`step_time_s(step, t_s)`, t_s the step's start on the simulated clock. Every step-time model
implements that one method: this roofline, `ScaledStepTime` (a what-if), and the measured ones of
the validation study (`serving.study.profiled`, `serving.study.fitted`, `serving.study.hostspeed`). A model whose
step time does not depend on when the step runs ignores t_s.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from inferlab.core import attention
from inferlab.core.context import beyond_context
from inferlab.core.costs import ATTENTION_OPS, forward_costs
from inferlab.core.deployment import Deployment
from inferlab.core.efficiency import communication_time_s
from inferlab.core.parallel import allreduce_latency_s as parallel_allreduce_latency_s, tp_shard
from inferlab.core.specs import BF16, Precision, check_accelerator, check_model, check_precision
from inferlab.base.units import bytes_per_element
from inferlab.base.input_checks import fraction, positive_float


@dataclass(frozen=True, slots=True)
class StepShape:
    """The work of one engine step: `decode_seqs` sequences decoding one token each over
    `decode_kv_tokens` keys in all (each its cached keys plus its own new one), prefill `chunks`
    ((q new tokens, p already cached), ...), and `sampled` sequences sampling a token (every decode,
    and each prefill whose last chunk runs). The step's totals are derived from them: `tokens` fed
    (decode_seqs + the q's), `attn_pairs` query-key pairs scored (decode_kv_tokens + q p + q (q + 1) / 2
    per chunk) and `attn_kv_tokens` keys read (decode_kv_tokens + p + q per chunk)."""

    decode_seqs: int
    decode_kv_tokens: float
    chunks: tuple = ()
    sampled: int = 0

    @property
    def tokens(self) -> int:
        return self.decode_seqs + sum(q for q, _ in self.chunks)

    @property
    def sequences(self) -> int:
        return self.decode_seqs + len(self.chunks)

    @property
    def attn_pairs(self) -> float:
        pairs = float(self.decode_kv_tokens)
        for q, p in self.chunks:
            pairs += attention.causal_pairs(q, p)
        return pairs

    @property
    def attn_kv_tokens(self) -> float:
        kv = float(self.decode_kv_tokens)
        for q, p in self.chunks:
            kv += p + q
        return kv


def prefill_shape(prompt_tokens: int) -> StepShape:
    """One prompt alone, in one step, with nothing cached."""
    return StepShape(0, 0.0, ((int(prompt_tokens), 0),), 1)


def decode_shape(context_tokens: int, batch: int = 1) -> StepShape:
    """A decode step of `batch` sequences, each reading `context_tokens` keys."""
    return StepShape(int(batch), float(batch) * context_tokens, (), int(batch))


@runtime_checkable
class StepTimeModel(Protocol):
    def step_time_s(self, step: StepShape, t_s: float) -> float:
        """Seconds for the step `step` starting at `t_s` on the simulated clock (seconds since the
        workload's t0; ignored by a model that does not follow the host over time)."""


class RooflineStepTime:
    """The library's step time for one model instance (tp devices); see the module doc. The kernels
    are timed by `efficiency` (None: the roofline at mfu, mbu; `efficiency.MeasuredKernels()`: Vidur's
    measured kernels, mfu = mbu = 1) and each step adds `step_overhead` (a kernels.StepOverhead, for
    the step's sequences; None: no CPU term), as `deployment.Deployment` takes them.
    Token-dependent terms are tabulated once (vectorised through `costs.forward_costs`) and
    looked up per step, so a simulated step costs a few list lookups."""

    def __init__(self, model, accelerator, precision: Precision = BF16, *, tp: int = 1,
                 mfu: float = 1.0, mbu: float = 1.0, allreduce: bool = True,
                 allreduce_latency_s: float | None = None, efficiency=None,
                 step_overhead=None):
        self.model = check_model(model)
        self.accelerator = check_accelerator(accelerator)
        self.precision = check_precision(precision)
        fraction("mfu", mfu)
        fraction("mbu", mbu)
        if allreduce_latency_s is not None:
            positive_float("allreduce_latency_s", allreduce_latency_s, allow_zero=True)
        self.shard = tp_shard(self.model, tp)
        # The deployment checks the efficiency against the knobs, accelerator and precision, once.
        self.deployment = Deployment(self.accelerator, self.precision, tp=tp, mfu=mfu, mbu=mbu,
                                     allreduce=allreduce, allreduce_latency_s=allreduce_latency_s,
                                     efficiency=efficiency, step_overhead=step_overhead)
        self.efficiency = self.deployment.efficiency_model
        self.step_overhead = self.deployment.step_overhead
        self.tp, self.mfu, self.mbu = int(tp), float(self.deployment.mfu), float(self.deployment.mbu)
        self.allreduce = bool(allreduce)
        self.allreduce_latency_s = (parallel_allreduce_latency_s(self.accelerator) if allreduce_latency_s is None
                                    else float(allreduce_latency_s))
        dtype = self.precision.compute_dtype
        self._dtype = dtype
        s = self.shard
        # Attention constants from the one account (`attention.layer_shape`): one of the two kernels
        # (QK^T or PV), all layers. A model with windows, chunks or MLA counts each step through
        # `attention.step_account` instead (its layers differ in keys read, its kernels in widths).
        shape = attention.layer_shape(s, self.precision)
        self._general = not s.full_attention_only
        self._flop_s = 1.0 / (self.mfu * self.accelerator.peak(dtype))
        self._score_pair_s = s.n_layers * shape.score_flops_per_pair * self._flop_s
        self._value_pair_s = s.n_layers * shape.value_flops_per_pair * self._flop_s
        bw = self.mbu * self.accelerator.hbm_bytes_per_s
        self._byte_s = 1.0 / bw
        self._q_byte_s = s.n_layers * shape.query_bytes_per_token / bw
        self._o_byte_s = s.n_layers * shape.output_bytes_per_token / bw
        self._kv_byte_s = s.n_layers * shape.score_bytes_per_key / bw
        self._v_byte_s = s.n_layers * shape.value_bytes_per_key / bw
        self._linear: list[float] = [0.0]
        self._head: list[float] = [0.0]
        self._overhead: list[float] = []

    def _grow_linear(self, tokens: int) -> None:
        n = max(2 * len(self._linear), tokens + 1, 1024)
        t = np.arange(len(self._linear), n)
        with beyond_context():  # T is the step's tokens over all its sequences, not one context
            costs = forward_costs(self.shard, 1, t, 0, self.precision).without(*ATTENTION_OPS, "lm_head")
        times = self.efficiency.pass_time_s(costs, self.shard, self.deployment)
        if self.allreduce:
            times = times + communication_time_s(self.model, t, self.deployment)
        self._linear.extend(np.asarray(times, dtype=float).tolist())

    def _grow_head(self, logits: int) -> None:
        n = max(2 * len(self._head), logits + 1, 256)
        b = np.arange(len(self._head), n)
        costs = forward_costs(self.shard, b, 1, 0, self.precision)
        head = costs.without(*costs.per_layer, *(op for op in costs.head if op != "lm_head"))
        self._head.extend(np.asarray(self.efficiency.pass_time_s(head, self.shard, self.deployment),
                                     dtype=float).tolist())

    def _grow_overhead(self, sequences: int) -> None:
        n = max(2 * len(self._overhead), sequences + 1, 256)
        self._overhead.extend(np.asarray(self.step_overhead.time_s(np.arange(len(self._overhead), n)),
                                         dtype=float).tolist())

    def attention_time_s(self, tokens: int, attn_pairs: float, attn_kv_tokens: float) -> float:
        """Both attention kernels over all layers, each max(compute, memory), with the FLOPs and bytes
        per pair, token and key of `attention.layer_shape`."""
        return (max(self._score_pair_s * attn_pairs, self._q_byte_s * tokens + self._kv_byte_s * attn_kv_tokens)
                + max(self._value_pair_s * attn_pairs, self._o_byte_s * tokens + self._v_byte_s * attn_kv_tokens))

    def _general_attention_s(self, step: StepShape) -> float:
        """Both attention kernels of a step, all layers, from `attention.step_account` (windows,
        chunks, MLA): L * (max(score FLOPs / peak, bytes / BW) + max(value FLOPs / peak, bytes / BW))."""
        a = attention.step_account(self.shard, self.precision, int(step.decode_seqs), float(step.decode_kv_tokens),
                                   step.chunks)
        per_layer = (max(a.score_flops * self._flop_s, (a.query_bytes + a.score_kv_bytes) * self._byte_s)
                     + max(a.value_flops * self._flop_s, (a.output_bytes + a.value_kv_bytes) * self._byte_s))
        return self.shard.n_layers * per_layer

    def step_time_s(self, step: StepShape, t_s: float) -> float:
        """The time of `step` (the same at any t_s)."""
        if self._general:
            return self._timed(step.tokens, step.sampled, self._general_attention_s(step), step.sequences)
        if not step.chunks:  # a decode-only step: its totals are its decodes' (the common step, kept cheap)
            kv = float(step.decode_kv_tokens)
            return self(step.decode_seqs, step.sampled, kv, kv, step.decode_seqs)
        return self(step.tokens, step.sampled, step.attn_pairs, step.attn_kv_tokens, step.sequences)

    def __call__(self, tokens: int, logits: int, attn_pairs: float, attn_kv_tokens: float,
                 sequences: int | None = None) -> float:
        """The module doc's formula from the step's totals: `tokens` fed, `logits` sampled,
        `attn_pairs` query-key pairs scored, `attn_kv_tokens` keys read, `sequences` in the step (for
        the step overhead; None: `logits`, true of a step where every sequence samples) (what
        `step_time_s` reads off a StepShape; kept for the lab's worked numbers)."""
        if self._general:
            raise ValueError(f"{self.model.name} has windowed, chunked or latent attention: its step time needs "
                             "each sequence's keys; call step_time_s(StepShape(...), t_s)")
        return self._timed(tokens, logits, self.attention_time_s(tokens, attn_pairs, attn_kv_tokens), sequences)

    def _timed(self, tokens: int, logits: int, attention_s: float, sequences: int | None) -> float:
        """Projections, MLP and embedding of `tokens`, the LM head of `logits`, attention, overhead."""
        if tokens >= len(self._linear):
            self._grow_linear(tokens)
        if logits >= len(self._head):
            self._grow_head(logits)
        t = self._linear[tokens] + self._head[logits] + attention_s
        if self.step_overhead is None:
            return t
        sequences = logits if sequences is None else sequences
        if sequences >= len(self._overhead):
            self._grow_overhead(sequences)
        return t + self._overhead[sequences]

    def prefill_s(self, prompt_tokens: int) -> float:
        """One prompt alone, in one step (= latency.prefill_time_s for batch 1)."""
        return self.step_time_s(prefill_shape(prompt_tokens), 0.0)

    def decode_s(self, context_tokens: int, batch: int = 1) -> float:
        """A decode step of `batch` sequences at context `context_tokens` (= decode_step_time_s)."""
        return self.step_time_s(decode_shape(context_tokens, batch), 0.0)


class ScaledStepTime:
    """A what-if step time: `base`'s step time x `factor` at every step (1.05: every step 5 % longer)."""

    def __init__(self, base: StepTimeModel, factor: float):
        self.base, self.factor = check_step_time("base", base), positive_float("factor", factor, maximum=1e3)

    def step_time_s(self, step: StepShape, t_s: float) -> float:
        return self.base.step_time_s(step, t_s) * self.factor


def check_step_time(name: str, model) -> StepTimeModel:
    """`model` if it is a StepTimeModel (has step_time_s(step, t_s)), else a one-line error naming `name`."""
    if not isinstance(model, StepTimeModel):
        raise ValueError(f"{name} must be a step-time model with step_time_s(step: StepShape, t_s: float) "
                         f"(serving.steptime.StepTimeModel); got {model!r}")
    return model

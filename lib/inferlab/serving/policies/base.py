"""What every scheduling policy is: a frozen dataclass whose fields are its options, answering the
engine's questions through methods (the engine reads no flags and no types).

- `plan_step(state) -> StepPlan`: the step's work (the one method a new scheduler must write).
- `enqueue(waiting, r, front)`: where a request joins the waiting queue (an arrival at the back, a
  preempted one at the front; a priority policy sorts).
- `eviction_key(r)`: a decode short of a block evicts the running sequence with the largest key.
- `kv_tokens_at_admission(r)`: the tokens whose KV blocks an admitted request gets at once.
- `fits_alone(prompt, output, total_blocks, watermark_blocks, block_tokens)`: whether a request can
  ever be served, alone on an empty pool (else it is rejected on arrival).
- `largest_prefill(prompt)`: the most tokens of one prompt a single step feeds.
- `check_runs_with(feature)`: ValueError where the policy cannot run with an engine feature.

Options: each field is made with `option(default, help, check)`; its help text (metadata "help")
becomes the command line's, and its check (metadata "check", called as check(label, value)) runs
at construction and, with the command line's option names as labels, in `check_options`.
`check_relations` holds the checks between options (the token budget against max_num_seqs).

`state` is the simulator's replica (serving.engine.Replica) or the live loop's queues
(study.live._Queues): both offer `n_decoding`, `prefilling`, `waiting`, `clock`, `left(r)` (prompt
tokens r still has to feed), `reserve_decode()` (a block for every decode crossing a block boundary;
True when it had to evict) and `admit(token_cap, max_seqs, first_chunk, whole_prompts)` (waiting
requests join in queue order while blocks or slots, the sequence cap and the token cap allow). A
policy that forms whole batches (static) also reads the replica's `static_batch` (the batch running,
or None) and `arrivals_over` (no request will arrive any more); the live loop runs no such policy.
"""
from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields

from inferlab.base.input_checks import positive_float, positive_int
from inferlab.serving.kv import blocks_for


@dataclass(frozen=True)
class StepPlan:
    """One step's work: prefill chunks ((request, tokens), in order) and whether every running
    sequence decodes one token; or, for a policy that forms whole batches, `form_batch` (the most
    requests of the new batch) and `start_s` (when it starts)."""

    chunks: tuple = ()
    decode: bool = False
    form_batch: int = 0
    start_s: float = 0.0

    @property
    def empty(self) -> bool:
        return not (self.chunks or self.decode or self.form_batch)


def option(default, help: str, check=None):
    """A policy's option: a dataclass field with its help text and its check(label, value)."""
    return field(default=default, metadata={"help": help, "check": check})


def count(label, value):
    positive_int(label, value)


def count_or_none(label, value):
    if value is not None:
        positive_int(label, value)


def seconds_or_none(label, value):
    if value is not None:
        positive_float(label, value, allow_zero=True)


@dataclass(frozen=True)
class Policy:
    """The base of every policy: FIFO queue, the latest admitted sequence evicted first, a prompt's
    blocks allocated at admission and the rest as it decodes."""

    name = ""

    def __post_init__(self):
        self.check_options({f.name: getattr(self, f.name) for f in fields(self)})

    # -- options --------------------------------------------------------------------------------
    @classmethod
    def check_options(cls, options: dict, label=None) -> None:
        """Check `options` (field name -> value; a field left out has its default) one by one, then
        together; `label(name)` is how an error names an option (default: the field's name)."""
        label = label or (lambda name: name)
        values = {}
        for f in fields(cls):
            values[f.name] = options[f.name] if f.name in options else f.default
            check = f.metadata.get("check")
            if check is not None and f.name in options:
                check(label(f.name), values[f.name])
        cls.check_relations(values, label)

    @classmethod
    def check_relations(cls, values: dict, label) -> None:
        """Checks between options; none by default."""

    # -- what the engine asks -------------------------------------------------------------------
    def plan_step(self, state) -> StepPlan:
        raise NotImplementedError(f"{type(self).__name__} must define plan_step(state)")

    def enqueue(self, waiting, r, front: bool) -> None:
        """An arrival joins the back of the queue; a preempted request the front."""
        (waiting.appendleft if front else waiting.append)(r)

    def eviction_key(self, r):
        """The latest admitted sequence is evicted first."""
        return r.admit_seq

    def kv_tokens_at_admission(self, r) -> int:
        """The blocks of what its prefill computes (r.target: the prompt, or the prompt and the tokens
        generated before a preemption); later blocks come one at a time as it decodes."""
        return r.target

    def fits_alone(self, prompt: int, output: int, total_blocks: int, watermark_blocks: int,
                   block_tokens: int) -> bool:
        """A request fits when its whole sequence fits the pool beyond the admission watermark."""
        return blocks_for(prompt + output, block_tokens) <= total_blocks - watermark_blocks

    def largest_prefill(self, prompt: int) -> int:
        """A prompt is fed whole in one step."""
        return prompt

    def check_runs_with(self, feature: str) -> None:
        """Every iteration-level policy runs with prefix caching, speculative decoding, a decode pool
        and the live loop."""
        return None


def fill(state, budget: int, requests, chunks: list) -> int:
    """Give each request in order min(its prompt left, the budget left) tokens; the budget left."""
    for r in requests:
        if budget <= 0:
            break
        q = min(budget, state.left(r))
        chunks.append((r, q))
        budget -= q
    return budget


def option_fields(cls) -> tuple:
    """The options of a policy class: (name, default, help) of each of its fields."""
    return tuple((f.name, None if f.default is MISSING else f.default, f.metadata.get("help", ""))
                 for f in fields(cls))

"""Speculative decoding in the serving simulator: a draft proposes k tokens, the target verifies them.

Each verification: the draft runs k decode steps (a smaller model the library knows, or `mtp`,
extra prediction heads on the target), then the target runs one step over k + 1 tokens per
sequence (the k proposals and the token after them) and keeps the accepted prefix plus one token.

    tokens per verification E = (1 - alpha^(k+1)) / (1 - alpha)     (Leviathan et al. 2023, eq. 1)
    verification time        = t_target(n sequences x (k + 1) tokens) + k * t_draft(n sequences x 1 token)
    speed-up over decoding   = E * t_target(n x 1) / verification time

Assumptions, one a line:
- acceptance is i.i.d. per token with probability alpha (the paper's simplification), 0 <= alpha < 1;
- the simulator counts E tokens per verification deterministically (a fluid average, no random draw):
  a request of N output tokens takes ceil((N - 1) / E) verifications after its first token, and
  its token j arrives with verification ceil(j / E) (tokens come in bursts, so ITLs of 0 appear);
- the KV cache, its blocks and the keys read grow by one token per verification, not E (the
  accepted tokens' keys are not counted: an undercount of (E - 1) keys per verification);
- `mtp`: each draft step costs one decoder layer of the target (DeepSeek-V3's MTP module is one
  transformer block sharing the target's embedding and LM head): t_target(decode) / n_layers;
- a draft model runs on the target's devices with the same tensor parallelism and precision; its
  weights and KV cache are not taken from the target's KV pool.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from inferlab.serving.steptime import StepShape
from inferlab.core.specs import ModelConfig
from inferlab.base.input_checks import positive_int

MTP = "mtp"
MAX_DRAFT_TOKENS = 64  # beyond any published setting (EAGLE, Medusa, MTP use k <= 10)


def tokens_per_verification(k: int, alpha: float) -> float:
    """E = (1 - alpha^(k+1)) / (1 - alpha): expected tokens one verification of k proposals yields."""
    check_k(k)
    check_acceptance(alpha)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def check_k(k) -> int:
    return positive_int("speculative k (draft tokens per verification)", k, maximum=MAX_DRAFT_TOKENS)


def check_acceptance(alpha) -> float:
    """0 <= alpha < 1, one line naming it otherwise."""
    ok = (not isinstance(alpha, bool) and isinstance(alpha, (int, float, np.integer, np.floating))
          and math.isfinite(alpha) and 0.0 <= alpha < 1.0)
    if not ok:
        raise ValueError(f"acceptance (alpha, the per-token acceptance rate) must be a number >= 0 and < 1; "
                         f"got {alpha!r}")
    return float(alpha)


@dataclass(frozen=True)
class Speculative:
    """Speculative decoding's settings: k draft tokens per verification, per-token acceptance
    alpha, and the draft (a ModelConfig, or 'mtp')."""

    k: int = 3
    acceptance: float = 0.7
    draft: object = MTP

    def __post_init__(self):
        check_k(self.k)
        check_acceptance(self.acceptance)
        if not (self.draft == MTP if isinstance(self.draft, str) else isinstance(self.draft, ModelConfig)):
            raise ValueError(f"draft must be a model (ModelConfig) or 'mtp'; got {self.draft!r}")

    @property
    def tokens_per_verification(self) -> float:
        return tokens_per_verification(self.k, self.acceptance)

    def verifications(self, output_tokens: int) -> int:
        """Verifications after the first token (the prefill's) for a request of `output_tokens`."""
        return math.ceil((int(output_tokens) - 1) / self.tokens_per_verification - 1e-12)


class SpeculativeStepTime:
    """A step time for speculative decoding (see the module doc): a step's decodes become one
    verification over k + 1 tokens per sequence plus k draft steps; prefill chunks run as given.
    target: the target's StepTimeModel; draft: the draft's (None for mtp, with n_layers)."""

    def __init__(self, target, spec: Speculative, draft=None, n_layers: int | None = None):
        self.target, self.spec, self.draft = target, spec, draft
        if draft is None:
            positive_int("n_layers", n_layers)
        self.n_layers = n_layers

    def draft_step_s(self, n: int, kv_tokens: float, t_s: float) -> float:
        """One draft step of n sequences over kv_tokens keys in all."""
        shape = StepShape(n, kv_tokens, (), n)
        if self.draft is None:
            return self.target.step_time_s(shape, t_s) / self.n_layers
        return self.draft.step_time_s(shape, t_s)

    def step_time_s(self, step: StepShape, t_s: float) -> float:
        n = step.decode_seqs
        if n == 0:
            return self.target.step_time_s(step, t_s)
        k = self.spec.k
        cached = step.decode_kv_tokens / n - 1.0  # each sequence's keys before this step
        verify = StepShape(0, 0.0, step.chunks + ((k + 1, cached),) * n, step.sampled + n * k)
        return self.target.step_time_s(verify, t_s) + k * self.draft_step_s(n, step.decode_kv_tokens, t_s)


def speedup(target, spec: Speculative, batch: int, context_tokens: int, draft=None,
            n_layers: int | None = None) -> float:
    """Decode throughput with speculation over without, for `batch` sequences at `context_tokens`:
    E * t_target(decode) / verification time (target, draft: StepTimeModels)."""
    positive_int("batch", batch)
    positive_int("context_tokens", context_tokens)
    plain = StepShape(batch, float(batch) * context_tokens, (), batch)
    spec_time = SpeculativeStepTime(target, spec, draft, n_layers).step_time_s(plain, 0.0)
    return spec.tokens_per_verification * target.step_time_s(plain, 0.0) / spec_time


def token_times(times, output_tokens: int, e: float) -> np.ndarray:
    """A request's token times from its verification times: times[0] the first token (its
    prefill's), times[v] verification v's end; token j (1..N-1) arrives with verification ceil(j / E)."""
    times = np.asarray(times, dtype=float)
    j = np.arange(int(output_tokens))
    idx = np.minimum(np.ceil(j / e - 1e-12).astype(np.int64), len(times) - 1)
    return times[idx]

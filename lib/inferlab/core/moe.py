"""Mixture of experts: how many distinct experts a step's tokens touch, so how many expert weights it reads.

Assumption (stated once): routing is uniform and independent, each token picking k of E experts. An
expert is then missed by one token with probability 1 - k/E, and by all T tokens with (1 - k/E)^T, so
the expected distinct experts per layer are E (1 - (1 - k/E)^T): k at T = 1 (a single decode reads
only the active experts), E as T grows (a large batch or a long prefill reads them all). Real routers
are skewed, which touches fewer distinct experts at a given T. Expert parallelism and its all-to-all
are not modelled: every expert sits on every device of the model instance.
"""
from __future__ import annotations

import numpy as np

from inferlab.base.input_checks import positive_int


def expected_experts(n_experts: int, experts_per_token: int, tokens):
    """E (1 - (1 - k/E)^T): expected distinct experts T tokens touch in one layer (module doc)."""
    positive_int("n_experts", n_experts)
    positive_int("experts_per_token", experts_per_token)
    if experts_per_token > n_experts:
        raise ValueError(f"experts_per_token must be <= n_experts={n_experts}; got {experts_per_token}")
    t = np.asarray(tokens, dtype=float)
    if np.any(t < 0):
        raise ValueError(f"tokens must be >= 0; got {tokens!r}")
    out = n_experts * (1.0 - (1.0 - experts_per_token / n_experts) ** t)
    return out if out.ndim else float(out)


def tokens_touching(n_experts: int, experts_per_token: int, share: float) -> float:
    """Tokens T at which the expected distinct experts reach `share` of E (module doc):
    E (1 - (1 - k/E)^T) = share E, so T = ln(1 - share) / ln(1 - k/E); 1 when every token uses every expert."""
    positive_int("n_experts", n_experts)
    positive_int("experts_per_token", experts_per_token)
    if experts_per_token > n_experts:
        raise ValueError(f"experts_per_token must be <= n_experts={n_experts}; got {experts_per_token}")
    if not 0.0 < share < 1.0:
        raise ValueError(f"share must be in (0, 1); got {share!r}")
    if experts_per_token == n_experts:
        return 1.0
    return max(1.0, float(np.log1p(-share) / np.log1p(-experts_per_token / n_experts)))


def experts_filled_batch(model, share: float = 0.95):
    """For a mixture of experts, the batch whose tokens touch `share` of every MoE layer's experts
    (`tokens_touching`, uniform routing): where the weight read of a decode step stops growing.
    None for a dense model."""
    return tokens_touching(model.n_experts, model.experts_per_token, share) if model.is_moe else None

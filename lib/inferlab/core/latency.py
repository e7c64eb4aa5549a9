"""Serving-level predictions: TTFT, ITL, throughput, the KV-crossover batch and cost per token.

All times come from the deployment's efficiency model (`deployment.Deployment.efficiency_model`:
the per-operator roofline, `roofline.pass_time_s`, by default; or measured kernel times, see
`efficiency`) applied to the exact operator costs (`costs`), on one of a deployment's `tp` devices
(`deployment.Deployment`), plus the tensor-parallel all-reduces and, when the deployment has one, the
CPU time of the engine step (one step per pass).
The closed forms the chapter uses (2*P*S/peak, (M + B*C_kv)/BW) are here too, named `*_rule`,
so a reader can set the book's shortcut beside the full count.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from inferlab.core.context import context_flag
from inferlab.core.costs import ATTENTION_OPS, chunked_prefill_costs, decode_costs, forward_costs, prefill_costs
from inferlab.core.deployment import as_deployment
from inferlab.core.efficiency import communication_time_s
from inferlab.core.memory import fit_limit, kv_cache_bytes, weight_bytes, weight_bytes_read
from inferlab.core.moe import experts_filled_batch
from inferlab.core.parallel import tp_shard
from inferlab.core.boundary import enters
from inferlab.core.specs import BF16, Accelerator, ModelConfig, Precision
from inferlab.core.roofline import memory_time_s
from inferlab.base.input_checks import finite_result, fraction, nonneg_int, positive_float, positive_int


@enters(model=ModelConfig)
@context_flag
def prefill_time_s(model, deployment, prompt_len, batch=1, precision: Precision | None = None, *,
                   include_attention: bool = True, causal: bool = True):
    """Time of one prefill pass of `batch` prompts of `prompt_len` tokens (= TTFT with no queueing)
    on `deployment` (a Deployment; an Accelerator means Deployment(accelerator, precision or BF16)).
    include_attention=False drops the quadratic QK^T and PV terms: the linear model TTFT ~ 2*P*S/peak.
    Under tensor parallelism each of the 2*L all-reduces costs its bandwidth term plus the
    deployment's allreduce_latency_s (default: the accelerator's, parallel.allreduce_latency_s; 0 is
    the book's idealisation). A deployment's step_overhead adds its CPU time for `batch` sequences."""
    d = as_deployment(deployment, precision)
    shard = tp_shard(model, d.tp)
    costs = prefill_costs(shard, batch, prompt_len, d.precision, causal=causal)
    if not include_attention:
        costs = costs.without(*ATTENTION_OPS)
    t = d.efficiency_model.pass_time_s(costs, shard, d)
    if d.allreduce:
        tokens = np.asarray(batch, dtype=float) * np.asarray(prompt_len, dtype=float)  # no int64 wrap-around
        t = t + communication_time_s(model, tokens, d)
    if d.step_overhead is not None:
        t = t + d.step_overhead.time_s(batch)
    return t if np.ndim(t) else float(t)


ttft_s = prefill_time_s


@enters(model=ModelConfig)
@context_flag
def decode_step_time_s(model, deployment, context_len, batch=1, precision: Precision | None = None):
    """Time of one decode step producing `batch` tokens, each attending over `context_len` positions,
    on `deployment` (a Deployment; an Accelerator means Deployment(accelerator, precision or BF16)).
    At small batch this is ~ (weight bytes + batch * KV bytes) / bandwidth. Tensor parallelism adds
    2*L all-reduces, each with the deployment's allreduce_latency_s (default: the accelerator's; 0 is the book's
    idealisation). A deployment's step_overhead adds its CPU time for `batch` sequences."""
    d = as_deployment(deployment, precision)
    shard = tp_shard(model, d.tp)
    costs = decode_costs(shard, batch, context_len, d.precision)
    t = d.efficiency_model.pass_time_s(costs, shard, d)
    if d.allreduce:
        t = t + communication_time_s(model, batch, d)
    if d.step_overhead is not None:
        t = t + d.step_overhead.time_s(batch)
    return t if np.ndim(t) else float(t)


itl_s = decode_step_time_s


@enters(model=ModelConfig)
@context_flag
def extend_time_s(model, deployment, new_tokens, cached_tokens, batch=1, precision: Precision | None = None):
    """Time of one pass that adds `new_tokens` to each of `batch` sequences whose first `cached_tokens`
    are already in the KV cache: a prompt after a cached prefix (prompt caching), or one chunk of a
    chunked prefill. cached_tokens=0 is a prefill (`prefill_time_s`); new_tokens=1 after S - 1 cached
    is a decode step at context S (`decode_step_time_s`). All-reduces and step overhead as there."""
    d = as_deployment(deployment, precision)
    positive_int("new_tokens", new_tokens)
    nonneg_int("cached_tokens", cached_tokens)
    shard = tp_shard(model, d.tp)
    costs = forward_costs(shard, batch, new_tokens, cached_tokens, d.precision)
    t = d.efficiency_model.pass_time_s(costs, shard, d)
    if d.allreduce:
        t = t + communication_time_s(model, np.asarray(batch, dtype=float) * np.asarray(new_tokens, dtype=float), d)
    if d.step_overhead is not None:
        t = t + d.step_overhead.time_s(batch)
    return t if np.ndim(t) else float(t)


@enters(model=ModelConfig)
@context_flag
def chunked_prefill_time_s(model, deployment, prompt_len: int, chunk_len: int, precision: Precision | None = None):
    """Time of one prompt prefilled alone in ceil(S/C) passes of `chunk_len` tokens (chunked prefill
    with no other request sharing the steps): each pass re-reads the weights and the cache of the
    chunks before it, so it is never shorter than `prefill_time_s` (equal when C >= S). The same
    FLOPs, more bytes (`costs.chunked_prefill_costs`); all-reduces and step overhead once per chunk."""
    d = as_deployment(deployment, precision)
    shard = tp_shard(model, d.tp)
    chunked = chunked_prefill_costs(shard, prompt_len, chunk_len, 1, d.precision)
    t = np.asarray(d.efficiency_model.pass_time_s(chunked.chunks, shard, d), dtype=float)
    if d.allreduce:
        t = t + communication_time_s(model, chunked.q_len, d)
    if d.step_overhead is not None:
        t = t + d.step_overhead.time_s(1)
    return float(np.sum(t) if t.ndim else t * chunked.n_chunks)


@enters(model=ModelConfig)
@context_flag
def throughput_tokens_per_s(model, deployment, context_len, batch=1, precision: Precision | None = None):
    """Decode throughput of one model instance: batch / decode step time (tokens/s), on `deployment`
    (a Deployment, or an Accelerator as in decode_step_time_s)."""
    d = as_deployment(deployment, precision)
    t = decode_step_time_s(model, d, context_len, batch)
    out = np.asarray(batch, dtype=float) / t
    return out if out.ndim else float(out)


@enters(model=ModelConfig, precision=Precision)
@context_flag
def kv_crossover_batch(model, context_len, precision: Precision = BF16, tp: int = 1):
    """B*: the batch at which the KV cache a decode step reads equals the weights it reads,
    W(B*) = B* C_kv. Dense: W is fixed, so B* = weight bytes / KV bytes per sequence. Mixture of
    experts: W(B) grows with the distinct experts the batch touches (`memory.weight_bytes_read`,
    uniform routing), W(B)/B falls strictly, so B* is the one root, found by bisection. In both the
    memory-bound throughput B BW / (W(B) + B C_kv) is half its ceiling BW / C_kv at B*. Below B*
    throughput grows almost linearly with B (dense); above, it saturates."""
    positive_int("context_len", context_len)
    c_kv = np.asarray(kv_cache_bytes(model, context_len, 1, precision, tp), dtype=float)
    w_all = weight_bytes(model, precision, tp)
    if not model.is_moe:
        out = w_all / c_kv
        return out if out.ndim else float(out)
    # W(B) <= W_all, so the root lies in (0, W_all / C_kv]; W(B)/B - C_kv falls strictly in B.
    lo, hi = np.zeros_like(c_kv), w_all / c_kv
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        above = weight_bytes_read(model, mid, precision, tp) > mid * c_kv
        lo, hi = np.where(above, mid, lo), np.where(above, hi, mid)
        if np.all(hi - lo <= 1e-9 * hi):
            break
    out = 0.5 * (lo + hi)
    return out if out.ndim else float(out)


@enters(precision=Precision, model=ModelConfig, accelerator=Accelerator)
def weight_read_floor_s(model, accelerator, precision: Precision = BF16, tokens=None):
    """The time to read the weights once at full bandwidth, M / BW: the floor under a decode step and
    under a short prompt. `tokens` given (a prompt's B x S, or an array of them): a mixture of experts
    reads only the experts those tokens touch (`memory.weight_bytes_read`); None: every weight."""
    nbytes = weight_bytes(model, precision) if tokens is None else weight_bytes_read(model, tokens, precision)
    return memory_time_s(nbytes, accelerator)


@enters(precision=Precision, model=ModelConfig, accelerator=Accelerator)
def throughput_ceiling_tokens_per_s(model, accelerator, context_len, precision: Precision = BF16):
    """The decode throughput no batch passes when every step reads each sequence's KV cache:
    BW / C_kv, with C_kv one sequence's cache at `context_len` (the weights' read shared by the batch)."""
    model, acc = model, accelerator
    positive_int("context_len", context_len)
    return acc.hbm_bytes_per_s / kv_cache_bytes(model, context_len, 1, precision)


@dataclass(frozen=True)
class TTFTCurve:
    """TTFT (one prefill pass) against prompt length, three ways: the full per-operator count
    (`with_attention_s`), the same without attention's quadratic products (`without_attention_s`),
    and the chapter's rule 2 P S B / (mfu peak) (`rule_s`, `ttft_rule_s`)."""

    prompt_lens: np.ndarray
    with_attention_s: np.ndarray
    without_attention_s: np.ndarray
    rule_s: np.ndarray


@enters(model=ModelConfig)
@context_flag
def ttft_curve(model, deployment, prompt_lens, batch=1, precision: Precision | None = None) -> TTFTCurve:
    """`TTFTCurve` of `batch` prompts at each length of `prompt_lens` on `deployment` (a Deployment; an
    Accelerator means Deployment(accelerator, precision or BF16)): the one TTFT curve that the
    figures, the widget panels and the interactive grids draw."""
    d = as_deployment(deployment, precision)
    positive_int("prompt_lens", prompt_lens)
    positive_int("batch", batch)
    lens = np.asarray(prompt_lens, dtype=np.int64)
    full = np.asarray(prefill_time_s(model, d, lens, batch), dtype=float)
    linear = np.asarray(prefill_time_s(model, d, lens, batch, include_attention=False), dtype=float)
    rule = np.asarray(ttft_rule_s(model.n_matmul_params, lens, d.accelerator,
                                  d.precision.compute_dtype, batch, mfu=d.mfu), dtype=float)
    return TTFTCurve(lens, full, linear, rule)


@dataclass(frozen=True)
class ThroughputShape:
    """What the throughput curve of one scenario does, read off the computed curve (never assumed):
    whether it is concave over batches 1..up_to, the throughput at B* and its share of the ceiling
    BW / C_kv, and, for a mixture of experts, the batch that touches 95 % of the experts."""

    concave: bool
    b_star: float
    tokens_per_s_at_b_star: float
    ceiling_tokens_per_s: float
    experts_filled_batch: float | None

    @property
    def share_at_b_star(self) -> float:
        return self.tokens_per_s_at_b_star / self.ceiling_tokens_per_s

    @property
    def half_at_b_star(self) -> bool:
        """The memory-bound model's "half the ceiling at B*", within 2 points."""
        return abs(self.share_at_b_star - 0.5) < 0.02


@enters(precision=Precision, model=ModelConfig, accelerator=Accelerator)
@context_flag
def throughput_shape(model, accelerator, context_len, precision: Precision = BF16,
                     up_to: int | None = None) -> ThroughputShape:
    """`ThroughputShape` on an even grid of batches from 1 to `up_to` (default: max(2 B_max, 4 B*, 8),
    the range the throughput figure draws). A dense model's curve is concave (the step time is a sum
    of maxima of affine functions of B); a mixture of experts' is not where each added sequence
    brings in experts no other uses."""
    model, acc = model, accelerator
    positive_int("context_len", context_len)
    bstar = kv_crossover_batch(model, context_len, precision)
    if up_to is None:
        up_to = int(max(2 * fit_limit(model, acc, context_len, precision), 4 * bstar, 8))
    positive_int("up_to", up_to)
    grid = np.unique(np.linspace(1, max(up_to, 3), 400).round().astype(np.int64))
    tput = throughput_tokens_per_s(model, acc, context_len, grid, precision)
    slopes = np.diff(tput) / np.diff(grid)
    concave = bool(np.all(np.diff(slopes) <= 1e-9 * np.max(np.abs(slopes))))
    # B* is fractional: the throughput there, from the two whole batches around it
    lo = max(int(np.floor(bstar)), 1)
    t_lo, t_hi = throughput_tokens_per_s(model, acc, context_len, np.array([lo, lo + 1]), precision)
    ceiling = throughput_ceiling_tokens_per_s(model, acc, context_len, precision)
    return ThroughputShape(concave, bstar, float(t_lo + (bstar - lo) * (t_hi - t_lo)), float(ceiling),
                           experts_filled_batch(model))


def cost_per_1k_tokens_usd(tokens_per_s, usd_per_gpu_hour: float, n_gpus: int = 1):
    """Dollars per 1000 generated tokens: n_gpus * $/GPU-hour / 3600 / (tokens/s) * 1000."""
    positive_float("tokens_per_s", tokens_per_s)
    positive_float("usd_per_gpu_hour", usd_per_gpu_hour)
    positive_int("n_gpus", n_gpus)
    with np.errstate(over="ignore"):  # an overflow is reported by name just below
        out = n_gpus * usd_per_gpu_hour / 3600.0 / np.asarray(tokens_per_s, dtype=float) * 1000.0
    finite_result("cost_per_1k_tokens_usd", out, tokens_per_s=tokens_per_s, usd_per_gpu_hour=usd_per_gpu_hour)
    return out if out.ndim else float(out)


# The chapter's closed forms -----------------------------------------------------------------------

def prefill_flops_rule(n_params, tokens, flops_per_param_token: float = 2.0):
    """FLOPs of a forward pass ~ 2 * P * tokens (one multiply-add per parameter per token).
    6 * P * tokens is the training rule (forward + backward), not an inference one."""
    positive_float("n_params", n_params)
    positive_int("tokens", tokens)
    positive_float("flops_per_param_token", flops_per_param_token)
    with np.errstate(over="ignore"):  # an overflow is reported by name just below
        out = flops_per_param_token * np.asarray(n_params, dtype=float) * np.asarray(tokens, dtype=float)
    return finite_result("prefill_flops_rule", out, n_params=n_params, tokens=tokens,
                         flops_per_param_token=flops_per_param_token)


@enters(accelerator=Accelerator)
def ttft_rule_s(n_params, prompt_len, accelerator, dtype: str = "bf16", batch=1, mfu: float = 1.0,
                flops_per_param_token: float = 2.0):
    """TTFT ~ 2 * P * B * S / (mfu * peak): compute-bound prefill, attention's S^2 term ignored."""
    fraction("mfu", mfu)
    positive_int("prompt_len", prompt_len)
    positive_int("batch", batch)
    acc = accelerator
    flops = prefill_flops_rule(n_params, np.asarray(batch, dtype=float) * np.asarray(prompt_len, dtype=float),
                               flops_per_param_token)
    out = finite_result("ttft_rule_s", flops / (mfu * acc.peak(dtype)), n_params=n_params, mfu=mfu)
    return out if np.ndim(out) else float(out)


@enters(accelerator=Accelerator)
def decode_step_rule_s(weight_bytes_total, kv_bytes_per_seq, batch, accelerator, mbu: float = 1.0):
    """step time ~ (M_weights + B * C_kv) / BW: every weight and every cached K/V read once per step."""
    fraction("mbu", mbu)
    positive_float("weight_bytes_total", weight_bytes_total)
    positive_float("kv_bytes_per_seq", kv_bytes_per_seq, allow_zero=True)
    positive_int("batch", batch)
    acc = accelerator
    out = (weight_bytes_total + np.asarray(batch, dtype=float) * kv_bytes_per_seq) / (mbu * acc.hbm_bytes_per_s)
    finite_result("decode_step_rule_s", out, weight_bytes_total=weight_bytes_total,
                  kv_bytes_per_seq=kv_bytes_per_seq, batch=batch)
    return out if np.ndim(out) else float(out)

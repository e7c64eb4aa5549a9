"""The functions a claim names: each returns one quantity in the unit the book prints it in.

Two kinds, kept apart:
- `QUANTITIES`: the library's full model (exact operator counts, per-operator roofline, the real
  architecture). What the registry calls "ours".
- `METHODS`: how the book got its number, from its own formula and rounded inputs. Each is either
  a *simplification* the book states (the 2·P·S rule, weights-only bytes, ...), which can make a
  claim an approximation, or plain *arithmetic* as printed (6·P·S for a forward pass, 64 KV heads
  for Llama-2 70B, ...), which cannot: a claim that only its arithmetic reproduces is an erratum.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from inferlab.core.costs import chunked_prefill_costs, decode_costs, linear_cost, prefill_costs
from inferlab.core.latency import decode_step_time_s, kv_crossover_batch, prefill_time_s
from inferlab.core.memory import kv_cache_bytes, max_batch, weight_bytes
from inferlab.core.roofline import attainable_flops_per_s, ridge_point
from inferlab.core.specs import Precision, get_accelerator, get_model, model_variant  # noqa: F401 (model_variant: re-exported)
from inferlab.base.units import GB, GiB, bytes_per_element

QUANTITIES: dict[str, Callable] = {}
METHODS: dict[str, "BookMethod"] = {}


@dataclass(frozen=True)
class BookMethod:
    """A way the book computes a number. `simplification` is the book's own statement of what it
    leaves out (None for plain arithmetic, which never excuses a wrong number)."""

    function: Callable
    simplification: str | None
    summary: str


def _summary(fn: Callable) -> str:
    """The first paragraph of the docstring, on one line: how ERRATA.md names the method."""
    return " ".join((fn.__doc__ or fn.__name__).strip().split("\n\n")[0].split())


def quantity(fn: Callable) -> Callable:
    QUANTITIES[fn.__name__] = fn
    return fn


def simplification(statement: str):
    """Register a book method that applies a simplification the book itself states."""
    def register(fn: Callable) -> Callable:
        METHODS[fn.__name__] = BookMethod(fn, statement, _summary(fn))
        return fn
    return register


def arithmetic(fn: Callable) -> Callable:
    """Register a book method that is the book's arithmetic as printed, with no stated simplification."""
    METHODS[fn.__name__] = BookMethod(fn, None, _summary(fn))
    return fn


def _precision(weights="bf16", kv="bf16") -> Precision:
    return Precision(weights=weights, kv=kv)


# ---------------------------------------------------------------------------------------------
# Quantities: the library's full model
# ---------------------------------------------------------------------------------------------

@quantity
def n_params_billion(model):
    """Exact parameter count, in billions."""
    model = get_model(model)
    return model.n_params / 1e9


@quantity
def matmul_params_billion(model):
    """Parameters that take part in a matrix product (ModelConfig.n_matmul_params), in billions."""
    model = get_model(model)
    return model.n_matmul_params / 1e9


@quantity
def config_value(model, field):
    """One field of the architecture (d_model, d_ff, n_layers, n_heads, n_kv_heads, head_dim)."""
    model = get_model(model)
    return float(getattr(model, field))


@quantity
def mlp_equivalent_width(model):
    """Width f of a two-matrix MLP with the same parameters: (matrices x d x d_ff) / (2 d)."""
    m = model = get_model(model)
    return m.mlp_params_per_layer / (2.0 * m.d_model)


@quantity
def element_bytes(dtype):
    """Bytes per stored element of a number format."""
    return bytes_per_element(dtype)


@quantity
def peak_tflops(accelerator, dtype="bf16"):
    """Dense peak of the matrix units, TFLOP/s."""
    accelerator = get_accelerator(accelerator)
    return accelerator.peak(dtype) / 1e12


@quantity
def hbm_tb_per_s(accelerator):
    """HBM bandwidth, TB/s (1e12 bytes/s)."""
    accelerator = get_accelerator(accelerator)
    return accelerator.hbm_bytes_per_s / 1e12


@quantity
def memory_gb(accelerator):
    """HBM capacity, GB (1e9 bytes)."""
    accelerator = get_accelerator(accelerator)
    return accelerator.memory_bytes / GB


@quantity
def ridge_flops_per_byte(accelerator, dtype="bf16"):
    """Roofline ridge point: peak / bandwidth."""
    accelerator = get_accelerator(accelerator)
    return ridge_point(accelerator, dtype)


@quantity
def compute_used_pct(accelerator, intensity, dtype="bf16"):
    """Share of peak FLOP/s a kernel of this intensity can reach under the roofline, %."""
    accelerator = get_accelerator(accelerator)
    acc = accelerator
    return 100.0 * float(attainable_flops_per_s(intensity, acc, dtype)) / acc.peak(dtype)


@quantity
def ridge_over_intensity(accelerator, intensity, dtype="bf16"):
    """How many times below the ridge point a kernel of this intensity sits."""
    accelerator = get_accelerator(accelerator)
    return ridge_point(accelerator, dtype) / intensity


@quantity
def weight_gb(model, weights="bf16", tp=1):
    """Bytes of all weights on one of `tp` devices, GB."""
    model = get_model(model)
    return weight_bytes(model, _precision(weights), tp) / GB


@quantity
def kv_gb(model, seq_len, batch=1, kv="bf16", tp=1, n_kv_heads=None):
    """KV cache of `batch` sequences of `seq_len` tokens on one of `tp` devices, GB."""
    model = get_model(model)
    return kv_cache_bytes(model_variant(model, n_kv_heads), seq_len, batch, _precision(kv=kv), tp) / GB


@quantity
def kv_ratio(model, seq_len, n_kv_heads, base_n_kv_heads):
    """KV cache with base_n_kv_heads over KV cache with n_kv_heads (the shrink factor of GQA)."""
    model = get_model(model)
    return kv_gb(model, seq_len, n_kv_heads=base_n_kv_heads) / kv_gb(model, seq_len, n_kv_heads=n_kv_heads)


@quantity
def memory_per_device_gb(model, seq_len, batch, tp=1, kv="bf16", n_kv_heads=None):
    """Weights + KV cache on one of `tp` devices (nothing reserved), GB."""
    model = get_model(model)
    m = model_variant(model, n_kv_heads)
    return (weight_bytes(m, _precision(), tp)
            + kv_cache_bytes(m, seq_len, batch, _precision(kv=kv), tp)) / GB


def _capacity_bytes(accelerator, capacity_gib=None) -> float:
    """The accelerator's memory, or `capacity_gib` binary gigabytes (2**30 bytes) when given."""
    accelerator = get_accelerator(accelerator)
    return accelerator.memory_bytes if capacity_gib is None else capacity_gib * GiB


@quantity
def free_for_kv_gb(model, accelerator, tp=1):
    """Memory left for the KV cache beside the weights, GB."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    return (accelerator.memory_bytes - weight_bytes(model, _precision(), tp)) / GB


@quantity
def memory_headroom_gb(model, accelerator, seq_len, batch, tp=1, capacity_gib=None):
    """Capacity minus weights minus KV cache on one of `tp` devices, GB (negative: does not fit)."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    return _capacity_bytes(accelerator, capacity_gib) / GB - memory_per_device_gb(model, seq_len, batch, tp)


@quantity
def free_gb_with_capacity(model, accelerator, seq_len, batch, tp=1, capacity="datasheet"):
    """Capacity - weights - KV cache per device, GB, at the datasheet's or the reported capacity
    (memory_headroom.headroom_fit: the same computation the 15.2.2 notebook's prose renders)."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    from inferlab.core.memory_headroom import headroom_fit
    return headroom_fit(model, accelerator, batch, seq_len, _precision(), tp).free_bytes(capacity) / GB


@quantity
def max_batch_at_utilisation(model, accelerator, seq_len, tp=1, utilisation=0.9, capacity="reported"):
    """Largest batch in utilisation x capacity beside the weights (vLLM's gpu_memory_utilization)."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    from inferlab.core.memory_headroom import headroom_fit
    return float(headroom_fit(model, accelerator, 1, seq_len, _precision(), tp)
                 .max_batch_at_utilisation(utilisation, capacity))


@quantity
def batch_capacity(model, accelerator, seq_len, kv="bf16", tp=1, n_kv_heads=None, capacity_gib=None):
    """(capacity - weights) / KV per sequence: the batch bound before rounding down."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    m = model_variant(model, n_kv_heads)
    free = _capacity_bytes(accelerator, capacity_gib) - weight_bytes(m, _precision(), tp)
    return free / kv_cache_bytes(m, seq_len, 1, _precision(kv=kv), tp)


@quantity
def max_batch_that_fits(model, accelerator, seq_len, kv="bf16", tp=1, n_kv_heads=None):
    """Largest whole batch whose weights + KV cache fit (memory.max_batch)."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    return float(max_batch(model_variant(model, n_kv_heads), accelerator, seq_len, _precision(kv=kv), tp))


@quantity
def max_batch_ratio(model, accelerator, seq_len, n_kv_heads, base_n_kv_heads):
    """Max batch with n_kv_heads over max batch with base_n_kv_heads."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    return (max_batch_that_fits(model, accelerator, seq_len, n_kv_heads=n_kv_heads)
            / max_batch_that_fits(model, accelerator, seq_len, n_kv_heads=base_n_kv_heads))


@quantity
def crossover_batch(model, context_len, n_kv_heads=None):
    """B* = weight bytes / KV bytes per sequence (latency.kv_crossover_batch)."""
    model = get_model(model)
    return kv_crossover_batch(model_variant(model, n_kv_heads), context_len)


@quantity
def crossover_ratio(model, context_len, n_kv_heads, base_n_kv_heads):
    """B* with n_kv_heads over B* with base_n_kv_heads."""
    model = get_model(model)
    return crossover_batch(model, context_len, n_kv_heads) / crossover_batch(model, context_len, base_n_kv_heads)


@quantity
def decode_step_ms(model, accelerator, context_len, batch=1, weights="bf16", kv="bf16", n_kv_heads=None):
    """One decode step (= ITL) under the per-operator roofline, ms."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    return 1e3 * decode_step_time_s(model_variant(model, n_kv_heads), accelerator, context_len, batch,
                                    _precision(weights, kv))


@quantity
def decode_step_s(model, accelerator, context_len, batch=1, weights="bf16", kv="bf16"):
    """One decode step, s."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    return decode_step_ms(model, accelerator, context_len, batch, weights, kv) / 1e3


@quantity
def decode_tokens_per_s(model, accelerator, context_len, batch=1, weights="bf16", kv="bf16", n_kv_heads=None):
    """Decode throughput of one instance: batch / step time, tokens/s."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    return batch / (decode_step_ms(model, accelerator, context_len, batch, weights, kv, n_kv_heads) / 1e3)


@quantity
def decode_step_ratio(model, accelerator, context_len, batch, base_batch=1):
    """Step time at `batch` over step time at `base_batch`."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    return (decode_step_ms(model, accelerator, context_len, batch)
            / decode_step_ms(model, accelerator, context_len, base_batch))


@quantity
def throughput_ratio(model, accelerator, context_len, batch, base_batch=1, n_kv_heads=None,
                     base_n_kv_heads=None):
    """Throughput at (batch, n_kv_heads) over throughput at (base_batch, base_n_kv_heads)."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    return (decode_tokens_per_s(model, accelerator, context_len, batch, n_kv_heads=n_kv_heads)
            / decode_tokens_per_s(model, accelerator, context_len, base_batch, n_kv_heads=base_n_kv_heads))


@quantity
def throughput_ratio_at_capacity(model, accelerator, context_len, n_kv_heads, base_n_kv_heads):
    """Throughput at the largest batch that fits with n_kv_heads over the same with base_n_kv_heads."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    b = max_batch_that_fits(model, accelerator, context_len, n_kv_heads=n_kv_heads)
    b0 = max_batch_that_fits(model, accelerator, context_len, n_kv_heads=base_n_kv_heads)
    return throughput_ratio(model, accelerator, context_len, int(b), int(b0), n_kv_heads, base_n_kv_heads)


@quantity
def best_doubling_gain(model, accelerator, context_len):
    """Largest throughput(2B) / throughput(B) over every B below the KV crossover B*. Above 2 would
    be superlinear; (M + B C)/(M + 2B C) < 1 keeps it below 2 for every B."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    b = np.arange(1, int(crossover_batch(model, context_len)) + 1)
    t1 = b / decode_step_time_s(model, accelerator, context_len, b)
    t2 = 2 * b / decode_step_time_s(model, accelerator, context_len, 2 * b)
    return float(np.max(t2 / t1))


@quantity
def itl_share_pct(model, accelerator, context_len, weights, batch=1):
    """ITL with weights in `weights` dtype over ITL in bf16 (KV cache stays bf16), %."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    return 100.0 * (decode_step_ms(model, accelerator, context_len, batch, weights)
                    / decode_step_ms(model, accelerator, context_len, batch))


@quantity
def decode_compute_used_pct(model, accelerator, context_len, batch=1):
    """FLOPs of one decode step over (step time x peak): the MFU a memory-bound step reaches, %."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    flops = float(decode_costs(model, batch, context_len).total.flops)
    step_s = decode_step_ms(model, accelerator, context_len, batch) / 1e3
    return 100.0 * flops / (step_s * accelerator.peak("bf16"))


@quantity
def decode_batch_for_compute_pct(model, accelerator, context_len, target_pct):
    """Smallest decode batch whose step uses at least target_pct % of peak FLOP/s."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    b = np.arange(1, 1025)
    flops = np.asarray(decode_costs(model, b, context_len).total.flops)
    used = 100.0 * flops / (decode_step_time_s(model, accelerator, context_len, b)
                            * accelerator.peak("bf16"))
    return float(b[np.argmax(used >= target_pct)]) if np.any(used >= target_pct) else float("nan")


@quantity
def prefill_ms(model, accelerator, prompt_len, batch=1):
    """One prefill pass (= TTFT without queueing) under the per-operator roofline, ms."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    return 1e3 * prefill_time_s(model, accelerator, prompt_len, batch)


@quantity
def prefill_2ps_ms(model, accelerator, prompt_len, batch=1):
    """2·P·B·S / peak with P = the model's matrix parameters (ModelConfig.n_matmul_params) and the
    accelerator's dense bf16 peak, ms: the linear rule as the 15.1.1 notebook computes it."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    m, a = model, accelerator
    return 1e3 * 2 * m.n_matmul_params * batch * prompt_len / a.peak("bf16")


@quantity
def prefill_s(model, accelerator, prompt_len, batch=1):
    """One prefill pass, s."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    return prefill_time_s(model, accelerator, prompt_len, batch)


@quantity
def prefill_flops(model, prompt_len, batch=1):
    """Matrix-product FLOPs of one prefill pass (causal attention, logits for the last token)."""
    model = get_model(model)
    return float(prefill_costs(model, batch, prompt_len).total.flops)


@quantity
def prefill_ratio(model, accelerator, prompt_len, factor):
    """TTFT at factor x prompt_len over TTFT at prompt_len."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    return prefill_ms(model, accelerator, int(factor * prompt_len)) / prefill_ms(model, accelerator, prompt_len)


@quantity
def prefill_extra_ms(model, accelerator, prompt_len, extra_tokens):
    """TTFT added by `extra_tokens` more prompt tokens, starting from prompt_len, ms."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    return prefill_ms(model, accelerator, prompt_len + extra_tokens) - prefill_ms(model, accelerator, prompt_len)


@quantity
def prefill_prompts_within(model, accelerator, prompt_len, budget_ms):
    """Largest number of prompts one prefill pass can take and still finish within budget_ms."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    b = np.arange(1, 65)
    ok = 1e3 * prefill_time_s(model, accelerator, prompt_len, b) <= budget_ms
    return float(b[ok].max()) if ok.any() else 0.0


@quantity
def prefill_mlp_intensity(model, prompt_len, batch=1):
    """FLOPs per byte of the MLP matrices in prefill, weights and activations counted."""
    model = get_model(model)
    return float(prefill_costs(model, batch, prompt_len).mlp.intensity)


@quantity
def prefill_attention_intensity(model, prompt_len, causal=True):
    """FLOPs per byte of QK^T and PV in prefill (Q, K, V read, O written once)."""
    model = get_model(model)
    return float(prefill_costs(model, 1, prompt_len, causal=causal).attention.intensity)


@quantity
def decode_mlp_intensity(model, context_len, batch=1):
    """FLOPs per byte of the MLP matrices in one decode step of `batch` sequences."""
    model = get_model(model)
    return float(decode_costs(model, batch, context_len).mlp.intensity)


@quantity
def decode_attention_intensity(model, context_len, batch=1):
    """FLOPs per byte of QK^T and PV in one decode step (the whole KV cache read)."""
    model = get_model(model)
    return float(decode_costs(model, batch, context_len).attention.intensity)


@quantity
def pass_cost(model, phase, tokens, group="total", what="flops", batch=1, causal=True, per_layer=False):
    """One number of a forward pass: phase "prefill" (tokens = prompt length) or "decode" (tokens =
    context length); group "total", "mlp" or "attention"; what "flops", "bytes", "weight_bytes",
    "activation_bytes", "kv_bytes" or "intensity"; per_layer divides by the number of layers."""
    model = get_model(model)
    if phase == "prefill":
        costs = prefill_costs(model, batch, tokens, causal=causal)
    elif phase == "decode":
        costs = decode_costs(model, batch, tokens)
    else:
        raise ValueError(f"phase must be 'prefill' or 'decode'; got {phase!r}")
    cost = getattr(costs, group)
    value = float(getattr(cost, what))
    return value / costs.n_layers if per_layer and what != "intensity" else value


@quantity
def matvec_intensity(d):
    """FLOPs per byte of y = W x for a d x d bf16 matrix and one vector."""
    return float(linear_cost(1, int(d), int(d)).intensity)


@quantity
def mlp_compute_bound_batch(model, accelerator, context_len):
    """Smallest decode batch at which the MLP matrices reach the ridge point."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    b = np.arange(1, 4097)
    reached = np.asarray(decode_costs(model, b, context_len).mlp.intensity) >= ridge_point(accelerator)
    return float(b[np.argmax(reached)])


@quantity
def decode_tokens_per_step(model, batch):
    """Tokens one decode step emits: one LM-head row per sequence, read off the operator count."""
    m = model = get_model(model)
    return float(decode_costs(m, batch, 1).head["lm_head"].flops / (2.0 * m.d_model * m.vocab_size))


@quantity
def cost_per_1k_usd(model, accelerator, context_len, batch, usd_per_gpu_hour):
    """Dollars per 1,000 generated tokens on one GPU."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    return usd_per_gpu_hour / 3600.0 / decode_tokens_per_s(model, accelerator, context_len, batch) * 1000.0


@quantity
def cost_ratio(model, accelerator, context_len, batch, base_batch):
    """Cost per token at `batch` over cost per token at `base_batch` (the GPU price cancels)."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    return (decode_tokens_per_s(model, accelerator, context_len, base_batch)
            / decode_tokens_per_s(model, accelerator, context_len, batch))


@quantity
def chunked_prefill_extra_flops_pct(model, prompt_len, chunk_len):
    """FLOPs of a chunked prefill over one-shot prefill, minus one, %. Each query-key pair is
    scored once either way, so this is zero (rounded to 1e-9 % against float summation noise)."""
    model = get_model(model)
    one_shot = float(prefill_costs(model, 1, prompt_len).total.flops)
    chunked = float(chunked_prefill_costs(model, prompt_len, chunk_len).total.flops)
    return round(100.0 * (chunked / one_shot - 1.0), 9)


@quantity
def chunked_prefill_extra_gb(model, prompt_len, chunk_len, kind="bytes"):
    """HBM traffic a chunked prefill adds to one-shot prefill, GB: kind "kv_bytes" (earlier chunks'
    KV cache re-read by every chunk, O(S²/C)), "weight_bytes" (weights re-read, O(S/C)), or
    "bytes" (all)."""
    model = get_model(model)
    one_shot = getattr(prefill_costs(model, 1, prompt_len).total, kind)
    chunked = getattr(chunked_prefill_costs(model, prompt_len, chunk_len).total, kind)
    return float(chunked - one_shot) / GB


# ---------------------------------------------------------------------------------------------
# Book methods: the book's own formulas with its own (rounded) inputs
# ---------------------------------------------------------------------------------------------

@simplification("15.1.1 gives Llama-2 13B an MLP of f = 4d with two matrices, the GPT layout, in "
                 "place of Llama-2's SwiGLU (three matrices of 13,824).")
def mlp_width_4d(d):
    """f = 4 d."""
    return 4.0 * d


@simplification("15.1.1: 'Intensity ≈ B·S' - the weight bytes only; the activation bytes, which "
                "grow with B·S, are left out.")
def intensity_tokens(batch, tokens):
    """Intensity ≈ B·S (weights-only bytes)."""
    return float(batch * tokens)


@simplification("15.1.1: S·T/(S+T) scores every query against every key; the causal mask, which a "
                "FlashAttention kernel uses to skip half the pairs, is ignored.")
def dense_attention_intensity(seq_len, kv_len):
    """S·T / (S + T), which is S/2 at T = S."""
    return seq_len * kv_len / (seq_len + kv_len)


@simplification("15.1.2: the MLP's decode intensity is ≈ B, the activation vectors' bytes being "
                "'the tiny contribution from the vector itself'; so it crosses the ridge at B = ridge.")
def crossover_at_ridge(peak_tflops, tb_per_s):
    """B = peak / bandwidth."""
    return peak_tflops / tb_per_s


@arithmetic
def flops_6ps(params, tokens):
    """6·P·S, the training (forward + backward) count, applied to a forward pass."""
    return 6.0 * params * tokens


@arithmetic
def time_6ps(params, tokens, peak_tflops, unit=1e-3):
    """6·P·S / peak.

    In `unit` seconds (1e-3 for ms)."""
    return 6.0 * params * tokens / (peak_tflops * 1e12) / unit


@simplification("15.2.1: 'TTFT scales as 2P·S/compute' - matrix FLOPs of the weights only; "
                "attention's S² term is left out.")
def time_2ps(params, tokens, peak_tflops, unit=1e-3, flops_per_param_token=2):
    """2·P·S / peak, the TTFT rule of 15.2.1.

    In `unit` seconds (1e-3 for ms)."""
    return flops_per_param_token * params * tokens / (peak_tflops * 1e12) / unit


@simplification("15.1.1 and 15.2.1: 'TTFT grows linearly with prompt length' - scale a known TTFT "
                "by the ratio of prompt lengths.")
def linear_scaling(value, from_tokens, to_tokens, unit=1.0):
    """A known TTFT scaled by the ratio of prompt lengths.

    value x to_tokens / from_tokens x unit (1e-3 turns ms into s)."""
    return value * to_tokens / from_tokens * unit


@simplification("15.1.2 and 15.2.1: step ≈ (M_weights + B·C_kv) / BW - weights and KV cache only, "
                "with the book's rounded M = 26 GB and C_kv.")
def step_ms_rule(weights_gb, kv_gb, batch, tb_per_s):
    """(M + B·C_kv) / BW, the book's step-time formula, in ms."""
    return (weights_gb + batch * kv_gb) / tb_per_s


@simplification("15.2.2: throughput = B·BW / (M_weights + B·C_kv) with the book's rounded inputs.")
def tokens_per_s_rule(weights_gb, kv_gb, batch, tb_per_s):
    """B·BW / (M + B·C_kv), the book's throughput formula."""
    return batch * tb_per_s * 1e3 / (weights_gb + batch * kv_gb)


@simplification("15.2.2: a throughput ratio read off the book's rounded figures.")
def ratio_of_figures(numerator, denominator):
    """numerator / denominator, both as the book prints them."""
    return numerator / denominator


@simplification("15.2.1: 'INT4 cuts it to ≈ 25% of bf16' - ITL taken as proportional to the "
                "weight bytes, the KV cache read left out.")
def weight_bytes_share_pct(weight_bytes_new, weight_bytes_old):
    """ITL share = weight bytes ratio, %."""
    return 100.0 * weight_bytes_new / weight_bytes_old


@arithmetic
def tokens_from_step(batch, step_ms):
    """B / step time, with the step time the book states."""
    return batch / (step_ms / 1e3)


@arithmetic
def kv_gb_formula(layers, kv_heads, head_dim, seq_len, batch, bytes_per_value):
    """2·L·N_kv·H·S·B·bytes, the book's KV expression evaluated as printed."""
    return 2.0 * layers * kv_heads * head_dim * seq_len * batch * bytes_per_value / GB


@arithmetic
def sum_of(terms):
    """The book's figures added up."""
    return float(sum(terms))


@arithmetic
def attention_qk_only(kv_len, head_dim):
    """FLOPs of QK^T alone (2·S·H per head) over the bytes of both K and V (2·2·S·H): 0.5."""
    return (2.0 * kv_len * head_dim) / (2.0 * 2.0 * kv_len * head_dim)


@arithmetic
def batch_capacity_ratio(capacity_gb, weights_gb, kv_gb_new, kv_gb_old):
    """Ratio of memory-limited batch sizes, (cap - M)/C_new over (cap - M)/C_old: a capacity
    ratio, not a throughput ratio."""
    free = capacity_gb - weights_gb
    return (free / kv_gb_new) / (free / kv_gb_old)


@arithmetic
def flops_2ps(params, tokens, flops_per_param_token=2):
    """2·P·S, the forward-pass rule the book uses in 15.2.1."""
    return flops_per_param_token * params * tokens


@arithmetic
def attention_flops_rule(tokens, layers, heads, head_dim):
    """Causal QK^T and PV over a prompt: 2 products x 2 FLOPs x S²/2 pairs x H x N x L."""
    return 2.0 * tokens ** 2 * head_dim * heads * layers


@arithmetic
def time_2ps_attention(params, tokens, layers, heads, head_dim, peak_tflops, unit=1.0):
    """2·P·S plus the causal attention FLOPs 2·L·N·H·S² of the book's own 15.1.1 count, over peak.

    In `unit` seconds."""
    flops = flops_2ps(params, tokens) + attention_flops_rule(tokens, layers, heads, head_dim)
    return flops / (peak_tflops * 1e12) / unit


@arithmetic
def throughput_rule_ratio(weights_gb, kv_gb, batch, base_kv_gb, base_batch, tb_per_s=3.35):
    """The book's throughput formula at one configuration over another, with its own figures."""
    return (tokens_per_s_rule(weights_gb, kv_gb, batch, tb_per_s)
            / tokens_per_s_rule(weights_gb, base_kv_gb, base_batch, tb_per_s))


@arithmetic
def attention_decode_rule(batch, layers, heads, kv_heads, head_dim, kv_len):
    """4·B·L·N·S·H FLOPs (QK^T and PV) over 4·B·L·N_kv·S·H bytes (K and V in bf16) = N/N_kv, the book's own derivation."""
    flops = 2 * 2.0 * batch * layers * heads * kv_len * head_dim
    bytes_ = 2 * 2.0 * batch * layers * kv_heads * kv_len * head_dim
    return flops / bytes_


@arithmetic
def chunked_extra_pairs_pct(prompt_len, chunk_len):
    """Query-key pairs a chunked causal prefill scores, over one-shot, minus one (%).

    Chunk i scores its C queries against the i·C cached keys plus its own causal block."""
    s, c = int(prompt_len), int(chunk_len)
    chunked = sum(min(c, s - p) * p + min(c, s - p) * (min(c, s - p) + 1) / 2 for p in range(0, s, c))
    return 100.0 * (chunked / (s * (s + 1) / 2) - 1.0)


@arithmetic
def doubling_gain_rule(weights_gb, kv_gb, batch):
    """2(M + B·C)/(M + 2B·C), the doubling gain of the book's throughput formula."""
    return 2.0 * (weights_gb + batch * kv_gb) / (weights_gb + 2 * batch * kv_gb)


@simplification("15.2.2: weights = 2 bytes x the nominal parameter count in the model's name.")
def weights_gb_rule(params, bytes_per_value):
    """P x bytes, GB."""
    return params * bytes_per_value / GB


@arithmetic
def per_gpu_rule(weights_gb, layers, kv_heads, head_dim, seq_len, batch, bytes_per_value, tp):
    """Weights per GPU plus the book's KV expression, as printed, split over the GPUs."""
    return weights_gb + kv_gb_formula(layers, kv_heads, head_dim, seq_len, batch, bytes_per_value) / tp


@arithmetic
def batch_from_budget(capacity_gb, weights_gb, layers, kv_heads, head_dim, seq_len, bytes_per_value, tp):
    """Free memory per GPU over the book's KV expression per sequence, rounded down."""
    per_seq = kv_gb_formula(layers, kv_heads, head_dim, seq_len, 1, bytes_per_value) / tp
    return float(np.floor((capacity_gb - weights_gb) / per_seq))


@arithmetic
def batch_from_figures(capacity_gb, weights_gb, kv_gb, batch):
    """floor((capacity - weights) / (kv_gb / batch)): the batch the book's own figures leave room for."""
    return float(np.floor((capacity_gb - weights_gb) / (kv_gb / batch)))

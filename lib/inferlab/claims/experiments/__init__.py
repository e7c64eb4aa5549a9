"""Experiments that check the chapter's statements (mechanisms, comparisons, advice).

Each experiment is a pure function of its keyword inputs that returns an Outcome: one Case per
scenario it tries (a prompt length, a batch, an accelerator, a load), each saying whether the
statement holds there and what was measured. `statements.verdict` turns the cases into a verdict
(all hold: consistent; none: erratum; some: depends). Analytic experiments call the library's
roofline, cost and memory functions; simulated ones run the serving simulator (inferlab.serving)
on small fixed-seed workloads, cached so that `inferlab verify` stays fast.

The experiments live by topic, one module each: `common` (Case, Outcome, defaults), `regimes`,
`scaling` (TTFT and ITL), `tensor_parallel`, `batching` (KV cache, memory, batching), `simulated`
(the serving simulator) and `sentences` (sentence-level claims). This package gathers them into
EXPERIMENTS, the registry `data/statements.toml` names them from.
"""
from __future__ import annotations

from inferlab.claims.experiments.common import ACC, Case, MODEL, Outcome
from inferlab.claims.experiments.regimes import (
    decode_attention_intensity, decode_mlp_intensity, decode_op_regimes, decode_regime, mlp_ridge_batch,
    one_pass_vs_sequential, phase_regimes, prefill_mlp_intensity, prefill_regime,
)
from inferlab.claims.experiments.scaling import (
    bandwidth_bound_decode, device_speedups, itl_rule, itl_vs_prompt, prefill_batching_gain, quantized_itl,
    quantized_ttft, ttft_batch_scaling, ttft_levers, ttft_scaling, ttft_vs_params,
)
from inferlab.claims.experiments.tensor_parallel import (
    tp_comm_dominates, tp_decode_vs_prefill, tp_kv_sharded, tp_speedup,
)
from inferlab.claims.experiments.batching import (
    batch_doubling, batch_tradeoff, batching_amortizes, chunked_prefill_flops, cost_levers,
    crossover_behaviour, crossover_stop, gqa_factor, kv_quant_batch, max_batch_formula, max_batch_levers,
    prefix_cache, quant_raises_bstar_and_maxb, recompute_vs_cache, replicas_vs_batch_latency,
    throughput_ceiling,
)
from inferlab.claims.experiments.simulated import (
    _long_prompt, _sim, batch_cap, chunked_long_prompt, continuous_vs_static, disaggregation_removes_stall,
    low_load_cost, priority_queues, replica_scaling, replicas_cut_tail, replicas_first, speculative_intensity,
    tail_latency_vs_qps, ttft_is_prefill,
)
from inferlab.claims.experiments.sentences import (
    GROWTH_QUANTITIES, chunked_cost_size, chunked_kv_memory, decode_intensity_within_batch, fits_on_device,
    flash_attention_gain, gqa_across, gqa_still_open, growth_order, itl_levers, tp_improves, tp_short_of_k,
    unfused_attention_regime, weight_reads_per_request, window_attention_intensity,
)

EXPERIMENTS = {f.__name__: f for f in (
    prefill_regime, decode_regime, phase_regimes, decode_attention_intensity, decode_mlp_intensity,
    mlp_ridge_batch, decode_op_regimes, prefill_mlp_intensity, one_pass_vs_sequential, ttft_scaling,
    ttft_batch_scaling, prefill_batching_gain, ttft_vs_params, ttft_levers, itl_vs_prompt, quantized_itl,
    quantized_ttft, itl_rule, bandwidth_bound_decode, device_speedups, tp_speedup, tp_decode_vs_prefill,
    tp_comm_dominates, tp_kv_sharded, recompute_vs_cache, batching_amortizes, batch_tradeoff,
    batch_doubling, crossover_behaviour, throughput_ceiling, crossover_stop, max_batch_formula, max_batch_levers,
    kv_quant_batch, gqa_factor, quant_raises_bstar_and_maxb, cost_levers, prefix_cache,
    chunked_prefill_flops, replicas_vs_batch_latency, tail_latency_vs_qps, replicas_cut_tail, batch_cap,
    replica_scaling, replicas_first, continuous_vs_static, low_load_cost, ttft_is_prefill,
    chunked_long_prompt, growth_order, tp_improves, chunked_kv_memory, weight_reads_per_request,
    unfused_attention_regime, flash_attention_gain, window_attention_intensity, itl_levers, tp_short_of_k,
    gqa_still_open, chunked_cost_size, decode_intensity_within_batch, fits_on_device,
    gqa_across, disaggregation_removes_stall, priority_queues, speculative_intensity)}
SIMULATED = {"tail_latency_vs_qps", "replicas_cut_tail", "batch_cap", "replica_scaling", "replicas_first",
             "continuous_vs_static", "low_load_cost", "ttft_is_prefill", "chunked_long_prompt",
             "chunked_cost_size", "disaggregation_removes_stall", "priority_queues"}


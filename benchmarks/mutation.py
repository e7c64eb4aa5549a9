"""Mutation testing with a hand list of mutants: does the fast test suite notice each bug?

Each mutant replaces one snippet inside one named function of a library module with a plausible wrong version (the kind
of slip a reviewer would miss: a factor dropped, a min for a max, a parameter ignored). For each,
the script copies lib/, data/ and tests/ into a scratch folder, applies the mutant there (the
working tree is never touched), runs the module's fast tests with `pytest -x`, and records killed
(a test failed) or survived. Mutants marked equivalent change no observable result; they are listed
and left out of the kill rate.

Every mutant must apply exactly once: its snippet must occur once in its function (white space between
tokens is ignored, so re-wrapping a line does not make it stale; renaming the function or changing a
token does). Before anything runs,
every chosen mutant is checked, and a run with a stale one (its snippet gone or repeated after an
edit) stops and names each, so a score always covers the whole list (`--list` marks them too, and
tests/test_mutation_list.py fails on them in the fast tier).

    .venv/bin/python benchmarks/mutation.py                 # every mutant
    .venv/bin/python benchmarks/mutation.py --module costs  # one module group (repeatable)
    .venv/bin/python benchmarks/mutation.py --list          # the mutants and whether each applies

Not part of `make test` (it reruns the tests once per mutant). The last measured scores, with the
command and the date: docs/development.md.
"""
from __future__ import annotations

import argparse
import ast
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Mutant:
    module: str        # key of TESTS
    path: str          # file under lib/inferlab/
    function: str      # qualified name of the function (or Class.method) holding it; "" for module level
    before: str        # snippet, matched with any white space between its tokens; must occur once there
    after: str
    what: str
    equivalent: str = ""  # why no test can notice it (then left out of the rate)


COMMON = ["tests/test_mutants.py", "tests/test_properties.py"]
TESTS = {
    "costs": ["tests/test_costs.py", "tests/test_roofline.py", *COMMON],
    "memory": ["tests/test_memory.py", "tests/test_parallel.py", *COMMON],
    "latency": ["tests/test_latency.py", "tests/test_parallel.py", "tests/test_moe_decode.py", *COMMON],
    "roofline": ["tests/test_roofline.py", "tests/test_bad_input.py", *COMMON],
    "parallel": ["tests/test_parallel.py", "tests/test_memory.py", *COMMON],
    "measure/efficiency": ["tests/test_mutants.py", "tests/test_measure_robust.py", "tests/test_measure.py"],
    "exercises/core": ["tests/test_mutants.py", "tests/test_exercises.py"],
    "specs": ["tests/test_costs.py", "tests/test_memory.py", *COMMON],
    "serving/engine": ["tests/test_serving_mutants.py", "tests/test_serving.py", "tests/test_serving_prefix.py",
                       "tests/test_serving_properties.py"],
    "serving/lab": ["tests/test_serving_mutants.py", "tests/test_serving_lab.py", "tests/test_serving_lab_fit.py"],
    "serving/study": ["tests/test_serving_mutants.py", "tests/test_serving_validate.py"],
    "serving/cli": ["tests/test_serving_mutants.py", "tests/test_cli_edges.py", "tests/test_serving_cli.py"],
    "attention": ["tests/test_attention.py", "tests/test_moe_decode.py", "tests/test_hf_config.py", *COMMON],
    "plots": ["tests/test_moe_figures.py", "tests/test_plots.py"],
    "serving/levers": ["tests/test_serving_speculative.py", "tests/test_serving_disaggregation.py",
                       "tests/test_serving_priority.py"],
}

def package(module: str) -> str:
    """The package a module group belongs to: 'core' for the top-level formulas, else its folder."""
    return module.split("/")[0] if "/" in module else "core"


M = Mutant
MUTANTS = [
    # costs ----------------------------------------------------------------------------------------
    M("costs", "core/costs.py", "linear_cost", "flops=2.0 * tokens * d_in * d_out", "flops=tokens * d_in * d_out",
      "linear FLOPs without the 2 per multiply-add"),
    M("costs", "core/costs.py", "linear_cost", "activation_bytes=tokens * (d_in + d_out) * ab)", "activation_bytes=tokens * d_in * ab)",
      "linear layer's output never written"),
    M("costs", "core/attention.py", "causal_pairs", "return q_len * past_len + q_len * (q_len + 1) / 2",
      "return q_len * past_len + q_len * q_len / 2", "causal pairs without the diagonal"),
    M("costs", "core/attention.py", "causal_pairs", "return q_len * past_len + q_len * (q_len + 1) / 2",
      "return q_len * (q_len + 1) / 2", "cached keys not scored"),
    M("costs", "core/attention.py", "layer_shape", "per_key = model.kv_dim * kvb", "per_key = model.q_dim * kvb",
      "KV read with n_heads instead of n_kv_heads"),
    M("costs", "core/attention.py", "layer_shape", "return LayerShape(2.0 * H * model.head_dim, 2.0 * H * model.head_dim,",
      "return LayerShape(2.0 * model.n_kv_heads * model.head_dim, 2.0 * model.n_kv_heads * model.head_dim,",
      "attention FLOPs per KV head, not per query head"),
    M("costs", "core/costs.py", "forward_costs", "logit_tokens = tokens if all_logits else b", "logit_tokens = tokens",
      "LM head applied to every prompt token"),
    M("costs", "core/costs.py", "forward_costs", "np.minimum(tokens, model.vocab_size) * d * bpw", "tokens * d * bpw",
      "embedding rows read once per token beyond the table size"),
    M("costs", "core/costs.py", "forward_costs", "        if model.gated_mlp:\n            mlp = {\"mlp_gate\"", "        if not model.gated_mlp:\n            mlp = {\"mlp_gate\"",
      "gate projection on the wrong models"),
    M("costs", "core/costs.py", "chunked_prefill_costs", "q = np.minimum(int(chunk_len), int(prompt_len) - past)", "q = np.full(n, int(chunk_len))",
      "last chunk padded to a full chunk"),
    M("costs", "core/costs.py", "Cost.intensity", "where=nbytes > 0)", "where=nbytes >= 0)", "0/0 intensity back (NaN)"),
    M("costs", "core/costs.py", "decode_costs", "past = np.asarray(context_len) - 1", "past = np.asarray(context_len)",
      "decode attends over one position too many"),
    # memory ---------------------------------------------------------------------------------------
    M("memory", "core/attention.py", "cache_bytes_per_token", "return 2.0 * model.n_layers * model.kv_dim", "return model.n_layers * model.kv_dim",
      "KV cache without the factor 2 for K and V"),
    M("memory", "core/memory.py", "weight_bytes", "shard = tp_shard(model, tp)\n    return stored_weight_bytes(shard",
      "shard = model\n    return stored_weight_bytes(shard", "weights not split by tp"),
    M("memory", "core/memory.py", "max_batch", "b = np.floor(free / np.asarray(per_seq))", "b = np.ceil(free / np.asarray(per_seq))",
      "max batch rounded up"),
    M("memory", "core/memory.py", "max_batch", "free = capacity - w - reserved_bytes", "free = capacity - w",
      "reserved memory ignored by max_batch"),
    M("memory", "core/memory.py", "MemoryBudget.fits", "return self.free_bytes >= 0", "return self.free_bytes > 0",
      "an exact fit reported as not fitting"),
    M("memory", "core/memory.py", "max_batch", "if not allow_zero and np.any(b < 1):", "if not allow_zero and np.all(b < 1):",
      "some contexts not fitting accepted in a sweep"),
    M("memory", "core/memory.py", "MemoryBudget.used_bytes", "return self.weight_bytes + self.kv_bytes + self.reserved_bytes",
      "return self.weight_bytes + self.kv_bytes", "reserved bytes missing from the budget"),
    # latency --------------------------------------------------------------------------------------
    M("latency", "core/latency.py", "kv_crossover_batch", "w_all = weight_bytes(model, precision, tp)", "w_all = weight_bytes(model, precision)",
      "kv_crossover_batch ignores tp (weights)"),
    M("latency", "core/latency.py", "kv_crossover_batch",
      "c_kv = np.asarray(kv_cache_bytes(model, context_len, 1, precision, tp), dtype=float)\n    w_all = weight_bytes(model, precision, tp)",
      "c_kv = np.asarray(kv_cache_bytes(model, context_len, 1, precision), dtype=float)\n    w_all = weight_bytes(model, precision)",
      "kv_crossover_batch ignores tp (both)"),
    M("latency", "core/latency.py", "kv_crossover_batch", "above = weight_bytes_read(model, mid, precision, tp) > mid * c_kv", "above = w_all > mid * c_kv",
      "a mixture of experts' B* from all its experts, whatever the batch touches"),
    M("latency", "core/latency.py", "throughput_tokens_per_s", "out = np.asarray(batch, dtype=float) / t", "out = 1.0 / t",
      "throughput per sequence, not per instance"),
    M("latency", "core/latency.py", "cost_per_1k_tokens_usd", "usd_per_gpu_hour / 3600.0 / np.asarray(tokens_per_s, dtype=float) * 1000.0",
      "usd_per_gpu_hour / 3600.0 / np.asarray(tokens_per_s, dtype=float) * 1e6", "cost per million, not per 1k"),
    M("latency", "core/latency.py", "cost_per_1k_tokens_usd", "out = n_gpus * usd_per_gpu_hour", "out = usd_per_gpu_hour",
      "cost of one GPU for a tp group"),
    M("latency", "core/latency.py", "decode_step_time_s", "t = t + communication_time_s(model, batch, d)", "t = t + 0 * communication_time_s(model, batch, d)",
      "decode all-reduces dropped"),
    M("latency", "core/latency.py", "prefill_time_s", "costs = costs.without(*ATTENTION_OPS)", "costs = costs",
      "include_attention=False ignored"),
    M("latency", "core/latency.py", "decode_step_time_s", "costs = decode_costs(shard, batch, context_len, d.precision)",
      "costs = decode_costs(model, batch, context_len, d.precision)", "decode not sharded under tp"),
    M("latency", "core/latency.py", "ttft_rule_s", "flops / (mfu * acc.peak(dtype)), n_params", "flops / acc.peak(dtype), n_params",
      "ttft_rule_s ignores mfu"),
    M("latency", "core/latency.py", "decode_step_rule_s", "(weight_bytes_total + np.asarray(batch, dtype=float) * kv_bytes_per_seq)",
      "(weight_bytes_total + kv_bytes_per_seq)", "decode rule reads one sequence's KV"),
    # roofline -------------------------------------------------------------------------------------
    M("roofline", "core/roofline.py", "ridge_point", "return acc.peak(dtype) / acc.hbm_bytes_per_s", "return acc.hbm_bytes_per_s / acc.peak(dtype)",
      "ridge point inverted"),
    M("roofline", "core/roofline.py", "attainable_flops_per_s", "out = np.minimum(mfu * acc.peak(dtype)", "out = np.maximum(mfu * acc.peak(dtype)",
      "attainable = max of the roofs"),
    M("roofline", "core/roofline.py", "bound", "np.where(np.asarray(intensity) >= ridge_point(accelerator, dtype), \"compute\", \"memory\")",
      "np.where(np.asarray(intensity) > ridge_point(accelerator, dtype), \"compute\", \"memory\")",
      "ridge point itself called memory-bound"),
    M("roofline", "core/roofline.py", "roofline_time_s", "memory_s = np.asarray(bytes_moved, dtype=float) / (mbu * acc.hbm_bytes_per_s)",
      "memory_s = np.asarray(bytes_moved, dtype=float) / acc.hbm_bytes_per_s", "mbu ignored"),
    M("roofline", "core/roofline.py", "roofline_time_s", "out = compute_s + memory_s if overlap == \"none\" else np.maximum(compute_s, memory_s)",
      "out = np.maximum(compute_s, memory_s)", "overlap='none' ignored"),
    M("roofline", "core/roofline.py", "pass_time_s", "        return sum(times)", "        return max(times)", "per-operator times not summed"),
    M("roofline", "core/roofline.py", "time_weighted_regime", "is_compute = np.asarray(c.flops / acc.peak(dtype)) >= np.asarray(c.bytes / acc.hbm_bytes_per_s)",
      "is_compute = np.asarray(c.flops / acc.peak(dtype)) < np.asarray(c.bytes / acc.hbm_bytes_per_s)",
      "time-weighted regime inverted"),
    M("roofline", "core/roofline.py", "time_weighted_regime", "out = np.where(compute_s >= memory_s, \"compute\", \"memory\")",
      "out = np.where(compute_s > memory_s, \"compute\", \"memory\")", "tie of the regimes' times",
      equivalent="compute and memory time of a pass are never exactly equal floats"),
    # parallel -------------------------------------------------------------------------------------
    M("parallel", "core/parallel.py", "check_tp", "if model.n_heads % tp or model.d_ff % tp:", "if model.n_heads % tp:",
      "check_tp no longer checks d_ff"),
    M("parallel", "core/parallel.py", "check_tp", "if model.n_heads % tp or model.d_ff % tp:", "if model.d_ff % tp:",
      "check_tp no longer checks n_heads"),
    M("parallel", "core/parallel.py", "tp_shard", "n_kv_heads=max(model.n_kv_heads // tp, 1)", "n_kv_heads=model.n_kv_heads // tp or 1",
      "KV heads replicated another way", equivalent="x // tp or 1 equals max(x // tp, 1) for x, tp >= 1"),
    M("parallel", "core/parallel.py", "tp_shard", "n_kv_heads=max(model.n_kv_heads // tp, 1)", "n_kv_heads=model.n_kv_heads",
      "KV heads not split"),
    M("parallel", "core/parallel.py", "tp_shard", "vocab_size=-(-model.vocab_size // tp)", "vocab_size=model.vocab_size",
      "vocabulary not split"),
    M("parallel", "core/parallel.py", "allreduce_time_s", "return 2 * (tp - 1) / tp * np.asarray", "return (tp - 1) / tp * np.asarray",
      "ring all-reduce without reduce-scatter + all-gather"),
    M("parallel", "core/parallel.py", "allreduce_time_s", "np.asarray(message_bytes, dtype=float) / bus + latency_s",
      "np.asarray(message_bytes, dtype=float) / bus", "all-reduce latency ignored"),
    M("parallel", "core/parallel.py", "", "DEFAULT_ALLREDUCE_LATENCY_S = 8e-6", "DEFAULT_ALLREDUCE_LATENCY_S = 0.0",
      "default latency back to the idealisation"),
    M("parallel", "core/parallel.py", "", "ALLREDUCES_PER_LAYER = 2", "ALLREDUCES_PER_LAYER = 1", "one all-reduce per layer"),
    M("parallel", "core/parallel.py", "tp_communication_time_s", "message = np.asarray(tokens, dtype=float) * model.d_model",
      "message = np.asarray(tokens, dtype=float) * model.d_ff", "all-reduce of d_ff-wide activations"),
    # specs ----------------------------------------------------------------------------------------
    M("specs", "core/specs.py", "ModelConfig.group_size", "return self.n_heads // self.n_kv_heads", "return self.n_kv_heads // self.n_heads",
      "group_size inverted"),
    M("specs", "core/specs.py", "ModelConfig.n_mlp_matrices", "return 3 if self.gated_mlp else 2", "return 3", "every MLP gated"),
    M("specs", "core/specs.py", "ModelConfig.embedding_params", "return self.vocab_size * self.d_model * (1 if self.tied_embeddings else 2)",
      "return self.vocab_size * self.d_model * 2", "tied embeddings counted twice"),
    # measure/efficiency ---------------------------------------------------------------------------
    M("measure/efficiency", "measure/ceilings.py", "robust_ceiling", "return float(statistics.median(_estimates(name, values)))",
      "return float(max(_estimates(name, values)))", "the highest estimate divides (MBU/MFU chase bursts)"),
    M("measure/efficiency", "measure/ceilings.py", "robust_ceiling", "return float(statistics.median(_estimates(name, values)))",
      "return float(min(_estimates(name, values)))", "the lowest estimate divides (MBU/MFU flattered)"),
    M("measure/efficiency", "measure/derived.py", "_repredict", "read = read_bytes_per_s or acc.hbm_bytes_per_s",
      "read = acc.hbm_bytes_per_s", "decode MBU against the copy, not the read stream"),
    M("measure/efficiency", "measure/drift.py", "drift_ratio", "    return probe_s / ref_s", "    return ref_s / probe_s",
      "drift ratio inverted (a slow host predicted faster)"),
    M("measure/efficiency", "measure/drift.py", "", "DRIFT_TOLERANCE = 0.25", "DRIFT_TOLERANCE = 0.15",
      "drift tolerance under the probe's idle noise (an idle host marked drifting)"),
    M("measure/efficiency", "measure/ceilings.py", "read_bandwidth", "if best is None or rates[name] > rates[best[0]]:",
      "if best is None or rates[name] < rates[best[0]]:", "the read stream takes the slowest kernel"),
    M("measure/efficiency", "measure/ceilings.py", "stream_buffer_bytes",
      "return float(min(max(STREAM_CACHE_MULTIPLE * cache_bytes, STREAM_MIN_BYTES), STREAM_FREE_SHARE * free_bytes))",
      "return float(min(max(cache_bytes, STREAM_MIN_BYTES), STREAM_FREE_SHARE * free_bytes))",
      "stream buffers the size of the cache (a cache flatters the ceiling)"),
    M("measure/efficiency", "measure/drift.py", "drift_summary", "    span = rs + [1.0]\n", "    span = rs\n",
      "drift ignores the profile's own moment"),
    M("measure/efficiency", "measure/derived.py", "finish", "pr[\"calibrated_s\"] = pr[\"calibrated_s\"] * m[\"drift\"][\"ratio\"]",
      "pr[\"calibrated_s\"] = pr[\"calibrated_s\"]", "drift probes recorded but not applied"),
    M("measure/efficiency", "measure/efficiency.py", "utilisation", "return amount / seconds / ceiling_around(before, after)",
      "return amount / seconds / before", "only the ceiling before the kernel"),
    M("measure/efficiency", "measure/ceilings.py", "copy_bytes_moved", "return 2.0 * buffer_bytes", "return 1.0 * buffer_bytes",
      "copy bandwidth counts reads only (MBU doubled)"),
    M("measure/efficiency", "measure/ceilings.py", "matmul_flops", "return 2.0 * n ** 3", "return n ** 3",
      "matmul FLOPs without the 2"),
    M("measure/efficiency", "measure/efficiency.py", "_measure", "if sum(r[\"clean\"] for r in rows) >= config.rounds:",
      "if len(rows) >= config.rounds:", "contended rounds counted as clean"),
    # serving/engine -------------------------------------------------------------------------------
    M("serving/engine", "serving/policies/base.py", "Policy.fits_alone", "<= total_blocks - watermark_blocks",
      "<= total_blocks", "a request that fits only inside the watermark accepted (blocks every later one)"),
    M("serving/engine", "serving/policies/base.py", "Policy.fits_alone", "blocks_for(prompt + output, block_tokens) <= total_blocks",
      "blocks_for(prompt + output, block_tokens) < total_blocks", "a request that exactly fits the pool rejected"),
    M("serving/engine", "serving/policies/base.py", "Policy.fits_alone", "blocks_for(prompt + output, block_tokens)",
      "blocks_for(prompt, block_tokens)", "rejection ignores the output's blocks"),
    M("serving/engine", "serving/engine.py", "Replica._admit", "            if self.free - need < self.watermark:\n",
      "            if self.free - need < 0:\n", "admission ignores the watermark"),
    M("serving/engine", "serving/policies/base.py", "Policy.enqueue", "(waiting.appendleft if front else waiting.append)(r)",
      "waiting.append(r)",
      "a preempted request goes to the back of the queue"),
    M("serving/engine", "serving/engine.py", "Replica._preempt", "        v.target = v.prompt + v.generated", "        v.target = v.prompt",
      "recompute forgets the generated tokens"),
    M("serving/engine", "serving/engine.py", "Replica._reserve_decode_blocks", "victim = max((*self.decoding.values(), *self.prefilling),",
      "victim = min((*self.decoding.values(), *self.prefilling),",
      "the oldest sequence preempted, not the latest admitted"),
    M("serving/engine", "serving/engine.py", "Replica._join_decoding", "r.end_d = self.d + (r.output - r.generated) - 1",
      "r.end_d = self.d + (r.output - r.generated)", "one decode step too many"),
    M("serving/engine", "serving/policies/chunked.py", "ChunkedPrefill.plan_step", "fill(state, self.token_budget - state.n_decoding,",
      "fill(state, self.token_budget,",
      "chunked budget not shared with the decodes"),
    M("serving/engine", "serving/policies/continuous.py", "ContinuousBatching.plan_step",
      "        if not preempted:\n            state.admit(self.max_batched_tokens, self.max_num_seqs)",
      "        if True:\n            state.admit(self.max_batched_tokens, self.max_num_seqs)", "continuous admits in a step that had to evict",
      equivalent="the victim heads the queue and needs at least the blocks it freed, more than the short pool "
                 "has left, so FIFO admission admits nothing in that step anyway (300 random runs with 538 "
                 "preemptions, prefix caching on and off: identical results)"),
    M("serving/engine", "core/attention.py", "causal_pairs", "return q_len * past_len + q_len * (q_len + 1) / 2",
      "return q_len * (q_len + 1) / 2",
      "a prompt chunk does not attend to the earlier chunks"),
    M("serving/engine", "serving/steptime.py", "StepShape.attn_kv_tokens", "            kv += p + q\n", "            kv += q\n",
      "a chunk's attention reads only its own keys"),
    M("serving/engine", "serving/engine.py", "Replica._step", "logits = n_dec + sum(1 for r, q in chunks if r.done + q == r.target)",
      "logits = n_dec + len(chunks)", "LM head on every prompt chunk"),
    M("serving/engine", "serving/engine.py", "Replica._static_form", "s = max(r.prompt for r in batch)  # prompts padded",
      "s = min(r.prompt for r in batch)  # prompts padded", "static batch padded to the shortest prompt"),
    M("serving/engine", "serving/engine.py", "Replica._static_form", "need = blocks_for(r.prompt + r.output, self.bs)  # reserved",
      "need = blocks_for(r.prompt, self.bs)  # reserved", "static batching reserves the prompt only"),
    M("serving/engine", "serving/policies/static.py", "StaticBatching.plan_step", "ready = max(state.clock, state.waiting[0].arrival + self.timeout_s)",
      "ready = state.waiting[0].arrival + self.timeout_s", "a late timeout moves the clock back"),
    M("serving/engine", "serving/engine.py", "Replica._step", "                if r.first_token is None:\n                    r.first_token = t1",
      "                if True:\n                    r.first_token = t1", "TTFT taken after a preemption's recompute"),
    M("serving/engine", "serving/engine.py", "Replica._admit", "            if r.first_sched is None:\n                r.first_sched = t",
      "            if True:\n                r.first_sched = t", "queueing delay measured to the last admission"),
    M("serving/engine", "serving/policies/static.py", "StaticBatching.plan_step", "if len(state.waiting) >= self.batch_size:",
      "if len(state.waiting) > self.batch_size:", "a full static batch waits for one more"),
    M("serving/engine", "serving/engine.py", "Replica._finish", "            self.free += r.blocks\n            r.blocks = 0\n            if r.pref:",
      "            r.blocks = 0\n            if r.pref:", "a finished request's blocks leak"),
    # serving/lab ----------------------------------------------------------------------------------
    M("serving/lab", "notebook/lab.py", "Capacity.requests_per_usd", "return tuple(r * 3600.0 / (d.gpus * self.usd_per_gpu_hour)",
      "return tuple(r * 60.0 / (d.gpus * self.usd_per_gpu_hour)", "requests per dollar per minute"),
    M("serving/lab", "notebook/lab.py", "Capacity.per_gpu", "return tuple(r / d.gpus for r, d", "return tuple(r / d.replicas for r, d",
      "capacity per replica, not per GPU"),
    M("serving/lab", "notebook/lab.py", "Capacity.best", "usd = np.where(np.array(self.fits), np.array(self.requests_per_usd, dtype=float), -1.0)",
      "usd = np.array(self.requests_per_usd, dtype=float)", "best() may pick a deployment that does not fit"),
    M("serving/lab", "notebook/lab.py", "slo_capacity", "lo, hi = (mid, hi) if attains(scenario, d, mid) >= attainment else (lo, mid)",
      "lo, hi = (mid, hi) if attains(scenario, d, mid) > attainment else (lo, mid)", "attainment met exactly counted as a miss"),
    M("serving/lab", "notebook/lab.py", "slo_capacity", "        rates.append(lo)\n", "        rates.append(hi)\n",
      "capacity is the rate that missed"),
    M("serving/lab", "notebook/lab.py", "fits", "return blocks_for(int(tokens), LAB_BLOCK_TOKENS) <= pool - int(LAB_WATERMARK * pool)",
      "return blocks_for(int(tokens), LAB_BLOCK_TOKENS) <= pool", "fits ignores the admission watermark"),
    M("serving/lab", "notebook/lab.py", "attains", "(deployment.requests_per_gpu or scenario.n_requests) * deployment.gpus)",
      "(deployment.requests_per_gpu or scenario.n_requests))", "the same run length for every GPU count"),
    M("serving/lab", "notebook/lab.py", "Scenario.run", "**({\"tp\": self.tp} | kw))", "**kw)", "the scenario's TP ignored"),
    M("serving/lab", "notebook/lab.py", "long_prompt", "    others[idx] = False\n", "", "the long request counted among the others"),
    M("serving/lab", "notebook/lab.py", "Sweep.max_rate_within", "n = int(np.argmin(ok)) if not ok.all() else len(ok)",
      "n = int(np.sum(ok))",
      "a rate within the SLO after one that missed counted"),
    M("serving/lab", "notebook/lab.py", "smallest_tp", "        if fits(model, accelerator, precision, tp, tokens):\n            return tp",
      "        if True:\n            return tp", "smallest_tp ignores memory (always 1)"),
    M("serving/lab", "notebook/lab.py", "slo_capacity", "    if not d_fits:  # shown as such",
      "    if False:  # shown as such", "a deployment that does not fit is run"),
    # serving/study: the validation study's judging (checks) and its reports ------------------------
    M("serving/study", "study/checks.py", "relative_error", "return float(simulated / live - 1.0)", "return float(live / simulated - 1.0)",
      "error inverted"),
    M("serving/study", "study/checks.py", "compare", "\"within\": abs(e) <= bound}", "\"within\": e <= bound}",
      "a too-fast simulation always within"),
    M("serving/study", "study/checks.py", "compare", "ok &= abs(e) <= bound", "ok &= abs(e) < bound",
      "an error on the bound counted as a miss"),
    M("serving/study", "study/checks.py", "", "P50_BOUND, P99_BOUND = 0.15, 0.25", "P50_BOUND, P99_BOUND = 0.25, 0.25",
      "the median held to the p99 bound"),
    M("serving/study", "study/checks.py", "capacity_requests_per_s", "return float(n / np.nanmax(setup.simulate(w, step_time).finish_s))",
      "return float(n / np.nanmean(setup.simulate(w, step_time).finish_s))",
      "capacity over the mean finish, not the last"),
    M("serving/study", "study/reports.py", "misses", "if abs(r[\"comparison\"][m][p][\"error\"]) > record[\"bounds\"][p]]",
      "if r[\"comparison\"][m][p][\"error\"] > record[\"bounds\"][p]]", "negative misses not listed"),
    M("serving/study", "study/reports.py", "all_served", "return all(r[\"live\"][\"completed\"] == r[\"simulated\"][\"completed\"] == r[\"requests\"]",
      "return all(r[\"live\"][\"completed\"] == r[\"simulated\"][\"completed\"]", "all_served ignores unserved requests on both sides"),
    M("serving/study", "study/reports.py", "_worst", "key=lambda x: x[0])", "key=lambda x: x[1])",
      "worst error by signed value"),
    M("serving/study", "study/checks.py", "step_errors", "\"p90_abs\": float(np.percentile(np.abs(r - 1), 90))",
      "\"p90_abs\": float(np.percentile(np.abs(r - 1), 50))", "step error p90 is the median"),
    # serving/cli ----------------------------------------------------------------------------------
    M("serving/cli", "commands/serving.py", "_refuse_ignored", "        if _given(args, name) and policy_name not in policies:",
      "        if False:", "options the policy ignores accepted"),
    M("serving/cli", "commands/serving.py", "_refuse_ignored", "    if _given(args, \"router\") and args.replicas == 1:",
      "    if False:", "--router with one replica accepted"),
    M("serving/cli", "commands/serving.py", "_workload", "            if _given(args, name) and not (name == \"seed\" and args.live):",
      "            if False:", "synthetic options beside --trace accepted"),
    M("serving/cli", "commands/serving.py", "_workload", "    extra = max(0.0, (args.cv ** 2 - 1) / 2)", "    extra = 0.0",
      "the burst of a high cv not counted"),
    M("serving/cli", "commands/serving.py", "_refuse_idle_replicas", "    if args.replicas > len(workload):", "    if args.replicas > 10 * len(workload):",
      "idle replicas accepted"),
    M("serving/cli", "commands/serving.py", "_check_block_tokens", "    if free > per_token and per_token * args.block_tokens > free:",
      "    if free > per_token and per_token * args.block_tokens > 2 * free:", "a block larger than the free memory accepted"),
    M("serving/cli", "commands/serving.py", "_cmd_serve", "        write_text_atomic(args.timeseries, result.timeseries_csv())",
      "        open(args.timeseries, \"w\").write(result.timeseries_csv())", "timeseries written in place (partial on Ctrl-C)"),
    M("serving/cli", "commands/serving.py", "_cmd_compare", "        if Path(args.figure).suffix.lower() not in FIGURE_SUFFIXES:",
      "        if False:", "--figure format checked only after the table"),
    M("serving/cli", "commands/serving.py", "_cmd_validate", "    positive_int(\"--seed\", args.seed, minimum=0)\n    if args.duration is not None and args.requests",
      "    if args.duration is not None and args.requests", "validate --seed checked only after profiling"),
    # attention: windows, chunks, latent attention; mixture of experts ------------------------------
    M("attention", "core/attention.py", "_seen", "w * (w + 1) / 2 + (n - w) * w)", "w * (w + 1) / 2 + (n - w) * (w - 1))",
      "a sliding window one key short once full"),
    M("attention", "core/attention.py", "keys_read", "out = np.minimum(p + q, q + float(span) - 1)", "out = p + q",
      "a sliding layer reads its whole past"),
    M("attention", "core/attention.py", "keys_held", "out = n if kind == \"full\" else np.minimum(n, float(span))", "out = n",
      "a windowed layer's cache never capped"),
    M("attention", "core/attention.py", "_seen", "return m * c * (c + 1) / 2 + r * (r + 1) / 2", "return m * c * (c + 1) / 2 + r * r / 2",
      "chunked attention without the diagonal of the last chunk"),
    M("attention", "core/attention.py", "layer_shape", "H * (r + rope) * ab, H * r * ab, (r + rope) * kvb)",
      "H * (r + rope) * ab, H * r * ab, 2 * (r + rope) * kvb)", "MLA's latent cached as K and V"),
    M("attention", "core/moe.py", "expected_experts", "out = n_experts * (1.0 - (1.0 - experts_per_token / n_experts) ** t)",
      "out = n_experts * (1.0 - (1.0 - 1.0 / n_experts) ** t)", "distinct experts counted as if top-1"),
    M("attention", "core/moe.py", "tokens_touching", "np.log1p(-share) / np.log1p(-experts_per_token / n_experts)",
      "np.log1p(-share) / np.log1p(-1.0 / n_experts)", "tokens touching a share of experts, top-k ignored"),
    M("attention", "core/memory.py", "weight_bytes_read",
      "untouched = shard.n_experts - np.asarray(expected_experts(shard.n_experts, shard.experts_per_token, t))",
      "untouched = shard.n_experts - shard.experts_per_token + 0 * t", "an MoE step reads only one token's experts"),
    M("attention", "core/specs.py", "ModelConfig.n_params_active",
      "return self.n_params - self.moe_layers * (self.n_experts - self.experts_per_token) * self.expert_params",
      "return self.n_params - self.n_layers * (self.n_experts - self.experts_per_token) * self.expert_params",
      "active parameters counted over dense layers too"),
    # plots: titles read off the curves -------------------------------------------------------------
    M("plots", "core/latency.py", "throughput_shape", "concave = bool(np.all(np.diff(slopes) <= 1e-9 * np.max(np.abs(slopes))))", "concave = True",
      "every throughput curve called concave"),
    M("plots", "core/latency.py", "ThroughputShape.half_at_b_star", "return abs(self.share_at_b_star - 0.5) < 0.02", "return abs(self.share_at_b_star - 0.5) < 0.2",
      "47 % of the ceiling called half"),
    M("plots", "notebook/plots.py", "memory_budget_plot", "\"the KV cache eats the free memory\" if limit else", "\"the KV cache eats the free memory\" if True else",
      "the memory title when the weights alone do not fit"),
    M("plots", "notebook/plots.py", "weight_dtype_plot", "(\"compute-bound, barely moves\" if ttft_gain < 1.25", "(\"compute-bound, barely moves\" if True",
      "a weight-bound prompt called compute-bound"),
    # serving levers ---------------------------------------------------------------------------------
    M("serving/levers", "serving/speculative.py", "tokens_per_verification", "return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)",
      "return (1.0 - alpha ** k) / (1.0 - alpha)", "the bonus token of a verification forgotten"),
    M("serving/levers", "serving/speculative.py", "SpeculativeStepTime.step_time_s", "return self.target.step_time_s(verify, t_s) + k * self.draft_step_s(",
      "return self.target.step_time_s(verify, t_s) + self.draft_step_s(", "one draft step per verification, not k"),
    M("serving/levers", "serving/disaggregation.py", "transfer_time_s",
      "return kv_link.latency_s + np.asarray(prompt_tokens, dtype=float) * per_token / kv_link.link_bytes_per_s",
      "return np.asarray(prompt_tokens, dtype=float) * per_token / kv_link.link_bytes_per_s", "the KV link's latency dropped"),
    M("serving/levers", "serving/policies/priority.py", "PriorityScheduling.enqueue", "while pos > 0 and (waiting[pos - 1].prio, waiting[pos - 1].i) > key:",
      "while pos > 0 and (waiting[pos - 1].prio, waiting[pos - 1].i) < key:", "priorities served backwards"),
    # exercises/core -------------------------------------------------------------------------------
    M("exercises/core", "exercises/core.py", "_matches", "return abs(value - expected) <= max(part.rel_tol * abs(expected), part.abs_tol)",
      "return abs(value - expected) <= max(5 * part.rel_tol * abs(expected), part.abs_tol)",
      "tolerance 5x looser"),
    M("exercises/core", "exercises/core.py", "number", "def number(name, description, unit=\"\", rel_tol=0.01, hint=\"\",",
      "def number(name, description, unit=\"\", rel_tol=0.05, hint=\"\",", "default tolerance 5x looser"),
    M("exercises/core", "exercises/core.py", "_matches", "if part.kind in (\"number\", \"integer\"):\n        return abs",
      "if part.kind in (\"number\",):\n        return abs", "integers compared as choices (abs_tol ignored)"),
    M("exercises/core", "exercises/core.py", "Exercise._hint", "and not _matches(part, m.value, expected)]", "]",
      "a slip's hint given even when the slip equals the answer"),
]


def _scratch() -> Path:
    tmp = Path(tempfile.mkdtemp(prefix="inferlab-mutants-"))
    for name in ("lib", "data", "tests", "docs"):   # some tests read the reference pages
        shutil.copytree(ROOT / name, tmp / name, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp / "chapters").mkdir()
    for p in (ROOT / "chapters").iterdir():  # some tests read the notebooks and their sources
        if p.is_file():
            shutil.copy(p, tmp / "chapters" / p.name)
    for name in ("pyproject.toml", "README.md", "Makefile", "ARCHITECTURE.md", "ERRATA.md"):
        shutil.copy(ROOT / name, tmp / name)
    return tmp


def run_tests(tmp: Path, tests: list[str], timeout_s: float, report: bool = False) -> bool:
    """True when the tests pass (the mutant survived). report: print the failure's last lines."""
    env = dict(os.environ, PYTHONPATH=str(tmp / "lib"), INFERLAB_DATA=str(tmp / "data"),
               PYTHONDONTWRITEBYTECODE="1")
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-o", "addopts=", "-p", "no:cacheprovider",
           "-W", "ignore", *tests]
    try:
        done = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return False  # a hang counts as killed
    if report and done.returncode != 0:
        print("\n".join(done.stdout.decode(errors="replace").splitlines()[-15:]), file=sys.stderr)
    return done.returncode == 0


def _token_pattern(snippet: str) -> re.Pattern:
    """`snippet` as a pattern that ignores white space between its tokens, so that re-wrapping or
    re-indenting the code does not make a mutant stale (a changed token still does)."""
    tokens = re.findall(r"\w+|\S", snippet)
    return re.compile(r"\s*".join(re.escape(t) for t in tokens))


def _span(source: str, function: str) -> tuple[int, int] | None:
    """(start, end) character offsets of `function` (a qualified name: f, Class.method) in `source`,
    decorators included; the whole source for ""; None when no such function is defined there."""
    if not function:
        return 0, len(source)
    starts = [0]
    for line in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))

    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = prefix + child.name
                if name == function:
                    first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                    return starts[first - 1], starts[child.end_lineno]
                found = walk(child, name + ".")
                if found:
                    return found
        return None
    return walk(ast.parse(source), "")


def locate(m: Mutant, source: str) -> tuple[list[tuple[int, int]], str]:
    """The places `m.before` matches inside its function, as (start, end) offsets, and where it looked."""
    span = _span(source, m.function)
    if span is None:
        return [], f"no function {m.function}"
    a, b = span
    return [(a + x.start(), a + x.end()) for x in _token_pattern(m.before).finditer(source[a:b])], \
        (f"in {m.function}" if m.function else "at module level")


def mutate(m: Mutant, source: str) -> str:
    """`source` with the one match of `m.before` in its function replaced by `m.after`. The match starts at
    its first token, so `after` loses the indentation `before` starts with, and its later lines are moved
    by the difference between that indentation and the code's (a block re-indented stays a block)."""
    (start, end), = locate(m, source)[0]
    lead = m.before[:len(m.before) - len(m.before.lstrip())].rsplit("\n", 1)[-1]
    line_start = source.rfind("\n", 0, start) + 1
    actual = source[line_start:start] if not source[line_start:start].strip() else lead
    first, *rest = m.after.split("\n")
    first = first[len(lead):] if first.startswith(lead) else first.lstrip() if lead else first
    if lead:  # a snippet that starts mid-line says nothing of its block's indentation: lines kept as written
        rest = [actual + line[len(lead):] if line.startswith(lead) else line for line in rest]
    return source[:start] + "\n".join([first, *rest]) + source[end:]


def stale(mutants, lib: Path | None = None) -> list[str]:
    """'<what> (<path>, <where>): snippet found N times' for each mutant that does not apply exactly once."""
    lib = lib or ROOT / "lib" / "inferlab"
    out = []
    for m in mutants:
        target = lib / m.path
        if not target.is_file():
            out.append(f"{m.module}: {m.what} ({m.path}, which does not exist): snippet found 0 times")
            continue
        places, where = locate(m, target.read_text())
        if len(places) != 1:
            out.append(f"{m.module}: {m.what} ({m.path}, {where}): snippet found {len(places)} times")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--module", action="append", choices=sorted(TESTS), help="only these modules (repeatable)")
    ap.add_argument("--list", action="store_true", help="print the mutants, marking the stale ones, and exit")
    ap.add_argument("--timeout-s", type=float, default=300, help="per mutant")
    args = ap.parse_args(argv)
    chosen = [m for m in MUTANTS if not args.module or m.module in args.module]
    bad = stale(chosen)
    if args.list:
        for m in chosen:
            mark = "STALE " if stale([m]) else ""
            print(f"{mark}{m.module:20s} {m.what}" + (f"  [equivalent: {m.equivalent}]" if m.equivalent else ""))
        print(f"{len(chosen)} mutants, {len(bad)} stale")
        return 1 if bad else 0
    if bad:
        print(f"{len(bad)} of {len(chosen)} mutants no longer apply exactly once; rewrite them against the code "
              "or remove them (with the reason):", *(f"  {b}" for b in bad), sep="\n", file=sys.stderr)
        return 1
    tmp = _scratch()
    try:
        # The unmutated code must pass the same tests, or a "kill" means nothing.
        for module in sorted({m.module for m in chosen}):
            if not run_tests(tmp, TESTS[module], args.timeout_s, report=True):
                print(f"baseline tests fail for {module}: fix them first", file=sys.stderr)
                return 1
        results = []
        for m in chosen:
            target = tmp / "lib" / "inferlab" / m.path
            original = target.read_text()
            target.write_text(mutate(m, original))
            start = time.perf_counter()
            try:
                survived = run_tests(tmp, TESTS[m.module], args.timeout_s)
            finally:
                target.write_text(original)
            status = "equivalent" if m.equivalent else ("SURVIVED" if survived else "killed")
            if m.equivalent and not survived:
                status = "killed (marked equivalent)"
            results.append((m, status))
            print(f"{status:10s} {m.module:20s} {m.what}  ({time.perf_counter() - start:.0f} s)", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print("\nkill rate over non-equivalent mutants, per module:")
    for module in dict.fromkeys(m.module for m in chosen):
        rows = [(m, s) for m, s in results if m.module == module and not m.equivalent]
        killed = sum(s == "killed" for _, s in rows)
        print(f"  {module:20s} {killed}/{len(rows)}" + (f" = {killed / len(rows):.0%}" if rows else ""))
    print("per package:")
    for pkg in dict.fromkeys(package(m.module) for m in chosen):
        rows = [s for m, s in results if package(m.module) == pkg and not m.equivalent]
        killed = sum(s == "killed" for s in rows)
        print(f"  {pkg:20s} {killed}/{len(rows)}" + (f" = {killed / len(rows):.0%}" if rows else ""))
    live = [s for m, s in results if not m.equivalent]
    total = sum(s == "killed" for s in live)
    print(f"  {'all':20s} {total}/{len(live)} = {total / max(len(live), 1):.0%}")
    eq = [m for m, _ in results if m.equivalent]
    if eq:
        print("equivalent mutants (left out):")
        for m in eq:
            print(f"  {m.module}: {m.what} -- {m.equivalent}")
    survivors = [m for m, s in results if s == "SURVIVED"]
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())

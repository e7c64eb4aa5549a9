"""Mutation testing with a hand list of mutants: does the fast test suite notice each bug?

Each mutant replaces one exact snippet of a library module with a plausible wrong version (the kind
of slip a reviewer would miss: a factor dropped, a min for a max, a parameter ignored). For each,
the script copies lib/, data/ and tests/ into a scratch folder, applies the mutant there (the
working tree is never touched), runs the module's fast tests with `pytest -x`, and records killed
(a test failed) or survived. Mutants marked equivalent change no observable result; they are listed
and left out of the kill rate.

    .venv/bin/python benchmarks/mutation.py                 # all modules (~10 min on 2 busy cores)
    .venv/bin/python benchmarks/mutation.py --module costs  # one module
    .venv/bin/python benchmarks/mutation.py --list          # the mutants, without running them

Not part of `make test` (it reruns the suite once per mutant).
"""
from __future__ import annotations

import argparse
import os
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
    before: str        # exact snippet, must occur once
    after: str
    what: str
    equivalent: str = ""  # why no test can notice it (then left out of the rate)


COMMON = ["tests/test_mutants.py", "tests/test_properties.py"]
TESTS = {
    "costs": ["tests/test_costs.py", "tests/test_roofline.py", *COMMON],
    "memory": ["tests/test_memory.py", "tests/test_parallel.py", *COMMON],
    "latency": ["tests/test_latency.py", "tests/test_parallel.py", *COMMON],
    "roofline": ["tests/test_roofline.py", "tests/test_bad_input.py", *COMMON],
    "parallel": ["tests/test_parallel.py", "tests/test_memory.py", *COMMON],
    "measure/efficiency": ["tests/test_mutants.py", "tests/test_measure.py"],
    "exercises/core": ["tests/test_mutants.py", "tests/test_exercises.py"],
    "specs": ["tests/test_costs.py", "tests/test_memory.py", *COMMON],
}

M = Mutant
MUTANTS = [
    # costs ----------------------------------------------------------------------------------------
    M("costs", "costs.py", "flops=2.0 * tokens * d_in * d_out", "flops=tokens * d_in * d_out",
      "linear FLOPs without the 2 per multiply-add"),
    M("costs", "costs.py", "activation_bytes=tokens * (d_in + d_out) * ab)", "activation_bytes=tokens * d_in * ab)",
      "linear layer's output never written"),
    M("costs", "costs.py", "pairs = q * p + (q * (q + 1) / 2 if causal else q * q)",
      "pairs = q * p + (q * q / 2 if causal else q * q)", "causal pairs without the diagonal"),
    M("costs", "costs.py", "pairs = q * p + (q * (q + 1) / 2 if causal else q * q)",
      "pairs = q * (q + 1) / 2 if causal else q * q", "cached keys not scored"),
    M("costs", "costs.py", "kv_read = b * kv_len * model.kv_dim * kvb", "kv_read = b * kv_len * model.q_dim * kvb",
      "KV read with n_heads instead of n_kv_heads"),
    M("costs", "costs.py", "score_flops = 2.0 * b * model.n_heads", "score_flops = 2.0 * b * model.n_kv_heads",
      "attention FLOPs per KV head, not per query head"),
    M("costs", "costs.py", "logit_tokens = tokens if all_logits else b", "logit_tokens = tokens",
      "LM head applied to every prompt token"),
    M("costs", "costs.py", "np.minimum(tokens, model.vocab_size) * d * wb", "tokens * d * wb",
      "embedding rows read once per token beyond the table size"),
    M("costs", "costs.py", "    if model.gated_mlp:\n        per_layer[\"mlp_gate\"]", "    if not model.gated_mlp:\n        per_layer[\"mlp_gate\"]",
      "gate projection on the wrong models"),
    M("costs", "costs.py", "q = np.minimum(int(chunk_len), int(prompt_len) - past)", "q = np.full(n, int(chunk_len))",
      "last chunk padded to a full chunk"),
    M("costs", "costs.py", "where=nbytes > 0)", "where=nbytes >= 0)", "0/0 intensity back (NaN)"),
    M("costs", "costs.py", "past = np.asarray(context_len) - 1", "past = np.asarray(context_len)",
      "decode attends over one position too many"),
    # memory ---------------------------------------------------------------------------------------
    M("memory", "memory.py", "return 2.0 * shard.n_layers * shard.kv_dim", "return shard.n_layers * shard.kv_dim",
      "KV cache without the factor 2 for K and V"),
    M("memory", "memory.py", "shard = tp_shard(get_model(model), tp)\n    return shard.n_params",
      "shard = get_model(model)\n    return shard.n_params", "weights not split by tp"),
    M("memory", "memory.py", "b = np.floor(free / np.asarray(per_seq))", "b = np.ceil(free / np.asarray(per_seq))",
      "max batch rounded up"),
    M("memory", "memory.py", "free = acc.memory_bytes - w - reserved_bytes", "free = acc.memory_bytes - w",
      "reserved memory ignored by max_batch"),
    M("memory", "memory.py", "return self.free_bytes >= 0", "return self.free_bytes > 0",
      "an exact fit reported as not fitting"),
    M("memory", "memory.py", "if not allow_zero and np.any(b < 1):", "if not allow_zero and np.all(b < 1):",
      "some contexts not fitting accepted in a sweep"),
    M("memory", "memory.py", "return self.weight_bytes + self.kv_bytes + self.reserved_bytes",
      "return self.weight_bytes + self.kv_bytes", "reserved bytes missing from the budget"),
    # latency --------------------------------------------------------------------------------------
    M("latency", "latency.py", "out = weight_bytes(model, precision, tp) / np.asarray(kv_cache_bytes(model, context_len, 1, precision, tp))",
      "out = weight_bytes(model, precision) / np.asarray(kv_cache_bytes(model, context_len, 1, precision, tp))",
      "kv_crossover_batch ignores tp (weights)"),
    M("latency", "latency.py", "out = weight_bytes(model, precision, tp) / np.asarray(kv_cache_bytes(model, context_len, 1, precision, tp))",
      "out = weight_bytes(model, precision) / np.asarray(kv_cache_bytes(model, context_len, 1, precision))",
      "kv_crossover_batch ignores tp (both)"),
    M("latency", "latency.py", "out = np.asarray(batch, dtype=float) / t", "out = 1.0 / t",
      "throughput per sequence, not per instance"),
    M("latency", "latency.py", "usd_per_gpu_hour / 3600.0 / np.asarray(tokens_per_s, dtype=float) * 1000.0",
      "usd_per_gpu_hour / 3600.0 / np.asarray(tokens_per_s, dtype=float) * 1e6", "cost per million, not per 1k"),
    M("latency", "latency.py", "out = n_gpus * usd_per_gpu_hour", "out = usd_per_gpu_hour",
      "cost of one GPU for a tp group"),
    M("latency", "latency.py", "t = t + tp_communication_time_s(model, batch, tp", "t = t + 0 * tp_communication_time_s(model, batch, tp",
      "decode all-reduces dropped"),
    M("latency", "latency.py", "costs = costs.without(*ATTENTION_OPS)", "costs = costs",
      "include_attention=False ignored"),
    M("latency", "latency.py", "costs = decode_costs(shard, batch, context_len, precision)",
      "costs = decode_costs(model, batch, context_len, precision)", "decode not sharded under tp"),
    M("latency", "latency.py", "flops / (mfu * acc.peak(dtype)), n_params", "flops / acc.peak(dtype), n_params",
      "ttft_rule_s ignores mfu"),
    M("latency", "latency.py", "(weight_bytes_total + np.asarray(batch, dtype=float) * kv_bytes_per_seq)",
      "(weight_bytes_total + kv_bytes_per_seq)", "decode rule reads one sequence's KV"),
    # roofline -------------------------------------------------------------------------------------
    M("roofline", "roofline.py", "return acc.peak(dtype) / acc.hbm_bytes_per_s", "return acc.hbm_bytes_per_s / acc.peak(dtype)",
      "ridge point inverted"),
    M("roofline", "roofline.py", "out = np.minimum(mfu * acc.peak(dtype)", "out = np.maximum(mfu * acc.peak(dtype)",
      "attainable = max of the roofs"),
    M("roofline", "roofline.py", "np.where(np.asarray(intensity) >= ridge_point(accelerator, dtype), \"compute\", \"memory\")",
      "np.where(np.asarray(intensity) > ridge_point(accelerator, dtype), \"compute\", \"memory\")",
      "ridge point itself called memory-bound"),
    M("roofline", "roofline.py", "memory_s = np.asarray(bytes_moved, dtype=float) / (mbu * acc.hbm_bytes_per_s)",
      "memory_s = np.asarray(bytes_moved, dtype=float) / acc.hbm_bytes_per_s", "mbu ignored"),
    M("roofline", "roofline.py", "out = compute_s + memory_s if overlap == \"none\" else np.maximum(compute_s, memory_s)",
      "out = np.maximum(compute_s, memory_s)", "overlap='none' ignored"),
    M("roofline", "roofline.py", "        return sum(times)", "        return max(times)", "per-operator times not summed"),
    M("roofline", "roofline.py", "is_compute = np.asarray(c.flops / acc.peak(dtype)) >= np.asarray(c.bytes / acc.hbm_bytes_per_s)",
      "is_compute = np.asarray(c.flops / acc.peak(dtype)) < np.asarray(c.bytes / acc.hbm_bytes_per_s)",
      "time-weighted regime inverted"),
    M("roofline", "roofline.py", "out = np.where(compute_s >= memory_s, \"compute\", \"memory\")",
      "out = np.where(compute_s > memory_s, \"compute\", \"memory\")", "tie of the regimes' times",
      equivalent="compute and memory time of a pass are never exactly equal floats"),
    # parallel -------------------------------------------------------------------------------------
    M("parallel", "parallel.py", "if model.n_heads % tp or model.d_ff % tp:", "if model.n_heads % tp:",
      "check_tp no longer checks d_ff"),
    M("parallel", "parallel.py", "if model.n_heads % tp or model.d_ff % tp:", "if model.d_ff % tp:",
      "check_tp no longer checks n_heads"),
    M("parallel", "parallel.py", "n_kv_heads=max(model.n_kv_heads // tp, 1)", "n_kv_heads=model.n_kv_heads // tp or 1",
      "KV heads replicated another way", equivalent="x // tp or 1 equals max(x // tp, 1) for x, tp >= 1"),
    M("parallel", "parallel.py", "n_kv_heads=max(model.n_kv_heads // tp, 1)", "n_kv_heads=model.n_kv_heads",
      "KV heads not split"),
    M("parallel", "parallel.py", "vocab_size=-(-model.vocab_size // tp)", "vocab_size=model.vocab_size",
      "vocabulary not split"),
    M("parallel", "parallel.py", "return 2 * (tp - 1) / tp * np.asarray", "return (tp - 1) / tp * np.asarray",
      "ring all-reduce without reduce-scatter + all-gather"),
    M("parallel", "parallel.py", "/ acc.interconnect_bytes_per_s + latency_s", "/ acc.interconnect_bytes_per_s",
      "all-reduce latency ignored"),
    M("parallel", "parallel.py", "DEFAULT_ALLREDUCE_LATENCY_S = 8e-6", "DEFAULT_ALLREDUCE_LATENCY_S = 0.0",
      "default latency back to the idealisation"),
    M("parallel", "parallel.py", "ALLREDUCES_PER_LAYER = 2", "ALLREDUCES_PER_LAYER = 1", "one all-reduce per layer"),
    M("parallel", "parallel.py", "message = np.asarray(tokens, dtype=float) * model.d_model",
      "message = np.asarray(tokens, dtype=float) * model.d_ff", "all-reduce of d_ff-wide activations"),
    # specs ----------------------------------------------------------------------------------------
    M("specs", "specs.py", "return self.n_heads // self.n_kv_heads", "return self.n_kv_heads // self.n_heads",
      "group_size inverted"),
    M("specs", "specs.py", "return 3 if self.gated_mlp else 2", "return 3", "every MLP gated"),
    M("specs", "specs.py", "return self.vocab_size * self.d_model * (1 if self.tied_embeddings else 2)",
      "return self.vocab_size * self.d_model * 2", "tied embeddings counted twice"),
    # measure/efficiency ---------------------------------------------------------------------------
    M("measure/efficiency", "measure/efficiency.py", "return max(before, after)", "return min(before, after)",
      "the lower ceiling chosen (MBU/MFU flattered)"),
    M("measure/efficiency", "measure/efficiency.py", "return amount / seconds / ceiling_around(before, after)",
      "return amount / seconds / before", "only the ceiling before the kernel"),
    M("measure/efficiency", "measure/ceilings.py", "return 2.0 * buffer_bytes", "return 1.0 * buffer_bytes",
      "copy bandwidth counts reads only (MBU doubled)"),
    M("measure/efficiency", "measure/ceilings.py", "return 2.0 * n ** 3", "return n ** 3",
      "matmul FLOPs without the 2"),
    M("measure/efficiency", "measure/efficiency.py", "if sum(r[\"clean\"] for r in rows) >= rounds:",
      "if len(rows) >= rounds:", "contended rounds counted as clean"),
    # exercises/core -------------------------------------------------------------------------------
    M("exercises/core", "exercises/core.py", "return abs(value - expected) <= max(part.rel_tol * abs(expected), part.abs_tol)",
      "return abs(value - expected) <= max(5 * part.rel_tol * abs(expected), part.abs_tol)",
      "tolerance 5x looser"),
    M("exercises/core", "exercises/core.py", "def number(name, description, unit=\"\", rel_tol=0.01, hint=\"\"):",
      "def number(name, description, unit=\"\", rel_tol=0.05, hint=\"\"):", "default tolerance 5x looser"),
    M("exercises/core", "exercises/core.py", "if part.kind in (\"number\", \"integer\"):\n        return abs",
      "if part.kind in (\"number\",):\n        return abs", "integers compared as choices (abs_tol ignored)"),
    M("exercises/core", "exercises/core.py", "and not _matches(part, m.value, expected)]", "]",
      "a slip's hint given even when the slip equals the answer"),
]


def _scratch() -> Path:
    tmp = Path(tempfile.mkdtemp(prefix="inferlab-mutants-"))
    for name in ("lib", "data", "tests"):
        shutil.copytree(ROOT / name, tmp / name, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp / "chapters").mkdir()
    for p in (ROOT / "chapters").iterdir():  # some tests read the notebooks and their sources
        if p.is_file():
            shutil.copy(p, tmp / "chapters" / p.name)
    for name in ("pyproject.toml", "README.md", "Makefile"):
        shutil.copy(ROOT / name, tmp / name)
    return tmp


def run_tests(tmp: Path, tests: list[str], timeout_s: float) -> bool:
    """True when the tests pass (the mutant survived)."""
    env = dict(os.environ, PYTHONPATH=str(tmp / "lib"), INFERLAB_DATA=str(tmp / "data"),
               PYTHONDONTWRITEBYTECODE="1")
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-o", "addopts=", "-p", "no:cacheprovider",
           "-W", "ignore", *tests]
    try:
        done = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return False  # a hang counts as killed
    return done.returncode == 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--module", action="append", choices=sorted(TESTS), help="only these modules (repeatable)")
    ap.add_argument("--list", action="store_true", help="print the mutants and exit")
    ap.add_argument("--timeout-s", type=float, default=300, help="per mutant")
    args = ap.parse_args(argv)
    chosen = [m for m in MUTANTS if not args.module or m.module in args.module]
    if args.list:
        for m in chosen:
            print(f"{m.module:20s} {m.what}" + (f"  [equivalent: {m.equivalent}]" if m.equivalent else ""))
        return 0
    tmp = _scratch()
    try:
        # The unmutated code must pass the same tests, or a "kill" means nothing.
        for module in sorted({m.module for m in chosen}):
            if not run_tests(tmp, TESTS[module], args.timeout_s):
                print(f"baseline tests fail for {module}: fix them first", file=sys.stderr)
                return 1
        results = []
        for m in chosen:
            target = tmp / "lib" / "inferlab" / m.path
            original = target.read_text()
            if original.count(m.before) != 1:
                print(f"stale mutant ({m.what}): snippet found {original.count(m.before)} times in {m.path}",
                      file=sys.stderr)
                return 1
            target.write_text(original.replace(m.before, m.after))
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

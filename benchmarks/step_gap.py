"""Where a recorded decode step loses time against the same model timed alone.

    python benchmarks/step_gap.py                 # cpu-0.5b in the default CPU dtype, B = 1
    python benchmarks/step_gap.py --dtype fp32 --rounds 5

One process, one model built as the suite builds it (random weights in place, a KV cache of the
quick suite's B = 1 length, filled with noise), one decode position. Each round times, back to
back so that the host's drift moves them together:

  loop        the bare loop: N steps, one clock reading before and after (no harness at all)
  harness     the suite's own timing (suite.timed: per-call clock, /proc/stat meter, input pool)
  after-ceil  the harness right after a copy-bandwidth and matmul ceiling (as around each phase)
  compiled    the harness on the compiled step (inductor, freezing, dynamic shapes)

and prints each one's median over the rounds and its ratio to the bare loop. A ratio near 1 for
harness and after-ceil says the harness and the ceilings are not where recorded steps lose time.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="cpu-0.5b")
    ap.add_argument("--dtype", default="bf16", choices=("fp32", "bf16"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--context", type=int, default=256)
    args = ap.parse_args(argv)
    if not 1 <= args.rounds <= 50 or not 1 <= args.steps <= 1000:
        print("step_gap: error: --rounds must lie in 1..50 and --steps in 1..1000", file=sys.stderr)
        return 2
    import torch

    from inferlab.measure import device as _device
    from inferlab.measure.ceilings import generator, measure_ceilings
    from inferlab.measure.plan import make_plan, resolve_model
    from inferlab.measure.runner import decode_runner, fill_kv_cache_, random_model, token_pool
    from inferlab.measure.suite import timed

    cfg = resolve_model(args.model)
    info = _device.describe("cpu")
    plan = make_plan("cpu", args.dtype, quick=True, model=cfg.name, cache_bytes=info.cache_bytes)
    results = {k: [] for k in ("loop", "harness", "after-ceil", "compiled")}
    with torch.inference_mode():
        model = random_model(cfg, "cpu", args.dtype)
        model.setup_cache(1, plan.max_seq_len)
        gen = generator("cpu", 1)
        fill_kv_cache_(model, gen)
        pool = token_pool(cfg, 1, 1, 8, "cpu", gen)
        pos = args.context - 1
        comp, used, note = decode_runner(model, pool, pos, "compile", "cpu")
        print(f"{cfg.name} {args.dtype}, {torch.get_num_threads()} threads, context {args.context}; "
              f"compiled path: {used}{' (' + note + ')' if note else ''}", flush=True)

        def eager(tok):
            return model(tok, pos, all_logits=False)

        for r in range(args.rounds):
            eager(pool[0])
            t0 = time.perf_counter()
            for i in range(args.steps):
                eager(pool[i % len(pool)])
            results["loop"].append((time.perf_counter() - t0) / args.steps)
            results["harness"].append(timed(eager, pool, "cpu", warmup=1, repeats=args.steps,
                                            min_repeats=args.steps).median_s)
            measure_ceilings("cpu", [args.dtype], copy_bytes=plan.copy_bytes, matmul_n=plan.matmul_n,
                             memory_bytes=info.free_memory_bytes, max_time_s=0.5)
            results["after-ceil"].append(timed(eager, pool, "cpu", warmup=0, repeats=args.steps,
                                               min_repeats=args.steps).median_s)
            results["compiled"].append(timed(comp, pool, "cpu", warmup=1, repeats=args.steps,
                                             min_repeats=args.steps).median_s)
            print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1] * 1e3:.1f} ms" for k, v in results.items())
                  + f"; load average {_device.describe('cpu').load_average}", flush=True)
    base = statistics.median(results["loop"])
    for k, v in results.items():
        m = statistics.median(v)
        print(f"{k:<11} {m * 1e3:8.2f} ms   {m / base:5.2f} x the bare loop")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How fast the serving simulator runs: 10,000 requests per policy, one run each, wall-clock time.

Prints, per policy: the engine steps simulated, seconds, requests simulated per second, and the
time per 10,000 requests as a ratio to the 2 s target (below 1 is faster). The workload is
ShareGPT-like (lognormal prompts of mean 512 and outputs of mean 128 tokens, cv 1) at a rate near
what one H100 sustains for Llama-2 13B, so batches are large and queues form.

    python benchmarks/serving_speed.py [--requests 10000] [--rate 15] [--model ...] [--gpu ...]
"""
from __future__ import annotations

import argparse
import time

from inferlab.serving import (ChunkedPrefill, ContinuousBatching, LengthDist, PrefillFirst,
                              StaticBatching, simulate, synthetic)
from inferlab.core.specs import get_accelerator, get_model

TARGET_S_PER_10K = 2.0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=15.0, help="requests per second")
    parser.add_argument("--model", default="llama-2-13b-book")
    parser.add_argument("--gpu", default="h100-sxm")
    args = parser.parse_args(argv)

    w = synthetic(args.rate, n_requests=args.requests,
                  prompt=LengthDist("lognormal", 512, cv=1.0, low=4, high=4096),
                  output=LengthDist("lognormal", 128, cv=1.0, low=1, high=2048), seed=0)
    print(f"{args.requests} requests at {args.rate:g}/s, {args.model} on {args.gpu}; one run per policy")
    print(f"{'policy':34s} {'steps':>8s} {'seconds':>8s} {'requests/s':>11s} {'s per 10k / 2 s':>16s}")
    model, gpu = get_model(args.model), get_accelerator(args.gpu)  # names resolved here, at the edge
    for policy in (ContinuousBatching(), PrefillFirst(), ChunkedPrefill(token_budget=512),
                   StaticBatching(32, timeout_s=0.05)):
        t0 = time.perf_counter()
        r = simulate(w, model, gpu, policy)
        s = r.summary()  # percentiles included in the timing: a user always asks for them
        elapsed = time.perf_counter() - t0
        steps = len(r.traces[0].step_s)
        ratio = elapsed / args.requests * 10_000 / TARGET_S_PER_10K
        print(f"{str(policy)[:34]:34s} {steps:8d} {elapsed:8.2f} {args.requests / elapsed:11.0f} {ratio:16.2f}"
              f"   (p99 TTFT {s['ttft_s']['p99'] * 1e3:.0f} ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""How long a sweep of one million (B, S) points takes through the vectorised API, beside a plain
Python loop over the same points. One run of each, wall-clock time, and their ratio.

The loop calls the same functions one point at a time. It is slow, so by default it runs on a
random sample of the grid and its time for all points is extrapolated (the output says so);
--loop-points 1000000 runs it on every point.

    python benchmarks/sweep_vectorised.py [--model llama-2-13b-book] [--gpu h100-sxm] [--loop-points 2000]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from inferlab.core.latency import decode_step_time_s, throughput_tokens_per_s
from inferlab.core.memory import kv_cache_bytes

N = 1000  # grid side: N x N = one million (B, S) points


def sweep(model, gpu, batch, seq_len):
    """The three quantities the benchmark times, for arrays or for one point."""
    return (decode_step_time_s(model, gpu, seq_len, batch),
            kv_cache_bytes(model, seq_len, batch),
            throughput_tokens_per_s(model, gpu, seq_len, batch))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama-2-13b-book")
    parser.add_argument("--gpu", default="h100-sxm")
    parser.add_argument("--loop-points", type=int, default=2000,
                        help="points the Python loop visits (1000000 = all of them)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    batch = np.arange(1, N + 1)             # B = 1 ... 1000
    seq_len = 128 * np.arange(1, N + 1)     # S = 128 ... 128,000
    B, S = np.meshgrid(batch, seq_len, indexing="ij")
    total = B.size

    start = time.perf_counter()
    grid = sweep(args.model, args.gpu, B, S)
    vector_s = time.perf_counter() - start

    n = min(max(args.loop_points, 1), total)
    rng = np.random.default_rng(args.seed)
    flat = np.arange(total) if n == total else rng.choice(total, size=n, replace=False)
    points = [(int(B.flat[k]), int(S.flat[k])) for k in flat]
    start = time.perf_counter()
    looped = [sweep(args.model, args.gpu, b, s) for b, s in points]
    loop_s = time.perf_counter() - start
    loop_total_s = loop_s * total / n

    for k, values in zip(flat, looped):
        for array, value in zip(grid, values):
            assert array.flat[k] == value, (k, array.flat[k], value)

    print(f"sweep: decode_step_time_s, kv_cache_bytes and throughput_tokens_per_s for "
          f"{args.model} on {args.gpu}")
    print(f"grid: {N} batch sizes (1..{N}) x {N} lengths (128..{128 * N}) = {total:,} points")
    print(f"vectorised, all points: {vector_s:10.3f} s  ({vector_s / total * 1e9:8.1f} ns per point)")
    if n == total:
        print(f"python loop, all points: {loop_s:9.3f} s  ({loop_s / total * 1e6:8.1f} us per point)")
    else:
        print(f"python loop, {n:,} random points: {loop_s:.3f} s ({loop_s / n * 1e6:.1f} us per point); "
              f"extrapolated to {total:,} points: {loop_total_s:.1f} s")
    print(f"ratio loop / vectorised: {loop_total_s / vector_s:,.0f}x"
          + ("" if n == total else " (loop time extrapolated from the sample)"))
    print(f"check: the loop and the vectorised sweep agree exactly on all {n:,} looped points")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

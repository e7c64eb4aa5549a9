"""Does the decode step's kernel read memory as fast as the memory can be read? One run, ratios.

    python benchmarks/gemv_read.py                 # cpu-0.5b's MLP weight (2048 x 5632 fp32), 5 rounds
    python benchmarks/gemv_read.py --hold avx2     # the same with torch's kernels held to AVX2
    python benchmarks/gemv_read.py --mib 64 --rounds 2

Why: `inferlab measure` states decode MBU at B = 1 against the fastest read-only stream
(`ceilings.READ_KERNELS`: sum, dot, sgemv). A decode step at B = 1 is a chain of matrix-vector
products, so its MBU cannot beat the rate at which the BLAS's matrix-vector product reads the
weights. This prints, over the same weight copies (rotated past the last-level cache, timed in
interleaved rounds, median of each kernel's calls), the read rate of:

  torch F.linear, M = 1   the decode step's own kernel (MKL sgemv in the CPU wheels)
  torch.sum               a pure read stream
  numpy W @ x             the same product through numpy's BLAS (OpenBLAS in the PyPI wheels)

and each one's share of the fastest. If F.linear reads well below both others, the MBU target is
lost to the BLAS, not to the memory or the instruction set. On the 2-core AMD EPYC VM of
2026-12-04 (quiet: load average under 1), F.linear at M = 1 read at 0.51-0.61 of torch.sum and
torch.dot, with and without the AVX2 hold (18-20 GB/s against 30-34), while numpy's product over
the same weights read at 0.91 of torch.sum (29.8 against 32.8 GB/s). The Intel Xeon VM of the
2026-12-02 record read fastest through sgemv (21.5 GB/s against 18.4 for the sum): MKL's
matrix-vector product is slow on this AMD CPU, not on every CPU.

On a busy machine the reductions suffer first (two OpenMP threads wait for each other when a
neighbour takes a core), so read the table only from a quiet run.

`--hold avx2` re-runs this script with ATEN_CPU_CAPABILITY=avx2, ONEDNN_MAX_CPU_ISA=AVX2 and
MKL_ENABLE_INSTRUCTIONS=AVX2 set before torch loads (an emulated AVX2-only CPU; docs/measuring.md).
Exit status 0: this script reports; it asserts nothing about the machine.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys

HOLD_ENV = {"avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
                     "MKL_ENABLE_INSTRUCTIONS": "AVX2"}}
SHAPE = (5632, 2048)  # cpu-0.5b's MLP up/gate weight as F.linear holds it: (out, in)


def kernels(x_torch, x_numpy):
    """name -> fn(weight_torch, weight_numpy) reading the weight once per call."""
    import torch.nn.functional as F

    return {"torch F.linear (M = 1)": lambda w, wn: F.linear(x_torch, w),
            "torch.sum": lambda w, wn: w.sum(),
            "numpy W @ x": lambda w, wn: wn @ x_numpy}


def measure(mib: float, rounds: int, seed: int = 0) -> dict:
    """{kernel: bytes/s}, the median over `rounds` interleaved rounds of each kernel's median call
    time, over enough weight copies of SHAPE to fill `mib` MiB (at least two)."""
    import numpy as np
    import torch

    from inferlab.measure.timing import time_fn

    gen = torch.Generator().manual_seed(seed)
    nbytes = SHAPE[0] * SHAPE[1] * 4
    copies = max(2, int(mib * 2**20 // nbytes))
    weights = [torch.empty(SHAPE).uniform_(-1, 1, generator=gen) for _ in range(copies)]
    pool = [(w, w.numpy()) for w in weights]
    x = torch.empty(1, SHAPE[1]).uniform_(-1, 1, generator=gen)
    fns = kernels(x, x.numpy()[0].astype(np.float32))
    per_round = {name: [] for name in fns}
    for _ in range(int(rounds)):
        for name, fn in fns.items():
            t = time_fn(fn, pool, device="cpu", warmup=len(pool), repeats=3 * len(pool), min_repeats=len(pool))
            per_round[name].append(nbytes / t.median_s)
    return {name: float(np.median(v)) for name, v in per_round.items()}


def report(rates: dict) -> str:
    """The table this script prints: each kernel's GB/s (1e9 bytes/s) and share of the fastest."""
    fastest = max(rates.values())
    lines = [f"{'kernel':24s} {'GB/s':>7s} {'of fastest':>11s}"]
    lines += [f"{name:24s} {r / 1e9:7.1f} {r / fastest:11.2f}" for name, r in rates.items()]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=float, default=512.0, help="MiB of weight copies rotated (default 512)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's own)")
    ap.add_argument("--hold", choices=sorted(HOLD_ENV), help="hold torch's kernels to this ISA")
    args = ap.parse_args(argv)
    if not 1 <= args.mib <= 65536:
        ap.error(f"--mib must be in [1, 65536]; got {args.mib}")
    if not 1 <= args.rounds <= 100:
        ap.error(f"--rounds must be in [1, 100]; got {args.rounds}")
    if args.hold and os.environ.get("INFERLAB_GEMV_HELD") != args.hold:
        env = dict(os.environ, **HOLD_ENV[args.hold], INFERLAB_GEMV_HELD=args.hold)
        return subprocess.call([sys.executable, __file__, *(argv if argv is not None else sys.argv[1:])], env=env)

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}, "
          f"{torch.get_num_threads()} threads, weight {SHAPE[0]} x {SHAPE[1]} fp32, {args.rounds} rounds")
    print(report(measure(args.mib, args.rounds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

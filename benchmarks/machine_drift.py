"""How steady is this machine? A decode step and a copy, timed alternately for a while.

    python benchmarks/machine_drift.py                    # 120 s, cpu-0.5b in bf16, B = 1, context 256
    python benchmarks/machine_drift.py --seconds 30 --dtype fp32

Why: `inferlab measure` predicts each point from an operator profile timed minutes earlier, so no
prediction can be closer than the machine is to itself from one minute to the next. This prints
that floor, measured in one run: the spread of one decode step's time (p90 / p10 of samples, each
the median of 3 steps) and the largest |sample / median - 1| a single point could show, then
whether the copy bandwidth (what the roofline divides by) moves with it: if it did, a drift could
be corrected by re-measuring it beside each point; if not, it cannot.

On the 2-core EPYC VM of the recorded runs (cpu-0.5b, bf16, two runs of 2-2.5 min) the decode
step's p90 / p10 was 1.28 and 1.24 (p10 63 ms, p90 78 ms) with /proc/stat showing no other
process, and the correlation of copy bandwidth with decode speed was -0.08 and +0.12: the drift
is the host's, invisible from inside and not tracked by the copy ceiling.
Exit status 0: this script reports.
"""
from __future__ import annotations

import argparse
import time

import numpy as np


MIN_SAMPLES = 3


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=120.0, help="how long to sample (default 120)")
    ap.add_argument("--model", default="cpu-0.5b", help="a preset or a name from `inferlab list`")
    ap.add_argument("--dtype", default="bf16", choices=("fp32", "bf16"))
    ap.add_argument("--context", type=int, default=256, help="cached positions of the decode step")
    args = ap.parse_args(argv)
    if args.seconds <= 0:
        ap.error(f"--seconds must be > 0; got {args.seconds}")

    import torch

    from inferlab.measure.ceilings import fill_random_, generator
    from inferlab.measure.plan import resolve_model
    from inferlab.measure.runner import fill_kv_cache_, random_model

    cfg = resolve_model(args.model)
    model = random_model(cfg, "cpu", args.dtype, 0)
    model.setup_cache(1, args.context)
    gen = generator("cpu", 1)
    fill_kv_cache_(model, gen)
    src = fill_random_(torch.empty(64 * 2 ** 20), gen)  # 256 MiB: far beyond any cache
    dst = torch.empty_like(src)
    tokens = [torch.randint(0, cfg.vocab_size, (1, 1), generator=gen) for _ in range(4)]

    def median_of_3(fn):
        samples = []
        for i in range(3):
            t0 = time.perf_counter()
            fn(i)
            samples.append(time.perf_counter() - t0)
        return float(np.median(samples))

    step = lambda i: model(tokens[i % 4], args.context - 1, all_logits=False)  # noqa: E731
    copy = lambda i: dst.copy_(src)  # noqa: E731
    copy_gbs, step_ms = [], []
    with torch.inference_mode():
        for i in range(3):  # warm-up
            step(i)
            copy(i)
        started = time.time()
        end = started + args.seconds
        # At least MIN_SAMPLES pairs (a correlation needs three), however long a busy machine makes them take.
        while time.time() < end or len(step_ms) < MIN_SAMPLES:
            copy_gbs.append(2 * src.numel() * 4 / median_of_3(copy) / 1e9)
            step_ms.append(median_of_3(step) * 1e3)
        took_s = time.time() - started
    c, d = np.array(copy_gbs), np.array(step_ms)
    med = float(np.median(d))
    print(f"{cfg.name} {args.dtype}, B = 1, context {args.context}, {torch.get_num_threads()} threads: "
          f"{d.size} samples in {took_s:.0f} s (asked {args.seconds:g} s, and at least {MIN_SAMPLES} samples)")
    print(f"decode step ms: min {d.min():.1f}, p10 {np.percentile(d, 10):.1f}, median {med:.1f}, "
          f"p90 {np.percentile(d, 90):.1f}, max {d.max():.1f}")
    print(f"copy GB/s:      min {c.min():.1f}, median {np.median(c):.1f}, max {c.max():.1f}")
    print(f"spread of the decode step, p90 / p10: {np.percentile(d, 90) / np.percentile(d, 10):.2f}; "
          f"a point timed at one moment is off the median by up to {np.max(np.abs(d / med - 1)):.0%}")
    if d.size >= 3 and np.std(c) > 0 and np.std(d) > 0:
        r = float(np.corrcoef(c, 1.0 / d)[0, 1])
        print(f"correlation of copy bandwidth with decode speed: {r:+.2f} "
              + ("(moves with it: a ceiling beside each point can correct the drift)" if r > 0.7 else
                 "(does not track it: re-measuring the copy ceiling cannot correct this drift)"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""`inferlab measure`: the measurement suite from the command line (torch loads only here)."""
from __future__ import annotations

import sys
import time
from pathlib import Path

DEFAULT_DIR = Path("build") / "measurements"


def register(subparsers) -> None:
    from inferlab.measure.plan import DECODE_MODES, PRESETS

    p = subparsers.add_parser(
        "measure", help="measure ceilings, TTFT, ITL, throughput, MBU and MFU on this machine",
        description="Measure copy bandwidth, matmul rate, a roofline, TTFT, ITL, the batch sweep, "
                    "MBU and MFU with a Llama-style model sized to the device, each beside the "
                    "library's prediction from the measured ceilings. TTFT, ITL and TPOT as vLLM's "
                    "serving benchmark defines them (see `inferlab.measure`).")
    p.add_argument("--quick", action="store_true",
                   help="fewer points, each stage within its budget (under 5 min on 2 CPU cores; see docs/measuring.md)")
    p.add_argument("--out", default=None,  # a str: Path("run/") would drop the slash that says "a folder"
                   help=f"JSON file to write (default: {DEFAULT_DIR}/measure-<device>-<time>.json)")
    p.add_argument("--device", default="auto", choices=("auto", "cuda", "mps", "cpu"),
                   help="where to measure; auto: a GPU if there is one")
    p.add_argument("--dtype", default="auto", choices=("auto", "fp32", "bf16", "fp16"),
                   help="auto: bf16 on a GPU; fp32 on a CPU unless bf16 products are faster there. On a CPU "
                        "without a fast bf16 path (no AVX512-BF16 or AMX) a one-second probe keeps bf16 out of "
                        "the run, and refuses --dtype bf16 with its figures")
    p.add_argument("--model", default=None,
                   help=f"a preset ({', '.join(PRESETS)}) or a name from `inferlab list` "
                        "(default: cpu-0.5b on a CPU, the largest Llama-2 that fits on a GPU)")
    p.add_argument("--decode-mode", default="auto", choices=DECODE_MODES,
                   help="auto: CUDA graphs on a GPU, compile on a CPU (torch.compile, inductor with "
                        "freezing and dynamic shapes; the eager step is timed beside it at B = 1), "
                        "eager elsewhere")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: one per core)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights and tokens")
    p.add_argument("--tp", type=int, default=None, metavar="K",
                   help="instead of the suite: tensor parallelism over K processes (torch.distributed: "
                        "gloo on the CPU, NCCL with one GPU per rank): all-reduce alpha/beta, TTFT and "
                        "ITL at K = 1 and K beside the library's TP prediction (default model cpu-0.5b; "
                        "dtype fp32 on a CPU, bf16 on GPUs; --device auto: cuda if there are K GPUs)")
    p.add_argument("--drift-correction", action="store_true",
                   help="rescale each calibrated prediction by its point's drift probe (off by default: it has not "
                        "helped yet; see docs/measuring.md)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.set_defaults(func=_cmd_measure)


def _cmd_measure(args) -> int:
    from inferlab.base.input_checks import nonneg_int, positive_int, writable_dir, writable_file

    # Bad options and unwritable outputs fail now, not after minutes of measuring.
    if args.threads is not None:
        positive_int("--threads", args.threads, maximum=4096)
    nonneg_int("--seed", args.seed)
    if args.out is not None:
        args.out = writable_file("--out", args.out)
    else:
        writable_dir("the default output folder", DEFAULT_DIR)
    from inferlab.measure.suite import SuiteConfig, run_suite

    def log(text):
        if args.no_progress:
            print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)

    if args.tp is not None:
        return _cmd_tp(args, log)
    result = run_suite(SuiteConfig(quick=args.quick, device=args.device, dtype=args.dtype, model=args.model,
                                   decode_mode=args.decode_mode, seed=args.seed, threads=args.threads,
                                   progress=not args.no_progress, log=log,
                                   drift_correction=args.drift_correction))
    out = args.out
    if out is None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        out = DEFAULT_DIR / f"measure-{result.device['kind']}-{stamp}.json"
    print(result.table())
    path = result.save(out)
    print(f"\nwrote {path}")
    return 0


def _cmd_tp(args, log) -> int:
    import torch

    from inferlab.measure import tp
    from inferlab.measure.plan import resolve_model

    device = args.device
    if device == "auto":  # NCCL where there is a GPU per rank, else gloo on the CPU
        device = "cuda" if torch.cuda.is_available() and torch.cuda.device_count() >= args.tp else "cpu"
    dtype = args.dtype if args.dtype != "auto" else ("bf16" if device == "cuda" else "fp32")
    try:
        doc = tp.measure_tp(tp=args.tp, model=resolve_model(args.model or "cpu-0.5b"), dtype=dtype, quick=args.quick,
                            seed=args.seed, device=device, log=log if args.no_progress else
                            (lambda text: print(text, file=sys.stderr, flush=True)))
    except ValueError as err:
        print(f"inferlab measure --tp: {err}", file=sys.stderr)
        return 2
    out = args.out or DEFAULT_DIR / f"tp{args.tp}-{device}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    print(tp.tp_table(doc))
    print(f"\nwrote {tp.save(doc, out)}")
    return 0

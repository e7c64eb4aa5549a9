"""The options that choose how fast each kernel runs, shared by `inferlab estimate`, `serve` and
`serving compare`: --efficiency (inferlab.core.efficiency), --step-overhead-ms and --step-overhead (the
profiles of an engine's CPU time per step, core.kernels.StepOverhead)."""
from __future__ import annotations

from inferlab.base.input_checks import choice, positive_float
from inferlab.base.units import MS

EFFICIENCY_CHOICES = ("ideal", "measured")
STEP_OVERHEAD_PROFILES = ("vidur-a100",)
MAX_STEP_OVERHEAD_MS = 10_000.0  # kernels.StepOverhead's bound: 10 s per step


def add_efficiency_options(p) -> None:
    """--efficiency, --step-overhead-ms and --step-overhead (estimate, serve, serving compare)."""
    p.add_argument("--efficiency", default="ideal", choices=list(EFFICIENCY_CHOICES),
                   help="how fast each kernel runs: ideal, the roofline at --mfu/--mbu (below 1: fixed knobs); "
                        "measured, Vidur's published H100/A100 kernel times (--gpu h100-sxm or a100-80gb; "
                        "attention on the ideal roofline)")
    p.add_argument("--step-overhead-ms", type=float, default=None,
                   help="the engine's CPU time per step, ms, added to every pass (unset: none)")
    p.add_argument("--step-overhead", default=None, choices=list(STEP_OVERHEAD_PROFILES),
                   help="the engine's CPU time per step from Vidur's A100 scheduler profile: the model's own "
                        "entry at the nearest profiled TP, else Llama-2 7B at TP 1 (unset: none)")


def vidur_step_overhead(model_name: str, tp: int):
    """Vidur's A100 scheduler profile for `model_name` at `tp`: its own entry at the nearest profiled TP
    when the profile has the model, else Llama-2 7B at TP 1. Returns the StepOverhead and a note naming
    the stand-in ('' when the entry is the model's own at this TP)."""
    from inferlab.core.kernels import PROFILE_MODELS, StepOverhead
    from inferlab.core.kernels.profiles import cpu_overhead_rows
    name = model_name if model_name in PROFILE_MODELS else "llama-2-7b"
    tps = sorted(t for m, t in cpu_overhead_rows() if m == PROFILE_MODELS[name])
    if name != model_name:
        nearest = 1
    else:
        nearest = min(tps, key=lambda t: (abs(t - tp), t))
    overhead = StepOverhead.from_profile(name, nearest)
    note = "" if (name, nearest) == (model_name, tp) else f", standing in for {model_name} at TP {tp}"
    return overhead, note


def efficiency_from_options(args, model, acc, precision, tp: int) -> tuple:
    """(efficiency, step_overhead, note) from --efficiency, --mfu/--mbu, --step-overhead-ms and
    --step-overhead; a combination that cannot be timed is one line naming the options."""
    from inferlab.core.efficiency import MEASURED_DTYPES, MeasuredKernels
    from inferlab.core.kernels import StepOverhead, check_measured
    choice("--efficiency", args.efficiency, EFFICIENCY_CHOICES)
    efficiency = None
    if args.efficiency == "measured":
        if args.mfu != 1 or args.mbu != 1:
            raise ValueError(f"--efficiency measured times the kernels as measured; --mfu and --mbu (the roofline's "
                             f"knobs) must stay 1; got --mfu {args.mfu:g}, --mbu {args.mbu:g}")
        try:
            check_measured(acc, "--gpu")
        except ValueError as err:
            raise ValueError(f"--efficiency measured: {err}") from None
        for option, dtype in (("--weights-dtype", precision.weights), ("--activations-dtype", precision.activations)):
            if dtype not in MEASURED_DTYPES:
                raise ValueError(f"--efficiency measured was measured on 16-bit products; {option} must be one of "
                                 f"{', '.join(MEASURED_DTYPES)}; got {dtype}")
        efficiency = MeasuredKernels()
    overhead, note = None, ""
    if args.step_overhead_ms is not None and args.step_overhead is not None:
        raise ValueError(f"give one of --step-overhead-ms ({args.step_overhead_ms:g}) and --step-overhead "
                         f"({args.step_overhead}), not both")
    if args.step_overhead_ms is not None:
        positive_float("--step-overhead-ms", args.step_overhead_ms, allow_zero=True, maximum=MAX_STEP_OVERHEAD_MS)
        overhead = StepOverhead.constant(args.step_overhead_ms * MS)
    elif args.step_overhead is not None:
        choice("--step-overhead", args.step_overhead, STEP_OVERHEAD_PROFILES)
        overhead, note = vidur_step_overhead(model.name, tp)
    return efficiency, overhead, note


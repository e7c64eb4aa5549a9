"""The options that choose how fast each kernel runs, shared by `inferlab estimate`, `serve` and
`serving compare`: --efficiency (inferlab.core.efficiency), --attention (the measured kernels' attention),
--step-overhead-ms, --step-overhead and --engine-overhead (the profiles of an engine's CPU time per step,
core.kernels.StepOverhead)."""
from __future__ import annotations

from inferlab.base.input_checks import choice, positive_float
from inferlab.base.units import MS

EFFICIENCY_CHOICES = ("ideal", "measured")
STEP_OVERHEAD_PROFILES = ("vidur-a100",)
ATTENTION_CHOICES = ("ideal", "published")
# Named per-step engine-time profiles (--engine-overhead), each with its source. A C++ in-flight-batching
# runtime's (TensorRT-LLM's) per-step time is not here: no published per-step breakdown of it was found.
ENGINE_OVERHEADS = {"none": "no engine time (the chapter's pages)",
                    "python-scheduler": "a Python scheduler's CPU time per step: Vidur's published A100 profile of "
                                        "sarathi-serve (schedule + sampler + input preparation + output processing)"}
MAX_STEP_OVERHEAD_MS = 10_000.0  # kernels.StepOverhead's bound: 10 s per step


def add_efficiency_options(p) -> None:
    """--efficiency, --step-overhead-ms and --step-overhead (estimate, serve, serving compare)."""
    p.add_argument("--efficiency", default="ideal", choices=list(EFFICIENCY_CHOICES),
                   help="how fast each kernel runs: ideal, the roofline at --mfu/--mbu (below 1: fixed knobs); "
                        "measured, published kernel times (Vidur's H100/A100 16-bit profiles, DeepGEMM's FP8 "
                        "W8A8 table; --gpu h100-sxm or a100-80gb, h200 carried from the H100 by bandwidth)")
    p.add_argument("--attention", default="ideal", choices=list(ATTENTION_CHOICES),
                   help="--efficiency measured: attention on the ideal roofline (default) or at the shares published "
                        "attention kernels reach (FlashAttention-3, FlashMLA; Hopper GPUs)")
    p.add_argument("--engine-overhead", default="none", choices=list(ENGINE_OVERHEADS),
                   help="a named per-step engine-time profile: " + "; ".join(f"{k}, {v}" for k, v in
                                                                            ENGINE_OVERHEADS.items()))
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
    from inferlab.core.efficiency import MeasuredKernels, check_measured_precision
    from inferlab.core.kernels import StepOverhead, check_measured
    from inferlab.core.kernels.attention_published import check_published_attention
    choice("--efficiency", args.efficiency, EFFICIENCY_CHOICES)
    attention = getattr(args, "attention", "ideal")
    choice("--attention", attention, ATTENTION_CHOICES)
    engine = getattr(args, "engine_overhead", "none")
    choice("--engine-overhead", engine, tuple(ENGINE_OVERHEADS))
    if "fp8" in (precision.activations, precision.compute_dtype) and "fp8" not in acc.peak_flops_per_s:
        raise ValueError(f"--activations-dtype fp8: the {acc.name} has no FP8 tensor cores (its peaks: "
                         f"{', '.join(acc.peak_flops_per_s)}); use bf16 activations on it")
    if attention != "ideal" and args.efficiency != "measured":
        raise ValueError(f"--attention {attention} applies to --efficiency measured; got --efficiency {args.efficiency}")
    efficiency = None
    if args.efficiency == "measured":
        if args.mfu != 1 or args.mbu != 1:
            raise ValueError(f"--efficiency measured times the kernels as measured; --mfu and --mbu (the roofline's "
                             f"knobs) must stay 1; got --mfu {args.mfu:g}, --mbu {args.mbu:g}")
        try:
            check_measured(acc, "--gpu")
        except ValueError as err:
            raise ValueError(f"--efficiency measured: {err}") from None
        try:
            check_measured_precision(precision, acc, "--weights-dtype/--activations-dtype:")
        except ValueError as err:
            raise ValueError(f"--efficiency measured: {err}") from None
        if attention == "published":
            try:
                check_published_attention(acc, precision.compute_dtype, "--gpu")
            except ValueError as err:
                raise ValueError(f"--attention published: {err}") from None
        efficiency = MeasuredKernels(attention=attention)
    overhead, note = None, ""
    given = [f"{o} {v}" for o, v in (("--step-overhead-ms", args.step_overhead_ms),
                                      ("--step-overhead", args.step_overhead),
                                      ("--engine-overhead", None if engine == "none" else engine)) if v is not None]
    if len(given) > 1:
        raise ValueError(f"give one engine time per step, not {' and '.join(given)}")
    if engine == "python-scheduler":
        import dataclasses
        overhead, note = vidur_step_overhead(model.name, tp)
        return efficiency, dataclasses.replace(overhead, label=f"engine time python-scheduler, {overhead.label}"), note
    if args.step_overhead_ms is not None:
        positive_float("--step-overhead-ms", args.step_overhead_ms, allow_zero=True, maximum=MAX_STEP_OVERHEAD_MS)
        overhead = StepOverhead.constant(args.step_overhead_ms * MS)
    elif args.step_overhead is not None:
        choice("--step-overhead", args.step_overhead, STEP_OVERHEAD_PROFILES)
        overhead, note = vidur_step_overhead(model.name, tp)
    return efficiency, overhead, note


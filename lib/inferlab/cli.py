"""Command line: `inferlab list`, `inferlab estimate ...`, and the subcommands other modules register.

Each subcommand module exposes `register(subparsers)`; heavy imports (torch) stay inside handlers
so `inferlab list` answers instantly.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
from dataclasses import dataclass

import numpy as np

from inferlab.specs import Precision, get_accelerator, get_model, list_accelerators, list_hf_configs, list_models, resolve_model
from inferlab.units import DTYPES, GB, MS
from inferlab.input_checks import MAX_INT, choice, fraction, nonneg_int, positive_float, positive_int

# Modules that add subcommands (each has register(subparsers)); missing ones are skipped.
SUBCOMMAND_MODULES = ("inferlab.claims.cli", "inferlab.measure.cli", "inferlab.figures",
                      "inferlab.exercises.cli", "inferlab.serving.cli")
# --beyond-context computes a context the model cannot hold, as a yardstick (the book's 100k-token
# prompt on Llama-2 13B is 24x its 4,096); past 1000x the model's context the numbers measure nothing.
YARDSTICK_MAX_CONTEXTS = 1000


def _cmd_list(args) -> int:
    print("Models (exact parameter count from the architecture):")
    for name in list_models():
        m = get_model(name)
        print(f"  {name:18s} {m.n_params / 1e9:7.3f} B params  L={m.n_layers:<3d} d={m.d_model:<5d} "
              f"heads={m.n_heads}/{m.n_kv_heads} kv ({m.attention_kind})  "
              f"{'gated' if m.gated_mlp else 'plain'} MLP d_ff={m.d_ff}")
    print("\nHugging Face configs in data/hf-configs (--model NAME, or --model PATH for your own config.json):")
    for name in list_hf_configs():
        m = resolve_model(name)
        moe = f"  {m.n_experts} experts, top {m.experts_per_token}" if m.is_moe else ""
        attn = "MLA" if m.is_mla else "/".join(sorted(set(m.layer_kinds)))
        print(f"  {name:18s} {m.n_params / 1e9:7.3f} B params  {m.n_params_active / 1e9:7.3f} B active  "
              f"L={m.n_layers:<3d} d={m.d_model:<5d} attention {attn}{moe}")
    print("\nAccelerators (dense peaks; GB = 1e9 bytes):")
    for name in list_accelerators():
        a = get_accelerator(name)
        peaks = ", ".join(f"{k} {v / 1e12:g}" for k, v in a.peak_flops_per_s.items())
        print(f"  {name:10s} {a.memory_bytes / GB:5.0f} GB  {a.hbm_bytes_per_s / 1e12:5.2f} TB/s  "
              f"TFLOP/s: {peaks}")
    return 0


# `--efficiency`: how fast each kernel runs (inferlab.efficiency); `--step-overhead`: the profiles of
# an engine's CPU time per step (kernels.StepOverhead).
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
    from inferlab.kernels import PROFILE_MODELS, StepOverhead
    from inferlab.kernels.profiles import cpu_overhead_rows
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
    from inferlab.efficiency import MEASURED_DTYPES, MeasuredKernels
    from inferlab.kernels import StepOverhead, check_measured
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


@dataclass(frozen=True)
class _Estimate:
    """What `inferlab estimate` computed for one configuration, for its two printers (JSON and text)."""

    model: object
    acc: object
    prec: Precision
    dep: object            # the Deployment every time is computed on
    efficiency: object     # the efficiency model the options chose (None: the ideal roofline)
    overhead: object       # the scheduler's step overhead (None: none)
    overhead_note: str
    shard: object          # the model's shard on one device
    context: int           # the longest the sequence gets (the KV cache holds it)
    decode_context: int    # the decode step's context (ITL, throughput, B*)
    budget: object
    ttft: float
    itl: float
    bmax: int | None
    bmax_text: str
    yard: dict             # beyond_context, passed to every call


def _check_estimate_options(args) -> None:
    """Check the options under the names the user typed, before any library call renames them."""
    for name in ("batch", "prompt", "tp"):
        positive_int(f"--{name}", getattr(args, name))
    nonneg_int("--output", args.output)
    if args.context is not None:
        positive_int("--context", args.context)
    fraction("--mfu", args.mfu)
    fraction("--mbu", args.mbu)
    positive_float("--usd-per-gpu-hour", args.usd_per_gpu_hour, allow_zero=True)
    positive_float("--allreduce-latency-us", args.allreduce_latency_us, allow_zero=True, maximum=1e6)


def _estimate_contexts(args, model) -> tuple:
    """(decode_context, context): the decode step's context (ITL, throughput, B*), --context, else
    prompt + output; and the longest the sequence gets, which the KV cache holds. Refused beyond the
    model's context window unless --beyond-context (then up to YARDSTICK_MAX_CONTEXTS times it)."""
    from inferlab.context import context_message, within_context

    decode_context = args.context if args.context is not None else args.prompt + args.output
    context = max(args.prompt + args.output, decode_context)
    if args.batch * context > MAX_INT:
        raise ValueError(f"--batch x (--prompt + --output) must be <= 2**63 - 1 tokens; got "
                         f"{args.batch} x {context} = {args.batch * context:.3g}")
    if not args.beyond_context and not within_context(model, context):
        raise ValueError(f"--prompt + --output = {context}: " + context_message(model, context)
                         + f"; allowed: <= {model.max_context_tokens}, or add --beyond-context for a yardstick")
    if args.beyond_context and context > YARDSTICK_MAX_CONTEXTS * model.max_context_tokens:
        raise ValueError(f"--prompt + --output = {context:,} tokens is beyond any yardstick for {model.name}; allowed "
                         f"with --beyond-context: <= {YARDSTICK_MAX_CONTEXTS * model.max_context_tokens:,} "
                         f"({YARDSTICK_MAX_CONTEXTS} x its maximum context of {model.max_context_tokens:,} tokens)")
    return decode_context, context


def _estimate(args) -> _Estimate:
    """Check the options, resolve the model and accelerator, and compute the configuration's memory
    budget, TTFT, ITL and largest batch."""
    from inferlab.deployment import Deployment
    from inferlab.latency import decode_step_time_s, prefill_time_s
    from inferlab.memory import max_batch, memory_budget
    from inferlab.parallel import tp_shard

    _check_estimate_options(args)
    model, acc = resolve_model(args.model), get_accelerator(args.gpu)
    # Memory kept free on each device: at most all of it (beyond, every configuration is "does not fit").
    positive_float("--reserved-gb", args.reserved_gb, allow_zero=True, maximum=acc.memory_bytes / GB)
    prec = Precision(weights=args.weights_dtype, activations=args.activations_dtype, kv=args.kv_dtype)
    efficiency, overhead, overhead_note = efficiency_from_options(args, model, acc, prec, args.tp)
    if efficiency is not None and args.allreduce_latency_us != args.allreduce_latency_default_us:
        raise ValueError(f"--allreduce-latency-us applies to --efficiency ideal (the measured all-reduces include "
                         f"their latency); leave it out; got {args.allreduce_latency_us:g}")
    decode_context, context = _estimate_contexts(args, model)
    shard = tp_shard(model, args.tp)
    measured_or_unset = efficiency is not None or args.allreduce_latency_us is None
    latency_s = None if measured_or_unset else args.allreduce_latency_us * 1e-6
    dep = Deployment(acc, prec, tp=args.tp, mfu=args.mfu, mbu=args.mbu, allreduce=not args.no_allreduce,
                     allreduce_latency_s=latency_s, efficiency=efficiency, step_overhead=overhead)
    yard = dict(beyond_context=args.beyond_context)
    budget = memory_budget(model, acc, args.batch, context, prec, tp=args.tp,
                           reserved_bytes=args.reserved_gb * GB, **yard)
    ttft = prefill_time_s(model, dep, args.prompt, args.batch, **yard)
    itl = decode_step_time_s(model, dep, decode_context, args.batch, **yard)
    try:
        bmax = max_batch(model, acc, context, prec, tp=args.tp, reserved_bytes=args.reserved_gb * GB, **yard)
        bmax_text = str(bmax)
    except ValueError as err:
        bmax, bmax_text = None, f"none ({err})"
    return _Estimate(model, acc, prec, dep, efficiency, overhead, overhead_note, shard, context, decode_context,
                     budget, ttft, itl, bmax, bmax_text, yard)


def _print_estimate_json(args, e: _Estimate) -> None:
    from inferlab.latency import prefill_time_s
    from inferlab.memory import kv_cache_bytes, weight_bytes

    model, acc, prec, dep, overhead, yard = e.model, e.acc, e.prec, e.dep, e.overhead, e.yard
    alone = prefill_time_s(model, dep, args.prompt, 1, **yard)
    eff = dep.efficiency_model
    print(json.dumps({
        "model": model.name, "accelerator": acc.name, "tp": args.tp,
        "efficiency": {"name": eff.name, "label": eff.label_on(acc)},
        "step_overhead": None if overhead is None else overhead.label + e.overhead_note,
        "step_overhead_s": None if overhead is None else overhead.time_s(args.batch),
        "batch": args.batch, "prompt": args.prompt, "output": args.output, "context": e.decode_context,
        "params_total": model.n_params, "params_active": model.n_params_active,  # MoE: the experts a token uses
        "weights_bytes": weight_bytes(model, prec),
        "kv_cache_bytes_per_sequence": kv_cache_bytes(model, e.context, 1, prec, **yard),
        "per_device": {"weights_bytes": e.budget.weight_bytes, "kv_cache_bytes": e.budget.kv_bytes,
                       "free_bytes": e.budget.free_bytes},
        "ttft_s": alone, "prefill_batch_s": e.ttft, "itl_s": e.itl,
        "throughput_tokens_per_s": args.batch / e.itl, "max_batch": e.bmax, "fits": bool(e.budget.fits),
    }, indent=2))


def _print_estimate_text(args, e: _Estimate) -> None:
    from inferlab.context import context_message, within_context
    from inferlab.costs import decode_costs, prefill_costs
    from inferlab.latency import cost_per_1k_tokens_usd, kv_crossover_batch, prefill_time_s
    from inferlab.memory import kv_cache_bytes
    from inferlab.roofline import ridge_point, time_weighted_regime

    model, acc, prec, dep, budget, yard = e.model, e.acc, e.prec, e.dep, e.budget, e.yard
    context, decode_context, ttft, itl = e.context, e.decode_context, e.ttft, e.itl
    dtype = prec.compute_dtype
    pre_regime = time_weighted_regime(prefill_costs(e.shard, args.batch, args.prompt, prec, **yard), acc, dtype)
    dec_regime = time_weighted_regime(decode_costs(e.shard, args.batch, decode_context, prec, **yard), acc, dtype)

    print(f"{model.name} on {args.tp} x {acc.name}: batch {args.batch}, prompt {args.prompt}, "
          f"output {args.output} tokens; weights {prec.weights}, activations {prec.activations}, "
          f"KV {prec.kv}; {dep.describe()}{e.overhead_note}"
          + (f"; all-reduce latency {args.allreduce_latency_us:g} us"
             if args.tp > 1 and not args.no_allreduce and e.efficiency is None else ""))
    if not within_context(model, context):
        print(f"warning: {context_message(model, context)}", file=sys.stderr)
    print(f"ridge point {ridge_point(acc, dtype):.0f} FLOP/byte ({dtype})")
    print("memory per device (GB = 1e9 bytes):")
    print(f"  weights {budget.weight_bytes / GB:8.2f} GB")
    print(f"  KV cache {budget.kv_bytes / GB:7.2f} GB  ({kv_cache_bytes(model, context, 1, prec, args.tp, **yard) / GB:.3f} GB "
          f"per sequence of {context} tokens)")
    print(f"  free     {budget.free_bytes / GB:8.2f} GB of {acc.memory_bytes / GB:.0f} GB  -> "
          f"{'fits' if budget.fits else 'DOES NOT FIT'}; max batch at this context: {e.bmax_text}")
    print(f"prefill / TTFT   {ttft / MS:9.2f} ms   ({pre_regime}-bound)")
    if args.batch > 1:
        alone = prefill_time_s(model, dep, args.prompt, 1, **yard)
        print(f"  ({args.batch} prompts in one pass; one prompt alone: {alone / MS:.2f} ms)")
    print(f"decode step/ITL  {itl / MS:9.2f} ms   ({dec_regime}-bound, at context {decode_context})")
    thr = args.batch / itl
    print(f"decode throughput {thr:9.0f} tokens/s  ({thr / args.batch:.0f} per sequence)")
    print(f"KV-crossover B*  {kv_crossover_batch(model, decode_context, prec, args.tp, **yard):9.1f}")
    if args.usd_per_gpu_hour:
        cost = cost_per_1k_tokens_usd(thr, args.usd_per_gpu_hour, args.tp)
        print(f"cost             ${cost:.5f} per 1k output tokens at ${args.usd_per_gpu_hour}/GPU-hour")


def _cmd_estimate(args) -> int:
    """`inferlab estimate`: one configuration's memory, TTFT, ITL, throughput and cost, as text or JSON.
    Exit status 2 where the configuration does not fit in memory (the times are then for an impossible run)."""
    from inferlab.context import context_message, within_context

    e = _estimate(args)
    if args.json:
        _print_estimate_json(args, e)
        if not within_context(e.model, e.context):
            print(f"warning: {context_message(e.model, e.context)}", file=sys.stderr)
    else:
        _print_estimate_text(args, e)
    if not e.budget.fits:
        print("warning: this configuration does not fit in memory; times are for an impossible run",
              file=sys.stderr)
        return 2
    return 0


class OneLineErrorParser(argparse.ArgumentParser):
    """argparse, but a value it cannot parse (`--batch x`) is one line naming the argument and the value,
    with a pointer to --help, instead of a usage block; exit status 2 as before."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's help shows its default (flags and options without one excepted)."""


def _tidy_help(parser: argparse.ArgumentParser) -> None:
    """Recursively: show defaults in every sub-command's help, and hide internal sub-commands (names
    starting with '_') from the usage line and the list of commands."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            action._choices_actions = [a for a in action._choices_actions if not a.dest.startswith("_")]
            visible = [name for name in action.choices if not name.startswith("_")]
            action.metavar = "{" + ",".join(visible) + "}"
            for sub in action.choices.values():
                sub.formatter_class = _HelpFormatter
                _tidy_help(sub)


def build_parser() -> argparse.ArgumentParser:
    from inferlab.parallel import DEFAULT_ALLREDUCE_LATENCY_S

    parser = OneLineErrorParser(prog="inferlab", description=__doc__.splitlines()[0],
                                     formatter_class=_HelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="known models and accelerators").set_defaults(func=_cmd_list)

    est = sub.add_parser("estimate", help="memory, TTFT, ITL, throughput and regimes of one configuration")
    est.add_argument("--model", default="llama-2-13b-book",
                     help="a name from `inferlab list`, or a path to a Hugging Face config.json (or its folder)")
    est.add_argument("--gpu", default="h100-sxm", help="an accelerator from `inferlab list`")
    est.add_argument("--batch", type=int, default=1, help="concurrent sequences B")
    est.add_argument("--prompt", type=int, default=1024,
                     help="prompt length S in tokens (prompt + output must fit the model's context)")
    est.add_argument("--output", type=int, default=0, help="tokens generated; ITL is at context prompt+output")
    est.add_argument("--context", type=int, default=None,
                     help="the decode step's context in tokens (ITL, throughput, B*; unset: prompt + output); "
                          "memory holds the longer of it and prompt + output")
    est.add_argument("--beyond-context", action="store_true",
                     help="allow prompt + output beyond the model's maximum context (a yardstick only)")
    est.add_argument("--tp", type=int, default=1, help="tensor-parallel degree")
    est.add_argument("--no-allreduce", action="store_true", help="ignore tensor-parallel communication")
    est.add_argument("--allreduce-latency-us", type=float, default=DEFAULT_ALLREDUCE_LATENCY_S * 1e6,
                     help="start-up latency of each all-reduce under tensor parallelism, microseconds "
                          "(NVLink; peer calculators use 5-10; 0 reproduces the book's idealisation)")
    for cls, default in (("weights", "bf16"), ("activations", "bf16"), ("kv", "bf16")):
        est.add_argument(f"--{cls}-dtype", default=default, choices=list(DTYPES),
                         help=f"number format of the {cls}")
    est.add_argument("--mfu", type=float, default=1.0, help="achieved fraction of peak FLOP/s")
    est.add_argument("--mbu", type=float, default=1.0, help="achieved fraction of peak bandwidth")
    add_efficiency_options(est)
    est.add_argument("--json", action="store_true",
                     help="print one JSON object: the configuration, efficiency, memory, TTFT of one prompt, ITL, "
                          "throughput, max batch, fits")
    est.add_argument("--reserved-gb", type=float, default=0.0, help="memory kept free (activations, slack)")
    est.add_argument("--usd-per-gpu-hour", type=float, default=0.0,
                     help="price of one GPU-hour in dollars; 0: no cost line")
    est.set_defaults(func=_cmd_estimate, allreduce_latency_default_us=est.get_default("allreduce_latency_us"))

    for modname in SUBCOMMAND_MODULES:
        try:
            module = importlib.import_module(modname)
        except ModuleNotFoundError as err:
            if err.name and modname.startswith(err.name):
                continue
            raise
        module.register(sub)
    _tidy_help(parser)
    return parser


def _option_names(parser: argparse.ArgumentParser, names=None) -> dict:
    """{dest: how the user types it} over every sub-command: '--policy' for options, the dest for
    positionals."""
    names = {} if names is None else names
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _option_names(sub, names)
        elif action.dest not in names:
            names[action.dest] = action.option_strings[-1] if action.option_strings else action.dest
    return names


def refuse_empty_strings(args, names: dict) -> None:
    """An empty string is not "not given": `--policy ""` or `--output ""` must not fall back to a
    default (or, for --output, to the repository's own file). ValueError naming the option."""
    for dest, value in vars(args).items():
        values = value if isinstance(value, list) else [value]
        if any(isinstance(v, str) and v.strip() == "" for v in values):
            raise ValueError(f"{names.get(dest, dest)} must not be empty; got {value!r}")


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        refuse_empty_strings(args, _option_names(parser))
        return args.func(args)
    except BrokenPipeError:  # output piped into `head` and closed early: not an error
        sys.stderr.close()
        return 0
    except (ValueError, OverflowError) as err:  # bad input: one clear line, no traceback
        print(f"inferlab: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # missing folder, a directory given for a file, unwritable, /proc/...
        where = f"{err.filename}: " if err.filename else ""
        print(f"inferlab {args.command}: error: {where}{err.strerror or err}", file=sys.stderr)
        return 2
    except MemoryError:  # a backstop: the options' bounds are meant to stop this before any work
        print(f"inferlab {args.command}: error: ran out of memory; use smaller options", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"inferlab {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

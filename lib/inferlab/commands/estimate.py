"""`inferlab estimate`: memory, TTFT, ITL, throughput and regimes of one configuration."""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass


from inferlab.base.input_checks import MAX_INT, fraction, nonneg_int, positive_float, positive_int
from inferlab.base.units import DTYPES, GB, MS
from inferlab.commands.checkpoint_options import checkpoint_precision
from inferlab.commands.efficiency_options import add_efficiency_options, efficiency_from_options
from inferlab.core.specs import Precision, get_accelerator, resolve_model

# --beyond-context computes a context the model cannot hold, as a yardstick (the book's 100k-token
# prompt on Llama-2 13B is 24x its 4,096); past 1000x the model's context the numbers measure nothing.
YARDSTICK_MAX_CONTEXTS = 1000


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
    weights_note: str      # how the weights are stored and computed (the checkpoint's, or --weights-dtype)
    usable_note: str = ""  # the usable-memory convention, in words


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
    from inferlab.core.context import context_message, within_context

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


def _convention(args, acc):
    """--gpu-memory-utilization and --memory-capacity as a core.usable_memory convention: unset, the
    chapter's arithmetic (all of the capacity); set, vLLM's fraction of the total."""
    from inferlab.core.usable_memory import MemoryConvention
    u = args.gpu_memory_utilization
    if u is not None and not 0 < u <= 1:
        raise ValueError(f"--gpu-memory-utilization must be in (0, 1]; got {u:g}")
    conv = MemoryConvention("book" if u is None else "vllm", args.memory_capacity, u)
    if args.memory_capacity == "reported" and acc.reported_memory_bytes is None:
        raise ValueError(f"--memory-capacity reported: {acc.name} has no reported capacity in data/accelerators.toml; "
                         "allowed: datasheet")
    return conv


def _estimate(args) -> _Estimate:
    """Check the options, resolve the model and accelerator, and compute the configuration's memory
    budget, TTFT, ITL and largest batch."""
    from inferlab.core.deployment import Deployment
    from inferlab.core.latency import decode_step_time_s, prefill_time_s
    from inferlab.core.memory import max_batch, memory_budget, weight_bytes
    from inferlab.core.parallel import tp_shard

    _check_estimate_options(args)
    model, acc = resolve_model(args.model), get_accelerator(args.gpu)
    # Memory kept free on each device: at most all of it (beyond, every configuration is "does not fit").
    convention = _convention(args, acc)
    positive_float("--reserved-gb", args.reserved_gb, allow_zero=True, maximum=convention.capacity_bytes(acc) / GB)
    prec, weights_note = _precision(args, model, acc)
    if prec.checkpoint is not None and getattr(args, "efficiency", None) == "measured":
        raise ValueError(f"--efficiency measured was measured on 16-bit products; the checkpoint of {model.name} stores "
                         f"{prec.checkpoint.describe(model)}; add --weights-dtype bf16 to cost it in bf16")
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
    w = weight_bytes(model, prec, args.tp)
    usable = convention.usable_bytes(acc, w)
    budget = memory_budget(model, acc, args.batch, context, prec, tp=args.tp,
                           reserved_bytes=args.reserved_gb * GB, usable_bytes=usable, **yard)
    ttft = prefill_time_s(model, dep, args.prompt, args.batch, **yard)
    itl = decode_step_time_s(model, dep, decode_context, args.batch, **yard)
    try:
        bmax = max_batch(model, acc, context, prec, tp=args.tp, reserved_bytes=args.reserved_gb * GB,
                         usable_bytes=usable, **yard)
        bmax_text = str(bmax)
    except ValueError as err:
        bmax, bmax_text = None, f"none ({err})"
    return _Estimate(model, acc, prec, dep, efficiency, overhead, overhead_note, shard, context, decode_context,
                     budget, ttft, itl, bmax, bmax_text, yard, weights_note,
                     convention.describe(acc, w))


def _precision(args, model, acc) -> tuple:
    """(Precision, how the weights are held): `checkpoint_precision` with the options as given."""
    return checkpoint_precision(model, acc, args.weights_dtype, args.activations_dtype, args.kv_dtype)


def _print_estimate_json(args, e: _Estimate) -> None:
    from inferlab.core.latency import prefill_time_s
    from inferlab.core.memory import kv_cache_bytes, weight_bytes
    from inferlab.core.quantization import weight_bytes_by_format

    model, acc, prec, dep, overhead, yard = e.model, e.acc, e.prec, e.dep, e.overhead, e.yard
    alone = prefill_time_s(model, dep, args.prompt, 1, **yard)
    eff = dep.efficiency_model
    print(json.dumps({
        "model": model.name, "accelerator": acc.name, "tp": args.tp,
        "efficiency": {"name": eff.name, "label": eff.label_on(acc, prec)},
        "step_overhead": None if overhead is None else overhead.label + e.overhead_note,
        "step_overhead_s": None if overhead is None else overhead.time_s(args.batch),
        "batch": args.batch, "prompt": args.prompt, "output": args.output, "context": e.decode_context,
        "config_reader": model.config_reader or "data/models.toml",
        "max_context_tokens": model.max_context_tokens, "max_context_source": model.max_context_source,
        "params_total": model.n_params, "params_active": model.n_params_active,  # MoE: the experts a token uses
        "params_active_with_input_embedding": model.n_params_active,
        "params_active_without_input_embedding": model.n_params_active - model.vocab_size * model.d_model,
        "not_counted": [{"part": part, "params": params} for part, params in model.not_counted],
        "weights": {"stored_as": e.weights_note or f"{prec.weights} (every parameter)",
                    "checkpoint": None if model.quantization is None else model.quantization.describe(model),
                    "overrides_checkpoint": model.quantization is not None and prec.checkpoint is None,
                    "compute_dtype": prec.compute_dtype},
        "weights_bytes": weight_bytes(model, prec),
        "weights_bytes_by_format": weight_bytes_by_format(model, prec),
        "kv_cache_bytes_per_sequence": kv_cache_bytes(model, e.context, 1, prec, **yard),
        "per_device": {"weights_bytes": e.budget.weight_bytes, "kv_cache_bytes": e.budget.kv_bytes,
                       "free_bytes": e.budget.free_bytes},
        "ttft_s": alone, "prefill_batch_s": e.ttft, "itl_s": e.itl,
        "throughput_tokens_per_s": args.batch / e.itl, "max_batch": e.bmax, "fits": bool(e.budget.fits),
        "usable_memory": {"bytes": e.budget.capacity_bytes, "convention": e.usable_note},
    }, indent=2))


def _print_estimate_text(args, e: _Estimate) -> None:
    from inferlab.core.context import context_message, within_context
    from inferlab.core.costs import decode_costs, prefill_costs
    from inferlab.core.latency import cost_per_1k_tokens_usd, kv_crossover_batch, prefill_time_s
    from inferlab.core.memory import kv_cache_bytes
    from inferlab.core.roofline import ridge_point, time_weighted_regime

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
    if e.weights_note:
        print(f"weights {e.weights_note}")
    if model.not_counted:
        print("not counted: " + "; ".join(f"{part} ({'parameters not described' if n is None else f'{n:,} parameters'})"
                                           for part, n in model.not_counted))
    if not within_context(model, context):
        print(f"warning: {context_message(model, context)}", file=sys.stderr)
    print(f"ridge point {ridge_point(acc, dtype):.0f} FLOP/byte ({dtype})")
    print(f"memory per device (GB = 1e9 bytes; usable: {e.usable_note}):")
    print(f"  weights {budget.weight_bytes / GB:8.2f} GB")
    print(f"  KV cache {budget.kv_bytes / GB:7.2f} GB  ({kv_cache_bytes(model, context, 1, prec, args.tp, **yard) / GB:.3f} GB "
          f"per sequence of {context} tokens)")
    print(f"  free     {budget.free_bytes / GB:8.2f} GB of {budget.capacity_bytes / GB:.1f} GB usable  -> "
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
    --json: exit status 0 whenever it answered (`fits` true or false); a refused input is exit 2 with one
    line on stderr and nothing on stdout (raised before anything is printed). Text: exit status 2 where
    the configuration does not fit in memory (the times are then for an impossible run)."""
    from inferlab.core.context import context_message, within_context

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
        return 0 if args.json else 2
    return 0



def register(sub) -> None:
    from inferlab.core.parallel import DEFAULT_ALLREDUCE_LATENCY_S

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
    est.add_argument("--weights-dtype", default=None, choices=list(DTYPES),
                     help="number format of every weight (unset: a quantized checkpoint's own formats, "
                          "else bf16)")
    for cls, default in (("activations", "bf16"), ("kv", "bf16")):
        est.add_argument(f"--{cls}-dtype", default=default, choices=list(DTYPES),
                         help=f"number format of the {cls}")
    est.add_argument("--mfu", type=float, default=1.0, help="achieved fraction of peak FLOP/s")
    est.add_argument("--mbu", type=float, default=1.0, help="achieved fraction of peak bandwidth")
    add_efficiency_options(est)
    est.add_argument("--json", action="store_true",
                     help="print one JSON object: the configuration, efficiency, memory, TTFT of one prompt, ITL, "
                          "throughput, max batch, fits")
    est.add_argument("--reserved-gb", type=float, default=0.0, help="memory kept free (activations, slack)")
    est.add_argument("--gpu-memory-utilization", type=float, default=None,
                     help="as in vLLM: the fraction of each device's memory for weights, activations and KV cache "
                          "(unset: all of it, the chapter's arithmetic)")
    est.add_argument("--memory-capacity", default="datasheet", choices=["datasheet", "reported"],
                     help="the capacity: the datasheet's (H100: 80 GB) or what the card reports (85.5 GB)")
    est.add_argument("--usd-per-gpu-hour", type=float, default=0.0,
                     help="price of one GPU-hour in dollars; 0: no cost line")
    est.set_defaults(func=_cmd_estimate, allreduce_latency_default_us=est.get_default("allreduce_latency_us"))

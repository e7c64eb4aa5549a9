"""MBU of a decode step at B = 1 and MFU of the largest prefill, as ratios to ceilings measured
around them in the same run: what benchmarks/measure_efficiency.py prints. Decode MBU divides by
the read-only stream (a decode step reads weights and KV cache); the copy's is printed beside it."""
from __future__ import annotations

from dataclasses import dataclass, replace

from inferlab.core.costs import decode_costs, prefill_costs
from inferlab.measure import device as _device
from inferlab.measure import plan as _plan
from inferlab.measure.ceilings import (READ_KERNELS, choose_dtype, copy_bytes_moved, fill_random_, generator,
                                       matmul_flops, read_kernel, measure_ceilings, robust_ceiling, torch_dtype)
from inferlab.measure.result import TARGETS
from inferlab.measure.runner import decode_runner, fill_kv_cache_, random_model, token_pool
from inferlab.measure.suite import CONTENTION_CLEAN, _resolve_plan, encroachment
from inferlab.measure.timing import time_fn
from inferlab.base.units import GB
from inferlab.base.input_checks import positive_int


def ceiling_around(before: float, after: float) -> float:
    """The ceiling a kernel is divided by: the median of the estimates measured around it (of
    two, their mean), as the suite's robust ceilings (ceilings.robust_ceiling): one estimate
    caught in a burst of the host does not set the ratio."""
    return robust_ceiling([before, after])


def utilisation(amount: float, seconds: float, before: float, after: float) -> float:
    """MBU (bytes) or MFU (FLOPs): amount / seconds / the median ceiling around the kernel."""
    return amount / seconds / ceiling_around(before, after)


@dataclass(frozen=True)
class EfficiencyConfig:
    """What measure_efficiency measures: device, dtype, model and decode_mode as the suite takes them
    (SuiteConfig); `rounds` clean rounds wanted, at most `max_rounds` (default 3 x rounds); the prefill's
    prompt length and the decode step's context (default: the plan's longest prompt and its batch context);
    CPU threads; the seed of weights and tokens; `log` called with each round's line."""

    device: str = "auto"
    dtype: str = "auto"
    model: object = None
    rounds: int = 3
    max_rounds: int | None = None
    prompt_len: int | None = None
    context_len: int | None = None
    decode_mode: str = "auto"
    threads: int | None = None
    seed: int = 0
    log: object = None

    def __post_init__(self):
        positive_int("rounds", self.rounds)
        if self.max_rounds is not None:
            positive_int("max_rounds", self.max_rounds)
        if self.threads is not None:
            positive_int("threads", self.threads)


def measure_efficiency(config: EfficiencyConfig | None = None, /, **options) -> dict:
    """MBU of a decode step at B = 1 and MFU of the largest prefill, each a ratio to a ceiling
    measured right before and right after it (the higher of the two), in alternating rounds: a
    drifting machine moves ceiling and kernel together. On a CPU a round is clean when other
    processes took < 5 % of the CPUs this run uses (beyond those its threads leave spare) over
    the round; rounds continue (up to max_rounds, default 3 x rounds) until `rounds` clean
    ones exist. The medians are over the clean rounds (all rounds if none).
    `config` (an EfficiencyConfig), with any of its fields given as keywords on top."""
    import torch

    config = replace(config or EfficiencyConfig(), **options)
    kind = _device.resolve_kind(config.device)
    info = _device.describe(kind)
    free = _device.free_memory_bytes(kind)
    plan, candidates = _resolve_plan(kind, info, free, quick=False, dtype=config.dtype, model=config.model,
                                     decode_mode=config.decode_mode, plan=None)
    saved = torch.get_num_threads()
    if config.threads is not None:
        torch.set_num_threads(int(config.threads))
    try:
        with torch.inference_mode():
            return _measure(config, kind, info, free, plan, candidates)
    finally:
        torch.set_num_threads(saved)


def _chosen_dtype(config, kind, plan, candidates, free) -> tuple:
    if config.dtype != "auto":
        return config.dtype, "requested"
    mm = {dt: measure_ceilings(kind, [dt], copy_bytes=1e6, matmul_n=plan.matmul_n,
                               memory_bytes=free, seed=config.seed).matmul_flops_per_s[dt]
          for dt in sorted(set(candidates) | ({"fp32", "bf16"} if kind == "cpu" else set()))}
    return choose_dtype(kind, mm)


class _Ceilings:
    """The ceilings' operands, made once: each round times the copy, the read stream and the product before and
    after its kernel."""

    def __init__(self, kind, copy_bytes, n, dtype, gen):
        import torch

        self.kind, self.n, self.gen = kind, n, gen
        self.src = fill_random_(torch.empty(max(int(copy_bytes) // 8192 * 2048, 2048), device=kind), gen)
        self.dst = torch.empty_like(self.src)
        self.pairs = [(fill_random_(torch.empty(n, n, dtype=torch_dtype(dtype), device=kind), gen),
                       fill_random_(torch.empty(n, n, dtype=torch_dtype(dtype), device=kind), gen))
                      for _ in range(2)]
        self.out = torch.empty(n, n, dtype=torch_dtype(dtype), device=kind)

    def copy_rate(self) -> float:
        t = time_fn(self.dst.copy_, [(self.src,)], device=self.kind, warmup=1, repeats=5, max_time_s=1.0)
        return copy_bytes_moved(self.src.numel() * 4) / t.median_s

    def read_rate(self) -> float:
        """The read-only stream: the fastest of ceilings.READ_KERNELS, as read_bandwidth."""
        rates = []
        for name in READ_KERNELS:
            fn_, pool_ = read_kernel(name, self.src, self.gen)
            t = time_fn(fn_, pool_, device=self.kind, warmup=1, repeats=5, max_time_s=0.5 / len(READ_KERNELS))
            rates.append(self.src.numel() * 4 / t.median_s)
        return max(rates)

    def mm_rate(self) -> float:
        import torch

        t = time_fn(lambda a, b: torch.mm(a, b, out=self.out), self.pairs, device=self.kind, warmup=1,
                    repeats=5, max_time_s=1.0)
        return matmul_flops(self.n) / t.median_s


def _round(k, kind, ceil: _Ceilings, step, prefill, costs, point_time_s) -> dict:
    """One round: the copy and read stream, the decode step, the read stream and copy again; the product, the
    prefill, the product again."""
    (fn, dec_pool), (pre_fn, pre_pool), (dcost, pcost) = step, prefill, costs
    meter = _device.CpuMeter()
    bw1, rd1 = ceil.copy_rate(), ceil.read_rate()
    t_dec = time_fn(fn, dec_pool, device=kind, warmup=2, repeats=20, min_repeats=5, max_time_s=point_time_s)
    rd2, bw2 = ceil.read_rate(), ceil.copy_rate()
    mm1 = ceil.mm_rate()
    t_pre = time_fn(pre_fn, pre_pool, device=kind, warmup=1, repeats=5, min_repeats=3, max_time_s=point_time_s)
    mm2 = ceil.mm_rate()
    contention = meter.others_share()
    return {"round": k + 1, "copy_bytes_per_s": ceiling_around(bw1, bw2), "copy_before_after": [bw1, bw2],
            "read_bytes_per_s": ceiling_around(rd1, rd2), "read_before_after": [rd1, rd2],
            "decode_s": t_dec.median_s, "decode_rel_iqr": t_dec.rel_iqr,
            "mbu": utilisation(float(dcost.bytes), t_dec.median_s, rd1, rd2),
            "mbu_copy": utilisation(float(dcost.bytes), t_dec.median_s, bw1, bw2),
            "matmul_flops_per_s": ceiling_around(mm1, mm2), "matmul_before_after": [mm1, mm2],
            "prefill_s": t_pre.median_s, "prefill_rel_iqr": t_pre.rel_iqr,
            "mfu": utilisation(float(pcost.flops), t_pre.median_s, mm1, mm2),
            "contention": contention,
            "clean": kind != "cpu" or encroachment(contention) < CONTENTION_CLEAN}  # unknown counts as clean


def _say_round(say, row) -> None:
    (bw1, bw2), (rd1, rd2), (mm1, mm2) = row["copy_before_after"], row["read_before_after"], row["matmul_before_after"]
    contention = row["contention"]
    say(f"round {row['round']}: copy {bw1 / GB:.1f}/{bw2 / GB:.1f} GB/s, read {rd1 / GB:.1f}/{rd2 / GB:.1f} GB/s, "
        f"step {row['decode_s'] * 1e3:.2f} ms -> MBU {row['mbu']:.2f} (copy: {row['mbu_copy']:.2f}); matmul "
        f"{mm1 / 1e12:.3g}/{mm2 / 1e12:.3g} TFLOP/s, prefill {row['prefill_s'] * 1e3:.1f} ms -> MFU {row['mfu']:.2f}"
        + (f"; others used {contention:.0%} of the machine" if contention is not None else "")
        + ("" if row["clean"] else " (not clean)"))


def _measure(config: EfficiencyConfig, kind, info, free, plan, candidates) -> dict:
    """measure_efficiency's rounds, in inference mode, with the run's threads."""
    import numpy as np
    import torch

    say = config.log or (lambda text: None)
    max_rounds = config.max_rounds or 3 * config.rounds
    copy_bytes = min(plan.copy_bytes, 0.1 * free)
    chosen, reason = _chosen_dtype(config, kind, plan, candidates, free)
    plan = replace(plan, dtype=chosen)
    # The copy buffers (2 x copy_bytes) stay allocated beside the model.
    _plan.check_fits(plan, _device.free_memory_bytes(kind) - 2 * copy_bytes, f"{kind} ({info.name})")
    cfg, prec = plan.model, plan.precision
    s_big = int(config.prompt_len or max(plan.prompt_lens))
    ctx = int(config.context_len or plan.batch_context)
    say(f"{cfg.name} in {chosen} ({reason}) on {kind}: {info.name}; prefill S = {s_big}, "
        f"decode context {ctx}, {torch.get_num_threads()} threads")
    model_ = random_model(cfg, kind, chosen, config.seed)
    model_.setup_cache(1, max(s_big, ctx))
    gen = generator(kind, config.seed + 1)
    fill_kv_cache_(model_, gen)
    dec_pool = token_pool(cfg, 1, 1, 8, kind, gen)
    fn, used, note = decode_runner(model_, dec_pool, ctx - 1, _plan.resolve_decode_mode(plan.decode_mode, kind), kind)
    pre_pool = token_pool(cfg, 1, s_big, 2, kind, gen)
    dcost = decode_costs(cfg, 1, ctx, prec).total
    pcost = prefill_costs(cfg, 1, s_big, prec).total
    ceil = _Ceilings(kind, copy_bytes, plan.matmul_n, chosen, gen)
    rows = []
    for k in range(max_rounds):
        rows.append(_round(k, kind, ceil, (fn, dec_pool), (lambda tok: model_(tok, 0, all_logits=False), pre_pool),
                           (dcost, pcost), plan.point_time_s))
        _say_round(say, rows[-1])
        if sum(r["clean"] for r in rows) >= config.rounds:
            break
    del ceil, fn, model_
    return {"device": info.to_dict(), "model": cfg.name, "dtype": chosen, "dtype_reason": reason,
            "decode_mode": used, "note": note, "threads": torch.get_num_threads(),
            "prompt_len": s_big, "context_len": ctx,
            "decode_bytes": float(dcost.bytes), "prefill_flops": float(pcost.flops), "rounds": rows,
            "clean_rounds": sum(r["clean"] for r in rows),
            "mbu": float(np.median([r["mbu"] for r in _clean(rows)])),
            "mbu_copy": float(np.median([r["mbu_copy"] for r in _clean(rows)])),
            "mfu": float(np.median([r["mfu"] for r in _clean(rows)])),
            "targets": TARGETS.get(kind), "other_runnable": _device.other_runnable()}


def _clean(rows):
    return [r for r in rows if r["clean"]] or rows

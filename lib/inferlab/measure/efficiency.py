"""MBU of a decode step at B = 1 and MFU of the largest prefill, as ratios to ceilings measured
around them in the same run: what benchmarks/measure_efficiency.py prints. Decode MBU divides by
the read-only stream (a decode step reads weights and KV cache); the copy's is printed beside it."""
from __future__ import annotations

from dataclasses import replace

from inferlab.costs import decode_costs, prefill_costs
from inferlab.measure import device as _device
from inferlab.measure import plan as _plan
from inferlab.measure.ceilings import (READ_KERNELS, choose_dtype, copy_bytes_moved, fill_random_, generator,
                                       matmul_flops, read_kernel, measure_ceilings, robust_ceiling, torch_dtype)
from inferlab.measure.result import TARGETS
from inferlab.measure.runner import decode_runner, fill_kv_cache_, random_model, token_pool
from inferlab.measure.suite import CONTENTION_CLEAN, _resolve_plan, encroachment
from inferlab.measure.timing import time_fn
from inferlab.units import GB
from inferlab.input_checks import positive_int


def ceiling_around(before: float, after: float) -> float:
    """The ceiling a kernel is divided by: the median of the estimates measured around it (of
    two, their mean), as the suite's robust ceilings (ceilings.robust_ceiling): one estimate
    caught in a burst of the host does not set the ratio."""
    return robust_ceiling([before, after])


def utilisation(amount: float, seconds: float, before: float, after: float) -> float:
    """MBU (bytes) or MFU (FLOPs): amount / seconds / the median ceiling around the kernel."""
    return amount / seconds / ceiling_around(before, after)


def measure_efficiency(*, device: str = "auto", dtype: str = "auto", model=None, rounds: int = 3,
                       max_rounds: int | None = None, prompt_len: int | None = None,
                       context_len: int | None = None, decode_mode: str = "auto",
                       threads: int | None = None, seed: int = 0, log=None) -> dict:
    """MBU of a decode step at B = 1 and MFU of the largest prefill, each a ratio to a ceiling
    measured right before and right after it (the higher of the two), in alternating rounds: a
    drifting machine moves ceiling and kernel together. On a CPU a round is clean when other
    processes took < 5 % of the CPUs this run uses (beyond those its threads leave spare) over
    the round; rounds continue (up to max_rounds, default 3 x rounds) until `rounds` clean
    ones exist. The medians are over the clean rounds (all rounds if none)."""
    import numpy as np
    import torch

    positive_int("rounds", rounds)
    max_rounds = max_rounds or 3 * rounds
    kind = _device.resolve_kind(device)
    info = _device.describe(kind)
    free = _device.free_memory_bytes(kind)
    plan, candidates = _resolve_plan(kind, info, free, quick=False, dtype=dtype, model=model,
                                     decode_mode=decode_mode, plan=None)
    saved = torch.get_num_threads()
    if threads is not None:
        positive_int("threads", threads)
        torch.set_num_threads(int(threads))
    say = log or (lambda text: None)
    try:
        with torch.inference_mode():
            copy_bytes = min(plan.copy_bytes, 0.1 * free)
            if dtype == "auto":
                mm = {dt: measure_ceilings(kind, [dt], copy_bytes=1e6, matmul_n=plan.matmul_n,
                                           memory_bytes=free, seed=seed).matmul_flops_per_s[dt]
                      for dt in sorted(set(candidates) | ({"fp32", "bf16"} if kind == "cpu" else set()))}
                chosen, reason = choose_dtype(kind, mm)
            else:
                chosen, reason = dtype, "requested"
            plan = replace(plan, dtype=chosen)
            # The copy buffers (2 x copy_bytes) stay allocated beside the model.
            _plan.check_fits(plan, _device.free_memory_bytes(kind) - 2 * copy_bytes, f"{kind} ({info.name})")
            cfg, prec = plan.model, plan.precision
            s_big = int(prompt_len or max(plan.prompt_lens))
            ctx = int(context_len or plan.batch_context)
            say(f"{cfg.name} in {chosen} ({reason}) on {kind}: {info.name}; prefill S = {s_big}, "
                f"decode context {ctx}, {torch.get_num_threads()} threads")
            model_ = random_model(cfg, kind, chosen, seed)
            model_.setup_cache(1, max(s_big, ctx))
            gen = generator(kind, seed + 1)
            fill_kv_cache_(model_, gen)
            mode = _plan.resolve_decode_mode(plan.decode_mode, kind)
            dec_pool = token_pool(cfg, 1, 1, 8, kind, gen)
            fn, used, note = decode_runner(model_, dec_pool, ctx - 1, mode, kind)
            pre_pool = token_pool(cfg, 1, s_big, 2, kind, gen)
            dcost = decode_costs(cfg, 1, ctx, prec).total
            pcost = prefill_costs(cfg, 1, s_big, prec).total
            # Ceiling operands made once: each round times the copy and the product before and
            # after its kernel and divides by the higher of the two (never flattering the ratio).
            src = fill_random_(torch.empty(max(int(copy_bytes) // 8192 * 2048, 2048), device=kind), gen)
            dst = torch.empty_like(src)
            n = plan.matmul_n
            pairs = [(fill_random_(torch.empty(n, n, dtype=torch_dtype(chosen), device=kind), gen),
                      fill_random_(torch.empty(n, n, dtype=torch_dtype(chosen), device=kind), gen))
                     for _ in range(2)]
            out = torch.empty(n, n, dtype=torch_dtype(chosen), device=kind)

            def copy_rate():
                t = time_fn(dst.copy_, [(src,)], device=kind, warmup=1, repeats=5, max_time_s=1.0)
                return copy_bytes_moved(src.numel() * 4) / t.median_s, t

            def read_rate():  # the read-only stream: the fastest of ceilings.READ_KERNELS, as read_bandwidth
                rates = []
                for name in READ_KERNELS:
                    fn_, pool_ = read_kernel(name, src, gen)
                    t = time_fn(fn_, pool_, device=kind, warmup=1, repeats=5, max_time_s=0.5 / len(READ_KERNELS))
                    rates.append(src.numel() * 4 / t.median_s)
                return max(rates)

            def mm_rate():
                t = time_fn(lambda a, b: torch.mm(a, b, out=out), pairs, device=kind, warmup=1,
                            repeats=5, max_time_s=1.0)
                return matmul_flops(n) / t.median_s, t

            rows = []
            for k in range(max_rounds):
                meter = _device.CpuMeter()
                bw1, bw_t1 = copy_rate()
                rd1 = read_rate()
                t_dec = time_fn(fn, dec_pool, device=kind, warmup=2, repeats=20, min_repeats=5,
                                max_time_s=plan.point_time_s)
                rd2 = read_rate()
                bw2, bw_t2 = copy_rate()
                mm1, mm_t1 = mm_rate()
                t_pre = time_fn(lambda tok: model_(tok, 0, all_logits=False), pre_pool, device=kind,
                                warmup=1, repeats=5, min_repeats=3, max_time_s=plan.point_time_s)
                mm2, mm_t2 = mm_rate()
                bw, peak = ceiling_around(bw1, bw2), ceiling_around(mm1, mm2)
                contention = meter.others_share()
                taken = encroachment(contention)
                row = {"round": k + 1, "copy_bytes_per_s": bw, "copy_before_after": [bw1, bw2],
                       "read_bytes_per_s": ceiling_around(rd1, rd2), "read_before_after": [rd1, rd2],
                       "decode_s": t_dec.median_s, "decode_rel_iqr": t_dec.rel_iqr,
                       "mbu": utilisation(float(dcost.bytes), t_dec.median_s, rd1, rd2),
                       "mbu_copy": utilisation(float(dcost.bytes), t_dec.median_s, bw1, bw2),
                       "matmul_flops_per_s": peak, "matmul_before_after": [mm1, mm2],
                       "prefill_s": t_pre.median_s, "prefill_rel_iqr": t_pre.rel_iqr,
                       "mfu": utilisation(float(pcost.flops), t_pre.median_s, mm1, mm2),
                       "contention": contention,
                       "clean": kind != "cpu" or taken < CONTENTION_CLEAN}  # unknown counts as clean
                rows.append(row)
                say(f"round {k + 1}: copy {bw1 / GB:.1f}/{bw2 / GB:.1f} GB/s, read {rd1 / GB:.1f}/{rd2 / GB:.1f} GB/s, "
                    f"step {t_dec.median_s * 1e3:.2f} ms -> MBU {row['mbu']:.2f} (copy: {row['mbu_copy']:.2f}); matmul {mm1 / 1e12:.3g}/{mm2 / 1e12:.3g} TFLOP/s, prefill "
                    f"{t_pre.median_s * 1e3:.1f} ms -> MFU {row['mfu']:.2f}"
                    + (f"; others used {contention:.0%} of the machine" if contention is not None else "")
                    + ("" if row["clean"] else " (not clean)"))
                if sum(r["clean"] for r in rows) >= rounds:
                    break
            del src, dst, pairs, out
            del fn, model_
    finally:
        torch.set_num_threads(saved)
    return {"device": info.to_dict(), "model": cfg.name, "dtype": chosen, "dtype_reason": reason,
            "decode_mode": used, "note": note, "threads": torch.get_num_threads() if threads is None else threads,
            "prompt_len": s_big, "context_len": ctx,
            "decode_bytes": float(dcost.bytes), "prefill_flops": float(pcost.flops), "rounds": rows,
            "clean_rounds": sum(r["clean"] for r in rows),
            "mbu": float(np.median([r["mbu"] for r in _clean(rows)])),
            "mbu_copy": float(np.median([r["mbu_copy"] for r in _clean(rows)])),
            "mfu": float(np.median([r["mfu"] for r in _clean(rows)])),
            "targets": TARGETS.get(kind), "other_runnable": _device.other_runnable()}


def _clean(rows):
    return [r for r in rows if r["clean"]] or rows

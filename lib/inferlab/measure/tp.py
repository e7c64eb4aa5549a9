"""Tensor parallelism measured: inferlab.measure.model's decoder split Megatron-style across K processes
with torch.distributed (gloo on a CPU; NCCL on GPUs, one GPU per rank), beside the library's TP
prediction.

Split (as inferlab.core.parallel.tp_shard counts it): each rank holds n_heads/K query heads and
max(n_kv_heads/K, 1) KV heads (wq, wk, wv by output rows; wo by input columns), d_ff/K MLP
columns (w1, w3 by rows; w2 by columns) and ceil(V/K) rows of the LM head. One all-reduce sums
the partial outputs of wo and one those of w2 in every layer; the LM head's slices are gathered
(all_gather) for the last position only. Embedding and norms are replicated.

Measured: all-reduce time against message size, fitted as t = alpha + 2(K-1)/K * bytes / beta
(ring all-reduce, inferlab.core.parallel.allreduce_time_s; least squares on relative error, so that
the small messages, where alpha shows, weigh as much as the large ones), and TTFT / ITL at K = 1 and K, each beside
inferlab.core.latency's prediction with tp = K, the fitted alpha and beta, and the ceilings each rank
reaches while all ranks run at once (on a CPU the ranks share cores and memory bandwidth).
"""
from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from inferlab.core.parallel import check_tp
from inferlab.core.specs import ModelConfig
from inferlab.base.text_tables import text_table

SCHEMA = "inferlab.measure.tp/1"
ALLREDUCE_BYTES = tuple(2 ** k for k in range(10, 25, 2))  # 1 KiB .. 16 MiB
ALLREDUCE_REPEATS = 25  # per message size: all-reduces are short and, on a shared CPU, noisy
BACKENDS = {"cpu": "gloo", "cuda": "nccl"}  # torch.distributed backend per device kind


def backend_for(device: str) -> str:
    """The torch.distributed backend that runs TP on `device` (cpu: gloo; cuda: NCCL)."""
    if device not in BACKENDS:
        raise ValueError(f"device {device!r} cannot run tensor parallelism here (allowed: {', '.join(BACKENDS)})")
    return BACKENDS[device]


def check_devices(device: str, tp: int, gpus: int) -> None:
    """Raise ValueError unless `tp` ranks can run on `device`: NCCL needs one GPU per rank (two
    ranks on one GPU are refused by NCCL), so K <= the number of visible GPUs."""
    backend_for(device)
    if device == "cuda" and gpus < tp:
        raise ValueError(f"tp = {tp} on cuda needs {tp} GPUs (NCCL runs one rank per GPU); "
                         f"{gpus} visible. Use --device cpu (gloo) or a machine with >= {tp} GPUs")


def fit_allreduce(message_bytes, times_s, tp: int) -> tuple[float, float]:
    """(alpha seconds, beta bytes/s) of t = alpha + 2(K-1)/K * bytes / beta, least squares on
    the relative residual (t_fit / t - 1): the sizes span four decades, and an unweighted fit is
    steered by the largest messages. Noise of +-5 % on the two largest moves its alpha from 300 to
    270 us (tests/test_measure_tp.py); the noisier gloo sweep of an earlier recorded run gave it
    946 us against 344 us measured at 1 KiB.
    Raises ValueError with fewer than two sizes, K < 2, or a fit whose bandwidth is not positive."""
    x = np.asarray(message_bytes, dtype=float)
    y = np.asarray(times_s, dtype=float)
    check_tp_count = int(tp)
    if check_tp_count < 2:
        raise ValueError(f"tp must be >= 2 to fit an all-reduce; got {tp}")
    if x.size < 2 or x.size != y.size or len(set(x.tolist())) < 2:
        raise ValueError(f"fitting alpha and beta needs >= 2 distinct message sizes with one time each; "
                         f"got {x.size} sizes and {y.size} times")
    if np.any(y <= 0):
        raise ValueError("all-reduce times must be > 0 s")
    wire = 2.0 * (tp - 1) / tp * x
    slope, alpha = np.polyfit(wire, y, 1, w=1.0 / y)
    if slope <= 0:
        raise ValueError(f"all-reduce times do not grow with message size (slope {slope:.3g} s/byte): "
                         "no bandwidth can be fitted; measure larger messages")
    return float(max(alpha, 0.0)), float(1.0 / slope)


# The split ---------------------------------------------------------------------------------------

def _row_parallel(linear):
    import torch.distributed as dist
    from torch import nn

    class RowParallel(nn.Module):
        """A linear layer holding some input columns: its partial outputs are summed across ranks."""

        def __init__(self, lin):
            super().__init__()
            self.lin = lin

        def forward(self, x):
            y = self.lin(x)
            dist.all_reduce(y)
            return y
    return RowParallel(linear)


def _vocab_parallel(linear, vocab: int, world: int):
    import torch
    import torch.distributed as dist
    from torch import nn

    class VocabParallel(nn.Module):
        """An LM head holding ceil(V/K) vocabulary rows: the slices are gathered (padded to equal
        size, the padding dropped)."""

        def __init__(self, lin):
            super().__init__()
            self.lin = lin
            self.per = -(-vocab // world)

        @property
        def weight(self):  # the model reads its dtype and device from output.weight
            return self.lin.weight

        def forward(self, x):
            y = self.lin(x)
            if y.shape[-1] < self.per:
                y = torch.nn.functional.pad(y, (0, self.per - y.shape[-1]))
            parts = [torch.empty_like(y) for _ in range(world)]
            dist.all_gather(parts, y.contiguous())
            return torch.cat(parts, dim=-1)[..., :vocab]
    return VocabParallel(linear)


def _slice_linear(lin, rows=None, cols=None):
    import torch
    from torch import nn

    w = lin.weight.detach()
    if rows is not None:
        w = w[rows[0]:rows[1]]
    if cols is not None:
        w = w[:, cols[0]:cols[1]]
    out = nn.Linear(w.shape[1], w.shape[0], bias=False, device=w.device, dtype=w.dtype)
    with torch.no_grad():
        out.weight.copy_(w)
    return out


def shard_model_(model, rank: int, world: int):
    """Split a full inferlab.measure.model Transformer in place into rank `rank` of `world` (see module
    docstring); returns it. world = 1 leaves it whole."""
    cfg: ModelConfig = model.cfg
    check_tp(cfg, world)
    if world == 1:
        return model
    hd = cfg.head_dim
    h_loc = cfg.n_heads // world
    kv_loc = max(cfg.n_kv_heads // world, 1)
    if cfg.n_kv_heads >= world:
        kv0 = rank * kv_loc
    else:  # fewer KV heads than ranks: each rank keeps the one its query heads attend to
        kv0 = (rank * h_loc) // (cfg.n_heads // cfg.n_kv_heads)
    f_loc = cfg.d_ff // world
    for layer in model.layers:
        a = layer.attention
        a.wq = _slice_linear(a.wq, rows=(rank * h_loc * hd, (rank + 1) * h_loc * hd))
        a.wk = _slice_linear(a.wk, rows=(kv0 * hd, (kv0 + kv_loc) * hd))
        a.wv = _slice_linear(a.wv, rows=(kv0 * hd, (kv0 + kv_loc) * hd))
        a.wo = _row_parallel(_slice_linear(a.wo, cols=(rank * h_loc * hd, (rank + 1) * h_loc * hd)))
        a.n_heads, a.n_kv_heads = h_loc, kv_loc
        ff = layer.feed_forward
        ff.w1 = _slice_linear(ff.w1, rows=(rank * f_loc, (rank + 1) * f_loc))
        if ff.w3 is not None:
            ff.w3 = _slice_linear(ff.w3, rows=(rank * f_loc, (rank + 1) * f_loc))
        ff.w2 = _row_parallel(_slice_linear(ff.w2, cols=(rank * f_loc, (rank + 1) * f_loc)))
    if not cfg.tied_embeddings:
        per = -(-cfg.vocab_size // world)
        lo, hi = rank * per, min((rank + 1) * per, cfg.vocab_size)
        model.output = _vocab_parallel(_slice_linear(model.output, rows=(lo, hi)), cfg.vocab_size, world)
    model.cfg = cfg.with_(n_heads=h_loc, n_kv_heads=kv_loc, d_ff=f_loc)
    return model


# Processes ---------------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank, world, port, task, out_path):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(task["threads"])
    device = task.get("device", "cpu")
    init = dict(init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    if device == "cuda":  # one GPU per rank; NCCL refuses two ranks on one GPU
        torch.cuda.set_device(rank)
        init["device_id"] = torch.device("cuda", rank)
    dist.init_process_group(backend_for(device), **init)
    try:
        with torch.inference_mode():
            result = (_check if task["kind"] == "check" else _measure_rank)(rank, world, task)
        if rank == 0:
            torch.save(result, out_path)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def run_group(world: int, task: dict):
    """Run `task` in `world` processes on this host (gloo, or NCCL where task['device'] is cuda;
    rendezvous over TCP); rank 0's result, on the CPU."""
    import torch.multiprocessing as mp
    import torch

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rank0.pt")
        mp.start_processes(_worker, args=(world, _free_port(), task, out), nprocs=world, join=True,
                           start_method="spawn")
        return torch.load(out, weights_only=False)


def _model(task):
    from inferlab.measure.runner import random_model

    cfg = ModelConfig(**task["model"])
    return random_model(cfg, task.get("device", "cpu"), task["dtype"], task["seed"]), cfg


def _check(rank, world, task):
    """Logits of one prefill and one decode step of each (split) model: what the equality test
    compares; task['models'] lists the configurations."""
    return [_check_one(rank, world, dict(task, model=m)) for m in task["models"]]


def _check_one(rank, world, task):
    import torch

    model, cfg = _model(task)
    shard_model_(model, rank, world)
    s = task["prompt_len"]
    model.setup_cache(1, s + 1)
    gen = torch.Generator().manual_seed(task["seed"] + 1)
    tok = torch.randint(0, cfg.vocab_size, (1, s + 1), generator=gen).to(task.get("device", "cpu"))
    pre = model(tok[:, :s], 0, all_logits=False)
    dec = model(tok[:, s:], s, all_logits=False)
    return {"prefill": pre.float().cpu().clone(), "decode": dec.float().cpu().clone()}


def tp_logits(cfgs, world: int, *, prompt_len: int = 12, dtype: str = "fp32", seed: int = 0) -> list:
    """[{'prefill', 'decode'} logits] of each config in `cfgs` (random weights from `seed`) split
    over `world` processes (one process group for all); world = 1 runs each whole model in this
    process, without torch.distributed."""
    task = {"kind": "check", "models": [_cfg_dict(c) for c in cfgs], "dtype": dtype, "seed": seed,
            "prompt_len": prompt_len, "threads": 1}
    if world == 1:
        import torch
        with torch.inference_mode():
            return _check(0, 1, task)
    return run_group(world, task)


def _cfg_dict(cfg):
    from dataclasses import asdict
    return asdict(cfg)


def _measure_rank(rank, world, task):
    import torch
    import torch.distributed as dist

    from inferlab.measure.ceilings import fill_random_, generator, torch_dtype

    dev = task.get("device", "cpu")
    out = {"threads": torch.get_num_threads(), "device": dev}
    gen = generator(dev, task["seed"] + 11 + rank)
    warm = 2
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)

    def timed(fn, pool, reps=task["repeats"]):
        """Fixed repeats on every rank (a time budget could end ranks at different counts and
        leave a collective waiting); every call starts after a barrier, and on a GPU the clock
        stops once the device has finished (synchronize)."""
        samples = []
        for i in range(warm + reps):
            dist.barrier()
            sync()
            t0 = time.perf_counter()
            fn(pool[i % len(pool)])
            sync()
            if i >= warm:
                samples.append(time.perf_counter() - t0)
        return float(np.median(samples))

    # Ceilings reached by each rank while every rank runs: copy and product at once.
    n = task["copy_bytes"] // 4
    src = fill_random_(torch.empty(n, device=dev), gen)
    dst = torch.empty_like(src)
    out["copy_bytes_per_s"] = 2.0 * n * 4 / timed(lambda _: dst.copy_(src), [None])
    del src, dst
    m = task["matmul_n"]
    a = fill_random_(torch.empty(m, m, dtype=torch_dtype(task["dtype"]), device=dev), gen)
    b = fill_random_(torch.empty(m, m, dtype=torch_dtype(task["dtype"]), device=dev), gen)
    c = torch.empty_like(a)
    out["matmul_flops_per_s"] = 2.0 * m ** 3 / timed(lambda _: torch.mm(a, b, out=c), [None])
    del a, b, c
    if world > 1:
        ar = []
        for nbytes in task["allreduce_bytes"]:
            buf = fill_random_(torch.empty(nbytes // 4, device=dev), gen)
            ar.append({"bytes": nbytes, "time_s": timed(lambda _: dist.all_reduce(buf), [None],
                                                        reps=task.get("allreduce_repeats", task["repeats"]))})
        out["allreduce"] = ar
    model, cfg = _model(task)
    shard_model_(model, rank, world)
    model.setup_cache(1, max(max(task["prompt_lens"]), max(task["contexts"])))
    tok_gen = torch.Generator().manual_seed(task["seed"] + 5)  # the same tokens on every rank
    out["ttft"] = []
    for s in task["prompt_lens"]:
        pool = [torch.randint(0, cfg.vocab_size, (1, s), generator=tok_gen).to(dev) for _ in range(2)]
        out["ttft"].append({"prompt_len": s,
                            "median_s": timed(lambda t: model(t, 0, all_logits=False), pool)})
    out["itl"] = []
    for ctx in task["contexts"]:
        pool = [torch.randint(0, cfg.vocab_size, (1, 1), generator=tok_gen).to(dev) for _ in range(4)]
        out["itl"].append({"context_len": ctx,
                           "median_s": timed(lambda t: model(t, ctx - 1, all_logits=False), pool)})
    return out


def measure_tp(*, tp: int = 2, model: ModelConfig | None = None, dtype: str = "fp32", quick: bool = True,
               seed: int = 0, device: str = "cpu", log=None) -> dict:
    """TTFT and ITL at K = 1 and K = `tp` processes, the all-reduce sweep and its alpha/beta fit,
    each measured time beside inferlab.core.latency's prediction. Returns the run's JSON document.
    device: 'cpu' (gloo; the ranks share the cores) or 'cuda' (NCCL; one GPU per rank)."""
    from inferlab.core.deployment import Deployment
    from inferlab.core.latency import decode_step_time_s, prefill_time_s
    from inferlab.measure import device as _device
    from inferlab.measure.plan import CPU_MODEL
    from inferlab.core.specs import Accelerator, Precision, check_model

    cfg = CPU_MODEL if model is None else check_model(model)  # None: the cpu-0.5b preset
    check_tp(cfg, tp)
    import torch
    check_devices(device, tp, torch.cuda.device_count() if device == "cuda" else 0)
    if tp < 2:
        raise ValueError(f"tp must be >= 2 (it is compared with K = 1); got {tp}")
    say = log or (lambda text: None)
    cores = os.cpu_count() or 1
    tiny = cfg.d_model <= 512
    task = {"kind": "measure", "model": _cfg_dict(cfg), "dtype": dtype, "seed": seed,
            "prompt_lens": (32, 128) if tiny else ((64, 256) if quick else (128, 256, 512, 1024)),
            "contexts": (64, 256) if tiny else ((128, 512) if quick else (128, 512, 2048)),
            "repeats": 3 if tiny else (3 if quick else 10),
            "copy_bytes": 32 * 2 ** 20 if tiny else 256 * 2 ** 20, "matmul_n": 256 if tiny else 1024,
            "allreduce_bytes": ALLREDUCE_BYTES, "allreduce_repeats": ALLREDUCE_REPEATS, "device": device}
    meter = _device.CpuMeter()
    runs = []
    prec = Precision(dtype, dtype, dtype)
    alpha = beta = None
    for k in (1, tp):
        t0 = time.perf_counter()
        res = run_group(k, dict(task, threads=max(1, cores // k)))
        say(f"K = {k}: {time.perf_counter() - t0:.0f} s")
        if k > 1:
            alpha, beta = fit_allreduce([p["bytes"] for p in res["allreduce"]],
                                        [p["time_s"] for p in res["allreduce"]], k)
        acc = Accelerator(name=f"measured-{device}-rank-of-{k}", memory_bytes=1e12,
                          hbm_bytes_per_s=res["copy_bytes_per_s"],
                          peak_flops_per_s={dtype: res["matmul_flops_per_s"]},
                          interconnect_bytes_per_s=beta or 0.0)
        on = Deployment(acc, prec, tp=k, allreduce_latency_s=alpha or 0.0)
        for p in res["ttft"]:
            p["predicted_s"] = float(prefill_time_s(cfg, on, p["prompt_len"], 1))
        for p in res["itl"]:
            p["predicted_s"] = float(decode_step_time_s(cfg, on, p["context_len"], 1))
        runs.append({"tp": k, **res})
    contention = meter.others_share()
    info = _device.describe(device)
    doc = {"schema": SCHEMA, "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "device": info.to_dict(), "versions": _device.versions(), "backend": backend_for(device),
           "model": _cfg_dict(cfg), "dtype": dtype, "task": {k: v for k, v in task.items() if k != "model"},
           "allreduce": {"points": runs[-1].get("allreduce", []), "alpha_s": alpha,
                         "beta_bytes_per_s": beta, "tp": tp,
                         "model": "t = alpha + 2(K-1)/K * bytes / beta (least squares on relative error)"},
           "runs": runs, "contention": contention,
           "method": "inferlab.core.latency.prefill_time_s / decode_step_time_s with tp=K, the fitted "
                     "alpha as allreduce_latency_s and beta as interconnect bandwidth, at the copy "
                     "and matmul rates each rank reached with all ranks running"}
    return check_tp_doc(doc)


def check_tp_doc(doc: dict) -> dict:
    """Mark a TP run invalid (doc['valid'], doc['invalid_reasons']) where a measured time beats the
    roofline prediction: the prediction is a bound (MBU, MFU = 1), so a faster point means a
    ceiling was measured under a heavier load than the point. Returns the doc."""
    reasons = []
    for r in doc["runs"]:
        for key, x, label in (("ttft", "prompt_len", "S"), ("itl", "context_len", "context")):
            for p in r[key]:
                if p["median_s"] < p["predicted_s"]:
                    reasons.append(f"K = {r['tp']} {key.upper()} {label} {p[x]}: measured "
                                   f"{p['median_s'] * 1e3:.4g} ms < roofline {p['predicted_s'] * 1e3:.4g} ms")
    doc["valid"] = not reasons
    doc["invalid_reasons"] = reasons
    return doc


def tp_table(doc: dict) -> str:
    """The TP run as text: the all-reduce fit, then TTFT and ITL at each K, measured beside predicted."""
    ar = doc["allreduce"]
    lines = [f"tensor parallelism over {doc['backend']}: {doc['model']['name']} {doc['dtype']}, "
             f"K = 1 and {ar['tp']} processes on {doc['device']['name']} ({doc['device']['threads']} threads)"]
    if doc.get("label"):
        lines.append(f"label: {doc['label']}")
    if doc.get("valid") is False:
        lines.insert(0, f"INVALID RUN: {len(doc['invalid_reasons'])} points faster than their roofline "
                        "bound (ceilings measured under a different load): " + "; ".join(doc["invalid_reasons"]))
    if doc.get("contention") is not None:
        load = doc["device"].get("load_average")
        lines.append(f"other processes used {doc['contention']:.0%} of the machine during the run"
                     + (f" (load average {load:.1f} at the end)" if load is not None else "")
                     + ("; the times are inflated by them" if doc["contention"] > 0.1 else ""))
    if ar["points"]:
        lines.append(f"all-reduce fit: alpha = {ar['alpha_s'] * 1e6:.1f} us, beta = "
                     f"{ar['beta_bytes_per_s'] / 1e9:.2f} GB/s")
        lines.append(text_table(("bytes", "measured us", "fit us"),
                                [(p["bytes"], p["time_s"] * 1e6,
                                  (ar["alpha_s"] + 2 * (ar["tp"] - 1) / ar["tp"] * p["bytes"]
                                   / ar["beta_bytes_per_s"]) * 1e6) for p in ar["points"]],
                                ("d", ".4g", ".4g")))
    rows = []
    for r in doc["runs"]:
        for p in r["ttft"]:
            rows.append((r["tp"], "TTFT", f"S = {p['prompt_len']}", p["median_s"] * 1e3,
                         p["predicted_s"] * 1e3, p["median_s"] / p["predicted_s"]))
        for p in r["itl"]:
            rows.append((r["tp"], "ITL", f"context {p['context_len']}", p["median_s"] * 1e3,
                         p["predicted_s"] * 1e3, p["median_s"] / p["predicted_s"]))
    lines.append(text_table(("K", "metric", "point", "measured ms", "predicted ms", "meas/pred"), rows,
                            ("d", "s", "s", ".4g", ".4g", ".2f")))
    speed = []
    one, many = doc["runs"][0], doc["runs"][-1]
    for key, x in (("ttft", "prompt_len"), ("itl", "context_len")):
        for a, b in zip(one[key], many[key]):
            speed.append((key.upper(), a[x], a["median_s"] / b["median_s"], a["predicted_s"] / b["predicted_s"]))
    lines.append(f"speed-up K = 1 -> {many['tp']} (measured, predicted)")
    lines.append(text_table(("metric", "size", "measured", "predicted"), speed, ("s", "d", ".2f", ".2f")))
    lines.append(tp_verdict(doc))
    return "\n".join(lines)


def tp_verdict(doc: dict) -> str:
    """One line: does K-way TP speed up TTFT more than ITL here, measured and predicted (the
    median speed-up over the measured sizes of each)."""
    one, many = doc["runs"][0], doc["runs"][-1]

    def med(key, col):
        return float(np.median([a[col] / b[col] for a, b in zip(one[key], many[key])]))
    mt, mi = med("ttft", "median_s"), med("itl", "median_s")
    pt, pi = med("ttft", "predicted_s"), med("itl", "predicted_s")
    return (f"TP helps TTFT more than ITL? measured: {'yes' if mt > mi else 'no'} (median speed-up "
            f"{mt:.2f}x vs {mi:.2f}x); predicted: {'yes' if pt > pi else 'no'} ({pt:.2f}x vs {pi:.2f}x)")


def save(doc: dict, path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


def load(path) -> dict:
    doc = json.loads(Path(path).read_text())
    if doc.get("schema") != SCHEMA:
        raise ValueError(f"{path}: unknown TP schema {doc.get('schema')!r} (allowed: {SCHEMA})")
    return doc


def recorded_tp_summary() -> str:
    """tp_table of every recorded TP run, blank-line separated ('no recorded TP run' if none)."""
    return "\n\n".join(tp_table(d) for d in recorded_tp_runs()) or "no recorded TP run in data/measurements/tp/"


def recorded_tp_runs() -> list[dict]:
    """The TP runs kept in data/measurements/tp/ (oldest first)."""
    from inferlab.core.specs import data_dir

    return sorted((load(p) for p in sorted((data_dir() / "measurements" / "tp").glob("*.json"))),
                  key=lambda d: d["created"])

"""Ceilings measured on the spot: copy bandwidth, read stream, matrix-product rate, and the measured roofline.

copy bandwidth = 2 * buffer bytes / time of dst.copy_(src)   (bytes read plus bytes written)
read stream    = buffer bytes / time of the fastest of READ_KERNELS over the buffer (median time each)
matmul rate    = 2 * n^3 / time of an n x n by n x n product  (random data, output preallocated)
Stream buffers: stream_buffer_bytes (STREAM_CACHE_MULTIPLE x the last-level cache, at least 256 MiB,
at most STREAM_FREE_SHARE of free memory), so they measure DRAM and not a cache.
A product of M rows against a d x f weight has the FLOPs and bytes of `costs.linear_cost`; its
achieved FLOP/s, placed at its arithmetic intensity, is one point of the measured roofline.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from inferlab.core.costs import linear_cost
from inferlab.measure.timing import Timing, time_fn
from inferlab.core.roofline import attainable_flops_per_s
from inferlab.core.specs import Accelerator, Precision
from inferlab.base.units import bytes_per_element
from inferlab.base.input_checks import positive_int


def _dtype_table() -> dict:
    import torch

    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def torch_dtype(dtype: str, allowed=None):
    """The torch dtype of a library dtype name (fp32, bf16, fp16): the project's one table of them.
    `allowed`: a subset of the names a caller accepts (the error then names that subset)."""
    table = _dtype_table()
    names = tuple(allowed) if allowed is not None else tuple(table)
    if dtype not in names or dtype not in table:
        raise ValueError(f"dtype {dtype!r} cannot be measured (allowed: {', '.join(names)})")
    return table[dtype]


def dtype_name(tdtype) -> str:
    """The library name of a torch dtype (torch.bfloat16 -> 'bf16'); an unknown one as torch prints it."""
    return {v: k for k, v in _dtype_table().items()}.get(tdtype, str(tdtype))


def fill_random_(t, generator=None, scale: float = 1.0):
    """Fill `t` in place with uniform noise in [-scale, scale] (never zeros: some kernels and
    memory systems take shortcuts on zeros)."""
    return t.uniform_(-scale, scale, generator=generator)


def random_tensor(shape, dtype: str, device: str, generator=None, scale: float = 1.0):
    import torch

    return fill_random_(torch.empty(shape, dtype=torch_dtype(dtype), device=device), generator, scale)


def generator(device: str, seed: int):
    import torch

    return torch.Generator(device=device).manual_seed(seed)


def copy_bytes_moved(buffer_bytes: float) -> float:
    """HBM traffic of one dst.copy_(src) of a `buffer_bytes` buffer: read once plus written once."""
    return 2.0 * buffer_bytes


def matmul_flops(n: int) -> float:
    """FLOPs of an n x n by n x n product: n^2 outputs, n multiply-adds each, 2 FLOPs per multiply-add."""
    return 2.0 * n ** 3


def copy_bandwidth(device: str, nbytes: float, *, seed: int = 0, warmup: int = 2, repeats: int = 10,
                   max_time_s: float = 2.0) -> tuple[float, Timing, float]:
    """(bytes/s, Timing, buffer bytes) of a device-to-device copy of an `nbytes` buffer,
    counting 2 * nbytes per copy. Make nbytes several times the last-level cache."""
    import torch

    n = max(int(nbytes) // 4, 1024)
    src = random_tensor((n,), "fp32", device, generator(device, seed))
    dst = torch.empty_like(src)
    with torch.inference_mode():
        timing = time_fn(dst.copy_, [(src,)], device=device, warmup=warmup, repeats=repeats,
                         max_time_s=max_time_s)
    del src, dst
    return copy_bytes_moved(n * 4) / timing.median_s, timing, float(n * 4)


STREAM_CACHE_MULTIPLE = 4      # a stream buffer is this many times the last-level cache ...
STREAM_MIN_BYTES = 256 * 2**20  # ... and at least this (a CPU whose cache size is unknown) ...
STREAM_FREE_SHARE = 0.1         # ... and at most this share of free memory (the copy holds two)


def stream_buffer_bytes(cache_bytes: float, free_bytes: float = math.inf) -> float:
    """Bytes of one copy / read-stream buffer: max(4 x last-level cache, 256 MiB), capped at 10 %
    of free memory. A buffer the cache holds a good part of reads faster than DRAM, and a decode
    step's weights (2 GB for cpu-0.5b in fp32) do not fit in any cache; on the 2-vCPU Xeon VM
    (sysfs L3 260 MiB) buffers up to 64 MiB read at ~45 GB/s and 128 MiB up at the DRAM's ~22 GB/s,
    so 4 x 260 MiB = 1040 MiB is far past what the cache can flatter."""
    for name, v in (("cache_bytes", cache_bytes), ("free_bytes", free_bytes)):
        if not (isinstance(v, (int, float)) and not math.isnan(v) and v >= 0):
            raise ValueError(f"{name} must be a non-negative number of bytes; got {v!r}")
    return float(min(max(STREAM_CACHE_MULTIPLE * cache_bytes, STREAM_MIN_BYTES), STREAM_FREE_SHARE * free_bytes))


READ_KERNELS = ("sum", "dot", "gemv")  # read-only streams; the fastest is the estimate


def read_kernel(name: str, src, gen):
    """(fn, inputs) reading the fp32 buffer `src` once per call: torch.sum, torch.dot(src, src)
    (each element loaded once), or a matrix-vector product over src viewed as rows of 2048
    (MKL / BLAS sgemv: the decode step's own kernel class)."""
    import torch

    if name == "sum":
        return torch.sum, [(src,)]
    if name == "dot":
        return torch.dot, [(src, src)]
    if name == "gemv":
        k = 2048 if src.numel() % 2048 == 0 else 1
        vec = torch.empty(k, device=src.device).uniform_(-1, 1, generator=gen)
        return torch.mv, [(src.view(-1, k), vec)]
    raise ValueError(f"read kernel {name!r} is unknown (allowed: {', '.join(READ_KERNELS)})")


def read_bandwidth(device: str, nbytes: float, *, seed: int = 0, warmup: int = 1, repeats: int = 10,
                   max_time_s: float = 2.0, kernels=READ_KERNELS) -> tuple[float, Timing, dict]:
    """(bytes/s, Timing of the fastest kernel, {kernel: bytes/s}) of a read-only stream over an
    `nbytes` fp32 buffer: each of `kernels` timed (median of its calls, max_time_s shared), the
    FASTEST taken. No kernel can read faster than the memory does, but one can read slower: on the
    2-vCPU Xeon VM the sum alone read ~5 % slower than MKL's sgemv over the same 1 GiB (22.3 vs
    23.6 GB/s, median of 6 interleaved rounds), so the compiled decode step (sgemv-like) beat the
    highest sum estimate of a run and the run was marked invalid. A decode step mostly reads
    (weights, KV cache): this is its ceiling; the copy's read + write traffic is the roofline's."""
    import torch

    if not kernels:
        raise ValueError("kernels must name at least one read kernel; got none")
    n = max(int(nbytes) // 4, 2048)
    n -= n % 2048
    gen = generator(device, seed)
    src = random_tensor((n,), "fp32", device, gen)
    rates, best = {}, None
    with torch.inference_mode():
        for name in kernels:
            fn, pool = read_kernel(name, src, gen)
            t = time_fn(fn, pool, device=device, warmup=warmup, repeats=repeats,
                        max_time_s=max_time_s / len(kernels))
            rates[name] = n * 4 / t.median_s
            if best is None or rates[name] > rates[best[0]]:
                best = (name, t)
            del pool
    del src
    return rates[best[0]], best[1], rates


# Pricing a product before timing it. A slow path (bf16 without AVX512-BF16 or AMX: fastpath.py) costs minutes per
# call at the planned size, and no repeat budget can stop a call once it has started.
# ladder: single products at n = PILOT_N, 2 PILOT_N, ... up to the planned n; the next size's call is predicted as
# 8 x the last call x growth, growth = max(1, (t_k / t_(k-1)) / 8): a rate that falls with size is carried forward,
# one that rises is not. The largest size whose `calls` predicted calls fit the budget is timed.
PILOT_N = 256
MATMUL_BUDGET_S = 10.0  # a ceiling's product: its warm-up and minimum repeats must fit in this


def torch_product(a, b, out):
    import torch

    return torch.mm(a, b, out=out)


def _operands(device: str, dtype: str, n: int, seed: int):
    import torch

    gen = generator(device, seed)
    a, b = random_tensor((n, n), dtype, device, gen), random_tensor((n, n), dtype, device, gen)
    return a, b, torch.empty((n, n), dtype=torch_dtype(dtype), device=device)


def call_s(device: str, dtype: str, n: int, *, seed: int = 0, product=None, calls: int = 1,
           warmup: int = 0) -> float:
    """Median seconds of `calls` synchronised n x n products in `dtype` (after `warmup` untimed ones)."""
    import torch

    product = product or torch_product
    a, b, out = _operands(device, dtype, n, seed)
    with torch.inference_mode():
        t = time_fn(lambda: product(a, b, out), device=device, warmup=warmup, repeats=calls, min_repeats=calls)
    return t.median_s


def affordable_n(device: str, dtype: str, planned_n: int, budget_s: float, calls: int, *, seed: int = 0,
                 product=None, pilot_n: int = PILOT_N) -> tuple[int, list]:
    """(n, ladder): the largest size up to `planned_n` on the ladder (pilot_n, 2 pilot_n, ..., planned_n) whose
    predicted single call times `calls` fits `budget_s` (see the comment above PILOT_N), and the ladder of
    (n, seconds of one call) it timed. Each size is timed once before the next is predicted, so no single call
    is made whose prediction exceeded the budget. At least pilot_n (or planned_n, if smaller) is returned."""
    positive_int("planned_n", planned_n)
    positive_int("calls", calls)
    if not budget_s > 0:
        raise ValueError(f"budget_s must be positive; got {budget_s!r}")
    sizes, n = [], min(pilot_n, planned_n)
    while n < planned_n:
        sizes.append(n)
        n *= 2
    sizes.append(planned_n)
    ladder = []
    for size in sizes:
        if ladder:
            (n1, t1) = ladder[-1]
            growth = max(1.0, (t1 / ladder[-2][1]) / (n1 / ladder[-2][0]) ** 3) if len(ladder) > 1 else 1.0
            predicted = t1 * (size / n1) ** 3 * growth
            if predicted * calls > budget_s:
                return n1, ladder
        ladder.append((size, call_s(device, dtype, size, seed=seed, product=product)))
    return planned_n, ladder


def shrink_reason(dtype: str, planned_n: int, n: int, ladder, budget_s: float, calls: int) -> str:
    (n1, t1) = ladder[-1]
    return (f"{dtype} product shrunk from {planned_n}^2 to {n}^2: one {n1}^2 call took {t1:.3g} s, so "
            f"{calls} calls at {planned_n}^2 would exceed the {budget_s:g} s budget")


def matmul_rate(device: str, dtype: str, n: int, *, seed: int = 0, warmup: int = 2, repeats: int = 8,
                max_time_s: float = 3.0, budget_s: float | None = None, product=None) -> tuple:
    """(FLOP/s, Timing, shrunk) of an n x n by n x n product in `dtype`: 2 n^3 FLOPs per product.
    Two pairs of random operands alternate; the output is preallocated. With `budget_s`, the size is first
    priced on a ladder of single calls (affordable_n: warm-up and minimum repeats must fit it) and
    shrunk if it does not fit: `shrunk` is then {"n": the size timed, "planned_n", "reason"}, else None.
    `product(a, b, out)`: the kernel (default torch.mm; tests pass slow stand-ins)."""
    import torch

    positive_int("n", n)
    product = product or torch_product
    planned, shrunk = int(n), None
    if budget_s is not None:
        calls = warmup + min(3, repeats)
        n, ladder = affordable_n(device, dtype, planned, budget_s, calls, seed=seed, product=product)
        if n < planned:
            shrunk = {"n": int(n), "planned_n": planned,
                      "reason": shrink_reason(dtype, planned, n, ladder, budget_s, calls)}
    gen = generator(device, seed)
    pairs = [(random_tensor((n, n), dtype, device, gen), random_tensor((n, n), dtype, device, gen))
             for _ in range(2)]
    out = torch.empty((n, n), dtype=torch_dtype(dtype), device=device)
    with torch.inference_mode():
        timing = time_fn(lambda a, b: product(a, b, out), pairs, device=device, warmup=warmup,
                         repeats=repeats, max_time_s=max_time_s)
    del pairs, out
    return matmul_flops(n) / timing.median_s, timing, shrunk


def choose_dtype(kind: str, matmul_flops_per_s: dict) -> tuple[str, str]:
    """(dtype, reason): bf16 on a GPU; on a CPU fp32 unless bf16's measured product is faster."""
    if kind in ("cuda", "mps"):
        half = "bf16" if "bf16" in matmul_flops_per_s else "fp16"
        return half, f"{half} on {kind}: the tensor-core path"
    fp32, bf16 = matmul_flops_per_s.get("fp32"), matmul_flops_per_s.get("bf16")
    if fp32 and bf16 and bf16 > fp32:
        return "bf16", f"bf16 product {bf16 / fp32:.1f}x faster than fp32 on this CPU"
    return "fp32", "fp32: bf16 products are not faster on this CPU"


def _estimates(name: str, values) -> list:
    vals = [float(v) for v in values if v is not None]
    if not vals:
        raise ValueError(f"{name}: at least one ceiling estimate is needed; got none")
    bad = [v for v in vals if not (math.isfinite(v) and v > 0)]
    if bad:
        raise ValueError(f"{name}: ceiling estimates must be positive and finite; got {bad[0]!r}")
    return vals


def robust_ceiling(values, name: str = "ceiling") -> float:
    """The ceiling a ratio divides by: the median of a run's estimates (start, before and after
    each phase, end). One estimate taken during a burst of the host (a neighbour idle for a
    second) moves the maximum but not the median, so MBU and MFU do not chase bursts."""
    import statistics

    return float(statistics.median(_estimates(name, values)))


def bound_ceiling(values, name: str = "ceiling") -> float:
    """The highest estimate of a run: only for the validity check (no point may beat the
    roofline of the fastest the machine was seen to go, MBU and MFU <= 1 against it)."""
    return float(max(_estimates(name, values)))


def ceiling_spread(values, name: str = "ceiling") -> dict:
    """{'median', 'min', 'max', 'n', 'rel_spread'} of a run's estimates of one ceiling;
    rel_spread = (max - min) / median."""
    vals = _estimates(name, values)
    med = robust_ceiling(vals, name)
    return {"median": med, "min": min(vals), "max": max(vals), "n": len(vals),
            "rel_spread": (max(vals) - min(vals)) / med}


@dataclass(frozen=True)
class Ceilings:
    """What the device reached on the spot: copy bandwidth (bytes/s) and matmul FLOP/s per dtype."""

    copy_bytes_per_s: float
    matmul_flops_per_s: dict = field(hash=False)
    memory_bytes: float
    copy_buffer_bytes: float = 0.0
    matmul_n: int = 0
    copy_timing: Timing | None = None
    matmul_timing: dict = field(default_factory=dict, hash=False)
    read_bytes_per_s: float | None = None  # the read-only stream: see read_bandwidth
    read_by_kernel: dict = field(default_factory=dict, hash=False)  # each READ_KERNELS' bytes/s
    matmul_shrunk: dict = field(default_factory=dict, hash=False)  # dtype -> matmul_rate's `shrunk`, where shrunk

    def accelerator(self, name: str = "measured") -> Accelerator:
        """These ceilings as a library Accelerator: feed it to inferlab.core.latency and roofline."""
        return Accelerator(name=name, memory_bytes=self.memory_bytes,
                           hbm_bytes_per_s=self.copy_bytes_per_s,
                           peak_flops_per_s=dict(self.matmul_flops_per_s),
                           description="ceilings measured on the spot by inferlab.measure",
                           source="copy bandwidth (bytes read + written) and n x n matmul rate")

    def to_dict(self) -> dict:
        return {"copy_bytes_per_s": self.copy_bytes_per_s,
                "matmul_flops_per_s": dict(self.matmul_flops_per_s),
                "memory_bytes": self.memory_bytes, "copy_buffer_bytes": self.copy_buffer_bytes,
                "matmul_n": self.matmul_n,
                "copy_timing": self.copy_timing.to_dict() if self.copy_timing else None,
                "matmul_timing": {k: t.to_dict() for k, t in self.matmul_timing.items()},
                "read_bytes_per_s": self.read_bytes_per_s, "read_by_kernel": dict(self.read_by_kernel),
                **({"matmul_shrunk": dict(self.matmul_shrunk)} if self.matmul_shrunk else {})}

    @classmethod
    def from_dict(cls, d: dict) -> "Ceilings":
        return cls(d["copy_bytes_per_s"], dict(d["matmul_flops_per_s"]), d["memory_bytes"],
                   d.get("copy_buffer_bytes", 0.0), d.get("matmul_n", 0),
                   Timing.from_dict(d["copy_timing"]) if d.get("copy_timing") else None,
                   {k: Timing.from_dict(t) for k, t in d.get("matmul_timing", {}).items()},
                   d.get("read_bytes_per_s"), dict(d.get("read_by_kernel") or {}), dict(d.get("matmul_shrunk") or {}))


def measure_ceilings(device: str, dtypes, *, copy_bytes: float, matmul_n: int, memory_bytes: float,
                     seed: int = 0, max_time_s: float = 2.0, matmul_budget_s: float | None = None,
                     product=None) -> Ceilings:
    """Copy bandwidth and the read stream with `copy_bytes` buffers (see stream_buffer_bytes), and
    the n x n product rate in each of `dtypes`, each product priced first against `matmul_budget_s`
    (default MATMUL_BUDGET_S; see matmul_rate) and shrunk where it does not fit."""
    budget = MATMUL_BUDGET_S if matmul_budget_s is None else matmul_budget_s
    bw, bw_timing, buf = copy_bandwidth(device, copy_bytes, seed=seed, max_time_s=max_time_s)
    read, _, by_kernel = read_bandwidth(device, copy_bytes, seed=seed, max_time_s=max_time_s)
    rates, timings, shrunk = {}, {}, {}
    for dt in dtypes:
        rates[dt], timings[dt], s = matmul_rate(device, dt, matmul_n, seed=seed, max_time_s=max_time_s,
                                                budget_s=budget, product=product)
        if s:
            shrunk[dt] = s
    return Ceilings(bw, rates, float(memory_bytes), buf, int(matmul_n), bw_timing, timings, read, by_kernel,
                    shrunk)


MAX_WEIGHT_COPIES = 64


def roofline_sweep(device: str, dtype: str, shape, ms, accelerator: Accelerator, *,
                   cache_bytes: float = 0.0, max_pool_bytes: float = 2e9, seed: int = 0,
                   max_time_s: float = 1.0, budget=None) -> list[dict]:
    """Products of M rows (each of `ms`) against a d x f weight (`shape` = (d, f)), as nn.Linear computes them
    (x @ W^T with W stored f x d). Weight copies rotate so that together they exceed twice
    `cache_bytes` (within `max_pool_bytes`): every call reads its weight from memory.
    budget (a measure.budget.StageBudgets, its stage started): once it is spent, the remaining M are skipped
    (the first M is always timed) and recorded there.
    Returns one dict per M: FLOPs, bytes, intensity, Timing, achieved and attainable FLOP/s."""
    import torch

    d, f = (int(x) for x in shape)
    prec = Precision(dtype, dtype, dtype)
    w_bytes = d * f * bytes_per_element(dtype)
    n_w = max(2, math.ceil(2 * cache_bytes / w_bytes) + 1)
    n_w = max(2, min(n_w, MAX_WEIGHT_COPIES, int(max_pool_bytes // w_bytes)))
    gen = generator(device, seed)
    weights = [random_tensor((f, d), dtype, device, gen, 0.02) for _ in range(n_w)]
    points = []
    with torch.inference_mode():
        for i, m in enumerate(ms):
            m = int(m)
            if i and budget is not None and budget.spent():
                budget.skip(f"M = {m}")
                continue
            xs = [random_tensor((m, d), dtype, device, gen) for _ in range(2)]
            out = torch.empty((m, f), dtype=torch_dtype(dtype), device=device)
            pool = [(xs[i % 2], weights[i % n_w]) for i in range(max(n_w, 2))]
            timing = time_fn(lambda x, w: torch.mm(x, w.t(), out=out), pool, device=device,
                             warmup=min(n_w, 3), repeats=max(n_w, 5), min_repeats=5,
                             max_time_s=max_time_s)
            cost = linear_cost(m, d, f, prec)
            flops, nbytes = float(cost.flops), float(cost.bytes)
            points.append({"m": m, "d": d, "f": f, "flops": flops, "bytes": nbytes,
                           "intensity": flops / nbytes, "timing": timing.to_dict(),
                           "achieved_flops_per_s": flops / timing.median_s,
                           "attainable_flops_per_s": float(attainable_flops_per_s(flops / nbytes,
                                                                                  accelerator, dtype)),
                           "weight_copies": n_w})
            del xs, out
    del weights
    return points

"""Honest wall times: warm-up, many repeats, median and interquartile range; several points timed
round-robin (`time_interleaved`) where their ratio is what matters.

Each timed call is bracketed by CUDA events on a GPU, or by a synchronisation and the host's
monotonic clock elsewhere, so queued device work is never mistaken for finished work. Inputs
rotate through a pool made beforehand: no call sees the data of the call before it (a cache
cannot flatter the result) and making inputs is never timed.
"""
from __future__ import annotations

import contextlib
import contextvars
import time
from dataclasses import dataclass

import numpy as np

from inferlab.measure import device as _device
from inferlab.base.input_checks import nonneg_int, positive_float, positive_int


@dataclass(frozen=True)
class Timing:
    """Repeated times of one operation in seconds, with summary statistics."""

    samples_s: tuple
    warmup: int = 0
    method: str = "host-clock"
    contention: float | None = None  # share of all CPUs other processes used meanwhile

    def __post_init__(self):
        if not self.samples_s:
            raise ValueError("a Timing needs at least one sample; got none")

    @property
    def n(self) -> int:
        return len(self.samples_s)

    @property
    def median_s(self) -> float:
        return float(np.median(self.samples_s))

    @property
    def q1_s(self) -> float:
        return float(np.percentile(self.samples_s, 25))

    @property
    def q3_s(self) -> float:
        return float(np.percentile(self.samples_s, 75))

    @property
    def iqr_s(self) -> float:
        return self.q3_s - self.q1_s

    @property
    def rel_iqr(self) -> float:
        """Spread relative to the median: IQR / median."""
        return self.iqr_s / self.median_s if self.median_s > 0 else float("inf")

    @property
    def min_s(self) -> float:
        return float(min(self.samples_s))

    @property
    def max_s(self) -> float:
        return float(max(self.samples_s))

    def to_dict(self) -> dict:
        return {"median_s": self.median_s, "q1_s": self.q1_s, "q3_s": self.q3_s,
                "min_s": self.min_s, "max_s": self.max_s, "n": self.n, "warmup": self.warmup,
                "method": self.method, "contention": self.contention,
                "samples_s": [float(s) for s in self.samples_s]}

    @classmethod
    def from_dict(cls, d: dict) -> "Timing":
        return cls(tuple(d["samples_s"]), int(d.get("warmup", 0)), d.get("method", "host-clock"),
                   d.get("contention"))

    def __str__(self) -> str:
        return (f"{self.median_s * 1e3:.3g} ms (IQR {self.q1_s * 1e3:.3g}-{self.q3_s * 1e3:.3g}, "
                f"n={self.n})")


CLOCKS = ("wall", "thread-cpu")
_CLOCK = contextvars.ContextVar("inferlab_timing_clock", default="wall")


def current_clock(clock: str | None = None) -> str:
    """`clock`, else the one `using_clock` set, else "wall"."""
    return clock or _CLOCK.get()


@contextlib.contextmanager
def using_clock(clock: str):
    """Every `time_fn` and `time_interleaved` inside the block that names no clock uses `clock` (a whole run, its
    ceilings and operator profile included, then times by one clock)."""
    _check_clock(clock, "cpu")
    token = _CLOCK.set(clock)
    try:
        yield
    finally:
        _CLOCK.reset(token)


def _checked_timing_args(clock, device, warmup, repeats, min_repeats, max_time_s) -> str:
    """The clock to use (`clock`, else the one `using_clock` set), after checking every argument
    `time_fn` and `time_interleaved` share; a bad one raises ValueError naming it."""
    clock = clock or _CLOCK.get()
    _check_clock(clock, device)
    nonneg_int("warmup", warmup)
    positive_int("repeats", repeats)
    positive_int("min_repeats", min_repeats)
    if max_time_s is not None:
        positive_float("max_time_s", max_time_s)
    return clock


def time_fn(fn, inputs=None, *, device: str = "cpu", warmup: int = 2, repeats: int = 10,
            min_repeats: int = 3, max_time_s: float | None = None, clock: str | None = None) -> Timing:
    """Time `fn(*inputs[i % len(inputs)])` (or `fn()` without inputs) `repeats` times after
    `warmup` untimed calls. With `max_time_s`, stop early once `min_repeats` calls are done and
    the timed calls have taken that long. CUDA: events around each call; else synchronise the
    device, read time.perf_counter, call, synchronise, read it again; with clock="thread-cpu", the
    calling thread's CPU time instead (`_one_call_timer`); no clock: the one `using_clock` set, else
    "wall". The Timing records the share of the machine's CPUs other processes used meanwhile
    (`contention`)."""
    clock = _checked_timing_args(clock, device, warmup, repeats, min_repeats, max_time_s)
    pool = list(inputs) if inputs is not None else [()]
    if not pool:
        raise ValueError("inputs must hold at least one argument tuple; got an empty pool")
    min_repeats = min(min_repeats, repeats)

    def call(i):
        args = pool[i % len(pool)]
        return fn(*args) if isinstance(args, tuple) else fn(args)

    for i in range(warmup):
        call(i)
    one = _one_call_timer(device, clock)
    samples, spent = [], 0.0
    meter = _device.CpuMeter()
    for i in range(repeats):
        sample_s, wall_s = one(call, warmup + i)
        samples.append(sample_s)
        spent += wall_s
        if max_time_s is not None and i + 1 >= min_repeats and spent >= max_time_s:
            break
    return Timing(tuple(samples), warmup, _method(device, clock), meter.others_share())


def _check_clock(clock: str, device: str) -> None:
    if clock not in CLOCKS:
        raise ValueError(f"clock must be one of {', '.join(CLOCKS)}; got {clock!r}")
    if clock == "thread-cpu" and device != "cpu":
        raise ValueError(f"clock 'thread-cpu' times work done on the calling thread, so a CPU device only; "
                         f"got device {device!r}")


def _method(device: str, clock: str) -> str:
    return "thread-cpu-time" if clock == "thread-cpu" else ("cuda-events" if device == "cuda" else "host-clock")


def _one_call_timer(device: str, clock: str = "wall"):
    """A function (call, k) -> (seconds of call(k), host wall seconds it took): CUDA events around it on a GPU,
    else synchronise the device, read time.perf_counter, call, synchronise, read it again. clock="thread-cpu"
    (CPU device): the calling thread's CPU time (time.thread_time) of the call, which is its cost where torch runs
    it on that thread alone (one intra-op thread): the time the host kept it waiting for a CPU is not in it."""
    if clock == "thread-cpu":
        def one_cpu(call, k):
            t0, c0 = time.perf_counter(), time.thread_time()
            call(k)
            return time.thread_time() - c0, time.perf_counter() - t0
        return one_cpu
    if device == "cuda":
        import torch
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def one(call, k):
        _device.synchronize(device)
        t0 = time.perf_counter()
        if device == "cuda":
            start.record()
            call(k)
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3, time.perf_counter() - t0
        call(k)
        _device.synchronize(device)
        took = time.perf_counter() - t0
        return took, took
    return one


def time_interleaved(points, *, device: str = "cpu", warmup: int = 2, repeats: int = 10, min_repeats: int = 3,
                     max_time_s: float | None = None, clock: str | None = None) -> list:
    """Time several operations round-robin, one Timing each (its samples in round order; its median the point's
    time). `points`: (fn, inputs) pairs as `time_fn` takes them. Every round calls each point once, in turn, so a
    change in the host's load (another process's burst, a throttled core) falls on every point alike instead of on
    the points measured while it lasted; a uniform slowdown scales every point by the same factor, and so leaves
    their ratios alone. `warmup` untimed rounds, then `repeats` rounds, or fewer once `min_repeats` are done and
    the timed calls have taken `max_time_s` per point (wall time). `clock` as for `time_fn`. Each Timing records
    the contention of the whole run."""
    clock = _checked_timing_args(clock, device, warmup, repeats, min_repeats, max_time_s)
    points = list(points)
    if not points:
        raise ValueError("points must hold at least one (fn, inputs) pair; got none")
    calls = []
    for fn, inputs in points:
        pool = list(inputs) if inputs is not None else [()]
        if not pool:
            raise ValueError("inputs must hold at least one argument tuple; got an empty pool")

        def call(i, fn=fn, pool=pool):
            args = pool[i % len(pool)]
            return fn(*args) if isinstance(args, tuple) else fn(args)
        calls.append(call)
    min_repeats = min(min_repeats, repeats)
    for i in range(warmup):
        for call in calls:
            call(i)
    one = _one_call_timer(device, clock)
    samples, spent = [[] for _ in calls], 0.0
    meter = _device.CpuMeter()
    for r in range(repeats):
        for j, call in enumerate(calls):
            sample_s, wall_s = one(call, warmup + r)
            samples[j].append(sample_s)
            spent += wall_s
        if max_time_s is not None and r + 1 >= min_repeats and spent >= max_time_s * len(calls):
            break
    share = meter.others_share()
    return [Timing(tuple(s), warmup, _method(device, clock), share) for s in samples]

"""Decode MBU against the read stream timed IN THE SAME ROUNDS as the step.

    MBU_paired = median over rounds i of  (step bytes / step_i) / (buffer bytes / read_i)
               = median_i  step_bytes * read_i / (buffer_bytes * step_i)

A decode step at B = 1 reads its weights and KV cache once; the fraction of the memory's read
bandwidth it reaches is its bytes per second over what a plain read-only stream gets AT THE SAME
MOMENT. The run's ceilings are measured around each phase, minutes from the step: on a host whose
speed moves by 20-60 % within a run (the 2-vCPU Xeon VM of the README's repeatability tables), the
median of those estimates put five consecutive runs' MBU at 0.67-1.08 for steps that ran at the same
share of the stream. Here the stream's kernel (the fastest of `ceilings.READ_KERNELS` at the run's
start) runs round-robin with the step and its drift probe (`drift.probed`), over a buffer of the
ceilings' size, so a slow spell of the host falls on the step and on the stream of the same round
alike and cancels in their ratio; the median over rounds drops a round that one of them lost to an
interruption. The median of the run's estimates (`mbu`) stays in the record beside it.

Assumptions: the stream and the step compete for the same memory in the same way (both read from
DRAM: the buffer is several times the last-level cache, and the step's weights are too); a round's
two calls are far shorter than the host's spells (0.1-0.2 s against tens of seconds).
"""
from __future__ import annotations

import math

import numpy as np


def paired_mbu(step_bytes: float, step_samples_s, read_bytes: float, read_samples_s) -> dict:
    """{'mbu', 'mbu_of_medians', 'rounds', 'read_bytes_per_s'}: `mbu` = the median over rounds of
    (step_bytes / step_i) / (read_bytes / read_i), samples paired by round (the same length);
    `mbu_of_medians` = the same from the two medians; `read_bytes_per_s` = read_bytes / median read."""
    for name, v in (("step_bytes", step_bytes), ("read_bytes", read_bytes)):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            raise ValueError(f"{name} must be a positive, finite number of bytes; got {v!r}")
    step = np.asarray(step_samples_s, dtype=float)
    read = np.asarray(read_samples_s, dtype=float)
    if step.ndim != 1 or step.size == 0 or step.shape != read.shape:
        raise ValueError(f"step_samples_s and read_samples_s must be two equal-length, non-empty lists of "
                         f"seconds, one per round; got {step.size} and {read.size}")
    if not (np.all(np.isfinite(step)) and np.all(step > 0) and np.all(np.isfinite(read)) and np.all(read > 0)):
        raise ValueError("step_samples_s and read_samples_s must hold positive, finite seconds")
    per_round = step_bytes * read / (read_bytes * step)
    return {"mbu": float(np.median(per_round)),
            "mbu_of_medians": float(step_bytes * np.median(read) / (read_bytes * np.median(step))),
            "rounds": int(step.size), "read_bytes_per_s": float(read_bytes / np.median(read))}


class PairedRead:
    """A read-only stream over one fp32 buffer of `nbytes` with `kernel` (ceilings.read_kernel), to
    be timed in the same rounds as a decode step: `timer(inner)` wraps a round-robin timer so each
    round also calls the stream (last), and keeps its Timing in `last`."""

    def __init__(self, device: str, nbytes: float, kernel: str, seed: int = 0):
        from inferlab.measure.ceilings import READ_KERNELS, generator, random_tensor, read_kernel

        if kernel not in READ_KERNELS:
            raise ValueError(f"kernel must be one of {', '.join(READ_KERNELS)}; got {kernel!r}")
        if not (isinstance(nbytes, (int, float)) and math.isfinite(nbytes) and nbytes >= 4 * 2048):
            raise ValueError(f"nbytes must be at least {4 * 2048} bytes (one row of 2048 fp32); got {nbytes!r}")
        n = int(nbytes) // 4
        n -= n % 2048
        gen = generator(device, seed)
        self._src = random_tensor((n,), "fp32", device, gen)
        self.kernel, self.nbytes = kernel, float(n * 4)
        self.fn, self.pool = read_kernel(kernel, self._src, gen)
        self.last = None

    def timer(self, inner):
        """A timer over points that appends the stream as the last point of every round, returns the
        other points' Timings as `inner` would, and keeps the stream's in `last`."""
        def timed(points):
            *ts, self.last = inner(list(points) + [(self.fn, self.pool)])
            return ts
        return timed

    def record(self, step_bytes: float, step_timing) -> dict:
        """The paired figures of the step timed with the stream's last run (`paired_mbu`), with the
        stream's kernel, buffer and samples."""
        if self.last is None:
            raise ValueError("no stream was timed with this step: wrap its timer with PairedRead.timer first")
        out = paired_mbu(step_bytes, step_timing.samples_s, self.nbytes, self.last.samples_s)
        out.update({"kernel": self.kernel, "buffer_bytes": self.nbytes,
                    "read_samples_s": [float(x) for x in self.last.samples_s]})
        self.last = None
        return out

    def release(self):
        self._src = self.fn = self.pool = self.last = None


__all__ = ["PairedRead", "paired_mbu"]

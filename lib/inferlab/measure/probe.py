"""The linear probe: F.linear timed over weight copies that rotate past the last-level cache.

One kernel serves three timings: the operator profile's linear layers (measure.profile), the drift
probe beside each end-to-end point (measure.drift) and the host-speed probe at every step of a live
engine (serving.study.hostspeed). Each wants what the model's pass sees: a weight read from memory, never
from a cache that a repeated call on one buffer would warm.

    copies  = ceil(2 x cache_bytes / weight bytes) + 1, at least 2, at most MAX_COPIES, and at most
              what `pool_bytes` holds (at least 1; None: no limit): the copies together exceed twice the cache
    pool(m) = (x_i, W_i) for i in 0 ... max(copies, 2) - 1, x alternating over two m-row inputs

Every copy is read once, untimed, before its first timed call (`warm_rotation`): on the 2-vCPU
Xeon VM a buffer's first read after it was written (or after a minute unread) ran slow, and fast
from the second read on (measure.drift's docstring traces it). cpu-0.5b in fp32 on that VM: 13
copies of the 46 MB 2048 x 5632 weight; in bf16, 25 copies of the 23 MB 2048 x 5632 weight.
"""
from __future__ import annotations

import math
import time

from inferlab.measure.ceilings import generator, random_tensor, torch_dtype
from inferlab.base.units import bytes_per_element
from inferlab.base.input_checks import positive_float, positive_int

MAX_COPIES = 32  # a weight small enough to need more stays in a large cache: see weight_copies


def weight_copies(nbytes: float, cache_bytes: float, pool_bytes: float | None = None) -> int:
    """How many copies of an `nbytes` buffer rotate so that together they exceed twice `cache_bytes`:
    ceil(2 cache / nbytes) + 1, at least 2, at most MAX_COPIES and at most pool_bytes // nbytes (at
    least 1; None: no limit). The cap leaves a buffer under 2 cache / MAX_COPIES partly cached."""
    nbytes = max(float(nbytes), 1.0)
    n = max(2, math.ceil(2 * float(cache_bytes) / nbytes) + 1)
    if pool_bytes is not None:
        n = min(n, int(float(pool_bytes) // nbytes))
    return max(1, min(n, MAX_COPIES))


def warm_rotation(fn, pool) -> int:
    """Call `fn` once on every entry of `pool`, untimed; returns the number of calls.

    Why: on the 2-vCPU Xeon VM, a buffer's first read after it was written (or after a minute
    unread) is slow, and fast from the second read on. Traced there: the 2048 x 2048 fp32 linear at
    one row, the first size timed on 32 freshly filled weight copies, read 1.3-2.6 ms (one call
    6.1 ms) through its first pass over the copies and 0.76-0.97 ms after, against 0.74-1.02 ms at
    two rows, timed next on the same copies; its median, 1.33 ms, then served as the 1-row drift
    probe's reference (drift.py), which the probe, warmed the same way, read at 0.9-1.0 ms: a ratio
    of 0.68-0.78 on a host that had not moved. The warm-up of 2 calls reads 2 of the copies; one
    rotation reads them all, so the profile times what the model's steps and the probes see,
    buffers read before. The mechanism of the slow first read is not established."""
    n = 0
    for args in pool:
        fn(*args) if isinstance(args, tuple) else fn(args)
        n += 1
    return n


class LinearProbe:
    """F.linear with a `d_out` x `d_in` weight in `dtype` on `device`, rotating over `copies` weight
    copies (default: weight_copies of `cache_bytes` within `pool_bytes`; module doc).

    pool(m): the (input, weight) pairs a timer rotates over at m rows; warm(m): every copy read once,
    untimed; calling the probe runs one row through the next copy and returns its seconds
    (time.perf_counter around it: CPU only, where ops are synchronous)."""

    def __init__(self, d_in: int, d_out: int, dtype: str, device: str = "cpu", *, cache_bytes: float = 0.0,
                 pool_bytes: float | None = None, copies: int | None = None, seed: int = 0, gen=None):
        self.d_in = int(positive_int("d_in", d_in, maximum=1 << 20))
        self.d_out = int(positive_int("d_out", d_out, maximum=1 << 20))
        torch_dtype(dtype)
        positive_float("cache_bytes", cache_bytes, allow_zero=True)
        if pool_bytes is not None:
            positive_float("pool_bytes", pool_bytes)
        if copies is None:
            copies = weight_copies(self.d_in * self.d_out * bytes_per_element(dtype), cache_bytes, pool_bytes)
        n = int(positive_int("copies", copies, maximum=4096))
        self.dtype, self.device = dtype, device
        self._gen = generator(device, seed) if gen is None else gen
        self.weights = [random_tensor((self.d_out, self.d_in), dtype, device, self._gen, 0.02) for _ in range(n)]
        self._inputs = {}
        self.calls = 0
        self.warmed = False

    @classmethod
    def for_model(cls, cfg, dtype: str = "bf16", cache_bytes: float = 0.0, seed: int = 0) -> "LinearProbe":
        """The host-speed probe of a ModelConfig on the CPU: its MLP up-projection (d_model -> d_ff),
        the kernel of a decode step's linear layers, in a dtype a live CPU engine runs (fp32, bf16)."""
        torch_dtype(dtype, allowed=("fp32", "bf16"))
        return cls(cfg.d_model, cfg.d_ff, dtype, "cpu", cache_bytes=cache_bytes, seed=seed)

    @property
    def weight_bytes(self) -> int:
        return sum(w.numel() * w.element_size() for w in self.weights)

    def inputs(self, m: int) -> list:
        """Two m-row inputs (kept until release_inputs)."""
        m = int(positive_int("m", m, maximum=1 << 24))
        if m not in self._inputs:
            self._inputs[m] = [random_tensor((m, self.d_in), self.dtype, self.device, self._gen) for _ in range(2)]
        return self._inputs[m]

    def pool(self, m: int) -> list:
        """[(x, W)] at m rows: every weight copy once, the inputs alternating (at least 2 entries)."""
        xs, ws = self.inputs(m), self.weights
        return [(xs[i % 2], ws[i % len(ws)]) for i in range(max(len(ws), 2))]

    def warm(self, m: int = 1, fn=None) -> int:
        """Read every weight copy once at m rows, untimed (`fn`: the kernel, default F.linear)."""
        import torch
        import torch.nn.functional as F

        with torch.inference_mode():
            n = warm_rotation(F.linear if fn is None else fn, self.pool(m))
        self.warmed = True
        return n

    def __call__(self) -> float:
        import torch
        import torch.nn.functional as F

        if not self.warmed:
            self.warm()
        x, w = self.inputs(1)[0], self.weights[self.calls % len(self.weights)]
        self.calls += 1
        with torch.inference_mode():
            t = time.perf_counter()
            F.linear(x, w)
            return time.perf_counter() - t

    def release_inputs(self) -> None:
        self._inputs.clear()


__all__ = ["MAX_COPIES", "LinearProbe", "warm_rotation", "weight_copies"]

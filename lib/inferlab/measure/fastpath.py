"""Which dtypes have a fast matrix product here: a cheap probe that keeps slow paths out of a run.

Some CPUs have no fast path for bf16 (no AVX512-BF16 or AMX instructions; most AVX2-only laptops and cloud
CPUs): torch then converts element by element, at 1/50 to 1/500 of fp32's rate, a rate that falls further with
size (one such CPU: a 512^2 bf16 product 0.18 s, 2048^2 99 s, against 0.26 s in fp32). Timing such a kernel at
the planned size costs minutes to learn "not this dtype", so every product is priced before it is timed.

probe        rate(dt) = 2 n^3 / median of PROBE_CALLS products at n = PROBE_N (after one warm-up call)
no fast path on a CPU: rate(dt) < FAST_PATH_SHARE x rate(fp32)   (a GPU's half types are its tensor-core path)
Every product the suite times is priced first on a ladder of single calls (ceilings.affordable_n), so even a
dtype asked for by name cannot stall a run on one call.
Assumptions: the probe's size is small enough to cost under a second on a slow path (512^2 bf16: 0.2 s) and
large enough that a fast path beats FAST_PATH_SHARE of fp32 there (seen: 0.5-2x fp32 where bf16 is fast).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

from inferlab.measure.ceilings import call_s, matmul_flops
from inferlab.base.input_checks import positive_int

PROBE_N = 512
PROBE_CALLS = 3
FAST_PATH_SHARE = 0.25
REFERENCE = "fp32"


@dataclass(frozen=True)
class DtypeProbe:
    """Product rates at the probe's size, and the dtypes excluded for having no fast path (with the reason)."""

    device: str
    n: int
    flops_per_s: dict = field(hash=False)
    excluded: dict = field(default_factory=dict, hash=False)

    def usable(self, dtypes) -> list:
        return [d for d in dtypes if d not in self.excluded]

    def to_dict(self) -> dict:
        return {"device": self.device, "n": self.n, "flops_per_s": dict(self.flops_per_s),
                "excluded": dict(self.excluded), "fast_path_share": FAST_PATH_SHARE}


def no_fast_path_reason(dtype: str, rate: float, reference_rate: float) -> str:
    return (f"{dtype} product: {rate / 1e9:.2g} GFLOP/s, 1/{reference_rate / rate:.0f} of {REFERENCE} "
            f"({reference_rate / 1e9:.3g} GFLOP/s): no fast path on this CPU; not a candidate")


def probe_dtypes(device: str, dtypes, *, n: int = PROBE_N, seed: int = 0, product=None) -> DtypeProbe:
    """Each dtype's product rate at n (and fp32's, the reference); on a CPU, the dtypes below FAST_PATH_SHARE
    of fp32 are excluded. On a GPU nothing is excluded (rates are still taken)."""
    positive_int("n", n)
    dtypes = list(dict.fromkeys([REFERENCE, *dtypes] if device == "cpu" else dtypes))
    rates = {dt: matmul_flops(n) / call_s(device, dt, n, seed=seed, product=product, calls=PROBE_CALLS, warmup=1)
             for dt in dtypes}
    excluded = {}
    if device == "cpu":
        ref = rates[REFERENCE]
        excluded = {dt: no_fast_path_reason(dt, r, ref) for dt, r in rates.items()
                    if dt != REFERENCE and r < FAST_PATH_SHARE * ref}
    return DtypeProbe(device, int(n), rates, excluded)


@functools.lru_cache(maxsize=8)
def device_probe(device: str) -> DtypeProbe:
    """probe_dtypes(device, fp32 and bf16) with torch's products, once per process (an instruction set does not
    change while a process runs). What the suite, the serving validation and the live loop consult."""
    return probe_dtypes(device, ["fp32", "bf16"] if device == "cpu" else ["bf16"])


def check_fast_path(device: str, dtype: str, parameter: str = "dtype", probe: DtypeProbe | None = None) -> None:
    """Raise ValueError naming `parameter` when `dtype` has no fast path on `device` (CPU only)."""
    if device != "cpu" or dtype == REFERENCE:
        return
    probe = probe or device_probe(device)
    if dtype in probe.excluded:
        raise ValueError(f"{parameter} {dtype!r} cannot be measured in reasonable time here: "
                         f"{probe.excluded[dtype]} (allowed on this CPU: "
                         f"{', '.join(d for d in probe.flops_per_s if d not in probe.excluded)})")


def preferred_dtype(device: str, preferred: str, probe: DtypeProbe | None = None) -> tuple[str, str]:
    """(dtype, reason): `preferred` where it has a fast path, else fp32 with the probe's reason."""
    if device != "cpu":
        return preferred, f"{preferred} on {device}"
    if preferred == REFERENCE:
        return preferred, f"{preferred} (the reference dtype)"
    probe = probe or device_probe(device)
    if preferred in probe.excluded:
        return REFERENCE, f"{REFERENCE}: {probe.excluded[preferred]}"
    return preferred, f"{preferred}: fast path on this CPU (probe at {probe.n}^2)"

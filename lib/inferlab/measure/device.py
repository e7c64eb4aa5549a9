"""Which device runs the measurements, what it is, and how much memory is free on it.

CUDA if present, else Apple's MPS, else the CPU. Free memory: torch.cuda.mem_get_info plus the
blocks PyTorch's allocator holds unused; on Linux /proc/meminfo MemAvailable, capped by the
cgroup limit a container sets (psutil is not a dependency).
"""
from __future__ import annotations

import os
import platform
import re
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from inferlab.base.input_checks import choice

DEVICE_KINDS = ("auto", "cuda", "mps", "cpu")

@dataclass(frozen=True)
class DeviceInfo:
    """One device as the harness sees it. Memory and cache sizes in bytes; `cache_bytes` is the
    last-level cache of a CPU or the L2 of a GPU (0 when unknown)."""

    kind: str
    name: str
    total_memory_bytes: float
    free_memory_bytes: float
    cache_bytes: float
    threads: int
    blas: str
    datasheet: str | None = None
    load_average: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def resolve_kind(kind: str = "auto") -> str:
    """'auto' becomes cuda, else mps, else cpu; an explicit kind must be available here."""
    import torch

    choice("device", kind, DEVICE_KINDS)
    available = {"cuda": torch.cuda.is_available(),
                 "mps": bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()),
                 "cpu": True}
    if kind == "auto":
        return next(k for k in ("cuda", "mps", "cpu") if available[k])
    if not available[kind]:
        here = ", ".join(k for k, ok in available.items() if ok)
        raise ValueError(f"device {kind!r} is not available on this machine (available: {here})")
    return kind


def _meminfo() -> dict:
    out = {}
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            key, _, rest = line.partition(":")
            parts = rest.split()
            if parts and parts[0].isdigit():
                out[key] = int(parts[0]) * (1024 if len(parts) > 1 and parts[1] == "kB" else 1)
    except OSError:
        pass
    return out


def _cgroup_free() -> float | None:
    """Bytes left under a container's memory limit (cgroup v2, then v1), or None without one."""
    for limit_file, usage_file in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            limit = Path(limit_file).read_text().strip()
            usage = Path(usage_file).read_text().strip()
        except OSError:
            continue
        if limit.isdigit() and usage.isdigit() and int(limit) < 2**60:
            return float(int(limit) - int(usage))
    return None


def cpu_memory_bytes() -> tuple[float, float]:
    """(total, available) host memory: MemTotal and MemAvailable, capped by a cgroup limit."""
    info = _meminfo()
    if "MemTotal" in info and "MemAvailable" in info:
        total, free = float(info["MemTotal"]), float(info["MemAvailable"])
    else:  # not Linux: physical pages from sysconf (free pages undercount the page cache)
        try:
            page = os.sysconf("SC_PAGE_SIZE")
            total = float(page * os.sysconf("SC_PHYS_PAGES"))
            free = float(page * os.sysconf("SC_AVPHYS_PAGES"))
        except (ValueError, OSError, AttributeError):
            total = free = 0.0
    cg = _cgroup_free()
    if cg is not None:
        free = min(free, cg)
    return total, free


def free_memory_bytes(kind: str) -> float:
    """Bytes that can still be allocated on `kind` ('cpu', 'cuda' or 'mps') right now."""
    import torch

    if kind == "cuda":
        free, _ = torch.cuda.mem_get_info()
        return float(free + torch.cuda.memory_reserved() - torch.cuda.memory_allocated())
    if kind == "mps":
        return float(torch.mps.recommended_max_memory() - torch.mps.driver_allocated_memory())
    return cpu_memory_bytes()[1]


def synchronize(kind: str) -> None:
    """Wait for the device to finish queued work (a no-op on the CPU, whose ops are synchronous)."""
    import torch

    if kind == "cuda":
        torch.cuda.synchronize()
    elif kind == "mps":
        torch.mps.synchronize()


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def llc_bytes() -> float:
    """Size of the CPU's last-level cache from sysfs (the highest cache level), 0 if unknown."""
    best_level, size = -1, 0.0
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            level = int((index / "level").read_text())
            text = (index / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        m = re.fullmatch(r"(\d+)([KMG]?)", text)
        if m and level >= best_level:
            best_level = level
            size = float(int(m.group(1)) * {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[m.group(2)])
    return size


def blas_info() -> str:
    """The BLAS torch was built with (MKL, OpenBLAS, ...) and whether oneDNN is on."""
    import torch

    m = re.search(r"BLAS_INFO=(\w+)", torch.__config__.show())
    blas = m.group(1) if m else "unknown"
    if torch.backends.mkldnn.is_available():
        blas += " + oneDNN"
    return blas


def datasheet_name(device_name: str) -> str | None:
    """The data/accelerators.toml entry for a device name as torch reports it, or None: the entry
    whose `device_name_pattern` the name matches (`core.specs.accelerator_for_device`)."""
    from inferlab.core.specs import accelerator_for_device

    return accelerator_for_device(device_name)


def describe(kind: str = "auto") -> DeviceInfo:
    """Probe the device: its name, memory, cache, threads and the matching datasheet entry."""
    import torch

    kind = resolve_kind(kind)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    if kind == "cuda":
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        name = props.name
        return DeviceInfo("cuda", name, float(props.total_memory), free_memory_bytes("cuda"),
                          float(getattr(props, "L2_cache_size", 0) or 0), props.multi_processor_count,
                          f"CUDA {torch.version.cuda or torch.version.hip}", datasheet_name(name), load)
    if kind == "mps":
        total = float(torch.mps.recommended_max_memory())
        return DeviceInfo("mps", f"Apple MPS ({platform.machine()})", total, free_memory_bytes("mps"),
                          0.0, 0, "Metal", None, load)
    total, free = cpu_memory_bytes()
    return DeviceInfo("cpu", cpu_name(), total, free, llc_bytes(), torch.get_num_threads(),
                      blas_info(), None, load)


def other_runnable() -> int:
    """Runnable processes besides this one, from /proc/loadavg (0 where it does not exist)."""
    try:
        running = int(Path("/proc/loadavg").read_text().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return 0
    own = 0
    for task in Path("/proc/self/task").glob("*"):
        try:
            own += (task / "stat").read_text().rsplit(")", 1)[1].split()[0] == "R"
        except (OSError, IndexError):
            continue
    return max(running - max(own, 1), 0)


class CpuMeter:
    """How much of the machine's CPU time other processes took between two readings: the busy
    ticks of /proc/stat minus this process's own and its reaped children's (/proc/self/stat),
    over wall time x CPUs.
    None where /proc does not exist."""

    HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    def __init__(self):
        self.start = self._read()

    @staticmethod
    def _read():
        try:
            fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
            busy = sum(int(x) for i, x in enumerate(fields[:8]) if i not in (3, 4))  # not idle, iowait
            own = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
            # utime + stime of all threads, plus cutime + cstime: the run's own child processes
            # (the ranks of `measure --tp`) once they have been waited for are not "others"
            mine = int(own[11]) + int(own[12]) + int(own[13]) + int(own[14])
        except (OSError, ValueError, IndexError):
            return None
        return busy, mine, time.perf_counter()

    MIN_WALL_S = 0.25  # /proc/stat counts 10 ms ticks: shorter windows are too coarse to read

    def others_share(self) -> float | None:
        """Fraction (0..1) of all CPUs that other processes used since the meter started
        (None for windows under MIN_WALL_S or without /proc)."""
        end = self._read()
        if self.start is None or end is None:
            return None
        wall = end[2] - self.start[2]
        if wall < self.MIN_WALL_S:
            return None
        others = (end[0] - self.start[0]) - (end[1] - self.start[1])
        return min(max(others / self.HZ / (wall * (os.cpu_count() or 1)), 0.0), 1.0)


def spare_share(threads: int) -> float:
    """Share of the machine's CPUs a run with `threads` threads leaves to others: what other
    processes may use before they compete with it (0 when it uses every CPU)."""
    n = os.cpu_count() or 1
    return max(n - int(threads), 0) / n


def versions() -> dict:
    """Versions that change a measurement: Python, torch (and its CUDA), numpy, inferlab, OS."""
    import numpy
    import torch

    import inferlab

    return {"python": sys.version.split()[0], "torch": torch.__version__,
            "cuda": torch.version.cuda, "numpy": numpy.__version__, "inferlab": inferlab.__version__,
            "platform": platform.platform()}

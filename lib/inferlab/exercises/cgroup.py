"""A cgroup v2 per submission, where the host delegates one: total memory (`memory.max`, which counts tmpfs,
memfd and shared memory, unlike RLIMIT_AS) and processes (`pids.max`) enforced by the kernel for the whole sandbox.

Detection (`detect`): the grader's own cgroup from /proc/self/cgroup (the `0::/path` line) under the cgroup2
mount found in /proc/self/mountinfo. It is usable when that folder is writable by the grader and its
`cgroup.controllers` lists `memory` and `pids`. Then (`Cgroups.prepare`) the grader moves itself into a leaf
`inferlab-grader` (a cgroup with processes cannot hand controllers to its children) and enables `+memory +pids`
in `cgroup.subtree_control`; each submission gets a child `inferlab-<n>` with `memory.max`, `memory.swap.max` = 0
and `pids.max`, and its sandbox starts inside it (`enter`, called in the child before exec). Where no delegated
cgroup v2 exists (cgroup v1 hosts, a hierarchy without the memory controller, no write access), `detect`
returns None and the reason, and the sandbox keeps its rlimits, tmpfs sizes and seccomp filter only.

Every path is a parameter, so the logic is tested against a folder that imitates a cgroup tree; the kernel's
enforcement itself is tested only where the host delegates a cgroup v2 (not on the machine these tests were
written on: cgroup v1 for memory).
"""
from __future__ import annotations

import itertools
import os
from pathlib import Path

_COUNTER = itertools.count()


def own_cgroup(proc_cgroup: str, mountinfo: str) -> Path | None:
    """The folder of this process's cgroup v2: the `0::/path` line of /proc/self/cgroup joined to the mount point
    of the cgroup2 file system in /proc/self/mountinfo; None without either."""
    rel = next((line.split("::", 1)[1].strip() for line in proc_cgroup.splitlines() if line.startswith("0::")), None)
    mount = None
    for line in mountinfo.splitlines():
        fields = line.split()
        if " - " in line and line.split(" - ", 1)[1].split()[0] == "cgroup2" and len(fields) > 4:
            mount = fields[4]
            break
    if rel is None or mount is None:
        return None
    return Path(mount) / rel.lstrip("/")


def unusable_reason(base: Path) -> str | None:
    """None when `base` can hold per-submission cgroups with memory and pids limits, else why not (one line)."""
    try:
        controllers = (base / "cgroup.controllers").read_text().split()
    except OSError as exc:
        return f"no cgroup v2 folder at {base} ({exc.strerror})"
    missing = [c for c in ("memory", "pids") if c not in controllers]
    if missing:
        return (f"the cgroup v2 at {base} has no {' and '.join(missing)} controller (bound to cgroup v1, or not "
                "delegated)")
    if not os.access(base, os.W_OK) or not os.access(base / "cgroup.subtree_control", os.W_OK):
        return f"the cgroup v2 at {base} is not delegated to this user (not writable)"
    return None


class Cgroups:
    """Per-submission cgroups under a delegated `base` (see the module docstring)."""

    def __init__(self, base: Path):
        self.base = Path(base)

    def prepare(self, pid: int | None = None) -> None:
        """Move the grader (`pid`, default this process) into the leaf `inferlab-grader` and hand the memory
        and pids controllers to the children of `base`."""
        leaf = self.base / "inferlab-grader"
        leaf.mkdir(exist_ok=True)
        (leaf / "cgroup.procs").write_text(f"{pid or os.getpid()}\n")
        (self.base / "cgroup.subtree_control").write_text("+memory +pids\n")

    def create(self, memory_bytes: int, pids: int) -> Path:
        """A fresh child cgroup with memory.max = `memory_bytes` (no swap) and pids.max = `pids` (0: no limit)."""
        path = self.base / f"inferlab-{os.getpid()}-{next(_COUNTER)}"
        path.mkdir()
        (path / "memory.max").write_text(f"{int(memory_bytes)}\n" if memory_bytes else "max\n")
        swap = path / "memory.swap.max"
        if swap.exists():
            swap.write_text("0\n")
        (path / "pids.max").write_text(f"{int(pids)}\n" if pids else "max\n")
        return path

    @staticmethod
    def oom_kills(path: Path) -> int:
        """How many processes the kernel killed for memory.max in `path` (memory.events, `oom_kill N`)."""
        try:
            for line in (Path(path) / "memory.events").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0

    @staticmethod
    def remove(path: Path) -> None:
        """Remove a child cgroup once its processes are gone (rmdir; a cgroup's files go with it)."""
        try:
            os.rmdir(path)
        except OSError:
            pass


def enter(path: Path) -> None:
    """Move the calling process into the cgroup `path` (run in the child before exec: its sandbox starts inside)."""
    with open(Path(path) / "cgroup.procs", "w") as fh:
        fh.write(f"{os.getpid()}\n")


def detect(proc_cgroup_path="/proc/self/cgroup", mountinfo_path="/proc/self/mountinfo") -> tuple:
    """(Cgroups or None, reason): per-submission cgroups where the host delegates a cgroup v2, else None and why."""
    try:
        base = own_cgroup(Path(proc_cgroup_path).read_text(), Path(mountinfo_path).read_text())
    except OSError as exc:
        return None, f"cannot read the process's cgroup ({exc.strerror})"
    if base is None:
        return None, "no cgroup v2 hierarchy is mounted for this process"
    reason = unusable_reason(base)
    return (None, reason) if reason else (Cgroups(base), None)

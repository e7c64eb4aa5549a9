"""The grading sandbox: bubblewrap (`bwrap`) around each submission, with resource limits.

Each submission runs as `python sandbox_runner.py` inside a bwrap sandbox that

- sees a fresh root, read-only (`--remount-ro /`): /usr (and the /bin, /lib symlinks), a few files of /etc,
  the Python installation, the virtual environment and inferlab's source, all read-only; the grader's input
  folder (the copied notebook and the runner's arguments) read-only at INPUT; nothing else (not the other
  submissions, not the grades, not $HOME). Writable: only /home/student and /tmp (tmpfs of
  `Limits.disk_bytes` each) and /dev/shm (tmpfs of SHM_BYTES): a write past a tmpfs's size fails with ENOSPC
  inside the sandbox, and all three vanish with it. Nothing a submission writes lands on the grader's disk:
  the runner sends its report and executed notebook over a pipe (`sandbox_runner`, `safeio.FrameReader`);
- has inferlab/exercises replaced by `student_stub` (check without answers: no solution code, no
  expected values);
- has no network (own network namespace, loopback only, for the kernel's sockets), its own PID, IPC
  and UTS namespaces, a new session (no terminal injection), and dies with the grader
  (`--die-with-parent`): when its first process ends, every process in it is killed, so nothing
  outlives the kernel;
- runs as an unprivileged uid (when the grader is root: 61000 + the job slot, a uid of its own per
  parallel job) under rlimits: address space, CPU seconds, processes, file size; cells are budgeted by
  their own time by the runner (`sandbox_runner.Meter`: CPU time, or wall time less the host's run-queue
  waits), the grader kills the sandbox only at a wall-clock backstop (reported as "host too busy", not
  scored), and the notebook's output is capped at a byte budget;
- runs under a seccomp filter (`inferlab.exercises.seccomp`, x86-64): no memfd, no SysV shared memory, no
  new user namespace (and `--disable-userns` on the unprivileged path).

The limits are `Limits`; `command()` builds the argv. `available()` says whether bwrap works here.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import inferlab

HOME = "/home/student"
RUNNER = "/opt/inferlab-grader/sandbox_runner.py"
INPUT = "/opt/inferlab-grader/in"  # the grader's input folder, bound read-only
WRITABLE = (HOME, "/tmp", "/dev/shm")  # the sandbox's only writable folders, each a tmpfs
BASE_UID = 61000
SHM_BYTES = 64 * 10**6  # the sandbox's /dev/shm (a tmpfs of this size)
_ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "passwd", "group", "nsswitch.conf", "hosts",
        "localtime", "mime.types", "fonts")


@dataclass(frozen=True)
class Limits:
    """Per-submission limits. Memory is address space (RLIMIT_AS), per process; cpu_s per process."""

    memory_bytes: int = 4 * 10**9
    cpu_s: float = 300.0
    processes: int = 64
    file_bytes: int = 64 * 10**6
    output_bytes: int = 2 * 10**6
    # Disk quota: the size of each of the sandbox's two writable tmpfs, /home/student and /tmp (ENOSPC past it),
    # and the files (inodes) the three tmpfs may hold together: bwrap cannot size a tmpfs's inode count, so the
    # grader counts them every DISK_POLL_S and kills the run past it.
    disk_bytes: int = 256 * 10**6
    disk_files: int = 10_000

    def as_dict(self) -> dict:
        return {"memory_bytes": self.memory_bytes, "cpu_s": self.cpu_s, "processes": self.processes,
                "file_bytes": self.file_bytes, "output_bytes": self.output_bytes}


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


@functools.lru_cache(maxsize=1)
def unavailable_reason() -> str | None:
    """None when a bwrap sandbox starts here, else why not (one line)."""
    path = bwrap_path()
    if not path:
        return "bubblewrap (bwrap) is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    try:
        proc = subprocess.run([path, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                               "--size", "1000000", "--tmpfs", "/tmp", "--unshare-all", "--die-with-parent", "true"],
                              capture_output=True, timeout=300)  # a hang guard: a busy host slows the start
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap does not start ({exc})"
    if proc.returncode != 0:
        return f"bwrap does not start here ({proc.stderr.decode(errors='replace').strip()[:200]})"
    return None


def available() -> bool:
    return unavailable_reason() is None


def library_root() -> Path:
    """The folder holding the inferlab package (lib/ of an editable install, or site-packages)."""
    return Path(inferlab.__file__).resolve().parent.parent


def data_dir() -> Path:
    from inferlab.core.specs import data_dir as _data_dir
    return Path(_data_dir()).resolve()


def _read_only_paths() -> list[Path]:
    paths = {Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve(), Path(sys.executable).resolve().parent,
             library_root()}
    try:
        paths.add(data_dir())
    except Exception:  # no data folder: the notebook's own import will say so
        pass
    for p in sys.path:
        if p and Path(p).is_dir() and not Path(p).resolve().is_relative_to(Path.cwd().resolve() / "tmp"):
            rp = Path(p).resolve()
            if any(rp.is_relative_to(top) for top in (Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve())):
                paths.add(rp)
    # Keep the outermost of nested paths only.
    out = []
    for p in sorted(paths, key=lambda q: len(q.parts)):
        if str(p) in ("/", "/usr") or any(p.is_relative_to(q) for q in out):
            continue
        out.append(p)
    return out


def sandbox_uid(slot: int) -> int:
    """The uid a submission runs as when the grader is root (0 = keep the caller's)."""
    return BASE_UID + slot if os.getuid() == 0 else 0


def command(input_dir: Path, args_file: str, limits: Limits = Limits(), seccomp_fd: int | None = None,
            info_fd: int | None = None) -> list[str]:
    """The bwrap argv that runs the runner on `args_file` (a path inside the sandbox, under INPUT) with
    `input_dir` bound read-only at INPUT; /home/student (the working folder) and /tmp tmpfs of
    `limits.disk_bytes` each and /dev/shm one of SHM_BYTES (the kernel refuses a write past them: ENOSPC), the
    rest of the root read-only, and the seccomp filter read from `seccomp_fd` (`inferlab.exercises.seccomp`;
    the caller passes the fd). With `info_fd`, bwrap writes the sandbox's first process id there as JSON
    (`{"child-pid": N}`): the grader counts the files of the tmpfs through /proc/N/root (`WRITABLE`)."""
    bwrap = bwrap_path()
    if not bwrap:
        raise RuntimeError(unavailable_reason())
    cmd = [bwrap, "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-net", "--unshare-ipc",
           "--unshare-uts", "--unshare-cgroup-try", "--hostname", "sandbox"]
    if os.getuid() == 0:
        # The runner switches to an unprivileged uid first thing; these two capabilities are kept for
        # that only, and setuid() drops them with every other.
        cmd += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        cmd += ["--unshare-user", "--disable-userns"]
    if seccomp_fd is not None:
        cmd += ["--seccomp", str(seccomp_fd)]
    if info_fd is not None:
        cmd += ["--info-fd", str(info_fd)]
    cmd += ["--ro-bind", "/usr", "/usr"]
    for top in ("bin", "lib", "lib32", "lib64", "libx32", "sbin"):
        p = Path("/") / top
        if p.is_symlink():
            cmd += ["--symlink", os.readlink(p), str(p)]
        elif p.is_dir():
            cmd += ["--ro-bind", str(p), str(p)]
    for name in _ETC:
        p = Path("/etc") / name
        if p.exists():
            cmd += ["--ro-bind", str(p), str(p)]
    # /tmp and /dev/shm: tmpfs of a fixed size each (RAM, bounded by the kernel: a burst fails with ENOSPC).
    cmd += ["--proc", "/proc", "--dev", "/dev",
            "--perms", "1777", "--size", str(int(limits.disk_bytes)), "--tmpfs", "/tmp",
            "--perms", "1777", "--size", str(SHM_BYTES), "--tmpfs", "/dev/shm"]
    made = {Path("/"), Path("/usr"), Path("/etc"), Path("/tmp"), Path("/proc"), Path("/dev")}

    def parents(path: Path) -> list:
        """World-traversable folders above a mount point (bwrap would make them 0700)."""
        out = []
        for parent in reversed(path.parents):
            if parent not in made:
                made.add(parent)
                out += ["--perms", "0755", "--dir", str(parent)]
        return out

    bound = _read_only_paths()
    for p in bound:
        cmd += parents(p) + ["--ro-bind", str(p), str(p)]
        made.add(p)
    # A virtual environment reached through a symbolic link (a checkout whose .venv links elsewhere): the
    # interpreter is started by its unresolved path (so that it finds its pyvenv.cfg), which must exist inside.
    prefix = Path(sys.prefix)
    if prefix.is_absolute() and prefix != prefix.resolve() and not any(prefix.is_relative_to(q) for q in bound):
        cmd += parents(prefix) + ["--ro-bind", str(prefix.resolve()), str(prefix)]
        made.add(prefix)
    cmd += parents(Path(HOME)) + parents(Path(RUNNER))
    exercises_dir = Path(__file__).resolve().parent
    # /home/student: a tmpfs of disk_bytes, writable by the runner's uid (0777: the mount is the sandbox's own).
    cmd += ["--ro-bind", str(exercises_dir / "student_stub"), str(exercises_dir),
            "--ro-bind", str(exercises_dir / "sandbox_runner.py"), RUNNER,
            "--ro-bind", str(input_dir), INPUT,
            "--perms", "0777", "--size", str(int(limits.disk_bytes)), "--tmpfs", HOME,
            "--remount-ro", "/", "--chdir", HOME,
            "--setenv", "HOME", HOME, "--setenv", "TMPDIR", "/tmp"]
    return cmd + ["--", sys.executable, "-I", RUNNER, args_file]


def environment() -> dict:
    """The environment the sandbox starts with: nothing of the grader's but what Python needs."""
    env = {"PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]),
           "LANG": "C.UTF-8", "MPLBACKEND": "Agg", "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1",
           "JUPYTER_PLATFORM_DIRS": "1", "HOME": HOME, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "OPENBLAS_NUM_THREADS": "1",
           # The kernel imports the library the grader runs (the one whose exercises package the stub hides),
           # not whatever an editable install's .pth names (a checkout that may not be bound inside).
           "PYTHONPATH": str(library_root())}
    if os.environ.get("VIRTUAL_ENV"):
        env["VIRTUAL_ENV"] = os.environ["VIRTUAL_ENV"]
    if os.environ.get("INFERLAB_DATA"):
        env["INFERLAB_DATA"] = os.environ["INFERLAB_DATA"]
    return env

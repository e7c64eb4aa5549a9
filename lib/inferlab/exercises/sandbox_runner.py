"""Run one submitted notebook inside the grading sandbox and write what it answered, as data.

This file runs *inside* the sandbox (`python sandbox_runner.py ARGS.json`), so it imports nothing from
inferlab: the sandbox hides the exercises package (and its solutions) behind a stub. It

1. drops to an unprivileged uid when started as root (the sandbox keeps CAP_SETUID for this only),
2. sets its resource limits (address space, CPU time, processes, file size), inherited by the kernel,
3. executes the notebook cell by cell in a fresh kernel (errors allowed, output capped at a byte budget), each
   cell under a time budget that host load does not shorten (`Meter`, `Budget`): a cell is interrupted when its
   own time passes `cell_timeout`, and killed with the kernel if it is still running INTERRUPT_GRACE_S of its own
   time later; the notebook stops when its cells' own times add up to `time_limit`. Wall-clock timeouts remain
   only as a backstop (WALL_FACTOR times the budget),
4. after each check cell named in the plan, reads the answer variable from the kernel as JSON
   (a capture cell the grader wrote, not the student), and
5. sends its report (after every cell) and, at the end, the executed notebook to the grader over the pipe
   `args["result_fd"]` (records `inferlab-frame NAME LENGTH\n` + LENGTH bytes; the grader parses them with
   every record bounded: `inferlab.exercises.safeio.FrameReader`). Nothing is left on disk for the grader to
   read: the notebook is read from a read-only bind, the writable folders are tmpfs that vanish with the sandbox.

The pipe is kept from the kernel: it is close-on-exec (the kernel is another program the runner starts), and
the runner makes itself non-dumpable after dropping privileges, so the kernel (same uid) cannot open it
through /proc/<runner>/fd. Nothing here is trusted anyway: a kernel that reached the pipe could only forge
its own answers (equivalent to answering) or send what the grader refuses as that row's "invalid output".
The grader only takes answers for the exercises whose check cells it found in the submitted file, and
scores them in its own process against values it computes itself.
"""
from __future__ import annotations

import json
import os
import re
import resource
import signal
import sys
import threading
import time

MARK = "\x1finferlab-answer\x1f"
POLL_S = 0.2  # how often `Budget` reads the sandbox's times
INTERRUPT_GRACE_S = 5.0  # own time a cell may run after its interrupt before the kernel is killed
WALL_FACTOR = 10  # wall-clock backstop of a cell: WALL_FACTOR x its budget (+ 10 s); reached only if `Budget` fails
START_ATTEMPTS = 2  # kernel starts tried before a run is given up (a start runs no student code)
CPU_HARD_MARGIN_S = 5  # RLIMIT_CPU: the hard limit (SIGKILL) this far past the soft one (SIGXCPU)
RUNNER_CPU_RESERVE_S = 120  # CPU seconds the runner may use beyond the student's limit (see set_limits)

# Sent to the kernel after a check cell: the answer variable as JSON (sets tagged, numpy scalars unwrapped).
CAPTURE = r'''
def __inferlab_capture(name, _MARK={mark!r}):
    import json as _json, math as _math, sys as _sys
    def conv(x, depth=0):
        if x is None or x is Ellipsis:
            return None
        if depth > 4:
            return {{"__invalid__": "answer nested too deeply"}}
        if isinstance(x, (bool, str)):
            return x[:1000] if isinstance(x, str) else x
        if isinstance(x, int):
            return int(x) if abs(x) < 10**30 else float(x)
        if isinstance(x, float):
            return x if _math.isfinite(x) else {{"__invalid__": "not a finite number (%r)" % x}}
        if isinstance(x, dict):
            return {{str(k)[:100]: conv(v, depth + 1) for k, v in list(x.items())[:50]}}
        if isinstance(x, (set, frozenset)):
            return {{"__set__": sorted((conv(v, depth + 1) for v in list(x)[:50]), key=repr)}}
        if isinstance(x, (list, tuple)):
            return [conv(v, depth + 1) for v in list(x)[:50]]
        if hasattr(x, "item") and getattr(x, "size", 1) == 1:
            try:
                return conv(x.item(), depth + 1)
            except Exception:
                pass
        if hasattr(x, "shape"):
            return {{"__invalid__": "expected one value, got an array of shape %r" % (tuple(x.shape),)}}
        try:
            return conv(float(x), depth + 1)
        except Exception:
            return {{"__invalid__": "cannot check an answer of type " + type(x).__name__}}
    g = globals()
    value = conv(g[name]) if name in g else {{"__missing__": True}}
    _sys.stdout.write(_MARK + _json.dumps(value) + _MARK + "\n")
    _sys.stdout.flush()
'''.format(mark=MARK)


def drop_privileges(uid: int) -> None:
    """As root: empty the capability bounding set, then become `uid` (which clears every capability)."""
    if uid and os.getuid() == 0:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        for cap in range(64):
            libc.prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP; fails harmlessly past the last capability
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)  # drops every capability as well


def hide_from_kernel(result_fd) -> None:
    """The result pipe is not inherited by the kernel, and this process not inspectable by it (no
    /proc/<pid>/fd, no ptrace): PR_SET_DUMPABLE 0 (reset for the kernel by its execve)."""
    if result_fd is not None:
        os.set_inheritable(int(result_fd), False)
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE
    except OSError:
        pass


FRAME_MAGIC = b"inferlab-frame"


def send(result_fd, name: str, data: bytes) -> None:
    """One record on the result pipe (see the module docstring); nothing if the grader is gone."""
    view = memoryview(FRAME_MAGIC + b" " + name.encode() + b" " + str(len(data)).encode() + b"\n" + data)
    try:
        while view:
            view = view[os.write(int(result_fd), view):]
    except OSError:
        pass


def cpu_limit(limits: dict) -> tuple | None:
    """The kernel's RLIMIT_CPU: (soft, hard) = (cpu_s, cpu_s + 5): SIGXCPU at the limit, SIGKILL a little later."""
    if not limits.get("cpu_s"):
        return None
    soft = max(1, int(limits["cpu_s"]))
    return soft, soft + CPU_HARD_MARGIN_S


def set_limits(limits: dict) -> None:
    """The runner's own limits, inherited by the kernel it starts. The CPU-time limit is the student's, not the
    runner's: the runner keeps RUNNER_CPU_RESERVE_S more (it polls, parses and relays for the whole run, and on a
    slow CPU that added up to the student's 4 s before the kernel did: SIGXCPU then killed the runner, and the run
    left no report). The kernel gets exactly `cpu_limit` once it has started (`limit_kernel`)."""
    def cap(which, value):
        if value:
            value = int(value)
            resource.setrlimit(which, (value, value))

    cap(resource.RLIMIT_AS, limits.get("memory_bytes"))
    kernel = cpu_limit(limits)
    if kernel is not None:
        own = kernel[0] + RUNNER_CPU_RESERVE_S
        resource.setrlimit(resource.RLIMIT_CPU, (own, own + CPU_HARD_MARGIN_S))
    cap(resource.RLIMIT_NPROC, limits.get("processes"))
    cap(resource.RLIMIT_FSIZE, limits.get("file_bytes"))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def limit_kernel(pid: int, limits: dict) -> None:
    """Lower the started kernel's RLIMIT_CPU to the student's `cpu_limit` (lowering needs no privilege). Called
    before the first cell runs, so no student code ever runs under the runner's reserve; what the kernel starts
    inherits it."""
    kernel = cpu_limit(limits)
    if kernel is not None:
        resource.prlimit(int(pid), resource.RLIMIT_CPU, kernel)


def _stat_times(pid, proc: str = "/proc") -> tuple | None:
    """(ppid, own CPU ticks, reaped children's CPU ticks) of `pid` from /proc/<pid>/stat, or None if gone."""
    try:
        with open(f"{proc}/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        # after the command name: state ppid ... utime(12) stime(13) cutime(14) cstime(15), counted from state = 0
        return int(fields[1]), int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14])
    except (OSError, IndexError, ValueError):
        return None


class Meter:
    """The time a submission's processes use, without the time the host makes them wait.

    `cpu_s`: CPU seconds (user + system) of every process of the sandbox but the runner itself, with the children
    each has reaped (the kernel's, once the runner reaps it); `wait_s`: seconds those processes' threads spent
    runnable but waiting for a CPU (the second field of /proc/<pid>/task/<tid>/schedstat), summed over increments
    seen between two samples, so never decreasing. A cell's own time is then max(CPU, wall - wait): CPU time for a
    busy cell (on a loaded host wall = CPU + wait), wall time for an idle one (sleeping, waiting on I/O).
    `sandboxed`: this process sees only the sandbox's processes (its own PID namespace); otherwise only its
    descendants are counted (of `root`, when given: the grader meters a sandbox from outside). `schedstat` is False where /proc/<pid>/schedstat is missing (no CONFIG_SCHED_INFO):
    wait then stays 0, so an own time is at least the wall time, as before host load was discounted."""

    def __init__(self, sandboxed: bool, proc: str = "/proc", root: int | None = None):
        self.sandboxed, self.proc = sandboxed, proc
        self.me = os.getpid() if root is None else int(root)
        self.tick = os.sysconf("SC_CLK_TCK")
        self.schedstat = True
        self._waits: dict = {}
        self._wait_ns = 0
        self._cpu_s = 0.0

    def _pids(self) -> list:
        pids = [int(n) for n in os.listdir(self.proc) if n.isdigit()]
        if self.sandboxed:
            return [p for p in pids if p != self.me]
        children: dict = {}
        for pid in pids:
            st = _stat_times(pid, self.proc)
            if st is not None:
                children.setdefault(st[0], []).append(pid)
        out, todo = [], list(children.get(self.me, []))
        while todo:
            pid = todo.pop()
            out.append(pid)
            todo += children.get(pid, [])
        return out

    def sample(self) -> tuple:
        """(cpu_s, wait_s) now, both cumulative since this Meter was made (cpu_s: since each process started)."""
        ticks = (_stat_times(self.me, self.proc) or (0, 0, 0))[2]
        waits, read = {}, 0
        for pid in self._pids():
            st = _stat_times(pid, self.proc)
            if st is None:
                continue
            ticks += st[1] + st[2]
            try:
                tids = os.listdir(f"{self.proc}/{pid}/task")
            except OSError:
                continue
            for tid in tids:
                try:
                    with open(f"{self.proc}/{pid}/task/{tid}/schedstat", "rb") as fh:
                        waits[(pid, tid)] = int(fh.read().split()[1])
                    read += 1
                except (OSError, IndexError, ValueError):
                    continue
        if waits:
            self._wait_ns += sum(max(0, w - self._waits[k]) for k, w in waits.items() if k in self._waits)
        elif read == 0 and ticks:
            self.schedstat = False
        self._waits = waits
        self._cpu_s = max(self._cpu_s, ticks / self.tick)  # a process between exit and reaping: no step back
        return self._cpu_s, self._wait_ns / 1e9


class Budget:
    """Stops a cell (a thread watching it every POLL_S) whose own time (`Meter`: max(CPU, wall - wait)) passes
    its budget: SIGINT to the kernel's process group (a KeyboardInterrupt in the cell, as Jupyter's interrupt),
    and SIGKILL if the cell is still running INTERRUPT_GRACE_S of its own time later (it caught the interrupt).
    `interrupted` and `killed` say what happened to the current cell; `end` returns the time it used."""

    def __init__(self, meter: Meter, poll_s: float = POLL_S, clock=time.monotonic):
        self.meter, self.poll_s, self.clock = meter, poll_s, clock
        self.lock = threading.Lock()
        self.pid = None
        self.interrupted = self.killed = False
        threading.Thread(target=self._run, daemon=True).start()

    def start(self, pid: int, budget_s: float) -> None:
        with self.lock:
            cpu, wait = self.meter.sample()
            self.pid, self.budget_s = pid, float(budget_s)
            self.t0, self.cpu0, self.wait0 = self.clock(), cpu, wait
            self.interrupted = self.killed = False

    def used(self) -> float:
        """The current cell's own time so far (call with the lock held)."""
        cpu, wait = self.meter.sample()
        return max(cpu - self.cpu0, (self.clock() - self.t0) - (wait - self.wait0), 0.0)

    def end(self) -> float:
        with self.lock:
            used = self.used() if self.pid is not None else 0.0
            self.pid = None
            return used

    def check(self) -> None:
        """One look at the current cell: interrupt or kill it past its budget."""
        with self.lock:
            if self.pid is None or self.killed:
                return
            used = self.used()
            if not self.interrupted and used > self.budget_s:
                self.interrupted = True
                _signal_group(self.pid, signal.SIGINT)
            elif self.interrupted and used > self.budget_s + INTERRUPT_GRACE_S:
                self.killed = True
                _signal_group(self.pid, signal.SIGKILL)

    def _run(self) -> None:
        while True:
            time.sleep(self.poll_s)
            try:
                self.check()
            except Exception:  # never let the watcher die: the wall-clock backstop remains
                pass


def _signal_group(pid: int, signum: int) -> None:
    """`signum` to the kernel's process group (Jupyter starts a kernel in a session of its own), or to the kernel
    alone where it shares this process's group."""
    try:
        pgid = os.getpgid(pid)
        if pgid != os.getpgid(0):
            os.killpg(pgid, signum)
        else:
            os.kill(pid, signum)
    except OSError:
        pass


POOL_CELLS = 10  # a notebook's lecture cells share POOL_CELLS cells' budgets in all; its exercise cells as many more

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_CELL_LINE = re.compile(r"Cell In\[\d+\], line (\d+)")


class OutputBudget:
    """Output bytes a cell may keep: `per_cell` for each cell, within a pool of `pool` bytes for the lecture's
    cells and another for the exercise cells (`exercise_cells`: the check cells and their answer cells), so
    neither the lecture's figures nor a flooding cell take an exercise cell's budget. A capture's output
    (`capturing`) is the grader's, not the student's: it is not charged."""

    def __init__(self, per_cell: int, pool: int, exercise_cells=()):
        self.per_cell, self.exercise_cells = int(per_cell), set(exercise_cells)
        self.pools = {True: int(pool), False: int(pool)}
        self.used: dict = {}
        self.capturing = False

    def left(self, index) -> int:
        if self.capturing:
            return 1_000_000
        pool = self.pools[index in self.exercise_cells]
        return max(0, min(self.per_cell - self.used.get(index, 0), pool))

    def charge(self, index, size: int) -> None:
        if self.capturing:
            return
        self.used[index] = self.used.get(index, 0) + size
        self.pools[index in self.exercise_cells] -= size

    def exhaust(self, index) -> None:
        if not self.capturing:
            self.used[index] = self.per_cell


def _truncated(report: dict, index, exercise: bool) -> None:
    report["output_truncated"] = True
    if index is not None and all(t["cell"] != index for t in report["truncated_cells"]):
        report["truncated_cells"].append({"cell": int(index), "exercise": bool(exercise)})


def error_line(traceback) -> int | None:
    """The line of the cell where an error was raised, from IPython's traceback ("Cell In[7], line 3": the
    first such frame is the cell's own line; a SyntaxError names its line the same way)."""
    if not isinstance(traceback, list):
        return None
    for frame in traceback:
        found = _CELL_LINE.search(_ANSI.sub("", str(frame)))
        if found:
            return int(found.group(1))
    return None


def parse_answer(text: str):
    """The JSON value between the markers of a capture cell's output, or None."""
    start = text.rfind(MARK, 0, text.rfind(MARK))
    if start < 0:
        return None
    try:
        return json.loads(text[start + len(MARK):text.rfind(MARK)])
    except ValueError:
        return None


def merge_streams(cell) -> None:
    """Join consecutive stream outputs of the same name (stdout, stderr) into one."""
    merged = []
    for out in cell.get("outputs", []):
        if (out.get("output_type") == "stream" and merged and merged[-1].get("output_type") == "stream"
                and merged[-1].get("name") == out.get("name")):
            merged[-1]["text"] = str(merged[-1]["text"]) + str(out.get("text", ""))
        else:
            merged.append(out)
    cell["outputs"] = merged


def main(argv) -> int:
    with open(argv[1], encoding="utf-8") as fh:
        args = json.load(fh)
    drop_privileges(int(args.get("uid") or 0))
    hide_from_kernel(args.get("result_fd"))
    set_limits(args["limits"])
    report = {"cells": 0, "errors": [], "timeouts": [], "time_limit": False, "kernel_died": False,
              "kernel_exit": None, "interrupt_ignored": False, "schedstat": True, "start_error": None,
              "output_truncated": False, "truncated_cells": [], "answers": {}, "skipped": 0}
    try:
        import nbformat
        import nbclient  # noqa: F401 (a kernel client that cannot be imported is this run's start error)
        nb = nbformat.read(args["notebook"], as_version=4)
    except Exception as exc:  # anything unreadable is scored 0, with the reason
        report["start_error"] = f"unreadable notebook ({type(exc).__name__}: {str(exc)[:120]})"
        send(args.get("result_fd"), "report.json", json.dumps(report).encode("utf-8", "surrogatepass"))
        return 0
    NotebookRun(args, nb, report).run()
    return 0


class NotebookRun:
    """One notebook executed cell by cell: each cell under its time budget (`Budget`), its output under its byte
    budget (`OutputBudget`), the answers captured after each check cell of the plan, the report sent after every
    cell and, at the end, the executed notebook."""

    def __init__(self, args: dict, nb, report: dict):
        self.args, self.nb, self.report = args, nb, report
        per_cell = int(args["limits"].get("output_bytes") or 1_000_000)
        self.exercise_cells = {int(i) for i in args.get("exercise_cells", [])}
        self.budget = OutputBudget(per_cell, POOL_CELLS * per_cell, self.exercise_cells)
        self.cell_timeout, self.time_limit = float(args["cell_timeout"]), float(args["time_limit"])
        self.plan = {int(p["cell"]): p for p in args.get("plan", [])}
        self.skip = {int(i) for i in args.get("skip_cells", [])}
        self.meter = Meter(sandboxed=bool(args.get("sandboxed", True)))
        self.watch = Budget(self.meter)
        self.spent_s = 0.0  # the own time of the cells run so far (`Meter`)
        self.current = {"cell": None, "budget_s": None}
        self.kernel_started = False
        self.client = _client(self)

    def save(self) -> None:
        send(self.args.get("result_fd"), "report.json", json.dumps(self.report).encode("utf-8", "surrogatepass"))

    def run(self) -> None:
        """Run the notebook, then send the final report and the executed notebook.

        A kernel that dies before it answers kernel_info has run none of the student's code (the kernel
        and its spec are the grader's): on a loaded host that happens, and it is nobody's fault, so the
        start is tried up to START_ATTEMPTS times before the run is given up ("start_attempts" says how many)."""
        import nbformat
        report = self.report
        for attempt in range(1, START_ATTEMPTS + 1):
            report["start_attempts"] = attempt
            try:
                self.run_all()
                break
            except Exception as exc:  # kernel failed to start, or nbclient gave up
                if not self.kernel_started and attempt < START_ATTEMPTS:
                    self.client.km = self.client.kc = None  # a fresh kernel manager and client for the next start
                    continue
                report["start_error"] = (report["start_error"]
                                         or f"execution stopped ({type(exc).__name__}: {str(exc)[:120]})")
                break
        report["own_time_s"] = round(self.spent_s, 3)
        report["schedstat"] = self.meter.schedstat
        self.save()
        try:
            send(self.args.get("result_fd"), "executed.ipynb", nbformat.writes(self.nb).encode("utf-8", "surrogatepass"))
        except Exception:
            pass

    def kernel_process(self):
        return getattr(getattr(self.client.km, "provisioner", None), "process", None)

    def run_all(self) -> None:
        """Start the kernel (its limits set) and run each code cell not skipped, within the notebook's time limit."""
        from nbclient.exceptions import DeadKernelError
        report = self.report
        with self.client.setup_kernel():
            self.kernel_started = True
            proc = self.kernel_process()
            if getattr(proc, "pid", None) is None:
                raise RuntimeError("the kernel's process is unknown: its CPU-time limit cannot be set")
            limit_kernel(proc.pid, self.args["limits"])
            for index, cell in enumerate(self.nb.cells):
                if cell.cell_type != "code" or not cell.source.strip():
                    continue
                if index in self.skip:  # a lecture cell no graded answer depends on (the grader's `depends`)
                    cell["outputs"], cell["execution_count"] = [], None
                    report["skipped"] += 1
                    continue
                left = self.time_limit - self.spent_s
                if left <= 0:
                    report["time_limit"] = True
                    break
                try:
                    self.run_cell(cell, index, min(self.cell_timeout, left))
                    merge_streams(self.nb.cells[index])
                    report["cells"] += 1
                    for entry in self.plan.get(index, {}).get("checks", []):
                        self.capture(entry, index)
                except DeadKernelError:
                    self.kernel_died(index)
                    break
                self.save()
            else:
                report["time_limit"] = bool(report["timeouts"]) and self.spent_s >= self.time_limit

    def kernel_died(self, index: int) -> None:
        """Record a dead kernel: one timeout of this cell when `Budget` killed it, and the kernel's exit status."""
        report = self.report
        report["kernel_died"] = True
        if self.watch.killed:  # one timeout of this cell, however many messages the kernel sent first
            mine = [t for t in report["timeouts"] if t.get("cell") == index]
            if mine:
                mine[-1]["killed"] = True
            else:
                report["timeouts"].append({"cell": index, "ename": "CellTimeoutError", "killed": True,
                                           "budget_s": self.current["budget_s"]})
        proc = self.kernel_process()
        if proc is not None:
            try:
                report["kernel_exit"] = proc.wait(timeout=30)
            except Exception:
                pass

    def run_cell(self, cell, index, budget_s) -> None:
        """Execute one cell under `budget_s` of own time (`Budget`); a wall-clock backstop of WALL_FACTOR times."""
        self.current["cell"], self.current["budget_s"] = index, round(float(budget_s), 3)
        self.client.timeout = int(WALL_FACTOR * budget_s + 10)
        pid = getattr(self.kernel_process(), "pid", None)
        if pid is not None:
            self.watch.start(pid, budget_s)
        try:
            self.client.execute_cell(cell, index)
        finally:
            self.spent_s += self.watch.end()
            if self.watch.killed:
                self.report["interrupt_ignored"] = True

    def capture(self, entry, index) -> None:
        """Read the answer variable `entry["name"]` from the kernel, after the check cell `index`; the student's
        cell keeps its own outputs."""
        import nbformat
        nb = self.nb
        cell = nbformat.v4.new_code_cell(CAPTURE + f"\n__inferlab_capture({entry['name']!r})")
        student_cell = nb.cells[index]
        kept = (list(student_cell.get("outputs", [])), student_cell.get("execution_count"))
        self.budget.capturing = True  # the capture's own output is not the student's
        try:
            self.run_cell(cell, index, max(1.0, min(10.0, self.time_limit - self.spent_s)))
        finally:
            self.budget.capturing = False
            outs = list(cell.get("outputs", [])) + list(student_cell.get("outputs", []))
            student_cell["outputs"], student_cell["execution_count"] = kept
            nb.cells[index] = student_cell  # nbclient stores the executed cell at its index
        text = "".join(str(o.get("text", "")) for o in outs if o.get("output_type") == "stream")
        value = parse_answer(text)
        if isinstance(value, dict) and value.get("__missing__"):
            return
        if value is not None or MARK in text:
            self.report["answers"][entry["id"]] = value

    def on_error(self, cell, cell_index, execute_reply) -> None:
        """nbclient's hook for a cell that raised: an error, or a timeout (ours at the budget, or the backstop)."""
        content = execute_reply.get("content", {})
        ename = str(content.get("ename", "error"))[:80]
        entry = {"cell": cell_index, "ename": ename, "enospc": "[Errno 28]" in str(content.get("evalue", "")),
                 "line": error_line(content.get("traceback"))}
        if self.watch.interrupted and ename == "KeyboardInterrupt":  # our interrupt at the budget, not the student's
            entry["ename"] = "CellTimeoutError"
            entry["budget_s"] = self.current["budget_s"]
        elif ename == "CellTimeoutError":  # nbclient's wall-clock backstop
            entry["wall"] = True
        (self.report["timeouts"] if entry["ename"] == "CellTimeoutError" else self.report["errors"]).append(entry)


def _client(run: NotebookRun):
    """The kernel client of `run`: output kept within its byte budgets, widget messages dropped."""
    from nbclient import NotebookClient
    budget, report, exercise_cells, current = run.budget, run.report, run.exercise_cells, run.current

    class Client(NotebookClient):
        def output(self, outs, msg, display_id, cell_index):
            """Keep output up to the cell's byte budget: a stream is cut at the budget, anything else dropped."""
            content = msg.get("content", {})
            size = len(json.dumps(content, default=str))
            left = budget.left(cell_index)
            if size > left:
                _truncated(report, cell_index, cell_index in exercise_cells)
                if msg.get("msg_type") != "stream" or left <= 0:
                    budget.exhaust(cell_index)
                    return None
                msg = dict(msg, content=dict(content, text=str(content.get("text", ""))[:left]
                                             + "\n[output cut by the grader: byte limit reached]\n"))
                size = left
            budget.charge(cell_index, size)
            return super().output(outs, msg, display_id, cell_index)

        def _update_display_id(self, display_id, msg):
            """update_display_data replaces a stored output: charged to the running cell's budget, dropped past it."""
            size = len(json.dumps(msg.get("content", {}), default=str))
            index = current["cell"]
            if size > budget.left(index):
                _truncated(report, index, index in exercise_cells)
                budget.exhaust(index)
                return None
            budget.charge(index, size)
            return super()._update_display_id(display_id, msg)

        def handle_comm_msg(self, outs, msg, cell_index):
            """Widget messages are not kept: no widget state in the executed notebook, no output widget
            capturing outputs past the budget (the grader needs neither)."""
            return None

    return Client(
        run.nb, timeout=None, kernel_name=run.args.get("kernel", "python3"), allow_errors=True,
        interrupt_on_timeout=True,
        error_on_timeout={"ename": "CellTimeoutError", "evalue": "wall-clock backstop", "traceback": []},
        # iopub_timeout: how long to wait for a cell's last output after its reply (the capture's answer is such an
        # output: on a busy host it can come seconds late). Only a cell stopped by the wall backstop that ignores
        # its interrupt never sends it; `Budget` kills such a cell first.
        shutdown_kernel="immediate", startup_timeout=300, iopub_timeout=30, record_timing=False,
        # No coalesce_streams: nbclient's carriage-return regex is quadratic in a line's length, and a
        # long printed line stalled it for minutes. `merge_streams` joins the chunks instead.
        coalesce_streams=False, store_widget_state=False, resources={"metadata": {"path": os.getcwd()}},
        on_cell_error=run.on_error)


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""Run one submitted notebook inside the grading sandbox and write what it answered, as data.

This file runs *inside* the sandbox (`python sandbox_runner.py ARGS.json`), so it imports nothing from
inferlab: the sandbox hides the exercises package (and its solutions) behind a stub. It

1. drops to an unprivileged uid when started as root (the sandbox keeps CAP_SETUID for this only),
2. sets its resource limits (address space, CPU time, processes, file size), inherited by the kernel,
3. executes the notebook cell by cell in a fresh kernel (errors allowed, per-cell timeout with interrupt,
   whole-notebook deadline, output capped at a byte budget),
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
import resource
import sys
import time

MARK = "\x1finferlab-answer\x1f"

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


def set_limits(limits: dict) -> None:
    def cap(which, value):
        if value:
            value = int(value)
            resource.setrlimit(which, (value, value))

    cap(resource.RLIMIT_AS, limits.get("memory_bytes"))
    if limits.get("cpu_s"):  # soft limit SIGXCPU, hard a little later SIGKILL
        soft = int(limits["cpu_s"])
        resource.setrlimit(resource.RLIMIT_CPU, (soft, soft + 5))
    cap(resource.RLIMIT_NPROC, limits.get("processes"))
    cap(resource.RLIMIT_FSIZE, limits.get("file_bytes"))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


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
    result_fd = args.get("result_fd")
    hide_from_kernel(result_fd)
    set_limits(args["limits"])
    report = {"cells": 0, "errors": [], "timeouts": [], "time_limit": False, "kernel_died": False,
              "kernel_exit": None, "start_error": None, "output_truncated": False, "answers": {}}

    def save():
        send(result_fd, "report.json", json.dumps(report).encode("utf-8", "surrogatepass"))

    try:
        import nbformat
        from nbclient import NotebookClient
        from nbclient.exceptions import DeadKernelError
        nb = nbformat.read(args["notebook"], as_version=4)
    except Exception as exc:  # anything unreadable is scored 0, with the reason
        report["start_error"] = f"unreadable notebook ({type(exc).__name__}: {str(exc)[:120]})"
        save()
        return 0

    budget = {"left": int(args["limits"].get("output_bytes") or 1_000_000)}

    class Client(NotebookClient):
        def output(self, outs, msg, display_id, cell_index):
            """Keep output up to the byte budget: a stream is cut at the budget, anything else dropped."""
            content = msg.get("content", {})
            size = len(json.dumps(content, default=str))
            if size > budget["left"]:
                report["output_truncated"] = True
                if msg.get("msg_type") != "stream" or budget["left"] <= 0:
                    budget["left"] = 0
                    return None
                msg = dict(msg, content=dict(content, text=str(content.get("text", ""))[:budget["left"]]
                                             + "\n[output cut by the grader: byte limit reached]\n"))
                size = budget["left"]
            budget["left"] -= size
            return super().output(outs, msg, display_id, cell_index)

        def _update_display_id(self, display_id, msg):
            """update_display_data replaces a stored output: charged to the same budget, dropped past it."""
            size = len(json.dumps(msg.get("content", {}), default=str))
            if size > budget["left"]:
                report["output_truncated"] = True
                budget["left"] = 0
                return None
            budget["left"] -= size
            return super()._update_display_id(display_id, msg)

        def handle_comm_msg(self, outs, msg, cell_index):
            """Widget messages are not kept: no widget state in the executed notebook, no output widget
            capturing outputs past the budget (the grader needs neither)."""
            return None

    cell_timeout, time_limit = float(args["cell_timeout"]), float(args["time_limit"])
    deadline = time.monotonic() + time_limit
    plan = {int(p["cell"]): p for p in args.get("plan", [])}

    def on_error(cell, cell_index, execute_reply):
        content = execute_reply.get("content", {})
        entry = {"cell": cell_index, "ename": str(content.get("ename", "error"))[:80],
                 "enospc": "[Errno 28]" in str(content.get("evalue", ""))}
        (report["timeouts"] if entry["ename"] == "CellTimeoutError" else report["errors"]).append(entry)

    client = Client(
        nb, timeout=cell_timeout, kernel_name=args.get("kernel", "python3"), allow_errors=True,
        interrupt_on_timeout=True,
        error_on_timeout={"ename": "CellTimeoutError", "evalue": f"cell ran past {cell_timeout:g} s", "traceback": []},
        # iopub_timeout: how long to wait for a cell's last output after its reply; a cell that ignores
        # the timeout's interrupt never sends it, and the default (4 s) would stretch every later timeout.
        shutdown_kernel="immediate", startup_timeout=60, iopub_timeout=2, record_timing=False,
        # No coalesce_streams: nbclient's carriage-return regex is quadratic in a line's length, and a
        # long printed line stalled it for minutes. `merge_streams` joins the chunks instead.
        coalesce_streams=False, store_widget_state=False, resources={"metadata": {"path": os.getcwd()}}, on_cell_error=on_error)

    def capture(entry, index):
        cell = nbformat.v4.new_code_cell(CAPTURE + f"\n__inferlab_capture({entry['name']!r})")
        saved, student_cell = budget["left"], nb.cells[index]
        kept = (list(student_cell.get("outputs", [])), student_cell.get("execution_count"))
        budget["left"] = 1_000_000  # the capture's own output is not the student's
        try:
            client.execute_cell(cell, index)
        finally:
            budget["left"] = saved
            outs = list(cell.get("outputs", [])) + list(student_cell.get("outputs", []))
            student_cell["outputs"], student_cell["execution_count"] = kept
            nb.cells[index] = student_cell  # nbclient stores the executed cell at its index
        text = "".join(str(o.get("text", "")) for o in outs if o.get("output_type") == "stream")
        value = parse_answer(text)
        if isinstance(value, dict) and value.get("__missing__"):
            return
        if value is not None or MARK in text:
            report["answers"][entry["id"]] = value

    try:
        with client.setup_kernel():
            for index, cell in enumerate(nb.cells):
                if cell.cell_type != "code" or not cell.source.strip():
                    continue
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    report["time_limit"] = True
                    break
                client.timeout = max(1, int(min(cell_timeout, remaining)))
                try:
                    client.execute_cell(cell, index)
                    merge_streams(nb.cells[index])
                    report["cells"] += 1
                    for entry in plan.get(index, {}).get("checks", []):
                        client.timeout = max(1, int(min(10, deadline - time.monotonic())))
                        capture(entry, index)
                except DeadKernelError:
                    report["kernel_died"] = True
                    proc = getattr(getattr(client.km, "provisioner", None), "process", None)
                    if proc is not None:
                        try:
                            report["kernel_exit"] = proc.wait(timeout=2)
                        except Exception:
                            pass
                    break
                save()
            else:
                report["time_limit"] = bool(report["timeouts"]) and time.monotonic() >= deadline
    except Exception as exc:  # kernel failed to start, or nbclient gave up
        report["start_error"] = report["start_error"] or f"execution stopped ({type(exc).__name__}: {str(exc)[:120]})"
    save()
    try:
        send(result_fd, "executed.ipynb", nbformat.writes(nb).encode("utf-8", "surrogatepass"))
    except Exception:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

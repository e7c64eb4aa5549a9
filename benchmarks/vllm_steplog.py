"""A step log for vLLM's engine core: when each step ran and what it held, written by vLLM itself.

vLLM's benchmark client sees requests, never steps, and vLLM 0.32 exports no per-step durations (only a
histogram of tokens per step). This vLLM *general plugin* (the `vllm.general_plugins` entry point, which
vLLM loads in each of its processes) wraps two methods of the engine core process when the environment
variable INFERLAB_VLLM_STEPLOG names a file, and does nothing otherwise:

- `Scheduler.schedule`: after vLLM's own scheduling, for each request it scheduled, the tokens it got this
  step, the tokens it had computed before, and its prompt length (so a step's prefill chunks (q new, p
  cached) and decodes can be told apart exactly);
- `EngineCore.step`: the step's start and end on `time.perf_counter()` (CLOCK_MONOTONIC, the clock vLLM's
  benchmark client stamps its requests with), and whether requests were left after it;
- `EngineCore.add_request`: when each request reached the engine core, and its prompt length.

Each event is one JSON line: {"step": [t0, t1, busy_after], "reqs": [[id, scheduled, computed, prompt], ...],
"probe": [python_s]} or {"add": [t, id, prompt]}. vLLM's scheduling and model are not changed.

The host-speed probe (`probe`): at the start of every step, inside its [t0, t1] window, a fixed loop of
the interpreter is timed (PYTHON_PROBE_N multiply-adds, ~15 us against steps of ~4 ms), so that the
engine's own speed can be followed through a run (inferlab.study.hostspeed). Why the
interpreter: this model's steps are mostly Python and small-operator dispatch (a fit's intercept of
~3.5 ms of a 4 ms decode step). A torch probe (one bf16 MLP block of one token) was tried on the
first development run and dropped: it took ~0.8 ms a step (a fifth of the step) and scattered by
a factor of 2.7 on a host whose steps did not move.

The engine core's niceness (NICE_VAR, set by the validation: inferlab.study.engines.vllm.ENGINE_NICE):
at its first step the plugin renices every thread of the engine core's process. vLLM pins its worker (the
model's forward) to one core of this 2-core host and leaves the other to the engine core, the API server and
the benchmark client, and the engine core busy-waits through each step for the worker's output; reniced,
that wait yields the core to the API server and the client as soon as they have work. The engine's steps
and scheduling are not otherwise changed.

Installed into the vLLM venv by `make vllm` (benchmarks/vllm_setup.sh): `python benchmarks/vllm_steplog.py
--install` copies this file into that interpreter's site-packages as `inferlab_vllm_steplog` with a
hand-written dist-info naming the entry point (no build, no network). Read by
`inferlab.study.engines.vllm_steps`.
"""
from __future__ import annotations

import json
import os
import time

ENV_VAR = "INFERLAB_VLLM_STEPLOG"
NICE_VAR = "INFERLAB_VLLM_ENGINE_NICE"
MODULE = "inferlab_vllm_steplog"
VERSION = "2"
PYTHON_PROBE_N = 400
_state = {"file": None, "pending": None}


def _probe() -> list:
    """[python_s]: the probe of the module docstring, timed once."""
    t0 = time.perf_counter()
    acc = 0
    for i in range(PYTHON_PROBE_N):
        acc += i * i
    return [time.perf_counter() - t0]


def _write(event: dict) -> None:
    f = _state["file"]
    if f is None:
        path = os.environ.get(ENV_VAR)
        if not path:
            return
        f = _state["file"] = open(f"{path}.{os.getpid()}", "a", buffering=1)
    f.write(json.dumps(event, separators=(",", ":")) + "\n")


def _nice_engine_core() -> None:
    """With NICE_VAR set, every thread of this process (the engine core's) gets that niceness: its busy wait
    for the worker's output then yields the core to the API server and the client at once."""
    n = os.environ.get(NICE_VAR)
    if not n:
        return
    for tid in os.listdir("/proc/self/task"):
        try:
            os.setpriority(os.PRIO_PROCESS, int(tid), int(n))
        except OSError:
            pass


def register() -> None:
    """vLLM's entry point: wrap the engine core's step, schedule and add_request when ENV_VAR is set."""
    if not os.environ.get(ENV_VAR):
        return
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.engine.core import EngineCore
    if getattr(EngineCore.step, "_inferlab", False):
        return
    schedule, step, add_request = Scheduler.schedule, EngineCore.step, EngineCore.add_request

    def logged_schedule(self, *args, **kwargs):
        out = schedule(self, *args, **kwargs)
        reqs = []
        for rid, n in out.num_scheduled_tokens.items():
            r = self.requests.get(rid)
            if r is not None:  # num_computed_tokens already counts this step's tokens
                reqs.append([rid, int(n), int(r.num_computed_tokens) - int(n), int(r.num_prompt_tokens)])
        _state["pending"] = reqs
        return out

    def logged_step(self, *args, **kwargs):
        if not _state.get("niced"):
            _state["niced"] = True
            _nice_engine_core()
        _state["pending"] = None
        t0 = time.perf_counter()
        probe = _probe()
        result = step(self, *args, **kwargs)
        t1 = time.perf_counter()
        if _state["pending"]:
            _write({"step": [t0, t1, bool(self.scheduler.has_requests())], "reqs": _state["pending"],
                    "probe": probe})
        return result

    def logged_add_request(self, request, *args, **kwargs):
        _write({"add": [time.perf_counter(), str(request.request_id), int(request.num_prompt_tokens)]})
        return add_request(self, request, *args, **kwargs)

    logged_step._inferlab = True
    Scheduler.schedule, EngineCore.step, EngineCore.add_request = logged_schedule, logged_step, logged_add_request


def install() -> str:
    """Copy this file into the running interpreter's site-packages with a dist-info naming the entry point."""
    import shutil
    import sysconfig
    from pathlib import Path
    site = Path(sysconfig.get_paths()["purelib"])
    shutil.copyfile(__file__, site / f"{MODULE}.py")
    for old in site.glob(f"{MODULE}-*.dist-info"):  # an earlier version's entry point
        shutil.rmtree(old)
    info = site / f"{MODULE}-{VERSION}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {MODULE}\nVersion: {VERSION}\n")
    (info / "entry_points.txt").write_text(f"[vllm.general_plugins]\n{MODULE} = {MODULE}:register\n")
    (info / "RECORD").write_text("")
    return str(site / f"{MODULE}.py")


if __name__ == "__main__":
    import sys
    if sys.argv[1:] != ["--install"]:
        print("usage: python benchmarks/vllm_steplog.py --install   (into this interpreter's site-packages)",
              file=sys.stderr)
        sys.exit(2)
    print(f"installed {install()}")

"""vLLM's own steps, from the step log its engine core writes (benchmarks/vllm_steplog.py, a vLLM plugin
`make vllm` installs; on when the server's environment sets INFERLAB_VLLM_STEPLOG).

vLLM's benchmark client sees requests; the log sees steps. Each step's line holds its start and end
(time.perf_counter: CLOCK_MONOTONIC, the clock the client stamps its requests with, so the two line up)
and, per request it scheduled, the tokens it got, the tokens it had computed before and its prompt
length. From that:

- `EngineStep.shape`: the step as the simulator names it (`serving.steptime.StepShape`): a request with
  its prompt computed and one token scheduled decodes (its keys: computed + 1); any other is a prefill
  chunk (q scheduled after p computed), sampling when it reaches the end of its prompt.
- `periods_s`: what a step costs the engine's loop, start to the next step's start (the loop takes new
  requests and hands outputs on between steps); a step after which the engine went idle gets its own
  duration plus the median of those hand-overs.
- `frontend_delays`: the two delays outside the engine that a client's TTFT carries and the simulator's
  does not: *in*, from the client's send to the engine core's add_request, for requests that found the
  engine idle (a request arriving during a step waits for the step's end, which the simulator already
  does); *out*, from the end of the step that made a request's first token to the client's receipt of it;
  *in_any*, the way in of every request, less its wait for a step that was running when it reached the
  engine core (the part after its send of the step that ended just before its add_request, when the add
  followed that step's end within HANDOVER_MAX_S): the front end's stalls, which a request that finds the
  engine idle rarely meets, are in it.
  Requests are matched by the index vLLM's client puts into each request id (`bench-<hex>-<index>-...`).
- `probe_log`: the host-speed probes timed at the start of each step (the plugin's `probe` field:
  python_s), as a `serving.study.hostspeed.ProbeLog` on a clock starting at a given t0.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from inferlab.serving.steptime import StepShape

# A step's next one starting later than this after its end was not run at once: the engine waited for a
# request (vLLM keeps a finished request until the next step, so "requests left" alone does not say it
# was busy). Hand-overs between busy steps take 0.1 to 0.5 ms here (outputs passed on, requests added).
HANDOVER_MAX_S = 2e-3
REQUEST_INDEX = re.compile(r"bench-([0-9a-f]+)-(\d+)-")
PROBES = ("python",)   # the plugin's probes, in the order of its `probe` field


@dataclass(frozen=True)
class EngineStep:
    """One step of vLLM's engine core: start and end (s, perf_counter), whether requests were left after
    it, per scheduled request (id, scheduled tokens, computed before, prompt tokens), and its probes'
    times (s, in the order of PROBES; empty in a log written before the probes)."""

    t0_s: float
    t1_s: float
    busy_after: bool
    reqs: tuple
    probe_s: tuple = ()

    @property
    def shape(self) -> StepShape:
        decode, kv, chunks, sampled = 0, 0.0, [], 0
        for _, n, computed, prompt in self.reqs:
            if n == 1 and computed >= prompt:
                decode, kv, sampled = decode + 1, kv + computed + 1, sampled + 1
            else:
                chunks.append((int(n), int(computed)))
                sampled += computed + n >= prompt
        return StepShape(decode, kv, tuple(chunks), sampled)


@dataclass(frozen=True)
class StepLog:
    """A vLLM step log: its steps in time order, and the requests it added (t_s, id, prompt tokens)."""

    steps: tuple
    adds: tuple

    def between(self, t_from_s: float, t_to_s: float) -> "StepLog":
        """The steps starting, and the adds, within [t_from_s, t_to_s]."""
        return StepLog(tuple(s for s in self.steps if t_from_s <= s.t0_s <= t_to_s),
                       tuple(a for a in self.adds if t_from_s <= a[0] <= t_to_s))

    def shapes(self) -> list:
        return [s.shape for s in self.steps]

    def longest_wait_s(self) -> float:
        """The longest time between two consecutive steps that share a request (it was mid-prompt or
        decoding, so the engine had work and did not run it: the engine core off its core, or waiting
        on its worker); 0.0 without such a pair."""
        longest = 0.0
        for a, b in zip(self.steps, self.steps[1:]):
            if {r[0] for r in a.reqs} & {r[0] for r in b.reqs}:
                longest = max(longest, b.t0_s - a.t1_s)
        return longest

    def probe_log(self, probe: str, t0_s: float):
        """The steps' `probe` times (one of PROBES) as a hostspeed.ProbeLog, its times the steps' starts
        less t0_s. A log without probes is an error naming the plugin's version."""
        from inferlab.study.hostspeed import ProbeLog
        if probe not in PROBES:
            raise ValueError(f"probe must be one of {', '.join(PROBES)}; got {probe!r}")
        k = PROBES.index(probe)
        if not self.steps or any(len(s.probe_s) <= k for s in self.steps):
            raise RuntimeError("the step log has no host-speed probes: reinstall the step-log plugin "
                               "(`make vllm`; benchmarks/vllm_steplog.py version 2)")
        return ProbeLog([s.t0_s - t0_s for s in self.steps], [s.probe_s[k] for s in self.steps])

    def periods_s(self) -> np.ndarray:
        """Per step, start to the next step's start; a step followed by idleness (the next starting more
        than HANDOVER_MAX_S after its end, or none left, or the log's last) gets its duration plus the
        median hand-over (next start - end) of the steps that were followed at once."""
        t0 = np.array([s.t0_s for s in self.steps])
        t1 = np.array([s.t1_s for s in self.steps])
        busy = np.array([s.busy_after for s in self.steps], dtype=bool)
        if len(t0) == 0:
            return np.zeros(0)
        nxt = np.append(t0[1:], np.inf)
        followed = busy & (nxt - t1 <= HANDOVER_MAX_S)
        handover = float(np.median(nxt[followed] - t1[followed])) if followed.any() else 0.0
        return np.where(followed, nxt - t0, t1 - t0 + handover)


def read_step_log(path) -> StepLog:
    """The step log(s) a server wrote at `path` (the plugin writes `path.<pid>` per process; the engine
    core's is the one with steps). A missing log is an error naming the plugin."""
    path = Path(path)
    files = sorted(path.parent.glob(path.name + ".*"))
    steps, adds = [], []
    for f in files:
        for line in f.read_text(errors="replace").splitlines():
            try:
                e = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by the server's stop
            if "step" in e:
                t0, t1, busy = e["step"]
                steps.append(EngineStep(float(t0), float(t1), bool(busy),
                                        tuple((str(r[0]), int(r[1]), int(r[2]), int(r[3])) for r in e["reqs"]),
                                        tuple(float(x) for x in e.get("probe", ()))))
            elif "add" in e:
                t, rid, prompt = e["add"]
                adds.append((float(t), str(rid), int(prompt)))
    if not steps:
        raise RuntimeError(f"no vLLM step log at {path}.*: is the step-log plugin installed in the vLLM venv "
                           "(`make vllm` installs it: benchmarks/vllm_steplog.py --install)?")
    steps.sort(key=lambda s: s.t0_s)
    adds.sort()
    return StepLog(tuple(steps), tuple(adds))


def request_index(request_id: str) -> int | None:
    """The client's index of a request from its vLLM request id (`cmpl-bench-<hex>-<index>-...`), or None."""
    m = REQUEST_INDEX.search(request_id)
    return int(m.group(2)) if m else None


def frontend_delays(log: StepLog, result: dict) -> dict:
    """The delays outside the engine (module docstring) of one client run `result` (a vLLM benchmark
    result with start_times, ttfts and input_lens, its requests in the order of their indices) over the
    part of `log` it covers: {"in_s": [...], "out_s": [...]} per matched request (in_s only where the
    engine was idle when the request reached it). A request whose prompt length differs between the
    client and the engine is an error (the log and the result are of different runs). Also "in_any_s"
    (module docstring): every matched request's way in, less its wait for a running step."""
    start = np.asarray(result["start_times"], dtype=float)
    ttft = np.asarray(result["ttfts"], dtype=float)
    lens = np.asarray(result["input_lens"], dtype=int)
    first_end = {}
    for s in log.steps:
        for rid, n, computed, prompt in s.reqs:
            if computed < prompt <= computed + n and rid not in first_end:
                first_end[rid] = s.t1_s
    ends = np.array([s.t1_s for s in log.steps])
    starts = np.array([s.t0_s for s in log.steps])
    ins, outs, any_in = [], [], []
    for t, rid, prompt in log.adds:
        i = request_index(rid)
        if i is None or i >= len(start):
            continue
        if prompt != lens[i]:
            raise RuntimeError(f"request {rid}: the engine logged a prompt of {prompt} tokens, the client "
                               f"sent {lens[i]}: the step log and the result are of different runs")
        running = np.any((starts < t) & (ends > start[i]))  # a step overlapped the wait: not idle
        if not running:
            ins.append(t - start[i])
        before = np.flatnonzero(ends <= t)
        wait = 0.0
        if running and before.size and t - ends[before[-1]] <= HANDOVER_MAX_S:
            k = before[-1]
            wait = max(0.0, ends[k] - max(starts[k], start[i]))
        any_in.append(max(0.0, t - start[i] - wait))
        if rid in first_end:
            outs.append(start[i] + ttft[i] - first_end[rid])
    return {"in_s": ins, "out_s": outs, "in_any_s": any_in}

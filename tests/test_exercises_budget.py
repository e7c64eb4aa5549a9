"""The grader's time budget of a cell (`sandbox_runner.Meter`, `Budget`), on a fake /proc and a fake clock.

A cell's own time is max(CPU time, wall time - run-queue wait): a busy cell on a loaded host is charged its CPU
time, an idle one its wall time; the host's load (the time it keeps the sandbox waiting for a CPU) is charged to
no one. Hand-derived cases: CLK_TCK ticks are read from the machine, so CPU times are written in ticks here.
"""
from __future__ import annotations

import os
import signal

import pytest

from inferlab.exercises import sandbox_runner as sr

TICK = os.sysconf("SC_CLK_TCK")


class FakeProc:
    """A /proc with the runner (pid 2, parent 1) and processes given as {pid: (ppid, utime+stime, cutime+cstime,
    {tid: wait_ns})}; CPU in seconds, converted to ticks."""

    def __init__(self, root, me):
        self.root, self.me = root, me

    def set(self, procs: dict) -> None:
        for p in self.root.iterdir():
            for f in sorted(p.rglob("*"), reverse=True):
                f.unlink() if f.is_file() else f.rmdir()
            p.rmdir()
        for pid, (ppid, own_s, reaped_s, waits) in procs.items():
            d = self.root / str(pid)
            (d / "task").mkdir(parents=True)
            own, reaped = round(own_s * TICK), round(reaped_s * TICK)
            # comm with a space and a ')' inside: the parser splits after the last ')'
            fields = ["S", str(ppid)] + ["0"] * 9 + [str(own), "0", str(reaped), "0"] + ["0"] * 5
            (d / "stat").write_text(f"{pid} (a b) c) " + " ".join(fields) + "\n")
            for tid, wait_ns in waits.items():
                (d / "task" / str(tid)).mkdir()
                (d / "task" / str(tid) / "schedstat").write_text(f"123 {wait_ns} 4\n")


@pytest.fixture
def fake(tmp_path):
    return FakeProc(tmp_path, me=2)


def meter(fake, sandboxed=True):
    return sr.Meter(sandboxed=sandboxed, proc=str(fake.root), root=fake.me)


def test_cpu_counts_every_process_but_the_runner_and_what_each_reaped(fake):
    # runner 2 (own 5 s: not the submission's; its reaped children 1 s: a dead kernel), init 1 (reaped 2 s of
    # orphans), kernel 3 (4 s, and 0.5 s of children it reaped), a child 4 of the kernel (1.5 s).
    fake.set({1: (0, 0.0, 2.0, {}), 2: (1, 5.0, 1.0, {}), 3: (2, 4.0, 0.5, {}), 4: (3, 1.5, 0.0, {})})
    cpu, wait = meter(fake).sample()
    assert cpu == pytest.approx(1.0 + 2.0 + 4.5 + 1.5)  # 9 s: the runner's own 5 s left out
    assert wait == 0


def test_without_a_sandbox_only_the_runners_descendants_count(fake):
    # pid 9 is another program of the host (7 s): not counted; 3 (kernel) and its child 4 are.
    fake.set({1: (0, 0.0, 2.0, {}), 2: (1, 5.0, 0.0, {}), 3: (2, 4.0, 0.0, {}), 4: (3, 1.5, 0.0, {}),
              9: (1, 7.0, 0.0, {})})
    assert meter(fake, sandboxed=False).sample()[0] == pytest.approx(5.5)


def test_wait_is_summed_over_increments_and_never_steps_back(fake):
    m = meter(fake)
    fake.set({2: (1, 0.0, 0.0, {}), 3: (2, 1.0, 0.0, {30: 1_000_000_000, 31: 0})})
    assert m.sample()[1] == 0  # the first sight of a thread is its baseline
    fake.set({2: (1, 0.0, 0.0, {}), 3: (2, 2.0, 0.0, {30: 3_000_000_000, 31: 500_000_000})})
    assert m.sample()[1] == pytest.approx(2.0 + 0.5)
    # thread 31 exits (its wait is gone from /proc), the CPU of process 3 is reaped by no one yet: nothing steps back
    fake.set({2: (1, 0.0, 0.0, {}), 3: (2, 2.0, 0.0, {30: 4_000_000_000})})
    assert m.sample() == (pytest.approx(2.0), pytest.approx(3.5))
    fake.set({2: (1, 0.0, 0.0, {})})  # process 3 gone, not yet reaped: its CPU is kept
    assert m.sample()[0] == pytest.approx(2.0)
    assert m.schedstat


def test_no_schedstat_means_no_wait_and_is_said(fake):
    m = meter(fake)
    fake.set({2: (1, 0.0, 0.0, {}), 3: (2, 1.0, 0.0, {})})
    assert m.sample() == (pytest.approx(1.0), 0) and m.schedstat is False


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


@pytest.fixture
def budget(fake, monkeypatch):
    """A Budget whose watcher thread never ticks (checks are made by hand) and whose signals are recorded."""
    sent = []
    monkeypatch.setattr(sr, "_signal_group", lambda pid, signum: sent.append((pid, signum)))
    clock = Clock()
    b = sr.Budget(meter(fake), poll_s=3600, clock=clock)
    return b, clock, sent


def test_a_busy_cell_on_a_loaded_host_is_charged_its_cpu_time(fake, budget):
    b, clock, sent = budget
    fake.set({2: (1, 0.0, 0.0, {}), 3: (2, 1.0, 0.0, {30: 0})})
    b.start(3, budget_s=3.0)
    # 9 s of wall: 2.5 s on a CPU, 6.5 s waiting for one (two other busy loops on its CPU): own time 2.5 s
    clock.t += 9.0
    fake.set({2: (1, 0.0, 0.0, {}), 3: (2, 3.5, 0.0, {30: 6_500_000_000})})
    b.check()
    assert sent == [] and not b.interrupted
    # 1 s of CPU more (3 s of wall, 2 of them waiting): 3.5 s > 3 s: interrupted (SIGINT to the kernel's group)
    clock.t += 3.0
    fake.set({2: (1, 0.0, 0.0, {}), 3: (2, 4.5, 0.0, {30: 8_500_000_000})})
    b.check()
    assert sent == [(3, signal.SIGINT)] and b.interrupted and not b.killed
    b.check()
    assert sent == [(3, signal.SIGINT)]  # one interrupt, not one per look
    assert b.end() == pytest.approx(3.5)


def test_an_idle_cell_is_charged_its_wall_time(fake, budget):
    b, clock, sent = budget
    fake.set({2: (1, 0.0, 0.0, {}), 3: (2, 1.0, 0.0, {30: 0})})
    b.start(3, budget_s=3.0)
    clock.t += 2.9  # asleep: no CPU, no wait
    b.check()
    assert sent == []
    clock.t += 0.2  # 3.1 s of wall
    b.check()
    assert sent == [(3, signal.SIGINT)]


def test_many_busy_processes_are_charged_their_summed_cpu_time(fake, budget):
    b, clock, sent = budget
    fake.set({2: (1, 0.0, 0.0, {}), 3: (2, 1.0, 0.0, {30: 0}), 4: (3, 0.0, 0.0, {40: 0}), 5: (3, 0.0, 0.0, {50: 0})})
    b.start(3, budget_s=3.0)
    clock.t += 1.0  # the kernel waits; its two children spin 1.6 s each on two CPUs: 3.2 s of CPU in 1 s of wall
    fake.set({2: (1, 0.0, 0.0, {}), 3: (2, 1.0, 0.0, {30: 0}), 4: (3, 1.6, 0.0, {40: 0}), 5: (3, 1.6, 0.0, {50: 0})})
    b.check()
    assert sent == [(3, signal.SIGINT)]


def test_a_cell_that_runs_on_past_its_interrupt_is_killed(fake, budget):
    b, clock, sent = budget
    fake.set({2: (1, 0.0, 0.0, {}), 3: (2, 0.0, 0.0, {30: 0})})
    b.start(3, budget_s=2.0)
    clock.t += 2.5
    fake.set({2: (1, 0.0, 0.0, {}), 3: (2, 2.5, 0.0, {30: 0})})
    b.check()
    clock.t += sr.INTERRUPT_GRACE_S - 0.6  # own time 1.9 s + grace: still within the grace (2 s + grace)
    fake.set({2: (1, 0.0, 0.0, {}), 3: (2, 1.9 + sr.INTERRUPT_GRACE_S, 0.0, {30: 0})})
    b.check()
    assert sent == [(3, signal.SIGINT)] and not b.killed
    clock.t += 0.2  # 2.1 s + grace > 2 s + grace
    fake.set({2: (1, 0.0, 0.0, {}), 3: (2, 2.1 + sr.INTERRUPT_GRACE_S, 0.0, {30: 0})})
    b.check()
    assert sent == [(3, signal.SIGINT), (3, signal.SIGKILL)] and b.killed


def test_a_new_cell_starts_from_zero(fake, budget):
    b, clock, sent = budget
    fake.set({2: (1, 0.0, 0.0, {}), 3: (2, 0.0, 0.0, {30: 0})})
    b.start(3, budget_s=2.0)
    clock.t += 5.0
    fake.set({2: (1, 0.0, 0.0, {}), 3: (2, 5.0, 0.0, {30: 0})})
    b.check()
    assert b.end() == pytest.approx(5.0) and b.interrupted
    b.start(3, budget_s=2.0)
    assert not b.interrupted and not b.killed
    clock.t += 1.0
    fake.set({2: (1, 0.0, 0.0, {}), 3: (2, 6.0, 0.0, {30: 0})})
    b.check()
    assert sent == [(3, signal.SIGINT)] and b.end() == pytest.approx(1.0)
    b.check()  # between cells: nothing to stop
    assert len(sent) == 1


def test_each_way_a_cell_is_stopped_is_named():
    from inferlab.exercises import sandbox as sb
    from inferlab.exercises.grade import WALL_FACTOR, _causes
    own = {"ename": "CellTimeoutError", "enospc": False, "wall": False}
    wall = dict(own, wall=True)
    causes = _causes({"timeouts": [own, own, wall], "time_limit": True, "interrupt_ignored": True,
                      "kernel_died": True, "kernel_exit": -9, "schedstat": False}, 3, 10, sb.Limits())
    assert causes == [
        "2 cell(s) timed out after 3 s of their own time (CPU time, or wall time less the host's waits)",
        f"1 cell(s) stopped by the wall-clock backstop ({WALL_FACTOR} x their budget)",
        "notebook time limit (10 s of its own time) reached; later cells not run",
        "kernel killed: a cell ran on past its interrupt at its time limit; later cells not run",
        "host load not discounted (no /proc/<pid>/schedstat): time limits counted in wall time"]
    # Where the waits were read, nothing is said of them; a kernel killed otherwise keeps its own cause.
    assert _causes({"timeouts": [], "kernel_died": True, "kernel_exit": -9, "schedstat": True}, 3, 10,
                   sb.Limits()) == ["kernel died (killed (SIGKILL)); later cells not run"]

"""Points timed round-robin (`measure.time_interleaved`), so a change in the host's load falls on every point alike.

The host is simulated: a fake clock that each call advances by its own cost times the load of the moment, the load
tripling halfway through the run (another job starting). Two operations of equal cost: timed one after the other
(`time_fn`), the second is measured 3x the first; timed in turns, both are measured alike. Hand-derived numbers.
"""
from __future__ import annotations

import pytest

from inferlab import measure
from inferlab.measure import checks, timing


class Host:
    """A clock in seconds; `work(cost)` advances it by cost x the load (1 before `step_at`, `heavy` after)."""

    def __init__(self, step_at: float, heavy: float = 3.0):
        self.t, self.step_at, self.heavy = 0.0, step_at, heavy

    def clock(self) -> float:
        return self.t

    def work(self, cost: float) -> None:
        self.t += cost * (self.heavy if self.t >= self.step_at else 1.0)


@pytest.fixture
def host(monkeypatch):
    h = Host(step_at=10.0)
    monkeypatch.setattr(timing.time, "perf_counter", h.clock)
    return h


def test_calls_alternate_between_the_points_and_warmup_is_not_timed(host):
    order = []
    a = lambda k: (order.append(("a", k)), host.work(1.0))  # noqa: E731
    b = lambda k: (order.append(("b", k)), host.work(1.0))  # noqa: E731
    ta, tb = measure.time_interleaved([(a, [(0,), (1,)]), (b, [(5,)])], warmup=1, repeats=3)
    # one warm-up round, then 3 rounds of a, b in turn; a's inputs rotate (round index 1, 2, 3 -> input 1, 0, 1)
    assert order == [("a", 0), ("b", 5), ("a", 1), ("b", 5), ("a", 0), ("b", 5), ("a", 1), ("b", 5)]
    assert ta.n == tb.n == 3 and ta.warmup == 1 and ta.method == "host-clock"


def test_a_load_change_falls_on_every_point_alike(host):
    a = lambda: host.work(1.0)  # noqa: E731
    b = lambda: host.work(1.0)  # noqa: E731
    # In turns: 10 rounds of (a, b); the load triples at t = 10 s, after round 5 (2 s per round). Each point has
    # 5 samples of 1 s and 5 of 3 s: both medians are (1 + 3) / 2 = 2 s, their ratio 1.
    ta, tb = measure.time_interleaved([(a, None), (b, None)], warmup=0, repeats=10)
    assert ta.samples_s == tb.samples_s == (1.0,) * 5 + (3.0,) * 5
    assert tb.median_s / ta.median_s == 1.0


def test_one_after_the_other_the_same_load_change_would_split_them(host):
    """What interleaving prevents: a timed for 10 calls (t = 0 to 10 s at load 1), then b (at load 3)."""
    a = lambda: host.work(1.0)  # noqa: E731
    b = lambda: host.work(1.0)  # noqa: E731
    ta = measure.time_fn(a, warmup=0, repeats=10)
    tb = measure.time_fn(b, warmup=0, repeats=10)
    assert tb.median_s / ta.median_s == 3.0


def test_the_time_budget_is_per_point_and_stops_whole_rounds(host):
    a = lambda: host.work(1.0)  # noqa: E731
    b = lambda: host.work(3.0)  # noqa: E731
    # 4 s per round (load 1 until t = 10 s); budget 5 s x 2 points = 10 s: reached after round 3 (12 s >= 10),
    # not before round 3 (8 s); min_repeats 2 is already met.
    ta, tb = measure.time_interleaved([(a, None), (b, None)], warmup=0, repeats=100, min_repeats=2, max_time_s=5.0)
    assert ta.n == tb.n == 3


@pytest.mark.parametrize("kwargs, name", [(dict(repeats=0), "repeats"), (dict(warmup=-1), "warmup"),
                                          (dict(max_time_s=0.0), "max_time_s")])
def test_bad_arguments_are_named(kwargs, name):
    with pytest.raises(ValueError, match=name):
        measure.time_interleaved([(lambda: None, None)], **kwargs)


def test_no_points_or_an_empty_pool_is_refused():
    with pytest.raises(ValueError, match="points"):
        measure.time_interleaved([])
    with pytest.raises(ValueError, match="inputs"):
        measure.time_interleaved([(lambda: None, [])])


class Run:
    """The part of a SuiteResult the ITL check reads: series('itl', 'context_len') -> (contexts, ITLs)."""

    def __init__(self, contexts, itls):
        self.contexts, self.itls = contexts, itls

    def series(self, kind, key):
        import numpy as np
        assert (kind, key) == ("itl", "context_len")
        return np.asarray(self.contexts, float), np.asarray(self.itls, float)


def test_the_itl_check_reads_a_ratio_that_a_uniform_slowdown_leaves_alone():
    # 2 ms at context 64, 3 ms at 512: +50%, within a 100% bound; a host 40x slower on both gives 80 and 120 ms
    # (still +50%); the check is the same, where an absolute threshold would have failed.
    calm = checks.itl_flat_with_context(Run([64, 512], [0.002, 0.003]), max_growth=1.0)
    busy = checks.itl_flat_with_context(Run([64, 512], [0.080, 0.120]), max_growth=1.0)
    assert calm and busy and calm.value == pytest.approx(0.5) and busy.value == pytest.approx(0.5)
    assert not checks.itl_flat_with_context(Run([64, 512], [0.002, 0.005]), max_growth=1.0)  # +150%


def test_the_thread_cpu_clock_counts_work_not_waiting():
    import time

    def spin(cpu_s):  # burn `cpu_s` of this thread's CPU, however long the host makes that take
        end = time.thread_time() + cpu_s
        while time.thread_time() < end:
            pass
    work = measure.time_fn(spin, [(0.05,)], warmup=0, repeats=3, clock="thread-cpu")
    idle = measure.time_fn(time.sleep, [(0.05,)], warmup=0, repeats=3, clock="thread-cpu")
    assert work.method == idle.method == "thread-cpu-time"
    assert work.min_s >= 0.05  # at least the CPU it burnt (a wall clock would also pass this one)
    assert idle.max_s < 0.01  # a 50 ms sleep costs no CPU (a wall clock would give >= 0.05)
    ta, tb = measure.time_interleaved([(spin, [(0.02,)]), (time.sleep, [(0.02,)])], warmup=0, repeats=2,
                                      clock="thread-cpu")
    assert ta.min_s >= 0.02 and tb.max_s < 0.01


def test_the_thread_cpu_clock_is_refused_where_it_would_mislead():
    with pytest.raises(ValueError, match="clock 'thread-cpu'.*CPU device only; got device 'cuda'"):
        measure.time_fn(lambda: None, device="cuda", clock="thread-cpu")
    with pytest.raises(ValueError, match="clock must be one of wall, thread-cpu; got 'cpu'"):
        measure.time_interleaved([(lambda: None, None)], clock="cpu")
    with pytest.raises(ValueError, match="threads=1"):
        measure.run_suite(device="cpu", model="tiny", progress=False, clock="thread-cpu", threads=2)


def test_using_clock_sets_the_clock_of_a_block_and_only_of_it():
    import time
    with timing.using_clock("thread-cpu"):
        inside = measure.time_fn(time.sleep, [(0.02,)], warmup=0, repeats=2)
    outside = measure.time_fn(time.sleep, [(0.02,)], warmup=0, repeats=2)
    assert inside.method == "thread-cpu-time" and inside.max_s < 0.01  # a sleep costs no CPU
    assert outside.method == "host-clock" and outside.min_s >= 0.0195

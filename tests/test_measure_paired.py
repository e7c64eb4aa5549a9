"""Decode MBU against the read stream timed in the same rounds as the step (measure.paired)."""
import numpy as np
import pytest

from inferlab.measure.paired import PairedRead, paired_mbu
from inferlab.measure.timing import Timing


def test_paired_mbu_is_the_median_of_each_rounds_ratio_by_hand():
    # 2 GB step, 1 GB stream. Round 2 ran at half speed on both (0.2 s step, 0.1 s stream): its ratio is
    # the same as round 1's. Round 3's stream alone was slow (0.06 s).
    # per round: 2e9 * read / (1e9 * step) = 2*0.05/0.1 = 1.0, 2*0.1/0.2 = 1.0, 2*0.06/0.1 = 1.2 -> median 1.0
    # of the medians: 2 * 0.06 / 0.1 = 1.2 (the pairing lost)
    out = paired_mbu(2e9, [0.1, 0.2, 0.1], 1e9, [0.05, 0.1, 0.06])
    assert out["mbu"] == pytest.approx(1.0)
    assert out["mbu_of_medians"] == pytest.approx(1.2)
    assert out["rounds"] == 3
    assert out["read_bytes_per_s"] == pytest.approx(1e9 / 0.06)


def test_a_drift_that_falls_on_both_calls_of_a_round_cancels():
    # the host's speed over five rounds: 1, 2, 1, 3, 1.5 times slower; the step reads 2e9 bytes at 0.8 of the stream
    speed = np.array([1.0, 2.0, 1.0, 3.0, 1.5])
    read_s = 0.05 * speed                   # 1e9 bytes in 0.05 s at speed 1: 20 GB/s
    step_s = 2e9 / (0.8 * 20e9) * speed     # 0.125 s at speed 1
    assert paired_mbu(2e9, step_s, 1e9, read_s)["mbu"] == pytest.approx(0.8)
    # the same step against a stream measured in the slow spell alone reads 0.8 x 3 (what pairing prevents)
    assert paired_mbu(2e9, step_s[:1], 1e9, read_s[3:4])["mbu"] == pytest.approx(0.8 * 3)


@pytest.mark.parametrize("args, name", [
    ((0.0, [0.1], 1e9, [0.1]), "step_bytes"),
    ((2e9, [0.1], float("nan"), [0.1]), "read_bytes"),
    ((2e9, [0.1, 0.2], 1e9, [0.1]), "equal-length"),
    ((2e9, [], 1e9, []), "non-empty"),
    ((2e9, [0.1, -0.2], 1e9, [0.1, 0.1]), "positive"),
    ((2e9, [0.1, 0.2], 1e9, [0.1, float("inf")]), "finite"),
])
def test_paired_mbu_refuses_bad_input_by_name(args, name):
    with pytest.raises(ValueError, match=name):
        paired_mbu(*args)


def test_paired_read_runs_last_in_every_round_and_is_split_off():
    pr = PairedRead("cpu", 4 * 2048 * 8, "sum", seed=1)
    assert pr.nbytes == 4 * 2048 * 8
    seen = []

    def inner(points):  # a stand-in round-robin timer: records what it was asked to time, in order
        seen.append([fn for fn, _ in points])
        for fn, pool in points:
            fn(*pool[0])
        return [Timing((0.1, 0.2, 0.1)), Timing((0.01, 0.01, 0.01)), Timing((0.05, 0.1, 0.06))]

    step, probe = (lambda: None), (lambda: None)
    out = pr.timer(inner)([(step, [()]), (probe, [()])])
    assert seen == [[step, probe, pr.fn]]
    assert [t.samples_s for t in out] == [(0.1, 0.2, 0.1), (0.01, 0.01, 0.01)]
    rec = pr.record(2 * pr.nbytes, out[0])
    assert rec["mbu"] == pytest.approx(1.0) and rec["read_samples_s"] == [0.05, 0.1, 0.06]
    assert rec["kernel"] == "sum" and rec["buffer_bytes"] == pr.nbytes
    with pytest.raises(ValueError, match="no stream was timed"):  # each record takes the stream's own run
        pr.record(2 * pr.nbytes, out[0])
    pr.release()


@pytest.mark.parametrize("kw, name", [({"kernel": "copy"}, "kernel"), ({"nbytes": 100}, "nbytes"),
                                      ({"nbytes": float("nan")}, "nbytes")])
def test_paired_read_refuses_bad_input_by_name(kw, name):
    args = {"device": "cpu", "nbytes": 4 * 2048 * 8, "kernel": "sum", **kw}
    with pytest.raises(ValueError, match=name):
        PairedRead(**args)

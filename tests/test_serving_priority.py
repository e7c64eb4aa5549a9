"""Priority scheduling (policies.PriorityScheduling): schedules worked by hand, each step taking 1 s
so the schedule alone sets the times."""
from functools import partial

import numpy as np
import pytest

from inferlab.serving.policies import ChunkedPrefill, PriorityScheduling
from inferlab.serving.workload import Workload, load_trace, with_priority
from one_second import run_by_hand

pytestmark = pytest.mark.simulator

run = partial(run_by_hand, block_tokens=4)


# A runs alone from t = 0 (max_num_seqs 1: one sequence at a time). Three low-priority requests
# L1, L2, L3 queue at t = 0.5, then a high-priority H at t = 0.6. Every prompt is 4 tokens (one step
# of budget 4), every output 3 tokens: a request holds the batch for 1 prefill step + 2 decode steps.
#   A: steps [0,1) prefill, [1,2) [2,3) decode -> done at 3
#   FIFO:     L1 at 3..6, L2 at 6..9, L3 at 9..12, H at 12..15 -> H's first token at 13, TTFT 12.4
#   priority: H is admitted first at 3 -> first token at 4, TTFT 3.4; done at 6; L1 6..9 ...
QUEUE = Workload(np.array([0.0, 0.5, 0.5, 0.5, 0.6]), np.full(5, 4), np.full(5, 3),
                 priority=np.array(["normal", "low", "low", "low", "high"]))


def test_a_high_priority_arrival_overtakes_the_low_priority_queue():
    fifo = run(QUEUE, ChunkedPrefill(token_budget=4, max_num_seqs=1))
    prio = run(QUEUE, PriorityScheduling(token_budget=4, max_num_seqs=1))
    np.testing.assert_allclose(fifo.first_token_s, [1.0, 4.0, 7.0, 10.0, 13.0])
    np.testing.assert_allclose(prio.first_token_s, [1.0, 7.0, 10.0, 13.0, 4.0])
    assert prio.ttft_s[4] == pytest.approx(4.0 - 0.6)
    assert prio.priority.tolist() == [1, 2, 2, 2, 0]


def test_without_priorities_the_priority_policy_is_chunked_prefill():
    w = Workload(np.array([0.0, 0.1, 0.2, 0.3]), np.array([6, 3, 9, 2]), np.array([4, 2, 3, 5]))
    a = run(w, ChunkedPrefill(token_budget=5, max_num_seqs=2), kv_blocks=8)
    b = run(w, PriorityScheduling(token_budget=5, max_num_seqs=2), kv_blocks=8)
    np.testing.assert_array_equal(a.first_token_s, b.first_token_s)
    np.testing.assert_array_equal(a.finish_s, b.finish_s)


def test_a_decode_short_of_a_block_evicts_the_least_urgent_sequence():
    # Blocks of 4 tokens, 4 of them. L (low) at t = 0, H (high) at 0.5; prompts 4 tokens, 7 outputs.
    #   step [0,1): L prefills (block 1 of 4). step [1,2): L decodes, writing key 5 (a 2nd block); H is
    #   admitted and prefills (1 block, 1 free). step [2,3): H writes key 5 (its 2nd block, 0 free).
    #   step [4,5): L writes key 9 and needs a 3rd block, none is free: one sequence is evicted.
    #   Plain chunked prefill evicts the latest admitted (H); the priority policy the least urgent (L).
    w = Workload(np.array([0.0, 0.5]), np.array([4, 4]), np.array([7, 7]), priority=np.array(["low", "high"]))
    plain = run(w, ChunkedPrefill(token_budget=8, max_num_seqs=2), kv_blocks=4)
    prio = run(w, PriorityScheduling(token_budget=8, max_num_seqs=2), kv_blocks=4)
    assert plain.preemptions.tolist() == [0, 1]
    assert prio.preemptions.tolist() == [1, 0]


def test_an_unknown_priority_is_refused_in_one_line(tmp_path):
    w = Workload(np.zeros(2), np.array([4, 4]), np.array([2, 2]))
    with pytest.raises(ValueError, match="unknown priority 'urgent'; allowed: high, normal, low"):
        with_priority(w, ["urgent", "low"])
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens,priority\n0,4,2,high\n1,4,2,vip\n")
    with pytest.raises(ValueError, match="line 3: priority must be one of high, normal, low; got 'vip'"):
        load_trace(trace)
    trace.write_text("arrival_s,prompt_tokens,output_tokens,priority\n0,4,2,high\n1,4,2,low\n")
    assert load_trace(trace).priority.tolist() == [0, 2]

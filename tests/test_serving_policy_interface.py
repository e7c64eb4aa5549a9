"""One policy interface (policies.plan_step): the simulator's replica and the live loop's scheduler
both ask the policy object for each step, so a policy written once runs in both."""
import numpy as np
import pytest

from inferlab.measure.plan import TINY_MODEL
from inferlab.serving.policies import ChunkedPrefill, StepPlan
from inferlab.serving.simulate import simulate
from inferlab.study.live import _Queues, _Req, _schedule
from inferlab.serving.workload import Workload
from inferlab.core.specs import get_accelerator

pytestmark = pytest.mark.simulator


class OneSecond:
    def step_time_s(self, step, t_s):
        return 1.0


class DecodeOnlyAfterPrefill(ChunkedPrefill):
    """A scheduler written as one method: prefill whole prompts while any wait, else decode (a
    prefill-first without a token cap), recording every call."""

    calls = []

    def plan_step(self, state):
        type(self).calls.append(type(state).__name__)
        state.admit(None, self.max_num_seqs)
        if state.prefilling:
            return StepPlan(tuple((r, state.left(r)) for r in state.prefilling))
        state.reserve_decode()
        return StepPlan(decode=state.n_decoding > 0)


def test_the_simulator_runs_a_policy_class_by_its_plan_step():
    DecodeOnlyAfterPrefill.calls = []
    # A (10 prompt tokens, 3 output) at 0 and B (5, 2) at 0.5: step [0,1) prefills A; at 1 B is admitted and
    # prefilled alone [1,2) (A waits: prefill first); then both decode [2,3) (B done), A decodes [3,4).
    w = Workload(np.array([0.0, 0.5]), np.array([10, 5]), np.array([3, 2]))
    r = simulate(w, TINY_MODEL, get_accelerator("h100-sxm"), DecodeOnlyAfterPrefill(token_budget=64, max_num_seqs=4),
                 kv_blocks=64, watermark=0.0, step_time=OneSecond())
    np.testing.assert_allclose(r.first_token_s, [1.0, 2.0])
    np.testing.assert_allclose(r.finish_s, [4.0, 3.0])
    assert DecodeOnlyAfterPrefill.calls[:4] == ["Replica"] * 4


def test_the_live_loop_asks_the_same_method():
    DecodeOnlyAfterPrefill.calls = []
    q = _Queues(n_slots=4, max_num_seqs=4)
    a, b = _Req(0, 0.0, tuple(range(10)), 3), _Req(1, 0.0, tuple(range(5)), 2)
    q.waiting.extend([a, b])
    chunks, decode = _schedule(DecodeOnlyAfterPrefill(token_budget=64, max_num_seqs=4), q, 0.0)
    assert DecodeOnlyAfterPrefill.calls == ["_Queues"]
    assert [(r.i, n) for r, n in chunks] == [(0, 10), (1, 5)] and decode is False
    # chunked prefill through the same queues: budget 8 gives A 8 tokens, then A's last 2 and B's 5
    q = _Queues(n_slots=4, max_num_seqs=4)
    a, b = _Req(0, 0.0, tuple(range(10)), 3), _Req(1, 0.0, tuple(range(5)), 2)
    q.waiting.extend([a, b])
    chunks, _ = _schedule(ChunkedPrefill(token_budget=8, max_num_seqs=4), q, 0.0)
    assert [(r.i, n) for r, n in chunks] == [(0, 8)]
    a.done = 8
    chunks, _ = _schedule(ChunkedPrefill(token_budget=8, max_num_seqs=4), q, 1.0)
    assert [(r.i, n) for r, n in chunks] == [(0, 2), (1, 5)]


def test_the_live_loop_refuses_a_priority_policy_it_would_serve_in_arrival_order():
    from inferlab.serving.policies import PriorityScheduling
    from inferlab.study.live import _policy
    with pytest.raises(ValueError, match="policy priority orders requests by priority class.*simulated only"):
        _policy(PriorityScheduling(), 4, 64, None)

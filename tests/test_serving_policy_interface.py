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


def test_the_live_loop_queues_arrivals_where_the_policy_puts_them():
    # One slot. A (normal, arrives first) and B (high) wait; a priority policy's enqueue puts B first,
    # so the live queues admit B, as the simulator's replica would.
    from inferlab.serving.policies import PriorityScheduling
    pol = PriorityScheduling(token_budget=64, max_num_seqs=1)
    q = _Queues(n_slots=1, max_num_seqs=1)
    a, b = _Req(0, 0.0, tuple(range(4)), 2, prio=1), _Req(1, 0.0, tuple(range(6)), 2, prio=0)
    for r in (a, b):
        pol.enqueue(q.waiting, r, False)
    chunks, _ = _schedule(pol, q, 0.0)
    assert [(r.i, n) for r, n in chunks] == [(1, 6)]


def test_the_live_loop_refuses_static_batching_through_the_policy():
    from inferlab.serving.policies import StaticBatching
    from inferlab.study.live import LIVE_POLICIES, live_policy
    assert "static" not in LIVE_POLICIES and "chunked" in LIVE_POLICIES
    with pytest.raises(ValueError, match="the live loop applies to the iteration-level policies.*got policy static"):
        live_policy(StaticBatching())


class NewestFirst(ChunkedPrefill):
    """A policy that owns its queue order: the latest arrival is admitted first (LIFO)."""

    name = "newest-first"

    def enqueue(self, waiting, r, front):
        waiting.appendleft(r)


def test_the_engine_asks_the_policy_for_its_queue_order():
    # Three requests of 4 prompt and 2 output tokens at t = 0, 0.1, 0.2; one sequence at a time.
    # Step [0,1) prefills the first (alone in the queue); the others arrive meanwhile. The first
    # decodes [1,2) and finishes at 2. LIFO then admits the third (arrived last): prefill [2,3),
    # decode [3,4); then the second: prefill [4,5), decode [5,6).
    w = Workload(np.array([0.0, 0.1, 0.2]), np.array([4, 4, 4]), np.array([2, 2, 2]))
    r = simulate(w, TINY_MODEL, get_accelerator("h100-sxm"), NewestFirst(token_budget=8, max_num_seqs=1),
                 kv_blocks=64, watermark=0.0, step_time=OneSecond())
    np.testing.assert_allclose(r.finish_s, [2.0, 6.0, 4.0])


def test_the_registry_maps_each_name_to_its_class_and_the_options_to_its_fields():
    from dataclasses import fields
    from inferlab.commands.serving import POLICY_OPTIONS
    from inferlab.serving.policies import POLICIES, StaticBatching, make_policy
    for name, cls in POLICIES.items():
        assert cls.name == name and type(make_policy(name)) is cls
    # every field of every registered policy is an option of the command line, with the field's help
    for name, cls in POLICIES.items():
        for f in fields(cls):
            dest = f.name[:-2] + "_ms" if f.name.endswith("_s") else f.name
            assert name in POLICY_OPTIONS[dest].policies and f.metadata["help"] in POLICY_OPTIONS[dest].help
    assert POLICY_OPTIONS["timeout_ms"].scale == 1e-3 and POLICY_OPTIONS["batch_size"].policies == ("static",)
    with pytest.raises(ValueError, match="token_budget does not apply to policy static"):
        make_policy("static", token_budget=4)
    assert make_policy("static", batch_size=4) == StaticBatching(4)

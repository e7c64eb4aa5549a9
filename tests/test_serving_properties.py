"""Invariants of the serving simulator for random workloads, policies and KV pools (hypothesis)."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from inferlab.serving import (ChunkedPrefill, ContinuousBatching, PrefillFirst, StaticBatching,
                              Workload, simulate)
from inferlab.serving.kv import blocks_for
from inferlab.core.specs import get_accelerator, get_model

pytestmark = pytest.mark.simulator

M, G = get_model("llama-2-7b"), get_accelerator("h100-sxm")
# No wall-clock deadline or speed check: a busy machine must not fail a property (tests pass with every core busy).
FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def workloads(draw):
    n = draw(st.integers(1, 25))
    gaps = draw(st.lists(st.floats(0.0, 0.2), min_size=n, max_size=n))
    prompts = draw(st.lists(st.integers(1, 300), min_size=n, max_size=n))
    outputs = draw(st.lists(st.integers(1, 120), min_size=n, max_size=n))
    return Workload(np.cumsum(gaps), np.array(prompts), np.array(outputs))


policies = st.one_of(
    st.builds(ContinuousBatching, max_num_seqs=st.integers(1, 16)),
    st.builds(PrefillFirst, max_num_seqs=st.integers(1, 16), max_batched_tokens=st.integers(1, 600)),
    st.builds(lambda m, extra: ChunkedPrefill(token_budget=m + extra, max_num_seqs=m),
              st.integers(1, 16), st.integers(0, 300)),
    st.builds(StaticBatching, batch_size=st.integers(1, 8),
              timeout_s=st.one_of(st.none(), st.floats(0.0, 0.3))),
)


@FAST
@given(w=workloads(), policy=policies, kv_blocks=st.integers(4, 60), block=st.sampled_from([1, 8, 16]),
       replicas=st.integers(1, 3), router=st.sampled_from(["round-robin", "least-loaded"]))
def test_every_request_is_served_in_order_of_events_within_the_pool(w, policy, kv_blocks, block,
                                                                    replicas, router):
    r = simulate(w, M, G, policy, kv_blocks=kv_blocks, block_tokens=block, watermark=0,
                 replicas=replicas, router=router)
    fits = np.array([blocks_for(p + o, block) <= kv_blocks for p, o in zip(w.prompt_tokens, w.output_tokens)])
    assert r.completed.tolist() == fits.tolist()  # served iff it can ever fit, and then always
    ok = fits
    assert np.all(r.first_scheduled_s[ok] >= r.arrival_s[ok])
    assert np.all(r.first_token_s[ok] > r.first_scheduled_s[ok])
    assert np.all(r.finish_s[ok] >= r.first_token_s[ok])
    for i in np.flatnonzero(ok):
        assert len(r.itls_s[i]) == w.output_tokens[i] - 1  # every token, once
        assert np.all(r.itls_s[i] > 0)
        assert r.first_token_s[i] + np.sum(r.itls_s[i]) == pytest.approx(r.finish_s[i], rel=1e-9, abs=1e-12)
    for tr in r.traces:
        assert np.all(tr.kv_blocks_used <= kv_blocks) and np.all(tr.kv_blocks_used >= 0)
        assert np.all(tr.step_s > 0)
        assert np.all(np.diff(tr.start_s) >= tr.step_s[:-1] * (1 - 1e-12))  # steps never overlap
        if not isinstance(policy, StaticBatching):
            assert np.all(tr.batch <= policy.max_num_seqs)
        if isinstance(policy, ChunkedPrefill):
            assert np.all(tr.tokens <= policy.token_budget)
    if isinstance(policy, StaticBatching):
        assert r.preemptions.sum() == 0


class TenMs:
    def step_time_s(self, step, t_s):
        return 0.010


def test_a_custom_step_time_model_is_used():
    # A flat 10 ms per step: a request of 5 output tokens alone takes 1 prefill step + 4 decode steps.
    w = Workload(np.array([0.0]), np.array([100]), np.array([5]))
    r = simulate(w, M, G, ContinuousBatching(), step_time=TenMs())
    assert r.ttft_s[0] == pytest.approx(0.010)
    assert r.e2e_s[0] == pytest.approx(0.050)
    with pytest.raises(ValueError, match="step_time"):
        simulate(w, M, G, step_time=0.01)
    with pytest.raises(ValueError, match="step_time_s"):  # a bare function is not a step-time model
        simulate(w, M, G, step_time=lambda tokens, logits, pairs, kv: 0.010)

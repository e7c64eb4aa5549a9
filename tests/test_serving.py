"""The serving simulator against hand-derived expectations (inferlab.serving)."""
import math

import numpy as np
import pytest

from inferlab.core.deployment import Deployment
from inferlab.core.costs import chunked_prefill_costs
from inferlab.core.latency import decode_step_time_s, prefill_time_s
from inferlab.core.roofline import pass_time_s
from inferlab.serving import (SLO, ChunkedPrefill, ContinuousBatching, LengthDist, PrefillFirst,
                              RooflineStepTime, StaticBatching, Workload, burst, simulate, synthetic)
from inferlab.serving.kv import blocks_for, kv_capacity_blocks
from inferlab.core.memory import kv_cache_bytes_per_token, weight_bytes
from inferlab.core.specs import get_accelerator, get_model

pytestmark = pytest.mark.simulator

M, G = get_model("llama-2-13b-book"), get_accelerator("h100-sxm")
POLICIES = [ContinuousBatching(), PrefillFirst(), ChunkedPrefill(token_budget=2048), StaticBatching(1)]


def one(arrival, prompt, output):
    return Workload(np.array([arrival], float), np.array([prompt]), np.array([output]))


# -- step time: the library's roofline, also for batches and tensor parallelism ---------------------
@pytest.mark.parametrize("tp", [1, 2])
@pytest.mark.parametrize("batch", [1, 8, 64])
def test_step_time_is_the_library_prefill_and_decode(tp, batch):
    st = RooflineStepTime(M, G, tp=tp)
    s = 700
    # B prompts of S tokens in one step: T = B*S tokens, B*S(S+1)/2 causal pairs, B*S keys, B logits.
    assert st(batch * s, batch, batch * s * (s + 1) / 2, batch * s) == pytest.approx(
        prefill_time_s(M, Deployment(G, tp=tp), s, batch), rel=1e-12)
    # A decode step at context c: B tokens, each scoring and reading c keys, B logits.
    c = 1500
    assert st(batch, batch, batch * c, batch * c) == pytest.approx(
        decode_step_time_s(M, Deployment(G, tp=tp), c, batch), rel=1e-12)


def test_mixed_step_costs_more_than_either_part_and_less_than_both():
    st = RooflineStepTime(M, G)
    decode = st.decode_s(1000, 32)
    prefill = st.prefill_s(512)
    # 32 decodes at context 1000 plus one 512-token prompt: 544 tokens, weights read once.
    mixed = st(32 + 512, 33, 32 * 1000 + 512 * 513 / 2, 32 * 1000 + 512)
    assert max(decode, prefill) < mixed < decode + prefill


# -- one request alone: TTFT is the prefill, each ITL one decode step ------------------------------
@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.name)
def test_single_request_ttft_is_prefill_and_itl_is_decode_step(policy):
    s, n = 1024, 6
    r = simulate(one(0.5, s, n), M, G, policy)
    assert r.queue_s[0] == 0.0
    assert r.ttft_s[0] == pytest.approx(prefill_time_s(M, G, s), rel=1e-9)
    # token j+1 comes from the decode step that feeds token j: context S + j, j = 1 .. N-1
    expected = [decode_step_time_s(M, G, s + j) for j in range(1, n)]
    np.testing.assert_allclose(r.itls_s[0], expected, rtol=1e-9)
    assert r.e2e_s[0] == pytest.approx(prefill_time_s(M, G, s) + sum(expected), rel=1e-9)
    assert r.tpot_s[0] == pytest.approx(sum(expected) / (n - 1), rel=1e-9)


def test_chunked_prefill_splits_a_prompt_into_ceil_s_over_c_steps():
    s, c = 1000, 256
    r = simulate(one(0.0, s, 3), M, G, ChunkedPrefill(token_budget=c, max_num_seqs=8))
    tr = r.traces[0]
    before_first = tr.start_s < r.first_token_s[0] - 1e-15
    # ceil(1000/256) = 4 steps of 256, 256, 256, 232 tokens
    assert before_first.sum() == math.ceil(s / c) == 4
    assert tr.tokens[before_first].tolist() == [256, 256, 256, 232]
    chunked = chunked_prefill_costs(M, s, c)
    assert r.ttft_s[0] == pytest.approx(float(np.sum(pass_time_s(chunked.chunks, G))), rel=1e-9)
    assert r.ttft_s[0] > prefill_time_s(M, G, s)  # each chunk re-reads the weights


# -- load: far below capacity nobody queues; above it the queue grows without bound --------------
def test_far_below_capacity_nobody_queues():
    # One request every 3 s; each is served alone in about 26.7 ms + 127 x 8 ms, about 1.05 s.
    w = synthetic(1 / 3, n_requests=40, prompt=LengthDist("fixed", 1024), output=LengthDist("fixed", 128), cv=0)
    for policy in POLICIES[:3]:
        r = simulate(w, M, G, policy)
        assert np.all(r.queue_s == 0.0)
        np.testing.assert_allclose(r.ttft_s, prefill_time_s(M, G, 1024), rtol=1e-9)


def test_poisson_far_below_capacity_waits_at_most_one_step():
    # At 0.5 requests/s, ~1 s each: a request may arrive during a step and wait for its end, no more.
    w = synthetic(0.5, n_requests=300, prompt=LengthDist("fixed", 512), output=LengthDist("fixed", 128), seed=3)
    r = simulate(w, M, G, ContinuousBatching())
    assert r.summary()["completed"] == 300
    assert np.all(r.queue_s <= r.traces[0].step_s.max() + 1e-12)


def test_above_capacity_queueing_grows_with_duration():
    # max_num_seqs = 8 and 64 output tokens: a slot is held for >= 63 decode steps, each at least
    # t_min = decode step of one sequence (weights read once), so request k cannot start before
    # floor(k/8) * 63 * t_min; at 50 requests/s that outruns the arrivals (8/(63*7.8 ms) ~ 16/s).
    t_min = decode_step_time_s(M, G, 129)
    pol = ContinuousBatching(max_num_seqs=8)
    last_queue = []
    for duration in (4.0, 8.0):
        w = synthetic(50.0, duration_s=duration, prompt=LengthDist("fixed", 128),
                      output=LengthDist("fixed", 64), cv=0)
        r = simulate(w, M, G, pol)
        k = np.arange(len(w))
        bound = np.floor(k / 8) * 63 * t_min - w.arrival_s
        assert np.all(r.queue_s >= bound - 1e-9)
        last_queue.append(r.queue_s[-1])
        assert r.queue_s[-1] >= duration * (50 * 63 * t_min / 8 - 1) - 63 * t_min
    assert last_queue[1] > 1.8 * last_queue[0]


# -- paged KV: capacity, admission, preemption --------------------------------------------------------
def test_kv_capacity_blocks_from_memory():
    # (0.9 * 80e9 - weight bytes) / (KV bytes per token * 16), floored
    w = weight_bytes(M)
    per_token = kv_cache_bytes_per_token(M)
    assert kv_capacity_blocks(M, G) == int((0.9 * 80e9 - w) // (per_token * 16))
    assert blocks_for(33, 16) == 3 and blocks_for(32, 16) == 2
    # tp = 2: each device holds its shard of the weights (about half; norms are replicated) and
    # half of every token's KV (40 KV heads split 20 + 20)
    w2 = weight_bytes(M, tp=2)
    assert w / 2 < w2 < w / 2 + 1e6
    assert kv_capacity_blocks(M, G, tp=2) == int((0.9 * 80e9 - w2) // (per_token / 2 * 16))


def test_preemption_happens_when_it_must_and_the_pool_never_overflows():
    # Two requests of 32 + 100 tokens, 10 blocks of 16. After prefill each holds 2 blocks; decode j
    # writes token 32 + j, a new block at j = 1, 17, 33 (10 blocks used) and 49 (12 > 10): the later
    # one (B) is evicted after 1 + 48 tokens and needs ceil(81/16) = 6 blocks to come back, which
    # are free only when A (9 blocks at its end) finishes.
    w = Workload(np.zeros(2), np.array([32, 32]), np.array([100, 100]))
    r = simulate(w, M, G, ContinuousBatching(), kv_blocks=10, block_tokens=16, watermark=0)
    assert r.preemptions.tolist() == [0, 1]
    tr = r.traces[0]
    assert tr.kv_blocks_used.max() == 10 and np.all(tr.kv_blocks_used <= 10)
    # B's 49th token came before the eviction; its 50th after A's last token
    b_tokens = r.first_token_s[1] + np.concatenate([[0], np.cumsum(r.itls_s[1])])
    assert len(b_tokens) == 100 and len(r.itls_s[0]) == 99
    assert b_tokens[48] < r.finish_s[0] < b_tokens[49]
    # With room for both (2 x 9 = 18 <= 20 blocks) nobody is evicted.
    r2 = simulate(w, M, G, ContinuousBatching(), kv_blocks=20, block_tokens=16, watermark=0)
    assert r2.preemptions.tolist() == [0, 0]


@pytest.mark.parametrize("policy", POLICIES[:3], ids=lambda p: p.name)
def test_kv_use_stays_within_capacity_under_overload(policy):
    w = synthetic(40.0, n_requests=400, prompt=LengthDist("uniform", 400, low=16, high=800),
                  output=LengthDist("uniform", 200, low=1, high=400), seed=1)
    r = simulate(w, M, G, policy, kv_blocks=300)
    tr = r.traces[0]
    assert np.all(tr.kv_blocks_used <= 300)
    assert r.preemptions.sum() > 0
    assert r.summary()["completed"] == 400
    # every request got all its tokens: 1 from its first prefill + one per ITL
    assert [len(x) + 1 for x in r.itls_s] == w.output_tokens.tolist()


def test_request_that_can_never_fit_is_rejected_not_looped_on():
    w = Workload(np.array([0.0, 0.1]), np.array([100, 2000]), np.array([10, 10]))
    r = simulate(w, M, G, ContinuousBatching(), kv_blocks=50, block_tokens=16)  # 800 tokens
    assert r.completed.tolist() == [True, False]
    assert r.summary()["rejected"] == 1


# -- policies compared from first principles ------------------------------------------------------------
def test_static_batch_blocks_a_newcomer_that_continuous_batching_admits_at_once():
    # Static, B = 2: requests 0 and 1 (2 and 100 output tokens) form the batch at t = 0; request 2
    # (t = 1 ms) waits for the batch's 99 decode steps. Continuous: it joins the next step.
    w = Workload(np.array([0.0, 0.0, 0.001]), np.array([128, 128, 128]), np.array([2, 100, 2]))
    t_min = decode_step_time_s(M, G, 129)
    st = simulate(w, M, G, StaticBatching(2, timeout_s=0.0))
    cb = simulate(w, M, G, ContinuousBatching())
    assert st.ttft_s[2] >= 99 * t_min
    assert cb.ttft_s[2] <= 2 * cb.traces[0].step_s.max()
    # the short request of the static batch keeps its slot as padding: the batch has 2 sequences
    # in all 99 decode steps
    assert st.traces[0].batch.tolist()[:100] == [2] * 100


def test_continuous_batching_drains_a_mixed_burst_faster_than_static():
    # 64 requests, outputs 8 and 256 alternating, 16 slots. Static: 4 batches of 255 decode steps
    # each (the short ones pad). Continuous: 32*7 + 32*255 = 8384 decode tokens over 16 slots.
    w = Workload(np.zeros(64), np.full(64, 256), np.tile([8, 256], 32))
    t_min = decode_step_time_s(M, G, 257)
    st = simulate(w, M, G, StaticBatching(16))
    cb = simulate(w, M, G, ContinuousBatching(max_num_seqs=16))
    assert st.span_s >= 4 * 255 * t_min
    assert cb.span_s < 0.75 * st.span_s
    assert np.mean(cb.e2e_s) < np.mean(st.e2e_s)


def test_static_timeout_starts_a_partial_batch():
    r = simulate(one(1.0, 256, 4), M, G, StaticBatching(8, timeout_s=0.2))
    assert r.queue_s[0] == pytest.approx(0.2)
    assert r.ttft_s[0] == pytest.approx(0.2 + prefill_time_s(M, G, 256), rel=1e-9)


def test_prefill_first_stalls_decodes_chunked_prefill_does_not():
    # A long request decodes; a 4000-token prompt arrives. Prefill-first runs it alone: one ITL of
    # the decoding request spans the whole 4000-token prefill. Chunked (budget 512): at most one
    # 512-token chunk (plus the decode) per step, so the worst ITL is far smaller.
    w = Workload(np.array([0.0, 0.3]), np.array([256, 4000]), np.array([200, 2]))
    pf = simulate(w, M, G, PrefillFirst())
    ch = simulate(w, M, G, ChunkedPrefill(token_budget=512))
    assert pf.itls_s[0].max() >= prefill_time_s(M, G, 4000)
    assert ch.itls_s[0].max() < 0.5 * pf.itls_s[0].max()
    # the price: the long prompt's TTFT grows (8 chunks, each re-reading the weights)
    assert ch.ttft_s[1] > pf.ttft_s[1]


# -- replicas and routing ----------------------------------------------------------------------------
def test_round_robin_alternates_and_least_loaded_avoids_the_busy_replica():
    w = Workload(np.array([0.0, 0.1, 0.2]), np.array([128, 128, 128]), np.array([1000, 2, 2]))
    rr = simulate(w, M, G, replicas=2, router="round-robin")
    ll = simulate(w, M, G, replicas=2, router="least-loaded")
    assert rr.replica.tolist() == [0, 1, 0]
    # at 0.2 s replica 0 still decodes request 0 (~8 s) and replica 1 has finished request 1
    assert ll.replica.tolist() == [0, 1, 1]


def test_two_replicas_halve_the_overload():
    w = synthetic(30.0, duration_s=3.0, prompt=LengthDist("fixed", 128), output=LengthDist("fixed", 64), cv=0)
    one_r = simulate(w, M, G, ContinuousBatching(max_num_seqs=8))
    two_r = simulate(w, M, G, ContinuousBatching(max_num_seqs=8), replicas=2)
    assert np.mean(two_r.queue_s) < 0.5 * np.mean(one_r.queue_s)


# -- metrics -------------------------------------------------------------------------------------------
def test_goodput_counts_requests_within_the_slo():
    r = simulate(one(0.0, 1024, 5), M, G)
    ttft = prefill_time_s(M, G, 1024)
    assert r.meets(SLO(ttft_s=ttft * 1.001, tpot_s=None)).tolist() == [True]
    assert r.meets(SLO(ttft_s=ttft * 0.999, tpot_s=None)).tolist() == [False]
    itl_max = decode_step_time_s(M, G, 1024 + 4)
    assert r.meets(SLO(ttft_s=None, tpot_s=None, itl_s=itl_max * 0.999)).tolist() == [False]
    s = r.summary(SLO(ttft_s=1.0, tpot_s=1.0))
    assert s["goodput_requests_per_s"] == pytest.approx(1 / r.span_s)
    assert s["ttft_s"]["p50"] == pytest.approx(ttft, rel=1e-9)


def test_time_series_batch_respects_max_num_seqs():
    w = synthetic(100.0, n_requests=300, prompt=LengthDist("fixed", 64), output=LengthDist("fixed", 32))
    r = simulate(w, M, G, ContinuousBatching(max_num_seqs=12))
    assert r.traces[0].batch.max() == 12


# -- workload ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cv", [0.5, 1.0, 2.0])
def test_gamma_arrivals_have_the_requested_rate_and_cv(cv):
    w = synthetic(20.0, n_requests=40000, cv=cv, seed=7)
    gaps = np.diff(w.arrival_s)
    assert np.mean(gaps) == pytest.approx(1 / 20.0, rel=0.03)
    assert np.std(gaps) / np.mean(gaps) == pytest.approx(cv, rel=0.05)


def test_burst_and_constant_arrivals():
    assert burst(3, 10, 5).arrival_s.tolist() == [0.0, 0.0, 0.0]
    w = synthetic(4.0, n_requests=3, cv=0)
    assert w.arrival_s.tolist() == [0.25, 0.5, 0.75]


@pytest.mark.parametrize("call, name", [
    (lambda: simulate(burst(2, 10, 5), M, G, router="random"), "router"),
    (lambda: ChunkedPrefill(token_budget=16, max_num_seqs=256), "token_budget"),
    (lambda: synthetic(-1.0, n_requests=5), "rate"),
    (lambda: synthetic(1.0, n_requests=5, cv=-1), "cv"),
    (lambda: Workload(np.array([0.0]), np.array([0]), np.array([3])), "prompt_tokens"),
    (lambda: simulate(burst(2, 10, 5), M, G, kv_blocks=0), "kv_blocks"),
    (lambda: LengthDist("zipf"), "length distribution"),
])
def test_bad_input_names_the_parameter(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_batch_and_kv_use_time_series():
    # Two identical requests together (32 + 100 tokens): every step holds both sequences; at the
    # end each caches 32 + 99 = 131 tokens = ceil(131/16) = 9 blocks, 18 of 40 = 45 % of the pool.
    w = Workload(np.zeros(2), np.array([32, 32]), np.array([100, 100]))
    r = simulate(w, M, G, ContinuousBatching(), kv_blocks=40, block_tokens=16, watermark=0)
    s = r.summary()
    assert s["batch"] == {"max": 2, "mean": pytest.approx(2.0)}
    assert s["kv_use"]["peak_fraction"] == pytest.approx(18 / 40)
    # blocks in use start at 2 x ceil(32/16) = 4 and only grow
    kv = r.traces[0].kv_blocks_used
    assert kv[0] == 4 and np.all(np.diff(kv) >= 0)
    csv = r.timeseries_csv().splitlines()
    assert csv[0].startswith("replica,start_s") and len(csv) == 1 + 100  # 1 prefill + 99 decode steps


@pytest.mark.parametrize("cv", [0.0, 1.0, 4.0])
def test_duration_workload_fills_the_duration(cv):
    # every arrival before the duration, none after; the count near rate * duration on average
    w = synthetic(50.0, duration_s=100.0, cv=cv, seed=2)
    assert w.arrival_s.max() < 100.0
    next_gap_end = synthetic(50.0, n_requests=len(w) + 1, cv=cv, seed=2).arrival_s[-1]
    assert next_gap_end >= 100.0  # the next arrival of the same stream falls after the duration

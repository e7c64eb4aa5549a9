"""Prefix caching in the serving simulator against hand-derived expectations (inferlab.serving).

A shared prefix of c tokens (whole blocks) is computed once; a later request feeds only its own
q tokens, whose attention still reads the c cached keys: its prefill step scores
q*c + q(q+1)/2 query-key pairs and reads c + q keys (steptime.py's arguments).
"""
import numpy as np
import pytest

from inferlab.core.context import beyond_context
from inferlab.serving import (ChunkedPrefill, ContinuousBatching, LengthDist, PrefillFirst, RooflineStepTime,
                              StaticBatching, Workload, simulate, synthetic, with_shared_prefix)
from inferlab.core.specs import get_accelerator, get_model

pytestmark = pytest.mark.simulator

M, G = get_model("llama-2-13b-book"), get_accelerator("h100-sxm")
ITERATION = [ContinuousBatching(), PrefillFirst(max_batched_tokens=None), ChunkedPrefill(token_budget=2048)]


def two(prefix, suffixes, gap_s=5.0, outputs=(4, 4), pids=(0, 0)):
    """Two requests sharing a `prefix`-token prefix, `gap_s` apart (the first long finished)."""
    return Workload(np.array([0.0, gap_s]), np.array([prefix + suffixes[0], prefix + suffixes[1]]),
                    np.array(outputs), np.array(pids), np.array([prefix, prefix]))


@pytest.mark.parametrize("policy", ITERATION, ids=lambda p: p.name)
def test_a_cached_prefix_leaves_only_the_suffix_to_prefill(policy):
    c, q = 10_000, 300  # 10,000 = 625 blocks of 16: the whole prefix is cacheable
    st = RooflineStepTime(M, G)
    with beyond_context():  # 10,300 tokens exceed Llama-2 13B's 4,096: a yardstick
        r = simulate(two(c, (100, q)), M, G, policy, prefix_caching=True)
        # The suffix alone: T = 300 tokens, 1 logit, pairs 300 * 10,000 + 300 * 301 / 2 = 3,045,150,
        # keys read 10,000 + 300 = 10,300.
        expected = st(300, 1, 300 * 10_000 + 300 * 301 / 2, 10_300)
        full = st.prefill_s(10_100)  # the first request computes everything
        without = st.prefill_s(10_300)
    assert r.ttft_s[0] == pytest.approx(full, rel=1e-12)
    assert r.ttft_s[1] == pytest.approx(expected, rel=1e-12)
    assert r.cached_prompt_tokens.tolist() == [0, 10_000]
    assert r.ttft_s[1] < without / 10  # the point of caching: a few % of the whole prefill


def test_a_cached_prefix_with_chunks_of_the_suffix():
    c = 10_000
    st = RooflineStepTime(M, G)
    with beyond_context():
        r = simulate(two(c, (100, 300)), M, G, ChunkedPrefill(token_budget=256), prefix_caching=True)
        # 300 uncached tokens in chunks of 256 and 44: the first reads 10,000 + 256 keys and scores
        # 256 * 10,000 + 256 * 257 / 2 pairs (no logit); the second starts at 10,256 cached tokens:
        # 44 * 10,256 + 44 * 45 / 2 pairs, 10,300 keys, one logit.
        expected = (st(256, 0, 256 * 10_000 + 256 * 257 / 2, 10_256)
                    + st(44, 1, 44 * 10_256 + 44 * 45 / 2, 10_300))
    assert r.ttft_s[1] == pytest.approx(expected, rel=1e-12)


def test_only_whole_blocks_are_cached():
    # A 1,000-token prefix in 16-token blocks: 62 whole blocks = 992 tokens cached; the other 8
    # prefix tokens are prefilled with the request's own 50: q = 58 tokens at p = 992.
    st = RooflineStepTime(M, G)
    r = simulate(two(1000, (50, 50)), M, G, ContinuousBatching(), prefix_caching=True)
    assert r.cached_prompt_tokens.tolist() == [0, 992]
    assert r.ttft_s[1] == pytest.approx(st(58, 1, 58 * 992 + 58 * 59 / 2, 1050), rel=1e-12)


@pytest.mark.parametrize("policy", ITERATION + [StaticBatching(4, timeout_s=0.05)], ids=lambda p: p.name)
def test_without_caching_a_prefix_changes_nothing(policy):
    base = synthetic(6.0, n_requests=80, prompt=LengthDist("lognormal", 400, cv=1.0, low=4, high=3000),
                     output=LengthDist("lognormal", 64, cv=1.0, low=1, high=400), seed=3)
    tagged = with_shared_prefix(base, 512, every=2)
    plain = Workload(tagged.arrival_s, tagged.prompt_tokens, tagged.output_tokens)
    a, b = simulate(tagged, M, G, policy), simulate(plain, M, G, policy)
    for name in ("first_scheduled_s", "first_token_s", "finish_s", "preemptions"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert a.cached_prompt_tokens.sum() == 0
    if policy.name != "static":  # caching on, but no request has a prefix: as before too
        c = simulate(plain, M, G, policy, prefix_caching=True)
        np.testing.assert_array_equal(c.finish_s, b.finish_s)


def test_shared_blocks_are_counted_once():
    # Request 1: 10,000 + 1 tokens = 626 blocks (625 shared + 1 private holding 1 of 16 tokens); its
    # 10 outputs add at most 9 tokens to the cache (10,010 <= 626 * 16 = 10,016): no new block.
    # Request 2 arrives while request 1 decodes: 10,000 + 20 tokens; cached, it needs blocks for its
    # 20 tokens (+ 9 decoded = 29 <= 32): 2 private blocks. Peak in use: 625 + 1 + 2 = 628 blocks.
    # Without caching it holds its own 627 blocks (10,029 <= 627 * 16 = 10,032): 626 + 627 = 1,253.
    w = two(10_000, (1, 20), gap_s=0.35, outputs=(10, 10))
    with beyond_context():
        on = simulate(w, M, G, ContinuousBatching(), prefix_caching=True)
        off = simulate(w, M, G, ContinuousBatching())
    assert on.first_token_s[1] < on.finish_s[0]  # the two overlap
    assert off.first_scheduled_s[1] < off.finish_s[0]
    assert on.traces[0].kv_blocks_used.max() == 628
    assert off.traces[0].kv_blocks_used.max() == 1253


def lru_pool(pids, outputs=(2, 2, 2), gaps_s=(0.0, 1.0, 2.0)):
    """A 20-block pool (16 tokens each); 160-token prefixes (10 blocks) + 10 own tokens per request."""
    n = len(pids)
    w = Workload(np.array(gaps_s[:n]), np.full(n, 170), np.array(outputs[:n]), np.array(pids), np.full(n, 160))
    return simulate(w, M, G, ContinuousBatching(), kv_blocks=20, watermark=0.0, prefix_caching=True)


def test_an_unused_prefix_stays_cached_until_the_pool_needs_its_blocks():
    # A runs and finishes: its 10 blocks stay cached (unused). B needs 11 blocks (170 tokens), 10 are
    # free: A is evicted. A third request with prefix B finds it (160 cached); with prefix A, it must
    # recompute A (0 cached) and evicts the now unused B to find 11 blocks.
    assert lru_pool([0, 1, 1]).cached_prompt_tokens.tolist() == [0, 0, 160]
    assert lru_pool([0, 1, 0]).cached_prompt_tokens.tolist() == [0, 0, 0]
    # Nothing evicted when the pool has room: A, then A again.
    assert lru_pool([0, 0]).cached_prompt_tokens.tolist() == [0, 160]


def test_a_prefix_in_use_is_never_evicted():
    # A decodes for 100 steps holding 10 shared + 7 private blocks (170 + 99 tokens = 269 -> 17 blocks
    # in all): B (11 blocks) cannot be admitted by evicting A's prefix; it waits for A to finish.
    r = lru_pool([0, 1], outputs=(100, 2), gaps_s=(0.0, 0.5))
    assert r.arrival_s[1] < r.finish_s[0]
    assert r.first_scheduled_s[1] >= r.finish_s[0]
    assert r.preemptions.sum() == 0


def test_caching_under_pressure_completes_every_request():
    # Many requests with one 2,000-token prefix on a pool too small for their decodes: preemptions
    # drop and retake references; every request still completes and most hit the cache.
    base = synthetic(20.0, n_requests=200, prompt=LengthDist("fixed", 100), output=LengthDist("fixed", 300), seed=1)
    w = with_shared_prefix(base, 2000)
    r = simulate(w, M, G, ContinuousBatching(), kv_blocks=1500, prefix_caching=True)
    assert r.completed.all()
    assert r.preemptions.sum() > 0
    assert (r.cached_prompt_tokens == 2000).mean() > 0.9


def test_bad_prefix_input_is_refused_with_its_name():
    with pytest.raises(ValueError, match="prefix_tokens must be < prompt_tokens.*request 0 has prefix_tokens=100"):
        Workload(np.array([0.0]), np.array([100]), np.array([1]), np.array([0]), np.array([100]))
    with pytest.raises(ValueError, match=r"prefix_id 3 must have one length; got prefix_tokens \[10, 20\]"):
        Workload(np.zeros(2), np.array([100, 100]), np.array([1, 1]), np.array([3, 3]), np.array([10, 20]))
    with pytest.raises(ValueError, match="give both prefix_id and prefix_tokens"):
        Workload(np.zeros(1), np.array([100]), np.array([1]), np.array([0]))
    with pytest.raises(ValueError, match="prefix_caching applies to the iteration-level policies"):
        simulate(two(100, (5, 5)), M, G, StaticBatching(2), prefix_caching=True)
    with pytest.raises(ValueError, match="prefix_caching must be True or False; got 'yes'"):
        simulate(two(100, (5, 5)), M, G, prefix_caching="yes")


def test_serve_cli_puts_a_shared_prefix_in_front_and_caches_it(capsys):
    import json

    from inferlab.cli import main
    args = ["serve", "--policy", "continuous", "--rate", "0.5", "--duration", "20", "--cv", "0",
            "--prompt", "256", "--output", "16", "--shared-prefix", "2048", "--json"]
    assert main(args) == 0
    off = json.loads(capsys.readouterr().out)
    assert main(args + ["--prefix-caching"]) == 0
    on = json.loads(capsys.readouterr().out)
    # Requests 2 s apart, each alone: uncached TTFT = prefill of 2,304 tokens; cached (all but the first)
    # = 256 tokens attending to 2,048 + 256 keys.
    st = RooflineStepTime(M, G)
    assert off["ttft_s"]["p50"] == pytest.approx(st.prefill_s(2304), rel=1e-9)
    assert on["ttft_s"]["p50"] == pytest.approx(st(256, 1, 256 * 2048 + 256 * 257 / 2, 2304), rel=1e-9)
    assert main(["serve", "--prefix-caching"]) == 2
    assert "--prefix-caching needs --shared-prefix TOKENS" in capsys.readouterr().err

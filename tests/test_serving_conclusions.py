"""inferlab.notebook.lab_conclusions: the serving lab's sentences, from hand-made results. Each test
checks a decision the sentence makes (a word, a clause that appears or not) and the numbers it
prints, computed here by hand."""
from __future__ import annotations

import pytest

from inferlab.serving import SLO, ContinuousBatching
from inferlab.notebook import lab_conclusions as conclusions, lab


def summary(thr, e2e_p50=1.0, ttft_p99=0.1, itl_p99=0.01):
    return {"throughput_output_tokens_per_s": thr, "e2e_s": {"p50": e2e_p50},
            "ttft_s": {"p99": ttft_p99}, "itl_s": {"p99": itl_p99}}


def policies(static_top: float) -> lab.Sweep:
    # static: 1,000 tokens/s at the second rate, `static_top` at the top; continuous 4,000 at the top
    return lab.Sweep((2.0, 4.0, 8.0), ("static", "continuous"), {
        "static": [summary(500), summary(1000), summary(static_top, e2e_p50=300.0)],
        "continuous": [summary(500), summary(1000), summary(4000, e2e_p50=2.5)]}, SLO())


def test_static_batching_is_said_to_saturate_only_when_its_throughput_stops_growing():
    flat = conclusions.policy_conclusion(policies(1050.0), "static", "continuous")
    assert "1.05× its throughput at 4/s, a **small** change" in flat and "it has saturated" in flat
    assert "4,000 output tokens/s against static batching's 1,050 (3.8×)" in flat
    assert "finishes in 2.50 s instead of 300 s" in flat
    growing = conclusions.policy_conclusion(policies(2000.0), "static", "continuous")
    assert "**large** change" in growing and "saturated" not in growing


def long_run(unchunked_gap_s: float, gaps: dict) -> lab.LongPrompt:
    chunks = tuple(gaps)
    others = {"unchunked": unchunked_gap_s, **{f"C={c}": g for c, g in gaps.items()}}
    ttft = {"unchunked": 1.0, **{f"C={c}": 1.0 + 0.1 * (2048 // c) for c in chunks}}
    return lab.LongPrompt(16_000, 8.0, chunks, others, others, others, ttft, 1.0)


def test_the_largest_chunk_within_the_itl_target():
    run = long_run(0.9, {256: 0.03, 512: 0.045, 1024: 0.07})
    assert conclusions.largest_chunk_within(run, 0.05) == 512
    assert conclusions.largest_chunk_within(run, 0.02) is None


def test_the_long_prompt_sentence_says_over_or_within_and_the_chunk_that_keeps_the_gaps():
    over = conclusions.long_prompt_conclusion(long_run(0.9, {256: 0.03, 512: 0.045, 1024: 0.07}), 0.05)
    assert "largest gap in the other requests' streams 900 ms, over the 50 ms target" in over
    assert "Chunk sizes up to C = 512 keep every gap within it (45 ms at C = 512)" in over
    # TTFT at C = 512: 1 + 0.1 * 4 = 1.4 s against 1 s unchunked, +40 %, large
    assert "TTFT at C = 512 is 1400 ms against 1000 ms unchunked (+40%, a **large** cost" in over
    within = conclusions.long_prompt_conclusion(long_run(0.04, {256: 0.08}), 0.05)
    assert "40 ms, within the 50 ms target" in within
    assert "No chunk size tried keeps every gap within it" in within


def test_littles_law_counts_the_queue_only_when_the_batch_is_smaller():
    def sweep(batch):
        s = {"e2e_s": {"mean": 1.5}, "batch": {"mean": batch}}
        return lab.Sweep((4.0, 8.0), ("continuous",), {"continuous": [s, s]}, SLO())
    # 8/s x 1.5 s = 12 requests in the server
    queued = conclusions.littles_law(sweep(9.0), "continuous")
    assert "8/s × the mean end-to-end time 1.50 s = 12.0 requests" in queued
    assert "(-25%, a moderate difference: the batch does not count the requests waiting in the queue)" in queued
    assert "waiting in the queue" not in conclusions.littles_law(sweep(12.0), "continuous")


def capacity(rates, fits=None) -> lab.Capacity:
    deployments = (lab.Deployment("one GPU"), lab.Deployment("2 replicas", replicas=2),
                   lab.Deployment("TP = 2", tp=2), lab.Deployment("TP = 4", tp=4),
                   lab.Deployment("2 replicas at B = 1", replicas=2, policy=ContinuousBatching(max_num_seqs=1)))
    return lab.Capacity(deployments, rates, 0.9, 4.0, fits, None if fits is None else (1, 1, 2, 4, 1))


def test_the_capacity_sentence_finds_each_deployment_by_its_shape_not_its_position():
    cap = capacity((10.0, 21.0, 16.0, 30.0, 0.5))
    # per GPU: 10, 10.5, 8, 7.5, 0.25; the two replicas lead (10.5 vs 10: +5 %, not beyond 5 %)
    text = conclusions.capacity_conclusion(cap, lab.Scenario("llama-2-13b", "h100-sxm"), 0.05)
    assert "Two replicas carry 2.10× one GPU's capacity (more than twice" in text
    assert "Tensor parallelism over two GPUs gives 0.76× the capacity per GPU of two replicas, over four GPUs 0.71×" in text
    reordered = lab.Capacity(tuple(reversed(cap.deployments)), tuple(reversed(cap.rate_per_s)), 0.9, 4.0)
    assert conclusions.capacity_conclusion(reordered, lab.Scenario("llama-2-13b", "h100-sxm"), 0.05).endswith(
        text[text.index("Two replicas carry"):])


def test_the_takeaway_says_why_replicas_at_batch_one_serve_nothing():
    cap = capacity((10.0, 21.0, 16.0, 30.0, 0.0))
    assert "times as many" not in conclusions.capacity_takeaway(cap)
    assert "replicas that do not batch serve none within the SLO." in conclusions.capacity_takeaway(cap)
    cap = capacity((10.0, 21.0, 16.0, 30.0, 0.5))
    # 2 replicas: 21 * 3600 / 8 = 9,450 per dollar; at B = 1: 0.5 * 3600 / 8 = 225; 42 times
    assert "serves 42 times as many SLO-meeting requests per dollar" in conclusions.capacity_takeaway(cap)


def test_the_simulator_error_is_added_to_the_ranking():
    cap = capacity((10.0, 30.0, 16.0, 30.0, 0.5))       # 2 replicas 15/GPU lead one GPU's 10/GPU by 50 %
    err = {"runs": 3, "ratio_min": 0.8, "ratio_max": 1.2, "rel_error": 0.25, "sign_changes": True}
    text = conclusions.simulator_error_note(cap, 0.05, err)
    assert "its 3 recorded runs put the simulated step time at 0.80 to 1.20" in text
    assert "its sign changes from run to run" in text
    assert text.count("**2 replicas") == 2              # ranked first without and with the error
    assert conclusions.simulator_error_note(capacity((0.0,) * 5, (False,) * 5), 0.05, err).startswith(
        "No deployment tried fits")


def test_prefix_sentence_blames_the_decode_reads_only_when_tpot_misses():
    def sweep(tpot_on):
        return lab.PrefixSweep(10_000, (1.0, 2.0), {"off": (0.6, 5.0), "on": (0.05, 0.06)}, {}, {"on": (0.02, tpot_on)},
                               {"off": (0.5, 0.1), "on": (1.0, 0.95)}, {}, {"on": (10_000.0, 10_000.0)}, 10_500.0)
    missing = conclusions.prefix_conclusion(sweep(0.08), 0.05)
    assert "up to **0 requests/s** without caching and **2 requests/s** with it" in missing
    assert "At 2/s, the highest rate tried, the cached run's median TPOT is 80 ms" in missing
    assert "the ITL target, not the TTFT, ends the batch" in missing
    assert "ends the batch" not in conclusions.prefix_conclusion(sweep(0.03), 0.05)

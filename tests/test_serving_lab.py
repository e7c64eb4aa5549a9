"""The serving lab's experiments (inferlab.notebook.lab) and figures (labplots): their bookkeeping
against hand-made inputs, the bisection against a known threshold, and the mechanisms each
experiment is there to show, on small runs."""
import numpy as np
import pytest

from inferlab.claims import statements
from inferlab.serving import SLO, ContinuousBatching, RooflineStepTime
from inferlab.notebook import lab, labplots


def summary(ttft_p99, itl_p99, attainment=1.0):
    return {"ttft_s": {"p99": ttft_p99}, "itl_s": {"p99": itl_p99}, "slo_attainment": attainment}


def test_max_rate_within_is_the_last_rate_of_the_first_unbroken_run():
    # Targets 0.5 s and 0.05 s. Rates 1, 2, 3, 4: 3/s breaks the ITL target (0.06 > 0.05); 4/s meets both
    # again (noise), but the capacity is the last rate before the first miss: 2.
    sweep = lab.Sweep((1.0, 2.0, 3.0, 4.0), ("x",),
                      {"x": [summary(0.1, 0.01), summary(0.2, 0.04), summary(0.3, 0.06), summary(0.3, 0.04)]}, SLO())
    assert sweep.max_rate_within("x") == 2.0
    assert sweep.max_rate_within("x", itl_s=0.07) == 4.0
    assert sweep.max_rate_within("x", ttft_s=0.05) == 0.0  # even 1/s misses a 50 ms TTFT
    np.testing.assert_array_equal(sweep.column("x", "ttft_s", "p99"), [0.1, 0.2, 0.3, 0.3])


def test_capacity_per_gpu_and_per_dollar():
    # 23 requests/s on 1 GPU at $4/GPU-hour: 23 * 3600 / (1 * 4) = 20,700 requests per dollar;
    # 54 requests/s on 2 GPUs: 27 per GPU, 54 * 3600 / (2 * 4) = 24,300; 0.8 on 2: 0.8 * 3600 / 8 = 360.
    cap = lab.Capacity((lab.Deployment("one"), lab.Deployment("tp2", tp=2), lab.Deployment("b1", replicas=2)),
                       (23.0, 54.0, 0.8), 0.9, 4.0)
    assert cap.per_gpu == pytest.approx((23.0, 27.0, 0.4))
    assert cap.requests_per_usd == pytest.approx((20_700.0, 24_300.0, 360.0))
    assert cap.best() == 1


def test_slo_capacity_bisects_to_just_below_the_threshold(monkeypatch):
    # A deployment that meets the SLO exactly below 10.3 requests/s per GPU: doubling from 1 brackets it in
    # [8, 16]; halving the bracket until it is within 5 % of its lower end leaves a rate in (10.3 / 1.05, 10.3].
    monkeypatch.setattr(lab, "attains", lambda scenario, d, rate: 1.0 if rate <= 10.3 * d.gpus else 0.0)
    cap = lab.slo_capacity(None, (lab.Deployment("one"), lab.Deployment("two", replicas=2)), rel_tol=0.05)
    assert 10.3 / 1.05 < cap.rate_per_s[0] <= 10.3
    assert 20.6 / 1.05 < cap.rate_per_s[1] <= 20.6
    # Starting above the threshold: the search halves down to it first.
    high = lab.slo_capacity(None, (lab.Deployment("one"),), start_rate=100.0)
    assert 10.3 / 1.05 < high.rate_per_s[0] <= 10.3
    # A deployment that never meets it: capacity 0.
    monkeypatch.setattr(lab, "attains", lambda scenario, d, rate: 0.0)
    assert lab.slo_capacity(None, (lab.Deployment("none"),)).rate_per_s == (0.0,)


def test_bad_lab_input_is_refused_with_its_name():
    with pytest.raises(ValueError, match="n_requests"):
        lab.Scenario(n_requests=0)
    with pytest.raises(ValueError, match="replicas"):
        lab.Deployment("x", replicas=0)
    with pytest.raises(ValueError, match="attainment"):
        lab.slo_capacity(lab.Scenario(), (lab.Deployment("x"),), attainment=1.5)
    with pytest.raises(ValueError, match="policies must name at least one policy"):
        lab.policy_sweep(lab.Scenario(), (1.0,), {})
    with pytest.raises(ValueError, match="statement id '15.9.9-s1' is not in data/statements.toml"):
        statements.statement_verdicts("15.9.9-s1")


SMALL = lab.Scenario(n_requests=120)


def test_an_unchunked_long_prompt_stalls_the_others_and_chunks_bound_the_stall():
    run = lab.long_prompt(SMALL, 3968, 8.0, chunks=(256, 1024))
    alone = RooflineStepTime(SMALL.model, SMALL.accelerator).prefill_s(3968)
    assert run.prefill_alone_s == pytest.approx(alone)
    # Unchunked, some running sequence waits for the whole prefill step (plus its own decode step).
    assert run.others_max_itl_s["unchunked"] > alone
    # Chunked, no step carries more than C tokens: the largest gap falls, more for the smaller chunk.
    assert run.others_max_itl_s["C=256"] < run.others_max_itl_s["C=1024"] < run.others_max_itl_s["unchunked"]
    # ... and the long request itself waits longer for its first token.
    assert run.long_ttft_s["C=256"] > run.long_ttft_s["unchunked"]
    assert run.labels == ("unchunked", "C=256", "C=1024")


def test_a_cached_system_prompt_cuts_ttft_and_serves_most_prompt_tokens_from_the_cache():
    sweep = lab.prefix_sweep(SMALL, 4000, (0.5,))
    assert sweep.p50_ttft_s["on"][0] < sweep.p50_ttft_s["off"][0] / 5
    assert sweep.cached_tokens_mean["off"] == (0.0,)
    # 4,000 tokens = 250 whole blocks: a hit serves all of them; only requests admitted before the first
    # prefill finished miss, so the mean is close to 4,000.
    assert 0.9 * 4000 <= sweep.cached_tokens_mean["on"][0] <= 4000
    assert sweep.kv_mean_fraction["on"][0] < sweep.kv_mean_fraction["off"][0]


def test_policy_sweep_runs_each_policy_on_the_same_requests():
    sweep = lab.policy_sweep(SMALL, (2.0, 4.0), {"continuous": ContinuousBatching()})
    assert sweep.labels == ("continuous",) and len(sweep.summaries["continuous"]) == 2
    assert [s["requests"] for s in sweep.summaries["continuous"]] == [120, 120]
    # Twice the rate, the same requests: about twice the output tokens per second while the GPU keeps up.
    thr = sweep.column("continuous", "throughput_output_tokens_per_s")
    assert 1.7 < thr[1] / thr[0] < 2.3


def test_lab_figures_draw_one_axes_set_each_and_print_their_points():
    cap = lab.Capacity((lab.Deployment("one"), lab.Deployment("two", replicas=2)), (23.0, 50.0), 0.9, 4.0)
    plot = labplots.capacity_plot(cap)
    assert "20,700" not in plot.table and "2.07e+04" in plot.table  # requests per dollar, .4g
    assert plot.table.splitlines()[0].split()[:2] == ["deployment", "GPUs"]
    run = lab.long_prompt(SMALL, 2000, 4.0, chunks=(512,))
    table = labplots.long_prompt_plot(run).table
    assert table.splitlines()[2].split()[0] == "unchunked" and "C=512" in table


def test_the_levers_of_sections_6_to_8_on_small_runs():
    """Separate pools keep long prefills out of the decode steps; speculation pays at batch 1 and not
    at a compute-bound batch; a priority queue serves the latency-sensitive class first under a queue."""
    from inferlab.notebook import lab_conclusions as conclusions
    sc = lab.Scenario(n_requests=300)
    d = lab.disaggregation(sc, 40.0, replicas=4, long_tokens=3000, long_share=0.2, splits=((1, 3),))
    mix = lab.MIXES[1]
    assert d.p99_itl_s["disaggregated 1:3", mix] < 0.5 * d.p99_itl_s["shared, unchunked", mix]
    # the mean transfer: latency + mean prompt x 819,200 bytes a token / 50e9 bytes/s (InfiniBand NDR)
    w = lab.with_long_prompts(sc.workload(40.0), 3000, 0.2, sc.seed)
    assert d.transfer_s == pytest.approx(19.1e-6 + w.prompt_tokens.mean() * 2 * 40 * 5120 * 2 / 50e9, rel=1e-9)
    sizing = lab.pool_sizing(sc, 40.0, max_replicas=4, workload=w)
    # the fewest replicas: every split of a smaller total misses 90 %, the chosen one meets it
    assert sizing.best is not None and sizing.attainment[sizing.best] >= 0.9
    assert all(a < 0.9 for k, a in sizing.attainment.items() if sum(k) < sum(sizing.best))
    s = lab.speculative_sweep(sc, k=4, acceptance=0.7, batches=(1, 1024), context_tokens=128)
    assert s.speedup[0] > 2 and s.speedup[1] < 1 and s.break_even_batch == 1024
    p = lab.priority_load(sc, 2 * lab.sustainable_rate(sc), high_share=0.2)
    assert p.p99_ttft_s["priority", "high"] < 0.5 * p.p99_ttft_s["FIFO", "high"]
    for text in (conclusions.disaggregation_conclusion(d, sizing), conclusions.speculative_conclusion(s),
                 conclusions.priority_conclusion(p)):
        assert "nan" not in text.lower()

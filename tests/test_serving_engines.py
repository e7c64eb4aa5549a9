"""Serving engines set against the simulator (serving.engines, serving.fitted, policies.TransformersFIFO,
the engine side of study.validate). Hand-derived expectations; no wall-clock thresholds."""
import json

import numpy as np
import pytest

from inferlab.measure.plan import TINY_MODEL
from inferlab.study import validate
from inferlab.study.engines import ENGINES, check_engine
from inferlab.study.fitted import FEATURES, FittedStepTime, step_features
from inferlab.serving.steptime import StepShape
from inferlab.study.checks import SimSetup
from inferlab.serving.policies import ChunkedPrefill, TransformersFIFO
from inferlab.serving.workload import LengthDist, Workload


# -- the registry and bad input ---------------------------------------------------------------------
def test_unknown_engine_is_refused_naming_the_allowed_ones():
    assert ENGINES == ("inferlab", "transformers", "vllm")
    assert check_engine("transformers") == "transformers"
    with pytest.raises(ValueError, match=r"unknown engine 'sglang'; allowed: inferlab, transformers, vllm"):
        check_engine("sglang")
    with pytest.raises(ValueError, match="engine must be one of inferlab, transformers, vllm"):
        check_engine(None)


@pytest.mark.parametrize("argv, match", [
    (["--engine", "sglang"], "--engine"),
    (["--engine", "transformers", "--dtype", "fp16"], "--dtype"),
    (["--engine", "transformers", "--device", "cuda"], "--device"),
    (["--max-batch-tokens", "4"], "--max-batch-tokens"),
    (["--fractions", "0.3,x"], "--fractions"),
    (["--fractions", "-0.3"], "--fractions"),
    (["--requests", "1"], "--requests"),
    (["--step-model", "roofline"], "--step-model"),
    (["--engine", "transformers", "--step-model", "profile"], "--step-model"),
    (["--requests", "20", "--duration", "30"], "--duration"),
])
def test_validate_cli_refuses_bad_engine_options_in_one_line(argv, match, capsys):
    from inferlab import cli
    rc = cli.main(["serving", "validate", "--model", "tiny", *argv])
    err = capsys.readouterr().err
    assert rc == 2 and match in err and len(err.strip().splitlines()) == 1


# -- the scheduler model ----------------------------------------------------------------------------
class OneSecond:
    """Every step takes 1 s: the schedule alone decides the times."""

    def step_time_s(self, step, t_s):
        return 1.0


# Three requests at t = 0: A (5 prompt, 3 output), B (6, 2), C (3, 1); 8 tokens and 2 requests per step.
# transformers' FIFO, by hand:
#   step 1 (0-1 s): A whole (5), B's first 3 (budget 8 spent)        -> A's 1st token at 1
#   step 2 (1-2 s): A decodes (1), B's last 3 (request budget spent) -> A 2nd, B 1st token at 2
#   step 3 (2-3 s): A and B decode (2 requests: C waits)             -> A 3rd (done), B 2nd (done) at 3
#   step 4 (3-4 s): C whole (3)                                      -> C's only token at 4
BURST = Workload(np.zeros(3), np.array([5, 6, 3]), np.array([3, 2, 1]))
HAND_STEPS = [(0, ((5, 0), (3, 0))), (1, ((3, 3),)), (2, ()), (0, ((3, 0),))]  # (decodes, chunks (q, p))


def test_transformers_fifo_schedule_by_hand():
    from inferlab.serving.simulate import simulate
    from inferlab.core.specs import get_accelerator
    pol = TransformersFIFO(token_budget=8, max_num_seqs=2, page_size=16)
    assert (pol.max_batch_tokens, pol.max_requests_per_batch) == (8, 2)
    r = simulate(BURST, TINY_MODEL, get_accelerator("h100-sxm"), pol, kv_blocks=64, block_tokens=16,
                 step_time=OneSecond())
    np.testing.assert_allclose(r.first_token_s, [1.0, 2.0, 4.0])
    np.testing.assert_allclose(r.finish_s, [3.0, 3.0, 4.0])
    assert [list(x) for x in r.itls_s] == [[1.0, 1.0], [1.0], []]
    assert r.traces[0].tokens.tolist() == [8, 4, 2, 3]


def test_transformers_fifo_refuses_bad_settings():
    with pytest.raises(ValueError, match="page_size"):
        TransformersFIFO(token_budget=8, max_num_seqs=2, page_size=0)
    with pytest.raises(ValueError, match="token_budget must be >= max_num_seqs=8"):
        TransformersFIFO(token_budget=4, max_num_seqs=8)
    assert isinstance(TransformersFIFO(), ChunkedPrefill)


def test_the_engine_itself_schedules_the_hand_burst_as_the_policy_does():
    """transformers' own scheduler, live, on the burst above: the same steps (decodes and chunks),
    and greedy decoding of every requested token (never stopped early)."""
    from inferlab.study.engines.transformers_cb import TransformersSettings, run_transformers
    live = run_transformers(BURST, TINY_MODEL, TransformersSettings(max_batch_tokens=8, max_requests_per_batch=2,
                                                                    page_size=16, dtype="fp32", warmup=0))
    got = [(int(n), tuple(ch)) for n, ch in zip(live.steps["n_decode"], live.chunks)]
    assert got == HAND_STEPS
    assert [len(t) for t in live.tokens] == [3, 2, 1]
    r = live.result
    assert np.all(r.first_token_s > 0) and np.all(r.finish_s >= r.first_token_s)
    # A's and B's tokens come out of steps 1-3, C's of step 4: its first token is the last one timed
    assert r.first_token_s[2] == pytest.approx(r.finish_s.max())
    assert live.config["engine_version"] == "5.24.0" and live.config["attn_implementation"] == "sdpa"


class _SlowProbe:
    """A 'probe' that sleeps: it makes every live step last at least `seconds` (it runs inside the
    step's window), so a request can be made to arrive while a step runs."""

    def __init__(self, seconds):
        self.seconds = seconds

    def __call__(self):
        import time
        time.sleep(self.seconds)
        return self.seconds


def test_a_burst_that_arrives_during_a_step_joins_the_very_next_step():
    """A (5 prompt, 4 output) at t = 0; B and C (3 prompt, 1 output each) together at 0.1 s, while
    A's prefill step runs (>= 1 s, the sleeping probe). The simulator admits them at the first step
    that starts after their arrival, so by hand: step 1 A whole; step 2 A decodes, B and C whole;
    steps 3 and 4 A decodes. (Submitted inside manager.pause(), stop 23's adapter, they reached the
    scheduler one step later: step 2 was A's decode alone.)"""
    from inferlab.study.engines.transformers_cb import TransformersSettings, run_transformers
    w = Workload(np.array([0.0, 0.1, 0.1]), np.array([5, 3, 3]), np.array([4, 1, 1]))
    live = run_transformers(w, TINY_MODEL, TransformersSettings(max_batch_tokens=16, max_requests_per_batch=4,
                                                                page_size=16, dtype="fp32", warmup=0),
                            probe=_SlowProbe(1.0))
    got = [(int(n), tuple(ch)) for n, ch in zip(live.steps["n_decode"], live.chunks)]
    assert got == [(0, ((5, 0),)), (1, ((3, 0), (3, 0))), (1, ()), (1, ())]


def test_scaled_step_time_passes_the_step_and_its_start_to_its_base():
    from inferlab.study.hostspeed import ProbeLog, SpeedTrack, SpeedTrackedStepTime
    from inferlab.serving.steptime import ScaledStepTime
    fit = FittedStepTime(np.eye(len(FEATURES))[0] * 0.1)  # every step 0.1 s
    # the host at speed 1 until t = 1 s, then twice as slow (probe 2 ms over a 1 ms reference)
    log = ProbeLog([0.0, 0.5, 1.5, 2.0], [1e-3, 1e-3, 2e-3, 2e-3])
    tracked = SpeedTrackedStepTime(fit, SpeedTrack(log, 1e-3, window_s=0.2, min_samples=1))
    s = ScaledStepTime(tracked, 1.05)
    one = StepShape(1, 10.0, (), 1)
    assert s.step_time_s(one, 0.5) == pytest.approx(0.1 * 1.05)
    assert s.step_time_s(one, 2.0) == pytest.approx(0.1 * 2 * 1.05)
    assert ScaledStepTime(OneSecond(), 0.95).step_time_s(one, 0.0) == pytest.approx(0.95)
    for bad, match in ((0.0, "factor"), (float("nan"), "factor"), (-1.0, "factor")):
        with pytest.raises(ValueError, match=match):
            ScaledStepTime(OneSecond(), bad)
    with pytest.raises(ValueError, match="base must be a step-time model"):
        ScaledStepTime(3, 1.0)


def test_step_sensitivity_by_hand_finds_the_knife_edge():
    """A (5 prompt, 3 output) at 0, B (3, 1) at 1.02 s; steps of 1 s, 8 tokens and 2 requests per step.
    B arrives 0.02 s after step 2 starts at 1.0, so it waits for step 3 (2-3 s): TTFTs [1, 1.98].
    Steps 5 % longer: step 2 starts at 1.05, after B, and takes it: TTFTs [1.05, 2.10 - 1.02 = 1.08].
    Steps 5 % shorter: step 3 runs 1.90-2.85: TTFTs [0.95, 1.83]. Two requests' percentile q is
    a + q (b - a) (numpy's linear): p50 1.49 / 1.065 / 1.39, p99 1.9702 / 1.0797 / 1.8212."""
    from inferlab.serving.metrics import SLO
    from inferlab.core.specs import Precision, get_accelerator
    w = Workload(np.array([0.0, 1.02]), np.array([5, 3]), np.array([3, 1]))
    pol = TransformersFIFO(token_budget=8, max_num_seqs=2, page_size=16)
    setup = SimSetup(TINY_MODEL, get_accelerator("h100-sxm"), pol, Precision("fp32", "fp32", "fp32"), 64, 16, SLO())
    s = validate.step_sensitivity(setup, w, OneSecond())
    assert s["scale"] == 0.05
    np.testing.assert_allclose(s["ttft_s"]["p50"], [1.39 / 1.49 - 1, 1.065 / 1.49 - 1])
    np.testing.assert_allclose(s["ttft_s"]["p99"], [1.8212 / 1.9702 - 1, 1.0797 / 1.9702 - 1])
    assert s["knife_edge"]["ttft_s"] == {"p50": True, "p99": True}  # -28.5 % > 15 %, -45.2 % > 25 %
    # A's ITLs are whole steps: they scale with the step, 5 % each way, inside both bounds
    np.testing.assert_allclose(s["itl_s"]["p50"], [-0.05, 0.05])
    assert s["knife_edge"]["itl_s"] == {"p50": False, "p99": False}
    with pytest.raises(ValueError, match="scale"):
        validate.step_sensitivity(setup, w, OneSecond(), scale=0.9)


def _cmp(errors):
    return {m: {p: {"error": e} for p, e in zip(("p50", "p99"), errors[2 * i:2 * i + 2])}
            for i, m in enumerate(("ttft_s", "itl_s"))}


def test_repeats_markdown_by_hand():
    edge = {"ttft_s": {"p50": False, "p99": True}, "itl_s": {"p50": False, "p99": False}}
    rec = {"bounds": {"p50": 0.15, "p99": 0.25}, "runs": [
        {"fraction": 0.3, "bounded": True, "comparison": _cmp([-0.07, 0.26, 0.0, -0.16]),
         "sensitivity": {"knife_edge": edge}, "bracketed": {"comparison": _cmp([0.05, 0.07, 0.01, -0.05])}, "probe": {}},
        {"fraction": 1.3, "bounded": False, "comparison": _cmp([-0.64, 0.1, 0.0, 0.0]),
         "bracketed": {"comparison": _cmp([0.0, 0.0, 0.0, 0.0])}, "probe": {}}]}
    assert validate.repeats_markdown([rec]).splitlines() == [
        "| run | 0.3x | 1.3x (not bounded) |",
        "|---|---|---|",
        "| 1, probe-tracked (judged) | \u22127 / **+26\u2020** / +0 / \u221216 % | \u221264 / +10 / +0 / +0 % |",
        "| 1, bracketed | +5 / +7 / +1 / \u22125 % \u2713 | +0 / +0 / +0 / +0 % |"]
    for r in rec["runs"]:  # judged on the split prediction, the probe-tracked one beside it
        r.update({"prediction": "split", "tracked": {"comparison": _cmp([0.3, 0.0, 0.0, 0.0])}})
    assert validate.repeats_markdown([rec]).splitlines()[2:] == [
        "| 1, split (judged) | \u22127 / **+26\u2020** / +0 / \u221216 % | \u221264 / +10 / +0 / +0 % |",
        "| 1, probe-tracked | **+30** / +0 / +0 / +0 % | +30 / +0 / +0 / +0 % |",
        "| 1, bracketed | +5 / +7 / +1 / \u22125 % \u2713 | +0 / +0 / +0 / +0 % |"]
    for r in rec["runs"]:  # a record made since a run computes only the judged prediction: its row alone
        del r["bracketed"], r["tracked"]
    assert validate.repeats_markdown([rec]).splitlines()[2:] == [
        "| 1, split (judged) | \u22127 / **+26\u2020** / +0 / \u221216 % | \u221264 / +10 / +0 / +0 % |"]
    assert validate.repeats_markdown([]) == "No probe-tracked record."


def test_readme_table_of_the_transformers_repeats_is_the_records():
    """The serving validation page's (docs/serving-validation.md) table of the recorded transformers
    repeats is exactly what repeats_markdown prints for them: a number typed there that no record holds fails here."""
    from pathlib import Path
    recs = validate.recorded(engine="transformers")
    assert len(recs) >= 3
    readme = (Path(__file__).resolve().parents[1] / "docs" / "serving-validation.md").read_text(encoding="utf-8")
    assert validate.repeats_markdown(recs) in readme


def test_calibration_workload_serves_each_lone_prompt_alone_then_a_burst_by_hand():
    """Lone prompts of 16, 48, 64, 96 and 200 tokens, 4 output tokens each, 2 s apart; the burst of 8
    at 2 (5 + 0.25) = 10.5 s. A prompt distribution capped at 48 caps the lone prompts too."""
    w = validate.calibration_workload(LengthDist("lognormal", 128, 0.5, 16, 384),
                                      LengthDist("lognormal", 32, 0.5, 4, 96), seed=0)
    assert w.arrival_s.tolist() == [0.0, 2.0, 4.0, 6.0, 8.0] + [10.5] * 8
    assert w.prompt_tokens[:5].tolist() == [16, 48, 64, 96, 200] and w.output_tokens[:5].tolist() == [4] * 5
    assert np.all((w.prompt_tokens[5:] >= 16) & (w.prompt_tokens[5:] <= 384))
    small = validate.calibration_workload(LengthDist("lognormal", 24, 0.5, 8, 48),
                                          LengthDist("lognormal", 6, 0.5, 2, 12), seed=0, gap_s=0.3)
    assert small.prompt_tokens[:5].tolist() == [16, 48, 48, 48, 48]
    np.testing.assert_allclose(small.arrival_s, [0.0, 0.3, 0.6, 0.9, 1.2] + [1.575] * 8)
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="gap_s"):
            validate.calibration_workload(LengthDist("lognormal", 24, 0.5, 8, 48),
                                          LengthDist("lognormal", 6, 0.5, 2, 12), seed=0, gap_s=bad)
    with pytest.raises(ValueError, match="calibration_gap_s"):
        validate.validate(model=TINY_MODEL, calibration_gap_s=-1.0, log=None)


def test_split_speed_scales_the_decode_part_by_the_speed_and_the_chunk_part_by_its_root():
    """Costs: 0.1 s per step, 0.01 s per token (FEATURES 'step' and 'tokens'), nothing else. A step
    of 2 decodes and a chunk of 30: full 0.1 + 0.32 = 0.42 s, its decodes alone 0.1 + 0.02 = 0.12 s,
    the chunk's part 0.30 s. On a host twice as slow (probe 2 ms over a 1 ms reference):
    0.12 x 2 + 0.30 x 2 ** 0.5 = 0.6643 s; a decode-only step 0.12 x 2; a chunk alone (0.4 s) 0.4 x 2 ** 0.5."""
    from inferlab.study.hostspeed import CHUNK_SPEED_EXPONENT, ProbeLog, SpeedTrack, SplitSpeedStepTime
    coef = np.zeros(len(FEATURES))
    coef[0], coef[1] = 0.1, 0.01
    track = SpeedTrack(ProbeLog([0.0] * 8, [2e-3] * 8), 1e-3)
    m = SplitSpeedStepTime(FittedStepTime(coef), track)
    mixed = StepShape(2, 20.0, ((30, 0),), 3)
    assert CHUNK_SPEED_EXPONENT == 0.5
    assert m.parts(mixed, 1.0) == pytest.approx((0.12, 0.30))
    assert m.step_time_s(mixed, 1.0) == pytest.approx(0.24 + 0.30 * 2 ** 0.5)
    assert m.step_time_s(StepShape(2, 20.0, (), 2), 1.0) == pytest.approx(0.24)
    assert m.step_time_s(StepShape(0, 0.0, ((30, 0),), 1), 1.0) == pytest.approx(0.4 * 2 ** 0.5)
    assert SplitSpeedStepTime(FittedStepTime(coef), track, 1.0).step_time_s(mixed, 1.0) == \
        pytest.approx(0.84)  # exponent 1: every part x speed, as SpeedTrackedStepTime
    with pytest.raises(ValueError, match="t_s"):
        m.step_time_s(mixed, None)
    for bad in (-0.1, 1.5, float("nan"), True, "0.5"):
        with pytest.raises(ValueError, match="chunk_exponent"):
            SplitSpeedStepTime(FittedStepTime(coef), track, bad)
    with pytest.raises(ValueError, match="track must be a SpeedTrack"):
        SplitSpeedStepTime(FittedStepTime(coef), 1.0)


def test_repredict_reproduces_the_recorded_predictions_from_the_record_alone():
    """Re-simulated from the record (its workload's config and seed, each run's fit and probe log),
    the probe-tracked and the bracketed predictions come out exactly as recorded: what repredict
    adds (another step time) is judged on the very runs and workloads the record holds."""
    from pathlib import Path

    from inferlab.measure.plan import CPU_MODEL
    from inferlab.study.hostspeed import SpeedTrackedStepTime, SplitSpeedStepTime
    dev = Path(__file__).resolve().parents[1] / "data" / "measurements" / "serving" / "development"
    old = validate.recorded(dev, engine="transformers")[0]  # stop 23: probe-tracked on the raw fits
    new = validate.recorded(engine="transformers")[-1]      # since: on the probe-normalized fits, split beside
    cases = [(old, "step_model", "comparison", lambda f, t: SpeedTrackedStepTime(f, t)),
             (old, "step_model", "bracketed", lambda f, t: f),
             (new, "step_model_normalized", "comparison", lambda f, t: SpeedTrackedStepTime(f, t)),
             (new, "step_model_normalized", "split", lambda f, t: SplitSpeedStepTime(f, t)),
             (new, "step_model", "bracketed", lambda f, t: f)]
    for rec, fit_key, where, make in cases:
        got = validate.repredict(rec, CPU_MODEL, make, fit_key)
        assert len(got) == len(rec["runs"]) >= 3
        for r, g in zip(rec["runs"], got):
            want = r["comparison"] if where == "comparison" else r[where]["comparison"]
            for m, p, _ in validate.ERROR_KEYS:
                assert g["comparison"][m][p]["error"] == pytest.approx(want[m][p]["error"], abs=1e-12)
    # the normalized fits recomputed from a record's calibrations are the ones it recorded. A coefficient that is
    # zero up to rounding (1e-17 on one BLAS, 3e-16 on another) has no relative precision: the absolute
    # tolerance is scaled to the fit's largest coefficient, so any BLAS passes and a wrong fit still fails.
    for r, fit in zip(new["runs"], validate.normalized_fits(new)):
        want = np.asarray(r["step_model_normalized"]["coefficients"], dtype=float)
        np.testing.assert_allclose(fit.coefficients, want, rtol=1e-9, atol=1e-9 * np.abs(want).max())
    with pytest.raises(ValueError, match="probe-tracked transformers"):
        validate.repredict({"config": {}, "runs": [], "summary": {"engine": "inferlab"}}, CPU_MODEL, lambda f, t: f)
    with pytest.raises(ValueError, match=r"model must be the record's \(cpu-0.5b\); got tiny"):
        validate.repredict(new, TINY_MODEL, lambda f, t: f)


def test_the_predictions_a_run_no_longer_makes_are_recomputed_from_its_record():
    """A run computes only the judged prediction; the three recorded repeats, made when a run computed all of
    them, hold split, bracketed and first-calibration-only beside it. validate.alternatives re-simulates each
    from what every record keeps and gets the recorded errors exactly, and the counts docs/serving-validation.md
    gives for them (benchmarks/serving_alternatives.py prints them) are the recomputed ones."""
    from pathlib import Path

    from inferlab.measure.plan import CPU_MODEL
    recs = validate.recorded(engine="transformers")[-3:]
    recorded_as = {"probe-tracked": lambda r: r["comparison"], "split": lambda r: r["split"]["comparison"],
                   "bracketed": lambda r: r["bracketed"]["comparison"],
                   "first-calibration-only": lambda r: r["first_calibration_only"]}
    for rec in recs:
        got = validate.alternatives(rec, CPU_MODEL)
        assert set(got) == set(recorded_as) == {"probe-tracked", *validate.ALTERNATIVES}
        for name, runs in got.items():
            assert len(runs) == len(rec["runs"]) == 4
            for r, g in zip(rec["runs"], runs):
                want = recorded_as[name](r)
                for m, p, _ in validate.ERROR_KEYS:
                    assert g["comparison"][m][p]["error"] == pytest.approx(want[m][p]["error"], abs=1e-12)
    c = validate.alternative_counts(recs, CPU_MODEL)
    page = " ".join((Path(__file__).resolve().parents[1] / "docs" / "serving-validation.md").read_text(
        encoding="utf-8").split())
    assert f"met**: {c['probe-tracked']} of {c['pairs']} (repeat, rate) pairs" in page
    assert f"`split` {c['split']} of {c['pairs']}, `bracketed` {c['bracketed']} of {c['pairs']}" in page


def test_normalized_durations_refer_each_step_to_the_calibrations_median_probe_by_hand():
    """8 steps probed at 1 ms (t = 0-0.7 s), 8 at 3 ms (t = 100-100.7 s): the median probe is 2 ms, the
    running median (4 s window) 1 ms in the first group and 3 ms in the second, so the host ran at
    speed 0.5 then 1.5 of the median: 1 s steps become 2 s and 2/3 s."""
    from inferlab.study.hostspeed import ProbeLog, normalized_durations
    t = [0.1 * i for i in range(8)] + [100 + 0.1 * i for i in range(8)]
    log = ProbeLog(t, [1e-3] * 8 + [3e-3] * 8)
    np.testing.assert_allclose(normalized_durations([1.0] * 16, log), [2.0] * 8 + [2 / 3] * 8)
    with pytest.raises(ValueError, match="one probe per step"):
        normalized_durations([1.0] * 15, log)
    with pytest.raises(ValueError, match="durations_s"):
        normalized_durations([1.0] * 15 + [0.0], log)


def test_readme_counts_of_the_development_records_are_recomputed_from_them():
    """How the judged probe prediction was chosen (docs/serving-validation.md): the bounded pairs of the development
    records (data/measurements/serving/development) within both bounds per prediction, re-simulated
    from the records; a count typed into that page that the records do not give fails here."""
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    recs = validate.recorded(root / "data" / "measurements" / "serving" / "development", engine="transformers")
    assert len(recs) == 5
    from inferlab.measure.plan import CPU_MODEL
    c = validate.prediction_counts(recs, CPU_MODEL)
    readme = " ".join((root / "docs" / "serving-validation.md").read_text(encoding="utf-8").split())
    assert (f"within both bounds {c['probe-tracked (raw fits)']} of {c['pairs']} probe-tracked on raw fits, "
            f"{c['probe-tracked']} probe-tracked on normalized fits, {c['split']} split on normalized fits") in readme
    assert c["pairs"] == 15 and c["probe-tracked"] >= c["probe-tracked (raw fits)"]


# -- the fitted step time ---------------------------------------------------------------------------
def test_step_shape_totals_by_hand():
    # two decodes over 12 keys in all, a chunk of 4 new tokens after 3 cached: 6 tokens fed by 3 sequences;
    # pairs: 12 (one query per decode key) + 4 x 3 + 4 x 5 / 2 = 34; keys read: 12 + 3 + 4 = 19
    s = StepShape(2, 12.0, ((4, 3),), 3)
    assert (s.tokens, s.sequences, s.attn_pairs, s.attn_kv_tokens) == (6, 3, 34.0, 19.0)
    assert StepShape(0, 0.0, ((5, 0), (5, 0)), 2).attn_pairs == 30.0  # two prompts of 5: 15 pairs each


def test_step_features_by_hand():
    # two decodes after 5 cached keys each (decode_kv_tokens = 6 + 6), a chunk of 4 after 3 cached:
    # T = 6 tokens, K = 5 + 5 + 3 = 13 keys read, 3 requests, 6 (6 + 13) = 114 query-key pairs
    f = step_features(StepShape(2, 12.0, ((4, 3),), 3))
    assert dict(zip(FEATURES, f.tolist())) == {"step": 1, "tokens": 6, "tokens_over_16": 0, "tokens_over_64": 0,
                                               "requests": 3, "cached_keys_read": 13, "attention_pairs": 114,
                                               "sampled": 3}
    assert step_features(StepShape(0, 0.0, ((100, 0),), 1))[2:4].tolist() == [84, 36]


def _steps(rng, n=60):
    out = []
    for _ in range(n):
        b = int(rng.integers(0, 8))
        ch = ((int(rng.integers(1, 200)), int(rng.integers(0, 100))),) if b == 0 or rng.random() < 0.5 else ()
        out.append(StepShape(b, float(b * int(rng.integers(1, 300))), ch, b + len(ch) - int(rng.random() < 0.3)))
    return out


def test_fit_recovers_known_costs_and_drops_a_negative_one():
    rng = np.random.default_rng(3)
    steps = _steps(rng)
    true = np.array([0.1, 4e-3, 2e-3, -1e-3, 1e-2, 1e-4, 2e-7, 3e-3])
    y = np.array([true @ step_features(s) for s in steps])
    m = FittedStepTime.fit(steps, y)
    np.testing.assert_allclose(m.coefficients, true, rtol=1e-6, atol=1e-12)
    assert m.fit_stats["median_abs"] < 1e-9
    # a per-request saving cannot be a cost: data made with requests at -5 ms fit it at 0, not below
    y_neg = np.array([(true + np.eye(8)[4] * -0.015) @ step_features(s) for s in steps])
    assert FittedStepTime.fit(steps, y_neg).coefficients[4] == 0.0
    back = FittedStepTime.from_dict(json.loads(json.dumps(m.to_dict())))
    assert back.step_time_s(steps[0], 0.0) == pytest.approx(m.step_time_s(steps[0], 0.0))


def test_fit_refuses_bad_input():
    rng = np.random.default_rng(0)
    steps = _steps(rng, 10)
    with pytest.raises(ValueError, match="at least 24 timed steps; got 10"):
        FittedStepTime.fit(steps, np.ones(10))
    with pytest.raises(ValueError, match="as long"):
        FittedStepTime.fit(steps, np.ones(9))
    steps = _steps(rng, 30)
    with pytest.raises(ValueError, match="positive finite"):
        FittedStepTime.fit(steps, np.r_[np.ones(29), np.nan])
    with pytest.raises(ValueError, match="8 finite numbers"):
        FittedStepTime([1.0, 2.0])
    assert FittedStepTime(np.zeros(8), floor_s=0.05).step_time_s(StepShape(1, 10.0, (), 1), 0.0) == 0.05  # never below the floor


# -- the record's summary and the engines side by side -------------------------------------------------
def _run(fraction, errors, live=(1.0, 2.0, 0.1, 0.2), requests=20):
    cmp = {}
    for (m, p, _), e, lv in zip(validate.ERROR_KEYS, errors, live):
        cmp.setdefault(m, {})[p] = {"error": e, "live_s": lv}
    return {"rate_per_s": fraction * 2, "load": "x", "fraction": fraction, "bounded": fraction <= 1,
            "requests": requests, "comparison": cmp, "step_time_error": {"median_ratio": 1.0, "median_abs": 0.0}}


def test_rates_summary_by_hand():
    runs = [_run(0.3, (0.1, -0.2, 0.05, 0.3), requests=7), _run(1.3, (-0.5, 0.4, 0.0, 0.1))]
    assert validate.rates_summary(runs) == [
        {"fraction": 0.3, "bounded": True, "requests": 7, "ttft_p50_error": 0.1, "ttft_p99_error": -0.2,
         "itl_p50_error": 0.05, "itl_p99_error": 0.3},
        {"fraction": 1.3, "bounded": False, "requests": 20, "ttft_p50_error": -0.5, "ttft_p99_error": 0.4,
         "itl_p50_error": 0.0, "itl_p99_error": 0.1}]
    rec = {"runs": runs, "bounds": {"p50": 0.15, "p99": 0.25}}
    # ITL p99 +30 % misses at 0.3x; the overloaded rate's misses are reported, not counted
    assert [(m[2], m[3]) for m in validate.misses(rec)] == [("ITL", "p99")]


def _rec(engine, created, runs):
    return {"schema": "inferlab.serving.validate/1", "created": created, "runs": runs,
            "bounds": {"p50": 0.15, "p99": 0.25},
            "summary": {"engine": engine, "engine_version": "v" + engine, "rates": validate.rates_summary(runs)}}


def test_engines_summary_spread_and_recorded_filter_by_hand(tmp_path):
    # two repeats of transformers at 0.3x: live TTFT p50 1.0 s then 1.2 s (spread 0.2 / 1.1), errors +10 %, -5 %
    a = _rec("transformers", "2026-12-01T22:00:00+00:00", [_run(0.3, (0.1, 0.0, 0.0, 0.0))])
    b = _rec("transformers", "2026-12-01T22:10:00+00:00",
             [_run(0.3, (-0.05, 0.3, 0.0, 0.0), live=(1.2, 2.0, 0.1, 0.2))])
    c = _rec("inferlab", "2026-12-01T22:05:00+00:00", [_run(0.3, (0.0, 0.0, 0.0, 0.0))])
    d = {**_rec("inferlab", "2026-12-02T01:00:00+00:00", [_run(0.3, (0.2, 0.0, 0.0, 0.0))]),
         "profile": {"kind": "inferlab-fitted"}}  # our loop on a fitted step time: its own row
    # the first transformers repeat's replay: 9 of 10 steps matched, worst replayed error -2 %
    a["runs"][0]["replay"] = {"matched": 9, "steps": 10, "comparison": {
        m: {p: {"error": e} for p, e in zip(("p50", "p99"), es)} for m, es in
        (("ttft_s", (0.01, -0.02)), ("itl_s", (0.0, 0.005)))}}
    # the second repeat was bracketed: its calibrations moved 30 %, and with the first calibration alone
    # its errors would have been TTFT p50 -10 %, p99 +20 %, ITL p50 0, p99 +24 %: within both bounds
    b["summary"]["calibration"] = {"drift": 0.3}
    # both recorded their sensitivity: the second's TTFT p99 (its miss) is knife-edged, nothing of the first
    edge = {m: {"p50": False, "p99": False} for m in ("ttft_s", "itl_s")}
    a["runs"][0]["sensitivity"] = {"knife_edge": edge}
    b["runs"][0]["sensitivity"] = {"knife_edge": {**edge, "ttft_s": {"p50": False, "p99": True}}}
    # a third, later repeat without a sensitivity (as records made before it): it must not shift the
    # alignment of the others' knife-edges with their errors
    e = _rec("transformers", "2026-12-01T22:20:00+00:00", [_run(0.3, (0.0, 0.0, 0.0, 0.0))])
    # its brackets ran at speeds 1.0 and 1.3, its live run at 1.4: outside them
    b["calibrations"] = [{"speed": 1.0}, {"speed": 1.3}]
    b["runs"][0].update({"calibrations": [0, 1], "live_speed": 1.4})
    b["runs"][0]["first_calibration_only"] = {m: {p: {"error": e} for p, e in zip(("p50", "p99"), es)} for m, es in
                                              (("ttft_s", (-0.1, 0.2)), ("itl_s", (0.0, 0.24)))}
    s = validate.engines_summary([a, b, c, d])
    assert s["inferlab (fitted step time)"]["fractions"][0.3]["error"]["ttft_p50"] == [0.2]
    t = s["transformers"]["fractions"][0.3]
    assert s["transformers"]["drift"] == [0.3] and s["inferlab"]["drift"] == []
    assert t["within_first_calibration"] == [True] and t["requests"] == [20, 20] and t["live_between"] == [False]
    assert s["transformers"]["repeats"] == 2 and s["inferlab"]["repeats"] == 1
    assert t["error"]["ttft_p50"] == [0.1, -0.05]
    assert t["live_spread"]["ttft_p50"] == pytest.approx(0.2 / 1.1)
    assert t["live_spread"]["itl_p99"] == 0.0
    assert t["within"] == [True, False]  # TTFT p99 +30 % in the second repeat
    assert "transformers vtransformers" in validate.engines_table(s)
    words = validate.engines_conclusion(s)
    # 1 of 2 pairs within; worst TTFT p99 +30 %; every error but that one within the live spread
    assert ("**transformers vtransformers**: 2 recorded repeats; 1 of 2 (repeat, rate) pairs at 0.30x capacity "
            "within both bounds; the worst error +30% (TTFT p99 at 0.30x); 7 of 8 errors no larger") in words
    assert ("step for step in 0 of 1 runs (9 of 10 steps), with latency errors of at most 2.0%. Its calibrations, "
            "one before and one after each rate, moved by 30% within a repeat (slowest over fastest - 1); "
            "had the first calibration alone set the step time, 1 of 1 pairs would have been within both bounds. "
            "The live run's own speed (on the first calibration's fit) lay between its two brackets' speeds in 0 "
            "of 1 bounded runs") in words
    assert "Each TTFT p99 is taken over 20 requests: it lies between the two slowest" in words
    assert t["knife_edge"] == [[], ["ttft_p99"]]
    later = validate.engines_summary([a, b, e])  # the repeat without a sensitivity last
    assert later["transformers"]["fractions"][0.3]["knife_edge"] == [[], ["ttft_p99"], None]
    assert ("In the 2 (repeat, rate) pairs that recorded it, a uniform 5% step-time error would move 1 of 8 "
            "simulated percentiles past their bound (knife-edged); 1 of 1 misses among them at such a "
            "percentile.") in validate.engines_conclusion(later)
    assert ("In the 2 (repeat, rate) pairs that recorded it, a uniform 5% step-time error would move 1 of 8 "
            "simulated percentiles past their bound (knife-edged); 1 of 1 misses among them at such a "
            "percentile.") in words
    assert " ".join(validate.engines_table(s).split("\n")[2].split()[:4]) == "transformers vtransformers 0.30x 20"
    assert s["transformers"]["fractions"][0.3]["replay"] == [(9, 10, 0.02)]
    old = {"schema": "inferlab.serving.validate/1", "created": "2026-11-30T12:59:03+00:00", "runs": []}
    for i, r in enumerate((a, b, c, old, d)):
        (tmp_path / f"{i}.json").write_text(json.dumps(r))
    assert [r["created"] for r in validate.recorded(tmp_path)] == [old["created"], c["created"], d["created"]]
    assert [r["created"] for r in validate.recorded(tmp_path, step_model="profile")] == [old["created"], c["created"]]
    assert [r["created"] for r in validate.recorded(tmp_path, step_model="fitted")] == [d["created"]]
    assert len(validate.recorded(tmp_path, engine="transformers")) == 2
    assert len(validate.recorded(tmp_path, engine=None)) == 5
    with pytest.raises(ValueError, match="step_model must be one of profile, fitted; got 'x'"):
        validate.recorded(tmp_path, step_model="x")
    with pytest.raises(ValueError, match="allowed: inferlab, transformers, vllm"):
        validate.recorded(tmp_path, engine="sglang")
    with pytest.raises(ValueError, match="positive finite"):
        validate.live_spread([])


# -- end to end -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("engine", ["transformers", "inferlab"])
def test_bracketed_validation_end_to_end_on_the_tiny_model(engine):
    """Calibration, live run and simulation of a handful of requests, the step time fitted to
    calibrations of the engine (transformers', or our loop with step_model='fitted'): the record
    names the engine and its version, both served every request with its token count, and the
    rate was predicted from the mean of the fits just before and after it."""
    rec = validate.validate(model=TINY_MODEL, dtype="fp32", engine=engine, rates=[20.0], step_model="fitted",
                            requests_per_rate=4, max_num_seqs=4, max_len=96, max_batch_tokens=32,
                            calibration_gap_s=0.3, prompt=LengthDist("lognormal", 24, 0.5, 8, 48),
                            output=LengthDist("lognormal", 6, 0.5, 2, 12), log=lambda m: None)
    run = rec["runs"][0]
    assert run["live"]["completed"] == run["simulated"]["completed"] == run["requests"] > 0
    assert validate.all_served(rec)
    assert rec["summary"]["engine"] == engine
    keys = ["fraction", "bounded", "requests", "ttft_p50_error", "ttft_p99_error", "itl_p50_error", "itl_p99_error"]
    if engine == "transformers":  # the judged probe prediction, and no other (validate.alternatives recomputes them)
        keys += ["prediction"]
    assert not {"bracketed", "split", "tracked", "first_calibration_only"} & set(run)
    assert [sorted(r) for r in rec["summary"]["rates"]] == [sorted(keys)]
    assert rec["summary"]["rates"][0]["ttft_p50_error"] == run["comparison"]["ttft_s"]["p50"]["error"]
    assert rec["profile"]["kind"] == f"{engine}-fitted" and validate.record_step_model(rec) == "fitted"
    if engine == "transformers":
        assert rec["summary"]["engine_version"] == "5.24.0" and rec["config"]["policy"] == "transformers-fifo"
    assert run["step_time_error"]["n"] > 0
    sens = run["sensitivity"]  # the prediction's own step time x 0.95 and x 1.05, simulated
    assert sens["scale"] == validate.STEP_SENSITIVITY and len(sens["ttft_s"]["p99"]) == 2
    assert "step shorter / longer" not in validate.table(rec) and "5% shorter / longer" in validate.table(rec)
    assert run["requests"] == rec["summary"]["rates"][0]["requests"] == 4
    # one rate, bracketed: a calibration before it and one after; its step time the mean of both fits
    cals = rec["calibrations"]
    assert [c["index"] for c in cals] == [0, 1] and run["calibrations"] == [0, 1]
    assert cals[0]["started_s"] < cals[1]["started_s"]
    np.testing.assert_allclose(run["step_model"]["coefficients"],
                               (np.array(cals[0]["coefficients"]) + np.array(cals[1]["coefficients"])) / 2)
    assert rec["profile"]["coefficients"] == cals[0]["coefficients"]  # the capacity: the first calibration's
    assert len(cals[1]["step_log"]["step_s"]) == cals[1]["fit"]["n"]
    speeds = rec["summary"]["calibration"]["speeds"]
    assert rec["summary"]["calibration"]["drift"] == pytest.approx(max(speeds) / min(speeds) - 1)
    assert run["live_speed"] > 0
    assert "one before and one after each rate" in validate.conclusion(rec)
    if engine == "transformers":  # the probe: once per step, its cost the sum of its samples over the steps'
        pr = run["probe"]
        assert run["prediction"] == "probe-tracked" and len(pr["probe_s"]) == len(run["step_log"]["step_s"])
        # what the run judged, re-simulated from the record alone, comes out exactly; the alternatives beside it
        again = validate.alternatives(rec, TINY_MODEL)
        assert set(again) == {"probe-tracked", *validate.ALTERNATIVES}
        for m, p, _ in validate.ERROR_KEYS:
            assert again["probe-tracked"][0]["comparison"][m][p]["error"] == run["comparison"][m][p]["error"]
        # the probe predictions step on the mean of the brackets' probe-normalized fits
        np.testing.assert_allclose(run["step_model_normalized"]["coefficients"], (
            np.array(cals[0]["fit_normalized"]["coefficients"]) + np.array(cals[1]["fit_normalized"]["coefficients"])) / 2)
        assert pr["share"] == pytest.approx(sum(pr["probe_s"]) / sum(run["step_log"]["step_s"]))
        cal_p = sum(sum(c["probe"]["probe_s"]) for c in cals)
        cal_s = sum(sum(c["step_log"]["step_s"]) for c in cals)
        assert rec["summary"]["probe"]["share"] == pytest.approx(
            (cal_p + sum(pr["probe_s"])) / (cal_s + sum(run["step_log"]["step_s"])))
        assert cals[0]["probe"]["ratio"] == 1.0
        ref = (np.median(cals[0]["probe"]["probe_s"]) + np.median(cals[1]["probe"]["probe_s"])) / 2
        assert pr["speed_track"]["reference_s"] == pytest.approx(ref)
    else:
        assert "probe" not in run and "bracketed" not in run
    json.dumps(rec)


def test_validate_refuses_a_step_model_the_engine_cannot_take():
    with pytest.raises(ValueError, match="step_model must be one of profile, fitted; got 'roofline'"):
        validate.validate(model=TINY_MODEL, step_model="roofline", log=None)
    with pytest.raises(ValueError, match="engine 'transformers' steps on a fitted step time only"):
        validate.validate(model=TINY_MODEL, engine="transformers", step_model="profile", log=None)


class _FakeLive:
    """A live run's step log: the hand burst's four steps with chosen durations."""

    def __init__(self, durations, n=4):
        kv = [0.0, 6.0, 14.0, 0.0]  # A decodes after 5 cached (5 + 1); then A and B after 6 each (7 + 7)
        self.steps = {"n_decode": np.array([s[0] for s in HAND_STEPS][:n]), "decode_kv_tokens": np.array(kv[:n]),
                      "logits": np.array([1, 2, 2, 1][:n]), "step_s": np.array(durations[:n])}
        self.chunks = tuple(s[1] for s in HAND_STEPS)[:n]


class _Fallback:
    def step_time_s(self, step, t_s):
        return 1.0


def test_replay_times_each_simulated_step_as_the_live_step_of_the_same_work():
    from inferlab.study.fitted import ReplayStepTime
    from inferlab.serving.simulate import simulate
    from inferlab.core.specs import get_accelerator
    pol = TransformersFIFO(token_budget=8, max_num_seqs=2)
    acc = get_accelerator("h100-sxm")
    rp = ReplayStepTime(_FakeLive([2.0, 3.0, 1.0, 0.5]), _Fallback())
    r = simulate(BURST, TINY_MODEL, acc, pol, kv_blocks=64, block_tokens=16, step_time=rp)
    # steps end at 2, 5, 6, 6.5: A's first token at 2, B's at 5, both done at 6, C at 6.5
    np.testing.assert_allclose(r.first_token_s, [2.0, 5.0, 6.5])
    np.testing.assert_allclose(r.finish_s, [6.0, 6.0, 6.5])
    assert (rp.matched, rp.unmatched) == (4, 0)
    # the live log lacks the last step: it falls back (1 s) and counts as a scheduling difference
    rp = ReplayStepTime(_FakeLive([2.0, 3.0, 1.0, 0.5], n=3), _Fallback())
    r = simulate(BURST, TINY_MODEL, acc, pol, kv_blocks=64, block_tokens=16, step_time=rp)
    assert r.first_token_s[2] == 7.0 and (rp.matched, rp.unmatched) == (3, 1)


# -- calibrations bracketing each rate (serving.bracketing) ----------------------------------------------
def test_each_rate_is_bracketed_by_the_calibrations_just_before_and_after_it():
    from inferlab.study.bracketing import brackets_of, plan
    # three rates: C0 R0 C1 R1 C2 R2 C3; rate 1 sits between C1 and C2, which it shares with rates 0 and 2
    assert plan(3) == [("calibrate", 0), ("serve", 0), ("calibrate", 1), ("serve", 1), ("calibrate", 2),
                       ("serve", 2), ("calibrate", 3)]
    assert [brackets_of(k, 3) for k in range(3)] == [(0, 1), (1, 2), (2, 3)]
    assert plan(1) == [("calibrate", 0), ("serve", 0), ("calibrate", 1)]


def test_two_brackets_combine_as_the_mean_of_their_fits_not_a_pooled_fit():
    from inferlab.study.bracketing import mean_fit
    steps = _steps(np.random.default_rng(5), 40)
    true = np.array([0.1, 4e-3, 2e-3, -1e-3, 1e-2, 1e-4, 2e-7, 3e-3])
    y = np.array([true @ step_features(s) for s in steps])
    before, after = FittedStepTime.fit(steps, y), FittedStepTime.fit(steps, 2 * y)  # the host halves its speed
    m = mean_fit([before, after])
    np.testing.assert_allclose(m.coefficients, 1.5 * true, rtol=1e-6, atol=1e-12)
    assert m.floor_s == pytest.approx(1.5 * y.min()) and m.fit_stats["mean_of"] == 2
    assert m.step_time_s(steps[0], 0.0) == pytest.approx(1.5 * y[0])
    # why not pooled: weighing each step by 1 / its duration, one fit over both minimises
    # (a - 1)^2 + (a / 2 - 1)^2 per step, at a = 1.2: pulled toward the faster bracket
    pooled = FittedStepTime.fit(steps + steps, np.r_[y, 2 * y])
    np.testing.assert_allclose(pooled.coefficients, 1.2 * true, rtol=1e-6, atol=1e-12)


def test_speed_and_drift_by_hand():
    from inferlab.study.bracketing import drift, speed
    ref = FittedStepTime([0.0, 0.01, 0, 0, 0, 0, 0, 0])  # 10 ms per token
    steps = [StepShape(1, 10.0, (), 1), StepShape(2, 20.0, (), 2), StepShape(0, 0.0, ((10, 0),), 1)]  # 1, 2 and 10 tokens: 10, 20, 100 ms
    # measured 1.0x, 1.1x and 1.5x the reference: the median ratio is 1.1
    assert speed(ref, steps, [0.010, 0.022, 0.150]) == pytest.approx(1.1)
    # speeds 1.0, 1.3, 0.8: the slowest calibration ran 1.3 / 0.8 - 1 = 62.5 % longer than the fastest
    assert drift([1.0, 1.3, 0.8]) == pytest.approx(0.625)
    assert drift([1.2]) == 0.0
    cals = [{"speed": 1.0}, {"speed": 1.3}, {"speed": 0.8}]
    assert validate.calibration_drift(cals) == pytest.approx(0.625)


@pytest.mark.parametrize("call, match", [
    (lambda b: b.plan(0), "n_rates must be an integer >= 1; got 0"),
    (lambda b: b.brackets_of(3, 3), r"rate_index must be an integer in 0..2; got 3"),
    (lambda b: b.brackets_of(-1, 3), r"rate_index must be an integer in 0..2; got -1"),
    (lambda b: b.brackets_of(True, 3), "rate_index must be an integer"),
    (lambda b: b.mean_fit([]), "fits must be one or more FittedStepTime"),
    (lambda b: b.mean_fit([0.1]), "fits must be one or more FittedStepTime"),
    (lambda b: b.speed(FittedStepTime(np.ones(8)), [StepShape(1, 1.0, (), 1)], [0.1, 0.2]), "as long"),
    (lambda b: b.speed(FittedStepTime(np.ones(8)), [StepShape(1, 1.0, (), 1)], [0.0]), "positive finite"),
    (lambda b: b.speed(FittedStepTime(np.zeros(8)), [StepShape(1, 1.0, (), 1)], [0.1]), "predicts a step of no time"),
    (lambda b: b.drift([]), "speeds must be one or more positive finite"),
    (lambda b: b.drift([1.0, 0.0]), "speeds must be one or more positive finite"),
    (lambda b: b.drift([1.0, float("nan")]), "speeds must be one or more positive finite"),
])
def test_bracketing_refuses_bad_input(call, match):
    from inferlab.study import bracketing
    with pytest.raises(ValueError, match=match):
        call(bracketing)


def test_validate_takes_a_request_count_or_a_duration_not_both():
    with pytest.raises(ValueError, match=r"give one of duration_s \(30.0\) and requests_per_rate \(20\)"):
        validate.validate(model=TINY_MODEL, duration_s=30.0, requests_per_rate=20, log=None)
    with pytest.raises(ValueError, match="requests_per_rate must be an integer >= 2 and <= 10000; got 1"):
        validate.validate(model=TINY_MODEL, requests_per_rate=1, log=None)


# -- the in-run host-speed probe (serving.hostspeed) ------------------------------------------------------
def _log(times, probes):
    from inferlab.study.hostspeed import ProbeLog
    return ProbeLog(np.asarray(times, dtype=float), np.asarray(probes, dtype=float))


def test_speed_track_is_a_centred_running_median_over_the_reference_by_hand():
    """Probes 1 s apart: 1 ms up to t = 4, 2 ms from t = 5, a 10 ms outlier at t = 2; reference 1 ms,
    window 2 s (t - 1 .. t + 1), at least 3 samples."""
    from inferlab.study.hostspeed import SpeedTrack
    probes = [1e-3, 1e-3, 10e-3, 1e-3, 1e-3, 2e-3, 2e-3, 2e-3, 2e-3, 2e-3]
    tr = SpeedTrack(_log(np.arange(10.0), probes), reference_s=1e-3, window_s=2.0, min_samples=3)
    assert tr.speed_at(2.0) == 1.0   # {1, 10, 1} ms: the median, not the mean (4 ms)
    assert tr.speed_at(4.0) == 1.0   # {1, 1, 2}
    assert tr.speed_at(5.0) == 2.0   # {1, 2, 2}: centred (a trailing window {1, 1, 2} reads 1.0)
    # at least 2 samples: still {1, 2, 2} (a window cut at t, {1, 2}, reads 1.5)
    assert SpeedTrack(tr.log, 1e-3, 2.0, 2).speed_at(5.0) == 2.0
    assert tr.speed_at(8.0) == 2.0
    # beyond the log: the 3 samples nearest in time (t = 9, 8, 7), not an empty median
    assert tr.speed_at(20.0) == 2.0 and tr.speed_at(-5.0) == 1.0   # {1, 1, 10} at t = 0, 1, 2
    # between samples, too few in the window (t = 3 and 4 only): the 3 nearest, t = 3, 4 and 5 -> {1, 1, 2}
    assert tr.speed_at(3.6) == 1.0
    # the reference scales it: the same log against a 2 ms reference reads half
    assert SpeedTrack(tr.log, 2e-3, 2.0, 3).speed_at(8.0) == 1.0
    np.testing.assert_array_equal(tr.speeds([2.0, 5.0]), [1.0, 2.0])
    d = tr.to_dict(every_s=3.0)
    assert d["times_s"] == [0.0, 3.0, 6.0, 9.0] and d["speed"] == [1.0, 1.0, 2.0, 2.0]


def test_reference_of_two_calibrations_is_the_mean_of_their_probe_medians():
    from inferlab.study.hostspeed import reference_probe_s
    a = _log([0, 1, 2], [1e-3, 5e-3, 1e-3])      # median 1 ms
    b = _log([0, 1, 2, 3], [2e-3, 4e-3, 4e-3, 9e-3])  # median 4 ms
    assert reference_probe_s([a, b]) == pytest.approx(2.5e-3)
    assert reference_probe_s([a]) == pytest.approx(1e-3)


class _Const:
    """Every step 0.1 s, whenever it runs."""

    def step_time_s(self, step, t_s):
        return 0.1


@pytest.mark.parametrize("fitted", [False, True])
def test_the_simulator_steps_a_speed_tracked_model_at_its_own_clock(fitted):
    """One request (10 prompt, 20 output tokens) at t = 0; every step 0.1 s at the reference speed, and
    the host twice as slow from t = 1.05 s. Steps starting at 0, 0.1, ..., 1.0 take 0.1 s (the prefill and
    10 decodes: tokens at 0.1 ... 1.1); the 9 decodes after start at 1.1 or later and take 0.2 s."""
    from inferlab.study.hostspeed import SpeedTrack, SpeedTrackedStepTime
    from inferlab.serving.policies import ContinuousBatching
    from inferlab.serving.simulate import simulate
    t = np.arange(0.0, 5.0, 0.01)
    track = SpeedTrack(_log(t, np.where(t < 1.05, 1e-3, 2e-3)), 1e-3, window_s=0.015, min_samples=1)
    base = FittedStepTime([0.1] + [0.0] * (len(FEATURES) - 1)) if fitted else _Const()
    model = SpeedTrackedStepTime(base, track)
    w = Workload(np.zeros(1), np.array([10]), np.array([20]))
    from inferlab.core.specs import get_accelerator
    r = simulate(w, TINY_MODEL, get_accelerator("h100-sxm"), ContinuousBatching(max_num_seqs=4), kv_blocks=64,
                 step_time=model)
    assert r.first_token_s[0] == pytest.approx(0.1)
    np.testing.assert_allclose(r.itls_s[0], [0.1] * 10 + [0.2] * 9)
    assert r.finish_s[0] == pytest.approx(1.1 + 9 * 0.2)
    with pytest.raises(ValueError, match="t_s"):
        model.step_time_s(StepShape(1, 1.0, (), 1), None)  # no start time is refused, never read at speed 1


def test_probe_runs_once_per_step_inside_the_logged_step_window():
    """_instrument on a stand-in batch processor: the probe runs after the scheduler picked the batch and
    before the step's tokens (update_batch), once per step that ran, never on an empty poll; its
    seconds are logged beside the step."""
    from types import SimpleNamespace

    from inferlab.study.engines.transformers_cb import _instrument, _Steps
    order, polls = [], iter([True, False, True])
    fs = SimpleNamespace(state=SimpleNamespace(position_offset=5, initial_tokens=[0] * 5), query_length=5,
                         has_new_token=True)
    bp = SimpleNamespace(inputs_and_outputs=SimpleNamespace(requests_in_batch=[fs]),
                         scheduler=SimpleNamespace(active_requests={}))
    bp.prepare_next_batch = lambda: order.append("prepare") or next(polls)
    bp.update_batch = lambda: order.append("update")
    manager = SimpleNamespace(_create_batch_processor=lambda: bp)

    def probe():
        order.append("probe")
        return 0.004
    log = _Steps()
    _instrument(manager, log, probe)
    p = manager._create_batch_processor()
    for _ in range(3):
        if p.prepare_next_batch():
            p.update_batch()
    assert order == ["prepare", "probe", "update", "prepare", "prepare", "probe", "update"]
    assert log.probe_s == [0.004, 0.004] and len(log.rows) == 2
    assert all(row[0] <= s for row, s in zip(log.rows, log.probe_start))  # started inside the step's window


def test_probe_share_by_hand():
    from inferlab.study.hostspeed import probe_share, probe_summary
    # 9 ms of probes in 400 ms of steps (a median or mean of per-step ratios would read 2 %)
    assert probe_share([0.001, 0.002, 0.006], [0.1, 0.1, 0.2]) == pytest.approx(0.0225)
    s = probe_summary(_log([0, 1, 2, 3, 4], [1e-3, 2e-3, 3e-3, 4e-3, 5e-3]))
    assert s["n"] == 5 and s["median_s"] == pytest.approx(3e-3)
    assert s["rel_iqr"] == pytest.approx((4e-3 - 2e-3) / 3e-3)


@pytest.mark.parametrize("call, match", [
    (lambda h: h.ProbeLog([], []), "times_s must be a non-empty 1-d list of seconds"),
    (lambda h: h.ProbeLog([0.0, 1.0], [1e-3, 0.0]), r"probe_s must be positive finite seconds; got 0.0 at index 1"),
    (lambda h: h.ProbeLog([0.0, 1.0], [1e-3, -2e-3]), "probe_s must be positive finite seconds"),
    (lambda h: h.ProbeLog([0.0, np.nan], [1e-3, 1e-3]), "times_s must be finite seconds; got nan at index 1"),
    (lambda h: h.ProbeLog([0.0, 1.0], [1e-3]), "times_s and probe_s must be as long; got 2 and 1"),
    (lambda h: h.ProbeLog(["a"], [1e-3]), "times_s must be a list of seconds"),
    (lambda h: h.SpeedTrack(_log([0], [1e-3]), 1e-3, window_s=0.0), "window_s"),
    (lambda h: h.SpeedTrack(_log([0], [1e-3]), 1e-3, window_s=-1.0), "window_s"),
    (lambda h: h.SpeedTrack(_log([0], [1e-3]), 1e-3, window_s=float("nan")), "window_s"),
    (lambda h: h.SpeedTrack(_log([0], [1e-3]), 0.0), "reference_s"),
    (lambda h: h.SpeedTrack(_log([0], [1e-3]), 1e-3, min_samples=0), "min_samples"),
    (lambda h: h.SpeedTrack([1e-3], 1e-3), "log must be a ProbeLog"),
    (lambda h: h.SpeedTrack(_log([0], [1e-3]), 1e-3).speed_at(float("inf")), "t_s must be a finite time"),
    (lambda h: h.reference_probe_s([]), "logs must be one or more ProbeLog"),
    (lambda h: h.probe_share([0.2], [0.1]), "probe_s must lie inside the steps' time"),
    (lambda h: h.probe_share([], [0.1]), "probe_s must be a non-empty"),
    (lambda h: h.SpeedTrackedStepTime(_Const(), 1.0), "track must be a SpeedTrack"),
])
def test_hostspeed_refuses_bad_input_in_one_line(call, match):
    from inferlab.study import hostspeed
    with pytest.raises(ValueError, match=match) as e:
        call(hostspeed)
    assert "\n" not in str(e.value)


def test_engines_summary_keeps_the_bracketed_errors_beside_the_probe_tracked_ones_by_hand():
    """A probe-tracked repeat: its errors (TTFT p50 +5 %, within) are the probe-tracked prediction's; the
    bracketed one beside it (TTFT p99 -30 %) missed. Its probe took 1.5 % of the steps; speed 0.9-1.4."""
    rec = _rec("transformers", "2026-12-02T04:00:00+00:00", [_run(0.3, (0.05, 0.0, 0.0, 0.0))])
    rec["runs"][0].update({"prediction": "probe-tracked", "probe": {"speed_track": {"speed": [1.0, 0.9, 1.4]}, "share": 0.015},
                           "bracketed": {"comparison": {m: {p: {"error": e} for p, e in zip(("p50", "p99"), es)}
                                                        for m, es in (("ttft_s", (0.1, -0.3)), ("itl_s", (0.0, 0.1)))}}})
    rec["summary"]["probe"] = {"share": 0.015}
    rec["summary"]["rates"] = validate.rates_summary(rec["runs"])
    assert rec["summary"]["rates"][0]["bracketed"]["ttft_p99_error"] == -0.3
    assert rec["summary"]["rates"][0]["ttft_p50_error"] == 0.05
    t = validate.engines_summary([rec])["transformers"]
    f = t["fractions"][0.3]
    assert f["within"] == f["within_tracked"] == [True] and f["within_bracketed"] == [False]
    assert f["error"]["ttft_p50"] == [0.05] and f["bracketed_error"]["ttft_p99"] == [-0.3]
    assert t["probe_share"] == [0.015] and f["probe_speed"] == [(0.9, 1.4)]
    words = validate.engines_conclusion(validate.engines_summary([rec]))
    assert ("In 1 repeat the prediction followed the host with a probe timed inside the engine's every step (its "
            "cost 1.5% of the steps' time; the host's speed on it 0.90 to 1.40 of the calibrations'): 1 of 1 "
            "of those pairs within both bounds with it, 0 of 1 with the bracketing calibrations alone.") in words
    row = validate.probe_table([rec]).split("\n")[2].split()
    assert row[2:] == ["0.30x", "+5%", "/", "+0%", "/", "+0%", "/", "+0%", "+10%", "/", "-30%*", "/", "+0%", "/",
                       "+10%", "1.5%", "0.90-1.40"]

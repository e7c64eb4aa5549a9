"""Live loop against simulator: the comparison's arithmetic and bounds (study.validate)."""
import pytest

from inferlab.measure.plan import TINY_MODEL
from inferlab.study import validate


def _summary(ttft50, ttft99, itl50, itl99):
    return {"ttft_s": {"p50": ttft50, "p99": ttft99}, "itl_s": {"p50": itl50, "p99": itl99}}


def test_errors_are_simulated_over_live_and_bounds_are_15_and_25_percent():
    live = _summary(1.0, 2.0, 0.1, 0.2)
    # simulated: TTFT p50 1.15 (+15 %: on the bound), p99 1.5 (-25 %: on the bound), ITL p50 0.08
    # (-20 %: outside 15 %), ITL p99 0.2 (0 %).
    c = validate.compare(live, _summary(1.15, 1.5, 0.08, 0.2))
    assert c["ttft_s"]["p50"]["error"] == pytest.approx(0.15)
    assert c["ttft_s"]["p99"]["error"] == pytest.approx(-0.25)
    assert c["itl_s"]["p50"]["error"] == pytest.approx(-0.2)
    assert [c["ttft_s"]["p50"]["within"], c["itl_s"]["p50"]["within"], c["itl_s"]["p99"]["within"]] == [
        True, False, True]
    assert c["within_bounds"] is False
    assert validate.compare(live, _summary(1.1, 2.4, 0.09, 0.16))["within_bounds"] is True  # +10 %, +20 %, -10 %, -20 %
    with pytest.raises(ValueError, match="positive"):
        validate.relative_error(0.0, 1.0)


def test_validate_end_to_end_on_the_tiny_model(tmp_path):
    """Profile, live run and simulation of one short workload: the record is complete and the
    live server and the simulator served the same requests with the same token counts."""
    from inferlab.serving.workload import LengthDist
    rec = validate.validate(model=TINY_MODEL, dtype="fp32", rates=[30.0], duration_s=0.5, max_num_seqs=4,
                            max_len=96, prompt=LengthDist("lognormal", 32, 0.5, 8, 64),
                            output=LengthDist("lognormal", 8, 0.5, 2, 16), log=lambda m: None)
    run = rec["runs"][0]
    assert run["live"]["completed"] == run["simulated"]["completed"] == run["requests"] > 0
    assert validate.all_served(rec)
    short = {**rec, "runs": [{**run, "live": {**run["live"], "completed": run["requests"] - 1}}]}
    assert not validate.all_served(short)  # one request the live server did not finish
    # the same tokens: equal ITL counts, hence equal numbers of decode steps per request
    assert len(run["quantiles"]["live"]["itl_s"]) == len(run["quantiles"]["simulated"]["itl_s"]) == 99
    assert rec["profile"]["overhead_s"] >= 0 and rec["capacity_requests_per_s"] > 0
    assert run["step_time_error"]["n"] > 0
    assert set(run["comparison"]) == {"ttft_s", "itl_s", "within_bounds"}
    assert "rate/s" in validate.table(rec) and "requests/s" in validate.conclusion(rec)
    import json
    json.dumps(rec)  # JSON-able as recorded


@pytest.mark.parametrize("argv, match", [
    (["--rates", "1,x"], "--rates"),
    (["--rates", "-1"], "--rates"),
    (["--policy", "static"], "--policy"),
    (["--max-len", "100"], "--max-len"),
    (["--duration", "0"], "--duration"),
    (["--dtype", "int3"], "--dtype"),
])
def test_validate_cli_refuses_bad_input_in_one_line(argv, match, capsys):
    from inferlab import cli
    rc = cli.main(["serving", "validate", "--model", "tiny", *argv])
    err = capsys.readouterr().err
    assert rc == 2 and match in err and len(err.strip().splitlines()) == 1


def _record(created, errors, ratios, residual_s=2e-3):
    """A validation record with, per rate, (TTFT p50, TTFT p99, ITL p50, ITL p99) errors."""
    runs = []
    for (rate, load), errs, ratio in zip(((0.5, "light"), (1.5, "near saturation"), (2.0, "overloaded")),
                                         errors, ratios):
        cmp = {m: {p: {"error": e} for p, e in zip(("p50", "p99"), pair)}
               for m, pair in (("ttft_s", errs[:2]), ("itl_s", errs[2:]))}
        runs.append({"rate_per_s": rate, "load": load, "comparison": cmp,
                     "step_time_error": {"median_ratio": ratio, "median_abs": abs(1 - ratio)}})
    within = all(abs(e[i]) <= (0.15, 0.25)[i % 2] for e in errors for i in range(4))
    return {"created": created, "runs": runs, "bounds": {"p50": 0.15, "p99": 0.25},
            "within_bounds": within, "profile": {"residual_s": residual_s}}


def test_runs_table_and_repeatability_over_recorded_runs_by_hand():
    good = _record("2026-11-30T12:59:03+00:00", [(-0.05, -0.10, 0.02, -0.03), (-0.08, -0.24, -0.06, -0.07),
                                                (-0.14, -0.20, -0.06, -0.03)], [0.99, 0.98, 0.97])
    # the overloaded TTFT p50 at -35 % (bound 15 %) and the near-saturation TTFT p99 at -30 % (bound 25 %)
    bad = _record("2026-11-30T14:22:33+00:00", [(-0.09, -0.05, 0.05, -0.06), (-0.07, -0.30, -0.06, -0.01),
                                               (-0.35, -0.20, -0.09, -0.08)], [1.05, 0.96, 0.92], 8.5e-3)
    assert validate.misses(good) == []
    assert validate.misses(bad) == [(1.5, "near saturation", "TTFT", "p99", -0.30),
                                    (2.0, "overloaded", "TTFT", "p50", -0.35)]
    text = validate.runs_table([good, bad])
    assert "2026-11-30 12:59" in text and "-14.0% TTFT @ 2.00/s" in text and "-24.0% TTFT @ 1.50/s" in text
    assert "-35.0% TTFT @ 2.00/s" in text and "0.92-1.05" in text and "8.5" in text
    assert [line.split()[-1] for line in text.splitlines()[2:]] == ["yes", "no"]
    said = validate.repeatability([good, bad])
    assert said.startswith("1 of 2 recorded runs are within both bounds. The misses: TTFT p99 -30% at 1.50/s "
                           "(near saturation); TTFT p50 -35% at 2.00/s (overloaded), all at the near saturation "
                           "and overloaded rates.")
    assert "on both sides of the live ones (median predicted / measured 0.92 to 1.05)" in said
    assert "shorter than the live ones in every run and at every rate (median predicted / measured 0.97 to 0.99)" in \
        validate.repeatability([good])  # ratios 0.97-0.99, all < 1


def test_capacity_uncertainty_by_hand():
    from inferlab.study.validate import capacity_uncertainty

    def rec(*ratios):
        return {"runs": [{"step_time_error": {"median_ratio": r}} for r in ratios]}

    # ratios 0.8 and 1.05: capacity off by 1/0.8 - 1 = 25 % and 1/1.05 - 1 = -4.8 %; the sign flips
    u = capacity_uncertainty([rec(1.05), rec(0.8, 0.9)])
    assert u["rel_error"] == pytest.approx(0.25)
    assert u["sign_changes"] and u["ratio_min"] == 0.8 and u["ratio_max"] == 1.05 and u["runs"] == 2
    # all shorter than measured: the same sign in every run
    assert not capacity_uncertainty([rec(0.9, 0.95)])["sign_changes"]
    assert capacity_uncertainty([rec(0.9, 0.95)])["rel_error"] == pytest.approx(1 / 0.9 - 1)
    with pytest.raises(ValueError, match="records must hold at least one"):
        capacity_uncertainty([])
    with pytest.raises(ValueError, match="positive finite"):
        capacity_uncertainty([rec(0.0)])

"""Live loop against simulator: the comparison's arithmetic and bounds (serving.validate)."""
import pytest

from inferlab.serving import validate


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
    rec = validate.validate(model="tiny", dtype="fp32", rates=[30.0], duration_s=0.5, max_num_seqs=4,
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

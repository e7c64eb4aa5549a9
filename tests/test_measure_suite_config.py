"""The suite's configuration objects (SuiteConfig, EfficiencyConfig) and the drift correction, off by default."""
from __future__ import annotations

import copy
import dataclasses

import pytest

pytest.importorskip("torch")

from inferlab import cli as _cli  # noqa: E402
from inferlab import measure  # noqa: E402
from inferlab.measure import efficiency, suite  # noqa: E402
from inferlab.measure.suite import SuiteConfig  # noqa: E402


def test_a_suite_config_is_frozen_checked_and_overridden_by_keywords(monkeypatch):
    cfg = SuiteConfig(quick=True, model="tiny")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.quick = False
    assert cfg.drift_correction is False
    with pytest.raises(ValueError, match="clock must be 'wall' or 'thread-cpu'; got 'cpu'"):
        SuiteConfig(clock="cpu")
    with pytest.raises(ValueError, match="threads"):
        SuiteConfig(threads=0)
    with pytest.raises(TypeError, match="colour"):
        suite.run_suite(cfg, colour="red")
    seen = []

    class Reached(Exception):
        pass

    def reached(run):
        seen.append(run.config)
        raise Reached
    monkeypatch.setattr(suite, "_measure", reached)
    with pytest.raises(Reached):
        measure.run_suite(cfg, device="cpu", seed=7, progress=False, decode_mode="eager")
    assert seen[0] == dataclasses.replace(cfg, device="cpu", seed=7, progress=False, decode_mode="eager")


def test_the_cli_turns_the_drift_correction_on_only_when_asked(monkeypatch, tmp_path):
    seen = []

    class Reached(Exception):
        pass

    def reached(config):
        seen.append(config)
        raise Reached  # stop here: the options were read
    monkeypatch.setattr(suite, "run_suite", reached)
    for extra in ([], ["--drift-correction"]):
        with pytest.raises(Reached):
            _cli.main(["measure", "--quick", "--out", str(tmp_path / "r.json"), *extra])
    assert [c.drift_correction for c in seen] == [False, True]
    assert isinstance(seen[0], SuiteConfig) and seen[0].quick is True


def test_an_efficiency_config_is_checked_by_name():
    with pytest.raises(ValueError, match="rounds"):
        efficiency.EfficiencyConfig(rounds=0)
    with pytest.raises(ValueError, match="max_rounds"):
        efficiency.EfficiencyConfig(max_rounds=0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        efficiency.EfficiencyConfig().rounds = 5


@pytest.fixture(scope="module")
def probed_run():
    run = measure.run_suite(device="cpu", model="tiny", progress=False, threads=1, clock="thread-cpu",
                            decode_mode="eager")
    data = copy.deepcopy(run.data)
    for kind in ("ttft", "itl", "batch"):
        for p in data["measurements"][kind]:
            p["drift"] = dict(p["drift"] or {}, ratio=1.0)  # thread-CPU runs are interleaved, not probed
    data["measurements"]["itl"][0]["drift"]["ratio"] = 2.0  # the host at half speed around one point
    return data


def test_the_drift_correction_is_off_by_default_and_the_record_says_so(probed_run):
    data = copy.deepcopy(probed_run)
    assert data["config"]["drift_correction"] is False
    suite.finish(data)
    pr = data["predictions"]["itl"][0]
    assert pr["calibrated_s"] == pr["calibrated_uncorrected_s"] and pr["correction"] == "off"
    dr = data["summary"]["drift"]
    assert dr["correction"] == "off" and dr["applied"] == 0
    assert dr["drift"] == pytest.approx(1.0) and data["summary"]["drifting"] is True  # the drift is still measured


def test_the_drift_correction_applies_when_asked_and_in_runs_recorded_before_the_option(probed_run):
    for asked in (True, None):
        data = copy.deepcopy(probed_run)
        if asked is None:
            del data["config"]["drift_correction"]  # a run recorded before the option: it was corrected
        else:
            data["config"]["drift_correction"] = asked
        suite.finish(data)
        pr = data["predictions"]["itl"][0]
        assert pr["calibrated_s"] == pytest.approx(2 * pr["calibrated_uncorrected_s"])
        assert pr["correction"] == "applied"
        assert data["summary"]["drift"]["correction"] == "on" and data["summary"]["drift"]["applied"] == 1

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

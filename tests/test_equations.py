"""inferlab.notebook.equations: each key equation is written once; its statement, its worked form and its
value come from that one definition. Expected values are worked out by hand in the comments."""

import pytest

from inferlab.notebook import equations

pytestmark = pytest.mark.core


def test_ridge_point_by_hand():
    # 989.4 TFLOP/s over 3.35 TB/s = 295.34 FLOP/byte
    w = equations.ROOFLINE.worked(peak=989.4e12, bw=3.35e12)
    assert w.value == pytest.approx(295.343, rel=1e-4)
    assert w.tex == (r"I_\text{ridge} = \frac{\text{peak}}{\text{BW}} = "
                     r"\frac{989\ \text{TFLOP/s}}{3.35\ \text{TB/s}} = 295\ \text{FLOP/byte}")


def test_stated_form_shows_symbols_and_stated_only_parts():
    assert equations.ROOFLINE.tex() == (r"\text{attainable FLOP/s} = \min\left(\text{peak},\; I \cdot \text{BW}\right)"
                                        r",\qquad I_\text{ridge} = \frac{\text{peak}}{\text{BW}}")
    # [*] is juxtaposition when stated, a dot when worked; [.] a thin space when stated
    assert equations.MATMUL_INTENSITY.tex().startswith(r"I_\text{matmul} = \frac{2Tdf}{b_w\,df + b_a\,T(d + f)}")
    assert equations.MATMUL_INTENSITY.markdown().startswith("<!-- equation: eq-matmul-intensity -->\n$$\n")


def test_matmul_intensity_by_hand():
    # T = 2048, d = 5120, f = 13824, 2-byte weights and activations:
    # 2*2048*5120*13824 / (2*5120*13824 + 2*2048*18944) = 2.8991e11 / (1.41558e8 + 7.7595e7 = 2.19152e8) = 1322.9
    w = equations.MATMUL_INTENSITY.worked(T=2048, d=5120, f=13824, bw=2, ba=2)
    assert w.value == pytest.approx(1322.9, rel=1e-4)
    assert r"\frac{2 \cdot 2{,}048 \cdot 5{,}120 \cdot 13{,}824}{2 \cdot 5{,}120 \cdot 13{,}824" in w.tex


def test_a_later_part_uses_an_earlier_parts_value():
    # t = (26 GB + 16 * 0.8 GB) / 3.35 TB/s = 38.8 GB / 3.35 TB/s = 11.58 ms; throughput = 16 / t = 1381.4
    w = equations.STEP_TIME.worked(M=26e9, B=16, C=0.8e9, bw=3.35e12)
    assert w.values["t"] == pytest.approx(38.8e9 / 3.35e12)
    assert w.value == pytest.approx(16 / (38.8e9 / 3.35e12))
    assert r"\frac{16}{11.6\ \text{ms}}" in w.tex


def test_max_batch_floors_and_never_goes_below_zero():
    # (80 - 26) GB / 0.8 GB = 67.5 -> 67; weights beyond the device -> 0
    assert equations.MAX_BATCH.worked(Mdev=80e9, M=26e9, C=0.8e9).value == 67
    assert equations.MAX_BATCH.worked(Mdev=16e9, M=26e9, C=0.8e9).value == 0


def test_library_value_is_shown_beside_the_result():
    w = equations.COST_PER_TOKEN.worked(usd=2.0, thr=100.0, library=0.0055)
    # $2 / (3600 s * 100 tokens/s) * 1000 = $0.005556
    assert w.value == pytest.approx(2 / 360)
    assert w.tex.endswith(r"= \$0.00556\quad (\text{library: } \$0.00550)")


def test_missing_or_unused_values_are_named():
    with pytest.raises(ValueError, match=r"values missing \['bw'\], values not used \['bandwidth'\]"):
        equations.ROOFLINE.worked(peak=1e15, bandwidth=3e12)


def test_a_slot_without_a_symbol_is_refused():
    with pytest.raises(ValueError, match=r"slot \[x\] has no symbol"):
        equations.Equation("bad", {"y": equations.Symbol("y")}, (equations.Part("y", "[x]", lambda x: x),))


def test_every_equation_is_found_by_its_label():
    assert equations.get("eq-step-time") is equations.STEP_TIME
    with pytest.raises(ValueError, match="no equation 'eq-nothing'"):
        equations.get("eq-nothing")
    for label, eq in equations.EQUATIONS.items():
        assert eq.label == label

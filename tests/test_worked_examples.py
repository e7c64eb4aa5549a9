"""inferlab.notebook.worked_examples: numbers in TeX, equations with the scenario's numbers, takeaway boxes."""
import pytest

from inferlab.notebook import worked_examples

pytestmark = pytest.mark.core


@pytest.mark.parametrize("x, tex", [
    (295.3, "295"), (3.35, "3.35"), (0.0078, "0.00780"), (7.8, "7.80"), (26_000, "26{,}000"),
    (5.37e13, r"5.37 \times 10^{13}"), (9.996e5, r"1.00 \times 10^{6}"), (12345.6, "12{,}346"),
    (-4.2e-5, r"-4.20 \times 10^{-5}"), (0, "0"), (2048, "2{,}048")])
def test_tex_number(x, tex):
    assert worked_examples.tex_number(x) == tex


def test_tex_number_takes_numpy_scalars():
    import numpy as np
    assert worked_examples.tex_number(np.int64(13_015_864_320)) == r"1.30 \times 10^{10}"
    assert worked_examples.tex_number(np.int64(5120)) == "5{,}120" and worked_examples.tex_number(np.float32(0.5)) == "0.500"


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), "12", None, True])
def test_tex_number_refuses_what_is_not_a_finite_number(bad):
    with pytest.raises(ValueError, match="x must be a finite number"):
        worked_examples.tex_number(bad)


def test_equation_substitutes_every_placeholder_and_only_those():
    # I_ridge = 989.4 TFLOP/s / 3.35 TB/s = 295.3 FLOP/byte (H100 SXM bf16 dense, datasheet)
    md = worked_examples.equation(r"I = \frac{<peak>}{<bw>} = <ridge>\ \text{<unit>}", peak=989.4, bw=3.35, ridge=295.3,
                         unit="FLOP/byte")
    assert md.data == "$$\nI = \\frac{989}{3.35} = 295\\ \\text{FLOP/byte}\n$$"
    with pytest.raises(ValueError, match=r"without a value \['bw'\]"):
        worked_examples.equation_tex(r"<peak>/<bw>", peak=1.0)
    with pytest.raises(ValueError, match=r"without a placeholder \['extra'\]"):
        worked_examples.equation_tex(r"<peak>", peak=1.0, extra=2.0)


def test_takeaway_is_a_blockquote_the_book_turns_into_a_callout():
    assert worked_examples.takeaway("prefill is\n compute-bound.").data == "> **Takeaway.** prefill is compute-bound."
    with pytest.raises(ValueError, match="empty"):
        worked_examples.takeaway("  ")

"""inferlab.notebook.conclusions: the sentences whose words depend on the numbers, on both sides of each
threshold (values chosen by hand, not taken from the code's output)."""
import pytest

from inferlab.notebook import conclusions


def test_setup_note_says_whether_the_figures_carry_the_books_markers_and_why_nothing_fits():
    assert conclusions.setup_note(True) == "This is the book's worked example."
    assert conclusions.setup_note(False) == "Not the book's setup: no book markers on the figures."
    note = conclusions.setup_note(False, fit="the weights need 140 GB")
    assert note.startswith("**Does not fit:** the weights need 140 GB ")


@pytest.mark.parametrize("intensity, side, regime", [(1236.0, "above", "compute"), (200.0, "below", "memory")])
def test_mlp_regime_takeaway_follows_the_ridge(intensity, side, regime):
    text = conclusions.mlp_regime_takeaway(2048, intensity, 295.0, 2897.0)
    assert f"{side} the ridge point of 295: {regime}-bound" in text
    assert "2df/(b_a(d+f)) = 2,897 FLOP/byte" in text


def test_a_short_prompt_is_left_of_the_ridge_and_a_long_one_right():
    assert "101 FLOP/byte, left of the ridge (295)" in conclusions.side_of_ridge(128, 101.0, 295.0)
    assert "400 FLOP/byte, right of the ridge (295)" in conclusions.side_of_ridge(512, 400.0, 295.0)


def test_batch_to_ridge_compares_with_the_batch_that_fits():
    # 16 * 295 / 2 ~ 2,360 ... any batch beyond 66 that fit: 2360 / 66 = 35.8x
    assert "near $B \\approx$ 2,360, 35.8× the 66 sequences that fit" in conclusions.batch_to_ridge(2360, 66, 30.0, 295.0)
    assert ", within the 500 sequences that fit" in conclusions.batch_to_ridge(300, 500, 150.0, 295.0)
    none = conclusions.batch_to_ridge(300, 0, 1.0, 295.0)
    assert "sequences that fit" not in none and "at $B$ = 1, 0% of the ridge" in none


def test_max_batch_takeaway_says_when_not_one_sequence_fits():
    assert conclusions.max_batch_takeaway(1000, "h100-sxm", 0, 0.8e9).startswith("Not one sequence of 1,000 tokens")
    assert "holds at most 66 sequences" in conclusions.max_batch_takeaway(1000, "h100-sxm", 66, 0.82e9)
    assert "0.82 GB of KV cache" in conclusions.max_batch_takeaway(1000, "h100-sxm", 66, 0.82e9)


def test_tp_speedups_name_the_larger_speedup_and_its_reason():
    # ITL: 10 -> 2 ms (5x) at K = 8; TTFT: 100 -> 25 ms (4x): decode's speed-up is 125 % of prefill's (+25 %: moderate)
    text = conclusions.tp_speedups((1, 2, 4, 8), (100, 55, 35, 25), (10, 5.5, 3.2, 2.0), 8e-6)
    assert "lowest TTFT is at $K$ = 8 and the lowest ITL at $K$ = 8: the largest $K$ is fastest" in text
    assert "ITL's is 91% of ideal at $K$ = 2 and 62% at $K$ = 8" in text   # 10/5.5/2, 10/2/8
    assert "speed-up is 125% of prefill's, a **moderate** difference" in text
    assert "decode's those of one token per sequence" in text
    # the other way round: TTFT speeds up more, and the lowest ITL is at K = 4
    other = conclusions.tp_speedups((1, 2, 4, 8), (100, 50, 25, 12.5), (10, 6, 4, 4.5), 8e-6)
    assert "lowest ITL at $K$ = 4. What falls" in other
    assert "start-up latency (8 µs each here)" in other


def test_tp_speedups_refuse_degrees_that_do_not_start_at_one():
    with pytest.raises(ValueError, match="tps must start at 1"):
        conclusions.tp_speedups((2, 4), (1, 1), (1, 1), 0.0)


def test_gqa_batch_limit_says_which_wall_comes_first():
    assert "cross the ridge and become compute-bound" in conclusions.gqa_batch_limit(False, 400, 300.0)
    short = conclusions.gqa_batch_limit(True, 200, 300.0)
    assert "(this model already has at most 8 KV heads)" in short and "memory stops the batch" in short


def test_fits_on_paper_at_zero_and_below():
    assert conclusions.fits_on_paper(0.0) == "fits" and conclusions.fits_on_paper(-1.0) == "does not fit"


def test_book_convention_only_on_the_books_setup():
    assert conclusions.book_convention(False, 13e9, 989, 53.9, 52.9) == ""
    # 53.9 / 52.9 - 1 = 1.89 %
    text = conclusions.book_convention(True, 13e9, 989, 53.9, 52.9)
    assert "$P$ = 13.0e9" in text and "at 989 TFLOP/s" in text and "differ by 1.9%" in text


def test_book_crosses_only_with_ratios():
    assert conclusions.book_crosses("") == ""
    assert conclusions.book_crosses("2.9× at 2,048 tokens").startswith("The book's crosses sit above our curve by 2.9×")


def test_memory_wall_bullet_names_each_lever_or_why_nothing_fits():
    text = conclusions.memory_wall_bullet("llama-2-13b", "h100-sxm", 1000, 80, 66, 132, 330, 40)
    assert text == ("- At 1,000 tokens of context, 80 GB hold 66 sequences beside the weights; an int8 cache "
                    "allows 132, eight KV heads instead of 40 allow 330.")
    assert conclusions.memory_wall_bullet("llama-3-8b", "h100-sxm", 1000, 80, 400, 800, None, 8).endswith("allows 800.")
    assert conclusions.memory_wall_bullet("llama-2-70b", "l4", 1000, 24, 0, 0, None, 8,
                                          fit="the weights need 140 GB") == \
        "- llama-2-70b does not fit on one l4: the weights need 140 GB."


def test_or_not_fitting_replaces_the_sentence_by_the_reason():
    assert conclusions.or_not_fitting("", "B* = 31.") == "B* = 31."
    assert conclusions.or_not_fitting("weights exceed 24 GB", "B* = 31.") == "Nothing to batch: weights exceed 24 GB"
    assert conclusions.or_not_fitting("x", "t", prefix="- ", suffix="\n") == "- x\n"


def test_the_headroom_paragraph_gives_the_fits_threshold_and_batch_of_its_own_fit():
    """15.2.2's senior question: the paragraph's numbers are those of the fit it is given (the
    server starts the batch below the reported memory's free bytes, the largest batch at the
    utilisation), for a fit that fits on paper and one that does not."""
    import re

    from inferlab.core.memory_headroom import headroom_fit
    from inferlab.core.specs import get_accelerator, get_model
    h100 = get_accelerator("h100-sxm")
    for batch, fits in ((32, "fits"), (64, "does not fit")):
        fit = headroom_fit(get_model("llama-2-70b"), h100, batch=batch, seq_len=2048, tp=2)
        text = conclusions.headroom_paragraph(fit, "Llama-2 70B", "H100", 0.9)
        assert f"$B$ = {batch}," in text and f"On paper it {fits}:" in text
        limit = float(re.search(r"when that headroom is at most (-?[\d.]+) GB", text).group(1))
        assert limit == pytest.approx(fit.free_bytes("reported") / 1e9, abs=0.005)
        assert text.endswith(f"largest batch is {fit.max_batch_at_utilisation(0.9)}")
        assert f"{(fit.weight_bytes + fit.kv_bytes) / 1e9:.2f} GB." in text

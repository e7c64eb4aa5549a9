"""Weights, KV cache and the batch that fits (inferlab.core.memory), against the book's worked numbers."""
import numpy as np
import pytest

from inferlab import DoesNotFitError, Precision, get_model
from inferlab.core.memory import (kv_cache_bytes, kv_cache_bytes_per_token, max_batch, memory_budget,
                             weight_bytes)
from inferlab.core.specs import get_accelerator

pytestmark = pytest.mark.core

H100_SXM = get_accelerator("h100-sxm")
LLAMA_2_13B = get_model("llama-2-13b")
LLAMA_3_70B = get_model("llama-3-70b")
LLAMA_3_8B = get_model("llama-3-8b")

BOOK = get_model("llama-2-13b-book")
d, f, L, N, H, V = 5120, 20480, 40, 40, 128, 32000
CAPACITY = 80e9  # H100 SXM, GB = 1e9 bytes as on the datasheet
# Exact parameters: L * (4 d^2 + 2 d f + two norms of d) + embedding and LM head (V x d each) + final norm.
BOOK_PARAMS = L * (4 * d * d + 2 * d * f + 2 * d) + 2 * V * d + d
assert BOOK_PARAMS == 12_911_006_720
BOOK_WEIGHTS = 2 * BOOK_PARAMS  # bf16
KV_PER_TOKEN = 2 * L * N * H * 2  # K and V, L layers, N_kv heads of H, 2 bytes
assert KV_PER_TOKEN == 819_200


def test_parameter_counts_by_hand():
    assert get_model(BOOK).n_params == BOOK_PARAMS
    # Real Llama-2 13B: gated MLP, three d x 13824 matrices; 13.0B as the book says.
    real = 40 * (4 * d * d + 3 * d * 13824 + 2 * d) + 2 * V * d + d
    assert get_model("llama-2-13b").n_params == real == 13_015_864_320


def test_weight_bytes_are_about_26_GB():
    assert weight_bytes(BOOK) == BOOK_WEIGHTS
    assert weight_bytes(BOOK) / 1e9 == pytest.approx(26, rel=0.01)
    assert weight_bytes(LLAMA_2_13B) / 1e9 == pytest.approx(26.0, rel=0.002)


def test_weight_dtypes():
    assert weight_bytes(BOOK, Precision(weights="int8")) == BOOK_WEIGHTS / 2
    assert weight_bytes(BOOK, Precision(weights="int4")) == BOOK_WEIGHTS / 4
    assert weight_bytes(BOOK, Precision(weights="fp32")) == BOOK_WEIGHTS * 2


def test_book_kv_cache_per_sequence():
    assert kv_cache_bytes_per_token(BOOK) == KV_PER_TOKEN
    assert kv_cache_bytes(BOOK, 1000) == 2 * 40 * 40 * 128 * 1000 * 2 == 819_200_000  # 0.82 GB
    assert kv_cache_bytes(BOOK, 1024) == 2 * 40 * 40 * 128 * 1024 * 2 == 838_860_800  # 0.84 GB
    assert kv_cache_bytes(BOOK, 2048) / 1e9 == pytest.approx(1.7, abs=0.05)  # "this 1.7 GB"
    assert kv_cache_bytes(BOOK, 1000, 16) / 1e9 == pytest.approx(13, rel=0.01)  # B = 16
    assert kv_cache_bytes(BOOK, 1000, 256) / 1e9 == pytest.approx(210, rel=0.01)  # B = 256


def test_gqa_and_int8_kv():
    # Llama-3 style N_kv = 8: 2 * 40 * 8 * 128 * 1024 * 2 = 0.168 GB (book).
    gqa = get_model(BOOK).with_(n_kv_heads=8)
    assert kv_cache_bytes(gqa, 1024) == 2 * 40 * 8 * 128 * 1024 * 2 == 167_772_160
    assert kv_cache_bytes(LLAMA_3_8B, 1) == 2 * 32 * 8 * 128 * 2
    assert kv_cache_bytes(BOOK, 1000, precision=Precision(kv="int8")) == 819_200_000 / 2
    assert kv_cache_bytes(BOOK, 1000, precision=Precision(kv="int4")) == 819_200_000 / 4


def test_kv_cache_broadcasts():
    grid = kv_cache_bytes(BOOK, np.array([[1000, 2000]]), np.array([[1], [3]]))
    np.testing.assert_array_equal(grid, [[KV_PER_TOKEN * 1000, KV_PER_TOKEN * 2000],
                                         [KV_PER_TOKEN * 3000, KV_PER_TOKEN * 6000]])


def test_max_batch_book_cases():
    free = CAPACITY - BOOK_WEIGHTS  # 54.18 GB beside the weights
    # Book: (80 - 26) GB / 0.82 GB -> B ~ 66 at S = 1000; max B ~ 64 at S = 1024.
    assert max_batch(BOOK, H100_SXM, 1000) == int(free // (KV_PER_TOKEN * 1000)) == 66
    assert max_batch(BOOK, H100_SXM, 1024) == int(free // (KV_PER_TOKEN * 1024)) == 64
    np.testing.assert_array_equal(max_batch(BOOK, H100_SXM, np.array([1000, 1024])), [66, 64])


def test_int8_kv_about_doubles_max_batch():
    # Book: "from B ~ 65 to B ~ 130" at S = 1000.
    bf16 = max_batch(BOOK, H100_SXM, 1000)
    int8 = max_batch(BOOK, H100_SXM, 1000, Precision(kv="int8"))
    assert int8 == int((CAPACITY - BOOK_WEIGHTS) // (KV_PER_TOKEN / 2 * 1000)) == 132
    assert 2 * bf16 <= int8 <= 2 * bf16 + 1


def test_max_batch_is_a_floor_not_off_by_one():
    # Reserve exactly enough that 60 sequences of 1000 tokens fill the rest to the byte.
    reserved = CAPACITY - BOOK_WEIGHTS - 60 * 1000 * KV_PER_TOKEN
    assert max_batch(BOOK, H100_SXM, 1000, reserved_bytes=reserved) == 60
    assert max_batch(BOOK, H100_SXM, 1000, reserved_bytes=reserved + 1) == 59
    assert memory_budget(BOOK, H100_SXM, 60, 1000, reserved_bytes=reserved).free_bytes == 0
    assert memory_budget(BOOK, H100_SXM, 60, 1000, reserved_bytes=reserved).fits


def test_memory_budget_splits_capacity():
    b = memory_budget(BOOK, H100_SXM, 16, 1000, reserved_bytes=2e9)
    assert b.capacity_bytes == CAPACITY
    assert b.weight_bytes == BOOK_WEIGHTS
    assert b.kv_bytes == 16 * 1000 * KV_PER_TOKEN
    assert b.used_bytes == BOOK_WEIGHTS + 16 * 1000 * KV_PER_TOKEN + 2e9
    assert b.free_bytes == CAPACITY - b.used_bytes and b.fits
    assert memory_budget(BOOK, H100_SXM, 66, 1000).fits
    assert not memory_budget(BOOK, H100_SXM, 67, 1000).fits
    over = memory_budget(BOOK, H100_SXM, 256, 1000)  # 26 + 210 GB on an 80 GB card
    assert not over.fits and over.free_bytes < 0


def test_weights_that_do_not_fit_raise():
    # Llama-3-70B: L = 80, d = 8192, 64 query / 8 KV heads, gated d_ff = 28672, V = 128256.
    d70 = 8192
    params = 80 * (2 * d70 * d70 + 2 * d70 * 1024 + 3 * d70 * 28672 + 2 * d70) + 2 * 128256 * d70 + d70
    assert get_model("llama-3-70b").n_params == params == 70_553_706_496
    with pytest.raises(DoesNotFitError, match=r"llama-3-70b weights need 141\.1 GB"):
        max_batch(LLAMA_3_70B, H100_SXM, 1000)
    assert not memory_budget(LLAMA_3_70B, H100_SXM, 1, 1000).fits
    # int4 weights (35 GB) fit.
    assert max_batch(LLAMA_3_70B, H100_SXM, 1000, Precision(weights="int4")) > 0


def test_a_single_sequence_that_overflows_raises():
    # 54.18 GB free / 819,200 B per token: at most 66,135 tokens for one sequence.
    longest = int((CAPACITY - BOOK_WEIGHTS) // KV_PER_TOKEN)
    assert longest == 66_135
    assert max_batch(BOOK, H100_SXM, longest) == 1
    with pytest.raises(DoesNotFitError, match="seq_len=66136"):
        max_batch(BOOK, H100_SXM, longest + 1)
    assert max_batch(BOOK, H100_SXM, longest + 1, allow_zero=True) == 0
    assert isinstance(DoesNotFitError("x"), ValueError)


def test_max_batch_is_never_negative_or_nan():
    # Overflowing lengths give 0 (with allow_zero) or raise; never a negative or NaN batch.
    seq = np.array([1, 1000, 66_135, 66_136, 10**6])
    b = max_batch(BOOK, H100_SXM, seq, allow_zero=True)
    assert b.dtype.kind == "i"
    np.testing.assert_array_equal(b, [66_135, 66, 1, 0, 0])
    with pytest.raises(DoesNotFitError):
        max_batch(BOOK, H100_SXM, seq)


# ---------------------------------------------------------------------------------------------
# fit_advice: what fits when a scenario does not (the figures never dead-end)
# ---------------------------------------------------------------------------------------------

def test_fit_advice_names_the_tensor_parallel_degree_that_fits_llama_2_70b():
    from inferlab.core.memory import fit_advice
    m = get_model("llama-2-70b")
    a = fit_advice(m, H100_SXM, 1000)
    # 138 GB of bf16 weights > 80 GB: nothing fits on one GPU, not even with a shorter context
    assert not a.fits and a.max_batch == 0 and a.longest_context == 0 and a.int8_kv_max_batch == 0
    assert a.tp == 2
    # at TP = 2 each GPU holds half the weights (the sharded matrices; embeddings split by vocab) and
    # half of the 8 KV heads: 2 * 80 layers * 4 heads * 128 * 2 bytes per token
    shard_weights = weight_bytes(m, tp=2)
    assert shard_weights == pytest.approx(m.n_params, rel=0.01)          # ~ P bytes = half of 2P
    per_token = 2 * m.n_layers * (m.n_kv_heads // 2) * m.head_dim * 2
    assert a.tp_max_batch == int((80e9 - shard_weights) // (per_token * 1000))
    text = a.sentence()
    assert "does not fit on one h100-sxm" in text and "tensor parallelism 2" in text
    assert f"B_max = {a.tp_max_batch}" in text
    assert all(len(line) <= 34 for line in a.lines(34))


def test_fit_advice_for_a_context_too_long_offers_int8_a_shorter_context_and_tp():
    from inferlab.core.memory import fit_advice
    a = fit_advice(LLAMA_2_13B, H100_SXM, 100_000, beyond_context=True)
    free = 80e9 - weight_bytes(LLAMA_2_13B)
    assert a.longest_context == int(free // KV_PER_TOKEN)               # 65,879 tokens
    assert KV_PER_TOKEN * 100_000 > free >= KV_PER_TOKEN / 2 * 100_000   # int8 halves it: one fits
    assert a.int8_kv_max_batch == 1 and a.tp == 2
    assert "int8 KV cache" in a.sentence() and f"{a.longest_context:,} tokens" in a.sentence()


def test_fit_advice_when_it_fits_is_silent():
    from inferlab.core.memory import fit_advice
    a = fit_advice(LLAMA_2_13B, H100_SXM, 1000)
    assert a.fits and a.max_batch == max_batch(LLAMA_2_13B, H100_SXM, 1000) and a.sentence() == ""


# --- what the pages ask instead of re-deriving (notebook.plots, panel, interactive) -------------------

def test_the_chapter_kv_closed_form_by_hand():
    from inferlab.core.memory import kv_cache_rule_bytes
    m = get_model("llama-2-13b")
    # 2 (K, V) * 40 layers * 40 KV heads * 128 head dim * 2 bytes * 1,000 tokens = 819,200,000 bytes
    assert kv_cache_rule_bytes(m, 1000, 1, Precision()) == 819_200_000
    assert kv_cache_rule_bytes(m, 1000, 3, Precision()) == 3 * 819_200_000
    assert kv_cache_bytes(m, 1000, 1, Precision()) == 819_200_000     # full attention: the library agrees


def test_weights_fit_and_fit_limit_say_zero_instead_of_raising():
    from inferlab.core.memory import fit_limit, weights_fit
    m, h100, l4 = get_model("llama-2-13b"), get_accelerator("h100-sxm"), get_accelerator("l4")
    big = get_model("llama-2-70b")
    # 70B parameters in bf16 are about 140 GB: more than an L4's 24 GB; 13B (26 GB) fit an H100's 80 GB
    assert weights_fit(m, h100) and not weights_fit(big, l4)
    assert fit_limit(big, l4, 1024) == 0
    with pytest.raises(DoesNotFitError):
        max_batch(big, l4, 1024)
    # (80e9 - 26.03e9) / 819.2e6 per sequence at S = 1,000 = 65.9: 65 sequences beside the weights
    assert fit_limit(m, h100, 1000) == 65
    assert list(fit_limit(m, h100, np.array([1000, 1_000_000]))) == [65, 0]   # arrays: 0 where none fits


def test_active_weight_bytes():
    from inferlab.core.memory import active_weight_bytes
    from inferlab.core.specs import resolve_model
    m = get_model("llama-2-13b")
    assert active_weight_bytes(m) == weight_bytes(m)                    # dense: every weight is active
    # Mixtral 8x7B: 2 of 8 experts per token, 12.9 B active parameters (Mistral AI's announcement)
    assert active_weight_bytes(resolve_model("mixtral-8x7b-v0.1")) == pytest.approx(2 * 12.9e9, rel=0.01)

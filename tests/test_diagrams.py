"""The mechanism diagrams (inferlab.notebook.diagrams): the numbers they write out, checked by hand."""
from __future__ import annotations

import pytest

from inferlab.notebook import diagrams
from inferlab.notebook.phone_figures import min_text_px
from inferlab.core.specs import BF16, Precision, get_accelerator, get_model

L13 = get_model("llama-2-13b")
H100 = get_accelerator("h100-sxm")


def test_kv_cache_sizes_by_hand():
    # Llama-2 13B: 40 layers, 40 KV heads of 128; bf16: 2 * 40 * 40 * 128 * 2 B
    s = diagrams.kv_cache_sizes(L13, BF16, prompt_len=1000, decode_steps=3)
    assert s.bytes_per_vector == 256
    assert s.bytes_per_token == 819_200
    assert s.bytes_after_prefill == 819_200_000
    assert s.bytes_after_decode == 819_200 * 1003
    # Llama-3 8B, grouped-query: 32 layers, 8 KV heads of 128; an int8 cache: one byte each
    g = diagrams.kv_cache_sizes(get_model("llama-3-8b"), Precision(kv="int8"), prompt_len=10)
    assert g.bytes_per_token == 2 * 32 * 8 * 128 * 1


def test_kv_cache_diagram_writes_the_numbers_it_draws():
    p = diagrams.kv_cache_diagram(L13, BF16, prompt_len=1000)
    drawn = " ".join(t.get_text() for t in p.fig.axes[0].texts)
    assert "819,200 B" in drawn and "S = 1,000" in drawn and "L = 40" in drawn
    assert "819,200" in p.table and "819,200 bytes" in p.alt
    assert p.narrow.get_size_inches()[0] == pytest.approx(diagrams.NARROW_IN)
    assert min_text_px(p.fig) >= 11 and min_text_px(p.narrow) >= 11


def test_roofline_diagram_ridge_is_peak_over_bandwidth():
    p = diagrams.roofline_diagram(H100, BF16, [("decode", 1.0), ("prefill", 2000.0)])
    assert p.data["ridge"] == pytest.approx(989.4e12 / 3.35e12, rel=1e-3)
    assert "decode: 1.0 FLOP/byte, memory-bound" in p.table
    assert "prefill: 2,000.0 FLOP/byte, compute-bound" in p.table


def test_request_timeline_adds_queue_prefill_and_steps():
    from inferlab.core.latency import decode_step_time_s, prefill_time_s
    tl = diagrams.request_timeline_times(L13, H100, BF16, prompt_len=512, output_tokens=4, queue_s=0.01)
    assert tl.ttft_s == pytest.approx(0.01 + prefill_time_s(L13, H100, 512))
    assert len(tl.step_s) == 3 and len(tl.token_times_s) == 4
    assert tl.step_s[2] == pytest.approx(decode_step_time_s(L13, H100, 515, 1))
    assert tl.e2e_s == pytest.approx(tl.ttft_s + sum(tl.step_s))
    with pytest.raises(ValueError, match="queue_s"):
        diagrams.request_timeline_times(L13, H100, BF16, queue_s=-1.0)


LENGTHS = [5, 2, 8, 3, 6, 2, 4, 7]


def test_static_schedule_waits_for_the_longest_of_each_batch():
    s = diagrams.static_schedule(LENGTHS, 4)
    # batch 1 (5, 2, 8, 3) ends at step 8; batch 2 (6, 2, 4, 7) runs steps 8..15
    assert diagrams.schedule_steps(s) == 8 + 7
    assert [(x.slot, x.start, x.end) for x in s[4:]] == [(0, 8, 14), (1, 8, 10), (2, 8, 12), (3, 8, 15)]
    assert diagrams.slot_utilisation(s, 4) == pytest.approx(37 / 60)


def test_continuous_schedule_refills_a_slot_as_soon_as_it_frees():
    s = diagrams.continuous_schedule(LENGTHS, 4)
    # by hand: R5 takes slot 2 (free at 2), R6 slot 4 (at 3), R7 slot 1 (at 5), R8 slot 4 (at 5) -> 12
    assert [(x.slot, x.start, x.end) for x in s[4:]] == [(1, 2, 8), (3, 3, 5), (0, 5, 9), (3, 5, 12)]
    assert diagrams.schedule_steps(s) == 12
    assert diagrams.slot_utilisation(s, 4) == pytest.approx(37 / 48)


def test_batching_timeline_numbers_and_bad_input():
    from inferlab.core.latency import decode_step_time_s
    p = diagrams.batching_timeline(L13, H100, LENGTHS, slots=4, context_len=1024)
    assert p.data["step_s"] == pytest.approx(decode_step_time_s(L13, H100, 1024, 4))
    assert "static: 15 steps" in p.table and "continuous: 12 steps" in p.table
    with pytest.raises(ValueError, match="slots"):
        diagrams.batching_timeline(L13, H100, LENGTHS, slots=0)
    with pytest.raises(ValueError, match="output_lens"):
        diagrams.static_schedule([], 4)
    with pytest.raises(TypeError):
        diagrams.kv_cache_diagram("llama-2-13b")

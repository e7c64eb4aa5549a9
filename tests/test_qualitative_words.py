"""Qualitative words from numbers (inferlab.base.qualitative_words) and the serving lab's metrics table."""
import pytest

from inferlab.serving import SLO
from inferlab.serving.definitions import metrics_table
from inferlab.core.specs import BF16, get_accelerator, get_model
from inferlab.base.qualitative_words import LARGE_CHANGE, SMALL_CHANGE, ranking, size_of_change

pytestmark = pytest.mark.core


def test_size_of_change_by_its_thresholds():
    assert (SMALL_CHANGE, LARGE_CHANGE) == (0.10, 0.30)
    # the chunked-prefill TTFT costs the issue quotes: +18 %, +32 %, +46 % are not "a little"
    assert [size_of_change(x) for x in (0.18, 0.32, 0.46)] == ["moderate", "large", "large"]
    assert size_of_change(0.10) == "small" and size_of_change(-0.05) == "small"
    assert size_of_change(0.30) == "moderate" and size_of_change(-0.31) == "large"
    with pytest.raises(ValueError, match="relative must be a finite number"):
        size_of_change(float("nan"))


def test_best_only_when_the_margin_beats_the_uncertainty():
    # 54 against 50 requests/s is 8 % apart; at ±5 % each the intervals [51.3, 56.7] and [47.5, 52.5]
    # overlap: tied. 60 against 50: [57, 63] and [47.5, 52.5] do not: best.
    tied = ranking({"TP = 2": 54.0, "one GPU": 50.0, "TP = 4": 30.0}, 0.05)
    assert (tied.leader, tied.runner_up, tied.decided) == ("TP = 2", "one GPU", False)
    assert tied.margin == pytest.approx(0.08)
    assert tied.sentence() == "TP = 2 and one GPU are tied within their uncertainty (8% apart; each value ±5%)"
    best = ranking({"a": 50.0, "b": 60.0}, 0.05)
    assert best.decided and best.sentence() == "b is best, 20% ahead of a (each value ±5%)"
    # the boundary: (1 + m)(1 - u) > 1 + u  <=>  m > 2u / (1 - u) = 0.10526 at u = 5 %
    assert not ranking({"a": 1.105, "b": 1.0}, 0.05).decided
    assert ranking({"a": 1.106, "b": 1.0}, 0.05).decided
    assert ranking({"only": 3.0}, 0.05).decided
    zero = ranking({"a": 2.0, "b": 0.0}, 0.05)  # a deployment that meets the SLO at no rate
    assert zero.decided and zero.sentence() == "a is best; b, the next, scores zero"
    with pytest.raises(ValueError, match="rel_uncertainty"):
        ranking({"a": 1.0, "b": 2.0}, -0.1)
    with pytest.raises(ValueError, match="value of 'b'"):
        ranking({"a": 1.0, "b": float("nan")}, 0.05)


def test_metrics_table_states_every_definition_with_its_values():
    text = metrics_table(SLO(ttft_s=0.5, tpot_s=0.05), static_timeout_s=0.5, memory_utilization=0.9,
                         model=get_model("llama-2-13b"), accelerator=get_accelerator("h100-sxm"),
                         precision=BF16, context_tokens=1000)
    for name in ("| TTFT |", "| ITL |", "| TPOT |", "| SLO |", "| goodput |", "| static batch timeout |",
                 "| KV pool |", "vLLM"):
        assert name in text, name
    assert "TTFT ≤ 500 ms and TPOT ≤ 50 ms" in text and "0.5 s after" in text
    # KV pool by hand: 0.9 x 80e9 - 26.031e9 weights = 45.969e9 bytes; / 819,200 bytes per token
    # = 56,114 tokens, in whole 16-token blocks (3,507) 56,112; 56 sequences of 1,000. All memory (u = 1):
    # (80e9 - 26.03e9) / 819.2e6 = 65.9 -> 65, the B_max of 15.1.2.
    assert "56,112 tokens, 56 sequences of 1,000" in text and "(u = 1): 65" in text


def test_metrics_table_sizes_the_kv_pool_for_the_scenarios_tp():
    # Llama-2 70B does not fit one H100 (138 GB of weights): the lab runs it at TP = 2, and the table's
    # pool is that replica's. By hand, per device: weights (68,976,648,192 params x 2 bytes) / 2, plus
    # the 161 RMSNorm vectors of 8,192 (2,637,824 bytes) that every device keeps whole:
    # 68,977,967,104 bytes; 0.9 x 80e9 - that = 3,022,032,896 bytes; a 16-token block holds 16 x 80
    # layers x 2 (K, V) x 4 of the 8 KV heads x 128 x 2 bytes = 2,621,440 bytes: 1,152 blocks =
    # 18,432 tokens. All memory (u = 1): 11,022,032,896 / (1,000 x 163,840) = 67.3 -> 67.
    text = metrics_table(SLO(ttft_s=0.5, tpot_s=0.05), static_timeout_s=0.5, memory_utilization=0.9,
                         model=get_model("llama-2-70b"), accelerator=get_accelerator("h100-sxm"),
                         precision=BF16, context_tokens=1000, tp=2)
    assert "18,432 tokens, 18 sequences of 1,000" in text and "(u = 1): 67" in text
    assert "TP = 2" in text

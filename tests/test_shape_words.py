"""Shape words typed into captions and takeaways hold in every scenario the tests run (issue 26).

A caption is a fixed sentence (the book converter reads it from a comment), so a size word in it
must describe a shape that holds for the default scenario and for the What-if scenarios that
tests/test_reader_notebooks.py re-runs (Llama-3-8B on an H200, Llama-2-70B on one H100), all bf16.
Scenario-dependent words are rendered under the figures (inferlab.base.qualitative_words) instead. The
thresholds are inferlab.base.qualitative_words's: "small" is at most SMALL_CHANGE, "large" beyond LARGE_CHANGE.
"""
import pytest

from inferlab.core import latency, memory
from inferlab.core.specs import get_accelerator, get_model
from inferlab.base.qualitative_words import LARGE_CHANGE, SMALL_CHANGE

SCENARIOS = [("llama-2-13b", "h100-sxm"), ("llama-3-8b", "h200"), ("llama-2-70b", "h100-sxm")]


def _floor_tokens(model, gpu):
    """S at which 2PS/peak equals the weight read M/BW: S* = M * peak / (2 P BW)."""
    m, g = get_model(model), get_accelerator(gpu)
    return memory.weight_bytes(m) * g.peak_flops_per_s["bf16"] / (2 * m.n_matmul_params * g.hbm_bytes_per_s)


def _attention_share(model, gpu, s):
    m, g = get_model(model), get_accelerator(gpu)
    rule = latency.ttft_rule_s(m.n_matmul_params, s, g, "bf16", 1)
    return 1 - rule / latency.prefill_time_s(m, g, s, 1, beyond_context=True)


@pytest.mark.parametrize("model,gpu", SCENARIOS)
def test_15_1_1_prefill_leaves_the_weight_floor_at_a_few_hundred_tokens(model, gpu):
    # captions of fig-15-1-1-roofline and fig-15-1-1-ttft-vs-prompt: "a few hundred tokens"
    assert 100 <= _floor_tokens(model, gpu) <= 1000


@pytest.mark.parametrize("model,gpu", SCENARIOS)
def test_15_1_1_attention_bends_ttft_only_at_tens_of_thousands_of_tokens(model, gpu):
    # caption of fig-15-1-1-ttft-vs-prompt: linear from a few hundred tokens, attention bending the
    # line above tens of thousands: a small share at 2k tokens, more than a small one at 32k
    assert _attention_share(model, gpu, 2048) <= SMALL_CHANGE
    assert _attention_share(model, gpu, 32768) > SMALL_CHANGE


def test_the_thresholds_are_the_stated_ones():
    assert (SMALL_CHANGE, LARGE_CHANGE) == (0.10, 0.30)

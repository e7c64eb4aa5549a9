"""Sentence-level statements (issue 26, item 4): a sentence whose headline holds is split into its
specific claims (growth orders, per-step costs, quantifiers), each with its own experiment, so a
sound headline does not carry a wrong specific claim with it."""
import math

import pytest

from inferlab.claims.experiments import chunked_kv_memory, growth_order, tp_improves
from inferlab.claims.statements import evaluate_statements, load_statements
from inferlab.core.context import beyond_context
from inferlab.core.specs import get_model

pytestmark = pytest.mark.claims


@pytest.fixture(scope="module")
def verdicts():
    return {e.id: e for e in evaluate_statements(load_statements())}


def test_a_sound_headline_and_its_specific_claim_get_their_own_verdicts(verdicts):
    # line 19: caching K and V pays (headline, consistent), but "O(S²) FLOPs per output token
    # without a cache" holds only far beyond the model's context: per token the recompute is a
    # forward pass, 2·P·S of matrix products before attention's S² term takes over.
    assert verdicts["15.1.1-s7"].line == verdicts["15.1.1-s31"].line  # one sentence, two entries
    assert verdicts["15.1.1-s7"].verdict == "consistent"
    assert verdicts["15.1.1-s31"].verdict == "depends"
    assert "S=131072" in verdicts["15.1.1-s31"].depends_on.split("holds for")[1].split("; not for")[0]
    # the per-step costs and the other specific claims of lines 19, 61, 93, 135, 165, 195, 203
    expected = {"15.1.1-s32": "consistent", "15.1.1-s33": "consistent", "15.1.1-s34": "consistent",
                "15.1.2-s26": "consistent", "15.1.2-s27": "consistent", "15.1.2-s28": "depends",
                "15.2.1-s31": "consistent", "15.2.1-s32": "consistent", "15.2.1-s33": "consistent",
                "15.2.1-s34": "consistent"}
    assert {k: verdicts[k].verdict for k in expected} == expected


def test_growth_order_by_hand():
    m = get_model("llama-2-13b")
    # F(S) ≈ 2·P·S·(1 + S/c) with c = P/(L·d): the S² attention term equals the linear one at S = c
    c = m.n_matmul_params / (40 * 5120)
    out = growth_order("recompute", (1024,), expected=2)
    assert out.values["crossover"] == pytest.approx(c)
    # k = log2(2 (1 + 2S/c) / (1 + S/c)): 1.023 at S = 1,024 (linear), 1.745 at S = 131,072
    k = lambda s: math.log2(2 * (1 + 2 * s / c) / (1 + s / c))
    assert k(1024) == pytest.approx(1.023, abs=0.001) and k(131072) == pytest.approx(1.745, abs=0.002)
    assert "S^1.02" in out.cases[0].detail and not out.cases[0].holds
    with beyond_context():
        far = growth_order("recompute", (131072,), expected=2).cases[0]
    assert far.holds and "S^1.75" in far.detail
    # K and V projections, and a cached step's attention: exactly linear (exponent 1.00)
    for q in ("kv_projection", "cached_attention_flops", "cached_attention_bytes"):
        case = growth_order(q, (1024,), expected=1).cases[0]
        assert case.holds and "S^1.00" in case.detail, q
        assert not growth_order(q, (1024,), expected=2).cases[0].holds
    with pytest.raises(ValueError, match="quantity must be one of"):
        growth_order("nonsense", (1024,))


def test_chunked_kv_memory_and_tp_improves_by_hand():
    # 10,000 tokens in chunks of 512: 19 full chunks + 272 = 10,000 tokens, ceil(10,000/16) = 625 blocks
    case = chunked_kv_memory((10_000,), 512).cases[0]
    assert case.holds and "20 chunks store 10,000 tokens in 625 blocks" in case.detail
    # with no all-reduce cost, K GPUs read 1/K of the weights each: faster at every K
    assert all(c.holds for c in tp_improves("decode", (2, 4), allreduce_latency_s=0.0).cases)
    # with a 10 ms all-reduce (absurdly slow link) splitting the model never pays
    assert not any(c.holds for c in tp_improves("decode", (2, 4), allreduce_latency_s=0.01).cases)

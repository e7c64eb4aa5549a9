"""A mixture of experts' decode physics: the weight bytes a step reads grow with the distinct
experts its tokens touch, and the crossover batch B* balances that read against the KV cache.
Expected values worked by hand from the shipped Mixtral 8x7B config (32 layers, d 4096, 8 experts
of 14,336, top 2, 46,702,792,704 parameters)."""
import math

import numpy as np
import pytest

from inferlab.core.latency import kv_crossover_batch
from inferlab.core.memory import kv_cache_bytes, weight_bytes, weight_bytes_read
from inferlab.core.moe import expected_experts, tokens_touching
from inferlab.core.specs import get_model, resolve_model

pytestmark = pytest.mark.core

MIXTRAL_BYTES = 46_702_792_704 * 2          # bf16, every expert
EXPERT_BYTES = 3 * 4096 * 14_336 * 2         # gate, up and down of one expert, bf16


@pytest.fixture(scope="module")
def mixtral():
    return resolve_model("mixtral-8x7b-v0.1")


def test_weight_read_of_a_dense_model_is_all_its_weights():
    m = get_model("llama-2-13b")
    assert weight_bytes_read(m, np.array([1, 7, 1000])) == pytest.approx([weight_bytes(m)] * 3, rel=0)


def test_mixtral_reads_its_active_experts_at_one_token_and_three_and_a_half_at_two(mixtral):
    # one token: 2 of 8 experts in each of 32 layers, so 6 experts' bytes per layer are not read
    assert weight_bytes_read(mixtral, 1) == pytest.approx(MIXTRAL_BYTES - 32 * 6 * EXPERT_BYTES, rel=1e-12)
    assert weight_bytes_read(mixtral, 1) == pytest.approx(mixtral.n_params_active * 2, rel=1e-12)
    # two tokens: 8 (1 - (6/8)^2) = 3.5 experts expected per layer, 4.5 untouched
    assert weight_bytes_read(mixtral, 2) == pytest.approx(MIXTRAL_BYTES - 32 * 4.5 * EXPERT_BYTES, rel=1e-12)
    assert weight_bytes_read(mixtral, 10_000) == pytest.approx(MIXTRAL_BYTES, rel=1e-12)
    with pytest.raises(ValueError, match="tokens"):
        weight_bytes_read(mixtral, -1)


def test_tokens_touching_95_percent_of_mixtrals_experts():
    t = tokens_touching(8, 2, 0.95)
    assert t == pytest.approx(math.log(0.05) / math.log(0.75), rel=1e-12)      # 10.41 tokens
    assert expected_experts(8, 2, t) == pytest.approx(0.95 * 8, rel=1e-12)
    assert tokens_touching(4, 4, 0.5) == 1.0                                    # every token uses every expert
    with pytest.raises(ValueError, match="share"):
        tokens_touching(8, 2, 1.0)


def test_crossover_batch_of_a_mixture_of_experts_balances_its_own_weight_read(mixtral):
    # At 32,768 tokens one sequence holds 2 * 32 * 8 * 128 * 2 * 32,768 = 4,294,967,296 bytes of cache.
    c_kv = 2 * 32 * 8 * 128 * 2 * 32_768
    assert kv_cache_bytes(mixtral, 32_768, 1) == c_kv
    b = kv_crossover_batch(mixtral, 32_768)
    assert weight_bytes_read(mixtral, b) == pytest.approx(b * c_kv, rel=1e-9)
    assert b < MIXTRAL_BYTES / c_kv                       # the all-expert shortcut, 21.75, is too high
    assert b == pytest.approx(21.7, abs=0.1)              # ~8 (1 - 0.75^21.7) = 7.998 experts touched
    dense = get_model("llama-2-13b")
    assert kv_crossover_batch(dense, 1024) == pytest.approx(weight_bytes(dense) / kv_cache_bytes(dense, 1024, 1))

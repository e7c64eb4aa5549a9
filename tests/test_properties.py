"""Properties that hold for every architecture, length and batch (hypothesis)."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from inferlab import ModelConfig, Precision, get_accelerator, get_model, list_accelerators, list_models
from inferlab.core.costs import (attention_pairs, chunked_prefill_costs, decode_costs, forward_costs,
                            linear_cost, prefill_costs)
from inferlab.core.latency import (decode_step_time_s, kv_crossover_batch, prefill_time_s,
                              throughput_tokens_per_s)
from inferlab.core.memory import (kv_cache_bytes, max_batch, memory_budget, weight_bytes)
from inferlab.core.parallel import tp_shard
from inferlab.core.roofline import pass_time_s, roofline_time_s

pytestmark = pytest.mark.core

# No wall-clock deadline or speed check: a busy machine must not fail a property (tests pass with every core busy).
FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
KV_DTYPES = ["fp32", "bf16", "fp8", "int8", "int4"]


@st.composite
def models(draw):
    """A random Llama-style architecture with n_kv_heads dividing n_heads."""
    n_kv = draw(st.sampled_from([1, 2, 4, 8]))
    group = draw(st.sampled_from([1, 2, 4, 8]))
    head_dim = draw(st.sampled_from([32, 64, 128]))
    return ModelConfig(
        name="random", n_heads=n_kv * group, n_kv_heads=n_kv, head_dim=head_dim,
        d_model=draw(st.sampled_from([n_kv * group * head_dim, 2048, 4096])),
        n_layers=draw(st.integers(1, 48)), d_ff=draw(st.sampled_from([1024, 4096, 11008, 14336])),
        gated_mlp=draw(st.booleans()), vocab_size=draw(st.integers(1000, 130_000)))


any_model = st.one_of(st.sampled_from(list_models()).map(get_model), models())
# KV bytes grow linearly with length only where every layer attends to the whole context with per-head K and V
full_attention_model = any_model.filter(lambda m: m.full_attention_only)


@st.composite
def windowed_models(draw):
    """A random architecture whose layers are a mix of full, sliding-window and chunked attention."""
    base = draw(models())
    kinds = tuple(draw(st.sampled_from(["full", "sliding", "chunked"])) for _ in range(base.n_layers))
    return base.with_(layer_types=kinds, sliding_window=draw(st.integers(1, 8192)),
                      attention_chunk=draw(st.integers(1, 8192)))
accelerators = st.sampled_from(list_accelerators()).map(get_accelerator)
lengths = st.integers(1, 200_000)
batches = st.integers(1, 1024)


@FAST
@given(windowed_models(), lengths, batches)
def test_windowed_kv_bytes_never_exceed_the_full_count_and_stop_growing(model, S, B):
    full = kv_cache_bytes(model.with_(layer_types=()), S, B)
    held = kv_cache_bytes(model, S, B)
    assert held <= full * (1 + 1e-12)
    if "full" not in model.layer_kinds:   # every layer bounded: past the longest span, no growth
        span = max(model.sliding_window, model.attention_chunk)
        assert kv_cache_bytes(model, S + span, B) == pytest.approx(kv_cache_bytes(model, max(S, span), B))


@FAST
@given(full_attention_model, lengths, batches, st.integers(2, 5), st.sampled_from(KV_DTYPES))
def test_kv_bytes_are_linear_in_length_and_batch(model, S, B, k, kv):
    p = Precision(kv=kv)
    one = kv_cache_bytes(model, S, B, p)
    assert kv_cache_bytes(model, k * S, B, p) == pytest.approx(k * one, rel=1e-12)
    assert kv_cache_bytes(model, S, k * B, p) == pytest.approx(k * one, rel=1e-12)
    assert kv_cache_bytes(model, S + 1, B, p) - one == pytest.approx(
        kv_cache_bytes(model, 1, B, p), rel=1e-9)
    assert one == pytest.approx(2 * model.n_layers * model.n_kv_heads * model.head_dim * S * B
                                * {"fp32": 4, "bf16": 2, "fp8": 1, "int8": 1, "int4": 0.5}[kv], rel=1e-12)


@FAST
@given(models(), st.integers(1, 100_000), batches)
def test_decode_attention_intensity_is_heads_over_kv_heads(model, S, B):
    # Counting KV bytes alone, exactly N/N_kv (bf16); with Q and O as well, N*S/(N + S*N_kv).
    attn = decode_costs(model, B, S).attention
    h, kv = model.n_heads, model.n_kv_heads
    assert attn.flops / attn.kv_bytes == pytest.approx(h / kv, rel=1e-12)
    assert attn.intensity == pytest.approx(h * S / (h + S * kv), rel=1e-12)


@FAST
@given(any_model, accelerators, st.integers(1, 32_768))
def test_throughput_rises_with_batch_and_is_concave(model, acc, S):
    # Step time is a sum of maxima of affine functions of B with non-negative intercepts, so
    # B / step(B) is non-decreasing and concave (while B stays below the vocabulary size).
    B = np.arange(1, 513)
    thr = throughput_tokens_per_s(model, acc, S, B)
    step = np.diff(thr)
    assert np.all(step >= -1e-9 * thr[1:])
    assert np.all(np.diff(step) <= 1e-9 * thr[2:])


@FAST
@given(any_model, accelerators, st.integers(1, 32_768), batches)
def test_step_time_grows_with_context_and_batch(model, acc, S, B):
    t = decode_step_time_s(model, acc, S, B)
    assert decode_step_time_s(model, acc, S + 1, B) >= t
    assert decode_step_time_s(model, acc, S, B + 1) >= t
    assert prefill_time_s(model, acc, S + 1, B) >= prefill_time_s(model, acc, S, B)


@FAST
@given(any_model, st.integers(1, 4096), st.integers(1, 4096))
def test_chunked_prefill_flops_match_one_pass_and_bytes_do_not_shrink(model, S, C):
    one = prefill_costs(model, 1, S).total
    ch = chunked_prefill_costs(model, S, C)
    assert ch.n_chunks == -(-S // C)
    assert int(np.sum(ch.q_len)) == S
    assert ch.total.flops == pytest.approx(one.flops, rel=1e-9)
    assert ch.total.bytes >= one.bytes * (1 - 1e-12)
    assert ch.total.kv_bytes >= one.kv_bytes * (1 - 1e-12)


@FAST
@given(st.integers(1, 10_000), st.integers(0, 10_000))
def test_causal_pairs_never_exceed_dense_pairs(q, past):
    assert attention_pairs(q, past, True) <= attention_pairs(q, past, False)
    assert attention_pairs(q, past, False) - attention_pairs(q, past, True) == q * (q - 1) / 2


@FAST
@given(st.integers(1, 100_000), st.integers(1, 50_000), st.integers(1, 50_000))
def test_linear_intensity_is_below_every_dimension(T, a, b):
    c = linear_cost(T, a, b)
    assert c.intensity <= min(T, a, b) * (1 + 1e-12)
    assert c.intensity == pytest.approx(1 / (1 / T + 1 / a + 1 / b), rel=1e-12)


@FAST
@given(any_model, accelerators, st.integers(1, 8192), st.integers(1, 64), st.integers(0, 4096))
def test_per_operator_time_between_overlap_bounds(model, acc, S, B, past):
    costs = forward_costs(model, B, S, past)
    low = pass_time_s(costs, acc, overlap="whole_model")
    mid = pass_time_s(costs, acc)
    high = pass_time_s(costs, acc, overlap="none")
    assert low * (1 - 1e-12) <= mid <= high * (1 + 1e-12)


@FAST
@given(st.floats(0, 1e18), st.floats(0, 1e15), accelerators, st.floats(0.05, 1), st.floats(0.05, 1))
def test_roofline_time_bounds(flops, nbytes, acc, mfu, mbu):
    from inferlab import get_accelerator
    a = get_accelerator(acc)
    t = roofline_time_s(flops, nbytes, acc, mfu=mfu, mbu=mbu)
    compute, memory = flops / (mfu * a.peak("bf16")), nbytes / (mbu * a.hbm_bytes_per_s)
    assert t == pytest.approx(max(compute, memory), rel=1e-12, abs=1e-300)
    assert roofline_time_s(flops, nbytes, acc, mfu=mfu, mbu=mbu, overlap="none") >= t


@FAST
@given(st.sampled_from(list_models()).map(get_model), accelerators, st.integers(1, 300_000),
       st.sampled_from(["bf16", "int8", "int4"]), st.sampled_from(["bf16", "int8", "fp8"]))
def test_max_batch_fits_and_one_more_does_not(name, acc, S, wdt, kvdt):
    p = Precision(weights=wdt, kv=kvdt)
    try:
        b = max_batch(name, acc, S, p, allow_zero=True)
    except ValueError:  # weights alone do not fit: reported as such, not as a batch
        assert not memory_budget(name, acc, 1, 1, p).fits
        return
    assert isinstance(b, int) and b >= 0
    if b:
        assert memory_budget(name, acc, b, S, p).fits
    assert not memory_budget(name, acc, b + 1, S, p).fits


@FAST
@given(st.sampled_from(list_models()), st.sampled_from([2, 4, 8]))
def test_tp_shards_weights_about_k_fold(name, K):
    model = get_model(name)
    try:
        tp_shard(model, K)
    except ValueError:
        return
    per_device = weight_bytes(model, tp=K)
    assert weight_bytes(model) / K <= per_device <= weight_bytes(model) / K * 1.01


@FAST
@given(any_model, st.integers(1, 100_000))
def test_kv_crossover_batch_balances_weights_and_kv(model, S):
    b_star = kv_crossover_batch(model, S)
    assert b_star * kv_cache_bytes(model, S) == pytest.approx(weight_bytes(model), rel=1e-12)


@FAST
@given(st.sampled_from(list_models()).map(get_model), accelerators,
       st.lists(st.integers(1, 1024), min_size=1, max_size=5),
       st.lists(st.integers(1, 65_536), min_size=1, max_size=5))
def test_vectorised_equals_scalar(name, acc, Bs, Ss):
    B = np.array(Bs)[:, None]
    S = np.array(Ss)[None, :]
    grid = decode_step_time_s(name, acc, S, B)
    for i, b in enumerate(Bs):
        for j, s in enumerate(Ss):
            assert grid[i, j] == pytest.approx(decode_step_time_s(name, acc, s, b), rel=1e-12)

"""Tensor parallelism (inferlab.core.parallel): shards, per-device memory and all-reduce time."""
import pytest

from inferlab.core.deployment import Deployment
from inferlab import get_model
from inferlab.core.latency import decode_step_time_s, prefill_time_s
from inferlab.core.memory import kv_cache_bytes, kv_cache_bytes_per_token, memory_budget, weight_bytes
from inferlab.core.parallel import allreduce_time_s, check_tp, tp_communication_time_s, tp_shard
from inferlab.core.specs import get_accelerator

pytestmark = pytest.mark.core

H100_SXM = get_accelerator("h100-sxm")
LLAMA_2_70B = get_model("llama-2-70b")
LLAMA_3_8B = get_model("llama-3-8b")

BOOK = get_model("llama-2-13b-book")
d, f, L, N, H, V = 5120, 20480, 40, 40, 128, 32000
# The bus bandwidth of a measured 8-GPU H100 NVSwitch node (the spec's, fitted on Vidur's profile:
# tests/test_kernels.py checks it against the profile); the datasheet's NVLink is 450e9 per direction.
LINK = 323.8e9
LATENCY = 22.59e-6  # that node's measured start-up latency per all-reduce


def test_shard_splits_heads_mlp_and_vocabulary():
    s = tp_shard(BOOK, 2)
    assert (s.n_heads, s.n_kv_heads, s.d_ff, s.vocab_size) == (20, 20, 10240, 16000)
    assert (s.d_model, s.n_layers, s.head_dim) == (d, L, H)
    assert tp_shard(BOOK, 1) == get_model(BOOK)
    assert tp_shard(get_model(BOOK).with_(vocab_size=97), 2).vocab_size == 49  # ceil(97 / 2)


def test_kv_heads_are_replicated_beyond_their_count():
    # Llama-3-8B has 8 KV heads: at tp = 16 each device holds 2 query heads and one KV head.
    s = tp_shard(LLAMA_3_8B, 16)
    assert (s.n_heads, s.n_kv_heads) == (2, 1)
    assert kv_cache_bytes_per_token(LLAMA_3_8B, tp=16) == 2 * 32 * 1 * 128 * 2
    assert kv_cache_bytes_per_token(LLAMA_3_8B, tp=8) == 2 * 32 * 1 * 128 * 2
    assert kv_cache_bytes_per_token(LLAMA_3_8B, tp=4) == 2 * 32 * 2 * 128 * 2


def test_weights_per_device_are_one_over_K_plus_replicated_norms():
    # Every matrix is split K ways; the 2L + 1 RMSNorm vectors (d each) are replicated.
    full = L * (4 * d * d + 2 * d * f + 2 * d) + 2 * V * d + d
    norms = (2 * L + 1) * d
    for K in (2, 4, 8):
        assert K * weight_bytes(BOOK, tp=K) == 2 * (full + (K - 1) * norms)
        assert weight_bytes(BOOK, tp=K) == pytest.approx(2 * full / K, rel=1e-3)


def test_kv_per_device_is_one_over_K():
    for K in (2, 4, 8):
        assert kv_cache_bytes(BOOK, 1024, 8, tp=K) == 2 * L * (N // K) * H * 1024 * 8 * 2


def test_check_tp_rejects_uneven_splits():
    with pytest.raises(ValueError, match=r"tp must divide n_heads=40 and d_ff=20480.*got tp=3"):
        check_tp(get_model(BOOK), 3)
    odd = get_model(BOOK).with_(n_heads=12, n_kv_heads=4, d_ff=12288)
    with pytest.raises(ValueError, match=r"tp=6 and n_kv_heads=4"):
        check_tp(odd, 6)
    assert check_tp(odd, 4) == 4 and check_tp(odd, 12) == 12


def test_ring_allreduce_time():
    # Each device sends and receives 2(K-1)/K of the message over its link.
    msg = 1e9
    assert allreduce_time_s(msg, 1, H100_SXM) == 0
    assert allreduce_time_s(msg, 2, H100_SXM, latency_s=0) == pytest.approx(2 * (1 / 2) * msg / LINK)
    assert allreduce_time_s(msg, 8, H100_SXM, latency_s=0) == pytest.approx(2 * (7 / 8) * msg / LINK)
    # The default adds the node's measured start-up latency per call.
    assert allreduce_time_s(msg, 8, H100_SXM) == pytest.approx(2 * (7 / 8) * msg / LINK + LATENCY)
    assert allreduce_time_s(msg, 8, H100_SXM, latency_s=5e-6) == pytest.approx(
        2 * (7 / 8) * msg / LINK + 5e-6)


def test_tp_communication_is_two_allreduces_per_layer():
    # Decode step at B = 1 on two GPUs: 40 layers x 2 all-reduces of 1 x 5120 bf16 activations.
    message = 1 * d * 2
    expected = L * 2 * (2 * (1 / 2) * message / LINK)
    assert tp_communication_time_s(BOOK, 1, 2, H100_SXM, latency_s=0) == pytest.approx(expected)
    # With the node's measured 22.59 us per call: 80 calls add 1.81 ms, ~700x the bandwidth term
    # (80 * 10240 B / 323.8e9 B/s = 2.5 us).
    assert tp_communication_time_s(BOOK, 1, 2, H100_SXM) == pytest.approx(expected + 80 * LATENCY)
    assert tp_communication_time_s(BOOK, 1, 1, H100_SXM) == 0


def test_allreduce_term_is_zero_when_off_and_positive_otherwise():
    on = decode_step_time_s(BOOK, Deployment(H100_SXM, tp=4), 1024, 8)
    off = decode_step_time_s(BOOK, Deployment(H100_SXM, tp=4, allreduce=False), 1024, 8)
    assert on - off == pytest.approx(tp_communication_time_s(BOOK, 8, 4, H100_SXM), rel=1e-9)
    assert on > off
    assert decode_step_time_s(BOOK, H100_SXM, 1024, 8) == decode_step_time_s(
        BOOK, Deployment(H100_SXM, allreduce=False), 1024, 8)


def test_tp_cuts_compute_bound_prefill_about_K_fold():
    one = prefill_time_s(BOOK, H100_SXM, 4096)
    for K in (2, 4):
        assert prefill_time_s(BOOK, Deployment(H100_SXM, tp=K, allreduce=False), 4096) == pytest.approx(
            one / K, rel=0.02)


def test_book_70b_tp2_memory_budget():
    # Book (15.2.2): Llama-2 70B, B = 32, S = 2048 on two H100s. It writes the KV cache with
    # 64 heads ("~68 GB"; 64 heads would give 172 GB). Llama-2 70B has 8 KV heads:
    # 2*80*8*128*2048*2*32 = 21.5 GB in all, 10.7 GB per GPU (4 KV heads each).
    kv_total = 2 * 80 * 8 * 128 * 2048 * 2 * 32
    assert kv_total == 21_474_836_480
    b = memory_budget(LLAMA_2_70B, H100_SXM, 32, 2048, tp=2)
    assert b.kv_bytes == kv_total / 2
    d70, f70 = 8192, 28672
    shard = 80 * (2 * d70 * 4096 + 2 * d70 * 512 + 3 * d70 * f70 // 2 + 2 * d70) + 2 * 16000 * d70 + d70
    assert b.weight_bytes == 2 * shard  # ~ 69 GB, the book's "70 GB each"
    assert b.weight_bytes / 1e9 == pytest.approx(70, rel=0.02)
    # 69.0 + 10.7 = 79.7 GB: it fits, by 0.3 GB (no room for activations); B = 33 does not.
    assert b.fits and b.free_bytes == 80e9 - 2 * shard - kv_total / 2
    assert not memory_budget(LLAMA_2_70B, H100_SXM, 33, 2048, tp=2).fits


def test_prefill_allreduce_moves_every_prompt_token():
    # Prefill of B = 2 prompts of S = 512 on two GPUs: 40 layers x 2 all-reduces of B*S x d bf16.
    B, S = 2, 512
    expected = L * 2 * (2 * (1 / 2) * B * S * d * 2 / LINK)
    on = prefill_time_s(BOOK, Deployment(H100_SXM, tp=2, allreduce_latency_s=0), S, B)
    off = prefill_time_s(BOOK, Deployment(H100_SXM, tp=2, allreduce=False), S, B)
    assert on - off == pytest.approx(expected, rel=1e-9)

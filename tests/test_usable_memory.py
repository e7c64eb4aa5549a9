"""core.usable_memory: how many bytes a deployment may use, one definition for the command lines, the
simulator's KV pool and the pages. Expected values by hand from the datasheet (80 GB), the capacity an
H100 SXM reports (81,559 MiB = 85,520,809,984 bytes) and the engines' default fractions."""
from __future__ import annotations

import subprocess
import sys

import pytest

from inferlab.core.memory import kv_cache_bytes_per_token, weight_bytes
from inferlab.core.specs import BF16, get_accelerator, get_model
from inferlab.core.usable_memory import BOOK, SERVING, VLLM_ON_CARD, MemoryConvention, engines, max_batch_usable
from inferlab.serving.kv import kv_capacity_blocks

H100 = get_accelerator("h100-sxm")
REPORTED = 81559 * 2**20                     # 85,520,809,984 bytes


def test_engines_are_data_with_sources():
    table = engines()
    assert table["vllm"]["fraction"] == 0.9 and table["vllm"]["of"] == "total"
    assert table["tensorrt-llm"]["fraction"] == 0.9 and table["tensorrt-llm"]["of"] == "free"
    assert all(e["source"] for e in table.values())


def test_usable_bytes_by_hand():
    assert BOOK.usable_bytes(H100) == 80e9
    assert SERVING.usable_bytes(H100) == pytest.approx(72e9)                  # 0.9 x 80e9
    assert VLLM_ON_CARD.usable_bytes(H100) == pytest.approx(0.9 * REPORTED)   # 76.97e9
    # TensorRT-LLM: the weights, then 0.9 of what is left: 26e9 + 0.9 x 54e9 = 74.6e9
    assert MemoryConvention("tensorrt-llm").usable_bytes(H100, 26e9) == pytest.approx(74.6e9)
    assert MemoryConvention("vllm", utilization=0.5).usable_bytes(H100) == pytest.approx(40e9)


def test_bad_conventions_name_their_parameter():
    with pytest.raises(ValueError, match="utilization"):
        MemoryConvention(utilization=1.5)
    with pytest.raises(ValueError, match="capacity"):
        MemoryConvention(capacity="nameplate")
    with pytest.raises(ValueError, match="reported_memory_bytes"):
        MemoryConvention(capacity="reported").usable_bytes(get_accelerator("h100-pcie"))


def test_the_simulators_pool_is_the_same_definition():
    m = get_model("llama-2-13b-book")
    per_block = kv_cache_bytes_per_token(m, BF16) * 16
    w = weight_bytes(m, BF16)
    assert kv_capacity_blocks(m, H100) == int((0.9 * 80e9 - w) // per_block)            # the default, as before
    assert kv_capacity_blocks(m, H100, memory_capacity="reported") == int((0.9 * REPORTED - w) // per_block)


def test_largest_batch_in_usable_memory_by_hand():
    m = get_model("llama-2-13b")
    per_seq = 2 * 40 * 40 * 128 * 2 * 1024              # bytes of one 1,024-token cache
    assert max_batch_usable(m, H100, 1024, BF16) == int((72e9 - m.n_params * 2) // per_seq)       # 54
    assert max_batch_usable(m, H100, 1024, BF16, convention=BOOK) == int((80e9 - m.n_params * 2) // per_seq)  # 64


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "inferlab", *args], capture_output=True, text=True)


def test_estimate_says_its_convention_and_refuses_a_bad_fraction():
    out = _cli("estimate", "--gpu-memory-utilization", "0.9", "--memory-capacity", "reported").stdout
    assert "0.9 × 85.5 GB = 77.0 GB (vLLM's gpu_memory_utilization of the capacity the card reports)" in out
    assert "the chapter's arithmetic" in _cli("estimate").stdout
    for bad in ("0", "1.5"):
        r = _cli("estimate", "--gpu-memory-utilization", bad)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--gpu-memory-utilization" in r.stderr
    r = _cli("serve", "--duration", "2", "--memory-capacity", "reported", "--gpu", "h100-pcie")
    assert r.returncode == 2 and "--memory-capacity" in r.stderr

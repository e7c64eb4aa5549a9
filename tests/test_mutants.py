"""Tests that kill the mutants a reliability pass found surviving (issue 9), each with the expected
value derived by hand in a comment. benchmarks/mutation.py runs these and the rest of the fast
suite against a hand list of mutants."""
import numpy as np
import pytest

from inferlab.core.deployment import Deployment
from inferlab.core.latency import kv_crossover_batch
from inferlab.core.parallel import check_tp
from inferlab.core.specs import get_model
from inferlab.core.specs import get_accelerator

pytestmark = pytest.mark.core

H100_SXM = get_accelerator("h100-sxm")
LLAMA_2_70B = get_model("llama-2-70b")
LLAMA_3_8B = get_model("llama-3-8b")

L2_13B = get_model("llama-2-13b")


def test_kv_crossover_batch_under_tp_counts_one_device():
    # B* = weight bytes / KV bytes per sequence, both per device. Llama-2 13B, context 1024, bf16:
    # weights 13,015,864,320 x 2 B; KV per token 2 x 40 layers x 5120 x 2 B = 819,200 B.
    # tp=1: 26,031,728,640 / (819,200 x 1024) = 31.03.
    assert kv_crossover_batch(L2_13B, 1024) == pytest.approx(26_031_728_640 / 838_860_800, rel=1e-12)
    # tp=2: each device holds half the heads (KV halves: 419,430,400 B per sequence) and half the
    # weights except the norms (2 x 40 x 5120 + 5120 = 414,720 params, replicated):
    # (13,015,864,320 - 414,720) / 2 + 414,720 = 6,508,139,520 params = 13,016,279,040 B.
    # 13,016,279,040 / 419,430,400 = 31.03: B* is (almost) unchanged by tp, but only because
    # both sides shrink; a version that ignores tp on one side is off by 2x.
    assert kv_crossover_batch(L2_13B, 1024, tp=2) == pytest.approx(13_016_279_040 / 419_430_400, rel=1e-9)
    # Llama-2 70B (8 KV heads) at tp=16: KV heads are replicated (1 per device, not 0.5) so the KV
    # per sequence stays that of tp=8, while the weights keep halving, all but the replicated K and V
    # projections (2 x 80 x 8192 x 128 = 168M params of ~4.4G per device, ~4 % of the shard, half of
    # which fails to halve: ~2 %): B* falls to just over half from tp=8 to tp=16 (a tp-blind B* would
    # not move).
    b8, b16 = kv_crossover_batch(LLAMA_2_70B, 1024, tp=8), kv_crossover_batch(LLAMA_2_70B, 1024, tp=16)
    assert 0.5 * b8 < b16 < 0.53 * b8


def test_check_tp_requires_tp_to_divide_d_ff():
    # Llama-2 7B's 32 heads with d_ff = 13828 (13828 / 8 = 1728.5): tp=8 divides the heads but not
    # d_ff, so it is refused.
    m = get_model("llama-2-7b").with_(d_ff=13828)
    with pytest.raises(ValueError, match="tp must divide n_heads=32 and d_ff=13828"):
        check_tp(m, 8)
    assert check_tp(m, 4) == 4  # 13828 / 4 = 3457


def test_check_tp_requires_tp_to_divide_n_heads():
    m = get_model("llama-2-7b").with_(n_heads=24, n_kv_heads=24)  # 24 heads: tp=16 does not divide
    with pytest.raises(ValueError, match="tp must divide n_heads=24"):
        check_tp(m, 16)


def test_group_size_is_query_heads_per_kv_head():
    # Llama-2 70B: 64 query heads share 8 KV heads -> 8 per KV head. Llama-2 13B (MHA): 1.
    assert get_model("llama-2-70b").group_size == 8
    assert get_model("llama-2-13b").group_size == 1
    assert get_model("llama-3-8b").group_size == 32 // 8


def test_copy_bandwidth_counts_read_and_write():
    from inferlab.measure.ceilings import copy_bytes_moved, matmul_flops
    # dst.copy_(src) of a 4 MB buffer reads 4 MB and writes 4 MB.
    assert copy_bytes_moved(4e6) == 8e6
    # a 1024 x 1024 product: 1024^3 multiply-adds, 2 FLOPs each.
    assert matmul_flops(1024) == 2 * 1024 ** 3


def test_efficiency_divides_by_the_median_ceiling_around_the_kernel():
    from inferlab.measure.efficiency import ceiling_around, utilisation
    # the median of two estimates is their mean: (3 + 5) / 2 = 4, in either order
    assert ceiling_around(3.0, 5.0) == 4.0 and ceiling_around(5.0, 3.0) == 4.0
    # 8 GB moved in 2 s = 4 GB/s, against ceilings of 2 and 8 GB/s measured around it: 4 / 5 = 0.8
    # (the higher alone would give 0.5, chasing a burst; the lower alone 2.0, an impossible MBU).
    assert utilisation(8e9, 2.0, 2e9, 8e9) == 0.8
    assert utilisation(8e9, 2.0, 8e9, 2e9) == 0.8


def test_exercise_tolerance_is_what_the_statement_says():
    from inferlab.exercises.core import _matches, number
    part = number("x", "a value", rel_tol=0.01)  # +-1 %
    assert _matches(part, 100.9, 100.0) and _matches(part, 99.1, 100.0)
    # 2 % off fails a 1 % tolerance (a 5x looser check, +-5 %, would pass it)
    assert not _matches(part, 102.0, 100.0) and not _matches(part, 98.0, 100.0)
    assert number("y", "default").rel_tol == 0.01


def test_context_warning_and_its_flag():
    from inferlab.core.context import ContextLengthWarning, beyond_context
    from inferlab.core.costs import prefill_costs
    from inferlab.core.latency import prefill_time_s
    from inferlab.core.memory import kv_cache_bytes
    with pytest.warns(ContextLengthWarning, match=r"4097 tokens exceed the maximum context of llama-2-13b \(4096"):
        prefill_time_s(L2_13B, H100_SXM, 4097)
    with pytest.warns(ContextLengthWarning):
        kv_cache_bytes(L2_13B, 100_000)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        prefill_time_s(L2_13B, H100_SXM, 4096)                       # at the limit: fine
        t = prefill_time_s(L2_13B, H100_SXM, 100_000, beyond_context=True)  # the book's yardstick
        with beyond_context():
            prefill_costs(L2_13B, 1, 100_000)
        kv_cache_bytes(LLAMA_3_8B, 8192)
    assert t > 0
    with pytest.raises(ValueError, match="beyond_context must be True or False; got 'yes'"):
        prefill_time_s(L2_13B, H100_SXM, 10, beyond_context="yes")


def test_default_allreduce_latency_is_the_nodes_and_zero_is_the_books_idealisation():
    from inferlab.core.latency import decode_step_time_s
    from inferlab.core.parallel import DEFAULT_ALLREDUCE_LATENCY_S
    from inferlab.core.specs import get_accelerator
    assert DEFAULT_ALLREDUCE_LATENCY_S == 8e-6
    # Decode at B=1, tp=2 on the H100 node: 40 layers x 2 all-reduces x its measured 22.59 us = 1.807 ms
    # over the idealised value (the latency alone: the bandwidth term is in both).
    real = decode_step_time_s(L2_13B, Deployment(H100_SXM, tp=2), 1024)
    ideal = decode_step_time_s(L2_13B, Deployment(H100_SXM, tp=2, allreduce_latency_s=0), 1024)
    assert real - ideal == pytest.approx(80 * 22.59e-6, rel=1e-9)
    # An accelerator whose node was never measured keeps the 8 us start-up.
    h200 = get_accelerator("h200")
    real = decode_step_time_s(L2_13B, Deployment(h200, tp=2), 1024)
    ideal = decode_step_time_s(L2_13B, Deployment(h200, tp=2, allreduce_latency_s=0), 1024)
    assert real - ideal == pytest.approx(80 * 8e-6, rel=1e-9)


def test_decode_under_tp_runs_one_devices_shard():
    from inferlab.core.latency import decode_step_time_s
    # Decode at B=1, context 1024 is memory-bound: ~ bytes read / bandwidth. One H100: the weights
    # (26.03 GB) less the embedding table (0.33 GB; one row is read) plus the KV cache (1024 x
    # 819,200 B = 0.84 GB): 26.54 GB / 3.35 TB/s = 7.92 ms. Each of two devices (communication left
    # out) reads half of each: 13.27 GB -> 3.96 ms.
    one = decode_step_time_s(L2_13B, H100_SXM, 1024)
    two = decode_step_time_s(L2_13B, Deployment(H100_SXM, tp=2, allreduce=False), 1024)
    assert one * 1e3 == pytest.approx(7.92, rel=0.01) and two * 1e3 == pytest.approx(3.96, rel=0.01)


def test_tied_embeddings_are_counted_once():
    # Llama-2 7B with its LM head tied to the embedding: 6,738,415,616 - 32000 x 4096 = 6,607,343,616.
    tied = get_model("llama-2-7b").with_(tied_embeddings=True)
    assert tied.n_params == 6_607_343_616


def test_lm_head_of_a_non_final_prefill_chunk_has_intensity_0_not_nan():
    from inferlab.core.costs import chunked_prefill_costs
    # 1000 tokens in chunks of 256: 4 chunks; only the last computes logits.
    lm = chunked_prefill_costs(L2_13B, 1000, 256).chunks.head["lm_head"].intensity
    assert list(lm[:3]) == [0.0, 0.0, 0.0] and lm[3] > 0


def test_integer_parts_use_their_absolute_tolerance():
    from inferlab.exercises.core import _matches, integer
    part = integer("b", "a batch", abs_tol=2)   # +-2 sequences
    assert _matches(part, 102, 100) and _matches(part, 98, 100) and not _matches(part, 103, 100)
    assert not _matches(integer("c", "exact"), 101, 100)


def test_a_slip_that_equals_the_answer_gives_no_hint():
    from inferlab.exercises.core import KINDS, Exercise, Mistake, number
    # Here the "slip" (forgetting a factor 1) lands on the right answer, 10: it must not be named,
    # and a wrong answer that matches no slip gets the generic hint.
    ex = Exercise("15.1.1-extest", "t", KINDS[0], 1, {"x": 10}, (number("v", "value"),),
                  solve=lambda x: x, mistakes=lambda x: [Mistake(x * 1, "you forgot nothing", "v")])
    part = ex.parts[0]
    assert "forgot nothing" not in ex._hint(part, 10.0, 10.0, ex.mistakes(10))
    slip = Exercise("15.1.1-extest2", "t", KINDS[0], 1, {"x": 10}, (number("v", "value"),),
                    solve=lambda x: x, mistakes=lambda x: [Mistake(x * 3, "tripled", "v")])
    assert slip._hint(part, 30.0, 10.0, slip.mistakes(10)) == "tripled"


@pytest.mark.slow   # four rounds of the tiny model's measurement in torch: about 20 s of CPU
def test_efficiency_rounds_continue_until_enough_clean_ones(monkeypatch):
    """Issue 22: rounds whose CPUs other processes took are not clean and do not count. Scripted
    contention (the meter is replaced): rounds 1 and 3 fully contended (all of the machine: beyond
    what 1 thread leaves spare), rounds 2 and 4 clean. With rounds=2 the loop stops after round 4
    (the second clean one), not after round 2; the medians are over rounds 2 and 4 only."""
    from inferlab.measure import efficiency

    shares = iter([1.0, 0.0, 1.0, 0.0, 0.0, 0.0])

    class Meter:  # time_fn reads the meter too: only the round loop's reading is scripted
        def others_share(self):
            import sys
            return next(shares) if sys._getframe(1).f_code.co_filename.endswith("efficiency.py") else None
    monkeypatch.setattr(efficiency._device, "CpuMeter", Meter)
    r = efficiency.measure_efficiency(device="cpu", dtype="fp32", model="tiny", rounds=2, max_rounds=6,
                                      prompt_len=16, context_len=16, threads=1)
    assert [row["clean"] for row in r["rounds"]] == [False, True, False, True]
    assert r["clean_rounds"] == 2
    assert r["mbu"] == pytest.approx(float(np.median([r["rounds"][1]["mbu"], r["rounds"][3]["mbu"]])))

"""The efficiency choice (inferlab.core.efficiency, deployment.Deployment.efficiency / step_overhead): the ideal
roofline, fixed MFU/MBU knobs and Vidur's measured kernels, through latency and the simulator's step time.

Expected values are written out here: the old roofline path called directly, or the measured pass summed
kernel by kernel from `kernels.*` with the shapes typed in (Llama-2 13B: d 5120, 40 layers, 40 heads of 128,
f 13824, gated, vocabulary 32000).
"""
import dataclasses

import numpy as np
import pytest

from inferlab.core import kernels, latency
from inferlab.core.costs import chunked_prefill_costs, decode_costs, forward_costs, prefill_costs
from inferlab.core.deployment import Deployment
from inferlab.core.efficiency import MeasuredKernels, Roofline
from inferlab.core.parallel import tp_communication_time_s
from inferlab.core.roofline import pass_time_s
from inferlab.serving import ContinuousBatching, RooflineStepTime, Workload, simulate
from inferlab.core.specs import Precision, get_accelerator, get_model

pytestmark = pytest.mark.core

M, BOOK, G = get_model("llama-2-13b"), get_model("llama-2-13b-book"), get_accelerator("h100-sxm")
A100, H200 = get_accelerator("a100-80gb"), get_accelerator("h200")
MEASURED = Deployment(G, efficiency=MeasuredKernels())
d, L, HEADS, HD, f, V = 5120, 40, 40, 128, 13824, 32000
PEAK, BW = 989.4e12, 3.35e12


# -- the default and the knobs: the old path, number for number ------------------------------------------
def test_the_default_deployment_is_the_ideal_roofline_bit_for_bit():
    dep = Deployment(G)
    assert dep.efficiency is None and dep.step_overhead is None and dep.efficiency_model == Roofline(1.0, 1.0)
    # the pre-efficiency path: roofline.pass_time_s on the shard's costs plus the ring all-reduces
    for tp in (1, 2):
        shard = M if tp == 1 else M.with_(n_heads=20, n_kv_heads=20, d_ff=f // 2, vocab_size=V // 2)
        on = Deployment(G, tp=tp)
        old_decode = pass_time_s(decode_costs(shard, 8, 1024), G) + tp_communication_time_s(M, 8, tp, G)
        old_prefill = pass_time_s(prefill_costs(shard, 2, 2048), G) + tp_communication_time_s(M, 4096.0, tp, G)
        assert latency.decode_step_time_s(M, on, 1024, 8) == old_decode
        assert latency.prefill_time_s(M, on, 2048, 2) == old_prefill
        assert latency.throughput_tokens_per_s(M, on, 1024, 8) == 8 / old_decode


def test_fixed_knobs_are_the_old_mfu_mbu_path():
    fixed = Deployment(G, efficiency=Roofline(0.6, 0.8))
    assert fixed == Deployment(G, mfu=0.6, mbu=0.8)  # one place for the knobs: the fields
    assert (fixed.mfu, fixed.mbu, fixed.efficiency) == (0.6, 0.8, None)
    assert fixed.efficiency_model == Roofline(0.6, 0.8)
    assert latency.prefill_time_s(M, fixed, 2048) == pass_time_s(prefill_costs(M, 1, 2048), G, "bf16", 0.6, 0.8)
    assert latency.decode_step_time_s(M, fixed, 1024, 4) == pass_time_s(decode_costs(M, 4, 1024), G, "bf16", 0.6, 0.8)
    assert latency.prefill_time_s(M, fixed, 2048) > latency.prefill_time_s(M, G, 2048)


def test_names_labels_and_the_one_line_description():
    assert (Roofline().name, Roofline().label) == ("ideal", "ideal roofline (MFU = MBU = 1)")
    assert (Roofline(0.6, 0.8).name, Roofline(0.6, 0.8).label) == ("fixed", "fixed MFU 0.6, MBU 0.8")
    assert MeasuredKernels().name == "measured"
    assert MEASURED.describe() == ("efficiency: measured kernels (Vidur's published h100-sxm profiles; attention "
                                   "on the ideal roofline); step overhead: none")
    assert Deployment(G).describe() == "efficiency: ideal roofline (MFU = MBU = 1); step overhead: none"
    with_cpu = Deployment(G, step_overhead=kernels.StepOverhead.constant(2e-3))
    assert with_cpu.describe() == "efficiency: ideal roofline (MFU = MBU = 1); step overhead: 2 ms per step (given)"
    assert "\n" not in MEASURED.describe()


# -- the measured kernels -------------------------------------------------------------------------------
def attention_roofline_s(batch, q_len, past, kv_dim=HEADS * HD, q_dim=HEADS * HD, heads=HEADS):
    """One of the two attention kernels of one layer at MFU = MBU = 1 (bf16 everywhere)."""
    pairs = q_len * past + q_len * (q_len + 1) / 2
    flops = 2.0 * batch * heads * HD * pairs
    nbytes = batch * q_len * q_dim * 2 + batch * (past + q_len) * kv_dim * 2
    return max(flops / PEAK, nbytes / BW)


def measured_layer_s(acc, T, heads=HEADS, ff=f):
    """One layer's measured kernels over T rows, shapes typed out (heads, ff: the shard's)."""
    q = heads * HD  # MHA: the KV width equals the query width
    return (kernels.linear_times_s(acc, T, d, q + 2 * q)         # Q, K, V fused
            + kernels.linear_times_s(acc, T, q, d)               # o_proj
            + kernels.linear_times_s(acc, T, d, 2 * ff)          # gate and up fused
            + kernels.linear_times_s(acc, T, ff, d)              # down
            + 2 * kernels.elementwise_time_s(acc, "norm", T, d)
            + kernels.elementwise_time_s(acc, "rope", T, 2 * q)  # queries and keys
            + kernels.elementwise_time_s(acc, "act", T, ff)
            + 2 * kernels.elementwise_time_s(acc, "add", T, d))


def test_a_measured_decode_step_is_the_sum_of_its_kernels():
    B, ctx = 8, 1024
    layer = measured_layer_s(G, B) + 2 * attention_roofline_s(B, 1, ctx - 1)
    by_hand = L * layer + kernels.elementwise_time_s(G, "embedding", B, d) + kernels.linear_times_s(G, B, d, V)
    assert latency.decode_step_time_s(M, MEASURED, ctx, B) == pytest.approx(by_hand, rel=1e-12)
    assert latency.throughput_tokens_per_s(M, MEASURED, ctx, B) == pytest.approx(B / by_hand, rel=1e-12)


def test_a_measured_tp2_decode_step_is_the_shards_kernels_and_the_measured_allreduces():
    B, ctx = 4, 512
    layer = measured_layer_s(G, B, heads=20, ff=f // 2) + 2 * attention_roofline_s(B, 1, ctx - 1, 20 * HD, 20 * HD, 20)
    shard = L * layer + kernels.elementwise_time_s(G, "embedding", B, d) + kernels.linear_times_s(G, B, d, V // 2)
    allreduces = 2 * L * kernels.allreduce_time_s(G, B * d * 2, 2)  # after o_proj and down, B x d bf16
    on = Deployment(G, tp=2, efficiency=MeasuredKernels())
    assert latency.decode_step_time_s(M, on, ctx, B) == pytest.approx(shard + allreduces, rel=1e-12)


def test_a_measured_prefill_is_the_sum_of_its_kernels_with_logits_for_each_prompt():
    B, S = 2, 1000
    layer = measured_layer_s(A100, B * S) + 2 * (lambda: max(
        2.0 * B * HEADS * HD * S * (S + 1) / 2 / A100.peak("bf16"),
        (B * S * HEADS * HD * 2 + B * S * HEADS * HD * 2) / A100.hbm_bytes_per_s))()
    by_hand = (L * layer + kernels.elementwise_time_s(A100, "embedding", B * S, d)
               + kernels.linear_times_s(A100, B, d, V))  # the LM head over the B rows sampled
    on = Deployment(A100, efficiency=MeasuredKernels())
    assert latency.prefill_time_s(M, on, S, B) == pytest.approx(by_hand, rel=1e-12)


@pytest.mark.parametrize("model", [BOOK, M], ids=lambda m: m.name)
def test_measured_ttft_of_llama_2_13b_is_longer_than_the_ideal(model):
    ideal, measured = latency.prefill_time_s(model, G, 2048), latency.prefill_time_s(model, MEASURED, 2048)
    assert measured > 1.1 * ideal  # no real kernel runs at the datasheet's peak
    assert measured < 3 * ideal    # and none is three times off on a 2048-token prefill
    assert latency.decode_step_time_s(model, MEASURED, 1024) > latency.decode_step_time_s(model, G, 1024)


def test_measured_without_attention_drops_exactly_the_two_attention_kernels():
    S = 2048
    full = latency.prefill_time_s(M, MEASURED, S)
    linear = latency.prefill_time_s(M, MEASURED, S, include_attention=False)
    assert full - linear == pytest.approx(L * 2 * attention_roofline_s(1, S, 0), rel=1e-9)


def test_a_chunk_without_logits_has_no_lm_head_kernel():
    chunks = chunked_prefill_costs(M, 1024, 256).chunks
    assert chunks.rows("lm_head").tolist() == [0, 0, 0, 1] and chunks.rows("q_proj").tolist() == [256] * 4
    times = MeasuredKernels().pass_time_s(chunks, M, MEASURED)
    alone = [MeasuredKernels().pass_time_s(forward_costs(M, 1, 256, p), M, MEASURED) for p in (0, 256, 512, 768)]
    head = kernels.linear_times_s(G, 1, d, V)
    np.testing.assert_allclose(times, np.array(alone) - [head, head, head, 0.0], rtol=1e-12)


def test_forward_costs_carry_the_shapes_and_keep_equality():
    c = prefill_costs(M, 3, 100)
    assert c.dims["q_proj"] == (d, HEADS * HD) and c.dims["mlp_gate"] == c.dims["mlp_up"] == (d, f)
    assert c.dims["mlp_down"] == (f, d) and c.dims["lm_head"] == (d, V)
    assert (c.rows("q_proj"), c.rows("mlp_down"), c.rows("lm_head"), c.tokens) == (300, 300, 3, 300)
    kept = c.without("attn_scores", "attn_values", "lm_head")
    assert "lm_head" not in kept.dims and kept.tokens == 300
    with pytest.raises(ValueError, match=r"^rows: 'lm_head' is not a matrix product of this pass"):
        kept.rows("lm_head")
    # shapes follow from the costs; equality is as before
    assert dataclasses.replace(kept, dims={}, tokens=None) == kept


# -- the step overhead ----------------------------------------------------------------------------------
def test_the_step_overhead_adds_one_steps_cpu_time_per_pass():
    profile = kernels.StepOverhead.from_profile()
    on = Deployment(G, step_overhead=profile)
    cpu8 = profile.fixed_s + 8 * profile.per_sequence_s  # the profile's line at 8 sequences
    assert latency.decode_step_time_s(M, on, 1024, 8) == pytest.approx(latency.decode_step_time_s(M, G, 1024, 8) + cpu8,
                                                                       rel=1e-12)
    cpu2 = profile.fixed_s + 2 * profile.per_sequence_s
    assert latency.prefill_time_s(M, on, 512, 2) == pytest.approx(latency.prefill_time_s(M, G, 512, 2) + cpu2, rel=1e-12)
    const = Deployment(G, efficiency=MeasuredKernels(), step_overhead=kernels.StepOverhead.constant(1e-3))
    assert latency.decode_step_time_s(M, const, 1024, 8) == pytest.approx(
        latency.decode_step_time_s(M, MEASURED, 1024, 8) + 1e-3, rel=1e-12)
    assert latency.throughput_tokens_per_s(M, const, 1024, 8) == pytest.approx(
        8 / (latency.decode_step_time_s(M, MEASURED, 1024, 8) + 1e-3), rel=1e-12)


# -- the simulator's step time --------------------------------------------------------------------------
@pytest.mark.parametrize("tp", [1, 2])
@pytest.mark.parametrize("batch", [1, 8, 64])
def test_the_measured_step_time_of_a_uniform_batch_is_latencys(tp, batch):
    cpu = kernels.StepOverhead.from_profile()
    st = RooflineStepTime(M, G, tp=tp, efficiency=MeasuredKernels(), step_overhead=cpu)
    on = Deployment(G, tp=tp, efficiency=MeasuredKernels(), step_overhead=cpu)
    s, c = 700, 1500
    assert st(batch * s, batch, batch * s * (s + 1) / 2, batch * s) == pytest.approx(
        latency.prefill_time_s(M, on, s, batch), rel=1e-12)
    assert st(batch, batch, batch * c, batch * c) == pytest.approx(latency.decode_step_time_s(M, on, c, batch), rel=1e-12)
    assert st.decode_s(c, batch) == pytest.approx(latency.decode_step_time_s(M, on, c, batch), rel=1e-12)


def test_the_default_step_time_is_unchanged_and_knobs_given_as_an_object_agree():
    assert RooflineStepTime(M, G).decode_s(1000, 8) == RooflineStepTime(M, G, efficiency=Roofline()).decode_s(1000, 8)
    assert (RooflineStepTime(M, G, mfu=0.5, mbu=0.7).prefill_s(900)
            == RooflineStepTime(M, G, efficiency=Roofline(0.5, 0.7)).prefill_s(900))


def test_the_step_overhead_counts_every_sequence_of_a_mixed_step():
    cpu = kernels.StepOverhead.from_profile()
    plain, busy = RooflineStepTime(M, G), RooflineStepTime(M, G, step_overhead=cpu)
    # 3 decodes and a middle prefill chunk (no logits): 4 sequences in the step, 3 sampling
    args = (3 + 256, 3, 3 * 1000 + 256 * 256 + 256 * 257 / 2, 3 * 1000 + 512)
    assert busy(*args, sequences=4) - plain(*args) == pytest.approx(cpu.fixed_s + 4 * cpu.per_sequence_s, rel=1e-9)


def test_simulate_runs_one_request_on_the_measured_kernels():
    cpu = kernels.StepOverhead.constant(1e-3)
    on = Deployment(G, efficiency=MeasuredKernels(), step_overhead=cpu)
    w = Workload(np.array([0.0]), np.array([600]), np.array([3]))
    r = simulate(w, M, G, ContinuousBatching(), efficiency=MeasuredKernels(), step_overhead=cpu)
    assert r.ttft_s[0] == pytest.approx(latency.prefill_time_s(M, on, 600), rel=1e-9)
    np.testing.assert_allclose(r.itls_s[0], [latency.decode_step_time_s(M, on, 600 + j) for j in (1, 2)], rtol=1e-9)
    with pytest.raises(ValueError, match=r"^efficiency applies to the default step time"):
        simulate(w, M, G, step_time=RooflineStepTime(M, G), efficiency=MeasuredKernels())


# -- what is refused, by name, in one line --------------------------------------------------------------
@pytest.mark.parametrize("kwargs, match", [
    (dict(accelerator=get_accelerator("l4")), r"^efficiency=MeasuredKernels\(\): accelerator: no measured kernel profiles "
                                              r"for 'l4'; measured timings exist for h100-sxm, a100-80gb .* h200"),
    (dict(mfu=0.5), r"^efficiency=MeasuredKernels\(\) times kernels as measured; mfu and mbu .* must be 1; "
                    r"got mfu=0.5, mbu=1.0$"),
    (dict(precision=Precision(weights="int8")), r"^efficiency=MeasuredKernels\(\): precision weights: the measured kernels "
                                                r"time 16-bit products \(bf16, fp16\) and FP8 W8A8 .*got weights int8, "
                                                r"activations bf16$"),
    (dict(accelerator=get_accelerator("a100-80gb"), precision=Precision(weights="fp8", activations="fp8")),
     r"^efficiency=MeasuredKernels\(\): accelerator: no FP8 kernel times for 'a100-80gb'"),
    (dict(overlap="whole_model"), r"overlap must be 'per_operator'; got 'whole_model'$"),
    (dict(allreduce_latency_s=0.0), r"leave allreduce_latency_s at its default; got 0.0$"),
    (dict(tp=16), r"^efficiency=MeasuredKernels\(\) with tp=16: n_gpus: no profiled all_reduce of 16 GPUs"),
])
def test_a_measured_deployment_it_cannot_time_is_refused(kwargs, match):
    kwargs = {"accelerator": G, **kwargs}
    with pytest.raises(ValueError, match=match) as e:
        Deployment(efficiency=MeasuredKernels(), **kwargs)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("kwargs, match", [
    (dict(efficiency="measured"), r"^efficiency must be None \(the roofline at mfu, mbu\), efficiency\.Roofline\(mfu, mbu\) "
                                  r"or efficiency\.MeasuredKernels\(\); got 'measured'$"),
    (dict(efficiency=Roofline(0.5, 0.5), mfu=0.7), r"^efficiency=Roofline\(mfu=0\.5, mbu=0\.5\) and mfu=0\.7, mbu=1\.0 "
                                                   r"disagree; give the knobs once"),
    (dict(step_overhead=1e-3), r"^step_overhead must be None or a kernels\.StepOverhead .*; got 0\.001$"),
])
def test_a_bad_efficiency_or_overhead_is_refused_by_name(kwargs, match):
    with pytest.raises(ValueError, match=match) as e:
        Deployment(G, **kwargs)
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match=r"^mfu must be a finite number"):
        Roofline(mfu=0.0)


def test_a_measured_deployment_refuses_knobs_added_later():
    with pytest.raises(ValueError, match=r"mfu and mbu .* must be 1"):
        MEASURED.with_(mbu=0.9)
    assert MEASURED.with_(tp=2).efficiency == MeasuredKernels()

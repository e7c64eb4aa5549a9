"""The chapter on a real GPU (inferlab.notebook.measured_plots): the profiled rows, the fitted curves and the
ideal roofline side by side. Expected values are recomputed here from the vendored profile
(data/vidur/compute.csv, read with the csv module) and from the datasheet, never copied from output;
each test names the bug it would catch."""
from __future__ import annotations

import csv
import math
import re

import numpy as np
import pytest

from inferlab.notebook import conclusions, phone_figures
from inferlab.core import kernels, latency, parallel
from inferlab.core import measured_latency as ml
from inferlab.notebook import measured_plots as mp
from inferlab.core.deployment import Deployment
from inferlab.core.efficiency import MeasuredKernels, small_kernels_time_s
from inferlab.core.specs import BF16, Precision, data_dir, get_accelerator, get_model
from test_figure_layout import layout_problems

H100 = get_accelerator("h100-sxm")
A100 = get_accelerator("a100-80gb")
H200 = get_accelerator("h200")
LLAMA_13B = get_model("llama-2-13b")
MEASURED = Deployment(H100, efficiency=MeasuredKernels())


def profile_row(accelerator: str, model: str, tokens: int, tp: int = 1) -> dict:
    with (data_dir() / "vidur" / "compute.csv").open() as fh:
        rows = [r for r in csv.DictReader(fh) if r["accelerator"] == accelerator and r["model"] == model
                and int(r["num_tokens"]) == tokens and int(r["num_tensor_parallel_workers"]) == tp]
    assert len(rows) == 1
    return {k: float(v) for k, v in rows[0].items() if k.endswith("_ms")}


def layer_by_hand(row: dict) -> float:
    """One layer's kernels other than attention, seconds: four products, two norms, rotary, the
    activation and two residual adds (one profiled add column)."""
    ms = (row["attn_pre_proj_ms"] + row["attn_post_proj_ms"] + row["mlp_up_proj_ms"] + row["mlp_down_proj_ms"]
          + row["input_layernorm_ms"] + row["post_attention_layernorm_ms"] + row["attn_rope_ms"] + row["mlp_act_ms"]
          + 2 * row["add_ms"])
    return ms * 1e-3


def fitted_layer_by_hand(accelerator, tokens: int) -> float:
    """Llama-2 13B's fused products: QKV 5120 x 3*5120, o 5120 x 5120, gate+up 5120 x 2*13824, down 13824 x 5120."""
    shapes = [(5120, 3 * 5120), (5120, 5120), (5120, 2 * 13824), (13824, 5120)]
    return sum(kernels.linear_time_s(accelerator, tokens, k, n) for k, n in shapes) + small_kernels_time_s(
        accelerator, LLAMA_13B, tokens)


# --- which profile, which shapes ----------------------------------------------------------------------

def test_a_profile_matches_only_a_model_with_every_linear_shape_equal():
    """Bug caught: matching on d and f alone (a GQA variant of Llama-2 13B, or the book's f = 4d
    stand-in, would borrow internlm-20b's rows)."""
    assert ml.profile_for(LLAMA_13B) == "internlm-20b"
    assert ml.profile_for(get_model("llama-2-7b")) == "Llama-2-7b-hf"
    assert ml.profile_for(get_model("llama-2-70b")) == "Llama-2-70b-hf"
    assert ml.profile_for(get_model("llama-2-13b-book")) is None
    assert ml.profile_for(LLAMA_13B.gqa_variant(8)) is None
    assert ml.profile_for(get_model("llama-3-8b")) is None


def test_linear_shapes_are_the_fused_products_a_server_runs():
    """Bug caught: the gate and up matrices timed as two products, or K and V left out of QKV."""
    assert ml.linear_shapes(LLAMA_13B) == {"qkv": (5120, 15360), "o_proj": (5120, 5120),
                                          "mlp_up": (5120, 27648), "mlp_down": (13824, 5120)}
    book = get_model("llama-2-13b-book")   # no gate: up alone
    assert ml.linear_shapes(book)["mlp_up"] == (book.d_model, book.d_ff)


# --- the profiled rows beside the fitted curve ---------------------------------------------------------

@pytest.mark.parametrize("accelerator, tokens", [(H100, 1), (H100, 2048), (A100, 64)])
def test_one_layer_sums_the_profiled_row_and_the_fitted_curve(accelerator, tokens):
    """Bug caught: one residual add counted instead of two, a norm left out, or the fitted side
    summing other shapes than the profiled ones."""
    profiled, fitted = ml.layer_kernels_s(LLAMA_13B, accelerator, tokens)
    assert profiled == pytest.approx(layer_by_hand(profile_row(accelerator.name, "internlm-20b", tokens)), rel=1e-12)
    assert fitted == pytest.approx(fitted_layer_by_hand(accelerator, tokens), rel=1e-12)


def test_the_h100_b1_layer_is_257_us_in_the_profile():
    """The profile's own numbers (internlm-20b, one token, TP 1): 0.055 + 0.023 + 0.1 + 0.055 ms of
    products, 0.005 + 0.004 of norms, 0.005 rotary, 0.008 activation, 2 x 0.001 adds."""
    assert ml.layer_kernels_s(LLAMA_13B, H100, 1)[0] == pytest.approx(257e-6, rel=1e-9)


def test_profiled_times_replace_only_the_layers_kernels():
    """Bug caught: the profiled rows substituted in the LM head or attention too, or per pass instead
    of per layer (40 layers)."""
    row_1 = layer_by_hand(profile_row("h100-sxm", "internlm-20b", 1))
    decode = latency.decode_step_time_s(LLAMA_13B, MEASURED, 1000, 1)
    assert ml.profiled_decode_step_time_s(LLAMA_13B, MEASURED, 1000, 1) == pytest.approx(
        decode + 40 * (row_1 - fitted_layer_by_hand(H100, 1)), rel=1e-12)
    row_2048 = layer_by_hand(profile_row("h100-sxm", "internlm-20b", 2048))
    prefill = latency.prefill_time_s(LLAMA_13B, MEASURED, 2048)
    assert ml.profiled_prefill_time_s(LLAMA_13B, MEASURED, 2048) == pytest.approx(
        prefill + 40 * (row_2048 - fitted_layer_by_hand(H100, 2048)), rel=1e-12)
    # 2 x 1024 tokens is the profiled 2,048-token row as well
    assert ml.profiled_prefill_time_s(LLAMA_13B, MEASURED, 1024, 2) == pytest.approx(
        latency.prefill_time_s(LLAMA_13B, MEASURED, 1024, 2) + 40 * (row_2048 - fitted_layer_by_hand(H100, 2048)))


def test_no_profiled_time_where_the_profile_has_no_row_or_no_model():
    assert ml.profiled_decode_step_time_s(LLAMA_13B, MEASURED, 1000, 3) is None       # 3 tokens: not profiled
    assert ml.profiled_prefill_time_s(LLAMA_13B, MEASURED, 8192) is None              # beyond 4,096
    assert ml.profiled_decode_step_time_s(get_model("llama-3-8b"), MEASURED, 1000, 1) is None
    with pytest.raises(ValueError, match="MeasuredKernels"):
        ml.profiled_decode_step_time_s(LLAMA_13B, Deployment(H100), 1000, 1)
    with pytest.raises(ValueError, match="TP 1"):
        ml.profiled_decode_step_time_s(LLAMA_13B, MEASURED.with_(tp=2), 1000, 1)


def test_kernel_point_efficiency_is_flops_over_time_over_the_roof():
    """Bug caught: the efficiency against the peak where the product is memory-bound, or the fitted
    time where a profiled row exists."""
    for tokens in (1, 2048):
        p = ml.kernel_point(LLAMA_13B, H100, BF16, "mlp_up", tokens)
        k, n = 5120, 2 * 13824
        flops, nbytes = 2.0 * tokens * k * n, 2.0 * (k * n + tokens * (k + n))
        roof = min(H100.peak("bf16"), flops / nbytes * H100.hbm_bytes_per_s)
        t = profile_row("h100-sxm", "internlm-20b", tokens)["mlp_up_proj_ms"] * 1e-3
        assert (p.flops, p.bytes) == (flops, nbytes)
        assert p.profiled_s == pytest.approx(t) and p.measured_s == p.profiled_s
        assert p.fitted_s == pytest.approx(kernels.linear_time_s(H100, tokens, k, n))
        assert p.efficiency == pytest.approx(flops / t / roof, rel=1e-12)
    # T = 1: memory-bound, the roof is I * BW = about 1 FLOP/byte * 3.35 TB/s, far below the peak
    assert ml.kernel_point(LLAMA_13B, H100, BF16, "qkv", 1).attainable_flops_per_s < H100.peak("bf16") / 100


# --- times, ideal and measured ----------------------------------------------------------------------------

def test_ttft_and_itl_three_ways():
    """Bug caught: the measured time taken from the ideal deployment, or the step overhead added for
    one sequence whatever the batch."""
    over = kernels.StepOverhead.from_profile()
    t = ml.ttft(LLAMA_13B, H100, BF16, 2048, 1, over)
    assert t.ideal_s == latency.prefill_time_s(LLAMA_13B, Deployment(H100), 2048)
    assert t.measured_s == latency.prefill_time_s(LLAMA_13B, MEASURED, 2048)
    assert t.measured_s > t.ideal_s and t.ratio == t.measured_s / t.ideal_s
    i = ml.itl(LLAMA_13B, H100, BF16, 1000, 16, over)
    assert i.overhead_s == pytest.approx(i.measured_s + over.fixed_s + 16 * over.per_sequence_s)


def test_the_ideal_decode_step_gets_the_datasheet_bandwidth_and_the_measured_less():
    """At B = 1 every operator is memory-bound, so on the roofline bytes / time is exactly the
    datasheet's bandwidth. Bug caught: bytes counted for another shard, or the time of another batch."""
    ideal = Deployment(H100)
    assert ml.decode_bandwidth(LLAMA_13B, ideal, 1000, 1) == pytest.approx(H100.hbm_bytes_per_s, rel=1e-9)
    measured = ml.decode_bandwidth(LLAMA_13B, MEASURED, 1000, 1)
    assert 0.5 * H100.hbm_bytes_per_s < measured < H100.hbm_bytes_per_s
    # weights once (the embedding table is looked up, not read), one 1,000-token cache, activations
    weights = 40 * (4 * 5120 * 5120 + 3 * 5120 * 13824) * 2 + 32000 * 5120 * 2
    cache = 2 * 40 * 40 * 128 * 1000 * 2
    assert weights + cache < ml.step_bytes(LLAMA_13B, BF16, 1000, 1) < 1.001 * (weights + cache)


def test_attention_takes_half_the_step_at_about_b_star_on_the_roofline_and_later_measured():
    """Bug caught: the crossover found on the weights' share, or measured and ideal swapped."""
    b_star = (LLAMA_13B.n_params * 2) / (2 * 40 * 40 * 128 * 1024 * 2)
    ideal = ml.attention_crossover_batch(LLAMA_13B, Deployment(H100), 1024)
    assert abs(ideal - b_star) <= 1.5
    assert ml.attention_crossover_batch(LLAMA_13B, MEASURED, 1024) > ideal + 3


def test_tensor_parallel_measured_all_reduces_are_the_profiled_ones():
    """Bug caught: the measured side timing its all-reduces with the ideal ring formula, or counting
    one all-reduce per layer instead of two."""
    tp = ml.tensor_parallel(LLAMA_13B, H100, BF16, 1024, 1024, 1, (1, 2, 8))
    message = 1 * 5120 * 2                           # one token's activations, bf16
    for i, k in enumerate((2, 8), start=1):
        comm = 2 * 40 * kernels.allreduce_time_s(H100, message, k, node="nvswitch")
        assert tp.allreduce_share[i] == pytest.approx(comm / tp.itl_measured_s[i], rel=1e-9)
    assert tp.allreduce_share[0] == 0
    ring_8 = 2 * 40 * (2 * 7 / 8 * message / H100.allreduce_bus_bytes_per_s + H100.allreduce_latency_s)
    no_comm = latency.decode_step_time_s(LLAMA_13B, Deployment(H100, tp=8, allreduce=False), 1024, 1)
    assert tp.itl_ideal_s[2] == pytest.approx(no_comm + ring_8, rel=1e-9)


def test_batching_costs_follow_the_throughput():
    b = ml.batching(LLAMA_13B, H100, BF16, 1024, 4.0)
    assert b.max_batch == 64
    step = latency.decode_step_time_s(LLAMA_13B, MEASURED, 1024, 64)
    assert b.tokens_per_s_measured[1] == pytest.approx(64 / step)
    assert b.usd_per_1k_measured[1] == pytest.approx(4.0 / 3600 / (64 / step) * 1000)
    assert b.usd_per_1k_measured[0] > b.usd_per_1k_ideal[0]


# --- no measured kernels: the ideal alone, said in words --------------------------------------------------

@pytest.mark.parametrize("accelerator, precision, word", [(H200, BF16, "h200"),
                                                           (H100, Precision(weights="int8"), "int8")])
def test_without_measured_kernels_every_function_answers_with_the_ideal_and_a_reason(accelerator, precision, word):
    reason = ml.measured_reason(accelerator, precision)
    assert word in reason and "ideal roofline alone" in reason
    ideal, measured = ml.deployments(accelerator, precision)
    assert measured is None and ideal.efficiency is None
    t = ml.ttft(LLAMA_13B, accelerator, precision, 2048)
    assert t.measured_s is None and t.profiled_s is None and t.reason == reason
    texts = [conclusions.measured_source(LLAMA_13B, accelerator, None, reason, None),
             conclusions.measured_times(t, "At S = 2,048"), conclusions.measured_ttft_takeaway(t, 2048),
             conclusions.measured_limits(reason, None, "here"),
             conclusions.measured_tp(ml.tensor_parallel(LLAMA_13B, accelerator, precision)),
             conclusions.measured_batching(ml.batching(LLAMA_13B, accelerator, precision)),
             conclusions.measured_batching_takeaway(ml.batching(LLAMA_13B, accelerator, precision)),
             mp.bandwidth_table(LLAMA_13B, accelerator, precision),
             mp.efficiency_worked(ml.kernel_point(LLAMA_13B, accelerator, precision, "mlp_up", 64),
                                  accelerator, precision).data]
    assert texts[0] == reason
    for text in texts:
        assert text and not re.search(r"\bNone\b|\bnan\b", text), text
    for plot in (mp.kernel_roofline_plot(LLAMA_13B, accelerator, precision),
                 mp.ttft_measured_plot(LLAMA_13B, accelerator, precision),
                 mp.decode_measured_plot(LLAMA_13B, accelerator, 1000, precision),
                 mp.latency_measured_plot(LLAMA_13B, accelerator, precision),
                 mp.throughput_measured_plot(LLAMA_13B, accelerator, 1024, precision)):
        assert "nan" not in plot.table and "None" not in plot.table


def test_a_model_without_a_profile_gets_the_fitted_curve_alone():
    m = get_model("llama-3-8b")
    p = ml.kernel_point(m, H100, BF16, "qkv", 64)
    assert p.profiled_s is None and p.measured_s == p.fitted_s
    plot = mp.kernel_roofline_plot(m, H100, BF16)
    assert plot.table.startswith("no profiled model has llama-3-8b's shapes")
    assert "not fitted on" in conclusions.measured_source(m, H100, None, "", MEASURED)


# --- sentences rendered from values --------------------------------------------------------------------

def test_the_allreduce_sentence_quotes_the_accelerators_own_numbers():
    text = conclusions.allreduce_source(H100, parallel.allreduce_latency_s(H100), parallel.allreduce_latency_s(H100),
                                        parallel.allreduce_bus_bytes_per_s(H100))
    assert f"{H100.allreduce_latency_s * 1e6:.1f} µs" in text
    assert f"{H100.allreduce_bus_bytes_per_s / 1e9:,.0f} GB/s" in text
    text = conclusions.allreduce_source(H200, parallel.allreduce_latency_s(H200), parallel.allreduce_latency_s(H200),
                                        parallel.allreduce_bus_bytes_per_s(H200))
    assert "no measured all-reduce" in text and f"{parallel.DEFAULT_ALLREDUCE_LATENCY_S * 1e6:g} µs" in text
    assert "idealisation" in conclusions.allreduce_source(H100, 0.0, parallel.allreduce_latency_s(H100),
                                                          parallel.allreduce_bus_bytes_per_s(H100))


def test_the_ttft_sentence_says_how_far_the_curve_is_from_the_profile():
    t = ml.ttft(LLAMA_13B, H100, BF16, 2048)
    text = conclusions.measured_times(t, "At S = 2,048")
    off = abs(t.measured_s / t.profiled_s - 1)
    assert f"{off:.1%}" in text and f"{t.ratio:.2f}×" in text
    assert ("long" in text) == (t.measured_s > t.profiled_s)


def test_the_tp_sentence_weighs_the_two_speedups_by_their_values():
    tp = ml.tensor_parallel(LLAMA_13B, H100, BF16)
    text = conclusions.measured_tp(tp)
    stronger = tp.itl_measured_s[0] / tp.itl_measured_s[-1] < tp.itl_ideal_s[0] / tp.itl_ideal_s[-1]
    assert ("stronger" in text) == stronger
    flipped = ml.TensorParallel(tp.tps, tp.ttft_ideal_s, tuple(2 * t for t in tp.itl_measured_s), tp.ttft_measured_s,
                                tp.itl_ideal_s, tp.allreduce_share)
    assert ("stronger" in conclusions.measured_tp(flipped)) == (not stronger)


# --- the figures: layout, on a desktop and on a phone ----------------------------------------------------

def _figures(model, accelerator):
    return {
        "roofline": lambda: mp.kernel_roofline_plot(model, accelerator, BF16),
        "ttft": lambda: mp.ttft_measured_plot(model, accelerator, BF16),
        "decode": lambda: mp.decode_measured_plot(model, accelerator, 1000, BF16),
        "latency": lambda: mp.latency_measured_plot(model, accelerator, BF16,
                                                    step_overhead=kernels.StepOverhead.from_profile()),
        "throughput": lambda: mp.throughput_measured_plot(model, accelerator, 1024, BF16),
    }


SCENARIOS = [("llama-2-13b", "h100-sxm"), ("llama-3-8b", "h200"), ("llama-2-7b", "a100-80gb"),
             ("llama-3-8b", "h100-sxm")]


@pytest.mark.parametrize("model, gpu", SCENARIOS)
@pytest.mark.parametrize("name", ["roofline", "ttft", "decode", "latency", "throughput"])
def test_measured_figure_layout(name, model, gpu):
    fig = _figures(get_model(model), get_accelerator(gpu))[name]().fig
    assert layout_problems(fig) == []


@pytest.mark.parametrize("name", ["roofline", "ttft", "decode", "latency", "throughput"])
def test_measured_figure_phone_variant_layout(name):
    fig = _figures(LLAMA_13B, H100)[name]().fig
    assert layout_problems(phone_figures.narrow_copy(fig)) == []


def test_the_ttft_figure_marks_profiled_lengths_only_within_the_profiles():
    """Bug caught: a profiled circle drawn at a length the profiles do not have (past 4,096 tokens of
    B x S), where it would only repeat the curve."""
    for batch in (1, 4):
        plot = mp.ttft_measured_plot(LLAMA_13B, H100, BF16, batch=batch)
        lengths = [s for s, _ in plot.data["profiled"]]
        assert lengths and max(lengths) * batch <= 4096
    assert math.isclose(dict(mp.ttft_measured_plot(LLAMA_13B, H100, BF16).data["profiled"])[2048],
                        ml.profiled_prefill_time_s(LLAMA_13B, MEASURED, 2048))


def test_the_tables_under_the_figures_print_no_rate_with_a_unit():
    """The pages print one peak FLOP/s and one bandwidth per device (tests/test_named_quantities.py): an
    achieved rate goes in a column headed by its unit, never as '650 TFLOP/s' in a cell."""
    for build in _figures(LLAMA_13B, H100).values():
        assert not re.search(r"\d\s*(TFLOP/s|PFLOP/s|TB/s)", build().table)


def test_no_nan_in_the_throughput_table_of_a_model_that_does_not_fit():
    plot = mp.throughput_measured_plot(get_model("llama-2-70b"), H100, 1024, BF16)
    assert np.all(np.isfinite(plot.data["ideal roofline"]))
    assert "nan" not in plot.table

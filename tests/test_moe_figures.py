"""Figures for models other than the book's: a mixture of experts' decode physics (the weight read
grows with the batch), titles read off the computed curves instead of the dense model's shapes, and
`inferlab figures --model/--gpu` (the MoE arithmetic itself: test_moe_decode.py)."""
import numpy as np
import pytest

from inferlab.notebook import figures, plots
from inferlab.core.latency import throughput_shape, throughput_tokens_per_s
from inferlab.core.specs import BF16, Precision, get_accelerator, get_model, resolve_model

MIXTRAL = "mixtral-8x7b-v0.1"
MIXTRAL_BYTES = 46_702_792_704 * 2          # bf16, every expert


@pytest.fixture(scope="module")
def mixtral():
    return resolve_model(MIXTRAL)


def test_throughput_shape_is_read_off_the_curve(mixtral):
    book = throughput_shape(get_model("llama-2-13b"), get_accelerator("h100-sxm"), 1024, BF16)
    assert book.concave and book.half_at_b_star and book.experts_filled_batch is None
    h200 = get_accelerator("h200")
    moe = throughput_shape(mixtral, h200, 1024, BF16)
    # not concave: the first sequences bring in experts of their own, so the slope rises (B = 2 to ~20)
    t = throughput_tokens_per_s(mixtral, h200, 1024, np.array([4, 8, 12]))
    assert t[2] - t[1] > t[1] - t[0]
    assert not moe.concave and moe.experts_filled_batch == pytest.approx(10.41, abs=0.01)
    assert not moe.half_at_b_star and plots.at_b_star_words(moe) == f"{moe.share_at_b_star:.0%}"
    assert "not concave" in plots.throughput_title(moe) and "experts of its own" in plots.shape_words(moe)
    assert moe.tokens_per_s_at_b_star == pytest.approx(
        throughput_tokens_per_s(mixtral, h200, 1024, round(moe.b_star)), rel=0.01)


def test_throughput_plot_titles_follow_the_model(mixtral):
    dense = plots.throughput_plot(get_model("llama-2-13b"), get_accelerator("h100-sxm"), 1024)
    assert [a.get_title() for a in dense.fig.axes] == ["step time: linear in B",
                                                       "throughput: concave, half its ceiling at B*"]
    moe = plots.throughput_plot(mixtral, get_accelerator("h200"), 1024)
    step_title, tput_title = (a.get_title() for a in moe.fig.axes)
    assert "knee at B ≈ 10" in step_title and tput_title.startswith("throughput: not concave")
    assert all(a.get_xscale() == "log" for a in moe.fig.axes)
    # the sweep reaches the right edge of the axes (4 B*), not just twice the memory limit
    assert moe.data["batches"].max() >= 4 * moe.data["b_star"]
    # the knee: the step time grows more from B = 1 to 16 than from 16 to 128
    at = dict(zip(moe.data["batches"].tolist(), moe.data["step_ms"]))
    assert at[16] - at[1] > at[128] - at[16]


def test_memory_title_when_the_weights_alone_do_not_fit():
    p = plots.memory_budget_plot(resolve_model("deepseek-v3"), get_accelerator("h200"), 1000)
    assert p.data["max_batch"] == 0
    assert "weights alone exceed 141 GB" in p.fig.axes[0].get_title()
    book = plots.memory_budget_plot(get_model("llama-2-13b"), get_accelerator("h100-sxm"), 1000)
    assert "eats the free memory" in book.fig.axes[0].get_title()


def test_weight_dtype_titles_follow_the_bars():
    book = plots.weight_dtype_plot(get_model("llama-2-13b"), get_accelerator("h100-sxm"))
    assert book.data["ttft_ms"][0] / book.data["ttft_ms"][-1] < 1.25
    assert "barely moves" in book.fig.axes[0].get_title()
    # DeepSeek-V2-Lite's 1,024-token prompt reads 31 GB of experts for 5 TFLOP: weight-bound on an H100
    lite = plots.weight_dtype_plot(resolve_model("deepseek-v2-lite"), get_accelerator("h100-sxm"))
    gain = lite.data["ttft_ms"][0] / lite.data["ttft_ms"][-1]
    assert gain > 1.25
    assert f"{gain:.1f}× at int4" in lite.fig.axes[0].get_title()


def test_ttft_plot_names_active_parameters_and_a_growing_floor(mixtral):
    p = plots.ttft_plot(mixtral, get_accelerator("h200"))
    labels = p.fig.axes[0].get_legend_handles_labels()[1]
    assert any("2·P_active·S" in lab for lab in labels)
    floor = next(line for line in p.fig.axes[0].lines if "floor" in line.get_label())
    y = floor.get_ydata()
    assert y[0] < y[-1] and y[-1] == pytest.approx(MIXTRAL_BYTES / 4.8e12 * 1e3, rel=1e-6)


def test_figures_for_another_scenario_have_no_book_marks_and_say_what_does_not_fit():
    s = figures.FigureScenario(resolve_model("deepseek-v3"), get_accelerator("h200"), BF16)
    assert not s.book and figures.book_scenario().book
    memory = figures.build("15.1.2-fig2-memory-budget", s)
    assert "does not fit" in memory.table and "tensor parallelism" in memory.table
    roofline = figures.build("15.1.1-fig1-roofline", s)      # arithmetic only: drawn
    assert "deepseek-v3" in roofline.fig.axes[0].get_title()
    ttft = figures.build("15.1.1-fig2-ttft-vs-prompt", figures.FigureScenario(
        resolve_model(MIXTRAL), get_accelerator("h200"), Precision(kv="fp8")))
    assert "book" not in ttft.table
    assert "book" in figures.build("15.1.1-fig2-ttft-vs-prompt").table
    with pytest.raises(ValueError, match="unknown figure"):
        figures.build("15.9.9-fig1-nothing", s)


def test_figures_subcommand_for_an_own_model(tmp_path, capsys):
    from inferlab.cli import main
    only = ["15.2.2-fig1-throughput-vs-batch", "15.1.2-fig2-memory-budget"]
    assert main(["figures", "--out", str(tmp_path), "--format", "svg", "--model", MIXTRAL, "--gpu", "h200",
                 "--kv-dtype", "fp8", "--only", *only]) == 0
    out = capsys.readouterr().out
    assert "mixtral-8x7b-v0.1 on h200" in out and "KV fp8" in out and "no book marks" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"{n}.svg" for n in only)
    assert "knee" in (tmp_path / "15.2.2-fig1-throughput-vs-batch.svg").read_text()


def test_decode_intensity_title_says_experts_lift_slowly(mixtral):
    p = plots.decode_intensity_plot(mixtral, get_accelerator("h100-sxm"), context_len=1000)
    assert "each expert sees B·k/E" in p.fig.axes[0].get_title()
    # B = 16 sequences: 16 · 2 / 8 = 4 tokens per expert, so the MLP's intensity is ~4, not 16
    row = next(line for line in p.table.splitlines() if line.split()[:1] == ["16"])
    assert 3.5 < float(row.split()[2]) < 4.5
    dense = plots.decode_intensity_plot(get_model("llama-2-13b"), get_accelerator("h100-sxm"), context_len=1000)
    assert dense.fig.axes[0].get_title() == "Decode at context 1000: batching lifts MLP, not attention"

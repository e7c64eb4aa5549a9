"""inferlab.interactive: the grids behind the book's interactive figures, checked against the library
and by hand; the spec's slider shows exactly one frame per step."""
from __future__ import annotations

import json

import pytest

from inferlab import interactive, plots
from inferlab.latency import decode_step_time_s, prefill_time_s
from inferlab.specs import BF16, get_accelerator, get_model

L13, H100 = get_model("llama-2-13b"), get_accelerator("h100-sxm")


def test_memory_grid_by_hand():
    g = interactive.memory_grid(L13, H100, BF16, contexts=(1000, 2000), active_context=1000, batches=(1, 10))
    assert [label for label, _ in g.frames] == [1000, 2000] and g.active == 0
    w = L13.n_params * 2 / 1e9
    per_seq = 2 * 40 * 40 * 128 * 2 * 1000 / 1e9          # 0.8192 GB at S = 1,000
    s1000 = g.frames[0][1]
    assert s1000["weights"] == pytest.approx([w, w])
    assert s1000["weights + KV cache"] == pytest.approx([w + per_seq, w + 10 * per_seq])
    assert g.frames[1][1]["weights + KV cache"][1] == pytest.approx(w + 20 * per_seq)
    assert s1000["capacity"] == [80.0, 80.0]


def test_the_scenario_value_joins_the_slider_and_is_active():
    g = interactive.ttft_grid(L13, H100, BF16, batches=(1, 4), active_batch=3, prompt_lens=(128, 1024))
    assert [label for label, _ in g.frames] == [1, 3, 4] and g.active == 1
    assert g.frames[1][1]["with attention"][1] == pytest.approx(prefill_time_s(L13, H100, 1024, 3) * 1e3)


def test_itl_grid_leaves_a_gap_where_the_batch_does_not_fit():
    g = interactive.itl_grid(L13, H100, BF16, batches=(1, 64), active_batch=1, contexts=(1024, 4096))
    ys = dict(g.frames)
    assert ys[1]["ITL"][0] == pytest.approx(decode_step_time_s(L13, H100, 1024, 1) * 1e3)
    assert ys[64]["ITL"][1] is None        # 64 x 4096 tokens x 0.82 MB = 215 GB > 80 GB


def test_spec_slider_toggles_one_frame_per_step():
    g = interactive.throughput_grid(L13, H100, BF16, contexts=(512, 2048), active_context=1024, batches=(1, 8))
    spec = json.loads(json.dumps(g.spec()))       # plain JSON, as the page receives it
    assert len(spec["data"]) == 3
    assert [t["visible"] for t in spec["data"]] == [False, True, False]
    steps = spec["layout"]["sliders"][0]["steps"]
    assert [s["label"] for s in steps] == ["512", "1024", "2048"]
    assert [s["args"][0]["visible"] for s in steps] == [[True, False, False], [False, True, False], [False, False, True]]


def test_explorable_keeps_the_static_figure_and_its_table():
    plot = plots.memory_budget_plot(L13, H100, 1000, BF16)
    e = interactive.explore(plot, interactive.memory_grid(L13, H100, BF16))
    data, meta = e._repr_mimebundle_()
    assert data["text/plain"] == plot.table and "image/png" in data and "alt" in meta["image/png"]
    assert data[interactive.MIME]["layout"]["sliders"]
    with pytest.raises(TypeError, match="Grid"):
        interactive.explore(plot, {"data": []})
    with pytest.raises(ValueError, match="contexts"):
        interactive.memory_grid(L13, H100, BF16, contexts=())

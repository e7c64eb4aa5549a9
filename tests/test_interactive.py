"""inferlab.notebook.interactive: the grids behind the book's interactive figures, checked against the library
and by hand; the spec's slider shows exactly one frame per step."""
from __future__ import annotations

import json

import pytest

from inferlab.notebook import interactive, plots
from inferlab.core.latency import decode_step_time_s, prefill_time_s
from inferlab.core.specs import BF16, get_accelerator, get_model

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
    # per frame: the throughput curve and its two marks (B_max, B*)
    assert len(spec["data"]) == 3 * 3
    frame_of = g.trace_frames()
    assert frame_of == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert [t["visible"] for t in spec["data"]] == [f == 1 for f in frame_of]
    steps = spec["layout"]["sliders"][0]["steps"]
    assert [s["label"] for s in steps] == ["512", "1024", "2048"]
    assert [s["args"][0]["visible"] for s in steps] == [[f == i for f in frame_of] for i in range(3)]


def test_throughput_grid_marks_b_star_and_b_max_as_the_static_figure():
    g = interactive.throughput_grid(L13, H100, BF16, contexts=(1024,), active_context=1024)
    kv_per_seq = 2 * 40 * 40 * 128 * 2 * 1024                 # bytes, bf16, S = 1,024
    b_max = int((80e9 - L13.n_params * 2) // kv_per_seq)
    b_star = L13.n_params * 2 / kv_per_seq
    (marks,) = g.marks
    assert dict((label.split(" =")[0], x) for label, x in marks) == {"B_max": b_max, "B*": pytest.approx(b_star)}
    spec = g.spec()
    lines = [t for t in spec["data"] if t["name"].startswith(("B_max", "B*"))]
    assert [t["x"] for t in lines] == [[b_max, b_max], [pytest.approx(b_star)] * 2]
    assert all(t["line"]["dash"] == "dash" for t in lines)
    assert plots.throughput_plot(L13, H100, 1024, BF16).data["max_batch"] == b_max   # the static figure's mark
    assert g.notes == ((),) and spec["layout"]["annotations"] == []


L70 = get_model("llama-2-70b")


@pytest.mark.parametrize("grid", [interactive.memory_grid, interactive.throughput_grid])
def test_a_scenario_that_does_not_fit_says_so_and_names_the_tp_degree_that_does(grid):
    g = grid(L70, H100, BF16)
    spec = json.loads(json.dumps(g.spec()))
    text = spec["layout"]["annotations"][0]["text"]
    note = text.replace("<br>", " ")
    assert "does not fit on one h100-sxm" in note and "tensor parallelism 2" in note
    assert all(len(line) <= 34 for line in text.split("<br>"))     # lines that fit a phone's plot
    # every slider position carries its note (138 GB of weights fit no context) and no B_max mark
    for step in spec["layout"]["sliders"][0]["steps"]:
        assert "tensor parallelism 2" in step["args"][1]["annotations"][0]["text"].replace("<br>", " ")
    assert all(m == () for m in g.marks)


def test_the_menus_carry_each_grids_notes():
    m = interactive.memory_grid(L13, H100, BF16, contexts=(1000,), active_context=1000, models=(L70,))
    spec = json.loads(json.dumps(m.spec()))
    names = spec["controls"]["menus"][0]["values"]
    combo = spec["controls"]["combos"].index([names.index("llama-2-70b"), 0])
    (notes,) = spec["controls"]["notes"][combo]
    assert "tensor parallelism 2" in notes[0]["text"].replace("<br>", " ")
    assert spec["controls"]["notes"][spec["controls"]["combos"].index([0, 0])] == [[]]
    # the owner list covers every trace, marks included
    assert len(spec["controls"]["owner"]) == len(spec["data"])


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


def _grid(title, ys_by_frame):
    return interactive.Grid(title, (1, 2), "x", "y", "s", tuple((f"f{i}", {"y": ys}) for i, ys in enumerate(ys_by_frame)),
                            active=1)


def test_menu_grid_shows_the_active_grid_at_its_frame_and_lets_the_page_choose_the_rest():
    grids = {(i, j): _grid(f"m{i} a{j}", ([i, j], [10 * i, 10 * j])) for i in range(2) for j in range(3)}
    g = interactive.MenuGrid((("model", ("m0", "m1")), ("accelerator", ("a0", "a1", "a2"))), grids, active=(1, 2))
    spec = json.loads(json.dumps(g.spec()))
    assert len(spec["data"]) == 12                        # 6 grids x 2 frames x 1 series
    visible = [t["y"] for t in spec["data"] if t["visible"]]
    assert visible == [[10, 20]]                          # grid (1, 2), frame 1
    c = spec["controls"]
    assert [m["values"] for m in c["menus"]] == [["m0", "m1"], ["a0", "a1", "a2"]]
    assert [m["active"] for m in c["menus"]] == [1, 2] and c["frame"] == 1
    # every trace names its grid and frame: grid (0, 1) at frame 0 is the trace [0, 1]
    k = c["combos"].index([0, 1])
    assert [t["y"] for t, o in zip(spec["data"], c["owner"]) if o == [k, 0]] == [[0, 1]]
    assert c["titles"][k] == "m0 a1"
    assert all(s["method"] == "skip" for s in spec["layout"]["sliders"][0]["steps"])


def test_menu_grid_needs_one_grid_per_combination():
    grids = {(0,): _grid("a", ([1, 2], [3, 4]))}
    with pytest.raises(ValueError, match="one Grid per menu combination"):
        interactive.MenuGrid((("scheduler", ("x", "y")),), grids)


def test_tail_grid_plots_the_sweeps_percentiles_in_ms_under_a_scheduler_menu():
    from inferlab.serving import SLO
    from inferlab.notebook import lab

    def s(ttft, itl):
        return {"ttft_s": {"p50": ttft, "p90": 2 * ttft, "p99": 3 * ttft}, "itl_s": {"p50": itl, "p90": itl, "p99": 4 * itl}}
    sweep = lab.Sweep((4.0, 8.0), ("continuous", "chunked"), {
        "continuous": [s(0.1, 0.02), s(0.2, 0.03)], "chunked": [s(0.15, 0.01), s(0.3, 0.012)]}, SLO(0.5, 0.05))
    g = interactive.tail_grid(sweep)
    assert g.menus == (("scheduler", ("continuous", "chunked")),)
    chunked = g.grids[(1,)]
    assert [label for label, _ in chunked.frames] == ["p50", "p90", "p99"] and chunked.active == 2
    p99 = dict(chunked.frames)["p99"]
    assert p99["TTFT"] == pytest.approx([450.0, 900.0]) and p99["ITL"] == pytest.approx([40.0, 48.0])
    assert p99["TTFT target"] == [500.0, 500.0] and p99["ITL target"] == pytest.approx([50.0, 50.0])
    with pytest.raises(ValueError, match="percentiles"):
        interactive.tail_grid(sweep, ("p95",))


def test_model_and_accelerator_menus_hold_each_combinations_own_grid():
    L8, H200 = get_model("llama-3-8b"), get_accelerator("h200")
    g = interactive.itl_grid(L13, H100, BF16, batches=(1, 8), contexts=(1024, 4096),
                             models=(L8, L13), accelerators=(H200,))
    # the scenario's own model and accelerator first and active; the repeated 13B is not listed twice
    assert g.menus == (("model", ("llama-2-13b", "llama-3-8b")), ("accelerator", ("h100-sxm", "h200")))
    assert g.active == (0, 0)
    one = dict(g.grids[(1, 1)].frames)[8]["ITL"]
    assert one[0] == pytest.approx(decode_step_time_s(L8, H200, 1024, 8) * 1e3)
    assert g.grids[(0, 0)] == interactive.itl_grid(L13, H100, BF16, batches=(1, 8), contexts=(1024, 4096))
    assert interactive.itl_grid(L13, H100, BF16).__class__ is interactive.Grid    # no menus asked: no menus


def test_a_menu_grids_flat_line_is_sent_as_its_two_ends():
    g = interactive.memory_grid(L13, H100, BF16, contexts=(1000,), batches=(1, 5, 10), accelerators=(H100,),
                                models=(get_model("llama-3-8b"),))
    spec = g.spec()
    capacity = [t for t in spec["data"] if t["name"] == "capacity"][0]
    assert capacity["x"] == [1, 10] and capacity["y"] == [80.0, 80.0]
    kv = [t for t in spec["data"] if t["name"] == "weights + KV cache"][0]
    assert kv["x"] == [1, 5, 10] and len(set(kv["y"])) == 3

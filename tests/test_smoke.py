"""The package imports and its data loads: the minimum a fresh clone must do."""
import inferlab


def test_every_named_model_and_accelerator_loads():
    assert inferlab.list_models() and inferlab.list_accelerators()
    for name in inferlab.list_models():
        assert inferlab.get_model(name).n_params > 0
    for name in inferlab.list_accelerators():
        assert inferlab.get_accelerator(name).peak("bf16") > 0


def test_gqa_variant_changes_only_the_kv_heads_and_keeps_the_parameter_count():
    m = inferlab.get_model("llama-2-13b")
    g = m.gqa_variant(8)
    assert (g.n_kv_heads, g.n_heads, g.d_model, g.n_layers) == (8, 40, 5120, 40)
    # K and V lose 2 * 5120 * (40 - 8) * 128 weights per layer; the gated MLP (3 matrices of
    # 5120 x d_ff) gains them back: d_ff grows by 2 * 32 * 128 / 3 = 2730.67 -> 2731.
    assert g.d_ff == 13824 + 2731
    assert abs(g.n_params - m.n_params) <= 3 * 5120 * 40  # at most one d_ff rounding step per layer
    assert m.gqa_variant(40) is m

"""The package imports and its data loads: the minimum a fresh clone must do."""
import inferlab
import pytest

pytestmark = pytest.mark.core


# Parameter counts of the released checkpoints (the safetensors totals Hugging Face reports), which
# the architecture in data/models.toml must reproduce exactly; a loader that dropped a field (tied
# embeddings, the gated MLP, GQA heads) would miss them by millions.
RELEASED = {"llama-2-7b": 6_738_415_616, "llama-2-13b": 13_015_864_320, "llama-2-70b": 68_976_648_192,
            "llama-3-8b": 8_030_261_248, "llama-3-70b": 70_553_706_496, "mistral-7b": 7_241_732_096}


def test_every_named_model_and_accelerator_loads():
    models = inferlab.list_models()
    assert set(RELEASED) <= set(models)
    for name, n in RELEASED.items():
        assert inferlab.get_model(name).n_params == n, name
    # The book's 13B variant: within 1 % of the chapter's "13B".
    assert abs(inferlab.get_model("llama-2-13b-book").n_params - 13e9) < 0.01 * 13e9
    # H100 SXM datasheet: 989.4 TFLOP/s dense bf16, 3.35 TB/s, 80 GB; every accelerator loads
    # with a bf16 peak above its bandwidth (ridge points of tens to hundreds of FLOP/byte).
    h100 = inferlab.get_accelerator("h100-sxm")
    assert (h100.peak("bf16"), h100.hbm_bytes_per_s, h100.memory_bytes) == (989.4e12, 3.35e12, 80e9)
    for name in inferlab.list_accelerators():
        acc = inferlab.get_accelerator(name)
        assert 50 < acc.peak("bf16") / acc.hbm_bytes_per_s < 1000, name


def test_gqa_variant_changes_only_the_kv_heads_and_keeps_the_parameter_count():
    m = inferlab.get_model("llama-2-13b")
    g = m.gqa_variant(8)
    assert (g.n_kv_heads, g.n_heads, g.d_model, g.n_layers) == (8, 40, 5120, 40)
    # K and V lose 2 * 5120 * (40 - 8) * 128 weights per layer; the gated MLP (3 matrices of
    # 5120 x d_ff) gains them back: d_ff grows by 2 * 32 * 128 / 3 = 2730.67 -> 2731.
    assert g.d_ff == 13824 + 2731
    assert abs(g.n_params - m.n_params) <= 3 * 5120 * 40  # at most one d_ff rounding step per layer
    assert m.gqa_variant(40) is m

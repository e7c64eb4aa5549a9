"""The PyTorch model against the library's arithmetic: parameters, KV-cache correctness, FLOPs."""
import pytest
import torch

from inferlab import get_model, list_models
from inferlab.measure.model import build_model, flop_counter

GQA = get_model("llama-3-8b").with_(d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16,
                                    d_ff=128, vocab_size=97)
MHA = get_model("llama-2-13b-book").with_(d_model=48, n_layers=2, n_heads=3, n_kv_heads=3,
                                          head_dim=16, d_ff=192, vocab_size=89)
TIED = GQA.with_(tied_embeddings=True)
TINY = {"gqa-gated": GQA, "mha-plain": MHA}
TOL = {torch.float32: dict(atol=1e-5, rtol=1e-4), torch.float64: dict(atol=1e-12, rtol=1e-10)}

# Published parameter counts of the real checkpoints (Hugging Face safetensors metadata).
PUBLISHED = {"llama-2-7b": 6_738_415_616, "llama-2-13b": 13_015_864_320,
             "llama-3-8b": 8_030_261_248, "mistral-7b": 7_241_732_096}


def n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())  # parameters() yields a tied weight once


@pytest.mark.parametrize("name", list_models())
def test_parameter_count_matches_config(name):
    assert n_params(build_model(get_model(name), device="meta")) == get_model(name).n_params


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_count_matches_published_checkpoint(name):
    assert n_params(build_model(get_model(name), device="meta")) == PUBLISHED[name]


def test_tied_head_counted_once_and_shared():
    model = build_model(TIED)
    assert model.output.weight is model.tok_embeddings.weight
    assert n_params(model) == TIED.n_params == GQA.n_params - GQA.vocab_size * GQA.d_model


def model_and_tokens(cfg, dtype, batch=3, seq=13):
    # std 0.02 leaves attention nearly uniform, so a wrong mask would barely move the logits;
    # sharper weights make every mistake visible well above the tolerance.
    model = build_model(cfg, dtype=dtype, seed=1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not name.endswith("norm.weight"):
                p.mul_(8.0)
    tokens = torch.randint(0, cfg.vocab_size, (batch, seq), generator=torch.Generator().manual_seed(2))
    return model, tokens


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("cfg", TINY.values(), ids=TINY.keys())
def test_prefill_then_decode_equals_full_forward(cfg, dtype):
    model, tokens = model_and_tokens(cfg, dtype)
    with torch.no_grad():
        full = model(tokens)  # no cache: plain causal pass
        model.setup_cache(max_batch=4, max_seq_len=32)
        k = 5
        steps = [model(tokens[:, :k], start_pos=0)]
        steps += [model(tokens[:, t:t + 1], start_pos=t) for t in range(k, tokens.shape[1])]
    assert full.shape == (*tokens.shape, cfg.vocab_size)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("cfg", TINY.values(), ids=TINY.keys())
def test_chunked_prefill_equals_full_forward(cfg, dtype):
    model, tokens = model_and_tokens(cfg, dtype)
    with torch.no_grad():
        full = model(tokens)
        model.setup_cache(max_batch=4, max_seq_len=32)
        chunks = [model(tokens[:, s:s + 3], start_pos=s) for s in range(0, tokens.shape[1], 3)]
        last = model(tokens, start_pos=0, all_logits=False)  # cache reused from position 0
    torch.testing.assert_close(torch.cat(chunks, dim=1), full, **TOL[dtype])
    torch.testing.assert_close(last, full[:, -1:], **TOL[dtype])


def test_cache_sees_only_the_past():
    """Control for the tests above: a changed token changes its own and later logits (by far more
    than the tolerance) and leaves earlier ones alone."""
    model, tokens = model_and_tokens(GQA, torch.float32)
    other = tokens.clone()
    other[:, 6] = (other[:, 6] + 1) % GQA.vocab_size
    with torch.no_grad():
        a, b = model(tokens), model(other)
    torch.testing.assert_close(a[:, :6], b[:, :6], **TOL[torch.float32])
    assert (a[:, 6:] - b[:, 6:]).abs().amax(dim=-1).min() > 1e-2


def test_cache_bounds_are_checked():
    model, tokens = model_and_tokens(GQA, torch.float32)
    model.setup_cache(max_batch=2, max_seq_len=16)
    with pytest.raises(ValueError, match="batch"):
        model(tokens, start_pos=0)
    with pytest.raises(ValueError, match="positions"):
        model(tokens[:2], start_pos=8)


def counted_flops(model, tokens, start_pos, all_logits=True) -> int:
    with torch.no_grad():
        model(tokens[:, :start_pos], start_pos=0) if start_pos else None  # fill the past
        with flop_counter() as counter:
            model(tokens[:, start_pos:], start_pos=start_pos, all_logits=all_logits)
    return counter.get_total_flops()


# (past_len, q_len, all_logits): prefill, prefill keeping the last logits, decode, a chunk.
CASES = [(0, 12, True), (0, 12, False), (11, 1, True), (8, 4, True), (8, 4, False)]


@pytest.mark.parametrize("past, q, all_logits", CASES)
@pytest.mark.parametrize("cfg", TINY.values(), ids=TINY.keys())
def test_counted_flops_match_hand_formula(cfg, past, q, all_logits):
    """2 FLOPs per weight per token for the layers, the head on q (or 1) positions, and
    4 * n_heads * head_dim per query-key pair (QK^T and PV, dense) for attention."""
    B = 2
    model = build_model(cfg)
    model.setup_cache(max_batch=B, max_seq_len=32)
    tokens = torch.randint(0, cfg.vocab_size, (B, past + q))
    layers = cfg.n_layers * (cfg.attention_params_per_layer + cfg.mlp_params_per_layer)
    head = cfg.vocab_size * cfg.d_model
    attention = 4 * cfg.n_layers * cfg.n_heads * cfg.head_dim * q * (past + q)
    expected = B * (2 * q * layers + 2 * (q if all_logits else 1) * head + attention)
    assert counted_flops(model, tokens, past, all_logits) == expected


@pytest.mark.parametrize("past, q, all_logits", CASES)
@pytest.mark.parametrize("cfg", TINY.values(), ids=TINY.keys())
def test_counted_flops_match_forward_costs(cfg, past, q, all_logits):
    """FlopCounterMode counts SDPA dense (the masked half included), hence causal=False."""
    from inferlab.core.costs import forward_costs

    B = 2
    model = build_model(cfg)
    model.setup_cache(max_batch=B, max_seq_len=32)
    tokens = torch.randint(0, cfg.vocab_size, (B, past + q))
    analytic = forward_costs(cfg, B, q, past_len=past, causal=False,
                             all_logits=all_logits).total.flops
    assert counted_flops(model, tokens, past, all_logits) == analytic


def test_flop_counter_counts_cpu_attention():
    """Without the CPU kernel in the mapping, torch's counter reports 0 for SDPA on CPU."""
    model = build_model(GQA)
    tokens = torch.randint(0, GQA.vocab_size, (1, 8))
    with torch.no_grad(), flop_counter() as counter:
        model(tokens)
    by_op = {str(op): n for op, n in counter.get_flop_counts()["Global"].items()}
    assert sum(n for op, n in by_op.items() if "attention" in op) == 4 * 2 * 4 * 16 * 8 * 8

"""A Llama-style decoder in plain PyTorch, built from a ModelConfig with random weights.

Used to check the library's arithmetic against a real forward pass: parameter counts against
`ModelConfig.n_params`, FLOPs (torch's FlopCounterMode) against the analytic costs, and the KV
cache against a full forward. Nothing is downloaded; the weights are noise.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count

from inferlab.core.specs import ModelConfig

ROPE_BASE = 10_000.0  # Llama-2's; Llama-3 uses 500k. It changes no count.


class RMSNorm(nn.Module):
    """y = x / sqrt(mean(x^2) + eps) * w; d parameters, no bias."""

    def __init__(self, d: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x  # reduce in >= fp32
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def rope_tables(head_dim: int, n_pos: int, device=None):
    """cos, sin of p * base^(-2i/head_dim) for positions p < n_pos and pairs i < head_dim/2.
    Built in float64 so fp64 checks of the cache are exact to rounding."""
    inv_freq = ROPE_BASE ** (-torch.arange(0, head_dim, 2, dtype=torch.float64, device=device) / head_dim)
    angles = torch.outer(torch.arange(n_pos, dtype=torch.float64, device=device), inv_freq)
    return angles.cos(), angles.sin()


def apply_rope(x, cos, sin):
    """Rotate pairs (x_i, x_{i+D/2}) by their angle (the "rotate half" layout); x: [B, H, T, D]."""
    dtype = torch.promote_types(x.dtype, torch.float32)
    x1, x2 = x.to(dtype).chunk(2, dim=-1)
    cos, sin = cos.to(dtype), sin.to(dtype)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).type_as(x)


class KVCache(nn.Module):
    """Static cache [max_batch, n_kv_heads, max_seq_len, head_dim] for K and V, written by position."""

    def __init__(self, max_batch, max_seq_len, n_kv_heads, head_dim, dtype=None, device=None):
        super().__init__()
        shape = (max_batch, n_kv_heads, max_seq_len, head_dim)
        self.register_buffer("k_cache", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v_cache", torch.zeros(shape, dtype=dtype, device=device), persistent=False)

    def update(self, start_pos: int, k, v):
        """Store k, v at positions start_pos.. and return the first start_pos + T positions:
        attention then costs (and is counted over) the real context, not the whole buffer."""
        B, _, T, _ = k.shape
        if B > self.k_cache.shape[0]:
            raise ValueError(f"batch {B} does not fit the KV cache (allowed: batch <= "
                             f"{self.k_cache.shape[0]}); call setup_cache with a larger max_batch")
        end = start_pos + T
        self.k_cache[:B, :, start_pos:end] = k
        self.v_cache[:B, :, start_pos:end] = v
        return self.k_cache[:B, :, :end], self.v_cache[:B, :, :end]


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.wq = nn.Linear(cfg.d_model, cfg.q_dim, bias=False)
        self.wk = nn.Linear(cfg.d_model, cfg.kv_dim, bias=False)
        self.wv = nn.Linear(cfg.d_model, cfg.kv_dim, bias=False)
        self.wo = nn.Linear(cfg.q_dim, cfg.d_model, bias=False)
        self.kv_cache: KVCache | None = None

    def forward(self, x, cos, sin, start_pos: int):
        B, T, _ = x.shape
        q = self.wq(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if self.kv_cache is not None:
            k, v = self.kv_cache.update(start_pos, k, v)
        S = k.shape[2]
        # SDPA's is_causal aligns the triangle top-left, right only when T == S; a chunk after a
        # prefix needs query p (absolute start_pos + i) to see keys 0..p: a shifted triangle.
        mask = None
        if T > 1 and S > T:
            mask = torch.ones(T, S, dtype=torch.bool, device=x.device).tril(diagonal=start_pos)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=(T > 1 and S == T),
                                           enable_gqa=self.n_kv_heads != self.n_heads)
        return self.wo(y.transpose(1, 2).reshape(B, T, -1))


class FeedForward(nn.Module):
    """Gated: w2(silu(w1 x) * w3 x) (SwiGLU, three d x d_ff matrices); plain: w2(gelu(w1 x))."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.w1 = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.w2 = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)
        self.w3 = nn.Linear(cfg.d_model, cfg.d_ff, bias=False) if cfg.gated_mlp else None

    def forward(self, x):
        if self.w3 is None:
            return self.w2(F.gelu(self.w1(x)))
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.attention_norm, self.attention = RMSNorm(cfg.d_model), Attention(cfg)
        self.ffn_norm, self.feed_forward = RMSNorm(cfg.d_model), FeedForward(cfg)

    def forward(self, x, cos, sin, start_pos: int):
        x = x + self.attention(self.attention_norm(x), cos, sin, start_pos)
        return x + self.feed_forward(self.ffn_norm(x))


class Transformer(nn.Module):
    """Pre-norm decoder: embedding, n_layers x (attention + MLP), final RMSNorm, LM head.

    Without `setup_cache` the forward is a plain causal pass over `tokens` (start_pos must be 0);
    after it, each call writes its K, V at start_pos.. and attends over positions 0..end.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        if not isinstance(cfg, ModelConfig):
            raise ValueError(f"cfg must be a ModelConfig (e.g. inferlab.core.specs.get_model(...)); got {cfg!r}")
        if cfg.head_dim % 2:
            raise ValueError(f"head_dim must be even for rotary positions (pairs of channels); "
                             f"got head_dim={cfg.head_dim}")
        self.cfg = cfg
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model)
        self.output = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tied_embeddings:
            self.output.weight = self.tok_embeddings.weight
        self.register_buffer("rope_cos", None, persistent=False)  # set by setup_cache
        self.register_buffer("rope_sin", None, persistent=False)

    def setup_cache(self, max_batch: int, max_seq_len: int, dtype=None, device=None):
        """Allocate a static KV cache per layer (model dtype/device by default) and rotary tables."""
        from inferlab.base.input_checks import positive_int
        positive_int("max_batch", max_batch, maximum=2**31 - 1)
        positive_int("max_seq_len", max_seq_len, maximum=2**31 - 1)
        max_batch, max_seq_len = int(max_batch), int(max_seq_len)
        ref = self.output.weight
        dtype, device = dtype or ref.dtype, device or ref.device
        for layer in self.layers:
            layer.attention.kv_cache = KVCache(max_batch, max_seq_len, self.cfg.n_kv_heads,
                                               self.cfg.head_dim, dtype, device)
        self.rope_cos, self.rope_sin = rope_tables(self.cfg.head_dim, max_seq_len, device)

    def forward(self, tokens, start_pos: int = 0, all_logits: bool = True):
        """Logits [B, T, V] for tokens [B, T] at positions start_pos..start_pos+T-1, or [B, 1, V]
        for the last position only if not all_logits (the LM head then runs on one position)."""
        from inferlab.base.input_checks import nonneg_int
        if not isinstance(tokens, torch.Tensor) or tokens.ndim != 2 or tokens.dtype not in (
                torch.int64, torch.int32, torch.int16, torch.uint8, torch.int8) or tokens.numel() == 0:
            raise ValueError(f"tokens must be a non-empty integer tensor of shape [batch, seq]; got "
                             f"{type(tokens).__name__} {getattr(tokens, 'dtype', '')} "
                             f"{tuple(getattr(tokens, 'shape', ()))}")
        nonneg_int("start_pos", start_pos)
        start_pos = int(start_pos)
        # Ids are checked where it costs no device sync (CPU, eager); on a GPU the embedding's own
        # device-side assert stops an out-of-range id, and timing loops stay free of syncs.
        if tokens.device.type == "cpu" and not torch.compiler.is_compiling():
            low, high = int(tokens.min()), int(tokens.max())
            if low < 0 or high >= self.cfg.vocab_size:
                raise ValueError(f"token ids must lie in 0..{self.cfg.vocab_size - 1} (the vocabulary); "
                                 f"got ids from {low} to {high}")
        T = tokens.shape[1]
        if self.rope_cos is None:
            if start_pos != 0:
                raise ValueError(f"start_pos must be 0 without a KV cache; got {start_pos} "
                                 "(call setup_cache first to continue a sequence)")
            cos, sin = rope_tables(self.cfg.head_dim, T, tokens.device)
        elif start_pos + T > len(self.rope_cos):
            raise ValueError(f"positions {start_pos}..{start_pos + T - 1} do not fit the KV cache "
                             f"(allowed: positions < {len(self.rope_cos)}); call setup_cache with a "
                             "larger max_seq_len")
        else:
            cos, sin = self.rope_cos[start_pos:start_pos + T], self.rope_sin[start_pos:start_pos + T]
        x = self.tok_embeddings(tokens)
        for layer in self.layers:
            x = layer(x, cos, sin, start_pos)
        if not all_logits:
            x = x[:, -1:]
        return self.output(self.norm(x))


def build_model(cfg: ModelConfig, device="cpu", dtype=torch.float32, seed: int = 0) -> Transformer:
    """A Transformer with weights ~ N(0, 0.02^2) and norms at 1, made on `device`.
    On the meta device nothing is allocated (shapes only: enough to count a 70B model's parameters)."""
    from inferlab.base.input_checks import nonneg_int
    nonneg_int("seed", seed)
    with torch.device(device):
        model = Transformer(cfg).to(dtype)
    if model.output.weight.is_meta:
        return model
    gen = torch.Generator(model.output.weight.device).manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():  # tied weights are listed once
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.normal_(0.0, 0.02, generator=gen)
    return model


def _sdpa_flops(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs):
    return sdpa_flop_count(query_shape, key_shape, value_shape)


def flop_counter(display: bool = False) -> FlopCounterMode:
    """torch's FlopCounterMode, plus CPU's fused attention kernel, which torch 2.x leaves out
    (it registers only the CUDA ones, so SDPA on CPU would count 0). Counted dense:
    4 * B * n_heads * q_len * k_len * head_dim, the causal mask's skipped half included."""
    cpu_sdpa = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    return FlopCounterMode(display=display, custom_mapping={cpu_sdpa: _sdpa_flops})

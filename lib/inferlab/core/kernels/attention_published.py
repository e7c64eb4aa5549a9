"""Attention's two products (QK^T and PV, fused) at efficiencies read from published attention kernels:
each operator takes max(FLOPs / (e_c peak), bytes / (e_m BW)), the roofline at these shares.

    e_c, 16-bit   740 / 989.4 = 0.748   FlashAttention-3 forward on an H100 SXM5, FP16: "up to 740 TFLOP/s"
                                         (Shah et al. 2024, arXiv 2407.08608)
    e_c, FP8     1200 / 1978.9 = 0.606  the same paper, FP8 forward: "close to 1.2 PFLOP/s"
    e_m          3000 / 3350 = 0.896    FlashMLA's dense MLA decoding kernel on an H800 SXM5, BF16, CUDA 12.8:
                                         "up to 3,000 GB/s" in memory-bound configurations
                                         (github.com/deepseek-ai/FlashMLA, README)

Each is a single published point, the kernel's best case ("up to"): long sequences for the prefill
figure, a large batch of long caches for the decode one. A short prompt or a short cache runs below
it, so these times are a lower bound on attention, closer than the ideal roofline. FlashMLA's figure
is for MLA's latent cache; it is used for any KV cache (grouped-query ones read the same bytes per
element). The figures are Hopper's (an H800 is an H100 SXM in SMs, clocks and HBM); the H200 takes
them at its own peak and bandwidth (`kernels.measured`); no A100 attention figure is used.
"""
from __future__ import annotations

from inferlab.core.kernels.measured import TRANSFERS, check_measured
from inferlab.core.roofline import roofline_time_s

# (compute share per compute dtype, bandwidth share) from the module doc's published figures.
COMPUTE_SHARE = {"bf16": 740e12 / 989.4e12, "fp16": 740e12 / 989.4e12, "fp8": 1200e12 / 1978.9e12}
BANDWIDTH_SHARE = 3000e9 / 3350e9
PUBLISHED_ON = ("h100-sxm",)
SOURCES = ("FlashAttention-3 (Shah et al. 2024): H100 SXM5 forward up to 740 TFLOP/s FP16, ~1.2 PFLOP/s FP8; "
           "FlashMLA README: H800 SXM5 decoding up to 3,000 GB/s; single best-case points")


def check_published_attention(accelerator, compute_dtype: str, param: str = "accelerator"):
    """`accelerator` if the published attention figures stand for it (a Hopper part), else one line."""
    acc = check_measured(accelerator, param)
    if acc.name not in PUBLISHED_ON and TRANSFERS.get(acc.name) not in PUBLISHED_ON:
        raise ValueError(f"{param}: no published attention figures for {acc.name!r}; they exist for Hopper parts "
                         f"(h100-sxm and those carried from it: {', '.join(TRANSFERS)})")
    if compute_dtype not in COMPUTE_SHARE:
        raise ValueError(f"compute dtype: published attention figures exist for {', '.join(COMPUTE_SHARE)}; "
                         f"got {compute_dtype}")
    return acc


def attention_time_s(flops, bytes_moved, accelerator, compute_dtype: str):
    """Seconds of one attention product of `flops` and `bytes_moved` at the published shares (module doc)."""
    acc = check_published_attention(accelerator, compute_dtype)
    return roofline_time_s(flops, bytes_moved, acc, compute_dtype, COMPUTE_SHARE[compute_dtype], BANDWIDTH_SHARE)

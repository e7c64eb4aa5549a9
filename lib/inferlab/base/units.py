"""Element sizes of the number formats, and display conversions (used only at the edges).

The book writes GB for 1e9 bytes and TB/s for 1e12 bytes/s; so does this library. Where GiB
(2**30 bytes, 7.4 % larger) would change a conclusion, the text says so.
"""
from __future__ import annotations

from inferlab.base.input_checks import choice

# Bytes per stored element. int4 packs two values per byte. The block-scaled 4-bit formats count
# their scales: MXFP4 (OCP Microscaling spec v1.0) stores 32 E2M1 values (4 bits) with one shared
# E8M0 scale (8 bits), (32 x 4 + 8) / 32 = 4.25 bits a value; NVFP4 (NVIDIA Blackwell) stores 16
# E2M1 values with one FP8 E4M3 scale, (16 x 4 + 8) / 16 = 4.5 bits a value, plus one FP32 scale
# per tensor (4 bytes a matrix, left out of the per-element size; core.quantization counts it).
DTYPES: dict[str, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5,
    "mxfp4": 4.25 / 8,
    "nvfp4": 4.5 / 8,
}

GB = 1e9
GiB = 2.0**30
TB = 1e12
TFLOP = 1e12
MS = 1e-3


def bytes_per_element(dtype: str) -> float:
    """Storage size of one element of `dtype` in bytes (fp32 4, bf16/fp16 2, fp8/int8 1, int4 0.5;
    mxfp4 0.53125 and nvfp4 0.5625 with their block scales)."""
    return DTYPES[choice("dtype", dtype, DTYPES)]


def to_gb(n_bytes):
    return n_bytes / GB


def to_ms(seconds):
    return seconds / MS

"""Element sizes of the number formats, and display conversions (used only at the edges).

The book writes GB for 1e9 bytes and TB/s for 1e12 bytes/s; so does this library. Where GiB
(2**30 bytes, 7.4 % larger) would change a conclusion, the text says so.
"""
from __future__ import annotations

from inferlab.base.input_checks import choice

# Bytes per stored element. int4 packs two values per byte.
DTYPES: dict[str, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5,
}

GB = 1e9
GiB = 2.0**30
TB = 1e12
TFLOP = 1e12
MS = 1e-3


def bytes_per_element(dtype: str) -> float:
    """Storage size of one element of `dtype` in bytes (fp32 4, bf16/fp16 2, fp8/int8 1, int4 0.5)."""
    return DTYPES[choice("dtype", dtype, DTYPES)]


def to_gb(n_bytes):
    return n_bytes / GB


def to_ms(seconds):
    return seconds / MS

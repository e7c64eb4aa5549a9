"""The "same on a real GPU" sections' rows beyond 16-bit on the H100: FP8 W8A8 and the H200, beside the
16-bit H100, each on the ideal roofline and on the measured kernels (`efficiency.MeasuredKernels`).

    Markdown(precision_rows.markdown(MODEL, prompt_len=2048, context_len=1024, batch=1))

The rows name their own accelerators (the chapter's H100 SXM and the H200, the part with its SMs and a
larger, faster memory); the page's model and lengths arrive as values. Measured FP8 products come from
DeepGEMM's published H800 table; the H200's from the H100's curves carried by its HBM bandwidth
(docs/kernels.md). KV cache in the weights' format (bf16 or fp8).
"""
from __future__ import annotations

from dataclasses import dataclass

from inferlab.core.deployment import Deployment
from inferlab.core.efficiency import MeasuredKernels
from inferlab.core.latency import decode_step_time_s, prefill_time_s
from inferlab.core.specs import Precision, check_model, get_accelerator
from inferlab.base.input_checks import positive_int
from inferlab.base.units import MS

ROWS = (("h100-sxm", "bf16"), ("h100-sxm", "fp8"), ("h200", "bf16"), ("h200", "fp8"))
LABELS = {"bf16": "bf16", "fp8": "FP8 W8A8 (weights, activations, KV)"}


@dataclass(frozen=True)
class Row:
    """One accelerator and format: TTFT and ITL, ideal and measured, in seconds."""

    accelerator: str
    dtype: str
    ttft_ideal_s: float
    ttft_measured_s: float
    itl_ideal_s: float
    itl_measured_s: float


def rows(model, prompt_len: int, context_len: int, batch: int = 1) -> list[Row]:
    """ROWS for `model`: TTFT of `batch` prompts of `prompt_len` tokens, ITL of `batch` sequences at `context_len`."""
    m = check_model(model)
    positive_int("prompt_len", prompt_len)
    positive_int("context_len", context_len)
    positive_int("batch", batch)
    out = []
    for name, dtype in ROWS:
        acc = get_accelerator(name)
        prec = Precision(weights=dtype, activations=dtype, kv=dtype)
        ideal, meas = Deployment(acc, prec), Deployment(acc, prec, efficiency=MeasuredKernels())
        out.append(Row(name, dtype, prefill_time_s(m, ideal, prompt_len, batch), prefill_time_s(m, meas, prompt_len, batch),
                       decode_step_time_s(m, ideal, context_len, batch), decode_step_time_s(m, meas, context_len, batch)))
    return out


def markdown(model, prompt_len: int, context_len: int, batch: int = 1) -> str:
    """`rows` as a Markdown table, with measured / ideal for each time."""
    lines = [f"| GPU | format | TTFT ideal | TTFT measured | ITL ideal | ITL measured |", "|---|---|---|---|---|---|"]
    for r in rows(model, prompt_len, context_len, batch):
        lines.append(f"| {r.accelerator} | {LABELS[r.dtype]} | {r.ttft_ideal_s / MS:.1f} ms | {r.ttft_measured_s / MS:.1f} ms "
                     f"(x{r.ttft_measured_s / r.ttft_ideal_s:.2f}) | {r.itl_ideal_s / MS:.2f} ms "
                     f"| {r.itl_measured_s / MS:.2f} ms (x{r.itl_measured_s / r.itl_ideal_s:.2f}) |")
    return "\n".join(lines)

"""Time per kernel on a real accelerator: Vidur's published H100 and A100 profiles (data/vidur/,
MIT), fitted into curves that answer any shape.

- `linear_time_s(accelerator, tokens, k, n)`: one 16-bit linear product (`kernels.linear`);
- `product_times_s(accelerator, groups, rows, k, n, dtype)`: a dense or grouped product, 16-bit or FP8 W8A8
  (`kernels.products`; FP8 fitted on DeepGEMM's published H800 table, `kernels.fp8`);
- `attention_time_s`: attention at the shares published attention kernels reach (`kernels.attention_published`);
- `elementwise_time_s(accelerator, kind, tokens, width)`: norms, rotary, activation, residual add,
  embedding (`kernels.elementwise`);
- `allreduce_time_s`, `send_recv_time_s`: collectives by message size and GPU count (`kernels.collectives`);
- `StepOverhead`: an engine's CPU time per step, optional (`kernels.overhead`);
- `report`: each fit's error on its own rows and leave one model out (`kernels.report`).
Only the accelerators in MEASURED_ACCELERATORS have profiles; those in TRANSFERS (the H200) are
carried from the H100's by the resource each term stands for (`kernels.measured`); any other is refused by name.
"""
from inferlab.core.kernels.collectives import NODES, allreduce_time_s, collective_fit, send_recv_time_s
from inferlab.core.kernels.elementwise import KINDS, elementwise_fit, elementwise_time_s
from inferlab.core.kernels.linear import linear_fit, linear_time_s, linear_times_s
from inferlab.core.kernels.attention_published import SOURCES as ATTENTION_SOURCES, attention_time_s
from inferlab.core.kernels.fp8 import check_fp8, fp8_fit
from inferlab.core.kernels.measured import MEASURED_ACCELERATORS, TRANSFERS, check_measured, transfer_note
from inferlab.core.kernels.overhead import PROFILE_MODELS, StepOverhead
from inferlab.core.kernels.products import PRODUCT_DTYPES, product_times_s

__all__ = ["MEASURED_ACCELERATORS", "TRANSFERS", "check_measured", "transfer_note", "check_fp8", "fp8_fit",
           "product_times_s", "PRODUCT_DTYPES", "attention_time_s", "ATTENTION_SOURCES", "linear_time_s", "linear_times_s", "linear_fit",
           "elementwise_time_s", "elementwise_fit", "KINDS", "allreduce_time_s", "send_recv_time_s",
           "collective_fit", "NODES", "StepOverhead", "PROFILE_MODELS"]

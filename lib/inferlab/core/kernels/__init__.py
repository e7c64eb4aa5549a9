"""Time per kernel on a real accelerator: Vidur's published H100 and A100 profiles (data/vidur/,
MIT), fitted into curves that answer any shape.

- `linear_time_s(accelerator, tokens, k, n)`: one 16-bit linear product (`kernels.linear`);
- `elementwise_time_s(accelerator, kind, tokens, width)`: norms, rotary, activation, residual add,
  embedding (`kernels.elementwise`);
- `allreduce_time_s`, `send_recv_time_s`: collectives by message size and GPU count (`kernels.collectives`);
- `StepOverhead`: an engine's CPU time per step, optional (`kernels.overhead`);
- `report`: each fit's error on its own rows and leave one model out (`kernels.report`).
Only the accelerators in MEASURED_ACCELERATORS have profiles; any other is refused by name.
"""
from inferlab.core.kernels.collectives import NODES, allreduce_time_s, collective_fit, send_recv_time_s
from inferlab.core.kernels.elementwise import KINDS, elementwise_fit, elementwise_time_s
from inferlab.core.kernels.linear import linear_fit, linear_time_s, linear_times_s
from inferlab.core.kernels.measured import MEASURED_ACCELERATORS, check_measured
from inferlab.core.kernels.overhead import PROFILE_MODELS, StepOverhead

__all__ = ["MEASURED_ACCELERATORS", "check_measured", "linear_time_s", "linear_times_s", "linear_fit",
           "elementwise_time_s", "elementwise_fit", "KINDS", "allreduce_time_s", "send_recv_time_s",
           "collective_fit", "NODES", "StepOverhead", "PROFILE_MODELS"]

"""The physics: model and accelerator objects, FLOPs and bytes per operator, memory, the roofline,
efficiency models (ideal, knobs, measured kernels) and the latencies built from them.
Imports only `inferlab.base`; no torch, no matplotlib."""

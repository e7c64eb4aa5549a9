"""Which accelerators have published kernel profiles, and the one check every measured model uses."""
from __future__ import annotations

from inferlab.core.boundary import enters
from inferlab.core.specs import Accelerator

# The profiles' A100 is not named in the source; it is taken as the 80 GB SXM card.
MEASURED_ACCELERATORS = ("h100-sxm", "a100-80gb")
# Streaming multiprocessors, for the linear model's wave count: NVIDIA H100 Tensor Core GPU
# Architecture whitepaper (H100 SXM5: 132 SMs) and NVIDIA A100 Tensor Core GPU Architecture
# whitepaper (A100: 108 SMs).
SM_COUNT = {"h100-sxm": 132, "a100-80gb": 108}


@enters(accelerator=Accelerator)
def check_measured(accelerator, param: str = "accelerator") -> Accelerator:
    """`accelerator` if it has profiles, else one line naming it and the accelerators that have."""
    acc = accelerator
    if acc.name not in MEASURED_ACCELERATORS:
        raise ValueError(f"{param}: no measured kernel profiles for {acc.name!r}; measured timings exist for "
                         f"{', '.join(MEASURED_ACCELERATORS)} (Vidur's published profiles); use the ideal roofline "
                         f"or fixed MFU/MBU knobs for {acc.name!r}")
    return acc

"""Which accelerators have kernel times, and the one check every measured model uses.

Profiled: Vidur's published profiles name `h100-sxm` and `a100-80gb` (MEASURED_ACCELERATORS).
Transferred (TRANSFERS): a Hopper part with an H100 SXM's SMs and clocks and another memory system
takes the H100's fitted curves, each fitted term scaled by the resource it stands for:
- compute terms (compute efficiency x the part's peak, the wave count over its SMs, the launch floor):
  unchanged, the same SMs at the same clocks and the same dense peaks;
- bandwidth terms (HBM reads and writes of every kernel): the part's own HBM bandwidth, so each
  kernel's memory time scales by BW(H100) / BW(part);
- interconnect terms (the all-reduce's bandwidth): the part's NVLink bandwidth over the H100's; the
  all-reduce's start-up latency unchanged.
Assumption: a kernel reaches the same share of the larger bandwidth (cache, latency and occupancy as
on the H100); no kernel of the part itself was timed.
"""
from __future__ import annotations

from inferlab.core.boundary import enters
from inferlab.core.specs import Accelerator, get_accelerator

# The profiles' A100 is not named in the source; it is taken as the 80 GB SXM card.
MEASURED_ACCELERATORS = ("h100-sxm", "a100-80gb")
# A part carried over from a profiled one (module doc): its name -> the profiled accelerator's.
TRANSFERS = {"h200": "h100-sxm"}
# (An H800 SXM would take the same transfer with its NVLink ratio; it is not in data/accelerators.toml.)
# Streaming multiprocessors, for the linear model's wave count: NVIDIA H100 Tensor Core GPU
# Architecture whitepaper (H100 SXM5: 132 SMs; the H200 SXM is the same GH100 part with 132 SMs) and NVIDIA A100 Tensor Core GPU Architecture whitepaper (A100: 108 SMs).
SM_COUNT = {"h100-sxm": 132, "a100-80gb": 108, "h200": 132}


@enters(accelerator=Accelerator)
def check_measured(accelerator, param: str = "accelerator") -> Accelerator:
    """`accelerator` if it has profiles or a transfer from one, else one line naming it and those that have."""
    acc = accelerator
    if acc.name not in MEASURED_ACCELERATORS and acc.name not in TRANSFERS:
        raise ValueError(f"{param}: no measured kernel profiles for {acc.name!r}; measured timings exist for "
                         f"{', '.join(MEASURED_ACCELERATORS)} (Vidur's published profiles) and, carried from the "
                         f"H100 by memory and link bandwidth, {', '.join(TRANSFERS)}; use the ideal roofline "
                         f"or fixed MFU/MBU knobs for {acc.name!r}")
    return acc


def profiled_name(accelerator: Accelerator) -> str:
    """The profiled accelerator whose curves `accelerator` uses: itself, or the one it is carried from."""
    return TRANSFERS.get(accelerator.name, accelerator.name)


def source_accelerator(accelerator: Accelerator) -> Accelerator:
    """The profiled Accelerator whose fitted curves `accelerator` uses (itself when profiled)."""
    name = profiled_name(accelerator)
    return accelerator if name == accelerator.name else get_accelerator(name)


def hbm_ratio(accelerator: Accelerator, source: Accelerator) -> float:
    """BW(source) / BW(accelerator): the factor on a memory time carried from `source` (module doc)."""
    return source.hbm_bytes_per_s / accelerator.hbm_bytes_per_s


def link_ratio(accelerator: Accelerator, source: Accelerator) -> float:
    """link(accelerator) / link(source): the factor on an all-reduce's algorithm bandwidth (module doc)."""
    return accelerator.interconnect_bytes_per_s / source.interconnect_bytes_per_s


def transfer_note(accelerator: Accelerator | None) -> str:
    """'' for a profiled accelerator; for a transferred one, the sentence saying how its times were carried."""
    if accelerator is None or accelerator.name not in TRANSFERS:
        return ""
    return (f"{accelerator.name} carried from {TRANSFERS[accelerator.name]}: compute terms unchanged (same SMs, "
            f"clocks and peaks), memory terms at its HBM bandwidth, all-reduce bandwidth by its NVLink")

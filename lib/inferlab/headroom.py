"""The old name of `memory_headroom`, kept because a published notebook (chapters/15_2_2_batching.py)
imports it: `from inferlab.headroom import VLLM_DEFAULT_UTILISATION, headroom_fit`."""
from inferlab.memory_headroom import CAPACITIES, VLLM_DEFAULT_UTILISATION, HeadroomFit, headroom_fit

__all__ = ["CAPACITIES", "VLLM_DEFAULT_UTILISATION", "HeadroomFit", "headroom_fit"]

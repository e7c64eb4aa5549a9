"""A serving engine's CPU time per step (scheduling, sampling, preparing inputs, processing outputs),
an optional term beside the kernels' time: never folded in silently.

From a profile: Vidur's published A100 scheduler timings (sarathi-serve, a vLLM-style engine;
`data/vidur/cpu_overheads.csv`), the step's CPU time taken as the sum of the medians of schedule,
sampler, prepare_inputs and process_model_outputs, fitted as t = a + b * batch by relative least
squares over the profiled batch sizes (8-128) of one model and TP degree. Assumption: this CPU
time adds to the GPU's (no overlap of the next step's scheduling with this step's kernels, as in
the engine profiled); it was measured on A100 hosts and is used on any accelerator.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from inferlab.base.input_checks import choice, positive_float, positive_int
from inferlab.core.kernels.fit import fit_affine_relative
from inferlab.core.kernels.profiles import cpu_overhead_rows

# The profile's models under the names the library knows them by (where it does).
PROFILE_MODELS = {"llama-2-7b": "meta-llama/Llama-2-7b-hf", "llama-2-70b": "meta-llama/Llama-2-70b-hf",
                  "internlm-20b": "internlm/internlm-20b", "codellama-34b": "codellama/CodeLlama-34b-Instruct-hf",
                  "qwen-72b": "Qwen/Qwen-72B", "phi-2": "microsoft/phi-2"}


@dataclass(frozen=True)
class StepOverhead:
    """CPU seconds per engine step: fixed_s + per_sequence_s * sequences in the step."""

    fixed_s: float
    per_sequence_s: float
    label: str

    def __post_init__(self):
        positive_float("fixed_s", self.fixed_s, allow_zero=True, maximum=10.0)
        positive_float("per_sequence_s", self.per_sequence_s, allow_zero=True, maximum=1.0)

    @classmethod
    def constant(cls, seconds: float) -> "StepOverhead":
        """The same CPU time at every step (a value the user measured)."""
        positive_float("step_overhead_s", seconds, allow_zero=True, maximum=10.0)
        return cls(float(seconds), 0.0, f"{float(seconds) * 1e3:g} ms per step (given)")

    @classmethod
    def from_profile(cls, model: str = "llama-2-7b", tp: int = 1) -> "StepOverhead":
        """The A100 scheduler profile of `model` (PROFILE_MODELS) at tensor parallelism `tp` (module doc)."""
        choice("model", model, tuple(PROFILE_MODELS))
        positive_int("tp", tp)
        rows = cpu_overhead_rows()
        key = (PROFILE_MODELS[model], int(tp))
        if key not in rows:
            have = sorted(str(t) for m, t in rows if m == PROFILE_MODELS[model])
            raise ValueError(f"tp: the CPU-overhead profile of {model} has tp {', '.join(have)}; got {tp}")
        batch, t = rows[key]
        a, b = fit_affine_relative(batch, t)
        return cls(a, b, f"Vidur's A100 scheduler profile of {model} at TP {tp} "
                         f"({a * 1e3:.2f} ms + {b * 1e6:.1f} us per sequence)")

    def time_s(self, batch):
        """CPU seconds of one step holding `batch` sequences."""
        positive_int("batch", batch, minimum=0)
        out = self.fixed_s + self.per_sequence_s * np.asarray(batch, dtype=float)
        return out if np.ndim(out) else float(out)

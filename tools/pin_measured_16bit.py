"""Print the 16-bit figures `--efficiency measured` gives, as JSON: the grid pinned by
tests/test_measured_16bit_pins.py (its data was printed by this script at commit ad0a3e3, before FP8,
grouped experts and the H200 transfer were added, and is never regenerated from the code under test).

    .venv/bin/python tools/pin_measured_16bit.py > /tmp/pins.json
"""
from __future__ import annotations

import json
import warnings

from inferlab.core.deployment import Deployment
from inferlab.core.efficiency import MeasuredKernels
from inferlab.core.latency import decode_step_time_s, prefill_time_s
from inferlab.core.specs import Precision, get_accelerator, resolve_model

# (model, accelerator, tp): dense and MoE models, one and several GPUs, both profiled accelerators.
CASES = (("llama-2-13b", "h100-sxm", 1), ("llama-2-13b-book", "h100-sxm", 1), ("llama-2-7b", "a100-80gb", 1),
         ("llama-2-13b", "a100-80gb", 1), ("llama-2-70b", "h100-sxm", 4), ("llama-2-70b", "a100-80gb", 8),
         ("llama-3-8b", "h100-sxm", 1), ("llama-3-70b", "h100-sxm", 8), ("mistral-7b", "h100-sxm", 1),
         ("data/hf-configs/mixtral-8x7b-v0.1", "h100-sxm", 2), ("data/hf-configs/mixtral-8x7b-v0.1", "a100-80gb", 4),
         ("data/hf-configs/deepseek-v2-lite", "h100-sxm", 1))
PREFILL = ((1, 128), (1, 2048), (8, 1024))       # (batch, prompt tokens)
DECODE = ((1, 1024), (32, 1024), (128, 2048))    # (batch, context tokens)


def figures() -> dict:
    out = {}
    for model_name, gpu, tp in CASES:
        model, acc = resolve_model(model_name), get_accelerator(gpu)
        for kv in ("bf16", "int8"):
            d = Deployment(acc, Precision(kv=kv), tp=tp, efficiency=MeasuredKernels())
            key = f"{model_name}|{gpu}|tp{tp}|kv {kv}"
            for b, s in PREFILL:
                out[f"{key}|prefill b{b} s{s}"] = prefill_time_s(model, d, s, b)
            for b, c in DECODE:
                out[f"{key}|decode b{b} c{c}"] = decode_step_time_s(model, d, c, b)
    return out


if __name__ == "__main__":
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        print(json.dumps(figures(), indent=1, sort_keys=True))

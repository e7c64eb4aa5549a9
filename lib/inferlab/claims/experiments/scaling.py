"""Experiments on how TTFT and ITL scale: with prompt length, batch, parameters, quantization and the
accelerator's bandwidth.
"""
from __future__ import annotations

from inferlab.core.latency import decode_step_time_s, prefill_time_s
from inferlab.core.memory import kv_cache_bytes, weight_bytes
from inferlab.core.specs import Precision, get_accelerator, get_model

from inferlab.claims.experiments.common import ACC, Case, MODEL, Outcome, _f, _ms, _precision


def ttft_scaling(prompt_lens=(1024,), factor: float = 4, rel: float = 0.15, model: str = MODEL,
                 accelerator: str = ACC):
    """Holds at each S where TTFT(factor*S)/TTFT(S) is within `rel` of `factor`."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    cases = []
    for s in prompt_lens:
        r = prefill_time_s(model, accelerator, int(s * factor)) / prefill_time_s(model, accelerator, s)
        cases.append(Case(f"S={s} -> {int(s * factor)}", abs(r / factor - 1) <= rel, f"TTFT x{_f(r)}"))
    return Outcome(tuple(cases), "prompt length (attention's S^2 term grows)")


def ttft_batch_scaling(prompt_lens=(2048,), batches=(2, 4), rel: float = 0.15, model: str = MODEL,
                       accelerator: str = ACC):
    """Holds where the prefill time of B prompts is within `rel` of B times one prompt's."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    cases = []
    for s in prompt_lens:
        one = prefill_time_s(model, accelerator, s, 1)
        for b in batches:
            r = prefill_time_s(model, accelerator, s, b) / one
            cases.append(Case(f"S={s}, B={b}", abs(r / b - 1) <= rel, f"TTFT x{_f(r)}"))
    return Outcome(tuple(cases), "prompt length")


def prefill_batching_gain(prompt_lens=(128, 2048), batch: int = 8, min_gain: float = 1.2,
                          model: str = MODEL, accelerator: str = ACC):
    """Holds where batching `batch` prompts raises prefill tokens/s by at least `min_gain`."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    cases = []
    for s in prompt_lens:
        g = batch * prefill_time_s(model, accelerator, s, 1) / prefill_time_s(model, accelerator, s, batch)
        cases.append(Case(f"S={s}", g >= min_gain, f"prefill tokens/s x{_f(g)} at B={batch}"))
    return Outcome(tuple(cases), "prompt length (batching pays only below the ridge)")


def ttft_vs_params(models=("llama-2-13b", "llama-2-70b"), prompt_len: int = 2048, rel: float = 0.15,
                   accelerator: str = ACC):
    """Holds when TTFT grows in proportion to the parameter count (within `rel`)."""
    accelerator = get_accelerator(accelerator)
    a, b = (get_model(m) for m in models)
    r = prefill_time_s(b, accelerator, prompt_len) / prefill_time_s(a, accelerator, prompt_len)
    p = b.n_params / a.n_params
    return Outcome((Case(f"{a.name} -> {b.name}", abs(r / p - 1) <= rel,
                         f"TTFT x{_f(r)} for parameters x{_f(p)}"),))


def ttft_levers(prompt_len: int = 4096, min_speedup: float = 1.3, model: str = MODEL, accelerator: str = ACC):
    """Holds when no lever other than a shorter prompt or more devices speeds TTFT by `min_speedup`
    (tried: fp8 matrix units on the same device)."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    base = prefill_time_s(model, accelerator, prompt_len)
    fp8 = prefill_time_s(model, accelerator, prompt_len,
                         precision=Precision(weights="fp8", activations="fp8", kv="bf16"))
    s = base / fp8
    return Outcome((Case("fp8 compute, same device", s < min_speedup, f"TTFT x{_f(1 / s)} (speed-up {_f(s)})"),),
                   "", {"speedup": s})


def itl_vs_prompt(batches=(1, 32), context_len: int = 2048, factor: float = 0.5, rel: float = 0.05,
                  model: str = MODEL, accelerator: str = ACC):
    """Holds at each batch where changing the context by `factor` moves ITL by at most `rel`."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    cases = []
    for b in batches:
        r = (decode_step_time_s(model, accelerator, int(context_len * factor), b)
             / decode_step_time_s(model, accelerator, context_len, b))
        cases.append(Case(f"B={b}", abs(r - 1) <= rel, f"ITL x{_f(r)} for context x{factor:g}"))
    return Outcome(tuple(cases), "batch (the KV read grows with B)")


def quantized_itl(weights: str = "int8", expected: float = 0.5, batches=(1, 32), context_len: int = 1024,
                  rel: float = 0.15, model: str = MODEL, accelerator: str = ACC):
    """Holds at each batch where ITL with `weights` over bf16 ITL is within `rel` of `expected`."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    cases = []
    for b in batches:
        r = (decode_step_time_s(model, accelerator, context_len, b, _precision(weights))
             / decode_step_time_s(model, accelerator, context_len, b))
        cases.append(Case(f"B={b}", abs(r / expected - 1) <= rel, f"ITL x{_f(r)}"))
    return Outcome(tuple(cases), "batch (the KV read is not quantised)")


def quantized_ttft(weights: str = "int8", prompt_len: int = 1024, rel: float = 0.05, model: str = MODEL,
                   accelerator: str = ACC):
    """Holds when weight-only quantisation leaves TTFT within `rel` (prefill is compute-bound)."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    r = (prefill_time_s(model, accelerator, prompt_len, precision=_precision(weights))
         / prefill_time_s(model, accelerator, prompt_len))
    return Outcome((Case(f"S={prompt_len}", abs(r - 1) <= rel, f"TTFT x{_f(r)}"),))


def itl_rule(batches=(1, 16, 64), context_len: int = 1024, rel: float = 0.1, model: str = MODEL,
             accelerator: str = ACC):
    """Holds where (weight bytes + B * KV bytes) / bandwidth is within `rel` of the full step time."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    acc = accelerator
    cases = []
    for b in batches:
        rule = (weight_bytes(model) + b * kv_cache_bytes(model, context_len)) / acc.hbm_bytes_per_s
        t = decode_step_time_s(model, accelerator, context_len, b)
        cases.append(Case(f"B={b}", abs(rule / t - 1) <= rel, f"rule {_ms(rule)} vs model {_ms(t)}"))
    return Outcome(tuple(cases), "batch")


def bandwidth_bound_decode(accelerators=(ACC, "h200", "a100-80gb"), context_len: int = 1024, rel: float = 0.1,
                           model: str = MODEL):
    """Holds on each device where the B = 1 step is within `rel` of weight bytes / bandwidth."""
    model = get_model(model)
    cases = []
    for a in accelerators:
        acc = get_accelerator(a)
        rule = weight_bytes(model) / acc.hbm_bytes_per_s
        t = decode_step_time_s(model, acc, context_len, 1)
        cases.append(Case(a, abs(rule / t - 1) <= rel, f"step {_ms(t)} vs weights/BW {_ms(rule)}"))
    return Outcome(tuple(cases), "accelerator")


def device_speedups(pairs=(("h100-sxm", "h200"),), phase: str = "decode", tracks: str = "bandwidth",
                    rel: float = 0.1, prompt_len: int = 2048, context_len: int = 1024, model: str = MODEL):
    """Holds for each device pair where the phase's speed-up is within `rel` of the ratio of
    `tracks` ('bandwidth' or 'flops') between the two devices."""
    model = get_model(model)
    cases = []
    for a, b in pairs:
        A, Bc = get_accelerator(a), get_accelerator(b)
        if phase == "decode":
            s = decode_step_time_s(model, A, context_len) / decode_step_time_s(model, Bc, context_len)
        else:
            s = prefill_time_s(model, A, prompt_len) / prefill_time_s(model, Bc, prompt_len)
        ratio = (Bc.hbm_bytes_per_s / A.hbm_bytes_per_s if tracks == "bandwidth"
                 else Bc.peak("bf16") / A.peak("bf16"))
        cases.append(Case(f"{a} -> {b}", abs(s / ratio - 1) <= rel,
                          f"{phase} x{_f(s)} faster; {tracks} ratio {_f(ratio)}"))
    return Outcome(tuple(cases), "device pair")

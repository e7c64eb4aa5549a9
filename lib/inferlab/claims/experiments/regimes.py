"""Experiments on regimes and intensities: which phase and which operator is compute-bound or
memory-bound, and where the MLP's ridge batch lies.
"""
from __future__ import annotations

import numpy as np

from inferlab.core.costs import decode_costs, prefill_costs
from inferlab.core.latency import decode_step_time_s, prefill_time_s
from inferlab.core.roofline import ridge_point, time_weighted_regime
from inferlab.core.specs import get_accelerator, get_model

from inferlab.claims.experiments.common import ACC, Case, MODEL, Outcome, _f, _ms


def prefill_regime(prompt_lens=(2048,), batch: int = 1, model: str = MODEL, accelerator: str = ACC):
    """Holds where a prefill pass is compute-bound (compute-bound kernels take most of its time)."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    cases = []
    for s in prompt_lens:
        costs = prefill_costs(model, batch, s)
        regime = time_weighted_regime(costs, accelerator)
        t = prefill_time_s(model, accelerator, s, batch)
        share = float(costs.total.flops) / accelerator.peak("bf16") / t
        cases.append(Case(f"S={s}, B={batch}", regime == "compute",
                          f"{regime}-bound, {share:.0%} of peak FLOP/s"))
    return Outcome(tuple(cases), "prompt length")


def decode_regime(batches=(1,), context_len: int = 1024, accelerators=(ACC,), model: str = MODEL):
    """Holds where a decode step is memory-bound."""
    model = get_model(model)
    cases = []
    for acc in accelerators:
        for b in batches:
            regime = time_weighted_regime(decode_costs(model, b, context_len), get_accelerator(acc))
            cases.append(Case(f"{acc}, B={b}", regime == "memory", f"{regime}-bound"))
    return Outcome(tuple(cases), "accelerator and batch")


def phase_regimes(prompt_len: int = 1024, context_len: int = 1024, batch: int = 1,
                  model: str = MODEL, accelerator: str = ACC):
    """Holds when prefill is compute-bound and decode memory-bound in the same setting."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    p = time_weighted_regime(prefill_costs(model, batch, prompt_len), accelerator)
    d = time_weighted_regime(decode_costs(model, batch, context_len), accelerator)
    return Outcome((Case(f"S={prompt_len}, B={batch}", p == "compute" and d == "memory",
                         f"prefill {p}-bound, decode {d}-bound"),), "")


def decode_attention_intensity(models=(MODEL,), batches=(1, 64), context_len: int = 1000,
                               low: float = 0.5, high: float = 2.0):
    """Holds where the decode attention intensity lies in [low, high] at every batch."""
    cases = []
    for m in models:
        cfg = get_model(m)
        xs = [float(decode_costs(cfg, b, context_len).attention.intensity) for b in batches]
        ok = all(low <= x <= high for x in xs)
        kv = cfg.n_heads // cfg.n_kv_heads
        cases.append(Case(f"{m} ({kv} query heads per KV head)", ok,
                          ", ".join(f"B={b}: {_f(x)} FLOP/byte" for b, x in zip(batches, xs))))
    return Outcome(tuple(cases), "KV heads (MHA vs GQA)")


def decode_mlp_intensity(batches=(1, 16, 64), context_len: int = 1024, rel: float = 0.25,
                         model: str = MODEL):
    """Holds at each batch B where the decode MLP intensity is within `rel` of B."""
    model = get_model(model)
    cases = []
    for b in batches:
        x = float(decode_costs(model, b, context_len).mlp.intensity)
        cases.append(Case(f"B={b}", abs(x / b - 1) <= rel, f"MLP intensity {_f(x)} FLOP/byte"))
    return Outcome(tuple(cases), "batch")


def mlp_ridge_batch(expected: float = 295, rel: float = 0.15, context_len: int = 1024,
                    model: str = MODEL, accelerator: str = ACC):
    """The smallest decode batch at which the MLP is compute-bound; holds within `rel` of `expected`."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    ridge = ridge_point(accelerator)
    b = np.arange(1, 4097)
    x = np.asarray(decode_costs(model, b, context_len).mlp.intensity)
    first = int(b[np.argmax(x >= ridge)])
    return Outcome((Case("ridge crossing", abs(first / expected - 1) <= rel,
                         f"MLP reaches the ridge ({_f(ridge)}) at B={first}"),), "", {"batch": first})


def decode_op_regimes(batch: int = 512, context_len: int = 1024, model: str = MODEL, accelerator: str = ACC):
    """Holds when, at a batch large enough for the MLP to be compute-bound, attention is still memory-bound."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    costs = decode_costs(model, batch, context_len)
    ridge = ridge_point(accelerator)
    mlp, att = float(costs.mlp.intensity), float(costs.attention.intensity)
    return Outcome((Case(f"B={batch}", mlp >= ridge and att < ridge,
                         f"MLP {_f(mlp)} vs attention {_f(att)} FLOP/byte, ridge {_f(ridge)}"),))


def prefill_mlp_intensity(prompt_lens=(128, 2048), rel: float = 0.5, model: str = MODEL):
    """Holds at each prompt length S where the prefill MLP intensity is within `rel` of B*S (B = 1)."""
    model = get_model(model)
    cases = []
    for s in prompt_lens:
        x = float(prefill_costs(model, 1, s).mlp.intensity)
        cases.append(Case(f"S={s}", abs(x / s - 1) <= rel, f"MLP intensity {_f(x)} (B*S = {s})"))
    return Outcome(tuple(cases), "prompt length (the intensity saturates near d*f/(d+f))")


def one_pass_vs_sequential(prompt_len: int = 2048, max_ratio: float = 0.1, model: str = MODEL,
                           accelerator: str = ACC):
    """Holds when one parallel prefill pass takes under `max_ratio` of feeding the prompt one token per step."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    one = prefill_time_s(model, accelerator, prompt_len)
    seq = float(np.sum(decode_step_time_s(model, accelerator, np.arange(1, prompt_len + 1))))
    return Outcome((Case(f"S={prompt_len}", one / seq <= max_ratio,
                         f"one pass {_ms(one)} vs token by token {_ms(seq)}"),))

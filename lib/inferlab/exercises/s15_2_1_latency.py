"""Exercises for 15.2.1, time-to-first-token and inter-token latency.

Each `solve_*` body is, word for word, the instructor's solution cell: imports inside, one `return`.
"""
import itertools

import numpy as np

from inferlab.core.context import yardstick
from inferlab.core.costs import prefill_costs
from inferlab.core.deployment import Deployment
from inferlab.exercises.core import LOW_WEIGHT, Exercise, Mistake, integer, number, one_of, register, vary
from inferlab.core.latency import decode_step_rule_s, decode_step_time_s, prefill_time_s, ttft_rule_s
from inferlab.core.memory import kv_cache_bytes, max_batch, weight_bytes
from inferlab.core.specs import Precision, get_accelerator, get_model


# ex1: recompute -----------------------------------------------------------------------------------

def solve_itl_rule(model, accelerator, context_len, batch):
    from inferlab.core import memory
    from inferlab.core.latency import decode_step_rule_s
    from inferlab.core.specs import get_accelerator, get_model
    model = get_model(model)
    accelerator = get_accelerator(accelerator)

    # ITL ~ (M_weights + B * C_kv) / BW: every weight and every cached K/V byte is read once per token.
    weights, cache = memory.weight_bytes(model), memory.kv_cache_bytes(model, context_len)
    step_s = decode_step_rule_s(weights, cache, batch, accelerator)
    return step_s * 1e3


def mistakes_itl_rule(model, accelerator, context_len, batch):
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    w, kv = weight_bytes(model), kv_cache_bytes(model, context_len)
    return [
        Mistake(decode_step_rule_s(w, kv, batch, get_accelerator("h100-sxm")) * 1e3,
                "that is the H100 SXM's bandwidth; use the accelerator the statement names"),
        Mistake(w / (w + batch * kv) * decode_step_rule_s(w, kv, batch, accelerator) * 1e3,
                "you left out the KV cache read (C_kv at the context length)"),
        Mistake(decode_step_rule_s(weight_bytes(model, Precision(weights="int8")), kv, batch, accelerator) * 1e3,
                "1 byte per parameter: bf16 weights take 2"),
    ]


# (model, accelerator, S, B) whose ITL is a number the 15.2.1 notebook prints (a leak the student build refuses).
_PRINTED_RULE_ITL = {("llama-2-13b", "h200", 2048, 1)}

register(Exercise(
    id="15.2.1-ex1", kind="recompute", points=1,
    title="The ITL of {model} on an {accelerator}",
    params=dict(model="llama-2-7b", accelerator="h200", context_len=4096, batch=1),
    parts=(number("itl_ms", "the inter-token latency", "ms", rel_tol=0.02),),
    statement="""\
Recompute the chapter's ITL estimate, ITL ≈ (M_weights + B·C_kv) / BW, for `{model}` on one `{accelerator}`,
bf16, B = {batch}, at the step where the context holds S = {context_len} tokens. Take M_weights from
`inferlab.core.memory.weight_bytes` and C_kv from `inferlab.core.memory.kv_cache_bytes`.""",
    solve=solve_itl_rule, mistakes=mistakes_itl_rule,
    # Variants: MHA models (large caches, so leaving out C_kv shows), accelerators other than the H100 SXM.
    # Less `_PRINTED_RULE_ITL`, whose answer a chapter output prints for another setting.
    vary=vary((("model", "accelerator", "context_len", "batch"),
               [c for c in itertools.product(["llama-2-7b", "llama-2-13b"], ["h200", "a100-80gb", "mi300x", "b200"],
                                             [2048, 4096], [1, 2, 4, 8]) if c not in _PRINTED_RULE_ITL]))))


# ex2: predict --------------------------------------------------------------------------------------

def solve_gpu_upgrade(model, old, new, prompt_len, batch, threshold):
    from inferlab.core.latency import decode_step_time_s, prefill_time_s
    from inferlab.core.specs import get_accelerator, get_model
    model, old, new = get_model(model), get_accelerator(old), get_accelerator(new)

    ttft_speedup = prefill_time_s(model, old, prompt_len) / prefill_time_s(model, new, prompt_len)
    # The first decode step attends over the prompt.
    itl_speedup = (decode_step_time_s(model, old, prompt_len, batch)
                   / decode_step_time_s(model, new, prompt_len, batch))
    better = [name for name, s in (("ttft", ttft_speedup), ("itl", itl_speedup)) if s > 1 + threshold]
    improves = "both" if len(better) == 2 else better[0] if better else "neither"
    itl_ms = decode_step_time_s(model, new, prompt_len, batch) * 1e3
    return {"improves": improves, "itl_speedup": itl_speedup, "ttft_speedup": ttft_speedup, "itl_ms": itl_ms}


def mistakes_gpu_upgrade(model, old, new, prompt_len, batch, threshold):
    model, old, new = get_model(model), get_accelerator(old), get_accelerator(new)
    itl = decode_step_time_s(model, old, prompt_len, batch) / decode_step_time_s(model, new, prompt_len, batch)
    return [
        Mistake("both", "compare the two GPUs' bf16 peaks and their bandwidths: which one changed?", "improves"),
        Mistake("ttft", "prefill is compute-bound; decode is bound by memory bandwidth", "improves"),
        Mistake(1 / itl, "upside down: the speedup is the old time over the new one", "itl_speedup"),
        Mistake(itl, "prefill is compute-bound, and the bf16 peak did not change", "ttft_speedup"),
        Mistake(decode_step_time_s(model, old, prompt_len, batch) * 1e3,
                "that is the ITL on the GPU you have; the question asks for the one you could move to", "itl_ms"),
    ]


# Settings whose ITL on the new GPU is a number the chapter prints (a leak the student build refuses).
_PRINTED_ITL = {("mistral-7b", "a100-40gb", "a100-80gb", 1536, 32)}


def _upgrade_settings() -> list:
    """(model, old, new, S, B) for ex2's variants: the two upgrades, S on a 256 grid, B up to 32, less `_PRINTED_ITL`."""
    return [(model, old, new, s, b) for model in ("llama-2-13b", "llama-2-7b", "llama-3-8b", "mistral-7b")
            for old, new in (("h100-sxm", "h200"), ("a100-40gb", "a100-80gb"))
            for s in range(512, 2049, 256) for b in (1, 2, 4, 8, 16, 24, 32)
            if (model, old, new, s, b) not in _PRINTED_ITL]


def _batch_that_fits_old(model, old, new, prompt_len, batch):
    """The drawn batch, capped at the largest that fits on the old GPU (Llama 2 13B on an A100 40 GB holds few)."""
    fits = max_batch(get_model(model), get_accelerator(old), prompt_len)  # the params keep the names
    return dict(model=model, old=old, new=new, prompt_len=prompt_len, batch=max(1, min(batch, fits)))


register(Exercise(
    id="15.2.1-ex2", kind="predict", points=1,
    title="What does an {new} buy over an {old}?",
    params=dict(model="llama-2-13b", old="h100-sxm", new="h200", prompt_len=1024, batch=1, threshold=0.05),
    parts=(one_of("improves", "which latency improves by more than {threshold:.0%}",
                  ("ttft", "itl", "both", "neither")),
           # The ratio of the two bandwidths in every variant (decode is memory-bound): few values.
           number("itl_speedup", "ITL on the {old} divided by ITL on the {new}", "", rel_tol=0.02,
                  weight=LOW_WEIGHT),
           # 1 in every variant (each upgrade keeps the bf16 peak): weighs as little as a choice.
           number("ttft_speedup", "TTFT on the {old} divided by TTFT on the {new}", "", rel_tol=0.02,
                  weight=LOW_WEIGHT),
           number("itl_ms", "the ITL on the {new}", "ms", rel_tol=0.02)),
    statement="""\
You serve `{model}` (bf16, B = {batch}, prompts of {prompt_len} tokens) on `{old}` GPUs and could move to `{new}`.
**Predict before you compute:** which of TTFT and ITL improves by more than {threshold:.0%}? Then compute both
speedups with the full per-operator model: `inferlab.core.latency.prefill_time_s` for TTFT and
`inferlab.core.latency.decode_step_time_s` for the first decode step (context = the prompt), and the ITL on the
`{new}`.""",
    solve=solve_gpu_upgrade, mistakes=mistakes_gpu_upgrade,
    # Variants: upgrades that keep the bf16 peak and raise the bandwidth (so the answer stays "itl"); prompts
    # on a 256-token grid and batches up to 32, so that the KV reads spread the ITL between students.
    vary=vary((("model", "old", "new", "prompt_len", "batch"), _upgrade_settings()), derive=_batch_that_fits_old)))


# ex3: find the inconsistency ---------------------------------------------------------------------

def solve_long_prompt(model, accelerator, prompt_len):
    from inferlab.core.costs import prefill_costs
    from inferlab.core.latency import prefill_time_s
    from inferlab.core.specs import get_accelerator, get_model
    model = get_model(model)
    accelerator = get_accelerator(accelerator)

    # The full operator count: causal attention's QK^T and PV grow as S^2, the projections as S.
    # (The prompt exceeds the model's maximum context: beyond_context=True marks it as a yardstick.)
    costs = prefill_costs(model, batch=1, prompt_len=prompt_len, beyond_context=True)
    attention_share = costs.attention.flops / costs.total.flops
    return {"ttft_s": prefill_time_s(model, accelerator, prompt_len, beyond_context=True),
            "attention_share": attention_share, "cause": "A"}


@yardstick
def mistakes_long_prompt(model, accelerator, prompt_len):
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    dense = prefill_costs(model, 1, prompt_len, causal=False)
    return [
        Mistake(prefill_time_s(model, accelerator, prompt_len, include_attention=False),
                "that is the linear rule, the memo's method: it leaves out attention's S^2 FLOPs", "ttft_s"),
        Mistake(prefill_time_s(model, accelerator, prompt_len, causal=False),
                "you scored all S^2 query-key pairs; a causal model scores only the lower triangle", "ttft_s"),
        Mistake(float(dense.attention.flops / dense.total.flops),
                "you scored all S^2 query-key pairs; a causal model scores only the lower triangle",
                "attention_share"),
        Mistake("B", "at long S the intensity grows further: prefill stays compute-bound", "cause"),
        Mistake("C", "the memo divides by the dense bf16 peak", "cause"),
        Mistake("D", "the KV cache written is O(S) bytes; compare it with the FLOPs at this S", "cause"),
    ]


# (accelerator, S) whose TTFT is a number the chapter prints (a leak the student build refuses).
_PRINTED_TTFT = {("h200", 56_320), ("a100-80gb", 21_504), ("a100-80gb", 113_664)}


def statement_long_prompt(model, accelerator, prompt_len):
    P = get_model(model).n_matmul_params
    memo = ttft_rule_s(P, prompt_len, get_accelerator(accelerator))
    return f"""\
A product manager wants whole books as prompts: {prompt_len:,} tokens to `{model}` on one `{accelerator}`
(Llama 3.1 8B has the same architecture and a 128k-token window). The team's estimate:
*"TTFT ≈ 2 · P · S / peak = {memo:.2f} s, acceptable."*

1. Compute the TTFT with `inferlab.core.latency.prefill_time_s` (B = 1, MFU = 1, causal attention counted), and the
   share of the prefill FLOPs spent in attention's QK^T and PV (`inferlab.core.costs.prefill_costs(...).attention`
   over `.total`). Count what a prefill computes: every layer for all S tokens, the LM head for the last
   prompt token only (it yields the first output token); the embedding lookup does no FLOPs.
2. Why does the estimate fall short?
   - **A** The linear rule leaves out attention's QK^T and PV FLOPs, which grow as S².
   - **B** At this length prefill becomes memory-bound.
   - **C** The estimate used the sparse bf16 peak.
   - **D** Writing the KV cache to HBM dominates the time."""


register(Exercise(
    id="15.2.1-ex3", kind="inconsistency", points=2,
    title="Whole books as prompts",
    params=dict(model="llama-3-8b", accelerator="h100-sxm", prompt_len=131_072),
    parts=(number("ttft_s", "TTFT with attention counted", "s", rel_tol=0.03),
           number("attention_share", "attention's share of the prefill FLOPs", "", rel_tol=0.02),
           one_of("cause", "the letter of the cause", "ABCD")),
    statement=statement_long_prompt,
    solve=solve_long_prompt, mistakes=mistakes_long_prompt,
    # Variants: the accelerator and a long prompt (the model stays the one the statement describes), 4k to
    # 128k tokens on a 1,024-token grid: attention's share of the FLOPs grows with S, so a fine grid over a
    # wide range keeps it different between most pairs of students. Less S = 31,744 (its attention share is a
    # number the chapter prints) and `_PRINTED_TTFT`.
    vary=vary((("accelerator", "prompt_len"), [(acc, s) for acc in ("h100-sxm", "h200", "b200", "mi300x", "a100-80gb")
                                               for s in range(4096, 131_073, 1024)
                                               if s != 31_744 and (acc, s) not in _PRINTED_TTFT]))))


# ex4: design ---------------------------------------------------------------------------------------

def solve_prompt_cap(model, accelerator, ttft_slo_ms, mfu, max_len):
    import numpy as np

    from inferlab.core.deployment import Deployment
    from inferlab.core.latency import prefill_time_s
    from inferlab.core.specs import get_accelerator, get_model
    model = get_model(model)
    accelerator = get_accelerator(accelerator)

    S = np.arange(1, max_len + 1)  # every prompt length at once, past the model's context (a yardstick)
    ttft_ms = {tp: prefill_time_s(model, Deployment(accelerator, mfu=mfu, tp=tp), S, beyond_context=True) * 1e3
               for tp in (1, 2)}
    return {f"s_max_tp{tp}": int(S[t <= ttft_slo_ms].max()) for tp, t in ttft_ms.items()}


@yardstick
def mistakes_prompt_cap(model, accelerator, ttft_slo_ms, mfu, max_len):
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    S = np.arange(1, max_len + 1)
    P = model.n_matmul_params
    out = []
    for tp in (1, 2):
        key = f"s_max_tp{tp}"
        linear = prefill_time_s(model, Deployment(accelerator, mfu=mfu, tp=tp), S, include_attention=False) * 1e3
        out.append(Mistake(int(S[linear <= ttft_slo_ms].max()),
                           "without attention's S^2 term the cap is too generous", key))
        six = ttft_rule_s(P, S, accelerator, mfu=mfu, flops_per_param_token=6) / tp * 1e3
        out.append(Mistake(int(S[six <= ttft_slo_ms].max()), "6*P*S is the training rule; prefill is 2*P*S", key))
        full_mfu = prefill_time_s(model, Deployment(accelerator, tp=tp), S) * 1e3
        out.append(Mistake(int(S[full_mfu <= ttft_slo_ms].max()), "that cap assumes MFU = 1", key))
    cap1 = solve_prompt_cap(model, accelerator, ttft_slo_ms, mfu, max_len)["s_max_tp1"]
    out.append(Mistake(2 * cap1, "two GPUs do not double the cap: attention's S^2 term and the all-reduces grow "
                                 "with S", "s_max_tp2"))
    return out


register(Exercise(
    id="15.2.1-ex4", kind="design", points=3,
    title="Publish a prompt-length cap",
    params=dict(model="llama-2-13b", accelerator="h100-sxm", ttft_slo_ms=200, mfu=0.6, max_len=32768),
    parts=(integer("s_max_tp1", "the longest prompt that meets the target at tp = 1", "tokens", rel_tol=0.01),
           integer("s_max_tp2", "the same with tensor parallelism over 2 GPUs", "tokens", rel_tol=0.01)),
    statement="""\
Your API promises TTFT ≤ {ttft_slo_ms} ms for `{model}` on `{accelerator}` GPUs (bf16, B = 1, MFU = {mfu}), so it
must reject longer prompts. What is the longest prompt (in tokens) that meets the target on one GPU, and on a
tensor-parallel pair? Use `inferlab.core.latency.prefill_time_s(model, Deployment(accelerator, mfu={mfu}, tp=...), S)`, which counts attention's S²
term and the all-reduces.""",
    solve=solve_prompt_cap, mistakes=mistakes_prompt_cap,
    # Variants: both caps below max_len and at least 1024 tokens (checked for every draw).
    vary=vary(("model", ["llama-2-13b", "llama-2-7b", "llama-3-8b"]), ("accelerator", ["h100-sxm", "b200", "mi300x"]),
              ("ttft_slo_ms", [150, 200, 250]), ("mfu", [0.5, 0.6]))))

"""Exercises for 15.1.1, compute-bound prefill.

Each `solve_*` body is, word for word, the instructor's solution cell (see `cells.solution_source`):
keep its imports inside, and end it with one `return`.
"""
import math

from inferlab.core.deployment import Deployment
from inferlab.exercises.core import LOW_WEIGHT, Exercise, Mistake, integer, letters, number, one_of, register, sci, vary
from inferlab.core.latency import prefill_time_s, ttft_rule_s
from inferlab.core.roofline import ridge_point
from inferlab.core.specs import get_accelerator, get_model


# ex1: recompute -----------------------------------------------------------------------------------

def solve_ttft_rule(model, accelerator, prompt_len):
    from inferlab import get_model
    from inferlab.core.latency import ttft_rule_s
    from inferlab.core.specs import get_accelerator
    model = get_model(model)
    accelerator = get_accelerator(accelerator)

    # P of the 2*P*S rule: the parameters that take part in a matrix product (not the embedding lookup).
    n_matmul = model.n_matmul_params
    return ttft_rule_s(n_matmul, prompt_len, accelerator) * 1e3


def mistakes_ttft_rule(model, accelerator, prompt_len):
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    m = model

    def ms(*args, **kwargs):
        return ttft_rule_s(*args, **kwargs) * 1e3

    return [
        Mistake(ms(m.n_matmul_params, prompt_len, accelerator, flops_per_param_token=6),
                "that is 6*P*S, the training rule (forward and backward); one forward pass is 2*P*S"),
        Mistake(ms(m.n_params, prompt_len, accelerator),
                "you counted every parameter; the embedding table is a lookup and does no FLOPs "
                "(use n_matmul_params)"),
        Mistake(ms(m.n_matmul_params, prompt_len, get_accelerator("h100-sxm")),
                "that is the H100's bf16 peak; use the accelerator the statement names"),
        Mistake(ms(m.n_matmul_params, prompt_len, accelerator, dtype="fp8"),
                "that is twice the dense bf16 peak (the fp8 peak, or a sparse datasheet figure)"),
    ]


register(Exercise(
    id="15.1.1-ex1", kind="recompute", points=1,
    title="TTFT of {model} on an {accelerator}",
    params=dict(model="llama-3-8b", accelerator="mi300x", prompt_len=4096),
    parts=(number("ttft_ms", "TTFT", "ms", rel_tol=0.01),),
    statement="""\
Recompute the chapter's TTFT estimate for another model and accelerator: `{model}` on one `{accelerator}`,
one prompt of S = {prompt_len} tokens, bf16, MFU = 1. Use the chapter's linear rule
TTFT ≈ 2·P·S / peak, with P the parameters that take part in a matrix product
(`ModelConfig.n_matmul_params`) and the accelerator's dense bf16 peak.""",
    solve=solve_ttft_rule, mistakes=mistakes_ttft_rule,
    # Variants: any dense model; accelerators with an fp8 peak and a bf16 peak unlike the H100 SXM's (named slips).
    vary=vary(("model", ["llama-2-7b", "llama-2-13b", "llama-3-8b", "mistral-7b"]),
              ("accelerator", ["mi300x", "h100-pcie", "b200", "l4"]),
              ("prompt_len", [1024, 2048, 3072, 4096]))))


# ex2: predict a regime ---------------------------------------------------------------------------

def solve_mlp_regime(model, accelerator, operator, prompt_len, max_len):
    import numpy as np

    from inferlab.core.costs import prefill_costs
    from inferlab.core.roofline import bound
    from inferlab.core.specs import get_accelerator, get_model
    model = get_model(model)
    accelerator = get_accelerator(accelerator)

    op = prefill_costs(model, batch=1, prompt_len=prompt_len).operators()[operator]
    short_regime = bound(op.intensity, accelerator)
    # Every prompt length at once: the costs broadcast over an array of S.
    S = np.arange(1, max_len + 1)
    sweep = prefill_costs(model, batch=1, prompt_len=S).operators()[operator]
    s_min = int(S[bound(sweep.intensity, accelerator) == "compute"][0])
    return {"regime": short_regime, "s_min": s_min}


def mistakes_mlp_regime(model, accelerator, operator, prompt_len, max_len):
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    return [
        Mistake(math.ceil(ridge_point(accelerator)),
                "that is the ridge point itself; the intensity of S tokens through a weight matrix is "
                "below S, because the activations read and written cost bytes too", "s_min"),
        Mistake(math.ceil(ridge_point(accelerator, "fp8")),
                "that is the fp8 ridge point; the model runs in bf16", "s_min"),
        Mistake("compute",
                "prefill is compute-bound only once enough tokens share each weight byte: compare the "
                "kernel's FLOPs per byte at S = {prompt_len} with the ridge point peak / bandwidth"
                .format(prompt_len=prompt_len), "regime"),
    ]


def _short_enough(model, accelerator, operator, prompt_len):
    """The drawn prompt, 128 tokens at most on an H200: its ridge point (the H100's peak over more bandwidth) is
    crossed below 256 tokens, and the prediction is about a memory-bound prompt."""
    return dict(model=model, accelerator=accelerator, operator=operator,
                prompt_len=min(prompt_len, 128) if accelerator == "h200" else prompt_len)


register(Exercise(
    id="15.1.1-ex2", kind="predict", points=1,
    title="When does prefill become compute-bound?",
    params=dict(model="llama-2-13b-book", accelerator="h100-sxm", operator="mlp_up", prompt_len=256,
                max_len=4096),
    parts=(one_of("regime", "the regime at S = {prompt_len}", ("compute", "memory")),
           integer("s_min", "the smallest S at which it is compute-bound", "tokens", abs_tol=2,
                   hint="sweep S (the cost functions accept an array) and find the first S whose "
                        "intensity reaches the ridge point")),
    statement="""\
The chapter says prefill is compute-bound "once S is even modestly long". Take the MLP up-projection
(`{operator}`) of `{model}` on an `{accelerator}`, batch 1, bf16.

1. **Predict before you compute:** for a prompt of S = {prompt_len} tokens, is this kernel compute- or memory-bound?
2. Find the smallest prompt length S at which it becomes compute-bound, counting its weight bytes and the
   activations it reads and writes (`inferlab.core.costs.prefill_costs(...).operators()['{operator}']`)
   against the ridge point (`inferlab.core.roofline`).""",
    solve=solve_mlp_regime, mistakes=mistakes_mlp_regime,
    # Variants: dense bf16 models, accelerators with an fp8 peak (a named slip), three weight matmuls, and
    # short prompts: memory-bound at S = prompt_len, compute-bound below max_len (checked for every draw).
    vary=vary(("model", ["llama-2-7b", "llama-2-13b-book", "llama-2-13b", "llama-3-8b", "mistral-7b"]),
              ("accelerator", ["h100-sxm", "h100-pcie", "h200", "mi300x", "b200", "l4"]),
              ("operator", ["mlp_up", "mlp_down", "o_proj"]), ("prompt_len", [64, 128, 256]),
              derive=_short_enough)))


# ex3: find the inconsistency ---------------------------------------------------------------------

def _memo_prefill(model, accelerator, prompt_len, tp):
    """The colleague's figures: 6*P*S with P rounded to the name's size, over tp sparse peaks."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    p_round = float(f"{model.n_params:.1g}")
    sparse_peak = 2 * accelerator.peak("bf16")
    flops = 6 * p_round * prompt_len
    return p_round, sparse_peak, flops, flops / (tp * sparse_peak)


def solve_prefill_memo(model, accelerator, prompt_len, tp):
    from inferlab import get_model
    from inferlab.core.latency import ttft_rule_s
    from inferlab.core.specs import get_accelerator
    model = get_model(model)
    accelerator = get_accelerator(accelerator)

    # One forward pass: 2 FLOPs (a multiply-add) per matmul parameter per token, at the DENSE bf16 peak,
    # split over the tp GPUs (the linear rule: no attention term, no communication).
    n_matmul = model.n_matmul_params
    ttft_ms = ttft_rule_s(n_matmul, prompt_len, accelerator) / tp * 1e3
    return {"ttft_ms": ttft_ms, "true": {"A", "B"}}


def mistakes_prefill_memo(model, accelerator, prompt_len, tp):
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    P = model.n_matmul_params
    _, _, _, memo_s = _memo_prefill(model, accelerator, prompt_len, tp)
    dense = ttft_rule_s(P, prompt_len, accelerator)
    return [
        Mistake(memo_s * 1e3, "that is the memo's own figure", "ttft_ms"),
        Mistake(dense / 2 / tp * 1e3, "you fixed the FLOP count but kept the sparse peak", "ttft_ms"),
        Mistake(3 * dense / tp * 1e3, "you fixed the peak but kept 6*P*S, the training rule", "ttft_ms"),
        Mistake(dense * 1e3, "the tp GPUs share the FLOPs: divide by tp", "ttft_ms"),
        # Hints that never narrow the set down to one or two candidates.
        Mistake(frozenset("A"), "not the right set of statements: test each one against your own numbers", "true"),
        Mistake(frozenset("B"), "not the right set of statements: test each one against your own numbers", "true"),
    ]


def statement_prefill_memo(model, accelerator, prompt_len, tp):
    p_round, peak, flops, memo_s = _memo_prefill(model, accelerator, prompt_len, tp)
    return f"""\
A colleague's capacity memo for `{model}` on `{accelerator}` GPUs reads: *"Prefill of a
{prompt_len:,}-token prompt costs 6 · P · S = 6 × {sci(p_round, 0)} × {prompt_len:,} ≈ {sci(flops)} FLOPs.
Spread over {tp} GPUs (tensor parallelism) at {peak / 1e12:,.0f} TFLOP/s each, that is {memo_s * 1e3:.0f} ms."*

1. Redo the estimate with the same linear rule, corrected: no attention term, no communication,
   P = `ModelConfig.n_matmul_params`, MFU = 1.
2. Which of these statements are true?
   - **A** 6 · P · S prices a training step (forward and backward); one forward pass is 2 · P · S.
   - **B** {peak / 1e12:,.0f} TFLOP/s is the datasheet's sparse figure; the dense bf16 peak is half of it.
   - **C** Tensor parallelism does not split a prefill's FLOPs across the GPUs.
   - **D** At {prompt_len:,} tokens prefill is memory-bound, so a FLOP count cannot give its time.
   - **E** P should include the KV cache."""


register(Exercise(
    id="15.1.1-ex3", kind="inconsistency", points=2,
    title="Check a colleague's prefill estimate",
    params=dict(model="llama-3-70b", accelerator="h100-sxm", prompt_len=4096, tp=4),
    parts=(number("ttft_ms", "the corrected estimate", "ms", rel_tol=0.02),
           letters("true", "the letters of every true statement", "ABCDE",
                   hint="test each statement against the chapter's FLOP count and the datasheet")),
    statement=statement_prefill_memo,
    solve=solve_prefill_memo, mistakes=mistakes_prefill_memo,
    # Variants: models too big for one GPU's comfort, long prompts (statement D stays false), tp 2 to 8.
    vary=vary(("model", ["llama-3-70b", "llama-2-70b", "llama-2-13b"]),
              ("accelerator", ["h100-sxm", "h200", "mi300x", "b200", "a100-80gb"]),
              ("prompt_len", [2048, 4096, 8192]), ("tp", [2, 4, 8]))))


# ex4: design ---------------------------------------------------------------------------------------

def solve_prefill_pool(model, accelerator, prompt_len, mfu, arrival_rate, ttft_slo_ms, max_utilisation,
                       tp_options):
    import math

    from inferlab.core.deployment import Deployment
    from inferlab.core.latency import prefill_time_s
    from inferlab.core.specs import get_accelerator, get_model
    model = get_model(model)
    accelerator = get_accelerator(accelerator)

    ttft_by_tp = {tp: prefill_time_s(model, Deployment(accelerator, mfu=mfu, tp=tp), prompt_len) for tp in tp_options}
    # A replica is busy one TTFT per prompt: enough replicas to keep each below the utilisation cap,
    # for the TP degrees that meet the TTFT target.
    n_gpus = {tp: tp * math.ceil(arrival_rate * t / max_utilisation)
              for tp, t in ttft_by_tp.items() if t * 1e3 <= ttft_slo_ms}
    tp = min(n_gpus, key=n_gpus.get)  # the first of equals is the smaller tp
    return {"tp": tp, "n_gpus": n_gpus[tp], "ttft_ms": ttft_by_tp[tp] * 1e3}


def mistakes_prefill_pool(model, accelerator, prompt_len, mfu, arrival_rate, ttft_slo_ms, max_utilisation,
                          tp_options):
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    def t(tp, mfu=mfu):
        return prefill_time_s(model, Deployment(accelerator, mfu=mfu, tp=tp), prompt_len)

    best = solve_prefill_pool(model, accelerator, prompt_len, mfu, arrival_rate, ttft_slo_ms, max_utilisation,
                              tp_options)
    tp = best["tp"]
    out = [
        Mistake(t(tp, 1.0) * 1e3, "that TTFT assumes MFU = 1; the statement gives the MFU to use", "ttft_ms"),
        Mistake(math.ceil(arrival_rate * t(tp)) * tp,
                "that runs the replicas flat out; keep each below the utilisation cap", "n_gpus"),
        Mistake(math.floor(arrival_rate * t(tp) / max_utilisation) * tp,
                "round the number of replicas up, not down", "n_gpus"),
    ]
    for other in tp_options:
        if other == tp:
            continue
        if t(other) * 1e3 > ttft_slo_ms:
            why = f"tp = {other} misses the TTFT target"
        else:
            why = f"tp = {other} meets the TTFT target but needs more GPUs"
        out += [Mistake(other, why, "tp"), Mistake(t(other) * 1e3, f"that is the TTFT at tp = {other}", "ttft_ms"),
                Mistake(math.ceil(arrival_rate * t(other) / max_utilisation) * other,
                        f"that is the GPU count with tp = {other}; {why}", "n_gpus")]
    return out


register(Exercise(
    id="15.1.1-ex4", kind="design", points=3,
    title="Size a prefill pool",
    params=dict(model="llama-3-8b", accelerator="h100-sxm", prompt_len=4096, mfu=0.5, arrival_rate=60,
                ttft_slo_ms=100, max_utilisation=0.7, tp_options=(1, 2, 4, 8)),
    # tp and n_gpus take a few small values (TP 1-8): they weigh little (LOW_WEIGHT), the TTFT carries it.
    parts=(integer("tp", "the tensor-parallel degree of a replica", weight=LOW_WEIGHT),
           integer("n_gpus", "the GPUs of the whole pool", "GPUs", weight=LOW_WEIGHT),
           number("ttft_ms", "the TTFT a prompt sees on an idle replica", "ms", rel_tol=0.02)),
    statement="""\
You run prefill on its own pool of `{accelerator}` GPUs (disaggregated serving). Prompts of S = {prompt_len}
tokens for `{model}` (bf16) arrive at {arrival_rate} per second. The product needs TTFT ≤ {ttft_slo_ms} ms on an
idle replica, and each replica must stay below {max_utilisation:.0%} busy, to leave headroom for queueing.
A replica is a group of tp GPUs, tp ∈ {tp_options}. Take the time one replica spends on one prompt from
`inferlab.core.latency.prefill_time_s(model, Deployment(accelerator, mfu={mfu}, tp=tp), prompt_len)` (it counts attention and the all-reduces).

Choose tp and the number of replicas so that the pool needs the fewest GPUs (on a tie, the smaller tp).""",
    solve=solve_prefill_pool, mistakes=mistakes_prefill_pool,
    # Variants: 7-13B models on four accelerators, two loads, three targets and five prompt lengths; every draw
    # has a feasible tp and no wrong tp that lands on the right GPU count (arrival rates 30-90, a 60 ms target,
    # and lengths 1536-3840 or 4352-4864 in steps of 256 have draws that do).
    vary=vary(("model", ["llama-3-8b", "llama-2-7b", "mistral-7b", "llama-2-13b"]),
              ("accelerator", ["h100-sxm", "h200", "b200", "mi300x"]),
              ("arrival_rate", [60, 120]), ("ttft_slo_ms", [80, 100, 150]),
              ("prompt_len", [4096, 5120, 5376, 5632, 5888]))))

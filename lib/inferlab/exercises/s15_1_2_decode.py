"""Exercises for 15.1.2, memory-bound generation and the KV cache.

Each `solve_*` body is, word for word, the instructor's solution cell: imports inside, one `return`.
"""
import dataclasses
import math

from inferlab.core.costs import decode_costs
from inferlab.exercises.core import LOW_WEIGHT, Exercise, Mistake, integer, letters, number, one_of, register, vary
from inferlab.core.latency import decode_step_rule_s, decode_step_time_s
from inferlab.core.memory import kv_cache_bytes, max_batch, memory_budget, weight_bytes
from inferlab.core.specs import Precision, get_accelerator, get_model
from inferlab.base.units import GB, GiB


def _mha(model):
    """The same model with every query head cached: the n_heads-for-n_kv_heads slip."""
    m = get_model(model)
    return m.with_(n_kv_heads=m.n_heads)


def _gib_card(accelerator):
    """The accelerator read as if its 'GB' were GiB: the GB-versus-GiB slip on capacity."""
    acc = get_accelerator(accelerator)
    return dataclasses.replace(acc, memory_bytes=acc.memory_bytes / GB * GiB)


# ex1: recompute -----------------------------------------------------------------------------------

def solve_kv_per_sequence(model, seq_len, kv_dtype):
    from inferlab import Precision
    from inferlab.core.memory import kv_cache_bytes
    from inferlab.core.specs import get_model
    model = get_model(model)

    # 2 (K and V) * L * n_kv_heads * head_dim * S * bytes per element
    kv_bytes = kv_cache_bytes(model, seq_len, batch=1, precision=Precision(kv=kv_dtype))
    return kv_bytes / 1e9


def mistakes_kv_per_sequence(model, seq_len, kv_dtype):
    model = get_model(model)
    p = Precision(kv=kv_dtype)
    right = kv_cache_bytes(model, seq_len, 1, p) / GB
    return [
        Mistake(kv_cache_bytes(_mha(model), seq_len, 1, p) / GB,
                "you cached every query head; with grouped-query attention only n_kv_heads K and V heads "
                "are stored"),
        Mistake(right / 2, "half: the factor 2 for K and V, or 2 bytes per bf16 element, is missing"),
        Mistake(kv_cache_bytes(model, seq_len, 1, Precision(kv="fp32")) / GB,
                "4 bytes per element is fp32; the cache is bf16 (2 bytes)"),
    ]


register(Exercise(
    id="15.1.2-ex1", kind="recompute", points=1,
    title="The KV cache of one {model} sequence",
    params=dict(model="llama-3-70b", seq_len=8192, kv_dtype="bf16"),
    parts=(number("kv_gb", "the KV cache of one sequence", "GB", rel_tol=0.01),),
    statement="""\
The chapter sizes the KV cache of Llama-2 13B, a multi-head-attention model. Recompute it for `{model}`,
which uses grouped-query attention: one sequence of S = {seq_len} tokens, {kv_dtype} cache, every token of the
sequence cached (a sliding-window layer would keep only its last W tokens, but the registry's `mistral-7b`
models no window; the `mistral-7b-v0.1` config does). GB = 10⁹ bytes.""",
    solve=solve_kv_per_sequence, mistakes=mistakes_kv_per_sequence,
    # Variants: a grouped-query-attention model (the point of the exercise) and a context it supports. S on a
    # grid of 256 from 1664: neighbours differ by more than the 1 % tolerance, and Llama 3 70B's cache (2.5 x
    # that of the 8B models per token) at S lands at least 64 tokens (1.5 %) off any 8B cache on the grid.
    vary=vary(("model", ["llama-3-70b", "llama-3-8b", "mistral-7b"]), ("seq_len", list(range(1664, 8193, 256))))))


# ex2: recompute (max batch with an int8 cache) ---------------------------------------------------

def solve_int8_batch(model, accelerator, seq_len, kv_dtype):
    from inferlab import Precision
    from inferlab.core.memory import max_batch
    from inferlab.core.specs import get_accelerator, get_model
    model = get_model(model)
    accelerator = get_accelerator(accelerator)

    # bf16 weights; only the cache is quantised. max_batch floors (weights + B * KV <= capacity).
    return max_batch(model, accelerator, seq_len, Precision(kv=kv_dtype))


def mistakes_int8_batch(model, accelerator, seq_len, kv_dtype):
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    p = Precision(kv=kv_dtype)
    acc = accelerator
    free = acc.memory_bytes - weight_bytes(model, p)
    per_seq = kv_cache_bytes(model, seq_len, 1, p)
    return [
        Mistake(max_batch(model, accelerator, seq_len, allow_zero=True),
                "that is the batch with a bf16 cache; the statement quantises the cache to int8"),
        # The slip is in the KV formula (n_heads for n_kv_heads); the weights stay those of the model.
        Mistake(max(math.floor(free / kv_cache_bytes(_mha(model), seq_len, 1, p)), 0),
                "you cached every query head; only the n_kv_heads K and V heads are stored"),
        Mistake(max_batch(_mha(model), accelerator, seq_len, p, allow_zero=True),
                "you cached every query head; only the n_kv_heads K and V heads are stored"),
        Mistake(max_batch(model, _gib_card(accelerator), seq_len, p, allow_zero=True),
                "the datasheet's GB are 1e9 bytes, not GiB"),
        Mistake(math.floor(acc.memory_bytes / per_seq),
                "the weights sit in the same memory: subtract them first"),
        Mistake(max_batch(model, accelerator, seq_len, Precision(weights="int8", kv="int8"), allow_zero=True),
                "only the KV cache is int8; the weights stay bf16"),
        Mistake(round(free / per_seq), "a batch that fits is the floor of free / per-sequence, not the rounded value"),
    ]


def _int8_settings() -> list:
    """(model, accelerator, S) for ex2's variants: Mistral 7B and Llama 3 8B on an L4 or an A100 40 GB, S within
    their 8,192-token context on a 256-token grid from 2,048, where free / per-sequence has a fractional part
    >= 0.5 (so that rounding instead of flooring is a visible slip). Some fifty settings with as many different
    answers, so two students rarely share one."""
    out = []
    for model in ("mistral-7b", "llama-3-8b"):
        m = get_model(model)
        for accelerator in ("l4", "a100-40gb"):
            free = get_accelerator(accelerator).memory_bytes - weight_bytes(m, Precision())
            for seq_len in range(2048, 8193, 256):
                ratio = free / kv_cache_bytes(m, seq_len, 1, Precision(kv="int8"))
                if ratio - math.floor(ratio) >= 0.5:
                    out.append((model, accelerator, seq_len))
    return out


register(Exercise(
    id="15.1.2-ex2", kind="recompute", points=1,
    title="Max batch with an int8 KV cache",
    params=dict(model="mistral-7b", accelerator="l4", seq_len=8192, kv_dtype="int8"),
    parts=(integer("max_batch", "the largest batch that fits", "sequences"),),
    statement="""\
The chapter says quantising the KV cache to int8 "doubles the effective maximum batch size". Take
`{model}` on one `{accelerator}`: bf16 weights, {kv_dtype} KV cache, every sequence S = {seq_len} tokens long
(prompt plus output), every token cached (these registry models attend to the whole context: `mistral-7b`
here models no sliding window), nothing else in memory. What is the
largest batch that fits? GB = 10⁹ bytes, as on the datasheet.""",
    solve=solve_int8_batch, mistakes=mistakes_int8_batch,
    # Variants: 7-8B GQA models on 24-40 GB cards, where the int8 cache matters (see `_int8_settings`).
    vary=vary((("model", "accelerator", "seq_len"), _int8_settings()))))


# ex3: predict regimes --------------------------------------------------------------------------------

def solve_decode_regimes(model, accelerator, batch, context_len):
    from inferlab.core.costs import decode_costs
    from inferlab.core.roofline import bound
    from inferlab.core.specs import get_accelerator, get_model
    model = get_model(model)
    accelerator = get_accelerator(accelerator)

    step_costs = decode_costs(model, batch, context_len)
    mlp_up = step_costs.operators()["mlp_up"]
    attention = step_costs.attention  # QK^T and PV over all layers
    return {
        "mlp": bound(mlp_up.intensity, accelerator),
        "attention": bound(attention.intensity, accelerator),
        "attention_intensity": float(attention.intensity),
        "attention_gb": float(attention.bytes) / 1e9,  # every sequence's own K and V, plus Q and the output
    }


def mistakes_decode_regimes(model, accelerator, batch, context_len):
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    return [
        Mistake("memory", "at B = {b} every weight byte serves {b} tokens: compare the MLP's intensity (about B) "
                          "with the ridge point".format(b=batch), "mlp"),
        Mistake("compute", "batching shares the weights, not the KV cache: each sequence reads its own", "attention"),
        Mistake(float(decode_costs(_mha(model), batch, context_len).attention.intensity),
                "about 1 FLOP per byte is the multi-head value; with grouped-query attention each cached K/V head "
                "serves n_heads / n_kv_heads query heads", "attention_intensity"),
        Mistake(0.5, "0.5 is the book's figure for an MHA model, itself off by 2: per cached bf16 element, "
                     "QK^T does 2 FLOPs on 2 bytes", "attention_intensity"),
        Mistake(float(batch), "batching does not amortise the KV cache: the intensity does not grow with B",
                "attention_intensity"),
        Mistake(float(decode_costs(_mha(model), batch, context_len).attention.bytes) / GB,
                "you read every query head's K and V; only the n_kv_heads cached heads are stored and read",
                "attention_gb"),
        Mistake(float(decode_costs(model, 1, context_len).attention.bytes) / GB,
                "that is one sequence's attention; each of the {b} sequences reads its own cache".format(b=batch),
                "attention_gb"),
        Mistake(float(decode_costs(model, batch, context_len).attention.bytes) / GiB,
                "GB are 1e9 bytes here, not GiB", "attention_gb"),
    ]


# The products B * S at which attention's bytes equal a number the chapter prints (to the 4 digits a leak scan
# reads; 4,915,200: the 1,613 tokens/s of the measured-kernel table), by per-token cache: 8B GQA models (Llama 3 8B, Mistral 7B) and 70B ones. A student notebook showing a
# variant's answer would be refused by the builder.
_PRINTED_ATTENTION_BS = {"8b": (2_506_752,), "70b": (4_177_920, 4_194_304, 4_915_200, 5_111_808, 6_094_848, 6_176_768)}


def _regime_settings() -> list:
    """(model, B, S) for ex3's variants: B on a 32 grid from 384 to 1,024, S on a 256 grid from 2,048 to
    8,192, less the products B * S listed in `_PRINTED_ATTENTION_BS`."""
    out = []
    for model in ("llama-3-8b", "mistral-7b", "llama-3-70b", "llama-2-70b"):
        printed = _PRINTED_ATTENTION_BS["70b" if "70b" in model else "8b"]
        out += [(model, b, s) for b in range(384, 1025, 32) for s in range(2048, 8193, 256)
                if b * s not in printed]
    return out


register(Exercise(
    id="15.1.2-ex3", kind="predict", points=2,
    title="Does a big batch make decode compute-bound?",
    params=dict(model="llama-3-8b", accelerator="h100-sxm", batch=512, context_len=4096),
    parts=(one_of("mlp", "the regime of the MLP up-projection", ("compute", "memory")),
           one_of("attention", "the regime of attention (QK^T and PV together)", ("compute", "memory")),
           # n_heads / n_kv_heads (4 or 8 here) sets it: few values, so it weighs as little as a choice.
           number("attention_intensity", "attention's arithmetic intensity", "FLOP/byte", rel_tol=0.02,
                  weight=LOW_WEIGHT),
           number("attention_gb", "the bytes attention reads and writes in this step, all layers", "GB",
                  rel_tol=0.02)),
    statement="""\
One decode step of `{model}` on an `{accelerator}`, B = {batch} sequences, each attending over {context_len}
positions, bf16. **Predict first:** is the MLP up-projection compute- or memory-bound at this batch, and
is attention? Then compute attention's HBM bytes in this step and its arithmetic intensity (its FLOPs over
those bytes, all layers, `inferlab.core.costs.decode_costs(...).attention`). The chapter says the intensity "stays
pinned near 1" — does that hold for this model? GB = 10⁹ bytes.""",
    solve=solve_decode_regimes, mistakes=mistakes_decode_regimes,
    # Variants: GQA models (the point of the intensity part), batches of 384-1024 (MLP compute-bound on
    # these cards, attention memory-bound: checked for every draw) and contexts on a 256-token grid, so
    # that attention's bytes (B * S * the model's per-token cache) differ between most pairs of students.
    vary=vary(("accelerator", ["h100-sxm", "h200", "a100-80gb", "mi300x"]),
              (("model", "batch", "context_len"), _regime_settings()))))


# ex4: find the inconsistency ---------------------------------------------------------------------

def solve_batch_memo(model, accelerator, context_len, batch):
    from inferlab.core import memory
    from inferlab.core.latency import decode_step_rule_s
    from inferlab.core.specs import get_accelerator, get_model
    model = get_model(model)
    accelerator = get_accelerator(accelerator)

    # The chapter's rule: every weight byte once per step, and every sequence's own cache.
    weights, cache = memory.weight_bytes(model), memory.kv_cache_bytes(model, context_len)
    step_s = decode_step_rule_s(weights, cache, batch, accelerator)
    return {"step_ms": step_s * 1e3, "tokens_per_s": batch / step_s, "cause": "A"}


def mistakes_batch_memo(model, accelerator, context_len, batch):
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    m = model
    w, kv = weight_bytes(m), kv_cache_bytes(m, context_len)
    one = decode_step_rule_s(w, kv, 1, accelerator)
    weights_only = w / accelerator.hbm_bytes_per_s
    return [
        Mistake(one * 1e3, "that is the memo's step, the one of B = 1", "step_ms"),
        Mistake(weights_only * 1e3, "you left out the KV cache reads", "step_ms"),
        Mistake(batch / one, "that is the memo's throughput; the step grows with B", "tokens_per_s"),
        Mistake(batch / weights_only, "that throughput leaves out the KV cache reads", "tokens_per_s"),
        Mistake("B", "compare B = {b} with the ridge point, and recall that attention never gets there".format(b=batch),
                "cause"),
        Mistake("C", "the weights are read once per step and shared by the whole batch", "cause"),
        Mistake("D", "the memo's mistake is in the bytes it counts, not in the bandwidth", "cause"),
    ]


def _batch_that_fits(model, accelerator, context_len, f):
    m, acc = get_model(model), get_accelerator(accelerator)  # the params keep the names
    return dict(model=model, accelerator=accelerator, context_len=context_len,
                batch=max(2, math.floor(f * max_batch(m, acc, context_len))))


def statement_batch_memo(model, accelerator, context_len, batch):
    m = get_model(model)
    w, kv = weight_bytes(m), kv_cache_bytes(m, context_len)
    one = decode_step_rule_s(w, kv, 1, get_accelerator(accelerator))
    return f"""\
A colleague's memo on `{model}` (bf16) on one `{accelerator}`, contexts of S = {context_len:,} tokens:
*"At B = 1 a decode step reads the weights and one KV cache, {(w + kv) / GB:.1f} GB: {one * 1e3:.2f} ms.
Batching shares the weight read, so at B = {batch} the step stays at {one * 1e3:.2f} ms and we get
{batch / one:,.0f} tokens/s."*

1. With the chapter's rule, step = (M_weights + B·C_kv) / BW (`inferlab.core.latency.decode_step_rule_s`, weights from
   `memory.weight_bytes`, C_kv from `memory.kv_cache_bytes`), compute the step time and the throughput at B = {batch}.
2. What is wrong with the memo?
   - **A** Each sequence reads its own KV cache every step; the memo counts one cache instead of {batch}.
   - **B** At B = {batch} decode becomes compute-bound, so the memory rule no longer applies.
   - **C** The weights are read once per sequence, so the step takes {batch} times the B = 1 step.
   - **D** The bandwidth is split between the sequences, each getting 1/{batch} of it."""


register(Exercise(
    id="15.1.2-ex4", kind="inconsistency", points=2,
    title="Check a colleague's batching memo",
    params=dict(model="llama-2-7b", accelerator="a100-80gb", context_len=2048, batch=48),
    parts=(number("step_ms", "the decode step time at B = {batch}", "ms", rel_tol=0.02),
           number("tokens_per_s", "the throughput at B = {batch}", "tokens/s", rel_tol=0.02),
           one_of("cause", "the letter of what is wrong", "ABCD")),
    statement=statement_batch_memo,
    solve=solve_batch_memo, mistakes=mistakes_batch_memo,
    # Variants: the batch 20, 60, 85 or 100 % of the largest that fits in memory (fractions chosen so that no
    # answer coincides with a number the chapter prints, which would make the student build refuse it).
    vary=vary(("model", ["llama-2-7b", "llama-2-13b", "llama-3-8b", "mistral-7b"]),
              ("accelerator", ["a100-80gb", "h100-sxm", "h200", "mi300x"]),
              ("context_len", [1024, 2048, 4096]), ("f", [0.2, 0.6, 0.85, 1.0]), derive=_batch_that_fits)))


# ex5: design ---------------------------------------------------------------------------------------

def solve_precision_choice(model, accelerator, batch, context_len, options):
    from inferlab import Precision
    from inferlab.core.latency import decode_step_time_s
    from inferlab.core.memory import memory_budget
    from inferlab.core.specs import get_accelerator, get_model
    model = get_model(model)
    accelerator = get_accelerator(accelerator)

    # Weight-only quantisation: the matrix units still compute in bf16.
    plans = {letter: Precision(weights=w, kv=kv) for letter, (w, kv) in options.items()}
    fits = [k for k, p in plans.items() if memory_budget(model, accelerator, batch, context_len, p).fits]
    itl_ms = {k: decode_step_time_s(model, accelerator, context_len, batch, plans[k]) * 1e3 for k in fits}
    best = min(itl_ms, key=itl_ms.get)
    return {"fits": set(fits), "best": best, "itl_ms": itl_ms[best]}


def mistakes_precision_choice(model, accelerator, batch, context_len, options):
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    best = solve_precision_choice(model, accelerator, batch, context_len, options)["best"]
    out = []
    for letter, (weights, kv) in options.items():
        p = Precision(weights=weights, kv=kv)
        if letter == best:
            continue
        if memory_budget(model, accelerator, batch, context_len, p).fits:
            out.append(Mistake(decode_step_time_s(model, accelerator, context_len, batch, p) * 1e3,
                               f"that is the ITL of option {letter}", "itl_ms"))
        else:
            out.append(Mistake(letter, f"option {letter} does not fit: add its weight bytes and {batch} caches",
                               "best"))
    return out


def _batch_beyond_bf16(model, accelerator, context_len, k):
    m, acc = get_model(model), get_accelerator(accelerator)  # the params keep the names
    return dict(model=model, accelerator=accelerator, context_len=context_len,
                batch=math.floor(k * max_batch(m, acc, context_len)) + 1)


# (model, accelerator, S, B) whose best ITL is a number the chapter prints (a leak the student build refuses).
_PRINTED_PLAN_ITL = {("llama-2-13b", "h200", 4096, 67), ("llama-2-7b", "a100-80gb", 3584, 54),
                     ("llama-2-13b", "a100-80gb", 3072, 32), ("llama-2-13b", "h200", 3072, 65),
                     ("llama-2-7b", "a100-80gb", 2560, 50), ("llama-2-7b", "a100-80gb", 4096, 44)}


def _precision_settings() -> list:
    """(model, accelerator, S, k) for ex5's variants: S from 2,048 to 4,096 on a 512 grid, the batch k = 1 to 2
    times (in steps of 0.04) the bf16 plan's max batch, plus one; less `_PRINTED_PLAN_ITL`, the settings where no
    plan fits, and those where another plan that fits comes within 3 % of the best one's ITL (the KV cache
    dominates, and a plan with an int8 cache alone is as fast): "which is fastest" would have no clear answer."""
    plans = {k: Precision(weights=w, kv=kv) for k, (w, kv) in
             {"B": ("bf16", "int8"), "C": ("int8", "bf16"), "D": ("int8", "int8")}.items()}
    out = []
    for model in ("llama-2-13b", "llama-2-7b"):
        for accelerator in ("h100-sxm", "a100-80gb", "h200"):
            m, acc = get_model(model), get_accelerator(accelerator)
            for context_len in range(2048, 4097, 512):
                for k in [1 + i / 25 for i in range(26)]:
                    batch = _batch_beyond_bf16(model, accelerator, context_len, k)["batch"]
                    if (model, accelerator, context_len, batch) in _PRINTED_PLAN_ITL:
                        continue
                    itl = sorted(decode_step_time_s(m, acc, context_len, batch, p) for p in plans.values()
                                 if memory_budget(m, acc, batch, context_len, p).fits)
                    if itl and (len(itl) < 2 or itl[1] > 1.03 * itl[0]):
                        out.append((model, accelerator, context_len, k))
    return out


def statement_precision_choice(model, accelerator, batch, context_len, options):
    listing = "\n".join(f"   - **{k}** {w} weights, {kv} KV cache" for k, (w, kv) in options.items())
    return f"""\
You must serve `{model}` on one `{accelerator}` with B = {batch} concurrent sequences of up to
S = {context_len} tokens. Four precision plans (weight-only quantisation: the matrix units still compute in bf16):
{listing}

1. Which plans fit in memory (weights plus the KV cache of the full batch, nothing reserved)?
2. Of those, which gives the lowest inter-token latency (`inferlab.core.latency.decode_step_time_s` at S = {context_len},
   B = {batch})?
3. What is that ITL?"""


register(Exercise(
    id="15.1.2-ex5", kind="design", points=3,
    title="Pick a precision plan",
    params=dict(model="llama-2-13b", accelerator="h100-sxm", batch=24, context_len=4096,
                options={"A": ("bf16", "bf16"), "B": ("bf16", "int8"), "C": ("int8", "bf16"), "D": ("int8", "int8")}),
    parts=(letters("fits", "the plans that fit", "ABCD",
                   hint="for each plan compare weights + B·KV (memory.memory_budget) with the capacity"),
           one_of("best", "the plan with the lowest ITL among those that fit", "ABCD"),
           number("itl_ms", "its ITL", "ms", rel_tol=0.02)),
    statement=statement_precision_choice,
    solve=solve_precision_choice, mistakes=mistakes_precision_choice,
    # Variants (`_precision_settings`): plan A never fits, plan D always does (checked for every draw), so
    # "which fit" has both answers.
    vary=vary((("model", "accelerator", "context_len", "k"), _precision_settings()), derive=_batch_beyond_bf16)))

"""Exercises for 15.2.3, the serving lab (beyond the chapter): prefix caching, chunked prefill, what a
cached prefix does not save, a shared prefix in the KV pool.

Each `solve_*` body is, word for word, the instructor's solution cell: imports inside, one `return`.
"""
import math

from inferlab.exercises.core import LOW_WEIGHT, Exercise, Mistake, integer, letters, number, one_of, register, vary
from inferlab.serving.kv import blocks_for, kv_capacity_blocks
from inferlab.serving.steptime import RooflineStepTime
from inferlab.core.specs import get_accelerator, get_model


# ex1: recompute ------------------------------------------------------------------------------------

def solve_cached_ttft(model, accelerator, prefix_tokens, suffix_tokens):
    from inferlab.serving import RooflineStepTime
    from inferlab.core.specs import get_accelerator, get_model
    model = get_model(model)
    accelerator = get_accelerator(accelerator)

    st = RooflineStepTime(model, accelerator)
    c, q = prefix_tokens, suffix_tokens
    # Only the q uncached tokens go through the layers, but their queries attend to all c + q keys:
    # q*c + q(q+1)/2 query-key pairs, c + q keys read, one token sampled.
    cached_s = st(q, 1, q * c + q * (q + 1) / 2, c + q)
    return {"ttft_cached_ms": cached_s * 1e3, "speedup": st.prefill_s(c + q) / cached_s}


def mistakes_cached_ttft(model, accelerator, prefix_tokens, suffix_tokens):
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    st = RooflineStepTime(model, accelerator)
    c, q = prefix_tokens, suffix_tokens
    alone = st(q, 1, q * (q + 1) / 2, q)  # the suffix as if it were the whole prompt
    cached = st(q, 1, q * c + q * (q + 1) / 2, c + q)
    full = st.prefill_s(c + q)
    keys = "the suffix's queries still attend to the cached prefix: count q*c + q(q+1)/2 pairs and c + q keys"
    return [
        Mistake(alone * 1e3, keys, "ttft_cached_ms"),
        Mistake(full / alone, keys, "speedup"),
        Mistake(full * 1e3, "that is the TTFT without the cache: the whole prompt prefilled", "ttft_cached_ms"),
        Mistake((c + q) / q, "TTFT is not proportional to the tokens fed: the suffix's attention reads the "
                "whole context, and a short step still reads every weight once", "speedup"),
        Mistake(cached / full, "upside down: the speed-up is the uncached TTFT over the cached one", "speedup"),
    ]


# Settings whose cached TTFT is a number the lab prints (a leak the student build refuses).
_PRINTED_TTFT = {("llama-3-8b", "h100-sxm", 8000, 900), ("llama-3-8b", "a100-80gb", 3500, 1200),
                 ("llama-3-8b", "mi300x", 6000, 1000)}


register(Exercise(
    id="15.2.3-ex1", kind="recompute", points=1,
    title="The TTFT of a request whose system prompt is cached",
    params=dict(model="llama-3-8b", accelerator="h100-sxm", prefix_tokens=6000, suffix_tokens=1000),
    parts=(number("ttft_cached_ms", "the TTFT of the request with its prefix cached, alone on the GPU", "ms",
                  rel_tol=0.01),
           number("speedup", "the TTFT without the cache divided by the TTFT with it", "", rel_tol=0.01)),
    statement="""\
Every request to a `{model}` server on one `{accelerator}` (bf16) starts with the same {prefix_tokens:,}-token
system prompt, followed by {suffix_tokens:,} tokens of its own. With prefix caching, the system prompt's K and V
are already in the cache when a request arrives. Compute the request's TTFT alone on the GPU (one prefill step,
no queue) with the library's step time `inferlab.serving.RooflineStepTime(model, accelerator)`, called as
`st(tokens, logits, attn_pairs, attn_kv_tokens)`: the tokens fed through the layers, the tokens sampled, the
query-key pairs scored and the keys read. Then the speed-up over prefilling the whole prompt
(`st.prefill_s(tokens)`).""",
    solve=solve_cached_ttft, mistakes=mistakes_cached_ttft,
    # Variants: prefixes of 3,000 to 8,000 tokens and suffixes of 400 to 1,200, less `_PRINTED_TTFT`.
    vary=vary((("model", "accelerator", "prefix_tokens", "suffix_tokens"),
               [(m, a, c, q) for m in ("llama-3-8b", "mistral-7b") for a in ("h100-sxm", "h200", "a100-80gb", "mi300x")
                for c in range(3000, 8001, 500) for q in range(400, 1201, 100) if (m, a, c, q) not in _PRINTED_TTFT]))))


# ex2: predict --------------------------------------------------------------------------------------

def solve_chunk_stall(model, accelerator, batch, context, long_tokens, chunk, itl_slo_ms):
    from inferlab.serving import RooflineStepTime
    from inferlab.core.specs import get_accelerator, get_model
    model = get_model(model)
    accelerator = get_accelerator(accelerator)

    st = RooflineStepTime(model, accelerator)
    decode_s = st.decode_s(context, batch)
    # Unchunked: the whole prompt in a step of its own, then the next decode step.
    stall_s = st.prefill_s(long_tokens) + decode_s
    # Chunked: the batch's decode tokens and the prompt's first q = chunk - batch tokens in one step.
    q = chunk - batch
    chunked_s = st(batch + q, batch, batch * context + q * (q + 1) / 2, batch * context + q)
    ok = {"unchunked": stall_s * 1e3 <= itl_slo_ms, "chunked": chunked_s * 1e3 <= itl_slo_ms}
    meets = "both" if all(ok.values()) else "neither" if not any(ok.values()) else next(k for k, v in ok.items() if v)
    return {"stall_ms": stall_s * 1e3, "chunked_itl_ms": chunked_s * 1e3, "meets_slo": meets}


def mistakes_chunk_stall(model, accelerator, batch, context, long_tokens, chunk, itl_slo_ms):
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    st = RooflineStepTime(model, accelerator)
    q = chunk - batch
    pre = st.prefill_s(long_tokens)
    return [
        Mistake(pre * 1e3, "the running sequences also need their own decode step after the prefill step",
                "stall_ms"),
        Mistake(st.decode_s(context, batch) * 1e3, "that is an ordinary decode step: the prefill step comes first",
                "stall_ms"),
        Mistake(st(batch + chunk, batch, batch * context + chunk * (chunk + 1) / 2, batch * context + chunk) * 1e3,
                "the budget C counts the decode tokens too: the chunk is C - B prompt tokens", "chunked_itl_ms"),
        Mistake(st.prefill_s(q) * 1e3, "the decode tokens ride in the same step: they add their tokens, "
                "their KV reads and their logits", "chunked_itl_ms"),
    ]


register(Exercise(
    id="15.2.3-ex2", kind="predict", points=2,
    title="A long prompt arrives: stall or chunk?",
    params=dict(model="llama-2-13b", accelerator="h100-sxm", batch=32, context=1024, long_tokens=3968, chunk=512,
                itl_slo_ms=50),
    parts=(number("stall_ms", "the gap between two tokens of a running sequence across the unchunked prefill",
                  "ms", rel_tol=0.01),
           number("chunked_itl_ms", "the same gap when the step carries the first chunk instead", "ms", rel_tol=0.01),
           one_of("meets_slo", "which schedule keeps that gap within the ITL target",
                  ("unchunked", "chunked", "both", "neither"))),
    statement="""\
A `{model}` server on one `{accelerator}` is decoding B = {batch} sequences, each with {context:,} tokens in its
cache, when a {long_tokens:,}-token prompt arrives. **Predict first:** with an ITL target of {itl_slo_ms} ms, which
schedule keeps the running sequences within it?

- *Unchunked* (prefill-first): the whole prompt is prefilled in a step of its own while the decodes wait; the
  gap a running sequence sees is that step plus its next decode step (`st.prefill_s`, `st.decode_s(context,
  batch)`).
- *Chunked* with a budget of C = {chunk} tokens per step: the step carries the {batch} decode tokens and the
  prompt's first C - B tokens (nothing of the prompt cached yet), and samples {batch} tokens.

Use `st = inferlab.serving.RooflineStepTime(model, accelerator)`, called as `st(tokens, logits, attn_pairs,
attn_kv_tokens)`: each decode scores its {context:,} cached keys (one pair per key) and reads them; the chunk's
q tokens score q(q+1)/2 pairs among themselves and read q keys.""",
    solve=solve_chunk_stall, mistakes=mistakes_chunk_stall,
    vary=vary(("accelerator", ["h100-sxm", "h200", "b200", "mi300x"]), ("batch", [24, 32, 48]),
              ("long_tokens", [2048, 3968]), ("chunk", [512, 1024]))))


# ex3: find the inconsistency ---------------------------------------------------------------------

def solve_cached_decode(model, accelerator, prefix_tokens, own_tokens, batch):
    from inferlab.serving import RooflineStepTime
    from inferlab.core.specs import get_accelerator, get_model
    model = get_model(model)
    accelerator = get_accelerator(accelerator)

    st = RooflineStepTime(model, accelerator)
    # Each sequence's attention reads its whole context, the shared prefix included, at every step.
    decode_s = st.decode_s(prefix_tokens + own_tokens, batch)
    return {"decode_ms": decode_s * 1e3, "ratio": decode_s / st.decode_s(own_tokens, batch), "true": {"A", "C", "D"}}


def mistakes_cached_decode(model, accelerator, prefix_tokens, own_tokens, batch):
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    st = RooflineStepTime(model, accelerator)
    full, short = st.decode_s(prefix_tokens + own_tokens, batch), st.decode_s(own_tokens, batch)
    hint = "not the right set of statements: test each one against your own numbers"
    return [
        Mistake(short * 1e3, "that is the memo's step: every sequence still reads the shared prefix's keys and "
                "values at each step", "decode_ms"),
        Mistake(st.decode_s(prefix_tokens + own_tokens, 1) * 1e3, "that is one sequence; the step carries "
                f"all {batch}", "decode_ms"),
        Mistake(short / full, "upside down: the ratio is the true step over the memo's", "ratio"),
        Mistake(frozenset("A"), hint, "true"),
        Mistake(frozenset("ABCD"), hint, "true"),
    ]


def statement_cached_decode(model, accelerator, prefix_tokens, own_tokens, batch):
    return f"""\
A colleague writes about a `{model}` server on one `{accelerator}` (bf16) whose requests share a
{prefix_tokens:,}-token system prompt and add {own_tokens:,} tokens each: *"With prefix caching the system prompt is
free. Its KV is stored once, so a decode step of {batch} conversations costs what {batch} conversations of
{own_tokens:,} tokens cost, and a request's TTFT is the prefill of its own {own_tokens:,} tokens."*

1. Compute the decode step time of {batch} sequences that each hold the whole {prefix_tokens + own_tokens:,}-token
   context (`inferlab.serving.RooflineStepTime(model, accelerator).decode_s(context, batch)`; the attention kernel
   reads each sequence's cached blocks, shared or not), and its ratio to the colleague's step (context
   {own_tokens:,}).
2. Which of these statements are true?
   - **A** The request's own tokens attend to the cached system prompt, so its cached prefill costs more than a
     prefill of those tokens alone.
   - **B** A decode step reads a shared prefix's K and V once for the whole batch.
   - **C** Caching saves KV *memory* for the shared prefix: its blocks are stored once, not once per request.
   - **D** Without prefix caching, every request's KV cache holds its own copy of the system prompt.
   - **E** Prefix caching halves the FLOPs of the projections of the request's own tokens."""


# Settings whose decode step (model, accelerator, prefix, own tokens, batch) or ratio (the same less the
# accelerator) is a number the lab prints (a leak the student build refuses).
_PRINTED_DECODE = {("llama-3-8b", "h100-sxm", 6500, 800, 24), ("llama-3-8b", "h100-sxm", 8000, 1000, 32),
                   ("llama-3-8b", "mi300x", 6500, 1000, 48)}
_PRINTED_RATIO = {("llama-3-8b", 7000, 1200, 32), ("mistral-7b", 3000, 1000, 16), ("mistral-7b", 4500, 400, 48),
                  ("mistral-7b", 5500, 1000, 48)}


register(Exercise(
    id="15.2.3-ex3", kind="inconsistency", points=2,
    title="Is a cached system prompt free?",
    params=dict(model="llama-3-8b", accelerator="h100-sxm", prefix_tokens=6000, own_tokens=1000, batch=16),
    parts=(number("decode_ms", "the decode step of {batch} sequences at the full context", "ms", rel_tol=0.01),
           number("ratio", "that step divided by the colleague's step", "", rel_tol=0.01),
           letters("true", "the letters of every true statement", "ABCDE",
                   hint="test each statement against the numbers of part 1 and section 5 of the lab")),
    statement=statement_cached_decode,
    solve=solve_cached_decode, mistakes=mistakes_cached_decode,
    # Variants: prefixes of 3,000 to 8,000 tokens, 400 to 1,200 of a conversation's own, 16 to 48 sequences, less
    # the settings whose step or ratio the lab prints (`_PRINTED_DECODE`, `_PRINTED_RATIO`).
    vary=vary((("model", "accelerator", "prefix_tokens", "own_tokens", "batch"),
               [(m, a, c, q, b) for m in ("llama-3-8b", "mistral-7b") for a in ("h100-sxm", "h200", "mi300x")
                for c in range(3000, 8001, 500) for q in range(400, 1201, 200) for b in (16, 24, 32, 48)
                if (m, a, c, q, b) not in _PRINTED_DECODE and (m, c, q, b) not in _PRINTED_RATIO]))))


# ex4: design ---------------------------------------------------------------------------------------

def solve_shared_pool(model, accelerator, prefix_tokens, own_tokens, users, block_tokens):
    import math

    from inferlab.serving import blocks_for, kv_capacity_blocks
    from inferlab.core.specs import get_accelerator, get_model
    model = get_model(model)
    accelerator = get_accelerator(accelerator)

    pool = kv_capacity_blocks(model, accelerator, block_tokens=block_tokens)  # 90 % of memory, minus weights
    # Without caching every sequence holds its own copy of the prefix.
    uncached = pool // blocks_for(prefix_tokens + own_tokens, block_tokens)
    # With caching the prefix's whole blocks are held once; a partial last block stays private.
    shared = prefix_tokens // block_tokens
    private = blocks_for(prefix_tokens + own_tokens - shared * block_tokens, block_tokens)
    cached = (pool - shared) // private
    return {"max_seqs_uncached": uncached, "max_seqs_cached": cached, "gpus": math.ceil(users / cached)}


def mistakes_shared_pool(model, accelerator, prefix_tokens, own_tokens, users, block_tokens):
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    pool = kv_capacity_blocks(model, accelerator, block_tokens=block_tokens)
    full = kv_capacity_blocks(model, accelerator, block_tokens=block_tokens, memory_utilization=1.0)
    shared = prefix_tokens // block_tokens
    private = blocks_for(prefix_tokens + own_tokens - shared * block_tokens, block_tokens)
    uncached = pool // blocks_for(prefix_tokens + own_tokens, block_tokens)
    cached = (pool - shared) // private
    out = [
        Mistake(full // blocks_for(prefix_tokens + own_tokens, block_tokens),
                "the pool is what is left of 90 % of the memory (kv_capacity_blocks' default), not all of it",
                "max_seqs_uncached"),
        Mistake(pool // private, "the shared prefix's blocks come out of the pool too (once)", "max_seqs_cached"),
        Mistake(math.ceil(users / uncached), "that many GPUs are needed without prefix caching", "gpus"),
    ]
    if (full - shared) // private != cached:
        out.append(Mistake((full - shared) // private,
                           "the pool is what is left of 90 % of the memory (kv_capacity_blocks' default), not all of it",
                           "max_seqs_cached"))
    if users // cached != math.ceil(users / cached):
        out.append(Mistake(users // cached, "round the GPUs up: a fraction of a GPU does not hold anyone", "gpus"))
    return out


# (model, accelerator, prefix, own tokens) whose sequences per pool are a number the lab prints.
_PRINTED_POOL = {("llama-3-8b", "h200", 4500, 750), ("mistral-7b", "h200", 4000, 1500), ("mistral-7b", "h200", 4500, 1000),
                 ("mistral-7b", "h200", 5000, 500), ("mistral-7b", "h200", 5500, 500), ("mistral-7b", "h200", 6000, 1500),
                 ("mistral-7b", "h200", 6500, 1000), ("mistral-7b", "h200", 7000, 500)}


register(Exercise(
    id="15.2.3-ex4", kind="design", points=3,
    title="How many users fit when they share a system prompt?",
    params=dict(model="llama-3-8b", accelerator="h100-sxm", prefix_tokens=6000, own_tokens=1000, users=1000,
                block_tokens=16),
    parts=(integer("max_seqs_uncached", "the sequences the KV pool holds at once without prefix caching",
                   "sequences"),
           integer("max_seqs_cached", "the sequences it holds with prefix caching", "sequences"),
           integer("gpus", "the GPUs (one replica each, with caching) for {users:,} concurrent users", "GPUs",
                   weight=LOW_WEIGHT)),  # a few small values: weighs little
    statement="""\
A chat service runs `{model}` (bf16) on `{accelerator}` GPUs, one replica per GPU. Every conversation starts with
the same {prefix_tokens:,}-token system prompt and adds at most {own_tokens:,} tokens of its own (user turns and
replies) to the KV cache. The KV cache is paged in blocks of {block_tokens} tokens; the pool per GPU is
`inferlab.serving.kv_capacity_blocks(model, accelerator, block_tokens={block_tokens})` blocks (90 % of the memory
minus the weights). With prefix caching, the system prompt's *whole* blocks are stored once per GPU and shared;
a partly filled last block is each sequence's own.

How many sequences at their longest fit in one GPU's pool without and with prefix caching, and how many GPUs
hold {users:,} concurrent conversations with caching? (`inferlab.serving.blocks_for(tokens, block_tokens)` is
ceil(tokens / block_tokens).)""",
    solve=solve_shared_pool, mistakes=mistakes_shared_pool,
    # Variants: prefixes of 3,000 to 8,000 tokens and 500 to 1,500 of a conversation's own, less the settings
    # whose pool sizes the lab prints (`_PRINTED_POOL`).
    vary=vary((("model", "accelerator", "prefix_tokens", "own_tokens"),
               [(m, a, c, q) for m in ("llama-3-8b", "mistral-7b") for a in ("h100-sxm", "h200", "a100-80gb")
                for c in range(3000, 8001, 500) for q in range(500, 1501, 250) if (m, a, c, q) not in _PRINTED_POOL]),
              ("users", [1000, 3000]))))

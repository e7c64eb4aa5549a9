"""The chapter on one page: every key equation (`inferlab.notebook.equations`) with its worked number for one model
on one accelerator (the book's: Llama-2 13B on one H100 SXM), the ridge point, B*, B_max and the rules
of thumb, each computed here. The book's build writes it as its cheat-sheet page (book/build.py), which
prints on one sheet (book/_static/custom.css):

    cheatsheet.markdown(get_model("llama-2-13b"), get_accelerator("h100-sxm"))

Nothing on the page is typed: change a spec in data/ and the sheet changes with it.
"""
from __future__ import annotations

from dataclasses import dataclass

from inferlab.notebook import equations
from inferlab.core.deployment import Deployment
from inferlab.notebook.figures import BOOK_USD_PER_GPU_HOUR
from inferlab.core.latency import (cost_per_1k_tokens_usd, decode_step_time_s, prefill_time_s, throughput_tokens_per_s)
from inferlab.core.costs import decode_costs
from inferlab.core.memory import kv_cache_bytes, max_batch, weight_bytes
from inferlab.core.usable_memory import SERVING, max_batch_usable
from inferlab.core.parallel import allreduce_bus_bytes_per_s, allreduce_latency_s
from inferlab.core.roofline import ridge_point
from inferlab.core.specs import BF16, Precision, check_accelerator, check_model, check_precision
from inferlab.base.units import GB, bytes_per_element
from inferlab.core.context import yardstick  # @yardstick: sweeps past a model's context on purpose, no warning

PROMPT = 2048             # the chapter's prefill example (15.1.1)
CONTEXT = 1024            # its decode and batching examples (15.2.1, 15.2.2; 15.1.2's 1,000 rounded to 1,024)
USD_PER_GPU_HOUR = BOOK_USD_PER_GPU_HOUR   # the book's price of an H100-hour (15.2.2), for the cost line
TP = 2                    # the tensor-parallel degree of the TP line


@dataclass(frozen=True)
class Line:
    """One line of the sheet: what it is, the equation as stated (TeX) and its worked value (TeX)."""

    section: str
    name: str
    tex: str
    value: str
    note: str = ""


ROW_CHARS = 80      # a stated equation's row longer than this (TeX characters) breaks at its "=" signs


def _top_level_equals(tex: str) -> list[str]:
    """`tex` split at each " = " outside braces."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(tex):
        depth += ch == "{"
        depth -= ch == "}"
        if depth == 0 and tex.startswith(" = ", i):
            parts.append(tex[start:i])
            start = i + 3
    return parts + [tex[start:]]


@yardstick
def rows(tex: str) -> list[str]:
    """A stated equation as rows that fit half a printed page: one part per row (they are joined by
    \\qquad), a long part broken at its top-level '=' signs (the continuation indented)."""
    out = []
    for part in tex.split(r",\qquad "):
        pieces = _top_level_equals(part)
        if len(part) <= ROW_CHARS or len(pieces) < 3:
            out.append(part)
            continue
        out.append(f"{pieces[0]} = {pieces[1]}")
        out += [rf"\quad = {p}" for p in pieces[2:]]
    return out


def _values(eq: equations.Equation, worked: equations.Worked, parts=None) -> str:
    """The worked parts' values, each as `symbol = value` in its display unit (TeX), comma-separated."""
    names = parts or [p.result for p in eq.parts if p.worked]
    return r",\ ".join(f"{eq.symbols[n].tex} = \\mathbf{{{eq.symbols[n].number(worked.values[n])}}}" for n in names)


def _step_bytes(m, p, context: int) -> tuple[float, float]:
    """(bytes a decode step at B = 1 reads besides the KV cache, the KV bytes it reads): the library's own
    count (`costs.decode_costs`), so the step-time equation gives the step the library computes."""
    total = decode_costs(m, 1, context, p).total
    return float(total.weight_bytes + total.activation_bytes), float(total.kv_bytes)


@yardstick
def lines(model, accelerator, precision: Precision = BF16, *, usd_per_gpu_hour: float = USD_PER_GPU_HOUR) -> list[Line]:
    """The sheet's lines for `model` on `accelerator` (objects), every value from the library."""
    m, g, p = check_model(model), check_accelerator(accelerator), check_precision(precision)
    peak, bw = g.peak(p.compute_dtype), g.hbm_bytes_per_s
    b_w, b_a, b_kv = (bytes_per_element(x) for x in (p.weights, p.activations, p.kv))
    d, f = m.d_model, m.d_ff
    M = weight_bytes(m, p)
    C = kv_cache_bytes(m, CONTEXT, 1, p)
    out = []

    def add(section, name, eq, note="", parts=None, **values):
        w = eq.worked(**values)
        out.append(Line(section, name, eq.tex(), _values(eq, w, parts), note))
        return w

    add("Roofline", "Ridge point", equations.ROOFLINE, "below it a kernel waits on memory, above it on arithmetic",
                peak=peak, bw=bw).value
    add("Prefill (15.1.1)", "Matrix-product intensity", equations.MATMUL_INTENSITY,
        f"one MLP matrix, $T$ = {PROMPT:,} prompt tokens", T=PROMPT, d=d, f=f, bw=b_w, ba=b_a)
    add("Prefill (15.1.1)", "Prefill attention intensity", equations.PREFILL_ATTENTION_INTENSITY,
        f"$S$ = {PROMPT:,}", H=m.head_dim, S=PROMPT, b=b_a)
    add("Prefill (15.1.1)", "Prefill FLOPs and TTFT", equations.PREFILL_FLOPS,
            f"$S$ = {PROMPT:,}, $B$ = 1; the whole pass with attention: "
            f"{prefill_time_s(m, Deployment(g, p), PROMPT) * 1e3:.1f} ms", P=m.n_matmul_params, B=1, S=PROMPT, peak=peak)
    add("Decode and the KV cache (15.1.2)", "KV cache per token", equations.KV_CACHE_PER_TOKEN, "",
        L=m.n_layers, Nkv=m.n_kv_heads, H=m.head_dim, bkv=b_kv)
    add("Decode and the KV cache (15.1.2)", "KV cache of one sequence", equations.KV_PER_TOKEN,
        f"$S$ = {CONTEXT:,}", L=m.n_layers, Nkv=m.n_kv_heads, H=m.head_dim, bkv=b_kv, S=CONTEXT)
    add("Decode and the KV cache (15.1.2)", "Decode MLP intensity", equations.DECODE_MLP_INTENSITY,
        "$B$ = 1: a matrix-vector product", B=1, d=d, f=f, bw=b_w, ba=b_a)
    add("Decode and the KV cache (15.1.2)", "Decode attention intensity", equations.DECODE_ATTENTION_INTENSITY,
        "whatever the batch", bkv=b_kv, N=m.n_heads, Nkv=m.n_kv_heads)
    read, read_kv = _step_bytes(m, p, CONTEXT)
    add("Decode and the KV cache (15.1.2)", "Decode step and throughput", equations.STEP_TIME,
        f"$B$ = 1, $S$ = {CONTEXT:,}; $M_\\text{{weights}}$ is what a step reads besides the cache, "
        f"{read / GB:.2f} GB: the weights but the embedding table's unused rows, and the activations",
        B=1, M=read, C=read_kv, bw=bw)
    usable = SERVING.usable_bytes(g)
    b_max = add("Decode and the KV cache (15.1.2)", "Largest batch", equations.MAX_BATCH,
                f"$S$ = {CONTEXT:,}; $M_\\text{{device}}$ is the usable memory, {SERVING.describe(g)}; all "
                f"{g.memory_bytes / GB:.0f} GB, with nothing left for activations or the runtime, would hold "
                f"{max_batch(m, g, CONTEXT, p)} on paper", Mdev=usable, M=M, C=C).value
    read_2k, kv_2k = _step_bytes(m, p, PROMPT)
    add("Latency (15.2.1)", "TTFT and ITL", equations.TTFT_ITL,
        f"ITL at $S$ = {PROMPT:,}, $B$ = 1, $M_\\text{{weights}}$ as in the decode step; TTFT as in the prefill line",
        parts=["itl"], P=m.n_matmul_params, B=1, S=PROMPT, peak=peak, M=read_2k, C=kv_2k, bw=bw)
    itl1 = decode_step_time_s(m, Deployment(g, p), CONTEXT)
    add("Latency (15.2.1)", "Tensor parallelism", equations.TP_TIME,
        f"a decode step on $K$ = {TP} GPUs, each all-reduce {allreduce_latency_s(g) * 1e6:.1f} µs to start",
        t1=itl1, K=TP, L=m.n_layers, msg=d * b_a, link=allreduce_bus_bytes_per_s(g), lat=allreduce_latency_s(g))
    thr = add("Throughput (15.2.2)", "Throughput and the crossover batch", equations.THROUGHPUT,
              f"$S$ = {CONTEXT:,}; throughput at $B^*$ is half the ceiling", M=M, C=C, bw=bw)
    add("Throughput (15.2.2)", "The memory limit against B*", equations.BMAX_OVER_BSTAR,
        f"$B_\\text{{max}}$ = {b_max} against $B^*$ = {thr.values['bstar']:.1f}, $M_\\text{{device}}$ the usable "
        "memory", Mdev=usable, M=M)
    add("Throughput (15.2.2)", "Cost per token", equations.COST_PER_TOKEN,
        f"at \\${usd_per_gpu_hour:g} per GPU-hour, $B$ = 1", usd=usd_per_gpu_hour,
        thr=throughput_tokens_per_s(m, Deployment(g, p), CONTEXT, 1))
    return out


@yardstick
def rules_of_thumb(model, accelerator, precision: Precision = BF16, *,
                   usd_per_gpu_hour: float = USD_PER_GPU_HOUR) -> list[str]:
    """The chapter's rules of thumb, each with its number for `model` on `accelerator`."""
    from inferlab.core.roofline import mlp_ridge_batch
    m, g, p = check_model(model), check_accelerator(accelerator), check_precision(precision)
    on = Deployment(g, p)
    ridge = ridge_point(g, p.compute_dtype)
    t2k, t8k = prefill_time_s(m, on, 2048), prefill_time_s(m, on, 8192, beyond_context=True)
    step1 = decode_step_time_s(m, on, CONTEXT)
    int8 = Precision(p.weights, p.activations, "int8", p.compute)
    w8 = Precision("int8", p.activations, p.kv, p.compute)
    weights_read = float(decode_costs(m, 1, CONTEXT, p).total.weight_bytes)
    b_max = max_batch_usable(m, g, CONTEXT, p, 1, SERVING)
    thr1, thr_max = (throughput_tokens_per_s(m, on, CONTEXT, b) for b in (1, b_max))
    long_note = "" if m.max_context_tokens is None or 8192 <= m.max_context_tokens else (
        f" 8,192 tokens is past {m.name}'s {m.max_context_tokens:,}-token window: a yardstick.")
    out = [
        f"Prefill is compute-bound once about {mlp_ridge_batch(m, g, p, context_len=1):,} tokens are in flight "
        f"(the MLP meets the ridge of {ridge:.0f} FLOP/byte); decode at $B$ = 1 runs at about 1 FLOP/byte.",
        f"TTFT grows about linearly with the prompt: 2,048 → 8,192 tokens is {t8k / t2k:.2f}× "
        f"({t2k * 1e3:.1f} → {t8k * 1e3:.0f} ms), a little more than 4× from attention's $S^2$ term.{long_note}",
        f"ITL at $B$ = 1 is mostly the weight read: {weights_read / GB:.2f} GB at {g.hbm_bytes_per_s / 1e12:.2f} TB/s, "
        f"{weights_read / g.hbm_bytes_per_s * 1e3:.2f} ms, {weights_read / g.hbm_bytes_per_s / step1:.0%} of the step.",
    ]
    w8_on = Deployment(g, w8)
    rule = (f"Weight-only int8 (activations and products still {p.activations}) halves ITL at $B$ = 1 "
            f"({decode_step_time_s(m, w8_on, CONTEXT) * 1e3:.2f} ms) and leaves TTFT alone "
            f"({prefill_time_s(m, w8_on, 2048) * 1e3:.1f} ms at 2,048 tokens)")
    if "int8" in g.peak_flops_per_s:
        w8a8 = Deployment(g, Precision("int8", "int8", p.kv, "int8"))
        rule += (f"; W8A8, whose products run at the int8 peak of {g.peak('int8') / 1e12:,.0f} TOP/s, cuts TTFT "
                 f"to {prefill_time_s(m, w8a8, 2048) * 1e3:.1f} ms")
    out.append(rule + ".")
    out += [
        f"Batching to the memory limit ($B$ = {b_max} in the usable memory) multiplies throughput "
        f"{thr_max / thr1:.0f}× ({thr1:,.0f} → {thr_max:,.0f} tokens/s) and divides the cost of a token as much "
        f"(\\${cost_per_1k_tokens_usd(thr1, usd_per_gpu_hour):.4f} → \\${cost_per_1k_tokens_usd(thr_max, usd_per_gpu_hour):.5f} "
        "per 1k tokens).",
        f"An int8 KV cache doubles the batch that fits ({b_max} → {max_batch_usable(m, g, CONTEXT, int8, 1, SERVING)}); "
        f"weight-only int8 raises it less ({max_batch_usable(m, g, CONTEXT, w8, 1, SERVING)}) and halves $B^*$.",
    ]
    if m.n_kv_heads > 8:
        v = m.gqa_variant(8)
        out.append(f"Grouped-query attention with 8 KV heads instead of {m.n_kv_heads} (the variant whose MLP is "
                   f"widened by the K and V weights it saves, so the weights stay {weight_bytes(v, p) / GB:.1f} GB) "
                   f"divides $C_\\text{{kv}}$ by {m.n_kv_heads / 8:g} and raises the batch that fits to "
                   f"{max_batch_usable(v, g, CONTEXT, p, 1, SERVING)}.")
    tp = Deployment(g, p, tp=TP)
    out.append(f"Tensor parallelism over {TP} GPUs: prefill {t2k / prefill_time_s(m, tp, 2048):.2f}× faster, "
               f"decode {step1 / decode_step_time_s(m, tp, CONTEXT):.2f}× (the all-reduces cost decode more).")
    return out


@yardstick
def markdown(model, accelerator, precision: Precision = BF16, *, usd_per_gpu_hour: float = USD_PER_GPU_HOUR) -> str:
    """The cheat-sheet page (MyST Markdown): a title, the scenario, the equations by section with their
    worked values, the rules of thumb."""
    m, g, p = check_model(model), check_accelerator(accelerator), check_precision(precision)
    parts = ["# Cheat sheet", "",
             f"The chapter on one page, worked for **{m.name}** ({m.n_params / 1e9:.1f} B parameters, "
             f"{m.n_layers} layers, $d$ = {m.d_model:,}, {m.n_heads} query and {m.n_kv_heads} KV heads of "
             f"{m.head_dim}; weights {p.weights}, KV cache {p.kv}) on one **{g.name}** "
             f"({g.peak(p.compute_dtype) / 1e12:,.1f} TFLOP/s {p.compute_dtype}, {g.hbm_bytes_per_s / 1e12:.2f} TB/s, "
             f"{g.memory_bytes / GB:.0f} GB). Every number is computed by `inferlab` from the specs in `data/`; "
             f"GB = 10⁹ bytes. A batch fits when it fits the usable memory, {SERVING.describe(g)}. "
             "Printed, it fits one sheet.", ""]
    section = None
    for line in lines(m, g, p, usd_per_gpu_hour=usd_per_gpu_hour):
        if line.section != section:
            section = line.section
            parts += [f"## {section}", ""]
        note = f" ({line.note})" if line.note else ""
        shown = rows(line.tex) + [r"\Rightarrow\ " + line.value]
        block = "\\begin{aligned}\n" + " \\\\\n".join(f"&{r}" for r in shown) + "\n\\end{aligned}"
        parts += [f"**{line.name}**{note}", "", f"$$\n{block}\n$$", ""]
    parts += ["## Rules of thumb", ""]
    parts += [f"- {r}" for r in rules_of_thumb(m, g, p, usd_per_gpu_hour=usd_per_gpu_hour)]
    return "\n".join(parts) + "\n"



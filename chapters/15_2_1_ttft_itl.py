# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: -all
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.7
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 15.2.1 Time-to-first-token and inter-token latency
#
# **The question.** "What is your latency?" has two answers for a streaming model. The wait
# before the first token (TTFT) is one prefill pass; the gap between later tokens (ITL) is one
# decode step. Which quantities drive each, and which optimisation moves which number?
#
# **What you will take away**
# 1. TTFT $\approx 2PS/\text{peak}$: compute-bound, linear in the prompt length until attention's
#    $S^2$ term shows up at tens of thousands of tokens.
# 2. ITL $\approx (M_\text{weights} + B\,C_\text{kv})/\text{BW}$: bandwidth-bound, flat in the prompt
#    length at small batch, proportional to the weight bytes.
# 3. So the levers differ: quantising weights cuts ITL and leaves TTFT; shortening prompts cuts
#    TTFT and leaves ITL. Set a target for each.
#
# Everything follows the "What if?" cell. Symbols are defined where they first appear and collected
# on the [notation page](../book/notation.md); the book's own numbers (section 15.2.1) are checked
# after the lesson and the exercises, in the closing section "Checking the book's numbers".

# %%
# %matplotlib inline
from IPython.display import Markdown

from inferlab import Precision
from inferlab.notebook import conclusions, equations, plots, reader
from inferlab.core import latency, memory, parallel, roofline
from inferlab.core.deployment import Deployment
from inferlab.base.units import MS, bytes_per_element

reader.install_display();  # every figure shown carries its alt text

# %% [markdown]
# ## What if?

# %%
# What if? ------------------------------------------------------------------------------------
MODEL, GPU, PREC = reader.what_if(
    "llama-2-13b",                     # try "llama-2-70b" with GPU "b200", or "llama-3-8b"
    "h100-sxm",                        # try "h200": same peak, 43% more bandwidth
    Precision(weights="bf16", activations="bf16", kv="bf16"))  # e.g. weights="int8"
PROMPT = 1024                          # prompt length S, tokens
BATCH = 1                              # concurrent sequences
ALLREDUCE_LATENCY_S = parallel.allreduce_latency_s(GPU)  # per all-reduce under TP: GPU's; 0 = the book's idealisation
# ---------------------------------------------------------------------------------------------
BOOK = reader.is_book_setup(MODEL, GPU, PREC) and PROMPT == 1024 and BATCH == 1
FIT = reader.fit_message(MODEL, GPU, PROMPT, PREC)
Markdown(conclusions.scenario_line("15.2.1", MODEL, GPU, PREC, BOOK, FIT, prompt=PROMPT, batch=BATCH))

# %% [markdown]
# ## 1. The life of a request
# A request arrives and may first wait in a **queue** while the server is busy with others. Then
# **prefill** runs the whole prompt through the model in one pass and produces the first output
# token: the time from arrival to that token is the **time-to-first-token (TTFT)**. After it,
# each **decode step** produces one more token per sequence; the gap between two consecutive
# tokens is the **inter-token latency (ITL)**, one step's time. [Figure](#fig-15-2-1-request-timeline)
# draws one request of the scenario with an assumed wait in the queue.

# %%
# figure: fig-15-2-1-request-timeline
# caption: One request on a time axis: a wait in the queue, prefill up to the first token (TTFT), then one decode step per further token (each step one ITL).
# alt: Timeline bar of one request: a grey queue segment, a blue prefill segment ending at the first token, then orange decode steps each ending in a token, with TTFT and ITL marked by arrows.
from inferlab.notebook import diagrams

QUEUE_S = 0.020   # assumed wait behind earlier requests, s (queueing is 15.2.2's subject)
diagrams.request_timeline(MODEL, GPU, PREC, prompt_len=PROMPT, output_tokens=6, queue_s=QUEUE_S, batch=BATCH)

# %% [markdown]
# With an empty queue, TTFT is the prefill time alone; the rest of this page computes it and the
# ITL for the scenario. End-to-end latency is TTFT plus one ITL per further token, so a long
# answer is dominated by ITL and a long prompt by TTFT.
#
# **Check yourself.**
# 1. A request waits 50 ms in the queue. Which of TTFT and ITL does that wait change?
# 2. An answer has $n$ tokens. How many ITLs does its end-to-end latency contain?
#
# <details class="self-check"><summary>Answers</summary>
#
# 1. TTFT only: the wait comes before the first token; the steps after it are unchanged.
# 2. $n - 1$: the first token arrives with TTFT, each of the others one decode step later.
#
# </details>

# %% [markdown]
# ## 2. Two formulas, two resources
# With $P$ the parameters in matrix products, $B$ the sequences served together, $S$ the
# prompt length, peak the accelerator's FLOP/s and BW its memory bandwidth:
#
# <!-- equation: eq-ttft-itl -->
# $$\text{TTFT} \approx \frac{2PBS}{\text{peak}},\qquad \text{ITL} \approx \frac{M_\text{weights} + B\,C_\text{kv}(S)}{\text{BW}}.$$
#
# The first is a prefill at the compute peak ([15.1.1](15_1_1_prefill.ipynb)); the second one decode step,
# reading the weights $M_\text{weights}$ and every sequence's KV cache $C_\text{kv}(S)$ at the bandwidth
# ([15.1.2](15_1_2_decode_kv_cache.ipynb)).

# %% [markdown]
# [Eq. (ttft-itl)](#eq-ttft-itl) in numbers for the scenario, then the library's full operator count:

# %%
# Eq. (ttft-itl) with this scenario's numbers (the library, every operator on its roofline: the last line)
from inferlab.notebook import worked_examples

P = MODEL.n_matmul_params
peak_flops_per_s, hbm_bytes_per_s = GPU.peak(PREC.compute_dtype), GPU.hbm_bytes_per_s
weight_bytes = MODEL.n_params * bytes_per_element(PREC.weights)
kv_bytes_per_seq = memory.kv_cache_bytes(MODEL, PROMPT, 1, PREC)     # Eq. (kv-cache-per-token) of 15.1.2, times S
ttft_s = latency.ttft_s(MODEL, GPU, PROMPT, BATCH, PREC)
itl_s = latency.itl_s(MODEL, GPU, PROMPT, BATCH, PREC)
rule = equations.TTFT_ITL.worked(
    P=P, B=BATCH, S=PROMPT, peak=peak_flops_per_s, M=weight_bytes, C=kv_bytes_per_seq, bw=hbm_bytes_per_s)
ttft_rule, itl_rule = rule.values["ttft"], rule.values["itl"]
print(f"library: TTFT {ttft_s / MS:.2f} ms, ITL {itl_s / MS:.2f} ms")
rule

# %%
worked_examples.takeaway(f"Two formulas, two resources: the first token waits {ttft_rule / MS:.0f} ms on the compute peak "
                f"(the library, with attention and each operator's roofline: {ttft_s / MS:.0f} ms), every later "
                f"token {itl_rule / MS:.1f} ms on the memory bandwidth ({itl_s / MS:.1f} ms). A lever that adds "
                "FLOP/s moves TTFT; one that removes bytes moves ITL.")

# %% [markdown]
# ### TTFT against prompt length
# [Figure](#fig-15-2-1-ttft-vs-prompt): the dashed line is the linear model of
# [Eq. (ttft-itl)](#eq-ttft-itl), the solid one adds causal attention. Prompt lengths beyond the
# model's context window are shaded.

# %%
# figure: fig-15-2-1-ttft-vs-prompt
# caption: TTFT is linear in the prompt length until attention's quadratic term bends it upwards at tens of thousands of tokens.
# alt: Log-log plot of TTFT in milliseconds against prompt length: a dashed linear line and a solid line with attention that rises above it at long prompts; the region beyond the context window is shaded.
reader.draw(plots.ttft_plot, MODEL, GPU, PREC, batch=BATCH,
            book_points=reader.book_points_if(BOOK, "15.2.1", "ttft"))

# %%
ttft_100k = latency.prefill_time_s(MODEL, GPU, 100_000, BATCH, PREC, beyond_context=True)  # a yardstick
ttft_100k_rule = latency.ttft_rule_s(P, 100_000, GPU, PREC.compute_dtype, BATCH)
Markdown(f"At 100k tokens the linear rule gives {ttft_100k_rule:.1f} s and the full model {ttft_100k:.1f} s: "
         f"attention has made the pass {ttft_100k / ttft_100k_rule:.1f}× longer. "
         + reader.context_note(MODEL, 100_000))

# %% [markdown]
# ### ITL against context length and batch
# [Figure](#fig-15-2-1-itl-vs-context): a step reads the weights once and every sequence's cache, so
# ITL grows with context, and with $B$ sequences $B$ times as fast. Dotted: the batch's caches no
# longer fit. How much it grows at $B = 1$ on this page's model is under the figure.

# %%
# figure: fig-15-2-1-itl-vs-context
# caption: ITL against context length at batches 1, 8, 32 and 64: the cache bytes a step reads grow with context times batch, beside the fixed weight bytes.
# alt: Plot of ITL in milliseconds against context length for batches 1, 8, 32 and 64; the batch-one line is nearly flat, larger batches rise earlier; dotted segments mark batches that do not fit in memory.
from inferlab.notebook import figures, interactive

interactive.explore(
    reader.draw_if_fits(FIT, plots.itl_plot, MODEL, GPU, PREC, batches=(1, 8, 32, 64),
                        book_points=reader.book_points_if(BOOK, "15.2.1", "itl")),
    interactive.itl_grid(MODEL, GPU, PREC, active_batch=BATCH, **figures.interactive_menus()))

# %%
from inferlab.base.qualitative_words import size_of_change, thresholds_text

ctx_short, ctx_long = 1024, 32_768     # the table's contexts: 1k and 32k tokens
itl_short, itl_long = (latency.decode_step_time_s(MODEL, GPU, c, 1, PREC, beyond_context=True)
                      for c in (ctx_short, ctx_long))
w_bytes = memory.weight_bytes(MODEL, PREC)
weights_share = w_bytes / (w_bytes + memory.kv_cache_bytes(MODEL, ctx_long, 1, PREC, beyond_context=True))
Markdown(f"At $B$ = 1, from {ctx_short:,} to {ctx_long:,} tokens of context, ITL goes from {itl_short / MS:.2f} "
         f"to {itl_long / MS:.2f} ms, a **{size_of_change(itl_long / itl_short - 1)}** change "
         f"({itl_long / itl_short - 1:+.0%}; {thresholds_text()}): at {ctx_long:,} tokens the weights are "
         f"{weights_share:.0%} of the bytes a step reads. " + reader.context_note(MODEL, ctx_long))

# %% [markdown]
# **Check yourself.**
# 1. The prompt doubles, at batch 1. What happens to TTFT, and to ITL?
# 2. Which of the two latencies does a faster memory (more bandwidth, same peak) shorten?
#
# <details class="self-check"><summary>Answers</summary>
#
# 1. TTFT roughly doubles (more FLOPs); ITL barely moves, since at batch 1 the weights dominate the
#    bytes a step reads and the cache grows only a little.
# 2. ITL: a decode step is memory-bound. TTFT, compute-bound, stays.
#
# </details>

# %% [markdown]
# ## 3. Which lever moves which latency
# Weight-only quantisation stores the weights in int8 or int4 and dequantises them to bf16 on
# the fly, so the arithmetic (and hence TTFT) is unchanged while the bytes a step reads shrink.
# ITL falls less than the weight bytes because the KV cache read stays; by how much is under the figure.

# %%
# figure: fig-15-2-1-weight-dtype
# caption: TTFT and ITL with bf16, int8 and int4 weights: TTFT is unchanged, ITL follows the bytes a step reads.
# alt: Grouped bars of TTFT and ITL in milliseconds for bf16, int8 and int4 weights: the TTFT bars are equal, the ITL bars shrink with the weight format.
reader.draw(plots.weight_dtype_plot, MODEL, GPU, PREC, prompt_len=PROMPT, context_len=PROMPT,
            batch=BATCH, book_points=reader.book_points_if(BOOK, "15.2.1", "weight-dtype"))

# %%
prec_int4 = Precision("int4", PREC.activations, PREC.kv, PREC.compute)
itl_bf16, itl_int4 = (latency.decode_step_time_s(MODEL, GPU, PROMPT, BATCH, p) for p in (PREC, prec_int4))
w_bf16, w_int4 = memory.weight_bytes(MODEL, PREC), memory.weight_bytes(MODEL, prec_int4)
gap = (itl_int4 / itl_bf16) / (w_int4 / w_bf16) - 1   # how far ITL's ratio sits above the weights' ratio
Markdown(f"From {PREC.weights} to int4 weights the weight bytes fall to {w_int4 / w_bf16:.0%} and ITL to "
         f"{itl_int4 / itl_bf16:.0%} of its {PREC.weights} value: ITL's ratio is {gap:+.0%} off the weights' "
         f"(**{size_of_change(gap)}**; {thresholds_text()}), the cache of {BATCH} × {PROMPT:,} tokens "
         "read every step whatever the weight format.")

# %% [markdown]
# ### Tensor parallelism: both latencies shrink
# Splitting every layer over $K$ devices ([Shoeybi et al. 2019](../book/references.md#shoeybi2019))
# divides the FLOPs and the weight bytes per device by $K$, so both TTFT and ITL fall; what they
# pay back is two all-reduces of the activations per layer, each costing its bytes over the
# interconnect (a ring all-reduce sends $2(K-1)/K$ of them from each device) plus a fixed start-up latency (`ALLREDUCE_LATENCY_S` in the "What if?" cell; where
# they come from is under the equation):
#
# <!-- equation: eq-tp-time -->
# $$t(K) \approx \frac{t(1)}{K} + 2L\left(\frac{2(K-1)}{K}\cdot\frac{\text{message bytes}}{\text{link BW}} + t_\text{latency}\right).$$

# %%
Markdown(conclusions.allreduce_source(
    GPU, ALLREDUCE_LATENCY_S, parallel.allreduce_latency_s(GPU), parallel.allreduce_bus_bytes_per_s(GPU)))

# %%
tps = (1, 2, 4, 8)
on_k = [Deployment(GPU, PREC, tp=k, allreduce_latency_s=ALLREDUCE_LATENCY_S) for k in tps]
ttft_k = [latency.prefill_time_s(MODEL, on, PROMPT, BATCH) for on in on_k]
itl_k = [latency.decode_step_time_s(MODEL, on, PROMPT, BATCH) for on in on_k]
print("K:          " + "".join(f"{k:>9}" for k in tps))
print("TTFT ms:    " + "".join(f"{t / MS:9.2f}" for t in ttft_k))
print("ITL ms:     " + "".join(f"{t / MS:9.3f}" for t in itl_k))
print("ITL speedup:" + "".join(f"{itl_k[0] / t:9.2f}" for t in itl_k))

# %%
# Eq. (tp-time) with this scenario's numbers: one decode step (ITL) at the largest K; a message is
# the batch's activations, B * d elements
message_bytes = BATCH * MODEL.d_model * bytes_per_element(PREC.activations)
equations.TP_TIME.worked(t1=itl_k[0], K=tps[-1], L=MODEL.n_layers, msg=message_bytes,
                         link=parallel.allreduce_bus_bytes_per_s(GPU), lat=ALLREDUCE_LATENCY_S, library=itl_k[-1])

# %%
worked_examples.takeaway(f"Tensor parallelism over {tps[-1]} GPUs takes TTFT from {ttft_k[0] / MS:.0f} to "
                f"{ttft_k[-1] / MS:.0f} ms and ITL from {itl_k[0] / MS:.1f} to {itl_k[-1] / MS:.1f} ms: ITL "
                f"{itl_k[0] / itl_k[-1]:.1f} times faster where {tps[-1]} GPUs would ideally give {tps[-1]}; the "
                "all-reduces, which do not shrink with K, take the rest.")

# %%
eff_itl = [itl_k[0] / t / k for k, t in zip(tps, itl_k)]     # ITL's speed-up per GPU, of the ideal K
Markdown(conclusions.tp_speedups(tps, ttft_k, itl_k, ALLREDUCE_LATENCY_S))

# %% [markdown]
# **Check yourself.**
# 1. Why do int8 weights shorten ITL but not TTFT?
# 2. Tensor parallelism over $K$ devices divides both FLOPs and weight bytes per device. What keeps
#    the speed-up below $K$?
#
# <details class="self-check"><summary>Answers</summary>
#
# 1. They halve the bytes each decode step reads; prefill is limited by the arithmetic, which still
#    runs in bf16.
# 2. The all-reduces between the devices after each layer's matrix products: their transfer time
#    and their start-up latency.
#
# </details>

# %% [markdown]
# ## 4. The same on a real GPU
#
# Both formulas of [Eq. (ttft-itl)](#eq-ttft-itl) assume every kernel on its roofline. Real kernels
# reach less of the peak and of the bandwidth ([15.1.1](15_1_1_prefill.ipynb#the-same-on-a-real-gpu)
# and [15.1.2](15_1_2_decode_kv_cache.ipynb#the-same-on-a-real-gpu) measure by how much), and a
# serving engine adds time between its steps: the **step overhead**, the CPU time it spends
# scheduling, sampling and preparing the next step's inputs. Each latency three ways: on the ideal
# roofline, on the kernels Vidur measured ([Agrawal et al. 2024](../book/references.md#agrawal2024vidur)),
# and on those kernels plus a step overhead, here the CPU time Vidur profiled for a vLLM-style
# scheduler on A100 hosts, a fixed part plus a part per sequence (a separate, named term: it depends on
# the engine and the host, not on the GPU).

# %%
# The measured kernels of this scenario (MEASURED is None where none were published) and a step overhead
from inferlab.core import kernels
from inferlab.core import measured_latency
from inferlab.notebook import measured_plots

IDEAL, MEASURED = measured_latency.deployments(GPU, PREC)
PROFILE = measured_latency.profile_for(MODEL)     # the profiled model with MODEL's matrix shapes, or None
NOT_MEASURED = measured_latency.measured_reason(GPU, PREC)
OVERHEAD = kernels.StepOverhead.from_profile()  # CPU time per engine step (Vidur's A100 scheduler profile)
Markdown(conclusions.measured_source(MODEL, GPU, PROFILE, NOT_MEASURED, MEASURED))

# %%
# figure: fig-15-2-1-kernels-latency
# caption: TTFT and ITL on the ideal roofline, on the measured kernels and on the measured kernels plus an engine's step overhead: measured, both latencies are longer, TTFT by more.
# alt: Two stacked horizontal bar charts, TTFT and ITL in milliseconds, each with three bars: ideal roofline, measured kernels, and measured kernels plus step overhead.
reader.draw(measured_plots.latency_measured_plot, MODEL, GPU, PREC, prompt_len=PROMPT, context_len=PROMPT,
            batch=BATCH, step_overhead=OVERHEAD)

# %%
ttft_three = measured_latency.ttft(MODEL, GPU, PREC, PROMPT, BATCH, OVERHEAD)
itl_three = measured_latency.itl(MODEL, GPU, PREC, PROMPT, BATCH, OVERHEAD)
Markdown(conclusions.measured_latencies(ttft_three, itl_three, OVERHEAD.label))

# %%
worked_examples.takeaway(conclusions.measured_latency_takeaway(ttft_three, itl_three, GPU.name))

# %% [markdown]
# ### Tensor parallelism, measured
# The table of section 3 used the measured node's all-reduce with kernels on the roofline. On the
# measured kernels each GPU's share of the pass runs slower, and each all-reduce takes the time
# Vidur measured for its message size and GPU count:

# %%
tp_measured = measured_latency.tensor_parallel(MODEL, GPU, PREC, PROMPT, PROMPT, BATCH, tps)
display(reader.details("TTFT and ITL (ms) against K, ideal and measured; each speed-up is the ITL at K = 1 over "
                       "the ITL at K; all-reduce % is its share of the measured ITL", measured_plots.tensor_parallel_table(tp_measured)))
attn_step = (measured_latency.attention_share(MODEL, MEASURED, context_len=PROMPT, batch=BATCH)
             if MEASURED else None)
Markdown(conclusions.measured_tp(tp_measured) + "\n\n" + conclusions.measured_limits(
    NOT_MEASURED, attn_step, f"of a decode step at context {PROMPT:,}",
    "The step overhead stands for what an engine adds, and was profiled on A100 hosts."))

# %% [markdown]
# **Check yourself.**
# 1. A step overhead of about a millisecond: why does it matter more to ITL than to TTFT?
# 2. On the measured kernels tensor parallelism speeds ITL up less than on the roofline. Why?
#
# <details class="self-check"><summary>Answers</summary>
#
# 1. It is paid once per step, and a decode step is a few milliseconds while a prefill is tens: the
#    same cost is a larger share of the shorter step.
# 2. The all-reduces cost the same either way, while each GPU's kernels are slower than the
#    roofline's and shrink less with $K$ (small products sit on their launch floor), so the
#    communication is a larger share of a step that falls less.
#
# </details>

# %% [markdown]
# ### Beyond 16-bit on the H100: FP8 and the H200
#
# A Hopper GPU is usually run in FP8: weights, activations and the KV cache in one byte each, and the
# matrix products at twice the 16-bit peak. The ideal roofline halves every time for it. Real FP8
# products were timed by DeepSeek (their DeepGEMM kernels on an H800, an H100 in all but NVLink), and
# the H200 is an H100's chip with 4.8 TB/s of memory in place of 3.35: its measured times are the
# H100's curves with every memory time scaled by that ratio (an assumption, not a measurement;
# `docs/kernels.md`). The page's model, each way:

# %%
# The page's model on the H100 and the H200, bf16 and FP8 W8A8, ideal and measured
from inferlab.notebook import precision_rows

Markdown(precision_rows.markdown(MODEL, PROMPT, PROMPT, BATCH))

# %% [markdown]
# ## Try it
# <!-- lab -->Move the controls: the ITL curve and both latencies follow. (Without a live kernel the
# panel shows its default state, the scenario of the "What if?" cell.)<!-- /lab --><!-- web: In
# JupyterLab (`make lab`) this panel has controls (model, accelerator, number formats, prompt and
# batch) that redraw the ITL curve and both latencies; this page shows it as drawn for the "What
# if?" scenario. To explore on this page, use the menus and the slider of the interactive version of
# [Figure](#fig-15-2-1-itl-vs-context). -->

# %%
# figure: fig-15-2-1-panel
# caption: The latency panel as drawn for the What-if scenario: TTFT and ITL for the What-if scenario.
# alt: Time to first token and inter-token latency for the scenario chosen in the What-if cell, with the key numbers beside them.
from inferlab.notebook import panel

panel.latency_panel(MODEL, GPU, PREC, prompt=PROMPT, batch=BATCH)

# %% [markdown]
# ## In the interview
# Section 15.2.1 of the book ends with three interview questions, the third a senior follow-up.
# Each is a drill here: the question in our words, room for your answer, and the answer folded
# under it, worked for this page's scenario (the What-if cell changes its numbers). The answer keeps
# the chapter's points, corrects what the checked numbers contradict (each correction links to its
# entry on the errata page) and ends with a follow-up question.

# %%
from inferlab.notebook import interview

# %% [markdown]
# ### Question 1: TTFT or ITL for a streaming chat
# <a id="interview-15-2-1-1"></a>
# *Section 15.2.1, question 1.* How do time to first token and inter-token latency differ, and which
# one should a streaming chat product care about more?

# %% [markdown]
# <!-- YOUR ANSWER -->
# <!-- lab -->**Your answer:** double-click this cell, write your answer with its numbers, and run the
# cell (Shift+Enter) before you open the one below.<!-- /lab --><!-- web: Say your answer aloud or
# write it down, with its numbers, before you open the one below. In JupyterLab (`make lab`) this box
# is a cell to write it in. -->

# %%
interview.answer("15.2.1", 1, MODEL, GPU, PREC, prompt=PROMPT, context=PROMPT)

# %% [markdown]
# ### Question 2: A 50,000-token prompt on a 70B model
# <a id="interview-15-2-1-2"></a>
# *Section 15.2.1, question 2.* A 70B-parameter model receives a 50,000-token prompt. Walk through
# what happens to its time to first token.

# %% [markdown]
# <!-- YOUR ANSWER -->
# <!-- lab -->**Your answer:** double-click this cell, write your answer with its numbers, and run the
# cell (Shift+Enter) before you open the one below.<!-- /lab --><!-- web: Say your answer aloud or
# write it down, with its numbers, before you open the one below. In JupyterLab (`make lab`) this box
# is a cell to write it in. -->

# %%
interview.answer("15.2.1", 2, MODEL, GPU, PREC, prompt=PROMPT, context=PROMPT)

# %% [markdown]
# ### Question 3: Chunked prefill, the KV cache and the other requests' tail
# <a id="interview-15-2-1-3"></a>
# *Section 15.2.1, question 3 (the senior follow-up).* How does chunked prefill change the way a
# prompt's KV cache is filled, and what does it do to the latency tail of the other requests?

# %% [markdown]
# <!-- YOUR ANSWER -->
# <!-- lab -->**Your answer:** double-click this cell, write your answer with its numbers, and run the
# cell (Shift+Enter) before you open the one below.<!-- /lab --><!-- web: Say your answer aloud or
# write it down, with its numbers, before you open the one below. In JupyterLab (`make lab`) this box
# is a cell to write it in. -->

# %%
interview.answer("15.2.1", 3, MODEL, GPU, PREC, prompt=PROMPT, context=PROMPT)

# %% [markdown]
# ## Takeaways

# %%
int8_itl = latency.itl_s(MODEL, GPU, PROMPT, BATCH, reader.with_precision(PREC, weights="int8"))
int8_ttft = latency.ttft_s(MODEL, GPU, PROMPT, BATCH, reader.with_precision(PREC, weights="int8"))
Markdown(
    f"- TTFT is a compute budget: about $2P$ FLOPs per prompt token, {ttft_s / MS:.1f} ms for {PROMPT:,} tokens of "
    f"{MODEL.name} on one {GPU.name}, linear in $S$ until tens of thousands of tokens.\n"
    f"- ITL is a bandwidth budget: the weight bytes plus the batch's caches, read once per step: {itl_s / MS:.2f} ms.\n"
    f"- Quantising the weights to int8 takes ITL to {int8_itl / itl_s:.0%} of bf16's and leaves TTFT at "
    f"{int8_ttft / ttft_s:.0%}; halving the prompt halves TTFT and leaves ITL alone. Measure and target them separately.\n"
    f"- Tensor parallelism over $K$ devices shortens both; here $K$ = {tps[-1]} is fastest, at "
    f"{eff_itl[-1]:.0%} of the ideal per-GPU speed-up for ITL: a small $K$ is the efficient choice, not the fast one.\n"
    "- Chunked prefill does not add FLOPs (each query-key pair is scored once); it adds bytes, because every "
    "chunk re-reads the weights and the cache written so far.\n\n"
    "Previous: [15.1.2 Memory-bound generation](15_1_2_decode_kv_cache.ipynb) · "
    "Next: [15.2.2 Throughput under batching](15_2_2_batching.ipynb)")
# %% [markdown]
# ## Exercises
#
# 4 exercises (7 points), from recomputing a number to a design question. <!-- lab -->Put your answer
# in the cell under each statement and run the check below it: it says PASS, or FAIL with a hint; it
# never shows the expected value.<!-- /lab --><!-- web: In JupyterLab (`make lab`) each statement has
# a cell for your answer and a check under it that says PASS, or FAIL with a hint, never the expected
# value; on this page each check shows its hints. --> Tolerances are relative unless stated; GB means
# 10⁹ bytes.

# %%
from inferlab.exercises import check

# %% [markdown]
# ### Exercise 15.2.1-ex1: The ITL of llama-2-7b on an h200
# *Recompute · 1 point*
#
# Recompute the chapter's ITL estimate, ITL ≈ (M_weights + B·C_kv) / BW, for `llama-2-7b` on one `h200`,
# bf16, B = 1, at the step where the context holds S = 4096 tokens. Take M_weights from
# `inferlab.core.memory.weight_bytes` and C_kv from `inferlab.core.memory.kv_cache_bytes`.
#
# **Answer** `ex1`: the inter-token latency in ms, a number (tolerance ±2 %).

# %%
# SOLUTION
# parameters of 15.2.1-ex1
model = "llama-2-7b"
accelerator = "h200"
context_len = 4096
batch = 1

from inferlab.core import memory
from inferlab.core.latency import decode_step_rule_s
from inferlab.core.specs import get_accelerator, get_model
model = get_model(model)
accelerator = get_accelerator(accelerator)

# ITL ~ (M_weights + B * C_kv) / BW: every weight and every cached K/V byte is read once per token.
weights, cache = memory.weight_bytes(model), memory.kv_cache_bytes(model, context_len)
step_s = decode_step_rule_s(weights, cache, batch, accelerator)
ex1 = step_s * 1e3
ex1

# %%
check("15.2.1-ex1", ex1);

# %% [markdown]
# ### Exercise 15.2.1-ex2: What does an h200 buy over an h100-sxm?
# *Predict · 1 point*
#
# You serve `llama-2-13b` (bf16, B = 1, prompts of 1024 tokens) on `h100-sxm` GPUs and could move to `h200`.
# **Predict before you compute:** which of TTFT and ITL improves by more than 5%? Then compute both
# speedups with the full per-operator model: `inferlab.core.latency.prefill_time_s` for TTFT and
# `inferlab.core.latency.decode_step_time_s` for the first decode step (context = the prompt), and the ITL on the
# `h200`.
#
# **Answer** `ex2`: a dict with the keys
# - `'improves'`: which latency improves by more than 5%: one of 'ttft', 'itl', 'both', 'neither'
# - `'itl_speedup'`: ITL on the h100-sxm divided by ITL on the h200 (dimensionless), a number (tolerance ±2 %)
# - `'ttft_speedup'`: TTFT on the h100-sxm divided by TTFT on the h200 (dimensionless), a number (tolerance ±2 %)
# - `'itl_ms'`: the ITL on the h200 in ms, a number (tolerance ±2 %)

# %%
# SOLUTION
# parameters of 15.2.1-ex2
model = "llama-2-13b"
old = "h100-sxm"
new = "h200"
prompt_len = 1024
batch = 1
threshold = 0.05

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
ex2 = {"improves": improves, "itl_speedup": itl_speedup, "ttft_speedup": ttft_speedup, "itl_ms": itl_ms}
ex2

# %%
check("15.2.1-ex2", ex2);

# %% [markdown]
# ### Exercise 15.2.1-ex3: Whole books as prompts
# *Inconsistency · 2 points*
#
# A product manager wants whole books as prompts: 131,072 tokens to `llama-3-8b` on one `h100-sxm`
# (Llama 3.1 8B has the same architecture and a 128k-token window). The team's estimate:
# *"TTFT ≈ 2 · P · S / peak = 1.99 s, acceptable."*
#
# 1. Compute the TTFT with `inferlab.core.latency.prefill_time_s` (B = 1, MFU = 1, causal attention counted), and the
#    share of the prefill FLOPs spent in attention's QK^T and PV (`inferlab.core.costs.prefill_costs(...).attention`
#    over `.total`). Count what a prefill computes: every layer for all S tokens, the LM head for the last
#    prompt token only (it yields the first output token); the embedding lookup does no FLOPs.
# 2. Why does the estimate fall short?
#    - **A** The linear rule leaves out attention's QK^T and PV FLOPs, which grow as S².
#    - **B** At this length prefill becomes memory-bound.
#    - **C** The estimate used the sparse bf16 peak.
#    - **D** Writing the KV cache to HBM dominates the time.
#
# **Answer** `ex3`: a dict with the keys
# - `'ttft_s'`: TTFT with attention counted in s, a number (tolerance ±3 %)
# - `'attention_share'`: attention's share of the prefill FLOPs (dimensionless), a number (tolerance ±2 %)
# - `'cause'`: the letter of the cause: one of 'A', 'B', 'C', 'D'

# %%
# SOLUTION
# parameters of 15.2.1-ex3
model = "llama-3-8b"
accelerator = "h100-sxm"
prompt_len = 131072

from inferlab.core.costs import prefill_costs
from inferlab.core.latency import prefill_time_s
from inferlab.core.specs import get_accelerator, get_model
model = get_model(model)
accelerator = get_accelerator(accelerator)

# The full operator count: causal attention's QK^T and PV grow as S^2, the projections as S.
# (The prompt exceeds the model's maximum context: beyond_context=True marks it as a yardstick.)
costs = prefill_costs(model, batch=1, prompt_len=prompt_len, beyond_context=True)
attention_share = costs.attention.flops / costs.total.flops
ex3 = {"ttft_s": prefill_time_s(model, accelerator, prompt_len, beyond_context=True),
        "attention_share": attention_share, "cause": "A"}
ex3

# %%
check("15.2.1-ex3", ex3);

# %% [markdown]
# ### Exercise 15.2.1-ex4: Publish a prompt-length cap
# *Design · 3 points*
#
# Your API promises TTFT ≤ 200 ms for `llama-2-13b` on `h100-sxm` GPUs (bf16, B = 1, MFU = 0.6), so it
# must reject longer prompts. What is the longest prompt (in tokens) that meets the target on one GPU, and on a
# tensor-parallel pair? Use `inferlab.core.latency.prefill_time_s(model, Deployment(accelerator, mfu=0.6, tp=...), S)`, which counts attention's S²
# term and the all-reduces.
#
# **Answer** `ex4`: a dict with the keys
# - `'s_max_tp1'`: the longest prompt that meets the target at tp = 1 (tokens), an integer (tolerance ±1 %)
# - `'s_max_tp2'`: the same with tensor parallelism over 2 GPUs (tokens), an integer (tolerance ±1 %)

# %%
# SOLUTION
# parameters of 15.2.1-ex4
model = "llama-2-13b"
accelerator = "h100-sxm"
ttft_slo_ms = 200
mfu = 0.6
max_len = 32768

import numpy as np

from inferlab.core.deployment import Deployment
from inferlab.core.latency import prefill_time_s
from inferlab.core.specs import get_accelerator, get_model
model = get_model(model)
accelerator = get_accelerator(accelerator)

S = np.arange(1, max_len + 1)  # every prompt length at once, past the model's context (a yardstick)
ttft_ms = {tp: prefill_time_s(model, Deployment(accelerator, mfu=mfu, tp=tp), S, beyond_context=True) * 1e3
           for tp in (1, 2)}
ex4 = {f"s_max_tp{tp}": int(S[t <= ttft_slo_ms].max()) for tp, t in ttft_ms.items()}
ex4

# %%
check("15.2.1-ex4", ex4);

# %% [markdown]
# ## Checking the book's numbers
# The lesson above is built from the library's formulas. This closing section compares each
# number of the book's section 15.2.1 with them: every table shows the book's value, ours, the
# verdict (✓ consistent, ≈ approximation, ✗ erratum, – unchecked) and the tolerance that decided
# it; all verdicts follow [one rule](../ERRATA.md#the-verdict-rule), and errata are explained in
# boxes. Then the same effects are timed live on this machine.

# %%
print(reader.verdict_summary("15.2.1"))

# %% [markdown]
# ### The formulas the extraction lost
# The subsection's governing equations did not survive extraction; reconstructed:

# %%
reader.show_formulas("15.2.1")

# %% [markdown]
# ### The opening paragraphs
# The subsection's opening paragraphs restate the intensities of
# [15.1.1](15_1_1_prefill.ipynb) and [15.1.2](15_1_2_decode_kv_cache.ipynb) and the H100's two
# ceilings:

# %%
reader.claims("15.2.1", topic="opening")

# %% [markdown]
# ### The book on two formulas, two resources

# %%
reader.claims("15.2.1", topic="two-formulas")

# %%
book_model = reader.get_model("llama-2-13b")
Markdown(f"The book's 100k-token prompt (15.2.1-q) is beyond {book_model.name}'s context window of "
         f"{book_model.max_context_tokens:,} tokens: a yardstick for the arithmetic, not a deployable run.")

# %% [markdown]
# ### The practice, interview and takeaway paragraphs
# Quantisation, prompt pruning, the 70B model with a 50k-token prompt, tensor parallelism and
# chunked prefill ([Agrawal et al. 2024](../book/references.md#agrawal2024)):

# %%
reader.claims("15.2.1", topic="practice-and-takeaways")

# %%
llama70 = reader.get_model("llama-2-70b")
Markdown(f"The 50k-token prompt of 15.2.1-ab is beyond {llama70.name}'s context window of "
         f"{llama70.max_context_tokens:,} tokens: the book uses it as a yardstick for the compute, not a run "
         "the model can serve.")

# %% [markdown]
# ### The practice numbers against measured kernels
# The book's numbers above that state what a deployment shows in practice, judged by the same
# [rule](../ERRATA.md#the-verdict-rule) three ways: on the ideal roofline (the table's own value),
# on the kernel times Vidur measured on an H100 (section 4 above), and on those kernels plus the CPU
# time a serving engine's scheduler spends on every step (Vidur's A100 profile).

# %%
# The book's practice numbers on the ideal roofline, on measured kernels, and with a step overhead
from inferlab.claims import measured
Markdown(measured.markdown_table("15.2.1"))

# %% [markdown]
# ### All verdicts
# The [errata](../ERRATA.md) page collects the errata of the whole chapter.

# %%
print(reader.verdict_summary())

# %% [markdown]
# ### Measure it here
# The same effect, timed on the machine running this notebook<!-- web: (on this page: the machine
# that last ran it) -->: a tiny Llama-style model
# (`inferlab.measure.model`, random weights) through `inferlab.measure`'s quick suite, a few seconds on
# one CPU core, faster on a GPU. Times vary from machine to machine and run to run, so nbval
# ignores this cell's output; the `assert` checks only the qualitative result, which should
# hold on any device and under any load: the points are timed in turns and, on a CPU, by the
# CPU time of the one thread that runs them, so other work on the machine neither skews one
# point against another nor inflates them (a run spoilt anyway is measured again, up to three
# times). Dashed lines are the library's prediction from the ceilings (copy bandwidth,
# matmul FLOP/s) measured in the same run; the sentence under the figure says how far the
# measurement strays from it, and why when it is more than 25%.

# %%
# NBVAL_IGNORE_OUTPUT
# figure: fig-15-2-1-live-itl
# caption: ITL measured live on this machine against context length at batch 1, beside the library's prediction from the same run's ceilings.
# alt: Line plot of measured inter-token latency in milliseconds against context length for a small random-weight model, with a dashed predicted line.
from inferlab import measure

run, live_check = reader.measure_it("itl_flat_with_context", max_growth=1.0)
assert live_check, live_check.text  # at B = 1 ITL barely moves while the prompt grows 8-fold
display(measure.plots.itl_plot(run))
Markdown(f"{run.label}: {live_check}. {reader.gap_sentence(run, 'itl')}")

# %% [markdown]
# #### Where the time goes (per operator)
# The same live run, one pass split by operator: measured with `torch.profiler`, beside the
# library's roofline (each operator at the ceilings measured in the run) and the calibrated
# prediction (the roofline divided by each operator's efficiency from the run's operator
# profile, plus the norms, rotary, activation, residual adds and cache writes the library does
# not count, and a fixed per-step overhead, all measured on shapes the run's points do not use).
# The error table covers every TTFT, ITL and batch point of the run.

# %%
# NBVAL_IGNORE_OUTPUT
# figure: fig-15-2-1-live-breakdown
# caption: Where one live prefill's and one decode step's time go, operator by operator: measured beside the roofline and the calibrated prediction.
# alt: Two groups of stacked bars of time per operator class, one for a prefill pass and one for a decode step: measured, roofline and calibrated.
from inferlab.measure import breakdown

display(reader.details("Prediction error of the roofline and the calibrated model; time per operator",
                     breakdown.prediction_error_table(run) + "\n\n"
                     + breakdown.breakdown_table(run, which=[0, 1])))
breakdown.breakdown_plot(run, which=[0, 1])

# %% [markdown]
# #### Tensor parallelism, measured
# A recorded run of `inferlab measure --tp 2`: the decoder split over two processes with
# `torch.distributed` (gloo), the all-reduce's latency and bandwidth fitted from a message-size
# sweep, and TTFT and ITL at K = 1 and 2 beside the library's TP prediction with that fit. On
# a CPU the ranks share the cores and the memory bus: the prediction uses the ceilings each rank
# reached while both ran. The last line says whether TP helps TTFT more than ITL here.

# %%
from inferlab.measure import tp

print(tp.recorded_tp_summary())

# %% [markdown]
# #### Recorded runs
# The runs kept in `data/measurements/`, labelled as recorded, beside this machine's live run.
# They come from files, so their numbers are compared by nbval.

# %%
recorded = measure.recorded_runs()
reader.details(f"{len(recorded)} recorded runs: ceilings, TTFT and ITL measured against predicted, MBU, MFU",
               measure.recorded_summary(recorded))

# %%
# NBVAL_IGNORE_OUTPUT
# figure: fig-15-2-1-recorded-itl
# caption: ITL against context length for the recorded runs and this machine's live run, each beside its own prediction.
# alt: Line plot of measured and predicted inter-token latency against context length, one colour per run.
measure.plots.itl_plot([run] + recorded)

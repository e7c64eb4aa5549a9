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
# # 15.2.2 Throughput trade-offs under batching
#
# **The question.** One sequence at a time leaves a GPU nearly idle and makes every token
# expensive. Batching shares each weight read among $B$ sequences. How much throughput does that
# buy, where do the returns fade, where does memory stop it, and what does each token then cost?
#
# **What you will take away**
# 1. Throughput $B\cdot\text{BW}/(M_\text{weights} + B\,C_\text{kv})$ is concave in $B$: it gains
#    most per added sequence at $B = 1$ and approaches the ceiling $\text{BW}/C_\text{kv}$; at the
#    crossover $B^* = M_\text{weights}/C_\text{kv}$ it has reached exactly half of it.
# 2. The memory limit sits at $B_\text{max}/B^* = M_\text{device}/M_\text{weights} - 1$ (device memory
#    over weights, minus one): a small
#    factor only when the weights fill a large share of the device.
# 3. Cost per token falls with throughput; latency per token rises with the batch. Fewer KV
#    bytes per sequence (GQA, int8) move both $B^*$ and the limit.
#
# Everything follows the "What if?" cell. Symbols are defined where they first appear and collected
# on the [notation page](../book/notation.md); the book's own numbers (section 15.2.2) are checked
# after the lesson and the exercises, in the closing section "Checking the book's numbers".

# %%
# %matplotlib inline
from IPython.display import Markdown

from inferlab import Precision
from inferlab.notebook import conclusions, equations, figures, plots, reader
from inferlab.core import latency, memory, roofline
from inferlab.core.memory_headroom import VLLM_DEFAULT_UTILISATION, headroom_fit
from inferlab.base.units import GB, MS, bytes_per_element

reader.install_display();  # every figure shown carries its alt text

# %% [markdown]
# ## What if?

# %%
# What if? ------------------------------------------------------------------------------------
MODEL, GPU, PREC = reader.what_if(
    "llama-2-13b",                     # try "llama-3-8b" (GQA) or "llama-2-13b-book"
    # or own models: "mixtral-8x7b-v0.1", "deepseek-v2-lite" (MoE, MLA), "gemma-2-9b", a config path
    "h100-sxm",                        # try "h200" or "mi300x" (more memory, more bandwidth)
    Precision(weights="bf16", activations="bf16", kv="bf16"))  # e.g. kv="int8"
CONTEXT = 1024                         # tokens in each sequence's KV cache
USD_PER_GPU_HOUR = figures.BOOK_USD_PER_GPU_HOUR  # the book's price; put your own
# ---------------------------------------------------------------------------------------------
BOOK = reader.is_book_setup(MODEL, GPU, PREC) and CONTEXT == 1024
FIT = reader.fit_message(MODEL, GPU, CONTEXT, PREC)
Markdown(conclusions.scenario_line(
    "15.2.2", MODEL, GPU, PREC, BOOK, FIT, context=CONTEXT, usd_per_gpu_hour=USD_PER_GPU_HOUR))

# %% [markdown]
# ## 1. Step time, throughput and the crossover batch
# From the step time of [15.1.2](15_1_2_decode_kv_cache.ipynb#the-cost-of-a-step)
# ($M_\text{weights}$ the weight bytes, $C_\text{kv}$ one sequence's KV cache, BW the memory bandwidth),
# throughput, the tokens per second of $B$ sequences decoded together, and the **crossover batch** $B^*$,
# where a step reads as many bytes of KV cache as of weights. [Figure](#fig-15-2-2-throughput-vs-batch)
# draws the step time and the throughput against the batch; the formulas follow it.

# %%
# figure: fig-15-2-2-throughput-vs-batch
# caption: Decode throughput rises fastest at batch one and bends steadily towards its ceiling BW/C_kv, reaching half of it at the crossover batch B*, until memory stops the batch.
# alt: Two panels against batch size on linear axes: the step time grows linearly from the weight-read time; the throughput curve rises and flattens under a dashed horizontal ceiling, with vertical lines at B* (where it is half the ceiling) and at the memory limit.
from inferlab.notebook import interactive

interactive.explore(
    reader.draw_if_fits(FIT, plots.throughput_plot, MODEL, GPU, CONTEXT, PREC,
                        book_throughput=reader.book_points_if(BOOK, "15.2.2", "throughput")),
    interactive.throughput_grid(MODEL, GPU, PREC, active_context=CONTEXT, **figures.interactive_menus()))

# %% [markdown]
# <!-- equation: eq-throughput -->
# $$\text{throughput}(B) = \frac{B\cdot\text{BW}}{M_\text{weights} + B\,C_\text{kv}}\;\xrightarrow{B\to\infty}\; \frac{\text{BW}}{C_\text{kv}},\qquad B^* = \frac{M_\text{weights}}{C_\text{kv}},\qquad \text{throughput}(B^*) = \frac{1}{2}\,\frac{\text{BW}}{C_\text{kv}}.$$
#
# <!-- equation: eq-bmax-over-bstar -->
# $$\frac{B_\text{max}}{B^*} = \frac{(M_\text{device} - M_\text{weights})/C_\text{kv}}{M_\text{weights}/C_\text{kv}} = \frac{M_\text{device}}{M_\text{weights}} - 1 \quad\text{(before rounding down)}$$

# %%
# Eq. (throughput) and Eq. (bmax-over-bstar) with this scenario's numbers
from inferlab.notebook import worked_examples

weight_bytes = MODEL.n_params * bytes_per_element(PREC.weights)
kv_bytes_per_seq = memory.kv_cache_bytes(MODEL, CONTEXT, 1, PREC)   # C_kv of one sequence of CONTEXT tokens
throughput_worked = equations.THROUGHPUT.worked(M=weight_bytes, C=kv_bytes_per_seq, bw=GPU.hbm_bytes_per_s)
ratio_worked = equations.BMAX_OVER_BSTAR.worked(Mdev=GPU.memory_bytes, M=weight_bytes)
b_star, ratio = throughput_worked.values["bstar"], ratio_worked.value
ceiling = 2 * throughput_worked.value                               # BW / C_kv: throughput(B*) is half of it
print(f"library: B* = {latency.kv_crossover_batch(MODEL, CONTEXT, PREC):.1f}")
# Eq. (bmax-over-bstar) against the library: B_max is the floor of ratio * B*.
assert FIT or memory.max_batch(MODEL, GPU, CONTEXT, PREC) == int(ratio * b_star + 1e-9)
display(throughput_worked)
ratio_worked

# %%
worked_examples.takeaway(conclusions.or_not_fitting(FIT,
    f"Below B* = {b_star:.0f} sequences a step reads more weights than KV cache, above it more KV cache; throughput "
    f"is half its ceiling of {ceiling:,.0f} tokens/s at B*, and memory holds at most {ratio:.1f} × B* sequences."))

# %% [markdown]
# ### Throughput against batch
# [Figure](#fig-15-2-2-throughput-vs-batch), above: the step time and the throughput, both on
# linear axes so that the shape of [Eq. (throughput)](#eq-throughput) is visible: no kink at
# $B^*$, a curve that bends all the way towards its ceiling.

# %%
b_max = memory.max_batch(MODEL, GPU, CONTEXT, PREC) if not FIT else 0
tput_max = latency.throughput_tokens_per_s(MODEL, GPU, CONTEXT, b_max, PREC) if b_max else 0.0
gain_1_to_2 = (latency.throughput_tokens_per_s(MODEL, GPU, CONTEXT, 2, PREC)
               / latency.throughput_tokens_per_s(MODEL, GPU, CONTEXT, 1, PREC))
shape = latency.throughput_shape(MODEL, GPU, CONTEXT, PREC)   # read off the library's curve, as the figure's titles
at_b_star = plots.at_b_star_words(shape)
Markdown(conclusions.or_not_fitting(FIT,
    f"Throughput never grows faster than the batch: each doubling below $B^*$ multiplies it by less than 2 "
    f"(from $B$ = 1 to 2: {gain_1_to_2:.2f}×), and at $B^*$ = {b_star:.0f} it is {at_b_star} of the ceiling of "
    f"{ceiling:,.0f} tokens/s. Memory stops the batch at $B_\\text{{max}}$ = {b_max}, {ratio:.1f} times $B^*$ "
    f"({GPU.memory_bytes / GB:.0f} GB over {weight_bytes / GB:.1f} GB of weights, minus one), where throughput is "
    f"{tput_max:,.0f} tokens/s, {tput_max / ceiling:.0%} of the ceiling.", prefix="**Does not fit:** "))

# %%
worked_examples.takeaway(conclusions.or_not_fitting(FIT,
    f"Batching pays most below B* = {b_star:.0f}, where the weights dominate every step's reads; memory stops it "
    f"at B = {b_max}, with throughput at {tput_max / ceiling:.0%} of its ceiling of {ceiling:,.0f} tokens/s."))

# %% [markdown]
# ### The latency-throughput trade-off
# [Figure](#fig-15-2-2-latency-throughput): the same sweep as a trade-off curve, each point one
# batch size, with the latency each user sees per token on the x axis and the total tokens per
# second on the y axis. Moving up the curve costs latency; the memory limit ends it.

# %%
# figure: fig-15-2-2-latency-throughput
# caption: Each larger batch buys throughput with per-token latency, until the memory limit ends the curve.
# alt: Plot of total decode throughput in tokens per second against inter-token latency in milliseconds, one point per batch size, rising steeply at first then flattening.
reader.draw_if_fits(FIT, plots.latency_throughput_plot, MODEL, GPU, CONTEXT, PREC,
                    book_points=reader.book_points_if(BOOK, "15.2.2", "latency-throughput"))

# %% [markdown]
# **Check yourself.**
# 1. Why does throughput grow almost linearly with $B$ below $B^*$ and level off above it?
# 2. What fraction of the ceiling $\text{BW}/C_\text{kv}$ does throughput reach at $B = B^*$?
#
# <details class="self-check"><summary>Answers</summary>
#
# 1. Below $B^*$ the shared weight read dominates the step, which barely lengthens as sequences join;
#    above it each sequence's own cache dominates, and the step grows in proportion to $B$.
# 2. Half: at $B^*$ the step reads twice the weight bytes' worth, for $B^*$ tokens.
#
# </details>

# %% [markdown]
# ## 2. What a token costs
# A GPU-hour costs the same whether it emits a hundred tokens per second or thousands, so
#
# <!-- equation: eq-cost-per-token -->
# $$\text{cost per 1k tokens} = \frac{\text{price per GPU-hour}}{3600\ \text{s} \cdot \text{throughput}} \times 1000.$$

# %%
# Eq. (cost-per-token) with this scenario's numbers, at B = 1 (the largest batch that fits: in the takeaway)
tput_1 = latency.throughput_tokens_per_s(MODEL, GPU, CONTEXT, 1, PREC)
cost_worked = equations.COST_PER_TOKEN.worked(
    usd=USD_PER_GPU_HOUR, thr=tput_1, library=latency.cost_per_1k_tokens_usd(tput_1, USD_PER_GPU_HOUR))
cost_1 = cost_worked.value
cost_worked

# %%
cost_top = latency.cost_per_1k_tokens_usd(tput_max, USD_PER_GPU_HOUR) if tput_max else float("nan")
worked_examples.takeaway(conclusions.or_not_fitting(FIT,
    f"At B = 1 a thousand tokens cost US\\${cost_1:.4f}; at the largest batch that fits (B = {b_max}) "
    f"US\\${cost_top:.5f}, {cost_1 / cost_top:.0f} times less: batching is the cost lever."))

# %%
# figure: fig-15-2-2-cost-vs-batch
# caption: The cost of a thousand tokens falls as the batch grows, fastest at small batches, and stops falling where memory ends the batch.
# alt: Plot of dollars per thousand tokens against batch size, falling steeply from batch one and levelling off towards the memory limit.
reader.draw_if_fits(FIT, plots.cost_plot, MODEL, GPU, CONTEXT, USD_PER_GPU_HOUR, PREC,
                    book_points=reader.book_points_if(BOOK, "15.2.2", "cost"))

# %% [markdown]
# **Check yourself.**
# 1. Doubling the batch below $B^*$: what happens to the cost of a thousand tokens?
# 2. Why does the cost stop falling at the largest batch that fits?
#
# <details class="self-check"><summary>Answers</summary>
#
# 1. It nearly halves: the GPU-hour costs the same and produces almost twice the tokens.
# 2. No more sequences fit beside the weights, so the throughput, and with it the cost, cannot improve further.
#
# </details>

# %% [markdown]
# ## 3. Grouped-query attention and an int8 cache
# Fewer KV heads shrink the cache per sequence by $N_\text{kv}/8$ (the book's example: 8 instead of
# Llama-2 13B's 40, five-fold); an int8 cache halves it. Both raise $B^*$ and the memory limit, and
# with them the throughput a single GPU can reach.

# %%
# figure: fig-15-2-2-kv-variants-throughput
# caption: A smaller KV cache per sequence (fewer KV heads, int8) lets the batch and the throughput grow further before memory stops them; the text below says whether the weight matrices reach the compute roof first.
# alt: Plot of decode throughput against batch for multi-head attention, grouped-query attention and an int8 cache, each line ending at its memory limit; the GQA line flattens at large batch.
reader.draw_if_fits(FIT, plots.kv_variants_throughput_plot, MODEL, GPU, CONTEXT, PREC)

# %%
gqa = MODEL.gqa_variant(8) if MODEL.n_kv_heads > 8 else MODEL
gqa_max = memory.max_batch(gqa, GPU, CONTEXT, PREC) if not FIT else 0
mlp_ridge = roofline.mlp_ridge_batch(gqa, GPU, PREC, context_len=CONTEXT)
Markdown(conclusions.or_not_fitting(
    FIT, conclusions.gqa_batch_limit(gqa is MODEL, gqa_max, mlp_ridge), prefix="**Does not fit:** "))

# %% [markdown]
# ### A mixture of experts under batching
# A mixture-of-experts model reads only its active experts at $B = 1$ but, under uniform routing,
# $E\,(1 - (1 - k/E)^B)$ experts per layer at batch $B$: the weights read per step grow with the
# batch until every expert is touched, so its $B^*$ sits higher than the active parameters suggest
# and small batches buy less throughput than for a dense model of the same active size.

# %%
# Mixtral 8x7B: throughput against batch at the scenario's context (uniform routing)
moe = reader.moe_decode_rows("mixtral-8x7b-v0.1", GPU, CONTEXT, PREC, batches=(1, 2, 8, 32, 128, 256))
display(reader.details(f"Mixtral 8x7B decode steps on one {GPU.name}",
                       reader.moe_decode_table("mixtral-8x7b-v0.1", GPU, CONTEXT, PREC, batches=(1, 2, 8, 32, 128, 256))))
Markdown(f"One sequence decodes at {1 / moe[0][3]:,.0f} tokens/s, reading {moe[0][2] / GB:.1f} GB per step; "
         f"{moe[2][0]} sequences touch {moe[2][1]:.1f} of the 8 experts per layer and read {moe[2][2] / GB:.1f} GB, so "
         f"8 times the batch buys only {moe[2][0] / moe[2][3] / (1 / moe[0][3]):.1f} times the throughput; at "
         f"$B$ = {moe[-1][0]} the step reads all {moe[-1][2] / GB:.1f} GB and yields {moe[-1][0] / moe[-1][3]:,.0f} tokens/s.")

# %% [markdown]
# ## 4. Keeping the batch full: static and continuous batching
# The throughput above assumes every one of the $B$ slots of the batch holds a sequence at every
# step. Real answers have different lengths. With **static batching** a batch is formed, runs until
# its longest answer is finished, and only then does the next batch start: a slot whose answer
# ended early idles. With **continuous batching** (iteration-level scheduling,
# [Yu et al. 2022](../book/references.md#yu2022)) the scheduler refills a freed slot at the next
# step. [Figure](#fig-15-2-2-batching-timeline) serves the same eight answers both ways, with the
# scenario's step time.

# %%
# figure: fig-15-2-2-batching-timeline
# caption: The same eight answers in four slots: static batching waits for the longest answer of each batch while finished slots idle; continuous batching refills a slot as soon as it frees.
# alt: Two timelines of four batch slots each, static on top and continuous below, coloured bars for requests R1 to R8 and hatched idle time; the continuous timeline ends earlier.
from inferlab.notebook import diagrams

ANSWER_TOKENS = [5, 2, 8, 3, 6, 2, 4, 7]   # tokens of eight answers, in arrival order (all waiting at t = 0)
batching = diagrams.batching_timeline(MODEL, GPU, ANSWER_TOKENS, slots=4, context_len=CONTEXT, precision=PREC)
batching

# %%
n_static = diagrams.schedule_steps(batching.data["static"])
n_cont = diagrams.schedule_steps(batching.data["continuous"])
worked_examples.takeaway(f"Static batching needs {n_static} steps for these {len(ANSWER_TOKENS)} answers, continuous batching "
                f"{n_cont}: {n_static / n_cont - 1:.0%} more throughput from the same slots, because no slot idles "
                "while an answer is waiting.")

# %% [markdown]
# **Check yourself.**
# 1. When do static and continuous batching take the same number of steps?
# 2. Which requests gain most from continuous batching?
#
# <details class="self-check"><summary>Answers</summary>
#
# 1. When all answers in each static batch have the same length: no slot ever idles.
# 2. Those waiting behind a batch with one long answer: they start as soon as any slot frees.
#
# </details>

# %% [markdown]
# ## 5. The same on a real GPU
#
# [Eq. (throughput)](#eq-throughput) reads the weights and the caches at the datasheet's bandwidth.
# On real kernels ([15.1.2](15_1_2_decode_kv_cache.ipynb#the-same-on-a-real-gpu)) the weights take
# longer to read, while attention, which reads the caches, has no measured kernels and stays on the
# ideal roofline. So the measured step is longer by a fixed amount per step, the part every sequence
# shares: the batch must grow further before the caches dominate the step, and every token costs
# more. [Figure](#fig-15-2-2-kernels-throughput) draws the throughput both ways, on the kernels Vidur
# measured ([Agrawal et al. 2024](../book/references.md#agrawal2024vidur)).

# %%
# The measured kernels of this scenario (MEASURED is None where none were published)
from inferlab.core import measured_latency
from inferlab.notebook import measured_plots

IDEAL, MEASURED = measured_latency.deployments(GPU, PREC)
PROFILE = measured_latency.profile_for(MODEL)     # the profiled model with MODEL's matrix shapes, or None
NOT_MEASURED = measured_latency.measured_reason(GPU, PREC)
Markdown(conclusions.measured_source(MODEL, GPU, PROFILE, NOT_MEASURED, MEASURED))

# %%
# figure: fig-15-2-2-kernels-throughput
# caption: Decode throughput against batch on the ideal roofline and on the measured kernels: the measured curve is lower at every batch, and the profiled rows follow it.
# alt: Plot of throughput in tokens per second against batch size on linear axes: a blue ideal curve above a purple measured one, black circles of the profiled rows on the purple curve, dotted beyond the memory limit, and dashed vertical lines at B* and at the memory limit.
reader.draw_if_fits(FIT, measured_plots.throughput_measured_plot, MODEL, GPU, CONTEXT, PREC)

# %%
batching_measured = measured_latency.batching(MODEL, GPU, PREC, CONTEXT, USD_PER_GPU_HOUR)
Markdown(conclusions.or_not_fitting(FIT, conclusions.measured_batching(batching_measured), prefix="**Does not fit:** "))

# %%
worked_examples.takeaway(conclusions.or_not_fitting(FIT, conclusions.measured_batching_takeaway(batching_measured)))

# %%
Markdown(conclusions.measured_limits(
    NOT_MEASURED, batching_measured.attention_share_measured,
    f"of a decode step at $B$ = {max(batching_measured.max_batch, 1)}",
    "Where attention dominates, the measured throughput is an upper bound."))

# %% [markdown]
# **Check yourself.**
# 1. On the measured kernels the weights take longer to read, the caches do not. Does the batch at
#    which a step spends half its time on the caches move up or down?
# 2. Why does the measured throughput come closest to the ideal at the largest batches?
#
# <details class="self-check"><summary>Answers</summary>
#
# 1. Up: the shared part of the step (the weight read) is longer, so more sequences' caches are needed
#    to match it.
# 2. There the caches dominate the step, and attention, which reads them, is on the ideal roofline in
#    both curves: the closeness is partly the missing attention kernels.
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
# `docs/kernels.md`). The page's model at batch 32, each way:

# %%
# The page's model on the H100 and the H200, bf16 and FP8 W8A8, ideal and measured
from inferlab.notebook import precision_rows

Markdown(precision_rows.markdown(MODEL, CONTEXT, CONTEXT, 32))

# %% [markdown]
# ## Try it
# <!-- lab -->Move the controls: the throughput curve, its ceiling, $B^*$ and $B_\text{max}$ follow.
# (Without a live kernel the panel shows its default state, the scenario of the "What if?"
# cell.)<!-- /lab --><!-- web: In JupyterLab (`make lab`) this panel has controls (model,
# accelerator, number formats, context and batch) that redraw the throughput curve, its ceiling,
# $B^*$ and $B_\text{max}$; this page shows it as drawn for the "What if?" scenario. To explore on
# this page, use the menus and the slider of the interactive version of
# [Figure](#fig-15-2-2-throughput-vs-batch). -->

# %%
# figure: fig-15-2-2-panel
# caption: The batching panel as drawn for the What-if scenario: step time and throughput against batch for the What-if scenario.
# alt: Step time and throughput against batch size for the scenario chosen in the What-if cell, with the key numbers beside them.
from inferlab.notebook import panel

panel.batching_panel(MODEL, GPU, PREC, context=CONTEXT, batch=16)

# %% [markdown]
# ## In the interview
# Section 15.2.2 of the book ends with three interview questions, the third a senior follow-up.
# Each is a drill here: the question in our words, room for your answer, and the answer folded
# under it, worked for this page's scenario (the What-if cell changes its numbers). The answer keeps
# the chapter's points, corrects what the checked numbers contradict (each correction links to its
# entry on the errata page) and ends with a follow-up question.

# %%
from inferlab.notebook import interview

# %% [markdown]
# ### Question 1: The most tokens per second from a busy endpoint
# <a id="interview-15-2-2-1"></a>
# *Section 15.2.2, question 1.* An endpoint serves heavy traffic. How do you get the most tokens per
# second out of its GPUs?

# %% [markdown]
# <!-- YOUR ANSWER -->
# <!-- lab -->**Your answer:** double-click this cell, write your answer with its numbers, and run the
# cell (Shift+Enter) before you open the one below.<!-- /lab --><!-- web: Say your answer aloud or
# write it down, with its numbers, before you open the one below. In JupyterLab (`make lab`) this box
# is a cell to write it in. -->

# %%
interview.answer("15.2.2", 1, MODEL, GPU, PREC, context=CONTEXT, usd_per_gpu_hour=USD_PER_GPU_HOUR)

# %% [markdown]
# ### Question 2: Tail latency at peak hours
# <a id="interview-15-2-2-2"></a>
# *Section 15.2.2, question 2.* Users see long tail latencies at peak hours. How do you find the
# cause, and what do you change?

# %% [markdown]
# <!-- YOUR ANSWER -->
# <!-- lab -->**Your answer:** double-click this cell, write your answer with its numbers, and run the
# cell (Shift+Enter) before you open the one below.<!-- /lab --><!-- web: Say your answer aloud or
# write it down, with its numbers, before you open the one below. In JupyterLab (`make lab`) this box
# is a cell to write it in. -->

# %%
interview.answer("15.2.2", 2, MODEL, GPU, PREC, context=CONTEXT, usd_per_gpu_hour=USD_PER_GPU_HOUR)

# %% [markdown]
# ### Question 3: Llama-2 70B on two H100s: the memory budget
# <a id="interview-15-2-2-3"></a>
# *Section 15.2.2, question 3 (the senior follow-up).* Budget the memory of Llama-2 70B serving 32
# sequences of 2,048 tokens on two H100s with tensor parallelism.

# %% [markdown]
# <!-- YOUR ANSWER -->
# <!-- lab -->**Your answer:** double-click this cell, write your answer with its numbers, and run the
# cell (Shift+Enter) before you open the one below.<!-- /lab --><!-- web: Say your answer aloud or
# write it down, with its numbers, before you open the one below. In JupyterLab (`make lab`) this box
# is a cell to write it in. -->

# %%
interview.answer("15.2.2", 3, MODEL, GPU, PREC, context=CONTEXT, usd_per_gpu_hour=USD_PER_GPU_HOUR)

# %% [markdown]
# ## Takeaways

# %%
cost_max = latency.cost_per_1k_tokens_usd(tput_max, USD_PER_GPU_HOUR) if b_max else float("nan")
Markdown(
    conclusions.or_not_fitting(FIT,
        f"- Throughput is {plots.shape_words(shape)}; "
        f"for {MODEL.name} at {CONTEXT:,} tokens of context it reaches {at_b_star} of its "
        f"ceiling at $B^*$ = {b_star:.0f}, and memory stops the batch at {b_max} ({ratio:.1f} × $B^*$, from "
        "capacity over weights minus one).\n"
        f"- Cost per token is the hourly price over the throughput: batching from 1 to the memory limit makes "
        f"tokens {cost_1 / cost_max:.0f} times cheaper.\n", prefix="- ", suffix="\n")
    + "- Fewer KV bytes per sequence (GQA, int8) raise both $B^*$ and the limit, and so the ceiling on "
    "throughput per GPU.\n"
    "- Replicas multiply throughput without touching latency, and multiply the GPUs with it; batching trades "
    "latency for throughput on the same hardware.\n\n"
    "Previous: [15.2.1 TTFT and ITL](15_2_1_ttft_itl.ipynb) · Back to the [index](00_index.ipynb)")
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
# ### Exercise 15.2.2-ex1: B* and the memory wall for llama-3-8b on an h200
# *Recompute · 1 point*
#
# The chapter computes B* = M_weights / C_kv ≈ 31 for Llama-2 13B on an H100 at S = 1024. Recompute B* and the
# largest batch that fits in memory for `llama-3-8b` (grouped-query attention) on one `h200`, bf16 weights
# and cache, sequences of S = 4096 tokens, nothing else in memory. GB = 10⁹ bytes.
#
# **Answer** `ex1`: a dict with the keys
# - `'b_star'`: the KV-crossover batch B* in sequences, a number (tolerance ±1 %)
# - `'max_batch'`: the largest batch that fits (sequences), an integer (exact)

# %%
# SOLUTION
# parameters of 15.2.2-ex1
model = "llama-3-8b"
accelerator = "h200"
seq_len = 4096

from inferlab.core.latency import kv_crossover_batch
from inferlab.core.memory import max_batch
from inferlab.core.specs import get_accelerator, get_model
model = get_model(model)
accelerator = get_accelerator(accelerator)

# B* = weight bytes / KV bytes of one sequence; max batch = floor((capacity - weights) / KV per sequence)
ex1 = {"b_star": kv_crossover_batch(model, seq_len), "max_batch": max_batch(model, accelerator, seq_len)}
ex1

# %%
check("15.2.2-ex1", ex1);

# %% [markdown]
# ### Exercise 15.2.2-ex2: What does doubling the batch buy?
# *Predict · 1 point*
#
# Same model and GPU as exercise 1 (`llama-3-8b`, `h200`, S = 4096). The server runs at B = 64
# and could double it. **Predict first:** at B = 64, do the weights or the KV caches dominate the bytes read
# per decode step? Then compute the throughput at 2 × 64 and its gain over B = 64 with the chapter's rule
# throughput(B) = B · BW / (M_weights + B·C_kv) (`inferlab.core.latency.decode_step_rule_s`).
#
# **Answer** `ex2`: a dict with the keys
# - `'dominant'`: what dominates the bytes read per step at B = 64: one of 'weights', 'kv'
# - `'gain'`: throughput at B = 2 × 64 divided by throughput at B = 64 (dimensionless), a number (tolerance ±1 %)
# - `'tokens_per_s'`: the throughput at B = 2 × 64 in tokens/s, a number (tolerance ±1 %)

# %%
# SOLUTION
# parameters of 15.2.2-ex2
model = "llama-3-8b"
accelerator = "h200"
seq_len = 4096
batch = 64

import numpy as np

from inferlab.core import memory
from inferlab.core.latency import decode_step_rule_s
from inferlab.core.specs import get_accelerator, get_model
model = get_model(model)
accelerator = get_accelerator(accelerator)

w, kv = memory.weight_bytes(model), memory.kv_cache_bytes(model, seq_len)
dominant = "kv" if batch * kv > w else "weights"
# B tokens per step of (weights + B caches) / bandwidth, at B and at 2B
B = np.array([batch, 2 * batch])
throughput = B / decode_step_rule_s(w, kv, B, accelerator)
ex2 = {"dominant": dominant, "gain": throughput[1] / throughput[0], "tokens_per_s": throughput[1]}
ex2

# %%
check("15.2.2-ex2", ex2);

# %% [markdown]
# ### Exercise 15.2.2-ex3: Check a colleague's memory budget
# *Inconsistency · 2 points*
#
# A colleague budgets `llama-3-70b` at B = 48, S = 4,096 on 4 `h100-sxm` GPUs with tensor
# parallelism: *"KV cache: 2 × 80 × 64 × 128 × 4096 × 2 × 48
# ≈ 515 GB, which tensor parallelism does not shard. Weights: 35.3 GB per GPU.
# It does not fit in 80 GB; the batch must drop to 4."*
#
# 1. Compute the KV cache per GPU at B = 48 (`inferlab.core.memory.kv_cache_bytes(..., tp=4)`) and the largest batch
#    that fits per GPU (`inferlab.core.memory.max_batch(..., tp=4)`; GB = 10⁹ bytes).
# 2. Which of these statements are true?
#    - **A** `llama-3-70b` has grouped-query attention: only its n_kv_heads K/V heads are cached, not all 64.
#    - **B** Tensor parallelism splits the KV heads across the GPUs, so each holds 1/4 of the cache.
#    - **C** bf16 weights take 4 bytes per parameter.
#    - **D** The KV cache does not grow with the batch size.
#    - **E** Under tensor parallelism every GPU holds a full copy of the weights.
#
# **Answer** `ex3`: a dict with the keys
# - `'kv_gb_per_gpu'`: the KV cache per GPU at B = 48 in GB, a number (tolerance ±1 %)
# - `'max_batch'`: the largest batch that fits at tp = 4 (sequences), an integer (exact)
# - `'true'`: the letters of every true statement: a set of letters among 'A', 'B', 'C', 'D', 'E', e.g. {'A', 'C'}

# %%
# SOLUTION
# parameters of 15.2.2-ex3
model = "llama-3-70b"
accelerator = "h100-sxm"
batch = 48
seq_len = 4096
tp = 4

from inferlab.core.memory import kv_cache_bytes, max_batch
from inferlab.core.specs import get_accelerator, get_model
model = get_model(model)
accelerator = get_accelerator(accelerator)

# Tensor parallelism splits the KV heads across the GPUs, like the attention weights;
# only the n_kv_heads heads of grouped-query attention are cached.
kv_per_gpu = kv_cache_bytes(model, seq_len, batch, tp=tp)
ex3 = {"kv_gb_per_gpu": kv_per_gpu / 1e9, "max_batch": max_batch(model, accelerator, seq_len, tp=tp),
        "true": {"A", "B"}}
ex3

# %%
check("15.2.2-ex3", ex3);

# %% [markdown]
# ### Exercise 15.2.2-ex4: Choose TP degree and batch for a latency target at the lowest cost
# *Design · 3 points*
#
# Serve `llama-3-70b` (bf16) on `h100-sxm` GPUs: prompts of 2048 tokens, 512 output tokens each, a
# steady load of 5,000 generated tokens per second. Targets: TTFT ≤ 150 ms (one prompt on an
# idle replica) and ITL ≤ 25 ms at the longest context (prompt + output). A replica is tp GPUs,
# tp ∈ (2, 4, 8); you pay per GPU.
#
# For each tp: check TTFT with `inferlab.core.latency.prefill_time_s(model, Deployment(accelerator, tp=tp), prompt_len)`; the replica's batch is the largest that
# both fits (`inferlab.core.memory.max_batch`) and meets the ITL target (`inferlab.core.latency.decode_step_time_s`, which
# includes the all-reduces); its throughput is batch / ITL. Pick the tp whose replicas carry the load with the fewest
# GPUs (on a tie, the smaller tp).
#
# **Answer** `ex4`: a dict with the keys
# - `'tp'`: the tensor-parallel degree of a replica, an integer (exact)
# - `'batch'`: the batch each replica runs in sequences, a number (tolerance ±2 %)
# - `'n_gpus'`: the GPUs needed for the load (GPUs), an integer (exact)

# %%
# SOLUTION
# parameters of 15.2.2-ex4
model = "llama-3-70b"
accelerator = "h100-sxm"
prompt_len = 2048
output_len = 512
ttft_slo_ms = 150
itl_slo_ms = 25
load_tokens_per_s = 5000
tp_options = (2, 4, 8)

import math

import numpy as np

from inferlab.core.deployment import Deployment
from inferlab.core.latency import decode_step_time_s, prefill_time_s
from inferlab.core.memory import max_batch
from inferlab.core.specs import get_accelerator, get_model
model = get_model(model)
accelerator = get_accelerator(accelerator)

context = prompt_len + output_len  # the longest cache a sequence reaches
# The TP degrees whose TTFT meets the target, and the ITL of every batch that fits at each
on = {tp: Deployment(accelerator, tp=tp) for tp in tp_options}
fast = [tp for tp in tp_options if prefill_time_s(model, on[tp], prompt_len) * 1e3 <= ttft_slo_ms]
B = {tp: np.arange(1, max_batch(model, accelerator, context, tp=tp) + 1) for tp in fast}
itl_ms = {tp: decode_step_time_s(model, on[tp], context, B[tp]) * 1e3 for tp in fast}
# A replica runs the largest batch within the ITL target: batch / ITL tokens per second
batch = {tp: int(B[tp][itl_ms[tp] <= itl_slo_ms].max()) for tp in fast if itl_ms[tp][0] <= itl_slo_ms}
n_gpus = {tp: tp * math.ceil(load_tokens_per_s / (b / (itl_ms[tp][b - 1] / 1e3))) for tp, b in batch.items()}
tp = min(n_gpus, key=n_gpus.get)  # the first of equals is the smaller tp
ex4 = {"tp": tp, "batch": batch[tp], "n_gpus": n_gpus[tp]}
ex4

# %%
check("15.2.2-ex4", ex4);

# %% [markdown]
# ## Checking the book's numbers
# The lesson above is built from the library's formulas. This closing section compares each
# number of the book's section 15.2.2 with them: every table shows the book's value, ours, the
# verdict (✓ consistent, ≈ approximation, ✗ erratum, – unchecked) and the tolerance that decided
# it; all verdicts follow [one rule](../ERRATA.md#the-verdict-rule). Each erratum gets a box with
# the corrected value and what it changes for a reader; the [errata page](../ERRATA.md) derives
# its cause and counts the verdicts of the whole chapter. Then the same effects are timed live on
# this machine.

# %%
print(reader.verdict_summary("15.2.2"))

# %% [markdown]
# ### The formulas the extraction lost
# The subsection's equations, lost in extraction, reconstructed:

# %%
reader.show_formulas("15.2.2")

# %% [markdown]
# ### The book on throughput and the crossover batch
# The subsection's opening: a team at 30% utilization, and the 26 GB of weights that one step
# reads whether it serves one sequence or thirty-two.

# %%
reader.claims("15.2.2", topic="throughput-and-crossover")

# %% [markdown]
# The book's worked example (Llama-2 13B, one H100, $S=1024$): $B^*$, the throughput table whose
# numbers the extraction lost, and the ratios read from it.

# %%
reader.claims("15.2.2", topic="worked-example")

# %% [markdown]
# ### The book on the cost of a token

# %%
reader.claims("15.2.2", topic="cost-per-token")

# %% [markdown]
# ### The book on grouped-query attention and an int8 cache

# %%
reader.claims("15.2.2", topic="gqa-and-int8")

# %% [markdown]
# ### The practice, interview and takeaway paragraphs
# Including the senior question: Llama-2 70B at $B=32$, $S=2048$ on two H100s with tensor
# parallelism ([Pope et al. 2022](../book/references.md#pope2022) discuss the layouts).

# %%
fit70 = headroom_fit(reader.get_model("llama-2-70b"), reader.get_accelerator("h100-sxm"), batch=32, seq_len=2048,
                     precision=PREC, tp=2)
Markdown(conclusions.headroom_paragraph(fit70, "Llama-2 70B", "H100", VLLM_DEFAULT_UTILISATION)
         + "; the erratum boxes below (15.2.2-ah, -ai) give the same two numbers.")

# %%
reader.claims("15.2.2", topic="practice-and-takeaways")

# %%
b_replicas = 8
step_1 = latency.decode_step_time_s(MODEL, GPU, CONTEXT, 1, PREC)
step_b = latency.decode_step_time_s(MODEL, GPU, CONTEXT, b_replicas, PREC)
Markdown(
    f"**Replicas or batching?** {b_replicas} replicas at $B$ = 1 give {b_replicas} × {tput_1:,.0f} = "
    f"{b_replicas * tput_1:,.0f} tokens/s at {step_1 / MS:.1f} ms per token, but on {b_replicas} GPUs; one GPU at "
    f"$B$ = {b_replicas} gives {b_replicas / step_b:,.0f} tokens/s at {step_b / MS:.1f} ms per token "
    f"({step_b / step_1 - 1:.0%} slower) for 1/{b_replicas} of the hardware. Replicas multiply throughput without "
    "touching latency only because they multiply the GPUs (and the cost) in proportion. "
    "**Verdict on \"exhaust replicas before batching\":** backwards for cost; batch up to the latency target "
    "first (below $B^*$ each added sequence is nearly free), then add replicas for more traffic.")

# %% [markdown]
# ### The practice numbers against measured kernels
# The book's numbers above that state what a deployment shows in practice, judged by the same
# [rule](../ERRATA.md#the-verdict-rule) three ways: on the ideal roofline (the table's own value),
# on the kernel times Vidur measured on an H100 (section 5 above), and on those kernels plus the CPU
# time a serving engine's scheduler spends on every step (Vidur's A100 profile).

# %%
# The book's practice numbers on the ideal roofline, on measured kernels, and with a step overhead
from inferlab.claims import measured
Markdown(measured.markdown_table("15.2.2"))

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
# figure: fig-15-2-2-live-throughput
# caption: Decode throughput measured live on this machine against batch size, beside the library's prediction from the same run's ceilings.
# alt: Line plot of measured tokens per second against batch size for a small random-weight model, with a dashed predicted line.
from inferlab import measure

run, live_check = reader.measure_it("throughput_grows_with_batch", min_gain=2.0)
assert live_check, live_check.text  # more sequences per step, more tokens per second
display(measure.plots.throughput_plot(run))
Markdown(f"{run.label}: {live_check}. {reader.gap_sentence(run, 'batch')}")

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
# figure: fig-15-2-2-live-breakdown
# caption: Where a live decode step's time goes at each batch size, operator by operator: measured beside the roofline and the calibrated prediction.
# alt: Stacked bars of time per operator class for decode steps at increasing batch sizes: measured, roofline and calibrated.
from inferlab.measure import breakdown

display(reader.details("Prediction error of the roofline and the calibrated model; time per operator",
                     breakdown.prediction_error_table(run) + "\n\n"
                     + breakdown.breakdown_table(run, which=list(range(1, len(run.data['breakdown']))))))
breakdown.breakdown_plot(run, which=list(range(1, len(run.data['breakdown']))))

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
# figure: fig-15-2-2-recorded-throughput
# caption: Decode throughput against batch size for the recorded runs and this machine's live run, each beside its own prediction.
# alt: Line plot of measured and predicted tokens per second against batch size, one colour per run.
measure.plots.throughput_plot([run] + recorded)

# %% [markdown]
# #### Why a CPU decode step can jump with the batch (recorded)
# The roofline reads the weights once per step whatever the batch, so from $B$ = 1 to 8 a decode
# step should barely change. Each recorded run's operator profile times the model's largest
# linear layer alone at every row count from 1 to 8, which is the batch size of a decode step.
# The figure puts that time beside two lines: the roofline's (flat) and the cost of reading the
# weights once per row. The sentences under it are computed from the profiles.

# %%
# figure: fig-15-2-2-kernel-regimes
# caption: Time of the largest linear layer against its rows (the decode batch), relative to one row, for each recorded run with an operator profile: flat is the roofline, the diagonal is one weight read per row.
# alt: Line plot of relative time against rows 1 to 8: one fp32 run rises along the diagonal up to 3 rows and then drops; bf16 stays near flat.
regime_runs = breakdown.runs_with_regimes(recorded)
display(breakdown.regime_plot(regime_runs))
Markdown("\n\n".join(f"**{r.label}.** {breakdown.regime_sentence(r)}" for r in regime_runs))

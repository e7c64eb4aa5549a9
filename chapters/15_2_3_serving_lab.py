# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: -all
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 15.2.3 Serving lab: schedulers, tails and caches
#
# > **Beyond the chapter.** The chapter reasons about one step at a time: a prefill, a decode step,
# > a batch of a given size. A server sees a stream of requests of different lengths arriving at
# > random times, and its scheduler decides, step by step, which of them share the GPU. This lab
# > runs that stream through `inferlab.serving`, an iteration-level simulator on the library's
# > roofline step time (paged KV cache, preemption, replicas, tensor parallelism), and checks
# > what the chapter's advice becomes under load. Its numbers are simulations, not measurements.
#
# **The question.** Under a stream of requests and the chapter's targets (TTFT under 500 ms, ITL
# under 50 ms), what do the scheduler, the chunk size, the request rate, the way GPUs are combined
# and a cached system prompt each change?
#
# **What you will take away**
# 1. Continuous batching refills a finished sequence's slot at the next step; a static batch keeps
#    it empty until its longest request ends, so its throughput stops growing with the load.
# 2. A long prompt prefilled in one step stalls every running sequence for that step; chunked
#    prefill bounds the stall by the chunk size, at a cost to the long request's own TTFT that
#    section 2 measures.
# 3. Tails stay flat while the GPU keeps up and then rise steeply: the capacity within an SLO is a
#    rate, found by sweeping it.
# 4. Per dollar, what counts is the SLO-meeting rate per GPU: batching first, and the KV memory
#    each GPU adds.
# 5. Caching a shared system prompt removes its prefill from TTFT and stores its KV once, but
#    every decode step still reads it for every sequence.

# %%
# %matplotlib inline
from IPython.display import Markdown

from inferlab import Precision, figures, reader
from inferlab.claims import statements
from inferlab.context import beyond_context
from inferlab.serving import (SLO, ChunkedPrefill, ContinuousBatching, RooflineStepTime, StaticBatching,
                              kv_capacity_blocks, lab, labplots)
from inferlab.memory import kv_cache_bytes_per_token
from inferlab.serving.definitions import metrics_table
from inferlab.units import GB, MS
from inferlab.wording import ranking, size_of_change, thresholds_text

# %% [markdown]
# ## What if?
# The scenario of every experiment below. The lab runs one model that fits on one GPU (the
# deployments in section 4 also split it over two and four).

# %%
# What if? ------------------------------------------------------------------------------------
MODEL, GPU, PREC = reader.what_if(
    figures.BOOK_MODEL,                # the book's Llama-2 13B; try "llama-3-8b" (GQA, 8k context)
    figures.BOOK_GPU,                  # try "h200" or "mi300x"
    Precision(weights="bf16", activations="bf16", kv="bf16"))
TARGETS = SLO(ttft_s=0.5, tpot_s=0.05)  # the chapter's: TTFT < 500 ms, ITL < 50 ms (per request, its mean)
USD_PER_GPU_HOUR = figures.BOOK_USD_PER_GPU_HOUR  # the book's H100 price (15.2.2); put your own
SYSTEM_PROMPT = 10_000                 # tokens of the shared system prompt in section 5
# ---------------------------------------------------------------------------------------------
SCENARIO = lab.Scenario(MODEL, GPU, PREC, slo=TARGETS, tp=None)  # tp=None: one GPU, or the fewest that hold the model
Markdown(f"**Scenario:** {MODEL.name} on {GPU.name}, weights {PREC.weights}, KV cache {PREC.kv}; the library's "
         f"roofline step time (all-reduces at its default latency under tensor parallelism). Requests: prompts "
         f"lognormal with mean {SCENARIO.prompt.mean:.0f} tokens, outputs mean {SCENARIO.output.mean:.0f} tokens "
         f"(coefficient of variation 1, as in chat traces), Poisson arrivals, {SCENARIO.n_requests:,} requests "
         f"per run, seed {SCENARIO.seed}. Targets: TTFT ≤ {TARGETS.ttft_s / MS:.0f} ms and a mean ITL ≤ "
         f"{TARGETS.tpot_s / MS:.0f} ms per request." + SCENARIO.layout_note())

# %% [markdown]
# ### What the lab measures
# Every metric and setting below, defined once with the values in use. A word such as "small" or
# "best" in this notebook is chosen from the numbers by a stated threshold (`inferlab.wording`):
# a relative change is small, moderate or large by the thresholds printed beside it, and one
# deployment is "best" only when its margin beats the uncertainty of the capacities compared.

# %%
STATIC_TIMEOUT_S = 0.5                 # a static batch waits at most this long for its last member
Markdown(metrics_table(TARGETS, static_timeout_s=STATIC_TIMEOUT_S, memory_utilization=0.9, model=MODEL,
                       accelerator=GPU, precision=PREC, context_tokens=1000, tp=SCENARIO.tp))

# %% [markdown]
# ## 1. Static against continuous batching
# A static batch of $B$ requests runs until its longest output is done; a request that finished
# early keeps its slot as padding. With output lengths $N_1, \dots, N_B$ the share of slot-steps
# that produce a token is
#
# <!-- equation: eq-slot-use -->
# $$\text{slot use} = \frac{\sum_i N_i}{B \cdot \max_i N_i}.$$
#
# Continuous batching (Orca, [Yu et al. 2022](../book/references.md#yu2022)) admits a waiting
# request at the next step instead, so its slot use is one whenever requests are waiting.

# %%
w = SCENARIO.workload(8.0)
outputs16 = w.output_tokens[: 16 * (len(w) // 16)].reshape(-1, 16)
slot_use = float((outputs16.sum(axis=1) / (16 * outputs16.max(axis=1))).mean())  # Eq. (slot-use)
Markdown(f"For this scenario's output lengths in consecutive batches of 16, the slot use of "
         f"[Eq. (slot-use)](#eq-slot-use) averages **{slot_use:.0%}**: a static batch spends "
         f"{1 - slot_use:.0%} of its decode slots on padding.")

# %%
# Eq. (slot-use) with this scenario's numbers: the first batch of 16, then the mean over all batches
from inferlab import worked

first = outputs16[0]
worked.equation(r"\text{slot use} = \frac{\sum_i N_i}{B \cdot \max_i N_i} = \frac{<total>}{16 \cdot <longest>}"
                r" = <use>;\qquad \text{mean over the } <n> \text{ batches: } <mean>",
                total=int(first.sum()), longest=int(first.max()), use=float(first.sum() / (16 * first.max())),
                n=len(outputs16), mean=slot_use)

# %%
worked.takeaway(f"A static batch of 16 lasts as long as its longest request: with this scenario's output lengths "
                f"{1 - slot_use:.0%} of its decode slots carry padding, slots that continuous batching gives to "
                f"waiting requests.")

# %%
policies = lab.policy_sweep(SCENARIO, (2, 4, 8, 12, 16), {
    "static, B = 16 (0.5 s timeout)": StaticBatching(16, timeout_s=STATIC_TIMEOUT_S), "continuous": ContinuousBatching()})

# %%
# figure: fig-15-2-3-static-vs-continuous
# caption: Continuous batching's throughput follows the load while static batching's stops growing early, and its latency grows with the queue.
# alt: Two panels against the request rate: output tokens per second for static and continuous batching, the static line flattening early; median end-to-end latency on a log scale, the static line rising by orders of magnitude.
labplots.policy_plot(policies)

# %%
top = len(policies.rates) - 1
thr_static = policies.column("static, B = 16 (0.5 s timeout)", "throughput_output_tokens_per_s")
thr_cont = policies.column("continuous", "throughput_output_tokens_per_s")
e2e_static = policies.column("static, B = 16 (0.5 s timeout)", "e2e_s", "p50")
e2e_cont = policies.column("continuous", "e2e_s", "p50")
s14 = statements.statement_verdicts("15.2.2-s14")["15.2.2-s14"]
Markdown(f"At {policies.rates[top]:g} requests/s continuous batching delivers {thr_cont[top]:,.0f} output "
         f"tokens/s against static batching's {thr_static[top]:,.0f} ({thr_cont[top] / thr_static[top]:.1f}×), "
         f"and the median request finishes in {e2e_cont[top]:.2f} s instead of {e2e_static[top]:,.0f} s. Static "
         f"batching's throughput at {policies.rates[top]:g}/s is {thr_static[top] / thr_static[1]:.2f}× its "
         f"throughput at {policies.rates[1]:g}/s"
         + (f", a **{size_of_change(thr_static[top] / thr_static[1] - 1)}** change ({thresholds_text()})"
            + (": it has saturated, and the surplus queues. " if size_of_change(thr_static[top] / thr_static[1] - 1) == "small"
               else ". "))
         + f"The chapter's statement 15.2.2-s14 (\"{s14.description}\") is **{s14.verdict}** under its own "
         f"experiment too.")

# %% [markdown]
# ## 2. A long prompt arriving into steady decode traffic
# A scheduler that prefills a whole prompt in one step (vLLM's default without chunking) makes
# every running sequence wait for that step: the gap between two of its tokens becomes the
# prefill time of the long prompt plus a decode step. Chunked prefill (Sarathi-Serve,
# [Agrawal et al. 2024](../book/references.md#agrawal2024)) caps each step at $C$ tokens: the
# running sequences' decode tokens first, then up to $C - B$ prompt tokens, so a step never
# costs more than about
#
# <!-- equation: eq-chunked-step -->
# $$t_\text{step}(C) \approx \max\!\left(\frac{2 P C}{\text{peak}},\ \frac{M_\text{weights} + B\,C_\text{kv}}{\text{BW}}\right),
# \qquad \text{steps for the prompt} \approx \left\lceil \frac{S}{C - B} \right\rceil.$$

# %%
LONG = min(16_000, (MODEL.max_context_tokens or 16_000) - 128)  # the longest prompt the model serves with 128 outputs
step_time = RooflineStepTime(MODEL, GPU, PREC, tp=SCENARIO.tp)
alone_s, decode16_s = step_time.prefill_s(LONG), step_time.decode_s(1024, 16)
Markdown(f"A {LONG:,}-token prompt alone takes {alone_s / MS:.0f} ms to prefill, as long as "
         f"{alone_s / decode16_s:.0f} decode steps of 16 sequences at 1,024 tokens of context "
         f"({decode16_s / MS:.1f} ms each): an unchunked prefill puts a gap of that size into every running "
         f"stream.")

# %%
# Eq. (chunked-step) with this scenario's numbers: a budget of C = 512 tokens a step, 16 sequences
# decoding at a context of 1,024 tokens
import math

from inferlab.units import TFLOP, bytes_per_element

C, B_run, ctx = 512, 16, 1024
compute_s = 2 * MODEL.n_matmul_params * C / GPU.peak(PREC.compute_dtype)
memory_s = (MODEL.n_params * bytes_per_element(PREC.weights)
            + B_run * ctx * kv_cache_bytes_per_token(MODEL, PREC)) / GPU.hbm_bytes_per_s
chunk_steps = math.ceil(LONG / (C - B_run))
worked.equation(r"t_\text{step}(C) \approx \max\!\left(\frac{2 \cdot <P> \cdot <C>}{<peak>\ \text{TFLOP/s}},\ "
                r"\frac{<M>\ \text{GB} + <B> \cdot <Ckv>\ \text{GB}}{<bw>\ \text{TB/s}}\right) = \max(<tc>, <tm>)\ \text{ms},"
                r"\qquad \left\lceil \frac{<S>}{<C> - <B>} \right\rceil = <steps>\ \text{steps}",
                P=MODEL.n_matmul_params, C=C, peak=GPU.peak(PREC.compute_dtype) / TFLOP,
                M=MODEL.n_params * bytes_per_element(PREC.weights) / GB, B=B_run,
                Ckv=ctx * kv_cache_bytes_per_token(MODEL, PREC) / GB, bw=GPU.hbm_bytes_per_s / 1e12,
                tc=compute_s / MS, tm=memory_s / MS, S=LONG, steps=chunk_steps)

# %%
worked.takeaway(f"Chunked at C = {C}, the long prompt is spread over {chunk_steps} steps of at most about "
                f"{max(compute_s, memory_s) / MS:.0f} ms each, instead of one {alone_s / MS:.0f} ms step that every "
                "running stream waits through.")

# %%
long_run = lab.long_prompt(SCENARIO, LONG, 8.0, chunks=(256, 512, 1024, 2048))

# %%
# figure: fig-15-2-3-chunked-prefill
# caption: Chunked prefill bounds the stall a long prompt puts into the other requests' token streams by the chunk size; the long request itself waits longer for its first token, the more the smaller the chunk.
# alt: Line plot against the chunk size on a log-2 axis: the largest inter-token gap of the other requests rises with the chunk size and stays below the dashed unchunked level; the long prompt's TTFT falls towards its dashed unchunked level; a dotted line marks the 50 ms ITL target.
labplots.long_prompt_plot(long_run, TARGETS.tpot_s)

# %%
within = [c for c in long_run.chunks if long_run.others_max_itl_s[f"C={c}"] <= TARGETS.tpot_s]
best_c = max(within) if within else min(long_run.chunks)
chunk_verdicts = statements.statement_verdicts("15.2.1-s23", "15.1.1-s13", "15.1.1-s14", "15.2.1-s15")
ttft_cost = long_run.long_ttft_s[f"C={best_c}"] / long_run.long_ttft_s["unchunked"] - 1
ttft_cost_min = long_run.long_ttft_s[f"C={min(long_run.chunks)}"] / long_run.long_ttft_s["unchunked"] - 1
Markdown(
    f"Unchunked, the {LONG:,}-token prompt makes the largest gap in the other requests' streams "
    f"{long_run.others_max_itl_s['unchunked'] / MS:.0f} ms, "
    + (f"over the {TARGETS.tpot_s / MS:.0f} ms target. " if long_run.others_max_itl_s['unchunked'] > TARGETS.tpot_s
       else f"within the {TARGETS.tpot_s / MS:.0f} ms target. ")
    + (f"Chunk sizes up to C = {best_c:,} keep every gap within it ({long_run.others_max_itl_s[f'C={best_c}'] / MS:.0f} ms "
       f"at C = {best_c:,}); " if within else f"No chunk size tried keeps every gap within it; ")
    + f"the long request's TTFT at C = {best_c:,} is {long_run.long_ttft_s[f'C={best_c}'] / MS:.0f} ms against "
    f"{long_run.long_ttft_s['unchunked'] / MS:.0f} ms unchunked ({ttft_cost:+.0%}, a **{size_of_change(ttft_cost)}** "
    f"cost: {thresholds_text()}), and "
    f"{long_run.long_ttft_s[f'C={min(long_run.chunks)}'] / MS:.0f} ms at the smallest chunk, C = {min(long_run.chunks)} "
    f"({ttft_cost_min:+.0%}, **{size_of_change(ttft_cost_min)}**): "
    "smaller chunks read the weights more often for the same prompt. "
    f"The chapter's statements on chunking are decided by their own experiment, not by this run of {LONG:,} "
    "tokens: a 16,000-token prompt on Llama-2 13B, beyond its context, as a yardstick: "
    + "; ".join(f"{k} **{v.verdict}**" for k, v in chunk_verdicts.items()) + " (the table below).")

# %%
reader.details("The chapter's statements on chunked prefill: verdicts and evidence",
               statements.statement_table(*chunk_verdicts))

# %% [markdown]
# ## 3. Tail latency against the request rate
# By Little's law the number of requests in the server is the arrival rate times the time each
# spends there, $\bar B \approx \lambda \cdot \overline{E2E}$. A higher rate means larger batches,
# larger batches mean slower decode steps (each reads more KV cache), and slower steps keep each
# request longer: the loop is stable until the GPU's memory or bandwidth runs out, then queues
# grow and the tails rise steeply.

# %%
tails = lab.policy_sweep(SCENARIO, (4, 8, 12, 16, 20, 24, 28),
                         {"continuous": ContinuousBatching(), "chunked, C = 512": ChunkedPrefill(512)})
at8 = tails.summaries["continuous"][1]
in_server = tails.rates[1] * at8["e2e_s"]["mean"]
Markdown(f"Little's law at {tails.rates[1]:g} requests/s (continuous): {tails.rates[1]:g}/s × the mean end-to-end "
         f"time {at8['e2e_s']['mean']:.2f} s = {in_server:.1f} requests in the server; the time-weighted mean batch "
         f"is {at8['batch']['mean']:.1f} sequences"
         + (f" ({at8['batch']['mean'] / in_server - 1:+.0%}, a {size_of_change(at8['batch']['mean'] / in_server - 1)} "
            "difference: the batch does not count the requests waiting in the queue)."
            if at8["batch"]["mean"] < in_server else "."))

# %%
# figure: fig-15-2-3-tail-vs-qps
# caption: Tail latencies stay flat while the GPU keeps up with the load and rise steeply past it; chunked prefill trades a higher TTFT tail for a flatter ITL tail.
# alt: Two panels against the request rate for continuous batching and chunked prefill: p99 TTFT on a log scale with the 500 ms target, rising sharply at the highest rates; p99 ITL with the 50 ms target, the continuous line rising above the chunked one.
labplots.tail_plot(tails)

# %%
cap_cont, cap_chunk = tails.max_rate_within("continuous"), tails.max_rate_within("chunked, C = 512")
ttft_c, itl_c = tails.column("continuous", "ttft_s", "p99"), tails.column("continuous", "itl_s", "p99")
ttft_k, itl_k = tails.column("chunked, C = 512", "ttft_s", "p99"), tails.column("chunked, C = 512", "itl_s", "p99")
miss = min(tails.rates.index(cap_cont) + 1 if cap_cont else 0, len(tails.rates) - 1)  # the first rate that misses
tail_verdicts = statements.statement_verdicts("15.2.2-s19", "15.2.2-s21")
Markdown(f"With both p99 targets (TTFT ≤ {TARGETS.ttft_s / MS:.0f} ms, ITL ≤ {TARGETS.tpot_s / MS:.0f} ms), "
         f"{SCENARIO.layout} serves up to **{cap_cont:g} requests/s** with continuous batching and "
         f"**{cap_chunk:g} requests/s** with chunked prefill (C = 512) among the rates tried"
         + (" (every rate tried for both: the capacity lies beyond them). "
            if min(cap_cont, cap_chunk) == tails.rates[-1] else ". ")
         + f"At {tails.rates[miss]:g}/s continuous batching's p99 ITL is {itl_c[miss] / MS:.0f} ms and its p99 TTFT "
         f"{ttft_c[miss] / MS:,.0f} ms"
         + (" (its ITL misses first: whole prompts prefilled inside decode steps lengthen them)"
            if itl_c[miss] > TARGETS.tpot_s and ttft_c[miss] <= TARGETS.ttft_s else "")
         + f"; chunked prefill's are {itl_k[miss] / MS:.0f} ms and {ttft_k[miss] / MS:,.0f} ms. Chunking "
         + (f"pays for its flatter ITL tail with TTFT, a {size_of_change(ttft_k[0] / ttft_c[0] - 1)} cost: "
            if ttft_k[miss] > ttft_c[miss] else
            f"changes TTFT by {ttft_k[0] / ttft_c[0] - 1:+.0%} (a {size_of_change(ttft_k[0] / ttft_c[0] - 1)} change): ")
         + f"p99 {ttft_k[0] / MS:.0f} ms against {ttft_c[0] / MS:.0f} ms at {tails.rates[0]:g}/s. At the highest rate, "
         f"{tails.rates[-1]:g}/s, the p99 TTFT has reached {ttft_c[-1] / MS:,.0f} ms (continuous). "
         "The chapter's statements on tails: "
         + "; ".join(f"{k} (\"{v.description}\") **{v.verdict}**" for k, v in tail_verdicts.items()) + ".")

# %% [markdown]
# ## 4. SLO goodput per dollar: replicas, batching, tensor parallelism
# Goodput counts only the requests that meet the SLO. A deployment's *serving capacity*
# $\lambda_\text{SLO}$ is the highest request rate $\lambda$ at which at least 90 % of them do (found by bisection over the rate, with as many
# requests per GPU in each run); what a dollar buys is
#
# <!-- equation: eq-goodput-per-dollar -->
# $$\text{requests per dollar} = \frac{\lambda_\text{SLO} \times 3600\ \text{s}}{\text{GPUs} \times \text{price per GPU-hour}}.$$
#
# **Price.** The book's H100 price of \$4 per GPU-hour (15.2.2), the same for every GPU: the
# cost is proportional to the GPU count, so the ranking is the ranking of capacity per GPU, and
# another price scales every bar alike. Comparing accelerator types would need each one's price.

# %%
DEPLOYMENTS = (
    lab.Deployment("one GPU, batching"),
    lab.Deployment("2 replicas, batching", replicas=2),
    lab.Deployment("TP = 2, batching", tp=2),
    lab.Deployment("TP = 4, batching", tp=4),
    lab.Deployment("2 replicas at B = 1", replicas=2, policy=ContinuousBatching(max_num_seqs=1),
                   requests_per_gpu=200, start_rate_per_gpu=0.25))
CAPACITY_REL_TOL = 0.05                # the bisection stops once each capacity is known to within 5 %
capacity = lab.slo_capacity(SCENARIO, DEPLOYMENTS, attainment=0.9, usd_per_gpu_hour=USD_PER_GPU_HOUR, start_rate=16,
                            rel_tol=CAPACITY_REL_TOL)

# %%
# figure: fig-15-2-3-goodput-per-dollar
# caption: SLO-meeting requests per dollar for each way of using GPUs: batching on every GPU against replicas that serve one request at a time, and the model split over two or four GPUs.
# alt: Horizontal bars of thousand SLO-meeting requests per dollar for five deployments (one GPU, two replicas, TP 2, TP 4, two replicas at batch one), each labelled with its capacity in requests per second; the best bar is green.
labplots.capacity_plot(capacity)

# %%
best = capacity.best()
one_gpu, b1 = 0, len(DEPLOYMENTS) - 1
fitting = {d.label: float(x) for d, x, f in zip(DEPLOYMENTS, capacity.requests_per_usd, capacity.fits) if f}
from inferlab.serving.validate import capacity_uncertainty, recorded  # the simulator against a live server
sim_err = capacity_uncertainty(recorded(step_model="profile"))
rank = ranking(fitting, CAPACITY_REL_TOL) if fitting else None
rank_sim = ranking(fitting, min(0.5, CAPACITY_REL_TOL + sim_err["rel_error"])) if fitting else None
scale_verdicts = statements.statement_verdicts("15.2.2-s10", "15.2.2-s9")
if capacity.all_fit:
    blocks_tp1, blocks_tp2 = kv_capacity_blocks(MODEL, GPU, PREC, 1), kv_capacity_blocks(MODEL, GPU, PREC, 2)
scale_note = ("The chapter's advice to scale with replicas before batching: "
              + "; ".join(f"{k} (\"{v.description}\") **{v.verdict}**" for k, v in scale_verdicts.items()) + ".")
uncertainty_note = "" if rank is None else (
    f"By SLO-meeting requests per dollar, **{rank.sentence()}**"
    + ("" if rank.decided else ": the bisection cannot order them")
    + f". That uncertainty is the bisection's alone, and it compares simulated deployments. The "
    f"simulator's own error was measured against a live server only on one CPU device without TP or "
    f"replicas (the validation below): its {sim_err['runs']} recorded runs put the simulated step time at "
    f"{sim_err['ratio_min']:.2f} to {sim_err['ratio_max']:.2f} of the measured one, a capacity error of up to "
    f"{sim_err['rel_error']:.0%}"
    + (", and its sign changes from run to run, so it is no fixed bias that would cancel between two "
       "deployments" if sim_err["sign_changes"] else ", on the same side in every run")
    + f". Adding it to each capacity: **{rank_sim.sentence()}**. ")
Markdown(lab.capacity_note(capacity, SCENARIO) + " " + uncertainty_note + scale_note) if not capacity.all_fit else Markdown(
    uncertainty_note + f"{DEPLOYMENTS[best].label}: {capacity.requests_per_usd[best]:,.0f} requests per "
    f"dollar ({capacity.per_gpu[best]:.3g} requests/s per GPU), against "
    + (f"{capacity.requests_per_usd[one_gpu]:,.0f} for one GPU batching alone and " if best != one_gpu else "")
    + f"{capacity.requests_per_usd[b1]:,.0f} for replicas at $B$ = 1 "
    f"({capacity.requests_per_usd[best] / capacity.requests_per_usd[b1]:,.0f}× less). "
    f"Two replicas carry {capacity.rate_per_s[1] / capacity.rate_per_s[one_gpu]:.2f}× one GPU's capacity"
    + (" (more than twice: least-loaded routing sends each request to the less busy replica, which smooths "
       f"bursts; the bisection finds each capacity only to within {CAPACITY_REL_TOL:.0%}). " if capacity.rate_per_s[1] > 2 * capacity.rate_per_s[one_gpu] else ". ")
    + f"Tensor parallelism over two GPUs gives {capacity.per_gpu[2] / capacity.per_gpu[1]:.2f}× the capacity per GPU "
    "of two replicas, over four GPUs "
    f"{capacity.per_gpu[3] / capacity.per_gpu[1]:.2f}×. For it: a TP = 2 replica reads its weights from two GPUs at "
    f"once and keeps half of them per GPU, so its KV pool holds {blocks_tp2 * 16:,} tokens against "
    f"2 × {blocks_tp1 * 16:,} = {2 * blocks_tp1 * 16:,} for two single-GPU replicas; against it: every layer's "
    "all-reduces add to each step. " + scale_note)

# %%
# Eq. (goodput-per-dollar) with this scenario's numbers, for the best deployment
worked.equation(r"\text{requests per dollar} = \frac{\lambda_\text{SLO} \times 3600\ \text{s}}{\text{GPUs} \times "
                r"\text{price per GPU-hour}} = \frac{<rate>\ \text{/s} \times 3600\ \text{s}}{<gpus> \times \$<usd>}"
                r" = <per_usd>",
                rate=capacity.rate_per_s[best], gpus=DEPLOYMENTS[best].gpus, usd=USD_PER_GPU_HOUR,
                per_usd=capacity.requests_per_usd[best])

# %%
worked.takeaway(f"Cost follows capacity per GPU: “{DEPLOYMENTS[best].label}” serves "
                + (f"{capacity.requests_per_usd[best] / capacity.requests_per_usd[b1]:,.0f} times as many SLO-meeting "
                   "requests per dollar as replicas that do not batch." if capacity.requests_per_usd[b1] > 0 else
                   f"{capacity.requests_per_usd[best]:,.0f} SLO-meeting requests per dollar; replicas that do not "
                   "batch serve none within the SLO"
                   + ("" if capacity.fits[b1] else f": they {capacity.status(b1)}") + "."))

# %% [markdown]
# ## 5. Prefix caching of a shared system prompt
# When every request starts with the same $c$-token system prompt, its keys and values are the
# same for all of them. With prefix caching (vLLM's automatic prefix caching) the first request
# computes them, the cache keeps their blocks (shared, reference-counted, evicted only when no
# running request uses them and the pool runs short), and a later request prefills only its own
# $q$ tokens, whose queries still attend to all $c + q$ keys:
#
# <!-- equation: eq-cached-prefill -->
# $$\text{FLOPs}_\text{cached} \approx 2Pq + 4 L\, d\left(qc + \tfrac{q^2}{2}\right)
# \quad\text{instead of}\quad 2P(c+q) + 4 L\, d\, \tfrac{(c+q)^2}{2}.$$
#
# Prefill is not the only cost of a long shared prompt: each decode step still reads its $c$
# cached tokens once *per sequence* (the attention kernels modelled here read each sequence's
# blocks, shared or not), so the memory saved is not bandwidth saved.

# %%
own = int(SCENARIO.prompt.mean)
with beyond_context():
    cached_s = step_time(own, 1, own * SYSTEM_PROMPT + own * (own + 1) / 2, SYSTEM_PROMPT + own)  # Eq. (cached-prefill)
    uncached_s = step_time.prefill_s(SYSTEM_PROMPT + own)
    decode_long_s, decode_short_s = step_time.decode_s(SYSTEM_PROMPT + own, 16), step_time.decode_s(own, 16)
per_seq_gb = (SYSTEM_PROMPT + own) * kv_cache_bytes_per_token(MODEL, PREC) / GB
Markdown(reader.context_note(MODEL, SYSTEM_PROMPT + own) + " "
         f"With a {SYSTEM_PROMPT:,}-token system prompt and {own} tokens of its own, a request's prefill takes "
         f"{uncached_s / MS:.0f} ms uncached and {cached_s / MS:.1f} ms cached ({uncached_s / cached_s:.0f}× less). "
         f"Its KV cache is {per_seq_gb:.1f} GB, of which the cache shares "
         f"{SYSTEM_PROMPT / (SYSTEM_PROMPT + own):.0%}; but a decode step of 16 such sequences takes "
         f"{decode_long_s / MS:.1f} ms against {decode_short_s / MS:.1f} ms without the system prompt.")

# %%
# Eq. (cached-prefill) with this scenario's numbers (q = a request's own tokens, c = the shared prompt)
q, c, L_, d_ = own, SYSTEM_PROMPT, MODEL.n_layers, MODEL.d_model
flops_cached = 2 * MODEL.n_matmul_params * q + 4 * L_ * d_ * (q * c + q**2 / 2)
flops_uncached = 2 * MODEL.n_matmul_params * (c + q) + 4 * L_ * d_ * (c + q) ** 2 / 2
worked.equation(r"\text{FLOPs}_\text{cached} \approx 2 \cdot <P> \cdot <q> + 4 \cdot <L> \cdot <d> \left(<q> \cdot <c>"
                r" + \tfrac{<q>^2}{2}\right) = <fc>\ \text{instead of}\ <fu>\ \ (<ratio>\times\ \text{fewer})",
                P=MODEL.n_matmul_params, q=q, L=L_, d=d_, c=c, fc=flops_cached, fu=flops_uncached,
                ratio=flops_uncached / flops_cached)

# %%
worked.takeaway(f"Caching the {SYSTEM_PROMPT:,}-token prefix makes a request's prefill "
                f"{flops_uncached / flops_cached:.0f} times cheaper in FLOPs, but not its decode: 16 such sequences "
                f"still take {decode_long_s / MS:.1f} ms a step against {decode_short_s / MS:.1f} ms without the "
                "prefix, since each reads its cached tokens.")

# %%
prefix = lab.prefix_sweep(SCENARIO, SYSTEM_PROMPT, (0.5, 1, 2, 3, 4, 6))

# %%
# figure: fig-15-2-3-prefix-caching
# caption: Caching a shared system prompt cuts the median TTFT at low load and raises the rate served within the SLO, until decode steps that read the long context for every sequence set the limit.
# alt: Two panels against the request rate, with and without prefix caching: median TTFT on a log scale with the 500 ms target, the uncached line starting near it and exploding at low rates, the cached line starting far below; the share of requests within the SLO, the cached line staying at 100 percent to a higher rate.
labplots.prefix_plot(prefix, TARGETS.ttft_s)

# %%
prefix_verdicts = statements.statement_verdicts("15.1.1-s21", "15.1.1-s29")
after = min(prefix.rates.index(prefix.max_rate("on")) + 1 if prefix.max_rate("on") else 0, len(prefix.rates) - 1)
Markdown(
    f"At {prefix.rates[0]:g} requests/s the median TTFT is {prefix.p50_ttft_s['off'][0] / MS:.0f} ms without the "
    f"cache and {prefix.p50_ttft_s['on'][0] / MS:.0f} ms with it; {prefix.cached_tokens_mean['on'][0]:,.0f} of the "
    f"{prefix.prompt_tokens_mean:,.0f} prompt tokens of a request come from the cache on average. At least 90 % of "
    f"the requests meet the SLO up to **{prefix.max_rate('off'):g} requests/s** without caching and "
    f"**{prefix.max_rate('on'):g} requests/s** with it, among the rates tried. "
    + (f"At {prefix.rates[after]:g}/s, the highest rate tried, " if prefix.max_rate("on") == prefix.rates[-1]
       else f"At the next rate, {prefix.rates[after]:g}/s, ")
    + f"the cached run's median TPOT is {prefix.p50_tpot_s['on'][after] / MS:.0f} ms against "
    f"the {TARGETS.tpot_s / MS:.0f} ms target"
    + (": the prefill is gone, but the cache now holds many more sequences, and every decode step reads the "
       f"{SYSTEM_PROMPT:,} cached tokens once for each of them, so the ITL target, not the TTFT, ends the batch "
       "(attention kernels that read a shared prefix once for all the sequences that share it would lift this "
       "limit; the library's roofline does not model them). " if prefix.p50_tpot_s['on'][after] > TARGETS.tpot_s else ". ")
    + 
    "The chapter's statements on prompt caching (decided analytically, one request alone): "
    + "; ".join(f"{k} (\"{v.description}\") **{v.verdict}**" for k, v in prefix_verdicts.items())
    + ": the prefill left is the request's own tokens attending to the cached ones, small only when they are few.")

# %%
reader.details("The chapter's statements on tails, scaling and prompt caching: verdicts and evidence",
               statements.statement_table(*tail_verdicts, *scale_verdicts, *prefix_verdicts))

# %% [markdown]
# ## 6. Measured on this machine: the simulator against a real server
# Everything above is simulated. Is the simulator right? `inferlab serve --live` runs the same
# scheduler for real: the torch decoder of `inferlab.model` (random weights) serves requests that
# arrive on the wall clock, feeds each step's tokens through the linear layers as one matrix,
# runs attention per sequence against its own slot of the KV cache, and reads every token's time
# off the clock. `inferlab serving validate` first times each operator of the model alone on the
# device (the operator profile of `inferlab measure`), composes those times into a step time
# (`serving.profiled.ProfileStepTime`: it never times a whole step), then serves one workload at
# rates from light to beyond the capacity the profile predicts, live and simulated, and compares
# the percentiles users see. The simulator must
# come within a bound at the median (`validate.P50_BOUND`) and a looser one at p99
# (`validate.P99_BOUND`); the verdict under the table states both.
#
# The recorded run below comes from a file in `data/measurements/serving/`, so nbval compares its
# numbers.

# %%
from inferlab.serving import validate

validation = validate.recorded(step_model="profile")[-1]
print(validate.table(validation))
Markdown(validate.conclusion(validation))

# %%
# figure: fig-15-2-3-live-vs-simulated
# caption: TTFT and ITL distributions of the recorded live server (solid) and of its simulation on the measured operator profile (dashed), at each recorded request rate.
# alt: Two panels of percentile curves against latency on a log axis; each rate's live and simulated curves lie close together.
validate.quantile_plot(validation)

# %% [markdown]
# That is one run. The same command, run again on the same machine, gives another: every recorded
# run is listed below, with the pass residual its profile measured, its worst error at each
# percentile and the range of the per-step prediction ratio. A validation that passes once and
# fails the next time says as much about the machine as about the simulator.

# %%
print(validate.runs_table(validate.recorded(step_model="profile")))
Markdown(validate.repeatability(validate.recorded(step_model="profile")))

# %% [markdown]
# The same comparison, live on the machine running this notebook, at a size that takes seconds: the
# 3.9 M-parameter test model. Its steps last about a millisecond, so Python's share of a step is large
# and run-to-run noise is too: nbval ignores this cell's numbers, and the `assert` checks only what
# must hold anywhere: the live server finished every request with as many tokens as the simulator
# gave it.

# %%
# NBVAL_IGNORE_OUTPUT
from inferlab.measure.plan import TINY_MODEL
from inferlab.serving.workload import LengthDist

here = validate.validate(model=TINY_MODEL, dtype="fp32", rates=[40.0, 400.0], duration_s=1.0, max_num_seqs=4,
                         max_len=96, prompt=LengthDist("lognormal", 32, 0.5, 8, 64),
                         output=LengthDist("lognormal", 8, 0.5, 2, 16), log=None)
assert validate.all_served(here)  # the live server finished every request, as the simulation did
print(validate.table(here))

# %% [markdown]
# ## 7. Against an engine no one here wrote: transformers' continuous batching
# The live loop above and the simulator were written side by side: they share the scheduler's rules
# and the simulator steps on a profile of the same decoder, so their agreement shows that the
# simulator reproduces our loop, not that it predicts a real server. The test that earns trust is
# an engine built elsewhere. `inferlab serving validate --engine transformers` serves the same
# workloads with Hugging Face transformers' continuous batching (`ContinuousBatchingManager`,
# version pinned in `pyproject.toml`): a `LlamaForCausalLM` of the same dimensions and dtype as
# the measured model, random weights, 'sdpa' attention over a paged KV cache, token times from
# the engine's own per-token timestamps.
#
# Two things of that engine go into the simulator. Its scheduler, read from its source, becomes a
# policy (`policies.TransformersFIFO`): decoding requests first, then a partly prefilled prompt,
# then waiting ones in arrival order, each given what is left of a per-step token budget, so long
# prompts are split across steps. Its step time cannot be composed from our operators: on a CPU
# its attention runs once per layer over all of a step's queries and keys under a block mask, and
# its scheduling and cache indexing run in Python every step. So the engine is first timed on a
# calibration workload of its own (lone prompts, each served alone, then a burst), and a step-time model with a cost
# per step, per token (with the turn from weight-bound to compute-bound), per request, per cached
# key read and per query-key pair of that whole-step attention is fitted to those steps
# (`serving.fitted`). The workloads being predicted are never timed for it.
#
# This machine's speed moves by tens of percent over minutes, so one calibration at the start
# would put the host of that moment into every later rate's prediction. The engine is therefore
# calibrated beside each rate (`serving.bracketing`): once before the first rate and once after
# each, and a rate is predicted from the mean of the two fits just before and just after it. The
# first calibration alone sets the capacity, hence the rates. Each calibration's speed (its steps'
# median time over what the first calibration's fit predicts) shows how far the host moved during
# the run. Every rate serves the same number of requests; a p99 over a few dozen requests sits
# between the two slowest of them, so one request decides it, while the ITL percentiles pool every
# token.
#
# Calibrations a minute apart still miss the host's moves within a rate, so transformers' engine also
# carries a probe inside its own loop (`serving.hostspeed`): at every step, in the engine's thread and
# inside the step's timed window, one row goes through a copy of the model's MLP weight, the kernel a
# decode step is made of. The calibrations' probes give the speed at which their fits hold (each
# calibration step's time is first divided by the host's speed on the probe at that moment, so the fit
# describes the host at the calibration's median probe even if it moved meanwhile); the live
# run's probes, as a running median over a few seconds, give the host's speed at every moment of it.
# The simulator then steps on the fitted step time scaled by that speed at its own clock (the probe
# sits inside the step in both the calibrations and the live run, so the fit already includes its
# cost). Each record keeps three predictions: the probe-tracked one, which the bounds are judged on;
# a 'split' one that scales only the decode part of each step by the probe and the part its prompt
# chunks add by the square root of it (compute-bound work follows a memory probe less); and the
# bracketed one without the probe.
#
# How much can a single percentile be trusted? Each run also re-simulates its own workload with every
# step 5 % shorter and 5 % longer. Most percentiles move by about 5 %, as the steps do. A few move
# far more: a request that arrives just after a long step began waits for all of it, and a 5 % change
# of step time decides whether it catches that step or the next. Such a percentile is *knife-edged*
# (flagged so in the rate-by-rate table below): its error says where a step boundary fell, not how long
# steps take. That is why
# transformers runs here with 64 tokens per step rather than 256: whole-prompt steps of one to two
# seconds made the TTFT p99 of 20 requests swing by a whole step, while chunks of 64 keep every step
# short enough that no boundary is worth more than a few percent of a TTFT.
#
# Both engines are validated at the same fractions of the capacity their own model predicts; the
# overloaded rate is reported but not held to the bounds, since a queue beyond capacity grows
# without limit and magnifies any step error. Each error is shown as its range over the recorded
# repeats, with the live runs' own run-to-run spread in brackets (max - min over median of the
# live percentile): an error inside that spread is as close as this machine can tell. The
# requests column is the sample behind each TTFT percentile. Our loop can appear twice: on its
# operator profile, and on a step time fitted to calibrations of itself exactly as transformers'
# is (`--step-model fitted`), which puts the two engines on the same footing.

# %%
engines = validate.engines_summary(validate.recorded(engine=None))
print(validate.engines_table(engines))
Markdown(validate.engines_conclusion(engines))

# %% [markdown]
# The latest recorded run against transformers, rate by rate:

# %%
hf_runs = validate.recorded(engine="transformers")
hf_latest = hf_runs[-1]
print(validate.table(hf_latest))
Markdown(validate.conclusion(hf_latest))

# %% [markdown]
# Every recorded repeat that carried the probe, rate by rate: the four errors (TTFT p50 / p99, ITL
# p50 / p99; a star marks one outside its bound) with the probe and without it, the probe's share
# of the live steps' time, and how far the host's speed moved during that rate on the probe's scale.

# %%
print(validate.probe_table(hf_runs))

# %% [markdown]
# Where the two engines differ, and why it matters to the simulator: our loop runs attention per
# sequence, so its attention cost grows with each request's own context, while transformers' CPU
# path attends over the whole step at once, so a long prefill beside a few decodes costs more
# there than the sum of its parts. Our loop (prefill-first here) stalls the decodes while a
# prompt is prefilled; transformers' FIFO carries every decode token in each step and fills the
# rest of the budget with prompt chunks, so its ITL tail is set by the budget, not by the longest
# prompt. And its per-step Python work is a larger share of a step than ours. The per-step ratio
# in the table (predicted over measured) separates the two sources of error: a ratio near 1 with
# a large latency error points at scheduling; a ratio away from 1, at the step-time model.

# %% [markdown]
# ## Takeaways

# %%
Markdown(
    f"- Continuous batching kept {GPU.name}'s throughput growing with the load ({thr_cont[top]:,.0f} output tokens/s "
    f"at {policies.rates[top]:g}/s) where static batches of 16 gave {thr_static[top]:,.0f}: a static batch "
    f"spends {1 - slot_use:.0%} of its slots on padding here.\n"
    f"- An unchunked {LONG:,}-token prefill put a {long_run.others_max_itl_s['unchunked'] / MS:.0f} ms gap into "
    f"every running stream; chunks of {best_c:,} tokens bring it to "
    f"{long_run.others_max_itl_s[f'C={best_c}'] / MS:.0f} ms.\n"
    f"- Within both p99 targets {'one GPU' if SCENARIO.tp == 1 else SCENARIO.layout} served {cap_cont:g} requests/s (continuous) and {cap_chunk:g} requests/s "
    f"(chunked) among the rates tried; at {tails.rates[-1]:g}/s the p99 TTFT is {ttft_c[-1] / MS:,.0f} ms.\n"
    + (f"- Per dollar, {rank.sentence()} (with the simulator's own error added, {rank_sim.sentence()}): "
       f"{DEPLOYMENTS[best].label} served {capacity.requests_per_usd[best]:,.0f} SLO-meeting requests, "
       if rank is not None else "- Per dollar, no deployment tried fits, ")
    + (f"replicas at B = 1 {capacity.requests_per_usd[b1]:,.0f}: batch first, then add GPUs.\n" if capacity.fits[b1]
       else f"while replicas at B = 1 serve nothing: they {capacity.status(b1)}.\n")
    + f"- A cached {SYSTEM_PROMPT:,}-token system prompt raised the rate within the SLO from "
    f"{prefix.max_rate('off'):g} to {prefix.max_rate('on'):g} requests/s; the decode steps still read it for every "
    "sequence.\n\n"
    "Previous: [15.2.2 Throughput under batching](15_2_2_batching.ipynb) · Back to the [index](00_index.ipynb)")
# %% [markdown]
# ## Exercises
#
# 4 exercises (8 points), from recomputing a number to a design question. Put your answer in the cell
# under each statement and run the check below it: it says PASS, or FAIL with a hint; it never shows
# the expected value. Tolerances are relative unless stated; GB means 10⁹ bytes.

# %%
from inferlab.exercises import check

# %% [markdown]
# ### Exercise 15.2.3-ex1: The TTFT of a request whose system prompt is cached
# *Recompute · 1 point*
#
# Every request to a `llama-3-8b` server on one `h100-sxm` (bf16) starts with the same 6,000-token
# system prompt, followed by 1,000 tokens of its own. With prefix caching, the system prompt's K and V
# are already in the cache when a request arrives. Compute the request's TTFT alone on the GPU (one prefill step,
# no queue) with the library's step time `inferlab.serving.RooflineStepTime(model, accelerator)`, called as
# `st(tokens, logits, attn_pairs, attn_kv_tokens)`: the tokens fed through the layers, the tokens sampled, the
# query-key pairs scored and the keys read. Then the speed-up over prefilling the whole prompt
# (`st.prefill_s(tokens)`).
#
# **Answer** `ex1`: a dict with the keys
# - `'ttft_cached_ms'`: the TTFT of the request with its prefix cached, alone on the GPU in ms, a number (tolerance ±1 %)
# - `'speedup'`: the TTFT without the cache divided by the TTFT with it (dimensionless), a number (tolerance ±1 %)

# %%
# SOLUTION
# parameters of 15.2.3-ex1
model = "llama-3-8b"
accelerator = "h100-sxm"
prefix_tokens = 6000
suffix_tokens = 1000

from inferlab.serving import RooflineStepTime
from inferlab.specs import get_accelerator, get_model
model = get_model(model)
accelerator = get_accelerator(accelerator)

st = RooflineStepTime(model, accelerator)
c, q = prefix_tokens, suffix_tokens
# Only the q uncached tokens go through the layers, but their queries attend to all c + q keys:
# q*c + q(q+1)/2 query-key pairs, c + q keys read, one token sampled.
cached_s = st(q, 1, q * c + q * (q + 1) / 2, c + q)
ex1 = {"ttft_cached_ms": cached_s * 1e3, "speedup": st.prefill_s(c + q) / cached_s}
ex1

# %%
check("15.2.3-ex1", ex1);

# %% [markdown]
# ### Exercise 15.2.3-ex2: A long prompt arrives: stall or chunk?
# *Predict · 2 points*
#
# A `llama-2-13b` server on one `h100-sxm` is decoding B = 32 sequences, each with 1,024 tokens in its
# cache, when a 3,968-token prompt arrives. **Predict first:** with an ITL target of 50 ms, which
# schedule keeps the running sequences within it?
#
# - *Unchunked* (prefill-first): the whole prompt is prefilled in a step of its own while the decodes wait; the
#   gap a running sequence sees is that step plus its next decode step (`st.prefill_s`, `st.decode_s(context,
#   batch)`).
# - *Chunked* with a budget of C = 512 tokens per step: the step carries the 32 decode tokens and the
#   prompt's first C - B tokens (nothing of the prompt cached yet), and samples 32 tokens.
#
# Use `st = inferlab.serving.RooflineStepTime(model, accelerator)`, called as `st(tokens, logits, attn_pairs,
# attn_kv_tokens)`: each decode scores its 1,024 cached keys (one pair per key) and reads them; the chunk's
# q tokens score q(q+1)/2 pairs among themselves and read q keys.
#
# **Answer** `ex2`: a dict with the keys
# - `'stall_ms'`: the gap between two tokens of a running sequence across the unchunked prefill in ms, a number (tolerance ±1 %)
# - `'chunked_itl_ms'`: the same gap when the step carries the first chunk instead in ms, a number (tolerance ±1 %)
# - `'meets_slo'`: which schedule keeps that gap within the ITL target: one of 'unchunked', 'chunked', 'both', 'neither'

# %%
# SOLUTION
# parameters of 15.2.3-ex2
model = "llama-2-13b"
accelerator = "h100-sxm"
batch = 32
context = 1024
long_tokens = 3968
chunk = 512
itl_slo_ms = 50

from inferlab.serving import RooflineStepTime
from inferlab.specs import get_accelerator, get_model
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
ex2 = {"stall_ms": stall_s * 1e3, "chunked_itl_ms": chunked_s * 1e3, "meets_slo": meets}
ex2

# %%
check("15.2.3-ex2", ex2);

# %% [markdown]
# ### Exercise 15.2.3-ex3: Is a cached system prompt free?
# *Inconsistency · 2 points*
#
# A colleague writes about a `llama-3-8b` server on one `h100-sxm` (bf16) whose requests share a
# 6,000-token system prompt and add 1,000 tokens each: *"With prefix caching the system prompt is
# free. Its KV is stored once, so a decode step of 16 conversations costs what 16 conversations of
# 1,000 tokens cost, and a request's TTFT is the prefill of its own 1,000 tokens."*
#
# 1. Compute the decode step time of 16 sequences that each hold the whole 7,000-token
#    context (`inferlab.serving.RooflineStepTime(model, accelerator).decode_s(context, batch)`; the attention kernel
#    reads each sequence's cached blocks, shared or not), and its ratio to the colleague's step (context
#    1,000).
# 2. Which of these statements are true?
#    - **A** The request's own tokens attend to the cached system prompt, so its cached prefill costs more than a
#      prefill of those tokens alone.
#    - **B** A decode step reads a shared prefix's K and V once for the whole batch.
#    - **C** Caching saves KV *memory* for the shared prefix: its blocks are stored once, not once per request.
#    - **D** Without prefix caching, every request's KV cache holds its own copy of the system prompt.
#    - **E** Prefix caching halves the FLOPs of the projections of the request's own tokens.
#
# **Answer** `ex3`: a dict with the keys
# - `'decode_ms'`: the decode step of 16 sequences at the full context in ms, a number (tolerance ±1 %)
# - `'ratio'`: that step divided by the colleague's step (dimensionless), a number (tolerance ±1 %)
# - `'true'`: the letters of every true statement: a set of letters among 'A', 'B', 'C', 'D', 'E', e.g. {'A', 'C'}

# %%
# SOLUTION
# parameters of 15.2.3-ex3
model = "llama-3-8b"
accelerator = "h100-sxm"
prefix_tokens = 6000
own_tokens = 1000
batch = 16

from inferlab.serving import RooflineStepTime
from inferlab.specs import get_accelerator, get_model
model = get_model(model)
accelerator = get_accelerator(accelerator)

st = RooflineStepTime(model, accelerator)
# Each sequence's attention reads its whole context, the shared prefix included, at every step.
decode_s = st.decode_s(prefix_tokens + own_tokens, batch)
ex3 = {"decode_ms": decode_s * 1e3, "ratio": decode_s / st.decode_s(own_tokens, batch), "true": {"A", "C", "D"}}
ex3

# %%
check("15.2.3-ex3", ex3);

# %% [markdown]
# ### Exercise 15.2.3-ex4: How many users fit when they share a system prompt?
# *Design · 3 points*
#
# A chat service runs `llama-3-8b` (bf16) on `h100-sxm` GPUs, one replica per GPU. Every conversation starts with
# the same 6,000-token system prompt and adds at most 1,000 tokens of its own (user turns and
# replies) to the KV cache. The KV cache is paged in blocks of 16 tokens; the pool per GPU is
# `inferlab.serving.kv_capacity_blocks(model, accelerator, block_tokens=16)` blocks (90 % of the memory
# minus the weights). With prefix caching, the system prompt's *whole* blocks are stored once per GPU and shared;
# a partly filled last block is each sequence's own.
#
# How many sequences at their longest fit in one GPU's pool without and with prefix caching, and how many GPUs
# hold 1,000 concurrent conversations with caching? (`inferlab.serving.blocks_for(tokens, block_tokens)` is
# ceil(tokens / block_tokens).)
#
# **Answer** `ex4`: a dict with the keys
# - `'max_seqs_uncached'`: the sequences the KV pool holds at once without prefix caching (sequences), an integer (exact)
# - `'max_seqs_cached'`: the sequences it holds with prefix caching (sequences), an integer (exact)
# - `'gpus'`: the GPUs (one replica each, with caching) for 1,000 concurrent users (GPUs), an integer (exact)

# %%
# SOLUTION
# parameters of 15.2.3-ex4
model = "llama-3-8b"
accelerator = "h100-sxm"
prefix_tokens = 6000
own_tokens = 1000
users = 1000
block_tokens = 16

import math

from inferlab.serving import blocks_for, kv_capacity_blocks
from inferlab.specs import get_accelerator, get_model
model = get_model(model)
accelerator = get_accelerator(accelerator)

pool = kv_capacity_blocks(model, accelerator, block_tokens=block_tokens)  # 90 % of memory, minus weights
# Without caching every sequence holds its own copy of the prefix.
uncached = pool // blocks_for(prefix_tokens + own_tokens, block_tokens)
# With caching the prefix's whole blocks are held once; a partial last block stays private.
shared = prefix_tokens // block_tokens
private = blocks_for(prefix_tokens + own_tokens - shared * block_tokens, block_tokens)
cached = (pool - shared) // private
ex4 = {"max_seqs_uncached": uncached, "max_seqs_cached": cached, "gpus": math.ceil(users / cached)}
ex4

# %%
check("15.2.3-ex4", ex4);

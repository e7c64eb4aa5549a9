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
# # 15.2.3 Serving lab: schedulers, tails and caches
#
# > **Beyond the chapter.** The chapter reasons about one step at a time; a server sees requests
# > of different lengths arriving at random. This lab runs such a stream through `inferlab.serving`,
# > a simulator on the library's step times: its numbers are simulations, not measurements (how
# > close they come to a real server is the appendix [15.2.3a](15_2_3a_validation.ipynb)).
#
# **The question.** Under a stream of requests and the chapter's targets (a time to first token,
# TTFT, under 500 ms; an inter-token latency, ITL, under 50 ms; both defined below), what do the
# scheduler, the chunk size, the request rate, the way GPUs are combined, a cached system prompt,
# separate prefill and decode pools, speculative decoding and priorities each change?

# %%
# %matplotlib inline
from IPython.display import Markdown

from inferlab import Precision
from inferlab.notebook import diagrams, figures, interactive, reader
from inferlab.claims import statements
from inferlab.core.context import beyond_context
from inferlab.serving import SLO, ChunkedPrefill, ContinuousBatching, RooflineStepTime, StaticBatching
from inferlab.notebook import lab_conclusions as conclusions, lab, labplots
from inferlab.core.memory import kv_cache_bytes_per_token
from inferlab.serving.definitions import metrics_table
from inferlab.base.units import GB, MS

reader.install_display();  # every figure shown carries its alt text

# %% [markdown]
# ## What if?
# The scenario of every experiment below (section 4 also splits the model over two and four GPUs).

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
# ## How a server meets a stream of requests
# One request of this scenario's mean length, waiting behind a busy server, with the step times of
# the library's roofline model (a pass takes the larger of its compute time at peak FLOP/s and
# its memory time at full bandwidth); the terms are defined under it.

# %%
# figure: fig-15-2-3-request-timeline
# caption: One request's life in the server: it waits in the queue, its prefill ends at the first token (TTFT), and each decode step adds one token (each gap one ITL).
# alt: A horizontal timeline for one request: a grey queue bar, a blue prefill bar ending at the first token with the TTFT span marked, then orange decode steps of equal length, one token mark at the end of each, the first gap labelled ITL.
diagrams.request_timeline(MODEL, GPU, PREC, prompt_len=int(SCENARIO.prompt.mean), output_tokens=6,
                          queue_s=0.1, batch=16)

# %% [markdown]
# A request brings a *prompt* of $S$ tokens and asks for an answer of $N$ tokens. It first waits in
# the server's *queue* until the *scheduler* (the part of the server that decides, before every
# forward pass, which requests take part in it) admits it. Its *prefill* then runs the whole prompt
# through the model in one forward pass and yields the first output token: the time from the
# request's arrival to that token is the *time to first token* (TTFT), its wait in the queue plus
# its prefill. From then on each *decode step* is one forward pass that yields one more token for
# every request in the *batch* (the requests being served together); the gap between two tokens of
# one request is the *inter-token latency* (ITL), the length of a decode step. Every request in the
# batch keeps its *KV cache* (the keys and values of all its tokens so far, which each decode step
# reads) in the GPU's memory, in blocks of 16 tokens; a request is admitted only when its blocks
# fit.
#
# A *service-level objective* (SLO) is the target each request must meet, here TTFT ≤ 500 ms and
# a mean ITL ≤ 50 ms; *goodput* is the rate of requests that meet it. The lab asks how many
# requests per second a server can take before its TTFT or its ITL misses the target.
#
# **The loop that answers it.** The simulator, `inferlab.serving.simulate`, replays a list of
# requests with their arrival times. Its whole schedule is this one function, `serve`, printed from the
# library as it runs; each replica's `run_until` repeats the step in its docstring until the next
# arrival:

# %%
import inspect

from inferlab.serving.simulate import serve

print(inspect.getsource(serve))

# %% [markdown]
# A step's time comes from the step-time model: for the scenario's GPU and model, the roofline
# time of a forward pass over that step's tokens and KV-cache reads. Nothing else is modelled: no
# network, no tokenizer, no kernel launch overhead. Every number below is a simulation, not a
# measurement.
#
# **Check yourself.**
# 1. A request waits 100 ms in the queue and its prefill takes 60 ms. What is its TTFT?
# 2. Why does every request in a batch slow down when one more joins it?
#
# <details class="self-check"><summary>Answers</summary>
#
# 1. 160 ms: TTFT counts from the arrival, so the wait in the queue is part of it.
# 2. A decode step reads every request's KV cache: one more request adds its cache to every step's
#    reads (and one more token to its compute), so each step, and so every request's ITL, gets longer.
#
# </details>

# %% [markdown]
# ### What the lab measures
# Every metric and setting below, defined once with the values in use. A word such as "small" or
# "best" in this notebook is chosen from the numbers by a stated threshold (`inferlab.base.qualitative_words`):
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
from inferlab.notebook import worked_examples

first = outputs16[0]
worked_examples.equation(r"\text{slot use} = \frac{\sum_i N_i}{B \cdot \max_i N_i} = \frac{<total>}{16 \cdot <longest>}"
                r" = <use>;\qquad \text{mean over the } <n> \text{ batches: } <mean>",
                total=int(first.sum()), longest=int(first.max()), use=float(first.sum() / (16 * first.max())),
                n=len(outputs16), mean=slot_use)

# %%
worked_examples.takeaway(f"A static batch of 16 lasts as long as its longest request: with this scenario's output lengths "
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
Markdown(conclusions.policy_conclusion(policies, "static, B = 16 (0.5 s timeout)", "continuous"))

# %% [markdown]
# **Check yourself.**
# 1. A static batch of 4 requests has outputs of 10, 10, 10 and 90 tokens. What is its slot use?
# 2. Why does static batching's median latency grow by orders of magnitude while its throughput
#    only stops growing?
#
# <details class="self-check"><summary>Answers</summary>
#
# 1. (10 + 10 + 10 + 90) / (4 × 90) = 120 / 360 = 33 %: two thirds of the slot-steps are padding.
# 2. Once the batches cannot keep up, the requests they do not serve wait in the queue, and a queue
#    fed faster than it drains grows without limit: latency follows the queue, throughput the
#    batches.
#
# </details>

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

from inferlab.base.units import TFLOP, bytes_per_element

C, B_run, ctx = 512, 16, 1024
compute_s = 2 * MODEL.n_matmul_params * C / GPU.peak(PREC.compute_dtype)
memory_s = (MODEL.n_params * bytes_per_element(PREC.weights)
            + B_run * ctx * kv_cache_bytes_per_token(MODEL, PREC)) / GPU.hbm_bytes_per_s
chunk_steps = math.ceil(LONG / (C - B_run))
worked_examples.equation(r"t_\text{step}(C) \approx \max(\text{compute}, \text{memory}) = \max(<tc>, <tm>)\ \text{ms},"
                r"\qquad \text{compute} = \frac{2 \cdot <P> \cdot <C>}{<peak>\ \text{TFLOP/s}},"
                r"\qquad \text{memory} = \frac{<M>\ \text{GB} + <B> \cdot <Ckv>\ \text{GB}}{<bw>\ \text{TB/s}},"
                r"\qquad \left\lceil \frac{<S>}{<C> - <B>} \right\rceil = <steps>\ \text{steps}",
                P=MODEL.n_matmul_params, C=C, peak=GPU.peak(PREC.compute_dtype) / TFLOP,
                M=MODEL.n_params * bytes_per_element(PREC.weights) / GB, B=B_run,
                Ckv=ctx * kv_cache_bytes_per_token(MODEL, PREC) / GB, bw=GPU.hbm_bytes_per_s / 1e12,
                tc=compute_s / MS, tm=memory_s / MS, S=LONG, steps=chunk_steps)

# %%
worked_examples.takeaway(f"Chunked at C = {C}, the long prompt is spread over {chunk_steps} steps of at most about "
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
Markdown(conclusions.long_prompt_conclusion(long_run, TARGETS.tpot_s))

# %% [markdown]
# **Check yourself.**
# 1. Why does chunking lengthen the long request's own TTFT?
# 2. Which running requests notice an unchunked long prefill, and by how much?
#
# <details class="self-check"><summary>Answers</summary>
#
# 1. Its prompt is spread over several steps that also carry the other requests' decode tokens,
#    and each step reads the weights again: more steps, each a little longer, before its first token.
# 2. Every one of them: each waits for the whole prefill step between two of its tokens, so that
#    gap is the prefill time plus a decode step.
#
# </details>

# %% [markdown]
# ## 3. Tail latency against the request rate
# By Little's law the number of requests in the server is the arrival rate times the time each
# spends there, $\bar B \approx \lambda \cdot \overline{E2E}$. A higher rate means larger batches,
# larger batches mean slower decode steps (each reads more KV cache), and slower steps keep each
# request longer: the loop is stable until the GPU's memory or bandwidth runs out, then queues
# grow and the tails rise steeply.

# %%
tails = lab.policy_sweep(SCENARIO, (4, 8, 12, 16, 20, 24, 28),
                         {"continuous": ContinuousBatching(), "chunked prefill (C = 512)": ChunkedPrefill(512)})
Markdown(conclusions.littles_law(tails, "continuous"))

# %%
# figure: fig-15-2-3-tail-vs-qps
# caption: Tail latencies stay flat while the GPU keeps up with the load and rise steeply past it; chunked prefill trades a higher TTFT tail for a flatter ITL tail.
# alt: Two panels against the request rate for continuous batching and chunked prefill: p99 TTFT on a log scale with the 500 ms target, rising sharply at the highest rates; p99 ITL with the 50 ms target, the continuous line rising above the chunked one.
interactive.explore(labplots.tail_plot(tails), interactive.tail_grid(tails))

# %%
Markdown(conclusions.tails_conclusion(tails, SCENARIO, "continuous", "chunked prefill (C = 512)"))

# %% [markdown]
# **Check yourself.**
# 1. By Little's law, a server holds 12 requests on average while each spends 1.5 s in it. What
#    is the arrival rate?
# 2. Why do the tails rise steeply rather than gradually once the rate passes the capacity?
#
# <details class="self-check"><summary>Answers</summary>
#
# 1. 12 / 1.5 s = 8 requests/s.
# 2. Past the capacity requests arrive faster than they leave, so the queue grows for as long as
#    the load lasts: each later request waits for all those before it, and the wait has no bound.
#
# </details>

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
Markdown(conclusions.capacity_conclusion(capacity, SCENARIO, CAPACITY_REL_TOL))

# %%
# Eq. (goodput-per-dollar) with this scenario's numbers, for the best deployment
worked_examples.equation(r"\text{requests per dollar} = \frac{\lambda_\text{SLO} \times 3600\ \text{s}}{\text{GPUs} \times "
                r"\text{price per GPU-hour}} = \frac{<rate>\ \text{/s} \times 3600\ \text{s}}{<gpus> \times \$<usd>}"
                r" = <per_usd>",
                rate=capacity.rate_per_s[best], gpus=DEPLOYMENTS[best].gpus, usd=USD_PER_GPU_HOUR,
                per_usd=capacity.requests_per_usd[best])

# %%
worked_examples.takeaway(conclusions.capacity_takeaway(capacity))

# %% [markdown]
# **Check yourself.**
# 1. Deployment A serves 6 requests/s within the SLO on 2 GPUs, deployment B 10 requests/s on 4
#    GPUs, at the same price per GPU-hour. Which serves more requests per dollar?
# 2. Why can two replicas at $B$ = 1 never match one GPU that batches?
#
# <details class="self-check"><summary>Answers</summary>
#
# 1. A: 3 requests/s per GPU against B's 2.5. Cost is proportional to GPUs, so requests per dollar
#    follow requests per second per GPU.
# 2. A decode step at $B$ = 1 reads all the weights for one token; batching reads them once for
#    every request in the batch, so each GPU's tokens per second grow with $B$ until compute or
#    memory runs out.
#
# </details>

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
worked_examples.equation(r"\text{FLOPs}_\text{cached} \approx 2 \cdot <P> \cdot <q> + 4 \cdot <L> \cdot <d> \left(<q> \cdot <c>"
                r" + \tfrac{<q>^2}{2}\right) = <fc>\ \text{instead of}\ <fu>\ \ (<ratio>\times\ \text{fewer})",
                P=MODEL.n_matmul_params, q=q, L=L_, d=d_, c=c, fc=flops_cached, fu=flops_uncached,
                ratio=flops_uncached / flops_cached)

# %%
worked_examples.takeaway(f"Caching the {SYSTEM_PROMPT:,}-token prefix makes a request's prefill "
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
Markdown(conclusions.prefix_conclusion(prefix, TARGETS.tpot_s))

# %% [markdown]
# **Check yourself.**
# 1. With a cached 10,000-token system prompt and 500 tokens of its own, how many tokens does a
#    request's prefill run through the model's layers?
# 2. Prefix caching stores the shared prompt once. Why do decode steps not get cheaper with it?
#
# <details class="self-check"><summary>Answers</summary>
#
# 1. 500: only its own tokens are projected; their queries still attend to all 10,500 keys.
# 2. Each sequence's attention still reads the shared keys and values at every step: the memory
#    is stored once, but it is read once per sequence.
#
# </details>

# %% [markdown]
# ## 6. Prefill and decode on separate pools
# The chapter's senior answer to a shared pool's stalls is to split it: a *prefill pool* computes
# each prompt and samples its first token, then sends the prompt's KV cache over a link to a
# *decode pool*, which only ever runs decode steps. The simulator models the hand-off (the cache's
# bytes from `memory.kv_cache_bytes_per_token`, sent over a link after the prefill, one transfer at
# a time per prefill replica) and delivers the first token when the decode pool admits the request,
# as vLLM's disaggregated-prefill proxy does:
#
# <!-- equation: eq-kv-transfer -->
# $$t_\text{transfer} = t_\text{latency} + \frac{S \cdot 2 L\, n_\text{kv}\, d_\text{head}\, b}{\text{link bandwidth}},
# \qquad \text{TTFT} = t_\text{queue} + t_\text{prefill} + t_\text{transfer} + t_\text{decode admission}.$$
#
# The question: how much does a split help the running requests' p99 ITL when long prompts join the
# traffic, what does it cost on TTFT, and how should the GPUs be divided between the two pools?

# %%
POOL_REPLICAS = 4                      # replicas in all, shared or split
LONG_PROMPT, LONG_SHARE = 3000, 0.2    # the long prompts of the mix, and their share of the requests
split_rate = lab.sustainable_rate(SCENARIO, 0.45 * POOL_REPLICAS)  # 45 % of what the replicas sustain
split = lab.disaggregation(SCENARIO, split_rate, replicas=POOL_REPLICAS, long_tokens=LONG_PROMPT,
                           long_share=LONG_SHARE)
sizing = lab.pool_sizing(SCENARIO, split_rate, max_replicas=POOL_REPLICAS + 2, workload=lab.with_long_prompts(
    SCENARIO.workload(split_rate), LONG_PROMPT, LONG_SHARE, SCENARIO.seed))
Markdown(conclusions.disaggregation_table(split))

# %%
Markdown(conclusions.disaggregation_conclusion(split, sizing))

# %%
# Eq. (kv-transfer) with this scenario's numbers, for a request of the mix's mean prompt
mean_prompt = split.mean_prompt_tokens
worked_examples.equation(r"t_\text{transfer} = <lat>\ \text{s} + \frac{<S> \times <bpt>\ \text{B}}{<bw>\ \text{B/s}}"
                         r" = <t>\ \text{s}", lat=split.link_latency_s, S=mean_prompt,
                         bpt=kv_cache_bytes_per_token(MODEL, PREC, SCENARIO.tp), bw=split.link_gbps * 1e9 / 8,
                         t=split.transfer_s)

# %%
worked_examples.takeaway(f"A {round(mean_prompt):,}-token prompt's cache takes {split.transfer_s / MS:.1f} ms to cross a "
                         f"{split.link_gbps:g} Gbit/s link: a cost every request's TTFT pays once, for decode steps that carry "
                         "no other request's prefill.")

# %% [markdown]
# **Check yourself.** Why can a split raise the TTFT, even though the prefill pool only
# prefills?
#
# <details class="self-check"><summary>Answers</summary>
#
# Its replicas are taken from the shared pool: fewer GPUs prefill the same prompts, and each
# request then waits for its cache to cross the link and for a place in the decode pool. The
# split buys steady decode steps; the TTFT is bought back by sizing the prefill pool.
#
# </details>

# %% [markdown]
# ## 7. Speculative decoding
# A small draft (here MTP-style extra heads on the target) proposes $k$ tokens; the target checks
# all of them in one step over $k+1$ tokens and keeps the accepted prefix plus one token of its
# own. With each proposal accepted with probability $\alpha$, independently, a verification yields
#
# <!-- equation: eq-speculative-tokens -->
# $$E = \frac{1-\alpha^{k+1}}{1-\alpha}\ \text{tokens}, \qquad
# \text{speed-up} = \frac{E \cdot t_\text{decode}(B)}{t_\text{verify}(B, k+1) + k\, t_\text{draft}(B)}.$$
#
# It pays where a step costs about the same for one token as for $k+1$ (memory-bound: small
# batches) and stops where the step's cost grows with its tokens (compute-bound: large batches).

# %%
spec_rates = (lab.sustainable_rate(SCENARIO, 0.05),
              lab.sustainable_rate(SCENARIO, 0.8))
spec = lab.speculative_sweep(SCENARIO, k=4, acceptance=0.7,
                             rates=spec_rates)
Markdown(conclusions.speculative_table(spec))

# %%
Markdown(conclusions.speculative_conclusion(spec))

# %%
# Eq. (speculative-tokens) with this section's k and acceptance
worked_examples.equation(r"E = \frac{1 - <a>^{<k1>}}{1 - <a>} = <e>\ \text{tokens per verification}",
                         a=spec.acceptance, k1=spec.k + 1, e=spec.tokens_per_verification)

# %%
worked_examples.takeaway(f"{spec.tokens_per_verification:.2f} tokens per verification is the ceiling of the speed-up; "
                         f"it is reached only where a step over {spec.k + 1} tokens costs what a step over one does.")

# %% [markdown]
# ## 8. Priorities for latency-sensitive requests
# A priority scheduler (vLLM's `--scheduling-policy priority`) admits waiting requests by class,
# then by arrival, and when a decode runs short of KV blocks it evicts the least urgent sequence
# first. Here a fifth of the requests are latency-sensitive and the load is above what one replica
# sustains, so a queue forms.

# %%
prio = lab.priority_load(SCENARIO, lab.sustainable_rate(SCENARIO, 1.2), high_share=0.2)
Markdown(conclusions.priority_table(prio))

# %%
Markdown(conclusions.priority_conclusion(prio))

# %% [markdown]
# ## Takeaways

# %%
Markdown(conclusions.takeaways(SCENARIO, slot_use=slot_use, policies=policies, long_run=long_run, tails=tails,
                               capacity=capacity, system_prompt=prefix, pools=split, speculation=spec,
                               priorities=prio)
         + "\n\nNext: [15.2.3a Appendix: how far to trust the serving simulator](15_2_3a_validation.ipynb) · "
         "Previous: [15.2.2 Throughput under batching](15_2_2_batching.ipynb) · Back to the [index](00_index.ipynb)")
# %% [markdown]
# ## Exercises
#
# 4 exercises (8 points), from recomputing a number to a design question. <!-- lab -->Put your answer
# in the cell under each statement and run the check below it: it says PASS, or FAIL with a hint; it
# never shows the expected value.<!-- /lab --><!-- web: In JupyterLab (`make lab`) each statement has
# a cell for your answer and a check under it that says PASS, or FAIL with a hint, never the expected
# value; on this page each check shows its hints. --> Tolerances are relative unless stated; GB means
# 10⁹ bytes.

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
from inferlab.core.specs import get_accelerator, get_model
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
from inferlab.core.specs import get_accelerator, get_model
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
ex4 = {"max_seqs_uncached": uncached, "max_seqs_cached": cached, "gpus": math.ceil(users / cached)}
ex4

# %%
check("15.2.3-ex4", ex4);

# %% [markdown]
# ## Checking the book's numbers
# The lab above goes beyond the chapter, so it has no numbers of the book to check; it does test
# some of the chapter's statements (in its sections 15.1.1, 15.2.1 and 15.2.2) against the
# simulator. Each statement's verdict is decided by its own experiment, listed in
# `data/statements.toml`; the lab's runs sit beside them. How far the simulator itself can be
# trusted is the [appendix](15_2_3a_validation.ipynb).

# %%
STATEMENTS = statements.statement_verdicts(
    "15.2.2-s14",                                            # section 1: static batching saturates
    "15.2.1-s23", "15.1.1-s13", "15.1.1-s14", "15.2.1-s15",  # section 2: chunked prefill
    "15.2.2-s19", "15.2.2-s21", "15.2.2-s10", "15.2.2-s9",   # sections 3 and 4: tails, scaling
    "15.1.1-s21", "15.1.1-s29",                              # section 5: prompt caching
    "15.1.1-s25", "15.1.2-s24", "15.2.2-s22")                # sections 6-8: pools, speculation, priorities
print("15.2.3: " + statements.summary_line(list(STATEMENTS.values())))

# %% [markdown]
# ### The chapter's statements the lab tests
# Static batching saturates (section 1); chunked prefill bounds the stall (section 2); tails and
# the advice to scale (sections 3 and 4); prompt caching (section 5); separate pools, speculative
# decoding and priority queues (sections 6 to 8):

# %%
reader.details("The chapter's statements on batching, chunked prefill, tails, scaling and prompt caching: "
               "verdicts and evidence", statements.statement_table(*STATEMENTS))

# %% [markdown]
# ### The ranking against the simulator's own error
# The capacities of section 4 are known to within the bisection's 5 %; the simulator adds an
# error of its own, measured against live servers in the [appendix](15_2_3a_validation.ipynb):

# %%
from inferlab.study.validate import capacity_uncertainty, recorded  # the simulator against a live server

sim_err = capacity_uncertainty(recorded(step_model="profile"))
Markdown(conclusions.simulator_error_note(capacity, CAPACITY_REL_TOL, sim_err))


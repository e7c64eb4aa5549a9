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
# # Chapter 15, The Inference Workload: the executable companion
#
# Four notebooks, one per subsection of the chapter, in reading order. Each asks one question,
# draws the mechanism, derives the formula that answers it, computes the numbers with the `inferlab`
# library and draws the figure; a closing section (folded in the web book) then sets every number the
# book prints beside ours with a verdict. A fifth, the serving
# lab, goes beyond the chapter: it runs request streams through a serving simulator and checks the
# chapter's statements about schedulers, tails and caches against them.
#
# | # | notebook | what it teaches | figures |
# |---|---|---|---|
# | 1 | [15.1.1 Compute-bound prefill](15_1_1_prefill.ipynb) | Arithmetic intensity and the roofline; why a prompt's forward pass is limited by FLOP/s; $2PS$ (not $6PS$) FLOPs; the KV cache it leaves behind | the roofline with its ridge point; roofline with prefill and decode operators; TTFT against prompt length |
# | 2 | [15.1.2 Memory-bound generation and the KV cache](15_1_2_decode_kv_cache.ipynb) | What the KV cache stores and why decode needs it; why a decode step is bound by bandwidth; MLP intensity $\approx B$ but attention pinned at 1; the memory wall on the batch; grouped-query attention (KV heads shared among query heads) and an int8 cache | the KV cache of one sequence; decode intensity against batch; memory budget against batch; MHA vs GQA vs int8 KV |
# | 3 | [15.2.1 TTFT and ITL](15_2_1_ttft_itl.ipynb) | The life of a request; two latencies, two resources: time-to-first-token (TTFT) from compute, inter-token latency (ITL) from bandwidth; which optimisation moves which | a request's timeline; TTFT against prompt length; ITL against context and batch; weight dtype against TTFT and ITL |
# | 4 | [15.2.2 Throughput under batching](15_2_2_batching.ipynb) | Throughput against batch; the KV-crossover $B^*$; the memory limit; cost per token; the latency-throughput trade-off; static vs continuous batching | step time and throughput against batch; latency-throughput curve; cost per 1k tokens; MHA vs GQA vs int8 KV throughput; static vs continuous batching over time |
# | 5 | [15.2.3 Serving lab](15_2_3_serving_lab.ipynb) *(beyond the chapter)* | A stream of requests through the `inferlab.serving` simulator: static vs continuous batching; a long prompt with and without chunked prefill; tail latency against the request rate; SLO goodput per dollar for replicas, batching and tensor parallelism; prefix caching of a shared system prompt | throughput and latency against rate per policy; ITL stall against chunk size; p99 TTFT and ITL against rate; requests per dollar per deployment; TTFT and SLO attainment with and without prefix caching |
# | 6 | [15.2.3a Appendix: the simulator against live servers](15_2_3a_validation.ipynb) *(beyond the chapter)* | How the lab's simulator is checked: its step time calibrated on the engine itself, the same random workloads run live (this project's own loop, transformers' continuous batching) and simulated, and the percentiles compared within stated bounds | measured against simulated TTFT and ITL percentiles per rate |
#
# **How to use them.** <!-- lab -->Open a notebook and *Run → Run All Cells*.<!-- /lab --><!-- web:
# These pages show each notebook as it last ran; to run one yourself, open it in JupyterLab (`make lab`)
# and run all its cells. --> Near the top of each is a **"What if?"** cell: change the model, the
# accelerator, the number formats, the lengths or the batch there and run all again; every derived
# number, figure and written conclusion follows, and the book's markers appear on a figure only when
# the scenario is the book's. The closing check of the book's numbers is the exception: it always uses
# the book's own configuration. Each subsection's notebook also has a **"Try it"** panel (<!-- web: in
# JupyterLab, -->live controls for model, accelerator, number formats, batch and length). In the closing
# section, **"Measure it here"** times the same effect live on <!-- lab -->your machine<!-- /lab --><!--
# web: the machine that runs the notebook --> with a tiny model (a few seconds; its output varies, so
# the tests check only the qualitative result).
#
# **In the interview.** Each subsection's notebook ends its lesson with the book's three interview
# questions of that subsection as drills: the question, room for your own answer, and the answer folded
# under it with the numbers of the page's scenario, corrected where the checked numbers disagree with
# the book.<!-- web: The [cheat sheet](cheatsheet.md) puts the chapter's formulas and rules of thumb,
# each with its number, on one printable page. -->
#
# **Exercises.** Each of the five notebooks ends with four or five exercises, from recomputing a
# number for another model or accelerator to a small design question. <!-- web: In JupyterLab, -->Write
# your answer in the cell under each statement and run the `check(...)` cell below it: it prints PASS, or
# FAIL with a hint about the likely slip (a unit, GB vs GiB, a missing factor 2), never the answer. `make lab`
# opens this reader version, whose answer cells are empty; `make lab-instructor` opens the
# versions with solutions. Instructors: see the README for student versions and grading.
#
# **Verdicts.** Each number the book prints is recorded in `data/claims.toml` and compared with
# ours by `inferlab.claims`:
# *consistent* (ours agrees within the book's rounding), *approximation* (the book's own stated
# simplification reproduces it and keeps the conclusion, or stays within a factor 1.5), *erratum* (it
# follows from no stated method, or from arithmetic that is wrong), *unchecked* (a claim the model
# cannot test, with the reason). All four follow [one rule](../ERRATA.md#the-verdict-rule), and every
# table shows beside each verdict the tolerance that decided it. Errata are explained where they occur
# and collected in [ERRATA.md](../ERRATA.md).
#
# **Conventions.** GB = $10^9$ bytes and TB/s = $10^{12}$ bytes/s, as on datasheets and in the book.
# Device capacities are the datasheet's "80 GB" read as $80 \times 10^9$ bytes, as the book reads them;
# the memory itself is binary (an H100 80GB reports 81,559 MiB), so every memory verdict is on the
# datasheet's decimal capacity, a few percent below what the card holds.
# FLOPs are those of matrix products, two per multiply-add. Accelerator peaks are dense (no 2:4
# sparsity). The book's Llama-2 13B is its simplified version (`llama-2-13b-book`: $f = 4d$, two
# MLP matrices); the real architecture (`llama-2-13b`) is in the library beside it.
#
# **For authors.** `make figures` writes every figure below as SVG and PNG into `build/figures/`;
# `make test` re-executes these notebooks under nbval and compares every printed output.

# %% [markdown]
# The setup this companion is checked against, and the verdicts over the whole chapter:

# %%
from inferlab import get_accelerator, get_model, list_accelerators, list_models
from inferlab.notebook.reader import verdict_summary
from inferlab.notebook.figures import BOOK_GPU, BOOK_MODEL, FIGURES

book_model, book_gpu = get_model(BOOK_MODEL), get_accelerator(BOOK_GPU)
print(f"model: {book_model.name}, {book_model.n_params / 1e9:.2f} B parameters ({book_model.description})")
print(f"accelerator: {book_gpu.name}, {book_gpu.description}")
print(f"\nmodels to try in a 'What if?' cell: {', '.join(list_models())}")
print(f"accelerators to try: {', '.join(list_accelerators())}")

# %%
print(verdict_summary())

# %% [markdown]
# Every figure of the chapter, by section (the names `make figures` uses):

# %%
print("\n".join(FIGURES))

"""The serving lab's sentences (chapters/15_2_3_serving_lab), rendered from its results: each
function takes an experiment's result (`serving.lab`) and returns Markdown whose every number and
every qualitative word comes from it, so the notebook's What-if cell never leaves the prose behind.

A word such as "small" or "saturated" is chosen by `inferlab.base.qualitative_words`'s stated thresholds; a
sentence that depends on the scenario (does the unchunked gap miss the target? does every
deployment fit?) is decided here, not in a notebook cell.
"""
from __future__ import annotations

from inferlab.serving.kv import kv_capacity_blocks
from inferlab.notebook.lab import LAB_BLOCK_TOKENS, Capacity, LongPrompt, PrefixSweep, Scenario, Sweep, capacity_note
from inferlab.base.units import MS
from inferlab.base.qualitative_words import Ranking, ranking, size_of_change, thresholds_text


def policy_conclusion(sweep: Sweep, static: str, continuous: str) -> str:
    """Section 1: continuous against static batching at the sweep's highest rate, and whether static
    batching's throughput has stopped growing (its change from the second rate, by `size_of_change`)."""
    top = len(sweep.rates) - 1
    thr_s = sweep.column(static, "throughput_output_tokens_per_s")
    thr_c = sweep.column(continuous, "throughput_output_tokens_per_s")
    e2e_s, e2e_c = sweep.column(static, "e2e_s", "p50"), sweep.column(continuous, "e2e_s", "p50")
    growth = thr_s[top] / thr_s[1] - 1
    word = size_of_change(growth)
    text = (f"At {sweep.rates[top]:g} requests/s continuous batching delivers {thr_c[top]:,.0f} output tokens/s "
            f"against static batching's {thr_s[top]:,.0f} ({thr_c[top] / thr_s[top]:.1f}×), and the median request "
            f"finishes in {e2e_c[top]:.2f} s instead of {e2e_s[top]:,.0f} s. Static batching's throughput at "
            f"{sweep.rates[top]:g}/s is {thr_s[top] / thr_s[1]:.2f}× its throughput at {sweep.rates[1]:g}/s, a "
            f"**{word}** change ({thresholds_text()})")
    return text + (": it has saturated, and the surplus queues." if word == "small" else ".")


def largest_chunk_within(run: LongPrompt, itl_s: float) -> int | None:
    """The largest chunk size tried that keeps every gap in the other requests' streams within
    `itl_s`; None when none does."""
    within = [c for c in run.chunks if run.others_max_itl_s[f"C={c}"] <= itl_s]
    return max(within) if within else None


def long_prompt_conclusion(run: LongPrompt, itl_s: float) -> str:
    """Section 2: the gap an unchunked long prompt puts into the other streams against the ITL target,
    the largest chunk that keeps it within, and what chunking costs the long request's own TTFT."""
    best = largest_chunk_within(run, itl_s)
    c = best if best is not None else min(run.chunks)
    gap, target = run.others_max_itl_s["unchunked"], itl_s / MS
    cost = run.long_ttft_s[f"C={c}"] / run.long_ttft_s["unchunked"] - 1
    smallest = min(run.chunks)
    cost_min = run.long_ttft_s[f"C={smallest}"] / run.long_ttft_s["unchunked"] - 1
    where = "over" if gap > itl_s else "within"
    chunked = (f"Chunk sizes up to C = {best:,} keep every gap within it ({run.others_max_itl_s[f'C={best}'] / MS:.0f} ms "
               f"at C = {best:,}); " if best is not None else "No chunk size tried keeps every gap within it; ")
    return (f"Unchunked, the {run.long_tokens:,}-token prompt makes the largest gap in the other requests' streams "
            f"{gap / MS:.0f} ms, {where} the {target:.0f} ms target. " + chunked
            + f"the long request's TTFT at C = {c:,} is {run.long_ttft_s[f'C={c}'] / MS:.0f} ms against "
            f"{run.long_ttft_s['unchunked'] / MS:.0f} ms unchunked ({cost:+.0%}, a **{size_of_change(cost)}** cost: "
            f"{thresholds_text()}), and {run.long_ttft_s[f'C={smallest}'] / MS:.0f} ms at the smallest chunk, "
            f"C = {smallest} ({cost_min:+.0%}, **{size_of_change(cost_min)}**): smaller chunks read the weights "
            "more often for the same prompt.")


def littles_law(sweep: Sweep, label: str, i: int = 1) -> str:
    """Section 3: Little's law at the sweep's rate i, requests in the server = rate x mean end-to-end
    time, against the simulated mean batch (which leaves out the requests still queued)."""
    s = sweep.summaries[label][i]
    rate = sweep.rates[i]
    in_server = rate * s["e2e_s"]["mean"]
    batch = s["batch"]["mean"]
    text = (f"Little's law at {rate:g} requests/s ({label}): {rate:g}/s × the mean end-to-end time "
            f"{s['e2e_s']['mean']:.2f} s = {in_server:.1f} requests in the server; the time-weighted mean batch is "
            f"{batch:.1f} sequences")
    if batch < in_server:
        return text + (f" ({batch / in_server - 1:+.0%}, a {size_of_change(batch / in_server - 1)} difference: the "
                       "batch does not count the requests waiting in the queue).")
    return text + "."


def tails_conclusion(sweep: Sweep, scenario: Scenario, continuous: str, chunked: str) -> str:
    """Section 3: the highest rate within both p99 targets for each policy, what misses first at the
    next rate, and what chunking costs in TTFT."""
    slo = sweep.slo
    cap_c, cap_k = sweep.max_rate_within(continuous), sweep.max_rate_within(chunked)
    ttft_c, itl_c = sweep.column(continuous, "ttft_s", "p99"), sweep.column(continuous, "itl_s", "p99")
    ttft_k, itl_k = sweep.column(chunked, "ttft_s", "p99"), sweep.column(chunked, "itl_s", "p99")
    miss = min(sweep.rates.index(cap_c) + 1 if cap_c else 0, len(sweep.rates) - 1)  # the first rate that misses
    text = (f"With both p99 targets (TTFT ≤ {slo.ttft_s / MS:.0f} ms, ITL ≤ {slo.tpot_s / MS:.0f} ms), "
            f"{scenario.layout} serves up to **{cap_c:g} requests/s** with {continuous} batching and "
            f"**{cap_k:g} requests/s** with {chunked} among the rates tried")
    text += (" (every rate tried for both: the capacity lies beyond them). " if min(cap_c, cap_k) == sweep.rates[-1]
             else ". ")
    text += (f"At {sweep.rates[miss]:g}/s {continuous} batching's p99 ITL is {itl_c[miss] / MS:.0f} ms and its p99 "
             f"TTFT {ttft_c[miss] / MS:,.0f} ms")
    if itl_c[miss] > slo.tpot_s and ttft_c[miss] <= slo.ttft_s:
        text += " (its ITL misses first: whole prompts prefilled inside decode steps lengthen them)"
    change = ttft_k[0] / ttft_c[0] - 1
    text += f"; chunked prefill's are {itl_k[miss] / MS:.0f} ms and {ttft_k[miss] / MS:,.0f} ms. Chunking "
    text += (f"pays for its flatter ITL tail with TTFT, a {size_of_change(change)} cost: " if ttft_k[miss] > ttft_c[miss]
             else f"changes TTFT by {change:+.0%} (a {size_of_change(change)} change): ")
    return text + (f"p99 {ttft_k[0] / MS:.0f} ms against {ttft_c[0] / MS:.0f} ms at {sweep.rates[0]:g}/s. At the "
                   f"highest rate, {sweep.rates[-1]:g}/s, the p99 TTFT has reached {ttft_c[-1] / MS:,.0f} ms "
                   f"({continuous}).")


def _index(capacity: Capacity, *, replicas: int, tp: int, batching: bool) -> int | None:
    """The deployment with these replicas and TP, batching (max_num_seqs > 1) or not; None if absent."""
    for i, d in enumerate(capacity.deployments):
        single = getattr(d.policy, "max_num_seqs", None) == 1
        if d.replicas == replicas and d.tp == tp and single != batching:
            return i
    return None


def capacity_ranking(capacity: Capacity, rel_uncertainty: float) -> Ranking | None:
    """The deployments that fit, ranked by SLO-meeting requests per dollar (`qualitative_words.ranking`: the
    leader is named only when its margin beats `rel_uncertainty`); None when none fits."""
    fitting = {d.label: float(x) for d, x, f in zip(capacity.deployments, capacity.requests_per_usd, capacity.fits)
               if f}
    return ranking(fitting, min(0.5, rel_uncertainty)) if fitting else None


def capacity_conclusion(capacity: Capacity, scenario: Scenario, rel_tol: float) -> str:
    """Section 4: the deployments ranked by SLO-meeting requests per dollar (`capacity_ranking` at the
    bisection's `rel_tol`), the best against one GPU and against replicas that do not batch, and what
    tensor parallelism gives per GPU with its KV pool beside two replicas. A comparison where some
    deployments do not fit says which and why (`lab.capacity_note`)."""
    rank = capacity_ranking(capacity, rel_tol)
    ranking_sentence = rank.sentence() if rank else ""
    if not capacity.all_fit:
        note = capacity_note(capacity, scenario)
        return note + (f" By SLO-meeting requests per dollar, **{ranking_sentence}**." if ranking_sentence else "")
    best = capacity.best()
    one, two = _index(capacity, replicas=1, tp=1, batching=True), _index(capacity, replicas=2, tp=1, batching=True)
    tp2, tp4 = _index(capacity, replicas=1, tp=2, batching=True), _index(capacity, replicas=1, tp=4, batching=True)
    b1 = _index(capacity, replicas=2, tp=1, batching=False)
    usd, per_gpu, rate = capacity.requests_per_usd, capacity.per_gpu, capacity.rate_per_s
    text = (f"By SLO-meeting requests per dollar, **{ranking_sentence}**. "
            f"{capacity.deployments[best].label}: {usd[best]:,.0f} requests per dollar ({per_gpu[best]:.3g} "
            "requests/s per GPU), against ")
    if best != one:
        text += f"{usd[one]:,.0f} for one GPU batching alone and "
    text += (f"{usd[b1]:,.0f} for replicas at $B$ = 1 ({usd[best] / usd[b1]:,.0f}× less). "
             f"Two replicas carry {rate[two] / rate[one]:.2f}× one GPU's capacity")
    text += (" (more than twice: least-loaded routing sends each request to the less busy replica, which smooths "
             f"bursts; the bisection finds each capacity only to within {rel_tol:.0%}). " if rate[two] > 2 * rate[one]
             else ". ")
    blocks_tp1 = kv_capacity_blocks(scenario.model, scenario.accelerator, scenario.precision, 1)
    blocks_tp2 = kv_capacity_blocks(scenario.model, scenario.accelerator, scenario.precision, 2)
    bt = LAB_BLOCK_TOKENS
    return text + (f"Tensor parallelism over two GPUs gives {per_gpu[tp2] / per_gpu[two]:.2f}× the capacity per GPU "
                   f"of two replicas, over four GPUs {per_gpu[tp4] / per_gpu[two]:.2f}×. For it: a TP = 2 replica "
                   "reads its weights from two GPUs at once and keeps half of them per GPU, so its KV pool holds "
                   f"{blocks_tp2 * bt:,} tokens against 2 × {blocks_tp1 * bt:,} = {2 * blocks_tp1 * bt:,} for two "
                   "single-GPU replicas; against it: every layer's all-reduces add to each step.")


def capacity_takeaway(capacity: Capacity) -> str:
    """Section 4's takeaway: cost follows capacity per GPU; the best deployment against replicas at B = 1."""
    best = capacity.best()
    b1 = _index(capacity, replicas=2, tp=1, batching=False)
    usd = capacity.requests_per_usd
    text = f"Cost follows capacity per GPU: “{capacity.deployments[best].label}” serves "
    if b1 is not None and usd[b1] > 0:
        return text + f"{usd[best] / usd[b1]:,.0f} times as many SLO-meeting requests per dollar as replicas that do not batch."
    text += f"{usd[best]:,.0f} SLO-meeting requests per dollar; replicas that do not batch serve none within the SLO"
    return text + ("" if b1 is None or capacity.fits[b1] else f": they {capacity.status(b1)}") + "."


def prefix_conclusion(sweep: PrefixSweep, tpot_s: float) -> str:
    """Section 5: median TTFT with and without the cache at the lowest rate, the rate each serves within
    the SLO, and whether decode steps that read the long prefix for every sequence set the next limit."""
    on_max = sweep.max_rate("on")
    after = min(sweep.rates.index(on_max) + 1 if on_max else 0, len(sweep.rates) - 1)
    text = (f"At {sweep.rates[0]:g} requests/s the median TTFT is {sweep.p50_ttft_s['off'][0] / MS:.0f} ms without "
            f"the cache and {sweep.p50_ttft_s['on'][0] / MS:.0f} ms with it; {sweep.cached_tokens_mean['on'][0]:,.0f} of "
            f"the {sweep.prompt_tokens_mean:,.0f} prompt tokens of a request come from the cache on average. At least "
            f"90 % of the requests meet the SLO up to **{sweep.max_rate('off'):g} requests/s** without caching and "
            f"**{on_max:g} requests/s** with it, among the rates tried. ")
    text += (f"At {sweep.rates[after]:g}/s, the highest rate tried, " if on_max == sweep.rates[-1]
             else f"At the next rate, {sweep.rates[after]:g}/s, ")
    tpot = sweep.p50_tpot_s["on"][after]
    text += f"the cached run's median TPOT is {tpot / MS:.0f} ms against the {tpot_s / MS:.0f} ms target"
    if tpot > tpot_s:
        return text + (": the prefill is gone, but the cache now holds many more sequences, and every decode step "
                       f"reads the {sweep.prefix_tokens:,} cached tokens once for each of them, so the ITL target, "
                       "not the TTFT, ends the batch (attention kernels that read a shared prefix once for all the "
                       "sequences that share it would lift this limit; the library's roofline does not model them).")
    return text + "."


def simulator_error_note(capacity: Capacity, rel_tol: float, sim_err: dict) -> str:
    """The capacities' ranking at the bisection's `rel_tol`, then again with the simulator's own error
    against a live server added (`sim_err`, from `study.validate.capacity_uncertainty`: measured on
    one CPU device, without TP or replicas)."""
    rank = capacity_ranking(capacity, rel_tol)
    if rank is None:
        return "No deployment tried fits: there is no ranking to check."
    with_error = capacity_ranking(capacity, rel_tol + sim_err["rel_error"])
    text = (f"By SLO-meeting requests per dollar, **{rank.sentence()}**"
            + ("" if rank.decided else ": the bisection cannot order them")
            + ". That uncertainty is the bisection's alone, and it compares simulated deployments. The simulator's "
            "own error was measured against a live server only on one CPU device without TP or replicas (the "
            f"[appendix](15_2_3a_validation.ipynb)): its {sim_err['runs']} recorded runs put the simulated step time "
            f"at {sim_err['ratio_min']:.2f} to {sim_err['ratio_max']:.2f} of the measured one, a capacity error of up "
            f"to {sim_err['rel_error']:.0%}")
    text += (", and its sign changes from run to run, so it is no fixed bias that would cancel between two "
             "deployments" if sim_err["sign_changes"] else ", on the same side in every run")
    return text + f". Adding it to each capacity: **{with_error.sentence()}**."


def takeaways(scenario: Scenario, *, slot_use: float, policies: Sweep, long_run: LongPrompt, tails: Sweep,
              capacity: Capacity, system_prompt: PrefixSweep, pools=None, speculation=None, priorities=None) -> str:
    """The lab's takeaways as a Markdown list, one per section. The sweeps' first two labels are
    (static, continuous) in `policies` and (continuous, chunked) in `tails`. pools, speculation,
    priorities: sections 6-8's results (lab.Disaggregation, lab.SpeculativeSweep, lab.PriorityLoad), each
    a line when given."""
    static, cont = policies.labels[:2]
    top = len(policies.rates) - 1
    thr_s = policies.column(static, "throughput_output_tokens_per_s")
    thr_c = policies.column(cont, "throughput_output_tokens_per_s")
    best_c = largest_chunk_within(long_run, scenario.slo.tpot_s) or min(long_run.chunks)
    t_cont, t_chunk = tails.labels[:2]
    ttft_c = tails.column(t_cont, "ttft_s", "p99")
    where = "one GPU" if scenario.tp == 1 else scenario.layout
    lines = [
        f"Continuous batching kept {scenario.accelerator.name}'s throughput growing with the load "
        f"({thr_c[top]:,.0f} output tokens/s at {policies.rates[top]:g}/s) where static batches gave "
        f"{thr_s[top]:,.0f}: a static batch spends {1 - slot_use:.0%} of its slots on padding here.",
        f"An unchunked {long_run.long_tokens:,}-token prefill put a {long_run.others_max_itl_s['unchunked'] / MS:.0f} ms "
        f"gap into every running stream; chunks of {best_c:,} tokens bring it to "
        f"{long_run.others_max_itl_s[f'C={best_c}'] / MS:.0f} ms.",
        f"Within both p99 targets {where} served {tails.max_rate_within(t_cont):g} requests/s with {t_cont} batching "
        f"and {tails.max_rate_within(t_chunk):g} requests/s with {t_chunk} among the rates tried; at {tails.rates[-1]:g}/s "
        f"the p99 TTFT is {ttft_c[-1] / MS:,.0f} ms."]
    if any(capacity.fits):
        best = capacity.best()
        b1 = _index(capacity, replicas=2, tp=1, batching=False)
        line = (f"Per dollar, {capacity.deployments[best].label} served {capacity.requests_per_usd[best]:,.0f} "
                "SLO-meeting requests")
        if b1 is not None:
            line += (f", replicas at B = 1 {capacity.requests_per_usd[b1]:,.0f}: batch first, then add GPUs."
                     if capacity.fits[b1] else f", while replicas at B = 1 serve nothing: they {capacity.status(b1)}.")
        lines.append(line if line.endswith(".") else line + ".")
    else:
        lines.append("Per dollar, no deployment tried fits.")
    lines.append(f"A cached {system_prompt.prefix_tokens:,}-token system prompt raised the rate within the SLO from "
                 f"{system_prompt.max_rate('off'):g} to {system_prompt.max_rate('on'):g} requests/s; the decode steps "
                 "still read it for every sequence.")
    if pools is not None:
        from inferlab.notebook.lab import MIXES, SHARED_LAYOUTS
        split = min((label for label in pools.layouts if label not in SHARED_LAYOUTS),
                    key=lambda label: pools.p99_itl_s[label, MIXES[1]])
        lines.append(f"With long prompts in the mix, separate pools ({split}) kept the p99 ITL at "
                     f"{pools.p99_itl_s[split, MIXES[1]] / MS:.1f} ms against {pools.p99_itl_s[SHARED_LAYOUTS[0], MIXES[1]] / MS:.1f} ms "
                     f"shared and unchunked; the TTFT pays the transfer and the split of the GPUs.")
    if speculation is not None:
        stop = speculation.break_even_batch
        lines.append(f"Speculative decoding made a batch-{speculation.batches[0]} decode {speculation.speedup[0]:.2f}× faster"
                     + (f" and stopped paying by batch {stop}." if stop is not None else
                        f", still {speculation.speedup[-1]:.2f}× at batch {speculation.batches[-1]}."))
    if priorities is not None:
        lines.append(f"Admitting latency-sensitive requests first cut their p99 TTFT from "
                     f"{priorities.p99_ttft_s['FIFO', 'high'] / MS:,.0f} to {priorities.p99_ttft_s['priority', 'high'] / MS:,.0f} ms "
                     "under a queue; their decode steps stay those of the shared batch.")
    return "\n".join(f"- {line}" for line in lines)


__all__ = ["capacity_conclusion", "capacity_ranking", "capacity_takeaway", "largest_chunk_within", "littles_law",
           "long_prompt_conclusion", "policy_conclusion", "prefix_conclusion", "simulator_error_note",
           "tails_conclusion", "takeaways", "disaggregation_conclusion", "disaggregation_table",
           "speculative_conclusion", "speculative_table", "priority_conclusion", "priority_table"]


def disaggregation_conclusion(d, sizing) -> str:
    """Section 6: the p99 ITL of the running requests with the long-prompt mix, shared against split
    pools; what the transfer adds to TTFT; which split the sizing picked."""
    from inferlab.notebook.lab import MIXES, SHARED_LAYOUTS
    short, mix = MIXES
    unch, chunk = SHARED_LAYOUTS
    splits = [label for label in d.layouts if label not in SHARED_LAYOUTS]
    best = min(splits, key=lambda label: d.p99_itl_s[label, mix])
    worst_ttft = max(splits, key=lambda label: d.p99_ttft_s[label, mix])
    text = (f"With {d.long_share:.0%} of the prompts {d.long_tokens:,} tokens long, the p99 ITL of the running requests "
            f"on {d.replicas} shared replicas goes from {d.p99_itl_s[unch, short] / MS:.1f} to "
            f"{d.p99_itl_s[unch, mix] / MS:.1f} ms unchunked and from {d.p99_itl_s[chunk, short] / MS:.1f} to "
            f"{d.p99_itl_s[chunk, mix] / MS:.1f} ms with 512-token chunks; split into pools ({best}) it is "
            f"{d.p99_itl_s[best, short] / MS:.1f} and {d.p99_itl_s[best, mix] / MS:.1f} ms: the decode pool never "
            f"runs a prefill. The price is on TTFT: each cache crosses a {d.link_gbps:g} Gbit/s link, "
            f"{d.transfer_s / MS:.1f} ms on average for this mix, and the pools split the GPUs, so the p99 TTFT "
            f"of {worst_ttft} is {d.p99_ttft_s[worst_ttft, mix] / MS:,.0f} ms against "
            f"{d.p99_ttft_s[chunk, mix] / MS:,.0f} ms shared with chunks.")
    if sizing.best is None:
        return text + (f" No split of up to {max(sum(k) for k in sizing.attainment)} replicas kept "
                       f"{sizing.attainment_target:.0%} of the requests within the SLO at {sizing.rate_per_s:g}/s.")
    p, dd = sizing.best
    return text + (f" Sized for the SLO at {sizing.rate_per_s:g} requests/s, the fewest replicas that keep "
                   f"{sizing.attainment_target:.0%} of this mix within it are {p + dd}: {p} prefill and {dd} decode "
                   f"({sizing.attainment[p, dd]:.0%} within the SLO).")


def speculative_conclusion(s) -> str:
    """Section 7: where speculative decoding pays (small batch) and where it stops (break-even batch)."""
    first, last = s.speedup[0], s.speedup[-1]
    text = (f"With k = {s.k} draft tokens accepted with probability {s.acceptance:g} each, a verification yields "
            f"{s.tokens_per_verification:.2f} tokens. At batch {s.batches[0]} a decode step is bound by reading the "
            f"weights, so verifying {s.k + 1} tokens costs little more than one: decoding is {first:.2f}× faster. ")
    stop = s.break_even_batch
    if stop is None:
        text += (f"Up to batch {s.batches[-1]} at {s.context_tokens}-token contexts it still pays ({last:.2f}×): "
                 "the step stays memory-bound.")
    else:
        text += (f"By batch {stop} at {s.context_tokens}-token contexts the step is compute-bound, {s.k + 1} tokens "
                 f"cost about {s.k + 1} times one, and speculation stops paying ({s.speedup[s.batches.index(stop)]:.2f}×).")
    if s.rates:
        lo, hi = 0, len(s.rates) - 1
        text += (f" Under traffic, the median TPOT goes from {s.p50_tpot_s['plain'][lo] / MS:.1f} to "
                 f"{s.p50_tpot_s['speculative'][lo] / MS:.1f} ms at {s.rates[lo]:g} requests/s and from "
                 f"{s.p50_tpot_s['plain'][hi] / MS:.1f} to {s.p50_tpot_s['speculative'][hi] / MS:.1f} ms at "
                 f"{s.rates[hi]:g}/s.")
    return text


def priority_conclusion(p) -> str:
    """Section 8: the latency-sensitive class's p99 TTFT and TPOT, FIFO against priority order; the
    TPOT's change named by `size_of_change`."""
    fifo, prio = p.p99_tpot_s['FIFO', 'high'], p.p99_tpot_s['priority', 'high']
    ttft_word = size_of_change(p.p99_ttft_s['priority', 'high'] / p.p99_ttft_s['FIFO', 'high'] - 1)
    return (f"At {p.rate_per_s:g} requests/s with {p.high_share:.0%} of them latency-sensitive, their p99 TTFT is "
            f"{p.p99_ttft_s['FIFO', 'high'] / MS:,.0f} ms first come, first served and "
            f"{p.p99_ttft_s['priority', 'high'] / MS:,.0f} ms when they are admitted first (a **{ttft_word}** change); "
            f"the others' goes from {p.p99_ttft_s['FIFO', 'normal'] / MS:,.0f} to "
            f"{p.p99_ttft_s['priority', 'normal'] / MS:,.0f} ms. Their p99 TPOT changes by a "
            f"**{size_of_change(prio / fifo - 1)}** amount ({fifo / MS:.1f} → {prio / MS:.1f} ms; {thresholds_text()}): "
            "once admitted they decode in the same batch as everyone else, so the queue decides their wait, "
            "not their steps.")


def _md_table(headers, rows) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows])


def disaggregation_table(d) -> str:
    """Section 6's table: p99 ITL and p99 TTFT (ms) per layout, without and with the long prompts."""
    from inferlab.notebook.lab import MIXES
    return _md_table(["layout", *[f"p99 ITL, {m} (ms)" for m in MIXES], *[f"p99 TTFT, {m} (ms)" for m in MIXES]],
                     [[label, *[f"{d.p99_itl_s[label, m] / MS:.1f}" for m in MIXES],
                       *[f"{d.p99_ttft_s[label, m] / MS:,.0f}" for m in MIXES]] for label in d.layouts])


def speculative_table(s) -> str:
    """Section 7's table: the speed-up of a decode step per batch."""
    return _md_table(["batch", *[str(b) for b in s.batches]], [["speed-up", *[f"{g:.2f}×" for g in s.speedup]]])


def priority_table(p) -> str:
    """Section 8's table: p99 TTFT per class and p99 TPOT of the latency-sensitive class, per policy."""
    return _md_table(["policy", "p99 TTFT, high (ms)", "p99 TTFT, normal (ms)", "p99 TPOT, high (ms)"],
                     [[pol, f"{p.p99_ttft_s[pol, 'high'] / MS:,.0f}", f"{p.p99_ttft_s[pol, 'normal'] / MS:,.0f}",
                       f"{p.p99_tpot_s[pol, 'high'] / MS:.1f}"] for pol in ("FIFO", "priority")])

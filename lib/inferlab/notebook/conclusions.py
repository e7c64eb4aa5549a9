"""The sentences a chapter notebook draws from its computed values, where the wording depends on
the numbers (which side of the ridge, whether the batch fits, which speed-up is larger). Each
function takes the values the notebook computed and returns the sentence; the notebook shows it
with `Markdown(...)` or `worked_examples.takeaway(...)`, so no cell chooses words with if/else.

    conclusions.setup_note(book=False, fit="")   -> "Not the book's setup: no book markers on the figures."
    conclusions.side_of_ridge(128, 101.0, 295.0) -> "At $S$ = 128 the MLP sits at 101 FLOP/byte, left of the ridge (295): ..."
"""
from __future__ import annotations

from inferlab.base.qualitative_words import size_of_change, thresholds_text


def _side(intensity: float, ridge: float) -> str:
    """'right' of the ridge (compute-bound) when intensity > ridge, else 'left' (memory-bound)."""
    return "right" if intensity > ridge else "left"


def _regime(intensity: float, ridge: float) -> str:
    return "compute" if intensity > ridge else "memory"


def setup_note(book: bool, fit: str = "") -> str:
    """The What-if cell's last sentences: why nothing fits (`fit`, from reader.fit_message; '' when
    the scenario fits), and whether the figures carry the book's markers (`book`)."""
    parts = [f"**Does not fit:** {fit}"] if fit else []
    parts.append("This is the book's worked example." if book else
                 "Not the book's setup: no book markers on the figures.")
    return " ".join(parts)


def mlp_regime_takeaway(tokens: int, intensity: float, ridge: float, ceiling: float) -> str:
    """15.1.1: the MLP's intensity with `tokens` in flight against the ridge, and the ceiling
    2df/(b_a(d+f)) no prompt passes."""
    side = "above" if intensity > ridge else "below"
    return (f"{tokens:,} tokens in flight give the MLP {intensity:.0f} FLOP/byte, {side} the ridge point of "
            f"{ridge:.0f}: {_regime(intensity, ridge)}-bound. No prompt takes it past "
            f"2df/(b_a(d+f)) = {ceiling:,.0f} FLOP/byte.")


def side_of_ridge(prompt_len: int, intensity: float, ridge: float) -> str:
    """15.1.1: where a short prompt's MLP sits against the ridge."""
    return (f"At $S$ = {prompt_len:,} the MLP sits at {intensity:.0f} FLOP/byte, {_side(intensity, ridge)} of the "
            f"ridge ({ridge:.0f}): \"compute-bound prefill\" is a statement about prompts of several hundred "
            "tokens and more.")


def batch_to_ridge(mlp_ridge_batch: float, batch_fit: int, layer_intensity: float, ridge: float) -> str:
    """15.1.2: the batch at which the MLP would meet the ridge, against the `batch_fit` sequences that
    fit (0: none fits), and the whole layer's intensity at that batch."""
    if not batch_fit:
        fits = ""
    elif mlp_ridge_batch > batch_fit:
        fits = f", {mlp_ridge_batch / batch_fit:.1f}× the {batch_fit} sequences that fit"
    else:
        fits = f", within the {batch_fit} sequences that fit"
    return (f"The MLP would meet the ridge near $B \\approx$ {mlp_ridge_batch:,.0f}{fits}; the whole layer, whose "
            f"attention bytes grow with $B$ too, runs at {layer_intensity:.0f} FLOP/byte at $B$ = {max(batch_fit, 1)}, "
            f"{layer_intensity / ridge:.0%} of the ridge.")


def max_batch_takeaway(context_len: int, accelerator_name: str, max_batch: int, kv_bytes_per_seq: float) -> str:
    """15.1.2: what caps the batch (`max_batch` = 0: not one sequence fits)."""
    if not max_batch:
        return f"Not one sequence of {context_len:,} tokens fits beside the weights on the {accelerator_name}."
    return (f"At a context of {context_len:,} tokens the {accelerator_name} holds at most {max_batch} sequences "
            f"beside the weights: each brings {kv_bytes_per_seq / 1e9:.2f} GB of KV cache, so the cache, not "
            "compute, caps the batch.")


def tp_speedups(tps, ttft_s, itl_s, allreduce_latency_s: float) -> str:
    """15.2.1: which K gives the lowest TTFT and ITL, the per-GPU efficiency of ITL's speed-up, and the
    book's "TP does not reduce ITL proportionally" weighed against the two speed-ups at the largest K.
    `tps`: the TP degrees (1 first); `ttft_s`, `itl_s`: the times at each."""
    tps, ttft_s, itl_s = list(tps), list(ttft_s), list(itl_s)
    if len(tps) < 2 or tps[0] != 1 or not len(tps) == len(ttft_s) == len(itl_s):
        raise ValueError(f"tps must start at 1 and have a time per degree; got tps={tps}")
    best_ttft, best_itl = tps[ttft_s.index(min(ttft_s))], tps[itl_s.index(min(itl_s))]
    eff = [itl_s[0] / t / k for k, t in zip(tps, itl_s)]
    itl_up, ttft_up = itl_s[0] / itl_s[-1], ttft_s[0] / ttft_s[-1]
    both = ": the largest $K$ is fastest on both counts. " if best_ttft == best_itl == tps[-1] else ". "
    why = (": prefill's all-reduces carry the activations of all its tokens over the link, decode's those of one "
           "token per sequence." if itl_up > ttft_up else
           f": the all-reduces' start-up latency ({allreduce_latency_s * 1e6:g} µs each here) weighs more on the "
           "shorter decode step.")
    return (f"Here the lowest TTFT is at $K$ = {best_ttft} and the lowest ITL at $K$ = {best_itl}{both}"
            f"What falls with $K$ is the speed-up per GPU: ITL's is {eff[1]:.0%} of ideal at $K$ = {tps[1]} and "
            f"{eff[-1]:.0%} at $K$ = {tps[-1]}. So the argument for a small $K$ is efficiency (GPU-seconds per "
            "token), not latency.\n\n"
            "> **Note on the book's tensor-parallel claim.** The book says tensor parallelism reduces TTFT but not "
            f"ITL proportionally. By the bandwidth model ITL speeds up {itl_s[0] / itl_s[1]:.2f}× at $K$ = {tps[1]} "
            f"and {itl_up:.2f}× at $K$ = {tps[-1]} (TTFT: {ttft_s[0] / ttft_s[1]:.2f}× and {ttft_up:.2f}×): each "
            f"device reads $1/K$ of the weights, so at $K$ = {tps[-1]} decode's speed-up is {itl_up / ttft_up:.0%} "
            f"of prefill's, a **{size_of_change(itl_up / ttft_up - 1)}** difference ({thresholds_text()}){why}")


def gqa_batch_limit(gqa_already: bool, gqa_max_batch: int, mlp_ridge_batch: float) -> str:
    """15.2.2: how far the GQA variant's batch runs and whether its MLP reaches the ridge first
    (`gqa_already`: the model has at most 8 KV heads, so the variant is the model itself)."""
    already = " (this model already has at most 8 KV heads)" if gqa_already else ""
    if gqa_max_batch >= round(mlp_ridge_batch):
        rest = (f" and flattens at the end for a second reason: near $B \\approx$ {mlp_ridge_batch:,.0f} the MLP's "
                "weight matrices cross the ridge and become compute-bound, so the step time grows with $B$ even "
                "without more cache: throughput meets the compute roof.")
    else:
        rest = (f", short of $B \\approx$ {mlp_ridge_batch:,.0f} where the MLP's weight matrices would cross the "
                "ridge: memory stops the batch before the compute roof does.")
    return f"The GQA curve{already} runs to $B$ = {gqa_max_batch}{rest}"


def fits_on_paper(free_bytes: float) -> str:
    """'fits' when the datasheet's memory leaves `free_bytes` >= 0 beside weights and cache, else 'does not fit'."""
    return "fits" if free_bytes >= 0 else "does not fit"


def book_convention(book: bool, book_params: float, book_peak_tflops: float, book_ms: float, ours_ms: float) -> str:
    """15.1.1: on the book's setup, the book's own P (the nominal size) and peak for 2PS/peak, the ms
    they give (erratum 15.1.1-m) and how far that is from this page's `ours_ms`; '' otherwise."""
    if not book:
        return ""
    return (f"The book counts $P$ = {book_params / 1e9:.1f}e9 (the nominal size in the name) at "
            f"{book_peak_tflops:g} TFLOP/s; with those inputs $2PS$/peak is {book_ms:.1f} ms, the value erratum "
            f"15.1.1-m quotes. The two conventions differ by {abs(book_ms / ours_ms - 1):.1%}.")


def book_crosses(ratios: str) -> str:
    """15.1.1: how far the book's TTFT crosses sit above our curve (`ratios` from reader.book_ratios;
    '' off the book's setup, and then no sentence)."""
    if not ratios:
        return ""
    return (f"The book's crosses sit above our curve by {ratios}: the factor 6 against 2 of "
            "[Eq. (prefill-flops)](#eq-prefill-flops), and at long prompts attention partly closes the gap.")


def memory_wall_bullet(model_name: str, accelerator_name: str, context_len: int, memory_gb: float,
                       max_batch: int, int8_max_batch: int, gqa_max_batch: int | None, n_kv_heads: int,
                       fit: str = "") -> str:
    """15.1.2's takeaway on the memory wall: the sequences that fit beside the weights, with an int8
    cache and (`gqa_max_batch`, None when the model has at most 8 KV heads) with eight KV heads; or,
    when `fit` says why, that the model does not fit."""
    if fit:
        return f"- {model_name} does not fit on one {accelerator_name}: {fit}."
    gqa = (f", eight KV heads instead of {n_kv_heads} allow {gqa_max_batch}" if gqa_max_batch is not None else "")
    return (f"- At {context_len:,} tokens of context, {memory_gb:.0f} GB hold {max_batch} sequences beside the "
            f"weights; an int8 cache allows {int8_max_batch}{gqa}.")


def or_not_fitting(fit: str, text: str, prefix: str = "Nothing to batch: ", suffix: str = "") -> str:
    """`text` when the scenario fits (`fit` == '', from reader.fit_message), else `prefix`, the reason
    and `suffix`: a page whose model does not fit says why instead of numbers about a batch of none."""
    return f"{prefix}{fit}{suffix}" if fit else text


def headroom_paragraph(fit, model_label: str, accelerator_label: str, utilisation: float) -> str:
    """The senior question of 15.2.2 answered from a `memory_headroom.headroom_fit`: weights and KV cache
    per GPU, whether they fit the datasheet's memory and the memory the device reports, the headroom
    below which a server starts the batch, and the largest batch at vLLM-style `utilisation` (the
    fraction of the reported memory a server may fill)."""
    from inferlab.base.units import GB
    free_ds, free_rep = fit.free_bytes("datasheet"), fit.free_bytes("reported")
    return (
        f"{model_label}, $B$ = {fit.batch}, $S$ = {fit.seq_len:,}, TP = {fit.tp}, per {accelerator_label}: "
        f"weights {fit.weight_bytes / GB:.2f} GB, KV cache {fit.kv_bytes / GB:.2f} GB, together "
        f"{fit.used_bytes / GB:.2f} GB. On paper it " + fits_on_paper(free_ds)
        + f": {free_ds / GB:.2f} GB left at the datasheet's {fit.datasheet_bytes / GB:.0f} GB (the book's convention), "
        f"{free_rep / GB:.2f} GB at the {fit.reported_bytes / 2**20:,.0f} MiB the device reports. Whether a server "
        "starts it depends on one number, the headroom it keeps for activations, the CUDA context and the "
        f"allocator: **it starts the batch of {fit.batch} when that headroom is at most {free_rep / GB:.2f} GB per GPU**, "
        f"and not otherwise. vLLM's default (`gpu_memory_utilization` = {utilisation:g}) keeps "
        f"{(1 - utilisation) * fit.reported_bytes / GB:.2f} GB, more than that, so there the "
        f"largest batch is {fit.max_batch_at_utilisation(utilisation)}")


# The chapter on a real GPU (inferlab.notebook.measured_plots): each sentence takes the values a notebook
# computed, and says only that no measured kernels exist where `reason` (measured_latency.measured_reason)
# is not empty.

def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.1f} ms" if seconds >= 0.01 else f"{seconds * 1e3:.2f} ms"


def measured_source(model, accelerator, profile, reason: str, measured) -> str:
    """15.x "The same on a real GPU": what the measured times are (the `measured` Deployment's
    efficiency), and whether a profiled model has `model`'s matrix shapes (`profile`, from
    measured_latency.profile_for; None: the fitted curve alone); or `reason` when there is nothing measured."""
    if reason:
        return reason
    label = measured.efficiency_model.label_on(accelerator)
    if profile:
        return (f"The measured times below are the {label}. The profiled model {profile} has exactly "
                f"{model.name}'s matrix shapes ($d$ = {model.d_model:,}, {model.n_heads} query and {model.n_kv_heads} "
                f"KV heads of {model.head_dim}, $f$ = {model.d_ff:,}): its rows are this model's own kernels, "
                "measured, and the figures show them beside the fitted curve.")
    return (f"The measured times below are the {label}. No profiled model has {model.name}'s matrix shapes, so "
            "they come from the fitted curve alone, asked about shapes it was not fitted on (its error on a model "
            "left out of the fit is in `docs/kernels.md`).")


def not_measured(reason: str) -> str:
    """The short form of `reason` for the sentences after the first: ideal only."""
    return "Ideal roofline only: no measured kernels for this scenario (above)." if reason else ""


def kernel_efficiency_takeaway(point, points) -> str:
    """15.1.1: one product's efficiency (a measured_latency.KernelPoint) and the range over `points`
    (the roofline figure's products and token counts)."""
    if point.measured_s is None:
        return "No measured kernels here: every product is assumed to run on its roof."
    eff = [p.efficiency for p in points if p.efficiency is not None]
    worst = min((p for p in points if p.efficiency is not None), key=lambda p: p.efficiency)
    return (f"Measured, the {point.label} over {point.tokens:,} tokens runs at {point.efficiency:.0%} of what the "
            f"roofline allows; across the layer's four products and the figure's token counts the kernels "
            f"reach {min(eff):.0%} to {max(eff):.0%} of it, the least for the {worst.label} at T = {worst.tokens:,}"
            + (": a time computed at 100% of the roof is a lower bound." if max(eff) < 1 else
               "; where a point passes 100%, the fitted curve overshoots the roof it was fitted under."))


def measured_times(m, setting: str) -> str:
    """A measured_latency.Measured (TTFT or ITL) in one sentence: ideal, measured, their ratio, and the
    profiled rows summed against the fitted curve where there are (`setting`: 'at $S$ = 2,048')."""
    if m.measured_s is None:
        return not_measured(m.reason)
    text = (f"{setting} the measured kernels take {_ms(m.measured_s)} against the ideal {_ms(m.ideal_s)}: "
            f"{m.ratio:.2f}× the roofline's {m.what}.")
    if m.profiled_s is not None:
        off = m.measured_s / m.profiled_s - 1
        text += (f" Summed from the profiled rows instead of the curve: {_ms(m.profiled_s)}, so for this model the "
                 f"fitted curve is {abs(off):.1%} {'long' if off > 0 else 'short'} there "
                 f"(**{size_of_change(off)}**; {thresholds_text()}).")
    return text


def measured_limits(reason: str, attention_share: float | None, where: str, extra: str = "") -> str:
    """The paragraph "Where the data stop" under a measured result: attention on the ideal roofline (its
    share of the measured kernel time `where`), 16-bit products of 1-4,096 tokens, kernel time only."""
    if reason:
        return not_measured(reason)
    share = f"{attention_share:.0%}" if attention_share >= 0.005 else "less than 1%"
    return (f"**Where the data stop.** No attention kernels were published: QK$^\\top$ and PV stay on the ideal "
            f"roofline, {share} of the measured kernel time {where}, a part no measurement covers. "
            "The products were profiled in fp16 (bf16 runs at the same peak) at 1 to 4,096 tokens; beyond, the "
            "curve follows its compute-bound asymptote. And the times are kernel time only: no launch gaps "
            "between kernels, no CUDA graphs, no scheduler." + (f" {extra}" if extra else ""))


def decode_bandwidth_takeaway(nbytes: float, step, datasheet_bytes_per_s: float) -> str:
    """15.1.2: the bandwidth a B = 1 decode step gets (`step`, a measured_latency.Measured at B = 1)."""
    if step.measured_s is None:
        return f"Ideal roofline only: the step reads its {nbytes / 1e9:.1f} GB at the datasheet bandwidth."
    t = step.profiled_s if step.profiled_s is not None else step.measured_s
    how = "profiled kernels" if step.profiled_s is not None else "fitted kernels"
    return (f"One decode step moves {nbytes / 1e9:.1f} GB in {_ms(t)} on the {how}: "
            f"{nbytes / t / datasheet_bytes_per_s:.0%} of the datasheet bandwidth, so ITL at $B$ = 1 is "
            f"{t / step.ideal_s:.2f}× the ideal {_ms(step.ideal_s)}. Bytes over bandwidth stays the right model; "
            "the bandwidth in it is the one the kernels reach.")


def layer_profile_note(profiled_s, fitted_s, profile) -> str:
    """15.1.2: one layer's kernels at B = 1 summed from the profiled rows against the fitted curve."""
    if profiled_s is None or fitted_s is None:
        return ""
    off = fitted_s / profiled_s - 1
    return (f"One layer's kernels at $B$ = 1 (no attention) take {profiled_s * 1e6:.0f} µs in the {profile} rows and "
            f"{fitted_s * 1e6:.0f} µs on the fitted curve, {abs(off):.0%} {'long' if off > 0 else 'short'} "
            f"(**{size_of_change(off)}**; {thresholds_text()}): the curve is fitted on the three profiled models at "
            f"once, and this model's one-token kernels run {'faster' if off > 0 else 'slower'} than it says.")


def measured_step_batch(first, last, batch: int, attention_share: float | None) -> str:
    """15.1.2: the measured step against the ideal at B = 1 (`first`) and at `batch` (`last`), both
    measured_latency.Measured, and attention's share of the measured step there."""
    if last.measured_s is None:
        return not_measured(last.reason)
    return (f"At $B$ = 1 the measured step is {first.ratio:.2f}× the ideal, at $B$ = {batch} {last.ratio:.2f}×: the "
            f"gap narrows as the batch grows because attention, which reads the caches and grows with $B$, is on "
            f"the ideal roofline in both ({attention_share:.0%} of the measured step at $B$ = {batch}).")


def allreduce_source(accelerator, latency_s: float, default_latency_s: float, bus_bytes_per_s: float) -> str:
    """15.2.1: where the all-reduce's start-up latency (`latency_s`, the What-if cell's; the accelerator's
    is `default_latency_s`) and bandwidth (`bus_bytes_per_s`) come from for `accelerator`."""
    if accelerator.allreduce_latency_s is not None:
        text = (f"On the {accelerator.name} each all-reduce moves its bytes at {bus_bytes_per_s / 1e9:,.0f} GB/s and "
                f"starts in {default_latency_s * 1e6:.1f} µs: the ring formula fitted on the all-reduces measured "
                "on an NVSwitch node of these GPUs (Vidur's published profiles), not the datasheet's link bandwidth.")
    else:
        text = (f"The {accelerator.name} has no measured all-reduce: each one is taken to start in an assumed "
                f"{default_latency_s * 1e6:g} µs (the range the inference calculators use) and to move its bytes at "
                f"the datasheet's {bus_bytes_per_s / 1e9:,.0f} GB/s link bandwidth.")
    if latency_s != default_latency_s:
        text += (f" The \"What if?\" cell sets the start-up latency to {latency_s * 1e6:g} µs instead"
                 + (", the book's idealisation." if latency_s == 0 else "."))
    return text


def measured_latencies(ttft, itl, overhead_label: str) -> str:
    """15.2.1: TTFT and ITL ideal, measured and measured plus a step overhead (measured_latency.Measured)."""
    if ttft.measured_s is None:
        return not_measured(ttft.reason)
    worse = "TTFT" if ttft.ratio > itl.ratio else "ITL"
    why = ("the matrix units reach a smaller share of their peak than the memory of its bandwidth" if worse == "TTFT"
           else "the memory reaches a smaller share of its bandwidth than the matrix units of their peak")
    return (f"TTFT: {_ms(ttft.ideal_s)} ideal, {_ms(ttft.measured_s)} on the measured kernels ({ttft.ratio:.2f}×), "
            f"{_ms(ttft.overhead_s)} with the step overhead. ITL: {_ms(itl.ideal_s)}, {_ms(itl.measured_s)} "
            f"({itl.ratio:.2f}×) and {_ms(itl.overhead_s)}."
            + (f" The profiled rows summed in the curve's place give {_ms(ttft.profiled_s)} and {_ms(itl.profiled_s)}."
               if ttft.profiled_s is not None and itl.profiled_s is not None else "")
            + f" Measured, {worse} loses more: {why}. The step "
            f"overhead, {overhead_label}, is {(itl.overhead_s - itl.measured_s) / itl.overhead_s:.0%} of the ITL and "
            f"{(ttft.overhead_s - ttft.measured_s) / ttft.overhead_s:.0%} of the TTFT: a per-step cost weighs on "
            "the short step.")


def measured_tp(tp) -> str:
    """15.2.1: ITL's speed-up at the largest K, ideal and measured (a measured_latency.TensorParallel)."""
    if tp.itl_measured_s is None:
        return not_measured(tp.reason)
    k = tp.tps[-1]
    ideal_up = tp.itl_ideal_s[0] / tp.itl_ideal_s[-1]
    meas_up = tp.itl_measured_s[0] / tp.itl_measured_s[-1]
    ttft_up = tp.ttft_measured_s[0] / tp.ttft_measured_s[-1]
    return (f"At $K$ = {k} the measured ITL is {meas_up:.2f}× faster than on one GPU, against {ideal_up:.2f}× on the "
            f"ideal kernels, and the measured TTFT {ttft_up:.2f}× faster: each GPU's kernels shrink with $K$, the "
            f"all-reduces do not, and they take {tp.allreduce_share[-1]:.0%} of the measured decode step at $K$ = {k}. "
            + ("Measured, the case for a small $K$ is stronger than on the roofline." if meas_up < ideal_up else
               "Measured, a large $K$ pays off at least as well as on the roofline."))


def measured_batching(b) -> str:
    """15.2.2: throughput and cost per token at B = 1 and at the largest batch, ideal and measured, and the
    batch at which attention takes half a step (a measured_latency.Batching)."""
    if b.tokens_per_s_measured is None:
        return not_measured(b.reason)
    (t1i, tmi), (t1m, tmm) = b.tokens_per_s_ideal, b.tokens_per_s_measured
    (c1i, cmi), (c1m, cmm) = b.usd_per_1k_ideal, b.usd_per_1k_measured
    top = (f"at the largest batch that fits ($B$ = {b.max_batch}) {tmm:,.0f} against {tmi:,.0f} ({tmm / tmi:.0%})"
           if b.max_batch else "and no batch fits beside the weights")
    cross = (f"A step spends as long in attention (reading the caches) as in everything else from $B$ = "
             f"{b.crossover_measured} on the measured kernels, against {b.crossover_ideal} on the ideal roofline "
             f"(about $B^*$ = {b.b_star:.1f}, as it should be): the weights take longer to read, so more sequences "
             "share each read before the caches dominate."
             if b.crossover_measured and b.crossover_ideal else "")
    prof = b.tokens_per_s_profiled
    profiled = (f"; the profiled rows summed give {prof[0]:,.0f}" if prof and prof[0] is not None else "")
    cost = (f"A thousand tokens cost US\\${c1m:.4f} at $B$ = 1 and US\\${cmm:.5f} at $B$ = {b.max_batch} measured, "
            f"against US\\${c1i:.4f} and US\\${cmi:.5f} ideal: {c1m / c1i - 1:.0%} and {cmm / cmi - 1:.0%} more."
            if b.max_batch else "")
    return " ".join(x for x in (f"Measured, throughput is {t1m:,.0f} tokens/s at $B$ = 1 against {t1i:,.0f} ideal "
                                f"({t1m / t1i:.0%}{profiled}), {top}.", cross, cost) if x)


def measured_ttft_takeaway(m, prompt_len: int) -> str:
    """15.1.1: the measured TTFT against the ideal at `prompt_len` (a measured_latency.Measured)."""
    if m.measured_s is None:
        return "No measured kernels here: the TTFT above is the roofline's, a lower bound on any real GPU."
    return (f"Measured, a {prompt_len:,}-token prefill takes {_ms(m.measured_s)}, {m.ratio:.2f}× its roofline time: "
            f"the pass runs at {1 / m.ratio:.0%} of its roofline speed (for a compute-bound pass, about its MFU). "
            "Plan TTFT at that share of the peak, not at 100%.")


def measured_latency_takeaway(ttft, itl, accelerator_name: str) -> str:
    """15.2.1: how far the roofline's TTFT and ITL are from the measured ones, step overhead included
    (measured_latency.Measured, each with its overhead_s)."""
    if ttft.measured_s is None:
        return "No measured kernels here: both latencies are the roofline's, lower bounds on any real GPU."
    return (f"Measured on the {accelerator_name}, TTFT is {ttft.ratio:.2f}× and ITL {itl.ratio:.2f}× the roofline's, "
            f"and an engine's step overhead brings them to {ttft.overhead_s / ttft.ideal_s:.2f}× and "
            f"{itl.overhead_s / itl.ideal_s:.2f}×: a latency target met on the roofline is missed by that much.")


def measured_batching_takeaway(b) -> str:
    """15.2.2: what the measured kernels do to the batch where the caches take over and to the cost per
    token (a measured_latency.Batching)."""
    if b.tokens_per_s_measured is None:
        return "No measured kernels here: the throughput and cost above are the roofline's, best cases on any real GPU."
    (c1i, cmi), (c1m, cmm) = b.usd_per_1k_ideal, b.usd_per_1k_measured
    moved = (f"the caches take over the step at $B$ = {b.crossover_measured} instead of {b.crossover_ideal}, "
             if b.crossover_measured and b.crossover_ideal else "")
    gain_i, gain_m = c1i / cmi, c1m / cmm
    pays = ("more than on the roofline, since the weight read it shares is longer" if gain_m > gain_i else
            "less than on the roofline")
    return (f"On real kernels {moved}and each token costs {c1m / c1i - 1:.0%} more at $B$ = 1 and "
            f"{cmm / cmi - 1:.0%} more at $B$ = {max(b.max_batch, 1)}: batching is still the cost lever "
            f"({gain_m:.1f}× cheaper tokens against {gain_i:.1f}× ideal), and it pays {pays}.")


def kv_cache_note(model, tokens: int, precision) -> str:
    """'' for a full-attention model with per-head K and V (the chapter's KV equations hold exactly);
    otherwise one or two sentences on what its cache holds instead (MLA's latent, a window, a chunk),
    with the library's bytes for one sequence of `tokens` tokens beside the equation's count."""
    from inferlab.core.memory import kv_cache_bytes, kv_cache_rule_bytes
    from inferlab.base.units import GB
    if model.full_attention_only:
        return ""
    held = kv_cache_bytes(model, tokens, 1, precision, beyond_context=True)
    equation = kv_cache_rule_bytes(model, tokens, 1, precision)
    parts = []
    if model.is_mla:
        parts.append(f"{model.name} uses multi-head latent attention: each layer caches one "
                     f"{model.kv_lora_rank}-wide latent and a {model.qk_rope_head_dim}-wide rotary key per token, "
                     f"shared by all {model.n_heads} heads, instead of {model.n_heads} keys and values")
    kinds = model.layer_kinds
    for kind, span in (("sliding", model.sliding_window), ("chunked", model.attention_chunk)):
        n = kinds.count(kind)
        if n:
            what = "a sliding window of the last" if kind == "sliding" else "chunks of"
            parts.append(f"{n} of its {model.n_layers} layers attend to {what} {span:,} tokens and keep at most "
                         "that many keys")
    return (("; ".join(parts)) + f". One sequence of {tokens:,} tokens holds {held / GB:.3f} GB "
            f"(the library's attention account), where the equation, which counts per-head K and V of every "
            f"token in every layer, gives {equation / GB:.3f} GB.")


def scenario_line(section: str, model, accelerator, precision, book: bool, fit: str = "", **page) -> str:
    """The What-if cell's scenario sentence of `section` (15.1.1, 15.1.2, 15.2.1, 15.2.2) with its page
    settings (`prompt`, `batch`, `context`, `usd_per_gpu_hour`), ending in `setup_note`."""
    from inferlab.base.units import GB, TFLOP
    m, g, p = model, accelerator, precision
    if section == "15.1.1":
        text = (f"**Scenario:** {m.name} ({m.n_params / 1e9:.2f} B parameters, {m.n_layers} layers, "
                f"$d$ = {m.d_model:,}, {m.attention_kind} with {m.n_kv_heads} KV heads, context window "
                f"{m.max_context_tokens:,} tokens) on one {g.name} ({g.peak(p.compute_dtype) / TFLOP:.1f} "
                f"TFLOP/s dense {p.compute_dtype}, {g.hbm_bytes_per_s / 1e12:.2f} TB/s, "
                f"{g.memory_bytes / GB:.0f} GB); prefill of {page['batch']} × {page['prompt']:,} tokens. ")
    elif section == "15.1.2":
        text = (f"**Scenario:** {m.name} on one {g.name} ({g.hbm_bytes_per_s / 1e12:.2f} TB/s, "
                f"{g.memory_bytes / GB:.0f} GB), context {page['context']:,}, batch {page['batch']}; weights {p.weights}, "
                f"KV cache {p.kv}. ")
    elif section == "15.2.1":
        text = (f"**Scenario:** {m.name} on one {g.name}, prompt {page['prompt']:,}, batch {page['batch']}; weights "
                f"{p.weights}, KV cache {p.kv}. ")
    elif section == "15.2.2":
        text = (f"**Scenario:** {m.name} on one {g.name}, context {page['context']:,}; weights {p.weights}, "
                f"KV cache {p.kv}; ${page['usd_per_gpu_hour']:g} per GPU-hour. ")
    else:
        raise ValueError(f"section must be one of 15.1.1, 15.1.2, 15.2.1, 15.2.2; got {section!r}")
    return text + setup_note(book, fit)

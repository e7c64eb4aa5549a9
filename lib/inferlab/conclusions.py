"""The sentences a chapter notebook draws from its computed values, where the wording depends on
the numbers (which side of the ridge, whether the batch fits, which speed-up is larger). Each
function takes the values the notebook computed and returns the sentence; the notebook shows it
with `Markdown(...)` or `worked_examples.takeaway(...)`, so no cell chooses words with if/else.

    conclusions.setup_note(book=False, fit="")   -> "Not the book's setup: no book markers on the figures."
    conclusions.side_of_ridge(128, 101.0, 295.0) -> "At $S$ = 128 the MLP sits at 101 FLOP/byte, left of the ridge (295): ..."
"""
from __future__ import annotations

from inferlab.qualitative_words import size_of_change, thresholds_text


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
    from inferlab.units import GB
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

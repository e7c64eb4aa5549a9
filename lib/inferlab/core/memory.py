"""What must sit in accelerator memory: weights, KV cache, and the batch that fits beside them.

KV cache bytes = 2 (K and V) * L * n_kv_heads * head_dim * S * B * bytes per KV element for full
attention; windows, chunks and MLA's latent as `attention` counts them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from inferlab.core import attention
from inferlab.core.moe import expected_experts
from inferlab.core.context import check_context, context_flag
from inferlab.core.parallel import tp_shard
from inferlab.core.boundary import enters
from inferlab.core.specs import BF16, Accelerator, ModelConfig, Precision, model_variant
from inferlab.base.units import GB, bytes_per_element
from inferlab.core.quantization import bytes_per_param, stored_weight_bytes
from inferlab.base.input_checks import DoesNotFitError, positive_float, positive_int, scalar


@enters(model=ModelConfig, precision=Precision)
def weight_bytes(model, precision: Precision = BF16, tp: int = 1) -> float:
    """Bytes of all parameters (embeddings and norms included) on one of `tp` devices: n_params x
    bytes_per_element(weights), or, for a quantized checkpoint (`precision.checkpoint`), each matrix
    in its own format with its scales (`quantization.stored_weight_bytes`)."""
    shard = tp_shard(model, tp)
    return stored_weight_bytes(shard, precision)


@enters(model=ModelConfig, precision=Precision)
def weight_bytes_read(model, tokens, precision: Precision = BF16, tp: int = 1):
    """Weight bytes a pass over `tokens` tokens (a decode step of B sequences: B tokens) reads, on one
    of `tp` devices: `weight_bytes` for a dense model; for a mixture of experts, all but the routed
    experts none of the tokens is sent to, W - L_moe (E - E_touched(T)) P_expert bytes, with
    E_touched(T) = E (1 - (1 - k/E)^T) under uniform routing (`moe.expected_experts`). So k experts
    per layer at T = 1 and all E as T grows. The embedding table counts whole, as in `weight_bytes`.
    `tokens` may be fractional (B* solves for it) or an array."""
    shard = tp_shard(model, tp)
    total = stored_weight_bytes(shard, precision)
    positive_float("tokens", tokens, allow_zero=True)
    t = np.asarray(tokens, dtype=float)
    if not shard.is_moe:
        out = np.full(t.shape, float(total))
    else:
        untouched = shard.n_experts - np.asarray(expected_experts(shard.n_experts, shard.experts_per_token, t))
        out = total - shard.moe_layers * untouched * shard.expert_params * bytes_per_param(shard, precision)["experts"]
    return out if out.ndim else float(out)


@enters(model=ModelConfig, precision=Precision)
def active_weight_bytes(model, precision: Precision = BF16, tp: int = 1) -> float:
    """Bytes of the parameters one token uses (`ModelConfig.n_params_active`: a mixture of experts'
    k routed experts per layer, not all E) on one of `tp` devices; `weight_bytes` for a dense model."""
    shard = tp_shard(model, tp)
    return shard.n_params_active * bytes_per_element(precision.weights)


@enters(precision=Precision, model=ModelConfig)
def kv_cache_bytes_per_token(model, precision: Precision = BF16, tp: int = 1) -> float:
    """2 * L * n_kv_heads * head_dim * bytes per element (per device under tensor parallelism); MLA
    its latent and rope key per layer; windowed layers counted per token (`attention`: an upper bound)."""
    return attention.cache_bytes_per_token(tp_shard(model, tp), precision)


@enters(model=ModelConfig, precision=Precision)
@context_flag
def kv_cache_bytes(model, seq_len, batch=1, precision: Precision = BF16, tp: int = 1):
    """KV cache of `batch` sequences of `seq_len` tokens as a serving engine holds it
    (`attention.cache_bytes_per_sequence`: per-token bytes * seq_len for full attention, a sliding
    layer at most its window, a chunked one at most its chunk) * batch.
    seq_len beyond the model's maximum context: ContextLengthWarning (beyond_context=True: none)."""
    positive_int("seq_len", seq_len)
    positive_int("batch", batch)
    check_context(model, seq_len)
    per_seq = attention.cache_bytes_per_sequence(tp_shard(model, tp), np.asarray(seq_len, dtype=float), precision)
    out = np.asarray(per_seq, dtype=float) * np.asarray(batch, dtype=float)
    return out if out.ndim else float(out)


@enters(model=ModelConfig, precision=Precision)
def kv_cache_rule_bytes(model, seq_len, batch=1, precision: Precision = BF16):
    """The chapter's closed form C_kv = 2 L n_kv d_h b_kv S B: every layer full attention with
    per-head K and V. Equal to `kv_cache_bytes` for such a model; MLA, windows and chunks hold less."""
    positive_int("seq_len", seq_len)
    positive_int("batch", batch)
    return (2 * model.n_layers * model.n_kv_heads * model.head_dim * bytes_per_element(precision.kv)
            * seq_len * batch)


@dataclass(frozen=True)
class MemoryBudget:
    """One device's memory split, in bytes. `free` is negative when the configuration overflows."""

    capacity_bytes: float
    weight_bytes: float
    kv_bytes: object
    reserved_bytes: float

    @property
    def used_bytes(self):
        return self.weight_bytes + self.kv_bytes + self.reserved_bytes

    @property
    def free_bytes(self):
        return self.capacity_bytes - self.used_bytes

    @property
    def fits(self):
        return self.free_bytes >= 0


@enters(model=ModelConfig, precision=Precision, accelerator=Accelerator)
@context_flag
def memory_budget(model, accelerator, batch, seq_len, precision: Precision = BF16, tp: int = 1,
                  reserved_bytes: float = 0.0, usable_bytes: float | None = None) -> MemoryBudget:
    """Weights + KV cache + a reserved margin (activations, allocator slack) on one device, against
    `usable_bytes` (`core.usable_memory`; None: the datasheet's whole capacity, the chapter's)."""
    acc = accelerator
    scalar("reserved_bytes", reserved_bytes)
    positive_float("reserved_bytes", reserved_bytes, allow_zero=True)
    capacity = acc.memory_bytes if usable_bytes is None else positive_float("usable_bytes", usable_bytes)
    return MemoryBudget(capacity, weight_bytes(model, precision, tp),
                        kv_cache_bytes(model, seq_len, batch, precision, tp), float(reserved_bytes))


@enters(precision=Precision, model=ModelConfig, accelerator=Accelerator)
@context_flag
def max_batch(model, accelerator, seq_len, precision: Precision = BF16, tp: int = 1,
              reserved_bytes: float = 0.0, allow_zero: bool = False, usable_bytes: float | None = None):
    """Largest B with weights + B * KV(seq_len) + reserved <= capacity (floor, per device); capacity is
    `usable_bytes` (`core.usable_memory`), None the datasheet's whole memory (the chapter's B_max).
    Raises DoesNotFitError when the weights alone do not fit, and (unless allow_zero) when not
    even one sequence of seq_len tokens fits beside them."""
    acc = accelerator
    scalar("reserved_bytes", reserved_bytes)
    positive_float("reserved_bytes", reserved_bytes, allow_zero=True)
    w = weight_bytes(model, precision, tp)
    capacity = acc.memory_bytes if usable_bytes is None else positive_float("usable_bytes", usable_bytes)
    free = capacity - w - reserved_bytes
    if free < 0:
        raise DoesNotFitError(
            f"{model.name} weights need {w / GB:.1f} GB per device (tp={tp}, {precision.weights}) "
            f"plus reserved_bytes={reserved_bytes / GB:.3g} GB, but {acc.name} has {capacity / GB:.0f} GB usable; "
            "use more devices (tp), a smaller weight dtype or a smaller model")
    per_seq = kv_cache_bytes(model, seq_len, 1, precision, tp)
    b = np.floor(free / np.asarray(per_seq)).astype(np.int64)
    if not allow_zero and np.any(b < 1):
        worst = float(np.max(per_seq))
        raise DoesNotFitError(
            f"one sequence of seq_len={np.max(seq_len)} needs {worst / GB:.2f} GB of KV cache but only "
            f"{free / GB:.2f} GB is left beside the weights on {acc.name}; shorten seq_len, "
            "quantise the KV cache or add devices")
    return b if b.ndim else int(b)


@enters(precision=Precision, model=ModelConfig, accelerator=Accelerator)
def weights_fit(model, accelerator, precision: Precision = BF16, tp: int = 1) -> bool:
    """Whether the weights alone fit one device: weight bytes <= capacity (`max_batch` raises
    DoesNotFitError exactly when they do not)."""
    model, acc = model, accelerator
    return bool(weight_bytes(model, precision, tp) <= acc.memory_bytes)


@enters(precision=Precision, model=ModelConfig, accelerator=Accelerator)
@context_flag
def fit_limit(model, accelerator, seq_len, precision: Precision = BF16):
    """Largest batch whose KV cache at `seq_len` fits beside the weights: `max_batch`, but 0 (instead
    of an error) when not even the weights fit. Arrays of lengths give arrays."""
    positive_int("seq_len", seq_len)
    try:
        out = max_batch(model, accelerator, seq_len, precision, allow_zero=True)
    except DoesNotFitError:
        out = np.zeros(np.shape(seq_len), dtype=np.int64)
    return out if np.ndim(out) else int(out)


@enters(model=ModelConfig, precision=Precision)
def kv_variants(model, precision: Precision = BF16, gqa_kv_heads: int = 8) -> dict:
    """{label: (model, precision)}: the model as given, a grouped-query version with `gqa_kv_heads`
    KV heads at the same parameter count (or, for a model that already groups, its full multi-head
    version), and each with an int8 KV cache. The variant is the claims registry's
    (`specs.model_variant`: the K/V weights saved widen the MLP, as in Llama-3), so the figures and
    the book-vs-ours tables agree. Latent attention (MLA) has no KV heads to group: its latent in two
    formats."""
    positive_int("gqa_kv_heads", gqa_kv_heads)
    int8 = Precision(precision.weights, precision.activations, "int8", precision.compute)
    if model.is_mla:
        return {f"MLA latent, {precision.kv} KV": (model, precision), "MLA latent, int8 KV": (model, int8)}
    base = f"{model.attention_kind} {model.n_kv_heads} KV heads"
    if model.n_kv_heads != gqa_kv_heads and model.n_heads % gqa_kv_heads == 0:
        other = model_variant(model, gqa_kv_heads)
    else:
        other = model_variant(model, model.n_heads)
    other_label = f"{other.attention_kind} {other.n_kv_heads} KV heads"
    return {
        f"{base}, {precision.kv} KV": (model, precision),
        f"{base}, int8 KV": (model, int8),
        f"{other_label}, {precision.kv} KV": (other, precision),
        f"{other_label}, int8 KV": (other, int8),
    }


TP_DEGREES = (2, 4, 8, 16)   # tensor-parallel degrees fit_advice tries, smallest first


@dataclass(frozen=True)
class FitAdvice:
    """Whether one sequence of `seq_len` tokens fits beside the weights on one device, and, when it
    does not, what would: the smallest tensor-parallel degree `tp` (with the batch it then holds), an
    int8 KV cache (its batch; 0 when that does not help) and the longest context that fits (0 when the
    weights alone do not). `reason` is the DoesNotFitError's message ('' when it fits)."""

    model: str
    accelerator: str
    seq_len: int
    max_batch: int
    reason: str = ""
    weight_gb: float = 0.0
    memory_gb: float = 0.0
    tp: int | None = None
    tp_max_batch: int = 0
    int8_kv_max_batch: int = 0
    longest_context: int = 0

    @property
    def fits(self) -> bool:
        return self.max_batch >= 1

    def remedies(self) -> list[str]:
        """What would fit, in words, most direct first: an int8 cache, a shorter context, TP."""
        out = []
        if self.int8_kv_max_batch:
            out.append(f"an int8 KV cache (B_max = {self.int8_kv_max_batch:,})")
        if self.longest_context:
            out.append(f"a context of at most {self.longest_context:,} tokens")
        if self.tp:
            out.append(f"tensor parallelism {self.tp} (B_max = {self.tp_max_batch:,} per replica)")
        return out

    def sentence(self) -> str:
        """'' when it fits; else what does not fit and what would, in one or two sentences."""
        if self.fits:
            return ""
        if self.longest_context == 0:
            head = (f"{self.model} does not fit on one {self.accelerator}: its weights take "
                    f"{self.weight_gb:.0f} GB of {self.memory_gb:.0f} GB.")
        else:
            head = (f"{self.model} on one {self.accelerator} has no room for one sequence of "
                    f"{self.seq_len:,} tokens beside its {self.weight_gb:.0f} GB of weights.")
        fixes = self.remedies()
        if not fixes:
            return head + f" No tensor-parallel degree up to {TP_DEGREES[-1]} fits it either."
        return head + " What fits: " + _or_list(fixes) + "."

    def lines(self, width: int = 34) -> list[str]:
        """The sentence in lines of at most `width` characters (a figure's note on a phone)."""
        import textwrap
        return textwrap.wrap(self.sentence(), width)


def _or_list(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]


@enters(model=ModelConfig, accelerator=Accelerator, precision=Precision)
@context_flag
def fit_advice(model, accelerator, seq_len: int, precision: Precision = BF16) -> FitAdvice:
    """`max_batch` at `seq_len` on one device, and, when not one sequence fits, the remedies:
    the smallest tensor-parallel degree of TP_DEGREES that `parallel.check_tp` allows and that holds
    one sequence (per replica), an int8 KV cache, and the longest context that one device holds."""
    acc = accelerator
    positive_int("seq_len", seq_len)
    seq_len = int(seq_len)
    w = weight_bytes(model, precision)
    common = dict(model=model.name, accelerator=acc.name, seq_len=seq_len, weight_gb=w / GB,
                  memory_gb=acc.memory_bytes / GB)
    b = max_batch(model, acc, seq_len, precision, allow_zero=True) if weights_fit(model, acc, precision) else 0
    if b >= 1:
        return FitAdvice(max_batch=int(b), **common)
    reason = ""
    try:
        max_batch(model, acc, seq_len, precision)
    except DoesNotFitError as e:
        reason = str(e)
    tp, tp_b = None, 0
    for k in TP_DEGREES:
        if k > model.n_heads:
            break
        try:
            tp_b = max_batch(model, acc, seq_len, precision, tp=k)
        except (DoesNotFitError, ValueError):   # ValueError: k cannot split the model's heads evenly
            continue
        tp = k
        break
    int8_b, longest = 0, 0
    if weights_fit(model, acc, precision):
        if precision.kv != "int8" and bytes_per_element(precision.kv) > 1:
            int8 = Precision(precision.weights, precision.activations, "int8", precision.compute)
            int8_b = int(max_batch(model, acc, seq_len, int8, allow_zero=True))
        longest = int((acc.memory_bytes - w) // kv_cache_bytes_per_token(model, precision))
    return FitAdvice(max_batch=0, reason=reason, tp=tp, tp_max_batch=int(tp_b) if tp else 0,
                     int8_kv_max_batch=int8_b, longest_context=longest, **common)

"""The number formats a command runs a model in: a quantized checkpoint's own, unless an option overrides them."""
from __future__ import annotations

from inferlab.core.quantization import checkpoint_compute
from inferlab.core.specs import Precision


def checkpoint_precision(model, acc, weights_dtype: str | None, activations_dtype: str = "bf16",
                         kv_dtype: str = "bf16") -> tuple:
    """(Precision, how the weights are held, in words; "" for a model without a quantized checkpoint).
    A quantized checkpoint (`model.quantization`) keeps its own formats, part by part, unless
    `weights_dtype` is given (then every parameter in it, and the words say it overrides the checkpoint).
    Compute: in the activations' quantized format where the checkpoint quantizes them and `acc` has that
    peak (`quantization.checkpoint_compute`), else weight-only; an activations format other than bf16
    chosen by the user is the compute format."""
    q = model.quantization
    if q is None or weights_dtype is not None:
        weights = weights_dtype or "bf16"
        note = "" if q is None else (f"{weights} for every parameter: --weights-dtype overrides the checkpoint's "
                                     f"{q.describe(model)}")
        return Precision(weights=weights, activations=activations_dtype, kv=kv_dtype), note
    compute, how = checkpoint_compute(q, acc)
    if activations_dtype != "bf16":
        compute, how = None, f"{q.fmt} weights, {activations_dtype} activations (--activations-dtype)"
    prec = Precision(weights=q.fmt, activations=activations_dtype, kv=kv_dtype, compute=compute, checkpoint=q)
    return prec, f"as the checkpoint stores them: {q.describe(model)}; {how}"

"""How fast each kernel runs: the one choice every time of the library goes through.

    Roofline(mfu, mbu)   each operator takes max(FLOPs / (mfu * peak), bytes / (mbu * bandwidth));
                         (1, 1) is the book's ideal roofline, below 1 fixed efficiency knobs
    MeasuredKernels()    each matrix product and small kernel takes the time measured for its shape
                         (`kernels`: Vidur's H100 SXM and A100 profiles in 16-bit, DeepGEMM's H800
                         table in FP8 W8A8; the H200 carried from the H100); a mixture of experts'
                         routed experts run as one grouped product; attention's two products on the
                         ideal roofline, or (attention="published") at the shares published attention
                         kernels reach (`kernels.attention_published`)

Both answer `pass_time_s(costs, shard, deployment)`, one forward pass on one tensor-parallel shard
without communication, and `allreduce_time_s(message_bytes, deployment)`, one all-reduce call.
`deployment.Deployment.efficiency_model` says which one a deployment uses; `latency` and the
simulator's step time (`serving.steptime`) ask it, never the roofline directly.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from inferlab.core import kernels
from inferlab.core.costs import ATTENTION_OPS, ForwardCosts
from inferlab.core.parallel import ALLREDUCES_PER_LAYER, allreduce_time_s as ring_allreduce_time_s
from inferlab.core.roofline import pass_time_s as roofline_pass_time_s, roofline_time_s
from inferlab.core.boundary import enters
from inferlab.core.specs import ModelConfig
from inferlab.base.units import bytes_per_element
from inferlab.base.input_checks import choice, fraction, positive_int

EFFICIENCY_NAMES = ("ideal", "fixed", "measured")
# Products a server runs as one kernel (vLLM's QKVParallelLinear, MergedColumnParallelLinear), as
# Vidur profiled them: one product of the summed widths N.
FUSED_PRODUCTS = (("q_proj", "k_proj", "v_proj"), ("mlp_gate", "mlp_up"))
# Numbers of a measured kernel's operands: 16-bit, as the profiles were taken (fp16 weights).
MEASURED_DTYPES = ("bf16", "fp16")
# FP8 W8A8: weights and activations both FP8 (DeepGEMM's products; kernels.fp8).
MEASURED_FP8 = "fp8"
ATTENTION_CHOICES = ("ideal", "published")


def product_dtype(precision) -> str:
    """The measured products' operand format for `precision`: 'fp8' for FP8 weights and activations
    (W8A8), else the 16-bit curves' 'bf16'."""
    return MEASURED_FP8 if precision.weights == MEASURED_FP8 and precision.activations == MEASURED_FP8 else "bf16"


def check_measured_precision(precision, accelerator, where: str = "precision") -> None:
    """One line unless the measured kernels can time `precision` on `accelerator`: weights and activations
    both 16-bit, or both FP8 on an accelerator with FP8 kernel times (kernels.fp8)."""
    w, a, c = precision.weights, precision.activations, precision.compute_dtype
    if w == a == c == MEASURED_FP8:
        kernels.check_fp8(accelerator, "accelerator")
        return
    for name, dtype in (("weights", w), ("activations", a), ("compute", c)):
        if dtype not in MEASURED_DTYPES:
            raise ValueError(f"{where} {name}: the measured kernels time 16-bit products ({', '.join(MEASURED_DTYPES)}) "
                             f"and FP8 W8A8 (weights and activations both fp8); got weights {w}, activations {a}")


@dataclass(frozen=True)
class Roofline:
    """The roofline with efficiencies: compute at mfu * peak, memory at mbu * bandwidth, each in (0, 1].
    Roofline() is the book's ideal (MFU = MBU = 1)."""

    mfu: float = 1.0
    mbu: float = 1.0

    def __post_init__(self):
        fraction("mfu", self.mfu)
        fraction("mbu", self.mbu)

    @property
    def name(self) -> str:
        return "ideal" if self.mfu == 1 and self.mbu == 1 else "fixed"

    @property
    def label(self) -> str:
        if self.name == "ideal":
            return "ideal roofline (MFU = MBU = 1)"
        return f"fixed MFU {self.mfu:g}, MBU {self.mbu:g}"

    def label_on(self, accelerator, precision=None) -> str:
        """The label (the same on every accelerator and precision)."""
        return self.label

    def pass_time_s(self, costs: ForwardCosts, shard, deployment):
        """`roofline.pass_time_s` of the pass at this object's mfu and mbu, with the deployment's
        accelerator, compute dtype and overlap."""
        return roofline_pass_time_s(costs, deployment.accelerator, deployment.precision.compute_dtype,
                                    self.mfu, self.mbu, deployment.overlap)

    def allreduce_time_s(self, message_bytes, deployment):
        """A ring all-reduce: 2(K-1)/K * bytes / link bandwidth + the deployment's allreduce_latency_s."""
        return ring_allreduce_time_s(message_bytes, deployment.tp, deployment.accelerator,
                                     deployment.allreduce_latency_s)


@dataclass(frozen=True)
class MeasuredKernels:
    """Kernel times measured on real GPUs (`kernels`, data/vidur, data/deepgemm): per layer the fused QKV
    product (N = q_dim + 2 kv_dim of the shard), o_proj, the fused gate and up product (N = 2 f;
    f alone without a gate) and down, two norms and two residual adds over d, rotary over the
    q + kv widths, the activation over f; once the embedding and the LM head (rows:
    the sequences sampling). A mixture of experts' routed experts: one grouped product over the expected
    experts touched, each over its share of the routed rows (uniform routing, `moe`). Attention's QK^T
    and PV on the ideal roofline, or at the published kernels' shares (attention="published"); all-reduces
    as measured on an NVSwitch node. Products in 16-bit, or FP8 when weights and activations are both FP8;
    the small kernels stay 16-bit (their inputs and outputs are); kernels run back to back."""

    attention: str = "ideal"
    name = "measured"

    def __post_init__(self):
        choice("attention", self.attention, ATTENTION_CHOICES)

    @property
    def label(self) -> str:
        return self.label_on(None)

    def label_on(self, accelerator, precision=None) -> str:
        """The label naming the profiles used: `accelerator`'s, or every profiled one when None; the FP8
        table when `precision` is W8A8; the transfer when the accelerator is carried from a profiled one."""
        name = None if accelerator is None else accelerator.name
        which = (name if name in kernels.MEASURED_ACCELERATORS
                 else kernels.TRANSFERS[name] if name in kernels.TRANSFERS
                 else " and ".join(kernels.MEASURED_ACCELERATORS))
        parts = [f"Vidur's published {which} profiles"]
        if precision is not None and product_dtype(precision) == MEASURED_FP8:
            parts = ["FP8 products on DeepGEMM's published H800 table, small kernels on Vidur's "
                     f"published {which} profiles"]
        note = kernels.transfer_note(accelerator)
        if note:
            parts.append(note)
        parts.append("attention on the ideal roofline" if self.attention == "ideal" else
                     "attention at published kernels' shares (" + kernels.ATTENTION_SOURCES + ")")
        return f"measured kernels ({'; '.join(parts)})"

    @enters(shard=ModelConfig)
    def pass_time_s(self, costs: ForwardCosts, shard, deployment):
        """Sum of the measured kernel times of one pass (module doc), attention on the ideal roofline."""
        acc = kernels.check_measured(deployment.accelerator)
        if not isinstance(costs, ForwardCosts):
            raise ValueError(f"costs must be a ForwardCosts (from costs.forward_costs); got {costs!r}")
        if not costs.dims or costs.tokens is None:
            raise ValueError("costs carry no operator shapes (dims, tokens): the measured kernels need a pass "
                             "built by costs.forward_costs, prefill_costs or decode_costs")
        dtype = deployment.precision.compute_dtype
        products = product_dtype(deployment.precision)
        layer = 0.0
        done = set()
        for group in FUSED_PRODUCTS:
            present = [op for op in group if op in costs.per_layer]
            if present:
                k = costs.dims[present[0]][0]
                n = sum(costs.dims[op][1] for op in present)
                layer = layer + _layer_share_time(acc, costs, shard, present[0], k, n, deployment, products)
                done.update(present)
        for op, c in costs.per_layer.items():
            if op in done:
                continue
            if op in ATTENTION_OPS:
                layer = layer + (roofline_time_s(c.flops, c.bytes, acc, dtype) if self.attention == "ideal"
                                 else kernels.attention_time_s(c.flops, c.bytes, acc, dtype))
            elif op in costs.dims:
                layer = layer + _layer_share_time(acc, costs, shard, op, *costs.dims[op], deployment, products)
            else:
                raise ValueError(f"the measured kernels have no time for operator {op!r}; allowed: the matrix "
                                 f"products of costs.forward_costs and {', '.join(ATTENTION_OPS)}")
        if any(op in costs.dims for op in costs.per_layer):
            layer = layer + small_kernels_time_s(acc, shard, costs.tokens)
        t = costs.n_layers * layer
        for op in costs.head:
            if op == "embedding":
                t = t + kernels.elementwise_time_s(acc, "embedding", costs.tokens, shard.d_model)
            elif op in costs.dims:
                t = t + kernels.product_times_s(acc, 1, costs.rows(op), *costs.dims[op], products)
            else:
                raise ValueError(f"the measured kernels have no time for operator {op!r}; allowed: embedding, lm_head")
        return t if np.ndim(t) else float(t)

    def allreduce_time_s(self, message_bytes, deployment):
        """One all-reduce of `message_bytes` over the deployment's tp GPUs, as measured on an NVSwitch node."""
        return kernels.allreduce_time_s(deployment.accelerator, message_bytes, deployment.tp, node="nvswitch")


def _layer_share_time(acc, costs, shard, op: str, k: int, n: int, deployment, dtype: str = "bf16"):
    """The measured time of product `op` per layer on average, in operand format `dtype`. A product that
    runs in only some layers (a mixture of experts' dense layers, or its MoE layers) has its costs weighted
    by that share s: s x the time of its full row count. The routed experts run as one grouped product
    (`kernels.product_times_s`) over the expected distinct experts touched (weight bytes / (s k n b_w)),
    each over its share of the routed rows (uniform routing, as `moe.expected_experts` counts them)."""
    rows = np.asarray(costs.rows(op), dtype=float)
    share = 1.0
    if shard.is_moe and op.startswith("mlp_"):
        share = (len(shard.dense_layers) if op in ("mlp_gate", "mlp_up", "mlp_down") else shard.moe_layers) / shard.n_layers
    if op == "mlp_experts":
        wb = bytes_per_element(deployment.precision.weights)
        touched = np.asarray(costs.per_layer[op].weight_bytes, dtype=float) / (k * n * wb)   # share x experts
        safe = np.where(touched > 0, touched, 1.0)
        per_expert = np.maximum(np.rint(rows / safe), 1.0)   # rows of each touched expert (whole rows)
        groups = np.where(touched > 0, touched / share, 1.0)   # experts touched in one MoE layer
        return np.where(touched > 0, share * kernels.product_times_s(acc, groups, per_expert, k, n, dtype), 0.0)
    if share == 1.0:
        return kernels.product_times_s(acc, 1, rows, k, n, dtype)
    return share * kernels.product_times_s(acc, 1, np.rint(rows / share), k, n, dtype)


def small_kernels_time_s(accelerator, shard, tokens):
    """The small kernels of one layer over `tokens` rows, each by the width it writes: two norms and
    two residual adds over d, rotary over q_dim + kv_dim (queries and keys), the activation over f
    (a gated one reads 2 f, the gate's and the up product's outputs: the profiles, all gated, fit that
    per written element; a plain MLP's activation is taken at the same cost)."""
    d = shard.d_model
    return (2 * kernels.elementwise_time_s(accelerator, "norm", tokens, d)
            + kernels.elementwise_time_s(accelerator, "rope", tokens, shard.q_dim + shard.kv_dim)
            + kernels.elementwise_time_s(accelerator, "act", tokens, shard.d_ff)
            + 2 * kernels.elementwise_time_s(accelerator, "add", tokens, d))


@enters(model=ModelConfig)
def communication_time_s(model, tokens, deployment):
    """All-reduce time of one forward pass over `tokens` tokens under tensor parallelism: 2 per layer
    (after o_proj and after down) of tokens * d activations, each timed by the deployment's
    efficiency model. `model` is the whole model, not a shard."""
    positive_int("tokens", tokens)
    message = np.asarray(tokens, dtype=float) * model.d_model * bytes_per_element(deployment.precision.activations)
    return model.n_layers * ALLREDUCES_PER_LAYER * deployment.efficiency_model.allreduce_time_s(message, deployment)


__all__ = ["EFFICIENCY_NAMES", "MeasuredKernels", "Roofline", "communication_time_s", "small_kernels_time_s"]

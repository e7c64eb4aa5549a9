"""The chapter on a real GPU: the measured kernels beside the ideal roofline, for the four subsection
notebooks' sections "The same on a real GPU".

    IDEAL, MEASURED = measured_plots.deployments(GPU, PREC)   # MEASURED is None where nothing was profiled
    measured_plots.profile_for(MODEL)                          # "internlm-20b": Llama-2 13B's linear shapes
    measured_plots.ttft(MODEL, GPU, PREC, 2048)                # a Measured: ideal, measured, profiled
    reader.draw(measured_plots.kernel_roofline_plot, MODEL, GPU, PREC)

Three numbers per time:
- ideal: every operator on the roofline, `Deployment(accelerator, precision)`;
- measured: the kernel curves fitted on Vidur's published H100 SXM and A100 profiles
  (`efficiency.MeasuredKernels()`, `kernels`), attention's two products on the ideal roofline;
- profiled: where a profiled model has exactly the model's linear shapes at TP 1 (internlm-20b has
  Llama-2 13B's), the same time with each layer's linear and small kernels summed from the profiled
  rows instead of the fitted curves: how close the curve is, for the chapter's own model.
An accelerator without profiles, or a precision the profiles lack (8-bit), gets the ideal alone, and
`measured_reason` says why in one sentence; nothing here raises for it.

Where the data stop: no attention kernels were profiled (QK^T and PV stay on the ideal roofline);
fp16 products of 1-4,096 tokens (beyond, the curve follows its compute-bound asymptote); kernel time
only: no launch gaps between kernels, no CUDA graphs, no scheduler (`kernels.StepOverhead` is a
separate, named term).
"""
from __future__ import annotations

import csv
import functools
from dataclasses import dataclass

import numpy as np
from IPython.display import Markdown

from inferlab.core import kernels
from inferlab.core.costs import ATTENTION_OPS, decode_costs, linear_cost, prefill_costs
from inferlab.core.deployment import Deployment
from inferlab.core.efficiency import MEASURED_DTYPES, MeasuredKernels, small_kernels_time_s
from inferlab.core.latency import (cost_per_1k_tokens_usd, decode_step_time_s, kv_crossover_batch, prefill_time_s)
from inferlab.core.parallel import tp_shard
from inferlab.notebook.plots import Plot, _figure, fit_limit, legend_below, shade_context_window
from inferlab.core.roofline import attainable_flops_per_s, ridge_point, roofline_time_s
from inferlab.core.specs import BF16, Precision, check_accelerator, check_model, check_precision, data_dir
from inferlab.base.text_tables import text_table
from inferlab.base.units import MS, TFLOP
from inferlab.base.input_checks import positive_int
from inferlab.notebook.worked_examples import equation

# The four linear products of a layer as a server runs them (Q, K, V fused; gate and up fused), the
# profiles' column for each, and how the figures name them.
PROFILE_COLUMNS = {"qkv": "attn_pre_proj", "o_proj": "attn_post_proj", "mlp_up": "mlp_up_proj",
                   "mlp_down": "mlp_down_proj"}
OP_LABELS = {"qkv": "fused QKV product", "o_proj": "output projection", "mlp_up": "fused gate and up product",
             "mlp_down": "MLP down projection"}
OP_COLORS = {"qkv": "tab:blue", "o_proj": "tab:cyan", "mlp_up": "tab:orange", "mlp_down": "tab:red"}
# The small kernels of one layer in the profiles and how many times a layer runs each (two residual
# adds, one profiled column): the composition efficiency.small_kernels_time_s fits.
SMALL_COLUMNS = (("input_layernorm", 1), ("post_attention_layernorm", 1), ("attn_rope", 1), ("mlp_act", 1),
                 ("add", 2))
MAX_PROFILED_TOKENS = 4096   # the profiles' largest token count
ROOFLINE_TOKENS = (1, 16, 64, 256, 1024, 4096)
COLORS = {"ideal": "tab:blue", "measured": "tab:purple", "profiled": "black", "overhead": "tab:gray"}
PROFILED_STYLE = dict(marker="o", s=22, facecolors="none", edgecolors="black", linewidths=1.0, zorder=5)


# ---------------------------------------------------------------------------------------------
# Which measured model applies
# ---------------------------------------------------------------------------------------------

def measured_reason(accelerator, precision: Precision = BF16) -> str:
    """'' when the measured kernels time `accelerator` at `precision`, else one sentence saying why not
    (no profiles for the accelerator, or a number format the profiles lack)."""
    acc = check_accelerator(accelerator)
    check_precision(precision)
    if acc.name in kernels.TRANSFERS:
        return (f"No measured kernels exist for the {acc.name}: Vidur published kernel profiles for the "
                f"{' and '.join(kernels.MEASURED_ACCELERATORS)} only, so this section's curves show the ideal roofline "
                f"alone; its times carried from the {kernels.TRANSFERS[acc.name]} are in the FP8 and H200 table below.")
    if acc.name not in kernels.MEASURED_ACCELERATORS:
        return (f"No measured kernels exist for the {acc.name}: Vidur published kernel profiles for the "
                f"{' and '.join(kernels.MEASURED_ACCELERATORS)} only, so this section shows the ideal roofline alone.")
    odd = [f"{name} in {dtype}" for name, dtype in (("weights", precision.weights),
                                                   ("activations", precision.activations),
                                                   ("compute", precision.compute_dtype))
           if dtype not in MEASURED_DTYPES]
    if odd:
        return (f"No measured kernels exist for this scenario's {', '.join(odd)}: the published profiles hold "
                "16-bit products only, so this section shows the ideal roofline alone.")
    return ""


def deployments(accelerator, precision: Precision = BF16, *, tp: int = 1, step_overhead=None):
    """(ideal, measured): `Deployment(accelerator, precision, tp=tp)` and the same with
    `efficiency=MeasuredKernels()` (and `step_overhead`), or None where `measured_reason` says why not."""
    ideal = Deployment(accelerator, precision, tp=tp)
    if measured_reason(accelerator, precision):
        return ideal, None
    return ideal, Deployment(accelerator, precision, tp=tp, efficiency=MeasuredKernels(), step_overhead=step_overhead)


@functools.cache
def _compute_rows() -> tuple:
    with (data_dir() / "vidur" / "compute.csv").open() as fh:
        return tuple(csv.DictReader(fh))


def profile_for(model) -> str | None:
    """The profiled model whose linear products have exactly `model`'s shapes at TP 1 (d, query and KV
    heads, head dimension, f, gated MLP), or None. Llama-2 13B: 'internlm-20b'."""
    m = check_model(model)
    for row in _compute_rows():
        h, kv, d, f = (int(row[c]) for c in ("n_head", "n_kv_head", "n_embd", "n_expanded_embd"))
        if ((h, kv, d, f, row["use_gated_mlp"] == "True", d // h)
                == (m.n_heads, m.n_kv_heads, m.d_model, m.d_ff, m.gated_mlp, m.head_dim)):
            return row["model"]
    return None


@functools.cache
def _profiled_rows(accelerator_name: str, profile: str, tp: int = 1) -> dict:
    return {int(r["num_tokens"]): r for r in _compute_rows()
            if r["accelerator"] == accelerator_name and r["model"] == profile
            and int(r["num_tensor_parallel_workers"]) == tp}


def profiled_tokens(accelerator, profile: str | None) -> np.ndarray:
    """The token counts profiled for `profile` on `accelerator` at TP 1 (empty when none)."""
    acc = check_accelerator(accelerator)
    if profile is None:
        return np.zeros(0, dtype=np.int64)
    return np.array(sorted(_profiled_rows(acc.name, profile)), dtype=np.int64)


def linear_shapes(model) -> dict:
    """{op: (k, n)} of a layer's four products at TP 1, as a server fuses them: QKV (d by q + 2 kv
    widths), the output projection, the gate and up matrices side by side (d by 2f; f without a
    gate), down (f by d)."""
    m = check_model(model)
    d, f = m.d_model, m.d_ff
    return {"qkv": (d, m.q_dim + 2 * m.kv_dim), "o_proj": (m.q_dim, d),
            "mlp_up": (d, 2 * f if m.gated_mlp else f), "mlp_down": (f, d)}


def _op_label(model, op: str) -> str:
    return OP_LABELS[op] if op != "mlp_up" or model.gated_mlp else "MLP up projection"


# ---------------------------------------------------------------------------------------------
# One product, one layer
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class KernelPoint:
    """One linear product (T x k) @ (k x n): its FLOPs, bytes and intensity, the roofline's time and
    attainable FLOP/s, the fitted curve's time and, where the profile has the shape and T, the profiled
    time (None where not)."""

    op: str
    label: str
    tokens: int
    k: int
    n: int
    flops: float
    bytes: float
    ideal_s: float
    attainable_flops_per_s: float
    fitted_s: float | None
    profiled_s: float | None
    profile: str | None

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes

    @property
    def measured_s(self) -> float | None:
        """The profiled time where there is one, else the fitted curve's (None: no measured kernels)."""
        return self.profiled_s if self.profiled_s is not None else self.fitted_s

    @property
    def source(self) -> str:
        if self.profiled_s is not None:
            return f"profiled ({self.profile}, T = {self.tokens:,})"
        return "fitted curve" if self.fitted_s is not None else "none"

    @property
    def efficiency(self) -> float | None:
        """Achieved FLOP/s (FLOPs / measured time) over the roofline's attainable FLOP/s."""
        return None if self.measured_s is None else self.flops / self.measured_s / self.attainable_flops_per_s


def kernel_point(model, accelerator, precision: Precision = BF16, op: str = "mlp_up", tokens: int = 1) -> KernelPoint:
    """`op` (qkv, o_proj, mlp_up, mlp_down) of `model` at TP 1 over `tokens` rows on `accelerator`."""
    m, acc = check_model(model), check_accelerator(accelerator)
    shapes = linear_shapes(m)
    if op not in shapes:
        raise ValueError(f"op must be one of {', '.join(shapes)}; got {op!r}")
    tokens = int(positive_int("tokens", tokens))
    k, n = shapes[op]
    c = linear_cost(tokens, k, n, precision)
    dtype = precision.compute_dtype
    flops, nbytes = float(c.flops), float(c.bytes)
    measured = not measured_reason(acc, precision)
    profile = profile_for(m) if measured else None
    row = _profiled_rows(acc.name, profile).get(tokens) if profile else None
    return KernelPoint(op, _op_label(m, op), tokens, k, n, flops, nbytes,
                       float(roofline_time_s(flops, nbytes, acc, dtype)),
                       float(attainable_flops_per_s(flops / nbytes, acc, dtype)),
                       kernels.linear_time_s(acc, tokens, k, n) if measured else None,
                       float(row[f"{PROFILE_COLUMNS[op]}_ms"]) * 1e-3 if row else None, profile)


def kernel_points(model, accelerator, precision: Precision = BF16, tokens=ROOFLINE_TOKENS) -> list:
    """kernel_point for each of the four products at each token count, products first."""
    return [kernel_point(model, accelerator, precision, op, t) for op in PROFILE_COLUMNS for t in tokens]


def layer_kernels_s(model, accelerator, tokens: int) -> tuple:
    """(profiled, fitted) seconds of one layer's kernels other than attention over `tokens` rows at TP 1:
    the four products, two norms, rotary, the activation and two residual adds. profiled: the
    matching profile's row summed (None without one, or at a token count it lacks); fitted: the
    curves `efficiency.MeasuredKernels` sums for the same kernels."""
    m, acc = check_model(model), kernels.check_measured(accelerator)
    tokens = int(positive_int("tokens", tokens))
    fitted = sum(kernels.linear_time_s(acc, tokens, k, n) for k, n in linear_shapes(m).values())
    fitted += float(small_kernels_time_s(acc, m, tokens))
    profile = profile_for(m)
    row = _profiled_rows(acc.name, profile).get(tokens) if profile else None
    if row is None:
        return None, fitted
    ms = sum(float(row[f"{c}_ms"]) for c in PROFILE_COLUMNS.values())
    ms += sum(times * float(row[f"{c}_ms"]) for c, times in SMALL_COLUMNS)
    return ms * 1e-3, fitted


def _check_measured_tp1(deployment) -> Deployment:
    if not isinstance(deployment, Deployment) or not isinstance(deployment.efficiency, MeasuredKernels):
        raise ValueError(f"deployment must be a Deployment with efficiency=MeasuredKernels(); got {deployment!r}")
    if deployment.tp != 1:
        raise ValueError(f"the profiled rows are summed at TP 1 only; got tp={deployment.tp}")
    return deployment


def _with_profiled_layers(model, deployment, tokens, measured_s):
    profiled, fitted = layer_kernels_s(model, deployment.accelerator, tokens)
    return None if profiled is None else measured_s + model.n_layers * (profiled - fitted)


def profiled_prefill_time_s(model, deployment, prompt_len: int, batch: int = 1):
    """`latency.prefill_time_s` on a measured TP-1 deployment with every layer's non-attention kernels
    summed from the profiled rows at T = batch x prompt_len instead of the fitted curves; None where no
    profile matches the model or T was not profiled."""
    m, d = check_model(model), _check_measured_tp1(deployment)
    tokens = int(positive_int("batch", batch)) * int(positive_int("prompt_len", prompt_len))
    return _with_profiled_layers(m, d, tokens, prefill_time_s(m, d, prompt_len, batch))


def profiled_decode_step_time_s(model, deployment, context_len: int, batch: int = 1):
    """`latency.decode_step_time_s` on a measured TP-1 deployment with every layer's non-attention kernels
    summed from the profiled rows at T = batch; None where none matches or T was not profiled."""
    m, d = check_model(model), _check_measured_tp1(deployment)
    return _with_profiled_layers(m, d, int(positive_int("batch", batch)), decode_step_time_s(m, d, context_len, batch))


def efficiency_worked(point: KernelPoint, accelerator, precision: Precision = BF16):
    """The efficiency of one product (`kernel_point`) as a worked equation: achieved FLOP/s (FLOPs over
    its measured time: the profiled row where there is one, the fitted curve's beside it) over what the
    roofline allows at its intensity. Without measured kernels, the reason in words."""
    acc = check_accelerator(accelerator)
    reason = measured_reason(acc, precision)
    if reason or point.measured_s is None:
        return Markdown(reason or f"No measured time for {point.label} at T = {point.tokens:,}.")
    tex = (r"\text{efficiency} = \frac{2T d_\text{in} d_\text{out} \,/\, t_\text{kernel}}"
           r"{\min(\text{peak},\ I \cdot \text{BW})} "
           r"= \frac{2 \cdot <T> \cdot <k> \cdot <n> \,/\, <t>\ \text{ms}}"
           r"{\min(<peak>\ \text{TFLOP/s},\ <I>\ \text{FLOP/byte} \cdot <bw>\ \text{TB/s})} = <eff>\%")
    values = dict(T=point.tokens, k=point.k, n=point.n, t=point.measured_s / MS,
                  peak=acc.peak(precision.compute_dtype) / TFLOP, I=point.intensity, bw=acc.hbm_bytes_per_s / 1e12,
                  eff=100 * point.efficiency)
    if point.profiled_s is not None:
        tex += r"\quad (\text{profiled; the fitted curve: } <tf>\ \text{ms},\ <ef>\%)"
        values.update(tf=point.fitted_s / MS, ef=100 * point.flops / point.fitted_s / point.attainable_flops_per_s)
    return equation(tex, **values)


def bandwidth_worked(nbytes: float, step: "Measured", accelerator):
    """The bandwidth a decode step gets as a worked equation: `nbytes` (`step_bytes`) over the step's
    measured time (`itl`: the profiled rows where there are, the fitted curve's beside them), against
    the datasheet bandwidth. Without measured kernels, the reason in words."""
    acc = check_accelerator(accelerator)
    t = step.profiled_s if step.profiled_s is not None else step.measured_s
    if t is None:
        return Markdown(step.reason)
    bw = acc.hbm_bytes_per_s
    # Symbols rather than words on the left, and the fitted curve's figure in prose: the display
    # equation must fit a laptop's column without scrolling.
    tex = (r"\text{BW}_\text{achieved} = \frac{<gb>\ \text{GB}}{<ms>\ \text{ms}} = <gbs>\ \text{GB/s} "
           r"= <pct>\%\ \text{of}\ <bw>\ \text{TB/s}")
    values = dict(gb=nbytes / 1e9, ms=t / MS, gbs=nbytes / t / 1e9, pct=100 * nbytes / t / bw, bw=bw / 1e12)
    shown = equation(tex, **values)
    if step.profiled_s is None:
        return shown
    fitted_pct = 100 * nbytes / step.measured_s / bw
    return Markdown(f"{shown.data}\n\nThat step time sums the profiled kernel times; the curve fitted through "
                    f"them gives {fitted_pct:.1f} % of the datasheet bandwidth.")


def bandwidth_table(model, accelerator, precision: Precision = BF16, tokens: int = 1) -> str:
    """Each product of a layer at `tokens` rows (a decode step of that batch): the bytes it moves, its
    profiled and fitted time, and the share of the datasheet bandwidth each gives; then one layer's
    kernels other than attention (the products, norms, rotary, activation, residual adds) against the
    products' bytes."""
    m, acc = check_model(model), check_accelerator(accelerator)
    reason = measured_reason(acc, precision)
    if reason:
        return reason
    bw = acc.hbm_bytes_per_s
    pts = [kernel_point(m, acc, precision, op, tokens) for op in PROFILE_COLUMNS]

    def share(nbytes, t):
        return None if t is None else 100 * nbytes / t / bw

    rows = [(p.label, p.bytes / 1e6, None if p.profiled_s is None else p.profiled_s * 1e6, p.fitted_s * 1e6,
             share(p.bytes, p.profiled_s), share(p.bytes, p.fitted_s)) for p in pts]
    profiled, fitted = layer_kernels_s(m, acc, tokens)
    nbytes = sum(p.bytes for p in pts)
    rows.append(("one layer, no attention", nbytes / 1e6, None if profiled is None else profiled * 1e6,
                 fitted * 1e6, share(nbytes, profiled), share(nbytes, fitted)))
    return (f"T = {tokens:,} rows on the {acc.name}; profiled: {profile_for(m) or 'no profile with these shapes'}\n"
            + text_table(("kernel", "MB moved", "profiled us", "fitted us", "profiled % of BW", "fitted % of BW"),
                         rows, ("s", ",.1f", ",.1f", ",.1f", ".0f", ".0f")))


# ---------------------------------------------------------------------------------------------
# Times, ideal and measured
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Measured:
    """One time three ways: ideal (the roofline), measured (the fitted kernels), profiled (the profiled
    rows in the fitted curves' place), and measured plus a step overhead; None where none exists, and
    `reason` saying why there are no measured kernels at all ('' when there are)."""

    what: str
    ideal_s: float
    measured_s: float | None = None
    profiled_s: float | None = None
    overhead_s: float | None = None
    reason: str = ""

    @property
    def ratio(self) -> float | None:
        """measured / ideal."""
        return None if self.measured_s is None else self.measured_s / self.ideal_s


def ttft(model, accelerator, precision: Precision = BF16, prompt_len: int = 1024, batch: int = 1,
         step_overhead=None) -> Measured:
    """TTFT (one prefill pass) of `batch` prompts of `prompt_len` tokens on one accelerator, three ways
    (`overhead_s` with `step_overhead`, a kernels.StepOverhead, where given)."""
    m = check_model(model)
    ideal, meas = deployments(accelerator, precision)
    reason = measured_reason(accelerator, precision)
    t_ideal = prefill_time_s(m, ideal, prompt_len, batch)
    if meas is None:
        return Measured("TTFT", t_ideal, reason=reason)
    t = prefill_time_s(m, meas, prompt_len, batch)
    over = (t + step_overhead.time_s(batch)) if step_overhead is not None else None
    return Measured("TTFT", t_ideal, t, profiled_prefill_time_s(m, meas, prompt_len, batch), over)


def itl(model, accelerator, precision: Precision = BF16, context_len: int = 1024, batch: int = 1,
        step_overhead=None) -> Measured:
    """ITL (one decode step of `batch` sequences at `context_len`), three ways, as `ttft`."""
    m = check_model(model)
    ideal, meas = deployments(accelerator, precision)
    reason = measured_reason(accelerator, precision)
    t_ideal = decode_step_time_s(m, ideal, context_len, batch)
    if meas is None:
        return Measured("ITL", t_ideal, reason=reason)
    t = decode_step_time_s(m, meas, context_len, batch)
    over = (t + step_overhead.time_s(batch)) if step_overhead is not None else None
    return Measured("ITL", t_ideal, t, profiled_decode_step_time_s(m, meas, context_len, batch), over)


def _pass_costs(model, deployment, prompt_len, context_len, batch):
    shard = tp_shard(model, deployment.tp)
    if (prompt_len is None) == (context_len is None):
        raise ValueError("give prompt_len (a prefill) or context_len (a decode step), not both")
    if prompt_len is not None:
        return shard, prefill_costs(shard, batch, prompt_len, deployment.precision)
    return shard, decode_costs(shard, batch, context_len, deployment.precision)


def attention_share(model, deployment, *, prompt_len=None, context_len=None, batch=1):
    """Attention's QK^T and PV as a share of one pass's kernel time on one device (no communication, no
    step overhead): a prefill of `prompt_len` tokens or a decode step at `context_len`. Under measured
    kernels this is the part of the time that no profile covers (it stays on the ideal roofline)."""
    m = check_model(model)
    shard, costs = _pass_costs(m, deployment, prompt_len, context_len, batch)
    eff = deployment.efficiency_model
    full = eff.pass_time_s(costs, shard, deployment)
    rest = eff.pass_time_s(costs.without(*ATTENTION_OPS), shard, deployment)
    out = 1.0 - np.asarray(rest) / np.asarray(full)
    return out if out.ndim else float(out)


def step_bytes(model, precision: Precision, context_len: int, batch=1, tp: int = 1):
    """Bytes one device moves in a decode step: its weights, the batch's KV caches, the activations."""
    shard = tp_shard(check_model(model), tp)
    return decode_costs(shard, batch, context_len, precision).total.bytes


def decode_bandwidth(model, deployment, context_len: int, batch=1):
    """The bandwidth a decode step really gets on `deployment`: the bytes one device moves
    (`step_bytes`) over the step's time (`latency.decode_step_time_s`), in bytes/s."""
    m = check_model(model)
    nbytes = step_bytes(m, deployment.precision, context_len, batch, deployment.tp)
    out = np.asarray(nbytes) / np.asarray(decode_step_time_s(m, deployment, context_len, batch))
    return out if out.ndim else float(out)


def attention_crossover_batch(model, deployment, context_len: int, max_batch: int = 1 << 14):
    """The smallest batch at which a decode step spends as long in attention (reading the caches) as in
    everything else (reading the weights): on the ideal roofline about B* = M_weights / C_kv; with the
    weights read at the measured kernels' speed, later. None when no batch up to max_batch gets there."""
    m = check_model(model)
    b = np.arange(1, int(max_batch) + 1)
    share = np.asarray(attention_share(m, deployment, context_len=context_len, batch=b))
    hit = np.nonzero(share >= 0.5)[0]
    return int(b[hit[0]]) if hit.size else None


@dataclass(frozen=True)
class TensorParallel:
    """TTFT and ITL against the tensor-parallel degree K, ideal (the accelerator's default ring
    all-reduce) and measured (measured kernels and the node's measured all-reduce)."""

    tps: tuple
    ttft_ideal_s: tuple
    itl_ideal_s: tuple
    ttft_measured_s: tuple | None
    itl_measured_s: tuple | None
    allreduce_share: tuple | None    # share of the measured ITL spent in all-reduces
    reason: str = ""

    def table(self) -> str:
        rows = []
        for i, k in enumerate(self.tps):
            meas = (None,) * 4 if self.itl_measured_s is None else (
                self.ttft_measured_s[i] / MS, self.itl_measured_s[i] / MS,
                self.itl_measured_s[0] / self.itl_measured_s[i], 100 * self.allreduce_share[i])
            rows.append((k, self.ttft_ideal_s[i] / MS, self.itl_ideal_s[i] / MS,
                         self.itl_ideal_s[0] / self.itl_ideal_s[i], *meas))
        # Short headers (times in ms) so the table fits a page's column without shrinking its text.
        return text_table(("K", "TTFT ideal", "ITL ideal", "speed-up", "TTFT meas.", "ITL meas.", "speed-up",
                           "all-reduce %"), rows,
                          ("d", ".2f", ".3f", ".2f", ".2f", ".3f", ".2f", ".0f"))


def tensor_parallel(model, accelerator, precision: Precision = BF16, prompt_len: int = 1024,
                    context_len: int = 1024, batch: int = 1, tps=(1, 2, 4, 8)) -> TensorParallel:
    """TTFT and ITL at each K of `tps` (1 first), ideal and measured (module doc)."""
    m = check_model(model)
    ideal = [Deployment(accelerator, precision, tp=k) for k in tps]
    ttft_i = tuple(prefill_time_s(m, d, prompt_len, batch) for d in ideal)
    itl_i = tuple(decode_step_time_s(m, d, context_len, batch) for d in ideal)
    reason = measured_reason(accelerator, precision)
    if reason:
        return TensorParallel(tuple(tps), ttft_i, itl_i, None, None, None, reason)
    meas = [deployments(accelerator, precision, tp=k)[1] for k in tps]
    ttft_m = tuple(prefill_time_s(m, d, prompt_len, batch) for d in meas)
    itl_m = tuple(decode_step_time_s(m, d, context_len, batch) for d in meas)
    no_comm = [d.with_(allreduce=False) for d in meas]
    share = tuple(1 - decode_step_time_s(m, d, context_len, batch) / t for d, t in zip(no_comm, itl_m))
    return TensorParallel(tuple(tps), ttft_i, itl_i, ttft_m, itl_m, share)


@dataclass(frozen=True)
class Batching:
    """Decode throughput and cost per token at B = 1 and at the largest batch that fits, ideal and
    measured; the batch at which attention takes half a step, both ways; attention's share of the
    measured step at the largest batch (the part no profile covers)."""

    context_len: int
    max_batch: int
    b_star: float
    tokens_per_s_ideal: tuple          # (B = 1, B = max_batch)
    tokens_per_s_measured: tuple | None
    usd_per_1k_ideal: tuple
    usd_per_1k_measured: tuple | None
    crossover_ideal: int | None
    crossover_measured: int | None
    attention_share_measured: float | None
    reason: str = ""
    tokens_per_s_profiled: tuple | None = None   # the profiled rows summed, where a profile matches (else None)


def batching(model, accelerator, precision: Precision = BF16, context_len: int = 1024,
             usd_per_gpu_hour: float = 4.0) -> Batching:
    """The numbers of `Batching` for `model` on one `accelerator` (0 sequences fit: max_batch 0 and
    the B = max_batch entries repeat B = 1)."""
    m = check_model(model)
    ideal, meas = deployments(accelerator, precision)
    b_max = fit_limit(m, accelerator, context_len, precision)
    batches = np.array([1, max(b_max, 1)])

    def tput(dep):
        return tuple(float(x) for x in batches / decode_step_time_s(m, dep, context_len, batches))

    def usd(t):
        return tuple(float(cost_per_1k_tokens_usd(x, usd_per_gpu_hour)) for x in t)

    t_ideal = tput(ideal)
    common = dict(context_len=int(context_len), max_batch=int(b_max),
                  b_star=float(kv_crossover_batch(m, context_len, precision)), tokens_per_s_ideal=t_ideal,
                  usd_per_1k_ideal=usd(t_ideal), crossover_ideal=attention_crossover_batch(m, ideal, context_len))
    if meas is None:
        return Batching(**common, tokens_per_s_measured=None, usd_per_1k_measured=None, crossover_measured=None,
                        attention_share_measured=None, reason=measured_reason(accelerator, precision))
    t_meas = tput(meas)
    prof = [profiled_decode_step_time_s(m, meas, context_len, int(x)) for x in batches]
    return Batching(**common, tokens_per_s_measured=t_meas, usd_per_1k_measured=usd(t_meas),
                    tokens_per_s_profiled=tuple(None if t is None else float(x / t) for x, t in zip(batches, prof)),
                    crossover_measured=attention_crossover_batch(m, meas, context_len),
                    attention_share_measured=attention_share(m, meas, context_len=context_len,
                                                             batch=int(batches[-1])))


# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------

def _no_measured_title(acc) -> str:
    return f"no measured kernels for the {acc.name}: the ideal roofline only"


def kernel_roofline_plot(model, accelerator, precision: Precision = BF16, *, tokens=ROOFLINE_TOKENS) -> Plot:
    """The roofline (log-log) with a layer's four linear products at their intensity, at each token
    count T of `tokens`: achieved FLOP/s (FLOPs / time) of the profiled rows (filled; where a profile has
    the model's shapes), and of the fitted curve (a line per product over T = 1-4,096; open markers
    where there is no profile). Without measured kernels, the products on the roof."""
    m, acc = check_model(model), check_accelerator(accelerator)
    dtype = precision.compute_dtype
    ridge = ridge_point(acc, dtype)
    reason = measured_reason(acc, precision)
    profile = None if reason else profile_for(m)
    pts = kernel_points(m, acc, precision, tokens)
    fig, ax = _figure((7.0, 5.4))
    xs = [p.intensity for p in pts]
    x = np.geomspace(min(xs + [ridge]) / 3, max(xs + [ridge]) * 3, 300)
    ax.plot(x, attainable_flops_per_s(x, acc, dtype) / TFLOP, color="0.2", lw=2, label=f"{acc.name} roofline ({dtype})")
    ax.axvline(ridge, color="0.5", ls=":", lw=1, label=f"ridge point {ridge:.0f} FLOP/byte")
    sweep = np.unique(np.geomspace(1, MAX_PROFILED_TOKENS, 80).round().astype(np.int64))
    for op in PROFILE_COLUMNS:
        mine = [p for p in pts if p.op == op]
        color = OP_COLORS[op]
        if reason:
            ax.scatter([p.intensity for p in mine], [p.attainable_flops_per_s / TFLOP for p in mine], marker="s",
                       s=26, facecolors="none", edgecolors=color, label=mine[0].label, zorder=4)
            continue
        k, n = mine[0].k, mine[0].n
        c = linear_cost(sweep, k, n, precision)
        fitted = np.asarray(kernels.linear_time_s(acc, sweep, k, n))
        ax.plot(np.asarray(c.flops / c.bytes), np.asarray(c.flops) / fitted / TFLOP, color=color, lw=1.2,
                label=mine[0].label)
        shown = [p for p in mine if p.profiled_s is not None]
        if shown:
            ax.scatter([p.intensity for p in shown], [p.flops / p.profiled_s / TFLOP for p in shown],
                       marker="o", s=30, color=color, edgecolors="black", linewidths=0.6, zorder=5)
        else:
            ax.scatter([p.intensity for p in mine], [p.flops / p.fitted_s / TFLOP for p in mine],
                       marker="o", s=30, facecolors="none", edgecolors=color, zorder=5)
    if not reason:
        ax.plot([], [], color="0.4", lw=1.2, label="fitted curve, T = 1 to 4,096 tokens")
        if profile:
            ax.scatter([], [], marker="o", color="0.6", edgecolors="black", linewidths=0.6,
                       label=f"profiled rows ({profile}, TP 1)")
    peak = acc.peak(dtype) / TFLOP
    eff = [p.efficiency for p in pts if p.efficiency is not None]
    ax.set(xscale="log", yscale="log", xlabel="arithmetic intensity (FLOP/byte)",
           ylabel="achieved TFLOP/s" if not reason else "attainable TFLOP/s",
           xlim=(x[0], x[-1]), ylim=(None, peak * 3),
           title=(f"{m.name}'s matrix products on the {acc.name}\n"
                  + (f"measured kernels reach {min(eff):.0%} to {max(eff):.0%} of the roof" if eff
                     else _no_measured_title(acc))))
    legend_below(fig)
    ax.grid(True, which="major", alpha=0.3)
    rows = [(p.label, p.tokens, p.intensity, p.attainable_flops_per_s / TFLOP,
             None if p.profiled_s is None else p.flops / p.profiled_s / TFLOP,
             None if p.fitted_s is None else p.flops / p.fitted_s / TFLOP,
             None if p.efficiency is None else 100 * p.efficiency) for p in pts]
    head = (f"no measured kernels for the {acc.name}" if reason else
            f"profiled rows: {profile} on the {acc.name}, TP 1" if profile else
            f"no profiled model has {m.name}'s shapes: the fitted curve only")
    table = head + "\n" + text_table(("product", "T", "FLOP/byte", "roof TFLOP/s", "profiled TFLOP/s",
                                      "fitted TFLOP/s", "% of roof"), rows,
                                     ("s", "d", ",.1f", ",.1f", ",.1f", ",.1f", ".0f"))
    return Plot(fig, table, {"points": pts, "ridge": ridge, "profile": profile})


def ttft_measured_plot(model, accelerator, precision: Precision = BF16, *, batch: int = 1, prompt_lens=None,
                       table_lens=(128, 512, 1024, 2048, 4096)) -> Plot:
    """TTFT against prompt length S (log-log): the ideal roofline and the measured kernels (dashed where
    B x S passes the profiles' 4,096 tokens: the curve extrapolates), with the profiled rows summed at
    the profiled lengths where a profile has the model's shapes."""
    m, acc = check_model(model), check_accelerator(accelerator)
    ideal, meas = deployments(acc, precision)
    lens = (np.asarray(prompt_lens, dtype=np.int64) if prompt_lens is not None else
            np.unique(np.concatenate([np.geomspace(16, 16384, 100).round(), table_lens]).astype(np.int64)))
    fig, ax = _figure()
    t_ideal = np.asarray(prefill_time_s(m, ideal, lens, batch))
    ax.plot(lens, t_ideal / MS, color=COLORS["ideal"], label="ideal roofline")
    data = {"prompt_lens": lens, "ideal_s": t_ideal}
    inside = batch * lens <= MAX_PROFILED_TOKENS
    if meas is not None:
        t_meas = np.asarray(prefill_time_s(m, meas, lens, batch))
        ax.plot(lens, np.where(inside, t_meas, np.nan) / MS, color=COLORS["measured"], label="measured kernels")
        if not inside.all():   # dashed from the last profiled length on: the curve extrapolates
            edge = max(int(np.sum(inside)) - 1, 0)
            ax.plot(lens[edge:], t_meas[edge:] / MS, color=COLORS["measured"], ls="--",
                    label="measured, beyond the profiled 4,096 tokens")
        marks = [s for s in (16, 32, 64, 128, 256, 512, 1024, 2048, 4096) if batch * s <= MAX_PROFILED_TOKENS]
        prof = [(s, profiled_prefill_time_s(m, meas, s, batch)) for s in marks]
        prof = [(s, t) for s, t in prof if t is not None]
        if prof:
            ax.scatter([s for s, _ in prof], [t / MS for _, t in prof], **PROFILED_STYLE,
                       label=f"profiled rows summed ({profile_for(m)})")
        data.update(measured_s=t_meas, profiled=prof)
    shade_context_window(ax, m, lens[-1])
    ratio = (np.asarray(data["measured_s"])[inside] / t_ideal[inside]) if meas is not None and inside.any() else None
    ax.set(xscale="log", yscale="log", xlabel="prompt length S (tokens)", ylabel="TTFT (ms)", xlim=(lens[0], lens[-1]),
           title=f"{m.name} on the {acc.name}, B = {batch}\n"
                 + (f"measured TTFT {ratio.min():.1f} to {ratio.max():.1f}× the ideal up to 4,096 tokens"
                    if ratio is not None else _no_measured_title(acc)))
    legend_below(fig)
    ax.grid(True, which="major", alpha=0.3)
    rows = []
    for s in table_lens:
        r = ttft(m, acc, precision, int(s), batch)
        rows.append((int(s), r.ideal_s / MS, None if r.measured_s is None else r.measured_s / MS,
                     None if r.profiled_s is None else r.profiled_s / MS, r.ratio))
    table = text_table(("S", "ideal ms", "measured ms", "profiled ms", "measured / ideal"), rows,
                       ("d", ",.1f", ",.1f", ",.1f", ".2f"))
    return Plot(fig, table, data)


def _decode_batches(limit: int, batches):
    if batches is not None:
        return np.asarray(batches, dtype=np.int64)
    return np.arange(1, max(2 * limit, 64) + 1, dtype=np.int64)


def decode_measured_plot(model, accelerator, context_len: int, precision: Precision = BF16, *, batches=None,
                         table_batches=(1, 8, 16, 32, 64)) -> Plot:
    """Two stacked panels against the decode batch B (linear axes): the step time, ideal and measured
    (with the profiled rows summed at the profiled batches), and the share of the datasheet bandwidth
    the step gets (bytes moved / step time / BW); the largest batch that fits is marked."""
    m, acc = check_model(model), check_accelerator(accelerator)
    ideal, meas = deployments(acc, precision)
    limit = fit_limit(m, acc, context_len, precision)
    b = _decode_batches(limit, batches)
    bw = acc.hbm_bytes_per_s
    fig, (a1, a2) = _figure(ncols=2)
    t_ideal = np.asarray(decode_step_time_s(m, ideal, context_len, b))
    a1.plot(b, t_ideal / MS, color=COLORS["ideal"], label="ideal roofline")
    a2.plot(b, 100 * np.asarray(decode_bandwidth(m, ideal, context_len, b)) / bw, color=COLORS["ideal"])
    data = {"batches": b, "ideal_s": t_ideal, "max_batch": limit}
    if meas is not None:
        t_meas = np.asarray(decode_step_time_s(m, meas, context_len, b))
        a1.plot(b, t_meas / MS, color=COLORS["measured"], label="measured kernels")
        a2.plot(b, 100 * np.asarray(decode_bandwidth(m, meas, context_len, b)) / bw, color=COLORS["measured"])
        marks = [int(x) for x in profiled_tokens(acc, profile_for(m)) if x <= b[-1]]
        prof = [(x, profiled_decode_step_time_s(m, meas, context_len, x)) for x in marks[::2] or marks]
        if prof:
            a1.scatter([x for x, _ in prof], [t / MS for _, t in prof], **PROFILED_STYLE,
                       label=f"profiled rows summed ({profile_for(m)})")
        data.update(measured_s=t_meas, profiled=prof)
    for ax in (a1, a2):
        if limit and limit <= b[-1]:
            ax.axvline(limit, color="tab:red", ls="--", lw=1, label=f"memory limit B = {limit}")
        ax.set(xlabel="batch size B (sequences)", xlim=(0, b[-1]))
        ax.grid(True, which="major", alpha=0.3)
    a1.set(ylabel="decode step time (ms)", ylim=(0, None),
           title=f"{m.name} on the {acc.name}, context {context_len:,}: step time"
                 + ("" if meas is not None else f"\n{_no_measured_title(acc)}"))
    a2.set(ylabel="% of the datasheet bandwidth", ylim=(0, 110),
           title="bytes moved / step time, against the datasheet")
    legend_below(fig)
    tb = sorted({int(x) for x in table_batches} | ({limit} if limit else set()))
    rows = []
    for x in tb:
        r = itl(m, acc, precision, context_len, x)
        rows.append((x, r.ideal_s / MS, None if r.measured_s is None else r.measured_s / MS,
                     None if r.profiled_s is None else r.profiled_s / MS,
                     100 * decode_bandwidth(m, ideal, context_len, x) / bw,
                     None if meas is None else 100 * decode_bandwidth(m, meas, context_len, x) / bw, bool(x <= limit)))
    table = text_table(("B", "ideal ms", "measured ms", "profiled ms", "ideal % of BW", "measured % of BW", "fits"),
                       rows, ("d", ".2f", ".2f", ".2f", ".0f", ".0f", "s"))
    return Plot(fig, table, data)


def latency_measured_plot(model, accelerator, precision: Precision = BF16, *, prompt_len: int = 1024,
                          context_len: int = 1024, batch: int = 1, step_overhead=None) -> Plot:
    """TTFT (top) and ITL (bottom) as horizontal bars: the ideal roofline, the measured kernels, and the
    measured kernels plus `step_overhead` (a kernels.StepOverhead; the bar is left out when None)."""
    m, acc = check_model(model), check_accelerator(accelerator)
    results = (ttft(m, acc, precision, prompt_len, batch, step_overhead),
               itl(m, acc, precision, context_len, batch, step_overhead))
    fig, axes = _figure(ncols=2)
    names = ["ideal roofline", "measured kernels", "measured + step overhead"]
    colors = [COLORS["ideal"], COLORS["measured"], COLORS["overhead"]]
    rows = []
    for ax, r, sub in zip(axes, results, (f"TTFT, S = {prompt_len:,}", f"ITL, context {context_len:,}")):
        values = [r.ideal_s, r.measured_s, r.overhead_s]
        keep = [i for i, v in enumerate(values) if v is not None][::-1]   # top to bottom: ideal first
        ax.barh([names[i] for i in keep], [values[i] / MS for i in keep], color=[colors[i] for i in keep])
        ax.set(xlabel=f"{r.what} (ms)", title=sub)
        ax.grid(True, axis="x", alpha=0.3)
        rows.append((r.what, r.ideal_s / MS, None if r.measured_s is None else r.measured_s / MS,
                     None if r.overhead_s is None else r.overhead_s / MS, r.ratio))
    fig.suptitle(f"{m.name} on the {acc.name}, B = {batch}\n"
                 + (f"measured: TTFT {results[0].ratio:.2f}×, ITL {results[1].ratio:.2f}× the ideal"
                    if results[0].measured_s is not None else _no_measured_title(acc)))
    table = text_table(("", "ideal ms", "measured ms", "measured + overhead ms", "measured / ideal"), rows,
                       ("s", ".2f", ".2f", ".2f", ".2f"))
    return Plot(fig, table, {"ttft": results[0], "itl": results[1]})


def throughput_measured_plot(model, accelerator, context_len: int, precision: Precision = BF16, *,
                             batches=None, table_batches=(1, 8, 16, 32, 64)) -> Plot:
    """Decode throughput against batch B (linear axes), ideal and measured (with the profiled rows summed
    at the profiled batches), B* and the largest batch that fits marked."""
    m, acc = check_model(model), check_accelerator(accelerator)
    ideal, meas = deployments(acc, precision)
    limit = fit_limit(m, acc, context_len, precision)
    bstar = kv_crossover_batch(m, context_len, precision)
    b = _decode_batches(limit, batches)
    fits = b <= limit
    fig, ax = _figure()
    curves = {"ideal roofline": (ideal, COLORS["ideal"])}
    if meas is not None:
        curves["measured kernels"] = (meas, COLORS["measured"])
    data = {"batches": b, "max_batch": limit, "b_star": bstar}
    for label, (dep, color) in curves.items():
        t = b / np.asarray(decode_step_time_s(m, dep, context_len, b))
        ax.plot(b, np.where(fits, t, np.nan), color=color, label=label)
        ax.plot(b, np.where(fits, np.nan, t), color=color, ls=":")
        data[label] = t
    if meas is not None:
        marks = [int(x) for x in profiled_tokens(acc, profile_for(m)) if x <= b[-1]]
        prof = [(x, x / profiled_decode_step_time_s(m, meas, context_len, x)) for x in marks[::2] or marks]
        if prof:
            ax.scatter([x for x, _ in prof], [t for _, t in prof], **PROFILED_STYLE,
                       label=f"profiled rows summed ({profile_for(m)})")
    ax.plot([], [], color="0.4", ls=":", label="does not fit in memory")
    ax.axvline(bstar, color="tab:green", ls="--", lw=1, label=f"B* = {bstar:.1f}")
    if limit and limit <= b[-1]:
        ax.axvline(limit, color="tab:red", ls="--", lw=1, label=f"memory limit B = {limit}")
    share = (data["measured kernels"] / data["ideal roofline"])[fits] if meas is not None and fits.any() else None
    ax.set(xlabel="batch size B (sequences)", ylabel="throughput (tokens/s)", xlim=(0, b[-1]), ylim=(0, None),
           title=f"{m.name} on the {acc.name}, context {context_len:,}\n"
                 + (f"measured throughput {share.min():.0%} to {share.max():.0%} of the ideal where it fits"
                    if share is not None else _no_measured_title(acc)))
    legend_below(fig)
    ax.grid(True, which="major", alpha=0.3)
    tb = sorted({int(x) for x in table_batches} | ({limit} if limit else set()))
    rows = []
    for x in tb:
        r = itl(m, acc, precision, context_len, x)
        rows.append((x, x / r.ideal_s, None if r.measured_s is None else x / r.measured_s,
                     None if r.profiled_s is None else x / r.profiled_s,
                     None if r.measured_s is None else r.ideal_s / r.measured_s, bool(x <= limit)))
    table = text_table(("B", "ideal tokens/s", "measured tokens/s", "profiled tokens/s", "measured / ideal", "fits"),
                       rows, ("d", ",.0f", ",.0f", ",.0f", ".2f", "s"))
    return Plot(fig, table, data)


# Sweeps past a model's context window on purpose (TTFT to 16k tokens; the region is shaded).
from inferlab.core.context import mark_yardsticks  # noqa: E402

mark_yardsticks(globals())

"""A scenario's times three ways: on the ideal roofline, on the measured kernels, and with the
profiled rows themselves: TTFT, ITL, throughput, tensor parallelism and the batch at which attention
takes half a decode step, for the chapter's sections "The same on a real GPU" (`notebook.measured_plots`
draws them).

    IDEAL, MEASURED = measured_latency.deployments(GPU, PREC)   # MEASURED is None where nothing was profiled
    measured_latency.profile_for(MODEL)                          # "internlm-20b": Llama-2 13B's linear shapes
    measured_latency.ttft(MODEL, GPU, PREC, 2048)                # a Measured: ideal, measured, profiled

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

from inferlab.core import kernels
from inferlab.core.costs import ATTENTION_OPS, decode_costs, linear_cost, prefill_costs
from inferlab.core.deployment import Deployment
from inferlab.core.efficiency import MEASURED_DTYPES, MeasuredKernels, small_kernels_time_s
from inferlab.core.latency import cost_per_1k_tokens_usd, decode_step_time_s, kv_crossover_batch, prefill_time_s
from inferlab.core.memory import fit_limit
from inferlab.core.parallel import tp_shard
from inferlab.core.roofline import attainable_flops_per_s, roofline_time_s
from inferlab.core.boundary import enters
from inferlab.core.specs import BF16, Accelerator, ModelConfig, Precision, data_dir
from inferlab.base.input_checks import positive_int

# The four linear products of a layer as a server runs them (Q, K, V fused; gate and up fused), the
# profiles' column for each, and their names.
PROFILE_COLUMNS = {"qkv": "attn_pre_proj", "o_proj": "attn_post_proj", "mlp_up": "mlp_up_proj",
                   "mlp_down": "mlp_down_proj"}
OP_LABELS = {"qkv": "fused QKV product", "o_proj": "output projection", "mlp_up": "fused gate and up product",
             "mlp_down": "MLP down projection"}
# The small kernels of one layer in the profiles and how many times a layer runs each (two residual
# adds, one profiled column): the composition efficiency.small_kernels_time_s fits.
SMALL_COLUMNS = (("input_layernorm", 1), ("post_attention_layernorm", 1), ("attn_rope", 1), ("mlp_act", 1),
                 ("add", 2))
MAX_PROFILED_TOKENS = 4096   # the profiles' largest token count
ROOFLINE_TOKENS = (1, 16, 64, 256, 1024, 4096)


# ---------------------------------------------------------------------------------------------
# Which measured model applies
# ---------------------------------------------------------------------------------------------

@enters(accelerator=Accelerator, precision=Precision)
def measured_reason(accelerator, precision: Precision = BF16) -> str:
    """'' when the measured kernels time `accelerator` at `precision`, else one sentence saying why not
    (no profiles for the accelerator, or a number format the profiles lack)."""
    acc = accelerator
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


@enters(model=ModelConfig)
def profile_for(model) -> str | None:
    """The profiled model whose linear products have exactly `model`'s shapes at TP 1 (d, query and KV
    heads, head dimension, f, gated MLP), or None. Llama-2 13B: 'internlm-20b'."""
    m = model
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


@enters(accelerator=Accelerator)
def profiled_tokens(accelerator, profile: str | None) -> np.ndarray:
    """The token counts profiled for `profile` on `accelerator` at TP 1 (empty when none)."""
    acc = accelerator
    if profile is None:
        return np.zeros(0, dtype=np.int64)
    return np.array(sorted(_profiled_rows(acc.name, profile)), dtype=np.int64)


@enters(model=ModelConfig)
def linear_shapes(model) -> dict:
    """{op: (k, n)} of a layer's four products at TP 1, as a server fuses them: QKV (d by q + 2 kv
    widths), the output projection, the gate and up matrices side by side (d by 2f; f without a
    gate), down (f by d)."""
    m = model
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

    @property
    def fitted_efficiency(self) -> float | None:
        """The same with the fitted curve's time (None: no measured kernels)."""
        return None if self.fitted_s is None else self.flops / self.fitted_s / self.attainable_flops_per_s


@enters(model=ModelConfig, accelerator=Accelerator)
def kernel_point(model, accelerator, precision: Precision = BF16, op: str = "mlp_up", tokens: int = 1) -> KernelPoint:
    """`op` (qkv, o_proj, mlp_up, mlp_down) of `model` at TP 1 over `tokens` rows on `accelerator`."""
    m, acc = model, accelerator
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


@enters(model=ModelConfig)
def layer_kernels_s(model, accelerator, tokens: int) -> tuple:
    """(profiled, fitted) seconds of one layer's kernels other than attention over `tokens` rows at TP 1:
    the four products, two norms, rotary, the activation and two residual adds. profiled: the
    matching profile's row summed (None without one, or at a token count it lacks); fitted: the
    curves `efficiency.MeasuredKernels` sums for the same kernels."""
    m, acc = model, kernels.check_measured(accelerator)
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


@enters(model=ModelConfig)
def profiled_prefill_time_s(model, deployment, prompt_len: int, batch: int = 1):
    """`latency.prefill_time_s` on a measured TP-1 deployment with every layer's non-attention kernels
    summed from the profiled rows at T = batch x prompt_len instead of the fitted curves; None where no
    profile matches the model or T was not profiled."""
    m, d = model, _check_measured_tp1(deployment)
    tokens = int(positive_int("batch", batch)) * int(positive_int("prompt_len", prompt_len))
    return _with_profiled_layers(m, d, tokens, prefill_time_s(m, d, prompt_len, batch))


@enters(model=ModelConfig)
def profiled_decode_step_time_s(model, deployment, context_len: int, batch: int = 1):
    """`latency.decode_step_time_s` on a measured TP-1 deployment with every layer's non-attention kernels
    summed from the profiled rows at T = batch; None where none matches or T was not profiled."""
    m, d = model, _check_measured_tp1(deployment)
    return _with_profiled_layers(m, d, int(positive_int("batch", batch)), decode_step_time_s(m, d, context_len, batch))


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


@enters(model=ModelConfig)
def ttft(model, accelerator, precision: Precision = BF16, prompt_len: int = 1024, batch: int = 1,
         step_overhead=None) -> Measured:
    """TTFT (one prefill pass) of `batch` prompts of `prompt_len` tokens on one accelerator, three ways
    (`overhead_s` with `step_overhead`, a kernels.StepOverhead, where given)."""
    m = model
    ideal, meas = deployments(accelerator, precision)
    reason = measured_reason(accelerator, precision)
    t_ideal = prefill_time_s(m, ideal, prompt_len, batch)
    if meas is None:
        return Measured("TTFT", t_ideal, reason=reason)
    t = prefill_time_s(m, meas, prompt_len, batch)
    over = (t + step_overhead.time_s(batch)) if step_overhead is not None else None
    return Measured("TTFT", t_ideal, t, profiled_prefill_time_s(m, meas, prompt_len, batch), over)


@enters(model=ModelConfig)
def itl(model, accelerator, precision: Precision = BF16, context_len: int = 1024, batch: int = 1,
        step_overhead=None) -> Measured:
    """ITL (one decode step of `batch` sequences at `context_len`), three ways, as `ttft`."""
    m = model
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


@enters(model=ModelConfig)
def attention_share(model, deployment, *, prompt_len=None, context_len=None, batch=1):
    """Attention's QK^T and PV as a share of one pass's kernel time on one device (no communication, no
    step overhead): a prefill of `prompt_len` tokens or a decode step at `context_len`. Under measured
    kernels this is the part of the time that no profile covers (it stays on the ideal roofline)."""
    m = model
    shard, costs = _pass_costs(m, deployment, prompt_len, context_len, batch)
    eff = deployment.efficiency_model
    full = eff.pass_time_s(costs, shard, deployment)
    rest = eff.pass_time_s(costs.without(*ATTENTION_OPS), shard, deployment)
    out = 1.0 - np.asarray(rest) / np.asarray(full)
    return out if out.ndim else float(out)


@enters(accelerator=Accelerator)
def bandwidth_share(nbytes, time_s, accelerator):
    """The share of the datasheet bandwidth a kernel or a step gets: bytes moved / time / HBM bandwidth."""
    return nbytes / time_s / accelerator.hbm_bytes_per_s


@enters(model=ModelConfig)
def step_bytes(model, precision: Precision, context_len: int, batch=1, tp: int = 1):
    """Bytes one device moves in a decode step: its weights, the batch's KV caches, the activations."""
    shard = tp_shard(model, tp)
    return decode_costs(shard, batch, context_len, precision).total.bytes


@enters(model=ModelConfig)
def decode_bandwidth(model, deployment, context_len: int, batch=1):
    """The bandwidth a decode step really gets on `deployment`: the bytes one device moves
    (`step_bytes`) over the step's time (`latency.decode_step_time_s`), in bytes/s."""
    m = model
    nbytes = step_bytes(m, deployment.precision, context_len, batch, deployment.tp)
    out = np.asarray(nbytes) / np.asarray(decode_step_time_s(m, deployment, context_len, batch))
    return out if out.ndim else float(out)


@enters(model=ModelConfig)
def attention_crossover_batch(model, deployment, context_len: int, max_batch: int = 1 << 14):
    """The smallest batch at which a decode step spends as long in attention (reading the caches) as in
    everything else (reading the weights): on the ideal roofline about B* = M_weights / C_kv; with the
    weights read at the measured kernels' speed, later. None when no batch up to max_batch gets there."""
    m = model
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


@enters(model=ModelConfig)
def tensor_parallel(model, accelerator, precision: Precision = BF16, prompt_len: int = 1024,
                    context_len: int = 1024, batch: int = 1, tps=(1, 2, 4, 8)) -> TensorParallel:
    """TTFT and ITL at each K of `tps` (1 first), ideal and measured (module doc)."""
    m = model
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


@enters(model=ModelConfig)
def batching(model, accelerator, precision: Precision = BF16, context_len: int = 1024,
             usd_per_gpu_hour: float = 4.0) -> Batching:
    """The numbers of `Batching` for `model` on one `accelerator` (0 sequences fit: max_batch 0 and
    the B = max_batch entries repeat B = 1)."""
    m = model
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

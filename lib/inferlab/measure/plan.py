"""What to measure on which device: the model, its sweeps, and whether it fits in memory.

A GPU with room for it runs Llama-2 13B's real shapes in bf16 (26 GB of weights), so the
book's numbers are measured directly; smaller GPUs fall back to 7B, then to the CPU config.
A CPU runs `cpu-0.5b`: Llama-2's layout at d = 2048 and 8 layers, 0.54 B parameters, whose
weights (1.1 GB in bf16, 2.2 GB in fp32) are well beyond a last-level cache, yet whose whole
suite runs in about a minute on two cores. Memory is checked before anything is allocated:
weights + KV cache + activations + a margin, all from the library's own formulas.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from inferlab.measure.ceilings import stream_buffer_bytes
from inferlab.core.memory import kv_cache_bytes, max_batch, weight_bytes
from inferlab.core.specs import Accelerator, ModelConfig, Precision, get_model, list_models
from inferlab.base.units import GB, bytes_per_element
from inferlab.base.input_checks import DoesNotFitError, choice

CPU_MODEL = ModelConfig(
    name="cpu-0.5b", d_model=2048, n_layers=8, n_heads=16, n_kv_heads=16, head_dim=128, d_ff=5632,
    gated_mlp=True, vocab_size=32000,
    description="Llama-2 layout (SwiGLU, MHA, 32k vocabulary) scaled to a CPU: 0.54 B parameters.",
    source="inferlab.measure: sized so the weights dwarf a last-level cache and the suite takes ~1 min on 2 cores")
TINY_MODEL = ModelConfig(
    name="tiny", d_model=256, n_layers=2, n_heads=4, n_kv_heads=4, head_dim=64, d_ff=688,
    gated_mlp=True, vocab_size=4096,
    description="A 3.9 M-parameter Llama layout for tests: seconds, and it fits in any cache.",
    source="inferlab.measure test preset")
PRESETS = {m.name: m for m in (CPU_MODEL, TINY_MODEL)}
# Largest first: the first that fits in free memory is measured.
GPU_CANDIDATES = ("llama-2-13b", "llama-2-7b", "cpu-0.5b")
DECODE_MODES = ("auto", "eager", "graph", "compile")
# The stages of a run, in order, and the seconds each may take (measure.budget). A stage past its budget takes no
# new size, round, repeat or extra; what cannot be cut (a compile, a sweep's first point) runs anyway.
STAGES = ("ceilings", "roofline", "building", "operator profile", "TTFT", "ITL", "one request", "batch sweep",
          "ceilings again")


def _budgets(*seconds) -> tuple:
    return tuple(zip(STAGES, (float(s) for s in seconds)))


# cpu-0.5b, quick: 270 s in all, under the 5 minutes a quick run is promised on 2 cores. Set from the stored runs'
# stage_elapsed_s (the durations they showed: docs/lab-notes.md): the profile keeps the rounds that fit,
# and TTFT's per-operator breakdown of the longest prefill takes as many profiled calls as fit.
CPU_QUICK_BUDGETS = _budgets(15, 10, 15, 95, 45, 30, 10, 45, 5)
CPU_FULL_BUDGETS = _budgets(30, 30, 30, 300, 150, 90, 20, 150, 10)
GPU_QUICK_BUDGETS = _budgets(60, 30, 120, 180, 60, 60, 30, 120, 30)
GPU_FULL_BUDGETS = _budgets(60, 60, 120, 600, 300, 300, 60, 300, 30)
# The tests' and notebooks' model takes seconds a stage, but a compile on a busy machine can take minutes, and
# their checks need every point: an hour a stage, never cut.
TINY_BUDGETS = _budgets(*(3600,) * len(STAGES))


def resolve_decode_mode(mode: str, kind: str) -> str:
    """The decode mode a plan's `mode` means on a device kind: auto is one CUDA graph on a GPU
    (cuda), torch.compile with freezing on a CPU, eager elsewhere (mps)."""
    choice("decode_mode", mode, DECODE_MODES)
    if mode != "auto":
        return mode
    return {"cuda": "graph", "cpu": "compile"}.get(kind, "eager")


def resolve_model(name) -> ModelConfig:
    """A measurement preset (cpu-0.5b, tiny), a name from data/models.toml, or a ModelConfig."""
    if isinstance(name, ModelConfig):
        return name
    if name in PRESETS:
        return PRESETS[name]
    choice("model", name, list(PRESETS) + list_models())
    return get_model(name)


@dataclass(frozen=True)
class Plan:
    """One suite: the model and dtype, the sweeps, the ceiling sizes and the time budgets."""

    model: ModelConfig
    dtype: str
    device: str
    quick: bool
    prompt_lens: tuple            # TTFT sweep at B = 1
    contexts: tuple               # ITL sweep at B = 1
    batch_context: int            # the context of every sequence in the batch sweep
    batch_cap: int                # batches 1, 2, 4, ... up to this or the memory limit
    generate_prompt: int          # one vLLM-style request: prompt, then `generate_tokens` tokens
    generate_tokens: int
    roofline_ms: tuple            # rows M of the measured roofline
    roofline_shape: tuple         # (d, f) of its weight
    copy_bytes: float             # copy-bandwidth buffer
    matmul_n: int                 # square product for the FLOP/s ceiling
    decode_mode: str = "auto"
    point_time_s: float = 2.0     # time budget per measured point (after min repeats)
    margin_bytes: float = 0.5e9   # kept free besides the estimate
    batches: tuple = field(default=())  # filled by fit_batches
    batch_limit: int = 0                # the memory limit fit_batches found
    stage_budget_s: tuple = CPU_QUICK_BUDGETS  # ((stage, seconds), ...) in STAGES' order

    def budgets_s(self) -> dict:
        """{stage: seconds} (a new dict)."""
        return dict(self.stage_budget_s)

    @property
    def precision(self) -> Precision:
        return Precision(self.dtype, self.dtype, self.dtype)

    @property
    def max_seq_len(self) -> int:
        """KV positions needed by the B = 1 phase (TTFT, ITL and the generated request)."""
        return max(max(self.prompt_lens, default=1), max(self.contexts, default=1),
                   self.generate_prompt + self.generate_tokens if self.generate_tokens else 1)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["model"] = asdict(self.model)
        return d


def activation_bytes(model: ModelConfig, tokens: int, batch: int, precision: Precision) -> float:
    """A generous bound on the activations alive during one forward pass of `tokens` tokens in
    `batch` sequences: a dozen T x max(d_ff, d) tensors in fp32 (norms and rotary run in fp32)
    plus the fp32 logits of the last position of each sequence."""
    width = max(model.d_ff, model.d_model, model.q_dim + 2 * model.kv_dim)
    per = max(4.0, bytes_per_element(precision.activations))
    return 12.0 * tokens * width * per + batch * model.vocab_size * 4.0


def memory_needed(plan: Plan) -> dict:
    """Bytes of the B = 1 phase: weights, KV cache for max_seq_len, activations of the longest
    prefill, margin (fixed plus 10 %). Returns each part and the total."""
    m, p = plan.model, plan.precision
    w = weight_bytes(m, p)
    kv = kv_cache_bytes(m, plan.max_seq_len, 1, p)
    act = activation_bytes(m, max(max(plan.prompt_lens, default=1), plan.generate_prompt), 1, p)
    margin = plan.margin_bytes + 0.1 * (w + kv + act)
    return {"weights": w, "kv_cache": kv, "activations": act, "margin": margin,
            "total": w + kv + act + margin}


def check_fits(plan: Plan, free_bytes: float, where: str) -> dict:
    """Raise DoesNotFitError (a ValueError) naming the sizes when the plan cannot fit in
    `free_bytes`; return memory_needed(plan) otherwise. Called before anything is allocated."""
    need = memory_needed(plan)
    if need["total"] > free_bytes:
        parts = ", ".join(f"{k.replace('_', ' ')} {v / GB:.2f} GB" for k, v in need.items() if k != "total")
        raise DoesNotFitError(
            f"measuring {plan.model.name} in {plan.dtype} needs {need['total'] / GB:.2f} GB ({parts}) "
            f"but only {free_bytes / GB:.2f} GB is free on {where}; choose a smaller --model "
            f"(allowed here: one needing < {free_bytes / GB:.2f} GB, e.g. {', '.join(PRESETS)}), "
            "a smaller dtype or --quick")
    return need


def fit_batches(plan: Plan, free_bytes: float) -> Plan:
    """The batch sweep: 1, 2, 4, ... up to batch_cap and the memory limit (library max_batch at
    batch_context, with the weights, activations and margin reserved), the limit itself last."""
    m, p = plan.model, plan.precision
    act = activation_bytes(m, plan.batch_cap, plan.batch_cap, p)
    reserved = act + plan.margin_bytes + 0.1 * weight_bytes(m, p)
    acc = Accelerator(name="free memory", memory_bytes=max(free_bytes, 1.0), hbm_bytes_per_s=1.0,
                      peak_flops_per_s={p.compute_dtype: 1.0})
    limit = int(max_batch(m, acc, plan.batch_context, p, reserved_bytes=reserved, allow_zero=True))
    top = min(plan.batch_cap, limit)
    batches = [b for b in (2 ** i for i in range(16)) if b <= top]
    if top >= 1 and top not in batches:
        batches.append(top)
    return replace(plan, batches=tuple(batches), batch_limit=limit)


def _sweeps(kind: str, quick: bool) -> dict:
    if kind == "cpu":
        if quick:
            return dict(prompt_lens=(128, 512, 1024), contexts=(128, 512, 2048), batch_context=256,
                        batch_cap=32, generate_prompt=128, generate_tokens=16,
                        roofline_ms=(1, 4, 16, 64, 256, 1024, 4096), point_time_s=1.5,
                        stage_budget_s=CPU_QUICK_BUDGETS)
        return dict(prompt_lens=(64, 128, 256, 512, 1024), contexts=(64, 256, 512, 1024, 2048),
                    batch_context=256, batch_cap=128, generate_prompt=256, generate_tokens=32,
                    roofline_ms=tuple(2 ** i for i in range(13)), point_time_s=2.5, stage_budget_s=CPU_FULL_BUDGETS)
    if quick:
        return dict(prompt_lens=(512, 2048), contexts=(512, 2048), batch_context=1024, batch_cap=64,
                    generate_prompt=512, generate_tokens=32, roofline_ms=(1, 16, 256, 4096),
                    point_time_s=1.0, stage_budget_s=GPU_QUICK_BUDGETS)
    return dict(prompt_lens=(128, 256, 512, 1024, 2048, 4096, 8192),
                contexts=(128, 512, 1024, 2048, 4096, 8192), batch_context=1024, batch_cap=256,
                generate_prompt=1024, generate_tokens=64, roofline_ms=tuple(2 ** i for i in range(13)),
                point_time_s=2.0, stage_budget_s=GPU_FULL_BUDGETS)


TINY_SWEEPS = dict(prompt_lens=(64, 512), contexts=(64, 512), batch_context=64, batch_cap=16,
                   generate_prompt=32, generate_tokens=8, roofline_ms=(1, 16, 256), point_time_s=0.2,
                   stage_budget_s=TINY_BUDGETS)


def make_plan(kind: str, dtype: str, *, quick: bool = False, model=None, cache_bytes: float = 0.0,
              decode_mode: str = "auto") -> Plan:
    """The plan for a device kind ('cpu', 'cuda', 'mps') and dtype. `model`: a preset or
    models.toml name (default: cpu-0.5b on a CPU, llama-2-13b on a GPU)."""
    choice("decode_mode", decode_mode, DECODE_MODES)
    cfg = resolve_model(model or ("cpu-0.5b" if kind == "cpu" else GPU_CANDIDATES[0]))
    gpu = kind != "cpu"
    sweeps = TINY_SWEEPS if cfg.name == "tiny" else _sweeps("cpu" if not gpu else "gpu", quick)
    if cfg.name == "tiny":
        copy_bytes, matmul_n, shape = 32e6, 256, (cfg.d_model, cfg.d_ff)
    elif gpu:
        copy_bytes, matmul_n, shape = 2 * 2**30, 8192, (5120, 13824)
    else:
        # 4 x the last-level cache, at least 256 MiB (ceilings.stream_buffer_bytes; capped by free memory
        # when the suite runs).
        copy_bytes, matmul_n, shape = stream_buffer_bytes(cache_bytes), 2048, (cfg.d_model, cfg.d_ff)
    margin = 1e9 if gpu else 0.5e9
    return Plan(model=cfg, dtype=dtype, device=kind, quick=quick, roofline_shape=shape,
                copy_bytes=copy_bytes, matmul_n=matmul_n, decode_mode=decode_mode,
                margin_bytes=margin, **sweeps)


def largest_fitting_plan(kind: str, dtype: str, free_bytes: float, *, quick: bool = False,
                         cache_bytes: float = 0.0, decode_mode: str = "auto") -> Plan:
    """On a GPU: the first of GPU_CANDIDATES whose plan fits in `free_bytes`."""
    last_err = None
    for name in GPU_CANDIDATES:
        plan = make_plan(kind, dtype, quick=quick, model=name, cache_bytes=cache_bytes,
                         decode_mode=decode_mode)
        try:
            check_fits(plan, free_bytes, kind)
            return plan
        except DoesNotFitError as err:
            last_err = err
    raise last_err

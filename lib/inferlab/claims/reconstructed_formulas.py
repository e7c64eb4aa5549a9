"""Formulas and tables the chapter announces ("the intensity evaluates to", "Throughput at various
batch sizes:") but whose display was lost, reconstructed from the surrounding numbers.

Each entry of data/lost_formulas.toml gives LaTeX with placeholders <<name>> (or <<name:spec>>)
filled by values the library computes, and names a table function below.
"""
from __future__ import annotations

import inspect
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path


from inferlab.claims.registry import SECTIONS, RegistryError
from inferlab.claims.quantities import METHODS, QUANTITIES
from inferlab.core.costs import decode_costs, prefill_costs
from inferlab.core.latency import decode_step_rule_s, decode_step_time_s, kv_crossover_batch, prefill_time_s, ttft_rule_s
from inferlab.core.memory import kv_cache_bytes, max_batch, memory_budget, weight_bytes
from inferlab.core.roofline import bound
from inferlab.core.specs import get_accelerator, get_model, model_variant
from inferlab.base.units import GB
from inferlab.core.context import yardstick  # @yardstick: sweeps past a model's context on purpose, no warning

TABLES = {}
_PLACEHOLDER = re.compile(r"<<(\w+)(?::([^>]*))?>>")


def _table(fn):
    TABLES[fn.__name__] = fn
    return fn


@yardstick
def text_table(headers, rows, formats) -> str:
    """Right-aligned plain text; `formats` is a format spec per column ("s" for text)."""
    cells = [[format(v, f) if f != "s" else str(v) for v, f in zip(row, formats)] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    out = ["  ".join(h.rjust(w) for h, w in zip(headers, widths)),
           "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
    return "\n".join(out)


# -------------------------------------------------------------------------------------------------
# Tables
# -------------------------------------------------------------------------------------------------

@_table
@yardstick
def mlp_prefill(model, accelerator, prompt_lens, batch=1):
    """One MLP layer in prefill: FLOPs, weight and activation bytes, intensity against B·S."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    rows = []
    for s in prompt_lens:
        c = prefill_costs(model, batch, s)
        m = c.mlp * (1.0 / c.n_layers)
        i = float(m.intensity)
        rows.append((s, float(m.flops) / 1e9, float(m.weight_bytes) / 1e6, float(m.activation_bytes) / 1e6,
                     batch * s, i, bound(i, accelerator)))
    return text_table(("S", "GFLOP", "weights MB", "activations MB", "B·S", "intensity", "bound"), rows,
                      ("d", ",.1f", ",.1f", ",.1f", ",d", ",.0f", "s"))


@_table
@yardstick
def attention_prefill(model, accelerator, prompt_lens):
    """QK^T and PV of one layer in prefill: dense S·T/(S+T) against the causal count."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    rows = []
    for s in prompt_lens:
        dense = prefill_costs(model, 1, s, causal=False).attention
        causal = prefill_costs(model, 1, s).attention
        rows.append((s, float(dense.flops) / 1e9 / model.n_layers, float(dense.intensity),
                     float(causal.intensity), bound(float(causal.intensity), accelerator)))
    return text_table(("S = T", "GFLOP/layer dense", "S·T/(S+T) dense", "causal", "bound"), rows,
                      ("d", ",.1f", ",.0f", ",.0f", "s"))


@_table
@yardstick
def kv_cache(model, seq_lens, batch=1):
    """KV cache per sequence: 2·L·N_kv·H·S·2 bytes."""
    m = model = get_model(model)
    rows = [(s, 2 * m.n_layers * m.n_kv_heads * m.head_dim * s * 2,
             float(kv_cache_bytes(m, s, batch)) / GB) for s in seq_lens]
    return text_table(("S", "bytes", "GB"), rows, ("d", ",d", ".3f"))


@_table
@yardstick
def decode_intensity(model, accelerator, context_len, batches):
    """MLP and attention intensity of one decode step against the batch."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    rows = []
    for b in batches:
        c = decode_costs(model, b, context_len)
        rows.append((b, float(c.mlp.intensity), float(c.attention.intensity),
                     bound(float(c.mlp.intensity), accelerator)))
    return text_table(("B", "MLP FLOP/byte", "attention FLOP/byte", "MLP bound"), rows,
                      ("d", ".2f", ".3f", "s"))


@_table
@yardstick
def decode_step(model, accelerator, context_len, batches, weights_gb=26.0, kv_gb=None):
    """Bytes per step and step time, the book's (M + B·C_kv)/BW against the full model."""
    m = model = get_model(model)
    accelerator = get_accelerator(accelerator)
    kv = kv_gb if kv_gb is not None else float(kv_cache_bytes(m, context_len)) / GB
    rows = []
    for b in batches:
        rule = decode_step_rule_s(weights_gb * GB, kv * GB, b, accelerator)
        full = decode_step_time_s(m, accelerator, context_len, b)
        rows.append((b, weights_gb + b * kv, rule * 1e3, b / rule, full * 1e3, b / full))
    return text_table(("B", "GB read (book)", "step ms (book)", "tok/s (book)", "step ms (full)",
                       "tok/s (full)"), rows, ("d", ".1f", ".2f", ",.0f", ".2f", ",.0f"))


@_table
@yardstick
def throughput(model, accelerator, context_len, batches, weights_gb=26.0, kv_gb=0.84):
    """15.2.2's lost table: throughput against batch, book's formula and full model, and whether
    the batch fits in memory."""
    m = model = get_model(model)
    acc = accelerator = get_accelerator(accelerator)
    rows = []
    for b in batches:
        rule = decode_step_rule_s(weights_gb * GB, kv_gb * GB, b, acc)
        full = decode_step_time_s(m, acc, context_len, b)
        fits = bool(memory_budget(m, acc, b, context_len).fits)
        rows.append((b, weights_gb + b * kv_gb, rule * 1e3, b / rule, full * 1e3, b / full,
                     "yes" if fits else "no"))
    return text_table(("B", "GB read", "step ms (book)", "tok/s (book)", "step ms (full)", "tok/s (full)",
                       "fits 80 GB"), rows, ("d", ".1f", ".2f", ",.0f", ".2f", ",.0f", "s"))


@_table
@yardstick
def ttft(model, accelerator, prompt_lens, params=13e9, peak_tflops=None):
    """TTFT: the book's 2·P·S/peak against the full model (attention included).

    The 2·P·S column divides by `peak_tflops` where given (the book's printed peak, so the column
    agrees with the formula above it and with 15.1.1's errata), else by the accelerator's datasheet
    peak; the full model always runs at the accelerator's own roofline."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    def rule_s(s):
        return 2 * params * s / (peak_tflops * 1e12) if peak_tflops else ttft_rule_s(params, s, accelerator)
    rows = [(s, rule_s(s) * 1e3, prefill_time_s(model, accelerator, s) * 1e3) for s in prompt_lens]
    return text_table(("S", "2·P·S/peak ms", "full model ms"), rows, (",d", ",.1f", ",.1f"))


@_table
@yardstick
def crossover(model, accelerator, context_len, kv_heads):
    """C_kv, B* and the memory-limited batch for several KV-head counts (GQA at equal parameters)."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    rows = []
    for n in kv_heads:
        v = model_variant(model, n)
        rows.append((n, float(kv_cache_bytes(v, context_len)) / GB, float(weight_bytes(v)) / GB,
                     kv_crossover_batch(v, context_len), int(max_batch(v, accelerator, context_len))))
    return text_table(("N_kv", "C_kv GB", "M GB", "B*", "max B (80 GB)"), rows,
                      ("d", ".3f", ".2f", ".1f", "d"))


@_table
@yardstick
def weights(models):
    """Weight memory 2·P in bf16."""
    rows = [(m, get_model(m).n_params / 1e9, float(weight_bytes(get_model(m))) / GB) for m in models]
    return text_table(("model", "P (billions)", "GB (bf16)"), rows, ("s", ".2f", ".1f"))


# -------------------------------------------------------------------------------------------------
# Registry of lost formulas
# -------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LostFormula:
    """A formula the text announces and does not show: the LaTeX (numbers filled in by the library)
    and a table computed by the library."""

    id: str
    section: str
    title: str
    after: str
    latex: str
    remark: str = ""
    table_name: str = ""
    table_inputs: dict = field(default_factory=dict, hash=False)

    def table(self) -> str:
        return TABLES[self.table_name](**self.table_inputs) if self.table_name else ""


def _value(fid, name, spec, defaults):
    kind = "function" if "function" in spec else "method"
    table = QUANTITIES if kind == "function" else {k: v.function for k, v in METHODS.items()}
    fn = table.get(spec.get(kind))
    if fn is None:
        raise RegistryError(f"lost formula {fid}: value {name!r} names an unknown {kind} {spec.get(kind)!r}")
    params = inspect.signature(fn).parameters
    kwargs = {k: v for k, v in defaults.items() if k in params}
    kwargs.update(spec.get("inputs", {}))
    return float(fn(**kwargs))


def _fill(fid, template, values, latex: bool = True) -> str:
    def sub(m):
        name, spec = m.group(1), m.group(2) or ".3g"
        if name not in values:
            raise RegistryError(f"lost formula {fid}: placeholder <<{name}>> has no value; "
                                f"defined: {', '.join(values) or 'none'}")
        text = format(values[name], spec)
        mant, e, exp = text.partition("e")
        if latex:
            mant = mant.replace(",", "{,}")  # a bare comma in math mode is followed by a space
        if e:
            return rf"{mant} \times 10^{{{int(exp)}}}" if latex else f"{mant}e{int(exp)}"
        return mant
    return _PLACEHOLDER.sub(sub, template)


@yardstick
def load_lost_formulas(section: str | None = None, *, path=None) -> list[LostFormula]:
    """The lost formulas of data/lost_formulas.toml (of one section when given), values filled."""
    if section is not None and section not in SECTIONS:
        raise RegistryError(f"unknown section {section!r}; allowed: {', '.join(SECTIONS)}")
    if path is None:
        from inferlab.core.specs import data_dir
        path = data_dir() / "lost_formulas.toml"
    data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    defaults = data.get("defaults", {})
    out = []
    for raw in data.get("formula", []):
        fid = raw.get("id", "<no id>")
        missing = [k for k in ("id", "section", "title", "after", "latex") if k not in raw]
        if missing:
            raise RegistryError(f"lost formula {fid}: missing field(s) {', '.join(missing)}")
        if section is not None and raw["section"] != section:
            continue
        values = {name: _value(fid, name, spec, defaults) for name, spec in raw.get("values", {}).items()}
        table_name = raw.get("table", "")
        if table_name and table_name not in TABLES:
            raise RegistryError(f"lost formula {fid}: unknown table {table_name!r}; known: {', '.join(TABLES)}")
        inputs = dict(raw.get("table_inputs", {}))
        if table_name:
            params = inspect.signature(TABLES[table_name]).parameters
            inputs = {**{k: v for k, v in defaults.items() if k in params}, **inputs}
        out.append(LostFormula(fid, raw["section"], raw["title"], raw["after"],
                               _fill(fid, raw["latex"].strip(), values),
                               _fill(fid, " ".join(raw.get("remark", "").split()), values, latex=False),
                               table_name, inputs))
    return out



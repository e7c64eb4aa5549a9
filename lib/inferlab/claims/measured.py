"""The chapter's practice numbers against measured H100 kernels.

Where the book states what a deployment takes in practice ("TTFT ... lands in the 100-200 ms range",
"latency ~8 ms/token", "peak throughput ~2,700 tok/s"), its number is recomputed three ways, and each
value is judged by the one verdict rule of the registry (`evaluate.rule`, the same band):

    ideal               the registry's "ours": the per-operator roofline at the datasheet's peak
    measured            every matrix product and small kernel at the time Vidur measured on the
                        accelerator (`efficiency.MeasuredKernels`; attention stays on the roofline)
    measured + overhead the same plus an engine's CPU time per step: Vidur's A100 scheduler profile
                        (`kernels.StepOverhead.from_profile(OVERHEAD_PROFILE)`, one step per pass)

Each quantity involved has a measured twin below: the same inputs as its `claims.quantities`
namesake, and a `Deployment(accelerator, efficiency=MeasuredKernels(), step_overhead=...)` in place
of the bare accelerator. Nothing global switches: the registry's verdicts (data/claims.toml,
ERRATA.md) stay the ideal model's, and the book's own arithmetic keeps its verdicts against it.
"""
from __future__ import annotations

import inspect
import json
from dataclasses import dataclass
from typing import Callable

import numpy as np

from inferlab.claims.evaluate import display, evaluate, rule
from inferlab.claims.registry import SECTIONS, Claim, Registry, RegistryError, load_registry
from inferlab.core.context import yardstick
from inferlab.core.deployment import Deployment
from inferlab.core.efficiency import MeasuredKernels
from inferlab.core.kernels import StepOverhead
from inferlab.core.latency import decode_step_time_s, prefill_time_s
from inferlab.core.specs import Precision, get_accelerator, get_model, model_variant

# The scheduler profile whose CPU time per step is added: Vidur profiled no 13B model; Llama-2 7B
# at TP 1 is the nearest (an engine's CPU time per step hardly depends on the model's size).
OVERHEAD_PROFILE = "llama-2-7b"

# The claims judged here: each states a time or a throughput a real deployment shows (what a reader
# would measure), with the reason it is one. Every claim of a "practice" part whose quantity is a
# time, a throughput or follows from one is here or in LEFT_OUT (tests/test_claims_measured.py).
PRACTICE = (
    ("15.1.1-n", "TTFT of a 2K-token prompt 'in practice' on one H100: a measured time, in the book's words"),
    ("15.1.1-p", "prompts one prefill fits in a 200 ms TTFT budget: set by the prefill time a GPU achieves"),
    ("15.1.1-q", "prefill of an 8,192-token prompt 'takes ~640 ms': advice on what a long prompt costs"),
    ("15.1.1-r", "prefill of a 32,768-token prompt 'over 2.5 seconds': the same, beyond the profiled 4,096 tokens"),
    ("15.1.2-af", "'~8 ms/token' at B = 1: the latency a low-concurrency service sees"),
    ("15.1.2-ag", "125 tokens/s at B = 1: the same step as a throughput"),
    ("15.1.2-ah", "'~10 ms/token' at B = 32: the latency of a batched service"),
    ("15.1.2-ai", "3,200 tokens/s at B = 32: the same step as a throughput"),
    ("15.2.1-v", "an ITL of 8 ms in bf16: the starting point of the quantisation advice"),
    ("15.2.1-x", "~26 ms of TTFT per 1,000 more prompt tokens: the advice to prune prompts"),
    ("15.2.1-ad", "'expect ~8 ms/token' at B = 1: a takeaway of what to expect"),
    ("15.2.2-z", "2,689 tokens/s at B = 64: the throughput the cost per token is computed from"),
    ("15.2.2-ab", "125 tokens/s at B = 1: the other end of the cost comparison"),
    ("15.2.2-al", "peak throughput '~2,700 tok/s' at the largest batch that fits: a takeaway"),
)
# Practice claims of a time or throughput kind that are not judged here, and why.
LEFT_OUT = (
    ("15.2.1-u", "int4 weights: no 4-bit kernel timings are published here; judged in QUANTIZATION, which says so"),
    ("15.2.1-w", "int8 weights: weight-only INT8 kernels have no published timings here; QUANTIZATION judges its "
                 "FP8 W8A8 twin"),
    ("15.2.2-aa", "a price: dollars per 1k tokens follow from 15.2.2-z's throughput, judged here"),
    ("15.2.2-ac", "a price: dollars per 1k tokens follow from 15.2.2-ab's throughput, judged here"),
    ("15.2.2-ad", "a ratio of two prices, which the kernel model moves together"),
    ("15.2.2-u", "a relation of two step times (B = 3 above B = 1), decided by statement 15.2.2-s13"),
)
MODES = ("ideal", "measured", "overhead")

# --------------------------------------------------------------------------------------------------
# The measured twins: a quantity of claims.quantities, on measured kernels
# --------------------------------------------------------------------------------------------------

TWINS: dict[str, Callable] = {}


def _twin(fn: Callable) -> Callable:
    TWINS[fn.__name__] = fn
    return fn


def deployment(accelerator, step_overhead: bool = False) -> Deployment:
    """One GPU with measured kernels (efficiency.MeasuredKernels) and, with step_overhead, the CPU
    time per step of Vidur's A100 scheduler profile (OVERHEAD_PROFILE)."""
    overhead = StepOverhead.from_profile(OVERHEAD_PROFILE) if step_overhead else None
    return Deployment(accelerator, efficiency=MeasuredKernels(), step_overhead=overhead)


@_twin
def prefill_ms(model, accelerator, prompt_len, batch=1, step_overhead=False):
    """One prefill pass on measured kernels (quantities.prefill_ms's twin), ms."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    return 1e3 * prefill_time_s(model, deployment(accelerator, step_overhead), prompt_len, batch)


@_twin
def prefill_s(model, accelerator, prompt_len, batch=1, step_overhead=False):
    """One prefill pass on measured kernels, s."""
    return prefill_ms(model, accelerator, prompt_len, batch, step_overhead) / 1e3


@_twin
def prefill_extra_ms(model, accelerator, prompt_len, extra_tokens, step_overhead=False):
    """TTFT added by `extra_tokens` more prompt tokens from prompt_len, on measured kernels, ms."""
    return (prefill_ms(model, accelerator, prompt_len + extra_tokens, step_overhead=step_overhead)
            - prefill_ms(model, accelerator, prompt_len, step_overhead=step_overhead))


@_twin
def prefill_prompts_within(model, accelerator, prompt_len, budget_ms, step_overhead=False):
    """Largest number of prompts (1-64) one prefill pass on measured kernels finishes within budget_ms."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    b = np.arange(1, 65)
    ok = 1e3 * prefill_time_s(model, deployment(accelerator, step_overhead), prompt_len, b) <= budget_ms
    return float(b[ok].max()) if ok.any() else 0.0


@_twin
def decode_step_ms(model, accelerator, context_len, batch=1, weights="bf16", kv="bf16", n_kv_heads=None,
                   step_overhead=False):
    """One decode step (= ITL) on measured kernels, ms."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    on = deployment(accelerator, step_overhead).with_(precision=Precision(weights=weights, kv=kv))
    return 1e3 * decode_step_time_s(model_variant(model, n_kv_heads), on, context_len, batch)


@_twin
def decode_tokens_per_s(model, accelerator, context_len, batch=1, weights="bf16", kv="bf16", n_kv_heads=None,
                        step_overhead=False):
    """Decode throughput of one instance on measured kernels: batch / step time, tokens/s."""
    return batch / (decode_step_ms(model, accelerator, context_len, batch, weights, kv, n_kv_heads,
                                   step_overhead) / 1e3)


# --------------------------------------------------------------------------------------------------
# Judging
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Judged:
    """One value of a claim's quantity and the verdict `evaluate.rule` gives it, with its band."""

    value: float
    verdict: str
    band: str


@dataclass(frozen=True)
class PracticeClaim:
    """A practice claim judged three ways (module doc). `registry_verdict` is the registry's own
    (it differs from ideal.verdict for an unchecked claim or an override)."""

    id: str
    section: str
    description: str
    book: str
    unit: str
    why: str
    ideal: Judged
    measured: Judged
    overhead: Judged
    registry_verdict: str
    explanation: str

    def shown(self, mode: str) -> str:
        """The value of `mode` (MODES) with its unit, as the tables print it."""
        return f"{display(getattr(self, mode).value)} {self.unit}".strip()

    def as_dict(self) -> dict:
        out = {"id": self.id, "section": self.section, "description": self.description, "book": self.book,
               "unit": self.unit, "why": self.why, "registry_verdict": self.registry_verdict,
               "explanation": self.explanation}
        for mode in MODES:
            j = getattr(self, mode)
            out[mode] = {"value": j.value, "display": display(j.value), "verdict": j.verdict, "band": j.band}
        return out


def _call(claim: Claim, fn: Callable, defaults: dict, step_overhead: bool) -> float:
    """`fn` with the claim's inputs and the registry's defaults (model, accelerator), as evaluate does."""
    params = inspect.signature(fn).parameters
    kwargs = {k: v for k, v in defaults.items() if k in params and k not in claim.function.inputs}
    kwargs.update(claim.function.inputs)
    try:
        return float(fn(**kwargs, step_overhead=step_overhead))
    except (TypeError, ValueError) as err:
        raise RegistryError(f"claims registry, entry {claim.id}: measured {fn.__name__}() failed: {err}") from None


def _judge(claim: Claim, value: float, method_value: float | None) -> Judged:
    ruling = rule(claim, value, method_value)
    return Judged(value, ruling.verdict, ruling.band)


def explanation(claim: Claim, ideal: Judged, measured: Judged, overhead: Judged, registry_verdict: str) -> str:
    """One line from the numbers: the measured value against the ideal one and what the verdicts say."""
    unit = f" {claim.unit}".rstrip()
    ratio = measured.value / ideal.value if ideal.value else float("nan")
    text = (f"Measured kernels give {display(measured.value)}{unit} against the ideal roofline's "
            f"{display(ideal.value)}{unit} (x{ratio:.2f}): ")
    if measured.verdict == ideal.verdict:
        text += f"{measured.verdict} either way."
    else:
        text += f"{ideal.verdict} on the ideal roofline, {measured.verdict} as measured."
    text += f" With the A100 scheduler's CPU time per step: {display(overhead.value)}{unit}"
    text += "." if overhead.verdict == measured.verdict else f", {overhead.verdict}."
    if registry_verdict != ideal.verdict:
        text += f" The registry keeps its own verdict, {registry_verdict}."
    return text


@yardstick  # 15.1.1-r's 32,768 tokens lie beyond Llama-2 13B's context, as in the registry
def judge(claim: Claim, defaults: dict, why: str = "") -> PracticeClaim:
    """`claim` (one with a measured twin) judged on the ideal roofline, measured kernels and measured
    kernels plus the step overhead, each by `evaluate.rule` with the same book's method value."""
    if claim.function is None or claim.function.name not in TWINS:
        raise RegistryError(f"claims registry, entry {claim.id}: no measured twin of "
                            f"{claim.function.name if claim.function else 'its (absent) function'}; "
                            f"twins: {', '.join(TWINS)}")
    ev = evaluate(claim, defaults)  # the registry's own evaluation: ours = the ideal value
    ideal = _judge(claim, ev.ours, ev.method_value)
    twin = TWINS[claim.function.name]
    measured = _judge(claim, _call(claim, twin, defaults, False), ev.method_value)
    overhead = _judge(claim, _call(claim, twin, defaults, True), ev.method_value)
    return PracticeClaim(claim.id, claim.section, claim.description, ev.book_text, claim.unit, why,
                         ideal, measured, overhead, ev.verdict,
                         explanation(claim, ideal, measured, overhead, ev.verdict))


def practice_claims(section: str | None = None, ids=None, registry: Registry | None = None) -> list[PracticeClaim]:
    """Every claim of PRACTICE (or of one section, or among `ids`), judged (`judge`), in PRACTICE's order."""
    if section is not None and section not in SECTIONS:
        raise RegistryError(f"unknown section {section!r}; allowed: {', '.join(SECTIONS)}")
    registry = registry or load_registry()
    by_id = {c.id: c for c in registry.claims}
    out = []
    for claim_id, why in PRACTICE:
        if claim_id not in by_id or (section is not None and by_id[claim_id].section != section):
            continue
        if ids is not None and claim_id not in ids:
            continue
        out.append(judge(by_id[claim_id], registry.defaults, why))
    return out


# --------------------------------------------------------------------------------------------------
# The chapter's quantization advice against measurement
# --------------------------------------------------------------------------------------------------

# 15.2.1 calls quantization the highest-leverage, lowest-risk way to cut ITL. Each statement: the twin computed
# on measured kernels ('fp8': FP8 W8A8, the 8-bit format whose products were measured) or None, and why.
QUANTIZATION = (
    ("15.2.1-w", "fp8", "INT8 weights halve the 13B's ITL (8 -> ~4 ms). Its measured twin is FP8 W8A8 on DeepGEMM's "
                        "published products (weights and activations 8-bit, KV cache bf16 as in the claim); weight-only "
                        "INT8 (W8A16) kernels have no published timing table here, so the INT8 value itself is not measured"),
    ("15.2.1-u", None, "INT4 weights bring ITL to ~25 % of bf16. No measured twin: no published timing table of 4-bit "
                       "weight-only kernels is vendored (DeepGEMM's is FP8), so only the ideal verdict stands"),
    ("15.1.2-ad", None, "an int8 KV cache doubles the batch that fits (to ~130 at S = 1,000). No measured twin: it is a "
                        "memory capacity, which kernel times do not change; the ideal value is the answer"),
)


QUANTIZATION_TITLE = "The chapter's quantization advice against measurement"


@dataclass(frozen=True)
class QuantizationClaim:
    """A quantization statement: the registry's ideal verdict beside its measured twin (None: `why` says why)."""

    id: str
    description: str
    book: str
    unit: str
    ideal: Judged
    measured: Judged | None
    twin: str | None
    why: str

    def as_dict(self) -> dict:
        out = {"id": self.id, "description": self.description, "book": self.book, "unit": self.unit,
               "twin": self.twin, "why": self.why}
        for mode in ("ideal", "measured"):
            j = getattr(self, mode)
            out[mode] = None if j is None else {"value": j.value, "display": display(j.value), "verdict": j.verdict,
                                                "band": j.band}
        return out


def decode_step_ms_w8a8(model, accelerator, context_len, batch=1, kv="bf16"):
    """One decode step with FP8 weights and activations (W8A8) on measured kernels, ms."""
    model = get_model(model)
    accelerator = get_accelerator(accelerator)
    on = Deployment(accelerator, Precision(weights="fp8", activations="fp8", kv=kv), efficiency=MeasuredKernels())
    return 1e3 * decode_step_time_s(model, on, context_len, batch)


def quantization_claims(registry: Registry | None = None) -> list[QuantizationClaim]:
    """QUANTIZATION's statements, each with its ideal verdict and, where one exists, its measured twin judged by
    the registry's rule with the same book's method value."""
    registry = registry or load_registry()
    by_id = {c.id: c for c in registry.claims}
    out = []
    for claim_id, twin, why in QUANTIZATION:
        claim = by_id[claim_id]
        ev = evaluate(claim, registry.defaults)
        measured = None
        if twin == "fp8":
            inputs = {k: v for k, v in claim.function.inputs.items() if k in ("context_len", "batch", "kv")}
            value = decode_step_ms_w8a8(registry.defaults["model"], registry.defaults["accelerator"], **inputs)
            measured = _judge(claim, value, ev.method_value)
            bf16 = decode_step_ms(registry.defaults["model"], registry.defaults["accelerator"],
                                  **{k: v for k, v in inputs.items() if k != "kv"})
            why += (f"; as measured, the FP8 W8A8 step is {100 * value / bf16:.0f} % of the measured bf16 one "
                    f"({display(bf16)} ms)")
        out.append(QuantizationClaim(claim.id, claim.description, ev.book_text, claim.unit,
                                     _judge(claim, ev.ours, ev.method_value), measured, twin, why))
    return out


def quantization_table(rows: list[QuantizationClaim]) -> str:
    """The verify section for the quantization statements: one line each, then why."""
    lines = [QUANTIZATION_TITLE, ""]
    for q in rows:
        twin = (f"measured (FP8 W8A8) {display(q.measured.value)} {q.unit} {q.measured.verdict}" if q.measured
                else "no measured twin")
        lines.append(f"{q.id}  book {q.book}  ideal {display(q.ideal.value)} {q.unit} {q.ideal.verdict}  {twin}")
    return "\n".join(lines + [""] + [f"{q.id}: {q.why}." for q in rows])


def quantization_markdown() -> str:
    """QUANTIZATION as a Markdown table: the book, the ideal value and verdict, the measured twin or why none."""
    out = ["| claim | the book | ideal roofline | measured twin |", "|---|---|---|---|"]
    for q in quantization_claims():
        twin = (f"{display(q.measured.value)} {q.unit}, {q.measured.verdict} (FP8 W8A8)" if q.measured is not None
                else "none")
        out.append(f"| {q.id}: {_md(q.description)} | {_md(q.book)} | {display(q.ideal.value)} {q.unit}, "
                   f"{q.ideal.verdict} | {twin} |")
    out += [""] + [f"- **{q.id}**: {_md(q.why)}." for q in quantization_claims()]
    return "\n".join(out)


# --------------------------------------------------------------------------------------------------
# Rendering: the verify section, JSON, a notebook's Markdown table
# --------------------------------------------------------------------------------------------------

TITLE = "The practice claims against measured H100 kernels"
HEADERS = ("id", "book", "ideal", "verdict", "measured", "verdict", "+ step overhead", "verdict")


def legend() -> str:
    """What the three columns are, in one sentence."""
    return ("ideal: the per-operator roofline (the registry's value); measured: Vidur's measured H100 kernels "
            "(attention on the ideal roofline); + step overhead: measured plus the CPU time per step of Vidur's "
            f"A100 scheduler profile ({OVERHEAD_PROFILE}). Each judged by the registry's verdict rule.")


def table(rows: list[PracticeClaim]) -> str:
    """The verify section: its title, one row per claim (HEADERS) and the legend."""
    cells = [(r.id, r.book, r.shown("ideal"), r.ideal.verdict, r.shown("measured"), r.measured.verdict,
              r.shown("overhead"), r.overhead.verdict) for r in rows]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(HEADERS)]
    line = lambda row: "  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip()  # noqa: E731
    out = [TITLE, "", line(HEADERS), line(["-" * w for w in widths])] + [line(c) for c in cells]
    return "\n".join(out + ["", legend()])


def as_dicts(rows: list[PracticeClaim]) -> list[dict]:
    return [r.as_dict() for r in rows]


def as_json(rows: list[PracticeClaim]) -> str:
    return json.dumps({"title": TITLE, "legend": legend(), "claims": as_dicts(rows)}, indent=2, ensure_ascii=False)


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(section: str, explain: bool = False) -> str:
    """A Markdown table of `section`'s practice claims for a notebook cell: the book's number, then
    the ideal, measured and measured + step-overhead values, each with its verdict; explain=True adds
    each claim's one-line explanation under the table. A section without such claims gets one sentence
    saying so (and naming its practice claims LEFT_OUT, with why), never an empty cell."""
    rows = practice_claims(section)
    if not rows:
        left = [f"{cid} ({_md(why)})" for cid, why in LEFT_OUT if cid.rsplit("-", 1)[0] == section]
        return (f"Section {section} states no practice time or throughput that the measured kernels can time: "
                "nothing to judge against them here" + (f"; left out: {'; '.join(left)}." if left else "."))
    out = ["| claim | the book | ideal roofline | measured H100 kernels | + A100 step overhead |",
           "|---|---|---|---|---|"]
    out += [f"| {r.id}: {_md(r.description)} | {_md(r.book)} | "
            + " | ".join(f"{_md(r.shown(m))}, {getattr(r, m).verdict}" for m in MODES) + " |" for r in rows]
    if explain:
        out += [""] + [f"- **{r.id}**: {_md(r.explanation)}" for r in rows]
    return "\n".join(out)


__all__ = ["LEFT_OUT", "MODES", "OVERHEAD_PROFILE", "PRACTICE", "QUANTIZATION", "TITLE", "TWINS", "Judged",
           "PracticeClaim", "QUANTIZATION_TITLE", "QuantizationClaim", "decode_step_ms_w8a8", "quantization_claims", "quantization_markdown",
           "quantization_table",
           "as_dicts", "as_json", "deployment", "explanation", "judge", "legend", "markdown_table",
           "practice_claims", "table"]

"""The chapter's key equations, each written once: the formula a notebook states, the same formula
with the scenario's numbers substituted, and its value all come from one definition here.

    equations.ROOFLINE.tex()
        -> r"\\text{attainable FLOP/s} = \\min\\left(\\text{peak},\\; I \\cdot \\text{BW}\\right),\\qquad I_\\text{ridge} = ..."
    w = equations.ROOFLINE.worked(peak=989.4e12, bw=3.35e12)
    w.value                    # 295.3 (FLOP/byte): the last part's value; w.values has every part's
    w                          # displays I_ridge = peak/BW = 989 TFLOP/s / 3.35 TB/s = 295 FLOP/byte

A formula is TeX with slots: `[name]` shows the symbol of `name` when the formula is stated and its
value (SI, divided by the symbol's `scale`, with its unit) when it is worked; `[*]` is nothing when
stated (`2Tdf`) and a multiplication dot when worked, `[.]` a thin space when stated (`b_w\\,df`)
and a dot when worked. A part's value is `compute(**slots)` in SI units, and a later part may use
an earlier part's value by its name. A notebook's Markdown cell states the equation as `tex()`
(tests/test_worked_notebooks.py checks it), and its worked cell calls `worked(...)`.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Callable

from IPython.display import Markdown

from inferlab.notebook.worked_examples import tex_number

_SLOT = re.compile(r"\[([A-Za-z_][A-Za-z0-9_]*|\*|\.)\]")


@dataclass(frozen=True)
class Symbol:
    """How a quantity is written: its TeX symbol, and its value's display unit (value / scale)."""

    tex: str
    unit: str = ""            # TeX after the number, e.g. r"\text{TB/s}"
    scale: float = 1.0        # the SI value divided by this is shown
    prefix: str = ""          # TeX before the number, e.g. r"\$"

    def number(self, value) -> str:
        shown = value / self.scale
        if isinstance(shown, float) and shown.is_integer() and abs(shown) < 1e6 and self.scale == 1.0:
            shown = int(shown)
        unit = rf"\ {self.unit}" if self.unit else ""
        return f"{self.prefix}{tex_number(shown)}{unit}"


@dataclass(frozen=True)
class Part:
    """One `result = rhs` of an equation. `via`: a form shown between the two (stated and worked);
    `note`: TeX after the stated formula only (a limit, an approximation); `approx`: ≈ for =;
    `worked=False`: stated only (a formula the worked cell does not evaluate)."""

    result: str
    rhs: str
    compute: Callable | None = None
    via: str = ""
    note: str = ""
    approx: bool = False
    worked: bool = True

    def inputs(self) -> list[str]:
        return [n for n in dict.fromkeys(_SLOT.findall(self.rhs)) if n not in ("*", ".")]


@dataclass(frozen=True)
class Worked:
    """An equation with the scenario's numbers: Markdown display; `value` is the last part's value."""

    tex: str
    values: dict = field(default_factory=dict)
    value: float = math.nan

    def _repr_markdown_(self) -> str:
        return f"$$\n{self.tex}\n$$"

    def __repr__(self) -> str:
        return f"$$\n{self.tex}\n$$"


@dataclass(frozen=True)
class Equation:
    """A labelled equation (`eq-<label>` in the notebooks) of one or more parts."""

    label: str
    symbols: dict
    parts: tuple

    def __post_init__(self):
        for p in self.parts:
            for name in [p.result, *p.inputs()]:
                if name not in self.symbols:
                    raise ValueError(f"equation {self.label}: slot [{name}] has no symbol")

    def _fill(self, tex: str, values: dict | None) -> str:
        def one(m):
            name = m.group(1)
            if name == "*":
                return "" if values is None else r" \cdot "
            if name == ".":
                return r"\," if values is None else r" \cdot "
            return self.symbols[name].tex if values is None else self.symbols[name].number(values[name])
        return _SLOT.sub(one, tex)

    def _rel(self, part: Part) -> str:
        return r" \approx " if part.approx else " = "

    def tex(self) -> str:
        """The equation as stated: every part `result = [via =] rhs [note]`, joined by \\qquad."""
        out = []
        for p in self.parts:
            via = f"{self._fill(p.via, None)} = " if p.via else ""
            out.append(f"{self.symbols[p.result].tex}{self._rel(p)}{via}{self._fill(p.rhs, None)}{p.note}")
        return r",\qquad ".join(out)

    def markdown(self) -> str:
        """The labelled display block a Markdown cell holds (book/convert.py numbers it)."""
        return f"<!-- equation: eq-{self.label} -->\n$$\n{self.tex()}\n$$"

    def worked(self, library: float | None = None, **values) -> Worked:
        """Every worked part: `result = rhs (symbols) = rhs (numbers) = value`, the values computed
        here from `values` (SI units); `library`, when given, is shown beside the last value in the
        last part's display unit (the library's own function agreeing, or how far it is off)."""
        needed = {n for p in self.parts if p.worked for n in p.inputs()} - {p.result for p in self.parts}
        missing, unused = sorted(needed - set(values)), sorted(set(values) - needed)
        if missing or unused:
            raise ValueError(f"equation {self.label}: values missing {missing}, values not used {unused}")
        known = dict(values)
        shown = []
        last = None
        for p in self.parts:
            if not p.worked:
                continue
            known[p.result] = p.compute(**{n: known[n] for n in p.inputs()})
            via = f"{self._fill(p.via, None)} = " if p.via else ""
            shown.append(f"{self.symbols[p.result].tex}{self._rel(p)}{via}{self._fill(p.rhs, None)} = "
                         f"{self._fill(p.rhs, known)} = {self.symbols[p.result].number(known[p.result])}")
            last = p
        if last is None:
            raise ValueError(f"equation {self.label}: no part to work out")
        if library is not None:
            shown[-1] += rf"\quad (\text{{library: }} {self.symbols[last.result].number(library)})"
        return Worked(r",\qquad ".join(shown), {p.result: known[p.result] for p in self.parts if p.worked},
                      known[last.result])


# ---------------------------------------------------------------------------------------------
# The chapter's equations (labels as in the notebooks: eq-<label>)
# ---------------------------------------------------------------------------------------------

TFLOPS = Symbol(r"\text{peak}", r"\text{TFLOP/s}", 1e12)
BW = Symbol(r"\text{BW}", r"\text{TB/s}", 1e12)
FLOP_PER_BYTE = r"\text{FLOP/byte}"


def _count(tex: str) -> Symbol:
    return Symbol(tex)


def _matmul_intensity(T, d, f, bw, ba):
    return 2 * T * d * f / (bw * d * f + ba * T * (d + f))


ROOFLINE = Equation("roofline", {
    "attainable": Symbol(r"\text{attainable FLOP/s}"), "I": Symbol("I"),
    "peak": TFLOPS, "bw": BW, "ridge": Symbol(r"I_\text{ridge}", FLOP_PER_BYTE)}, (
    Part("attainable", r"\min\left([peak],\; [I] \cdot [bw]\right)", worked=False),
    Part("ridge", r"\frac{[peak]}{[bw]}", lambda peak, bw: peak / bw)))

MATMUL_INTENSITY = Equation("matmul-intensity", {
    "T": _count("T"), "d": _count("d"), "f": _count("f"), "bw": _count("b_w"), "ba": _count("b_a"),
    "I": Symbol(r"I_\text{matmul}", FLOP_PER_BYTE)}, (
    Part("I", r"\frac{2[*][T][*][d][*][f]}{[bw][.][d][*][f] + [ba][.][T][*]([d] + [f])}", _matmul_intensity,
         note=r" \;\xrightarrow{\;T \ll df/(d+f)\;}\; \frac{2T}{b_w}"),))

PREFILL_ATTENTION_INTENSITY = Equation("prefill-attention-intensity", {
    "H": _count("H"), "S": _count("S"), "b": _count("b"), "I": Symbol(r"I_\text{attn}", FLOP_PER_BYTE)}, (
    Part("I", r"\frac{4[*][H] \cdot [S][*]([S]+1)/2}{[b] \cdot 4[*][S][*][H]}",
         lambda H, S, b: 4 * H * S * (S + 1) / 2 / (b * 4 * S * H), approx=True,
         note=r" = \frac{S+1}{2b} \approx \frac{S}{4}\ \text{(bf16)}"),))

PREFILL_FLOPS = Equation("prefill-flops", {
    "P": Symbol("P"), "B": _count("B"), "S": _count("S"), "peak": TFLOPS,
    "F": Symbol(r"F_\text{prefill}", r"\text{FLOP}"), "ttft": Symbol(r"\text{TTFT}", r"\text{ms}", 1e-3)}, (
    Part("F", r"2[*][P][*][B][*][S]", lambda P, B, S: 2 * P * B * S, approx=True),
    Part("ttft", r"\frac{2[*][P][*][B][*][S]}{[peak]}", lambda P, B, S, peak: 2 * P * B * S / peak, approx=True)))

KV_PER_TOKEN = Equation("kv-per-token", {
    "L": _count("L"), "Nkv": _count(r"N_\text{kv}"), "H": _count("H"), "bkv": _count(r"b_\text{kv}"),
    "S": _count("S"), "C": Symbol(r"C_\text{kv}(S)", r"\text{GB}", 1e9)}, (
    Part("C", r"2 \cdot [L] \cdot [Nkv] \cdot [H] \cdot [bkv] \cdot [S]",
         lambda L, Nkv, H, bkv, S: 2 * L * Nkv * H * bkv * S),))

KV_CACHE_PER_TOKEN = Equation("kv-cache-per-token", {
    "L": _count("L"), "Nkv": _count(r"N_\text{kv}"), "H": _count("H"), "bkv": _count(r"b_\text{kv}"),
    "C": Symbol(r"C_\text{kv}", r"\text{bytes per token}")}, (
    Part("C", r"2 \cdot [L] \cdot [Nkv] \cdot [H] \cdot [bkv]", lambda L, Nkv, H, bkv: 2 * L * Nkv * H * bkv,
         note=r"\ \text{bytes per token}"),))

DECODE_MLP_INTENSITY = Equation("decode-mlp-intensity", {
    "B": _count("B"), "d": _count("d"), "f": _count("f"), "bw": _count("b_w"), "ba": _count("b_a"),
    "I": Symbol(r"I_\text{MLP}", FLOP_PER_BYTE)}, (
    Part("I", r"\frac{2[*][B][*][d][*][f]}{[bw][.][d][*][f] + [ba][.][B][*]([d] + [f])}",
         lambda B, d, f, bw, ba: _matmul_intensity(B, d, f, bw, ba),
         note=r" \approx \frac{2B}{b_w} = B \quad\text{(bf16)}"),))

DECODE_ATTENTION_INTENSITY = Equation("decode-attention-intensity", {
    "bkv": _count(r"b_\text{kv}"), "N": _count("N"), "Nkv": _count(r"N_\text{kv}"),
    "I": Symbol(r"I_\text{attn}", FLOP_PER_BYTE)}, (
    Part("I", r"\frac{2}{[bkv]}\cdot\frac{[N]}{[Nkv]}", lambda bkv, N, Nkv: 2 / bkv * N / Nkv,
         via=r"\frac{4NHS}{2 N_\text{kv} H S\, b_\text{kv}}"),))

GB_ = r"\text{GB}"
STEP_TIME = Equation("step-time", {
    "M": Symbol(r"M_\text{weights}", GB_, 1e9), "B": _count("B"), "C": Symbol(r"C_\text{kv}(S)", GB_, 1e9),
    "bw": BW, "t": Symbol(r"t_\text{step}(B)", r"\text{ms}", 1e-3),
    "thr": Symbol(r"\text{throughput}(B)", r"\text{tokens/s}")}, (
    Part("t", r"\frac{[M] + [B] \cdot [C]}{[bw]}", lambda M, B, C, bw: (M + B * C) / bw, approx=True),
    Part("thr", r"\frac{[B]}{[t]}", lambda B, t: B / t)))

MAX_BATCH = Equation("max-batch", {
    "Mdev": Symbol(r"M_\text{device}", GB_, 1e9), "M": Symbol(r"M_\text{weights}", GB_, 1e9),
    "C": Symbol(r"C_\text{kv}(S)", GB_, 1e9), "bmax": _count(r"B_\text{max}")}, (
    Part("bmax", r"\left\lfloor \frac{[Mdev] - [M]}{[C]} \right\rfloor",
         lambda Mdev, M, C: max(0, math.floor((Mdev - M) / C))),))

TTFT_ITL = Equation("ttft-itl", {
    "P": Symbol("P"), "B": _count("B"), "S": _count("S"), "peak": TFLOPS, "bw": BW,
    "M": Symbol(r"M_\text{weights}", GB_, 1e9), "C": Symbol(r"C_\text{kv}(S)", GB_, 1e9),
    "ttft": Symbol(r"\text{TTFT}", r"\text{ms}", 1e-3), "itl": Symbol(r"\text{ITL}", r"\text{ms}", 1e-3)}, (
    Part("ttft", r"\frac{2[*][P][*][B][*][S]}{[peak]}", lambda P, B, S, peak: 2 * P * B * S / peak, approx=True),
    Part("itl", r"\frac{[M] + [B][.][C]}{[bw]}", lambda M, B, C, bw: (M + B * C) / bw, approx=True)))

TP_TIME = Equation("tp-time", {
    "t1": Symbol("t(1)", r"\text{ms}", 1e-3), "K": _count("K"), "L": _count("L"),
    "msg": Symbol(r"\text{message bytes}", r"\text{B}"), "link": Symbol(r"\text{link BW}", r"\text{GB/s}", 1e9),
    "lat": Symbol(r"t_\text{latency}", r"\mu\text{s}", 1e-6), "tk": Symbol("t(K)", r"\text{ms}", 1e-3)}, (
    Part("tk", r"\frac{[t1]}{[K]} + 2[*][L]\left(\frac{2([K]-1)}{[K]}\cdot\frac{[msg]}{[link]} + [lat]\right)",
         lambda t1, K, L, msg, link, lat: t1 / K + 2 * L * (2 * (K - 1) / K * msg / link + lat), approx=True),))

THROUGHPUT = Equation("throughput", {
    "thrB": Symbol(r"\text{throughput}(B)"), "B": _count("B"), "bw": BW,
    "M": Symbol(r"M_\text{weights}", GB_, 1e9), "C": Symbol(r"C_\text{kv}", GB_, 1e9),
    "bstar": _count("B^*"), "half": Symbol(r"\text{throughput}(B^*)", r"\text{tokens/s}")}, (
    Part("thrB", r"\frac{[B]\cdot[bw]}{[M] + [B][.][C]}", worked=False,
         note=r"\;\xrightarrow{B\to\infty}\; \frac{\text{BW}}{C_\text{kv}}"),
    Part("bstar", r"\frac{[M]}{[C]}", lambda M, C: M / C),
    Part("half", r"\frac{1}{2}\,\frac{[bw]}{[C]}", lambda bw, C: bw / C / 2)))

BMAX_OVER_BSTAR = Equation("bmax-over-bstar", {
    "ratio": _count(r"\frac{B_\text{max}}{B^*}"), "Mdev": Symbol(r"M_\text{device}", GB_, 1e9),
    "M": Symbol(r"M_\text{weights}", GB_, 1e9)}, (
    Part("ratio", r"\frac{[Mdev]}{[M]} - 1", lambda Mdev, M: Mdev / M - 1,
         via=r"\frac{(M_\text{device} - M_\text{weights})/C_\text{kv}}{M_\text{weights}/C_\text{kv}}",
         note=r" \quad\text{(before rounding down)}"),))

COST_PER_TOKEN = Equation("cost-per-token", {
    "usd": Symbol(r"\text{price per GPU-hour}", prefix=r"\$"), "thr": Symbol(r"\text{throughput}", r"\text{tokens/s}"),
    "cost": Symbol(r"\text{cost per 1k tokens}", prefix=r"\$")}, (
    Part("cost", r"\frac{[usd]}{3600\ \text{s} \cdot [thr]} \times 1000", lambda usd, thr: usd / (3600 * thr) * 1000),))

EQUATIONS = {e.label: e for e in (ROOFLINE, MATMUL_INTENSITY, PREFILL_ATTENTION_INTENSITY, PREFILL_FLOPS,
                                  KV_PER_TOKEN, KV_CACHE_PER_TOKEN, DECODE_MLP_INTENSITY,
                                  DECODE_ATTENTION_INTENSITY, STEP_TIME, MAX_BATCH, TTFT_ITL, TP_TIME,
                                  THROUGHPUT, BMAX_OVER_BSTAR, COST_PER_TOKEN)}


def get(label: str) -> Equation:
    """The equation labelled `eq-<label>` in the notebooks."""
    try:
        return EQUATIONS[label.removeprefix("eq-")]
    except KeyError:
        raise ValueError(f"no equation {label!r}; known: {', '.join(sorted(EQUATIONS))}") from None

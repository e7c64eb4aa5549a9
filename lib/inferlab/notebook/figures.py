"""Every figure of the chapter, for the book's configuration or any other, exported for authors.

`FIGURES` maps a name "<section>-fig<n>-<slug>" to a function building that figure (a
`plots.Plot`), by default for the book's setup (Llama-2 13B, one H100 SXM, bf16; the real
architecture, as the claims registry's "ours"), with the book's own values marked from the claims
registry. The measured figures (`measured_plots`: the
same on Vidur's measured H100 kernels) are here too, with no book marks: the book states no measured
value to mark. The chapter notebooks draw the same figures from their "what if" cell; tests/test_notebooks.py checks that, at the defaults, each
notebook prints the same table as the figure built here.

    inferlab figures --out build/figures       (or: make figures)
    inferlab figures --model mixtral-8x7b-v0.1 --gpu h200 --kv-dtype fp8   (any model: no book marks)

Every figure takes a `FigureScenario` (default: the book's). Another scenario draws the same
figures without the book's marks, and a figure that needs a batch in memory at its context
(`FIT_CONTEXT`) says in words what does not fit and what would, as the notebooks do.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import matplotlib

from inferlab.core import kernels
from inferlab.notebook import measured_plots, plots
from inferlab.core.specs import BF16, Accelerator, ModelConfig, Precision, get_accelerator, get_model
from inferlab.base.units import DTYPES

BOOK_MODEL = "llama-2-13b"  # the registry's "ours" is the real architecture
BOOK_GPU = "h100-sxm"


@dataclass(frozen=True)
class FigureScenario:
    """The model, accelerator and precision every figure is drawn for (objects, resolved at the edge)."""

    model: ModelConfig
    accelerator: Accelerator
    precision: Precision = BF16

    @property
    def book(self) -> bool:
        """The book's worked example (Llama-2 13B on one H100 SXM, bf16 throughout): only it carries
        the book's marks (`reader.is_book_setup` asks this too)."""
        return (self.model.name, self.accelerator.name) == (get_model(BOOK_MODEL).name, get_accelerator(BOOK_GPU).name) \
            and self.precision == BF16

    def objects(self) -> tuple:
        return self.model, self.accelerator, self.precision

    def marks(self, section: str, figure: str) -> list:
        """The book's values for one figure (`book_points`) in the book's scenario, else none."""
        return book_points(section, figure) if self.book else []

    def fit_message(self, context_len: int) -> str:
        """'' when one sequence of `context_len` tokens fits beside the weights, else what does not
        fit and what would (`memory.fit_advice`, as the notebooks' FIT, `reader.fit_message`)."""
        from inferlab.core.memory import fit_advice
        return fit_advice(self.model, self.accelerator, context_len, self.precision).sentence()


@lru_cache(maxsize=1)
def book_scenario() -> FigureScenario:
    """The book's setup (the registry's "ours" is the real architecture)."""
    return FigureScenario(get_model(BOOK_MODEL), get_accelerator(BOOK_GPU), BF16)


def _s(scenario: FigureScenario | None) -> FigureScenario:
    return book_scenario() if scenario is None else scenario


BOOK_USD_PER_GPU_HOUR = 4.0  # the book's H100 price in 15.2.2

# The menus of the book's interactive figures (inferlab.notebook.interactive): the scenario's own model and
# accelerator come first, then these. A 70B model beside the book's 13B and an 8B GQA model, then the
# architectures of data/hf-configs a reader deploys: a mixture of experts (Mixtral), one with latent
# attention too (DeepSeek-V2-Lite) and sliding windows (Gemma 2); an H100, its larger-memory H200 and
# AMD's MI300X. Every combination is a precomputed grid in the page.
MENU_MODELS = ("llama-2-13b", "llama-3-8b", "llama-2-70b", "mixtral-8x7b-v0.1", "deepseek-v2-lite", "gemma-2-9b")
MENU_ACCELERATORS = ("h100-sxm", "h200", "mi300x")


def interactive_menus() -> dict:
    """{'models': (ModelConfig, ...), 'accelerators': (Accelerator, ...)} for the grid functions of
    inferlab.notebook.interactive: `interactive.ttft_grid(MODEL, GPU, PREC, **figures.interactive_menus())`."""
    from inferlab.core.specs import resolve_model
    return {"models": tuple(map(resolve_model, MENU_MODELS)),
            "accelerators": tuple(map(get_accelerator, MENU_ACCELERATORS))}
FORMATS = ("svg", "png")
PNG_DPI = 150


# The book's values marked on each figure: (x, y, label), where x and y are either a number (an
# input the book states, e.g. the prompt length) or a claim id whose book value is read from the
# registry and converted to the figure's unit. Units of the figures' axes:
BOOK_MARKS = {
    ("15.1.1", "ttft"): [(2048, "15.1.1-m", "book: 2k"), (8192, "15.1.1-q", "book: 8k"),
                         (32768, "15.1.1-r", "book: 32k (lower bound)")],
    ("15.1.2", "memory"): [(16, "15.1.2-s", "book: B=16"), ("15.1.2-z", "15.1.2-x", "book: B≈66")],
    ("15.1.2", "kv-variants"): [("15.1.2-ac", "15.1.2-x", "book: bf16 KV"),
                                ("15.1.2-ad", "15.1.2-x", "book: int8 KV")],
    ("15.2.1", "ttft"): [(1024, "15.2.1-m", "book: 1k"), (2048, "15.2.1-o", "book: 2k"),
                         (100000, "15.2.1-q", "book: 100k")],
    ("15.2.1", "itl"): [(1024, "15.2.1-n", "book: 1k"), (2048, "15.2.1-p", "book: 2k")],
    ("15.2.1", "weight-dtype"): [(0, "15.2.1-v", "book: bf16"), (1, "15.2.1-w", "book: int8")],
    ("15.2.2", "throughput"): [(1, "15.2.2-ab", "book: B=1"), (64, "15.2.2-z", "book: B=64")],
    ("15.2.2", "latency-throughput"): [("15.1.2-af", "15.1.2-ag", "book: B=1"),
                                       ("15.1.2-ah", "15.1.2-ai", "book: B=32 (15.1.2)")],
    ("15.2.2", "cost"): [(1, "15.2.2-ac", "book: B=1"), (64, "15.2.2-aa", "book: B=64")],
}
AXIS_UNITS = {"ttft": ("tokens", "ms"), "memory": ("sequences", "GB"), "kv-variants": ("sequences", "GB"),
              "itl": ("tokens", "ms"), "weight-dtype": ("", "ms"), "throughput": ("sequences", "tokens/s"),
              "latency-throughput": ("ms", "tokens/s"), "cost": ("sequences", "$")}
_CONVERT = {("s", "ms"): 1e3, ("ms", "s"): 1e-3}


def _book_value(claim_id: str, unit: str) -> float:
    from inferlab.claims import evaluate_claims
    section = claim_id.rsplit("-", 1)[0]
    (c,) = [c for c in evaluate_claims(section) if c.id == claim_id]
    value = c.book_value[0] if isinstance(c.book_value, tuple) else c.book_value
    if c.unit == unit or not unit:
        return float(value)
    if (c.unit, unit) not in _CONVERT:
        raise ValueError(f"claim {claim_id} is in {c.unit!r}; the figure axis is in {unit!r}")
    return float(value) * _CONVERT[(c.unit, unit)]


def book_points(section: str, figure: str) -> list:
    """The book's values to mark on one figure: [(x, y, label)] in the figure's units, read from
    the claims registry (BOOK_MARKS says which claims)."""
    if (section, figure) not in BOOK_MARKS:
        known = ", ".join(f"{s} {f}" for s, f in BOOK_MARKS)
        raise ValueError(f"no book marks for figure {figure!r} of section {section}; known: {known}")
    x_unit, y_unit = AXIS_UNITS[figure]
    out = []
    for x, y, label in BOOK_MARKS[(section, figure)]:
        out.append((_book_value(x, x_unit) if isinstance(x, str) else float(x),
                    _book_value(y, y_unit) if isinstance(y, str) else float(y), label))
    return out


FIGURES = {
    "15.1.1-fig1-roofline": lambda s=None: plots.roofline_plot(
        *_s(s).objects(), prompt_lens=(128, 512, 2048, 8192), decode_batches=(1, 16, 64, 256),
        context_len=2048),
    "15.1.1-fig2-ttft-vs-prompt": lambda s=None: plots.ttft_plot(
        *_s(s).objects(), batch=1, book_points=_s(s).marks("15.1.1", "ttft")),
    "15.1.1-fig3-kernels-roofline": lambda s=None: measured_plots.kernel_roofline_plot(*_s(s).objects()),
    "15.1.1-fig4-kernels-ttft": lambda s=None: measured_plots.ttft_measured_plot(*_s(s).objects(), batch=1),
    "15.1.2-fig1-decode-intensity": lambda s=None: plots.decode_intensity_plot(*_s(s).objects(), context_len=1000),
    "15.1.2-fig2-memory-budget": lambda s=None: plots.memory_budget_plot(
        *_s(s).objects()[:2], 1000, _s(s).precision, book_points=_s(s).marks("15.1.2", "memory")),
    "15.1.2-fig3-kv-variants": lambda s=None: plots.kv_variants_plot(
        *_s(s).objects()[:2], 1000, _s(s).precision, book_points=_s(s).marks("15.1.2", "kv-variants")),
    "15.1.2-fig4-kernels-step-time": lambda s=None: measured_plots.decode_measured_plot(
        *_s(s).objects()[:2], 1000, _s(s).precision),
    "15.2.1-fig1-ttft-vs-prompt": lambda s=None: plots.ttft_plot(
        *_s(s).objects(), batch=1, book_points=_s(s).marks("15.2.1", "ttft")),
    "15.2.1-fig2-itl-vs-context": lambda s=None: plots.itl_plot(
        *_s(s).objects(), batches=(1, 8, 32, 64), book_points=_s(s).marks("15.2.1", "itl")),
    "15.2.1-fig3-weight-dtype": lambda s=None: plots.weight_dtype_plot(
        *_s(s).objects(), prompt_len=1024, context_len=1024, batch=1,
        book_points=_s(s).marks("15.2.1", "weight-dtype")),
    "15.2.1-fig4-kernels-latency": lambda s=None: measured_plots.latency_measured_plot(
        *_s(s).objects(), prompt_len=1024, context_len=1024, batch=1,
        step_overhead=kernels.StepOverhead.from_profile()),
    "15.2.2-fig1-throughput-vs-batch": lambda s=None: plots.throughput_plot(
        *_s(s).objects()[:2], 1024, _s(s).precision, book_throughput=_s(s).marks("15.2.2", "throughput")),
    "15.2.2-fig2-latency-throughput": lambda s=None: plots.latency_throughput_plot(
        *_s(s).objects()[:2], 1024, _s(s).precision, book_points=_s(s).marks("15.2.2", "latency-throughput")),
    "15.2.2-fig3-cost-vs-batch": lambda s=None: plots.cost_plot(
        *_s(s).objects()[:2], 1024, BOOK_USD_PER_GPU_HOUR, _s(s).precision,
        book_points=_s(s).marks("15.2.2", "cost")),
    "15.2.2-fig4-kv-variants-throughput": lambda s=None: plots.kv_variants_throughput_plot(
        *_s(s).objects()[:2], 1024, _s(s).precision),
    "15.2.2-fig5-kernels-throughput": lambda s=None: measured_plots.throughput_measured_plot(
        *_s(s).objects()[:2], 1024, _s(s).precision),
}

# The context each figure needs one sequence of in memory beside the weights (the notebooks' FIT
# checks): at another scenario where none fits, the figure says so in words instead of drawing.
FIT_CONTEXT = {
    "15.1.2-fig2-memory-budget": 1000, "15.1.2-fig3-kv-variants": 1000, "15.1.2-fig4-kernels-step-time": 1000,
    "15.2.1-fig2-itl-vs-context": 1024,
    **{n: 1024 for n in FIGURES if n.startswith("15.2.2-")},
}


def build(name: str, scenario: FigureScenario | None = None):
    """One figure (a `plots.Plot`) for `scenario` (default: the book's); a figure that says in words
    what does not fit where the scenario holds no sequence at the figure's context (`FIT_CONTEXT`)
    or a plot raises `DoesNotFitError`: never an empty plot."""
    from inferlab.base.input_checks import DoesNotFitError
    if name not in FIGURES:
        raise ValueError(f"unknown figure {name!r}; allowed: {', '.join(FIGURES)}")
    s = _s(scenario)
    message = s.fit_message(FIT_CONTEXT[name]) if name in FIT_CONTEXT else ""
    if message:
        return plots.does_not_fit_plot(message)
    try:
        return FIGURES[name](s)
    except DoesNotFitError as e:
        return plots.does_not_fit_plot(str(e))


def export_all(out_dir, formats=FORMATS, names=None, scenario: FigureScenario | None = None) -> list[Path]:
    """Write every figure (or those in `names`) for `scenario` (default: the book's) as
    <out_dir>/<name>.<format>; returns the paths. SVGs are reproducible: fixed hash salt, no date in
    the metadata."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    unknown = sorted(set(names or ()) - set(FIGURES))
    if unknown:
        raise ValueError(f"unknown figure(s) {', '.join(unknown)}; allowed: {', '.join(FIGURES)}")
    written = []
    with matplotlib.rc_context({"svg.hashsalt": "inferlab", "svg.fonttype": "path"}):
        for name in FIGURES:
            if names and name not in names:
                continue
            fig = build(name, scenario).fig
            for fmt in formats:
                path = out / f"{name}.{fmt}"
                metadata = {"Date": None} if fmt == "svg" else {"Software": None}
                fig.savefig(path, format=fmt, dpi=PNG_DPI, metadata=metadata)
                written.append(path)
    return written


def _cmd_figures(args) -> int:
    from inferlab.base.input_checks import writable_dir
    from inferlab.core.specs import resolve_model
    writable_dir("--out", args.out)
    prec = Precision(weights=args.weights_dtype, activations=args.activations_dtype, kv=args.kv_dtype)
    scenario = FigureScenario(resolve_model(args.model), get_accelerator(args.gpu), prec)
    scenario.accelerator.peak(prec.compute_dtype)   # refused before any file is written (FP8 on an A100)
    paths = export_all(args.out, tuple(args.format), args.only, scenario)
    for p in paths:
        print(p)
    marks = "with the book's marks" if scenario.book else "no book marks (not the book's setup)"
    print(f"{len(paths)} files in {args.out}: {scenario.model.name} on {scenario.accelerator.name}, "
          f"weights {prec.weights}, KV {prec.kv}; {marks}")
    return 0


def register(subparsers) -> None:
    """`inferlab figures`: export every figure of the chapter (cli.SUBCOMMAND_MODULES lists this module)."""
    p = subparsers.add_parser("figures", help="export every figure of the chapter as SVG and PNG")
    p.add_argument("--out", default="build/figures", help="output folder (created if missing)")
    p.add_argument("--format", nargs="+", default=list(FORMATS), choices=["svg", "png", "pdf"],
                   help="file formats to write")
    p.add_argument("--only", nargs="+", metavar="NAME", help=f"some of: {', '.join(FIGURES)}")
    p.add_argument("--model", default=BOOK_MODEL,
                   help="a name from `inferlab list`, or a path to a Hugging Face config.json (or its folder); "
                        "the book's marks are drawn only for the book's setup")
    p.add_argument("--gpu", default=BOOK_GPU, help="an accelerator from `inferlab list`")
    for cls in ("weights", "activations", "kv"):
        p.add_argument(f"--{cls}-dtype", default="bf16", choices=list(DTYPES), help=f"number format of the {cls}")
    p.set_defaults(func=_cmd_figures)

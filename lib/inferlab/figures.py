"""Every figure of the chapter, at the book's configuration, exported for authors.

`FIGURES` maps a name "<section>-fig<n>-<slug>" to a function building that figure (a
`plots.Plot`) for the book's setup (Llama-2 13B, one H100 SXM, bf16; the real architecture, as
the claims registry's "ours"),
with the book's own values marked from the claims registry. The measured figures (`measured_plots`: the
same on Vidur's measured H100 kernels) are here too, with no book marks: the book states no measured
value to mark. The chapter notebooks draw the same figures from their "what if" cell; tests/test_notebooks.py checks that, at the defaults, each
notebook prints the same table as the figure built here.

    inferlab figures --out build/figures       (or: make figures)
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

from inferlab import kernels, measured_plots, plots
from inferlab.specs import BF16, get_accelerator, get_model

BOOK_MODEL = "llama-2-13b"  # the registry's "ours" is the real architecture
BOOK_GPU = "h100-sxm"


def _book_setup():
    """The book's model and accelerator, resolved from their names (here, at the edge: the plots
    take objects)."""
    return get_model(BOOK_MODEL), get_accelerator(BOOK_GPU)

BOOK_USD_PER_GPU_HOUR = 4.0  # the book's H100 price in 15.2.2

# The menus of the book's interactive figures (inferlab.interactive): the scenario's own model and
# accelerator come first, then these. A 70B model beside the book's 13B and an 8B GQA model; an H100,
# its larger-memory H200 and AMD's MI300X. Every combination is a precomputed grid in the page.
MENU_MODELS = ("llama-2-13b", "llama-3-8b", "llama-2-70b")
MENU_ACCELERATORS = ("h100-sxm", "h200", "mi300x")


def interactive_menus() -> dict:
    """{'models': (ModelConfig, ...), 'accelerators': (Accelerator, ...)} for the grid functions of
    inferlab.interactive: `interactive.ttft_grid(MODEL, GPU, PREC, **figures.interactive_menus())`."""
    return {"models": tuple(map(get_model, MENU_MODELS)), "accelerators": tuple(map(get_accelerator, MENU_ACCELERATORS))}
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
    "15.1.1-fig1-roofline": lambda: plots.roofline_plot(
        *_book_setup(), BF16, prompt_lens=(128, 512, 2048, 8192), decode_batches=(1, 16, 64, 256),
        context_len=2048),
    "15.1.1-fig2-ttft-vs-prompt": lambda: plots.ttft_plot(
        *_book_setup(), BF16, batch=1, book_points=book_points("15.1.1", "ttft")),
    "15.1.1-fig3-kernels-roofline": lambda: measured_plots.kernel_roofline_plot(*_book_setup(), BF16),
    "15.1.1-fig4-kernels-ttft": lambda: measured_plots.ttft_measured_plot(*_book_setup(), BF16, batch=1),
    "15.1.2-fig1-decode-intensity": lambda: plots.decode_intensity_plot(
        *_book_setup(), BF16, context_len=1000),
    "15.1.2-fig2-memory-budget": lambda: plots.memory_budget_plot(
        *_book_setup(), 1000, BF16, book_points=book_points("15.1.2", "memory")),
    "15.1.2-fig3-kv-variants": lambda: plots.kv_variants_plot(
        *_book_setup(), 1000, BF16, book_points=book_points("15.1.2", "kv-variants")),
    "15.1.2-fig4-kernels-step-time": lambda: measured_plots.decode_measured_plot(*_book_setup(), 1000, BF16),
    "15.2.1-fig1-ttft-vs-prompt": lambda: plots.ttft_plot(
        *_book_setup(), BF16, batch=1, book_points=book_points("15.2.1", "ttft")),
    "15.2.1-fig2-itl-vs-context": lambda: plots.itl_plot(
        *_book_setup(), BF16, batches=(1, 8, 32, 64), book_points=book_points("15.2.1", "itl")),
    "15.2.1-fig3-weight-dtype": lambda: plots.weight_dtype_plot(
        *_book_setup(), BF16, prompt_len=1024, context_len=1024, batch=1,
        book_points=book_points("15.2.1", "weight-dtype")),
    "15.2.1-fig4-kernels-latency": lambda: measured_plots.latency_measured_plot(
        *_book_setup(), BF16, prompt_len=1024, context_len=1024, batch=1,
        step_overhead=kernels.StepOverhead.from_profile()),
    "15.2.2-fig1-throughput-vs-batch": lambda: plots.throughput_plot(
        *_book_setup(), 1024, BF16, book_throughput=book_points("15.2.2", "throughput")),
    "15.2.2-fig2-latency-throughput": lambda: plots.latency_throughput_plot(
        *_book_setup(), 1024, BF16, book_points=book_points("15.2.2", "latency-throughput")),
    "15.2.2-fig3-cost-vs-batch": lambda: plots.cost_plot(
        *_book_setup(), 1024, BOOK_USD_PER_GPU_HOUR, BF16, book_points=book_points("15.2.2", "cost")),
    "15.2.2-fig4-kv-variants-throughput": lambda: plots.kv_variants_throughput_plot(
        *_book_setup(), 1024, BF16),
    "15.2.2-fig5-kernels-throughput": lambda: measured_plots.throughput_measured_plot(*_book_setup(), 1024, BF16),
}


def export_all(out_dir, formats=FORMATS, names=None) -> list[Path]:
    """Write every figure (or those in `names`) as <out_dir>/<name>.<format>; returns the paths.
    SVGs are reproducible: fixed hash salt, no date in the metadata."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    unknown = sorted(set(names or ()) - set(FIGURES))
    if unknown:
        raise ValueError(f"unknown figure(s) {', '.join(unknown)}; allowed: {', '.join(FIGURES)}")
    written = []
    with matplotlib.rc_context({"svg.hashsalt": "inferlab", "svg.fonttype": "path"}):
        for name, build in FIGURES.items():
            if names and name not in names:
                continue
            fig = build().fig
            for fmt in formats:
                path = out / f"{name}.{fmt}"
                metadata = {"Date": None} if fmt == "svg" else {"Software": None}
                fig.savefig(path, format=fmt, dpi=PNG_DPI, metadata=metadata)
                written.append(path)
    return written


def _cmd_figures(args) -> int:
    from inferlab.input_checks import writable_dir
    writable_dir("--out", args.out)
    paths = export_all(args.out, tuple(args.format), args.only)
    for p in paths:
        print(p)
    print(f"{len(paths)} files in {args.out}")
    return 0


def register(subparsers) -> None:
    """`inferlab figures`: export every figure of the chapter (cli.SUBCOMMAND_MODULES lists this module)."""
    p = subparsers.add_parser("figures", help="export every figure of the chapter as SVG and PNG")
    p.add_argument("--out", default="build/figures", help="output folder (created if missing)")
    p.add_argument("--format", nargs="+", default=list(FORMATS), choices=["svg", "png", "pdf"],
                   help="file formats to write")
    p.add_argument("--only", nargs="+", metavar="NAME", help=f"some of: {', '.join(FIGURES)}")
    p.set_defaults(func=_cmd_figures)

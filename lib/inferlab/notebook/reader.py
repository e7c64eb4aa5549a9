"""What a reader sees in a chapter notebook: compact claims tables, erratum boxes, verdict counts,
the lost formulas, the live checks ("Measure it here"), the "What if?" scenario (with its override
for tests) and the does-not-fit fallback of a figure.

    from inferlab.notebook import reader
    reader.claims("15.1.1", "k", "m")       # one compact table (HTML + plain text) and the errata boxes
    MODEL, GPU, PREC = reader.what_if("llama-2-13b", "h100-sxm", PREC)   # INFERLAB_WHATIF overrides
    BOOK = reader.is_book_setup(MODEL, GPU, PREC)   # draw the book's markers only when True

The claims table renders as HTML in JupyterLab (a row per claim, `id="claim-<id>"`, the verdict as a
symbol) with a plain-text repr that nbval compares: one line per claim starting with its id. The
table is laid out automatically (not `table-layout: fixed`, JupyterLab's default that breaks words
mid-way), numbers never wrap and the description wraps only between words. Every erratum among the
claims follows as a Markdown blockquote `> **Erratum <id>.** ...` (the book-markup convention).
"""
from __future__ import annotations

import functools
import html
import os
import textwrap
from dataclasses import replace

from inferlab.claims import evaluate_claims, lost_formulas
from inferlab.claims.render import errata_anchor, summary_line
from inferlab.core.specs import BF16, Precision, get_accelerator, get_model, resolve_model
from inferlab.core.context import yardstick  # @yardstick: sweeps past a model's context on purpose, no warning

VERDICT_MARK = {"consistent": "\u2713", "approximation": "\u2248", "erratum": "\u2717", "unchecked": "\u2013"}
VERDICT_WORD = {"consistent": "ok", "approximation": "approx.", "erratum": "erratum", "unchecked": "unchecked"}
WHATIF_ENV = "INFERLAB_WHATIF"

_CELL = "padding:2px 8px;text-align:{align};vertical-align:top;{extra}"
_NOWRAP = "white-space:nowrap;"
_WRAP = "white-space:normal;word-break:normal;overflow-wrap:normal;hyphens:none;"


class ClaimsTable:
    """A group of evaluated claims: HTML for JupyterLab, one plain-text line per claim for nbval.
    Each row shows the band that decided its verdict (`claims.evaluate.rule`) and carries its
    explanation as a tooltip; under the table, the ids of its approximations, unchecked claims and
    widened bands or overrides link to ERRATA.md's sections, which give each one's reason (the
    plain text lists the overrides with their reasons)."""

    def __init__(self, claims):
        self.claims = list(claims)

    def rows(self) -> list[tuple[str, str, str, str, str, str]]:
        """(id, verdict mark and word, book, ours, band, description) per claim."""
        return [(c.id, f"{VERDICT_MARK[c.verdict]} {VERDICT_WORD[c.verdict]}", c.book_text, c.ours_text,
                 c.band, c.description) for c in self.claims]

    def overrides(self) -> list[str]:
        """'<id>: <reason>' for every claim whose band or verdict is not the plain rule's."""
        return [f"{c.id}: {c.override}" for c in self.claims if c.override]

    def __repr__(self) -> str:
        rows = self.rows()
        w = [max(len(r[i]) for r in rows) for i in range(4)]
        lines = [f"{r[0]:<{w[0]}}  {r[1]:<{w[1]}}  book {r[2]:<{w[2]}}  ours {r[3]:<{w[3]}}  band {r[4]}"
                 for r in rows]
        return "\n".join(lines + [f"  * {o}" for o in self.overrides()])

    def _repr_html_(self) -> str:
        """Five columns (claim, description, book, ours, verdict with the band that decided it under
        it), so that a table fits a 676 px text column: every cell but the id and the verdict word
        wraps, between words only."""
        head = "".join(f'<th style="{_CELL.format(align=a, extra=_NOWRAP)}">{h}</th>'
                       for h, a in (("claim", "left"), ("", "left"), ("book", "right"), ("ours", "right"),
                                    ("verdict", "left")))
        body = []
        for c in self.claims:
            verdict = (f'<span style="{_NOWRAP}">{VERDICT_MARK[c.verdict]} {VERDICT_WORD[c.verdict]}</span><br>'
                       f'<span style="font-size:0.8em;color:#555">{html.escape(c.band + (" *" if c.override else ""))}</span>')
            cells = [(html.escape(c.id), "left", _NOWRAP + "font-family:monospace;font-size:0.8em;"),
                     (html.escape(c.description), "left", _WRAP + "min-width:10em;"),
                     (html.escape(c.book_text), "right", _WRAP + "min-width:5em;"),
                     (html.escape(c.ours_text), "right", _WRAP + "min-width:5em;"),
                     (verdict, "left", _WRAP + "min-width:6em;")]
            tds = "".join(f'<td style="{_CELL.format(align=a, extra=x)}">{t}</td>' for t, a, x in cells)
            body.append(f'<tr id="claim-{c.id}" title="{html.escape(c.explanation or c.verdict)}">{tds}</tr>')
        table = (f'<table class="inferlab-claims" style="table-layout:auto;border-collapse:collapse;'
                 f'font-size:0.9em;max-width:100%"><thead><tr>{head}</tr></thead>'
                 f'<tbody>{"".join(body)}</tbody></table>')
        notes = [(what, anchor, ids) for what, anchor, ids in (
            ("approximations", "approximations", [c.id for c in self.claims if c.verdict == "approximation"]),
            ("unchecked", "not-checkable-from-the-text", [c.id for c in self.claims if c.verdict == "unchecked"]),
            ("* not the plain rule", "widened-bands-and-overrides", [c.id for c in self.claims if c.override]))
            if ids]
        if notes:   # the reasons are ERRATA.md's, one link away: the table stays short under a lecture
            links = "; ".join(f'<a href="../ERRATA.md#{anchor}">{html.escape(what)}</a>: {", ".join(ids)}'
                              for what, anchor, ids in notes)
            table += f'<p style="font-size:0.85em;margin:2px 0">Why, on the errata page: {links}.</p>'
        return table


@yardstick
def errata_markdown(claims) -> str:
    """One Markdown blockquote per erratum: what the book says, the corrected value and what it
    means for a reader, with a link to the erratum's entry in ERRATA.md, which derives the cause
    step by step (an erratum with no consequence written keeps its cause in the box). Empty when
    there is none."""
    boxes = []
    for c in claims:
        if c.verdict != "erratum":
            continue
        text = (f"> **Erratum {c.id}.** *{c.description}.* The book says **{c.book_text}**; "
                f"the full model gives **{c.ours_text}** ([the cause](../ERRATA.md#{errata_anchor(c.id)})).")
        text += (f"\n>\n> *For a reader:* {c.consequence.strip()}" if c.consequence
                 else f" {c.explanation.strip()}")
        boxes.append(text)
    return "\n\n".join(boxes)


class Errata:
    """The erratum boxes of a group of claims, as Markdown (text/plain: the ids only)."""

    def __init__(self, claims):
        self.claims = [c for c in claims if c.verdict == "erratum"]

    def _repr_markdown_(self) -> str:
        return errata_markdown(self.claims)

    def __repr__(self) -> str:
        return "errata: " + ", ".join(c.id for c in self.claims)


@yardstick
def claims(section: str, *spans: str, topic: str | None = None) -> None:
    """Display the compact table of the selected claims (see `select`: a topic of
    data/claim_groups.toml, e.g. `claims("15.1.2", topic="memory-wall")`) and, below it, an erratum
    box for each erratum among them."""
    from IPython.display import display

    chosen = select(section, *spans, topic=topic)
    display(ClaimsTable(chosen))
    if any(c.verdict == "erratum" for c in chosen):
        display(Errata(chosen))


@yardstick
def book_says(claim_id: str) -> str:
    """The book's value of one registry claim as printed, with its unit ("1024 FLOP/byte"): the only
    way a page attributes a number to the book (tests/test_named_quantities.py checks the rest)."""
    section, _, letter = claim_id.partition("-")
    return select(section, letter)[0].book_text


@yardstick
def book_input(claim_id: str, name: str):
    """One input of the book's own arithmetic for a claim (its `own` or `method` inputs in
    data/claims.toml), e.g. book_input("15.1.1-m", "params") -> 13e9."""
    from inferlab.claims.registry import load_registry
    for claim in load_registry().claims:
        if claim.id == claim_id:
            for call in (claim.own, claim.method):
                if call is not None and name in call.inputs:
                    return call.inputs[name]
            raise ValueError(f"claim {claim_id} has no book input {name!r}")
    raise ValueError(f"no claim {claim_id!r} in the registry")


@yardstick
def claims_table(section: str, *spans: str, topic: str | None = None) -> ClaimsTable:
    return ClaimsTable(select(section, *spans, topic=topic))


# ---------------------------------------------------------------------------------------------
# Claims of a section, their verdict counts and the formulas the extraction lost
# ---------------------------------------------------------------------------------------------

WIDTH = 100


@functools.cache
def _section(section: str) -> tuple:
    return tuple(evaluate_claims(section))


@yardstick
def claim_groups(section: str) -> dict:
    """{topic: (title, [letters])} of `section` in data/claim_groups.toml, in the file's order."""
    import tomllib

    from inferlab.core.specs import data_dir
    with open(data_dir() / "claim_groups.toml", "rb") as fh:
        entries = tomllib.load(fh).get(section, [])
    return {e["topic"]: (e["title"], list(e["claims"])) for e in entries}


@yardstick
def select(section: str, *spans: str, topic: str | None = None) -> list:
    """The evaluated claims of `section`: those of a `topic` (data/claim_groups.toml), or those
    named by letters ("k") or inclusive spans in registry order ("k..v"); neither means the whole
    section."""
    claims = list(_section(section))
    letters = [c.id.split("-", 1)[1] for c in claims]
    if topic is not None:
        if spans:
            raise ValueError("select: give a topic or letters, not both")
        groups = claim_groups(section)
        if topic not in groups:
            raise ValueError(f"no topic {topic!r} for section {section} in data/claim_groups.toml; "
                             f"topics: {', '.join(groups) or 'none'}")
        spans = tuple(groups[topic][1])
    if not spans:
        return claims
    picked = []
    for span in spans:
        first, _, last = span.partition("..")
        last = last or first
        for name in (first, last):
            if name not in letters:
                raise ValueError(f"no claim {section}-{name} in the registry; section {section} has "
                                 f"{letters[0]}..{letters[-1]}")
        i, j = letters.index(first), letters.index(last)
        if j < i:
            raise ValueError(f"span {span!r} runs backwards ({section}-{first} comes after {section}-{last})")
        picked += [c for c in claims[i:j + 1] if c not in picked]
    return picked


@yardstick
def verdict_summary(section: str | None = None) -> str:
    """One line per section (or for one section): number of claims and count per verdict."""
    sections = [section] if section else ["15.1.1", "15.1.2", "15.2.1", "15.2.2"]
    lines = [f"{s}: {summary_line(list(_section(s)))}" for s in sections]
    if not section:
        lines.append(f"chapter: {summary_line([c for s in sections for c in _section(s)])}")
    return "\n".join(lines)


class Formulas:
    """The lost formulas of a section: LaTeX in JupyterLab, the same content as plain text."""

    def __init__(self, section: str):
        self.section = section
        self.items = lost_formulas(section)

    def _repr_markdown_(self) -> str:
        parts = []
        for f in self.items:
            parts.append(f"**{f.id}: {f.title}** (after *{f.after}*)\n\n$$\n{f.latex}\n$$")
            if f.remark:
                parts.append(f.remark)
            t = f.table()
            if t:
                parts.append("```text\n" + t + "\n```")
        return "\n\n".join(parts)

    def __repr__(self) -> str:
        parts = []
        for f in self.items:
            block = [f"{f.id}: {f.title} (after '{f.after}')", textwrap.indent(f.latex, "    ")]
            if f.remark:
                block.append(textwrap.fill(f.remark, WIDTH))
            t = f.table()
            if t:
                block.append(t)
            parts.append("\n".join(block))
        return "\n\n".join(parts)


@yardstick
def show_formulas(section: str) -> Formulas:
    """The section's lost formulas, reconstructed (display it as a cell's last expression)."""
    return Formulas(section)


@yardstick
def measure_it(check: str, *, attempts: int = 3, model: str = "tiny", threads: int | None = 1, **thresholds):
    """Time the chapter's effects live (`measure.quick_suite` on a tiny model, a few seconds on a
    CPU core) and evaluate one of `measure`'s checks, e.g. "itl_flat_with_context".

    Robust to a busy machine: the points a check compares are timed round-robin (`time_interleaved`), so a
    change in load falls on all of them alike, and the checks compare ratios, which a uniform slowdown leaves
    alone. One CPU thread by default (`threads`), since a busy neighbour stalls every OpenMP barrier of a
    multi-threaded op of a tiny model for a whole time slice; on a CPU that one thread's CPU time is then what
    each point is timed by (clock "thread-cpu"), which the time the host keeps it waiting does not inflate.
    A burst can still catch one run; so a failed check is measured again, up to `attempts` runs in all (a
    real regression fails every one). Returns (run, check) of the last run; `check.text` says how many runs
    it took when more than one."""
    from dataclasses import replace

    from inferlab import measure

    fn = getattr(measure, check, None)
    if fn is None or check not in {c.__name__ for c in measure.checks.CHECKS}:
        names = ", ".join(c.__name__ for c in measure.checks.CHECKS)
        raise ValueError(f"unknown check {check!r}; allowed: {names}")
    # One thread on a CPU: time each point by its thread's CPU time, which the host's load does not inflate.
    from inferlab.measure.device import resolve_kind
    clock = "thread-cpu" if threads == 1 and resolve_kind("auto") == "cpu" else "wall"
    for attempt in range(1, attempts + 1):
        # Eager decode: the tiny model sits in the cache, and compiling it (the CPU's default
        # decode mode) would take longer than the whole measurement it serves.
        run = measure.quick_suite(model=model, progress=False, threads=threads, clock=clock, decode_mode="eager")
        result = fn(run, **thresholds)
        if result:
            break
    if attempt > 1:
        result = replace(result, text=f"{result.text} [run {attempt} of {attempts}]")
    return run, result


# ---------------------------------------------------------------------------------------------
# The "What if?" scenario
# ---------------------------------------------------------------------------------------------

@yardstick
def parse_whatif(text: str) -> tuple[str, str]:
    """"llama-3-8b@h200" -> ("llama-3-8b", "h200"); a clear error for anything else."""
    model, sep, gpu = (text or "").partition("@")
    if not sep or not model.strip() or not gpu.strip():
        raise ValueError(f"{WHATIF_ENV} must be MODEL@ACCELERATOR, e.g. 'llama-3-8b@h200'; got {text!r}")
    return model.strip(), gpu.strip()


@yardstick
def what_if(model, accelerator, precision: Precision = BF16):
    """The notebook's scenario: the cell's model and accelerator, unless the environment variable
    INFERLAB_WHATIF=MODEL@ACCELERATOR names others (the tests re-run every notebook that way). The
    model is a name of `inferlab list` or a path to a Hugging Face config.json (or its folder).
    Returns (ModelConfig, Accelerator, Precision)."""
    env = os.environ.get(WHATIF_ENV)
    if env:
        model, accelerator = parse_whatif(env)
    return resolve_model(model), get_accelerator(accelerator), precision


@yardstick
def is_book_setup(model, accelerator, precision: Precision = BF16) -> bool:
    """True when the scenario is the book's worked example (Llama-2 13B on one H100 SXM, bf16
    throughout): only then do the figures carry the book's markers."""
    from inferlab.notebook.figures import FigureScenario
    return FigureScenario(resolve_model(model), get_accelerator(accelerator), precision).book


@yardstick
def book_points_if(book: bool, section: str, figure: str):
    """The book's markers for one figure when `book` is True, else None (no markers)."""
    from inferlab.notebook.figures import book_points
    return book_points(section, figure) if book else None


@yardstick
def context_note(model, tokens: int) -> str:
    """'' when `tokens` fits the model's context window, else a sentence saying it does not."""
    m = resolve_model(model)
    limit = m.max_context_tokens
    if limit is None or tokens <= limit:
        return ""
    return (f"{tokens:,} tokens is beyond {m.name}'s context window of {limit:,} tokens: a yardstick "
            f"for the arithmetic, not a run the model can serve.")


@yardstick
def with_precision(precision: Precision, **kw) -> Precision:
    return replace(precision, **kw)


@yardstick
def draw(plot_function, *args, **kwargs):
    """`plot_function(*args, **kwargs)`, or, when the configuration does not fit on the device
    (`DoesNotFitError`), a figure that says so in words: never an empty plot, never a stopped Run All."""
    from inferlab.notebook.plots import does_not_fit_plot
    from inferlab.base.input_checks import DoesNotFitError
    try:
        return plot_function(*args, **kwargs)
    except DoesNotFitError as e:
        return does_not_fit_plot(str(e))


@yardstick
def fit_message(model, accelerator, seq_len: int, precision: Precision = BF16) -> str:
    """'' when at least one sequence of `seq_len` tokens fits beside the weights on one device,
    else what does not fit and what would (the tensor-parallel degree, an int8 cache, a shorter
    context), in a sentence or two (`memory.fit_advice`)."""
    from inferlab.core.memory import fit_advice
    return fit_advice(get_model(model), get_accelerator(accelerator), seq_len, precision).sentence()


@yardstick
def draw_if_fits(message: str, plot_function, *args, **kwargs):
    """`draw(plot_function, ...)` when `message` (from `fit_message`) is empty, else a figure that
    says "does not fit" and why."""
    from inferlab.notebook.plots import does_not_fit_plot
    return does_not_fit_plot(message) if message else draw(plot_function, *args, **kwargs)


class Details:
    """A plain-text table folded under a one-line summary (HTML <details>); text/plain keeps the
    whole table for nbval."""

    def __init__(self, summary: str, text: str):
        self.summary, self.text = summary, text

    def _repr_html_(self) -> str:
        return (f"<details><summary>{html.escape(self.summary)}</summary>"
                f"<pre style=\"font-size:0.85em\">{html.escape(self.text)}</pre></details>")

    def __repr__(self) -> str:
        return self.text


@yardstick
def details(summary: str, text: str) -> Details:
    """A table on demand: folded in JupyterLab, complete in the plain-text output."""
    return Details(summary, text)


@yardstick
def book_ratios(section: str, figure: str, model, accelerator, precision: Precision = BF16, batch: int = 1) -> str:
    """'2.9x at 2,048 tokens, ...': the book's prefill times (the figure's markers, in ms) over
    the library's full per-operator prefill time at the same prompt length."""
    from inferlab.notebook.figures import book_points
    from inferlab.core.latency import prefill_time_s
    parts = []
    for x, y, _ in book_points(section, figure):
        ours_ms = prefill_time_s(get_model(model), get_accelerator(accelerator), int(x), batch, precision) * 1e3
        parts.append(f"{y / ours_ms:.1f}\u00d7 at {int(x):,} tokens")
    return ", ".join(parts)


GAP_LIMIT = 0.25  # a measured time further than this from the roofline prediction gets explained


@yardstick
def gap_sentence(run, kind: str, host_load=None) -> str:
    """One sentence on how far the measured times of `run`'s `kind` series ("ttft", "itl", ...)
    fall from the roofline prediction drawn from the same run's ceilings, and why when the gap
    exceeds GAP_LIMIT (25 %): small-matrix kernel efficiency, fixed per-step overhead, contention.
    Beyond FAR_LIMIT (2x either way) it adds what the host measured and how loaded it was
    (host_sentence; `host_load` as there)."""
    pts = [p for p in run.points(kind) if p.get("predicted_s") and p.get("timing")]
    if not pts:
        return ""
    ratios = [p["timing"]["median_s"] / p["predicted_s"] for p in pts]
    worst = max(ratios, key=lambda r: abs(r - 1))
    what = {"ttft": "TTFT", "itl": "ITL", "batch": "decode step time", "roofline": "matmul time"}.get(kind, kind)
    if abs(worst - 1) <= GAP_LIMIT:
        return (f"Measured {what} stays within {GAP_LIMIT:.0%} of the roofline prediction "
                f"(worst point {worst:.2f}\u00d7 the prediction).")
    why = ("slower than predicted: small matrices reach only part of the measured copy bandwidth and "
           "matmul rate, every step also pays a fixed overhead the roofline leaves out (Python dispatch, "
           "kernel launches, norms and activation functions), and on a shared machine other processes "
           "take cores" if worst > 1 else
           "faster than predicted: the working set partly fits in the caches, which the roofline, "
           "drawn from the HBM/DRAM copy bandwidth, does not credit")
    text = (f"Measured {what} is up to {worst:.2f}\u00d7 the roofline prediction, more than "
            f"{GAP_LIMIT:.0%} off: {why}.")
    if max(worst, 1 / worst) > FAR_LIMIT:
        text += " " + host_sentence(run, host_load)
    return text


FAR_LIMIT = 2.0  # a gap beyond this factor also says how fast this host was while it ran


@yardstick
def host_sentence(run, host_load=None) -> str:
    """What this host measured while the run ran (its copy bandwidth and matmul rate, the ceilings the
    prediction is drawn from) and how loaded it was (`host_load`: (1-minute load average, cores);
    None: read now with os.getloadavg, right after the run), and what that means for the gap."""
    parts = []
    ceilings = getattr(run, "ceilings", None)
    if callable(ceilings):
        try:
            c = ceilings()
            rates = ", ".join(f"{dtype} {v / 1e9:,.1f} GFLOP/s" for dtype, v in sorted(c.matmul_flops_per_s.items()))
            parts.append(f"copy bandwidth {c.copy_bytes_per_s / 1e9:,.1f} GB/s, matmul {rates}")
        except (KeyError, TypeError, AttributeError):
            pass
    if host_load is None and hasattr(os, "getloadavg"):
        host_load = (os.getloadavg()[0], os.cpu_count() or 1)
    busy = ""
    if host_load is not None:
        load, cores = host_load
        parts.append(f"load average {load:.1f} on {cores} cores")
        if load > cores:
            busy = (" More runnable processes than cores: the run shared the CPU, so its small kernels waited "
                    "between launches while the ceilings, timed as long loops, were less affected.")
    measured = "; ".join(parts) if parts else "no ceilings recorded"
    return (f"This host at the time of the run: {measured}. The prediction uses those measured ceilings, so "
            f"the gap is not a slower machine but time the roofline does not count (dispatch and launch "
            f"overheads of small kernels, and other work on the host).{busy}")


# Sweeps past a model's context window on purpose (the figures shade that region; the book's own
# points go beyond it): every public function here runs inside beyond_context().

# -- Architectures that lift decode attention off one FLOP per byte (15.1.2), and MoE decode (15.1.2, 15.2.2)

ARCHITECTURE_MODELS = (("llama-2-13b", "bf16"), ("llama-3-8b", "bf16"), ("llama-3-8b", "int8"),
                       ("mistral-7b-v0.1", "bf16"), ("gemma-2-9b", "bf16"), ("deepseek-v2-lite", "bf16"),
                       ("deepseek-v3", "bf16"))


def _attention_label(m) -> str:
    if m.is_mla:
        return f"MLA, latent {m.kv_lora_rank} + rope {m.qk_rope_head_dim}"
    kinds = m.layer_kinds
    slid = kinds.count("sliding")
    head = f"{m.attention_kind} {m.n_heads}/{m.n_kv_heads}"
    return head if not slid else f"{head}, {slid}/{m.n_layers} layers window {m.sliding_window:,}"


@yardstick
def model(name_or_path):
    """A model by registered name, shipped config name (data/hf-configs) or config path (`specs.resolve_model`)."""
    return resolve_model(name_or_path)


@yardstick
def architecture_rows(accelerator, context: int, precision: Precision = BF16) -> list:
    """One row per architecture of ARCHITECTURE_MODELS at `context` tokens on one `accelerator`:
    (model, attention, KV cache dtype, KV bytes per token held, decode attention FLOPs per KV byte,
    largest batch beside the weights or None when the weights alone do not fit)."""
    from inferlab.core.costs import decode_costs
    from inferlab.core.memory import kv_cache_bytes, max_batch, weight_bytes
    acc = get_accelerator(accelerator)
    rows = []
    for name, kv in ARCHITECTURE_MODELS:
        m, p = resolve_model(name), replace(precision, kv=kv)
        held = kv_cache_bytes(m, context, 1, p, beyond_context=True) / context
        attn = decode_costs(m, 1, context, p, beyond_context=True).attention
        fits = weight_bytes(m, p) < acc.memory_bytes
        b = int(max_batch(m, acc, context, p, allow_zero=True, beyond_context=True)) if fits else None
        rows.append((name, _attention_label(m), kv, held, float(attn.flops / attn.kv_bytes), b))
    return rows


@yardstick
def architecture_table(accelerator, context: int, precision: Precision = BF16) -> str:
    """`architecture_rows` as a text table."""
    from inferlab.base.text_tables import text_table
    # A row is named by model and cache format together: one model's bf16 and int8 rows are two setups.
    rows = [(n if kv == "bf16" else f"{n}, {kv} KV", a, kv, h, i, "weights do not fit" if b is None else b)
            for n, a, kv, h, i, b in architecture_rows(accelerator, context, precision)]
    return text_table(["model", "attention", "KV", "KV bytes/token", "attention FLOP/byte", "B_max"], rows,
                      ["", "", "", ",.0f", ".2f", ",d"])


@yardstick
def moe_decode_rows(model, accelerator, context: int, precision: Precision = BF16, batches=(1, 8, 64, 256)) -> list:
    """A mixture of experts' decode step at each batch: (B, expected distinct experts per MoE layer,
    weight bytes the step reads, its time, the active and the total weights' read time), uniform
    routing (`moe.expected_experts`)."""
    from inferlab.core.costs import decode_costs
    from inferlab.core.latency import decode_step_time_s, weight_read_floor_s
    from inferlab.core.memory import active_weight_bytes
    from inferlab.core.moe import expected_experts
    from inferlab.core.roofline import memory_time_s
    m, acc = resolve_model(model), get_accelerator(accelerator)
    rows = []
    for b in batches:
        touched = expected_experts(m.n_experts, m.experts_per_token, b)
        w = float(decode_costs(m, b, context, precision).total.weight_bytes)
        rows.append((b, touched, w, decode_step_time_s(m, acc, context, b, precision),
                     memory_time_s(active_weight_bytes(m, precision), acc), weight_read_floor_s(m, acc, precision)))
    return rows


@yardstick
def moe_decode_table(model, accelerator, context: int, precision: Precision = BF16, batches=(1, 8, 64, 256)) -> str:
    """`moe_decode_rows` as a text table (GB and ms)."""
    from inferlab.base.text_tables import text_table
    rows = [(b, t, w / 1e9, s * 1e3, a * 1e3, f * 1e3)
            for b, t, w, s, a, f in moe_decode_rows(model, accelerator, context, precision, batches)]
    return text_table(["B", "experts touched", "weights read GB", "step ms", "active-weight read ms",
                       "all-weight read ms"], rows, ["d", ".2f", ".1f", ".2f", ".2f", ".2f"])



def install_display() -> None:
    """Make every matplotlib Figure the notebook displays carry what it draws as its PNG's "alt"
    metadata (the book's alt text, alttext.describe) and its phone variant. Called once, in each
    chapter notebook's set-up cell; nothing happens outside IPython."""
    from inferlab.notebook.alttext import register_ipython
    register_ipython()

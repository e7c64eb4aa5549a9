"""The chapter notebooks as a reader meets them (issue 10).

- Prose first: in each notebook's main body (everything before "## Exercises"), the lines of
  monospace text output a reader sees are no more than the lines of Markdown prose.
- What-if that stays true: each notebook's main body re-run with the "What if?" scenario set to
  Llama-3-8B on an H200, Llama-2-70B on one H100, DeepSeek-V2-Lite (MoE + MLA) on one H100 and
  Gemma 2 9B (sliding windows) on an H200 (INFERLAB_WHATIF, read by
  `reader.what_if`) completes without an error, draws no book marker, and the conclusions it
  renders carry the numbers the library computes for that scenario.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import nbformat
import pytest

from inferlab.core.deployment import Deployment
from inferlab.core import latency, memory
from inferlab.core.specs import BF16, get_accelerator, resolve_model as get_model
from hang_guard import HANG_S

CHAPTERS = Path(__file__).resolve().parents[1] / "chapters"
SUBSECTIONS = ["15_1_1_prefill", "15_1_2_decode_kv_cache", "15_2_1_ttft_itl", "15_2_2_batching"]
# Outputs a reader sees as rendered (HTML, Markdown, LaTeX, images, widgets): their text/plain is
# only the fallback nbval compares, not what is on screen.
RICH = ("text/html", "text/markdown", "text/latex", "image/png", "image/svg+xml",
        "application/vnd.jupyter.widget-view+json")


def main_body(nb):
    cells = []
    for c in nb.cells:
        if c.cell_type == "markdown" and c.source.lstrip().startswith("## Exercises"):
            break
        cells.append(c)
    return cells


def visible_text_lines(cell) -> int:
    """Lines of monospace text a reader sees under a code cell: streams, and results that have
    nothing richer than text/plain."""
    n = 0
    for o in cell.get("outputs", []):
        if o.output_type == "stream":
            n += len(o.text.rstrip("\n").splitlines())
        elif "data" in o and not any(k in o.data for k in RICH):
            n += len(o.data.get("text/plain", "").splitlines())
    return n


def test_visible_text_lines_counts_streams_and_plain_results_only():
    # Hand-made cell: a 3-line print, a plain 2-line result, an HTML table (not counted).
    cell = nbformat.v4.new_code_cell("x")
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="a\nb\nc\n"),
                    nbformat.v4.new_output("execute_result", data={"text/plain": "1\n2"}, execution_count=1),
                    nbformat.v4.new_output("display_data", data={"text/html": "<table/>", "text/plain": "x\ny\nz"})]
    assert visible_text_lines(cell) == 3 + 2


@pytest.mark.parametrize("name", SUBSECTIONS + ["15_2_3_serving_lab"])
def test_main_body_text_output_lines_do_not_exceed_markdown_lines(name):
    nb = nbformat.read(CHAPTERS / f"{name}.ipynb", as_version=4)
    body = main_body(nb)
    prose = sum(len([ln for ln in c.source.splitlines() if ln.strip()]) for c in body if c.cell_type == "markdown")
    text = sum(visible_text_lines(c) for c in body if c.cell_type == "code")
    assert text <= prose, f"{name}: {text} lines of text output against {prose} lines of Markdown in the main body"


# ---------------------------------------------------------------------------------------------
# What if? re-runs
# ---------------------------------------------------------------------------------------------

SCENARIOS = {"llama-3-8b@h200": ("llama-3-8b", "h200"), "llama-2-70b@h100-sxm": ("llama-2-70b", "h100-sxm"),
             # issue 51: a mixture of experts with latent attention, and sliding windows (data/hf-configs)
             "deepseek-v2-lite@h100-sxm": ("deepseek-v2-lite", "h100-sxm"),
             "gemma-2-9b@h200": ("gemma-2-9b", "h200")}
LIVE = re.compile(r"measure_it|measure\.(plots|recorded_runs)|recorded_summary|breakdown\.|recorded_tp_summary")


def runnable_body(name: str):
    """The main body without the live-measurement and recorded-run cells (timings, not the
    scenario, and slow): what the What-if test re-runs."""
    nb = nbformat.read(CHAPTERS / f"{name}.ipynb", as_version=4)
    nb.cells = [c for c in main_body(nb) if not (c.cell_type == "code" and LIVE.search(c.source))]
    return nb


@pytest.fixture(scope="module", params=list(SCENARIOS))
def rerun(request):
    """{notebook: executed main body} for one scenario. The four main bodies run one after the
    other in ONE kernel (each starts with its own imports and What-if cell), to pay the kernel
    start-up once per scenario."""
    from nbclient import NotebookClient
    bodies = {name: runnable_body(name) for name in SUBSECTIONS}
    joined = nbformat.v4.new_notebook(metadata=bodies[SUBSECTIONS[0]].metadata)
    spans, start = {}, 0
    for name, nb in bodies.items():
        joined.cells += nb.cells
        spans[name] = (start, start + len(nb.cells))
        start += len(nb.cells)
    with pytest.MonkeyPatch.context() as env:  # the kernel inherits it; restored afterwards
        env.setenv("INFERLAB_WHATIF", request.param)
        NotebookClient(joined, timeout=HANG_S, kernel_name="python3",
                       resources={"metadata": {"path": str(CHAPTERS)}}).execute()
    out = {}
    for name, (a, b) in spans.items():
        nb = nbformat.v4.new_notebook()
        nb.cells = joined.cells[a:b]
        out[name] = nb
    return request.param, out


def outputs(nb, mime: str) -> str:
    return "\n".join(o.get("data", {}).get(mime, "") if "data" in o else (o.get("text", "") if mime == "text/plain" else "")
                     for c in nb.cells if c.cell_type == "code" for o in c.outputs)


def markdown_out(nb) -> str:
    return outputs(nb, "text/markdown")


def number(text: str) -> float:
    return float(text.replace(",", ""))


def test_rerun_completes_without_errors_nan_or_book_markers(rerun):
    scenario, nbs = rerun
    model, gpu = SCENARIOS[scenario]
    for name, nb in nbs.items():
        errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
        assert not errors, f"{name} under {scenario}: {errors[0].ename}: {errors[0].evalue}"
        plain = outputs(nb, "text/plain")
        # The book's markers add a "book ..." column to a figure's table (plots._with_book).
        assert not re.search(r"\bbook (ms|GB|tokens/s|\$/1k|ITL ms)\b", plain), f"{name}: book markers under {scenario}"
        assert not re.search(r"\bnan\b", plain + markdown_out(nb)), f"{name}: a nan under {scenario}"
        stderr = [o.text for c in nb.cells for o in c.get("outputs", []) if o.get("name") == "stderr"]
        assert not stderr, f"{name}: stderr under {scenario}: {stderr[0][:300]}"
        assert f"{get_model(model).name} " in markdown_out(nb), f"{name} does not render the scenario {scenario}"
        assert "This is the book's worked example" not in markdown_out(nb)


def test_rerun_renders_conclusions_that_match_the_numbers(rerun):
    scenario, nbs = rerun
    m, g = (get_model(x) if i == 0 else get_accelerator(x) for i, x in enumerate(SCENARIOS[scenario]))
    fits = memory.weight_bytes(m) < g.memory_bytes

    # 15.1.1: the takeaway's time is 2·P·S/peak for the 2,048-token prompt (P the matrix parameters,
    # bf16 peak), then the library's whole prefill, attention included.
    md = markdown_out(nbs["15_1_1_prefill"])
    rule_ms = 2 * m.n_matmul_params * 2048 / g.peak("bf16") * 1e3
    said = number(re.search(r"prompt that is ([\d,.]+) ms on one", md).group(1))
    assert said == pytest.approx(rule_ms, abs=0.05)
    ttft_ms = latency.prefill_time_s(m, g, 2048) * 1e3
    whole = number(re.search(r"attention included, ([\d,.]+) ms\)", md).group(1))
    assert whole == pytest.approx(ttft_ms, abs=0.05)

    # 15.1.2: the largest batch at context 1,000, or "does not fit".
    md = markdown_out(nbs["15_1_2_decode_kv_cache"])
    if fits:
        said = int(number(re.search(r"GB hold ([\d,]+) sequences", md).group(1)))
        assert said == memory.max_batch(m, g, 1000)
    else:
        assert "does not fit" in md.lower() and "GB hold" not in md

    # 15.2.1: the fastest tensor-parallel degree named is the argmin of the computed ITL (each all-reduce
    # with the accelerator's own start-up latency, the What-if cell's default).
    md = markdown_out(nbs["15_2_1_ttft_itl"])
    itl = {k: latency.decode_step_time_s(m, Deployment(g, tp=k), 1024, 1) for k in (1, 2, 4, 8)}
    said = int(re.search(r"lowest ITL at \$K\$ = (\d+)", md).group(1))
    assert said == min(itl, key=itl.get)

    # 15.2.2: B_max/B* = capacity/M_weights - 1, and the memory limit, or "does not fit".
    md = markdown_out(nbs["15_2_2_batching"])
    if fits:
        ratio = g.memory_bytes / memory.weight_bytes(m) - 1
        said = number(re.search(r"\$B_\\text\{max\}\$ = ([\d,]+), ([\d.]+) times \$B\^\*\$", md).group(2))
        assert said == pytest.approx(ratio, abs=0.05)
        said_max = int(number(re.search(r"\$B_\\text\{max\}\$ = ([\d,]+)", md).group(1)))
        assert said_max == memory.max_batch(m, g, 1024)
        # "concave" is said only where the throughput's slope never rises (a mixture of experts'
        # rises while each new sequence brings in experts of its own)
        t = latency.throughput_tokens_per_s(m, g, 1024, np.arange(1, 65))
        concave = bool(np.all(np.diff(np.diff(t)) <= 1e-9 * t[2:]))
        assert ("Throughput is concave in $B$" in md) == concave
        assert ("Throughput is not concave in $B$" in md) == (not concave)
    else:
        assert "Does not fit" in md


def test_the_reader_version_that_make_lab_opens_has_no_solutions(tmp_path):
    """`make lab` builds reader/ with `python -m inferlab.exercises build-student`: no solution cell
    survives, every check cell does, and the main body (prose, figures, tables) is unchanged."""
    import subprocess
    import sys
    names = [CHAPTERS / f"{n}.ipynb" for n in SUBSECTIONS]
    subprocess.run([sys.executable, "-m", "inferlab.exercises", "build-student", *map(str, names),
                    "--out", str(tmp_path)], check=True, capture_output=True)
    for name in SUBSECTIONS:
        src = nbformat.read(CHAPTERS / f"{name}.ipynb", as_version=4)
        out = nbformat.read(tmp_path / f"{name}.ipynb", as_version=4)
        assert not [c for c in out.cells if c.source.lstrip().startswith(("# SOLUTION", "<!-- SOLUTION"))]
        assert sum("check(" in c.source for c in out.cells) == sum("check(" in c.source for c in src.cells)
        assert [c.source for c in main_body(out)] == [c.source for c in main_body(src)]


# ---------------------------------------------------------------------------------------------
# The interview drills follow the What-if
# ---------------------------------------------------------------------------------------------

def drill_answers(nb) -> dict:
    """{anchor: the folded answer's Markdown} of a notebook's interview drills."""
    out = {}
    for c in nb.cells:
        if c.cell_type == "code" and "interview.answer(" in c.source:
            md = "".join(o.get("data", {}).get("text/markdown", "") for o in c.outputs)
            out[re.search(r'data-drill="([^"]+)"', md).group(1)] = md
    return out


def _kv_bytes_by_hand(m, S: int, b: int = 2) -> int:
    """One sequence's cache of S tokens in bf16, layer by layer, from the architecture's fields."""
    if m.is_mla:
        return m.n_layers * (m.kv_lora_rank + m.qk_rope_head_dim) * b * S
    spans = {"full": S, "sliding": min(S, m.sliding_window or S), "chunked": min(S, m.attention_chunk or S)}
    return sum(2 * m.n_kv_heads * m.head_dim * b * spans[kind] for kind in m.layer_kinds)


def test_the_interview_drills_answer_for_the_what_if_scenario(rerun):
    """Under another scenario every drill's folded answer carries that scenario's numbers: each differs
    from the stored answer of the book's scenario, and its key numbers are the library's for the new one."""
    from inferlab.core.deployment import Deployment
    from inferlab.core.memory import fit_advice
    scenario, nbs = rerun
    m, g = get_model(SCENARIOS[scenario][0]), get_accelerator(SCENARIOS[scenario][1])
    for name, nb in nbs.items():
        stored = drill_answers(nbformat.read(CHAPTERS / f"{name}.ipynb", as_version=4))
        got = drill_answers(nb)
        assert sorted(got) == sorted(stored) and len(got) == 3, name
        for anchor, md in got.items():
            assert md != stored[anchor], f"{name} {anchor}: the same answer under {scenario}"
            assert m.name in md, f"{name} {anchor} does not name {m.name}"
    fit = fit_advice(m, g, 1000)
    tp = 1 if fit.fits else fit.tp
    # 15.1.1, question 1: the KV cache of the 10,000-token system prompt, 2 L N_kv H b S for full
    # attention; a sliding layer holds at most its window, MLA one latent and rope key per layer and token
    kv_gb = _kv_bytes_by_hand(m, 10_000) / 1e9
    md = drill_answers(nbs["15_1_1_prefill"])["interview-15-1-1-1"]
    assert number(re.search(r"KV cache \(([\d.]+) GB\)", md).group(1)) == pytest.approx(kv_gb, rel=0.005)
    # 15.1.2, question 2: the largest batch at the page's 1,000-token context, per replica
    md = drill_answers(nbs["15_1_2_decode_kv_cache"])["interview-15-1-2-2"]
    said = int(re.search(r"at \$B_\\text\{max\}\$ = (\d+)", md).group(1))
    from inferlab.core.usable_memory import SERVING, max_batch_usable
    assert said == max_batch_usable(m, g, 1000, BF16, tp, SERVING)   # the page's usable memory (vLLM's 0.9)
    # 15.2.1, question 2: the page's scenario at 50,000 tokens
    md = drill_answers(nbs["15_2_1_ttft_itl"])["interview-15-2-1-2"]
    # on the fewest GPUs (a power of two) whose usable memory holds the weights and one 50,000-token sequence
    tp_50k = next(k for k in (1, 2, 4, 8, 16, 32, 64)
                  if max_batch_usable(m, g, 50_000, BF16, k, SERVING, beyond_context=True) >= 1)
    t = latency.prefill_time_s(m, Deployment(g, tp=tp_50k), 50_000, beyond_context=True)
    said = re.search(r"On this page's scenario, [^:]*: ([\d.]+) (ms|s)\b", md)
    assert number(said.group(1)) * (1e-3 if said.group(2) == "ms" else 1) == pytest.approx(t, rel=0.01)
    # 15.2.2, question 1: B* = M_weights / C_kv at the page's 1,024-token context
    md = drill_answers(nbs["15_2_2_batching"])["interview-15-2-2-1"]
    bstar = latency.kv_crossover_batch(m, 1024, tp=1 if fit_advice(m, g, 1024).fits else fit_advice(m, g, 1024).tp)
    assert number(re.search(r"C_\\text\{kv\}\$ = ([\d.]+) and", md).group(1)) == pytest.approx(bstar, abs=0.5)

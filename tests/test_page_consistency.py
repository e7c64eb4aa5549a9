"""One value per quantity across what a reader sees: the cheat sheet, the twelve interview answers and
the What-if cells' scenario lines, rendered for the book's scenario and two What-ifs (a mixture of
experts and a grouped-query model). Each quantity is found by the phrases that print it; two printed
values of one quantity agree when they are roundings of one number (54 and 54.4 agree; 7.92 and 7.93
do not)."""
from __future__ import annotations

import re

import pytest

from inferlab.core.specs import BF16, get_accelerator, resolve_model
from inferlab.notebook import cheatsheet, conclusions, interview

NUM = r"(\d[\d,]*(?:\.\d+)?)"
# quantity: the patterns that print it (group 1 the number). The pages' contexts differ (15.1.2 decodes at
# S = 1,000; 15.2.x and the cheat sheet at 1,024; 15.1.1 at its 2,048-token prompt), so a key names its context.
QUANTITIES = {
    "ridge point, FLOP/byte": [
        rf"ridge(?: point)? of {NUM}", rf"reach the ridge \({NUM} FLOP/byte", rf"I_\\text\{{ridge\}} = \\mathbf\{{\\?\$?{NUM}",
        rf"meets the ridge of {NUM}"],
    "bandwidth, TB/s": [rf"{NUM} TB/s"],
    "peak, TFLOP/s": [rf"{NUM} TFLOP/s"],
    "usable memory, GB": [rf"the usable {NUM} GB", rf"= {NUM} GB \(vLLM's"],
    "prefill of 2,048 tokens, ms": [
        rf"prefill of 2,048 tokens {NUM} ms", rf"\({NUM} ms for the whole prompt", rf"whole pass with attention: {NUM} ms",
        rf"2,048 → 8,192 tokens is [\d.]+× \({NUM} →", rf"a 2,048-token prefill costs {NUM} ms"],
    "decode step, B = 1, S = 1,024, ms": [
        rf"decode step {NUM} ms\)", rf"against {NUM} ms for a decode step", rf"caches: {NUM} ms at \$B\$ = 1,",
        rf"t_\\text\{{step\}}\(B\) = \\mathbf\{{\\?\$?{NUM}"],
    "decode step, B = 1, S = 1,000, ms": [rf"{NUM} ms per step at \$S\$ = 1,000"],
    "decode step, B = 1, S = 2,048, ms": [rf"\({NUM} ms per step, a whole read", rf"\\text\{{ITL\}} = \\mathbf\{{\\?\$?{NUM}"],
    "throughput, B = 1, S = 1,024, tokens/s": [
        rf"{NUM} tokens/s at \$B\$ = 1", rf"\\text\{{throughput\}}\(B\) = \\mathbf\{{\\?\$?{NUM}", rf"multiplies throughput \d+× \({NUM} →"],
    "throughput, B = 1, S = 1,000, tokens/s": [rf"1,000, of which \d+% is that read at [\d.]+ TB/s; {NUM} tokens/s",
                                               rf"throughput grows from {NUM} to"],
    "largest batch in usable memory, S = 1,024": [
        rf"holds in the usable .*? is {NUM}; throughput", rf"at the largest batch a server holds, {NUM},",
        rf"B_\\text\{{max\}} = \\mathbf\{{\\?\$?{NUM}", rf"\(\$B\$ = {NUM} in the usable memory\)", rf"\$B_\\text\{{max\}}\$ = {NUM} against"],
    "weights a decode step reads, GB": [rf"each step reads {NUM} GB of weights", rf"mostly the weight read: {NUM} GB"],
    "B*, S = 1,024": [rf"C_\\text\{{kv\}}\$ = {NUM} and the largest", rf"B\^\* = \\mathbf\{{\\?\$?{NUM}", rf"against \$B\^\*\$ = {NUM}"],
    "largest batch with an int8 cache, S = 1,024": [
        rf"An int8 KV cache halves .*?\$B_\\text\{{max\}}\$ = {NUM}\.", rf"An int8 KV cache doubles the batch that fits \(\d+ → {NUM}\)"],
    "largest batch of the 8-KV-head variant, S = 1,024": [
        rf"parameter count\): \$B_\\text\{{max\}}\$ = {NUM}", rf"raises the batch that fits to {NUM}"],
    "cost per 1k tokens at B = 1, US$": [rf"US\\\$([\d.]+) per thousand tokens at \$B\$ = 1", rf"\(\\\$([\d.]+) → \\\$",
                                         rf"\\text\{{cost per 1k tokens\}} = \\mathbf\{{\\?\$?{NUM}"],
}
# the quantities each scenario must print at least twice (else the check is vacuous)
SHARED = {"ridge point, FLOP/byte", "bandwidth, TB/s", "usable memory, GB", "prefill of 2,048 tokens, ms",
          "decode step, B = 1, S = 1,024, ms", "throughput, B = 1, S = 1,024, tokens/s",
          "largest batch in usable memory, S = 1,024", "weights a decode step reads, GB", "B*, S = 1,024",
          "largest batch with an int8 cache, S = 1,024", "cost per 1k tokens at B = 1, US$"}


def extract(text: str) -> list[tuple[str, str]]:
    """(quantity, printed number) for every phrase of QUANTITIES in `text`."""
    text = text.replace("{,}", ",")
    found = []
    for quantity, patterns in QUANTITIES.items():
        for pattern in patterns:
            found += [(quantity, m.group(1)) for m in re.finditer(pattern, text)]
    return found


def _interval(printed: str) -> tuple[float, float]:
    """The numbers that print as `printed`: value ± half a unit of its last digit."""
    value = float(printed.replace(",", ""))
    half = 0.5 * 10 ** -(len(printed.split(".")[1]) if "." in printed else 0)
    return value - half, value + half


def agree(a: str, b: str) -> bool:
    """True when some number rounds to both printed values."""
    (lo_a, hi_a), (lo_b, hi_b) = _interval(a), _interval(b)
    return max(lo_a, lo_b) < min(hi_a, hi_b)


def conflicts(pairs) -> dict:
    """{quantity: sorted printed values} for each quantity printed with two values that cannot agree."""
    by_quantity: dict = {}
    for quantity, printed in pairs:
        by_quantity.setdefault(quantity, set()).add(printed)
    return {q: sorted(v) for q, v in by_quantity.items()
            if any(not agree(a, b) for a in v for b in v)}


# --- the extractor catches a planted disagreement --------------------------------------------

def test_the_extractor_finds_a_planted_disagreement():
    # the cheat sheet as it renders, its decode step and throughput; and a drill's sentence
    sheet = r"\Rightarrow\ t_\text{step}(B) = \mathbf{7.93\ \text{ms}},\ \text{throughput}(B) = \mathbf{126\ \text{tokens/s}}"
    drill = "Against the h100-sxm (prefill of 2,048 tokens 54.4 ms, decode step 7.92 ms): faster."
    pairs = extract(sheet + "\n" + drill)
    assert ("decode step, B = 1, S = 1,024, ms", "7.93") in pairs
    assert ("decode step, B = 1, S = 1,024, ms", "7.92") in pairs
    assert ("throughput, B = 1, S = 1,024, tokens/s", "126") in pairs
    assert conflicts(pairs) == {"decode step, B = 1, S = 1,024, ms": ["7.92", "7.93"]}


def test_a_disagreement_planted_in_the_rendered_sheet_is_caught():
    """The book's sheet with its decode step changed by one in the last digit fails the check."""
    model, gpu = resolve_model("llama-2-13b"), get_accelerator("h100-sxm")
    sheet = cheatsheet.markdown(model, gpu, BF16)
    [(_, step)] = [p for p in extract(sheet) if p[0] == "decode step, B = 1, S = 1,024, ms"]
    changed = f"{float(step) + 0.01:.2f}"
    planted = sheet.replace(f"\\mathbf{{{step}", f"\\mathbf{{{changed}", 1)
    answer = interview.answer("15.2.1", 1, model, gpu, BF16, prompt=1024, context=1024).body()
    assert conflicts(extract(sheet) + extract(answer)) == {}
    assert "decode step, B = 1, S = 1,024, ms" in conflicts(extract(planted) + extract(answer))


def test_roundings_of_one_number_agree_and_different_numbers_do_not():
    assert agree("54", "54.4") and agree("7.93", "7.930") and agree("2,531", "2531")
    assert not agree("7.92", "7.93") and not agree("125", "126") and not agree("8.02", "7.93")
    assert conflicts([("q", "54"), ("q", "54.4"), ("q", "54.43")]) == {}


# --- the pages, for three scenarios --------------------------------------------------------------

PAGES = {"15.1.1": dict(prompt=2048), "15.1.2": dict(context=1000), "15.2.1": dict(prompt=1024, context=1024),
         "15.2.2": dict(context=1024, usd_per_gpu_hour=cheatsheet.USD_PER_GPU_HOUR)}
LINES = {"15.1.1": dict(prompt=2048, batch=1), "15.1.2": dict(context=1000, batch=16),
         "15.2.1": dict(prompt=1024, batch=1), "15.2.2": dict(context=1024, usd_per_gpu_hour=cheatsheet.USD_PER_GPU_HOUR)}
PREMISES = ("15.2.1-2", "15.2.2-3")      # questions with their own model and accelerator
PAGE_SCENARIO, PREMISE = "- On this page's scenario", "premise: Llama-2 70B on H100s"
SCENARIOS = {"book": ("llama-2-13b", "h100-sxm"), "moe": ("mixtral-8x7b-v0.1", "h200"),
             "gqa": ("llama-3-8b", "h100-sxm")}


@pytest.fixture(scope="module", params=list(SCENARIOS))
def rendered(request) -> tuple[str, dict]:
    """(scenario, {artifact: text}): the cheat sheet, the twelve answers, the four scenario lines."""
    model_name, gpu_name = SCENARIOS[request.param]
    model, gpu = resolve_model(model_name), get_accelerator(gpu_name)
    texts = {"cheat sheet": cheatsheet.markdown(model, gpu, BF16)}
    for section, page in PAGES.items():
        for n in (1, 2, 3):
            body = interview.answer(section, n, model, gpu, BF16, **page).body()
            if f"{section}-{n}" in PREMISES:      # its own premise (Llama-2 70B on H100s), then the page's scenario
                lines = body.splitlines()
                texts[f"{section}-{n}"] = "\n".join(x for x in lines if x.startswith(PAGE_SCENARIO))
                texts[f"{section}-{n} {PREMISE}"] = "\n".join(x for x in lines if not x.startswith(PAGE_SCENARIO))
            else:
                texts[f"{section}-{n}"] = body
        texts[f"{section} What-if"] = conclusions.scenario_line(section, model, gpu, BF16, False, **LINES[section])
    return request.param, texts


def test_each_quantity_has_one_value_across_sheet_answers_and_what_if_lines(rendered):
    scenario, texts = rendered
    where: dict = {}
    for artifact, text in texts.items():
        for quantity, printed in extract(text):
            if artifact.endswith(PREMISE):
                quantity += f" ({PREMISE})"
            where.setdefault((quantity, printed), []).append(artifact)
    bad = conflicts(where)
    assert not bad, f"{scenario}: " + "; ".join(
        f"{q}: " + ", ".join(f"{v} ({'/'.join(where[q, v])})" for v in values) for q, values in bad.items())


def test_the_shared_quantities_are_printed_more_than_once(rendered):
    scenario, texts = rendered
    counts: dict = {}
    for text in texts.values():
        for quantity, _ in extract(text):
            counts[quantity] = counts.get(quantity, 0) + 1
    required = SHARED - ({"largest batch with an int8 cache, S = 1,024"} if scenario == "moe" else set())
    thin = {q: counts.get(q, 0) for q in required if counts.get(q, 0) < 2}
    assert not thin, f"{scenario}: printed fewer than twice, the check would be empty: {thin}"

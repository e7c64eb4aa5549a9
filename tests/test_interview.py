"""inferlab.notebook.interview: the chapter's twelve interview questions as drills, their folded answers computed
for the page's scenario. The key numbers are recomputed here by hand (model fields, datasheet values);
every erratum of a question's paragraph is answered with its link; a What-if scenario changes them."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from inferlab.notebook import interview
from inferlab.core.specs import BF16, get_accelerator, get_model

ROOT = Path(__file__).resolve().parents[1]
L13, L70, L3 = get_model("llama-2-13b"), get_model("llama-2-70b"), get_model("llama-3-8b")
H100, H200 = get_accelerator("h100-sxm"), get_accelerator("h200")
BOOK = (L13, H100)
OTHER = (L3, H200)


@pytest.fixture(scope="module")
def answers():
    """{(drill id, scenario): Answer} for the book's scenario, another, and one that does not fit a GPU."""
    out = {}
    for key in interview.DRILLS:
        section, number = key.rsplit("-", 1)
        for m, g in (BOOK, OTHER, (L70, H100)):
            out[key, m.name] = interview.answer(section, int(number), m, g, BF16)
    return out


def number(pattern: str, text: str) -> float:
    m = re.search(pattern, text)
    assert m, f"{pattern!r} not in {text[:300]!r}"
    return float(m.group(1).replace(",", ""))


def test_twelve_drills_three_per_section_with_their_anchors():
    ids = [d.anchor for d in interview.DRILLS.values()]
    assert ids == [f"interview-{s.replace('.', '-')}-{n}" for s in interview.SECTIONS for n in (1, 2, 3)]
    assert ids[0] == "interview-15-1-1-1" and ids[-1] == "interview-15-2-2-3"
    with pytest.raises(ValueError, match="questions 1-3"):
        interview.drill("15.1.1", 4)


def test_each_drill_sits_on_an_interview_line_of_the_chapter():
    """The line of each drill is a line of the chapter's 'How This Shows Up in Interviews' parts (the
    statements registry's numbering): the statements on it are those the registry files under it."""
    from inferlab.claims.statements import evaluate_statements
    lines = {(s.section, s.line) for s in evaluate_statements()}
    for d in interview.DRILLS.values():
        assert (d.section, d.line) in lines, d
        for cid in d.claims:   # the paragraph's claims are the registry's "interviews" part
            assert interview._claims(d.section)[cid].part == "interviews", cid


def test_answers_render_folded_with_numbers(answers):
    for (key, scenario), a in answers.items():
        md = a._repr_markdown_()
        assert md.startswith('<details class="interview-answer"') and md.rstrip().endswith("</details>")
        assert f'data-drill="{interview.DRILLS[key].anchor}"' in md
        assert re.search(r"\d", a.body()) and "nan" not in a.body().lower(), (key, scenario)
        assert repr(a) == a.body()


def test_every_erratum_approximation_and_dependence_is_answered_with_its_link(answers):
    for key, d in interview.DRILLS.items():
        for rid in interview.to_correct(d):
            body = answers[key, L13.name].body()
            assert f"[{rid}](../ERRATA.md#" in body, f"{key}: {rid} ({interview.verdicts(d)[rid]}) not answered"


def test_the_links_point_at_sections_of_the_errata_page():
    """Each anchor a drill links to is a heading of ERRATA.md (GitHub-style slugs, as the book's)."""
    headings = re.findall(r"^#+ (.+)$", (ROOT / "ERRATA.md").read_text(), re.M)
    slugs = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in headings}
    for d in interview.DRILLS.values():
        for rid in interview.verdicts(d):
            anchor = re.search(r"#([^)]+)\)", interview.link(rid, d)).group(1)
            assert anchor in slugs, (rid, anchor)
    assert "statement-errata" in interview.link("15.1.1-s20", interview.DRILLS["15.1.1-1"])
    assert "#1522-ag)" in interview.link("15.2.2-ag", interview.DRILLS["15.2.2-3"])


def test_the_not_modelled_note_is_said_once_in_its_drill(answers):
    for key, note in interview.NOT_MODELLED.items():
        a = answers[key, L13.name]
        assert a.not_modelled == note and a.body().count(note) == 1
        assert note.startswith("Not modelled")
    assert set(interview.NOT_MODELLED) == {"15.1.2-3"}  # disaggregation and priorities are simulated now
    assert "latent" not in interview.NOT_MODELLED["15.1.2-3"]  # MLA and windows are modelled now


def test_architectural_fixes_have_numbers(answers):
    """15.1.2-3: MLA's and a sliding window's cache, by hand. DeepSeek-V3 caches a 512-number latent and a
    64-number rope key per layer, 61 layers, 2 bytes each; Mistral 7B (32 layers, 8 KV heads of 128) keeps
    at most its 4,096-token window of K and V, so at 8,192 tokens half of the full cache per token."""
    body = answers["15.1.2-3", L13.name].body()
    assert f"{61 * (512 + 64) * 2:,} bytes per token over its 61 layers" in body
    assert f"keeps {2 * 32 * 8 * 128 * 2 * 4096 // 8192:,} bytes per token at 8,192 tokens" in body


# ---------------------------------------------------------------------------------------------
# The numbers, by hand
# ---------------------------------------------------------------------------------------------

KV_13B = 2 * 40 * 40 * 128 * 2          # bytes per token: 2 (K, V) x L x N_kv x H x 2 bytes


def test_system_prompt_numbers(answers):
    body = answers["15.1.1-1", L13.name].body()
    assert number(r"KV cache \(([\d.]+) GB\)", body) == pytest.approx(KV_13B * 10_000 / 1e9, abs=0.005)
    ideal_ms = number(r"prefilling 10,000 tokens takes ([\d.]+) ms", body)
    assert ideal_ms >= 2 * L13.n_matmul_params * 10_000 / 989.4e12 * 1e3        # 2PS/peak, attention on top
    assert ideal_ms < 1.2 * 2 * L13.n_matmul_params * 10_000 / 989.4e12 * 1e3
    assert number(r"A 4 s TTFT is ([\d.]+)×", body) == pytest.approx(4000 / ideal_ms, rel=0.05)
    assert "beyond llama-2-13b's context window of 4,096" in body


def test_decode_numbers(answers):
    body = answers["15.1.2-1", L13.name].body()
    step_ms = number(r"one token: ([\d.]+) ms per step", body)
    weights_read = L13.n_params * 2 - (32000 - 1) * 5120 * 2          # all but the embedding's unused rows
    assert step_ms * 1e-3 >= weights_read / 3.35e12
    assert number(r"([\d,]+) tokens/s\.", body) == pytest.approx(1e3 / step_ms, rel=0.01)
    # the follow-up answers with the step's arithmetic at peak: 2 FLOPs per matrix parameter plus attention's
    # 4 L d S (scores and values over S = 1,000 cached tokens), 26.5 GFLOP / 989.4e12 FLOP/s = 27 us
    flops = 2 * L13.n_matmul_params + 4 * 40 * 5120 * 1000
    assert number(r"takes (\d+) µs at the h100-sxm's peak", body) == pytest.approx(flops / 989.4e12 * 1e6, abs=1)
    assert "H200" not in body.split("Follow-up")[1].split("Bandwidth")[0]
    body = answers["15.1.2-2", L13.name].body()
    # the usable memory, vLLM's 0.9 of 80 GB: (72e9 - 26.03e9) / 819.2e6 = 56.1 -> 56; all 80 GB: 65
    b_max = int((0.9 * 80e9 - L13.n_params * 2) // (KV_13B * 1000))
    assert f"$B_\\text{{max}}$ = {b_max} ({int((80e9 - L13.n_params * 2) // (KV_13B * 1000))} with all 80 GB" in body
    # Llama-2 13B has no GQA: the answer must not call its attention intensity "not 1"
    assert "but not 1" not in body and "holds here" in body


def test_streaming_chat_reading_pace(answers):
    body = answers["15.2.1-1", L13.name].body()
    tokens_per_s = 238 / 60 * 4 / 3
    assert number(r"takes in about ([\d.]+) tokens/s", body) == pytest.approx(tokens_per_s, abs=0.05)
    assert number(r"while ITL stays under ([\d.]+) ms", body) == pytest.approx(1e3 / tokens_per_s, rel=0.01)
    # one position, and the condition under which it flips; the streaming share is the run's own
    assert body.count("My position") == 1 and "It flips when" in body
    assert "ITL is invisible" not in body
    e2e, streaming = number(r"ends after ([\d.]+) s", body), number(r"of which ([\d.]+) s", body)
    assert number(r"\(([\d.]+)%\) is streaming", body) == pytest.approx(100 * streaming / e2e, abs=0.2)


def test_long_prompt_70b_numbers(answers):
    body = answers["15.2.1-2", L13.name].body()
    assert number(r"989 TFLOP/s is ([\d.]+) s", body) == pytest.approx(2 * 70e9 * 50_000 / 989.4e12, abs=0.01)
    # 138 GB of weights and 80 x 8 KV heads x 128 x 2 x 2 bytes x 50,000 tokens of cache
    assert number(r"the prompt's KV cache adds ([\d.]+) GB", body) == pytest.approx(
        2 * 80 * 8 * 128 * 2 * 50_000 / 1e9, abs=0.05)


def test_memory_budget_70b_numbers(answers):
    body = answers["15.2.2-3", L13.name].body()
    kv = 2 * 80 * 8 * 128 * 2048 * 32 * 2
    assert number(r"= ([\d.]+) GB: Llama-2 70B caches", body) == pytest.approx(kv / 1e9, abs=0.05)
    assert number(r"([\d.]+) GB per GPU\.\n", body + "\n") == pytest.approx(kv / 2e9, abs=0.05)
    assert number(r"its own product is ([\d.]+) GB", body) == pytest.approx(kv * 8 / 1e9, abs=0.5)


def test_throughput_numbers(answers):
    body = answers["15.2.2-1", L13.name].body()
    assert number(r"C_\\text\{kv\}\$ = ([\d.]+) and", body) == pytest.approx(L13.n_params * 2 / (KV_13B * 1024), abs=0.5)


# ---------------------------------------------------------------------------------------------
# The What-if changes them; a model too large for one GPU is answered on the layout that holds it
# ---------------------------------------------------------------------------------------------

def test_another_scenario_changes_every_answers_numbers(answers):
    for key in interview.DRILLS:
        a, b = answers[key, L13.name].body(), answers[key, L3.name].body()
        assert re.findall(r"\d[\d,.]*", a) != re.findall(r"\d[\d,.]*", b), key
        shown = answers[key, L3.name]._repr_markdown_()            # the fold's summary names the scenario
        assert L3.name in shown and H200.name in shown, key


def test_a_model_too_large_for_one_gpu_is_answered_on_the_layout_that_holds_it(answers):
    # Llama-2 70B on H100s: 69.0 GB of weights per GPU at TP 2 fit the usable 0.9 x 80 = 72 GB with a short
    # sequence; a 50,000-token prompt adds 16.4 GB / 2 = 8.2 GB, 77.2 GB per GPU, so that drill needs TP 4
    for key in interview.DRILLS:
        body = answers[key, L70.name].body()
        tp = 4 if key == "15.2.1-2" else 2
        assert f"tensor parallelism {tp}" in body or f"TP = {tp}" in body, key


def test_the_ceiling_at_b_star_is_said_as_computed_for_a_mixture_of_experts():
    # Mixtral on an H200 at context 1,000: B* ~ 713, where the experts' products are near the ridge,
    # so the step is partly compute-bound and throughput is below the memory-bound model's half.
    from inferlab.core.latency import kv_crossover_batch, throughput_tokens_per_s
    from inferlab.core.memory import kv_cache_bytes
    from inferlab.core.specs import resolve_model
    m, g = resolve_model("mixtral-8x7b-v0.1"), get_accelerator("h200")
    share = (throughput_tokens_per_s(m, g, 1000, round(kv_crossover_batch(m, 1000)))
             / (g.hbm_bytes_per_s / kv_cache_bytes(m, 1000, 1)))
    assert share < 0.48
    text = repr(interview.answer("15.1.2", 2, m, g, BF16))
    assert f"is {share:.0%} of its ceiling" in text and "already half" not in text
    book = repr(interview.answer("15.1.2", 2, get_model("llama-2-13b"), get_accelerator("h100-sxm"), BF16))
    assert "already half its ceiling" in book


# ---------------------------------------------------------------------------------------------
# Each answer follows its own evidence (issue: answers that survive a senior interviewer)
# ---------------------------------------------------------------------------------------------

def test_tail_latency_diagnosis_is_computed_from_the_run_and_proposes_its_fix_first(answers):
    body = answers["15.2.2-2", L13.name].body()
    assert "The workload: 300 requests" in body and "load factors" in body
    share = number(r"Of the slowest 1 % of steps \([\d.]+ ms and more\) (\d+)% carry a prompt", body)
    median_rise = number(r"the median step only (\d+)%", body) / 100
    tail_rise = number(r"p99 ITL grows ([\d.]+)×", body)
    # the diagnosis follows the numbers: most slow steps carry prompts and the tail outgrows the median
    interference = share >= 50 and tail_rise > 1 + median_rise
    assert ("prefill interference" in body) == interference
    first_fix = re.search(r"Fix 1, ([a-z ]+):", body).group(1)
    assert first_fix == ("chunked prefill" if interference else "replicas")
    # the capped run: demand over capacity, said as a load factor, and an unstable queue named as such
    load = number(r"load factor ([\d.]+)\), so requests wait", body)
    assert load > 1 and "not a steady state" in body
    assert "ITL target" in body.split("Follow-up")[1]


def test_memory_budget_keeps_room_and_names_its_convention(answers):
    body = answers["15.2.2-3", L13.name].body()
    # usable 0.9 x 80 GB = 72 GB per GPU; weights 137.95 GB / 2 = 68.98 GB; a 2,048-token sequence's cache
    # per GPU 2 x 80 x 8 x 128 x 2,048 x 2 / 2 = 0.336 GB: floor(3.02 / 0.336) = 9
    per_seq = 2 * 80 * 8 * 128 * 2048 * 2 / 2
    w = L70.n_params * 2 / 2
    assert f"room for {int((72e9 - w) // per_seq)} such sequences" in body
    # vLLM on the card's reported 81,559 MiB = 85.52e9 bytes: 0.9 x 85.52 = 76.97 GB -> 23
    assert f"({int((0.9 * 85520809984 - w) // per_seq)} on the card's own capacity)" in body
    assert "fits as it is" not in body and "the usable 72.0 GB" in body


def test_premises_and_variants_are_named(answers):
    body = answers["15.1.1-3", L13.name].body()
    assert "beyond llama-2-13b's context window" in body and "upper bounds" in body
    body = answers["15.1.2-3", L13.name].body()
    assert "MLP is widened" in body and "speculative decoding" in body and "multi-token" in body
    body = answers["15.2.1-3", L13.name].body()
    assert "grows as $S/C$" in body and "grows as $S^2/C$" in body and "16,000" not in body
    body = answers["15.2.2-1", L13.name].body()
    assert "weight-only" in body and "MLP is widened" in body

"""The sentence-level audit of chapter 15 (issue 26): each specific claim the audit found riding on a
sound headline has its own entry, and its verdict is the one the audit derived by hand; every verdict
printed anywhere (stored notebook outputs) is the one its experiment produces now."""
import json
import math
import re
from pathlib import Path

import pytest

from inferlab.claims import experiments as E
from inferlab.claims.statements import evaluate_statements, load_statements

pytestmark = pytest.mark.claims

ROOT = Path(__file__).resolve().parents[1]

# The audit's verdicts, each derived by hand (the reason beside it); a change in an experiment or an
# entry that flips one of them fails here.
AUDIT = {
    # line 53: unfused attention writes and re-reads the S x S scores: 4 S² d_h FLOPs over ~8 S² bytes
    # (bf16) per head, d_h/2 = 64 FLOP/byte < 295: memory-bound, so "remains compute-bound" is wrong
    "15.1.1-s36": "erratum",
    # line 53: fusing saves (17.0 - 1.7) ms of a 54.4 ms prefill at S = 2,048 (x1.28), 2-3x only near 16k
    "15.1.1-s18": "depends",
    # line 69: at S = 128 a prefill reads the weights (7.8 ms) more than it computes (3.3 ms per
    # prompt), so a batch of 2 costs x1.05, not x2; at S = 2,048 it is compute-bound: x2
    "15.1.1-s35": "depends",
    # line 147: B = 1 reads the weights once per generated token (128 reads for 128 tokens)
    "15.1.2-s29": "erratum",
    # line 135: a window cuts the KV bytes and the attention FLOPs alike: intensity S/(S+1) stays ~1
    "15.1.2-s30": "erratum",
    # line 167: totals without / with a cache are quadratic / linear only below S ~ P/(L·d) = 62,752
    "15.2.1-s35": "depends",
    "15.2.1-s36": "depends",
    # line 213: int4 weights give x0.27 of bf16 ITL against int8's x0.52
    "15.2.1-s37": "erratum",
    # line 195: decided on the measured H100 node (kernels and all-reduces as profiled): at K = 4
    # prefill x2.47, decode x1.55, its all-reduces 40 % of the step (free or 8 us all-reduces on the
    # roofline's kernels would leave decode as fast as prefill: the sweep beside it)
    "15.2.1-s38": "consistent",
    # line 277: Llama-2 70B has 8 KV heads for 64 query heads: it already uses GQA
    "15.2.2-s29": "erratum",
    # earlier splits (lines 19, 93, 165, 203) that the audit re-derived
    "15.1.1-s31": "depends", "15.1.1-s7": "consistent", "15.2.1-s24": "erratum", "15.2.1-s6": "erratum",
}


@pytest.fixture(scope="module")
def verdicts():
    return {e.id: e for e in evaluate_statements(load_statements())}


def test_the_audit_finds_the_specific_claims_it_knows(verdicts):
    assert {k: verdicts[k].verdict for k in AUDIT} == AUDIT


def test_weights_are_read_once_per_token_not_per_request():
    # Llama-2 13B: 12.85e9 matrix parameters x 2 bytes = 25.70 GB per read; the prefill reads them
    # once, each of the 127 decode steps once: 128 reads, 3.29 TB for 128 output tokens
    out = E.weight_reads_per_request((128,))
    assert out.values["reads"] == pytest.approx(128, abs=0.01)
    assert out.values["weight_gb"] == pytest.approx(25.70, abs=0.01)
    assert not out.cases[0].holds and "3.29 TB" in out.cases[0].detail
    # a request of one token (prefill only) does read them once: the experiment can say yes
    assert E.weight_reads_per_request((1,)).cases[0].holds


def test_unfused_attention_intensity_by_hand():
    # S = 2,048, d_h = 128: FLOPs 4 * 2048² * 128 = 2,147,483,648;
    # bytes 4 * 2048² * 2 + 8 * 2048 * 128 = 33,554,432 + 2,097,152 = 35,651,584 -> 60.2 FLOP/byte
    out = E.unfused_attention_regime((2048,))
    assert out.values["intensity"] == pytest.approx(2_147_483_648 / 35_651_584)
    assert out.values["ridge"] == pytest.approx(989.4e12 / 3.35e12, rel=1e-3)
    assert not out.cases[0].holds
    # scores kept in a quarter of a byte (planted) would make it compute-bound: 4·S²·128 / (S² + ...) ~ 500
    assert E.unfused_attention_regime((2048,), score_bytes=0.25).cases[0].holds


def test_flash_attention_gain_by_hand():
    # S = 2,048: unfused attention over 40 layers x 40 heads: bytes 1600 * 35,651,584 = 5.70e10 -> 17.0 ms
    # at 3.35 TB/s (FLOPs 3.44e12 -> 3.5 ms hide under it); the fused products: 1.72e12 causal FLOPs ->
    # 1.74 ms; the fused pass 54.4 ms (2·P·S/peak = 53.2 ms plus attention): (54.4 - 1.74 + 17.0) / 54.4
    c = E.flash_attention_gain((2048,)).cases[0]
    assert "x1.28" in c.detail and not c.holds
    # S = 16,384: unfused 1600 * (4 * 16384² * 2 + 8 * 16384 * 128) = 3.46e12 bytes -> 1.03 s; fused
    # attention 1.1e14 FLOPs -> 111 ms; the pass 532 ms: (532 - 111 + 1033) / 532 = 2.73
    c = E.flash_attention_gain((16384,)).cases[0]
    assert c.holds and re.search(r"x2\.7\d", c.detail)


def test_window_attention_intensity_by_hand():
    # Llama-2 13B (MHA), B = 1, one decode step over n positions, per layer: FLOPs 2 * 2 * 5120 * n;
    # bytes K and V (2 * 5120 * n * 2) plus Q read and O written (2 * 5120 * 2): intensity n / (n + 1)
    out = E.window_attention_intensity(window=1024, context_len=8192, batches=(1,))
    assert out.values["intensity"] == pytest.approx(1024 / 1025)
    assert out.values["bytes_ratio"] == pytest.approx(8193 / 1025)
    assert not out.cases[0].holds
    # a planted threshold below 1 lets it hold: the case is decided by the numbers
    assert E.window_attention_intensity(batches=(1,), min_gain=0.99).cases[0].holds


def test_itl_levers_by_hand():
    # B = 1, S = 1024: bytes = weights 25.70 GB + KV 1024 * 819,200 = 0.839 GB (+ small activations);
    # int8: (12.85 + 0.839) / 26.54 = 0.516; int4: (6.43 + 0.839) / 26.54 = 0.274
    out = E.itl_levers("int8", ("int4", "tp2"))
    assert out.values["int8"] == pytest.approx(0.516, abs=0.002)
    assert out.values["int4"] == pytest.approx(0.274, abs=0.002)
    assert not out.cases[0].holds
    assert E.itl_levers("int4", ("int8", "tp2")).cases[0].holds
    with pytest.raises(ValueError, match="lever must be one of"):
        E.itl_levers("fp3")


def test_gqa_still_open_by_hand():
    # Llama-2 70B: 2 * 80 layers * 8 KV heads * 128 * 2 bytes = 327,680 B/token * 2048 * 32 = 21.47 GB;
    # with 64 KV heads, 8 times that: 171.8 GB
    out = E.gqa_still_open()
    assert out.values["kv_gb"] == pytest.approx(21.47, abs=0.01)
    assert out.values["mha_gb"] == pytest.approx(171.80, abs=0.01)
    assert not out.cases[0].holds
    assert E.gqa_still_open("llama-2-13b").cases[0].holds  # 40 KV heads: GQA would shrink it


@pytest.mark.parametrize("quantity, s, k", [
    # cached: F(S) ~ 2PS (1 + x), x = S/c, c = P/(L·d): k = log2(2 (1 + 2x) / (1 + x))
    ("cached_total", 32768, lambda x: math.log2(2 * (1 + 2 * x) / (1 + x))),
    ("cached_total", 131072, lambda x: math.log2(2 * (1 + 2 * x) / (1 + x))),
    # no cache: F(S) ~ P S² (1 + 2x/3): k = log2(4 (1 + 4x/3) / (1 + 2x/3))
    ("recompute_total", 32768, lambda x: math.log2(4 * (1 + 4 * x / 3) / (1 + 2 * x / 3))),
    ("recompute_total", 131072, lambda x: math.log2(4 * (1 + 4 * x / 3) / (1 + 2 * x / 3))),
])
def test_total_generation_work_grows_by_hand(quantity, s, k):
    from inferlab.core.context import beyond_context
    with beyond_context():
        out = E.growth_order(quantity, (s,), expected=1 if quantity == "cached_total" else 2)
    x = s / out.values["crossover"]
    got = float(re.search(r"S\^([\d.]+)", out.cases[0].detail).group(1))
    assert got == pytest.approx(k(x), abs=0.02)


# --- verdicts printed in stored notebook outputs ---------------------------------------------------

VERDICT_WORD = "consistent|erratum|depends|unchecked"
PRINTED = [re.compile(rf"\b(?P<id>15\.\d\.\d-s\d+)\s+line \d+\s+(?P<v>{VERDICT_WORD})\b"),      # statement table
           re.compile(rf"\b(?P<id>15\.\d\.\d-s\d+)(?: \(\"[^\"]*\"\))? \*\*(?P<v>{VERDICT_WORD})\*\*")]  # prose


def printed_statement_verdicts(text: str) -> list[tuple[str, str]]:
    return [(m["id"], m["v"]) for rx in PRINTED for m in rx.finditer(text)]


def _outputs(nb: Path) -> str:
    out = []
    for cell in json.loads(nb.read_text(encoding="utf-8"))["cells"]:
        for o in cell.get("outputs", []):
            for key in ("text/plain", "text/markdown", "text/html"):
                v = o.get("data", {}).get(key)
                out.append("".join(v) if isinstance(v, list) else v or "")
            t = o.get("text")
            out.append("".join(t) if isinstance(t, list) else t or "")
    return "\n".join(out)


def test_printed_verdicts_are_read_from_both_forms():
    text = ('15.2.1-s17  line 193  consistent Chunk ...\n'
            'chunking: 15.2.1-s15 **consistent**; 15.1.1-s21 ("Caching the KV ...") **depends**')
    assert printed_statement_verdicts(text) == [("15.2.1-s17", "consistent"), ("15.2.1-s15", "consistent"),
                                                ("15.1.1-s21", "depends")]


@pytest.mark.parametrize("nb", sorted((ROOT / "chapters").glob("*.ipynb")), ids=lambda p: p.stem)
def test_every_printed_statement_verdict_is_its_experiments(nb, verdicts):
    printed = printed_statement_verdicts(_outputs(nb))
    wrong = [(sid, v, verdicts[sid].verdict if sid in verdicts else "no such entry")
             for sid, v in printed if sid not in verdicts or verdicts[sid].verdict != v]
    assert not wrong, f"{nb.name} prints verdicts its experiments do not produce (id, printed, computed): {wrong}"


def test_a_stale_verdict_in_a_copy_of_the_serving_lab_is_caught(verdicts):
    text = _outputs(ROOT / "chapters" / "15_2_3_serving_lab.ipynb")
    printed = printed_statement_verdicts(text)
    assert len(printed) >= 10  # the lab prints its chunking, tail, scaling and caching verdicts
    sid, v = printed[0]
    other = "erratum" if v != "erratum" else "consistent"
    planted = text.replace(f"{sid} **{v}**", f"{sid} **{other}**", 1)
    if planted == text:  # printed in the table form instead
        planted = re.sub(rf"({re.escape(sid)}\s+line \d+\s+){v}", rf"\g<1>{other}", text, count=1)
    assert (sid, other) in printed_statement_verdicts(planted) and verdicts[sid].verdict != other


AUDIT_MORE = {
    # line 13: fused prefill attention: FLOPs ~ 2·d·S² per layer (causal), bytes ~ S·d: intensity ∝ S
    "15.1.1-s37": "consistent",
    # line 49: the lab's own run shows C = 256 costing the long request more than 10 % (large)
    "15.1.1-s38": "depends",
    # line 87: a decode step reads K and V of all S positions: 2 · 2 · L · n_kv · d_h · S bytes
    "15.1.2-s31": "consistent",
    # line 139: Llama-2 70B at B = 1: 64 query heads over 8 KV heads -> attention ~8 FLOP/byte > B
    "15.1.2-s32": "depends",
    # line 201: 70B weights 2 · 68.98e9 = 138 GB > 80 GB
    "15.2.1-s39": "erratum",
    # line 201: chunking lengthens the chunked request's own TTFT (its chunks share steps with decodes)
    "15.2.1-s40": "erratum",
    # line 123: Llama-3 8B (8 KV heads for 32) and 70B (8 for 64), config.json
    "15.1.2-s33": "consistent",
    # line 263: replicas at M times the rate: throughput x M, the same latency (constant arrivals)
    "15.2.2-s30": "consistent",
}


def test_the_audit_finds_the_specific_claims_it_knows_more(verdicts):
    assert {k: verdicts[k].verdict for k in AUDIT_MORE} == AUDIT_MORE


def test_decode_intensity_within_batch_by_hand():
    # Llama-2 70B, B = 1, S = 1024, per layer: attention FLOPs 2 · 2 · 64 heads · 128 · 1024; bytes
    # K and V: 2 · 1024 · 8 · 128 · 2 plus Q and O: 2 · 8192 · 2 -> 33,554,432 / (4,194,304 + 32,768) = 7.94
    [case] = E.decode_intensity_within_batch(("llama-2-70b",), (1,)).cases
    assert not case.holds and f"attention {33_554_432 / 4_227_072:.2f}" in case.detail
    assert E.decode_intensity_within_batch(("llama-2-70b",), (8,)).cases[0].holds  # 7.94 <= 8


def test_fits_on_device_by_hand():
    # Llama-2 70B: 68.98e9 parameters x 2 bytes = 137.95 GB; KV 327,680 B/token x 50,000 = 16.38 GB
    out = E.fits_on_device("llama-2-70b", context_len=50_000)
    assert out.values["weights_gb"] == pytest.approx(137.95, abs=0.01)
    assert out.values["kv_gb"] == pytest.approx(16.384, abs=1e-3)
    assert not out.cases[0].holds
    assert E.fits_on_device("llama-2-13b", context_len=1_000).cases[0].holds  # 26 GB + 0.8 GB


def test_chunked_cost_size_follows_the_wording_thresholds(monkeypatch):
    from inferlab.base import qualitative_words
    out = E.chunked_cost_size(chunks=(512,), long_prompts=(3968,), rate=8.0)
    rel = float(re.search(r"\(([+-]\d+)%", out.cases[0].detail).group(1)) / 100
    assert out.cases[0].holds == (abs(rel) <= qualitative_words.SMALL_CHANGE)
    # a stricter threshold (planted) turns the same run into "not slight"
    monkeypatch.setattr(qualitative_words, "SMALL_CHANGE", abs(rel) / 2)
    assert not E.chunked_cost_size(chunks=(512,), long_prompts=(3968,), rate=8.0).cases[0].holds


def test_gqa_across_by_hand():
    out = E.gqa_across("llama-3")
    assert [(c.label, c.holds, c.detail) for c in out.cases] == [
        ("llama-3-8b", True, "8 KV heads for 32 query heads"), ("llama-3-70b", True, "8 KV heads for 64 query heads")]
    # Llama-2: 7B and 13B keep one KV head per query head, only 70B shares them
    assert [c.holds for c in E.gqa_across("llama-2-").cases if "book" not in c.label] == [False, False, True]
    with pytest.raises(ValueError, match="no model starts with 'gpt-9'"):
        E.gqa_across("gpt-9")

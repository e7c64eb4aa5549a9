"""The chapter's statements: registry shape, computed verdicts, line coverage, CLI and ERRATA.md."""
import json
import os
import re
import time
from dataclasses import replace
from pathlib import Path

import pytest

from inferlab.claims import experiments as E
from inferlab.claims.experiments import simulated as simulated_experiments
from inferlab.claims.coverage import CHAPTER_NAME
from inferlab.claims.registry import RegistryError
from inferlab.claims.statements import (STATEMENT_VERDICTS, coverage, evaluate_statement, evaluate_statements,
                                        load_statements, statement_bearing_lines, verdict_of)
from inferlab.cli import main

pytestmark = pytest.mark.claims

ROOT = Path(__file__).resolve().parents[1]


def _chapter_path() -> Path:
    env = os.environ.get("INFERLAB_BOOK")
    if env:
        p = Path(env)
        return p / CHAPTER_NAME if p.is_dir() else p
    return ROOT.parent / "shared" / "book" / CHAPTER_NAME


@pytest.fixture(scope="module")
def chapter() -> Path:
    p = _chapter_path()
    if not p.exists():
        pytest.skip(f"chapter text not found at {p} (set INFERLAB_BOOK or put it in ../shared/book/)")
    return p


@pytest.fixture(scope="module")
def registry():
    return load_statements()


@pytest.fixture(scope="module")
def evaluated(registry):
    return evaluate_statements(registry)


def _by_id(registry, sid):
    [s] = [s for s in registry.statements if s.id == sid]
    return s


# --- coverage of the chapter -----------------------------------------------------------------------

def test_every_recorded_line_exists_and_carries_its_keywords(chapter, registry):
    report = coverage(chapter, registry)
    assert not report.bad_lines, "\n".join(f"{n} (line {l}): {why}" for n, l, why in report.bad_lines)
    assert not report.wrong_section, report.wrong_section


def test_every_statement_bearing_line_is_accounted_for(chapter, registry):
    report = coverage(chapter, registry)
    assert not report.unaccounted, f"statement-bearing lines with no entry: {report.unaccounted}"
    assert not report.both, f"lines both registered and ignored: {report.both}"
    assert not report.stale_ignores, f"ignored lines the rule does not catch: {report.stale_ignores}"
    assert not report.unknown_claims, f"covered_by names no number claim: {report.unknown_claims}"


def test_coverage_notices_a_missing_statement(chapter, registry):
    # the line of 15.2.2-s11 (superlinear gains, found by its keywords) holds no other statement entry
    from inferlab.claims.statements import located
    [line] = [s.line for s in located(registry, chapter)[0].statements if s.id == "15.2.2-s11"]
    assert [s.id for s in located(registry, chapter)[0].statements if s.line == line] == ["15.2.2-s11"]
    without = replace(registry, statements=tuple(s for s in registry.statements if s.id != "15.2.2-s11"))
    assert coverage(chapter, without).unaccounted == (line,)


def test_coverage_notices_a_statement_on_the_wrong_line(chapter, registry):
    # a stale line hint is reported; keywords that name no line are reported with the nearest lines
    s = _by_id(registry, "15.2.2-s11")
    moved = replace(registry, statements=tuple(replace(x, line=x.line + 2) if x is s else x
                                               for x in registry.statements))
    bad = coverage(chapter, moved).bad_lines
    assert [b[0] for b in bad] == ["15.2.2-s11"] and "stale hint" in bad[0][2] and "superlinear" in bad[0][2]
    lost = replace(registry, statements=tuple(replace(x, keywords=(*x.keywords, "nowhere in the")) if x is s else x
                                              for x in registry.statements))
    [(name, _, why)] = coverage(chapter, lost).bad_lines
    assert name == "15.2.2-s11" and "matches no line" in why and f"line {s.line} (3/4 phrases" in why


def test_the_rule_for_statement_bearing_lines(tmp_path):
    text = "\n".join([
        "15.2.1 Time-To-First-Token",         # 1 heading
        "",                                    # 2
        "A Worked Example",                    # 3 part heading
        "Per-token ITL at B = 1:",             # 4 introduces a lost formula
        "throughput(B) = B / step(B)",         # 5 formula, no stop
        "Batching helps because weights are shared.",  # 6
        "• “Why is decode slow?”",             # 7 a question in quotes
        "Prefill is compute-bound (mostly).",  # 8
    ])
    p = tmp_path / "ch.txt"
    p.write_text(text, encoding="utf-8")
    assert sorted(statement_bearing_lines(p)) == [6, 7, 8]


def test_no_description_quotes_the_book(chapter, registry):
    """Descriptions are in our words: no run of 6 words of one appears in the chapter."""
    norm = lambda t: re.sub(r"[^a-z0-9 ]+", " ", t.lower().replace("$", ""))
    book = " ".join(norm(Path(chapter).read_text(encoding="utf-8")).split())
    for s in registry.statements:
        words = norm(s.description).split()
        for i in range(len(words) - 5):
            run = " ".join(words[i:i + 6])
            assert run not in book, (s.id, run)


# --- verdicts -------------------------------------------------------------------------------------

def test_verdict_rule():
    case = lambda ok: E.Case("x", ok, "")
    assert verdict_of([case(True), case(True)]) == "consistent"
    assert verdict_of([case(False)]) == "erratum"
    assert verdict_of([case(True), case(False)]) == "depends"
    with pytest.raises(ValueError):
        verdict_of([])


def test_every_statement_has_a_verdict_and_errata_a_corrected_statement(evaluated, registry):
    assert len(evaluated) == len(registry.statements)
    assert {e.verdict for e in evaluated} <= set(STATEMENT_VERDICTS)
    for e in evaluated:
        if e.verdict == "erratum":
            assert not e.corrected.startswith("Not so in any case"), f"{e.id}: write its corrected statement"
            assert "{" not in e.corrected, e.id
        if e.verdict == "depends":
            assert "holds for" in e.depends_on and "not for" in e.depends_on, e.id
        if e.verdict == "unchecked":
            assert len(e.explanation) > 30, e.id


def test_a_planted_outcome_changes_the_verdict(registry, monkeypatch):
    s = _by_id(registry, "15.2.1-s1")  # TTFT and ITL: prefill compute-bound, decode memory-bound
    assert evaluate_statement(s).verdict == "consistent"
    monkeypatch.setitem(E.EXPERIMENTS, "phase_regimes",
                        lambda **kw: E.Outcome((E.Case("planted", False, "decode compute-bound"),)))
    assert evaluate_statement(s).verdict == "erratum"
    monkeypatch.setitem(E.EXPERIMENTS, "phase_regimes",
                        lambda **kw: E.Outcome((E.Case("a", True, ""), E.Case("b", False, "")), "planted"))
    ev = evaluate_statement(s)
    assert ev.verdict == "depends" and ev.depends_on == "planted: holds for a; not for b"


def test_a_planted_model_change_flips_a_simulated_verdict(registry, monkeypatch):
    """If the engine made chunked prefill worse for other requests' token gaps, the statement that
    chunking shields them would turn into an erratum: the verdict follows the simulation."""
    s = _by_id(registry, "15.2.1-s17")
    assert evaluate_statement(s).verdict == "consistent"
    real = E._long_prompt

    def worse(policy, *args):
        res, idx = real(policy, *args)
        if policy[0] == "chunked":
            res = replace(res, itls_s=[x * 100 for x in res.itls_s])
        return res, idx
    monkeypatch.setattr(simulated_experiments, "_long_prompt", worse)
    assert evaluate_statement(s).verdict == "erratum"


def test_a_planted_input_changes_an_analytic_verdict(registry):
    # superlinear gains: doubling B never more than doubles throughput, so the book's claim fails;
    # asking only for "at least x1.5" per doubling below B* makes it hold (gain at B=1: ~1.94)
    s = _by_id(registry, "15.2.2-s11")
    assert evaluate_statement(s).verdict == "erratum"
    assert evaluate_statement(replace(s, inputs={"batches": [1, 4], "min_gain": 1.5})).verdict == "consistent"


def test_hand_derived_experiment_values():
    # Llama-2 70B: KV = 2 (K,V) * 80 layers * 8 KV heads * 128 dims * 2 bytes = 327,680 B/token;
    # * 2048 tokens * 32 sequences = 21.47 GB; TP = 2 splits the 8 KV heads 4 + 4 -> 10.74 GB per GPU.
    o = E.tp_kv_sharded()
    assert o.values["total_gb"] == pytest.approx(21.47, rel=1e-3)
    assert o.values["per_device_gb"] == pytest.approx(10.74, rel=1e-3)
    assert not o.cases[0].holds
    # B* = weights / KV per sequence: 26.03 GB / (2*40*40*128*2 * 1024 = 0.839 GB) = 31.0;
    # max batch at S = 1024: floor((80 - 26.03) / 0.839) = 64.
    o = E.crossover_stop()
    assert (o.values["bstar"], o.values["bmax"]) == (31, 64)
    # chunking scores each query-key pair once: FLOPs unchanged (ratio 1 to 4 digits)
    assert E.chunked_prefill_flops().values["flops_ratio"] == pytest.approx(1.0, abs=1e-4)


def test_simulated_experiments_are_deterministic():
    a = E.tail_latency_vs_qps()
    E._sim.cache_clear()
    E._long_prompt.cache_clear()
    assert E.tail_latency_vs_qps() == a


def test_the_whole_evaluation_stays_fast(registry):
    E._sim.cache_clear()
    E._long_prompt.cache_clear()
    t0 = time.process_time()
    evaluate_statements(registry)
    # about 3 s of CPU on this machine; 30 s catches a simulation that grew by an order of magnitude.
    # CPU time of this process, not wall time: other load on the machine does not count.
    assert time.process_time() - t0 < 30


# --- registry shape -------------------------------------------------------------------------------

GOOD = 'id = "15.2.2-s99"\nline = 261\nkeywords = ["superlinear", "sublinear"]\ndescription = "x"\n'


@pytest.mark.parametrize("extra, message", [
    ('experiment = "batch_doublings"', "unknown experiment 'batch_doublings'.*did you mean batch_doubling"),
    ('experiment = "batch_doubling"\ninputs = { batch = 4 }', r"takes no argument\(s\) batch"),
    ('status = "unchecked"', "needs a 'reason'"),
    ('status = "maybe"\nreason = "r"', "status must be"),
    ('', "needs an 'experiment'"),
    ('experiment = "batch_doubling"\nverdict = "consistent"', "unknown field"),
])
def test_malformed_entries_are_refused_with_a_clear_message(extra, message):
    with pytest.raises(RegistryError, match=message):
        load_statements(text=f"[[statement]]\n{GOOD}{extra}\n")


def test_keywords_are_words_not_sentences():
    entry = GOOD.replace('["superlinear", "sublinear"]', '["gains below b are superlinear", "x"]')
    with pytest.raises(RegistryError, match="at most 3 words"):
        load_statements(text=f'[[statement]]\n{entry}experiment = "batch_doubling"\n')


def test_an_ignored_line_needs_a_reason():
    with pytest.raises(RegistryError, match="needs a 'reason'"):
        load_statements(text='[[ignore]]\nline = 11\nkeywords = ["a", "b"]\nreason = "short"\n')


# --- the command and ERRATA.md --------------------------------------------------------------------

def test_verify_statement_json(capsys, evaluated):
    assert main(["verify", "--kind", "statement", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["statements"]) == len(evaluated)
    for entry in data["statements"]:
        assert {"id", "line", "description", "verdict"} <= set(entry)
        assert entry["verdict"] in STATEMENT_VERDICTS and isinstance(entry["line"], int)
    assert sum(data["summary"].values()) == len(evaluated)


def test_verify_statement_table_and_filter(capsys, evaluated):
    assert main(["verify", "--kind", "statement", "--statement-verdict", "erratum"]) == 0
    out = capsys.readouterr().out
    n = sum(e.verdict == "erratum" for e in evaluated)
    assert f"{n} statements: 0 consistent, {n} erratum, 0 depends, 0 unchecked" in out
    assert "corrected:" in out


def test_errata_lists_the_statement_errata(evaluated):
    text = (ROOT / "ERRATA.md").read_text(encoding="utf-8")
    assert "## Statements" in text
    section = text.split("### Statement errata", 1)[1].split("###", 1)[0]
    for e in evaluated:
        if e.verdict == "erratum":
            assert f"| {e.id} | {e.line} |" in section and e.corrected.replace("|", "\\|") in section, e.id


def test_statement_experiments_are_yardsticks_without_context_warnings():
    """The chapter reasons about prompts beyond a model's context (100k tokens on Llama-2 13B): its
    experiments are computed as yardsticks, so `inferlab verify --kind statement` prints no warning."""
    import warnings

    from inferlab.claims.statements import evaluate_statements
    from inferlab.core.context import ContextLengthWarning
    with warnings.catch_warnings():
        warnings.simplefilter("error", ContextLengthWarning)
        evaluate_statements()

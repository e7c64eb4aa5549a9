"""docs/glossary.md: each study term defined once, each still used, each name it gives a real one of
the library, and each number it states the constant the code uses."""
import re
from pathlib import Path

from test_architecture import all_modules, named_but_missing

ROOT = Path(__file__).resolve().parents[1]
GLOSSARY = ROOT / "docs" / "glossary.md"


def terms(text: str) -> list[str]:
    return re.findall(r"^### (.+)$", text, re.M)


def definition(text: str, term: str) -> str:
    return text.split(f"### {term}\n", 1)[1].split("\n### ", 1)[0]


def test_each_term_is_defined_once_and_the_words_the_study_relies_on_are_there():
    text = GLOSSARY.read_text(encoding="utf-8")
    found = terms(text)
    assert len(found) == len(set(found)), "a term defined twice"
    assert {"bracket", "probe-tracked", "knife-edged", "encroachment", "disturbed"} <= set(found)


def test_every_term_is_used_by_the_code_or_the_other_pages():
    used = "\n".join(p.read_text(encoding="utf-8").lower()
                     for p in [*(ROOT / "lib").rglob("*.py"), *(ROOT / "docs").glob("*.md")] if p != GLOSSARY)
    stems = {t: t.split()[0].rstrip("ed").rstrip("-") for t in terms(GLOSSARY.read_text(encoding="utf-8"))}
    assert [t for t, stem in stems.items() if stem.lower() not in used] == []


def test_every_name_it_gives_exists():
    mods = {m: p.read_text() for m, p in all_modules().items()}
    assert named_but_missing(GLOSSARY.read_text(encoding="utf-8"), mods) == []


def test_the_numbers_it_states_are_the_codes():
    from inferlab.measure.suite import CONTENTION_CLEAN
    from inferlab.study.checks import P50_BOUND, P99_BOUND, STEP_SENSITIVITY
    from inferlab.study.engines.vllm import DISTURBED_WAIT_S, SLOW_START_RATIO, SLOW_START_STEPS
    from inferlab.study.hostspeed import CHUNK_SPEED_EXPONENT
    from inferlab.study.validate import LOAD_FACTORS, VLLM_REPEAT_DISTURBED
    text = GLOSSARY.read_text(encoding="utf-8")
    pct = lambda x: f"{x * 100:.0f} %"
    assert f"≤ {pct(P50_BOUND)} at p50" in definition(text, "bound")
    assert f"≤ {pct(P99_BOUND)} at p99" in definition(text, "bound")
    assert ", ".join(f"{f:g}x" for f in LOAD_FACTORS) in re.sub(r" \([^)]*\)", "", definition(text, "capacity"))
    assert f"uniform {pct(STEP_SENSITIVITY)} step-time error" in definition(text, "knife-edged")
    assert f"speed ** {CHUNK_SPEED_EXPONENT:g}" in definition(text, "split")
    d = definition(text, "disturbed")
    assert f"{DISTURBED_WAIT_S * 1e3:.0f} ms or more" in d and f"first {SLOW_START_STEPS} steps" in d
    assert f"{SLOW_START_RATIO:g} times" in d
    assert {2: "twice"}[VLLM_REPEAT_DISTURBED] in definition(text, "repeat rule")
    assert f"below {pct(CONTENTION_CLEAN)}" in definition(text, "clean round")

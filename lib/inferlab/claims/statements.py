"""The chapter's statements (mechanisms, comparisons, advice), each checked by an experiment.

data/statements.toml holds one [[statement]] per statement: the 1-based `line` of the chapter's
text on which it stands, a few `keywords` that occur on that line, a description in our words,
and an experiment of inferlab/claims/experiments/ with its inputs (or status = "unchecked" and
a reason). Verdicts are computed from the experiment's cases, never typed:

  consistent  the statement holds in every case the experiment tries;
  erratum     it holds in none (the entry's `corrected` says what does hold);
  depends     it holds in some: on what (the experiment's `varies`, or the entry's `depends_on`)
              and where, from the cases;
  unchecked   no experiment can decide it here (a GPU measurement, model quality, user
              perception, an outside fact); the entry says why.

An experiment may also return a sweep (cases shown beside the verdict, never deciding it: what
would make it flip) and name the measured node its deciding cases ran on (kernels and all-reduces
as Vidur measured them); an entry's `note` is a template filled from the experiment's values.

Statement-bearing lines (the coverage rule): every non-empty line of the chapter that is not a
heading (chapter, section, subsection, part) and ends a sentence (its last character, before
closing quotes or brackets, is '.', '?' or '!'). Lines ending with ':' introduce a formula or a
list that the text lost, and formula lines end with no stop. Every statement-bearing line needs a
statement entry or an [[ignore]] entry with a reason (definitions, set-ups, lines that only
restate numbers the number registry already checks, named in `covered_by`).
"""
from __future__ import annotations

import inspect
import json
import re
import textwrap
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

from inferlab.claims.chapter import PART_HEADINGS, SECTION_RE, read_blocks
from inferlab.claims.registry import RegistryError, read_toml_registry
from inferlab.core.context import yardstick

STATEMENT_VERDICTS = ("consistent", "erratum", "depends", "unchecked")
ID_RE = re.compile(r"^(15\.\d\.\d)-s(\d{1,3})$")
REQUIRED = ("id", "line", "keywords", "description")
OPTIONAL = ("experiment", "inputs", "status", "reason", "corrected", "depends_on", "note")
IGNORE_FIELDS = ("line", "section", "keywords", "reason", "covered_by")
_END = re.compile(r"[.?!][”\"')\]]*$")
MAX_KEYWORD_WORDS = 3


def _fail(entry, message) -> RegistryError:
    return RegistryError(f"statements registry, entry {entry}: {message}")


@dataclass(frozen=True)
class Statement:
    id: str
    line: int
    keywords: tuple
    description: str
    experiment: str | None = None
    inputs: dict = field(default_factory=dict, hash=False)
    status: str = "checked"
    reason: str = ""
    corrected: str = ""
    depends_on: str = ""
    note: str = ""

    @property
    def section(self) -> str:
        return ID_RE.match(self.id).group(1)


@dataclass(frozen=True)
class Ignored:
    line: int
    keywords: tuple
    reason: str
    covered_by: tuple = ()
    section: str | None = None


@dataclass(frozen=True)
class Statements:
    statements: tuple
    ignored: tuple
    path: Path | None = None


def _text(entry, raw, key) -> str:
    v = raw.get(key, "")
    if not isinstance(v, str):
        raise _fail(entry, f"'{key}' must be a string; got {v!r}")
    return " ".join(v.split())


def _keywords(entry, raw) -> tuple:
    kw = raw.get("keywords")
    if (not isinstance(kw, list) or len(kw) < 2 or not all(isinstance(k, str) and k.strip() for k in kw)):
        raise _fail(entry, f"'keywords' must be a list of at least 2 non-empty strings; got {kw!r}")
    long = [k for k in kw if len(k.split()) > MAX_KEYWORD_WORDS]
    if long:
        raise _fail(entry, f"keywords are words, not phrases (at most {MAX_KEYWORD_WORDS} words each); "
                           f"got {long!r}")
    return tuple(kw)


def parse_statement(raw: dict) -> Statement:
    from inferlab.claims.experiments import EXPERIMENTS
    entry = raw.get("id", "<no id>") if isinstance(raw, dict) else "<not a table>"
    if not isinstance(raw, dict):
        raise _fail(entry, "an entry must be a table")
    missing = [k for k in REQUIRED if k not in raw]
    if missing:
        raise _fail(entry, f"missing required field(s): {', '.join(missing)}")
    unknown = [k for k in raw if k not in REQUIRED + OPTIONAL]
    if unknown:
        raise _fail(entry, f"unknown field(s): {', '.join(unknown)}; allowed: {', '.join(REQUIRED + OPTIONAL)}")
    if not isinstance(raw["id"], str) or not ID_RE.match(raw["id"]):
        raise _fail(entry, f"id must be a section and s + a number, e.g. '15.2.1-s7'; got {raw['id']!r}")
    line = raw["line"]
    if not isinstance(line, int) or isinstance(line, bool) or line < 1:
        raise _fail(entry, f"'line' must be a positive integer (1-based line of the chapter); got {line!r}")
    description = _text(entry, raw, "description")
    if not description:
        raise _fail(entry, "'description' must be a non-empty string")
    status = raw.get("status", "checked")
    if status not in ("checked", "unchecked"):
        raise _fail(entry, f"status must be 'checked' or 'unchecked'; got {status!r}")
    experiment = raw.get("experiment")
    if status == "unchecked":
        if not _text(entry, raw, "reason"):
            raise _fail(entry, "an unchecked statement needs a 'reason'")
    elif experiment is None:
        raise _fail(entry, "a checked statement needs an 'experiment' (or status = 'unchecked' with a reason)")
    inputs = raw.get("inputs", {})
    if experiment is not None:
        if experiment not in EXPERIMENTS:
            import difflib
            close = difflib.get_close_matches(str(experiment), list(EXPERIMENTS), n=3, cutoff=0.5)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise _fail(entry, f"unknown experiment {experiment!r} (defined in inferlab/claims/experiments/{hint})")
        if not isinstance(inputs, dict):
            raise _fail(entry, f"'inputs' must be a table of keyword arguments; got {inputs!r}")
        params = inspect.signature(EXPERIMENTS[experiment]).parameters
        bad = [k for k in inputs if k not in params]
        if bad:
            raise _fail(entry, f"experiment {experiment}() takes no argument(s) {', '.join(bad)}; "
                               f"it takes: {', '.join(params)}")
    elif "inputs" in raw:
        raise _fail(entry, "'inputs' given without 'experiment'")
    return Statement(raw["id"], line, _keywords(entry, raw), description, experiment, dict(inputs), status,
                     _text(entry, raw, "reason"), _text(entry, raw, "corrected"),
                     _text(entry, raw, "depends_on"), _text(entry, raw, "note"))


def parse_ignored(raw: dict, i: int) -> Ignored:
    entry = f"ignore #{i + 1} (line {raw.get('line')})"
    unknown = [k for k in raw if k not in IGNORE_FIELDS]
    if unknown:
        raise _fail(entry, f"unknown field(s): {', '.join(unknown)}; allowed: {', '.join(IGNORE_FIELDS)}")
    line = raw.get("line")
    if not isinstance(line, int) or isinstance(line, bool) or line < 1:
        raise _fail(entry, f"'line' must be a positive integer; got {line!r}")
    reason = _text(entry, raw, "reason")
    if len(reason) < 20:
        raise _fail(entry, "every ignored line needs a 'reason' (a sentence saying why it states nothing to check)")
    covered = raw.get("covered_by", [])
    if not isinstance(covered, list) or not all(isinstance(c, str) for c in covered):
        raise _fail(entry, f"'covered_by' must be a list of number-claim ids; got {covered!r}")
    section = raw.get("section")
    if section is not None and not (isinstance(section, str) and re.match(r"^15\.\d\.\d$", section)):
        raise _fail(entry, f"'section' must be a subsection id such as '15.1.1'; got {section!r}")
    return Ignored(line, _keywords(entry, raw), reason, tuple(covered), section)


def located(registry: "Statements", text) -> tuple["Statements", list]:
    """The registry with every line derived from its keywords in `text` (an anchors.Text or a path):
    (registry, [anchors.Located of each entry whose keywords name no line or several]). An entry
    that names no single line gets line 0 and stays in the registry."""
    from inferlab.claims.anchors import Text, locate
    text = text if isinstance(text, Text) else Text.read(text)
    problems = []

    def where(name, entry, section):
        found = locate(text, name, entry.keywords, section)
        if found.line is None:
            problems.append(found)
        return replace(entry, line=found.first or 0)
    statements = tuple(where(s.id, s, s.section) for s in registry.statements)
    ignored = tuple(where(f"ignore {list(i.keywords)}", i, i.section) for i in registry.ignored)
    return Statements(statements, ignored, registry.path), problems


def default_path() -> Path:
    from inferlab.core.specs import data_dir
    return data_dir() / "statements.toml"


def load_statements(path: Path | str | None = None, *, text: str | None = None) -> Statements:
    """data/statements.toml (or `text`), checked for shape."""
    if text is None:
        path = Path(path) if path else default_path()
    data = read_toml_registry("statements", Path(path) if path else None, text,
                              {"statement": "[[statement]]", "ignore": "[[ignore]]"})
    statements = tuple(parse_statement(r) for r in data.get("statement", []))
    ids = Counter(s.id for s in statements)
    dup = [i for i, n in ids.items() if n > 1]
    if dup:
        raise _fail(dup[0], "duplicate id")
    ignored = tuple(parse_ignored(r, i) for i, r in enumerate(data.get("ignore", [])))
    if not statements:  # an empty table would "pass" while checking nothing
        raise RegistryError(f"statements registry {path or '<text>'} has no [[statement]] entries; "
                            "allowed: at least one")
    return Statements(statements, ignored, Path(path) if path else None)


# --------------------------------------------------------------------------------------------------
# Verdicts
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class EvaluatedStatement:
    id: str
    section: str
    line: int
    description: str
    verdict: str
    experiment: str | None
    kind: str                      # analytic, simulated or none
    cases: tuple                   # (label, holds, detail) per case
    depends_on: str = ""
    corrected: str = ""
    explanation: str = ""
    note: str = ""
    sweep: tuple = ()              # (label, holds, detail): shown beside the verdict, never deciding it
    node: str = ""                 # the measured node the deciding cases ran on, in words ("": none)

    def as_dict(self) -> dict:
        return {"id": self.id, "section": self.section, "line": self.line, "description": self.description,
                "verdict": self.verdict, "experiment": self.experiment, "kind": self.kind,
                "cases": [{"label": l, "holds": h, "detail": d} for l, h, d in self.cases],
                "depends_on": self.depends_on or None, "corrected": self.corrected or None,
                "explanation": self.explanation, "note": self.note or None,
                "sweep": [{"label": l, "holds": h, "detail": d} for l, h, d in self.sweep],
                "node": self.node or None}


def verdict_of(cases) -> str:
    """consistent if every case holds, erratum if none does, depends otherwise."""
    if not cases:
        raise ValueError("an experiment must return at least one case")
    held = [bool(c.holds) for c in cases]
    return "consistent" if all(held) else "erratum" if not any(held) else "depends"


def _fill(entry_id, template: str, values: dict) -> str:
    if not template:
        return ""
    try:
        return template.format(**values)
    except (KeyError, IndexError, ValueError) as err:
        raise _fail(entry_id, f"cannot fill {template[:50]!r}...: {err!r} (available: {', '.join(values)})") from None


@yardstick  # the book's statements reason about sequences beyond a model's context (100k on Llama-2 13B)
def evaluate_statement(s: Statement) -> EvaluatedStatement:
    from inferlab.claims.experiments import EXPERIMENTS, SIMULATED, Outcome
    kind = "none" if s.experiment is None else "simulated" if s.experiment in SIMULATED else "analytic"
    cases, values, varies, sweep, node = (), {}, "", (), ""
    if s.experiment is not None:
        try:
            outcome = EXPERIMENTS[s.experiment](**s.inputs)
        except (TypeError, ValueError) as err:
            raise _fail(s.id, f"experiment {s.experiment}() failed: {err}") from None
        if not isinstance(outcome, Outcome) or not outcome.cases:
            raise _fail(s.id, f"experiment {s.experiment}() must return an Outcome with at least one case")
        cases = tuple((c.label, bool(c.holds), c.detail) for c in outcome.cases)
        sweep = tuple((c.label, bool(c.holds), c.detail) for c in outcome.sweep)
        values, varies, node = dict(outcome.values), outcome.varies, outcome.node
    measured = "; ".join(f"{l}: {d}" for l, _, d in cases)
    if sweep:  # shown, never deciding: what would make the verdict flip
        measured += ". Not deciding, what would flip it: " + "; ".join(
            f"{l}: {d} ({'holds' if h else 'does not hold'})" for l, h, d in sweep)
    note = _fill(s.id, s.note, values)
    if s.status == "unchecked":
        verdict = "unchecked"
        explanation = _fill(s.id, s.reason, values) + (f" (What the library can say: {measured}.)" if cases else "")
        return EvaluatedStatement(s.id, s.section, s.line, s.description, verdict, s.experiment, kind, cases,
                                  explanation=explanation, note=note, sweep=sweep, node=node)
    verdict = verdict_of(outcome.cases)
    depends_on = ""
    if verdict == "depends":
        on = s.depends_on or varies or "the scenario"
        yes = " and ".join(l for l, h, _ in cases if h)
        no = " and ".join(l for l, h, _ in cases if not h)
        depends_on = f"{on}: holds for {yes}; not for {no}"
    corrected = ""
    if verdict == "erratum":
        corrected = _fill(s.id, s.corrected, values) or f"Not so in any case tried ({measured})."
    return EvaluatedStatement(s.id, s.section, s.line, s.description, verdict, s.experiment, kind, cases,
                              depends_on, corrected, measured, note, sweep, node)


def evaluate_statements(registry: Statements | None = None, section: str | None = None,
                        verdict: str | None = None) -> list[EvaluatedStatement]:
    registry = registry or load_statements()
    if verdict is not None and verdict not in STATEMENT_VERDICTS:
        raise RegistryError(f"unknown statement verdict {verdict!r}; allowed: {', '.join(STATEMENT_VERDICTS)}")
    out = []
    for s in registry.statements:
        if section is not None and s.section != section:
            continue
        ev = evaluate_statement(s)
        if verdict is None or ev.verdict == verdict:
            out.append(ev)
    return out


# --------------------------------------------------------------------------------------------------
# Coverage: every statement-bearing line accounted for, every recorded line plausible
# --------------------------------------------------------------------------------------------------

def _normal(text: str) -> str:
    """Lower case, '$' removed, whitespace collapsed: what keywords are matched against."""
    return " ".join(text.replace("$", "").lower().split())


def is_heading(stripped: str) -> bool:
    return bool(SECTION_RE.match(stripped) or re.match(r"^15\.\d\s", stripped)
                or stripped.startswith("Chapter 15") or stripped in PART_HEADINGS)


def statement_bearing_lines(chapter: Path) -> dict[int, str]:
    """{line: text} for every line the rule (module doc) calls statement-bearing."""
    out = {}
    for i, line in enumerate(Path(chapter).read_text(encoding="utf-8").splitlines(), 1):
        s = line.strip()
        if s and not is_heading(s) and _END.search(s):
            out[i] = line
    return out


def line_sections(chapter: Path) -> dict[int, str]:
    return {i: section for (section, _), lines in read_blocks(Path(chapter)).items() for i, _ in lines}


@dataclass(frozen=True)
class CoverageReport:
    bad_lines: tuple         # (entry, line, why): a line that does not exist or lacks a keyword
    wrong_section: tuple     # (statement id, line, section of that line)
    unaccounted: tuple       # statement-bearing lines with neither a statement nor an ignore entry
    both: tuple              # lines both stated and ignored
    stale_ignores: tuple     # ignored lines the rule does not catch (the ignore is not needed)
    unknown_claims: tuple    # covered_by ids that are not number claims

    @property
    def ok(self) -> bool:
        return not any((self.bad_lines, self.wrong_section, self.unaccounted, self.both,
                        self.stale_ignores, self.unknown_claims))


def coverage(chapter: Path, registry: Statements | None = None, claim_ids=None) -> CoverageReport:
    """Every entry's keywords located in `chapter` (bad_lines: named nowhere or on several lines, or a
    `line` hint that is stale), and every statement-bearing line accounted for by a located entry."""
    registry = registry or load_statements()
    if claim_ids is None:
        from inferlab.claims.registry import load_registry
        claim_ids = {c.id for c in load_registry().claims}
    bearing = statement_bearing_lines(chapter)
    found, problems = located(registry, chapter)
    bad = [(p.name, 0, p.message()) for p in problems]
    for old, new in zip((*registry.statements, *registry.ignored), (*found.statements, *found.ignored)):
        if new.line and old.line != new.line:
            name = old.id if isinstance(old, Statement) else f"ignore {list(old.keywords)}"
            bad.append((name, old.line, f"line {old.line} is a stale hint: the keywords {list(old.keywords)} "
                                        f"stand on line {new.line}"))
    stated = {s.line for s in found.statements if s.line}
    ignored = {i.line for i in found.ignored if i.line}
    unaccounted = tuple(sorted(set(bearing) - stated - ignored))
    both = tuple(sorted(stated & ignored))
    stale = tuple(sorted(ignored - set(bearing)))
    unknown = tuple((i.line, c) for i in found.ignored for c in i.covered_by if c not in claim_ids)
    return CoverageReport(tuple(bad), (), unaccounted, both, stale, unknown)


# --------------------------------------------------------------------------------------------------
# Rendering: table, JSON, ERRATA.md section
# --------------------------------------------------------------------------------------------------

def summary_counts(evaluated) -> dict:
    counts = Counter(e.verdict for e in evaluated)
    return {v: counts.get(v, 0) for v in STATEMENT_VERDICTS}


def summary_line(evaluated) -> str:
    return f"{len(evaluated)} statements: " + ", ".join(f"{n} {v}" for v, n in summary_counts(evaluated).items())


def table(evaluated, width: int = 100) -> str:
    out = []
    for e in evaluated:
        head = f"{e.id:<11} line {e.line:<4} {e.verdict:<10} "
        out.append(textwrap.fill(e.description, width, initial_indent=head, subsequent_indent=" " * len(head)))
        why = (f"depends on {e.depends_on}" if e.verdict == "depends" else
               f"corrected: {e.corrected}" if e.verdict == "erratum" else
               e.explanation if e.verdict == "unchecked" else f"{e.kind}: {e.explanation}")
        out.append(textwrap.fill(why, width, initial_indent=" " * len(head), subsequent_indent=" " * len(head)))
        if e.note:
            out.append(textwrap.fill(f"note: {e.note}", width, initial_indent=" " * len(head),
                                     subsequent_indent=" " * len(head)))
    out += ["", summary_line(evaluated)]
    return "\n".join(out)


def as_json(evaluated) -> str:
    return json.dumps({"summary": summary_counts(evaluated), "statements": [e.as_dict() for e in evaluated]},
                      indent=2, ensure_ascii=False)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def errata_section(evaluated) -> str:
    """The statements part of ERRATA.md: errata with corrected statements, then the ones that depend,
    then the unchecked ones."""
    err = [e for e in evaluated if e.verdict == "erratum"]
    dep = [e for e in evaluated if e.verdict == "depends"]
    unc = [e for e in evaluated if e.verdict == "unchecked"]
    out = ["## Statements", "",
           "Every sentence of the chapter that states a mechanism, a comparison or advice is registered in",
           "`data/statements.toml` with the line it stands on and an experiment (analytic: the library's",
           "roofline, cost and memory model; simulated: the serving simulator) whose cases compute the verdict:",
           "consistent (holds in every case tried), erratum (in none), depends (in some), unchecked (no",
           "experiment here can decide it). `inferlab verify --kind statement` prints them all.", "",
           f"**Summary:** {summary_line(evaluated)}.", "",
           "### Statement errata", "",
           "| id | line | the chapter states (our words) | corrected statement | evidence |", "|---|---|---|---|---|"]
    out += [f"| {e.id} | {e.line} | {_cell(e.description)} | {_cell(e.corrected)} | {_cell(e.explanation)} |"
            for e in err]
    out += ["", "### Statements that depend on the scenario", "",
            "| id | line | the chapter states (our words) | depends on |", "|---|---|---|---|"]
    out += [f"| {e.id} | {e.line} | {_cell(e.description)} | {_cell(e.depends_on)} |" for e in dep]
    node = [e for e in evaluated if e.node]
    out += ["", "### Statements checked on a measured node", "",
            "Advice about practice (tensor parallelism, replicas) is also tried on a node as it was measured:",
            "kernels and all-reduces timed from Vidur's published H100 profiles ([measured kernels](docs/kernels.md)).",
            "Where the roofline's verdict turned on the all-reduce latency, the measured node decides it, and",
            "what would make it flip is shown beside it (`inferlab verify --kind statement`).", "",
            "| id | line | the chapter states (our words) | verdict | on the measured node |", "|---|---|---|---|---|"]
    out += [f"| {e.id} | {e.line} | {_cell(e.description)} | {e.verdict} | {_cell(e.note or e.explanation)} |"
            for e in node]
    out += ["", "### Statements not checkable here", "",
            "| id | line | the chapter states (our words) | why |", "|---|---|---|---|"]
    out += [f"| {e.id} | {e.line} | {_cell(e.description)} | {_cell(e.explanation)} |" for e in unc]
    return "\n".join(out) + "\n"


def statement_verdicts(*ids: str) -> dict:
    """{id: EvaluatedStatement} for these statements of data/statements.toml (their own experiments
    decide the verdicts; the serving lab's runs only sit beside them)."""
    by_id = {s.id: s for s in load_statements().statements}
    unknown = [i for i in ids if i not in by_id]
    if unknown:
        raise ValueError(f"statement id {unknown[0]!r} is not in data/statements.toml")
    return {i: evaluate_statement(by_id[i]) for i in ids}


def statement_table(*ids: str) -> str:
    """The verdicts of these statements as text (`table`)."""
    return table(list(statement_verdicts(*ids).values()))

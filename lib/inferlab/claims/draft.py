"""Checking a draft of the chapter: `inferlab verify --book DRAFT`.

Every claim and statement is found in the draft by its content anchor (`claims.anchors`). A claim
whose printed number changed is re-judged by the same verdict rule (`claims.evaluate.rule`, through
`evaluate`) on the new number, so a fixed erratum reads as consistent and a new error as an erratum,
with its band. Its `change` against the registered text is one of CHANGES:

  unchanged       the number and the scenario words beside it are those of the registered text;
  erratum fixed   the number changed and the verdict went from erratum or approximation to consistent;
  new erratum     the number changed and the verdict became erratum (from consistent or approximation);
  value changed   the number changed, the verdict class did not move that way;
  inputs changed  a model, accelerator, precision or S/B/T = value in the number's sentence or earlier
                  on its line differs from the registered text (the verdict is computed for the
                  registered inputs);
  removed         the anchor names no line of the draft (the sentence was deleted or rewritten).

Statements take unchanged, inputs changed or removed (their verdicts come from experiments, not from
the text). Then every line with a number or a quantifier that no entry accounts for, each with the
registered quantity it most resembles (same unit, most shared words) as a suggestion: a line the
registered text holds is mapped whole (`coverage.line_coverage`), a changed one number by number
(`_unaccounted`), so a sentence appended to a line with entries shows its new number.

The scenario words are compared with the registered text (the chapter `coverage.default_chapter_path`
finds); without it, inputs cannot be compared and the report says so.
"""
from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

from inferlab.claims.anchors import Text, locate_claim, normal
from inferlab.claims.chapter import number_spans
from inferlab.claims.coverage import CHAPTER_NAME, _same, default_chapter_path, load_ignore, load_line_ignores
from inferlab.claims.evaluate import EvaluatedClaim, display, evaluate
from inferlab.claims.registry import Registry, RegistryError, load_registry
from inferlab.claims.statements import EvaluatedStatement, evaluate_statements, load_statements, located

CHANGES = ("unchanged", "erratum fixed", "new erratum", "value changed", "inputs changed", "removed")
_RANK = {"consistent": 0, "approximation": 1, "erratum": 2}

_MODEL = re.compile(r"\b(?:Llama-\d(?:\.\d)?\s+\d+B|Mistral\s+\d+B|Mixtral\s+\d+x\d+B|GPT-\d[\w.]*"
                    r"|\d+B(?=\s+(?:bf16\s+)?model\b))")
_ACCEL = re.compile(r"\b(?:H100|H200|H800|A100|A10G?|B200|GB200|L40S|L4|MI300X|MI250X?|TPU\s?v\d\w?)"
                    r"(?:\s+(?:SXM|PCIe|NVL))?")
_DTYPE = re.compile(r"\b(?:bf16|fp16|fp32|fp8|int8|int4)\b", re.I)
_ASSIGN = re.compile(r"(?:(?<![A-Za-z_\\])([SBTKG])|N_\{\\text\{kv\}\}|(batch size(?: of)?))\s*=?\s*$")


def chapter_file(book) -> Path:
    """The chapter text `--book` names: a file, or a folder holding exactly one .txt file (or the
    chapter's own file name). ValueError naming --book otherwise."""
    path = Path(book)
    if path.is_dir():
        own = path / CHAPTER_NAME
        if own.is_file():
            return own
        texts = sorted(p for p in path.glob("*.txt") if p.is_file())
        if len(texts) != 1:
            raise ValueError(f"--book {str(path)!r} is a folder with {len(texts)} .txt files; allowed: a "
                             f"chapter file, or a folder holding exactly one (or {CHAPTER_NAME})")
        return texts[0]
    if not path.is_file():
        raise ValueError(f"--book {str(path)!r} does not exist; allowed: the chapter's text file or its folder")
    try:
        path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"--book {str(path)!r} is not a UTF-8 text file (the chapter as plain text expected)") from None
    return path


# a sentence ends at '.', '!' or '?' before a capital, a '(', a LaTeX command or the line's end; the chapter
# prints decimals with spaces ("0 . 82"), which a digit after the point tells apart
_SENTENCE_END = re.compile(r"[.!?](?=\s+[A-Z(\\]|\s*$)")


def sentence_end(plain: str, position: int) -> int:
    """The end of the sentence of `plain` (a line with '$' removed) holding `position`."""
    m = _SENTENCE_END.search(plain, position)
    return m.end() if m else len(plain)


def scenario_words(text: Text, line: int, skip=(), patterns=(), upto: int | None = None) -> tuple:
    """The inputs a sentence names: models, accelerators, precisions and S/B/T/K/G/N_kv = value, on
    `line` and, in a worked example, on the example's first line (its set-up, read whole). With
    `upto` (a position in the line with '$' removed: an entry's number), only the line's start up to
    the end of that position's sentence counts, so a sentence added after an entry's own never
    changes its inputs. Numbers starting at the positions in `skip` (the claim's own) are left out.
    Sorted, with repeats."""
    section, part = text.where.get(line, ("", ""))
    lines = [line]
    if part == "example":
        first = text.block(section, part)[0]
        if first != line:
            lines.insert(0, first)
    words = []
    for i in lines:
        raw = text.line(i)
        plain = raw.replace("$", "")
        end = sentence_end(plain, upto) if i == line and upto is not None else len(plain)
        words += [" ".join(m.group(0).split()) for rx in (_MODEL, _ACCEL) for m in rx.finditer(plain[:end])]
        words += [m.group(0).lower() for m in _DTYPE.finditer(plain[:end])]
        for n, start, _ in number_spans(raw, patterns):
            if (i == line and start in skip) or start >= end:
                continue
            m = _ASSIGN.search(plain[:start])
            if m:
                name = m.group(1) or ("batch size" if m.group(2) else "N_kv")
                words.append(f"{name} = {n.text}")
    return tuple(sorted(words))


def claim_words(text: Text, line: int, claim, patterns=()) -> tuple:
    """`scenario_words` of a claim: its own numbers skipped, the line read up to its number's sentence."""
    starts = _starts(text.line(line), claim, patterns)
    return scenario_words(text, line, starts, patterns, max(starts) if starts else None)


def statement_words(text: Text, line: int, keywords, patterns=()) -> tuple:
    """`scenario_words` of a statement: the line read up to the sentence of its last keyword."""
    from inferlab.claims.anchors import phrase_spans
    found = [spans[0][0] for spans in (phrase_spans(text.line(line), k) for k in keywords) if spans]
    return scenario_words(text, line, patterns=patterns, upto=max(found) if found else None)


def _word_diff(old: tuple, new: tuple) -> tuple:
    gone, came = Counter(old) - Counter(new), Counter(new) - Counter(old)
    return tuple(f"-{w}" for w in sorted(gone.elements())) + tuple(f"+{w}" for w in sorted(came.elements()))


@dataclass(frozen=True)
class ClaimInText:
    """A claim as one text prints it: judged on the number printed there."""

    evaluated: EvaluatedClaim
    line: int | None
    change: str
    registered_book: str
    registered_verdict: str
    inputs: tuple = ()       # scenario words that differ: "-Llama-2 13B", "+Llama-2 70B"
    anchor: str = ""         # why the anchor names no single line, with the nearest candidates

    @property
    def worse(self) -> bool:
        e, r = self.evaluated.verdict, self.registered_verdict
        return e in _RANK and r in _RANK and _RANK[e] > _RANK[r]

    def as_dict(self) -> dict:
        return {**self.evaluated.as_dict(), "line": self.line, "change": self.change,
                "registered": {"book": self.registered_book, "verdict": self.registered_verdict},
                "inputs_changed": list(self.inputs), "anchor_problem": self.anchor or None}


@dataclass(frozen=True)
class StatementInText:
    evaluated: EvaluatedStatement
    line: int | None
    change: str
    inputs: tuple = ()
    anchor: str = ""

    def as_dict(self) -> dict:
        return {**self.evaluated.as_dict(), "line": self.line, "change": self.change,
                "inputs_changed": list(self.inputs), "anchor_problem": self.anchor or None}


@dataclass(frozen=True)
class Unaccounted:
    line: int
    text: str
    numbers: tuple
    quantifiers: tuple
    suggestion: str

    def as_dict(self) -> dict:
        return {"line": self.line, "text": self.text, "numbers": list(self.numbers),
                "quantifiers": list(self.quantifiers), "suggestion": self.suggestion}


@dataclass(frozen=True)
class DraftReport:
    path: Path
    registered: Path | None
    claims: tuple
    statements: tuple
    unaccounted: tuple
    contradictions: tuple = ()       # crosscheck.Contradiction, with this text's lines
    new_contradictions: tuple = ()   # those the registered text does not have

    @property
    def exit_code(self) -> int:
        """0 when the text only confirms (fixed errata and changed values that judge no worse
        included); 1 when a verdict got worse, an entry was removed, its inputs changed, an anchor
        names no single line, a line is unaccounted, or two entries contradict each other anew."""
        bad = any(c.worse or c.anchor or c.change in ("new erratum", "inputs changed", "removed")
                  for c in self.claims)
        bad |= any(s.anchor or s.change != "unchanged" for s in self.statements)
        return 1 if bad or self.unaccounted or self.new_contradictions else 0

    def counts(self) -> dict:
        return {"claims": {k: sum(c.change == k for c in self.claims) for k in CHANGES},
                "statements": {k: sum(s.change == k for s in self.statements) for k in CHANGES
                               if k in ("unchanged", "inputs changed", "removed")},
                "unaccounted": len(self.unaccounted), "contradictions": len(self.contradictions),
                "new_contradictions": len(self.new_contradictions),
                "anchor_problems": sum(bool(e.anchor) for e in (*self.claims, *self.statements))}

    def as_json(self) -> str:
        return json.dumps({"text": str(self.path), "registered_text": str(self.registered) if self.registered else None,
                           "summary": self.counts(), "exit_code": self.exit_code,
                           "claims": [c.as_dict() for c in self.claims],
                           "statements": [s.as_dict() for s in self.statements],
                           "unaccounted": [u.as_dict() for u in self.unaccounted],
                           "contradictions": [dict(c.as_dict(), new=c in self.new_contradictions)
                                              for c in self.contradictions]}, indent=2, ensure_ascii=False)


def _printed_here(claim, numbers) -> tuple[str, float, float]:
    """(book text as the registry writes it, low, high) of the number(s) printed in this text; the
    value in the printed unit (13.0B -> 13.0) when that is the registry's scale."""
    def pick(n):
        if n.in_unit is None:
            return n.value, n.text
        use_unit = abs(n.in_unit - claim.low) <= abs(n.value - claim.low)
        mantissa = re.sub(r"[BTKk]$", "", n.text)
        return (n.in_unit, mantissa) if use_unit else (n.value, n.text)
    picked = [pick(n) for n in numbers]
    texts = [_book_text(t) for _, t in picked]
    low, high = picked[0][0], picked[-1][0]
    return ("-".join(texts) if claim.is_range else texts[0]), low, high


def _book_text(printed: str) -> str:
    """'2,048' -> '2,048'; '1.6\\times10^{14}' -> '1.6e14'; '100k' -> '100e3' (the registry's form)."""
    m = re.match(r"^([\d,]+(?:\.\d+)?)(?:\\times10\^\{(\d+)\})?([BTKk])?$", printed)
    if not m:
        return printed
    scale = {"B": 9, "T": 12, "K": 3, "k": 3}.get(m.group(3))
    exp = int(m.group(2) or 0) + (scale or 0)
    return f"{m.group(1)}e{exp}" if exp else m.group(1)


def _judge(claim, defaults, text: Text, base: Text | None, patterns, registered: EvaluatedClaim) -> ClaimInText:
    if not claim.anchor:       # an implied number: nothing in the text to compare
        return ClaimInText(registered, None, "unchanged", claim.book, registered.verdict)
    at = locate_claim(text, claim, patterns)
    problem = at.located.message() if at.located.line is None else ""
    line, numbers = at.line, at.numbers
    if line is None or not numbers:
        why = problem or f"{claim.id}: {at.problem}"
        return ClaimInText(registered, line, "removed", claim.book, registered.verdict, anchor=why)
    inputs = ()
    if base is not None:
        old = locate_claim(base, claim, patterns)
        if old.line is not None:
            inputs = _word_diff(claim_words(base, old.line, claim, patterns),
                                claim_words(text, line, claim, patterns))
    book, low, high = _printed_here(claim, numbers)
    if _same(low, claim.low) and _same(high, claim.high):
        ev, change = registered, "unchanged"
    else:
        # the printed number changed: the same rule judges the new one (an override's written reason
        # was about the old number, so it does not carry over)
        ev = evaluate(replace(claim, book=book, low=low, high=high, override=None), defaults)
        old, new = registered.verdict, ev.verdict
        change = ("erratum fixed" if new == "consistent" and old in ("erratum", "approximation") else
                  "new erratum" if new == "erratum" and old in ("consistent", "approximation") else
                  "value changed")
    if inputs:
        change = "inputs changed"
    return ClaimInText(ev, line, change, claim.book, registered.verdict, inputs, problem)


def _starts(line: str, claim, patterns) -> set:
    """Where the claim's number(s) start on `line` (two for a range), in '$'-free positions."""
    from inferlab.claims.anchors import spans_after
    return {start for _, start in spans_after(line, claim.anchor, patterns, 2 if claim.is_range else 1)[0]}


def _reads(text: Text, registry, patterns) -> dict:
    """{line: the starts of the numbers the claims anchored on it read} in `text`."""
    out: dict[int, set] = {}
    for c in registry.claims:
        line = locate_claim(text, c, patterns).line if c.anchor else None
        if line:
            out.setdefault(line, set()).update(_starts(text.line(line), c, patterns))
    return out


_STOP = set("this that with from have than they their there which when what then into only more most also "
            "each other same about because while would could should where these those your does".split())


def _words(text: str) -> set:
    return {w.rstrip("s") for w in re.findall(r"[a-z]{4,}", text.lower()) if w not in _STOP}


_UNIT_AFTER = (("tb/s", "TB/s"), ("tflop/s", "TFLOP/s"), ("flops/byte", "FLOP/byte"), ("flop/byte", "FLOP/byte"),
               ("tok/s", "tokens/s"), ("tokens/s", "tokens/s"), ("gb", "GB"), ("ms", "ms"), ("%", "%"),
               ("\\times", "x"), ("×", "x"), ("x ", "x"), ("sequences", "sequences"), ("tokens", "tokens"),
               ("bytes", "bytes"), ("s ", "s"), ("gpus", "GPUs"))


def unit_after(clean_text: str, end: int) -> str:
    """The registry unit a number is printed in, read from the text just after it ('' if none)."""
    after = clean_text[end:end + 12].lstrip().lower() + " "
    return next((unit for printed, unit in _UNIT_AFTER if after.startswith(printed)), "")


def suggest(raw: str, section: str, numbers, registry: Registry, statements, patterns=()) -> str:
    """The registered quantity a new line most resembles: for a number, the claim of the same unit
    sharing most words (its description) with the line, its section preferred; for a quantifier
    alone, the statement sharing most words."""
    words = _words(raw.replace("$", ""))
    if numbers:
        clean = raw.replace("$", "")
        units = {unit_after(clean, end) for n, _, end in number_spans(raw, patterns) if n.text in numbers}
        def score(c):
            return (c.unit in units and c.unit != "", len(words & _words(c.description)), c.section == section)
        best = max(registry.claims, key=score)
        shared = sorted(words & _words(best.description))
        unit = f"same unit {best.unit}" if best.unit in units and best.unit else "no claim of its unit"
        return (f"like {best.id} ({best.description}; {unit}; shared words: {', '.join(shared) or 'none'}): "
                "add a claim with an anchor on this line")
    best = max(statements.statements, key=lambda s: (len(words & _words(s.description + " " + " ".join(s.keywords))),
                                                    s.section == section))
    shared = sorted(words & _words(best.description + " " + " ".join(best.keywords)))
    return (f"like statement {best.id} ({best.description}; shared words: {', '.join(shared) or 'none'}): "
            "add a statement or an ignore entry for this line")


def _anchor_hint(text: Text, line: int, start: int | None, patterns) -> str:
    """'; anchor = [...]' for the number starting at `start` on `line` (anchors.suggest_anchor)."""
    from inferlab.claims.anchors import suggest_anchor
    anchor = suggest_anchor(text, line, start, patterns) if start is not None else None
    return f"; its number could take anchor = {json.dumps(anchor, ensure_ascii=False)}" if anchor else ""


def _same_entries(text: Text, base: Text, registry, statements, line_ignores, patterns) -> dict:
    """{line of `text`: Counter of the lines of `base` where the entries standing on it stand}: the
    registered line a changed line comes from (claims, statements and ignore entries alike)."""
    from inferlab.claims.coverage import located_line_ignores
    pairs: dict[int, Counter] = {}
    here, there = located(statements, text)[0], located(statements, base)[0]
    couples = [(locate_claim(text, c, patterns).line, locate_claim(base, c, patterns).line)
               for c in registry.claims if c.anchor]
    couples += [(a.line, b.line) for a, b in zip(here.statements + here.ignored, there.statements + there.ignored)]
    couples += [(a.line, b.line) for a, b in zip(located_line_ignores(line_ignores, text)[0],
                                                 located_line_ignores(line_ignores, base)[0])]
    for a, b in couples:
        if a and b:
            pairs.setdefault(a, Counter())[b] += 1
    return pairs


def _unaccounted(text: Text, base: Text | None, mapping, claims, registry, statements, line_ignores, ignore,
                 patterns) -> tuple:
    """Every line of `text` holding a number no entry accounts for, or a quantifier nothing maps.

    A line the registered text holds word for word is accounted for as `coverage.line_coverage` maps
    it. A changed line is read number by number: a number is accounted for when a claim anchored on
    the line reads it, or when the registered line it comes from (where the same entries stand)
    printed it, no claim read it there (a claim's number is its own) and the line was accounted for;
    each registered number accounts for one printed here.
    So a sentence added to a line that holds entries shows its new number, and an equal value
    elsewhere in the part accounts for nothing. Without a registered text, lines are mapped whole."""
    from inferlab.claims.coverage import line_coverage
    reads = _reads(text, registry, patterns)
    if base is not None:
        old_lines = {normal(l) for l in base.lines}
        came_from = _same_entries(text, base, registry, statements, line_ignores, patterns)
        base_reads = _reads(base, registry, patterns)
        accounted_before = {m.line for m in line_coverage(base.path, registry=registry, statements=statements,
                                                          ignore=ignore, line_ignores=line_ignores) if m.mapped_to}
    out = []
    for m in mapping:
        raw = text.line(m.line)
        spans = [(n, start) for n, start, _ in number_spans(raw, patterns)]
        if base is None or normal(raw) in old_lines:
            new = [] if m.mapped_to else spans
        else:
            source = came_from.get(m.line)
            old_line = source.most_common(1)[0][0] if source else None
            left = Counter(n.text for n, start, _ in number_spans(base.line(old_line), patterns)
                           if start not in base_reads.get(old_line, ())) if old_line in accounted_before else Counter()
            new = []
            for n, start in spans:
                if start in reads.get(m.line, ()):
                    continue
                if left[n.text]:
                    left[n.text] -= 1
                    continue
                new.append((n, start))
            if not m.mapped_to and not new:
                new = spans
        if not new and m.mapped_to:
            continue
        numbers = tuple(n.text for n, _ in new)
        out.append(Unaccounted(m.line, raw.strip(), numbers, m.quantifiers,
                               suggest(raw, text.where.get(m.line, ("", ""))[0], numbers, registry, statements,
                                       patterns) + _anchor_hint(text, m.line, new[0][1] if new else None, patterns)))
    return tuple(out)


def verify_text(book, *, registry: Registry | None = None, statements=None, registered=None) -> DraftReport:
    """Every claim and statement of the registries judged against the text at `book` (file or folder),
    compared with the registered text (default: `coverage.default_chapter_path()` when it exists)."""
    from inferlab.claims.coverage import line_coverage
    path = chapter_file(book)
    registry = registry or load_registry()
    statements = statements or load_statements()
    ignore = load_ignore()
    patterns = [r.pattern for r in ignore]
    text = Text.read(path)
    base_path = Path(registered) if registered else default_chapter_path()
    base = Text.read(base_path) if base_path.is_file() else None

    registered_claims = {c.id: evaluate(c, registry.defaults) for c in registry.claims}
    claims = tuple(_judge(c, registry.defaults, text, base, patterns, registered_claims[c.id])
                   for c in registry.claims)

    here, problems = located(statements, text)
    why = {p.name: p.message() for p in problems}
    before = located(statements, base)[0] if base is not None else None
    evaluated = {e.id: e for e in evaluate_statements(statements)}
    out_statements = []
    for k, s in enumerate(here.statements):
        e = replace(evaluated[s.id], line=s.line or None)
        if not s.line:
            out_statements.append(StatementInText(e, None, "removed", anchor=why[s.id]))
            continue
        inputs = ()
        if before is not None and before.statements[k].line:
            inputs = _word_diff(statement_words(base, before.statements[k].line, s.keywords, patterns),
                                statement_words(text, s.line, s.keywords, patterns))
        out_statements.append(StatementInText(e, s.line, "inputs changed" if inputs else "unchanged", inputs,
                                              why.get(s.id, "")))

    # the numbers as printed here account for their lines; then every line nothing accounts for
    by_id = {c.id: c for c in registry.claims}
    printed_here = []
    for c in claims:
        claim = by_id[c.evaluated.id]
        if c.evaluated is not registered_claims[c.evaluated.id] and c.change != "removed":
            low, high = (c.evaluated.book_value if isinstance(c.evaluated.book_value, tuple)
                         else (c.evaluated.book_value,) * 2)
            claim = replace(claim, low=low, high=high, book=c.evaluated.book)
        printed_here.append(claim)
    mapping = line_coverage(path, registry=replace(registry, claims=tuple(printed_here)), statements=statements,
                            ignore=ignore, line_ignores=load_line_ignores())
    unaccounted = _unaccounted(text, base, mapping, claims, registry, statements, load_line_ignores(), ignore,
                               patterns)
    from inferlab.claims import crosscheck
    gone = {e.evaluated.id for e in (*claims, *out_statements) if e.change == "removed"}
    found = crosscheck.contradictions(
        replace(registry, claims=tuple(c for c in printed_here if c.id not in gone)),
        replace(statements, statements=tuple(s for s in statements.statements if s.id not in gone)),
        claim_lines={c.evaluated.id: c.line for c in claims},
        statement_lines={s.evaluated.id: s.line for s in out_statements},
        claim_verdicts={c.evaluated.id: c.evaluated.verdict for c in claims},
        statement_verdicts={s.evaluated.id: s.evaluated.verdict for s in out_statements})
    known = {c.pair for c in crosscheck.contradictions(registry, statements)}
    return DraftReport(path, base_path if base is not None else None, claims, tuple(out_statements), unaccounted,
                       tuple(found), tuple(c for c in found if c.pair not in known))


# --------------------------------------------------------------------------------------------------
# The report as text
# --------------------------------------------------------------------------------------------------

def _short(text: str, n: int = 90) -> str:
    return text if len(text) <= n else text[:n - 1] + "…"


def table(report: DraftReport) -> str:
    """Per claim: line here, book as printed here, ours, verdict, change; then the details of every
    change, the anchor problems, the statements that changed, and the unaccounted lines."""
    rows = [(c.evaluated.id, str(c.line) if c.line else "-", c.evaluated.book_text, c.evaluated.ours_text,
             c.evaluated.verdict, c.change) for c in report.claims]
    headers = ("id", "line", "book here", "ours", "verdict", "change")
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    fmt = lambda cells: "  ".join(str(x).ljust(w) for x, w in zip(cells, widths)).rstrip()
    counts = report.counts()
    out = [f"Text: {report.path}",
           f"Registered text: {report.registered or 'not found (scenario words not compared)'}", "",
           fmt(headers), fmt(["-" * w for w in widths]), *map(fmt, rows), "",
           "claims: " + ", ".join(f"{n} {k}" for k, n in counts["claims"].items())]
    changed = [c for c in report.claims if c.change != "unchanged"]
    if changed:
        out += ["", "Changed since the registered text:"]
        for c in changed:
            e = c.evaluated
            where = f"line {c.line}" if c.line else "no line"
            if c.change == "removed":
                out.append(f"  {e.id} removed ({where}): {c.anchor}")
                continue
            out.append(f"  {e.id} {c.change} ({where}): book {c.registered_book} -> {e.book}, "
                       f"verdict {c.registered_verdict} -> {e.verdict}; {e.band}")
            if c.inputs:
                out.append(f"      inputs no longer match the registered text: {', '.join(c.inputs)} "
                           "(the verdict is for the registered inputs)")
    problems = [x.anchor for x in (*report.claims, *report.statements) if x.anchor and x.change != "removed"]
    if problems:
        out += ["", "Anchors that name more than one line (the first is read):"] + [f"  {p}" for p in problems]
    st = [s for s in report.statements if s.change != "unchanged"]
    out += ["", "statements: " + ", ".join(f"{n} {k}" for k, n in counts["statements"].items())]
    for s in st:
        detail = s.anchor if s.change == "removed" else "inputs no longer match: " + ", ".join(s.inputs)
        out.append(f"  {s.evaluated.id} {s.change} ({s.evaluated.verdict}): {detail}")
    out += ["", f"Lines with a number or quantifier no entry accounts for: {len(report.unaccounted)}"]
    for u in report.unaccounted:
        what = ", ".join([*u.numbers, *(q.lower() for q in u.quantifiers)])
        out += [f"  line {u.line} [{what}]: {_short(u.text)}", f"      suggestion: {u.suggestion}"]
    if report.contradictions:
        out += ["", f"Contradictions within this text: {len(report.contradictions)} "
                    f"({len(report.new_contradictions)} not in the registered text)"]
        out += [f"  {'NEW ' if c in report.new_contradictions else ''}{c.text()}" for c in report.contradictions]
    out += ["", f"exit {report.exit_code}: " + ("the text only confirms" if report.exit_code == 0 else
                                               "something got worse, moved out of reach or is unaccounted")]
    return "\n".join(out)


# --------------------------------------------------------------------------------------------------
# Two drafts compared: `inferlab verify --book NEW --against OLD`
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Difference:
    """One entry whose number, verdict, presence or scenario differs between two drafts."""

    id: str
    kind: str             # claim or statement
    change: str           # as CHANGES, or "returned" (found in NEW, not in OLD)
    old_line: int | None
    new_line: int | None
    old_book: str
    new_book: str
    old_verdict: str
    new_verdict: str
    band: str = ""
    inputs: tuple = ()

    def as_dict(self) -> dict:
        return {"id": self.id, "kind": self.kind, "change": self.change,
                "old": {"line": self.old_line, "book": self.old_book, "verdict": self.old_verdict},
                "new": {"line": self.new_line, "book": self.new_book, "verdict": self.new_verdict},
                "band": self.band, "inputs_changed": list(self.inputs)}


def compare(old: DraftReport, new: DraftReport, registry: Registry | None = None, statements=None) -> dict:
    """What changed from draft `old` to draft `new`: {"entries": [Difference], "moved": n (entries
    whose line alone moved), "unaccounted_new"/"unaccounted_gone": [Unaccounted],
    "contradictions_new"/"contradictions_gone": [crosscheck.Contradiction]}. `registry` and
    `statements` are those the two reports were judged with (default: the registered ones)."""
    old_text, new_text = Text.read(old.path), Text.read(new.path)
    patterns = [r.pattern for r in load_ignore()]
    claims = {c.id: c for c in (registry or load_registry()).claims}
    keywords = {s.id: s.keywords for s in (statements or load_statements()).statements}

    def words(text, line, entry_id, kind):
        if kind == "claim":
            return claim_words(text, line, claims[entry_id], patterns)
        return statement_words(text, line, keywords[entry_id], patterns)
    out, moved = [], 0
    for kind, pairs in (("claim", zip(old.claims, new.claims)), ("statement", zip(old.statements, new.statements))):
        for a, b in pairs:
            ea, eb = a.evaluated, b.evaluated
            book_a, book_b = (ea.book, eb.book) if kind == "claim" else ("", "")
            inputs = ()
            if a.line and b.line:
                inputs = _word_diff(words(old_text, a.line, ea.id, kind), words(new_text, b.line, eb.id, kind))
            if a.line and not b.line:
                change = "removed"
            elif b.line and not a.line:
                change = "returned"
            elif inputs:
                change = "inputs changed"
            elif book_a != book_b:
                change = ("erratum fixed" if eb.verdict == "consistent" and ea.verdict in ("erratum", "approximation")
                          else "new erratum" if eb.verdict == "erratum" and ea.verdict in ("consistent", "approximation")
                          else "value changed")
            else:
                moved += a.line != b.line
                continue
            gone = lambda found, value: value if found else "-"
            out.append(Difference(ea.id, kind, change, a.line, b.line, gone(a.line, book_a), gone(b.line, book_b),
                                  gone(a.line, ea.verdict), gone(b.line, eb.verdict),
                                  getattr(eb, "band", "") if b.line else "", inputs))
    old_u = {normal(u.text) for u in old.unaccounted}
    new_u = {normal(u.text) for u in new.unaccounted}
    old_c, new_c = {c.pair for c in old.contradictions}, {c.pair for c in new.contradictions}
    return {"entries": out, "moved": moved,
            "unaccounted_new": [u for u in new.unaccounted if normal(u.text) not in old_u],
            "unaccounted_gone": [u for u in old.unaccounted if normal(u.text) not in new_u],
            "contradictions_new": [c for c in new.contradictions if c.pair not in old_c],
            "contradictions_gone": [c for c in old.contradictions if c.pair not in new_c]}


def _md(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def diff_markdown(diff: dict, old: DraftReport, new: DraftReport) -> str:
    """The comparison as Markdown, for a pull request."""
    out = [f"## Verdicts: {new.path} against {old.path}", "",
           f"{len(diff['entries'])} entries changed, {diff['moved']} moved only; "
           f"{len(diff['unaccounted_new'])} new unaccounted lines, {len(diff['unaccounted_gone'])} now accounted for; "
           f"{len(diff['contradictions_new'])} new contradictions, {len(diff['contradictions_gone'])} resolved.", ""]
    if diff["entries"]:
        out += ["| id | change | line | book | verdict | band or inputs |", "|---|---|---|---|---|---|"]
        for d in diff["entries"]:
            line = f"{d.old_line or '-'} → {d.new_line or '-'}"
            book = f"{d.old_book} → {d.new_book}" if d.kind == "claim" else "(statement)"
            detail = ", ".join(d.inputs) if d.inputs else d.band
            out.append(f"| {d.id} | {d.change} | {line} | {_md(book)} | {d.old_verdict} → {d.new_verdict} | "
                       f"{_md(detail)} |")
    if diff["unaccounted_new"]:
        out += ["", "### New lines no entry accounts for", "", "| line | numbers / quantifiers | suggestion |",
                "|---|---|---|"]
        out += [f"| {u.line} | {_md(', '.join([*u.numbers, *u.quantifiers]))} | {_md(u.suggestion)} |"
                for u in diff["unaccounted_new"]]
    for key, title in (("contradictions_new", "New contradictions within the text"),
                       ("contradictions_gone", "Contradictions resolved")):
        if diff[key]:
            out += ["", f"### {title}", ""] + [f"- {_md(c.text())}" for c in diff[key]]
    return "\n".join(out) + "\n"


def diff_json(diff: dict, old: DraftReport, new: DraftReport) -> str:
    return json.dumps({"old": str(old.path), "new": str(new.path), "moved": diff["moved"],
                       "entries": [d.as_dict() for d in diff["entries"]],
                       "unaccounted_new": [u.as_dict() for u in diff["unaccounted_new"]],
                       "unaccounted_gone": [u.as_dict() for u in diff["unaccounted_gone"]],
                       "contradictions_new": [c.as_dict() for c in diff["contradictions_new"]],
                       "contradictions_gone": [c.as_dict() for c in diff["contradictions_gone"]]},
                      indent=2, ensure_ascii=False)

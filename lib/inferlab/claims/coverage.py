"""Which numbers printed in the chapter no registry entry accounts for (and which entries claim a
number the chapter does not print where they say)."""
from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from inferlab.claims.chapter import Number, chapter_numbers, read_blocks, numbers_in
from inferlab.claims.registry import Registry, RegistryError, load_registry

CHAPTER_NAME = "chapter-15-the-inference-workload.txt"


def default_chapter_path() -> Path:
    """The chapter text, which is not part of the repository: $INFERLAB_BOOK (the file itself, or
    the folder holding it) when set, else ../shared/book/<chapter> beside the repository (where CI
    checks the clone out). The path may not exist; callers check."""
    import os
    from inferlab.core.specs import data_dir
    env = os.environ.get("INFERLAB_BOOK")
    if env:
        path = Path(env)
        return path / CHAPTER_NAME if path.is_dir() else path
    return data_dir().parent.parent / "shared" / "book" / CHAPTER_NAME


@dataclass(frozen=True)
class IgnoreRule:
    pattern: re.Pattern
    reason: str


def load_ignore(path: Path | None = None) -> list[IgnoreRule]:
    """The reviewed ignore-list, data/coverage_ignore.toml: every pattern has a reason."""
    if path is None:
        from inferlab.core.specs import data_dir
        path = data_dir() / "coverage_ignore.toml"
    rules = []
    for i, raw in enumerate(tomllib.loads(Path(path).read_text(encoding="utf-8")).get("ignore", [])):
        if not str(raw.get("reason", "")).strip():
            raise RegistryError(f"coverage ignore-list entry {i + 1} ({raw.get('pattern')!r}) has no reason")
        try:
            rules.append(IgnoreRule(re.compile(raw["pattern"]), raw["reason"]))
        except (KeyError, re.error) as err:
            raise RegistryError(f"coverage ignore-list entry {i + 1}: bad pattern: {err}") from None
    return rules


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(abs(a), abs(b), 1.0)


def uncovered(chapter: Path | None = None, registry: Registry | None = None,
              ignore: list[IgnoreRule] | None = None) -> list[Number]:
    """Numbers of the chapter that no claim of the same section and part accounts for."""
    chapter = Path(chapter) if chapter else default_chapter_path()
    registry = registry or load_registry()
    ignore = load_ignore() if ignore is None else ignore
    covers: dict[tuple[str, str], list[float]] = {}
    for c in registry.claims:
        covers.setdefault((c.section, c.part), []).extend(c.numbers())
    out = []
    for n in chapter_numbers(chapter, [r.pattern for r in ignore]):
        if not any(_same(x, v) for x in n.values() for v in covers.get((n.section, n.part), [])):
            out.append(n)
    return out


def unprinted(chapter: Path | None = None, registry: Registry | None = None,
              ignore: list[IgnoreRule] | None = None) -> list:
    """Claims marked as printed whose book value (each end of a range) does not appear in the
    part of the chapter they name: a typo in the registry or a wrong section/part."""
    chapter = Path(chapter) if chapter else default_chapter_path()
    registry = registry or load_registry()
    ignore = load_ignore() if ignore is None else ignore
    printed: dict[tuple[str, str], list[float]] = {}
    for (section, part), lines in read_blocks(chapter).items():
        for i, line in lines:
            printed.setdefault((section, part), []).extend(
                x for n in numbers_in(line, [r.pattern for r in ignore]) for x in n.values())
    bad = []
    for c in registry.claims:
        if not c.printed:
            continue
        values = printed.get((c.section, c.part), [])
        for v in {c.low, c.high}:
            if not any(_same(v, p) for p in values):
                bad.append((c.id, v))
    return bad


# --------------------------------------------------------------------------------------------------
# Line coverage: every line carrying a number or a quantifier is mapped to something that checks it
# --------------------------------------------------------------------------------------------------

# Words that make a sentence a claim about every case, or an order of growth: "always", "never",
# "only", "every", "all", "any", "regardless", "no matter", "entirely", "exactly", "zero", "fully",
# "firmly", "most", "least", "cannot", and big-O.
QUANTIFIER = re.compile(r"\b(?:always|never|only|every|all|any|none|no matter|regardless|entirely|exactly|zero"
                        r"|fully|firmly|most|least|cannot)\b|\bO\s*\(", re.I)


@dataclass(frozen=True)
class LineIgnore:
    line: int            # a hint: re-derived from the keywords (in `section`) whenever a text is read
    keywords: tuple
    reason: str
    section: str | None = None


@dataclass(frozen=True)
class LineMapping:
    """One chapter line carrying numbers or quantifiers and what accounts for it: statement ids,
    a statements [[ignore]], number-claim ids (every number on the line covered), or a [[line]]
    entry of data/coverage_ignore.toml. `mapped_to` is empty when nothing does."""

    line: int
    numbers: tuple
    quantifiers: tuple
    mapped_to: tuple
    checked: bool = True  # False when only statements without an experiment (unchecked) map it


def load_line_ignores(path: Path | None = None) -> list[LineIgnore]:
    """The [[line]] entries of data/coverage_ignore.toml: a line whose number or quantifier states
    nothing to check, with keywords found on it and a reason."""
    if path is None:
        from inferlab.core.specs import data_dir
        path = data_dir() / "coverage_ignore.toml"
    out = []
    for i, raw in enumerate(tomllib.loads(Path(path).read_text(encoding="utf-8")).get("line", [])):
        line, kw, reason = raw.get("line"), raw.get("keywords"), str(raw.get("reason", "")).strip()
        if not isinstance(line, int) or isinstance(line, bool) or line < 1:
            raise RegistryError(f"coverage ignore-list [[line]] {i + 1}: 'line' must be a positive integer; got {line!r}")
        if not isinstance(kw, list) or len(kw) < 2 or not all(isinstance(k, str) and k.strip() for k in kw):
            raise RegistryError(f"coverage ignore-list [[line]] {i + 1} (line {line}): 'keywords' must be a list of "
                                f"at least 2 words found on the line; got {kw!r}")
        if len(reason) < 20:
            raise RegistryError(f"coverage ignore-list [[line]] {i + 1} (line {line}): every ignored line needs a "
                                f"'reason' (a sentence); got {reason!r}")
        out.append(LineIgnore(line, tuple(kw), reason, raw.get("section")))
    return out


def located_line_ignores(line_ignores, text) -> tuple[list[LineIgnore], list]:
    """The [[line]] entries with their lines derived from their keywords in `text` (an anchors.Text):
    (entries, [anchors.Located of those naming no line or several]); one naming several stands on
    the first, one naming none gets line 0."""
    from dataclasses import replace
    from inferlab.claims.anchors import locate
    out, problems = [], []
    for i in line_ignores:
        found = locate(text, f"coverage_ignore {list(i.keywords)}", i.keywords, i.section)
        if found.line is None:
            problems.append(found)
        out.append(replace(i, line=found.first or 0))
    return out, problems


def line_coverage(chapter: Path | None = None, registry: Registry | None = None, statements=None,
                  ignore: list[IgnoreRule] | None = None, line_ignores: list[LineIgnore] | None = None
                  ) -> list[LineMapping]:
    """Every non-heading line of the chapter that carries a number (after the reviewed ignore
    patterns) or a quantifier (QUANTIFIER), with what it is mapped to. A line with a quantifier
    needs a statement, a statements [[ignore]] or a [[line]] entry; a line with numbers only may
    also be mapped by the number claims of its section and part that cover all of them. Statements
    and [[line]] entries stand where their keywords put them in this text (`anchors`)."""
    from inferlab.claims.anchors import Text
    from inferlab.claims.statements import is_heading, load_statements, located, _normal
    chapter = Path(chapter) if chapter else default_chapter_path()
    registry = registry or load_registry()
    statements = statements or load_statements()
    ignore = load_ignore() if ignore is None else ignore
    line_ignores = load_line_ignores() if line_ignores is None else line_ignores
    where = Text.read(chapter)
    statements = located(statements, where)[0]
    line_ignores = located_line_ignores(line_ignores, where)[0]
    text = chapter.read_text(encoding="utf-8").splitlines()
    numbers: dict[int, list[Number]] = {}
    for n in chapter_numbers(chapter, [r.pattern for r in ignore]):
        numbers.setdefault(n.line, []).append(n)
    stated: dict[int, list[str]] = {}
    for s in statements.statements:
        stated.setdefault(s.line, []).append(s.id)
    ignored = {i.line: i for i in statements.ignored}
    skipped = {i.line: i for i in line_ignores
               if i.line <= len(text) and all(_normal(k) in _normal(text[i.line - 1]) for k in i.keywords)}
    out = []
    for i, raw in enumerate(text, 1):
        s = raw.strip()
        if not s or is_heading(s):
            continue
        quants = tuple(m.group(0) for m in QUANTIFIER.finditer(s))
        nums = numbers.get(i, [])
        if not quants and not nums:
            continue
        mapped: tuple = ()
        checked = True
        if i in stated:
            mapped = tuple(stated[i])
            checked = any(st.experiment is not None and st.status == "checked"
                          for st in statements.statements if st.line == i)
        elif i in ignored:
            mapped = (f"statements ignore: {ignored[i].reason}",)
        elif i in skipped:
            mapped = (f"coverage_ignore: {skipped[i].reason}",)
        elif nums and not quants:
            ids = []
            for n in nums:
                found = [c.id for c in registry.claims if (c.section, c.part) == (n.section, n.part)
                         and any(_same(x, v) for x in n.values() for v in c.numbers())]
                if not found:
                    ids = []
                    break
                ids.extend(f for f in found if f not in ids)
            mapped = tuple(ids)
        out.append(LineMapping(i, tuple(n.text for n in nums), quants, mapped, checked))
    return out


def stale_line_ignores(chapter: Path | None = None, line_ignores: list[LineIgnore] | None = None) -> list:
    """[[line]] entries whose keywords name no single line of the text, or another line than their
    hint: (hint line, keywords)."""
    from inferlab.claims.anchors import Text
    chapter = Path(chapter) if chapter else default_chapter_path()
    line_ignores = load_line_ignores() if line_ignores is None else line_ignores
    found, _ = located_line_ignores(line_ignores, Text.read(chapter))
    return [(old.line, old.keywords) for old, new in zip(line_ignores, found) if new.line != old.line]

"""Content anchors: where a registry entry stands in a text of the chapter, found from what it says.

An anchor is a few short phrases (at most 3 words each, never a sentence of the book) that occur
together on one line of the entry's section (and part, for a number claim). The line is derived
each time a text is read, so deleting, moving or duplicating a paragraph moves no other entry.
A number claim's last phrase is the one printed just before its number: the claim's value in a
text is the first number that starts after that phrase (for a range, that number and the next).

Matching is on normalised text: lower case, '$' removed, whitespace collapsed (the keyword rule of
the statements registry). An anchor that matches no line, or more than one, is a `Located` with
`line = None`, a `problem` and the nearest candidate lines.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from inferlab.claims.chapter import Number, number_spans, read_blocks

MAX_PHRASE_WORDS = 3


def normal(text: str) -> str:
    """Lower case, '$' removed, whitespace collapsed: what anchors are matched against."""
    return " ".join(text.replace("$", "").lower().split())


@dataclass(frozen=True)
class Text:
    """One text of the chapter: its lines and the (section, part) of each (1-based lines)."""

    path: Path
    lines: tuple
    where: dict

    @classmethod
    def read(cls, path) -> "Text":
        path = Path(path)
        where = {i: key for key, lines in read_blocks(path).items() for i, _ in lines}
        return cls(path, tuple(path.read_text(encoding="utf-8").splitlines()), where)

    def line(self, i: int) -> str:
        return self.lines[i - 1]

    def block(self, section: str, part: str | None = None) -> list[int]:
        return [i for i, (s, p) in sorted(self.where.items())
                if s == section and (part is None or p == part) and self.lines[i - 1].strip()]


@dataclass(frozen=True)
class Located:
    """An entry's line in one text, or why it has none: the anchor matched nowhere or on several
    lines (`candidates`: the lines nearest to matching, or the lines it matched)."""

    name: str
    line: int | None
    problem: str = ""
    candidates: tuple = ()
    matches: tuple = ()   # the lines it names when it names several (a duplicated paragraph)

    @property
    def first(self) -> int | None:
        """The line, or the first of several it names; None when it names none."""
        return self.line or (self.matches[0] if self.matches else None)

    def message(self) -> str:
        near = ", ".join(f"line {l} ({why})" for l, why in self.candidates) or "none"
        return f"{self.name}: anchor {self.problem}; nearest: {near}"


def lines_with(text: Text, phrases, section: str | None, part: str | None = None) -> list[int]:
    """The lines of `section` (and `part`; the whole text when section is None) holding every phrase."""
    wanted = [normal(p) for p in phrases]
    pool = text.block(section, part) if section else range(1, len(text.lines) + 1)
    return [i for i in pool if all(w in normal(text.line(i)) for w in wanted)]


def nearest(text: Text, phrases, section: str | None, part: str | None = None, n: int = 3) -> tuple:
    """The `n` lines holding most of the phrases (at least one), in the section first, then anywhere:
    ((line, 'k/m phrases: ...'), ...)."""
    wanted = [normal(p) for p in phrases]
    scored = []
    for i in range(1, len(text.lines) + 1):
        norm = normal(text.line(i))
        hit = [p for p, w in zip(phrases, wanted) if w in norm]
        if hit:
            same = section is None or text.where.get(i, ("", ""))[0] == section
            scored.append((-len(hit), not same, i, hit))
    scored.sort()
    out = []
    for _, other, i, hit in scored[:n]:
        where = f" in {text.where[i][0]}" if other else ""
        out.append((i, f"{len(hit)}/{len(phrases)} phrases{where}: {', '.join(hit)}"))
    return tuple(out)


def locate(text: Text, name: str, phrases, section: str | None, part: str | None = None) -> Located:
    """The one line of `section` (and `part`) that holds every phrase of the anchor."""
    found = lines_with(text, phrases, section, part)
    if len(found) == 1:
        return Located(name, found[0])
    where = f"{section} {part}" if part else (section or "the text")
    if not found:
        return Located(name, None, f"{list(phrases)} matches no line of {where}",
                       nearest(text, phrases, section, part))
    return Located(name, None, f"{list(phrases)} matches {len(found)} lines of {where}",
                   tuple((i, "all phrases") for i in found), tuple(found))


def phrase_spans(line: str, phrase: str) -> list[tuple[int, int]]:
    """Spans of `phrase` in the line with '$' removed (case and spacing ignored)."""
    words = phrase.replace("$", "").split()
    pattern = r"\s+".join(re.escape(w) for w in words)
    return [m.span() for m in re.finditer(pattern, line.replace("$", ""), re.I)]


def number_after(line: str, phrases, patterns=(), count: int = 1) -> tuple[list[Number], str]:
    """`spans_after` without the spans."""
    found, why = spans_after(line, phrases, patterns, count)
    return [n for n, _ in found], why


def spans_after(line: str, phrases, patterns=(), count: int = 1) -> tuple[list, str]:
    """The first `count` numbers printed after the last phrase, or ([], why not). Each phrase is
    looked for after the previous one, or from the line's start when it does not occur after it."""
    pos = 0
    for phrase in phrases:
        every = phrase_spans(line, phrase)
        spans = [sp for sp in every if sp[0] >= pos] or every
        if not spans:
            return [], f"phrase {phrase!r} is not on its line"
        pos = spans[0][1]
    after = [(n, start) for n, start, _ in number_spans(line, patterns) if start >= pos]
    if len(after) < count:
        return [], f"no number after {list(phrases)!r} on its line"
    return after[:count], ""


def _letters(text: str) -> int:
    """Letters of the words of `text`, LaTeX commands (\\approx) not counted."""
    return sum(ch.isalpha() for w in text.split() if not w.startswith("\\") for ch in w)


def suggest_anchor(text: Text, line: int, start: int, patterns=()) -> list[str] | None:
    """A short anchor for the number starting at `start` (clean coordinates) on `line`: the 1-3 words
    just before the number (digit-free when possible), alone when they are two words or more with 8
    letters or more and name one line, else after a word found on no other line of its part of the
    section (the rarest in the text). None when no such anchor names the number alone."""
    raw = text.line(line)
    section, part = text.where[line]
    prefix = raw.replace("$", "")[:start]
    words = prefix.split()
    before = [" ".join(words[-k:]) for k in range(1, MAX_PHRASE_WORDS + 1) if len(words) >= k]
    before.sort(key=lambda p: (bool(re.search(r"\d", p)), _letters(p) < 2, len(p.split())))
    others = [normal(text.line(i)) for i in text.block(section, part) if i != line]
    everywhere = [normal(l) for l in text.lines]
    rare = sorted(dict.fromkeys(w.strip(".,;:()“”\"'") for w in raw.replace("$", "").split()), key=lambda w: (
        normal(w) not in normal(prefix), sum(normal(w) in l for l in everywhere), -len(w)))
    rare = [w for w in rare if len(w) >= 5 and w.isalpha() and not any(normal(w) in l for l in others)]
    for phrase in before:
        alone = _letters(phrase) >= 8 and sum(_letters(w) > 0 for w in phrase.split()) >= 2
        for anchor in ([[phrase]] if alone else []) + [[w, phrase] for w in rare]:
            got, _ = spans_after(raw, anchor, patterns)
            if got and got[0][1] == start and lines_with(text, anchor, section, part) == [line]:
                return anchor
    return None


@dataclass(frozen=True)
class ClaimAt:
    """Where a number claim stands in one text: its line (`located`; the first when the anchor names
    several) and the number(s) printed after its anchor there (two for a range), or `problem`
    saying why there are none."""

    located: Located
    numbers: tuple = ()
    problem: str = ""

    @property
    def line(self) -> int | None:
        return self.located.first


def locate_claim(text: Text, claim, patterns=()) -> ClaimAt:
    """The claim's line (the one line of its section and part holding every anchor phrase) and the
    number(s) printed just after the last phrase."""
    if not claim.anchor:
        return ClaimAt(Located(claim.id, None, "is not given (the number is implied, not printed)"))
    where = locate(text, claim.id, claim.anchor, claim.section, claim.part)
    if where.first is None:
        return ClaimAt(where, (), where.problem)
    numbers, why = number_after(text.line(where.first), claim.anchor, patterns, 2 if claim.is_range else 1)
    return ClaimAt(where, tuple(numbers), why)

"""The chapter's text cut into (section, part) blocks, and the numbers printed in each block.

The text is a PDF extraction of LaTeX, so a number can be spelled "2 , 048", "0 . 82",
"$\\sim 160$", "13.0B", "4$\\times$" or "13 \\times 10^{9}"; `numbers_in` reads all of these as one
value. Spans matched by the reviewed ignore-list (section ids, model names, exponents...) are
blanked first.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

SECTION_RE = re.compile(r"^(15\.\d\.\d)\s")
PART_HEADINGS = {
    "A Worked Example": "example",
    "What You Actually Decide in Practice": "practice",
    "How This Shows Up in Interviews": "interviews",
    "Key Takeaways": "takeaways",
}
PARTS = ("body", "example", "practice", "interviews", "takeaways")

# A number: digits with thousands groups ("2 , 048", "10,000"), an optional decimal part ("0 . 82"),
# an optional "\times 10^{N}" scale, and an optional magnitude suffix (13B, 989T, 2K, 100k).
_NUMBER = re.compile(
    r"(?<![A-Za-z0-9.^{_])"                      # not inside a name (H100, bf16) or an exponent
    r"(?P<int>\d{1,3}(?:\s?,\s?\d{3})+(?!\d)|\d+)"
    r"(?P<frac>\s?\.\s?\d+)?"
    r"(?P<sci>\s*\\times\s*10\^\{(?P<exp>\d+)\})?"
    r"(?P<suffix>[BTKk](?![A-Za-z]))?")
_SUFFIX = {"B": 1e9, "T": 1e12, "K": 1e3, "k": 1e3, None: 1.0}


@dataclass(frozen=True)
class Number:
    """A number printed in the chapter: its value, the text it was read from, and where."""

    value: float
    text: str
    section: str
    part: str
    line: int
    in_unit: float | None = None  # "13B", "989T": the value in the unit printed (13, 989)

    def values(self) -> tuple:
        """The value, and for a B/T suffix also the number in that unit (claims are in B, TFLOP/s)."""
        return (self.value,) if self.in_unit is None else (self.value, self.in_unit)


def read_blocks(path: Path) -> dict[tuple[str, str], list[tuple[int, str]]]:
    """{(section, part): [(line number, text), ...]} for the chapter at `path`. Lines before the
    first subsection (the chapter and section titles) go to ("front", "body")."""
    blocks: dict[tuple[str, str], list[tuple[int, str]]] = {}
    section, part = "front", "body"
    for i, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        stripped = line.strip()
        m = SECTION_RE.match(stripped)
        if m:
            section, part = m.group(1), "body"
        elif stripped in PART_HEADINGS:
            part = PART_HEADINGS[stripped]
        elif re.match(r"^15\.\d\s", stripped):       # "15.2 Latency, ..." opens a new section
            section, part = "front", "body"
        blocks.setdefault((section, part), []).append((i, line))
    return blocks


def blank(text: str, patterns) -> str:
    """`text` with every match of the ignore patterns replaced by spaces (positions kept)."""
    for pattern in patterns:
        text = pattern.sub(lambda m: " " * len(m.group(0)), text)
    return text


def parse_number(match: re.Match) -> float:
    digits = re.sub(r"[\s,]", "", match.group("int"))
    frac = re.sub(r"\s", "", match.group("frac") or "")
    value = float(digits + frac)
    if match.group("exp"):
        value *= 10.0 ** int(match.group("exp"))
    return value * _SUFFIX[match.group("suffix")]


def clean(text: str, patterns=()) -> str:
    """`text` with '$' removed, the ignore patterns blanked and \\sim, \\approx, \\leq, \\geq turned
    into spaces: what numbers are read from. Positions match `text` with its '$' removed."""
    cleaned = blank(text.replace("$", ""), patterns)
    return re.sub(r"\\(sim|approx|leq|geq)", lambda m: " " * len(m.group(0)), cleaned)


def number_spans(text: str, patterns=(), *, section: str = "", part: str = "", line: int = 0):
    """[(Number, start, end)] for every number printed in `text`, with its span in `clean(text)`."""
    out = []
    for m in _NUMBER.finditer(clean(text, patterns)):
        value = parse_number(m)
        in_unit = value / _SUFFIX[m.group("suffix")] if m.group("suffix") in ("B", "T") else None
        out.append((Number(value, re.sub(r"\s", "", m.group(0)), section, part, line, in_unit),
                    m.start(), m.end()))
    return out


def numbers_in(text: str, patterns=(), *, section: str = "", part: str = "", line: int = 0):
    """Every number printed in `text` (after blanking the ignore patterns), in order."""
    return [n for n, _, _ in number_spans(text, patterns, section=section, part=part, line=line)]


def chapter_numbers(path: Path, patterns=()) -> list[Number]:
    """All numbers of the chapter, each tagged with its section, part and line."""
    out = []
    for (section, part), lines in read_blocks(path).items():
        for i, line in lines:
            out.extend(numbers_in(line, patterns, section=section, part=part, line=i))
    return out

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
    from inferlab.specs import data_dir
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
        from inferlab.specs import data_dir
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

"""The math symbols the chapter notebooks use, and the entries of the notation page (book/notation.md).

Pure functions over notebook JSON (dicts) and Markdown strings; tests/test_notation.py checks that
every symbol used in more than one chapter notebook has an entry with a unit and a meaning.

What counts as a symbol, in the TeX between `$...$` or `$$...$$` (an escaped `\\$` is a dollar sign):
  - a single letter (`S`, `d`: TeX reads `2PBS` as four factors, so `P`, `B`, `S`), a Greek letter
    (`\\lambda`), or one word in `\\text{}`/`\\mathrm{}` (`\\text{BW}`, `\\text{TTFT}`), with its
    subscript and a `*` superscript: `C_\\text{kv}`, `C_{\\text{kv}}`, `C_{kv}` -> `C_{kv}`;
    `B^*`, `B^{\\ast}` -> `B^*`; an accent keeps its letter (`\\bar B` -> `\\bar{B}`);
  - not symbols: numbers, operators and spacing commands, function names (`\\max`, `\\min`, `\\sum`,
    and the scripts under them), sets (`\\mathbb{R}`), labels under a brace (`\\underbrace{..}_{..}`),
    other superscripts (exponents `S^2`, the transpose `K^\\top`), a `\\text{}` phrase (it contains
    a space: words, not notation), and the unit and format words of NOT_NOTATION (`\\text{GB}`).
"""
from __future__ import annotations

import re
from collections import defaultdict

# \text words that are units or number formats, not symbols (`26\ \text{GB}`, `\text{(bf16)}`).
NOT_NOTATION = frozenset({
    "B", "byte", "bytes", "kB", "MB", "GB", "TB", "TB/s", "GB/s", "s", "ms", "us", "h",
    "FLOP", "FLOPS", "TFLOP/s", "FLOP/s", "FLOP/byte", "tokens", "token", "tokens/s", "tok/s", "/s",
    "bf16", "(bf16)", "fp8", "int8", "fp16", "fp32", "steps",
    "fewer",                      # prose after a number: `(18.1\times\ \text{fewer})`
})
# Function names: neither they nor the index under them (`\max_i`) are symbols. Any other command
# that is not below (`\frac`, `\cdot`, `\left`, `\quad`) is skipped and its arguments read as TeX.
FUNCTIONS = frozenset({"max", "min", "sum", "prod", "log", "exp", "lim", "argmax", "argmin"})
GREEK = frozenset({
    "alpha", "beta", "gamma", "delta", "epsilon", "varepsilon", "zeta", "eta", "theta", "kappa",
    "lambda", "mu", "nu", "xi", "pi", "rho", "sigma", "tau", "phi", "varphi", "chi", "psi", "omega",
    "Gamma", "Delta", "Theta", "Lambda", "Xi", "Pi", "Sigma", "Phi", "Psi", "Omega",
})
ACCENTS = frozenset({"bar", "overline", "hat", "widehat", "tilde", "widetilde", "vec", "dot"})
TEXT_COMMANDS = frozenset({"text", "mathrm", "textrm", "mathit", "textit", "mathbf", "textbf"})
SET_COMMANDS = frozenset({"mathbb", "mathcal", "operatorname"})   # their argument is not a symbol
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_\-]*")
# $$...$$ first, then $...$ on one line; a backslash-escaped dollar is not a delimiter.
_MATH = re.compile(r"(?<!\\)\$\$(?P<display>.+?)(?<!\\)\$\$|(?<!\\)\$(?P<inline>[^$\n]+?)(?<!\\)\$", re.S)


def math_segments(markdown: str) -> list[str]:
    """The TeX of every `$...$` and `$$...$$` in a Markdown string."""
    return [m.group("display") or m.group("inline") for m in _MATH.finditer(markdown)]


def _group(tex: str, i: int) -> tuple[str, int]:
    """The argument at tex[i]: a balanced {...} group (without its braces), a command, or one
    character. Returns (argument, index after it). Leading spaces are skipped."""
    while i < len(tex) and tex[i].isspace():
        i += 1
    if i >= len(tex):
        return "", i
    if tex[i] == "{":
        depth, j = 0, i
        while j < len(tex):
            if tex[j] == "{" and tex[j - 1:j] != "\\":
                depth += 1
            elif tex[j] == "}" and tex[j - 1:j] != "\\":
                depth -= 1
                if depth == 0:
                    return tex[i + 1:j], j + 1
            j += 1
        return tex[i + 1:], len(tex)
    m = re.match(r"\\([A-Za-z]+)|\\.|.", tex[i:], re.S)
    end = i + len(m.group(0))
    if m.group(1) in TEXT_COMMANDS:               # `_\text{kv}`: the command and its argument
        arg, end = _group(tex, end)
        return m.group(0) + "{" + arg + "}", end
    return m.group(0), end


def _plain(script: str) -> str:
    """A subscript's text: `\\text{kv}`, `{\\text{kv}}`, `kv` -> `kv`; `\\ast` -> `*`."""
    s = re.sub(r"\\(?:%s)\s*\{([^{}]*)\}" % "|".join(TEXT_COMMANDS), r"\1", script)
    s = s.replace("\\ast", "*").replace("\\_", "_")
    return re.sub(r"[{}\s]", "", s)


def _scripts(tex: str, i: int) -> tuple[str, str | None, int]:
    """The `_` and `^` scripts after a base at tex[i] (either order): (subscript, superscript, end)."""
    sub, sup = "", None
    while True:
        j = i
        while j < len(tex) and tex[j].isspace():
            j += 1
        if j < len(tex) and tex[j] in "_^":
            arg, i = _group(tex, j + 1)
            if tex[j] == "_":
                sub = _plain(arg)
            else:
                sup = _plain(arg)
            continue
        return sub, sup, i


def _name(base: str, sub: str, sup: str | None) -> str:
    """The normalised symbol: base, `_{sub}` when subscripted, `^*` when starred (other
    superscripts are exponents or the transpose: not part of the name)."""
    return base + (f"_{{{sub}}}" if sub else "") + ("^*" if sup == "*" else "")


def symbols_in_tex(tex: str) -> set[str]:
    """The normalised symbols of one TeX expression (see the module docstring for the rules)."""
    found: set[str] = set()
    tex = re.sub(r"\\mu\s*\\(text|mathrm)\s*\{", r"\\\1{u", tex)   # `8\ \mu\text{s}`: the unit us
    i = 0
    while i < len(tex):
        ch = tex[i]
        base = None
        if ch == "\\":
            m = re.match(r"\\([A-Za-z]+)|\\(.)", tex[i:], re.S)
            cmd = m.group(1)
            i += len(m.group(0))
            if cmd is None:                       # `\,`, `\ `, `\\`, `\$`, `\{`: spacing or a sign
                continue
            if cmd in TEXT_COMMANDS:
                arg, i = _group(tex, i)
                word = arg.replace("\\_", "_")          # `\text{ and }`: a phrase (spaces), not a word
                if _WORD.fullmatch(word) and word not in NOT_NOTATION:
                    base = word
                else:                             # a unit or phrase: its scripts go with it
                    _, _, i = _scripts(tex, i)
            elif cmd in GREEK:
                base = "\\" + cmd
            elif cmd in ACCENTS:
                arg, i = _group(tex, i)
                base = f"\\{cmd}{{{_plain(arg)}}}"
            elif cmd in SET_COMMANDS:
                _, i = _group(tex, i)             # the set; its dimensions (^{d \times f}) are read on
                continue
            elif cmd in ("begin", "end"):
                _, i = _group(tex, i)
                continue
            else:                                 # \frac, \cdot, \left, \underbrace, \max, ...
                if cmd in FUNCTIONS or cmd == "underbrace":
                    if cmd == "underbrace":       # its argument is an expression: read it
                        arg, i = _group(tex, i)
                        found |= symbols_in_tex(arg)
                    _, _, i = _scripts(tex, i)    # the index under \max_i, the label under a brace
                continue
        elif ch.isalpha() and ch.isascii():
            base = ch
            i += 1
        else:
            i += 1
            continue
        if base is None:
            continue
        sub, sup, i = _scripts(tex, i)
        found.add(_name(base, sub, sup))
    return found


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else (value or "")


def notebook_symbols(nb: dict) -> set[str]:
    """The symbols of a notebook's Markdown cells and of its rendered Markdown and LaTeX outputs
    (code is not read: it names quantities in Python, not in notation)."""
    texts = []
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "markdown":
            texts.append(_text(cell.get("source")))
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            texts += [_text(data[k]) for k in ("text/markdown", "text/latex") if k in data]
    return {s for t in texts for seg in math_segments(t) for s in symbols_in_tex(seg)}


def shared_symbols(notebooks: dict[str, dict]) -> dict[str, list[str]]:
    """{symbol: [notebook names]} for the symbols used in more than one of `notebooks` ({name: nb})."""
    where: dict[str, list[str]] = defaultdict(list)
    for name, nb in sorted(notebooks.items()):
        for s in notebook_symbols(nb):
            where[s].append(name)
    return {s: names for s, names in sorted(where.items()) if len(names) > 1}


NOTATION_HEADER = ("symbol", "unit", "meaning", "defined in")


def notation_entries(markdown: str) -> list[dict[str, str]]:
    """The rows of the notation page's tables (those whose header is NOTATION_HEADER), each as
    {column: text} plus "symbols": the normalised symbols its first column names, comma-separated
    (`$b_w$, $b_a$`, `MFU, MBU`: TeX is read by symbols_in_tex, a bare word is itself)."""
    rows: list[dict[str, str]] = []
    header = None
    for line in markdown.split("\n"):
        if not line.strip().startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = tuple(c.lower() for c in cells)
            continue
        if all(re.fullmatch(r":?-{3,}:?", c) for c in cells) or header != NOTATION_HEADER:
            continue
        row = dict(zip(header, cells + [""] * (len(header) - len(cells))))
        names: set[str] = set()
        for part in re.split(r",(?![^$]*\$)", row["symbol"]):     # commas outside $...$
            part = part.strip()
            segs = math_segments(part)
            if segs:
                for seg in segs:
                    names |= symbols_in_tex(seg)
            elif part:
                names |= symbols_in_tex(f"\\text{{{part}}}") or {part}
        row["symbols"] = ",".join(sorted(names))
        rows.append(row)
    return rows


# The unit column starts with one of these (a parenthesis may follow: `dimensionless (heads)`).
# One unit per entry: a symbol that stood for two quantities (`byte; 1/s`) is split into two symbols.
UNITS = ("s", "byte", "FLOP", "byte/s", "FLOP/s", "FLOP/byte", "1/s", "dimensionless")

# Symbols the notebooks no longer use, each once used for two quantities or beside another symbol
# for the same quantity, and what replaces it: `retired_uses` names any that comes back.
RETIRED = {
    "capacity": r"M_\text{device} (memory, byte) or \lambda_\text{SLO} (serving capacity, requests/s)",
    "step_time": r"t_\text{step}",
}


def notation_problems(markdown: str, shared: dict[str, list[str]]) -> list[str]:
    """What is wrong with the notation page: each entry without a unit (from UNITS) or a meaning,
    then each shared symbol ({symbol: notebooks}, shared_symbols) that no entry names."""
    problems = []
    covered: set[str] = set()
    for row in notation_entries(markdown):
        label = row["symbol"] or "(empty symbol)"
        units = [part.split("(")[0].strip() for part in row.get("unit", "").split(";")]
        if not all(u in UNITS for u in units):
            problems.append(f"entry {label}: unit {row.get('unit', '')!r} is not one of {', '.join(UNITS)}")
        elif len(units) > 1:
            problems.append(f"entry {label}: one symbol for {len(units)} quantities ({row['unit']}): "
                            "give each quantity its own symbol")
        if not row.get("meaning"):
            problems.append(f"entry {label}: no meaning")
        covered |= set(filter(None, row["symbols"].split(",")))
    for sym, names in shared.items():
        if sym not in covered:
            problems.append(f"symbol {sym} (used in {', '.join(names)}) has no entry")
    return problems


def retired_uses(notebooks: dict[str, dict]) -> list[str]:
    """Each use of a RETIRED symbol in `notebooks` ({name: nb}: their Markdown and rendered
    outputs, as notebook_symbols reads them), as "<notebook>: <symbol> (use <replacement>)"."""
    return [f"{name}: {sym} (use {RETIRED[sym]})"
            for name, nb in sorted(notebooks.items()) for sym in sorted(notebook_symbols(nb) & set(RETIRED))]

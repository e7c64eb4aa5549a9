"""Rewrite the built HTML pages (build/book/*.html) after Sphinx: what the theme cannot do by CSS alone.

Code cells wrap at the column (custom.css sets pre-wrap) with a hanging indent: each source line
becomes its own block, `<span class="code-line" style="--hang: Nch">`, N = the line's leading
spaces + HANG_CH, so a wrapped line continues HANG_CH characters right of where its own text
starts (its indentation stays readable) and a code cell never scrolls sideways.

Pure functions over HTML strings; `postprocess_dir` applies them to every page of a built book.
"""
from __future__ import annotations

import html
import re
from pathlib import Path

HANG_CH = 4   # how far a wrapped code line's continuation sits right of the line's own text (ch)

# Pygments' highlighted block as Sphinx writes it; pygments closes every span at each line end,
# so the lines of its <pre> can be split on "\n" without cutting a tag in two.
_HIGHLIGHT_PRE = re.compile(r'(<div class="highlight"><pre>)(.*?)(</pre>)', re.S)
_TAG = re.compile(r"<[^>]+>")


def leading_spaces(line_html: str) -> int:
    """Leading spaces of one highlighted line's text (tags removed, entities decoded; a tab counts 4)."""
    text = html.unescape(_TAG.sub("", line_html)).replace("\t", "    ")
    return len(text) - len(text.lstrip(" "))


def hang_code_lines(page: str) -> str:
    """Every highlighted <pre> of `page` with each source line in a hanging-indent block (see the
    module docstring). A <pre> already rewritten is left alone (idempotent)."""
    def one_pre(m: re.Match) -> str:
        body = m.group(2)
        if 'class="code-line"' in body:
            return m.group(0)
        lines = body.split("\n")
        if lines and lines[-1] == "":
            lines.pop()               # the newline that ends the last line
        spans = [f'<span class="code-line" style="--hang: {leading_spaces(line) + HANG_CH}ch">{line}</span>'
                 for line in lines]
        return m.group(1) + "".join(spans) + m.group(3)
    return _HIGHLIGHT_PRE.sub(one_pre, page)


def postprocess_dir(out: Path) -> int:
    """Apply the rewrites to every .html page in `out` (the built book); returns pages changed."""
    n = 0
    for page in sorted(out.glob("*.html")):
        text = page.read_text(encoding="utf-8")
        new = hang_code_lines(text)
        if new != text:
            page.write_text(new, encoding="utf-8")
            n += 1
    return n

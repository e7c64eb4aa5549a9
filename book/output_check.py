"""Does a built book page show every output its notebook shows in JupyterLab, in order?

Pure functions, used by tests/test_book.py (on the fixture book) and tests/browser/ (on every
page of build/book/). The comparison works on words, so it does not depend on how an output is
styled:

- an output is what JupyterLab displays of it: of its MIME types the richest one it renders
  (HTML > Markdown > image > plain text); a live widget view is left out (a static page has no
  kernel; its default view is drawn as a separate image output, which is checked), and so is
  the stored result of an exercise check (PASS means nothing to a reader who has not run it: the
  book shows a folded hint there, tested in tests/test_book.py);
- its fingerprint is its words (runs of letters and digits, lower case; math, Markdown link
  targets, code-fence info strings, the text of links to a figure or equation, which the book
  replaces by their number, and HTML tags left out, since the page renders them differently),
  or for an image the SHA-256 of its bytes;
- the page's stream is the words of its HTML with math removed and, at each <img>, the SHA-256
  of the file it loads;
- each output must be found in the page after the previous one: its words in order, with at most
  MAX_GAP other words between two of them (the book adds a figure or equation number, a callout
  title). A missing output, or one shown out of order, is reported with its cell and first words.
"""
from __future__ import annotations

import base64
import hashlib
import html
import re
from html.parser import HTMLParser
from pathlib import Path

from convert import exercise_check_id   # book/convert.py, next to this file

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
IMAGE_MIMES = ("image/png", "image/jpeg", "image/gif", "image/svg+xml")
MAX_GAP = 3            # words the page may insert between two words of an output
MAX_WORDS = 400        # an output's fingerprint: its first MAX_WORDS words (long tables)

_WORD = re.compile(r"[a-z0-9]+")
# MyST's dollarmath: $$...$$ blocks, and $...$ with no space inside the delimiters and no digit
# right after the closing one ("$2 per hour" is not math).
_MATH = re.compile(r"\$\$.+?\$\$|\$(?=\S)[^$\n]*?\S\$(?!\d)|\\\(.+?\\\)|\\\[.+?\\\]", re.S)
_MD_LINK_TARGET = re.compile(r"\]\([^)\s]*\)")
# A link to a figure or an equation: the book replaces its text by the number ("Eq. (3)").
_MD_NUMBERED_LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(#(?:fig|eq)-[^)\s]*\)")
_MD_FENCE = re.compile(r"^[ \t]*(```|~~~)[^\n]*$", re.M)
_TAG = re.compile(r"<!--.*?-->|<[^>]+>", re.S)


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else (value or "")


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def image_token(data: bytes) -> str:
    return "image:" + hashlib.sha256(data).hexdigest()[:16]


def shown_mime(output: dict) -> str | None:
    """The MIME type JupyterLab displays for `output` (None: nothing a static page can show)."""
    if output.get("output_type") == "stream":
        return "stream"
    if output.get("output_type") == "error":
        return "error"
    data = output.get("data", {})
    if WIDGET_MIME in data:
        return None
    for mime in ("text/html", "text/markdown", *IMAGE_MIMES, "text/latex", "text/plain"):
        if mime in data:
            return mime
    return None


def fingerprint(output: dict) -> list[str]:
    """The words (or the image token) that show `output` was rendered; [] when it shows none."""
    mime = shown_mime(output)
    if mime is None:
        return []
    if mime == "stream":
        return words(_text(output.get("text")))
    if mime == "error":
        return words(_text(output.get("evalue")))
    value = _text(output["data"][mime])
    if mime in ("image/png", "image/jpeg", "image/gif"):
        return [image_token(base64.b64decode(value))]
    if mime == "image/svg+xml":
        return [image_token(value.encode())]
    if mime == "text/html":
        return words(html.unescape(_TAG.sub(" ", _MATH.sub(" ", value))))
    if mime == "text/markdown":
        text = _MD_NUMBERED_LINK.sub(" ", _MD_FENCE.sub(" ", _MATH.sub(" ", value)))
        text = _TAG.sub(" ", _MD_LINK_TARGET.sub("]", text))
        return words(html.unescape(text))
    if mime == "text/latex":
        return []
    return words(value)


def notebook_outputs(nb: dict) -> list[tuple[int, str, list[str]]]:
    """(cell number from 1, MIME shown, fingerprint) of every output the notebook shows."""
    out = []
    for i, cell in enumerate(nb.get("cells", []), start=1):
        if cell.get("cell_type") != "code" or exercise_check_id(_text(cell.get("source"))):
            continue
        for o in cell.get("outputs", []):
            fp = fingerprint(o)
            if fp:
                out.append((i, shown_mime(o), fp[:MAX_WORDS]))
    return out


class _PageWords(HTMLParser):
    """The words of a page (math skipped) with an image token at each <img>."""

    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}

    def __init__(self, page: Path):
        super().__init__(convert_charrefs=True)
        self.page = page
        self.tokens: list[str] = []
        self._stack: list[bool] = []     # per open element: is its content skipped

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img" and a.get("src"):
            path = (self.page.parent / a["src"].split("#")[0].split("?")[0])
            if path.is_file():
                data = path.read_bytes()
                self.tokens.append(image_token(data))
            elif a["src"].startswith("data:"):
                self.tokens.append(image_token(base64.b64decode(a["src"].split(",", 1)[1])))
        if tag in self.VOID:
            return
        classes = (a.get("class") or "").split()
        skip = tag in ("script", "style") or "math" in classes or tag.startswith("mjx-")
        self._stack.append(skip or (bool(self._stack) and self._stack[-1]))

    def handle_endtag(self, tag):
        if tag not in self.VOID and self._stack:
            self._stack.pop()

    def handle_data(self, data):
        if not (self._stack and self._stack[-1]):
            self.tokens += words(_MATH.sub(" ", data))


def page_tokens(page: Path) -> list[str]:
    p = _PageWords(page)
    p.feed(page.read_text(errors="replace"))
    return p.tokens


def find_in_order(needle: list[str], hay: list[str], start: int, max_gap: int = MAX_GAP) -> int | None:
    """The index just after the first match of `needle` in hay[start:] (its words in order, at
    most `max_gap` other words between two of them), or None."""
    first = needle[0]
    for i in range(start, len(hay)):
        if hay[i] != first:
            continue
        j = i + 1
        for w in needle[1:]:
            for k in range(j, min(j + max_gap + 1, len(hay))):
                if hay[k] == w:
                    j = k + 1
                    break
            else:
                break
        else:
            return j
    return None


def missing_outputs(nb: dict, page: Path) -> list[str]:
    """Every output of `nb` that `page` does not show (or shows out of order), in words."""
    hay = page_tokens(page)
    cursor, missing = 0, []
    for cell, mime, fp in notebook_outputs(nb):
        end = find_in_order(fp, hay, cursor)
        if end is None:
            anywhere = find_in_order(fp, hay, 0)
            where = "out of order" if anywhere is not None else "missing"
            missing.append(f"cell {cell} ({mime}) {where}: {' '.join(fp[:12])}")
        else:
            cursor = end
    return missing

"""Rewrite the built HTML pages (build/book/*.html) after Sphinx: what the theme cannot do by CSS alone.

Code cells wrap at the column (custom.css sets pre-wrap) with a hanging indent: each source line
becomes its own block, `<span class="code-line" style="--hang: Nch">`, N = the line's leading
spaces + HANG_CH, so a wrapped line continues HANG_CH characters right of where its own text
starts (its indentation stays readable) and a code cell never scrolls sideways.

Figures: a notebook's figure output carries its phone variant in its image/png metadata
(inferlab.notebook.phone_figures.image_metadata: "narrow" PNG and width, "text_px"). `extract_narrow_images` moves
the variant out of the staged notebook into _static/narrow/<key>.png (key: a hash of the main
PNG, which Sphinx copies to _images/ unchanged) with a manifest; `picture_figures` then turns each
such <img> into a <picture> whose <source> offers the variant below NARROW_MEDIA_PX of viewport,
and writes on the <img> the figure's smallest text (data-text-px, CSS px at its own width) and
the variant's width (data-narrow-width), which the browser tests use.

Pure functions over HTML strings; `postprocess_dir` applies them to every page of a built book.
"""
from __future__ import annotations

import base64
import hashlib
import html
import json
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


NARROW_DIR = "narrow"          # under _static/: the phone variants and their manifest
MANIFEST = "manifest.json"
NARROW_MEDIA_PX = 720          # viewports up to this width get the phone variant


def image_key(png: bytes) -> str:
    return hashlib.sha256(png).hexdigest()[:20]


def extract_narrow_images(nb: dict, dest: Path) -> int:
    """Move every image/png output's "narrow" metadata of `nb` (changed in place) into
    dest/<key>.png and record {key: {"width", "text_px"}} in dest/manifest.json; returns how many."""
    n = 0
    manifest_path = dest / MANIFEST
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    for cell in nb.get("cells", []):
        for out in cell.get("outputs", []):
            meta = (out.get("metadata") or {}).get("image/png")
            png = (out.get("data") or {}).get("image/png")
            if not isinstance(meta, dict) or not png:
                continue
            narrow = meta.pop("narrow", None)
            text_px = meta.get("text_px")
            if narrow is None and text_px is None:
                continue
            key = image_key(base64.b64decode("".join(png) if isinstance(png, list) else png))
            entry = {"text_px": text_px}
            if narrow:
                dest.mkdir(parents=True, exist_ok=True)
                (dest / f"{key}.png").write_bytes(base64.b64decode(narrow["png"]))
                entry["width"] = int(narrow["width"])
            manifest[key] = entry
            n += 1
    if manifest:
        dest.mkdir(parents=True, exist_ok=True)
        manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True))
    return n


_IMG = re.compile(r'<img\b[^>]*\bsrc="(?P<src>_images/[^"]+\.png)"[^>]*>')


def picture_figures(page: str, out: Path) -> str:
    """Each <img> of `page` whose PNG (under `out`, the built book) has an entry in the manifest:
    data-text-px (and data-narrow-width) written on it; with a phone variant, wrapped in a
    <picture> offering it at 2 device px per CSS px below NARROW_MEDIA_PX (module docstring)."""
    manifest_path = out / "_static" / NARROW_DIR / MANIFEST
    if not manifest_path.exists():
        return page
    manifest = json.loads(manifest_path.read_text())

    def one(m: re.Match) -> str:
        tag = m.group(0)
        if "data-text-px" in tag:
            return tag
        path = out / m.group("src")
        entry = manifest.get(image_key(path.read_bytes())) if path.is_file() else None
        if entry is None:
            return tag
        attrs = f' data-text-px="{entry["text_px"]}"'
        if "width" in entry:
            attrs += f' data-narrow-width="{entry["width"]}"'
        new = tag[:-1].rstrip("/").rstrip() + attrs + ">"
        if "width" not in entry:
            return new
        key = image_key(path.read_bytes())
        return (f'<picture><source media="(max-width: {NARROW_MEDIA_PX}px)" '
                f'srcset="_static/{NARROW_DIR}/{key}.png 2x" width="{entry["width"]}">{new}</picture>')
    return _IMG.sub(one, page)


def postprocess_dir(out: Path) -> int:
    """Apply the rewrites to every .html page in `out` (the built book); returns pages changed."""
    n = 0
    for page in sorted(out.glob("*.html")) + sorted(out.glob("docs/*.html")):
        text = page.read_text(encoding="utf-8")
        new = fold_audit(picture_figures(hang_code_lines(text), out))
        if new != text:
            page.write_text(new, encoding="utf-8")
            n += 1
    return n


# The closing "Checking the book's numbers" section of a chapter page (convert.AUDIT_HEADING): folded
# under its heading, which carries the counts. book/_static/folds.js opens every fold for printing.
_AUDIT_SECTION = re.compile(r'<section id="checking-the-book-s-numbers[^"]*">\s*(?:<span id="[^"]*"></span>\s*)*'
                            r'(<h2>.*?</h2>)', re.S)
_SECTION_TAG = re.compile(r"<section\b|</section>")


def fold_audit(page: str) -> str:
    """The audit section's content inside <details class="audit">, its <h2> as the <summary>.
    A page without it, or already folded, comes back unchanged."""
    m = _AUDIT_SECTION.search(page)
    if not m or 'class="audit"' in page:
        return page
    depth, end = 1, None
    for t in _SECTION_TAG.finditer(page, m.end()):
        depth += 1 if t.group(0) == "<section" else -1
        if depth == 0:
            end = t.start()
            break
    if end is None:
        raise ValueError("the audit section has no closing </section>")
    head = page[:m.start(1)] + '<details class="audit"><summary>' + m.group(1) + "</summary>"
    return head + page[m.end():end] + "</details>\n" + page[end:]

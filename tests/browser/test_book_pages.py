"""The built book (build/book/, `make book`) in headless Chromium with the network switched off.

Every page is loaded once from file:// (as a reader who opens index.html does); the checks then
read what that load recorded: console errors, requests, TeX left unrendered, images, the width
of text outputs. A full-page screenshot of each page goes to build/book-shots/. Links and
resource URLs are checked on the HTML files themselves.
"""
from __future__ import annotations

import base64
import json
import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from waits import open_page, wait_for, wait_for_page

ROOT = Path(__file__).resolve().parents[2]
BOOK = ROOT / "build" / "book"
SHOTS = ROOT / "build" / "book-shots"
CONTENT_WIDTH_PX = 1000   # the text column width at which text tables must fit

PAGES = sorted(p.name for p in BOOK.glob("*.html")) if BOOK.is_dir() else ["index.html"]
CHAPTERS = [p for p in PAGES if re.match(r"15_\d_\d_", p)]
# Pages whose text has math (so MathJax must have rendered something there).
MATH_PAGES = ["index.html", *CHAPTERS, "references.html"]

# TeX that MathJax should have replaced: delimiters, or a command with a brace argument.
RAW_TEX = re.compile(r"\$\$|\\\(|\\\)|\\\[|\\\]|\\(frac|text|left|right|approx|cdot|qquad|mathrm)\b"
                     r"|\$[^$\n]{0,80}[\\^_{}][^$\n]{0,80}\$|\$[A-Za-z]\$")

MEASURE = """
const main = document.querySelector('main') || document.body;
const clone = main.cloneNode(true);
clone.querySelectorAll('pre, code, script, style, mjx-container, .highlight, textarea, .MathJax')
     .forEach(e => e.remove());
const article = document.querySelector('article.bd-article') || main;
const outputs = [...document.querySelectorAll('div.cell_output pre, div.output pre')];
return {
  text: clone.textContent,
  math: document.querySelectorAll('mjx-container').length,
  math_errors: document.querySelectorAll('mjx-merror').length,
  images: [...document.images].map(i => ({src: i.getAttribute('src'), complete: i.complete,
                                           width: i.naturalWidth, alt: i.getAttribute('alt') || ''})),
  figures: [...document.querySelectorAll('figure')].map(f => ({
      id: f.id, caption: (f.querySelector('figcaption') || {textContent: ''}).textContent.trim(),
      alt: (f.querySelector('img') || {alt: ''}).alt})),
  solutions: [...document.querySelectorAll('details.hide')].filter(
      d => (d.querySelector('summary') || {textContent: ''}).textContent.includes('Show solution'))
      .map(d => ({open: d.open, code_visible: d.querySelector('.cell_input') ?
                  d.querySelector('.cell_input').checkVisibility() : null})),
  article_width: article.clientWidth,
  links: [...article.querySelectorAll('a[href]')].map(a => a.getAttribute('href')),
  overflowing: outputs.filter(p => p.scrollWidth > p.clientWidth + 1)
                      .map(p => [p.scrollWidth, p.clientWidth, p.textContent.split('\\n')[0].slice(0, 80),
                                 parseFloat(getComputedStyle(p).fontSize), getComputedStyle(p).overflowX]),
  n_outputs: outputs.length,
  tables_overflowing: [...article.querySelectorAll('table')]
      .filter(t => t.getBoundingClientRect().right > article.getBoundingClientRect().right + 1).length,
  page_overflow: document.documentElement.scrollWidth - window.innerWidth,
};
"""


def _window_for_content_width(driver, width_px: int) -> None:
    """Resize the window so that the book's text column is `width_px` wide."""
    open_page(driver, (BOOK / CHAPTERS[0]).as_uri() if CHAPTERS else (BOOK / "index.html").as_uri())
    for _ in range(6):
        w = driver.execute_script("return document.querySelector('article.bd-article').clientWidth")
        if width_px <= w <= width_px + 2:
            return
        size = driver.get_window_size()
        driver.set_window_size(size["width"] + width_px - w, size["height"])
        width = driver.get_window_size()["width"]
        wait_for(driver, f"the page to take the window's new width, {width} px", "return window.outerWidth",
                 lambda outer: outer == width)
    pytest.fail(f"could not size the text column to {width_px} px (it stays at {w} px)")


def _full_page_screenshot(driver, path: Path, max_height_px: int = 30000) -> None:
    """The whole page as one JPEG: the viewport is made as tall as the page for the capture."""
    width, height = driver.execute_script(
        "return [window.innerWidth, document.documentElement.scrollHeight]")
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": width, "height": min(height, max_height_px), "deviceScaleFactor": 1, "mobile": False})
    try:
        shot = driver.execute_cdp_cmd("Page.captureScreenshot", {"format": "jpeg", "quality": 70})
        path.write_bytes(base64.b64decode(shot["data"]))
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


@pytest.fixture(scope="module")
def rendered(driver, book_dir):
    """Load every page offline; returns {page: measurements, console errors, requests}."""
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.emulateNetworkConditions", {
        "offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1})
    _window_for_content_width(driver, CONTENT_WIDTH_PX)
    driver.get_log("browser"), driver.get_log("performance")      # discard the sizing load
    SHOTS.mkdir(parents=True, exist_ok=True)
    results = {}
    for page in PAGES:
        open_page(driver, (book_dir / page).as_uri())
        state = wait_for_page(driver, page, images=True)
        data = driver.execute_script(MEASURE)
        data["state"] = state
        data["console_errors"] = [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        data["requests"] = [
            m["params"]["request"]["url"] for m in
            (json.loads(e["message"])["message"] for e in driver.get_log("performance"))
            if m.get("method") == "Network.requestWillBeSent"]
        _full_page_screenshot(driver, SHOTS / page.replace(".html", ".jpg"))
        results[page] = data
    return results


def test_the_book_has_its_pages():
    assert "index.html" in PAGES and "errata.html" in PAGES and "references.html" in PAGES
    assert len(CHAPTERS) == 5, CHAPTERS  # four subsections and the serving lab


@pytest.mark.parametrize("page", PAGES)
def test_page_loads_without_console_errors(rendered, page):
    assert rendered[page]["state"] == "ready"
    assert rendered[page]["console_errors"] == []


@pytest.mark.parametrize("page", PAGES)
def test_page_requests_nothing_but_local_files(rendered, page):
    external = [u for u in rendered[page]["requests"] if not u.startswith(("file:", "data:", "blob:"))]
    assert external == []
    assert rendered[page]["requests"], "no request recorded at all: the request log is not working"


@pytest.mark.parametrize("page", PAGES)
def test_no_raw_tex_visible(rendered, page):
    found = sorted({m.group(0) for m in RAW_TEX.finditer(rendered[page]["text"])})
    assert found == [], f"unrendered TeX on {page}: {found[:10]}"
    assert rendered[page]["math_errors"] == 0
    if page in MATH_PAGES:
        assert rendered[page]["math"] > 0, "MathJax rendered nothing on a page with equations"


@pytest.mark.parametrize("page", PAGES)
def test_every_image_loaded_with_alt_text(rendered, page):
    for img in rendered[page]["images"]:
        assert img["complete"] and img["width"] > 0, f"image not loaded: {img['src']}"
        assert len(img["alt"].strip()) >= 20, f"image without real alt text: {img['src']} alt={img['alt']!r}"


@pytest.mark.parametrize("page", CHAPTERS)
def test_figures_are_numbered_per_page_with_captions(rendered, page):
    """Every image is a figure; figures are numbered 1..n on each chapter page, with a caption."""
    figures, images = rendered[page]["figures"], rendered[page]["images"]
    assert figures, f"no figure on {page}"
    assert len(figures) == len(images), f"an image outside a numbered figure on {page}"
    for n, fig in enumerate(figures, start=1):
        assert fig["caption"].startswith(f"Figure {n} "), fig["caption"][:60]
        assert len(fig["caption"]) > len(f"Figure {n} ") + 20, "caption without text"
        assert fig["id"].startswith("fig-"), fig


@pytest.mark.parametrize("page", CHAPTERS)
def test_exercise_solutions_are_hidden_behind_a_toggle(rendered, page):
    nb = json.loads((ROOT / "chapters" / page.replace(".html", ".ipynb")).read_text())
    n_solutions = sum(1 for c in nb["cells"] if c["cell_type"] == "code"
                      and "".join(c["source"]).lstrip().startswith("# SOLUTION"))
    solutions = rendered[page]["solutions"]
    assert len(solutions) == n_solutions
    assert all(not s["open"] and s["code_visible"] is False for s in solutions), solutions


@pytest.mark.parametrize("page", PAGES)
def test_text_tables_fit_a_1000px_column(rendered, page):
    """Text tables fit a 1000 px column; one too wide even at 11 px (the recorded-runs table)
    scrolls inside its own box instead of shrinking further."""
    data = rendered[page]
    # the window is sized for a 1000 px column on a chapter page (within a scrollbar's width);
    # pages without the right-hand table of contents get a wider one
    assert data["article_width"] >= CONTENT_WIDTH_PX - 20
    if page in CHAPTERS:
        assert data["article_width"] <= CONTENT_WIDTH_PX + 20
    # an output too wide for the column even at the smallest font (11 px) scrolls in its own box
    too_wide = [o for o in data["overflowing"] if not (abs(o[3] - 11) < 0.01 and o[4] in ("auto", "scroll"))]
    assert too_wide == [], f"{len(too_wide)} of {data['n_outputs']} text outputs scroll sideways at a font above 11 px"
    assert len(data["overflowing"]) <= 1, f"text outputs at the 11 px floor: {data['overflowing']}"
    assert data["tables_overflowing"] == 0
    assert data["page_overflow"] <= 0


# ------------------------------------------------------------------ checks on the HTML files
class _Scan(HTMLParser):
    """Ids (with duplicates), erratum anchors outside a callout, links and resource URLs of one page."""
    RESOURCE = {"script": ("src",), "link": ("href",), "img": ("src", "srcset"), "source": ("src", "srcset"),
                "iframe": ("src",), "video": ("src", "poster"), "audio": ("src",), "embed": ("src",),
                "object": ("data",)}

    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}

    def __init__(self):
        super().__init__()
        self.ids, self.links, self.resources, self.styles = set(), [], [], []
        self.duplicate_ids, self.loose_errata, self._element_ids = [], [], set()
        self._in_style = False
        self._open: list[tuple[str, bool]] = []    # (tag, is an admonition) of the open elements

    def handle_endtag(self, tag):
        while self._open:
            if self._open.pop()[0] == tag:
                break

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            if a["id"] in self._element_ids:
                self.duplicate_ids.append(a["id"])
            self._element_ids.add(a["id"])
            self.ids.add(a["id"])
            if a["id"].startswith("erratum-") and not any(adm for _, adm in self._open):
                self.loose_errata.append(a["id"])
        if tag == "a" and a.get("name"):     # an old-style anchor (a form field's name is none)
            self.ids.add(a["name"])
        if tag not in self.VOID:
            self._open.append((tag, "admonition" in (a.get("class") or "").split()))
        if tag == "a" and a.get("href"):
            self.links.append(a["href"])
        for key in self.RESOURCE.get(tag, ()):
            if a.get(key):
                self.resources.append(a[key])
        if a.get("style"):
            self.styles.append(a["style"])
        self._in_style = tag == "style"

    def handle_data(self, data):
        if self._in_style:
            self.styles.append(data)


def _scan(path: Path) -> _Scan:
    s = _Scan()
    s.feed(path.read_text(errors="replace"))
    return s


EXTERNAL = re.compile(r"^(https?:)?//", re.I)
CSS_URL = re.compile(r"""url\(\s*['"]?([^'")]+)|@import\s+['"]([^'"]+)""")


def test_no_page_or_stylesheet_refers_to_an_external_resource(book_dir):
    bad = []
    for page in book_dir.rglob("*.html"):
        s = _scan(page)
        bad += [(page.name, u) for u in s.resources if EXTERNAL.match(u.strip())]
        bad += [(page.name, u) for css in s.styles for u in filter(None, sum(CSS_URL.findall(css), ()))
                if EXTERNAL.match(u.strip())]
    for css in book_dir.rglob("*.css"):
        bad += [(css.name, u) for u in filter(None, sum(CSS_URL.findall(css.read_text(errors="replace")), ()))
                if EXTERNAL.match(u.strip())]
    assert bad == []


def test_ids_are_unique_and_erratum_anchors_sit_in_callouts(book_dir):
    """A duplicate id makes `page.html#id` ambiguous (claim rows, errata, figures); an
    `erratum-<id>` anchor must be the callout the erratum blockquote became."""
    for page in book_dir.glob("*.html"):
        s = _scan(page)
        assert s.duplicate_ids == [], f"{page.name}: {s.duplicate_ids[:5]}"
        assert s.loose_errata == [], f"{page.name}: erratum anchors outside a callout {s.loose_errata[:5]}"


def test_every_internal_link_resolves(book_dir):
    scans = {p: _scan(p) for p in book_dir.glob("*.html")}
    broken, checked = [], 0
    for page, s in scans.items():
        for href in s.links:
            parts = urlsplit(href)
            if parts.scheme or href.startswith(("//", "mailto:", "javascript:")):
                continue
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if target.is_dir():
                target = target / "index.html"
            checked += 1
            if not target.is_file():
                broken.append((page.name, href, "no such file"))
            elif parts.fragment and target.suffix == ".html":
                ids = scans[target].ids if target in scans else _scan(target).ids
                if unquote(parts.fragment) not in ids:
                    broken.append((page.name, href, "no such anchor"))
    assert broken == []
    assert checked > 50, f"only {checked} internal links found: the scan is not seeing the pages"


def test_cross_links_between_notebooks_and_to_errata_in_the_text(rendered):
    """The pages' own text (not only the sidebar) links the other chapters and the errata page."""
    for page in CHAPTERS:
        others = [h for h in rendered[page]["links"]
                  if re.match(r"15_\d_\d_\w+\.html", h) and not h.startswith(page)]
        assert others, f"the text of {page} links no other chapter page"
    index_links = [urlsplit(h).path for h in rendered["index.html"]["links"]]
    assert "errata.html" in index_links
    assert all(c in index_links for c in CHAPTERS)

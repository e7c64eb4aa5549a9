"""The book read anywhere: every page at a phone's 390 x 844 and a laptop's 1280 x 900 (CSS px).

At both widths: no page scrolls sideways; every display equation fits its box or scrolls inside
its own box (never clipped); no visible text is rendered under 11 CSS px, MathJax glyphs and
figures included (a figure's smallest text as shown: its size at the image's own width, written
on the <img> by the build from the figure's fonts, scaled by displayed / own width; a phone is
given each figure's phone variant, book/postprocess.py), and no figure scrolls inside its box;
code cells wrap instead of scrolling sideways; every cell
of a table in an output (claims tables, whatever their columns) is on screen, not behind a
sideways scroll. A screenshot of the top of each page at each width goes to build/book-shots/.
"""
from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest

from test_book_pages import PAGES
from waits import open_page, wait_for_page

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "build" / "book-shots"
# (width, height, mobile emulation, device pixel ratio): the phone as Chrome's device mode shows one
# (a mobile viewport at 3 device pixels per CSS px), the laptop as a desktop window.
SIZES = {"phone": (390, 844, True, 3), "laptop": (1280, 900, False, 1)}
MIN_TEXT_PX = 11.0

PROBE = """
const W = document.documentElement.clientWidth;
const vis = e => e.checkVisibility({opacityProperty: true, visibilityProperty: true});
const out = {width: W, scroll_width: document.documentElement.scrollWidth};
const small = [];
const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
for (let n = walker.nextNode(); n; n = walker.nextNode()) {
  const el = n.parentElement;
  if (!n.textContent.trim() || !el || !vis(el)) continue;
  if (el.closest('mjx-assistive-mml, script, style, noscript, .visually-hidden, .sr-only')) continue;
  const r = document.createRange(); r.selectNodeContents(n);
  const rect = r.getBoundingClientRect();
  if (rect.width < 1 || rect.height < 1) continue;
  const px = parseFloat(getComputedStyle(el).fontSize);
  if (px < %(min)s) small.push([px, el.tagName.toLowerCase() + '.' + el.className, n.textContent.trim().slice(0, 50)]);
}
for (const el of document.querySelectorAll('mjx-c')) {
  if (!vis(el) || el.getBoundingClientRect().width < 1) continue;
  const px = parseFloat(getComputedStyle(el).fontSize);
  if (px < %(min)s) small.push([px, 'math', el.closest('mjx-container').textContent.slice(0, 50)]);
}
out.small = small;
const scrolls = v => v === 'auto' || v === 'scroll';
out.equations = [...document.querySelectorAll('mjx-container[display="true"]')].filter(vis).map(c => {
  const math = c.querySelector('mjx-math').getBoundingClientRect();
  let box = c;
  while (box && getComputedStyle(box).overflowX === 'visible') box = box.parentElement;
  const s = getComputedStyle(box), b = box.getBoundingClientRect();
  return {tex: c.textContent.slice(0, 50), width: math.width, box_width: box.clientWidth,
          scrolls_x: scrolls(s.overflowX), box_left: b.left, box_right: b.right,
          overflow_y: box.scrollHeight - box.clientHeight, scrolls_y: scrolls(s.overflowY)};
});
out.figures = [...document.querySelectorAll('figure img')].map(i => {
  // The phone variant (a <picture> source at 2x) when the page picked it, else the image itself.
  const narrow = (i.currentSrc || '').includes('/_static/narrow/');
  const own = narrow ? i.naturalWidth : (parseFloat(i.getAttribute('width')) || i.naturalWidth);
  const box = i.closest('figure'), b = box.getBoundingClientRect();
  return {src: i.getAttribute('src'), narrow, own, shown: i.getBoundingClientRect().width,
          text_px_own: parseFloat(i.dataset.textPx), narrow_width: parseFloat(i.dataset.narrowWidth),
          wider: i.getBoundingClientRect().width > box.clientWidth + 1,
          box_scrolls: box.scrollWidth > box.clientWidth + 1, box_right: b.right};
});
out.code_scrolling = [...document.querySelectorAll('div.cell_input pre, div.highlight pre')].filter(vis)
  .filter(p => p.scrollWidth > p.clientWidth + 1)
  .map(p => [p.scrollWidth, p.clientWidth, p.textContent.split('\\n')[0].slice(0, 60)]);
out.n_code = document.querySelectorAll('div.cell_input pre').length;
// A wrapped code line (taller than one line) continues right of its own first character.
out.code_hang = [...document.querySelectorAll('div.cell_input pre span.code-line')].filter(vis).map(l => {
  const lh = parseFloat(getComputedStyle(l).lineHeight), r = l.getBoundingClientRect();
  if (r.height < 1.5 * lh) return null;
  const rng = document.createRange(); rng.selectNodeContents(l);
  const rects = [...rng.getClientRects()].filter(x => x.width > 0);
  const first = rects.filter(x => x.top < rects[0].top + lh / 2);
  const text = l.textContent, lead = text.length - text.trimStart().length;
  const probe = document.createElement('span'); probe.textContent = 'xxxxxxxxxx';
  l.parentElement.appendChild(probe); const ch = probe.getBoundingClientRect().width / 10; probe.remove();
  const start = Math.min(...first.map(x => x.left)) + lead * ch;   // where the line's own text starts
  const cont = rects.filter(x => x.top >= rects[0].top + lh / 2);
  return {line: text.trim().slice(0, 40), lead, first_left: start, cont_left: Math.min(...cont.map(x => x.left))};
}).filter(x => x);
out.table_cells = [...document.querySelectorAll('div.cell_output table td')].filter(vis).map(td => {
  const r = td.getBoundingClientRect();
  return [td.getAttribute('data-label'), td.textContent.trim().slice(0, 30), r.left, r.right];
});
return out;
""" % {"min": MIN_TEXT_PX}


@pytest.fixture(scope="module")
def measured(driver, book_dir):
    """{(size, page): probe result} for every page at both sizes."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    results = {}
    try:
        for size, (w, h, mobile, dpr) in SIZES.items():
            driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                                   {"width": w, "height": h, "deviceScaleFactor": dpr, "mobile": mobile})
            for page in PAGES:
                open_page(driver, (book_dir / page).as_uri())
                # every fold open, as when printing or when a reader unfolds it: folded text must fit too
                driver.execute_script("document.querySelectorAll('details').forEach(d => { d.open = true; })")
                assert wait_for_page(driver, f"{size}-{page}", images=True) == "ready"
                results[size, page] = driver.execute_script(PROBE)
                shot = driver.execute_cdp_cmd("Page.captureScreenshot", {"format": "jpeg", "quality": 60})
                (SHOTS / f"{size}-{page.replace('.html', '.jpg')}").write_bytes(base64.b64decode(shot["data"]))
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    return results


CASES = [(size, page) for size in SIZES for page in PAGES]
IDS = [f"{size}-{page}" for size, page in CASES]


@pytest.mark.parametrize("size, page", CASES, ids=IDS)
def test_no_sideways_page_scroll(measured, size, page):
    m = measured[size, page]
    assert m["width"] <= SIZES[size][0]
    assert m["scroll_width"] <= m["width"], f"the page is {m['scroll_width']} px wide in a {m['width']} px window"


@pytest.mark.parametrize("size, page", CASES, ids=IDS)
def test_display_equations_fit_or_scroll_in_their_own_box(measured, size, page):
    m = measured[size, page]
    for eq in m["equations"]:
        assert eq["box_left"] >= -1 and eq["box_right"] <= m["width"] + 1, f"equation box off screen: {eq}"
        assert eq["width"] <= eq["box_width"] + 1 or eq["scrolls_x"], f"clipped equation: {eq}"
        assert eq["overflow_y"] <= 1 or eq["scrolls_y"], f"equation clipped at top or bottom: {eq}"


@pytest.mark.parametrize("size, page", CASES, ids=IDS)
def test_no_text_under_11px(measured, size, page):
    small = measured[size, page]["small"]
    assert small == [], f"{len(small)} texts under {MIN_TEXT_PX:g} px, e.g. {small[:5]}"


@pytest.mark.parametrize("size, page", CASES, ids=IDS)
def test_figures_show_their_text_at_11px_or_more_and_never_scroll(measured, size, page):
    """Each figure's smallest text as shown: its size at the image's own width (data-text-px, from
    the figure's fonts: inferlab.notebook.phone_figures.min_text_px) x displayed width / own width. The figure fits
    its box (no sideways scroll inside it, nothing cut off)."""
    m = measured[size, page]
    for fig in m["figures"]:
        assert fig["text_px_own"] == fig["text_px_own"], f"{fig['src']} has no data-text-px (no figure metadata)"
        text_px = fig["text_px_own"] * fig["shown"] / fig["own"]
        assert text_px >= MIN_TEXT_PX - 0.05, (f"{fig['src']} ({'phone variant' if fig['narrow'] else 'own'}) shown at "
                                               f"{fig['shown']:.0f} of {fig['own']:.0f} px: text {text_px:.1f} px")
        assert not fig["wider"] and not fig["box_scrolls"], f"{fig['src']} scrolls sideways in its figure box"
        assert fig["box_right"] <= m["width"] + 1


def test_phones_get_the_phone_variant_and_laptops_the_figure(measured):
    """Every chapter figure has a phone variant; the phone shows it and the laptop the full figure
    (so the check above measured both, not one of them twice)."""
    for size in SIZES:
        figs = [f for (s, p), m in measured.items() if s == size for f in m["figures"]]
        assert len(figs) > 30, (size, len(figs))
        assert all(f["narrow_width"] > 0 for f in figs), [f["src"] for f in figs if not f["narrow_width"] > 0][:5]
        assert all(f["narrow"] == (size == "phone") for f in figs), (size, [f["src"] for f in figs][:5])


@pytest.mark.parametrize("size, page", CASES, ids=IDS)
def test_output_tables_keep_every_column_on_screen(measured, size, page):
    """Claims tables: claim, book, ours, verdict (and any column added later) all visible."""
    m = measured[size, page]
    off = [c for c in m["table_cells"] if c[2] < -1 or c[3] > m["width"] + 1]
    assert off == [], f"{len(off)} table cells off screen, e.g. {off[:4]}"


@pytest.mark.parametrize("size, page", CASES, ids=IDS)
def test_no_code_cell_scrolls_sideways(measured, size, page):
    """Code cells wrap at the column (book/postprocess.py, custom.css) instead of scrolling."""
    m = measured[size, page]
    assert m["code_scrolling"] == [], (f"{len(m['code_scrolling'])} of {m['n_code']} code cells scroll "
                                       f"sideways, e.g. {m['code_scrolling'][:3]}")


@pytest.mark.parametrize("size, page", CASES, ids=IDS)
def test_wrapped_code_lines_keep_their_indentation(measured, size, page):
    """A code line that wraps continues right of where its own text starts (a hanging indent),
    so a continuation never reads as a new, less indented line."""
    m = measured[size, page]
    flat = [h for h in m["code_hang"] if h["cont_left"] <= h["first_left"] + 1]
    assert flat == [], f"{len(flat)} wrapped code lines continue at or left of their start, e.g. {flat[:3]}"


def test_code_cells_were_measured(measured):
    """The two checks above are not vacuous: the chapters' code cells were seen, and some of their
    lines wrap at each size (the longest lines are wider than a laptop's column)."""
    for size in SIZES:
        n_code = sum(m["n_code"] for (s, p), m in measured.items() if s == size and p.startswith("15_"))
        n_wrapped = sum(len(m["code_hang"]) for (s, p), m in measured.items() if s == size and p.startswith("15_"))
        assert n_code > 150 and n_wrapped > 10, (size, n_code, n_wrapped)


def test_claims_tables_were_measured(measured):
    """The table check above is not vacuous: the chapters' claims tables were seen at both sizes,
    with their columns labelled for the stacked phone layout."""
    for size in SIZES:
        cells = [c for (s, p), m in measured.items() if s == size and re.match(r"15_", p) for c in m["table_cells"]]
        labels = {c[0] for c in cells}
        assert len(cells) > 100 and {"claim", "book", "ours", "verdict"} <= labels, (size, len(cells), labels)

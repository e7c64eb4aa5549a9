"""The book read as the web reader meets it (issue 53), in Chromium from file:// with the network off:
each chapter page's three interview drills (an anchor, an answer box, a folded answer with numbers);
an interactive figure that does not fit says so and names what would, and marks B_max where it fits;
on a phone no plot toolbar covers a figure's title and no legend covers a control; a display equation
that scrolls shows a cue; no page shows the test runner's markers or tells a static image to move its
controls; the cheat sheet is in the book and prints on one sheet."""
from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest

from waits import open_page, wait_for, wait_for_page

ROOT = Path(__file__).resolve().parents[2]
BOOK = ROOT / "build" / "book"
SECTIONS = {"15.1.1": "15_1_1_prefill.html", "15.1.2": "15_1_2_decode_kv_cache.html",
            "15.2.1": "15_2_1_ttft_itl.html", "15.2.2": "15_2_2_batching.html"}
DRILLS = [(s, n) for s in SECTIONS for n in (1, 2, 3)]
PAGES = sorted(p.name for p in BOOK.glob("*.html")) + sorted(f"docs/{p.name}" for p in BOOK.glob("docs/*.html")) \
    if BOOK.is_dir() else []
INTERACTIVE = sorted(p.name for p in BOOK.glob("15_*.html") if "inferlab-interactive" in p.read_text()) \
    if BOOK.is_dir() else []
# a number with a unit, as an answer states it
WITH_UNIT = re.compile(r"\d[\d,.]*\s?(ms|s|GB|tokens/s|FLOP/byte|×|%)")


@pytest.fixture(scope="module")
def offline(driver, book_dir):
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.emulateNetworkConditions", {
        "offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1})
    driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    driver.set_window_size(1280, 900)
    return driver


DRILL = """
const anchor = document.getElementById(arguments[0]);
if (!anchor) return null;
const all = [...document.querySelectorAll('details.interview-answer, div.admonition.your-answer, [id^="interview-"]')];
const answer = document.querySelector(`details.interview-answer[data-drill="${arguments[0]}"]`);
const box = [...document.querySelectorAll('div.admonition.your-answer')]
  .find(b => anchor.compareDocumentPosition(b) & Node.DOCUMENT_POSITION_FOLLOWING);
const audit = document.querySelector('details.audit');
return {
  answer: !!answer, open: answer ? answer.open : null,
  box_between: !!box && !!answer && !!(box.compareDocumentPosition(answer) & Node.DOCUMENT_POSITION_FOLLOWING),
  before_audit: !!answer && !!audit && !!(answer.compareDocumentPosition(audit) & Node.DOCUMENT_POSITION_FOLLOWING),
  anchor_top: anchor.getBoundingClientRect().top,
};
"""


@pytest.mark.parametrize("section, number", DRILLS, ids=[f"{s}-{n}" for s, n in DRILLS])
def test_each_drill_opens_its_folded_answer_with_numbers(offline, section, number):
    from selenium.webdriver.common.by import By
    anchor = f"interview-{section.replace('.', '-')}-{number}"
    open_page(offline, (BOOK / SECTIONS[section]).as_uri() + "#" + anchor)
    wait_for_page(offline, SECTIONS[section])    # nothing moves under the click: typeset, figure drawn
    s = offline.execute_script(DRILL, anchor)
    assert s, f"{SECTIONS[section]}: no element with id {anchor}"
    assert s["answer"] and s["open"] is False, f"{anchor}: no folded answer ({s})"
    assert s["box_between"], f"{anchor}: no 'Your answer' box between the question and its answer"
    assert s["before_audit"], f"{anchor}: the drill is not before the closing audit"
    details = offline.find_element(By.CSS_SELECTOR, f'details.interview-answer[data-drill="{anchor}"]')
    summary = details.find_element(By.TAG_NAME, "summary")
    offline.execute_script("arguments[0].scrollIntoView({block: 'center'})", summary)
    summary.click()
    wait_for(offline, f"{anchor}: the click on its summary to open the answer", lambda d: details.get_attribute("open"),
             lambda opened: opened is not None)
    assert details.get_attribute("open") is not None, f"{anchor}: clicking the summary did not open it"
    text = details.text
    assert len(WITH_UNIT.findall(text)) >= 3, f"{anchor}: the opened answer has no numbers: {text[:300]!r}"
    assert "answer" in text.lower() and "Follow-up" in text


SELECT = """
const [menu, value] = arguments;
const s = document.querySelector(`div.inferlab-menus select[data-menu="${menu}"]`);
const i = [...s.options].findIndex(o => o.textContent === value);
if (i < 0) return false;
s.value = String(i); s.dispatchEvent(new Event('change'));
return true;
"""
NOTES = """
const d = document.querySelector('div.inferlab-interactive');
return {notes: ((d.layout || {}).annotations || []).map(a => a.text.replace(/<br>/g, ' ')),
        shown: [...d.querySelectorAll('.annotation-text')].map(t => t.textContent),
        marks: (d.data || []).filter(t => t.visible === true).map(t => t.name)};
"""


@pytest.mark.parametrize("page", ["15_1_2_decode_kv_cache.html", "15_2_2_batching.html"])
def test_llama_2_70b_on_one_h100_says_it_does_not_fit_and_which_tp_degree_does(offline, page):
    open_page(offline, (BOOK / page).as_uri())
    wait_for_page(offline, page)                       # the figure drawn, its menus built (data-ready)
    before = offline.execute_script(NOTES)
    assert before["notes"] == [] and any(n.startswith("B_max = ") for n in before["marks"]), \
        f"{page}: the book's scenario should fit and mark B_max: {before}"
    assert offline.execute_script(SELECT, "model", "llama-2-70b") and offline.execute_script(SELECT, "accelerator", "h100-sxm")
    # the menus' change redraws the plot and its note (Plotly.restyle, then Plotly.relayout)
    after = wait_for(offline, f"{page}: the note that llama-2-70b does not fit on one h100-sxm, drawn, and no B_max mark",
                     NOTES, lambda s: "does not fit on one h100-sxm" in " ".join(s["notes"])
                     and "tensor parallelism 2" in " ".join(s["notes"]) and s["shown"]
                     and not any(n.startswith("B_max = ") for n in s["marks"]))
    note = " ".join(after["notes"])
    assert "does not fit on one h100-sxm" in note and "tensor parallelism 2" in note, after
    assert "tensor parallelism 2" in " ".join(after["shown"]).replace("  ", " ") or after["shown"], after
    assert not any(n.startswith("B_max = ") for n in after["marks"])


BOXES = """
const box = e => { if (!e) return null; const b = e.getBoundingClientRect();
                   return b.width > 0 && b.height > 0 ? {l: b.left, t: b.top, r: b.right, b: b.bottom} : null; };
return [...document.querySelectorAll('div.inferlab-interactive')].map(d => {
  const bar = d.previousElementSibling && d.previousElementSibling.classList.contains('inferlab-plot-title')
    ? d.previousElementSibling.previousElementSibling : null;
  return {
    modebar: box(d.querySelector('.modebar-container .modebar')), plotly_title: box(d.querySelector('.gtitle')),
    title: box(d.parentNode.querySelector('p.inferlab-plot-title')), legend: box(d.querySelector('.legend')),
    slider: box(d.querySelector('.slider-container')), xtitle: box(d.querySelector('.xtitle')),
    menus: bar && bar.classList.contains('inferlab-menus') ? box(bar) : null,
    selects: [...d.parentNode.querySelectorAll('div.inferlab-menus select')].map(box),
  };
});
"""


def overlap(a, b) -> bool:
    return bool(a and b and a["l"] < b["r"] - 1 and b["l"] < a["r"] - 1 and a["t"] < b["b"] - 1 and b["t"] < a["b"] - 1)


@pytest.mark.parametrize("page", INTERACTIVE)
def test_on_a_phone_no_toolbar_covers_a_title_and_no_legend_covers_a_control(driver, book_dir, page):
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": 390, "height": 844, "deviceScaleFactor": 3, "mobile": True})
    try:
        open_page(driver, (BOOK / page).as_uri())
        wait_for_page(driver, page)                    # drawn and decluttered (data-ready)
        figs = driver.execute_script(BOXES)
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    assert figs, f"{page}: no interactive figure"
    for f in figs:
        assert f["title"], f"{page}: the figure has no title above it"
        for title in (f["title"], f["plotly_title"]):
            assert not overlap(f["modebar"], title), f"{page}: the plot's toolbar covers the title ({f})"
        for control in [f["slider"], f["menus"], *f["selects"]]:
            assert not overlap(f["legend"], control), f"{page}: the legend covers a control ({f})"
        assert not overlap(f["xtitle"], f["slider"]), f"{page}: the slider covers the x axis's title ({f})"


CUES = """
return [...document.querySelectorAll('mjx-container[display="true"]')].filter(c => c.checkVisibility()).map(c => {
  const holder = c.closest('div.math') || c, cue = holder.nextElementSibling;
  return {wide: c.scrollWidth > c.clientWidth + 1, scrolls: ['auto', 'scroll'].includes(getComputedStyle(c).overflowX),
          cue: !!cue && cue.classList.contains('scroll-cue') && cue.checkVisibility(),
          cue_px: cue && cue.classList.contains('scroll-cue') ? parseFloat(getComputedStyle(cue).fontSize) : null,
          tex: c.textContent.slice(0, 40)};
});
"""


def test_on_a_phone_an_equation_that_scrolls_says_so(driver, book_dir):
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": 390, "height": 844, "deviceScaleFactor": 3, "mobile": True})
    wide = []
    try:
        for page in list(SECTIONS.values()) + ["cheatsheet.html"]:
            open_page(driver, (BOOK / page).as_uri())
            wait_for_page(driver, page)                # typeset, then the cues placed (data-scroll-cues)
            for eq in driver.execute_script(CUES):
                if eq["wide"]:
                    wide.append((page, eq))
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    assert wide, "no equation wider than a phone: the check is vacuous"
    for page, eq in wide:
        assert eq["scrolls"] and eq["cue"] and eq["cue_px"] >= 11, f"{page}: a wide equation without its cue: {eq}"


TEXT = "document.querySelectorAll('details').forEach(d => { d.open = true; }); return document.body.innerText;"


def test_no_page_shows_the_test_runners_markers_or_tells_a_static_image_to_move(offline):
    assert len(PAGES) > 10
    for page in PAGES:
        open_page(offline, (BOOK / page).as_uri())
        wait_for_page(offline, page)                   # with what the page's scripts add (titles, menus)
        text = offline.execute_script(TEXT)
        assert "NBVAL" not in text, f"{page} shows a test marker"
        if not page.startswith("docs/"):
            assert "Move the controls" not in text, f"{page} tells a static image to move its controls"
            assert "Run All Cells" not in text, f"{page} gives a JupyterLab instruction as if it were the page's"
            assert "double-click this cell" not in text, page


def test_the_cheat_sheet_is_in_the_book_and_prints_on_one_sheet(offline):
    page = BOOK / "cheatsheet.html"
    assert page.is_file(), "no cheat sheet in the book"
    open_page(offline, (BOOK / "index.html").as_uri())
    links = offline.execute_script("return [...document.querySelectorAll('.bd-sidebar a[href]')].map(a => a.getAttribute('href'))")
    assert "cheatsheet.html" in links, "the cheat sheet is not in the book's navigation"
    open_page(offline, page.as_uri())
    wait_for_page(offline, page.name)                  # typeset: the text and the printed height as read
    text = offline.execute_script("return document.querySelector('article').innerText")
    assert "Rules of thumb" in text and "295" in text and "FLOP/byte" in text
    pdf = base64.b64decode(offline.execute_cdp_cmd("Page.printToPDF", {
        "paperWidth": 8.27, "paperHeight": 11.69, "preferCSSPageSize": True})["data"])
    pages = len(re.findall(rb"/Type\s*/Page[^s]", pdf))
    assert pages == 1, f"the cheat sheet prints on {pages} pages"

"""The book's folds in Chromium (file://, offline): each chapter page's closing audit section is
folded under a heading that counts its verdicts, printing opens every fold (and closes them after),
a link into a fold opens it, and the docs/*.md reference pages are in the book after the chapters."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from waits import open_page, wait_for, wait_for_page

ROOT = Path(__file__).resolve().parents[2]
BOOK = ROOT / "build" / "book"
CHAPTERS = sorted(p.name for p in BOOK.glob("15_1_*.html")) + sorted(p.name for p in BOOK.glob("15_2_[12]_*.html")) \
    if BOOK.is_dir() else []
COUNTED = re.compile(r"Checking the book.s numbers: (\d+) numbers checked: (\d+) \u2713")

STATE = """
const audit = document.querySelector('details.audit');
const all = [...document.querySelectorAll('details')];
return {
  audit: audit ? {open: audit.open, summary: audit.querySelector('summary').textContent,
                  tables: audit.querySelectorAll('table, pre').length} : null,
  n_details: all.length, n_open: all.filter(d => d.open).length,
  self_checks: document.querySelectorAll('details.self-check').length,
  audit_top: audit ? audit.getBoundingClientRect().top + window.scrollY : null,
  first_claims_table: (() => { const t = document.querySelector('table.inferlab-claims, tr[id^="claim-"]');
                               return t ? t.closest('details.audit') !== null : null; })(),
};
"""


@pytest.fixture(scope="module")
def offline(driver, book_dir):
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.emulateNetworkConditions", {
        "offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1})
    return driver


@pytest.mark.parametrize("page", CHAPTERS)
def test_the_audit_is_folded_after_the_lesson_with_its_counts(offline, page):
    open_page(offline, (BOOK / page).as_uri())
    s = offline.execute_script(STATE)
    assert s["audit"], f"{page}: no folded audit section"
    assert not s["audit"]["open"], f"{page}: the audit section is open by default"
    m = COUNTED.search(s["audit"]["summary"])
    assert m and int(m.group(1)) >= int(m.group(2)) > 0, s["audit"]["summary"]
    assert s["audit"]["tables"] > 0
    assert s["first_claims_table"] is True, f"{page}: a claims table outside the closing section"
    assert s["self_checks"] >= 2, f"{page}: {s['self_checks']} self-check folds"


@pytest.mark.parametrize("page", CHAPTERS[:2])
def test_printing_opens_every_fold_and_closes_them_after(offline, page):
    open_page(offline, (BOOK / page).as_uri())
    before = offline.execute_script(STATE)
    assert before["n_open"] < before["n_details"]
    offline.execute_script("window.dispatchEvent(new Event('beforeprint'))")
    during = offline.execute_script(STATE)
    assert during["n_open"] == during["n_details"], during
    offline.execute_script("window.dispatchEvent(new Event('afterprint'))")
    assert offline.execute_script(STATE)["n_open"] == before["n_open"]


def test_a_link_into_the_audit_opens_it(offline):
    page = BOOK / "15_1_2_decode_kv_cache.html"
    open_page(offline, page.as_uri())
    anchor = offline.execute_script(
        "const e = document.querySelector('details.audit [id^=\"erratum-\"], details.audit tr[id^=\"claim-\"]');"
        "return e ? e.id : null")
    assert anchor, "no erratum or claim anchor inside the audit of 15.1.2"
    open_page(offline, page.as_uri() + "#" + anchor)     # the same document: folds.js acts on hashchange
    s = wait_for(offline, f"the link to #{anchor} to open the audit section", STATE,
                 lambda s: s["audit"] and s["audit"]["open"])
    assert s["audit"]["open"] is True


def test_the_reference_part_lists_the_docs_pages(offline):
    docs = sorted((ROOT / "docs").glob("*.md"))
    assert docs, "docs/ has no page"
    open_page(offline, (BOOK / "index.html").as_uri())
    links = offline.execute_script(
        "return [...document.querySelectorAll('.bd-sidebar a[href]')].map(a => a.getAttribute('href'))")
    for d in docs:
        assert f"docs/{d.stem}.html" in links, f"docs/{d.name} is not in the book's navigation"
        assert (BOOK / "docs" / f"{d.stem}.html").is_file()


def test_search_from_file_finds_sections_without_errors(offline):
    offline.get_log("browser")                                   # discard earlier pages' messages
    open_page(offline, (BOOK / "search.html").as_uri() + "?q=KV+cache")
    # the index script loads, then the results render one by one, then the status line says it is done
    wait_for(offline, "the search for 'KV cache' to finish (its status line)",
             "const s = document.querySelector('.search-summary'); return s ? s.innerText : null",
             lambda status: status and ("Search finished" in status or "did not match any documents" in status))
    links = offline.execute_script(
        "return [...document.querySelectorAll('#search-results a, ul.search a')].map(a => a.getAttribute('href'))")
    assert links, "the search for 'KV cache' from file:// found nothing"
    assert any("15_1_2_decode_kv_cache.html#" in h for h in links), f"no section of 15.1.2 among {links[:8]}"
    errors = [e["message"] for e in offline.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors[:3]


FIRST = """
const figs = [...document.querySelectorAll('figure')];
const first = figs.length ? figs[0].getBoundingClientRect().top + window.scrollY : null;
const article = document.querySelector('article.bd-article');
const wide = [...article.querySelectorAll('table, div.math, mjx-container[display="true"]')]
  .filter(e => !e.closest('details:not([open])'))
  .filter(e => e.scrollWidth > e.clientWidth + 1 || e.getBoundingClientRect().right > article.getBoundingClientRect().right + 1)
  .map(e => [e.tagName, e.scrollWidth, e.clientWidth, e.textContent.slice(0, 40)]);
const table = document.querySelector('article table');
return {first: first, first_id: figs.length ? figs[0].id : null, wide: wide,
        table_top: table && !table.closest('details:not([open])') ? table.getBoundingClientRect().top + window.scrollY : null};
"""


@pytest.mark.parametrize("page", CHAPTERS + ["15_2_3_serving_lab.html"])
def test_at_1280_px_the_first_figure_is_within_two_screens_and_nothing_scrolls_sideways(offline, page):
    offline.set_window_size(1280, 900)
    open_page(offline, (BOOK / page).as_uri())
    wait_for_page(offline, page)           # MathJax typesets the equations, the figure is drawn, after loading
    s = offline.execute_script(FIRST)
    screen = offline.get_window_size()["height"]          # the 1280 x 900 screen of the issue
    assert s["first"] is not None and s["first"] < 2 * screen, f"{page}: first figure at {s['first']:.0f} px"
    assert not s["wide"], f"{page}: {len(s['wide'])} blocks wider than the column, e.g. {s['wide'][:3]}"
    if page.startswith("15_1_2"):
        assert s["first_id"] == "fig-15-1-2-kv-cache"
        assert s["table_top"] is None or s["table_top"] > s["first"], "a table before the KV-cache diagram"


def test_the_serving_labs_audit_is_folded_after_the_lesson_with_its_statement_counts(offline):
    open_page(offline, (BOOK / "15_2_3_serving_lab.html").as_uri())
    s = offline.execute_script(STATE)
    assert s["audit"] and not s["audit"]["open"], "the lab's closing section is not folded"
    m = re.search(r"Checking the book.s numbers: (\d+) statements checked: (\d+) \u2713", s["audit"]["summary"])
    assert m and int(m.group(1)) >= int(m.group(2)) > 0, s["audit"]["summary"]
    assert s["audit"]["tables"] > 0
    assert s["self_checks"] >= 5, f"{s['self_checks']} self-check folds"

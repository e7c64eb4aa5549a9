"""The lecture's share of each chapter page, measured in Chromium at a laptop's 1280 px (issue 39:
the lesson comes first and is at least 60 % of the page). Every fold is opened first, as printing
does, so that a fold cannot hide an audit that has grown: the lecture is everything in the article
above the closing audit section (`details.audit`), exercises included; the page is the article."""
from __future__ import annotations

from pathlib import Path

import pytest

from waits import open_page, wait_for_page

ROOT = Path(__file__).resolve().parents[2]
BOOK = ROOT / "build" / "book"
PAGES = sorted(p.name for p in BOOK.glob("15_*.html")) if BOOK.is_dir() else []
MIN_LECTURE_SHARE = 0.60
# Pages measured under the share, to be fixed in their notebooks (strict: the mark fails once they pass).
# 15.2.2 (2026-12-04: 55 %) passes since its audit was made compact (2026-12-05: 61 %).
UNDER: dict[str, str] = {}

MEASURE = """
document.querySelectorAll('details').forEach(d => { d.open = true; });
const article = document.querySelector('article.bd-article') || document.querySelector('main');
const box = article.getBoundingClientRect();
const audit = document.querySelector('details.audit');
const auditTop = audit ? audit.getBoundingClientRect().top : box.bottom;
return {page_px: box.height, lecture_px: auditTop - box.top, audit: !!audit};
"""


def lecture_share(driver, page: str) -> dict:
    open_page(driver, (BOOK / page).as_uri())
    wait_for_page(driver, page)         # heights as read: equations typeset, interactive figures drawn
    m = driver.execute_script(MEASURE)
    m["share"] = m["lecture_px"] / m["page_px"]
    return m


@pytest.fixture(scope="module")
def laptop(driver, book_dir):
    driver.set_window_size(1280, 900)
    return driver


def test_there_are_chapter_pages():
    assert len(PAGES) >= 5, PAGES


@pytest.mark.parametrize("page", [pytest.param(p, marks=pytest.mark.xfail(reason=UNDER[p], strict=True))
                                  if p in UNDER else p for p in PAGES])
def test_the_lecture_is_at_least_60_percent_of_the_page(laptop, page):
    m = lecture_share(laptop, page)
    assert m["page_px"] > 900, f"{page}: the article is {m['page_px']:.0f} px high: not measured"
    assert m["share"] >= MIN_LECTURE_SHARE, (
        f"{page}: the lecture is {m['share']:.0%} of the page ({m['lecture_px']:,.0f} of {m['page_px']:,.0f} px, "
        f"every fold open); the audit below it is {1 - m['share']:.0%}")


def test_the_measure_counts_an_opened_audit_against_the_lecture(laptop):
    """The measure itself: a page whose audit section is made ten times taller loses lecture share."""
    page = next(p for p in PAGES if lecture_share(laptop, p)["audit"])
    before = lecture_share(laptop, page)
    laptop.execute_script("const a = document.querySelector('details.audit');"
                          "a.style.height = (a.getBoundingClientRect().height * 10) + 'px';")
    after = laptop.execute_script(MEASURE.replace("document.querySelectorAll('details').forEach(d => { d.open = true; });", ""))
    assert after["lecture_px"] / after["page_px"] < before["share"]

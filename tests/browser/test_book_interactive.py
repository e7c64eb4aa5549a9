"""The book's interactive figures in Chromium, offline from file://: each chapter page has one,
drawn by the book's own plotly.js; moving its slider changes what the plot shows."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BOOK = ROOT / "build" / "book"
CHAPTERS = sorted(p.name for p in BOOK.glob("15_[12]_[12]_*.html")) if BOOK.is_dir() else []

DRAWN = """
const divs = [...document.querySelectorAll('div.inferlab-interactive')];
return divs.map(d => ({
  drawn: !!d.querySelector('.main-svg'),
  visible: (d.data || []).map(t => t.visible === true),
  paths: [...d.querySelectorAll('.scatterlayer path.js-line')].map(p => p.getAttribute('d')).join('|'),
  slider: !!d.querySelector('.slider-rail-touch-rect'),
}));
"""


@pytest.fixture(scope="module")
def offline(driver, book_dir):
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.emulateNetworkConditions", {
        "offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1})
    driver.set_window_size(1280, 900)
    return driver


def test_every_chapter_page_is_there():
    assert len(CHAPTERS) == 4, CHAPTERS


@pytest.mark.parametrize("page", CHAPTERS)
def test_the_interactive_figure_responds_to_its_slider(offline, page):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    offline.get((BOOK / page).as_uri())
    before = offline.execute_script(DRAWN)
    assert before, f"{page}: no interactive figure"
    fig = before[0]
    assert fig["drawn"] and fig["slider"], f"{page}: plotly did not draw the figure ({fig})"
    assert sum(fig["visible"]) >= 1
    div = offline.find_element(By.CSS_SELECTOR, "div.inferlab-interactive")
    offline.execute_script("arguments[0].scrollIntoView({block: 'center'})", div)
    rail = div.find_element(By.CSS_SELECTOR, ".slider-rail-touch-rect")
    width = rail.size["width"]
    # the slider's active step is the scenario's; click the end of the rail furthest from it
    active = fig["visible"].index(True)
    x = (width / 2 - 3) if active < len(fig["visible"]) / 2 else -(width / 2 - 3)
    ActionChains(offline).move_to_element_with_offset(rail, int(x), 0).click().perform()
    after = offline.execute_script(DRAWN)[0]
    assert after["visible"] != fig["visible"], f"{page}: the slider did not change the visible series"
    assert after["paths"] != fig["paths"], f"{page}: the plotted lines did not change"


def test_plotly_is_served_with_the_book_not_fetched(offline):
    page = (BOOK / CHAPTERS[0]).read_text()
    scripts = re.findall(r'<script[^>]+src="([^"]+)"', page)
    assert any(s.startswith("_static/plotly/plotly-basic.min.js") for s in scripts), scripts
    assert not [s for s in scripts if s.startswith(("http:", "https:", "//"))], scripts
    assert (BOOK / "_static" / "plotly" / "plotly-basic.min.js").stat().st_size > 500_000

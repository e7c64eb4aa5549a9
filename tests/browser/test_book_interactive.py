"""The book's interactive figures in Chromium, offline from file://: each chapter page and the
serving lab have one, drawn by the book's own plotly.js; moving its slider, or choosing another
entry of each of its menus (model, accelerator, scheduler: interactive.MenuGrid), changes what the
plot shows."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from waits import open_page, wait_for, wait_for_page

ROOT = Path(__file__).resolve().parents[2]
BOOK = ROOT / "build" / "book"
CHAPTERS = sorted(p.name for p in BOOK.glob("15_[12]_[12]_*.html")) if BOOK.is_dir() else []
LAB = "15_2_3_serving_lab.html"
# pages whose interactive figure carries menus (the spec's "controls", HTML-escaped in data-spec)
MENU_PAGES = sorted(p.name for p in BOOK.glob("15_*.html") if "&quot;controls&quot;:" in p.read_text()) \
    if BOOK.is_dir() else []

DRAWN = """
const divs = [...document.querySelectorAll('div.inferlab-interactive')];
return divs.map(d => ({
  drawn: !!d.querySelector('.main-svg'),
  visible: (d.data || []).map(t => t.visible === true),
  paths: [...d.querySelectorAll('.scatterlayer path.js-line')].map(p => p.getAttribute('d')).join('|'),
  slider: !!d.querySelector('.slider-rail-touch-rect'),
  step: d.layout && d.layout.sliders ? d.layout.sliders[0].active : null,
  steps: d.layout && d.layout.sliders ? d.layout.sliders[0].steps.length : 0,
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


@pytest.mark.parametrize("page", CHAPTERS + [LAB])
def test_the_interactive_figure_responds_to_its_slider(offline, page):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    open_page(offline, (BOOK / page).as_uri())
    wait_for_page(offline, page)                   # the figure drawn by the page's script (data-ready)
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
    x = (width / 2 - 3) if fig["step"] < fig["steps"] / 2 else -(width / 2 - 3)
    ActionChains(offline).move_to_element_with_offset(rail, int(x), 0).click().perform()
    after = wait_for(offline, f"{page}: the slider to change the visible series and the plotted lines", DRAWN,
                     lambda s: s[0]["visible"] != fig["visible"] and s[0]["paths"] != fig["paths"])[0]
    assert after["visible"] != fig["visible"], f"{page}: the slider did not change the visible series"
    assert after["paths"] != fig["paths"], f"{page}: the plotted lines did not change"


def test_plotly_is_served_with_the_book_not_fetched(offline):
    page = (BOOK / CHAPTERS[0]).read_text()
    scripts = re.findall(r'<script[^>]+src="([^"]+)"', page)
    assert any(s.startswith("_static/plotly/plotly-basic.min.js") for s in scripts), scripts
    assert not [s for s in scripts if s.startswith(("http:", "https:", "//"))], scripts
    assert (BOOK / "_static" / "plotly" / "plotly-basic.min.js").stat().st_size > 500_000


def test_the_serving_lab_has_a_scheduler_menu():
    assert LAB in MENU_PAGES, MENU_PAGES


@pytest.mark.parametrize("page", MENU_PAGES)
def test_each_menu_changes_the_plot(offline, page):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    open_page(offline, (BOOK / page).as_uri())
    wait_for_page(offline, page)           # the figure drawn and its menus built (data-ready)
    menus = offline.find_elements(By.CSS_SELECTOR, "div.inferlab-menus select")
    assert menus, f"{page}: the figure's menus were not drawn"
    for menu in menus:
        name = menu.get_attribute("data-menu")
        offline.execute_script("arguments[0].scrollIntoView({block: 'center'})", menu)
        before = offline.execute_script(DRAWN)[0]
        choice = Select(menu)
        now = int(choice.first_selected_option.get_attribute("value"))
        choice.select_by_value(str(1 if now == 0 else 0))
        after = wait_for(offline, f"{page}: another {name} to change the visible series and the plotted lines, "
                                  "with a series visible", DRAWN,
                         lambda s: sum(s[0]["visible"]) >= 1 and s[0]["visible"] != before["visible"]
                         and s[0]["paths"] != before["paths"])[0]
        assert sum(after["visible"]) >= 1, f"{page}: nothing visible after choosing another {name}"
        assert after["visible"] != before["visible"], f"{page}: the {name} menu did not change the visible series"
        assert after["paths"] != before["paths"], f"{page}: the {name} menu did not change the plotted lines"

"""Display equations fit their column on a laptop: at 1280 x 900 CSS px, with every fold open (an
interview answer, a self-check, the audit), no display equation is wider than the column it sits in,
so none scrolls sideways inside its own box. (test_book_responsive allows a scroll box on phones; on a
laptop there is room for every equation the pages show, and a folded one is read as often as any.)
"""
from __future__ import annotations

import pytest

from test_book_pages import PAGES
from waits import open_page, wait_for_page

LAPTOP = (1280, 900)
SLACK_PX = 1.0

# Each visible display equation's rendered width against its column: the nearest ancestor that clips or
# scrolls (MathJax's own scroll box, when the build adds one), else the block the equation sits in.
PROBE = """
const vis = e => e.checkVisibility({opacityProperty: true, visibilityProperty: true});
return [...document.querySelectorAll('mjx-container[display="true"]')].filter(vis).map(c => {
  const math = c.querySelector('mjx-math').getBoundingClientRect();
  let column = c.parentElement;
  for (let e = c.parentElement; e && e !== document.body; e = e.parentElement) {
    if (getComputedStyle(e).overflowX !== 'visible') { column = e; break; }
  }
  while (column && column.clientWidth === 0) column = column.parentElement;
  const folded = c.closest('details') !== null;
  return {tex: (c.querySelector('mjx-assistive-mml') || c).textContent.slice(0, 70), width: math.width,
          column: column.clientWidth, folded, where: column.tagName.toLowerCase() + '.' + column.className};
});
"""


@pytest.fixture(scope="module")
def equations(driver, book_dir):
    """{page: [equation]} with every fold open, at the laptop size."""
    out = {}
    w, h = LAPTOP
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": w, "height": h, "deviceScaleFactor": 1, "mobile": False})
    try:
        for page in PAGES:
            open_page(driver, (book_dir / page).as_uri())
            wait_for_page(driver, page)
            driver.execute_script("document.querySelectorAll('details').forEach(d => { d.open = true; })")
            wait_for_page(driver, page)   # MathJax typesets what the folds opened
            out[page] = driver.execute_script(PROBE)
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    return out


@pytest.mark.parametrize("page", PAGES)
def test_no_display_equation_is_wider_than_its_column(equations, page):
    wide = [f"{'folded ' if e['folded'] else ''}{e['tex']!r}: {e['width']:.0f} px in {e['column']} px ({e['where']})"
            for e in equations[page] if e["width"] > e["column"] + SLACK_PX]
    assert not wide, f"{page} at {LAPTOP[0]} px: " + "; ".join(wide)


def test_equations_were_measured(equations):
    """The probe found display equations, some of them inside folds (else the test above is empty)."""
    all_eqs = [e for eqs in equations.values() for e in eqs]
    assert len(all_eqs) >= 20 and any(e["folded"] for e in all_eqs), len(all_eqs)

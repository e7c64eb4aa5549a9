"""Bounded waits for the browser tests: a test waits for the state it then checks (the page loaded,
MathJax's typesetting done, the interactive figure drawn with its menus, a slider's or a menu's effect
on the plot) instead of reading the page at a fixed moment, which on a slower CPU comes before the
page's own scripts have done their work. Each wait polls; when its condition does not hold within
WAIT_S seconds it fails, saying what it waited for, how long, and the state it saw last.

WAIT_S is 30 s, or INFERLAB_BROWSER_WAIT_S. A module of its own, not conftest: `tests/` has a
conftest too, so `import conftest` would be ambiguous.
"""
from __future__ import annotations

import os
from typing import Any, Callable

import pytest

WAIT_S = float(os.environ.get("INFERLAB_BROWSER_WAIT_S", "30"))
POLL_S = 0.1


def _brief(value: Any) -> Any:
    """The value with each long string cut (an SVG path of a few thousand characters)."""
    if isinstance(value, str) and len(value) > 80:
        return value[:40] + f"... ({len(value)} characters)"
    if isinstance(value, dict):
        return {k: _brief(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_brief(v) for v in value]
    return value


def _shown(value: Any, limit: int = 1000) -> str:
    text = repr(_brief(value))
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


def wait_for(driver, what: str, read: str | Callable, until: Callable[[Any], Any] = bool, *,
             args: tuple = (), timeout: float | None = None):
    """Poll `read` (a script run in the page, with `args`, or a function of the driver) until
    `until(state)` holds, and return that state; fail after `timeout` (WAIT_S) seconds with
    "timed out after N s waiting for <what>; last seen: <state>"."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    timeout = WAIT_S if timeout is None else timeout
    seen: list = [None]

    def holds(d):
        seen[0] = d.execute_script(read, *args) if isinstance(read, str) else read(d)
        return until(seen[0])

    try:
        WebDriverWait(driver, timeout, poll_frequency=POLL_S).until(holds)
        return seen[0]
    except TimeoutException:
        pass
    pytest.fail(f"timed out after {timeout:g} s waiting for {what}; last seen: {_shown(seen[0])}")


# The page as it is now: 'new' once the document that `open_page` left has gone, its URL, whether it
# has loaded (the load event: scripts, stylesheets and images).
_LOADED = """
return {new: window.inferlabLeaving !== true, url: location.href, state: document.readyState};
"""


def open_page(driver, url: str) -> None:
    """Navigate to `url` and wait until the browser shows the new page, loaded. A URL that differs
    from the current one only by its fragment (`page.html#anchor` on `page.html`) scrolls the same
    document; any other navigation, a reload of the same URL included, replaces the document, and
    the wait is for the new one (the old one is marked before leaving it)."""
    here = driver.execute_script("window.inferlabLeaving = true; return location.href")
    same_document = "#" in url and here.split("#")[0] == url.split("#")[0]
    if same_document:
        driver.execute_script("window.inferlabLeaving = false")
    driver.get(url)
    wait_for(driver, f"{url} to load", _LOADED,
             lambda s: s["new"] and s["url"] == url and s["state"] == "complete")


# What the page's own scripts still have to do, in words ([] once nothing is left): MathJax's first
# typesetting (MathJax.startup.promise), each interactive figure drawn, its menus built and decluttered
# (book/_static/interactive.js sets data-ready="1"), the scroll cues placed (book/_static/scrollcue.js
# sets data-scroll-cues="done" on <body>).
_PENDING = """
const pending = [];
if (document.readyState !== 'complete') return ['the document to load (' + document.readyState + ')'];
if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
  if (!('inferlabTypeset' in window)) {
    window.inferlabTypeset = 'pending';
    MathJax.startup.promise.then(() => { window.inferlabTypeset = 'done'; },
                                 e => { window.inferlabTypeset = 'failed: ' + e; });
  }
  if (window.inferlabTypeset !== 'done') pending.push('MathJax to typeset the page (' + window.inferlabTypeset + ')');
}
const figures = [...document.querySelectorAll('div.inferlab-interactive')];
const undrawn = figures.filter(d => d.getAttribute('data-ready') !== '1').length;
if (undrawn) pending.push(undrawn + ' of ' + figures.length + ' interactive figures to be drawn (data-ready="1")');
if (document.querySelector('script[src*="scrollcue.js"]') && document.body.getAttribute('data-scroll-cues') !== 'done')
  pending.push('the scroll cues to be placed (data-scroll-cues="done")');
return pending;
"""

# Every image loaded and decoded: lazy images load once they are near the viewport, so each is made
# eager and scrolled to; then back to the top. The outcome is left in window.inferlabImages.
_LOAD_IMAGES = """
window.inferlabImages = 'pending';
(async () => {
  for (const img of document.images) {
    img.loading = 'eager';
    img.scrollIntoView();
    try { await img.decode(); } catch (e) {}
  }
  window.scrollTo(0, 0);
  window.inferlabImages = 'ready';
})().catch(e => { window.inferlabImages = 'error: ' + e; });
"""


def wait_for_page(driver, page: str, images: bool = False) -> str:
    """Wait until the page's own scripts are done (see _PENDING); with `images`, also until every
    image is loaded and decoded. Returns 'ready', or 'error: ...' if loading the images threw."""
    wait_for(driver, f"{page} to settle (MathJax's typesetting, the interactive figures, the scroll cues)",
             _PENDING, lambda pending: pending == [])
    if not images:
        return "ready"
    driver.execute_script(_LOAD_IMAGES)
    return wait_for(driver, f"{page}: every image loaded and decoded", "return window.inferlabImages",
                    lambda s: s != "pending")

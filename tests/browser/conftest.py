"""Browser tests of the rendered book and of JupyterLab: headless Chromium driven by Selenium.

They run with `make test-browser` (which builds the book first and sets INFERLAB_BROWSER_TESTS=1);
under a plain `make test` they are skipped, since they need the built book and a Chromium.
The browser is the system's Chromium and chromedriver (Debian: apt-get install chromium
chromium-driver); nothing is downloaded. When the tests are enabled and Chromium is missing,
they fail with that instruction instead of skipping.

A test never reads the page at a fixed moment: it waits, bounded, for the state it then checks
(waits.py). Two opt-in slowdowns show that on a fast machine, as a slower CPU would:
  INFERLAB_BROWSER_CPU_SLOWDOWN=6  Chrome's CPU throttling: the page's scripts, layout and painting
                                   run six times slower, on every page (the throttle outlives navigations);
  INFERLAB_BROWSER_LATE_MS=3000    the page's own work comes 3 s late: MathJax starts typesetting, and the
                                   page's handlers of DOMContentLoaded, load, hashchange, change and
                                   mousedown run (drawing the figures and their menus, answering a menu
                                   or a slider), each 3 s after its event.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BOOK = ROOT / "build" / "book"
SHOTS = ROOT / "build" / "book-shots"
ENABLED = os.environ.get("INFERLAB_BROWSER_TESTS") == "1"
SLOWDOWN = float(os.environ.get("INFERLAB_BROWSER_CPU_SLOWDOWN", "1"))
LATE_MS = int(os.environ.get("INFERLAB_BROWSER_LATE_MS", "0"))

# INFERLAB_BROWSER_LATE_MS, run in each new document before the page's own scripts: listeners of the
# LATE events run LATE_MS after their event, and MathJax's first typesetting (its pageReady, set in the
# page's `window.MathJax = {...}` configuration before MathJax reads it) starts LATE_MS late.
LATE_SCRIPT = """
(() => {
  const ms = %d, LATE = new Set(['DOMContentLoaded', 'load', 'hashchange', 'change', 'mousedown']);
  const add = EventTarget.prototype.addEventListener, remove = EventTarget.prototype.removeEventListener;
  const late = new WeakMap();
  EventTarget.prototype.addEventListener = function (type, listener, options) {
    if (!LATE.has(type) || !listener) return add.call(this, type, listener, options);
    if (!late.has(listener)) late.set(listener, function (e) {
      setTimeout(() => typeof listener === 'function' ? listener.call(this, e) : listener.handleEvent(e), ms);
    });
    return add.call(this, type, late.get(listener), options);
  };
  EventTarget.prototype.removeEventListener = function (type, listener, options) {
    return remove.call(this, type, (listener && late.get(listener)) || listener, options);
  };
  let mathjax;
  Object.defineProperty(window, 'MathJax', {configurable: true, get: () => mathjax, set: value => {
    if (value && !value.version) value.startup = Object.assign({pageReady: () =>
      new Promise(r => setTimeout(r, ms)).then(() => window.MathJax.startup.defaultPageReady())}, value.startup);
    mathjax = value;
  }});
})();
"""


def pytest_collection_modifyitems(config, items):
    if ENABLED:
        return
    skip = pytest.mark.skip(reason="browser test: run `make test-browser` (builds the book, needs Chromium)")
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(skip)


def find_browser() -> tuple[str, str]:
    chrome = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
    driver = shutil.which("chromedriver")
    if not chrome or not driver:
        pytest.fail("Chromium and chromedriver are needed (Debian/Ubuntu: "
                    "apt-get install -y chromium chromium-driver); found "
                    f"browser={chrome}, chromedriver={driver}")
    return chrome, driver


@pytest.fixture(scope="session")
def driver():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chrome, chromedriver = find_browser()
    opts = webdriver.ChromeOptions()
    opts.binary_location = chrome
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--no-first-run", "--disable-extensions", "--window-size=1400,1000"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    d = webdriver.Chrome(service=Service(chromedriver), options=opts)
    d.set_page_load_timeout(60)
    d.set_script_timeout(60)
    if SLOWDOWN > 1:
        d.execute_cdp_cmd("Emulation.setCPUThrottlingRate", {"rate": SLOWDOWN})
    if LATE_MS > 0:
        d.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": LATE_SCRIPT % LATE_MS})
    yield d
    d.quit()


@pytest.fixture(scope="session")
def book_dir() -> Path:
    if not (BOOK / "index.html").is_file():
        pytest.fail(f"{BOOK}/index.html is missing: run `make book` first")
    return BOOK

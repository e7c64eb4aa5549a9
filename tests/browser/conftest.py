"""Browser tests of the rendered book and of JupyterLab: headless Chromium driven by Selenium.

They run with `make test-browser` (which builds the book first and sets INFERLAB_BROWSER_TESTS=1);
under a plain `make test` they are skipped, since they need the built book and a Chromium.
The browser is the system's Chromium and chromedriver (Debian: apt-get install chromium
chromium-driver); nothing is downloaded. When the tests are enabled and Chromium is missing,
they fail with that instruction instead of skipping.
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
    yield d
    d.quit()


@pytest.fixture(scope="session")
def book_dir() -> Path:
    if not (BOOK / "index.html").is_file():
        pytest.fail(f"{BOOK}/index.html is missing: run `make book` first")
    return BOOK

"""The built documentation site in a real browser (headless Debian Chromium via selenium).

Run after the build (``python -m sphinx -W --keep-going -b html docs docs/_build/html``)::

    python -m pytest -m docs tests/docs -n 0

The site is served from ``docs/_build/html`` on 127.0.0.1 (a free port) and four pages are
loaded: the home page, the API page of ``scarjax.run``, a tutorial with a figure, and the
search page searching ``check_rework``. Each must render its main content with no error in
the browser console; a screenshot of each is kept in ``docs/_build/screenshots/``. The test
skips only when the site has not been built; a missing browser is a failure.
"""

from __future__ import annotations

import functools
import http.server
import shutil
import tempfile
import threading
from pathlib import Path

import pytest

pytestmark = pytest.mark.docs

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "docs" / "_build" / "html"
SHOTS = ROOT / "docs" / "_build" / "screenshots"
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1280,1000"]


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # no request log on stderr
        pass


@pytest.fixture(scope="module")
def site():
    if not (SITE / "index.html").exists():
        pytest.skip(f"the documentation site is not built ({SITE.relative_to(ROOT)}/index.html is absent)")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(SITE)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def browser():
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is in the docs extra")
    for path in (CHROMIUM, CHROMEDRIVER):
        assert Path(path).exists(), f"{path} is missing: apt-get install chromium chromium-driver"
    profile = tempfile.mkdtemp(prefix="scarjax-docs-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS + [f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(60)
    SHOTS.mkdir(parents=True, exist_ok=True)
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


def _load(driver, url: str):
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get_log("browser")  # drop what an earlier page logged
    driver.get(url)
    WebDriverWait(driver, 30).until(lambda d: d.execute_script("return document.readyState") == "complete")
    return WebDriverWait(driver, 30)


def _main_text(driver) -> str:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, "main, [role=main]").text


def _console_errors(driver) -> list[dict]:
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def _math_done(driver, wait) -> None:
    """MathJax (served from the site) has typeset every formula, if the page has any."""
    wait.until(lambda d: d.execute_script(
        "return !window.MathJax || !MathJax.startup || !MathJax.startup.promise ? true :"
        " (window.__mj_done || (MathJax.startup.promise.then(() => { window.__mj_done = true; }), false));"))


def test_home_page(site, browser):
    wait = _load(browser, f"{site}/index.html")
    text = _main_text(browser)
    assert "Self-correcting ML training on unreliable resources" in text
    assert "API reference" in text and "Tutorials" in text
    browser.save_screenshot(str(SHOTS / "home.png"))
    assert _console_errors(browser) == []


def test_api_page_of_run(site, browser):
    from selenium.webdriver.common.by import By

    wait = _load(browser, f"{site}/api/scarjax.html#scarjax.run")
    entry = browser.find_element(By.ID, "scarjax.run")
    assert entry.text.startswith("scarjax.run(") and "steps" in entry.text, entry.text
    body = entry.find_element(By.XPATH, "following-sibling::dd[1]").text
    assert "Eq 5.2" in body and "Parameters" in body, body[:500]
    _math_done(browser, wait)
    browser.execute_script("arguments[0].scrollIntoView()", entry)
    browser.save_screenshot(str(SHOTS / "api_scarjax_run.png"))
    assert _console_errors(browser) == []


def test_tutorial_with_figure(site, browser):
    from selenium.webdriver.common.by import By

    wait = _load(browser, f"{site}/tutorials/01_rework_cost.html")
    assert "Perturbing a training run and reading the rework bound" in _main_text(browser)
    images = browser.find_elements(By.CSS_SELECTOR, "main .cell_output img, [role=main] .cell_output img")
    assert images, "the executed notebook has no figure"
    wait.until(lambda d: all(d.execute_script("return arguments[0].complete", im) for im in images))
    widths = [browser.execute_script("return arguments[0].naturalWidth", im) for im in images]
    assert all(w > 0 for w in widths), widths
    _math_done(browser, wait)
    assert browser.find_elements(By.CSS_SELECTOR, "mjx-container"), "the notebook's equations were not typeset"
    browser.execute_script("arguments[0].scrollIntoView()", images[0])
    browser.save_screenshot(str(SHOTS / "tutorial_01_rework_cost.png"))
    assert _console_errors(browser) == []


def test_search_finds_check_rework(site, browser):
    from selenium.webdriver.common.by import By

    wait = _load(browser, f"{site}/search.html?q=check_rework")
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#search-results li a"))
    links = browser.find_elements(By.CSS_SELECTOR, "#search-results li a")
    hrefs = [a.get_attribute("href") for a in links]
    assert any(h.endswith("api/scarjax.html#scarjax.check_rework") for h in hrefs), hrefs
    browser.save_screenshot(str(SHOTS / "search_check_rework.png"))
    assert _console_errors(browser) == []

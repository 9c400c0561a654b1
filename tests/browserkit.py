"""Selenium helpers shared by the browser tests: navigation that waits for the page it started."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest


def by(css: str) -> tuple[str, str]:
    return ("css selector", css)


def follow(browser: Any, element: Any) -> None:
    """Click something that loads a page, and wait until the new page is there.

    ``click()`` returns before the navigation it starts has finished; a ``browser.get`` issued
    right after it cancels the form post mid-flight (the server may have answered, the browser
    drops the answer and its cookies), which makes sign-in flaky under load.
    """
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.support.ui import WebDriverWait

    old = browser.find_element(*by("html"))
    element.click()

    def gone(_driver: Any) -> bool:
        try:
            old.is_enabled()
        except WebDriverException:  # stale, or "node does not belong to the document" mid-navigation
            return True
        return False

    WebDriverWait(browser, 30).until(gone)
    WebDriverWait(browser, 30).until(lambda d: d.execute_script("return document.readyState") == "complete")


def browser_sign_in(browser: Any, url: str, secret: str) -> None:
    """Sign in from a clean cookie jar and wait for the stores page."""
    browser.get(url + "/console/login")
    browser.delete_all_cookies()  # this host's cookies, from any earlier test (cookies ignore ports)
    browser.get(url + "/console/login")
    browser.find_element(*by("#token")).send_keys(secret)
    follow(browser, browser.find_element(*by("form button[type=submit]")))
    heading = browser.find_element(*by("h1")).text
    assert heading == "Stores", browser.find_element(*by("body")).text[:500]


# ---------------------------------------------------------------------- the browser itself
CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
try:
    from selenium import webdriver
except ImportError:  # the tests that need it are skipped
    webdriver = None

needs_browser = pytest.mark.skipif(
    webdriver is None or CHROMIUM is None or DRIVER is None,
    reason="needs selenium and the Debian packages chromium and chromium-driver "
    "(apt-get install chromium chromium-driver)",
)
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
)


@contextmanager
def chromium(*extra: str) -> Iterator[Any]:
    """A headless Chromium (Debian's) with a throwaway profile, quit and removed afterwards."""
    from selenium.webdriver.chrome.service import Service

    assert webdriver is not None and CHROMIUM is not None and DRIVER is not None
    profile = tempfile.mkdtemp(prefix="gitmem-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, *extra, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)

"""Headless Chromium for the explorer's tests and benchmark: Debian's package, driven by Playwright from PyPI.

Playwright's own browser download cannot be reached offline, so it launches the system Chromium (``make browser``
installs it). Where there is none, the tests skip and say why, unless ``WIKIGROUND_REQUIRE_BROWSER`` is set (CI sets
it: there they fail instead).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

REQUIRE_ENV = "WIKIGROUND_REQUIRE_BROWSER"
CHROMIUM_ENV = "WIKIGROUND_CHROMIUM"
CANDIDATES = ("chromium", "chromium-browser", "google-chrome")


def chromium_path() -> str | None:
    given = os.environ.get(CHROMIUM_ENV)
    if given:
        return given if os.access(given, os.X_OK) else None
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


def missing_reason() -> str | None:
    """Why no browser test can run here, or None when one can."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -r requirements.lock)"
    if chromium_path() is None:
        return "no Chromium on the PATH (make browser, or set WIKIGROUND_CHROMIUM)"
    return None


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium (a Playwright Browser), closed on exit."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox", "--disable-gpu"])
        try:
            yield browser
        finally:
            browser.close()

"""Pytest plugin: Debian's Chromium driven by Playwright, for the tests that look at the portal
in a real browser. No browser is ever downloaded: without ``/usr/bin/chromium`` (``apt-get
install chromium``) a test asking for one is skipped.

Registered in ``tests/conftest.py``. Fixture:

* ``browser`` (module): a headless Chromium, closed at the end of the test module.

and ``login(browser, base, username, password)``, a new page logged in through the login form.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from portal.management.commands.load_demo import DEMO_PASSWORD

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)")
    # Playwright's sync API runs an event loop in this thread; Django must still allow the ORM.
    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


def login(browser: Any, base: str, username: str, password: str = DEMO_PASSWORD) -> Any:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{base}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/")
    return page

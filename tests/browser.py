"""A real Chromium (Debian's, driven by Playwright) for the dashboard and report tests.

`playwright install` cannot download browsers here, so the tests launch the system's
Chromium with the flags it needs to run headless in a container. Screenshots go to
out/screenshots/ (kept after the run, to be looked at).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCREENSHOTS = ROOT / "out" / "screenshots"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking", "--disable-component-update"]


def chromium_path() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    raise RuntimeError("no Chromium on this machine: `make test` installs Debian's chromium")


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """One Chromium per test module. Not per session: while Playwright's sync API is open,
    its event loop counts as running in the main thread, and the other modules' tests that
    call asyncio.run() would fail."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=chromium_path(),
                                              args=CHROMIUM_ARGS)
        yield instance
        instance.close()


@contextmanager
def open_page(browser: object, **options: object) -> Iterator[object]:
    """A page in a new browser context (Playwright's `new_context` options: viewport,
    color_scheme, bypass_csp...); script errors, and anything the Content-Security-Policy
    blocked, fail the test when it closes."""
    options.setdefault("viewport", {"width": 1300, "height": 900})
    context = browser.new_context(**options)  # type: ignore[attr-defined]
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    # What the Content-Security-Policy blocked (an inline style or script, eval) is said
    # on the console: none of it may happen.
    page.on("console", lambda message: errors.append(message.text)
            if "Content Security Policy" in message.text else None)
    page.errors = errors  # type: ignore[attr-defined]
    try:
        yield page
    finally:
        context.close()
    assert not errors, f"script errors or blocked content on the page: {errors}"


@pytest.fixture
def page(browser: object) -> Iterator[object]:
    with open_page(browser) as opened:
        yield opened


def screenshot(page: object, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)  # type: ignore[attr-defined]
    return path

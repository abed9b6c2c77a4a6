"""/docs in a real Chromium with no network beyond the service: Swagger UI comes from the
package (vendored), lists the API's operations, and runs under the Content-Security-Policy
(tests/browser.py fails a page on anything it blocks)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from browser import screenshot

from tests.conftest import ServeFactory

pytestmark = pytest.mark.slow


def test_the_api_docs_work_offline(serve: ServeFactory, tmp_path: Path, page) -> None:
    server = serve(f"sqlite:///{tmp_path / 'voda.db'}", tokens=True)
    elsewhere: list[str] = []

    def offline(route) -> None:  # type: ignore[no-untyped-def]
        if route.request.url.startswith(server.url):
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort()

    page.route("**/*", offline)
    page.goto(f"{server.url}/docs")
    page.locator(".opblock").first.wait_for(timeout=30_000)
    operations = page.locator(".opblock").count()
    openapi = httpx.get(f"{server.url}/openapi.json").json()
    documented = sum(len(ops) for ops in openapi["paths"].values())
    assert operations == documented and operations >= 10
    assert "Voda" in page.inner_text(".info .title")
    assert elsewhere == [], f"/docs asked for other hosts: {elsewhere}"
    answer = httpx.get(f"{server.url}/docs")
    assert "script-src 'self'" in answer.headers["content-security-policy"]
    assert httpx.get(f"{server.url}/redoc").status_code == 404  # one docs page, offline
    screenshot(page, "api-docs")

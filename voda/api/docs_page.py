"""The API's interactive documentation at /docs: Swagger UI from the package (vendored in
voda/web/static/vendor/swagger-ui), so it works offline and under the dashboard's
Content-Security-Policy (no inline script: voda/web/static/api-docs.js starts it)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

from voda.api.ui.session import SECURITY_HEADERS

router = APIRouter(include_in_schema=False)

VENDOR = "/ui/static/vendor/swagger-ui"
PAGE = f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Voda API</title>
<link rel="stylesheet" href="{VENDOR}/swagger-ui.css">
</head>
<body>
<main id="swagger-ui" aria-label="Voda API documentation"></main>
<script src="{VENDOR}/swagger-ui-bundle.js"></script>
<script src="/ui/static/api-docs.js"></script>
</body>
</html>
"""


@router.get("/docs", response_class=HTMLResponse)
def docs() -> HTMLResponse:
    return HTMLResponse(PAGE, headers=SECURITY_HEADERS)

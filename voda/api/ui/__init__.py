"""The web dashboard served by `voda serve` at /ui (see docs/design/008-dashboard.md)."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles

from voda.web import STATIC_DIR


def install(app: FastAPI) -> None:
    """Add the dashboard's pages, event streams and static files to the app."""
    from urllib.parse import quote

    from voda.api.ui import actions, history, nodes, queues
    from voda.api.ui.routes import router
    from voda.api.ui.session import LoginRequired, Sessions, clear_cookie

    app.state.sessions = Sessions(app.state.settings.session_hours)
    app.include_router(router)
    for module in (nodes, history, queues, actions):
        app.include_router(module.router)
    app.mount("/ui/static", StaticFiles(directory=STATIC_DIR), name="ui-static")

    @app.exception_handler(LoginRequired)
    async def login_required(request: Request, exc: LoginRequired) -> RedirectResponse:
        response = RedirectResponse(f"/ui/login?next={quote(exc.next_path)}", status_code=303)
        if exc.clear_cookie:
            response.headers["Set-Cookie"] = clear_cookie(request)
        return response

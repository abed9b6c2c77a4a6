"""The app factory: `create_app(settings)` builds the service and its scheduling loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from voda.api import ui
from voda.api.backends import create_backend
from voda.api.http_metrics import RequestTimer
from voda.api.routes import router
from voda.api.service import NotFound, Service
from voda.backends.base import Backend
from voda.config import ServerSettings
from voda.core.allocation.registry import UnknownAlgorithm
from voda.spec import SpecError

log = logging.getLogger(__name__)


async def _loop(service: Service, interval: float) -> None:
    while True:
        try:
            await run_in_threadpool(service.tick)
        except Exception:  # keep scheduling; the error is logged
            log.exception("scheduling step failed")
        await asyncio.sleep(interval)


def create_app(settings: ServerSettings, backend: Backend | None = None,
               service: Service | None = None) -> FastAPI:
    """The app; a `service` already started (as `voda serve` does, to report start-up
    errors plainly) is used as it is, otherwise one is built and started at start-up."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        nonlocal service
        if service is None:
            service = Service(settings, backend or create_backend(settings))
            await run_in_threadpool(service.start)
        app.state.service = service
        task = asyncio.create_task(_loop(service, settings.step_interval))
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await run_in_threadpool(service.close)

    app = FastAPI(title="Voda", version="0.1.0", lifespan=lifespan,
                  description="GPU scheduler for elastic deep-learning training.")
    app.state.settings = settings
    app.include_router(router)
    _error_handlers(app)
    ui.install(app)
    app.add_middleware(RequestTimer, observe=lambda *a: _observe_request(app, *a))
    return app


def _observe_request(app: FastAPI, method: str, route: str, status: int,
                     seconds: float) -> None:
    service = getattr(app.state, "service", None)
    if service is not None:
        service.metrics.request(method, route, status, seconds)


def _body(error: str, errors: list[dict[str, str]] | None = None, **extra: Any) -> dict:
    return {"error": error, "errors": errors or [], **extra}


def _error_handlers(app: FastAPI) -> None:
    @app.exception_handler(SpecError)
    async def spec_error(_: Request, exc: SpecError) -> JSONResponse:
        errors = [{"field": e.field, "reason": e.reason} for e in exc.errors]
        return JSONResponse(_body(str(exc), errors), status_code=exc.status)

    @app.exception_handler(NotFound)
    async def not_found(_: Request, exc: NotFound) -> JSONResponse:
        return JSONResponse(_body(str(exc)), status_code=404)

    @app.exception_handler(UnknownAlgorithm)
    async def unknown_algorithm(_: Request, exc: UnknownAlgorithm) -> JSONResponse:
        errors = [{"field": "algorithm", "reason": f"unknown algorithm {exc.name!r}"}]
        return JSONResponse(_body(str(exc), errors, valid=exc.valid), status_code=422)

    @app.exception_handler(ValueError)
    async def value_error(_: Request, exc: ValueError) -> JSONResponse:
        text = str(exc)
        field, _, reason = text.partition(": ")
        if not reason or " " in field:
            field, reason = "request", text
        status = 409 if "takes no more reports" in text else 422
        return JSONResponse(_body(text, [{"field": field, "reason": reason}]), status_code=status)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = []
        for e in exc.errors():
            loc = [str(p) for p in e.get("loc", ()) if p not in ("body", "query", "path")]
            errors.append({"field": ".".join(loc) or "body", "reason": str(e.get("msg"))})
        summary = "; ".join(f"{e['field']}: {e['reason']}" for e in errors)
        return JSONResponse(_body(summary, errors), status_code=422)

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, exc: HTTPException) -> JSONResponse:
        return JSONResponse(_body(str(exc.detail)), status_code=exc.status_code,
                            headers=exc.headers)

    @app.exception_handler(Exception)
    async def internal(_: Request, exc: Exception) -> JSONResponse:
        log.exception("internal error")
        return JSONResponse(_body(f"internal error: {type(exc).__name__}"), status_code=500)

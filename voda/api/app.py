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
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from voda.api import docs_page, schemas, ui
from voda.api.auth import Authenticator
from voda.api.backends import create_backend
from voda.api.guard import RequestGuard
from voda.api.http_metrics import RequestTimer
from voda.api.logs import follow_slots
from voda.api.routes import router
from voda.api.service import Busy, Conflict, Forbidden, NotFound, Service
from voda.api.ui.streams import stream_slots
from voda.api.writes import StoreUnavailable
from voda.config import ConfigError, ServerSettings, split_list
from voda.core.allocation.registry import UnknownAlgorithm
from voda.engine.backend import Backend
from voda.spec import SpecError

log = logging.getLogger(__name__)


async def _loop(service: Service, interval: float) -> None:
    while True:
        try:
            await run_in_threadpool(service.tick)
        except StoreUnavailable as exc:  # kept and retried; /readyz says so
            log.debug("scheduling step waits for the store: %s", exc)
        except Exception:  # keep scheduling; the error is logged
            log.exception("scheduling step failed")
        await asyncio.sleep(interval)


def create_app(settings: ServerSettings, backend: Backend | None = None,
               service: Service | None = None) -> FastAPI:
    """The app; a `service` already started (as `voda serve` does, to report start-up
    errors plainly) is used as it is, otherwise one is built and started at start-up.
    A token is always required: `settings.tokens` must hold at least one."""
    if not settings.tokens:
        raise ConfigError("tokens: the service needs at least one token (voda serve "
                          "generates one)")

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

    # /docs is Swagger UI from the package (voda.api.docs_page), not FastAPI's from a CDN.
    app = FastAPI(title="Voda", version="0.1.0", lifespan=lifespan, docs_url=None,
                  redoc_url=None,
                  description="GPU scheduler for elastic deep-learning training. Every "
                              "/v1 request needs a bearer token.")
    app.state.settings = settings
    app.state.log_follows = follow_slots()
    app.state.authenticator = Authenticator(settings.tokens, settings.auth_failures_per_minute)
    app.state.stream_slots = stream_slots(settings.max_streams_per_user, settings.max_streams)
    app.include_router(router)
    app.include_router(docs_page.router)
    _error_handlers(app)
    ui.install(app)
    origins = split_list(settings.allowed_origins)
    if origins:
        from starlette.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=origins, allow_credentials=False,
                           allow_methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
                           allow_headers=["Authorization", "Content-Type", "Idempotency-Key"])
    app.add_middleware(RequestGuard, settings=settings)
    # Outermost: the guard's refusals are timed too (as the route "other").
    app.add_middleware(RequestTimer, observe=lambda *a: _observe_request(app, *a))
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


def _observe_request(app: FastAPI, method: str, route: str, status: int,
                     seconds: float) -> None:
    service = getattr(app.state, "service", None)
    if service is not None:
        service.metrics.request(method, route, status, seconds)


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's document, with the job body's schemas it cannot see (the route reads
    YAML or JSON itself)."""
    if app.openapi_schema:
        return app.openapi_schema
    document = get_openapi(title=app.title, version=app.version, routes=app.routes,
                           description=app.description)
    components = document.setdefault("components", {}).setdefault("schemas", {})
    for model in (schemas.CompactJob, schemas.KubeflowJob):
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        components.update(schema.pop("$defs", {}))
        components[str(schema["title"])] = schema
    app.openapi_schema = document
    return document


def _body(error: str, errors: list[dict[str, str]] | None = None, **extra: Any) -> dict:
    return {"error": error, "errors": errors or [], **extra}


def _field_error(status: int, field: str, reason: str) -> JSONResponse:
    return JSONResponse(_body(f"{field}: {reason}", [{"field": field, "reason": reason}]),
                        status_code=status)


def _error_handlers(app: FastAPI) -> None:
    @app.exception_handler(SpecError)
    async def spec_error(_: Request, exc: SpecError) -> JSONResponse:
        errors = [{"field": e.field, "reason": e.reason} for e in exc.errors]
        return JSONResponse(_body(str(exc), errors), status_code=exc.status)

    @app.exception_handler(NotFound)
    async def not_found(_: Request, exc: NotFound) -> JSONResponse:
        return JSONResponse(_body(str(exc)), status_code=404)

    @app.exception_handler(Forbidden)
    async def forbidden(_: Request, exc: Forbidden) -> JSONResponse:
        return _field_error(403, exc.field, exc.reason)

    @app.exception_handler(Conflict)
    async def conflict(_: Request, exc: Conflict) -> JSONResponse:
        return _field_error(409, exc.field, exc.reason)

    @app.exception_handler(Busy)
    async def busy(_: Request, exc: Busy) -> JSONResponse:
        return JSONResponse(_body(str(exc), [{"field": exc.field, "reason": exc.reason}]),
                            status_code=429,
                            headers={"Retry-After": str(max(1, round(exc.retry_after)))})

    @app.exception_handler(StoreUnavailable)
    async def store_unavailable(_: Request, exc: StoreUnavailable) -> JSONResponse:
        return JSONResponse(_body(str(exc), [{"field": "store", "reason": exc.fault.reason}]),
                            status_code=503,
                            headers={"Retry-After": str(max(1, round(exc.retry_after)))})

    @app.exception_handler(UnknownAlgorithm)
    async def unknown_algorithm(_: Request, exc: UnknownAlgorithm) -> JSONResponse:
        errors = [{"field": "algorithm", "reason": f"unknown algorithm {exc.name[:100]!r}"}]
        return JSONResponse(_body(str(exc), errors, valid=exc.valid), status_code=422)

    @app.exception_handler(ValueError)
    async def value_error(_: Request, exc: ValueError) -> JSONResponse:
        text = str(exc)
        field, _, reason = text.partition(": ")
        if not reason or " " in field:
            field, reason = "request", text
        return JSONResponse(_body(text, [{"field": field, "reason": reason}]), status_code=422)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = []
        for e in exc.errors():
            loc = [str(p) for p in e.get("loc", ())
                   if p not in ("body", "query", "path", "header")]
            errors.append({"field": ".".join(loc) or "body", "reason": str(e.get("msg"))})
        summary = "; ".join(f"{e['field']}: {e['reason']}" for e in errors)
        return JSONResponse(_body(summary, errors), status_code=422)

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, exc: HTTPException) -> JSONResponse:
        text = str(exc.detail)
        field, _, reason = text.partition(": ")
        errors = [{"field": field, "reason": reason}] if reason and " " not in field else []
        return JSONResponse(_body(text, errors), status_code=exc.status_code,
                            headers=exc.headers)

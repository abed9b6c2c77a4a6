"""HTTP routes. Blocking work runs in worker threads; the service takes its own locks."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response
from fastapi.concurrency import run_in_threadpool

from voda.api import schemas
from voda.api.auth import authenticate
from voda.api.service import Service
from voda.config import User
from voda.core.model import JobStatus
from voda.spec import parse_submission
from voda.spec.errors import fail

router = APIRouter()
STATUSES = frozenset(str(s).lower() for s in JobStatus)
CurrentUser = Annotated[User, Depends(authenticate)]


def service_of(request: Request) -> Service:
    return request.app.state.service


async def read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise fail("body", f"too large: {declared} bytes, the limit is {limit}", status=413)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise fail("body", f"too large: more than {limit} bytes", status=413)
        chunks.append(chunk)
    return b"".join(chunks)


@router.get("/healthz", response_model=schemas.Health, tags=["service"])
def healthz(request: Request) -> dict[str, Any]:
    return service_of(request).health()


@router.get("/metrics", tags=["service"], response_class=Response)
def metrics(request: Request) -> Response:
    from prometheus_client import CONTENT_TYPE_LATEST

    return Response(service_of(request).render_metrics(), media_type=CONTENT_TYPE_LATEST)


@router.post(
    "/v1/jobs", status_code=201, response_model=schemas.JobDetail, tags=["jobs"],
    responses={413: {"model": schemas.ErrorBody}, 422: {"model": schemas.ErrorBody}},
    openapi_extra={"requestBody": {"required": True, "content": {
        "application/yaml": {"schema": {"type": "object"}},
        "application/json": {"schema": {"type": "object"}}}}},
)
async def submit_job(request: Request, user: CurrentUser) -> dict[str, Any]:
    """Submit a job: a Voda compact spec, an MPIJob or a PyTorchJob, as YAML or JSON."""
    service = service_of(request)
    body = await read_body(request, service.settings.max_body_bytes)
    # Parsing (YAML, CRD schema validation) and storing both run off the event loop.
    return await run_in_threadpool(lambda: service.submit(parse_submission(body), user))


@router.get("/v1/jobs", response_model=schemas.JobList, tags=["jobs"])
def list_jobs(
    request: Request,
    user: CurrentUser,
    status: str | None = None,
    gpu_type: str | None = None,
    owner: Annotated[str | None, Query(alias="user")] = None,
    offset: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    q: Annotated[str | None, Query(max_length=200,
                                   description="Only jobs whose name or owner contain this.")]
    = None,
) -> dict[str, Any]:
    if status is not None and status.lower() not in STATUSES:
        raise fail("status", f"unknown status {status!r}; valid: "
                   f"{', '.join(str(s) for s in JobStatus)}")
    items, total = service_of(request).list(user, status, gpu_type, owner, offset, limit,
                                            search=q)
    next_offset = offset + len(items) if offset + len(items) < total else None
    return {"items": items, "total": total, "offset": offset, "limit": limit,
            "next_offset": next_offset}


@router.get("/v1/jobs/{name}", response_model=schemas.JobDetail, tags=["jobs"],
            responses={404: {"model": schemas.ErrorBody}})
def get_job(request: Request, name: str, user: CurrentUser) -> dict[str, Any]:
    return service_of(request).get(name, user)


@router.get("/v1/jobs/{name}/history", response_model=list[schemas.HistoryEntry],
            tags=["jobs"], responses={404: {"model": schemas.ErrorBody}})
def job_history(request: Request, name: str, user: CurrentUser) -> list[dict[str, Any]]:
    """Status, priority and allocation changes (start, scale-in, scale-out, migrate, halt;
    old and new are worker counts), oldest first."""
    return service_of(request).history(name, user)


@router.delete("/v1/jobs/{name}", response_model=schemas.JobDetail, tags=["jobs"],
               responses={404: {"model": schemas.ErrorBody}})
def delete_job(request: Request, name: str, user: CurrentUser) -> dict[str, Any]:
    """Cancel a job; it stays listed with status Canceled."""
    return service_of(request).delete(name, user)


@router.patch("/v1/jobs/{name}", response_model=schemas.JobDetail, tags=["jobs"],
              responses={404: {"model": schemas.ErrorBody}, 422: {"model": schemas.ErrorBody}})
def patch_job(request: Request, name: str, patch: schemas.PriorityPatch,
              user: CurrentUser) -> dict[str, Any]:
    return service_of(request).set_priority(name, patch.priority, user)


@router.post("/v1/jobs/{name}/metrics", response_model=schemas.JobDetail, tags=["jobs"],
             responses={404: {"model": schemas.ErrorBody}, 409: {"model": schemas.ErrorBody}})
def report_epoch(request: Request, name: str, report: schemas.EpochReport,
                 user: CurrentUser) -> dict[str, Any]:
    """How a training process reports an epoch: refines speed and remaining-time estimates."""
    return service_of(request).report_epoch(name, report.epoch, report.epoch_seconds,
                                            report.workers, user, report.samples_per_second)


@router.get("/v1/cluster", response_model=schemas.ClusterView, tags=["cluster"])
def get_cluster(request: Request, user: CurrentUser) -> dict[str, Any]:
    return service_of(request).cluster_view(user)


@router.get("/v1/schedulers/{gpu_type}", response_model=schemas.SchedulerView,
            tags=["cluster"], responses={404: {"model": schemas.ErrorBody}})
def get_scheduler(request: Request, gpu_type: str, user: CurrentUser) -> dict[str, Any]:
    return service_of(request).scheduler_view(gpu_type)


@router.put("/v1/schedulers/{gpu_type}", response_model=schemas.SchedulerView,
            tags=["cluster"],
            responses={403: {"model": schemas.ErrorBody}, 404: {"model": schemas.ErrorBody},
                       422: {"model": schemas.ErrorBody}})
def put_scheduler(request: Request, gpu_type: str, update: schemas.SchedulerUpdate,
                  user: CurrentUser) -> dict[str, Any]:
    """Switch the algorithm of one GPU type; the rate limit is shared by all types."""
    if not user.admin:
        raise HTTPException(403, "only an administrator may change the scheduler")
    return service_of(request).set_scheduler(gpu_type, update.algorithm, update.params,
                                             update.rate_limit_seconds)

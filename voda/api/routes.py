"""HTTP routes. Blocking work runs in worker threads; the service takes its own locks.

Bodies reach a route already checked by voda.api.guard (Content-Type, size, depth).
"""

from __future__ import annotations

import hashlib
import re
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Header, HTTPException, Path, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, StreamingResponse

from voda.api import schemas
from voda.api.auth import authenticate, authenticate_reporter
from voda.api.errors import Busy
from voda.api.history import MAX_POINTS, RANGES
from voda.api.logs import MAX_TAIL_LINES, log_chunks, tail_offset
from voda.api.service import HISTORY_SHOWN, Service
from voda.api.slots import Slots
from voda.config import User
from voda.core.model import JobStatus, Node
from voda.spec import parse_submission
from voda.spec.documents import canonical_json, load_document, media_type
from voda.spec.errors import fail
from voda.spec.parse import parse_document

router = APIRouter()
STATUSES = frozenset(str(s).lower() for s in JobStatus)
CurrentUser = Annotated[User, Depends(authenticate)]
# A user's token or the job's own report token (voda.api.report_tokens).
Reporting = Annotated[User, Depends(authenticate_reporter)]
IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]{1,200}$")
MAX_OFFSET = 1_000_000_000

JobName = Annotated[str, Path(
    min_length=1, max_length=200,
    description="A job's name (the live job of that name, else the newest finished one) "
                "or its uid (exactly that job, e.g. an older one of the same name)")]
GpuType = Annotated[str, Path(min_length=1, max_length=100)]
NodeName = Annotated[str, Path(min_length=1, max_length=200)]

ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": schemas.ErrorBody, "description": what} for code, what in {
        400: "Bad request", 401: "No or unknown bearer token",
        403: "Forbidden: Host, Origin, a user limit, or not an administrator",
        404: "Not found", 409: "Conflicts with the state of the job or node",
        413: "Body too large", 415: "Content-Type not accepted",
        422: "Invalid input; every error names its field",
        429: "Too many failed authentications; see Retry-After",
        500: "Internal error", 503: "The store is unavailable; see Retry-After",
    }.items()
}
COMMON = {k: ERRORS[k] for k in (400, 401, 403, 404, 422, 429, 500, 503)}
WITH_BODY = {**COMMON, **{k: ERRORS[k] for k in (409, 413, 415)}}


def service_of(request: Request) -> Service:
    return request.app.state.service


def _admin(user: User, what: str) -> None:
    if not user.admin:
        raise HTTPException(403, f"authorization: only an administrator may {what}")


@router.get("/healthz", response_model=schemas.Health, tags=["service"],
            responses={k: ERRORS[k] for k in (400, 403, 500)})
def healthz(request: Request) -> dict[str, Any]:
    """Liveness: the process answers. Whether it can take changes is /readyz."""
    return service_of(request).health()


@router.get("/readyz", response_model=schemas.Readiness, tags=["service"],
            responses={k: ERRORS[k] for k in (400, 403, 500)} | {
                503: {"model": schemas.Readiness, "description": "Not ready, with reasons"}})
def readyz(request: Request) -> Response:
    """Ready: the store takes writes and the scheduler is not stuck."""
    ready, reasons = service_of(request).readiness()
    body = {"status": "ready" if ready else "unready", "reasons": reasons}
    headers = {} if ready else {"Retry-After": "1"}
    return JSONResponse(body, status_code=200 if ready else 503, headers=headers)


@router.get("/livez", response_model=schemas.Liveness, tags=["service"],
            responses={k: ERRORS[k] for k in (400, 403, 500)} | {
                503: {"model": schemas.Liveness, "description": "Wedged, with reasons"}})
def livez(request: Request) -> Response:
    """Alive: the process answers and the backend's loop goes round (the Kubernetes
    reconciler within kubernetes.liveness_seconds). Failing it asks for a restart."""
    alive, reasons = service_of(request).liveness()
    body = {"status": "alive" if alive else "wedged", "reasons": reasons}
    return JSONResponse(body, status_code=200 if alive else 503)


@router.get("/metrics", tags=["service"], response_class=Response,
            responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}},
                       **{k: ERRORS[k] for k in (400, 403, 500)}})
def metrics(request: Request) -> Response:
    from prometheus_client import CONTENT_TYPE_LATEST

    return Response(service_of(request).render_metrics(), media_type=CONTENT_TYPE_LATEST)


_JOB_BODY = {"anyOf": [{"$ref": "#/components/schemas/VodaJob"},
                       {"$ref": "#/components/schemas/KubeflowJob"}]}


@router.post(
    "/v1/jobs", status_code=201, response_model=schemas.JobDetail, tags=["jobs"],
    responses={200: {"model": schemas.JobDetail,
                     "description": "An earlier submission with the same Idempotency-Key"},
               **WITH_BODY},
    openapi_extra={"requestBody": {"required": True, "content": {
        "application/json": {"schema": _JOB_BODY},
        "application/yaml": {"schema": _JOB_BODY}}}},
)
async def submit_job(
    request: Request, user: CurrentUser,
    idempotency_key: Annotated[str | None, Header(
        alias="Idempotency-Key", max_length=200,
        description="A retry with the same key returns the first job instead of a "
                    "second one")] = None,
) -> Response:
    """Submit a job: a Voda compact spec, an MPIJob or a PyTorchJob, as YAML or JSON.
    The job keeps its name, which no live job may have (409 naming the field and that
    job); `generate_name` (metadata.generateName) asks for a generated one instead."""
    service = service_of(request)
    if idempotency_key is not None and not IDEMPOTENCY_KEY.match(idempotency_key):
        raise fail("Idempotency-Key", "1 to 200 printable ASCII characters, no spaces")
    body = await request.body()
    media = media_type(request.headers.get("content-type"))

    def submit() -> tuple[dict[str, Any], bool]:
        document = load_document(body, media)
        # A retry is the same request when it says the same: keys in another order, other
        # whitespace, YAML for JSON all read the same once parsed.
        digest = hashlib.sha256(canonical_json(document)).hexdigest()
        return service.submit(parse_document(document), user, idempotency_key, digest)

    # Parsing (YAML, CRD schema validation) and storing both run off the event loop.
    job, replayed = await run_in_threadpool(submit)
    return JSONResponse(job, status_code=200 if replayed else 201,
                        headers={"Idempotent-Replayed": "true"} if replayed else None)


@router.post(
    "/v1/forecast", response_model=schemas.WhatIf, tags=["jobs"], responses=WITH_BODY,
    openapi_extra={"requestBody": {"required": True, "content": {
        "application/json": {"schema": _JOB_BODY},
        "application/yaml": {"schema": _JOB_BODY}}}},
)
async def forecast_job(request: Request, user: CurrentUser) -> Any:
    """What if: when this job would start and finish if submitted now, assuming no other
    arrivals. Takes what POST /v1/jobs takes; stores and queues nothing."""
    service = service_of(request)
    body = await request.body()
    media = media_type(request.headers.get("content-type"))
    return await run_in_threadpool(lambda: service.what_if(parse_submission(body, media),
                                                           user))


@router.get("/v1/jobs", response_model=schemas.JobList, tags=["jobs"], responses=COMMON)
def list_jobs(
    request: Request,
    user: CurrentUser,
    status: Annotated[str | None, Query(max_length=20)] = None,
    gpu_type: Annotated[str | None, Query(max_length=100)] = None,
    owner: Annotated[str | None, Query(alias="user", max_length=100)] = None,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    q: Annotated[str | None, Query(max_length=200,
                                   description="Only jobs whose name or owner contain this.")]
    = None,
) -> dict[str, Any]:
    if status is not None and status.lower() not in STATUSES:
        raise fail("status", f"unknown status {status[:20]!r}; valid: "
                   f"{', '.join(str(s) for s in JobStatus)}")
    items, total = service_of(request).list(user, status, gpu_type, owner, offset, limit,
                                            search=q)
    next_offset = offset + len(items) if offset + len(items) < total else None
    return {"items": items, "total": total, "offset": offset, "limit": limit,
            "next_offset": next_offset}


@router.get("/v1/jobs/{name}", response_model=schemas.JobDetail, tags=["jobs"],
            responses=COMMON)
def get_job(request: Request, name: JobName, user: CurrentUser) -> dict[str, Any]:
    """One job, with its newest events. Finished jobs keep their names, so several may
    share one: a name means the live job of that name, else the newest one; the uid
    (in every answer about a job) means exactly one."""
    return service_of(request).get(name, user)


@router.get("/v1/jobs/{name}/history", response_model=list[schemas.JobEvent],
            tags=["jobs"], responses=COMMON)
def job_history(request: Request, name: JobName, user: CurrentUser,
                last: Annotated[int, Query(ge=1, le=HISTORY_SHOWN)] = HISTORY_SHOWN,
                ) -> list[dict[str, Any]]:
    """The newest `last` status, priority, event and allocation changes (start, scale-in,
    scale-out, migrate, halt: old and new are worker counts), oldest first."""
    return service_of(request).job_history(name, user, last)


@router.get(
    "/v1/jobs/{name}/logs", tags=["jobs"], response_class=Response,
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}},
                     "description": "The job's log: all ranks, all restarts"},
               **COMMON, 409: {"model": schemas.ErrorBody,
                               "description": "The backend keeps no job logs"}})
async def job_logs(
    request: Request, name: JobName, user: CurrentUser,
    tail: Annotated[int, Query(ge=0, le=MAX_TAIL_LINES,
                               description="Only the last N lines (0: the whole log).")] = 0,
    follow: Annotated[bool, Query(description="Keep sending what is written until the job "
                                              "ends or the client goes away.")] = False,
) -> Response:
    """A job's log (the job's owner and administrators; the local backend keeps logs, other
    backends answer 409). With follow, at most a few answers follow at once (429)."""
    service = service_of(request)
    path, uid = await run_in_threadpool(service.log_file, name, user)
    offset = await run_in_threadpool(tail_offset, path, tail)
    release = None
    if follow:
        follows: Slots = request.app.state.log_follows
        refusal = follows.take(user.name)
        if refusal is not None:
            raise Busy(*refusal)
        release = lambda: follows.give_back(user.name)  # noqa: E731
    chunks = log_chunks(path, offset, follow, lambda: service.log_ended(uid), release)
    return StreamingResponse(chunks, media_type="text/plain; charset=utf-8",
                             headers={"Cache-Control": "no-store",
                                      "X-Content-Type-Options": "nosniff"})


@router.delete("/v1/jobs/{name}", response_model=schemas.JobDetail, tags=["jobs"],
               responses=COMMON)
def delete_job(request: Request, name: JobName, user: CurrentUser) -> dict[str, Any]:
    """Cancel a job; it stays listed with status Canceled."""
    return service_of(request).delete(name, user)


@router.patch("/v1/jobs/{name}", response_model=schemas.JobDetail, tags=["jobs"],
              responses=WITH_BODY)
def patch_job(request: Request, name: JobName, patch: schemas.PriorityPatch,
              user: CurrentUser) -> dict[str, Any]:
    """Change the priority of a job that has not finished (0 is the highest)."""
    return service_of(request).set_priority(name, patch.priority, user)


@router.post("/v1/jobs/{name}/metrics", response_model=schemas.JobDetail, tags=["jobs"],
             responses=WITH_BODY)
def report_epoch(request: Request, name: JobName, report: schemas.EpochReport,
                 user: Reporting) -> dict[str, Any]:
    """How a running training process reports an epoch: refines speed and remaining-time
    estimates (of the job, and of its owner's jobs of the same category)."""
    return service_of(request).report_epoch(name, report.epoch, report.epoch_seconds,
                                            report.workers, user, report.samples_per_second)


@router.post("/v1/jobs/{name}/goodput", response_model=schemas.JobDetail, tags=["jobs"],
             responses=WITH_BODY)
def report_goodput(request: Request, name: JobName, report: schemas.GoodputReportBody,
                   user: Reporting) -> dict[str, Any]:
    """How a running batch-adaptive training process reports its goodput: measured step
    times, gradient statistics and batch limits. The service fits its step-time model
    (422 naming the field when the report does not hold together or the fit misses what
    was measured); the allocation (Voda, Pollux) sizes the job by it, and the owner's
    later jobs of the same category start from it."""
    return service_of(request).report_goodput(name, report.to_report(), user)


@router.get("/v1/cluster", response_model=schemas.ClusterView, tags=["cluster"],
            responses=COMMON)
def get_cluster(request: Request, user: CurrentUser) -> dict[str, Any]:
    """Nodes (ready, cordoned or lost), GPU types and the plan. Others' jobs are shown as
    GPUs in use, unnamed (an administrator sees every job)."""
    return service_of(request).cluster_view(user)


# The query of a history (the cluster's, a queue's): its range, GPU type and points.
HistoryRange = Annotated[Literal["hour", "day", "week"], Query(
    alias="range", description="The last hour, day or week.")]
HistoryGpuType = Annotated[str | None, Query(
    min_length=1, max_length=100, description="One GPU type of the cluster (default: the first).")]
HistoryPoints = Annotated[int, Query(
    ge=1, le=MAX_POINTS, description="At most this many points: the range's samples averaged in "
                                     "equal spans of time.")]


def history_window(service: Service, gpu_type: str | None, time_range: str) -> dict[str, Any]:
    """A history's GPU type (the given one, checked: a 422 naming `gpu_type`, else the
    cluster's first), range and sampling interval, as its answer shows them."""
    types = service.scheduler.cluster.gpu_types()
    if gpu_type is not None and gpu_type not in types:
        raise fail("gpu_type", f"unknown GPU type {gpu_type!r}; the cluster has: "
                   f"{', '.join(types)}")
    if not types:
        raise HTTPException(404, "gpu_type: the cluster has no GPUs now")
    return {"gpu_type": gpu_type or types[0], "range": time_range,
            "seconds": RANGES[time_range][0],
            "sample_seconds": service.settings.history_sample_seconds}


@router.get("/v1/cluster/history", response_model=schemas.ClusterHistory, tags=["cluster"],
            responses=COMMON)
def get_cluster_history(request: Request, user: CurrentUser, time_range: HistoryRange = "hour",
                        gpu_type: HistoryGpuType = None,
                        points: HistoryPoints = MAX_POINTS) -> dict[str, Any]:
    """What the dashboard's History page draws: GPUs in service, allocated and in use,
    jobs running and waiting, and how long the waiting ones waited, over the range, for
    one GPU type; at most `points` points, oldest first (a 422 names a bad `range`,
    `points` or an unknown `gpu_type`)."""
    service = service_of(request)
    window = history_window(service, gpu_type, time_range)
    return {**window, "points": service.cluster_history(window["gpu_type"], window["seconds"],
                                                        points=points)}


@router.get("/v1/schedulers/{gpu_type}", response_model=schemas.SchedulerView,
            tags=["cluster"], responses=COMMON)
def get_scheduler(request: Request, gpu_type: GpuType, user: CurrentUser) -> dict[str, Any]:
    return service_of(request).scheduler_view(gpu_type)


@router.put("/v1/schedulers/{gpu_type}", response_model=schemas.SchedulerView,
            tags=["cluster"], responses=WITH_BODY)
def put_scheduler(request: Request, gpu_type: GpuType, update: schemas.SchedulerUpdate,
                  user: CurrentUser) -> dict[str, Any]:
    """Switch the algorithm of one GPU type (administrators); the rate limit is shared by
    all types. Only registered algorithm names (and import paths named in the server's
    own configuration) are accepted."""
    _admin(user, "change the scheduler")
    return service_of(request).set_scheduler(gpu_type, update.algorithm, update.params,
                                             update.rate_limit_seconds)


@router.post("/v1/nodes", status_code=201, response_model=schemas.NodeChange,
             tags=["cluster"], responses=WITH_BODY)
def add_node(request: Request, node: schemas.NodeAdd, user: CurrentUser) -> dict[str, Any]:
    """Add a node at run time (administrators; emulated and local backends)."""
    _admin(user, "add nodes")
    return service_of(request).add_node(Node(node.name, node.gpus, node.gpu_type, node.leaf,
                                             node.spine))


@router.patch("/v1/nodes/{name}", response_model=schemas.NodeChange, tags=["cluster"],
              responses=WITH_BODY)
def patch_node(request: Request, name: NodeName, patch: schemas.NodePatch,
               user: CurrentUser) -> dict[str, Any]:
    """Drain a node (schedulable: false): its jobs stop, keeping their checkpoints, and
    wait for other nodes; schedulable: true takes it back (administrators)."""
    _admin(user, "drain nodes")
    service = service_of(request)
    if patch.schedulable:
        node = service.drained.get(name)
        if node is None:
            raise fail("schedulable", f"node {name[:60]!r} is not drained", status=409)
        return service.add_node(node)
    return service.drain_node(name)


@router.delete("/v1/nodes/{name}", response_model=schemas.NodeChange, tags=["cluster"],
               responses=COMMON | {409: ERRORS[409]})
def delete_node(request: Request, name: NodeName, user: CurrentUser) -> dict[str, Any]:
    """Remove a node (administrators); its jobs stop and wait for other nodes."""
    _admin(user, "remove nodes")
    return service_of(request).remove_node(name)


# ----- team queues (docs/design/013-queues.md) -----------------------------------------
QueueName = Annotated[str, Path(min_length=1, max_length=63)]


@router.get("/v1/queues", response_model=schemas.QueueList, tags=["queues"], responses=COMMON)
def list_queues(request: Request, user: CurrentUser) -> dict[str, Any]:
    """Every team queue with its usage per GPU type: used against guarantee, borrowed,
    lent, waiting jobs, and GPUs reclaimed from it since the service started."""
    return {"queues": service_of(request).queue_list()}


@router.get("/v1/queues/{name}", response_model=schemas.QueueView, tags=["queues"],
            responses=COMMON)
def get_queue(request: Request, name: QueueName, user: CurrentUser) -> dict[str, Any]:
    return service_of(request).queue_detail(name)


@router.get("/v1/queues/{name}/history", response_model=schemas.QueueHistory, tags=["queues"],
            responses=COMMON)
def get_queue_history(request: Request, name: QueueName, user: CurrentUser,
                      time_range: HistoryRange = "hour", gpu_type: HistoryGpuType = None,
                      points: HistoryPoints = MAX_POINTS) -> dict[str, Any]:
    """What the dashboard's Queues page draws for one queue: GPUs held against its
    guarantee and borrowing limit, borrowed, lent and jobs waiting, over the range, for
    one GPU type, sampled with the cluster's history while queues are configured; at
    most `points` points, oldest first (404: an unknown queue; a 422 names a bad
    `range`, `points` or an unknown `gpu_type`)."""
    service = service_of(request)
    window = history_window(service, gpu_type, time_range)
    return {**window, "queue": name, "points": service.queue_history(
        name, window["gpu_type"], window["seconds"], points=points)}


@router.put("/v1/queues/{name}", response_model=schemas.QueueView, tags=["queues"],
            responses={**WITH_BODY, 201: {"model": schemas.QueueView,
                                          "description": "Created"}})
def put_queue(request: Request, response: Response, name: QueueName,
              update: schemas.QueueUpdate, user: CurrentUser) -> dict[str, Any]:
    """Create or replace a team queue (administrators); kept in the store, it outlives a
    restart and stands over the queue file's of that name."""
    _admin(user, "change queues")
    body = update.model_dump(exclude_unset=True)
    view, created = service_of(request).put_queue(name, body)
    response.status_code = 201 if created else 200
    return view


@router.delete("/v1/queues/{name}", response_model=schemas.QueueView, tags=["queues"],
               responses=WITH_BODY)
def delete_queue(request: Request, name: QueueName, user: CurrentUser) -> dict[str, Any]:
    """Delete a team queue (administrators); its jobs run in `default` from then on."""
    _admin(user, "delete queues")
    return service_of(request).delete_queue(name)

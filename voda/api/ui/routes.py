"""The dashboard at /ui: server-rendered pages, each with a live part pushed as
server-sent events (htmx's SSE extension swaps it in), drawn with uPlot.

Every page reads the service through the same views as the REST API (Service.list,
get, job_history, cluster_view, scheduler_view, refusals) with the user of the login
cookie, so a user sees their own jobs and other users' usage anonymously, as the API
shows them. HTML answers carry session.SECURITY_HEADERS (the Content-Security-Policy).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse

from voda.api.auth import MAX_TOKEN_LENGTH, user_for_token
from voda.api.service import NotFound, Service
from voda.api.ui import views
from voda.api.ui.session import (
    FORM_TOKEN_FIELD,
    SECURITY_HEADERS,
    check_form,
    check_same_origin,
    clear_cookie,
    cookie_session_id,
    current_session,
    form_token,
    page_user,
    safe_next,
    sessions_of,
    set_session_cookie,
    stream_user,
)
from voda.api.ui.streams import BoundedStream
from voda.api.views import REDACTED, visible
from voda.config import User
from voda.core.model import JobStatus
from voda.web import environment

router = APIRouter(prefix="/ui", include_in_schema=False)
PageUser = Annotated[User, Depends(page_user)]
StreamUser = Annotated[User, Depends(stream_user)]
STATIC = "/ui/static"
UPDATE_SECONDS = 1.0  # how often a live page's data is looked at; sent only when it changed
KEEPALIVE_SECONDS = 15.0
LOG_LINES = 40
MAX_FORM_BYTES = 4096
STATUSES = tuple(str(s) for s in JobStatus)


def render(template: str, **context: Any) -> str:
    return environment().get_template(template).render(static=STATIC, **context)


def html(content: str, status_code: int = 200,
         headers: dict[str, str] | None = None) -> HTMLResponse:
    return HTMLResponse(content, status_code, headers={**SECURITY_HEADERS, **(headers or {})})


def service_of(request: Request) -> Service:
    return request.app.state.service


def _page(request: Request, template: str, user: User, title: str, page: str,
          stream: str, fragment: str, **context: Any) -> HTMLResponse:
    return html(render(template, title=title, page=page, user=user, stream=stream,
                       fragment=fragment, form_field=FORM_TOKEN_FIELD,
                       form_token=form_token(request), **context))


# ----- fragments: the live part of each page ------------------------------------------------
def cluster_fragment(service: Service, user: User, gpu_type: str | None) -> str:
    context = views.cluster_page(service.cluster_view(user), gpu_type)
    return render("_cluster.html", **context)


def jobs_fragment(service: Service, user: User, filters: views.JobFilters) -> str:
    jobs, total = service.list(user, filters.status, filters.gpu_type, None, filters.offset,
                               filters.per_page, search=filters.search, newest_first=True)
    return render("_jobs.html", jobs=jobs, total=total, filters=filters, now=time.time(),
                  page_count=views.pages(total, filters.per_page))


def job_fragment(service: Service, user: User, name: str) -> str:
    return job_fragment_of(service, user, name)[0]


def job_fragment_of(service: Service, user: User, name: str) -> tuple[str, dict[str, Any]]:
    """The job part of a job's page and the job: the one `name` means now (a name or a
    uid, as in the API), its history and log read by its uid."""
    job = service.get(name, user)
    uid = job["uid"]
    history = service.job_history(uid, user)
    now = time.time()
    allocation = views.allocation_series(job, history, now)
    speed = views.speed_series(job["epoch_time_by_workers"], job["max_workers"])
    log = service.log_tail(uid, user, LOG_LINES)
    return render("_job.html", job=job, history=views.history_rows(history), log=log, now=now,
                  log_lines=LOG_LINES, allocation_chart=allocation_chart(allocation),
                  measured=bool(job["epoch_time_by_workers"]),
                  epoch_chart=epoch_chart(speed), speedup_chart=speedup_chart(speed)), job


def scheduler_fragment(service: Service, user: User) -> str:
    activity = service.activity
    name_of = service.job_names.name_of
    errors = [views.error_row(e, user.admin, REDACTED, name_of) for e in activity.errors(20)]
    jobs = service.scheduler.jobs

    def can_see(name: str) -> bool:
        record = jobs.get(name)
        return user.admin if record is None else visible(user, record)

    decisions = [views.decision_row(d, can_see, name_of) for d in activity.decisions(30)]
    return render("_scheduler.html", schedulers=scheduler_views(service),
                  refusals=service.refusals(user), decisions=decisions,
                  errors=errors, last_reschedule=service.scheduler.last_reschedule,
                  latency_chart=latency_chart(activity.latency_histogram()))


def scheduler_views(service: Service) -> list[dict[str, Any]]:
    return [service.scheduler_view(t) for t in service.scheduler.cluster.gpu_types()]


# ----- chart specs (see voda/web/static/charts.js) --------------------------------------------
def allocation_chart(series: dict[str, Any]) -> dict[str, Any]:
    """GPUs over time as a step line, with its events as points on the same time axis."""
    times = series["times"]
    xs = sorted(set(times) | {t for points in series["events"].values() for t, _ in points})
    index = {t: i for i, t in enumerate(xs)}
    gpus: list[int | None] = [None] * len(xs)
    for t, g in zip(times, series["gpus"], strict=True):
        gpus[index[t]] = g
    lines: list[dict[str, Any]] = [{"label": "GPUs", "values": gpus, "step": True,
                                    "color": "#4269d0"}]
    colors = {"start": "#3ca951", "rescale": "#efb118", "migration": "#a463f2",
              "preemption": "#e5484d"}
    for label, points in series["events"].items():
        values: list[int | None] = [None] * len(xs)
        for t, g in points:
            values[index[t]] = g
        lines.append({"label": label, "values": values, "points": True,
                      "color": colors.get(label)})
    return {"kind": "lines", "title": "Allocation over time", "x": {"time": True},
            "y": {"label": "GPUs", "min": 0}, "xs": xs, "series": lines}


def epoch_chart(speed: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "lines", "title": "Epoch time by workers",
            "x": {"label": "workers", "integer": True},
            "y": {"label": "seconds per epoch", "min": 0}, "xs": speed["workers"],
            "series": [{"label": "model (Amdahl fit)", "values": speed["model"] or
                        [None] * len(speed["workers"]), "dash": True, "color": "#9498a0"},
                       {"label": "measured", "values": speed["measured"], "points": True,
                        "color": "#ff725c"}]}


def speedup_chart(speed: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "lines", "title": "Estimated speed-up by workers",
            "x": {"label": "workers", "integer": True}, "y": {"label": "speed-up", "min": 0},
            "xs": speed["workers"],
            "series": [{"label": "estimate the scheduler uses", "values": speed["speedup_model"],
                        "color": "#4269d0"},
                       {"label": "measured", "values": speed["speedup_measured"], "points": True,
                        "color": "#ff725c"}]}


def latency_chart(histogram: list[tuple[str, int]]) -> dict[str, Any]:
    chart = views.latency_chart(histogram)
    return {"kind": "bars", "title": "Decision latency (recent decisions)", "legend": False,
            "x": {"label": "decision time, ms (bucket's upper bound)",
                  "labels": chart["labels"]},
            "y": {"label": "decisions", "min": 0}, "xs": list(range(len(chart["labels"]))),
            "series": [{"label": "decisions", "values": chart["counts"]}]}


# ----- server-sent events ----------------------------------------------------------------------
def sse_message(event: str, html: str) -> str:
    data = "\n".join(f"data: {line}" for line in html.splitlines() or [""])
    return f"event: {event}\n{data}\n\n"


async def _events(request: Request, produce: Callable[[], str]) -> AsyncIterator[str]:
    """Push the fragment whenever it changes; a comment now and then keeps proxies open."""
    last: str | None = None
    quiet = 0.0
    yield "retry: 2000\n\n"
    while not await request.is_disconnected():
        try:
            html = await run_in_threadpool(produce)
        except NotFound as exc:  # the job is no longer there: said, and the page stops listening
            yield sse_message("update", f'<p class="error">{exc}</p>')
            yield sse_message("end", "gone")  # live.html: sse-close="end", no reconnecting
            return
        if html != last:
            yield sse_message("update", html)
            last, quiet = html, 0.0
        elif quiet >= KEEPALIVE_SECONDS:
            yield ": keep-alive\n\n"
            quiet = 0.0
        await asyncio.sleep(UPDATE_SECONDS)
        quiet += UPDATE_SECONDS


def _stream(request: Request, user: User, produce: Callable[[], str]) -> StreamingResponse:
    """The live part of a page, while the user and the service have a stream to spare
    (voda.api.ui.streams: 429 otherwise)."""
    return BoundedStream(_events(request, produce), request.app.state.stream_slots, user.name,
                         media_type="text/event-stream",
                         headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


# ----- login -----------------------------------------------------------------------------------
async def _form(request: Request) -> dict[str, str]:
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise HTTPException(413, f"body: too large: more than {MAX_FORM_BYTES} bytes")
    fields = parse_qs(body.decode("utf-8", "replace"), max_num_fields=10)
    return {k: v[0] for k, v in fields.items()}


@router.get("", response_class=HTMLResponse)
def home() -> RedirectResponse:
    return RedirectResponse("/ui/cluster", status_code=303)


def _login_page(target: str, error: str | None, status_code: int = 200,
                headers: dict[str, str] | None = None) -> HTMLResponse:
    return html(render("login.html", title="Log in", page="login", user=None, next=target,
                       error=error), status_code, headers)


@router.get("/login", response_class=HTMLResponse)
def login_page(request: Request, next_path: Annotated[str | None, Query(alias="next")] = None,
               ) -> HTMLResponse:
    return _login_page(safe_next(next_path), None)


@router.post("/login", response_class=HTMLResponse)
async def login(request: Request) -> Any:
    """The token is checked as the API checks a bearer token (failed attempts count
    against the client and are held back; a valid token is always accepted), and a
    session starts: its id, not the token, goes in the cookie."""
    check_same_origin(request)
    form = await _form(request)
    token = form.get("token", "").strip()
    target = safe_next(form.get("next"))
    if not token:
        return _login_page(target, "token: required", 422)
    try:
        user = user_for_token(request, token) if len(token) <= MAX_TOKEN_LENGTH else None
    except HTTPException as exc:  # 429: held back after failed attempts
        return _login_page(target, f"token: {exc.detail.split(': ', 1)[-1]}", exc.status_code,
                           exc.headers)
    if user is None:
        if len(token) > MAX_TOKEN_LENGTH:
            return _login_page(target, f"token: longer than {MAX_TOKEN_LENGTH} characters",
                               422)
        return _login_page(target, "token: unknown token", 401)
    sessions = sessions_of(request)
    previous = cookie_session_id(request)
    if previous:  # logging in again (as another user, say) ends the session it replaces
        sessions.revoke(previous)
    response = RedirectResponse(target, status_code=303)
    set_session_cookie(request, response, sessions.create(user))
    return response


@router.get("/session")
def session_alive(user: StreamUser) -> Response:
    """204 while the caller's login holds, 401 once it ended: what an open page asks
    after its live updates stopped (dashboard.js), to tell a lost connection from a
    session the service no longer knows (it restarted, or the user logged out)."""
    return Response(status_code=204, headers={"Cache-Control": "no-store"})


@router.post("/logout")
async def logout(request: Request) -> RedirectResponse:
    """Ends the session: its id is refused from now on, wherever the cookie was copied."""
    form = await _form(request)
    if current_session(request) is not None:
        check_form(request, form)
        sessions_of(request).revoke(cookie_session_id(request))
    else:
        check_same_origin(request)
    response = RedirectResponse("/ui/login", status_code=303)
    response.headers["Set-Cookie"] = clear_cookie(request)
    return response


# ----- pages and their streams -------------------------------------------------------------------
def _gpu_type(service: Service, value: str | None) -> str | None:
    if value and value not in service.scheduler.cluster.gpu_types():
        raise HTTPException(404, f"gpu_type: unknown GPU type {value[:100]!r}")
    return value or None


@router.get("/cluster", response_class=HTMLResponse)
def cluster_page(request: Request, user: PageUser, gpu_type: str | None = None) -> HTMLResponse:
    service = service_of(request)
    selected = _gpu_type(service, gpu_type)
    stream = "/ui/stream/cluster" + (f"?gpu_type={quote(selected)}" if selected else "")
    return _page(request, "cluster.html", user, "Cluster", "cluster", stream,
                 cluster_fragment(service, user, selected),
                 gpu_types=service.scheduler.cluster.gpu_types(), selected=selected)


@router.get("/stream/cluster")
def cluster_stream(request: Request, user: StreamUser,
                   gpu_type: str | None = None) -> StreamingResponse:
    service = service_of(request)
    selected = _gpu_type(service, gpu_type)
    return _stream(request, user, lambda: cluster_fragment(service, user, selected))


def _filters(service: Service, status: str | None, gpu_type: str | None, q: str | None,
             page: int, per_page: int) -> views.JobFilters:
    if status and status not in STATUSES:
        raise HTTPException(422, f"status: unknown status {status[:100]!r}; valid: "
                            f"{', '.join(STATUSES)}")
    if per_page not in views.PAGE_SIZES:
        raise HTTPException(422, f"per_page: must be one of "
                            f"{', '.join(map(str, views.PAGE_SIZES))}, got {per_page}")
    return views.JobFilters(status or None, _gpu_type(service, gpu_type), q or None, page,
                            per_page)


Page = Annotated[int, Query(ge=1, le=1_000_000)]
Search = Annotated[str | None, Query(max_length=200)]


@router.get("/jobs", response_class=HTMLResponse)
def jobs_page(request: Request, user: PageUser, status: str | None = None,
              gpu_type: str | None = None, q: Search = None, page: Page = 1,
              per_page: int = 50) -> HTMLResponse:
    service = service_of(request)
    filters = _filters(service, status, gpu_type, q, page, per_page)
    stream = "/ui/stream/jobs?" + "&".join(f"{k}={quote(str(v))}"
                                           for k, v in filters.query().items())
    return _page(request, "jobs.html", user, "Jobs", "jobs", stream,
                 jobs_fragment(service, user, filters), filters=filters,
                 counts=service.counts_by_status(user),
                 gpu_types=service.scheduler.cluster.gpu_types(), page_sizes=views.PAGE_SIZES)


@router.get("/stream/jobs")
def jobs_stream(request: Request, user: StreamUser, status: str | None = None,
                gpu_type: str | None = None, q: Search = None, page: Page = 1,
                per_page: int = 50) -> StreamingResponse:
    service = service_of(request)
    filters = _filters(service, status, gpu_type, q, page, per_page)
    return _stream(request, user, lambda: jobs_fragment(service, user, filters))


@router.get("/jobs/{name}", response_class=HTMLResponse)
def job_page(request: Request, name: str, user: PageUser) -> HTMLResponse:
    service = service_of(request)
    try:
        fragment, job = job_fragment_of(service, user, name)
    except NotFound:  # as in the API, a job the user may not see is not found either
        shown = name if len(name) <= 100 else name[:100] + "…"
        return not_found_page(request, user, "jobs", "Job not found",
                              f"No job named {shown!r}: it does not exist, or it is another "
                              "user's.", "/ui/jobs", "all jobs")
    # The page follows this job (its uid), even when a new job takes its name later.
    return _page(request, "job.html", user, job["name"], "jobs",
                 f"/ui/stream/jobs/{quote(job['uid'])}", fragment, name=job["name"],
                 uid=job["uid"])  # the actions act on this job, whatever its name's later ones


def not_found_page(request: Request, user: User, page: str, heading: str, message: str,
                   back: str, back_text: str) -> HTMLResponse:
    """A 404 as a page of the dashboard (its header, what was not found, a way back)."""
    return html(render("not_found.html", title=heading, page=page, user=user,
                       form_field=FORM_TOKEN_FIELD, form_token=form_token(request),
                       heading=heading, message=message, back=back, back_text=back_text),
                404)


@router.get("/stream/jobs/{name}")
def job_stream(request: Request, name: str, user: StreamUser) -> StreamingResponse:
    service = service_of(request)
    service.get(name, user)  # 404 at once rather than in the stream
    return _stream(request, user, lambda: job_fragment(service, user, name))


@router.get("/scheduler", response_class=HTMLResponse)
def scheduler_page(request: Request, user: PageUser) -> HTMLResponse:
    service = service_of(request)
    return _page(request, "scheduler.html", user, "Scheduler", "scheduler",
                 "/ui/stream/scheduler", scheduler_fragment(service, user),
                 schedulers=scheduler_views(service))


@router.get("/stream/scheduler")
def scheduler_stream(request: Request, user: StreamUser) -> StreamingResponse:
    service = service_of(request)
    return _stream(request, user, lambda: scheduler_fragment(service, user))

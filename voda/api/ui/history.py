"""The dashboard's History page: GPUs in service, allocated and in use, jobs waiting and
running, and how long the waiting jobs waited, over the last hour, day or week, for one
GPU type, from the samples the service keeps (voda.api.history)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import HTMLResponse

from voda.api.history import RANGES
from voda.api.service import Service
from voda.api.ui.routes import PageUser, _gpu_type, html, render, service_of
from voda.api.ui.session import FORM_TOKEN_FIELD, form_token

router = APIRouter(prefix="/ui", include_in_schema=False)


PageRange = Annotated[str, Query(alias="range", max_length=20)]


@dataclass(frozen=True)
class Window:
    """What a page over time shows: its service, the cluster's GPU types, the selected
    one, and the range (seconds, label)."""

    service: Service
    gpu_types: list[str]
    selected: str
    seconds: float
    label: str


def window_of(request: Request, gpu_type: str | None, time_range: str) -> Window:
    """A page's GPU type (the cluster's first by default) and `range` (a 422 naming it
    when unknown)."""
    if time_range not in RANGES:
        raise HTTPException(422, f"range: must be one of {', '.join(RANGES)}, got "
                            f"{time_range!r}")
    service = service_of(request)
    types = service.scheduler.cluster.gpu_types()
    return Window(service, types, _gpu_type(service, gpu_type) or types[0],
                  *RANGES[time_range])


def line(points: list[dict[str, Any]], name: str, key: str, color: str, scale: float = 1.0,
         step: bool = False) -> dict[str, Any]:
    """One series of a charts.js line chart: the points' `key` (None: a gap)."""
    return {"label": name, "values": [None if p[key] is None else round(p[key] / scale, 2)
                                      for p in points],
            "color": color, "step": step}


def history_charts(points: list[dict[str, float]], gpu_type: str,
                   label: str) -> list[dict[str, Any]]:
    """Three charts of charts.js on one time axis (waits in minutes)."""
    xs = [p["time"] for p in points]
    series = partial(line, points)
    return [
        {"kind": "lines", "title": f"{gpu_type} GPUs, {label}", "x": {"time": True},
         "y": {"label": "GPUs", "min": 0}, "xs": xs,
         "series": [series("in service", "gpus", "#9498a0", step=True),
                    series("allocated", "allocated", "#4269d0"),
                    series("in use", "in_use", "#3ca951")]},
        {"kind": "lines", "title": f"{gpu_type} queue length, {label}", "x": {"time": True},
         "y": {"label": "jobs", "min": 0}, "xs": xs,
         "series": [series("waiting", "waiting", "#e5484d"),
                    series("running", "running", "#4269d0")]},
        {"kind": "lines", "title": f"{gpu_type} waiting time, {label}", "x": {"time": True},
         "y": {"label": "minutes", "min": 0}, "xs": xs,
         "series": [series("mean wait", "wait_mean_seconds", "#efb118", 60.0),
                    series("longest wait", "wait_max_seconds", "#a463f2", 60.0)]},
    ]


# The History and Queues pages redraw their charts on a timer: as often as the service
# samples, but not more than every 2 s (a sample interval may be as short as 0.1 s).
REFRESH_FLOOR_SECONDS = 2.0


def refresh_seconds(service: Any) -> float:
    return max(service.settings.history_sample_seconds, REFRESH_FLOOR_SECONDS)


@router.get("/history", response_class=HTMLResponse)
def history_page(request: Request, user: PageUser, gpu_type: str | None = None,
                 time_range: PageRange = "hour") -> HTMLResponse:
    w = window_of(request, gpu_type, time_range)
    service, types, selected, label = w.service, w.gpu_types, w.selected, w.label
    points = service.cluster_history(selected, w.seconds)
    return html(render("history.html", title="History", page="history", user=user,
                       form_field=FORM_TOKEN_FIELD, form_token=form_token(request),
                       gpu_types=types, selected=selected, ranges=RANGES,
                       time_range=time_range, points=len(points),
                       every=service.settings.history_sample_seconds,
                       refresh=refresh_seconds(service), days=f"{service.settings.history_days:g}",
                       charts=history_charts(points, selected, label) if points else []))

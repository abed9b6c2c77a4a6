"""The dashboard's Queues page: per team queue, for one GPU type, the GPUs its jobs hold
against its guarantee and borrowing limit, what it borrows and lends, its waiting jobs
and the GPUs reclaimed from it, and over the last hour, day or week what it held against
its guarantee and its guarantee plus borrowing limit, from the samples the service keeps
(voda.api.history; docs/design/013-queues.md)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from voda.api.history import RANGES
from voda.api.ui.history import PageRange, line, refresh_seconds, window_of
from voda.api.ui.routes import PageUser, html, render
from voda.api.ui.session import FORM_TOKEN_FIELD, form_token

router = APIRouter(prefix="/ui", include_in_schema=False)


def queue_rows(queues: list[dict[str, Any]], gpu_type: str) -> list[dict[str, Any]]:
    """One row per queue: its usage of `gpu_type` and its weight."""
    rows = []
    for q in queues:
        usage = next((u for u in q["usage"] if u["gpu_type"] == gpu_type), None)
        if usage is not None:
            rows.append({"name": q["name"], "weight": q["weight"], "source": q["source"],
                         **usage})
    return rows


def held_chart(rows: list[dict[str, Any]], gpu_type: str) -> dict[str, Any]:
    return {"kind": "bars", "title": f"{gpu_type} GPUs held per queue", "legend": False,
            "x": {"label": "queue", "labels": [r["name"] for r in rows]},
            "y": {"label": "GPUs", "min": 0}, "xs": list(range(len(rows))),
            "series": [{"label": "GPUs held", "values": [r["used"] for r in rows]}]}


def queue_history_chart(queue: str, points: list[dict[str, Any]], gpu_type: str,
                        label: str) -> dict[str, Any]:
    """A queue's GPUs held against its guarantee and its guarantee plus borrowing limit
    (left out while borrowing is unlimited) on a time axis, as charts.js draws it."""
    ceiling = [{"ceiling": None if p["borrowing_limit"] is None
                else p["guarantee"] + p["borrowing_limit"]} for p in points]
    series = [line(points, "held", "used", "#4269d0"),
              line(points, "guarantee", "guarantee", "#3ca951", step=True)]
    if any(c["ceiling"] is not None for c in ceiling):
        series.append(line(ceiling, "guarantee + borrowing limit", "ceiling", "#efb118",
                           step=True))
    return {"kind": "lines", "title": f"{queue}: {gpu_type} GPUs, {label}",
            "x": {"time": True}, "y": {"label": "GPUs", "min": 0},
            "xs": [p["time"] for p in points], "series": series}


@router.get("/queues", response_class=HTMLResponse)
def queues_page(request: Request, user: PageUser, gpu_type: str | None = None,
                time_range: PageRange = "hour") -> HTMLResponse:
    w = window_of(request, gpu_type, time_range)
    service, types, selected, label = w.service, w.gpu_types, w.selected, w.label
    rows = queue_rows(service.queue_list(), selected)
    histories = {r["name"]: service.queue_history(r["name"], selected, w.seconds)
                 for r in rows}
    return html(render("queues.html", title="Queues", page="queues", user=user,
                       form_field=FORM_TOKEN_FIELD, form_token=form_token(request),
                       gpu_types=types, selected=selected, rows=rows,
                       chart=held_chart(rows, selected), ranges=RANGES,
                       time_range=time_range, every=service.settings.history_sample_seconds,
                       refresh=refresh_seconds(service),
                       history_charts=[queue_history_chart(name, points, selected, label)
                                       for name, points in histories.items() if points]))

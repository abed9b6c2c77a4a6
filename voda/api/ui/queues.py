"""The dashboard's Queues page: per team queue, for one GPU type, the GPUs its jobs hold
against its guarantee and borrowing limit, what it borrows and lends, its waiting jobs
and the GPUs reclaimed from it (docs/design/013-queues.md)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from voda.api.ui.routes import PageUser, _gpu_type, html, render, service_of
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


@router.get("/queues", response_class=HTMLResponse)
def queues_page(request: Request, user: PageUser, gpu_type: str | None = None) -> HTMLResponse:
    service = service_of(request)
    types = service.scheduler.cluster.gpu_types()
    selected = _gpu_type(service, gpu_type) or types[0]
    rows = queue_rows(service.queue_list(), selected)
    return html(render("queues.html", title="Queues", page="queues", user=user,
                       form_field=FORM_TOKEN_FIELD, form_token=form_token(request),
                       gpu_types=types, selected=selected, rows=rows,
                       chart=held_chart(rows, selected)))

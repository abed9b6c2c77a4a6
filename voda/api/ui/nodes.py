"""The dashboard's page of one node: its GPUs, the jobs on them, its changes, and (for
administrators) drain and uncordon. Opened from the cluster map (a node's name, a GPU
cell that holds no job of the viewer's)."""

from __future__ import annotations

from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, StreamingResponse

from voda.api.service import NotFound, Service
from voda.api.ui import views
from voda.api.ui.routes import (
    PageUser,
    StreamUser,
    _page,
    _stream,
    not_found_page,
    render,
    service_of,
)
from voda.api.ui.session import FORM_TOKEN_FIELD, form_token
from voda.config import User

router = APIRouter(prefix="/ui", include_in_schema=False)


def node_fragment(service: Service, user: User, name: str, token: str) -> str:
    """The live part; `token` is the session's form token (the drain form carries it)."""
    context = views.node_page(service.cluster_view(user), name)
    if context is None:
        raise NotFound(f"node {name[:100]!r} not found")
    return render("_node.html", events=service.node_events(name), user=user,
                  drained=name in service.drained, form_field=FORM_TOKEN_FIELD,
                  form_token=token, **context)


@router.get("/nodes/{name}", response_class=HTMLResponse)
def node_page(request: Request, name: str, user: PageUser) -> HTMLResponse:
    service = service_of(request)
    try:
        fragment = node_fragment(service, user, name, form_token(request))
    except NotFound:
        shown = name if len(name) <= 100 else name[:100] + "…"
        return not_found_page(request, user, "cluster", "Node not found",
                              f"No node named {shown!r}: the cluster never had it.",
                              "/ui/cluster", "the cluster")
    return _page(request, "node.html", user, f"Node {name}", "cluster",
                 f"/ui/stream/nodes/{quote(name)}", fragment, name=name)


@router.get("/stream/nodes/{name}")
def node_stream(request: Request, name: str, user: StreamUser) -> StreamingResponse:
    service = service_of(request)
    token = form_token(request)
    node_fragment(service, user, name, token)  # 404 at once rather than in the stream
    return _stream(request, user, lambda: node_fragment(service, user, name, token))

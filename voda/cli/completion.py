"""Shell completion of job and node names, GPU types, algorithms and statuses:
`voda describe <TAB>` asks the service (briefly).

Completion itself comes from typer: `voda --install-completion` (bash, zsh, fish,
PowerShell) or `voda --show-completion` to see the script.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import typer

COMPLETION_TIMEOUT_SECONDS = 1.0
MAX_SUGGESTIONS = 200


def _ask(ctx: typer.Context | None, path: str, query: dict[str, Any] | None = None) -> Any:
    """The service's JSON answer to GET `path`, or None when it cannot be asked."""
    from voda.cli.client import Client, Unreachable

    params = ctx.params if ctx is not None else {}
    try:
        client = Client(params.get("url"), params.get("token"),
                        timeout=COMPLETION_TIMEOUT_SECONDS)
        status, body = client.request("GET", path, params=query)
        client.close()
    except (typer.Exit, Unreachable):
        return None
    return json.loads(body) if status == 200 else None


def _starting(words: list[str], incomplete: str) -> list[str]:
    return [w for w in words if w.startswith(incomplete)][:MAX_SUGGESTIONS]


def complete_job_names(ctx: typer.Context, incomplete: str) -> list[str]:
    """Names of the caller's jobs that start with what was typed; none when the service
    cannot be asked (completion never fails loudly)."""
    query: dict[str, Any] = {"limit": MAX_SUGGESTIONS}
    if incomplete:
        query["q"] = incomplete
    page = _ask(ctx, "/v1/jobs", query)
    names = dict.fromkeys(item["name"] for item in page.get("items", [])) if page else {}
    return _starting(list(names), incomplete)  # finished jobs may share a name


def complete_node_names(ctx: typer.Context, incomplete: str) -> list[str]:
    cluster = _ask(ctx, "/v1/cluster")
    return _starting([n["name"] for n in cluster.get("nodes", [])], incomplete) if cluster \
        else []


def complete_gpu_types(ctx: typer.Context, incomplete: str) -> list[str]:
    cluster = _ask(ctx, "/v1/cluster")
    return _starting([t["gpu_type"] for t in cluster.get("gpu_types", [])], incomplete) \
        if cluster else []


def complete_algorithms(ctx: typer.Context, incomplete: str) -> list[str]:
    """The names the service takes (built-in and configured import paths)."""
    gpu_type = (ctx.params.get("gpu_type") if ctx is not None else None) or "default"
    view = _ask(ctx, f"/v1/schedulers/{quote(gpu_type, safe='')}")
    return _starting(list(view.get("valid_algorithms", [])), incomplete) if view else []


def complete_statuses(ctx: typer.Context, incomplete: str) -> list[str]:
    # JobStatus's values, written out: voda.core.model is not for the client commands
    # (the import contract keeps NumPy out of them).
    return _starting(["Submitted", "Waiting", "Running", "Completed", "Failed", "Canceled"],
                     incomplete)

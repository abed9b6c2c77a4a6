"""Shell completion of job names: `voda describe <TAB>` asks the service (briefly).

Completion itself comes from typer: `voda --install-completion` (bash, zsh, fish,
PowerShell) or `voda --show-completion` to see the script.
"""

from __future__ import annotations

import json

import typer

COMPLETION_TIMEOUT_SECONDS = 1.0
MAX_SUGGESTIONS = 200


def complete_job_names(ctx: typer.Context, incomplete: str) -> list[str]:
    """Names of the caller's jobs that start with what was typed; none when the service
    cannot be asked (completion never fails loudly)."""
    from voda.cli.client import Client, Unreachable

    params = ctx.params if ctx is not None else {}
    try:
        client = Client(params.get("url"), params.get("token"),
                        timeout=COMPLETION_TIMEOUT_SECONDS)
        query = {"limit": MAX_SUGGESTIONS, "q": incomplete} if incomplete else {
            "limit": MAX_SUGGESTIONS}
        status, body = client.request("GET", "/v1/jobs", params=query)
        client.close()
    except (typer.Exit, Unreachable):
        return []
    if status != 200:
        return []
    names = [item["name"] for item in json.loads(body).get("items", [])]
    return [n for n in names if n.startswith(incomplete)]

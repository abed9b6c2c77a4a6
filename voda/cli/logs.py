"""`voda logs NAME [-f] [--tail N]`: a job's log, from the service (GET /v1/jobs/{name}/logs).

The local backend appends every rank's output, across restarts, to the job's log, with
its own lines (launch, stop, completion, failure) marked `[voda ...]`; the service
serves it to the job's owner and the administrators, so the command works against a
service on another machine and needs no access to the run dir. With `-f` it prints
what is written until the job completes, fails or is canceled (or Ctrl-C).
"""

from __future__ import annotations

import http.client
import sys

import typer

from voda.cli.client import Client, Unreachable, error_message, segment
from voda.cli.common import (
    EXIT_NOT_FOUND,
    EXIT_REFUSED,
    EXIT_SERVER,
    EXIT_UNREACHABLE,
    Token,
    Url,
    die,
    stop_on_interrupt,
)

READ_BYTES = 64 << 10


def register(app: typer.Typer) -> None:
    @app.command()
    def logs(
        name: str = typer.Argument(..., help="Job name."),
        follow_log: bool = typer.Option(False, "--follow", "-f",
                                        help="Keep printing until the job ends."),
        lines: int = typer.Option(0, "--tail", "-n", min=0,
                                  help="Only the last N lines (0: the whole log)."),
        url: Url = None, token: Token = None,
    ) -> None:
        """Print a job's log (all ranks, all restarts), as the service keeps it."""
        params: dict[str, str | int] = {}
        if lines:
            params["tail"] = lines
        if follow_log:
            params["follow"] = "true"
            stop_on_interrupt()
        client = Client(url, token)
        try:
            stream(client, f"/v1/jobs/{segment(name)}/logs", params)
        except KeyboardInterrupt:
            raise typer.Exit(130) from None
        finally:
            client.close()


def stream(client: Client, path: str, params: dict[str, str | int]) -> None:
    """Copy the answer's body to stdout as it comes; an error answer exits with its code."""
    try:
        response = client.open("GET", path, params)
        if response.status >= 400:
            body = response.read()
            die(f"error {response.status}: {error_message(body)}",
                EXIT_NOT_FOUND if response.status == 404 else EXIT_SERVER
                if response.status >= 500 else EXIT_REFUSED)
        client.wait_forever()  # a followed log may be quiet for long
        out = sys.stdout.buffer
        while chunk := response.read1(READ_BYTES):
            out.write(chunk)
            out.flush()
    except Unreachable as exc:
        die(str(exc), EXIT_UNREACHABLE)
    except (OSError, ValueError, http.client.HTTPException) as exc:  # broke mid-answer
        die(f"the log stopped: {exc}", EXIT_UNREACHABLE)

"""`voda history`: the cluster's history (GET /v1/cluster/history), the series the
dashboard's History page draws, as a compact table."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from voda.cli.client import Client
from voda.cli.common import EXIT_USAGE, Token, Url, die, duration, print_json, print_yaml
from voda.cli.completion import complete_gpu_types
from voda.cli.table import Table, say

RANGES = ("hour", "day", "week")
ROWS_MAX = 240  # the service averages a range into at most this many points


def history_table(view: dict[str, Any]) -> Table:
    """One row a point: its time (local), GPUs in service, allocated and in use, jobs
    running and waiting, the mean and longest wait."""
    stamp = "%a %H:%M" if view["range"] == "week" else "%H:%M"
    table = Table("TIME", "GPUS", "ALLOCATED", "IN USE", "RUNNING", "WAITING", "MEAN WAIT",
                  "LONGEST WAIT", title=f"{view['gpu_type']} GPUs, last {view['range']}")
    for p in view["points"]:
        table.add_row(time.strftime(stamp, time.localtime(p["time"])), f"{p['gpus']:g}",
                      f"{p['allocated']:.1f}", f"{p['in_use']:.1f}", f"{p['running']:.1f}",
                      f"{p['waiting']:.1f}", duration(p["wait_mean_seconds"]),
                      duration(p["wait_max_seconds"]))
    return table


def register(app: typer.Typer) -> None:
    @app.command()
    def history(
        range_: Annotated[str, typer.Option(
            "--range", help="The last hour, day or week.")] = "day",
        gpu_type: Annotated[str | None, typer.Option(
            help="GPU type (default: the cluster's first).",
            autocompletion=complete_gpu_types)] = None,
        rows: Annotated[int, typer.Option(
            help=f"At most this many rows (1-{ROWS_MAX}): the range's samples averaged in "
            "equal spans of time.")] = 24,
        output: Annotated[str | None, typer.Option(
            "--output", "-o", help="yaml or json: the service's answer.")] = None,
        url: Url = None, token: Token = None,
    ) -> None:
        """The cluster's history: GPUs allocated and in use, queue length and waiting time
        over the last hour, day or week (what the dashboard's History page draws)."""
        if range_ not in RANGES:
            die(f"range: must be one of {', '.join(RANGES)}, got {range_!r}", EXIT_USAGE)
        if output not in (None, "yaml", "json"):
            die(f"output: must be yaml or json, got {output!r}", EXIT_USAGE)
        if not 1 <= rows <= ROWS_MAX:
            die(f"rows: must be 1 to {ROWS_MAX}, got {rows}", EXIT_USAGE)
        params: dict[str, Any] = {"range": range_, "points": rows}
        if gpu_type is not None:
            params["gpu_type"] = gpu_type
        view = Client(url, token).call("GET", "/v1/cluster/history", params=params)
        if output == "json":
            print_json(view)
        elif output == "yaml":
            print_yaml(view)
        elif not view["points"]:
            say(f"no samples of {view['gpu_type']} in the last {view['range']} yet "
                f"(the service samples every {view['sample_seconds']:g} s)")
        else:
            history_table(view).print()

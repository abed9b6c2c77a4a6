"""`voda history`: the cluster's history (GET /v1/cluster/history), the series the
dashboard's History page draws, as a compact table."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Annotated, Any

import typer

from voda.cli.client import Client
from voda.cli.common import EXIT_USAGE, Token, Url, die, duration, print_json, print_yaml
from voda.cli.completion import complete_gpu_types
from voda.cli.table import Table, say

RANGES = ("hour", "day", "week")
ROWS_MAX = 240  # the service averages a range into at most this many points


def point_time(view: dict[str, Any], point: dict[str, Any]) -> str:
    """A point's time, local: with the weekday over a week's range."""
    stamp = "%a %H:%M" if view["range"] == "week" else "%H:%M"
    return time.strftime(stamp, time.localtime(point["time"]))


def history_table(view: dict[str, Any]) -> Table:
    """One row a point: its time (local), GPUs in service, allocated and in use, jobs
    running and waiting, the mean and longest wait."""
    table = Table("TIME", "GPUS", "ALLOCATED", "IN USE", "RUNNING", "WAITING", "MEAN WAIT",
                  "LONGEST WAIT", title=f"{view['gpu_type']} GPUs, last {view['range']}")
    for p in view["points"]:
        table.add_row(point_time(view, p), f"{p['gpus']:g}",
                      f"{p['allocated']:.1f}", f"{p['in_use']:.1f}", f"{p['running']:.1f}",
                      f"{p['waiting']:.1f}", duration(p["wait_mean_seconds"]),
                      duration(p["wait_max_seconds"]))
    return table


# The options of a history (the cluster's, a queue's), checked by `query`.
Range = Annotated[str, typer.Option("--range", help="The last hour, day or week.")]
HistoryGpuType = Annotated[str | None, typer.Option(
    "--gpu-type", help="GPU type (default: the cluster's first).",
    autocompletion=complete_gpu_types)]
Rows = Annotated[int, typer.Option(
    help=f"At most this many rows (1-{ROWS_MAX}): the range's samples averaged in equal "
    "spans of time.")]
Output = Annotated[str | None, typer.Option(
    "--output", "-o", help="yaml or json: the service's answer.")]


def query(range_: str, gpu_type: str | None, rows: int, output: str | None) -> dict[str, Any]:
    """The request's parameters; a bad option is a usage error naming it."""
    if range_ not in RANGES:
        die(f"range: must be one of {', '.join(RANGES)}, got {range_!r}", EXIT_USAGE)
    if output not in (None, "yaml", "json"):
        die(f"output: must be yaml or json, got {output!r}", EXIT_USAGE)
    if not 1 <= rows <= ROWS_MAX:
        die(f"rows: must be 1 to {ROWS_MAX}, got {rows}", EXIT_USAGE)
    params: dict[str, Any] = {"range": range_, "points": rows}
    if gpu_type is not None:
        params["gpu_type"] = gpu_type
    return params


def show(view: dict[str, Any], output: str | None,
         table: Callable[[dict[str, Any]], Table]) -> None:
    """The service's answer as asked: JSON, YAML, or `table(view)`."""
    if output == "json":
        print_json(view)
    elif output == "yaml":
        print_yaml(view)
    elif not view["points"]:
        say(f"no samples of {view['gpu_type']} in the last {view['range']} yet "
            f"(the service samples every {view['sample_seconds']:g} s)")
    else:
        table(view).print()


def register(app: typer.Typer) -> None:
    @app.command()
    def history(range_: Range = "day", gpu_type: HistoryGpuType = None, rows: Rows = 24,
                output: Output = None, url: Url = None, token: Token = None) -> None:
        """The cluster's history: GPUs allocated and in use, queue length and waiting time
        over the last hour, day or week (what the dashboard's History page draws)."""
        params = query(range_, gpu_type, rows, output)
        show(Client(url, token).call("GET", "/v1/cluster/history", params=params), output,
             history_table)

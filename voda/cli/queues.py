"""`voda queue list | describe NAME`: the team queues of a running service, with each
one's usage per GPU type against its guarantee (docs/design/013-queues.md), through the
REST API."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from voda.cli.client import Client, segment
from voda.cli.common import AsJson, Token, Url, print_json
from voda.cli.history import HistoryGpuType, Output, Range, Rows, point_time, query, show
from voda.cli.table import Table

QueueName = Annotated[str, typer.Argument(help="Queue name.")]


def limit(value: int | None) -> str:
    return "unlimited" if value is None else str(value)


def shown_rows(queue: dict[str, Any]) -> list[dict[str, Any]]:
    """Its GPU types with something to show (all of them when none has)."""
    rows = [u for u in queue["usage"] if u["guarantee"] or u["used"] or u["waiting_jobs"]
            or u["lent"] or u["reclaimed_by_shrinking"] or u["reclaimed_by_preemption"]]
    return rows or queue["usage"]


def queue_table(queues: list[dict[str, Any]]) -> Table:
    table = Table("QUEUE", "GPU TYPE", "USED/GUARANTEE", "BORROWED", "LENT", "WAITING",
                  "RECLAIMED", "WEIGHT")
    for q in queues:
        for u in shown_rows(q):
            reclaimed = u["reclaimed_by_shrinking"] + u["reclaimed_by_preemption"]
            table.add_row(q["name"], u["gpu_type"], f"{u['used']}/{u['guarantee']}",
                          str(u["borrowed"]), str(u["lent"]), str(u["waiting_jobs"]),
                          str(reclaimed), f"{q['weight']:g}")
    return table


def describe_screen(q: dict[str, Any]) -> list[Table]:
    match = ", ".join(f"{k}={v}" for k, v in q["match"].items()) or "-"
    head = Table("", "", show_header=False)
    for label, value in (("Name", q["name"]), ("Source", q["source"]),
                         ("Weight", f"{q['weight']:g}"), ("Match", match)):
        head.add_row(label, value)
    usage = Table("GPU TYPE", "GUARANTEE", "BORROWING LIMIT", "LENDING LIMIT", "USED",
                  "BORROWED", "LENT", "WAITING", "RECLAIMED (SHRINK/PREEMPT)")
    for u in q["usage"]:
        usage.add_row(u["gpu_type"], str(u["guarantee"]), limit(u["borrowing_limit"]),
                      limit(u["lending_limit"]), str(u["used"]), str(u["borrowed"]),
                      str(u["lent"]), str(u["waiting_jobs"]),
                      f"{u['reclaimed_by_shrinking']}/{u['reclaimed_by_preemption']}")
    return [head, usage]


def history_table(view: dict[str, Any]) -> Table:
    """One row a point: its time (local), GPUs held against the guarantee and the
    borrowing limit, borrowed, lent, and jobs waiting."""
    table = Table("TIME", "USED", "GUARANTEE", "BORROWING LIMIT", "BORROWED", "LENT",
                  "WAITING", title=f"queue {view['queue']}, {view['gpu_type']} GPUs, last "
                  f"{view['range']}")
    for p in view["points"]:
        limit_ = "unlimited" if p["borrowing_limit"] is None else f"{p['borrowing_limit']:g}"
        table.add_row(point_time(view, p), f"{p['used']:.1f}",
                      f"{p['guarantee']:g}", limit_, f"{p['borrowed']:.1f}",
                      f"{p['lent']:.1f}", f"{p['waiting']:.1f}")
    return table


def register(app: typer.Typer) -> None:
    queue_app = typer.Typer(help="Team queues: guarantees, borrowing and lending, and what "
                                 "each holds now.", no_args_is_help=True)

    @queue_app.command("list")
    def queue_list(url: Url = None, token: Token = None, as_json: AsJson = False) -> None:
        """Every queue with its usage per GPU type against its guarantee."""
        view = Client(url, token).call("GET", "/v1/queues")
        if as_json:
            print_json(view)
            return
        queue_table(view["queues"]).print()

    @queue_app.command("describe")
    def queue_describe(name: QueueName, url: Url = None, token: Token = None,
                       as_json: AsJson = False) -> None:
        """One queue: its limits per GPU type, what it holds, lends and had reclaimed."""
        view = Client(url, token).call("GET", f"/v1/queues/{segment(name, 'queue name')}")
        if as_json:
            print_json(view)
            return
        for part in describe_screen(view):
            part.print()

    @queue_app.command("history")
    def queue_history(name: QueueName, range_: Range = "day", gpu_type: HistoryGpuType = None,
                      rows: Rows = 24, output: Output = None, url: Url = None,
                      token: Token = None) -> None:
        """One queue over the last hour, day or week: GPUs held against its guarantee and
        borrowing limit, borrowed, lent, jobs waiting (what the dashboard's Queues page
        draws)."""
        params = query(range_, gpu_type, rows, output)
        view = Client(url, token).call(
            "GET", f"/v1/queues/{segment(name, 'queue name')}/history", params=params)
        show(view, output, history_table)

    app.add_typer(queue_app, name="queue")

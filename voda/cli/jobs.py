"""`voda submit | jobs | describe | delete | priority`: jobs, through the REST API."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from voda.cli.client import Client, segment
from voda.cli.common import (
    EXIT_USAGE,
    AsJson,
    Token,
    Url,
    ago,
    check_output,
    die,
    documents_of,
    duration,
    out,
    print_json,
    print_yaml,
    read_input,
    stop_on_interrupt,
)
from voda.cli.completion import complete_gpu_types, complete_job_names, complete_statuses
from voda.cli.table import Table, say

JobName = Annotated[str, typer.Argument(
    help="Job name (the live job of that name, else the newest) or uid.",
    autocompletion=complete_job_names)]
PAGE_LIMIT = 1000  # the API's largest page: what --all asks for at a time
MAX_WATCH_ROWS = 200
EVENTS_SHOWN = 5  # the newest events `describe` prints


def in_time(at: float | None, now: float | None = None) -> str:
    """A forecast instant as time from now: 'now', 'in 1h 5m', '-' when none."""
    if at is None:
        return "-"
    seconds = at - (time.time() if now is None else now)
    return "now" if seconds <= 0 else f"in {duration(seconds)}"


def forecast_line(forecast: dict[str, Any] | None) -> str:
    """The forecast of `voda describe`, with its basis."""
    if not forecast:
        return "none yet"
    start = "running" if forecast.get("running") else f"starts {in_time(forecast['start'])}"
    finish = ("does not finish as things are" if forecast["finish"] is None
              else f"finishes {in_time(forecast['finish'])}")
    return f"{start}, {finish} ({forecast['basis']})"


def jobs_table(items: list[dict[str, Any]], wide: bool = False) -> Table:
    """The jobs, with a REASON column (why a job holds fewer GPUs than its max); `wide`
    adds the reason's sentence, the forecast start and finish, and the uid."""
    columns = ["NAME", "USER", "STATUS", "GPU TYPE", "WORKERS", "MIN-MAX", "PRIORITY",
               "EPOCHS", "AGE", "REASON"]
    if wide:
        columns += ["MESSAGE", "START (FORECAST)", "FINISH (FORECAST)", "UID"]
    table = Table(*columns)
    if wide:
        table.caption = "forecasts assume no new arrivals"
    for j in items:
        reason = j.get("reason") or {}
        row = [j["name"], j["user"], j["status"], type_text(j), str(j["workers"]),
               f"{j['min_workers']}-{j['max_workers']}", str(j["priority"]),
               f"{j['completed_epochs']:g}/{j['epochs']}", ago(j["submit_time"]),
               reason.get("code", "-")]
        if wide:
            row.append(reason.get("message", ""))
            f = j.get("forecast")
            if not f:
                row += ["-", "-"]
            else:
                row += ["running" if f.get("running") else in_time(f["start"]),
                        in_time(f["finish"])]
            row.append(j["uid"])
        table.add_row(*row)
    return table


def type_text(job: dict[str, Any]) -> str:
    """The GPU type a job runs on, and the types it accepts when it accepts several."""
    accepted = job.get("gpu_types") or []
    if not accepted:
        return str(job["gpu_type"])
    return f"{job['gpu_type']} (of {'any' if '*' in accepted else '|'.join(accepted)})"


def conditions_table(job: dict[str, Any]) -> Table:
    """Conditions, the way kubectl describe shows them: AtMax is False while the job holds
    fewer GPUs than its max, with the reason's code and sentence."""
    table = Table("TYPE", "STATUS", "REASON", "SINCE", "MESSAGE", title="Conditions:")
    reason = job.get("reason")
    if reason:
        table.add_row("AtMax", "False", reason["code"], ago(reason["since"]), reason["message"])
    else:
        table.add_row("AtMax", "True" if job["status"] not in TERMINAL else "Unknown", "-",
                      "-", "")
    return table


TERMINAL = ("Completed", "Failed", "Canceled")


def events_table(events: list[dict[str, Any]]) -> Table:
    """The newest events, the way kubectl describe shows them."""
    table = Table("AGE", "FIELD", "FROM", "TO", "MESSAGE", title="Events:")
    for event in events:
        table.add_row(ago(event["time"]), event["field"], event["old"] or "-", event["new"],
                      event["message"] or "")
    return table


def goodput_line(summary: dict[str, Any]) -> str:
    """The goodput model a job reported (or its category's), and the batch it picks now."""
    if summary["reported"]:
        text = f"reported, measured on {summary['measured_gpus']} GPUs"
    else:
        text = "not reported"
    if summary.get("category_measured_gpus"):
        text += f"; category's best on {summary['category_measured_gpus']} GPUs"
    if summary.get("throughput_from"):
        text += f"; sized by the {summary['throughput_from']}'s model"
    batch = summary.get("batch_now")
    if batch:
        text += (f"; now batch {batch['batch_size']} ({batch['atomic_bsz']} per GPU x "
                 f"{batch['accum_steps'] + 1} on {batch['gpus']} GPUs), goodput "
                 f"{batch['goodput']:.4g}/s")
    return text


def all_pages(client: Client, params: dict[str, Any]) -> dict[str, Any]:
    """Every job the filters match, following next_offset page by page."""
    items: list[dict[str, Any]] = []
    query = {**params, "limit": PAGE_LIMIT, "offset": params.get("offset", 0)}
    while True:
        page = client.call("GET", "/v1/jobs", params=query)
        items.extend(page["items"])
        if page["next_offset"] is None:
            return {"items": items, "total": page["total"], "offset": params.get("offset", 0),
                    "limit": len(items), "next_offset": None}
        query["offset"] = page["next_offset"]


def watch(client: Client, params: dict[str, Any], interval: float) -> None:
    """A live table until Ctrl-C (a terminal redraws it; a pipe gets one table a round)."""
    def render() -> str:
        page = client.call("GET", "/v1/jobs", params={**params,
                                                      "limit": min(params["limit"],
                                                                   MAX_WATCH_ROWS)})
        table = jobs_table(page["items"])
        table.caption = (f"{page['total']} jobs · {time.strftime('%H:%M:%S')} · every "
                         f"{interval:g} s · Ctrl-C to stop")
        return table.render()

    stop_on_interrupt()
    try:
        if sys.stdout.isatty():
            from rich.live import Live
            from rich.text import Text

            with Live(Text(render()), console=out.console(), auto_refresh=False) as live:
                while True:
                    time.sleep(interval)
                    live.update(Text(render()), refresh=True)
        else:
            while True:
                sys.stdout.write(render())
                sys.stdout.flush()
                time.sleep(interval)
    except KeyboardInterrupt:
        raise typer.Exit(0) from None


def register(app: typer.Typer) -> None:
    @app.command()
    def submit(
        files: Annotated[list[Path], typer.Option(
            "-f", "--file", help="Job file (YAML or JSON; several YAML documents separated "
            "by --- are several jobs); - reads standard input. Repeat for several files.")],
        url: Url = None, token: Token = None, as_json: AsJson = False,
    ) -> None:
        """Submit jobs (Voda compact spec, MPIJob or PyTorchJob), one per document, in
        order; the first refused stops the rest (those before it stay submitted)."""
        documents = []
        for path in files:
            bodies = documents_of(read_input(path, "file"), "file")
            documents += [(f"{path}" + (f" (document {i} of {len(bodies)})"
                                        if len(bodies) > 1 else ""), body)
                          for i, body in enumerate(bodies, 1)]
        client = Client(url, token)
        submitted = []
        for where, body in documents:
            job = client.call("POST", "/v1/jobs", content=body, content_type="application/yaml",
                              context=where if len(documents) > 1 else None)
            submitted.append(job)
            if not as_json:
                say(f"submitted {job['name']} ({job['status']})")
        if as_json:
            print_json(submitted[0] if len(submitted) == 1 else submitted)

    @app.command()
    def jobs(
        status: Annotated[str | None, typer.Option(help="Only jobs in this status.",
                                                   autocompletion=complete_statuses)] = None,
        gpu_type: Annotated[str | None, typer.Option(help="Only jobs of this GPU type.",
                                                     autocompletion=complete_gpu_types)] = None,
        user: Annotated[str | None, typer.Option(help="Only this user's jobs.")] = None,
        search: Annotated[str | None, typer.Option(
            "--search", "-q", help="Only jobs whose name or owner contain this.")] = None,
        limit: Annotated[int, typer.Option(help="Jobs per page (1-1000).")] = 100,
        offset: Annotated[int, typer.Option(help="Jobs to skip.")] = 0,
        all_: Annotated[bool, typer.Option("--all", help="Every job: page through them "
                                           "all.")] = False,
        watch_: Annotated[bool, typer.Option("--watch", "-w", help="A live table, redrawn "
                                             "until Ctrl-C.")] = False,
        interval: Annotated[float, typer.Option(help="Seconds between redraws of "
                                                "--watch.", min=0.2)] = 2.0,
        output: Annotated[str | None, typer.Option(
            "--output", "-o", help="wide: add each reason's sentence and the forecast start "
            "and finish (assuming no new arrivals); yaml or json: the service's answer.")
        ] = None,
        url: Url = None, token: Token = None, as_json: AsJson = False,
    ) -> None:
        """List jobs."""
        check_output(output)
        as_json = as_json or output == "json"
        if all_ and watch_:
            die("all: --all and --watch do not go together", EXIT_USAGE)
        params = {k: v for k, v in {"status": status, "gpu_type": gpu_type, "user": user,
                                    "q": search, "limit": limit, "offset": offset}.items()
                  if v is not None}
        client = Client(url, token)
        if watch_:
            watch(client, params, interval)
            return
        page = all_pages(client, params) if all_ else client.call("GET", "/v1/jobs",
                                                                  params=params)
        if as_json:
            print_json(page)
            return
        if output == "yaml":
            print_yaml(page)
            return
        jobs_table(page["items"], wide=output == "wide").print()
        if page["next_offset"] is not None:
            say(f"{page['total']} jobs; next page: --offset {page['next_offset']} (or --all)")

    @app.command()
    def describe(name: JobName, url: Url = None, token: Token = None,
                 as_json: AsJson = False) -> None:
        """Show one job: status, placement, attained service, estimates."""
        job = Client(url, token).call("GET", f"/v1/jobs/{segment(name)}")
        if as_json:
            print_json(job)
            return
        placement = ", ".join(f"{p['node']}:{p['workers']}" for p in job["placement"]) or "-"
        rows = [
            ("Name", job["name"]), ("UID", job["uid"]), ("User", job["user"]),
            ("Kind", job["kind"]),
            ("Status", job["status"]), ("GPU type", type_text(job)),
            ("Workers", f"{job['workers']} (min {job['min_workers']}, max {job['max_workers']})"),
            ("Placement", placement), ("Priority", str(job["priority"])),
            ("Epochs", f"{job['completed_epochs']:g}/{job['epochs']}"),
            ("Waiting", duration(job["waiting_seconds"])),
            ("Running", duration(job["running_seconds"])),
            ("Total", duration(job["total_seconds"])),
            ("GPU-seconds", f"{job['gpu_seconds']:.0f}"),
            ("Remaining (est.)", duration(job["estimated_remaining_seconds"])),
            ("Forecast", forecast_line(job.get("forecast"))),
            ("Speedup", " ".join(f"{k}:{v:.2f}" for k, v in job["speedup"].items())),
        ]
        if job.get("gpu_type_reason"):
            rows.append(("Type chosen", job["gpu_type_reason"]))
        if job.get("goodput"):
            rows.append(("Goodput", goodput_line(job["goodput"])))
        if job.get("queue") is not None:
            rows.append(("Queue", str(job["queue"])))
        if job.get("unschedulable"):
            rows.append(("Unschedulable", job["unschedulable"]))
        if job.get("suspended"):
            rows.append(("Suspended", job["suspended"]))
        if job.get("failure_reason"):
            rows.append(("Failure", job["failure_reason"]))
        table = Table("", "", show_header=False)
        for key, value in rows:
            table.add_row(key, value)
        table.print()
        conditions_table(job).print()
        events = job.get("events", [])[-EVENTS_SHOWN:]
        if events:
            events_table(events).print()

    @app.command()
    def delete(
        names: Annotated[list[str], typer.Argument(help="Jobs to delete.",
                                                   autocompletion=complete_job_names)],
        url: Url = None, token: Token = None, as_json: AsJson = False,
    ) -> None:
        """Delete (cancel) jobs."""
        client = Client(url, token)
        done = [client.call("DELETE", f"/v1/jobs/{segment(name)}") for name in names]
        if as_json:
            print_json(done)
        else:
            for job in done:
                say(f"deleted {job['name']} ({job['status']})")

    # "-1" is a value here, not an option: it gets the service's message, not click's.
    @app.command(context_settings={"ignore_unknown_options": True})
    def priority(
        name: JobName,
        value: Annotated[int, typer.Argument(help="New priority; 0 is the highest.")],
        url: Url = None, token: Token = None, as_json: AsJson = False,
    ) -> None:
        """Change a job's priority."""
        job = Client(url, token).call("PATCH", f"/v1/jobs/{segment(name)}",
                                      json_body={"priority": value})
        if as_json:
            print_json(job)
        else:
            say(f"{job['name']}: priority {job['priority']}")

"""`voda cluster | top | algorithm`: the cluster and its schedulers, through the REST API."""

from __future__ import annotations

import json
import time
from typing import Annotated, Any

import typer

from voda.cli.client import TOKEN, Client, segment
from voda.cli.common import EXIT_USAGE, AsJson, Token, Url, die, out, print_json, stop_on_interrupt
from voda.cli.completion import complete_algorithms, complete_gpu_types
from voda.cli.table import Table as PlainTable
from voda.cli.table import say

# Each job drawn on the map gets a symbol, in the order the map shows the jobs: its cells
# are that symbol, so jobs are told apart without colour (piped output, NO_COLOR, colour-blind
# readers), and a legend line names them. In a colour terminal the symbol stands on the
# job's colour: the Okabe-Ito palette, with dark or white text for contrast.
SYMBOLS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
MORE = "+"  # the cells of jobs beyond len(SYMBOLS)
JOB_COLORS = (("#e69f00", "black"), ("#56b4e9", "black"), ("#009e73", "black"),
              ("#f0e442", "black"), ("#0072b2", "white"), ("#d55e00", "black"),
              ("#cc79a7", "black"), ("#000000", "white"))
OTHERS, FREE, LOST = "▒", "·", "x"


def all_nodes(view: dict[str, Any]) -> list[dict[str, Any]]:
    """Ready and cordoned nodes, then the lost ones (removed, or gone from the backend)."""
    return [*view["nodes"], *view.get("lost_nodes", [])]


def map_order(view: dict[str, Any]) -> list[dict[str, Any]]:
    """The nodes as `voda top` draws them: by spine, then leaf."""
    return sorted(all_nodes(view), key=lambda n: (n.get("spine", ""), n["leaf"]))


def job_symbols(view: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """job -> (symbol, rich style), in the order the jobs first appear on the map."""
    order: dict[str, None] = {}
    for node in map_order(view):
        for name in sorted(node["jobs"]):
            order.setdefault(name, None)
    for name in sorted(view.get("jobs", {})):
        order.setdefault(name, None)
    marks = {}
    for i, name in enumerate(order):
        background, text = JOB_COLORS[i % len(JOB_COLORS)]
        symbol = SYMBOLS[i] if i < len(SYMBOLS) else MORE
        marks[name] = (symbol, f"bold {text} on {background}")
    return marks


def gpu_cells(node: dict[str, Any], marks: dict[str, tuple[str, str]]) -> Any:
    """One character per GPU: the symbol of the job holding it (on its colour), hatched for
    other users' jobs, a dot when free, x when the node is lost."""
    from rich.text import Text

    cells = Text()
    for name, count in sorted(node["jobs"].items()):
        symbol, style = marks.get(name, (MORE, ""))
        cells.append(symbol * count, style=style)
    others = node.get("others", 0)
    cells.append(OTHERS * others, style="grey50")
    taken = sum(node["jobs"].values()) + others
    if node.get("state") == "lost":  # no longer in the cluster: nothing there is free
        cells.append(LOST * max(0, node["gpus"] - taken), style="red")
    else:
        cells.append(FREE * max(0, node["gpus"] - taken), style="grey35")
    return cells


def job_labels(view: dict[str, Any]) -> dict[str, str]:
    """uid -> how a person reads the job: its name, or "name (uid)" when another job on
    the map has the same name (the view keys jobs by uid)."""
    jobs = view.get("jobs", {})
    uids = {u: None for n in all_nodes(view) for u in n["jobs"]} | dict.fromkeys(jobs)
    names = {u: str(jobs.get(u, {}).get("name") or u) for u in uids}
    counts: dict[str, int] = {}
    for name in names.values():
        counts[name] = counts.get(name, 0) + 1
    return {u: n if counts[n] == 1 else f"{n} ({u})" for u, n in names.items()}


def legend(marks: dict[str, tuple[str, str]], others: int,
           said: dict[str, str] | None = None) -> Any:
    """The map's legend in one line: every job's symbol and name (`said`: uid -> label),
    then the other cells."""
    from rich.text import Text

    said = said or {}
    line = Text("legend: ")
    shown = 0
    for uid, (symbol, style) in marks.items():
        if symbol == MORE:
            continue
        line.append(symbol, style=style)
        line.append(f" {said.get(uid, uid)}  ")
        shown += 1
    if len(marks) > shown:
        line.append(MORE, style="bold")
        line.append(f" {len(marks) - shown} more jobs  ")
    if others:
        line.append(OTHERS, style="grey50")
        line.append(" other users' jobs  ")
    line.append(FREE, style="grey35")
    line.append(" free  ")
    line.append(LOST, style="red")
    line.append(" lost node")
    return line


def node_name(node: dict[str, Any]) -> str:
    """The node's name, saying so when it is drained (cordoned: it takes no workers)."""
    return f"{node['name']} (drained)" if node.get("state") == "cordoned" else node["name"]


def print_scheduler(view: dict[str, Any], as_json: bool, valid: bool) -> None:
    if as_json:
        print_json(view)
        return
    params = f" {view['params']}" if valid and view["params"] else ""
    text = (f"{view['gpu_type']}: {view['algorithm']}{params} (rate limit "
            f"{view['rate_limit_seconds']:g} s)")
    if valid:
        text += f"\nvalid: {', '.join(view['valid_algorithms'])}"
    say(text)


def cluster_screen(view: dict[str, Any]) -> Any:
    """What `voda top` draws: GPU types, then nodes by spine and leaf, then the jobs."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    types = Table("GPU TYPE", "USED", "UTILIZATION", "FRAGMENTATION", "WAITING", "ALGORITHM",
                  title="GPU types", title_justify="left")
    for t in view["gpu_types"]:
        types.add_row(t["gpu_type"], f"{t['used']}/{t['total']}",
                      f"{t.get('utilization', 0):.0%}", f"{t.get('fragmentation', 0):.0%}",
                      str(t.get("waiting_jobs", "-")), t["algorithm"])
    marks = job_symbols(view)
    others = sum(n.get("others", 0) for n in view["nodes"])
    nodes = Table("SPINE", "LEAF", "NODE", "TYPE", "GPUS", "STATE", title="Nodes",
                  title_justify="left")
    for n in map_order(view):
        state = n.get("state", "ready")
        nodes.add_row(Text(n.get("spine", "-")), Text(n["leaf"]), Text(n["name"]),
                      Text(n["gpu_type"]),
                      gpu_cells(n, marks), state if state == "ready" else f"[bold red]{state}[/]")
    jobs = Table("", "JOB", "USER", "GPUS", "GPU TYPE", title="Jobs holding GPUs",
                 title_justify="left")
    said = job_labels(view)
    for uid, (symbol, style) in marks.items():
        info = view.get("jobs", {}).get(uid, {})
        jobs.add_row(Text(symbol, style=style), Text(said[uid]),
                     Text(str(info.get("user", "-"))),
                     str(info.get("workers", "-")), Text(str(info.get("gpu_type") or "-")))
    if others:
        jobs.add_row(Text(OTHERS, style="grey50"), "(other users' jobs)", "-", str(others), "-")
    refusals = [f"[red]refused ({t}):[/red] {e}" for t, e in view.get("errors", {}).items()]
    return Group(types, nodes, legend(marks, others, said), jobs, *refusals)


def register(app: typer.Typer) -> None:
    @app.command("cluster")
    def cluster_(url: Url = None, token: Token = None, as_json: AsJson = False) -> None:
        """Show nodes, GPUs per type and the plan in force."""
        view = Client(url, token).call("GET", "/v1/cluster")
        if as_json:
            print_json(view)
            return
        types = PlainTable("GPU TYPE", "TOTAL", "USED", "FREE", "ALGORITHM")
        for t in view["gpu_types"]:
            types.add_row(t["gpu_type"], str(t["total"]), str(t["used"]), str(t["free"]),
                          t["algorithm"])
        types.print()
        nodes = PlainTable("NODE", "GPU TYPE", "GPUS", "USED", "STATE", "JOBS")
        said = job_labels(view)
        for n in all_nodes(view):
            jobs_ = [f"{said[j]}:{c}" for j, c in n["jobs"].items()]
            if n.get("others"):
                jobs_.append(f"(others):{n['others']}")
            nodes.add_row(node_name(n), n["gpu_type"], str(n["gpus"]), str(n["used"]),
                          n.get("state", "ready"), ", ".join(jobs_) or "-")
        nodes.print()
        for gpu_type, error in view.get("errors", {}).items():
            say(f"refused ({gpu_type}): {error}")

    @app.command()
    def top(
        interval: Annotated[float, typer.Option(help="Seconds between redraws.",
                                                min=0.2)] = 2.0,
        once: Annotated[bool, typer.Option(help="Draw once and exit.")] = False,
        url: Url = None, token: Token = None,
    ) -> None:
        """A live view of the cluster: every node's GPUs marked by job (a symbol on its
        colour; the legend names them), until Ctrl-C."""
        client = Client(url, token)
        console = out.console()

        def render() -> Any:
            view = client.call("GET", "/v1/cluster")
            screen = cluster_screen(view)
            screen.renderables.append(f"[dim]{time.strftime('%H:%M:%S')} · every "
                                      f"{interval:g} s · Ctrl-C to stop[/]")
            return screen

        if once or not console.is_terminal:
            console.print(render())
            if once:
                return
        stop_on_interrupt()
        try:
            if console.is_terminal:
                from rich.live import Live

                with Live(render(), console=console, auto_refresh=False, screen=True) as live:
                    while True:
                        time.sleep(interval)
                        live.update(render(), refresh=True)
            else:
                while True:
                    time.sleep(interval)
                    console.print(render())
        except KeyboardInterrupt:
            raise typer.Exit(0) from None

    algorithm_app = typer.Typer(help="Show or switch the allocation algorithm of a GPU type.",
                                no_args_is_help=True)

    @algorithm_app.command("set")
    def algorithm_set(
        name: Annotated[str, typer.Argument(help="Algorithm name, e.g. ElasticTiresias.",
                                            autocompletion=complete_algorithms)],
        gpu_type: Annotated[str, typer.Option(help="GPU type it schedules.",
                                              autocompletion=complete_gpu_types)] = "default",
        param: Annotated[list[str] | None, typer.Option(
            help="Algorithm parameter KEY=VALUE (VALUE read as JSON when it parses).")] = None,
        rate_limit: Annotated[float | None, typer.Option(
            help="Seconds between reschedulings at most (all GPU types).")] = None,
        url: Url = None, token: Token = None, as_json: AsJson = False,
    ) -> None:
        """Switch the algorithm of a GPU type; an unknown name changes nothing."""
        params: dict[str, Any] | None = None
        if param:
            params = {}
            for item in param:
                key, sep, raw = item.partition("=")
                if not sep or not key:
                    die(f"param: expected KEY=VALUE, got {item!r}", EXIT_USAGE)
                try:
                    params[key] = json.loads(raw)
                except ValueError:
                    params[key] = raw
        body: dict[str, Any] = {"algorithm": name}
        if params is not None:
            body["params"] = params
        if rate_limit is not None:
            body["rate_limit_seconds"] = rate_limit
        view = Client(url, token).call(
            "PUT", f"/v1/schedulers/{segment(gpu_type, 'GPU type', TOKEN)}", json_body=body)
        print_scheduler(view, as_json, valid=False)

    @algorithm_app.command("get")
    def algorithm_get(
        gpu_type: Annotated[str, typer.Option(help="GPU type.",
                                              autocompletion=complete_gpu_types)] = "default",
        url: Url = None, token: Token = None, as_json: AsJson = False,
    ) -> None:
        """Show the algorithm of a GPU type and the valid names."""
        view = Client(url, token).call(
            "GET", f"/v1/schedulers/{segment(gpu_type, 'GPU type', TOKEN)}")
        print_scheduler(view, as_json, valid=True)

    app.add_typer(algorithm_app, name="algorithm")

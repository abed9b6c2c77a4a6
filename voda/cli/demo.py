"""`voda demo`: a scripted scenario on the in-memory backend, printing the plan after each event."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

from voda.backends.memory import InMemoryBackend
from voda.core.model import Cluster, Job, Plan
from voda.engine.scheduler import Scheduler, SchedulerSettings


def _print_plan(console: Console, title: str, plan: Plan | None, scheduler: Scheduler) -> None:
    table = Table(title=title, show_lines=False)
    for column in ("job", "min-max", "GPUs", "nodes", "status"):
        table.add_column(column)
    for name, record in scheduler.jobs.items():
        nodes = ", ".join(f"{n}x{c}" for n, c in record.placement) or "-"
        table.add_row(name, f"{record.min_workers}-{record.max_workers}",
                      str(record.current_workers), nodes, str(record.status))
    console.print(table)
    if plan is not None and plan.actions:
        console.print("actions: " + "; ".join(f"{a.kind} {a.job}" for a in plan.actions))


def run_scripted_scenario(console: Console, algorithm: str = "ElasticFIFO") -> Scheduler:
    backend = InMemoryBackend(list(Cluster.uniform(2, 4).nodes))
    scheduler = Scheduler(backend, SchedulerSettings(algorithm=algorithm, rate_limit_seconds=0))
    script = [
        (0, "submit a (1-4 workers)", lambda: scheduler.submit(Job("a", 1, 4, submit_time=0))),
        (10, "submit b (2-6 workers)", lambda: scheduler.submit(Job("b", 2, 6, submit_time=10))),
        (20, "submit c (3 workers)", lambda: scheduler.submit(Job("c", 3, 3, submit_time=20))),
        (30, "a completes", lambda: backend.complete("a", 30)),
        (40, "node-1 fails", lambda: backend.remove_node("node-1", 40)),
        (50, "node-2 joins", lambda: backend.add_node(Cluster.uniform(3, 4).nodes[2], 50)),
    ]
    for t, what, do in script:
        do()
        plan = scheduler.step(t)
        _print_plan(console, f"t={t}s: {what}", plan, scheduler)
    return scheduler


def register(app: typer.Typer) -> None:
    @app.command()
    def demo(
        algorithm: str = typer.Option("ElasticFIFO", help="Allocation algorithm to use."),
    ) -> None:
        """Run the demonstration scenario and print what happened."""
        run_scripted_scenario(Console(), algorithm)

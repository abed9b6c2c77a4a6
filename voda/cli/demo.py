"""`voda demo`: what `make demo` runs.

1. Simulate workload 1 (160 Philly-sampled jobs) on 16 nodes x 4 GPUs with all
   built-in allocation algorithms and print the comparison table.
2. Start `voda serve` with the local backend and its default SQLite store, submit
   the four example jobs of examples/local onto 4 slots, show them start, scale
   and complete, and print each job's JCT and rescales.

`--scripted` instead runs a short scenario on the in-memory backend and prints
the plan after each event.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:  # imported when the demo runs, not when another command does
    from rich.console import Console

    from voda.core.model import Plan
    from voda.engine.scheduler import Scheduler


def _print_plan(console: Console, title: str, plan: Plan | None, scheduler: Scheduler) -> None:
    from rich.table import Table

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
    from voda.backends.memory import InMemoryBackend
    from voda.core.model import Cluster, Job
    from voda.engine.scheduler import Scheduler, SchedulerSettings

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
        simulation: bool = typer.Option(True, help="Run the simulated comparison."),
        local: bool = typer.Option(True, help="Run real jobs on the local backend."),
        scripted: bool = typer.Option(False, help="Only the in-memory scripted scenario."),
        slots: int = typer.Option(4, help="Worker slots for the local jobs."),
        algorithm: str = typer.Option("ElasticFIFO", help="Algorithm for the local jobs."),
    ) -> None:
        """Simulate workload 1 with every built-in algorithm, then run real elastic jobs locally."""
        from rich.console import Console

        console = Console()
        if scripted:
            run_scripted_scenario(console, algorithm)
            return
        if simulation:
            from voda.cli.simulate import run_simulation

            console.rule("Simulation: workload-1 (160 jobs) on 16 nodes x 4 GPUs, all algorithms")
            run_simulation("workload-1", "16x4", "all", rigid=False, preset=None, placement=None,
                           penalty=None, interval=None, as_json=False, plot=None)
        if local:
            from voda.cli.demo_local import run_local_demo

            console.rule(f"Real elastic training: voda serve --backend local, {slots} slots")
            results = run_local_demo(console, slots=slots, algorithm=algorithm)
            unfinished = [name for name, r in results.items() if r.get("status") != "Completed"]
            if unfinished:
                console.print(f"[red]not completed:[/red] {', '.join(unfinished)}")
                raise typer.Exit(1)

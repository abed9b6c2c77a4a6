"""`voda sweep`: a grid of simulations on a local process pool or a Ray cluster, resumable,
written as one table (CSV, JSON) and an HTML report (voda.sim.sweep and friends)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer

from voda.cli.simulate import _fail

EXIT_UNFINISHED = 1


def _spec(grid: str | None, options: dict[str, Any]) -> dict[str, Any]:
    """The grid file's fields with the options given laid over them."""
    from voda.sim.sweep_grid import read_grid_file

    spec = read_grid_file(grid) if grid else {}
    spec.update({k: v for k, v in options.items() if v not in (None, [], {})})
    return spec


def _knob_options(items: list[str]) -> dict[str, list[Any]]:
    """--param NAME=V1;V2;... -> {NAME: [V1, V2, ...]} (values read as --param reads one)."""
    from voda.sim.sweep_grid import GridError

    knobs: dict[str, list[Any]] = {}
    for item in items:
        name, sep, values = item.partition("=")
        if not sep or not name.strip():
            raise GridError("knobs", f"--param {item!r}: expected NAME=V1;V2;...")
        if name.strip() in knobs:
            raise GridError(f"knobs.{name.strip()}", "given twice")
        knobs[name.strip()] = values.split(";")
    return knobs


def run(grid: str | None, out: str, workers: int | None, ray: str | None, as_json: bool,
        options: dict[str, Any], params: list[str]) -> None:
    import os

    from rich.console import Console

    from voda.sim.sweep import Finished, SweepSetupError, check_workers
    from voda.sim.sweep_grid import GridError, build_grid
    from voda.sim.sweep_store import RunStore, StoreBusy

    try:
        knobs = _knob_options(params)
        if knobs:
            options["knobs"] = knobs
        built = build_grid(_spec(grid, options))
        count = check_workers(workers if workers is not None else (os.cpu_count() or 1))
    except (GridError, ValueError) as exc:
        _fail(str(exc))
    try:
        store = RunStore(out)
    except StoreBusy as exc:
        _fail(f"out: {exc}")
    except (OSError, ValueError) as exc:
        _fail(f"out: cannot use {out} as the output directory: {exc}")
    err = Console(stderr=True)
    show_bar = not as_json and sys.stderr.isatty()

    def started(done: int, pending: int) -> None:
        where = f"Ray ({ray})" if ray else f"{count} local worker{'s' if count > 1 else ''}"
        if as_json:
            _emit({"event": "start", "runs": len(built.runs), "cells": built.cells,
                   "done": done, "pending": pending, "workers": count, "ray": ray})
        else:
            err.print(f"{len(built.runs)} runs ({built.cells} cells x {built.seeds} seeds): "
                      f"{done} already in {out}, {pending} to run on {where}",
                      highlight=False, soft_wrap=True)

    def finished(f: Finished) -> None:
        result = f.record["result"]
        line = {"event": "run", "done": f.done, "total": f.total, "key": f.record["key"],
                "workload": f.request.workload, "cluster": f.request.cluster,
                "algorithm": f.request.algorithm, "knobs": dict(f.request.params),
                "seed": f.request.seed, "avg_jct": result["avg_jct"],
                "unfinished": result["unfinished"], "seconds": f.record["seconds"]}
        if as_json:
            _emit(line)
        elif not show_bar:
            from voda.sim.sweep_table import knob_text

            knobs = "".join(f" {k}={knob_text(v)}" for k, v in f.request.params)
            err.print(f"[{f.done}/{f.total}] {f.request.workload} {f.request.cluster} "
                      f"{f.request.algorithm}{knobs} seed {f.request.seed}: avg JCT "
                      f"{result['avg_jct']:,.0f} s ({f.record['seconds']:.1f} s)",
                      highlight=False, soft_wrap=True)

    try:
        _run_all(built.runs, store, count, ray, started, finished, show_bar, err)
        _write_outputs(built.runs, store, Path(out), as_json, err)
    except SweepSetupError as exc:
        _fail(str(exc))
    finally:
        store.close()


def _run_all(runs: Any, store: Any, workers: int, ray: str | None, started: Any,
             finished: Any, show_bar: bool, err: Any) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from voda.sim.sweep import run_sweep

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns, console=err, disable=not show_bar, transient=True) as bar:
        task = bar.add_task("simulating", total=len(runs))

        def on_start(done: int, pending: int) -> None:
            bar.update(task, completed=done)
            started(done, pending)

        for f in run_sweep(runs, store, workers, ray, on_start):
            bar.update(task, completed=f.done)
            finished(f)


def _write_outputs(runs: Any, store: Any, out: Path, as_json: bool, err: Any) -> None:
    from voda.cli.simulate import report_settings
    from voda.sim.sweep_table import build_rows, write_report, write_tables

    rows = build_rows(runs, store.results(runs))
    try:
        csv_path, json_path = write_tables(rows, out)
        report = write_report(rows, out, report_settings)
    except OSError as exc:
        _fail(f"out: cannot write to {out}: {exc}")
    unfinished = sum(1 for row in rows for r in row.runs if r.unfinished)
    if as_json:
        _emit({"event": "finished", "rows": len(rows), "table_csv": str(csv_path),
               "table_json": str(json_path), "report": str(report),
               "runs_with_unfinished_jobs": unfinished})
    else:
        from rich.console import Console

        Console().print(f"{len(rows)} rows: {csv_path}, {json_path}; report: {report}",
                        highlight=False, soft_wrap=True)
    if unfinished and all(r.until is None for r in runs):
        err.print(f"[bold red]warning:[/bold red] {unfinished} runs left jobs unfinished "
                  "(no until was given): their JCTs cover the finished jobs only",
                  highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_UNFINISHED)


def _emit(line: dict[str, Any]) -> None:
    from voda.sim.seeds import json_ready

    typer.echo(json.dumps(json_ready(line), allow_nan=False))


def register(app: typer.Typer) -> None:
    @app.command("sweep")
    def sweep(
        out: str = typer.Option(..., "--out", "-o",
                                help="Output directory: runs.jsonl (each run as it "
                                     "finishes; a sweep started again here skips those), "
                                     "table.csv, table.json and report/index.html."),
        grid: str | None = typer.Option(None, "--grid", "-g",
                                        help="Grid file (YAML or JSON): workloads, loads, "
                                             "clusters, algorithms, knobs, seeds, ... "
                                             "(the options below replace its fields)."),
        workload: list[str] = typer.Option([], "--workload", "-w",
                                           help="A workload (repeatable): file or built-in "
                                                "name (workload-1..4, philly)."),
        load: list[str] = typer.Option([], "--load",
                                       help="A load of the built-in workload-N (repeatable):"
                                            " 0.5, 1.0, 1.5, 2.0."),
        cluster: list[str] = typer.Option([], "--cluster", "-c",
                                          help="A cluster (repeatable): NODESxGPUS or a "
                                               "cluster YAML file (default 16x4)."),
        algorithm: list[str] = typer.Option([], "--algorithm", "-a",
                                            help="An algorithm (repeatable, or 'all')."),
        param: list[str] = typer.Option([], "--param",
                                        help="A knob's values, NAME=V1;V2;... (repeatable);"
                                             " each goes to the algorithms that take it."),
        seeds: int | None = typer.Option(None, "--seeds",
                                         help="Arrival jitterings per cell (1..100)."),
        jitter: float | None = typer.Option(None, "--jitter",
                                            help="Seconds each arrival moves by at most "
                                                 "(default 0; 300 with --seeds above 1)."),
        workers: int | None = typer.Option(None, "--workers", "-j",
                                           help="Local processes, or Ray CPUs with --ray "
                                                "local (1..1024; default: one per core)."),
        ray: str | None = typer.Option(None, "--ray",
                                       help="Run on Ray: a cluster's address (host:port), "
                                            "'auto' (the cluster this machine is in) or "
                                            "'local' (a private instance). Needs "
                                            "voda[ray]."),
        as_json: bool = typer.Option(False, "--json",
                                     help="Progress and outcome as JSON lines on stdout."),
    ) -> None:
        """Run a grid of simulations and write their table and report.

        Exit codes: 0 done, 1 runs left jobs unfinished, 2 bad input.
        """
        options = {"workloads": workload, "loads": load, "clusters": cluster,
                   "algorithms": [a.strip() for item in algorithm for a in item.split(",")
                                  if a.strip()],
                   "seeds": seeds, "jitter": jitter}
        run(grid, out, workers, ray, as_json, options, param)

"""`voda simulate`: run a workload through the real scheduler on a simulated cluster."""

from __future__ import annotations

import json
import math
import sys
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:  # the simulator loads numpy and scipy: only when a simulation runs
    from rich.table import Table

    from voda.sim.report import SimResult

ALL = "all"
EXIT_UNFINISHED = 1  # jobs left unfinished without --until: the averages leave them out


def _fmt(x: float, digits: int = 0) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:,.{digits}f}"


def results_table(results: list[SimResult]) -> Table:
    """One row per algorithm; narrow enough for an 80-column terminal."""
    from rich.table import Table

    table = Table(title="JCT and makespan in seconds", box=None, padding=(0, 1),
                  collapse_padding=True, pad_edge=False, header_style="bold")
    table.add_column("algorithm", no_wrap=True)
    for column in ("jobs", "avg JCT", "p50", "p99", "makespan", "util", "GPU-h", "resc",
                   "migr", "preempt"):
        table.add_column(column, justify="right", no_wrap=True)
    for r in results:
        jobs = str(len(r.jobs)) + (f" ({r.unfinished} left)" if r.unfinished else "")
        table.add_row(r.algorithm, jobs, _fmt(r.avg_jct), _fmt(r.p50_jct), _fmt(r.p99_jct),
                      _fmt(r.makespan), f"{r.utilization:.0%}", _fmt(r.gpu_hours, 1),
                      str(r.rescales),
                      str(r.migrations), str(r.preemptions))
    return table


def _fail(message: str) -> None:
    from rich.console import Console

    Console(stderr=True).print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def run_simulation(
    workload: str,
    cluster: str,
    algorithm: str,
    rigid: bool,
    preset: str | None,
    placement: str | None,
    penalty: float | None,
    interval: float | None,
    as_json: bool,
    plot: str | None,
    layout_speed: str = "actual",
    jitter: float = 0.0,
    seed: int = 0,
    params: list[str] | None = None,
    gpu_type: str | None = None,
    until: float | None = None,
    report: str | None = None,
    report_job: str | None = None,
    job_model: str | None = None,
    progress_decisions: bool = False,
) -> list[SimResult]:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from voda.cli.params import ParamError, parse_param_items
    from voda.core.allocation import registry
    from voda.sim.cluster_file import ClusterFileError
    from voda.sim.compare import RunRequest, check_request, run_many, run_one
    from voda.sim.profiles import ProfileError
    from voda.sim.runner import SimulationStalled
    from voda.sim.workloads import WorkloadError

    names = list(registry.BUILTIN_NAMES) if algorithm == ALL else [algorithm]
    if rigid and job_model not in (None, "rigid"):
        _fail(f"--rigid and --job-model {job_model} contradict each other")
    try:
        knobs = parse_param_items(params or [])
        requests = [RunRequest(workload, cluster, name, rigid, preset, placement, penalty,
                               interval, layout_speed, jitter, seed,
                               params=_knobs_of(name, knobs, len(names) > 1),
                               gpu_type=gpu_type, until=until, job_model=job_model,
                               progress_decisions=progress_decisions)
                    for name in names]
        _check_every_knob_used(knobs, requests)
        for r in requests:
            check_request(r)
    except (WorkloadError, ClusterFileError, ProfileError, registry.UnknownAlgorithm,
            ParamError, ValueError) as exc:
        _fail(str(exc))
    if report_job is not None:
        from voda.sim.workloads import load_workload

        jobs = load_workload(workload, rigid=rigid, job_model=job_model).jobs
        if report_job not in {j.name for j in jobs}:
            _fail(f"report-job: no job {report_job!r} in the workload {workload}")
    err = Console(stderr=True)
    show = not as_json and sys.stderr.isatty()
    columns = (TextColumn("{task.description}"), BarColumn(),
               TextColumn("{task.percentage:>3.0f}%"), TimeElapsedColumn())
    try:
        with Progress(*columns, console=err, disable=not show, transient=True) as bar:
            if len(requests) == 1:
                task = bar.add_task(f"simulating {names[0]}", total=1.0)
                results = [run_one(requests[0],
                                   progress=lambda f: bar.update(task, completed=f))]
            else:
                task = bar.add_task(f"simulating {len(requests)} algorithms",
                                    total=len(requests))
                results = run_many(requests, done=lambda _r, _res: bar.advance(task))
    except SimulationStalled as exc:
        _fail(str(exc))
    if report:
        from voda.sim.html_report import write_report

        try:
            path = write_report(results, report, report_settings(requests), report_job)
        except OSError as exc:
            _fail(f"report: cannot write to {report}: {exc}")
    if plot:
        from voda.sim.plots import write_plots

        try:
            write_plots(results, plot)
        except OSError as exc:
            _fail(f"plot: cannot write to {plot}: {exc}")
    if as_json:
        typer.echo(json.dumps({"results": [_json_ready(r.to_dict()) for r in results]}))
    else:
        out = Console()
        if not out.is_terminal:
            out = Console(width=160)  # a table in a pipe or file is not cut to 80 columns
        out.print(results_table(results))
        if plot:
            out.print(f"plots written to {plot}", soft_wrap=True)
        if report:
            out.print(f"report written to {path}", soft_wrap=True)
    incomplete = [r for r in results if r.unfinished]
    if incomplete:
        err = Console(stderr=True)
        for r in incomplete:
            err.print(f"[bold red]warning:[/bold red] {r.algorithm}: {r.warning}"
                      + ("" if until is not None else " (no --until was given)"),
                      highlight=False, soft_wrap=True)
        if until is None:
            raise typer.Exit(EXIT_UNFINISHED)
    return results


def _knobs_of(name: str, knobs: dict[str, Any], several: bool) -> tuple[tuple[str, Any], ...]:
    """The knobs meant for `name`: all of them for one algorithm (the registry then names
    any it lacks); with several algorithms, those each one takes."""
    if not several:
        return tuple(sorted(knobs.items(), key=lambda kv: kv[0]))
    from voda.core.allocation import registry

    accepted = registry.parameter_names(registry.resolve(name)) or []
    return tuple(sorted((k, v) for k, v in knobs.items() if k in accepted))


def _check_every_knob_used(knobs: dict[str, Any], requests: list[Any]) -> None:
    used = {k for r in requests for k, _ in r.params}
    unused = sorted(set(knobs) - used)
    if unused:
        raise ValueError(f"--param {unused[0]}: none of the algorithms run has that parameter")


def report_settings(requests: list[Any]) -> dict[str, Any]:
    """What produced a simulation, as the report shows it: the request and the settings
    in effect (the preset's and the defaults resolved)."""
    import platform
    import shlex

    from voda import __version__
    from voda.sim.compare import settings_for

    first = requests[0]
    effective = settings_for(first)
    return {
        "command": shlex.join(["voda", *sys.argv[1:]]) if sys.argv[1:] else "-",
        "workload": first.workload,
        "cluster": first.cluster,
        "algorithms": ", ".join(r.algorithm for r in requests),
        "rigid": first.rigid,
        "preset": first.preset or "-",
        "placement": effective.placement if isinstance(effective.placement, str) else
        type(effective.placement).__name__,
        "restart penalty (s)": effective.penalty,
        "rescheduling interval (s)": effective.interval,
        "fixed rounds": effective.fixed_rounds,
        "layout speed": first.layout_speed,
        "arrival jitter (s)": first.jitter,
        "seed": first.seed,
        "algorithm knobs": "; ".join(f"{r.algorithm}: " + ", ".join(
            f"{k}={v}" for k, v in r.params) for r in requests if r.params) or "-",
        "GPU type of untyped jobs": first.gpu_type or "-",
        "until (s)": "-" if first.until is None else first.until,
        "voda": __version__,
        "python": platform.python_version(),
    }


def _json_ready(d: dict[str, Any]) -> dict[str, Any]:
    """NaN is not JSON: report it as null."""
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in d.items()}


def register(app: typer.Typer) -> None:
    @app.command("simulate")
    def simulate(
        workload: str = typer.Option(..., "--workload", "-w",
                                     help="Workload file (Pollux CSV, Philly CSV, native YAML/CSV)"
                                          " or a built-in name: workload-1..4, workload-N@LOAD "
                                          "(LOAD 0.5, 1.0, 1.5, 2.0), philly."),
        cluster: str = typer.Option("16x4", "--cluster", "-c",
                                    help="NODESxGPUS (e.g. 16x4) or a cluster YAML file."),
        algorithm: str | None = typer.Option(None, "--algorithm", "-a",
                                             help="Allocation algorithm (default: ElasticFIFO),"
                                                  " or 'all' for every built-in one."),
        rigid: bool = typer.Option(False, "--rigid",
                                   help="Every job at exactly its requested GPUs and batch "
                                        "(--job-model rigid)."),
        job_model: str | None = typer.Option(
            None, "--job-model",
            help="How profiled jobs use GPUs and batch: elastic (default), rigid, fixed-batch "
                 "(the Pollux artifact's Optimus jobs) or adaptive (its Pollux jobs)."),
        preset: str | None = typer.Option(None, "--preset",
                                          help="'pollux': the Pollux artifact's simulator."),
        placement: str | None = typer.Option(None, "--placement",
                                             help="Placer name (default: the service's default "
                                                  "placer; most-free with --preset pollux)."),
        penalty: float | None = typer.Option(None, "--penalty",
                                             help="Seconds lost on every allocation change "
                                                  "(default 30)."),
        interval: float | None = typer.Option(None, "--interval",
                                              help="Seconds between rescheduling decisions "
                                                   "(default 60)."),
        as_json: bool = typer.Option(False, "--json", help="Print the results as JSON."),
        plot: str | None = typer.Option(None, "--plot", help="Write PNG plots to this directory."),
        layout_speed: str = typer.Option("actual", "--layout-speed",
                                         help="What a job's speed follows: actual (its "
                                              "placement), packed (its GPUs on as few nodes as "
                                              "possible) or best (the fastest layout)."),
        jitter: float = typer.Option(0.0, "--jitter",
                                     help="Move each arrival by up to this many seconds, "
                                          "earlier or later (uniform, see --seed)."),
        seed: int = typer.Option(0, "--seed", help="Random seed of --jitter."),
        param: list[str] = typer.Option([], "--param",
                                        help="An algorithm knob, NAME=VALUE (repeatable), "
                                             "e.g. queue_thresholds=3600,14400 or "
                                             "starvation_knob=none. With --algorithm all, "
                                             "each goes to the algorithms that take it."),
        gpu_type: str | None = typer.Option(None, "--gpu-type",
                                            help="GPU type of the jobs that name none (needed "
                                                 "when the cluster's nodes declare types)."),
        until: float | None = typer.Option(None, "--until",
                                           help="Stop at this simulated second; jobs left "
                                                "unfinished then do not make the exit code "
                                                "non-zero."),
        report: str | None = typer.Option(None, "--report",
                                          help="Write a self-contained HTML report "
                                               "(DIR/index.html) to this directory."),
        report_job: str | None = typer.Option(None, "--report-job",
                                              help="The job the report's timeline shows "
                                                   "first."),
        progress_decisions: bool = typer.Option(
            False, "--progress-decisions",
            help="Decide again on epoch and goodput reports, as the service does for a "
                 "policy that decides on progress (Voda, Pollux, Optimus); event-driven "
                 "runs only."),
    ) -> None:
        """Simulate a workload on a cluster with one or all allocation algorithms.

        Exit codes: 0 done, 1 jobs left unfinished (without --until), 2 bad input.
        """
        if algorithm is None:
            from voda.core.allocation.registry import DEFAULT_ALGORITHM

            algorithm = DEFAULT_ALGORITHM
        if report_job is not None and not report:
            _fail("report-job: needs --report DIR")
        run_simulation(workload, cluster, algorithm, rigid, preset, placement, penalty, interval,
                       as_json, plot, layout_speed, jitter, seed, param, gpu_type, until,
                       report, report_job, job_model, progress_decisions)

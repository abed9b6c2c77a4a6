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


def results_tables(results: list[SimResult]) -> list[Table]:
    """The comparison, one row per algorithm in each table, each table narrow enough for an
    80-column terminal. One seed: JCTs, makespan and resources in one table, slowdown and
    finish-time fairness in a second. Several (`--seeds`): each cell is the mean across
    them and the half-width of its 95 % interval, in three tables (JCTs and makespan,
    resources, slowdown and fairness)."""
    from voda.sim.seeds import CONFIDENCE, summarize

    summaries = summarize(results)
    seeds = max(len(s.runs) for s in summaries)
    first = summaries[0].runs[0]
    fairness = ("mean slowdown", "mean rho", "max rho")
    fairness_title = ("Slowdown (JCT / alone at max GPUs) and finish-time fairness rho "
                      "(JCT / alone on 1/N of the cluster) over the jobs")

    def fairness_row(m: dict[str, Any]) -> list[str]:
        return [_pm(m["mean_slowdown"], 2), _pm(m["rho_mean"], 2), _pm(m["rho_max"], 2)]

    def jobs(s: Any) -> str:
        left = s.metrics["unfinished"].mean
        return str(s.jobs) + (f" ({left:g} left)" if left else "")

    if seeds == 1:
        jittered = (f" (arrivals jittered by up to {first.jitter:,.0f} s, seed {first.seed})"
                    if first.jitter else "")
        main = _table("JCT and makespan in seconds" + jittered,
                      ("jobs", "avg JCT", "p50", "p99", "makespan", "util", "GPU-h", "resc",
                       "migr", "preempt"))
        fair = _table(fairness_title, fairness)
        for s in summaries:
            r = s.runs[0]
            main.add_row(s.algorithm, jobs(s), _fmt(r.avg_jct), _fmt(r.p50_jct),
                         _fmt(r.p99_jct), _fmt(r.makespan), f"{r.utilization:.0%}",
                         _fmt(r.gpu_hours, 1), str(r.rescales), str(r.migrations),
                         str(r.preemptions))
            fair.add_row(s.algorithm, *fairness_row(s.metrics))
        return [main, fair]
    over = (f"mean ±{CONFIDENCE:.0%} interval over {seeds} seeds ({first.seed}.."
            f"{first.seed + seeds - 1}, arrivals jittered by up to {first.jitter:,.0f} s; "
            f"Student t, {seeds - 1} d.o.f.)")
    jct = _table(f"JCT and makespan in seconds: {over}",
                 ("jobs", "avg JCT", "p50", "p99", "makespan"))
    use = _table("Resources and allocation changes per run", ("util", "GPU-h", "resc",
                                                               "migr", "preempt"))
    fair = _table(fairness_title, fairness)
    for s in summaries:
        m = s.metrics
        jct.add_row(s.algorithm, jobs(s), _pm(m["avg_jct"]), _pm(m["p50_jct"]),
                    _pm(m["p99_jct"]), _pm(m["makespan"]))
        use.add_row(s.algorithm, _pm(m["utilization"], pct=True), _pm(m["gpu_hours"], 1),
                    _pm(m["rescales"], 1), _pm(m["migrations"], 1), _pm(m["preemptions"], 1))
        fair.add_row(s.algorithm, *fairness_row(m))
    return [jct, use, fair]


def _table(title: str, columns: tuple[str, ...]) -> Table:
    from rich.table import Table

    table = Table(title=title, box=None, padding=(0, 1), collapse_padding=True,
                  pad_edge=False, header_style="bold")
    table.add_column("algorithm", no_wrap=True)
    for column in columns:
        table.add_column(column, justify="right", no_wrap=True)
    return table


def _pm(interval: Any, digits: int = 0, pct: bool = False) -> str:
    """`mean` or `mean ±half` (a voda.sim.seeds.Interval)."""
    def fmt(x: float) -> str:
        return f"{x:.0%}" if pct else _fmt(x, digits)

    if interval.mean is None or math.isnan(interval.mean):
        return "-"
    if interval.half_width is None:
        return fmt(interval.mean)
    return f"{fmt(interval.mean)} ±{fmt(interval.half_width)}"


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
    jitter: float | None = None,
    seed: int = 0,
    params: list[str] | None = None,
    gpu_type: str | None = None,
    until: float | None = None,
    report: str | None = None,
    report_job: str | None = None,
    job_model: str | None = None,
    progress_decisions: bool = False,
    seeds: int | None = None,
    csv_path: str | None = None,
    hetero_policy: str | None = None,
    queues: str | None = None,
    restart_scale: float = 1.0,
) -> list[SimResult]:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from voda.cli.params import ParamError, parse_param_items
    from voda.core.allocation import registry
    from voda.sim.cluster_file import ClusterFileError
    from voda.sim.compare import RunRequest, check_request, run_many, run_one, with_details
    from voda.sim.profiles import ProfileError
    from voda.sim.queues import QueueFileError, load_queue_file
    from voda.sim.runner import SimulationStalled
    from voda.sim.seeds import DEFAULT_JITTER, check_seeds
    from voda.sim.workloads import WorkloadError

    names = list(registry.BUILTIN_NAMES) if algorithm == ALL else list(dict.fromkeys(
        n.strip() for n in algorithm.split(",") if n.strip())) or [algorithm]
    if rigid and job_model not in (None, "rigid"):
        _fail(f"--rigid and --job-model {job_model} contradict each other")
    jitter_note = None
    if seeds is not None and jitter is None:
        jitter = DEFAULT_JITTER
        jitter_note = (f"--seeds without --jitter: arrivals jittered by up to "
                       f"{DEFAULT_JITTER:g} s (the default; set it with --jitter)")
    jitter = 0.0 if jitter is None else jitter
    try:
        count = 1 if seeds is None else check_seeds(seeds)
        knobs = parse_param_items(params or [])
        requests = [RunRequest(workload, cluster, name, rigid, preset, placement, penalty,
                               interval, layout_speed, jitter, seed + k,
                               params=_knobs_of(name, knobs, len(names) > 1),
                               gpu_type=gpu_type, until=until, job_model=job_model,
                               progress_decisions=progress_decisions,
                               hetero_policy=hetero_policy, queues=queues,
                               restart_scale=restart_scale)
                    for name in names for k in range(count)]
        _check_every_knob_used(knobs, requests)
        if queues is not None:
            load_queue_file(queues)  # a bad file is refused before anything runs
        for r in requests:
            if r.seed == seed:  # the other seeds differ in arrival times only
                check_request(r)
    except (WorkloadError, ClusterFileError, ProfileError, registry.UnknownAlgorithm,
            ParamError, QueueFileError, ValueError) as exc:
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
                what = f"{len(names)} algorithms" if count == 1 else (
                    f"{len(names)} algorithm{'s' if len(names) > 1 else ''} x {count} seeds")
                task = bar.add_task(f"simulating {what}", total=len(requests))
                results = run_many(requests, done=lambda _r, _res: bar.advance(task))
            # Each job alone, for slowdown and fairness: in this process, where the run
            # times of one kind of job are computed once for every algorithm and seed.
            task = bar.add_task("timing each job alone", total=len(requests))
            detailed = []
            for r, res in zip(requests, results, strict=True):
                detailed.append(with_details(r, res))
                bar.advance(task)
            results = detailed
    except SimulationStalled as exc:
        _fail(str(exc))
    if report:
        from voda.sim.html_report import write_report

        try:
            path = write_report(results, report, report_settings(requests), report_job)
        except OSError as exc:
            _fail(f"report: cannot write to {report}: {exc}")
    if csv_path:
        from voda.sim.per_job import write_csv

        try:
            write_csv(results, csv_path)
        except OSError as exc:
            _fail(f"csv: cannot write to {csv_path}: {exc}")
    if plot:
        from voda.sim.plots import write_plots

        try:
            write_plots(results, plot)
        except OSError as exc:
            _fail(f"plot: cannot write to {plot}: {exc}")
    if as_json:
        from voda.sim.seeds import summarize

        out_json: dict[str, Any] = {
            "results": [r.to_dict() for r in results],
            "seeds": {"count": count, "first": seed, "jitter": jitter,
                      "default_jitter": jitter_note is not None},
            "summary": [s.to_dict() for s in summarize(results)],
        }
        if jitter_note:
            out_json["note"] = jitter_note
            Console(stderr=True).print(f"note: {jitter_note}", highlight=False,
                                       soft_wrap=True)
        from voda.sim.seeds import json_ready

        typer.echo(json.dumps(json_ready(out_json), allow_nan=False))
    else:
        out = Console()
        if not out.is_terminal:
            out = Console(width=160)  # a table in a pipe or file is not cut to 80 columns
        for i, table in enumerate(results_tables(results)):
            if i:
                out.print()
            out.print(table)
        if jitter_note:
            out.print(f"note: {jitter_note}", highlight=False, soft_wrap=True)
        if csv_path:
            out.print(f"per-job rows written to {csv_path}", soft_wrap=True)
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
    seeds = sorted({r.seed for r in requests})
    return {
        "command": shlex.join(["voda", *sys.argv[1:]]) if sys.argv[1:] else "-",
        "workload": first.workload,
        "cluster": first.cluster,
        "algorithms": ", ".join(dict.fromkeys(r.algorithm for r in requests)),
        "rigid": first.rigid,
        "preset": first.preset or "-",
        "placement": effective.placement if isinstance(effective.placement, str) else
        type(effective.placement).__name__,
        "restart penalty (s)": effective.penalty,
        "restart scale": first.restart_scale,
        "rescheduling interval (s)": effective.interval,
        "fixed rounds": effective.fixed_rounds,
        "layout speed": first.layout_speed,
        "arrival jitter (s)": first.jitter,
        "seeds": (str(first.seed) if len(seeds) == 1 else
                  f"{seeds[0]}..{seeds[-1]} ({len(seeds)} seeds)"),
        "algorithm knobs": "; ".join(f"{r.algorithm}: " + ", ".join(
            f"{k}={v}" for k, v in r.params) for r in requests
            if r.params and r.seed == first.seed) or "-",
        "GPU type of untyped jobs": first.gpu_type or "-",
        "until (s)": "-" if first.until is None else first.until,
        "voda": __version__,
        "python": platform.python_version(),
    }


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
                                                  " several separated by commas (FIFO,Voda), "
                                                  "or 'all' for every built-in one."),
        rigid: bool = typer.Option(False, "--rigid",
                                   help="Every job at exactly its requested GPUs and batch "
                                        "(--job-model rigid)."),
        job_model: str | None = typer.Option(
            None, "--job-model",
            help="How profiled jobs use GPUs and batch: elastic (default), rigid, fixed-batch "
                 "(the Pollux artifact's Optimus jobs) or adaptive (its Pollux jobs)."),
        preset: str | None = typer.Option(None, "--preset",
                                          help="'pollux': the Pollux artifact's simulator; "
                                               "'sia': that with the Sia artifact's "
                                               "calibration."),
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
        jitter: float | None = typer.Option(None, "--jitter",
                                            help="Move each arrival by up to this many "
                                                 "seconds, earlier or later (uniform, see "
                                                 "--seed). Default 0; 300 with --seeds."),
        seed: int = typer.Option(0, "--seed", help="Random seed of --jitter (the first one "
                                                   "with --seeds)."),
        seeds: int | None = typer.Option(None, "--seeds",
                                         help="Run each algorithm on N arrival jitterings "
                                              "(seeds --seed .. --seed+N-1, 1..100) and show "
                                              "each metric's mean and 95% interval."),
        csv_path: str | None = typer.Option(None, "--csv",
                                            help="Write one row per job, algorithm and seed "
                                                 "(times, JCT, wait, GPU-hours, rescales, "
                                                 "slowdown, fairness) to this CSV file."),
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
        hetero_policy: str | None = typer.Option(
            None, "--hetero-policy",
            help="On a cluster of several GPU types, where jobs that name none accept any: "
                 "how each gets its type: voda (default; type and count chosen together), "
                 "isolated (a job keeps its first type), sia (Sia's program decides type "
                 "and count), pollux (type-unaware Pollux, most GPUs of one type)."),
        queues: str | None = typer.Option(
            None, "--queues",
            help="A YAML file of team queues (guarantee, borrowing_limit, lending_limit, "
                 "weight, match by workload column); docs/design/013-queues.md."),
        restart_scale: float = typer.Option(
            1.0, "--restart-scale",
            help="Every restart costs this times what the preset or --penalty charges (and "
                 "tells the policies), 0 to 10: what faster or slower checkpoint restores "
                 "would change."),
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
                       report, report_job, job_model, progress_decisions, seeds, csv_path,
                       hetero_policy, queues, restart_scale)

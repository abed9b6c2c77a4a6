"""`voda plan`: a dry-run allocation of a jobs file, run locally; or a what-if asked of
the service.

    voda plan --algorithm Tiresias --gpus 16 jobs.yaml

prints {"allocation": {job: GPUs}} as JSON. The file holds a list of jobs
(voda.core.jobfile) or job specs as `voda submit -f` takes them, several separated by
`---`. Exit codes: 0 done, 1 the algorithm broke its contract, 2 bad input (file, jobs,
algorithm or parameters).

    voda plan --what-if job.yaml [--url URL --token TOKEN] [--json]

sends the job spec (what `voda submit -f` takes) to POST /v1/forecast and prints when
the job would start and finish if submitted now, assuming no new arrivals; nothing is
submitted. Exit codes as `voda submit`'s (2 a spec the service refuses, naming the
field; 3 the service unreachable).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

EXIT_REFUSED, EXIT_USAGE = 1, 2


def _die(message: str, code: int) -> NoReturn:
    typer.echo(message, err=True)
    raise typer.Exit(code)


def read_documents(path: Path) -> list[Any]:
    """The documents of a YAML file (several, separated by ---) or a JSON file (one; JSON
    when the name ends in .json)."""
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        _die(f"cannot read the jobs file {str(path)!r}: {exc}", EXIT_USAGE)
    try:
        if path.suffix.lower() == ".json":
            return [json.loads(text)]
        return [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        _die(f"cannot parse the jobs file {str(path)!r}: {exc}", EXIT_USAGE)


def jobs_of(documents: list[Any]) -> list[Any]:
    """The jobs to plan: a document is a list of planning entries (voda.core.jobfile), one
    such entry, or a job spec as `voda submit -f` takes it (compact, MPIJob, PyTorchJob),
    which runs after the jobs before it in the file. Raises JobFileError naming every
    problem."""
    from voda.core.jobfile import FIELDS, JobFileError, jobs_from_data
    from voda.core.model import Job
    from voda.spec import SpecError
    from voda.spec.parse import parse_document

    jobs: list[Job] = []
    problems: list[str] = []
    for number, doc in enumerate(documents, 1):
        if isinstance(doc, list) or (isinstance(doc, dict) and set(doc) <= set(FIELDS)):
            try:
                jobs.extend(jobs_from_data(doc if isinstance(doc, list) else [doc]))
            except JobFileError as exc:
                problems.extend(exc.messages)
        elif isinstance(doc, dict):
            try:
                spec = parse_document(doc)
            except SpecError as exc:
                problems.extend(f"document {number}: {e.field}: {e.reason}" for e in exc.errors)
                continue
            jobs.append(Job(name=spec.name, min_workers=spec.min_workers,
                            max_workers=spec.max_workers,
                            preferred_workers=spec.preferred_workers, priority=spec.priority,
                            epochs=spec.epochs, submit_time=float(number)))
        else:
            problems.append(f"document {number}: a job spec (mapping) or a list of jobs, "
                            f"got {type(doc).__name__}")
    seen: set[str] = set()
    for job in jobs:
        if job.name in seen:
            problems.append(f"job {job.name!r}: name: used by another job in the file")
        seen.add(job.name)
    if problems:
        raise JobFileError(problems)
    return jobs


def _params(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        params = json.loads(text)
    except json.JSONDecodeError as exc:
        _die(f"--params: not valid JSON: {exc}", EXIT_USAGE)
    if not isinstance(params, dict):
        _die("--params: must be a JSON object of knob names to values", EXIT_USAGE)
    return params


def what_if_line(answer: dict[str, Any]) -> str:
    """'NAME (MIN-MAX GPUs of type T): starts in 5m, finishes in 2h (assuming no new
    arrivals)'."""
    from voda.cli.jobs import forecast_line

    forecast = answer.get("forecast")
    head = (f"{answer['name']} ({answer['min_workers']}-{answer['max_workers']} GPUs of type "
            f"{answer['gpu_type']}): ")
    if not forecast:
        return head + "no forecast (the service could not place it as things are)"
    return head + forecast_line({**forecast, "running": False})


def _what_if(spec: Path, url: str | None, token: str | None, as_json: bool) -> None:
    from voda.cli.client import Client
    from voda.cli.common import print_json, read_input

    body = read_input(spec, "what-if")
    answer = Client(url, token).call("POST", "/v1/forecast", content=body,
                                     content_type="application/yaml")
    if as_json:
        print_json(answer)
    else:
        typer.echo(what_if_line(answer))


def plan(
    jobs_file: Annotated[
        Path | None, typer.Argument(help="Jobs: a YAML or JSON list, or job specs as "
                                         "`voda submit -f` takes (--- between several).",
                                    show_default=False)
    ] = None,
    gpus: Annotated[int | None, typer.Option("--gpus", min=0, help="GPUs to allocate.")
                    ] = None,
    algorithm: Annotated[
        str | None, typer.Option("--algorithm", "-a",
                                 help="Algorithm name or module:attribute (default: "
                                      "ElasticFIFO).")
    ] = None,
    params: Annotated[
        str | None, typer.Option("--params", help='Algorithm knobs as JSON, e.g. \'{"a": 1}\'.')
    ] = None,
    what_if: Annotated[
        Path | None, typer.Option("--what-if", help="A job spec file (as `voda submit -f` "
                                  "takes; - reads standard input): ask the service when it "
                                  "would start and finish if submitted now, assuming no new "
                                  "arrivals. Submits nothing.", show_default=False)
    ] = None,
    url: Annotated[str | None, typer.Option("--url", help="Service URL (or VODA_URL); "
                                            "--what-if only.")] = None,
    token: Annotated[str | None, typer.Option("--token", help="Bearer token (or "
                                              "VODA_TOKEN); --what-if only.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="--what-if: print the service's "
                                          "JSON answer.")] = False,
) -> None:
    """Allocate GPUs to the jobs in JOBS_FILE and print {"allocation": {job: GPUs}}; or,
    with --what-if SPEC, ask the service when that job would start and finish."""
    if what_if is not None:
        if jobs_file is not None or gpus is not None or algorithm or params:
            _die("what-if: asks the service; JOBS_FILE, --gpus, --algorithm and --params "
                 "are for a local plan", EXIT_USAGE)
        _what_if(what_if, url, token, as_json)
        return
    if jobs_file is None or gpus is None:
        _die("plan: give JOBS_FILE and --gpus (a local plan), or --what-if SPEC", EXIT_USAGE)
    from voda.core.allocation import registry
    from voda.core.allocation.base import AllocationRejected, checked_allocate
    from voda.core.jobfile import JobFileError

    try:
        chosen = registry.create(algorithm or registry.DEFAULT_ALGORITHM, _params(params))
    except registry.UnknownAlgorithm as exc:
        _die(str(exc), EXIT_USAGE)
    except ValueError as exc:
        _die(f"--params: {exc}", EXIT_USAGE)
    try:
        jobs = jobs_of(read_documents(jobs_file))
    except JobFileError as exc:
        _die(f"{jobs_file}: invalid jobs:\n" + "\n".join(exc.messages), EXIT_USAGE)
    try:
        allocation = checked_allocate(chosen, jobs, gpus)
    except AllocationRejected as exc:
        _die(str(exc), EXIT_REFUSED)
    typer.echo(json.dumps({"allocation": allocation}))


def register(app: typer.Typer) -> None:
    """Add this module's commands to the `voda` app."""
    app.command("plan")(plan)

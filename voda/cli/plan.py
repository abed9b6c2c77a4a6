"""`voda plan`: a dry-run allocation of a jobs file, run locally.

    voda plan --algorithm Tiresias --gpus 16 jobs.yaml

prints {"allocation": {job: GPUs}} as JSON. Exit codes: 0 done, 1 the algorithm
broke its contract, 2 bad input (file, jobs, algorithm or parameters).
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


def read_document(path: Path) -> Any:
    """The parsed content of a YAML or JSON file (JSON when the name ends in .json)."""
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        _die(f"cannot read the jobs file {str(path)!r}: {exc}", EXIT_USAGE)
    try:
        if path.suffix.lower() == ".json":
            return json.loads(text)
        return yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        _die(f"cannot parse the jobs file {str(path)!r}: {exc}", EXIT_USAGE)


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


def plan(
    jobs_file: Annotated[
        Path, typer.Argument(help="YAML or JSON list of jobs.", show_default=False)
    ],
    gpus: Annotated[int, typer.Option("--gpus", min=0, help="GPUs to allocate.")],
    algorithm: Annotated[
        str | None, typer.Option("--algorithm", "-a",
                                 help="Algorithm name or module:attribute (default: "
                                      "ElasticFIFO).")
    ] = None,
    params: Annotated[
        str | None, typer.Option("--params", help='Algorithm knobs as JSON, e.g. \'{"a": 1}\'.')
    ] = None,
) -> None:
    """Allocate GPUs to the jobs in JOBS_FILE and print {"allocation": {job: GPUs}}."""
    from voda.core.allocation import registry
    from voda.core.allocation.base import AllocationRejected, checked_allocate
    from voda.core.jobfile import JobFileError, jobs_from_data

    try:
        chosen = registry.create(algorithm or registry.DEFAULT_ALGORITHM, _params(params))
    except registry.UnknownAlgorithm as exc:
        _die(str(exc), EXIT_USAGE)
    except ValueError as exc:
        _die(f"--params: {exc}", EXIT_USAGE)
    try:
        jobs = jobs_from_data(read_document(jobs_file))
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

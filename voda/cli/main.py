"""Entry point of the `voda` command. Each command group lives in its own module.

A command imports what it needs when it runs: the modules below import only typer and
the standard library at load time, so a client command (submit, jobs, describe, ...)
does not pay for the scheduler, SciPy, the store or the web framework
(tests/test_cli_startup.py keeps it so; bench/cli_startup.py measures it).
"""

from __future__ import annotations

from typing import Annotated

import typer

from voda.cli import (
    cluster,
    demo,
    history,
    jobs,
    logs,
    nodes,
    plan,
    queues,
    render,
    service,
    simulate,
    sweep,
    token,
)

app = typer.Typer(
    name="voda",
    help="Voda: a GPU scheduler for elastic deep-learning training.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
)


def _version(shown: bool) -> None:
    if shown:
        from voda import __version__

        typer.echo(f"voda {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option(
        "--version", callback=_version, is_eager=True,
        help="Print the version and exit.")] = False,
) -> None:
    """Voda: a GPU scheduler for elastic deep-learning training."""


for module in (plan, simulate, sweep, service, jobs, cluster, history, nodes, queues, token,
               logs, demo, render):
    module.register(app)


def main() -> None:  # pragma: no cover - console entry
    app(prog_name="voda")  # also under `python -m voda.cli.main` (completion reads the name)


if __name__ == "__main__":  # pragma: no cover
    main()

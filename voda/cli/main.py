"""Entry point of the `voda` command. Each command group lives in its own module.

A command imports what it needs when it runs: the modules below import only typer and
the standard library at load time, so a client command (submit, jobs, describe, ...)
does not pay for the scheduler, SciPy, the store or the web framework
(tests/test_cli_startup.py keeps it so; bench/cli_startup.py measures it).

`voda NAME ...` registers only NAME's module (`main()`): building every command's
options with typer costs more than the rest of a client command. Help, completion and
`app` (what tests and `python -m voda.cli.main` import) get every command.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Annotated, Any

import typer

# Each top-level command and the module that registers it, in the order `--help` lists
# them (tests/test_cli_startup.py checks this against what each module registers).
COMMANDS: dict[str, str] = {
    "plan": "plan", "simulate": "simulate", "sweep": "sweep", "serve": "service",
    "submit": "jobs", "jobs": "jobs", "describe": "jobs", "delete": "jobs",
    "priority": "jobs", "cluster": "cluster", "top": "cluster", "algorithm": "cluster",
    "history": "history", "node": "nodes", "queue": "queues", "token": "token",
    "logs": "logs", "demo": "demo", "render": "render",
}
MODULES = tuple(dict.fromkeys(COMMANDS.values()))


def _version(shown: bool) -> None:
    if shown:
        from voda import __version__

        typer.echo(f"voda {__version__}")
        raise typer.Exit()


def _root(
    version: Annotated[bool, typer.Option(
        "--version", callback=_version, is_eager=True,
        help="Print the version and exit.")] = False,
) -> None:
    """Voda: a GPU scheduler for elastic deep-learning training."""


def build(modules: tuple[str, ...] = MODULES) -> typer.Typer:
    """The `voda` app with the commands of `modules`."""
    app = typer.Typer(
        name="voda",
        help="Voda: a GPU scheduler for elastic deep-learning training.",
        no_args_is_help=True,
        add_completion=True,
        pretty_exceptions_enable=False,
    )
    app.callback()(_root)
    for name in modules:
        importlib.import_module(f"voda.cli.{name}").register(app)
    return app


def modules_for(argv: list[str]) -> tuple[str, ...]:
    """The modules a command line needs: the named command's alone, or all of them for
    help, completion, an option before the command or a name we do not know (typer
    then says what the valid names are)."""
    completing = "_VODA_COMPLETE" in os.environ
    if completing or not argv or argv[0] not in COMMANDS:
        return () if argv[:1] == ["--version"] and not completing else MODULES
    return (COMMANDS[argv[0]],)


def main() -> None:  # the `voda` console script
    build(modules_for(sys.argv[1:]))(prog_name="voda")


def __getattr__(name: str) -> Any:
    if name == "app":  # every command, built once on first use
        globals()["app"] = built = build()
        return built
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":  # pragma: no cover - completion reads the name `voda`
    main()

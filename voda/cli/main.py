"""Entry point of the `voda` command. Each command group lives in its own module."""

from __future__ import annotations

import typer

from voda.cli import demo, logs, plan, render, service, simulate

app = typer.Typer(
    name="voda",
    help="Voda: a GPU scheduler for elastic deep-learning training.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)



@app.callback()
def _root() -> None:
    """Voda: a GPU scheduler for elastic deep-learning training."""


for module in (plan, simulate, service, logs, demo, render):
    module.register(app)


def main() -> None:  # pragma: no cover - console entry
    app()


if __name__ == "__main__":  # pragma: no cover
    main()

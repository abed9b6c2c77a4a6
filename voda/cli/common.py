"""What every client command shares: options, exit codes, output, errors.

Kept light on purpose: importing it (and typer) is all a client command pays before it
runs. Client commands print plain text (voda.cli.table); rich is imported only by the
views that need it (`voda top`, live tables, progress bars).

Exit codes: 0 done, 1 refused by the service (bad request, forbidden), 2 bad usage,
3 service unreachable, 4 not found, 5 service error.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from typing import Annotated, Any, NoReturn

import typer

EXIT_REFUSED, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_NOT_FOUND, EXIT_SERVER = 1, 2, 3, 4, 5

Url = Annotated[str | None, typer.Option("--url", help="Service URL (or VODA_URL).")]
Token = Annotated[str | None, typer.Option("--token", help="Bearer token (or VODA_TOKEN).")]
AsJson = Annotated[bool, typer.Option("--json", help="Print the service's JSON answer.")]


class Consoles:
    """Rich consoles made on use, wide when the output is not a terminal (pipes, files)."""

    def __init__(self, stderr: bool) -> None:
        self.stderr = stderr

    def console(self) -> Any:
        from rich.console import Console

        console = Console(stderr=self.stderr)
        if not console.is_terminal:
            console = Console(stderr=self.stderr, width=200)
        return console

    def print(self, *objects: Any, **kwargs: Any) -> None:
        self.console().print(*objects, **kwargs)


out = Consoles(stderr=False)
err = Consoles(stderr=True)


def stop_on_interrupt() -> None:
    """Let Ctrl-C (SIGINT) stop a live view even when we were started with SIGINT
    ignored, as a shell starts a background job: Python then never raises
    KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.default_int_handler)


def die(message: str, code: int) -> NoReturn:
    sys.stderr.write(f"{message}\n")
    raise typer.Exit(code)


def read_input(path: Any, field: str) -> bytes:
    """A file's bytes, or standard input's for `-`; unreadable: a usage error naming
    `field`."""
    try:
        return sys.stdin.buffer.read() if str(path) == "-" else path.read_bytes()
    except OSError as exc:
        die(f"{field}: cannot read {path}: {exc.strerror}", EXIT_USAGE)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True) + "\n")


def print_yaml(data: Any) -> None:
    import yaml

    sys.stdout.write(yaml.safe_dump(data, sort_keys=True, allow_unicode=True))


OUTPUTS = ("wide", "yaml", "json")


def check_output(output: str | None) -> None:
    """`-o`: one of OUTPUTS (or none: the table)."""
    if output not in (None, *OUTPUTS):
        die(f"output: must be one of {', '.join(OUTPUTS)}, got {output!r}", EXIT_USAGE)


def documents_of(body: bytes, field: str) -> list[bytes]:
    """The YAML documents of a file (separated by ---), each as its own text; a file of
    one document (or JSON) is returned whole. Unparsable: a usage error naming `field`."""
    import yaml

    try:
        text = body.decode("utf-8")
        nodes = list(yaml.compose_all(text))
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        die(f"{field}: not valid YAML or JSON: {exc}", EXIT_USAGE)
    if len(nodes) <= 1:
        return [body]
    return [text[n.start_mark.index:n.end_mark.index].encode("utf-8")
            for n in nodes if n is not None]


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def ago(t: float | None) -> str:
    return "-" if t is None else duration(max(0.0, time.time() - t))

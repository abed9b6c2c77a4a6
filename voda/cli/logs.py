"""`voda logs NAME [-f]`: a job's log, as the local backend writes it.

The local backend appends every rank's output, across restarts, to
`<run dir>/<job>/log.txt`, with its own lines (launch, stop, completion,
failure) marked `[voda ...]`. The run dir is the one `voda serve --backend
local` uses: `--run-dir`, else VODA_RUN_DIR, else the user's state directory.
The command reads that file directly, so it works on the machine that runs the
jobs; with `-f` it follows the file until the job completes or fails (or
Ctrl-C).
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import typer

from voda.cli.common import stop_on_interrupt

FOLLOW_POLL_SECONDS = 0.25
FINAL_LINE = re.compile(rb"^\[voda [^\]]*\] (completed|failed)", re.MULTILINE)


def tail_lines(data: bytes, lines: int) -> bytes:
    if lines <= 0:
        return data
    parts = data.splitlines(keepends=True)
    return b"".join(parts[-lines:])


def log_file(name: str, run_dir: Path | None) -> Path:
    from voda.backends.local import LOG_FILE, default_run_dir, job_dir

    try:
        return job_dir(run_dir or default_run_dir(), name) / LOG_FILE
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="NAME") from None


def follow(path: Path, offset: int, poll: float = FOLLOW_POLL_SECONDS) -> None:
    """Write what is appended to `path` from `offset` until the job's final line."""
    while True:
        with open(path, "rb") as f:
            f.seek(offset)
            chunk = f.read()
        if chunk:
            sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()
            offset += len(chunk)
            if FINAL_LINE.search(chunk):
                return
        time.sleep(poll)


def register(app: typer.Typer) -> None:
    @app.command()
    def logs(
        name: str = typer.Argument(..., help="Job name."),
        follow_log: bool = typer.Option(False, "--follow", "-f",
                                        help="Keep printing until the job completes or fails."),
        lines: int = typer.Option(0, "--tail", "-n",
                                  help="Only the last N lines (0: the whole log)."),
        run_dir: Path | None = typer.Option(None, "--run-dir", envvar="VODA_RUN_DIR",
                                            help="The local backend's run directory."),
    ) -> None:
        """Print a job's log (all ranks, all restarts) from the local backend's run dir."""
        path = log_file(name, run_dir)
        if not path.is_file():
            typer.echo(f"no log for job {name!r}: {path} does not exist "
                       "(is it a job of the local backend, and is --run-dir right?)", err=True)
            raise typer.Exit(1)
        data = path.read_bytes()
        shown = tail_lines(data, lines)
        sys.stdout.buffer.write(shown)
        sys.stdout.buffer.flush()
        if follow_log and not FINAL_LINE.search(data[-4096:]):
            stop_on_interrupt()
            try:
                follow(path, len(data))
            except KeyboardInterrupt:
                raise typer.Exit(130) from None

"""`voda render`: the objects the Kubernetes backend would create for a job (a dry run)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

EXIT_REFUSED, EXIT_USAGE = 1, 2


def parse_nodes(text: str, workers: int) -> tuple[tuple[str, int], ...]:
    """`n1,n2,n3` (one node per worker) or `n1:2,n2:1` (workers per node)."""
    pairs: list[tuple[str, int]] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, sep, count = part.partition(":")
        if not name or (sep and (not count.isdigit() or int(count) < 1)):
            raise ValueError(f"nodes: expected NODE or NODE:WORKERS, got {part!r}")
        pairs.append((name, int(count) if sep else 1))
    total = sum(c for _, c in pairs)
    if total != workers:
        raise ValueError(f"nodes: place {workers} workers, got {total}")
    merged: dict[str, int] = {}
    for name, count in pairs:
        merged[name] = merged.get(name, 0) + count
    return tuple(merged.items())


def register(app: typer.Typer) -> None:
    @app.command()
    def render(
        file: Annotated[Path, typer.Option("-f", "--file", help="Job file (MPIJob, PyTorchJob "
                                           "or Voda compact spec); - reads standard input.")],
        workers: Annotated[int, typer.Option(help="Workers (GPUs) to render the job at.")],
        nodes: Annotated[str | None, typer.Option(
            help="Where the workers go: n1,n2 (one per worker) or n1:2,n2:1.")] = None,
        namespace: Annotated[str, typer.Option(help="Namespace of the objects.")] = "default",
        output: Annotated[str, typer.Option("-o", "--output", help="yaml or json.")] = "yaml",
        report_url: Annotated[str, typer.Option(
            help="The URL pods reach the service at (the backend's report_url): renders the "
                 "report channel's env, VODA_TOKEN from the Secret the service creates.")] = "",
    ) -> None:
        """Print the objects `voda serve --backend kubernetes` would create (a dry run)."""
        import yaml

        from voda.backends.kubernetes.adapters import Sizes
        from voda.backends.kubernetes.config import check_report_url
        from voda.backends.kubernetes.manifests import render_job
        from voda.backends.kubernetes.pinning import assign
        from voda.backends.kubernetes.settings import KubernetesSettings
        from voda.spec import SpecError, parse_submission

        def fail(message: str, code: int) -> typer.Exit:
            sys.stderr.write(message + "\n")
            return typer.Exit(code)

        if output not in ("yaml", "json"):
            raise fail(f"output: expected yaml or json, got {output!r}", EXIT_USAGE)
        try:
            body = sys.stdin.buffer.read() if str(file) == "-" else file.read_bytes()
        except OSError as exc:
            raise fail(f"file: cannot read {file}: {exc.strerror}", EXIT_USAGE) from None
        try:
            spec = parse_submission(body)
        except SpecError as exc:
            raise fail("\n".join(str(e) for e in exc.errors), EXIT_REFUSED) from None
        if not spec.min_workers <= workers <= spec.max_workers:
            raise fail(f"workers: must lie in [min, max] = [{spec.min_workers}, "
                       f"{spec.max_workers}], got {workers}", EXIT_USAGE)
        try:
            placement = parse_nodes(nodes, workers) if nodes else ()
        except ValueError as exc:
            raise fail(str(exc), EXIT_USAGE) from None
        try:
            check_report_url(report_url, "report-url")
        except ValueError as exc:
            raise fail(str(exc), EXIT_USAGE) from None
        settings = KubernetesSettings(namespace=namespace, report_url=report_url)
        try:
            obj = render_job(spec.document, spec.name,
                             Sizes(workers, spec.min_workers, spec.max_workers),
                             assign({}, placement), "render", settings, report=True)
        except SpecError as exc:
            raise fail("\n".join(str(e) for e in exc.errors), EXIT_REFUSED) from None
        if output == "json":
            sys.stdout.write(json.dumps(obj, indent=2) + "\n")
        else:
            sys.stdout.write(yaml.safe_dump(obj, sort_keys=False))

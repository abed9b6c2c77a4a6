"""`voda serve`: the training service (REST API, scheduler, /metrics and the dashboard).

Everything it needs is imported when it runs, so the other commands do not pay for it.
The client commands live in voda/cli/jobs.py and voda/cli/cluster.py.
"""

from __future__ import annotations

import ipaddress
import sys
from typing import Annotated

import typer

from voda.cli.common import EXIT_USAGE, die, err


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def register(app: typer.Typer) -> None:
    """Add this module's commands to the `voda` app."""

    @app.command()
    def serve(
        backend: Annotated[str | None, typer.Option(
            help="Backend: local (real training processes, the default) or emulated.")] = None,
        slots: Annotated[int | None, typer.Option(
            help="Local backend: worker slots (default: one per GPU, else one per CPU).")] = None,
        nodes: Annotated[str | None, typer.Option(
            help="Local backend: show the slots as virtual nodes, e.g. 2x2.")] = None,
        run_dir: Annotated[str | None, typer.Option(
            help="Local backend: directory for per-job logs and checkpoints.")] = None,
        cluster: Annotated[str | None, typer.Option(
            help="Emulated cluster: NODESxGPUS[:TYPE],... or a cluster YAML file.")] = None,
        time_scale: Annotated[float | None, typer.Option(
            help="Emulated time runs this many times faster than real time.")] = None,
        db: Annotated[str | None, typer.Option(
            help="Store URL: sqlite:///path or postgresql+psycopg://...")] = None,
        host: Annotated[str | None, typer.Option(help="Address to listen on.")] = None,
        port: Annotated[int | None, typer.Option(help="Port to listen on.")] = None,
        algorithm: Annotated[str | None, typer.Option(
            help="Default allocation algorithm.")] = None,
        rate_limit: Annotated[float | None, typer.Option(
            help="Seconds between reschedulings at most.")] = None,
        step_interval: Annotated[float | None, typer.Option(
            help="Seconds between scheduling steps.")] = None,
        placement: Annotated[str | None, typer.Option(
            help="Placer: topology (default), topology-packed, topology-spread, naive, off "
                 "or most-free; its settings go in config.toml [placement].")] = None,
    ) -> None:
        """Run the training service: REST API, scheduler and /metrics in one process."""
        import uvicorn
        from sqlalchemy.exc import SQLAlchemyError

        from voda.api.app import create_app
        from voda.api.backends import backend_names, create_backend
        from voda.api.service import Service
        from voda.config import ConfigError, load_server_settings
        from voda.core.allocation import registry

        try:
            settings = load_server_settings({
                "backend": backend, "slots": slots, "nodes": nodes, "run_dir": run_dir,
                "cluster": cluster, "time_scale": time_scale, "db": db,
                "host": host, "port": port, "algorithm": algorithm,
                "rate_limit_seconds": rate_limit, "step_interval": step_interval,
                "placement": placement,
            })
        except ConfigError as exc:
            die(str(exc), EXIT_USAGE)
        if settings.backend not in backend_names():
            die(f"backend: unknown backend {settings.backend!r}; valid names: "
                 f"{', '.join(backend_names())}", EXIT_USAGE)
        if not registry.is_known(settings.algorithm):
            die(f"algorithm: unknown algorithm {settings.algorithm!r}; valid names: "
                 f"{', '.join(registry.available())}", EXIT_USAGE)
        bind = settings.host
        if settings.open_access and not _is_loopback(bind):
            err.print(f"no tokens configured (VODA_TOKENS): open access, so serving on "
                      f"loopback only (127.0.0.1), not {bind}")
            bind = "127.0.0.1"
        elif settings.open_access:
            err.print("no tokens configured (VODA_TOKENS): open access on loopback only")
        try:
            service = Service(settings, create_backend(settings))
            service.start()
        except ValueError as exc:
            die(str(exc), EXIT_USAGE)
        except (SQLAlchemyError, OSError) as exc:
            die(f"db: cannot open the store: {' '.join(str(exc).split())[:300]}", EXIT_USAGE)
        cluster = service.scheduler.cluster
        err.print(f"voda serve: backend {settings.backend}, {len(cluster.nodes)} nodes, "
                  f"{cluster.capacity()} GPUs ({', '.join(cluster.gpu_types())}), "
                  f"{service.recovered_jobs} jobs recovered, store "
                  f"{settings.db.split('@')[-1]}, http://{bind}:{settings.port}")
        app_ = create_app(settings, service=service)
        # Requests stay responsive while a long decision runs in another thread.
        sys.setswitchinterval(0.001)
        # Open dashboard streams must not hold a shutdown up for long.
        uvicorn.run(app_, host=bind, port=settings.port, log_level="warning",
                    access_log=False, timeout_graceful_shutdown=3)

"""`voda serve`: the training service (REST API, scheduler, /metrics and the dashboard).

Everything it needs is imported when it runs, so the other commands do not pay for it.
The client commands live in voda/cli/jobs.py, cluster.py and nodes.py.
"""

from __future__ import annotations

import ipaddress
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from voda.cli.common import EXIT_USAGE, die

if TYPE_CHECKING:
    from voda.api.service import Service
    from voda.cli.serve_log import ServeLog
    from voda.config import ServerSettings


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_algorithm(name: str) -> None:
    from voda.core.allocation import registry

    if not registry.is_known(name):
        die(f"algorithm: unknown algorithm {name!r}; valid names: "
            f"{', '.join(registry.available())}", EXIT_USAGE)


def register(app: typer.Typer) -> None:
    """Add this module's commands to the `voda` app."""

    @app.command()
    def serve(
        backend: Annotated[str | None, typer.Option(
            help="Backend: local (real training processes, the default), emulated or "
                 "kubernetes.")] = None,
        kubeconfig: Annotated[str | None, typer.Option(
            help="Kubernetes backend: kubeconfig file (default: the in-cluster "
                 "service account).")] = None,
        namespace: Annotated[str | None, typer.Option(
            help="Kubernetes backend: namespace of the jobs (Voda's own, with its "
                 "Lease, is kubernetes.voda_namespace: by default the pod's).")] = None,
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
        tls_cert: Annotated[str | None, typer.Option(
            help="Serve HTTPS with this certificate (PEM); needs --tls-key.")] = None,
        tls_key: Annotated[str | None, typer.Option(
            help="The private key (PEM) of --tls-cert.")] = None,
        log_format: Annotated[str | None, typer.Option(
            help="The log on stderr: text (default) or json (one object per line).")] = None,
        log_level: Annotated[str | None, typer.Option(
            help="Log from this level up: debug, info (default: submissions, decisions, "
                 "completions, failures, deletions), warning or error.")] = None,
        queues: Annotated[str | None, typer.Option(
            "--queues", help="Team queues: a YAML file as `voda simulate --queues` takes "
                             "(guarantee, borrowing_limit, lending_limit, weight, match); "
                             "docs/design/013-queues.md.")] = None,
    ) -> None:
        """Run the training service: REST API, scheduler, /metrics and dashboard (/ui).

        Every request to /v1 needs a bearer token: from VODA_TOKENS or config.toml, or
        else a token generated on first start, saved (mode 0600) where the CLI finds it
        and printed here. The dashboard's login takes the same tokens."""
        from voda.cli.serve_log import serve_logging

        settings, generated, token_file = _settings({
            "backend": backend, "slots": slots, "nodes": nodes, "run_dir": run_dir,
            "cluster": cluster, "time_scale": time_scale, "db": db,
            "host": host, "port": port, "algorithm": algorithm,
            "rate_limit_seconds": rate_limit, "step_interval": step_interval,
            "placement": placement, "tls_cert": tls_cert, "tls_key": tls_key,
            "kubeconfig": kubeconfig, "namespace": namespace,
            "log_format": log_format, "log_level": log_level, "queue_file": queues,
        })
        with serve_logging(settings.log_format, settings.log_level) as out:
            _run(settings, generated, token_file, out)


def _settings(overrides: dict[str, Any]) -> tuple[ServerSettings, str | None, Path | None]:
    """The server's settings, with a token generated (and where it is kept) when none is
    configured; a bad setting is a usage error naming it."""
    from voda.api.token_file import ensure_token
    from voda.config import ConfigError, load_server_settings

    try:
        return ensure_token(load_server_settings(overrides))
    except ConfigError as exc:
        die(str(exc), EXIT_USAGE)
    except OSError as exc:
        die(f"token_file: cannot write the generated token: {exc}", EXIT_USAGE)


def _run(settings: ServerSettings, generated: str | None, token_file: Path | None,
         out: ServeLog) -> None:
    from voda.api.app import create_app
    from voda.api.backends import backend_names

    if settings.backend not in backend_names():
        die(f"backend: unknown backend {settings.backend!r}; valid names: "
            f"{', '.join(backend_names())}", EXIT_USAGE)
    _check_algorithm(settings.algorithm)
    pod_settings = None
    if settings.backend == "kubernetes":
        from voda.podsched.service import pod_scheduler_settings

        try:  # the secondary scheduler for pods with schedulerName voda-scheduler
            pod_settings = pod_scheduler_settings(settings)
        except ValueError as exc:
            die(str(exc), EXIT_USAGE)
    service, elector = _start(settings, out)
    pod_scheduler = None
    if pod_settings is not None:
        from voda.podsched.service import start_beside

        pod_scheduler = start_beside(service.backend, pod_settings, service.metrics.registry)
    _announce(settings, service, generated, token_file, out)
    app_ = create_app(settings, service=service)
    # Requests stay responsive while a long decision runs in another thread.
    sys.setswitchinterval(0.001)
    if elector is not None:
        from voda.cli.kubernetes import keep_signals

        keep_signals()  # uvicorn re-raises SIGTERM after shutdown: the lease goes first
    _serve_http(app_, settings)
    if pod_scheduler is not None:
        pod_scheduler.stop()
    if elector is not None:
        from voda.cli.kubernetes import step_down, withdraw_leader

        withdraw_leader(elector, settings)
        raise typer.Exit(step_down(elector, service.backend))


def _start(settings: ServerSettings, out: ServeLog) -> tuple[Service, Any]:
    """The backend and the started service, and the lease's elector on Kubernetes (where
    a standby waits here until it leads); what cannot start is a usage error."""
    from sqlalchemy.exc import SQLAlchemyError

    from voda.api.backends import create_backend
    from voda.api.service import Service, StoreNotWritable

    elector = None
    try:
        if settings.backend == "kubernetes":
            from voda.cli.kubernetes import lead, publish_leader, standby, standby_health

            elector = standby(settings)  # the backend's writes pass its fence
            backend_ = create_backend(settings)  # watches the cluster, writes nothing
            health = standby_health(settings, backend_)  # Ready while it waits
            lead(elector, out)  # a standby waits here
            health.close()
            publish_leader(elector, settings)  # the Service routes to it from now
        else:
            backend_ = create_backend(settings)
        service = Service(settings, backend_)
        service.start()
    except StoreNotWritable as exc:
        die(str(exc), EXIT_USAGE)
    except ValueError as exc:
        die(str(exc), EXIT_USAGE)
    except (SQLAlchemyError, OSError) as exc:
        die(f"db: cannot open the store: {' '.join(str(exc).split())[:300]}", EXIT_USAGE)
    return service, elector


def _announce(settings: ServerSettings, service: Service, generated: str | None,
              token_file: Path | None, out: ServeLog) -> None:
    """What runs where; the generated token (never in a JSON log: it names the file)."""
    cluster_ = service.scheduler.cluster
    scheme = "https" if settings.tls_cert else "http"
    shown = f"[{settings.host}]" if ":" in settings.host else settings.host
    url = f"{scheme}://{shown}:{settings.port}"
    out.announce(f"voda serve: backend {settings.backend}, {len(cluster_.nodes)} nodes, "
                 f"{cluster_.capacity()} GPUs ({', '.join(cluster_.gpu_types())}), "
                 f"{service.recovered_jobs} jobs recovered, store "
                 f"{settings.db.split('@')[-1]}, {url} (dashboard: {url}/ui)",
                 event="started", backend=settings.backend, url=url,
                 gpus=cluster_.capacity(), recovered_jobs=service.recovered_jobs)
    if generated is not None and out.json:
        out.announce(f"no tokens are configured: an administrator's token was generated "
                     f"and saved in {token_file} (mode 0600), where the voda CLI finds it",
                     logging.WARNING, event="token_generated", token_file=str(token_file))
    elif generated is not None:
        out.announce(f"token: {generated}\n  saved in {token_file} (mode 0600), where the "
                     f"voda CLI finds it; other clients send it as a header:\n  curl -H "
                     f"'Authorization: Bearer {generated}' {url}/v1/jobs\n  and the "
                     f"dashboard's login at {url}/ui takes it")
    if scheme == "http" and not _is_loopback(settings.host):
        out.announce("warning: serving plain HTTP beyond this machine; tokens cross the "
                     "network in clear (use --tls-cert and --tls-key)", logging.WARNING,
                     event="plain_http")


def _serve_http(app_: Any, settings: ServerSettings) -> None:
    """uvicorn until it is stopped. Its loggers propagate to the service's log handler at
    the service's level (no log config of its own), without an access log."""
    import uvicorn

    from voda.api import connections
    from voda.config import split_list

    # Open dashboard streams must not hold a shutdown up for long. A request's head
    # has header_timeout_seconds to come, and connections are capped
    # (voda.api.connections).
    # X-Forwarded-For/-Proto only from the configured proxies (uvicorn would believe
    # them from 127.0.0.1 by default: a local client could then pick the address its
    # failed tokens are charged to); without `trusted_proxies` they are ignored.
    proxies = split_list(settings.trusted_proxies)
    connections.handshake_seconds = settings.header_timeout_seconds
    uvicorn.run(app_, host=settings.host, port=settings.port, log_config=None,
                loop="voda.api.connections:bounded_loop",
                log_level=settings.log_level, access_log=False,
                ssl_certfile=settings.tls_cert or None,
                ssl_keyfile=settings.tls_key or None, timeout_graceful_shutdown=3,
                http=connections.protocol(settings.header_timeout_seconds,
                                          settings.max_connections,
                                          settings.max_connections_per_address, proxies),
                limit_concurrency=settings.max_connections + 1,
                proxy_headers=bool(proxies), forwarded_allow_ips=proxies or None)

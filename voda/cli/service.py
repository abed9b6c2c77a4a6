"""`voda serve` and the client commands: a thin httpx client of the REST API.

Exit codes: 0 done, 1 refused by the service (bad request, forbidden),
2 bad usage, 3 service unreachable, 4 not found, 5 service error.
Every client command takes --url/--token (or VODA_URL/VODA_TOKEN, or the
[client] table of config.toml) and --json for machine-readable output.
"""

from __future__ import annotations

import ipaddress
import json
import re
import ssl
import sys
import time
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

import httpx
import typer
from rich.console import Console
from rich.table import Table

from voda.config import ConfigError, load_client_settings, load_server_settings

EXIT_REFUSED, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_NOT_FOUND, EXIT_SERVER = 1, 2, 3, 4, 5

Url = Annotated[str | None, typer.Option("--url", help="Service URL (or VODA_URL).")]
Token = Annotated[str | None, typer.Option("--token", help="Bearer token (or VODA_TOKEN).")]
AsJson = Annotated[bool, typer.Option("--json", help="Print the service's JSON answer.")]



class _Consoles:
    """Rich consoles made on use, wide when the output is not a terminal (pipes, files)."""

    def __init__(self, stderr: bool) -> None:
        self.stderr = stderr

    def print(self, *objects: Any, **kwargs: Any) -> None:
        console = Console(stderr=self.stderr)
        if not console.is_terminal:
            console = Console(stderr=self.stderr, width=200)
        console.print(*objects, **kwargs)


out = _Consoles(stderr=False)
err = _Consoles(stderr=True)


class Client:
    def __init__(self, url: str | None, token: str | None) -> None:
        try:
            settings = load_client_settings(url, token)
        except ConfigError as exc:
            _die(str(exc), EXIT_USAGE)
        headers = {"Authorization": f"Bearer {settings.token}"} if settings.token else {}
        self.url = settings.url
        verify: ssl.SSLContext | bool = settings.verify is not False
        if isinstance(settings.verify, str):  # a private CA's bundle
            try:
                verify = ssl.create_default_context(cafile=settings.verify)
            except (OSError, ssl.SSLError) as exc:
                _die(f"ca_bundle: cannot read {settings.verify}: {exc}", EXIT_USAGE)
        self.http = httpx.Client(base_url=settings.url, headers=headers, timeout=30.0,
                                 verify=verify)

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            _die(f"cannot reach the service at {self.url}: {exc}", EXIT_UNREACHABLE)
        if response.status_code >= 400:
            try:
                body = response.json()
                message = body.get("error") or str(body)
                if body.get("valid"):
                    message += f"\nvalid: {', '.join(body['valid'])}"
            except ValueError:
                message = response.text[:500]
            code = (EXIT_NOT_FOUND if response.status_code == 404 else
                    EXIT_SERVER if response.status_code >= 500 else EXIT_REFUSED)
            _die(f"error {response.status_code}: {message}", code)
        return response.json()


_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def path_part(value: str, what: str = "name") -> str:
    """A name for a URL path: checked, then percent-encoded, so that no name can reach
    another endpoint (`voda describe ../../healthz`)."""
    if not value or len(value) > 200 or not _NAME.match(value):
        _die(f"{what}: {value[:60]!r} is not a {what} (lowercase letters, digits and '-')",
             EXIT_USAGE)
    return quote(value, safe="")


def _die(message: str, code: int) -> typer.Exit:
    err.print(f"[red]{message}[/red]", highlight=False)
    raise typer.Exit(code)


def _print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True) + "\n")


def _ago(t: float | None) -> str:
    if t is None:
        return "-"
    return _duration(max(0.0, time.time() - t))


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _print_scheduler(view: dict[str, Any], as_json: bool, valid: bool) -> None:
    if as_json:
        _print_json(view)
        return
    params = f" {view['params']}" if valid and view["params"] else ""
    text = (f"{view['gpu_type']}: {view['algorithm']}{params} (rate limit "
            f"{view['rate_limit_seconds']:g} s)")
    if valid:
        text += f"\nvalid: {', '.join(view['valid_algorithms'])}"
    out.print(text, highlight=False)


def _check_algorithm(name: str) -> None:
    from voda.core.allocation import registry

    if not registry.is_known(name):
        _die(f"algorithm: unknown algorithm {name!r}; valid names: "
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
            help="Kubernetes backend: namespace of the jobs and the leader Lease.")] = None,
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
    ) -> None:
        """Run the training service: REST API, scheduler and /metrics in one process.

        Every request to /v1 needs a bearer token: from VODA_TOKENS or config.toml, or
        else a token generated on first start, saved (mode 0600) where the CLI finds it
        and printed here."""
        import uvicorn
        from sqlalchemy.exc import SQLAlchemyError

        from voda.api.app import create_app
        from voda.api.backends import backend_names, create_backend
        from voda.api.service import Service, StoreNotWritable
        from voda.api.token_file import ensure_token

        try:
            settings = load_server_settings({
                "backend": backend, "slots": slots, "nodes": nodes, "run_dir": run_dir,
                "cluster": cluster, "time_scale": time_scale, "db": db,
                "host": host, "port": port, "algorithm": algorithm,
                "rate_limit_seconds": rate_limit, "step_interval": step_interval,
                "placement": placement, "tls_cert": tls_cert, "tls_key": tls_key,
                "kubeconfig": kubeconfig, "namespace": namespace,
            })
            settings, generated, token_file = ensure_token(settings)
        except ConfigError as exc:
            _die(str(exc), EXIT_USAGE)
        except OSError as exc:
            _die(f"token_file: cannot write the generated token: {exc}", EXIT_USAGE)
        if settings.backend not in backend_names():
            _die(f"backend: unknown backend {settings.backend!r}; valid names: "
                 f"{', '.join(backend_names())}", EXIT_USAGE)
        _check_algorithm(settings.algorithm)
        pod_settings = None
        if settings.backend == "kubernetes":
            from voda.podsched.service import pod_scheduler_settings

            try:  # the secondary scheduler for pods with schedulerName voda-scheduler
                pod_settings = pod_scheduler_settings(settings)
            except ValueError as exc:
                _die(str(exc), EXIT_USAGE)
        elector = None
        try:
            if settings.backend == "kubernetes":
                from voda.cli.kubernetes import lead, standby

                elector = standby(settings)  # the backend's writes pass its fence
                backend_ = create_backend(settings)  # watches the cluster, writes nothing
                lead(elector)  # a standby waits here
            else:
                backend_ = create_backend(settings)
            service = Service(settings, backend_)
            service.start()
        except StoreNotWritable as exc:
            _die(str(exc), EXIT_USAGE)
        except ValueError as exc:
            _die(str(exc), EXIT_USAGE)
        except (SQLAlchemyError, OSError) as exc:
            _die(f"db: cannot open the store: {' '.join(str(exc).split())[:300]}", EXIT_USAGE)
        pod_scheduler = None
        if pod_settings is not None:
            from voda.podsched.service import start_beside

            pod_scheduler = start_beside(service.backend, pod_settings, service.metrics.registry)
        cluster = service.scheduler.cluster
        scheme = "https" if settings.tls_cert else "http"
        shown = f"[{settings.host}]" if ":" in settings.host else settings.host
        url = f"{scheme}://{shown}:{settings.port}"
        err.print(f"voda serve: backend {settings.backend}, {len(cluster.nodes)} nodes, "
                  f"{cluster.capacity()} GPUs ({', '.join(cluster.gpu_types())}), "
                  f"{service.recovered_jobs} jobs recovered, store "
                  f"{settings.db.split('@')[-1]}, {url}", highlight=False, soft_wrap=True)
        if generated is not None:
            err.print(f"token: {generated}\n  saved in {token_file} (mode 0600), where the "
                      f"voda CLI finds it; other clients send it as a header:\n  curl -H "
                      f"'Authorization: Bearer {generated}' {url}/v1/jobs",
                      highlight=False, soft_wrap=True)
        if scheme == "http" and not _is_loopback(settings.host):
            err.print("warning: serving plain HTTP beyond this machine; tokens cross the "
                      "network in clear (use --tls-cert and --tls-key)", highlight=False)
        app_ = create_app(settings, service=service)
        # Requests stay responsive while a long decision runs in another thread.
        sys.setswitchinterval(0.001)
        if elector is not None:
            from voda.cli.kubernetes import keep_signals

            keep_signals()  # uvicorn re-raises SIGTERM after shutdown: the lease goes first
        uvicorn.run(app_, host=settings.host, port=settings.port, log_level="warning",
                    access_log=False, ssl_certfile=settings.tls_cert or None,
                    ssl_keyfile=settings.tls_key or None)
        if pod_scheduler is not None:
            pod_scheduler.stop()
        if elector is not None:
            from voda.cli.kubernetes import step_down

            raise typer.Exit(step_down(elector, service.backend))

    @app.command()
    def submit(
        file: Annotated[Path, typer.Option("-f", "--file", help="Job file (YAML or JSON); "
                                           "- reads standard input.")],
        url: Url = None, token: Token = None, as_json: AsJson = False,
    ) -> None:
        """Submit a job (Voda compact spec, MPIJob or PyTorchJob)."""
        try:
            body = sys.stdin.buffer.read() if str(file) == "-" else file.read_bytes()
        except OSError as exc:
            _die(f"file: cannot read {file}: {exc.strerror}", EXIT_USAGE)
        job = Client(url, token).call("POST", "/v1/jobs", content=body,
                                      headers={"Content-Type": "application/yaml"})
        if as_json:
            _print_json(job)
        else:
            out.print(f"submitted {job['name']} ({job['status']})", highlight=False)

    @app.command()
    def jobs(
        status: Annotated[str | None, typer.Option(help="Only jobs in this status.")] = None,
        gpu_type: Annotated[str | None, typer.Option(help="Only jobs of this GPU type.")] = None,
        user: Annotated[str | None, typer.Option(help="Only this user's jobs.")] = None,
        limit: Annotated[int, typer.Option(help="Jobs per page.")] = 100,
        offset: Annotated[int, typer.Option(help="Jobs to skip.")] = 0,
        url: Url = None, token: Token = None, as_json: AsJson = False,
    ) -> None:
        """List jobs."""
        params = {k: v for k, v in {"status": status, "gpu_type": gpu_type, "user": user,
                                    "limit": limit, "offset": offset}.items() if v is not None}
        page = Client(url, token).call("GET", "/v1/jobs", params=params)
        if as_json:
            _print_json(page)
            return
        table = Table("NAME", "USER", "STATUS", "GPU TYPE", "WORKERS", "MIN-MAX", "PRIORITY",
                      "EPOCHS", "AGE")
        for j in page["items"]:
            table.add_row(j["name"], j["user"], j["status"], j["gpu_type"], str(j["workers"]),
                          f"{j['min_workers']}-{j['max_workers']}", str(j["priority"]),
                          f"{j['completed_epochs']:g}/{j['epochs']}", _ago(j["submit_time"]))
        out.print(table)
        if page["next_offset"] is not None:
            out.print(f"{page['total']} jobs; next page: --offset {page['next_offset']}")

    @app.command()
    def describe(name: str, url: Url = None, token: Token = None, as_json: AsJson = False) -> None:
        """Show one job: status, placement, attained service, estimates."""
        job = Client(url, token).call("GET", f"/v1/jobs/{path_part(name)}")
        if as_json:
            _print_json(job)
            return
        placement = ", ".join(f"{p['node']}:{p['workers']}" for p in job["placement"]) or "-"
        rows = [
            ("Name", job["name"]), ("User", job["user"]), ("Kind", job["kind"]),
            ("Status", job["status"]), ("GPU type", job["gpu_type"]),
            ("Workers", f"{job['workers']} (min {job['min_workers']}, max {job['max_workers']})"),
            ("Placement", placement), ("Priority", str(job["priority"])),
            ("Epochs", f"{job['completed_epochs']:g}/{job['epochs']}"),
            ("Waiting", _duration(job["waiting_seconds"])),
            ("Running", _duration(job["running_seconds"])),
            ("Total", _duration(job["total_seconds"])),
            ("GPU-seconds", f"{job['gpu_seconds']:.0f}"),
            ("Remaining (est.)", _duration(job["estimated_remaining_seconds"])),
            ("Speedup", " ".join(f"{k}:{v:.2f}" for k, v in job["speedup"].items())),
        ]
        if job.get("unschedulable"):
            rows.append(("Unschedulable", job["unschedulable"]))
        if job.get("failure_reason"):
            rows.append(("Failure", job["failure_reason"]))
        for event in job.get("events", [])[-5:]:
            change = event["message"] or f"{event['old'] or '-'} -> {event['new']}"
            rows.append((f"Event ({_ago(event['time'])} ago)", f"{event['field']}: {change}"))
        table = Table(show_header=False, box=None)
        for key, value in rows:
            table.add_row(f"[bold]{key}[/bold]", value)
        out.print(table)

    @app.command()
    def delete(
        names: Annotated[list[str], typer.Argument(help="Jobs to delete.")],
        url: Url = None, token: Token = None, as_json: AsJson = False,
    ) -> None:
        """Delete (cancel) jobs."""
        client = Client(url, token)
        done = [client.call("DELETE", f"/v1/jobs/{path_part(name)}") for name in names]
        if as_json:
            _print_json(done)
        else:
            for job in done:
                out.print(f"deleted {job['name']} ({job['status']})", highlight=False)

    @app.command()
    def priority(
        name: str,
        value: Annotated[int, typer.Argument(help="New priority; 0 is the highest.")],
        url: Url = None, token: Token = None, as_json: AsJson = False,
    ) -> None:
        """Change a job's priority."""
        job = Client(url, token).call("PATCH", f"/v1/jobs/{path_part(name)}",
                                      json={"priority": value})
        if as_json:
            _print_json(job)
        else:
            out.print(f"{job['name']}: priority {job['priority']}", highlight=False)

    @app.command("cluster")
    def cluster_(url: Url = None, token: Token = None, as_json: AsJson = False) -> None:
        """Show nodes, GPUs per type and the plan in force."""
        view = Client(url, token).call("GET", "/v1/cluster")
        if as_json:
            _print_json(view)
            return
        types = Table("GPU TYPE", "TOTAL", "USED", "FREE", "ALGORITHM")
        for t in view["gpu_types"]:
            types.add_row(t["gpu_type"], str(t["total"]), str(t["used"]), str(t["free"]),
                          t["algorithm"])
        out.print(types)
        nodes = Table("NODE", "GPU TYPE", "GPUS", "USED", "JOBS")
        for n in view["nodes"]:
            jobs_ = [f"{j}:{c}" for j, c in n["jobs"].items()]
            if n.get("others"):
                jobs_.append(f"(others):{n['others']}")
            name = n["name"] if n.get("schedulable", True) else f"{n['name']} (drained)"
            nodes.add_row(name, n["gpu_type"], str(n["gpus"]), str(n["used"]),
                          ", ".join(jobs_) or "-")
        out.print(nodes)

    algorithm_app = typer.Typer(help="Show or switch the allocation algorithm of a GPU type.",
                                no_args_is_help=True)

    @algorithm_app.command("set")
    def algorithm_set(
        name: Annotated[str, typer.Argument(help="Algorithm name, e.g. ElasticTiresias.")],
        gpu_type: Annotated[str, typer.Option(help="GPU type it schedules.")] = "default",
        param: Annotated[list[str] | None, typer.Option(
            help="Algorithm parameter KEY=VALUE (VALUE read as JSON when it parses).")] = None,
        rate_limit: Annotated[float | None, typer.Option(
            help="Seconds between reschedulings at most (all GPU types).")] = None,
        url: Url = None, token: Token = None, as_json: AsJson = False,
    ) -> None:
        """Switch the algorithm of a GPU type; an unknown name changes nothing."""
        params: dict[str, Any] | None = None
        if param:
            params = {}
            for item in param:
                key, sep, raw = item.partition("=")
                if not sep or not key:
                    _die(f"param: expected KEY=VALUE, got {item!r}", EXIT_USAGE)
                try:
                    params[key] = json.loads(raw)
                except ValueError:
                    params[key] = raw
        body: dict[str, Any] = {"algorithm": name}
        if params is not None:
            body["params"] = params
        if rate_limit is not None:
            body["rate_limit_seconds"] = rate_limit
        view = Client(url, token).call("PUT", f"/v1/schedulers/{path_part(gpu_type, 'GPU type')}",
                                       json=body)
        _print_scheduler(view, as_json, valid=False)

    @algorithm_app.command("get")
    def algorithm_get(
        gpu_type: Annotated[str, typer.Option(help="GPU type.")] = "default",
        url: Url = None, token: Token = None, as_json: AsJson = False,
    ) -> None:
        """Show the algorithm of a GPU type and the valid names."""
        view = Client(url, token).call("GET", f"/v1/schedulers/{path_part(gpu_type, 'GPU type')}")
        _print_scheduler(view, as_json, valid=True)

    app.add_typer(algorithm_app, name="algorithm")

    node_app = typer.Typer(help="Add, drain or remove nodes of a running service "
                                "(administrators; emulated and local backends).",
                           no_args_is_help=True)

    def _print_node(node: dict[str, Any], as_json: bool, what: str) -> None:
        if as_json:
            _print_json(node)
        else:
            out.print(f"node {node['name']} {what}: {node['gpus']} {node['gpu_type']} GPUs, "
                      f"leaf {node['leaf']}", highlight=False)

    @node_app.command("add")
    def node_add(
        name: Annotated[str, typer.Argument(help="Node name.")],
        gpus: Annotated[int, typer.Option(help="GPUs (worker slots) of the node.")] = 1,
        gpu_type: Annotated[str, typer.Option(help="GPU type.")] = "default",
        leaf: Annotated[str | None, typer.Option(help="Leaf switch (network domain).")] = None,
        spine: Annotated[str | None, typer.Option(help="Spine switch.")] = None,
        url: Url = None, token: Token = None, as_json: AsJson = False,
    ) -> None:
        """Add a node, or take a drained one back."""
        client = Client(url, token)
        body = {"name": name, "gpus": gpus, "gpu_type": gpu_type, "leaf": leaf, "spine": spine}
        drained = [n for n in client.call("GET", "/v1/cluster")["nodes"]
                   if n["name"] == name and not n.get("schedulable", True)]
        if drained:
            node = client.call("PATCH", f"/v1/nodes/{path_part(name, 'node name')}",
                               json={"schedulable": True})
        else:
            node = client.call("POST", "/v1/nodes",
                               json={k: v for k, v in body.items() if v is not None})
        _print_node(node, as_json, "in service")

    @node_app.command("drain")
    def node_drain(name: Annotated[str, typer.Argument(help="Node name.")],
                   url: Url = None, token: Token = None, as_json: AsJson = False) -> None:
        """Take no more workers on a node; its jobs stop and wait for other nodes."""
        node = Client(url, token).call("PATCH", f"/v1/nodes/{path_part(name, 'node name')}",
                                       json={"schedulable": False})
        _print_node(node, as_json, "drained")

    @node_app.command("remove")
    def node_remove(name: Annotated[str, typer.Argument(help="Node name.")],
                    url: Url = None, token: Token = None, as_json: AsJson = False) -> None:
        """Remove a node; its jobs stop and wait for other nodes."""
        node = Client(url, token).call("DELETE", f"/v1/nodes/{path_part(name, 'node name')}")
        _print_node(node, as_json, "removed")

    app.add_typer(node_app, name="node")

    @app.command("token")
    def token_(
        user: Annotated[str, typer.Option(help="The user the token is for.")] = "admin",
        admin: Annotated[bool, typer.Option(help="An administrator's token.")] = False,
    ) -> None:
        """Print a new random token and its entry for `tokens` in config.toml (hashed)."""
        import secrets

        from voda.config import USER_RE, hash_token

        if not USER_RE.match(user):
            _die(f"user: {user!r} is not a user name", EXIT_USAGE)
        new = secrets.token_urlsafe(32)
        entry = f"{user}:sha256:{hash_token(new)}{':admin' if admin else ''}"
        sys.stdout.write(f"token: {new}\nconfig: {entry}\n")

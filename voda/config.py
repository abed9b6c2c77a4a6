"""Settings of the service and of its client, read at the edge only.

Precedence, lowest first: defaults, `~/.config/voda/config.toml` (or the file
named by VODA_CONFIG), environment variables (VODA_*), command-line flags.

config.toml:

    [server]
    host = "127.0.0.1"
    port = 8470
    db = "sqlite:////var/lib/voda/voda.db"
    backend = "local"          # or "emulated", "kubernetes"
    slots = 4                  # local: worker slots (default: one per GPU, else per CPU)
    nodes = "2x2"              # local: virtual nodes (optional)
    cluster = "4x4"            # emulated: NODESxGPUS[:TYPE],... or a cluster file
    time_scale = 60.0
    algorithm = "ElasticFIFO"
    rate_limit_seconds = 5.0
    placement = "topology"     # or topology-packed, topology-spread, naive, off, most-free
    tokens = "alice:tok1,admin:tok2:admin"

    [placement]                # the topology placers' PlacementSettings
    resource_weight = 0.4
    topology_weight = 0.3
    utilization_weight = 0.2
    history_weight = 0.1
    max_nodes_per_leaf = 4

    [kubernetes]               # voda.backends.kubernetes.settings (backend "kubernetes")
    namespace = "training"
    gpu_type_label = "voda.io/gpu-type"
    lease_seconds = 15.0       # the leader elector: client-go's timings by default

    [pod_scheduler]            # voda.podsched.service (backend "kubernetes")
    enabled = true
    scheduler_name = "voda-scheduler"

    [client]
    url = "http://127.0.0.1:8470"
    token = "tok1"
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import platformdirs

DEFAULT_PORT = 8470
DEFAULT_URL = f"http://127.0.0.1:{DEFAULT_PORT}"


class ConfigError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class User:
    name: str
    admin: bool = False


def parse_tokens(text: str) -> dict[str, User]:
    """'alice:tok1,admin:tok2:admin' -> {token: User}."""
    tokens: dict[str, User] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        pieces = item.split(":")
        if len(pieces) not in (2, 3) or not pieces[0] or not pieces[1]:
            raise ConfigError(f"tokens: expected 'user:token[:admin]', got {item!r}")
        if len(pieces) == 3 and pieces[2] != "admin":
            raise ConfigError(f"tokens: the third part may only be 'admin', got {pieces[2]!r}")
        tokens[pieces[1]] = User(pieces[0], admin=len(pieces) == 3)
    return tokens


def default_db_url() -> str:
    path = Path(platformdirs.user_data_dir("voda")) / "voda.db"
    return f"sqlite:///{path}"


@dataclass(frozen=True, slots=True)
class ServerSettings:
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    db: str = field(default_factory=default_db_url)
    backend: str = "local"
    slots: int = 0  # local backend: 0 means one per GPU, else one per CPU
    nodes: str = ""  # local backend: virtual nodes such as "2x2"; empty: one node
    run_dir: str = ""  # local backend: per-job logs and checkpoints; empty: user state dir
    cluster: str = "4x4"
    time_scale: float = 60.0
    algorithm: str = "ElasticFIFO"
    rate_limit_seconds: float = 5.0
    placement: str = "topology"
    # Fields of voda.core.placement.manager.PlacementSettings (config.toml [placement]).
    placement_settings: Mapping[str, Any] = field(default_factory=dict)
    step_interval: float = 0.5
    # Kubernetes backend: kubeconfig file (empty: in-cluster), namespace of the jobs, and
    # config.toml [kubernetes] (voda.backends.kubernetes.config).
    kubeconfig: str = ""
    namespace: str = "default"
    kubernetes_settings: Mapping[str, Any] = field(default_factory=dict)
    # The pod scheduler beside the Kubernetes backend: config.toml [pod_scheduler]
    # (voda.podsched.service).
    pod_scheduler_settings: Mapping[str, Any] = field(default_factory=dict)
    tokens: Mapping[str, User] = field(default_factory=dict)
    max_body_bytes: int = 1 << 20

    @property
    def open_access(self) -> bool:
        """No tokens: every caller is an administrator, so only loopback is served."""
        return not self.tokens


@dataclass(frozen=True, slots=True)
class ClientSettings:
    url: str = DEFAULT_URL
    token: str | None = None


def config_path(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    if env.get("VODA_CONFIG"):
        return Path(env["VODA_CONFIG"])
    return Path(platformdirs.user_config_dir("voda")) / "config.toml"


def _read_file(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc


_SERVER_ENV = {
    "host": "VODA_HOST",
    "port": "VODA_PORT",
    "db": "VODA_DB",
    "backend": "VODA_BACKEND",
    "slots": "VODA_SLOTS",
    "nodes": "VODA_NODES",
    "run_dir": "VODA_RUN_DIR",
    "cluster": "VODA_CLUSTER",
    "time_scale": "VODA_TIME_SCALE",
    "algorithm": "VODA_ALGORITHM",
    "rate_limit_seconds": "VODA_RATE_LIMIT",
    "placement": "VODA_PLACEMENT",
    "step_interval": "VODA_STEP_INTERVAL",
    "kubeconfig": "VODA_KUBECONFIG",
    "namespace": "VODA_NAMESPACE",
    "tokens": "VODA_TOKENS",
}


def _coerce(name: str, value: Any, kind: type) -> Any:
    if name == "tokens":
        if isinstance(value, Mapping):
            return value
        return parse_tokens(str(value))
    if name in ("placement_settings", "kubernetes_settings", "pod_scheduler_settings"):
        if not isinstance(value, Mapping):
            table = name.removesuffix("_settings")
            raise ConfigError(f"{table}: expected a table of settings, got {value!r}")
        return dict(value)
    try:
        return kind(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{name}: expected {kind.__name__}, got {value!r}") from exc


def load_server_settings(
    overrides: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    path: Path | None = None,
) -> ServerSettings:
    env = os.environ if env is None else env
    file = _read_file(path or config_path(env))
    values: dict[str, Any] = dict(file.get("server", {}))
    if "placement" in file:
        values["placement_settings"] = file["placement"]
    if "kubernetes" in file:
        values["kubernetes_settings"] = file["kubernetes"]
    if "pod_scheduler" in file:
        values["pod_scheduler_settings"] = file["pod_scheduler"]
    for name, var in _SERVER_ENV.items():
        if env.get(var):
            values[name] = env[var]
    for name, value in (overrides or {}).items():
        if value is not None:
            values[name] = value
    settings = ServerSettings()
    kinds = {f.name: type(getattr(settings, f.name)) for f in fields(ServerSettings)}
    unknown = set(values) - set(kinds)
    if unknown:
        raise ConfigError(f"server: unknown settings {', '.join(sorted(unknown))}")
    coerced = {name: _coerce(name, value, kinds[name]) for name, value in values.items()}
    return replace(settings, **coerced)


def load_client_settings(
    url: str | None = None,
    token: str | None = None,
    env: Mapping[str, str] | None = None,
    path: Path | None = None,
) -> ClientSettings:
    env = os.environ if env is None else env
    values = _read_file(path or config_path(env)).get("client", {})
    return ClientSettings(
        url=(url or env.get("VODA_URL") or values.get("url") or DEFAULT_URL).rstrip("/"),
        token=token or env.get("VODA_TOKEN") or values.get("token"),
    )

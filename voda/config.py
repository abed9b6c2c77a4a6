"""Settings of the service, read at the edge only (the client's: voda.client_settings).

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
    tokens = "alice:TOKEN1,admin:sha256:<hex digest of TOKEN2>:admin"  # >= 16 characters
    token_file = "~/.config/voda/token"   # the generated token when no tokens are set
    report_key_file = "~/.config/voda/report-key"  # report tokens' key (or VODA_REPORT_KEY)
    allowed_hosts = ""         # Host names served besides the bind address; "*": any
    allowed_origins = ""       # browser origins allowed cross-origin (CORS)
    tls_cert = ""              # serve HTTPS with this certificate and key
    tls_key = ""
    shared_history = ""        # users whose jobs share speed history (else per user)
    user_best_priority = 0     # the best (lowest) priority a non-admin may use
    user_max_queued_jobs = 1000  # a non-admin's jobs waiting at most
    local_user_jobs = false    # let non-admins run commands on the local backend
    algorithm_paths = ""       # import paths (module:attr) the API may select
    db_max_bytes = 0           # SQLite: the store file's size limit (0: none)
    trusted_proxies = ""       # proxies whose X-Forwarded-For/-Proto are believed (IPs, CIDRs)
    session_hours = 12.0       # a dashboard login lasts this long (ended by log out, restart)
    history_sample_seconds = 60.0  # the cluster's history: a sample per GPU type this often
    history_days = 8.0         # and kept this long (the dashboard's History page)
    log_format = "text"        # or "json": one object per line (stderr)
    log_level = "info"         # or "debug", "warning", "error"
    queue_file = ""            # team queues (YAML, as `voda simulate --queues`; --queues)

    [users.alice]              # per-user limits (admins are not limited)
    best_priority = 2
    max_queued_jobs = 50
    queue = "team-a"           # the queue of alice's jobs that name none

    [[queues]]                 # team queues, as in a queue file (docs/design/013-queues.md)
    name = "team-a"
    guarantee = {default = 8}
    borrowing_limit = {default = 4}
    match = {namespace = "team-a"}  # Kubernetes: jobs of this namespace

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
    report_url = "http://voda.voda.svc:8470"  # pods report here (or VODA_REPORT_URL)
    mpijob_rescale_delay_seconds = 30.0  # an MPIJob's hostfile ConfigMap wait, priced

    [pod_scheduler]            # voda.podsched.service (backend "kubernetes")
    enabled = true
    scheduler_name = "voda-scheduler"

    [client]
    url = "http://127.0.0.1:8470"
    token = "TOKEN1"
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from voda.client_settings import DEFAULT_PORT, ConfigError, config_path, read_file


@dataclass(frozen=True, slots=True)
class User:
    name: str
    admin: bool = False
    # Read-only: sees what a user of its name sees, changes nothing (every write is 403).
    viewer: bool = False


ROLES = ("admin", "viewer")  # a token's optional last part: 'user:token:ROLE'
USER_RE = re.compile(r"^[A-Za-z0-9][-_.A-Za-z0-9]{0,63}$")
_HEX_DIGEST = re.compile(r"^[0-9a-f]{64}$")
# The minimum strength of a configured token: 16 characters (`voda token` and the token
# `voda serve` generates have 43 random ones, 256 bits). Only guessing protects a token
# (voda.api.auth accepts a valid token from an address held back for failed attempts), so
# a short one is refused at start. A token given hashed (sha256:HEX) cannot be measured.
MIN_TOKEN_LENGTH = 16
# What `voda serve` logs, and how (voda.cli.serve_log).
LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("debug", "info", "warning", "error")


def hash_token(token: str) -> str:
    """The SHA-256 hex digest under which a token is kept (config may hold only this)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def parse_tokens(text: str) -> dict[str, User]:
    """'alice:tok1,admin:sha256:HEX:admin' -> {sha256 of the token: User}.

    A token is given as itself or as `sha256:` and the hex digest of it (`voda token`
    prints both), so the config file need not hold the token."""
    tokens: dict[str, User] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        pieces = item.split(":")
        hashed = len(pieces) >= 3 and pieces[1] == "sha256"
        if hashed:
            user, digest, flags = pieces[0], pieces[2].lower(), pieces[3:]
            if not _HEX_DIGEST.match(digest):
                raise ConfigError(f"tokens: {user}: a sha256 digest is 64 hex digits")
        else:
            user, token, flags = pieces[0], pieces[1] if len(pieces) > 1 else "", pieces[2:]
            if len(pieces) < 2:
                raise ConfigError(f"tokens: expected 'user:token[:admin|viewer]', got {user!r} "
                                  f"without a token")
            if len(token) < MIN_TOKEN_LENGTH:  # the token itself is not repeated (logs)
                raise ConfigError(f"tokens: {user}: the token has {len(token)} characters; "
                                  f"at least {MIN_TOKEN_LENGTH} are required (`voda token` "
                                  f"prints a random one)")
            digest = hash_token(token)
        if not USER_RE.match(user):
            raise ConfigError(f"tokens: user names are letters, digits, '-', '_' and '.', "
                              f"got {user!r}")
        if len(flags) > 1 or (flags and flags[0] not in ROLES):
            raise ConfigError(f"tokens: {user}: the last part may only be one of "
                              f"{', '.join(ROLES)}, got {':'.join(flags)[:50]!r}")
        role = flags[0] if flags else ""
        tokens[digest] = User(user, admin=role == "admin", viewer=role == "viewer")
    return tokens


@dataclass(frozen=True, slots=True)
class UserLimits:
    """What a non-admin may ask for: the best priority (0 is the best) and queued jobs."""

    best_priority: int = 0
    max_queued_jobs: int = 1000
    queue: str = ""  # the queue of the user's jobs that name none ("": by namespace, default)


def default_db_url() -> str:
    import platformdirs

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
    # Where the jobs' pods reach the service (kubernetes.report_url; VODA_REPORT_URL).
    report_url: str = ""
    # The pod scheduler beside the Kubernetes backend: config.toml [pod_scheduler]
    # (voda.podsched.service).
    pod_scheduler_settings: Mapping[str, Any] = field(default_factory=dict)
    # sha256 of a token -> its user. None set: `voda serve` generates one (token_file).
    tokens: Mapping[str, User] = field(default_factory=dict)
    token_file: str = ""  # empty: `token` beside the config file
    # The report-token signing key (voda.api.token_file): given (replicas on several
    # machines share it), else kept in report_key_file (empty: `report-key` beside the
    # token file), never in the store.
    report_key: str = ""
    report_key_file: str = ""
    allowed_hosts: str = ""
    allowed_origins: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    shared_history: str = ""
    user_best_priority: int = 0
    user_max_queued_jobs: int = 1000
    users: Mapping[str, UserLimits] = field(default_factory=dict)
    local_user_jobs: bool = False
    algorithm_paths: str = ""
    db_max_bytes: int = 0
    auth_failures_per_minute: int = 10
    max_body_bytes: int = 1 << 20
    # Open dashboard event streams (/ui/stream/*): per user and in all (429 beyond).
    max_streams_per_user: int = 8
    max_streams: int = 256
    # Seconds to receive a request's head (from the connection's start or the previous
    # answer) and its body; open connections at most (voda.api.connections).
    header_timeout_seconds: float = 10.0
    body_timeout_seconds: float = 30.0
    max_connections: int = 1000
    max_connections_per_address: int = 256  # a trusted proxy's address is exempt
    # Proxies (IP addresses or CIDR networks, comma-separated) whose X-Forwarded-For and
    # X-Forwarded-Proto are believed; empty: those headers are ignored entirely.
    trusted_proxies: str = ""
    session_hours: float = 12.0  # how long a dashboard login lasts
    # The cluster's history (the dashboard's History page): a sample per GPU type every
    # this many seconds, kept (with the nodes' changes) this many days.
    history_sample_seconds: float = 60.0
    history_days: float = 8.0
    log_format: str = "text"  # LOG_FORMATS
    log_level: str = "info"  # LOG_LEVELS
    # Team queues (docs/design/013-queues.md): a YAML queue file, and config.toml's
    # [[queues]] tables (the same entries); administrators change them over the API.
    queue_file: str = ""
    queue_entries: tuple[Mapping[str, Any], ...] = ()

    def limits_of(self, user: str) -> UserLimits:
        return self.users.get(user) or UserLimits(self.user_best_priority,
                                                  self.user_max_queued_jobs)

    def history_owner(self, user: str) -> str:
        """Whose speed history a user's jobs read and feed: their own, or the shared one."""
        return "shared" if user in split_list(self.shared_history) else user


def split_list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


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
    "report_url": "VODA_REPORT_URL",
    "tokens": "VODA_TOKENS",
    "token_file": "VODA_TOKEN_FILE",
    "report_key": "VODA_REPORT_KEY",
    "report_key_file": "VODA_REPORT_KEY_FILE",
    "allowed_hosts": "VODA_ALLOWED_HOSTS",
    "allowed_origins": "VODA_ALLOWED_ORIGINS",
    "tls_cert": "VODA_TLS_CERT",
    "tls_key": "VODA_TLS_KEY",
    "db_max_bytes": "VODA_DB_MAX_BYTES",
    "local_user_jobs": "VODA_LOCAL_USER_JOBS",
    "max_body_bytes": "VODA_MAX_BODY_BYTES",
    "max_streams_per_user": "VODA_MAX_STREAMS_PER_USER",
    "max_streams": "VODA_MAX_STREAMS",
    "header_timeout_seconds": "VODA_HEADER_TIMEOUT",
    "body_timeout_seconds": "VODA_BODY_TIMEOUT",
    "max_connections": "VODA_MAX_CONNECTIONS",
    "max_connections_per_address": "VODA_MAX_CONNECTIONS_PER_ADDRESS",
    "trusted_proxies": "VODA_TRUSTED_PROXIES",
    "session_hours": "VODA_SESSION_HOURS",
    "history_sample_seconds": "VODA_HISTORY_SAMPLE_SECONDS",
    "history_days": "VODA_HISTORY_DAYS",
    "log_format": "VODA_LOG_FORMAT",
    "log_level": "VODA_LOG_LEVEL",
    "queue_file": "VODA_QUEUES",
}
_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off", ""}


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
    if name == "users":
        return _user_limits(value)
    if name == "queue_entries":
        if not isinstance(value, list):
            raise ConfigError(f"queues: expected [[queues]] tables, got {value!r}")
        return tuple(value)
    if kind is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text not in _TRUE | _FALSE:
            raise ConfigError(f"{name}: expected true or false, got {value!r}")
        return text in _TRUE
    if kind is int and (isinstance(value, (bool, float))):
        raise ConfigError(f"{name}: expected int, got {value!r}")
    try:
        return kind(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{name}: expected {kind.__name__}, got {value!r}") from exc


def _user_limits(value: Any) -> dict[str, UserLimits]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"users: expected tables [users.NAME], got {value!r}")
    limits: dict[str, UserLimits] = {}
    for user, table in value.items():
        if not isinstance(table, Mapping) or set(table) - {"best_priority", "max_queued_jobs",
                                                           "queue"}:
            raise ConfigError(f"users.{user}: expected best_priority, max_queued_jobs and "
                              f"queue")
        values = {k: v for k, v in table.items()}
        queue = values.get("queue", "")
        if not isinstance(queue, str) or len(queue) > 63:
            raise ConfigError(f"users.{user}.queue: expected a queue's name, got {queue!r}")
        for key, number in values.items():
            if key == "queue":
                continue
            if isinstance(number, bool) or not isinstance(number, int) or number < 0:
                raise ConfigError(f"users.{user}.{key}: expected a whole number >= 0, "
                                  f"got {number!r}")
        limits[str(user)] = UserLimits(**values)
    return limits


def load_server_settings(
    overrides: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    path: Path | None = None,
) -> ServerSettings:
    env = os.environ if env is None else env
    file = read_file(path or config_path(env))
    values: dict[str, Any] = dict(file.get("server", {}))
    if "placement" in file:
        values["placement_settings"] = file["placement"]
    if "users" in file:
        values["users"] = file["users"]
    if "kubernetes" in file:
        values["kubernetes_settings"] = file["kubernetes"]
    if "pod_scheduler" in file:
        values["pod_scheduler_settings"] = file["pod_scheduler"]
    if "queues" in file:
        values["queue_entries"] = file["queues"]
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
    for name in ("user_best_priority", "user_max_queued_jobs", "db_max_bytes",
                 "auth_failures_per_minute"):
        if coerced.get(name, 0) < 0:
            raise ConfigError(f"{name}: must not be negative, got {coerced[name]}")
    for name in ("max_body_bytes", "max_streams_per_user", "max_streams",
                 "header_timeout_seconds", "body_timeout_seconds", "max_connections",
                 "max_connections_per_address"):
        if name in coerced and not coerced[name] > 0:
            raise ConfigError(f"{name}: must be greater than 0, got {coerced[name]}")
    if bool(coerced.get("tls_cert")) != bool(coerced.get("tls_key")):
        raise ConfigError("tls_cert, tls_key: give both or neither")
    if "trusted_proxies" in coerced:
        coerced["trusted_proxies"] = ",".join(proxy_networks(coerced["trusted_proxies"]))
    for name, valid in (("log_format", LOG_FORMATS), ("log_level", LOG_LEVELS)):
        if name in coerced:
            coerced[name] = _choice(name, coerced[name], valid)
    hours = coerced.get("session_hours", settings.session_hours)
    if not 0 < hours <= 24 * 366:
        raise ConfigError(f"session_hours: expected hours > 0 (at most a year), got {hours}")
    every = coerced.get("history_sample_seconds", settings.history_sample_seconds)
    if not 0.1 <= every <= 3600:
        raise ConfigError(f"history_sample_seconds: expected 0.1 to 3600 seconds, got {every}")
    days = coerced.get("history_days", settings.history_days)
    if not 0 < days <= 366:
        raise ConfigError(f"history_days: expected days > 0 (at most a year), got {days}")
    return replace(settings, **coerced)


def _choice(name: str, value: str, valid: tuple[str, ...]) -> str:
    """One of `valid`, in any case; else a ConfigError naming the setting and the choices."""
    chosen = value.strip().lower()
    if chosen not in valid:
        raise ConfigError(f"{name}: expected one of {', '.join(valid)}, got {value[:100]!r}")
    return chosen


def proxy_networks(text: str) -> list[str]:
    """`trusted_proxies` checked: each an IP address or a CIDR network (normalised)."""
    import ipaddress

    networks = []
    for item in split_list(text):
        try:
            network = ipaddress.ip_network(item, strict=False)
        except ValueError:
            raise ConfigError(f"trusted_proxies: {item[:100]!r} is not an IP address or a "
                              f"CIDR network (e.g. 10.0.0.5, 10.0.0.0/8)") from None
        networks.append(str(network.network_address) if network.num_addresses == 1
                        else str(network))
    return networks

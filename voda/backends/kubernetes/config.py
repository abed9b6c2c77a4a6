"""KubernetesSettings from the service's settings: `--kubeconfig`, `--namespace`, and
config.toml's [kubernetes] table (elector timings under the same table)."""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any
from urllib.parse import urlsplit

from voda.backends.kubernetes.settings import ElectorSettings, KubernetesSettings

ELECTOR_KEYS = {"lease_name", "lease_seconds", "renew_deadline_seconds", "retry_seconds",
                "identity"}


def kubernetes_settings(server: Any) -> KubernetesSettings:
    """Raises ValueError naming the setting at fault."""
    table = dict(getattr(server, "kubernetes_settings", None) or {})
    base = KubernetesSettings()
    known = {f.name: f for f in fields(KubernetesSettings)} | {k: None for k in ELECTOR_KEYS}
    unknown = sorted(set(table) - set(known) - {"elector"})
    if unknown:
        raise ValueError(f"kubernetes.{unknown[0]}: unknown setting; known: "
                         f"{', '.join(sorted(set(known) - {'elector'}))}")
    elector = {k: table.pop(k) for k in list(table) if k in ELECTOR_KEYS}
    values: dict[str, Any] = {}
    for name, value in table.items():
        default = getattr(base, name)
        try:
            if isinstance(default, tuple):
                values[name] = tuple(str(v) for v in (
                    value.split(",") if isinstance(value, str) else value))
            else:
                values[name] = type(default)(value)
        except (TypeError, ValueError):
            raise ValueError(f"kubernetes.{name}: expected {type(default).__name__}, "
                             f"got {value!r}") from None
    if "horovod_blacklist_cooldown" in values:
        values["horovod_blacklist_cooldown"] = _cooldown(values["horovod_blacklist_cooldown"])
    if getattr(server, "kubeconfig", ""):
        values["kubeconfig"] = server.kubeconfig
    if getattr(server, "namespace", ""):
        values["namespace"] = server.namespace
    if getattr(server, "report_url", ""):
        values["report_url"] = server.report_url
    elector_settings = ElectorSettings()
    for name, value in elector.items():
        default = getattr(elector_settings, name)
        try:
            elector_settings = replace(elector_settings, **{name: type(default)(value)})
        except (TypeError, ValueError):
            raise ValueError(f"kubernetes.{name}: expected {type(default).__name__}, "
                             f"got {value!r}") from None
    problems = elector_settings.problems()
    if problems:
        raise ValueError(f"kubernetes.{problems[0]}")
    settings = replace(base, **values, elector=elector_settings)
    settings = _own_namespace(settings)
    if not settings.topology_labels:
        raise ValueError("kubernetes.topology_labels: at least the node level is needed")
    if settings.unschedulable_seconds <= 0:
        raise ValueError("kubernetes.unschedulable_seconds: must be positive")
    if not 0 < settings.refused_node_seconds <= 86_400:
        raise ValueError("kubernetes.refused_node_seconds: must lie in (0, 86400]")
    if settings.max_evictions < 0:
        raise ValueError("kubernetes.max_evictions: must not be negative")
    if not 1 <= settings.workers <= 64:
        raise ValueError("kubernetes.workers: must lie in [1, 64]")
    if settings.watch_idle_seconds < 2:
        raise ValueError("kubernetes.watch_idle_seconds: must be at least 2")
    if settings.sync_timeout_seconds <= 0:
        raise ValueError("kubernetes.sync_timeout_seconds: must be positive")
    if settings.list_page_size < 0:
        raise ValueError("kubernetes.list_page_size: must not be negative (0: no pages)")
    check_report_url(settings.report_url)
    if settings.liveness_seconds <= 0:
        raise ValueError("kubernetes.liveness_seconds: must be positive")
    if settings.report_secret_check_seconds <= 0:
        raise ValueError("kubernetes.report_secret_check_seconds: must be positive")
    if not 0 <= settings.mpijob_rescale_delay_seconds <= 3600:
        raise ValueError("kubernetes.mpijob_rescale_delay_seconds: must lie in [0, 3600]")
    return settings


def _cooldown(value: tuple[str, ...]) -> tuple[int, int]:
    """horovodrun's --blacklist-cooldown-range LOW HIGH, in seconds."""
    try:
        low, high = (int(v) for v in value)
    except ValueError:
        low = high = -1
    if not 0 < low <= high:
        raise ValueError("kubernetes.horovod_blacklist_cooldown: expected two whole seconds "
                         f"LOW,HIGH with 0 < LOW <= HIGH, got {','.join(value)!r}")
    return low, high


SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def pod_namespace(path: str = SERVICE_ACCOUNT_NAMESPACE) -> str:
    """The namespace of the pod this process runs in; empty outside a pod."""
    try:
        with open(path, encoding="utf-8") as file:
            return file.read().strip()
    except OSError:
        return ""


def _own_namespace(settings: KubernetesSettings, in_pod: str | None = None
                   ) -> KubernetesSettings:
    """Resolve voda_namespace and refuse to run the jobs beside Voda's Secrets. The pod's
    namespace counts only with the in-cluster configuration (no kubeconfig given): a
    kubeconfig may name another cluster."""
    if in_pod is None:
        in_pod = "" if settings.kubeconfig else pod_namespace()
    explicit = settings.voda_namespace
    own = explicit or in_pod or settings.namespace
    if (explicit or in_pod) and own == settings.namespace:
        raise ValueError(f"kubernetes.namespace: the jobs must run apart from Voda's own "
                         f"namespace {own!r} (its Secrets and ServiceAccounts); set "
                         "kubernetes.namespace (--namespace) to the jobs' namespace")
    return replace(settings, voda_namespace=own)


def check_report_url(url: str, name: str = "kubernetes.report_url") -> None:
    """Raises ValueError naming `name` unless `url` is empty or an http(s) URL with a host."""
    if url and not _is_http_url(url):
        raise ValueError(f"{name}: expected an http(s) URL with a host, got {url[:200]!r}")


def _is_http_url(text: str) -> bool:
    try:
        parts = urlsplit(text)
        return (parts.scheme in ("http", "https") and bool(parts.hostname)
                and len(text) <= 1000 and not any(c.isspace() for c in text)
                and (parts.port is None or parts.port > 0))
    except ValueError:  # a port that is no number or out of range
        return False

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
    if not settings.topology_labels:
        raise ValueError("kubernetes.topology_labels: at least the node level is needed")
    if settings.unschedulable_seconds <= 0:
        raise ValueError("kubernetes.unschedulable_seconds: must be positive")
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
    if settings.report_secret_check_seconds <= 0:
        raise ValueError("kubernetes.report_secret_check_seconds: must be positive")
    return settings


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

"""The pod scheduler beside the elastic backend in `voda serve --backend kubernetes`.

It runs in the leader only (the service starts once the Lease is held), writes
through the backend's fenced client, shares the backend's cluster view, and its
metrics are served at the service's /metrics. config.toml:

    [pod_scheduler]
    enabled = true                       # false: only the elastic backend runs
    scheduler_name = "voda-scheduler"    # pods with this schedulerName are Voda's
    config_map = "voda/voda-scheduler-config"   # default: <namespace>/voda-scheduler-config
    config_key = "config.yaml"
    config_file = ""                     # a SchedulerConfig file instead of a ConfigMap
    retry_seconds = 10.0                 # Pending pods are tried again at least this often
    event_repeat_seconds = 60.0          # the same Event on the same pod at most this often
    token_dir = ""                       # its own ServiceAccount's token and ca.crt (in a pod)
    kubeconfig = ""                      # or its own kubeconfig; neither: the backend's client
"""

from __future__ import annotations

import re
from dataclasses import fields, replace
from typing import Any

from voda.podsched.controller import PodScheduler, PodSchedulerSettings
from voda.podsched.metrics import PodSchedulerMetrics

CONFIG_MAP_NAME = "voda-scheduler-config"
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_OWN = ("scheduler_name", "config_map", "config_key", "config_file", "retry_seconds",
        "event_repeat_seconds", "token_dir", "kubeconfig")


def pod_scheduler_settings(server: Any, namespace: str | None = None
                           ) -> PodSchedulerSettings | None:
    """From config.toml [pod_scheduler]; None when disabled. ValueError names the setting.
    `namespace` (Voda's, where its ConfigMap lives) defaults to the Kubernetes backend's."""
    if namespace is None:
        from voda.backends.kubernetes.config import kubernetes_settings

        namespace = kubernetes_settings(server).voda_namespace
    table = dict(getattr(server, "pod_scheduler_settings", None) or {})
    known = ("enabled", *_OWN)
    unknown = sorted(set(table) - set(known))
    if unknown:
        raise ValueError(f"pod_scheduler.{unknown[0]}: unknown setting; known: "
                         f"{', '.join(known)}")
    enabled = table.pop("enabled", True)
    if not isinstance(enabled, bool):
        raise ValueError(f"pod_scheduler.enabled: expected true or false, got {enabled!r}")
    if not enabled:
        return None
    base = PodSchedulerSettings(config_map=f"{namespace}/{CONFIG_MAP_NAME}")
    kinds = {f.name: f.type for f in fields(PodSchedulerSettings)}
    values: dict[str, Any] = {}
    for name, value in table.items():
        if name in ("retry_seconds", "event_repeat_seconds"):
            if isinstance(value, bool) or not isinstance(value, int | float) or not (
                    0 < value <= 3600):
                raise ValueError(f"pod_scheduler.{name}: expected seconds in (0, 3600], "
                                 f"got {value!r}")
            values[name] = float(value)
        elif not isinstance(value, str):
            raise ValueError(f"pod_scheduler.{name}: expected a string ({kinds[name]}), "
                             f"got {value!r}")
        else:
            values[name] = value or None if name in ("config_map", "config_file",
                                                     "token_dir", "kubeconfig") else value
    settings = replace(base, **values)
    if not _NAME.match(settings.scheduler_name):
        raise ValueError("pod_scheduler.scheduler_name: must be a DNS subdomain name, got "
                         f"{settings.scheduler_name!r}")
    if settings.config_map is not None:
        ns, _, name = settings.config_map.partition("/")
        if not (_NAME.match(ns) and _NAME.match(name)):
            raise ValueError("pod_scheduler.config_map: expected namespace/name, got "
                             f"{settings.config_map!r}")
    if settings.config_file and settings.config_map and "config_map" not in table:
        settings = replace(settings, config_map=None)  # a file given: it is the source
    return settings


def start_beside(backend: Any, settings: PodSchedulerSettings, registry: Any = None
                 ) -> PodScheduler:
    """Start the pod scheduler on the backend's client and cluster view; its metrics join
    `registry` (the service's)."""
    metrics = PodSchedulerMetrics()
    api = backend.api
    if settings.token_dir or settings.kubeconfig:
        from voda.backends.kubernetes.api import KubeApi

        api = (KubeApi.connect_token_dir(settings.token_dir, timeout=api.timeout,
                                         fence=api.fence) if settings.token_dir else
               KubeApi.connect(settings.kubeconfig or "", timeout=api.timeout,
                               fence=api.fence))
    scheduler = PodScheduler(api, backend.view, settings, metrics)
    if registry is not None:
        registry.register(metrics.registry)
    return scheduler.start()

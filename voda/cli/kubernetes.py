"""Leadership for `voda serve --backend kubernetes`: the process waits as a standby
until it holds the Lease, acts only while it does, and exits when it loses it."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from voda.cli.serve_log import ServeLog

log = logging.getLogger(__name__)
EXIT_LOST = 1


def standby(settings: Any) -> Any:
    """The process's elector, its fence active (closed until it leads): a backend built
    now may watch the cluster while the process waits, and can write nothing. On losing
    the lease later the process is asked to stop (SIGTERM), and killed if it has not
    stopped within the renew deadline. Raises ValueError for bad settings."""
    from voda.backends.kubernetes.api import KubeApi
    from voda.backends.kubernetes.config import kubernetes_settings
    from voda.backends.kubernetes.elector import LeaseElector, activate

    k8s = kubernetes_settings(settings)
    api = KubeApi.connect(k8s.kubeconfig, timeout=k8s.elector.retry_seconds, attempts=1)

    def lost() -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        timer = threading.Timer(k8s.elector.renew_deadline_seconds,
                                lambda: os._exit(EXIT_LOST))
        timer.daemon = True
        timer.start()

    elector = LeaseElector(api, k8s.voda_namespace, k8s.elector, on_lost=lost)
    activate(elector)
    return elector


def lead(elector: Any, out: ServeLog) -> None:
    """Block until this process holds the lease, then keep renewing it."""
    lease = f"{elector.namespace}/{elector.settings.lease_name}"
    out.announce(f"voda serve: {elector.identity} is a standby until it holds the lease "
                 f"{lease}", event="standby", lease=lease)
    elector.acquire()
    elector.start_renewing()


def keep_signals() -> None:
    """Handle SIGTERM and SIGINT in Python, so that the signal uvicorn re-raises once it
    has shut down does not kill the process before the lease is released."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)


def step_down(elector: Any, backend: Any) -> int:
    """After the HTTP server stopped: stop acting, then hand the lease over. Returns the
    exit status: 1 when the lease was lost (fail closed), else 0."""
    close = getattr(backend, "close", None)
    if elector.lost:
        return EXIT_LOST
    elector.release()  # closes the fence first, so nothing is written after it
    if close is not None:
        close()
    return 0


def standby_health(settings: Any, backend: Any) -> Any:
    """Answer /healthz and /livez on the service's port while standing by."""
    from voda.backends.kubernetes.config import kubernetes_settings
    from voda.backends.kubernetes.leader_service import own_address
    from voda.cli.standby_health import StandbyHealth

    if kubernetes_settings(settings).leader_service:
        own_address()  # fail now, not once leading, when POD_IP is missing
    stalled = getattr(backend, "stalled", None)
    return StandbyHealth(settings.host, settings.port,
                         stalled if callable(stalled) else lambda: None,
                         settings.tls_cert or "", settings.tls_key or "").start()


def publish_leader(elector: Any, settings: Any) -> None:
    """As the new leader, route kubernetes.leader_service to this process (if set)."""
    from voda.backends.kubernetes.config import kubernetes_settings
    from voda.backends.kubernetes.leader_service import publish

    k8s = kubernetes_settings(settings)
    if not k8s.leader_service:
        return

    def keep_trying() -> None:  # until written, or no longer the leader
        while not elector.lost and not publish(elector.api, k8s.voda_namespace,
                                               k8s.leader_service, settings.port):
            time.sleep(k8s.elector.retry_seconds)

    threading.Thread(target=keep_trying, name="leader-service", daemon=True).start()


def withdraw_leader(elector: Any, settings: Any) -> None:
    """Stepping down while still the leader: take this process out of the Service."""
    from voda.backends.kubernetes.config import kubernetes_settings
    from voda.backends.kubernetes.leader_service import withdraw

    k8s = kubernetes_settings(settings)
    if k8s.leader_service and not elector.lost:
        withdraw(elector.api, k8s.voda_namespace, k8s.leader_service)

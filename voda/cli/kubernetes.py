"""Leadership for `voda serve --backend kubernetes`: the process waits as a standby
until it holds the Lease, acts only while it does, and exits when it loses it."""

from __future__ import annotations

import logging
import os
import signal
import threading
from typing import Any

log = logging.getLogger(__name__)
EXIT_LOST = 1


def lead(settings: Any) -> Any:
    """Block until this process holds the lease; return the running elector (its fence
    is active for the backend's writes). On losing the lease the process is asked to
    stop (SIGTERM), and killed if it has not stopped within the renew deadline."""
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

    elector = LeaseElector(api, k8s.namespace, k8s.elector, on_lost=lost)
    log.info("%s waits for the lease %s/%s", elector.identity, k8s.namespace,
             k8s.elector.lease_name)
    elector.acquire()
    elector.start_renewing()
    activate(elector)
    return elector

"""The leader's address in a selector-less Service's Endpoints (deploy/base/service.yaml).

Both replicas are Ready (a standby answers /healthz, so a rollout completes), so the
Service cannot pick the leader by readiness: the leader writes its own pod IP and port
into the Endpoints named after the Service (the EndpointSlice mirroring controller makes
the EndpointSlice kube-proxy reads), and withdraws it when it steps down. A leader that
dies without withdrawing leaves its address until the next leader overwrites it, within
a lease duration: the same gap as the lease itself. RBAC: `patch` of that one name."""

from __future__ import annotations

import logging
import os

from voda.backends.kubernetes.api import MERGE_PATCH, ApiError, Kind, KubeApi

log = logging.getLogger(__name__)
ENDPOINTS = Kind("", "v1", "endpoints")


def own_address() -> tuple[str, str]:
    """(POD_IP, POD_NAME) from the downward API; ValueError when POD_IP is missing."""
    ip = os.environ.get("POD_IP", "")
    if not ip:
        raise ValueError("kubernetes.leader_service: set, but POD_IP is not (give the "
                         "container env POD_IP from the downward API's status.podIP)")
    return ip, os.environ.get("POD_NAME", "")


def publish(api: KubeApi, namespace: str, service: str, port: int) -> bool:
    """Route `service` to this process alone. False (logged) when the write failed."""
    ip, pod = own_address()
    address: dict[str, object] = {"ip": ip}
    if pod:
        address["targetRef"] = {"kind": "Pod", "name": pod, "namespace": namespace}
    body = {"subsets": [{"addresses": [address],
                         "ports": [{"name": "http", "port": port, "protocol": "TCP"}]}]}
    try:
        api.patch(ENDPOINTS, namespace, service, body, MERGE_PATCH)
    except ApiError as exc:
        log.error("leader: cannot route Service %s/%s to %s:%d: %s", namespace, service, ip,
                  port, exc)
        return False
    return True


def withdraw(api: KubeApi, namespace: str, service: str) -> bool:
    """Leave `service` without an address (the next leader writes its own)."""
    try:
        api.patch(ENDPOINTS, namespace, service, {"subsets": None}, MERGE_PATCH)
    except ApiError as exc:
        log.warning("leader: cannot withdraw Service %s/%s: %s", namespace, service, exc)
        return False
    return True

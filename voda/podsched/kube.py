"""The Kubernetes calls of the pod scheduler, on the Kubernetes backend's client.

`voda.backends.kubernetes.api.KubeApi` does the transport, the retries of
transient failures and the leader fence; this module names the few objects the
pod scheduler reads and writes: Bindings, Events, pods it evicts from NotReady
nodes, and the owners whose annotations carry hints.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from voda.backends.kubernetes.api import (
    MERGE_PATCH,
    PODS,
    STRATEGIC_PATCH,
    ApiError,
    Kind,
    KubeApi,
)
from voda.podsched.model import Pod

Obj = dict[str, Any]
CONFIGMAPS = Kind("", "v1", "configmaps")
OWNER_KINDS: Mapping[str, Kind] = {
    "Job": Kind("batch", "v1", "jobs"),
    "ReplicaSet": Kind("apps", "v1", "replicasets"),
    "Deployment": Kind("apps", "v1", "deployments"),
    "StatefulSet": Kind("apps", "v1", "statefulsets"),
}
EVENTS = Kind("", "v1", "events")
CLAIMS = Kind("", "v1", "persistentvolumeclaims")
VOLUMES = Kind("", "v1", "persistentvolumes", namespaced=False)
STORAGE_CLASSES = Kind("storage.k8s.io", "v1", "storageclasses", namespaced=False)
PDBS = Kind("policy", "v1", "poddisruptionbudgets")
SELECTED_NODE = "volume.kubernetes.io/selected-node"


def bind(api: KubeApi, pod: Pod, node: str) -> None:
    """POST pods/binding; the uid makes sure it is still the pod that was placed."""
    body = {"apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": pod.name, "namespace": pod.namespace,
                         **({"uid": pod.uid} if pod.uid else {})},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
    api.request("POST", PODS.path(pod.namespace, pod.name, "binding"), body=body)


def set_unschedulable(api: KubeApi, pod: Pod, message: str, since: str | None) -> None:
    """PodScheduled=False, reason Unschedulable, on pods/status, as kube-scheduler writes it
    (cluster autoscalers look for it). The uid in the patch makes a server refuse it for
    another pod of the same name. `since`: a new lastTransitionTime (None: the status
    did not change, the time stays)."""
    condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": message, **({"lastTransitionTime": since} if since else {})}
    body = {"metadata": {"uid": pod.uid}, "status": {"conditions": [condition]}}
    api.patch(PODS, pod.namespace, pod.name, body, STRATEGIC_PATCH, sub="status")


def nominate(api: KubeApi, pod: Pod, node: str) -> None:
    """status.nominatedNodeName: the node where room is being made for the pod."""
    body = {"metadata": {"uid": pod.uid}, "status": {"nominatedNodeName": node}}
    api.patch(PODS, pod.namespace, pod.name, body, STRATEGIC_PATCH, sub="status")


def select_node(api: KubeApi, namespace: str, claim: str, node: str) -> None:
    """Annotate an unbound WaitForFirstConsumer claim with the node its pod goes to, as
    kube-scheduler does before binding the pod: its provisioner provisions it there."""
    body = {"metadata": {"annotations": {SELECTED_NODE: node}}}
    api.patch(CLAIMS, namespace, claim, body, MERGE_PATCH)


def create_event(api: KubeApi, namespace: str, body: Obj) -> None:
    api.create(EVENTS, namespace, body)


def delete_pod(api: KubeApi, pod: Pod) -> None:
    """Delete with the pod's own grace period, only if it is still the same pod."""
    api.delete(PODS, pod.namespace, pod.name, propagation=None, uid=pod.uid or None)


def get_owner(api: KubeApi, kind: str, namespace: str, name: str) -> Obj | None:
    """A Job, ReplicaSet, Deployment or StatefulSet; None when it is gone."""
    return api.try_get(OWNER_KINDS[kind], namespace, name)


__all__ = ["ApiError", "bind", "create_event", "delete_pod", "get_owner", "nominate", "select_node",
           "set_unschedulable"]

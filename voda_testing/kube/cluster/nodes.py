"""Node and pod helpers shared by the simulated controllers."""

from __future__ import annotations

from typing import Any

from voda_testing.kube.store import TERMINAL_PHASES

GPU = "nvidia.com/gpu"
HOSTNAME = "kubernetes.io/hostname"

Obj = dict[str, Any]


def quantity(value: Any) -> int:
    text = str(value or "0")
    if text.endswith("k"):
        return int(float(text[:-1]) * 1000)
    return int(float(text))


def pod_gpus(pod: Obj) -> int:
    total = 0
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        value = (resources.get("limits") or {}).get(GPU, (resources.get("requests") or {}).get(
            GPU, 0))
        total += quantity(value)
    return total


def holds_resources(pod: Obj) -> bool:
    """A bound pod holds its node's resources until it ends or is gone (terminating
    pods still hold them)."""
    return bool((pod.get("spec") or {}).get("nodeName")) and (
        (pod.get("status") or {}).get("phase") not in TERMINAL_PHASES)


def node_gpus(node: Obj) -> int:
    return quantity(((node.get("status") or {}).get("allocatable") or {}).get(GPU, 0))


def node_ready(node: Obj) -> bool:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


def make_node(name: str, gpus: int, labels: dict[str, str] | None = None,
              taints: list[Obj] | None = None, resources: dict[str, str] | None = None) -> Obj:
    """A Ready node; `resources` overrides its allocatable cpu, memory, pods and others."""
    capacity = {GPU: str(gpus), "cpu": "64", "memory": "512Gi", "pods": "110",
                **(resources or {})}
    node: Obj = {
        "metadata": {"name": name, "labels": {HOSTNAME: name, **(labels or {})}},
        "spec": {},
        "status": {"capacity": dict(capacity), "allocatable": dict(capacity),
                   "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                   "addresses": [{"type": "InternalIP", "address": "10.0.0.1"},
                                 {"type": "Hostname", "address": name}]},
    }
    if taints:
        node["spec"]["taints"] = taints
    return node

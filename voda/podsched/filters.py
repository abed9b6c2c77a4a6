"""Which nodes may take a pod, and how many such pods each still holds.

The filters a scheduler needs on a node it shares with others, with the
semantics of kube-scheduler's plugins of the same purpose: the node is Ready
and not cordoned (a pod tolerating `node.kubernetes.io/unschedulable` may still
go to a cordoned node), every NoSchedule/NoExecute taint is tolerated, the
nodeSelector matches, one term of the required node affinity matches, and the
pod's requests fit what bound pods (of any scheduler) leave free. Reasons are
counted the way kube-scheduler words them ("0/12 nodes are available: ...").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Protocol

from voda.podsched.model import PODS, NodeState, Pod, PodTerm, Requirement, SelectorTerm, Taint

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
NOT_READY = "node(s) were not ready"
CORDONED = "node(s) were unschedulable"
SELECTOR = "node(s) didn't match Pod's node affinity/selector"
TOO_MANY_PODS = "Too many pods"
PORTS = "node(s) didn't have free ports for the requested pod ports"
ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"
USE_DEFAULT = "use the default scheduler for such pods (leave out schedulerName)"


class FreeResources(Protocol):
    """What is left of a node's resources (a Snapshot, or a cycle's working copy)."""

    def free(self, node: NodeState, resource: str) -> int: ...


def tolerates(pod: Pod, taint: Taint) -> bool:
    for t in pod.tolerations:
        if t.effect and t.effect != taint.effect:
            continue
        if t.operator == "Exists":
            if not t.key or t.key == taint.key:
                return True
        elif t.key == taint.key and t.value == taint.value:
            return True
    return False


def untolerated_taint(pod: Pod, node: NodeState) -> Taint | None:
    """The first NoSchedule or NoExecute taint of the node the pod does not tolerate."""
    for taint in node.taints:
        if taint.effect in ("NoSchedule", "NoExecute") and not tolerates(pod, taint):
            return taint
    return None


def _requirement_holds(req: Requirement, value: str | None) -> bool:
    op = req.operator
    if op == "In":
        return value is not None and value in req.values
    if op == "NotIn":
        return value is None or value not in req.values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt"):
        if value is None or len(req.values) != 1:
            return False
        try:
            have, bound = int(value), int(req.values[0])
        except ValueError:
            return False
        return have > bound if op == "Gt" else have < bound
    return False


def term_matches(term: SelectorTerm, node: NodeState) -> bool:
    """All requirements of the term hold; an empty term matches no node (as in Kubernetes)."""
    if not term.expressions and not term.fields:
        return False
    fields = {"metadata.name": node.name}
    return all(_requirement_holds(r, node.labels.get(r.key)) for r in term.expressions) and all(
        _requirement_holds(r, fields.get(r.key)) for r in term.fields
    )


def matches_node(pod: Pod, node: NodeState) -> bool:
    """nodeSelector and required node affinity."""
    labels = node.labels
    if any(labels.get(k) != v for k, v in pod.node_selector.items()):
        return False
    return pod.affinity is None or any(term_matches(t, node) for t in pod.affinity)


def static_problem(pod: Pod, node: NodeState) -> str | None:
    """Why the node can never take the pod as things stand (None: it can, room permitting)."""
    if not node.ready:
        return NOT_READY
    if node.unschedulable and not tolerates(pod, Taint(UNSCHEDULABLE_TAINT, "", "NoSchedule")):
        return CORDONED
    taint = untolerated_taint(pod, node)
    if taint is not None:
        shown = f"{taint.key}: {taint.value}" if taint.value else taint.key
        return f"node(s) had untolerated taint {{{shown}}}"
    if not matches_node(pod, node):
        return SELECTOR
    for volume in pod.volume_topology:  # a zonal or local volume; where a class provisions
        if not any(term_matches(t, node) for t in volume.terms):
            return volume.reason
    return None


def selects(term: PodTerm, pod: Pod) -> bool:
    return pod.namespace in term.namespaces and all(
        _requirement_holds(r, pod.labels.get(r.key)) for r in term.selector)


def ports_conflict(wanted: Iterable[tuple[str, str, int]],
                   used: Iterable[tuple[str, str, int]]) -> bool:
    """Host ports clash on the same protocol and port when either IP is 0.0.0.0 or both
    are the same (kube-scheduler's NodePorts)."""
    taken = list(used)
    return any(port == p and protocol == q and (ip == i or "0.0.0.0" in (ip, i))
               for ip, protocol, port in wanted for i, q, p in taken)


def neighbour_problem(pods: Iterable[Pod], neighbours: Iterable[Pod]) -> str | None:
    """Why pods like these cannot join the pods on a node: host ports, their required
    anti-affinity by hostname, or the neighbours' own."""
    group = list(pods)
    for other in neighbours:
        for pod in group:
            if pod.host_ports and ports_conflict(pod.host_ports, other.host_ports):
                return PORTS
            if any(selects(t, other) for t in pod.anti_affinity):
                return ANTI_AFFINITY
            if any(selects(t, pod) for t in other.anti_affinity):
                return EXISTING_ANTI_AFFINITY
    return None


def one_per_node(pods: Iterable[Pod]) -> bool:
    """Pods of one template that cannot share a node with each other: host ports, or an
    anti-affinity that selects themselves."""
    group = list(pods)
    return any(p.host_ports or any(selects(t, q) for t in p.anti_affinity for q in group)
               for p in group)


def shape(pods: Iterable[Pod]) -> dict[str, int]:
    """What one pod of a group needs of a node: the largest request per resource, one pod slot.

    Pods of one workload normally share a template; when they differ (a
    rollout), each counts as the largest, which never over-commits a node.
    """
    need: dict[str, int] = {PODS: 1}
    for pod in pods:
        for resource, amount in pod.requests.items():
            if amount > 0 and resource != PODS:
                need[resource] = max(need.get(resource, 0), amount)
    return need


def room(node: NodeState, left: FreeResources, need: Mapping[str, int]) -> int:
    """How many pods of shape `need` the node still holds."""
    most = None
    for resource, amount in need.items():
        fits = max(0, left.free(node, resource)) // amount
        if most is None or fits < most:
            most = fits
    return most or 0


def capacity(node: NodeState, need: Mapping[str, int]) -> int:
    """How many pods of shape `need` the empty node would hold."""
    most = None
    allocatable = node.allocatable
    for resource, amount in need.items():
        fits = max(0, allocatable.get(resource, 0)) // amount
        if most is None or fits < most:
            most = fits
    return most or 0


def short_resources(node: NodeState, left: FreeResources, need: Mapping[str, int]
                    ) -> list[str]:
    """The resources of which the node has less free than one pod needs, as reasons."""
    out = []
    for resource, amount in sorted(need.items()):
        if left.free(node, resource) < amount:
            out.append(TOO_MANY_PODS if resource == PODS else f"Insufficient {resource}")
    return out


def counted(reasons: Counter[str]) -> str:
    """'4 Insufficient nvidia.com/gpu, 2 node(s) were not ready': most first."""
    return ", ".join(f"{count} {reason}" for reason, count in
                     sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])))


def summary(total: int, reasons: Counter[str], available: int = 0) -> str:
    """'0/12 nodes are available: 4 Insufficient nvidia.com/gpu, 2 node(s) were not ready.'"""
    if not reasons:
        return f"{available}/{total} nodes are available."
    return f"{available}/{total} nodes are available: {counted(reasons)}."


def fit_error(total: int, why: str) -> str:
    """kube-scheduler's message for a pod it cannot place ('0/12 nodes are available: ...'),
    which cluster autoscalers and people read from the pod's PodScheduled condition."""
    if why.startswith(f"0/{total} nodes are available"):
        return why
    return f"0/{total} nodes are available: {why.rstrip('.')}."

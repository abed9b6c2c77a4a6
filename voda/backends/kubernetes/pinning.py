"""Worker index -> node plans, and what to do with a worker pod.

The operators name workers by index (`<job>-worker-<i>`) and delete the highest
indices on scale-down, so a placement (node, workers) becomes a plan for indices
0..n-1. Workers keep their node whenever the new placement still has room there,
lowest indices first (index 0 is PyTorchJob's rendezvous endpoint); only the
others move. A plan is kept as a JSON annotation on the job object, so any
leader can rebuild it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from voda.backends.kubernetes.settings import GATE, HOSTNAME
from voda.core.model import JobPlacement

Plan = dict[int, str]  # worker index -> node


def assign(old: Mapping[int, str], placement: JobPlacement) -> Plan:
    """The plan for `placement` that moves the fewest surviving workers of `old`."""
    room = {}
    for node, count in placement:
        room[node] = room.get(node, 0) + count
    size = sum(room.values())
    plan: Plan = {}
    for index in range(size):
        node = old.get(index)
        if node is not None and room.get(node, 0) > 0:
            plan[index] = node
            room[node] -= 1
    spare = [node for node, _ in placement for _ in range(room.get(node, 0))]
    for node, _ in placement:
        room[node] = 0
    free_indices = [i for i in range(size) if i not in plan]
    for index, node in zip(free_indices, spare, strict=True):
        plan[index] = node
    return dict(sorted(plan.items()))


def placement_of(plan: Mapping[int, str]) -> JobPlacement:
    """(node, workers) pairs of a plan, nodes in order of their lowest index."""
    counts: dict[str, int] = {}
    for _, node in sorted(plan.items()):
        counts[node] = counts.get(node, 0) + 1
    return tuple(counts.items())


def moved(old: Mapping[int, str], new: Mapping[int, str]) -> int:
    """Surviving workers whose node changes."""
    return sum(1 for i, node in new.items() if i in old and old[i] != node)


def encode(plan: Mapping[int, str]) -> str:
    return json.dumps({str(i): node for i, node in sorted(plan.items())},
                      separators=(",", ":"))


def decode(text: str | None) -> Plan:
    """A plan from its annotation; anything malformed is an empty plan."""
    if not text:
        return {}
    try:
        raw = json.loads(text)
        return {int(i): str(node) for i, node in raw.items() if int(i) >= 0 and node}
    except (ValueError, TypeError, AttributeError):
        return {}


class WorkerAction(StrEnum):
    NONE = "none"
    PIN = "pin"  # gated: add the nodeSelector and remove the gate
    WAIT = "wait"  # gated, but the node has no room yet
    MOVE = "move"  # on (or pinned to) another node: delete the pod, the operator recreates it
    # pinned, but kube-scheduler refused it for too long: the node is excluded for the job
    # and the engine plans again (the pod is left as it is: never deleted to try again)
    REFUSED = "refused"


def gated(pod: Mapping[str, Any]) -> bool:
    return any(g.get("name") == GATE for g in (pod.get("spec") or {}).get("schedulingGates")
               or ())


def pinned_node(pod: Mapping[str, Any]) -> str | None:
    spec = pod.get("spec") or {}
    return spec.get("nodeName") or (spec.get("nodeSelector") or {}).get(HOSTNAME)


def decide_worker(pod: Mapping[str, Any], target: str | None, room: bool,
                  unschedulable_for: float, patience: float) -> WorkerAction:
    """What a worker pod needs so that it runs on `target` (pure; the backend acts)."""
    if target is None or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return WorkerAction.NONE
    if gated(pod):
        return WorkerAction.PIN if room else WorkerAction.WAIT
    node = pinned_node(pod)
    if node is not None and node != target:
        return WorkerAction.MOVE
    if not (pod.get("spec") or {}).get("nodeName") and unschedulable_for >= patience:
        return WorkerAction.REFUSED
    return WorkerAction.NONE


def pin_patch(pod: Mapping[str, Any], node: str) -> dict[str, Any]:
    """One merge patch that pins and ungates, conditional on the pod's resourceVersion
    (a real server accepts the nodeSelector only while the pod is gated)."""
    spec = pod.get("spec") or {}
    others = [g for g in spec.get("schedulingGates") or () if g.get("name") != GATE]
    return {"metadata": {"resourceVersion": pod["metadata"]["resourceVersion"]},
            "spec": {"nodeSelector": {**(spec.get("nodeSelector") or {}), HOSTNAME: node},
                     "schedulingGates": others or None}}

"""Preemption, as kube-scheduler's DefaultPreemption does it, for one pod at a time.

A pod that fits nowhere, whose priority class lets it preempt (`preemptionPolicy`
is not `Never`), may evict lower-priority pods of this scheduler from one node:

- candidates are the nodes that pass the pod's filters (voda.podsched.filters), on
  which removing every bound pod of lower priority makes room for it;
- on each, victims are reprieved highest priority first while the pod still fits,
  so only the pods that must go go;
- the node chosen has the lowest highest-victim priority, then the smallest sum of
  victim priorities, then the fewest victims, then the name.

A pod that already preempted (it has `nominatedNodeName`) and whose victims are still
terminating on that node preempts no more: it waits for them. No I/O: the controller
sets `status.nominatedNodeName`, deletes the victims gracefully and binds the pod
once they are gone. PodDisruptionBudgets are not consulted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from voda.podsched import filters
from voda.podsched.decide import natural_key
from voda.podsched.model import PODS, NodeState, Pod


@dataclass(frozen=True, slots=True)
class Preemption:
    pod: Pod
    node: str
    victims: tuple[Pod, ...]


def eligible(pod: Pod, terminating: Mapping[str, Sequence[Pod]]) -> bool:
    """Whether the pod may preempt now (`terminating`: pods being deleted, per node)."""
    # A nominated pod whose victims are on their way out waits for them.
    return pod.preempts and not (pod.nominated and any(
        p.priority < pod.priority for p in terminating.get(pod.nominated, ())))


def find(pod: Pod, nodes: Sequence[NodeState], free: filters.FreeResources,
         running: Mapping[str, Sequence[Pod]],
         neighbours: Mapping[str, Sequence[Pod]] | None = None) -> Preemption | None:
    """The node and victims to make room for the pod, or None (`running`: the bound pods
    of this scheduler that may be preempted, per node, not being deleted; `neighbours`:
    the pods on each node its host ports and anti-affinity are checked against, which
    must not clash once the victims are gone)."""
    need = filters.shape([pod])
    best: tuple[tuple, Preemption] | None = None
    for node in nodes:
        if filters.static_problem(pod, node) is not None:
            continue
        lower = [p for p in running.get(node.name, ()) if p.priority < pod.priority]
        if not lower or not _fits(node, free, need, lower):
            continue
        victims = list(lower)
        for candidate in sorted(lower, key=lambda p: (-p.priority, p.created, p.key)):
            rest = [v for v in victims if v is not candidate]
            if _fits(node, free, need, rest):
                victims = rest
        if not victims:
            continue  # it fits without preempting: what keeps it out is not room
        staying = [p for p in (neighbours or {}).get(node.name, ()) if p not in victims]
        if filters.neighbour_problem([pod], staying) is not None:
            continue
        key = (max(v.priority for v in victims), sum(v.priority for v in victims),
               len(victims), natural_key(node.name))
        if best is None or key < best[0]:
            best = (key, Preemption(pod, node.name, tuple(victims)))
    return best[1] if best else None


def _fits(node: NodeState, free: filters.FreeResources, need: Mapping[str, int],
          victims: Sequence[Pod]) -> bool:
    for resource, amount in need.items():
        freed = len(victims) if resource == PODS else sum(
            v.requests.get(resource, 0) for v in victims)
        if free.free(node, resource) + freed < amount:
            return False
    return True

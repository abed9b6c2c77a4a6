"""Preemption, as kube-scheduler's DefaultPreemption does it, for one pod at a time.

A pod that fits nowhere, whose priority class lets it preempt (`preemptionPolicy`
is not `Never`), may evict lower-priority pods of this scheduler from one node:

- candidates are the nodes that pass the pod's filters (voda.podsched.filters), on
  which removing every bound pod of lower priority makes room for it;
- on each, the potential victims (most important first: highest priority, then
  oldest) are split by their PodDisruptionBudgets: each budget in a victim's namespace
  whose selector matches its labels gives up one of its `disruptionsAllowed`, and a
  victim that takes any budget below zero violates it (kube-scheduler's
  filterPodsWithPDBViolation: a budget with an empty or no selector, or one that cannot
  be parsed, matches nothing; a pod without labels matches none; a pod already in a
  budget's `disruptedPods` takes nothing from it);
- victims are reprieved while the pod still fits: the violating ones first, then the
  others, each most important first, so only the pods that must go go, and those that
  would break a budget go last;
- the node chosen has the fewest victims that violate a budget, then the lowest
  highest-victim priority, then the smallest sum of victim priorities, then the fewest
  victims, then the name. With no other choice a budget is violated, as upstream.

A pod that already preempted (it has `nominatedNodeName`) and whose victims are still
terminating on that node preempts no more: it waits for them. No I/O: the controller
sets `status.nominatedNodeName`, deletes the victims gracefully and binds the pod
once they are gone; like kube-scheduler it deletes them, it does not go through the
Eviction API.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from voda.podsched import filters
from voda.podsched.decide import natural_key
from voda.podsched.model import PODS, NodeState, Pod, PodTerm, Requirement


@dataclass(frozen=True, slots=True)
class Preemption:
    pod: Pod
    node: str
    victims: tuple[Pod, ...]
    violating: int = 0  # victims that break a PodDisruptionBudget


@dataclass(frozen=True, slots=True)
class Budget:
    """A PodDisruptionBudget as preemption weighs it: `selector` None matches no pod (no
    selector, an empty one or one that cannot be parsed); `allowed` is its
    `status.disruptionsAllowed`; `disrupted` the pods in its `status.disruptedPods`,
    already counted by the API server."""

    namespace: str
    name: str
    selector: tuple[Requirement, ...] | None
    allowed: int
    disrupted: frozenset[str] = field(default_factory=frozenset)

    def covers(self, pod: Pod) -> bool:
        """Whether it counts the pod's disruption."""
        return (self.selector is not None and bool(pod.labels)
                and pod.name not in self.disrupted
                and filters.selects(PodTerm(self.selector, frozenset({self.namespace})), pod))


def eligible(pod: Pod, terminating: Mapping[str, Sequence[Pod]]) -> bool:
    """Whether the pod may preempt now (`terminating`: pods being deleted, per node)."""
    # A nominated pod whose victims are on their way out waits for them.
    return pod.preempts and not (pod.nominated and any(
        p.priority < pod.priority for p in terminating.get(pod.nominated, ())))


def find(pod: Pod, nodes: Sequence[NodeState], free: filters.FreeResources,
         running: Mapping[str, Sequence[Pod]],
         neighbours: Mapping[str, Sequence[Pod]] | None = None,
         budgets: Sequence[Budget] = ()) -> Preemption | None:
    """The node and victims to make room for the pod, or None (`running`: the bound pods
    of this scheduler that may be preempted, per node, not being deleted; `neighbours`:
    the pods on each node its host ports and anti-affinity are checked against, which
    must not clash once the victims are gone; `budgets`: the cluster's
    PodDisruptionBudgets)."""
    need = filters.shape([pod])
    best: tuple[tuple, Preemption] | None = None
    for node in nodes:
        if filters.static_problem(pod, node) is not None:
            continue
        lower = [p for p in running.get(node.name, ()) if p.priority < pod.priority]
        if not lower or not _fits(node, free, need, lower):
            continue
        violating, other = split_by_budgets(
            sorted(lower, key=lambda p: (-p.priority, p.created, p.key)), budgets)
        victims = list(lower)
        for candidate in (*violating, *other):
            rest = [v for v in victims if v is not candidate]
            if _fits(node, free, need, rest):
                victims = rest
        if not victims:
            continue  # it fits without preempting: what keeps it out is not room
        staying = [p for p in (neighbours or {}).get(node.name, ()) if p not in victims]
        if filters.neighbour_problem([pod], staying) is not None:
            continue
        broken = sum(1 for v in violating if v in victims)
        key = (broken, max(v.priority for v in victims), sum(v.priority for v in victims),
               len(victims), natural_key(node.name))
        if best is None or key < best[0]:
            best = (key, Preemption(pod, node.name, tuple(victims), broken))
    return best[1] if best else None


def split_by_budgets(victims: Sequence[Pod], budgets: Sequence[Budget]
                     ) -> tuple[list[Pod], list[Pod]]:
    """(violating, not violating), each in the order given (kube-scheduler's
    filterPodsWithPDBViolation): in that order each victim takes one disruption from
    every budget that covers it; one that takes a budget below zero violates it."""
    left = [b.allowed for b in budgets]
    violating: list[Pod] = []
    other: list[Pod] = []
    for victim in victims:
        broke = False
        for i, budget in enumerate(budgets):
            if budget.namespace == victim.namespace and budget.covers(victim):
                left[i] -= 1
                broke = broke or left[i] < 0
        (violating if broke else other).append(victim)
    return violating, other


def spend(budgets: Sequence[Budget], victims: Sequence[Pod]) -> list[Budget]:
    """The budgets with the victims' disruptions taken: what the next preemptor of the same
    cycle sees before the disruption controller counts the victims gone."""
    return [replace(b, allowed=b.allowed - sum(
        1 for v in victims if v.namespace == b.namespace and b.covers(v))) for b in budgets]


def _fits(node: NodeState, free: filters.FreeResources, need: Mapping[str, int],
          victims: Sequence[Pod]) -> bool:
    for resource, amount in need.items():
        freed = len(victims) if resource == PODS else sum(
            v.requests.get(resource, 0) for v in victims)
        if free.free(node, resource) + freed < amount:
            return False
    return True

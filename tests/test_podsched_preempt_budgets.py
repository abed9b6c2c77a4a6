"""Preemption weighs PodDisruptionBudgets as kube-scheduler's DefaultPreemption does
(voda.podsched.preempt): victims that would break a budget are reprieved first, and the
node needing the fewest such victims is chosen first; with no other choice a budget is
broken. Table tests on `preempt.find`, the budgets read from policy/v1 objects."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.pod_builders import make_nodes, make_pod, snapshot_of
from voda.podsched import preempt, read
from voda.podsched.model import Pod

N0, N1 = "s0-l0-n0", "s0-l0-n1"  # make_nodes().nodes(2): 8 GPUs each


def pod(name: str, node: str, gpus: int, priority: int, namespace: str = "default",
        **labels: str) -> Pod:
    return make_pod(name, namespace).gpus(gpus).on(node).with_(
        priority=priority, labels=labels).obj()


def pdb(name: str, allowed: int, selector: Any, namespace: str = "default",
        disrupted: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"selector": selector, "minAvailable": 1},
            "status": {"disruptionsAllowed": allowed,
                       "disruptedPods": {n: "2026-01-01T00:00:00Z" for n in disrupted}}}


DB = {"matchLabels": {"app": "db"}}


@dataclass
class Case:
    id: str
    running: list[Pod]
    budgets: list[dict[str, Any]]
    gpus: int  # the preemptor's (priority 100)
    node: str | None  # where it preempts (None: nowhere)
    victims: list[str] = field(default_factory=list)
    violating: int = 0
    without_budgets: tuple[str, list[str]] | None = None  # what it did before


CASES = [
    Case("a victim protected by a PDB is reprieved when another victim frees enough",
         [pod("db", N0, 4, 5, app="db"), pod("web", N0, 4, 10)], [pdb("db", 0, DB)],
         gpus=4, node=N0, victims=["web"], without_budgets=(N0, ["db"])),
    Case("the node needing no PDB violation is chosen over one with lower priorities",
         [pod("db", N0, 8, 5, app="db"), pod("web", N1, 8, 20)], [pdb("db", 0, DB)],
         gpus=8, node=N1, victims=["web"], without_budgets=(N0, ["db"])),
    Case("with no choice, the PDB is violated as upstream does",
         [pod("db", N0, 8, 5, app="db"), pod("db2", N1, 8, 6, app="db")],
         [pdb("db", 0, DB)], gpus=8, node=N0, victims=["db"], violating=1),
    Case("the node with fewer PDB violations is chosen when every node has some",
         [pod("db1", N0, 4, 5, app="db"), pod("db2", N0, 4, 6, app="db"),
          pod("db3", N1, 8, 50, app="db")], [pdb("db", 0, DB)],
         gpus=8, node=N1, victims=["db3"], violating=1, without_budgets=(N0, ["db1", "db2"])),
    Case("a budget's one allowed disruption goes to the more important victim, the less "
         "important one is kept",
         [pod("db-old", N0, 4, 6, app="db"), pod("db-new", N0, 4, 5, app="db")],
         [pdb("db", 1, DB)], gpus=4, node=N0, victims=["db-old"],
         without_budgets=(N0, ["db-new"])),
    Case("a budget that allows the disruptions protects no one",
         [pod("db", N0, 4, 5, app="db"), pod("web", N0, 4, 10)], [pdb("db", 1, DB)],
         gpus=4, node=N0, victims=["db"]),
    Case("a budget with an empty selector matches nothing, as in kube-scheduler's preemption",
         [pod("db", N0, 4, 5, app="db"), pod("web", N0, 4, 10)], [pdb("all", 0, {})],
         gpus=4, node=N0, victims=["db"]),
    Case("a budget with no selector matches nothing",
         [pod("db", N0, 4, 5, app="db"), pod("web", N0, 4, 10)], [pdb("none", 0, None)],
         gpus=4, node=N0, victims=["db"]),
    Case("a budget in another namespace protects no one here",
         [pod("db", N0, 4, 5, app="db"), pod("web", N0, 4, 10)],
         [pdb("db", 0, DB, namespace="other")], gpus=4, node=N0, victims=["db"]),
    Case("a pod without labels is covered by no budget, not even a NotIn selector",
         [pod("bare", N0, 4, 5), pod("web", N0, 4, 10, app="web")],
         [pdb("not-web", 0, {"matchExpressions": [
             {"key": "app", "operator": "NotIn", "values": ["web"]}]})],
         gpus=4, node=N0, victims=["bare"]),
    Case("matchExpressions select the protected pods",
         [pod("db", N0, 4, 5, tier="data"), pod("web", N0, 4, 10, tier="front")],
         [pdb("data", 0, {"matchExpressions": [
             {"key": "tier", "operator": "In", "values": ["data", "cache"]}]})],
         gpus=4, node=N0, victims=["web"]),
    Case("a selector kube-scheduler cannot parse matches nothing",
         [pod("db", N0, 4, 5, app="db"), pod("web", N0, 4, 10)],
         [pdb("bad", 0, {"matchExpressions": [{"key": "app", "operator": "In"}]})],
         gpus=4, node=N0, victims=["db"]),
    Case("a pod the API server already counted in disruptedPods takes nothing from the budget",
         [pod("db", N0, 4, 5, app="db"), pod("web", N0, 4, 10)],
         [pdb("db", 0, DB, disrupted=("db",))], gpus=4, node=N0, victims=["db"]),
    Case("a victim covered by two budgets violates when either goes below zero",
         [pod("db", N0, 4, 5, app="db", tier="data"), pod("web", N0, 4, 10)],
         [pdb("db", 3, DB), pdb("data", 0, {"matchLabels": {"tier": "data"}})],
         gpus=4, node=N0, victims=["web"]),
    Case("budgets never make room: a pod that fits nowhere even without them preempts no one",
         [pod("db", N0, 8, 500, app="db"), pod("web", N1, 8, 200)], [pdb("db", 5, DB)],
         gpus=8, node=None),
]


def _find(case: Case, budgets: list[preempt.Budget]) -> preempt.Preemption | None:
    nodes = make_nodes().nodes(2).obj()
    running: dict[str, list[Pod]] = {}
    for p in case.running:
        running.setdefault(p.node, []).append(p)
    snapshot = snapshot_of(nodes, case.running)
    vip = make_pod("vip").gpus(case.gpus).with_(priority=100).obj()
    return preempt.find(vip, nodes, snapshot, running, snapshot.neighbours, budgets)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_preemption_with_pod_disruption_budgets(case: Case) -> None:
    found = _find(case, [read.budget(b) for b in case.budgets])
    if case.node is None:
        assert found is None
        return
    assert found is not None
    assert (found.node, sorted(v.name for v in found.victims), found.violating) == (
        case.node, sorted(case.victims), case.violating)
    if case.without_budgets is not None:  # the budgets made the difference
        before = _find(case, [])
        assert before is not None
        assert (before.node, sorted(v.name for v in before.victims)) == (
            case.without_budgets[0], sorted(case.without_budgets[1]))


def test_victims_split_in_importance_order_each_taking_from_every_budget_covering_it() -> None:
    pods = [pod("a", N0, 1, 9, app="db"), pod("b", N0, 1, 8, app="db"),
            pod("c", N0, 1, 7, app="db"), pod("d", N0, 1, 6, app="web")]
    budgets = [read.budget(pdb("db", 2, DB))]
    violating, other = preempt.split_by_budgets(pods, budgets)
    assert [p.name for p in violating] == ["c"]
    assert [p.name for p in other] == ["a", "b", "d"]
    # The next preemptor of the same cycle sees the disruptions already taken.
    (spent,) = preempt.spend(budgets, pods[:1])
    assert spent.allowed == 1


def test_a_budget_read_from_its_object() -> None:
    budget = read.budget(pdb("db", 2, {"matchLabels": {"app": "db"}, "matchExpressions": [
        {"key": "tier", "operator": "Exists"}]}, namespace="ml", disrupted=("db-0",)))
    assert (budget.namespace, budget.name, budget.allowed, budget.disrupted) == (
        "ml", "db", 2, frozenset({"db-0"}))
    assert budget.covers(pod("db-1", N0, 1, 1, "ml", app="db", tier="x"))
    assert not budget.covers(pod("db-0", N0, 1, 1, "ml", app="db", tier="x"))  # counted
    assert not budget.covers(pod("db-2", N0, 1, 1, "ml", app="db"))
    assert read.budget({"metadata": {"name": "fresh"}}).allowed == 0  # no status yet

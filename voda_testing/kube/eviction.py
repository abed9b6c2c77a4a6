"""pods/eviction and PodDisruptionBudgets as kube-apiserver and the disruption controller
treat them.

`evict` answers an Eviction: a pod that is terminal, Pending or already terminating is
deleted at once; a pod covered by one PDB is deleted only while the budget allows a
disruption (the allowance is taken, the pod recorded in `status.disruptedPods`), else
429 TooManyRequests with the upstream message; a pod covered by two PDBs is 500.
`refresh_budgets` is the disruption controller: each budget's expected, healthy and
desired pods and `disruptionsAllowed`. Simplification: the expected count is the
number of the selector's pods that are not terminal (upstream takes the scale of the
pods' controllers for maxUnavailable and percentages).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

from voda_testing.kube.errors import ApiError
from voda_testing.kube.patches import MERGE
from voda_testing.kube.store import TERMINAL_PHASES, Obj, Store, timestamp

PDBS = "poddisruptionbudgets.policy"
DELETION_TIMEOUT_SECONDS = 120  # a disrupted pod not gone by then counts again
VIOLATION = "Cannot evict pod as it would violate the pod's disruption budget."


def selector_matches(selector: Any, labels: dict[str, str]) -> bool:
    """A LabelSelector (matchLabels, matchExpressions); policy/v1: empty matches every pod,
    none matches none."""
    if selector is None:
        return False
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if (op == "In" and labels.get(key) not in values) or (
                op == "NotIn" and key in labels and labels[key] in values) or (
                op == "Exists" and key not in labels) or (
                op == "DoesNotExist" and key in labels):
            return False
    return True


def pod_ready(pod: Obj) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def budgets_of(store: Store, pod: Obj) -> list[Obj]:
    labels = pod["metadata"].get("labels") or {}
    budgets, _ = store.list(PDBS, pod["metadata"]["namespace"])
    return [b for b in budgets if selector_matches((b.get("spec") or {}).get("selector"),
                                                   labels)]


def evict(store: Store, namespace: str, name: str, body: Any) -> None:
    options = (body or {}).get("deleteOptions") or {}
    with store.lock:
        pod = store.get("pods", namespace, name)
        phase = (pod.get("status") or {}).get("phase")
        if not (phase in (*TERMINAL_PHASES, "Pending") or pod["metadata"].get(
                "deletionTimestamp")):
            budgets = budgets_of(store, pod)
            if len(budgets) > 1:
                raise ApiError(500, "This pod has more than one PodDisruptionBudget, which the "
                               "eviction subresource does not support.")
            if budgets:
                _take_disruption(store, budgets[0], pod)
        store.delete("pods", namespace, name, options.get("propagationPolicy"),
                     options.get("gracePeriodSeconds"), options.get("preconditions"),
                     bool(options.get("dryRun")))


def _take_disruption(store: Store, budget: Obj, pod: Obj) -> None:
    status = budget.get("status") or {}
    budget_name = budget["metadata"]["name"]
    if int(status.get("observedGeneration", 0)) < int(budget["metadata"].get("generation", 1)):
        raise _too_many(f"The disruption budget {budget_name} is still being processed by "
                        "the server.")
    allowed = int(status.get("disruptionsAllowed", 0))
    if allowed < 0:
        raise ApiError(403, "pdb disruptions allowed is negative")
    if not pod_ready(pod) and int(status.get("currentHealthy", 0)) >= int(
            status.get("desiredHealthy", 0)) > 0:
        return  # an unhealthy pod, the budget healthy: IfHealthyBudget lets it go
    if allowed == 0:
        raise _too_many(f"The disruption budget {budget_name} needs "
                        f"{int(status.get('desiredHealthy', 0))} healthy pods and has "
                        f"{int(status.get('currentHealthy', 0))} currently")
    disrupted = dict(status.get("disruptedPods") or {})
    disrupted[pod["metadata"]["name"]] = timestamp(store.clock())
    store.patch(PDBS, budget["metadata"]["namespace"], budget_name, {"status": {
        "disruptionsAllowed": allowed - 1, "disruptedPods": disrupted}}, MERGE,
        subresource="status")


def _too_many(cause: str) -> ApiError:
    return ApiError(429, VIOLATION, details={"causes": [
        {"reason": "DisruptionBudget", "message": cause}]})


def _parse_time(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


def _desired(spec: Obj, expected: int) -> int:
    def count(value: Any, round_up: bool) -> int:
        if isinstance(value, str) and value.endswith("%"):
            share = float(value[:-1]) / 100 * expected
            return math.ceil(share) if round_up else math.floor(share)
        return int(value)

    if spec.get("maxUnavailable") is not None:
        return max(0, expected - count(spec["maxUnavailable"], round_up=True))
    if spec.get("minAvailable") is not None:
        return count(spec["minAvailable"], round_up=True)
    return expected  # neither: no disruption allowed (minAvailable 100%)


def refresh_budgets(store: Store) -> None:
    """The disruption controller's pass over every PodDisruptionBudget."""
    budgets, _ = store.list(PDBS)
    now = store.clock()
    for budget in budgets:
        meta, spec = budget["metadata"], budget.get("spec") or {}
        pods, _ = store.list("pods", meta["namespace"])
        pods = [p for p in pods if selector_matches(spec.get("selector"), p["metadata"].get(
            "labels") or {}) and (p.get("status") or {}).get("phase") not in TERMINAL_PHASES]
        names = {p["metadata"]["name"] for p in pods}
        disrupted = {n: t for n, t in ((budget.get("status") or {}).get(
            "disruptedPods") or {}).items()
            if n in names and now - _parse_time(t) < DELETION_TIMEOUT_SECONDS}
        healthy = sum(1 for p in pods if pod_ready(p) and not p["metadata"].get(
            "deletionTimestamp") and p["metadata"]["name"] not in disrupted)
        desired = _desired(spec, len(pods))
        allowed = max(0, healthy - desired)
        status = {"observedGeneration": int(meta.get("generation", 1)),
                  "disruptedPods": disrupted or None, "expectedPods": len(pods),
                  "currentHealthy": healthy, "desiredHealthy": desired,
                  "disruptionsAllowed": allowed,
                  "conditions": [{"type": "DisruptionAllowed",
                                  "status": "True" if allowed else "False",
                                  "reason": "SufficientPods" if allowed else "InsufficientPods",
                                  "message": "", "observedGeneration": int(
                                      meta.get("generation", 1)),
                                  "lastTransitionTime": timestamp(now)}]}
        old = budget.get("status") or {}
        if all(old.get(k) == v for k, v in status.items() if k != "conditions") and (
                old.get("conditions") or [{}])[0].get("status") == status["conditions"][0][
                "status"]:
            continue
        try:
            store.patch(PDBS, meta["namespace"], meta["name"], {"status": status}, MERGE,
                        subresource="status")
        except ApiError:
            continue

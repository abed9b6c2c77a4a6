"""kube-scheduler's filters, as the simulator plays them: which nodes may take a pod and,
when none may, the message kube-scheduler puts in the pod's `PodScheduled` condition.

The plugins of the default profile that concern us, in the order they filter (a node
refused by one is not asked by the next), with their wording:

- NodeUnschedulable: a cordoned node takes only pods tolerating
  `node.kubernetes.io/unschedulable:NoSchedule` ("node(s) were unschedulable");
- TaintToleration: every NoSchedule and NoExecute taint tolerated; PreferNoSchedule is
  only a preference ("node(s) had untolerated taint {key: value}");
- NodeAffinity: `nodeSelector` and required node affinity (matchExpressions
  In/NotIn/Exists/DoesNotExist/Gt/Lt and matchFields on `metadata.name`; the terms are
  ORed, an empty term matches nothing) ("node(s) didn't match Pod's node affinity/selector");
- NodeResourcesFit: the pod's effective requests (per resource, the larger of the sum
  over its containers and sidecars and its largest init container, plus overhead; a
  container that gives only a limit requests it) fit what the node's bound pods leave of
  its allocatable; `pods` defaults to 110 ("Insufficient cpu", "Too many pods").

A node that is not Ready is filtered as kube-scheduler sees it once the node lifecycle
controller tainted it: `node.kubernetes.io/not-ready:NoSchedule` (`unreachable` when its
Ready condition is Unknown), which no default toleration covers.

Written from the upstream plugins' behaviour, independently of voda.podsched (the stand-in
must not share the code it checks).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from kubernetes.utils.quantity import parse_quantity

Obj = dict[str, Any]
Resources = dict[str, int]

PODS = "pods"
DEFAULT_PODS = 110
UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
NOT_READY_TAINT = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
UNREACHABLE = "node.kubernetes.io/unreachable"
CORDONED = "node(s) were unschedulable"
SELECTOR = "node(s) didn't match Pod's node affinity/selector"
TOO_MANY_PODS = "Too many pods"
NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"


def amount(value: Any, resource: str) -> int:
    """A quantity in the unit the simulator counts: cpu in millicores, the rest in units
    (memory in bytes), rounded up; nonsense is 0."""
    try:
        parsed: Decimal = parse_quantity(value)
    except (ValueError, TypeError, InvalidOperation):
        return 0
    if resource == "cpu":
        parsed *= 1000
    return max(0, math.ceil(parsed))


def _container(container: Mapping[str, Any]) -> Resources:
    res = container.get("resources") or {}
    wanted = dict(res.get("limits") or {})  # a limit alone is also the request
    wanted.update(res.get("requests") or {})
    return {r: amount(v, r) for r, v in wanted.items()}


def _add(total: Resources, more: Mapping[str, int]) -> None:
    for r, v in more.items():
        total[r] = total.get(r, 0) + v


def pod_requests(pod: Obj) -> Resources:
    """The pod's effective requests, one pod slot included."""
    spec = pod.get("spec") or {}
    total: Resources = {}
    for container in spec.get("containers") or []:
        _add(total, _container(container))
    peak: Resources = {}
    for container in spec.get("initContainers") or []:
        wanted = _container(container)
        if container.get("restartPolicy") == "Always":  # a sidecar runs beside the rest
            _add(total, wanted)
        else:
            for r, v in wanted.items():
                peak[r] = max(peak.get(r, 0), v)
    for r, v in peak.items():
        total[r] = max(total.get(r, 0), v)
    _add(total, {r: amount(v, r) for r, v in (spec.get("overhead") or {}).items()})
    out = {r: v for r, v in total.items() if v > 0}
    out[PODS] = 1
    return out


def allocatable(node: Obj) -> Resources:
    raw = (node.get("status") or {}).get("allocatable") or {}
    out = {r: amount(v, r) for r, v in raw.items()}
    if PODS not in raw:
        out[PODS] = DEFAULT_PODS
    return out


def tolerates(pod: Obj, taint: Mapping[str, Any]) -> bool:
    for t in (pod.get("spec") or {}).get("tolerations") or []:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        if t.get("operator") == "Exists":
            if not t.get("key") or t.get("key") == taint.get("key"):
                return True
        elif t.get("key") == taint.get("key") and (t.get("value") or "") == (
                taint.get("value") or ""):
            return True
    return False


def untolerated(pod: Obj, taints: Iterable[Mapping[str, Any]],
                effects: tuple[str, ...] = ("NoSchedule", "NoExecute")) -> Mapping[str, Any] | None:
    for taint in taints:
        if taint.get("effect") in effects and not tolerates(pod, taint):
            return taint
    return None


def toleration_seconds(pod: Obj, taints: Iterable[Mapping[str, Any]]) -> float | None:
    """How long the pod may stay under these NoExecute taints: 0 when one is not
    tolerated, else the least `tolerationSeconds` of the tolerations used (None: for ever)."""
    least: float | None = None
    for taint in taints:
        used = [t for t in (pod.get("spec") or {}).get("tolerations") or []
                if tolerates({"spec": {"tolerations": [t]}}, taint)]
        if not used:
            return 0.0
        for t in used:
            if t.get("tolerationSeconds") is not None:
                seconds = max(0.0, float(t["tolerationSeconds"]))
                least = seconds if least is None else min(least, seconds)
    return least


def _holds(op: str, values: list[str], have: str | None) -> bool:
    if op == "In":
        return have is not None and have in values
    if op == "NotIn":
        return have is None or have not in values
    if op == "Exists":
        return have is not None
    if op == "DoesNotExist":
        return have is None
    if op in ("Gt", "Lt") and have is not None and len(values) == 1:
        try:
            mine, bound = int(have), int(values[0])
        except ValueError:
            return False
        return mine > bound if op == "Gt" else mine < bound
    return False


def _term(term: Mapping[str, Any], labels: Mapping[str, str], name: str) -> bool:
    exprs, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not exprs and not fields:
        return False
    return all(_holds(e.get("operator", ""), list(e.get("values") or []), labels.get(e["key"]))
               for e in exprs) and all(
        _holds(f.get("operator", ""), list(f.get("values") or []),
               name if f.get("key") == "metadata.name" else None) for f in fields)


def selects(pod: Obj, node: Obj) -> bool:
    """nodeSelector and required node affinity."""
    spec = pod.get("spec") or {}
    labels = node["metadata"].get("labels") or {}
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution")
    if not required:
        return True
    return any(_term(t, labels, node["metadata"]["name"])
               for t in required.get("nodeSelectorTerms") or [])


def _taints(node: Obj) -> list[Mapping[str, Any]]:
    """The node's taints, with the NoSchedule one the node lifecycle controller puts on a
    node that is not Ready (TaintNodesByCondition: not-ready, or unreachable when its
    Ready condition is Unknown), whoever plays that controller."""
    taints = list((node.get("spec") or {}).get("taints") or [])
    ready = [c.get("status") for c in (node.get("status") or {}).get("conditions") or []
             if c.get("type") == "Ready"]
    if ready != ["True"]:
        key = UNREACHABLE if ready == ["Unknown"] else NOT_READY_TAINT["key"]
        if not any(t.get("key") == key and t.get("effect") == "NoSchedule" for t in taints):
            taints.append({"key": key, "effect": "NoSchedule"})
    return taints


def static_problem(pod: Obj, node: Obj) -> str | None:
    """A reason the node can never take the pod, whatever runs there (or None)."""
    if (node.get("spec") or {}).get("unschedulable") and not tolerates(pod, UNSCHEDULABLE_TAINT):
        return CORDONED
    taint = untolerated(pod, _taints(node))
    if taint is not None:
        return f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value') or ''}}}"
    if not selects(pod, node):
        return SELECTOR
    return None


def short(need: Mapping[str, int], have: Mapping[str, int], used: Mapping[str, int]
          ) -> list[str]:
    """The resources the node lacks for the pod, as kube-scheduler words them."""
    out = []
    for resource, wanted in sorted(need.items()):
        if used.get(resource, 0) + wanted > have.get(resource, 0):
            out.append(TOO_MANY_PODS if resource == PODS else f"Insufficient {resource}")
    return out


def message(total: int, reasons: Mapping[str, list[str]]) -> str:
    """kube-scheduler's FitError, then what preemption (finding no victims) adds:
    '0/3 nodes are available: 1 Insufficient cpu, 2 node(s) had untolerated taint {k: v}.
    preemption: 0/3 nodes are available: 1 No preemption victims found for incoming pod,
    2 Preemption is not helpful for scheduling.'"""
    if not total:
        return "no nodes available to schedule pods"
    counts: Counter[str] = Counter(r for node_reasons in reasons.values() for r in node_reasons)
    preemption: Counter[str] = Counter()
    for node_reasons in reasons.values():
        resolvable = node_reasons and all(r == TOO_MANY_PODS or r.startswith("Insufficient ")
                                          for r in node_reasons)
        preemption[NO_VICTIMS if resolvable else NOT_HELPFUL] += 1
    fit = ", ".join(sorted(f"{n} {r}" for r, n in counts.items()))
    after = ", ".join(sorted(f"{n} {r}" for r, n in preemption.items()))
    return (f"0/{total} nodes are available: {fit}. "
            f"preemption: 0/{total} nodes are available: {after}.")

"""From Kubernetes objects (as JSON dicts) to the scheduler's value types.

A pod's effective request follows Kubernetes: per resource, the larger of the
sum over its containers (and restartable init containers, i.e. sidecars) and
the largest regular init container, plus the pod overhead; a container that
gives only a limit requests that limit. Quantities are parsed by the official
client (`kubernetes.utils.quantity`): `cpu` becomes millicores, everything else
whole units (rounded up). The API server validates these fields, so a bad value
is reported as a problem naming the field rather than trusted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

from kubernetes.utils.quantity import parse_quantity

from voda.core.placement.topology import LEAF_LABEL, SPINE_LABEL
from voda.podsched.model import (
    CPU,
    GPU,
    NodeState,
    Owner,
    Pod,
    PodTerm,
    Requirement,
    SelectorTerm,
    Taint,
    Toleration,
)
from voda.podsched.preempt import Budget

MAX_QUANTITY_LENGTH = 64
MAX_LIST = 1000  # containers, tolerations, terms, expressions, values: a real pod has few


class ObjectError(ValueError):
    """An object the scheduler cannot use; the message names the field."""


def quantity(value: Any, resource: str, where: str) -> int:
    """A resource quantity in the scheduler's unit: millicores for cpu, else units."""
    text = str(value)
    if len(text) > MAX_QUANTITY_LENGTH:
        raise ObjectError(f"{where}: quantity longer than {MAX_QUANTITY_LENGTH} characters")
    try:
        amount: Decimal = parse_quantity(value)
    except (ValueError, TypeError, InvalidOperation):
        raise ObjectError(f"{where}: not a quantity: {text[:40]!r}") from None
    if amount < 0 or not amount.is_finite():
        raise ObjectError(f"{where}: must not be negative, got {text[:40]!r}")
    if resource == CPU:
        amount *= 1000
    if amount > 2**62:
        raise ObjectError(f"{where}: too large: {text[:40]!r}")
    return math.ceil(amount)


def _container_requests(container: Mapping[str, Any], where: str) -> dict[str, int]:
    resources = container.get("resources") or {}
    requests = dict(resources.get("requests") or {})
    limits = resources.get("limits") or {}
    for resource, value in limits.items():
        requests.setdefault(resource, value)  # a limit alone is also the request
    if GPU in limits:  # the GPU request is the limit (extended resources: both must agree)
        requests[GPU] = limits[GPU]
    return {r: quantity(v, r, f"{where}.resources.{r}") for r, v in requests.items()}


def _bounded(items: Any, where: str) -> list:
    if items is None:
        return []
    if not isinstance(items, list):
        raise ObjectError(f"{where}: must be a list")
    if len(items) > MAX_LIST:
        raise ObjectError(f"{where}: more than {MAX_LIST} entries")
    return items


def pod_requests(spec: Mapping[str, Any]) -> dict[str, int]:
    """The effective resource requests of a pod spec (see the module doc)."""
    total: dict[str, int] = {}
    for pos, container in enumerate(_bounded(spec.get("containers"), "spec.containers")):
        for r, v in _container_requests(container, f"spec.containers[{pos}]").items():
            total[r] = total.get(r, 0) + v
    init_peak: dict[str, int] = {}
    for pos, container in enumerate(_bounded(spec.get("initContainers"), "spec.initContainers")):
        amounts = _container_requests(container, f"spec.initContainers[{pos}]")
        if container.get("restartPolicy") == "Always":  # a sidecar runs beside the containers
            for r, v in amounts.items():
                total[r] = total.get(r, 0) + v
        else:
            for r, v in amounts.items():
                init_peak[r] = max(init_peak.get(r, 0), v)
    for r, v in init_peak.items():
        total[r] = max(total.get(r, 0), v)
    for r, v in (spec.get("overhead") or {}).items():
        total[r] = total.get(r, 0) + quantity(v, r, f"spec.overhead.{r}")
    return {r: v for r, v in total.items() if v > 0}


def _requirements(items: Any, where: str) -> tuple[Requirement, ...]:
    out = []
    for pos, item in enumerate(_bounded(items, where)):
        values = _bounded(item.get("values"), f"{where}[{pos}].values")
        out.append(Requirement(str(item.get("key", "")), str(item.get("operator", "")),
                               tuple(str(v) for v in values)))
    return tuple(out)


def _affinity(spec: Mapping[str, Any]) -> tuple[SelectorTerm, ...] | None:
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if not required:
        return None
    return selector_terms(required,
                          "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution")


def selector_terms(selector: Mapping[str, Any], where: str) -> tuple[SelectorTerm, ...]:
    """A NodeSelector's terms (any must match)."""
    terms = []
    for pos, term in enumerate(_bounded(selector.get("nodeSelectorTerms"),
                                        f"{where}.nodeSelectorTerms")):
        at = f"{where}.nodeSelectorTerms[{pos}]"
        terms.append(SelectorTerm(_requirements(term.get("matchExpressions"),
                                                f"{at}.matchExpressions"),
                                  _requirements(term.get("matchFields"), f"{at}.matchFields")))
    return tuple(terms)


def _tolerations(spec: Mapping[str, Any]) -> tuple[Toleration, ...]:
    out = []
    for item in _bounded(spec.get("tolerations"), "spec.tolerations"):
        seconds = item.get("tolerationSeconds")
        out.append(Toleration(str(item.get("key") or ""), str(item.get("operator") or "Equal"),
                              str(item.get("value") or ""), str(item.get("effect") or ""),
                              float(seconds) if isinstance(seconds, int | float) else None))
    return tuple(out)


def _claims(name: str, spec: Mapping[str, Any]) -> tuple[str, ...]:
    """The PersistentVolumeClaims the pod's volumes use; a generic ephemeral volume's claim
    is named `<pod>-<volume>`."""
    out = []
    for volume in _bounded(spec.get("volumes"), "spec.volumes"):
        claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
        if claim:
            out.append(str(claim))
        elif volume.get("ephemeral") is not None:
            out.append(f"{name}-{volume.get('name', '')}")
    return tuple(out)


def _host_ports(spec: Mapping[str, Any]) -> frozenset[tuple[str, str, int]]:
    ports = set()
    for group in ("containers", "initContainers"):
        for container in _bounded(spec.get(group), f"spec.{group}"):
            for port in _bounded(container.get("ports"), f"spec.{group}[].ports"):
                host = port.get("hostPort")
                if isinstance(host, int) and host > 0:
                    ports.add((str(port.get("hostIP") or "0.0.0.0"),
                               str(port.get("protocol") or "TCP"), host))
    return frozenset(ports)


HOSTNAME = "kubernetes.io/hostname"
_SELECTOR_OPS = ("In", "NotIn", "Exists", "DoesNotExist")


def _by_hostname(term: Any) -> bool:
    """A term this scheduler evaluates: by hostname, with a label selector, no namespace
    selector, no matchLabelKeys."""
    return (isinstance(term, Mapping) and term.get("topologyKey") == HOSTNAME
            and isinstance(term.get("labelSelector"), Mapping)
            and term.get("namespaceSelector") is None and not term.get("matchLabelKeys")
            and not term.get("mismatchLabelKeys")
            and all(e.get("operator") in _SELECTOR_OPS
                    for e in term["labelSelector"].get("matchExpressions") or []))


def label_selector(selector: Any) -> tuple[Requirement, ...] | None:
    """A LabelSelector's requirements (all must hold), or None where it selects nothing as
    kube-scheduler's preemption reads a PodDisruptionBudget's: no selector, an empty one,
    or one metav1.LabelSelectorAsSelector refuses (an unknown operator, In or NotIn
    without values, Exists or DoesNotExist with values)."""
    if not isinstance(selector, Mapping):
        return None
    labels = selector.get("matchLabels") or {}
    try:
        expressions = _requirements(selector.get("matchExpressions"), "selector.matchExpressions")
    except (ObjectError, AttributeError):
        return None
    if not isinstance(labels, Mapping) or any(
            e.operator not in _SELECTOR_OPS
            or (not e.values if e.operator in ("In", "NotIn") else bool(e.values))
            for e in expressions):
        return None
    requirements = (*(Requirement(str(k), "In", (str(v),)) for k, v in labels.items()),
                    *expressions)
    return requirements or None


def budget(obj: Mapping[str, Any]) -> Budget:
    """A policy/v1 PodDisruptionBudget as preemption weighs it."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    allowed = status.get("disruptionsAllowed")
    disrupted = status.get("disruptedPods")
    return Budget(str(meta.get("namespace") or "default"), str(meta.get("name") or ""),
                  label_selector(spec.get("selector")),
                  allowed if isinstance(allowed, int) else 0,
                  frozenset(str(n) for n in disrupted) if isinstance(disrupted, Mapping)
                  else frozenset())


def anti_affinity(namespace: str, spec: Mapping[str, Any]) -> tuple[PodTerm, ...]:
    """The pod's required anti-affinity terms by hostname."""
    section = (spec.get("affinity") or {}).get("podAntiAffinity") or {}
    where = "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    terms = []
    for term in _bounded(section.get("requiredDuringSchedulingIgnoredDuringExecution"), where):
        if not _by_hostname(term):
            continue
        selector = term["labelSelector"]
        labels = selector.get("matchLabels") or {}
        requirements = [Requirement(str(k), "In", (str(v),)) for k, v in labels.items()]
        requirements += _requirements(selector.get("matchExpressions"),
                                      f"{where}[].labelSelector.matchExpressions")
        namespaces = frozenset(str(n) for n in term.get("namespaces") or ()) or frozenset(
            {namespace})
        terms.append(PodTerm(tuple(requirements), namespaces))
    return tuple(terms)


def constraints_not_evaluated(spec: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """What kube-scheduler's plugins would evaluate and this scheduler does not: (required
    constraints, which keep the pod waiting; preferences, which are ignored)."""
    required: list[str] = []
    preferred: list[str] = []
    affinity = spec.get("affinity") or {}
    for kind, words in (("podAffinity", "pod affinity"),
                        ("podAntiAffinity", "pod anti-affinity")):
        section = affinity.get(kind) or {}
        terms = section.get("requiredDuringSchedulingIgnoredDuringExecution") or []
        for term in terms if isinstance(terms, list) else []:
            if kind == "podAntiAffinity" and _by_hostname(term):
                continue  # evaluated
            key = term.get("topologyKey", "") if isinstance(term, Mapping) else ""
            required.append(f"required {words} (topologyKey {str(key)[:60]})")
        if section.get("preferredDuringSchedulingIgnoredDuringExecution"):
            preferred.append(f"preferred {words}")
    for item in spec.get("topologySpreadConstraints") or []:
        key = str(item.get("topologyKey", ""))[:60]
        if item.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule":
            required.append(f"topology spread constraint (topologyKey {key}, DoNotSchedule)")
        else:
            preferred.append(f"topology spread constraint (topologyKey {key}, ScheduleAnyway)")
    if spec.get("resourceClaims"):
        required.append("dynamic resource allocation claims (spec.resourceClaims)")
    return sorted(set(required)), sorted(set(preferred))


def controller_of(metadata: Mapping[str, Any]) -> Owner | None:
    """The owner reference marked `controller: true` (None for a bare object)."""
    for ref in metadata.get("ownerReferences") or []:
        if ref.get("controller"):
            return Owner(str(ref.get("kind", "")), str(ref.get("name", "")),
                         str(ref.get("uid", "")))
    return None


def read_pod(obj: Mapping[str, Any]) -> Pod:
    """A Pod from its JSON form; ObjectError names a field the scheduler cannot use."""
    metadata = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    selector = spec.get("nodeSelector") or {}
    if not isinstance(selector, Mapping):
        raise ObjectError("spec.nodeSelector: must be a mapping")
    priority = spec.get("priority") or 0
    status = obj.get("status") or {}
    name = str(metadata.get("name", ""))
    required, preferred = constraints_not_evaluated(spec)
    return Pod(
        namespace=str(metadata.get("namespace") or "default"),
        name=name,
        uid=str(metadata.get("uid", "")),
        requests=pod_requests(spec),
        node_selector={str(k): str(v) for k, v in selector.items()},
        affinity=_affinity(spec),
        tolerations=_tolerations(spec),
        annotations={str(k): str(v) for k, v in (metadata.get("annotations") or {}).items()},
        owner=controller_of(metadata),
        priority=int(priority) if isinstance(priority, int) else 0,
        created=str(metadata.get("creationTimestamp") or ""),
        node=str(spec.get("nodeName") or ""),
        phase=str(status.get("phase") or "Pending"),
        labels={str(k): str(v) for k, v in (metadata.get("labels") or {}).items()},
        claims=_claims(name, spec),
        host_ports=_host_ports(spec),
        anti_affinity=anti_affinity(str(metadata.get("namespace") or "default"), spec),
        preempts=spec.get("preemptionPolicy") != "Never",
        nominated=str(status.get("nominatedNodeName") or ""),
        unsupported=tuple(required),
        ignored=tuple(preferred),
    )


def node_ready(obj: Mapping[str, Any]) -> bool:
    return ready_status(obj) == "True"


def ready_status(obj: Mapping[str, Any]) -> str:
    """The status of the node's Ready condition: True, False or Unknown (also when absent)."""
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return str(condition.get("status") or "Unknown")
    return "Unknown"


def read_node(
    obj: Mapping[str, Any],
    leaf_label: str = LEAF_LABEL,
    spine_label: str = SPINE_LABEL,
) -> NodeState:
    """A NodeState from a Node's JSON form; leaf and spine from the given labels."""
    metadata = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    labels = {str(k): str(v) for k, v in (metadata.get("labels") or {}).items()}
    allocatable = {}
    for resource, value in ((obj.get("status") or {}).get("allocatable") or {}).items():
        try:
            allocatable[resource] = quantity(value, resource, f"status.allocatable.{resource}")
        except ObjectError:
            allocatable[resource] = 0  # a node that reports nonsense offers nothing of it
    taints = tuple(
        Taint(str(t.get("key", "")), str(t.get("value") or ""), str(t.get("effect", "")))
        for t in spec.get("taints") or []
    )
    return NodeState(
        name=str(metadata.get("name", "")),
        allocatable=allocatable,
        labels=labels,
        taints=taints,
        ready=node_ready(obj),
        unreachable=ready_status(obj) not in ("True", "False"),
        unschedulable=bool(spec.get("unschedulable")),
        leaf=labels.get(leaf_label) or None,
        spine=labels.get(spine_label) or None,
    )


def annotation_layers(pod: Pod, owners: Sequence[Mapping[str, Any]]) -> list[Mapping[str, str]]:
    """The pod's annotations, then each owner's (nearest first), for voda.podsched.hints."""
    layers: list[Mapping[str, str]] = [pod.annotations]
    for owner in owners:
        annotations = (owner.get("metadata") or {}).get("annotations") or {}
        layers.append({str(k): str(v) for k, v in annotations.items()})
    return layers

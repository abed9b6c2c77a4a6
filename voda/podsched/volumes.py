"""What a pod's PersistentVolumeClaims ask of its node, as kube-scheduler's VolumeBinding
plugin reads them.

- A claim bound to a PersistentVolume (`spec.volumeName`) whose required node affinity
  names some nodes (a zonal disk, a local volume): only those nodes fit ("node(s) had
  volume node affinity conflict").
- An unbound claim of a StorageClass with `volumeBindingMode: WaitForFirstConsumer`
  is provisioned where the pod goes: any node fits that the class's
  `allowedTopologies` allow ("node(s) didn't find available persistent volumes to
  bind"), and before the pod's Binding the claim is annotated
  `volume.kubernetes.io/selected-node` with that node, which is what the
  provisioner waits for.
- An unbound claim of an Immediate class (or of none) waits for the PV controller to
  bind it: the pod waits ("pod has unbound immediate PersistentVolumeClaims"), as
  does a pod whose claim is missing or being deleted.

Matching unbound claims to existing unbound PersistentVolumes (static provisioning
with WaitForFirstConsumer) is not done: such a claim is treated as one to provision.
No I/O: the controller passes lookups into its informers' caches.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from voda.podsched.model import Pod, Requirement, SelectorTerm, VolumeTopology
from voda.podsched.read import ObjectError, selector_terms

SELECTED_NODE = "volume.kubernetes.io/selected-node"
NODE_CONFLICT = "node(s) had volume node affinity conflict"
BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"
PV_MISSING = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
WAIT = "WaitForFirstConsumer"

Obj = Mapping[str, Any]
Lookup = Callable[[str, str], Obj | None]  # (namespace or "", name) -> the object or None


@dataclass(frozen=True, slots=True)
class Volumes:
    topology: tuple[VolumeTopology, ...] = ()
    error: str = ""  # the pod cannot be placed anywhere now
    provision: tuple[str, ...] = ()  # claims to annotate with the chosen node


def resolve(pod: Pod, claims: Lookup, volumes: Lookup, classes: Lookup) -> Volumes:
    topology: list[VolumeTopology] = []
    provision: list[str] = []
    for name in pod.claims:
        claim = claims(pod.namespace, name)
        if claim is None:
            return Volumes(error=f'persistentvolumeclaim "{name}" not found')
        if (claim.get("metadata") or {}).get("deletionTimestamp"):
            return Volumes(error=f'persistentvolumeclaim "{name}" is being deleted')
        spec = claim.get("spec") or {}
        bound = spec.get("volumeName")
        if bound:
            volume = volumes("", str(bound))
            if volume is None:
                return Volumes(error=PV_MISSING)
            required = ((volume.get("spec") or {}).get("nodeAffinity") or {}).get("required")
            if required:
                try:
                    terms = selector_terms(required, f"persistentvolume {bound}: "
                                                     "spec.nodeAffinity.required")
                except ObjectError as exc:
                    return Volumes(error=str(exc))
                topology.append(VolumeTopology(NODE_CONFLICT, terms))
            continue
        class_name = spec.get("storageClassName")
        storage = classes("", str(class_name)) if class_name else None
        if class_name and storage is None:
            return Volumes(error=f'storageclass.storage.k8s.io "{class_name}" not found')
        if storage is None or storage.get("volumeBindingMode") != WAIT:
            return Volumes(error=UNBOUND_IMMEDIATE)
        allowed = _allowed_topologies(storage.get("allowedTopologies"))
        if allowed:
            topology.append(VolumeTopology(BIND_CONFLICT, allowed))
        provision.append(name)
    return Volumes(tuple(topology), "", tuple(provision))


def _allowed_topologies(items: Any) -> tuple[SelectorTerm, ...]:
    """A StorageClass's allowedTopologies: any term, all of whose label expressions hold."""
    terms = []
    for term in items or []:
        expressions = tuple(
            Requirement(str(e.get("key", "")), "In", tuple(str(v) for v in e.get("values") or ()))
            for e in (term or {}).get("matchLabelExpressions") or [])
        if expressions:
            terms.append(SelectorTerm(expressions))
    return tuple(terms)

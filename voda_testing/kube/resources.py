"""The kinds the fake server serves: built-in core kinds and the Kubeflow CRDs.

Custom resources are defined from the real CRD files (voda/data/crds): their names,
scope, subresources and openAPIV3Schema, against which every write is validated
and pruned as a real server does. `crd_set` picks what a cluster has installed: both
operators, one of them, the training operator with its own v1-only MPIJob CRD, or
mpi-operator v0.4's CRD, whose pod template schema predates `schedulingGates`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any

import yaml

CRD_DIR = Path(__file__).resolve().parents[2] / "voda" / "data" / "crds"

VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


@dataclass(frozen=True)
class ScalePaths:
    spec_replicas: str  # e.g. .spec.replicas
    status_replicas: str
    label_selector: str | None = None


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    subresources: frozenset[str] = frozenset()
    scale: ScalePaths | None = None
    short_names: tuple[str, ...] = ()
    schema: dict[str, Any] | None = field(default=None, compare=False, hash=False)
    custom: bool = False  # a custom resource: no strategic merge patch
    # Field labels a field selector may use beyond metadata.name / metadata.namespace.
    field_labels: frozenset[str] = frozenset()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def singular(self) -> str:
        return self.kind.lower()

    def discovery(self) -> list[dict[str, Any]]:
        entries = [{"name": self.plural, "singularName": self.singular,
                    "namespaced": self.namespaced, "kind": self.kind, "verbs": VERBS,
                    **({"shortNames": list(self.short_names)} if self.short_names else {})}]
        for sub in sorted(self.subresources):
            kind = {"scale": "Scale", "binding": "Binding", "eviction": "Eviction"}.get(
                sub, self.kind)
            verbs = ["create"] if sub in ("binding", "eviction") else ["get", "patch", "update"]
            entries.append({"name": f"{self.plural}/{sub}", "singularName": "",
                            "namespaced": self.namespaced, "kind": kind, "verbs": verbs})
        return entries


_POD_FIELDS = frozenset({"spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
                         "spec.serviceAccountName", "status.phase", "status.podIP",
                         "status.nominatedNodeName"})
_EVENT_FIELDS = frozenset({"involvedObject.kind", "involvedObject.namespace",
                           "involvedObject.name", "involvedObject.uid",
                           "involvedObject.apiVersion", "involvedObject.resourceVersion",
                           "involvedObject.fieldPath", "reason", "reportingComponent",
                           "source", "type"})
_STATUS = frozenset({"status"})
_SCALED = frozenset({"status", "scale"})
_REPLICAS = ScalePaths(".spec.replicas", ".status.replicas", ".status.selector")

BUILTIN: tuple[Resource, ...] = (
    Resource("", "v1", "namespaces", "Namespace", namespaced=False, subresources=_STATUS,
             short_names=("ns",), field_labels=frozenset({"status.phase"})),
    Resource("", "v1", "nodes", "Node", namespaced=False, subresources=_STATUS,
             short_names=("no",), field_labels=frozenset({"spec.unschedulable"})),
    Resource("", "v1", "pods", "Pod", subresources=frozenset({"status", "binding", "eviction"}),
             short_names=("po",), field_labels=_POD_FIELDS),
    Resource("", "v1", "services", "Service", subresources=_STATUS, short_names=("svc",)),
    Resource("", "v1", "configmaps", "ConfigMap", short_names=("cm",)),
    Resource("", "v1", "endpoints", "Endpoints", short_names=("ep",)),
    Resource("", "v1", "secrets", "Secret", field_labels=frozenset({"type"})),
    Resource("", "v1", "serviceaccounts", "ServiceAccount", short_names=("sa",)),
    Resource("", "v1", "events", "Event", short_names=("ev",), field_labels=_EVENT_FIELDS),
    Resource("coordination.k8s.io", "v1", "leases", "Lease"),
    Resource("events.k8s.io", "v1", "events", "Event", short_names=("ev",)),
    Resource("batch", "v1", "jobs", "Job", subresources=_STATUS),
    Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget",
             subresources=_STATUS, short_names=("pdb",)),
    Resource("apps", "v1", "deployments", "Deployment", subresources=_SCALED, scale=_REPLICAS,
             short_names=("deploy",)),
    Resource("apps", "v1", "replicasets", "ReplicaSet", subresources=_SCALED, scale=_REPLICAS,
             short_names=("rs",)),
    Resource("apps", "v1", "statefulsets", "StatefulSet", subresources=_SCALED,
             scale=_REPLICAS, short_names=("sts",)),
    Resource("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler",
             subresources=_STATUS, short_names=("hpa",)),
    Resource("rbac.authorization.k8s.io", "v1", "roles", "Role"),
    Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"),
    Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole",
             namespaced=False),
    Resource("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding",
             namespaced=False),
)


# Volumes and priorities, which schedulers read (kube-scheduler's VolumeBinding plugin and
# preemption; voda.podsched).
STORAGE_AND_PRIORITY: tuple[Resource, ...] = (
    Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", subresources=_STATUS,
             short_names=("pvc",)),
    Resource("", "v1", "persistentvolumes", "PersistentVolume", namespaced=False,
             subresources=_STATUS, short_names=("pv",)),
    Resource("storage.k8s.io", "v1", "storageclasses", "StorageClass", namespaced=False,
             short_names=("sc",)),
    Resource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False,
             short_names=("pc",)),
)


def crd_resources(crd: dict[str, Any]) -> list[Resource]:
    """One Resource per served version of a CustomResourceDefinition."""
    spec = crd["spec"]
    names = spec["names"]
    out = []
    for version in spec["versions"]:
        if not version.get("served", True):
            continue
        subs = version.get("subresources") or {}
        scale = None
        if "scale" in subs:
            s = subs["scale"]
            scale = ScalePaths(s["specReplicasPath"], s["statusReplicasPath"],
                               s.get("labelSelectorPath"))
        out.append(Resource(
            group=spec["group"], version=version["name"], plural=names["plural"],
            kind=names["kind"], namespaced=spec.get("scope", "Namespaced") == "Namespaced",
            subresources=frozenset(subs), scale=scale,
            short_names=tuple(names.get("shortNames") or ()),
            schema=(version.get("schema") or {}).get("openAPIV3Schema"), custom=True))
    return out


@cache
def kubeflow_resources() -> tuple[Resource, ...]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    out: list[Resource] = []
    for path in sorted(CRD_DIR.glob("*.yaml")):
        out.extend(crd_resources(yaml.load(path.read_text(), Loader=loader)))
    return tuple(out)


def _without_gates(schema: Any) -> Any:
    """The schema with `schedulingGates` gone from every pod template (as in CRDs generated
    before Kubernetes 1.26, e.g. mpi-operator v0.4's): the server prunes the field."""
    if isinstance(schema, dict):
        out = {k: _without_gates(v) for k, v in schema.items()}
        props = out.get("properties")
        if isinstance(props, dict) and "containers" in props:
            props.pop("schedulingGates", None)
        return out
    if isinstance(schema, list):
        return [_without_gates(v) for v in schema]
    return schema


def _kind(kind: str) -> Resource:
    return next(r for r in kubeflow_resources() if r.kind == kind)


@cache
def crd_set(name: str) -> tuple[Resource, ...]:
    """The Kubeflow kinds of one kind of installation (see CRD_SETS)."""
    mpi, pytorch = _kind("MPIJob"), _kind("PyTorchJob")
    if name == "all":
        return (mpi, pytorch)
    if name == "mpi-operator":
        return (mpi,)
    if name == "training-operator":
        return (pytorch,)
    if name == "training-operator-with-mpijob-v1":
        # The training operator's own MPIJob CRD serves kubeflow.org/v1 only; installed,
        # it takes the name mpijobs.kubeflow.org that mpi-operator's v2beta1 CRD needs.
        return (pytorch, replace(mpi, version="v1"))
    if name == "mpi-operator-v0.4":
        return (replace(mpi, schema=_without_gates(mpi.schema)),)
    raise ValueError(f"unknown CRD set {name!r}; known: {', '.join(CRD_SETS)}")


CRD_SETS = ("all", "mpi-operator", "training-operator", "training-operator-with-mpijob-v1",
            "mpi-operator-v0.4")


def default_resources(crds: str = "all") -> tuple[Resource, ...]:
    return (*BUILTIN, *STORAGE_AND_PRIORITY, *crd_set(crds))

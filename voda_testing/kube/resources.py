"""The kinds the fake server serves: built-in core kinds and the Kubeflow CRDs.

Custom resources are defined from the real CRD files (voda/data/crds): their names,
scope, subresources and openAPIV3Schema, against which every write is validated
and pruned as a real server does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
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


def default_resources() -> tuple[Resource, ...]:
    return (*BUILTIN, *kubeflow_resources())

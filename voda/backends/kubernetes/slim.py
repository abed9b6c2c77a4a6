"""What the informers keep of the objects they cache, as client-go's SetTransform does: a
cluster's pods are most of the memory of the process, so fields no part of Voda reads
are dropped before an object is cached or handed to a handler.

Every object loses `metadata.managedFields`. Pods of other owners (not labelled with
Voda's job label) keep what placement and the pod scheduler read (labels, owners,
resources, ports, node selection, tolerations, claims, phase and conditions) and lose
the rest: environment, mounts, probes, commands, non-claim volumes, container
statuses. Voda's own pods are kept whole. The strings that repeat across objects
(keys, node and namespace names, conditions) are interned, so 100,000 pods share them.
"""

from __future__ import annotations

import sys
from typing import Any

Obj = dict[str, Any]
CONTAINER_KEEP = frozenset({"name", "image", "resources", "ports", "restartPolicy"})
SPEC_DROP = frozenset({"volumes", "securityContext", "dnsConfig", "hostAliases",
                       "readinessGates", "imagePullSecrets", "os", "enableServiceLinks",
                       "dnsPolicy", "terminationGracePeriodSeconds", "serviceAccount",
                       "automountServiceAccountToken", "subdomain", "hostname",
                       "setHostnameAsFQDN", "shareProcessNamespace"})
STATUS_KEEP = frozenset({"phase", "conditions", "reason", "message", "nominatedNodeName",
                         "resize", "resourceClaimStatuses"})
CLAIM_VOLUMES = ("persistentVolumeClaim", "ephemeral")
_intern = sys.intern


def _interned(value: Any) -> Any:
    kind = type(value)
    if kind is str:
        return _intern(value) if len(value) <= 64 else value
    if kind is dict:
        return {_intern(k): _interned(v) for k, v in value.items()}
    if kind is list:
        return [_interned(v) for v in value]
    return value


def slim(obj: Obj) -> Obj:
    """Any kind: without managedFields."""
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        obj = {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    return obj


def slim_pod(obj: Obj, owner_label: str) -> Obj:
    obj = slim(obj)
    if owner_label in ((obj.get("metadata") or {}).get("labels") or {}):
        return obj
    spec = dict(obj.get("spec") or {})
    for key in SPEC_DROP & spec.keys():
        del spec[key]
    claims = [v for v in (obj.get("spec") or {}).get("volumes") or []
              if any(k in v for k in CLAIM_VOLUMES)]
    if claims:
        spec["volumes"] = claims
    for key in ("containers", "initContainers"):
        if key in spec:
            spec[key] = [{k: v for k, v in c.items() if k in CONTAINER_KEEP}
                         for c in spec[key] or []]
    status = {k: v for k, v in (obj.get("status") or {}).items() if k in STATUS_KEEP}
    slimmed = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
               "metadata": obj.get("metadata") or {}, "spec": spec, "status": status}
    return _interned(slimmed)  # type: ignore[no-any-return]

"""What the real server checks on a write: names, labels, custom resources against
their CRD schema (validated, then pruned of unknown fields), and the pod rules,
among them those of scheduling gates (KEP-3521: gates may only be removed;
nodeSelector may only gain keys while the pod is gated)."""

from __future__ import annotations

import copy
import re
from typing import Any

from voda_testing.kube.errors import ApiError, invalid
from voda_testing.kube.resources import Resource

NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
LABEL_KEY_RE = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
OBJECT_META = frozenset({
    "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
    "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels",
    "annotations", "ownerReferences", "finalizers", "managedFields"})


def check_meta(resource: Resource, obj: dict[str, Any]) -> None:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        raise invalid(resource.kind, "", [("metadata", "Required value")])
    name = str(meta.get("name") or "")
    causes = []
    if not name:
        causes.append(("metadata.name", "Required value: name or generateName is required"))
    elif len(name) > 253 or not NAME_RE.match(name):
        causes.append(("metadata.name", f'Invalid value: "{name}": a lowercase RFC 1123 '
                       "subdomain must consist of lower case alphanumeric characters, '-' or "
                       "'.', and must start and end with an alphanumeric character"))
    for key, value in (meta.get("labels") or {}).items():
        if not LABEL_KEY_RE.match(str(key)):
            causes.append(("metadata.labels", f'Invalid value: "{key}": name part must '
                           "consist of alphanumeric characters, '-', '_' or '.'"))
        if not isinstance(value, str) or len(value) > 63 or not LABEL_VALUE_RE.match(value):
            causes.append(("metadata.labels", f'Invalid value: "{value}": a valid label '
                           "must be an empty string or consist of alphanumeric characters, "
                           "'-', '_' or '.', at most 63 characters"))
    for key, value in (meta.get("annotations") or {}).items():
        if not isinstance(value, str):
            causes.append((f"metadata.annotations.{key}", "Invalid value: must be a string"))
    if causes:
        raise invalid(resource.kind, name, causes)


# ----- custom resources ------------------------------------------------------------------
_VALIDATORS: dict[int, Any] = {}


def _validator(resource: Resource) -> Any:
    """One validator per schema (Resources compare without their schemas, and two CRDs of
    one kind, such as mpi-operator v0.4's and v0.8's, differ only there)."""
    from jsonschema import Draft7Validator

    schema = resource.schema or {}
    if id(schema) not in _VALIDATORS:
        _VALIDATORS[id(schema)] = (schema, Draft7Validator(schema))
    return _VALIDATORS[id(schema)][1]


def prune(value: Any, schema: dict[str, Any], path: str, unknown: list[str]) -> None:
    """Drop fields the structural schema does not declare, noting their paths."""
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            for key, sub in (props or {}).items():
                if key in value:
                    prune(value[key], sub, f"{path}.{key}", unknown)
            return
        if props is not None:
            for key in list(value):
                if key in props:
                    prune(value[key], props[key], f"{path}.{key}", unknown)
                else:
                    unknown.append(f"{path}.{key}")
                    del value[key]
        elif isinstance(extra, dict):
            for key in value:
                prune(value[key], extra, f"{path}.{key}", unknown)
        elif extra is not True:
            for key in list(value):
                unknown.append(f"{path}.{key}")
                del value[key]
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            prune(item, schema["items"], f"{path}[{i}]", unknown)


def apply_defaults(value: Any, schema: dict[str, Any]) -> None:
    """Set the `default:` of every field the schema declares one for and the object lacks
    (inside objects that are there), as the API server does on every write."""
    if isinstance(value, dict):
        for key, sub in (schema.get("properties") or {}).items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                apply_defaults(value[key], sub)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict) and not schema.get("properties"):
            for item in value.values():
                apply_defaults(item, extra)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            apply_defaults(item, schema["items"])


def check_custom(resource: Resource, obj: dict[str, Any], field_validation: str | None
                 ) -> list[str]:
    """Prune, default and validate against the CRD schema; returns warnings (unknown
    fields)."""
    schema = resource.schema or {}
    unknown: list[str] = []
    for key in list(obj):
        if key in ("apiVersion", "kind"):
            continue
        if key == "metadata":
            for meta_key in list(obj["metadata"]):
                if meta_key not in OBJECT_META:
                    unknown.append(f".metadata.{meta_key}")
                    del obj["metadata"][meta_key]
            continue
        sub = (schema.get("properties") or {}).get(key)
        if sub is None:
            unknown.append(f".{key}")
            del obj[key]
        else:
            prune(obj[key], sub, f".{key}", unknown)
    for key, sub in (schema.get("properties") or {}).items():
        if key in obj and key not in ("apiVersion", "kind", "metadata"):
            apply_defaults(obj[key], sub)
    name = str(obj.get("metadata", {}).get("name", ""))
    if unknown and field_validation == "Strict":
        raise ApiError(422, f'{resource.kind} in version "{resource.version}" cannot be '
                       f"handled as a {resource.kind}: strict decoding error: "
                       + ", ".join(f'unknown field "{u[1:]}"' for u in unknown))
    errors = sorted(_validator(resource).iter_errors(
        {k: v for k, v in obj.items() if k != "metadata"}),
        key=lambda e: [str(p) for p in e.absolute_path])
    if errors:
        causes = [(".".join(str(p) for p in e.absolute_path) or "(object)", e.message)
                  for e in errors[:10]]
        raise invalid(resource.kind, name, causes)
    if field_validation == "Ignore":
        return []
    return [f'unknown field "{u[1:]}"' for u in unknown]


# ----- pods -------------------------------------------------------------------------------
def check_pod_create(pod: dict[str, Any]) -> None:
    spec = pod.get("spec") or {}
    name = pod["metadata"].get("name", "")
    containers = spec.get("containers")
    causes = []
    if not isinstance(containers, list) or not containers:
        causes.append(("spec.containers", "Required value"))
    else:
        for i, c in enumerate(containers):
            if not isinstance(c, dict) or not c.get("name"):
                causes.append((f"spec.containers[{i}].name", "Required value"))
            if not isinstance(c, dict) or not c.get("image"):
                causes.append((f"spec.containers[{i}].image", "Required value"))
    if spec.get("nodeName") and spec.get("schedulingGates"):
        causes.append(("spec.nodeName", "Forbidden: cannot be set until all schedulingGates "
                       "have been cleared"))
    gates = [g.get("name") for g in spec.get("schedulingGates") or []]
    if len(gates) != len(set(gates)):
        causes.append(("spec.schedulingGates", "Duplicate value"))
    if causes:
        raise invalid("Pod", name, causes)


_MUTABLE_WHEN_GATED = ("nodeSelector", "affinity", "schedulingGates")


def check_pod_update(old: dict[str, Any], new: dict[str, Any]) -> None:
    """The update rules of ValidatePodUpdate that matter to a scheduler."""
    name = old["metadata"]["name"]
    before, after = old.get("spec") or {}, new.get("spec") or {}
    gated = bool(before.get("schedulingGates"))
    causes = []
    old_gates = {g.get("name") for g in before.get("schedulingGates") or []}
    for gate in after.get("schedulingGates") or []:
        if gate.get("name") not in old_gates:
            causes.append(("spec.schedulingGates", "Forbidden: only deletion is allowed, but "
                           f"found new scheduling gate '{gate.get('name')}'"))
    old_sel, new_sel = before.get("nodeSelector") or {}, after.get("nodeSelector") or {}
    if old_sel != new_sel:
        if not gated:
            causes.append(("spec", "Forbidden: pod updates may not change fields other than "
                           "`spec.containers[*].image`, `spec.initContainers[*].image`, "
                           "`spec.activeDeadlineSeconds`, `spec.tolerations` (only additions "
                           "to existing tolerations), `spec.terminationGracePeriodSeconds` "
                           "(allow it to be set to 1 if it was previously negative)"))
        elif any(new_sel.get(k) != v for k, v in old_sel.items()):
            causes.append(("spec.nodeSelector", "Invalid value: only additions to "
                           "spec.nodeSelector are allowed (no mutations or deletions)"))
    if before.get("affinity") != after.get("affinity") and not gated:
        causes.append(("spec.affinity", "Forbidden: only additions are allowed while the pod "
                       "has scheduling gates"))
    if before.get("nodeName") != after.get("nodeName"):
        causes.append(("spec.nodeName", "Forbidden: pod updates may not change the node; "
                       "bind the pod instead"))
    rest = {k: v for k, v in before.items() if k not in (*_MUTABLE_WHEN_GATED, "nodeName",
                                                          "containers", "initContainers",
                                                          "tolerations",
                                                          "activeDeadlineSeconds")}
    rest_new = {k: v for k, v in after.items() if k in rest or (
        k not in (*_MUTABLE_WHEN_GATED, "nodeName", "containers", "initContainers",
                  "tolerations", "activeDeadlineSeconds"))}
    images = [{k: v for k, v in c.items() if k != "image"} for c in before.get("containers", [])]
    new_images = [{k: v for k, v in c.items() if k != "image"}
                  for c in after.get("containers", [])]
    if rest != rest_new or images != new_images:
        causes.append(("spec", "Forbidden: pod updates may not change fields other than "
                       "`spec.containers[*].image`, `spec.initContainers[*].image`, "
                       "`spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to "
                       "existing tolerations), `spec.schedulingGates` (only deletions)"))
    old_tol = before.get("tolerations") or []
    if any(t not in (after.get("tolerations") or []) for t in old_tol):
        causes.append(("spec.tolerations", "Forbidden: existing toleration can not be "
                       "modified except its tolerationSeconds"))
    if causes:
        raise invalid("Pod", name, causes)


DEFAULT_TOLERATION_SECONDS = 300
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"


def default_tolerations(pod: dict[str, Any]) -> None:
    """The DefaultTolerationSeconds admission plugin: a pod without a toleration of the
    not-ready or unreachable NoExecute taint gets one for 300 s."""
    spec = pod.setdefault("spec", {})
    tolerations = list(spec.get("tolerations") or [])
    for key in (NOT_READY_TAINT, UNREACHABLE_TAINT):
        if not any(t.get("key") in (None, "", key) and t.get("effect") in (None, "", "NoExecute")
                   for t in tolerations):
            tolerations.append({"key": key, "operator": "Exists", "effect": "NoExecute",
                                "tolerationSeconds": DEFAULT_TOLERATION_SECONDS})
    spec["tolerations"] = tolerations

"""The three patch formats: JSON merge (RFC 7386), JSON Patch (RFC 6902) and
strategic merge (the real server's rules for core kinds, without the Go structs:
list merge keys come from a table of the fields Kubernetes declares them on)."""

from __future__ import annotations

import copy
from typing import Any

from voda_testing.kube.errors import ApiError

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"

# Field name -> merge key of its list items (patchStrategy=merge in the Kubernetes API).
MERGE_KEYS = {
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name",
    "volumes": "name", "env": "name", "volumeMounts": "mountPath",
    "imagePullSecrets": "name", "schedulingGates": "name", "conditions": "type",
    "ownerReferences": "uid", "hostAliases": "ip", "topologySpreadConstraints": "topologyKey",
    "taints": "key", "addresses": "type", "resourceClaims": "name",
}
# Lists of scalars merged as sets (patchStrategy=merge without a key).
MERGED_SCALAR_LISTS = frozenset({"finalizers"})
# Container ports merge on containerPort, service ports on port.
PORT_KEYS = ("containerPort", "port")


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# ----- JSON Patch ------------------------------------------------------------------------
def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ApiError(422, f"JSON patch path must start with '/': {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, parts: list[str], path: str) -> Any:
    node = doc
    for part in parts[:-1]:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise ApiError(422, f"the server rejected our request due to an error in our "
                           f"request: doc is missing path: {path!r}")
    return node


def _get(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    if not parts:
        return doc
    parent = _parent(doc, parts, path)
    last = parts[-1]
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent[int(last)]
    raise ApiError(422, f"the server rejected our request due to an error in our request: "
                   f"doc is missing key: {path!r}")


def _remove(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    parent = _parent(doc, parts, path)
    last = parts[-1]
    if isinstance(parent, dict) and last in parent:
        return parent.pop(last)
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent.pop(int(last))
    raise ApiError(422, f"the server rejected our request due to an error in our request: "
                   f"unable to remove nonexistent key: {path!r}")


def _add(doc: Any, path: str, value: Any, replace: bool = False) -> Any:
    parts = _pointer(path)
    if not parts:
        return value
    parent = _parent(doc, parts, path)
    last = parts[-1]
    if isinstance(parent, dict):
        if replace and last not in parent:
            raise ApiError(422, f"the server rejected our request due to an error in our "
                           f"request: replace operation does not apply: doc is missing key: "
                           f"{path}")
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-" and not replace:
            parent.append(value)
        elif last.isdigit() and int(last) <= len(parent) - (1 if replace else 0):
            if replace:
                parent[int(last)] = value
            else:
                parent.insert(int(last), value)
        else:
            raise ApiError(422, f"the server rejected our request due to an error in our "
                           f"request: index out of range: {path}")
    else:
        raise ApiError(422, f"the server rejected our request due to an error in our "
                       f"request: doc is missing path: {path!r}")
    return doc


def json_patch(target: Any, operations: Any) -> Any:
    if not isinstance(operations, list):
        raise ApiError(400, "json patch must be a list of operations")
    doc = copy.deepcopy(target)
    for op in operations:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise ApiError(400, f"invalid JSON patch operation: {op!r}")
        kind, path = op["op"], op["path"]
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op.get("value")))
        elif kind == "replace":
            doc = _add(doc, path, copy.deepcopy(op.get("value")), replace=True)
        elif kind == "remove":
            _remove(doc, path)
        elif kind == "test":
            if _get(doc, path) != op.get("value"):
                raise ApiError(422, f"the server rejected our request due to an error in "
                               f"our request: testing value {path} failed")
        elif kind == "move":
            doc = _add(doc, path, _remove(doc, op["from"]))
        elif kind == "copy":
            doc = _add(doc, path, copy.deepcopy(_get(doc, op["from"])))
        else:
            raise ApiError(400, f"unexpected JSON patch operation {kind!r}")
    return doc


# ----- strategic merge --------------------------------------------------------------------
def _merge_key(field: str, items: list[Any]) -> str | None:
    if field in MERGE_KEYS:
        return MERGE_KEYS[field]
    if field == "ports":
        for key in PORT_KEYS:
            if any(isinstance(i, dict) and key in i for i in items):
                return key
    return None


def strategic_merge(target: Any, patch: Any, field: str = "") -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    result = dict(target) if isinstance(target, dict) else {}
    retain = patch.get("$retainKeys")
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys") or key.startswith("$setElementOrder/"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            name = key.split("/", 1)[1]
            result[name] = [v for v in result.get(name) or [] if v not in value]
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list):
            result[key] = _merge_list(key, result.get(key), value)
        else:
            merged = strategic_merge(result.get(key), value, key)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _merge_list(field: str, current: Any, patch: list[Any]) -> list[Any]:
    current = list(current) if isinstance(current, list) else []
    if field in MERGED_SCALAR_LISTS:
        return current + [v for v in patch if v not in current]
    key = _merge_key(field, [*current, *patch])
    if key is None:
        if any(isinstance(i, dict) and i.get("$patch") == "replace" for i in patch):
            return [copy.deepcopy(i) for i in patch if not isinstance(i, dict) or "$patch" not in i]
        return copy.deepcopy(patch)
    result = list(current)
    for item in patch:
        if not isinstance(item, dict):
            raise ApiError(400, f"strategic merge patch: {field} items must be objects")
        if item.get("$patch") == "replace":
            return [copy.deepcopy(i) for i in patch if i.get("$patch") != "replace"]
        index = next((i for i, old in enumerate(result)
                      if isinstance(old, dict) and old.get(key) == item.get(key)), None)
        if item.get("$patch") == "delete":
            if index is not None:
                result.pop(index)
            continue
        if index is None:
            result.append({k: v for k, v in copy.deepcopy(item).items() if k != "$patch"})
        else:
            result[index] = strategic_merge(result[index], item, field)
    return result

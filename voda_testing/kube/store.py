"""The fake server's storage and its rules, usable in-process (the cluster simulator) and
behind HTTP (voda_testing.kube.server).

One global resourceVersion orders every write. Every write appends a Change to a
bounded history; a watch replays the history after its resourceVersion and then
follows new changes; a resourceVersion older than the history is 410 Gone. As
kube-apiserver's watch cache, each resource also keeps only a window of its own
events (`WatchWindow`: at most `capacity` events, none older than `max_age_seconds`):
a watch of that resource from before the window is 410 Gone too, so a client that
was away for a while relists in ordinary flows, not only after a compaction.
Stored objects are never mutated: a write stores a new dict, so readers may keep
what they got (and must not change it).
"""

from __future__ import annotations

import bisect
import copy
import json
import secrets
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from voda_testing.kube import patches, priority, validation
from voda_testing.kube.errors import ApiError, already_exists, conflict, invalid, not_found
from voda_testing.kube.resources import Resource, default_resources
from voda_testing.kube.selectors import Matcher, field_matcher, label_matcher

Obj = dict[str, Any]
# An admission check of a write (a validating webhook): (resource, new object, old object
# or None on create); raises ApiError to refuse it.
Admit = Callable[[Resource, Obj, "Obj | None"], None]
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
DEFAULT_POD_GRACE_SECONDS = 30
TERMINAL_PHASES = ("Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class Change:
    rv: int
    resource: Resource
    type: str  # ADDED, MODIFIED, DELETED
    object: Obj
    old: Obj | None


def timestamp(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def get_path(obj: Any, path: str) -> Any:
    for part in path.strip(".").split("."):
        obj = obj.get(part) if isinstance(obj, dict) else None
    return obj


def set_path(obj: Obj, path: str, value: Any) -> None:
    parts = path.strip(".").split(".")
    for part in parts[:-1]:
        obj = obj.setdefault(part, {})
    obj[parts[-1]] = value


@dataclass(frozen=True, slots=True)
class WatchWindow:
    """How much of each resource's event history a watch may resume from. kube-apiserver
    keeps 100 to 102,400 events per resource, growing only while they are younger than
    75 s; the stand-in keeps a fixed, smaller window, so clients meet 410 Gone often."""

    capacity: int = 1000
    max_age_seconds: float = 75.0


def _copied(obj: Any) -> Any:
    """A deep copy of a JSON document (a tenth of copy.deepcopy's time, which dominated
    creating 100,000 pods); anything else is copied with deepcopy."""
    try:
        return json.loads(json.dumps(obj))
    except (TypeError, ValueError):
        return copy.deepcopy(obj)


def _body(obj: Obj) -> Obj:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


class Store:
    def __init__(self, resources: Iterable[Resource] | None = None,
                 history_limit: int = 200_000, clock: Callable[[], float] = time.time,
                 window: WatchWindow | None = None) -> None:
        self.lock = threading.RLock()
        self.clock = clock
        self.resources: dict[tuple[str, str, str], Resource] = {}
        self.by_name: dict[str, Resource] = {}
        for r in resources if resources is not None else default_resources():
            self.resources[(r.group, r.version, r.plural)] = r
            self.by_name.setdefault(r.key, r)
            self.by_name.setdefault(r.plural, r)
        self.objects: dict[str, dict[tuple[str, str], Obj]] = {
            r.key: {} for r in self.resources.values()}
        self.rv = 0
        self.history: deque[Change] = deque()
        self.history_limit = history_limit
        self.compacted = 0  # watches must start at or after this resourceVersion
        self.window = window or WatchWindow()
        # resource key -> (resourceVersion, monotonic time) of the events it keeps, and the
        # resourceVersion of the last event it forgot (watches must start at or after it)
        self.recent: dict[str, deque[tuple[int, float]]] = {}
        self.forgotten: dict[str, int] = {}
        self.listeners: list[Callable[[Change], None]] = []
        self._local = threading.local()  # warnings of this thread's last write
        # uid -> (resource key, namespace, name), and owner uid -> dependents' uids
        self.uids: dict[str, tuple[str, str, str]] = {}
        self.owned: dict[str, set[str]] = {}
        self.gone: set[str] = set()  # uids of objects removed, for the garbage collector
        # resource key -> its objects' keys in (namespace, name) order, the order etcd keeps
        # them in, and the objects in that order (built at the first list, then kept as
        # objects come, change and go): a list's snapshot is a copy of the second
        self._order: dict[str, tuple[list[tuple[str, str]], list[Obj]]] = {}
        for ns in DEFAULT_NAMESPACES:
            self.create("namespaces", "", {"metadata": {"name": ns}})

    # ----- lookup ------------------------------------------------------------------------
    def resource(self, what: str | Resource) -> Resource:
        if isinstance(what, Resource):
            return what
        try:
            return self.by_name[what]
        except KeyError:
            raise ApiError(404, f"the server could not find the requested resource ({what})"
                           ) from None

    def find(self, group: str, version: str, plural: str) -> Resource:
        try:
            return self.resources[(group, version, plural)]
        except KeyError:
            raise ApiError(404, "the server could not find the requested resource") from None

    # ----- history and listeners -----------------------------------------------------------
    def _commit(self, resource: Resource, kind: str, obj: Obj, old: Obj | None) -> Obj:
        self.rv += 1
        meta = dict(obj["metadata"])
        meta["resourceVersion"] = str(self.rv)
        obj = {**obj, "metadata": meta}
        table = self.objects[resource.key]
        key = (meta.get("namespace", ""), meta["name"])
        uid = meta["uid"]
        old_owners = {r.get("uid") for r in (old or {}).get("metadata", {}).get(
            "ownerReferences") or []}
        new_owners = set() if kind == "DELETED" else {
            r.get("uid") for r in meta.get("ownerReferences") or []}
        for owner in old_owners - new_owners:
            self.owned.get(owner, set()).discard(uid)
        for owner in new_owners - old_owners:
            self.owned.setdefault(owner, set()).add(uid)
        kept = self._order.get(resource.key)
        if kept is not None:
            keys, objects = kept
            at = bisect.bisect_left(keys, key)
            there = at < len(keys) and keys[at] == key
            if kind == "DELETED" and there:
                del keys[at], objects[at]
            elif kind != "DELETED" and there:
                objects[at] = obj
            elif kind != "DELETED":
                keys.insert(at, key)
                objects.insert(at, obj)
        if kind == "DELETED":
            table.pop(key, None)
            self.uids.pop(uid, None)
            self.gone.add(uid)
            if not self.owned.get(uid):
                self.owned.pop(uid, None)
        else:
            table[key] = obj
            self.uids[uid] = (resource.key, *key)
        change = Change(self.rv, resource, kind, obj, old)
        self.history.append(change)
        while len(self.history) > self.history_limit:
            self.compacted = self.history.popleft().rv
        self.recent.setdefault(resource.key, deque()).append((self.rv, time.monotonic()))
        self._expire(resource.key)
        for listener in list(self.listeners):
            listener(change)
        return obj

    def compact(self) -> None:
        """Forget the history: a watch from any earlier resourceVersion gets 410 Gone."""
        with self.lock:
            self.history.clear()
            self.compacted = self.rv

    def _expire(self, key: str) -> None:
        """Forget the events of one resource beyond its watch window."""
        recent = self.recent.get(key)
        if not recent:
            return
        oldest = time.monotonic() - self.window.max_age_seconds
        while recent and (len(recent) > self.window.capacity or recent[0][1] < oldest):
            self.forgotten[key] = recent.popleft()[0]

    def oldest_watchable(self, resource: str | Resource) -> int:
        """The oldest resourceVersion a watch of `resource` may start from."""
        key = self.resource(resource).key
        with self.lock:
            self._expire(key)
            return max(self.compacted, self.forgotten.get(key, 0))

    def subscribe(self, since: int | None, listener: Callable[[Change], None],
                  resource: str | Resource | None = None
                  ) -> tuple[list[Change], Callable[[], None]]:
        """Changes after `since` (None: none) and a listener for what follows, atomically;
        with `resource`, `since` must also be inside that resource's watch window."""
        with self.lock:
            oldest = self.compacted if resource is None else self.oldest_watchable(resource)
            if since is not None and since < oldest:
                raise ApiError(410, f"too old resource version: {since} ({oldest})")
            replay = [c for c in self.history if c.rv > since] if since is not None else []
            self.listeners.append(listener)

        def unsubscribe() -> None:
            with self.lock:
                if listener in self.listeners:
                    self.listeners.remove(listener)

        return replay, unsubscribe

    # ----- reads ----------------------------------------------------------------------------
    def get(self, what: str | Resource, namespace: str, name: str) -> Obj:
        resource = self.resource(what)
        ns = namespace if resource.namespaced else ""
        with self.lock:
            obj = self.objects[resource.key].get((ns, name))
        if obj is None:
            raise not_found(resource.plural, name, resource.group)
        return obj

    def try_get(self, what: str | Resource, namespace: str, name: str) -> Obj | None:
        resource = self.resource(what)
        ns = namespace if resource.namespaced else ""
        return self.objects[resource.key].get((ns, name))

    def list(self, what: str | Resource, namespace: str | None = None,
             label_selector: str | None = None, field_selector: str | None = None
             ) -> tuple[list[Obj], int]:
        resource = self.resource(what)
        labels = label_matcher(label_selector)
        fields = field_matcher(field_selector, resource.field_labels)
        with self.lock:
            items = [o for (ns, _), o in self.objects[resource.key].items()
                     if (not namespace or ns == namespace) and _matches(o, labels, fields)]
            return items, self.rv

    def ordered(self, what: str | Resource, namespace: str | None = None
                ) -> tuple[list[Obj], int]:
        """Every object (of `namespace`) by namespace and name, the order etcd keeps keys
        in, and the store's resourceVersion: what a paged list reads on."""
        resource = self.resource(what)
        with self.lock:
            table = self.objects[resource.key]
            kept = self._order.get(resource.key)
            if kept is None:
                keys = sorted(table)
                kept = self._order[resource.key] = (keys, [table[key] for key in keys])
            keys, objects = kept
            if namespace:  # its keys are one range, as under etcd's prefix
                return objects[bisect.bisect_left(keys, (namespace,)):
                               bisect.bisect_left(keys, (namespace + "\0",))], self.rv
            return objects[:], self.rv

    # ----- writes ---------------------------------------------------------------------------
    def create(self, what: str | Resource, namespace: str, obj: Obj, dry_run: bool = False,
               field_validation: str | None = None, admit: Admit | None = None) -> Obj:
        resource = self.resource(what)
        new = _copied(obj)
        if not isinstance(new, dict):
            raise ApiError(400, "the body of the request must be an object")
        if new.get("kind") not in (None, resource.kind):
            raise ApiError(400, f"the kind {new.get('kind')!r} of the body does not match "
                           f"the resource {resource.plural}")
        meta = new.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise ApiError(400, "metadata must be an object")
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = f"{meta['generateName']}{secrets.token_hex(3)[:5]}"
        ns = (namespace or meta.get("namespace") or "") if resource.namespaced else ""
        if resource.namespaced:
            if meta.get("namespace") not in (None, "", ns):
                raise ApiError(400, "the namespace of the provided object does not match "
                               "the namespace sent on the request")
            if not ns:
                raise ApiError(400, "a namespaced object needs a namespace")
            meta["namespace"] = ns
        new["apiVersion"] = resource.api_version
        new["kind"] = resource.kind
        validation.check_meta(resource, new)
        warnings = self._check_body(resource, new, field_validation)
        if admit is not None:
            admit(resource, new, None)
        if resource.kind == "Pod":
            validation.check_pod_create(new)
            self._admit_priority(new)
            validation.default_tolerations(new)
            new.setdefault("status", {}).setdefault("phase", "Pending")
            new["spec"].setdefault("schedulerName", "default-scheduler")
            new["spec"].setdefault("restartPolicy", "Always")
        with self.lock:
            if ns and resource.plural != "namespaces":
                ns_obj = self.objects["namespaces"].get(("", ns))
                if ns_obj is None:
                    raise not_found("namespaces", ns)
                if ns_obj["metadata"].get("deletionTimestamp"):
                    raise ApiError(403, f'{resource.plural} "{meta["name"]}" is forbidden: '
                                   f"unable to create new content in namespace {ns} because "
                                   "it is being terminated")
            if (ns, meta["name"]) in self.objects[resource.key]:
                raise already_exists(resource.plural, meta["name"], resource.group)
            for k in ("deletionTimestamp", "deletionGracePeriodSeconds", "resourceVersion"):
                meta.pop(k, None)
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = timestamp(self.clock())
            meta["generation"] = 1
            if dry_run:
                return {**new, "metadata": {**meta, "resourceVersion": str(self.rv)}}
            stored = self._commit(resource, "ADDED", new, None)
            self._collect_if_orphaned(resource, stored)
        self._local.warnings = warnings
        return stored

    def _admit_priority(self, pod: Obj) -> None:
        if "priorityclasses" not in self.by_name:
            return
        priority.admit(pod, lambda name: self.try_get("priorityclasses", "", name),
                       lambda: self.list("priorityclasses")[0])

    def _check_body(self, resource: Resource, obj: Obj, field_validation: str | None
                    ) -> list[str]:
        if resource.custom:
            return validation.check_custom(resource, obj, field_validation)
        return []

    def update(self, what: str | Resource, namespace: str, name: str, obj: Obj,
               subresource: str | None = None, dry_run: bool = False,
               field_validation: str | None = None, admit: Admit | None = None) -> Obj:
        """PUT: a whole object; a resourceVersion that is not the current one is 409."""
        resource = self.resource(what)
        new = _copied(obj)
        if not isinstance(new, dict) or not isinstance(new.get("metadata"), dict):
            raise ApiError(400, "the body of the request must be an object with metadata")
        if new["metadata"].get("name") not in (None, name):
            raise ApiError(400, "the name of the object does not match the name on the URL")
        with self.lock:
            old = self.get(resource, namespace, name)
            sent = new["metadata"].get("resourceVersion")
            if sent and sent != old["metadata"]["resourceVersion"]:
                raise conflict(resource.plural, name, "the object has been modified; please "
                               "apply your changes to the latest version and try again",
                               resource.group)
            return self._write(resource, old, new, subresource, dry_run, field_validation,
                               admit)

    def patch(self, what: str | Resource, namespace: str, name: str, body: Any,
              content_type: str, subresource: str | None = None, dry_run: bool = False,
              field_validation: str | None = None, admit: Admit | None = None) -> Obj:
        resource = self.resource(what)
        with self.lock:
            old = self.get(resource, namespace, name)
            new = apply_patch(resource, old, body, content_type)
            _check_uid_kept(resource, old, new)
            sent = (new.get("metadata") or {}).get("resourceVersion")
            if sent and sent != old["metadata"]["resourceVersion"]:
                raise conflict(resource.plural, name, "the object has been modified; please "
                               "apply your changes to the latest version and try again",
                               resource.group)
            return self._write(resource, old, new, subresource, dry_run, field_validation,
                               admit)

    def _write(self, resource: Resource, old: Obj, new: Obj, subresource: str | None,
               dry_run: bool, field_validation: str | None, admit: Admit | None = None
               ) -> Obj:
        name = old["metadata"]["name"]
        if subresource == "status":
            merged = {**old, "status": new.get("status")}
            if merged["status"] is None:
                merged.pop("status")
            new = merged
        else:
            if "status" in resource.subresources:
                if "status" in old:
                    new["status"] = old["status"]
                else:
                    new.pop("status", None)
            meta = new.setdefault("metadata", {})
            for k in ("uid", "creationTimestamp", "namespace", "deletionTimestamp",
                      "deletionGracePeriodSeconds", "generation"):
                if k in old["metadata"]:
                    meta[k] = old["metadata"][k]
                else:
                    meta.pop(k, None)
            meta["name"] = name
            new["apiVersion"], new["kind"] = resource.api_version, resource.kind
            validation.check_meta(resource, new)
            self._local.warnings = self._check_body(resource, new, field_validation)
            if admit is not None:
                admit(resource, new, old)
            if resource.kind == "Pod":
                validation.check_pod_update(old, new)
            if _body(new) != _body(old):
                meta["generation"] = int(old["metadata"].get("generation", 1)) + 1
            if old["metadata"].get("deletionTimestamp") and not meta.get("finalizers"):
                if dry_run:
                    return new
                return self._remove(resource, old)
        if dry_run:
            return new
        if new == old or (_body(new) == _body(old) and new.get("status") == old.get("status")
                          and {k: v for k, v in new["metadata"].items()
                               if k != "resourceVersion"}
                          == {k: v for k, v in old["metadata"].items()
                              if k != "resourceVersion"}):
            return old  # a no-op write does not move the resourceVersion
        stored = self._commit(resource, "MODIFIED", new, old)
        self._collect_if_orphaned(resource, stored)
        return stored

    def bind(self, namespace: str, name: str, node: str, uid: str | None = None,
             resource_version: str | None = None) -> Obj:
        """pods/binding: set spec.nodeName once, only on an ungated pod; the Binding's
        metadata.uid and resourceVersion, when set, are preconditions (409 otherwise)."""
        with self.lock:
            pod = self.get("pods", namespace, name)
            _binding_preconditions(pod, uid, resource_version)
            spec = pod.get("spec") or {}
            if pod["metadata"].get("deletionTimestamp"):
                raise conflict("pods/binding", name, f"pod {name} is being deleted, cannot be "
                               "assigned to a host")
            if spec.get("nodeName"):
                raise conflict("pods/binding", name, f"pod {name} is already assigned to node "
                               f'"{spec["nodeName"]}"')
            if spec.get("schedulingGates"):
                raise conflict("pods/binding", name, f"pod {name} has non-empty "
                               ".spec.schedulingGates")
            status = dict(pod.get("status") or {})
            conditions = [c for c in status.get("conditions") or []
                          if c.get("type") != "PodScheduled"]
            conditions.append({"type": "PodScheduled", "status": "True",
                               "lastTransitionTime": timestamp(self.clock())})
            status["conditions"] = conditions
            status.pop("nominatedNodeName", None)
            new = {**pod, "spec": {**spec, "nodeName": node}, "status": status}
            return self._commit(self.resource("pods"), "MODIFIED", new, pod)

    # ----- deletion ---------------------------------------------------------------------------
    def delete(self, what: str | Resource, namespace: str, name: str,
               propagation: str | None = None, grace_seconds: int | None = None,
               preconditions: dict[str, str] | None = None, dry_run: bool = False) -> Obj:
        """Delete as the real server does: finalizers and graceful pod deletion keep the
        object (with a deletionTimestamp) until they are done; dependents are deleted
        (Background, Foreground) or orphaned (Orphan) through their ownerReferences."""
        resource = self.resource(what)
        with self.lock:
            obj = self.get(resource, namespace, name)
            meta = obj["metadata"]
            pre = preconditions or {}
            if pre.get("uid") and pre["uid"] != meta["uid"]:
                raise conflict(resource.plural, name, "Precondition failed: UID in precondition: "
                               f"{pre['uid']}, UID in object meta: {meta['uid']}", resource.group)
            if pre.get("resourceVersion") and pre["resourceVersion"] != meta["resourceVersion"]:
                raise conflict(resource.plural, name, "the object has been modified; please "
                               "apply your changes to the latest version and try again",
                               resource.group)
            if dry_run:
                return obj
            policy = propagation or ("Orphan" if "orphan" in (meta.get("finalizers") or [])
                                     else "Background")
            if policy not in ("Background", "Foreground", "Orphan"):
                raise ApiError(400, f"propagationPolicy: unsupported value {policy!r}")
            grace = self._grace(resource, obj, grace_seconds)
            finalizers = list(meta.get("finalizers") or [])
            if policy == "Foreground" and self._dependents(meta["uid"]):
                finalizers = [*finalizers, "foregroundDeletion"]
            if policy == "Orphan":
                self._orphan(meta["uid"])
            if finalizers or grace > 0:
                if meta.get("deletionTimestamp") and grace > 0:
                    return obj
                new_meta = {**meta, "finalizers": finalizers} if finalizers else dict(meta)
                new_meta["deletionTimestamp"] = meta.get("deletionTimestamp") or timestamp(
                    self.clock() + grace)
                new_meta["deletionGracePeriodSeconds"] = grace
                marked = self._commit(resource, "MODIFIED", {**obj, "metadata": new_meta}, obj)
                if "foregroundDeletion" in finalizers:
                    self._delete_dependents(meta["uid"], "Foreground")
                    self._finish_foreground(resource, marked)
                if not finalizers and grace > 0:
                    return marked
                return self.objects[resource.key].get(
                    (meta.get("namespace", ""), name), marked)
            return self._remove(resource, obj)

    def _grace(self, resource: Resource, obj: Obj, grace_seconds: int | None) -> int:
        if resource.kind != "Pod":
            return 0
        spec = obj.get("spec") or {}
        if not spec.get("nodeName") or (obj.get("status") or {}).get("phase") in TERMINAL_PHASES:
            return 0
        if grace_seconds is not None:
            return max(0, int(grace_seconds))
        return int(spec.get("terminationGracePeriodSeconds", DEFAULT_POD_GRACE_SECONDS))

    def _remove(self, resource: Resource, obj: Obj) -> Obj:
        gone = self._commit(resource, "DELETED", obj, obj)
        uid = obj["metadata"]["uid"]
        self._delete_dependents(uid, "Background")
        for owner_uid in [r.get("uid") for r in obj["metadata"].get("ownerReferences") or []]:
            owner = self._by_uid(owner_uid)
            if owner is not None:
                self._finish_foreground(*owner)
        if resource.plural == "namespaces":
            ns = obj["metadata"]["name"]
            for key, table in self.objects.items():
                r = self.by_name[key]
                for (obj_ns, name) in [k for k in table if k[0] == ns]:
                    if (obj_ns, name) in table:
                        self.delete(r, obj_ns, name, grace_seconds=0)
        return gone

    def _collect_if_orphaned(self, resource: Resource, obj: Obj) -> None:
        """The garbage collector's rule: an object whose owners are all gone is deleted in
        the background. A controller that read its owner just before the owner was deleted
        creates such a dependent (a ReplicaSet's pod after its Deployment's deletion).
        Owners this store never held count as present, as fixtures name made-up ones."""
        meta = obj["metadata"]
        refs = meta.get("ownerReferences") or []
        if refs and not meta.get("deletionTimestamp") and all(
                r.get("uid") in self.gone for r in refs):
            self.delete(resource, meta.get("namespace", ""), meta["name"])

    def _dependents(self, uid: str) -> list[tuple[Resource, Obj]]:
        out = []
        for dep in sorted(self.owned.get(uid, ())):
            found = self._by_uid(dep)
            if found is not None:
                out.append(found)
        return out

    def _by_uid(self, uid: str | None) -> tuple[Resource, Obj] | None:
        where = self.uids.get(uid or "")
        if where is None:
            return None
        key, ns, name = where
        obj = self.objects[key].get((ns, name))
        return (self.by_name[key], obj) if obj is not None else None

    def warnings(self) -> list[str]:
        """Warnings of this thread's last write (unknown fields a custom resource lost)."""
        return list(getattr(self._local, "warnings", []))

    def _delete_dependents(self, uid: str, policy: str) -> None:
        for resource, dep in self._dependents(uid):
            meta = dep["metadata"]
            current = self.objects[resource.key].get((meta.get("namespace", ""), meta["name"]))
            if current is None or current["metadata"].get("deletionTimestamp"):
                continue
            self.delete(resource, meta.get("namespace", ""), meta["name"],
                        propagation="Background" if policy == "Background" else policy)

    def _orphan(self, uid: str) -> None:
        for resource, dep in self._dependents(uid):
            refs = [r for r in dep["metadata"]["ownerReferences"] if r.get("uid") != uid]
            self._commit(resource, "MODIFIED",
                         {**dep, "metadata": {**dep["metadata"], "ownerReferences": refs}}, dep)

    def _finish_foreground(self, resource: Resource, owner: Obj) -> None:
        meta = owner["metadata"]
        current = self.objects[resource.key].get((meta.get("namespace", ""), meta["name"]))
        if current is None or "foregroundDeletion" not in (
                current["metadata"].get("finalizers") or []):
            return
        if self._dependents(meta["uid"]):
            return
        finalizers = [f for f in current["metadata"]["finalizers"] if f != "foregroundDeletion"]
        if finalizers:
            self._commit(resource, "MODIFIED", {**current, "metadata": {
                **current["metadata"], "finalizers": finalizers}}, current)
        else:
            self._remove(resource, current)


def _check_uid_kept(resource: Resource, old: Obj, new: Obj) -> None:
    """A patch naming another uid (written for an earlier object of the same name) is refused,
    status subresource included, as the real server's metadata validation does."""
    uid = (new.get("metadata") or {}).get("uid")
    if uid and uid != old["metadata"]["uid"]:
        raise invalid(resource.kind, old["metadata"]["name"], [
            ("metadata.uid", f'Invalid value: "{str(uid)[:60]}": field is immutable')])


def _binding_preconditions(pod: Obj, uid: str | None, resource_version: str | None) -> None:
    """kube-apiserver's wording: the storage precondition failure, as a Conflict on pods."""
    meta = pod["metadata"]
    failed = ""
    if uid and uid != meta["uid"]:
        failed = f"UID in precondition: {uid}, UID in object meta: {meta['uid']}"
    elif resource_version and resource_version != meta["resourceVersion"]:
        failed = (f"ResourceVersion in precondition: {resource_version}, ResourceVersion in "
                  f"object meta: {meta['resourceVersion']}")
    if failed:
        raise conflict("pods", meta["name"], "StorageError: invalid object, Code: 4, Key: "
                       f"/registry/pods/{meta['namespace']}/{meta['name']}, ResourceVersion: "
                       f"0, AdditionalErrorMsg: Precondition failed: {failed}")


def _matches(obj: Obj, labels: Matcher | None, fields: Matcher | None) -> bool:
    return (labels is None or labels(obj)) and (fields is None or fields(obj))


def apply_patch(resource: Resource, old: Obj, body: Any, content_type: str) -> Obj:
    kind = content_type.split(";")[0].strip()
    if kind == patches.MERGE:
        if not isinstance(body, dict):
            raise ApiError(400, "a merge patch must be a JSON object")
        return patches.merge_patch(old, body)
    if kind == patches.JSON_PATCH:
        return patches.json_patch(old, body)
    if kind == patches.STRATEGIC and not resource.custom:
        if not isinstance(body, dict):
            raise ApiError(400, "a strategic merge patch must be a JSON object")
        return patches.strategic_merge(old, body)
    accepted = [patches.JSON_PATCH, patches.MERGE]
    if not resource.custom:
        accepted.append(patches.STRATEGIC)
    raise ApiError(415, f"the body of the request was in an unknown format - accepted media "
                   f"types include: {', '.join(accepted)}")

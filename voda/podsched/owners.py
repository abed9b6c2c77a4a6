"""Which workload a pod belongs to, and the annotations of its owners.

A pod's gang is its top owner: a Deployment rather than the ReplicaSet between
them (so a rollout stays one workload), a Job, a StatefulSet, or the pod itself
when it has no controller. Owners of other kinds (custom resources) name the
gang but lend no annotations. Owners are read with GET and kept for `ttl`
seconds, so an annotation changed on a running workload applies within that.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from voda.podsched.model import Owner, Pod
from voda.podsched.read import controller_of

Obj = Mapping[str, Any]
READABLE = ("Job", "ReplicaSet", "Deployment", "StatefulSet")


@dataclass(frozen=True, slots=True)
class Workload:
    key: str  # namespace/Kind/name of the top owner
    layers: tuple[Mapping[str, str], ...]  # owners' annotations, nearest first


class Owners:
    def __init__(self, get: Callable[[str, str, str], Obj | None], clock: Callable[[], float],
                 ttl: float = 30.0) -> None:
        self._get = get
        self._clock = clock
        self.ttl = ttl
        self._cache: dict[tuple[str, str, str], tuple[float, Obj | None]] = {}

    def _read(self, namespace: str, owner: Owner) -> Obj | None:
        key = (owner.kind, namespace, owner.name)
        now = self._clock()
        cached = self._cache.get(key)
        if cached is not None and now - cached[0] < self.ttl:
            obj = cached[1]
            uid = None if obj is None else (obj.get("metadata") or {}).get("uid")
            if obj is None or not owner.uid or uid == owner.uid:
                return obj
        obj = self._get(owner.kind, namespace, owner.name)
        if obj is not None and owner.uid and (obj.get("metadata") or {}).get("uid") != owner.uid:
            obj = None  # a new object under the old name: not this pod's owner
        if len(self._cache) > 100_000:
            self._cache.clear()
        self._cache[key] = (now, obj)
        return obj

    def resolve(self, pod: Pod) -> Workload:
        """The pod's workload; the owners' GETs may raise (the caller retries later)."""
        owner = pod.owner
        if owner is None:
            return Workload(f"{pod.namespace}/Pod/{pod.name}", ())
        if owner.kind not in READABLE:
            return Workload(f"{pod.namespace}/{owner.kind}/{owner.name}", ())
        layers: list[Mapping[str, str]] = []
        top = owner
        obj = self._read(pod.namespace, owner)
        if obj is not None:
            layers.append(_annotations(obj))
            parent = controller_of(obj.get("metadata") or {})
            if owner.kind == "ReplicaSet" and parent is not None and parent.kind == "Deployment":
                top = parent
                deployment = self._read(pod.namespace, parent)
                if deployment is not None:
                    layers.append(_annotations(deployment))
        return Workload(f"{pod.namespace}/{top.kind}/{top.name}", tuple(layers))

    def forget(self, namespace: str, owner: Owner) -> None:
        self._cache.pop((owner.kind, namespace, owner.name), None)


def _annotations(obj: Obj) -> Mapping[str, str]:
    return {str(k): str(v) for k, v in ((obj.get("metadata") or {}).get("annotations")
                                        or {}).items()}

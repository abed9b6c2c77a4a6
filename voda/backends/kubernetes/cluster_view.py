"""What the cluster offers: nodes, their GPUs, type and topology, and who holds them.

The view is fed Node and Pod events (by informers, or directly in tests) and
answers, under one lock:

- `nodes()`: every node with allocatable GPUs, GPU type (a node label), topology
  (ordered label levels), readiness and cordon;
- `requested(node)`: what every bound pod there requests (CPU, memory, pods and any
  other resource, as kube-scheduler counts them), beside the node's `allocatable`;
- `held(node)`: GPUs held by bound pods (terminating ones included), by owner. A
  pod's owner is its `voda.io/job` label (a job Voda runs elastically); pods
  without it are held by no one Voda knows;
- claims: an owner (an elastic job, or any other scheduler sharing the view)
  claims GPUs on a node before its pods are bound there; `claim()` succeeds only
  if the GPUs are free, counting bound pods and every other owner's claims, so
  two schedulers sharing one view never hand out the same GPU twice;
- `capacity(owners)`: the core's Nodes as one scheduler sees them: usable nodes
  only (Ready, not cordoned), less the GPUs held or claimed by anyone but
  `owners`.

`version` moves whenever any of that changes; `on_change` is called (outside the
lock) after each change.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from voda.backends.kubernetes.settings import JOB_LABEL, KubernetesSettings
from voda.core.model import DEFAULT_GPU_TYPE, Node
from voda.podsched.model import PODS, NodeState, Taint
from voda.podsched.read import ObjectError, pod_requests
from voda.podsched.read import quantity as canonical

DEFAULT_PODS = 110  # kubelet's --max-pods, when a node does not say

Obj = dict[str, Any]
PodKey = tuple[str, str]
TERMINAL = ("Succeeded", "Failed")


@dataclass(frozen=True)
class NodeInfo:
    name: str
    gpus: int
    gpu_type: str = DEFAULT_GPU_TYPE
    topology: tuple[str | None, ...] = ()  # label values, widest domain first
    ready: bool = True
    schedulable: bool = True
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Obj, ...] = ()
    # status.allocatable in canonical units (cpu in millicores, memory in bytes)
    allocatable: Mapping[str, int] = field(default_factory=dict)

    @property
    def usable(self) -> bool:
        return self.ready and self.schedulable

    def state(self) -> NodeState:
        """The node as voda.podsched.filters sees it."""
        return NodeState(self.name, self.allocatable, self.labels, tuple(
            Taint(str(t.get("key", "")), str(t.get("value") or ""), str(t.get("effect", "")))
            for t in self.taints), self.ready, not self.schedulable)


def quantity(value: Any) -> int:
    text = str(value or "0").strip()
    try:
        return int(float(text[:-1]) * 1000) if text.endswith("k") else int(float(text))
    except ValueError:
        return 0


def pod_gpus(pod: Obj, resource: str) -> int:
    total = 0
    for container in (pod.get("spec") or {}).get("containers") or []:
        res = container.get("resources") or {}
        total += quantity((res.get("limits") or {}).get(
            resource, (res.get("requests") or {}).get(resource, 0)))
    return total


def holds(pod: Obj) -> bool:
    """A bound pod holds its GPUs until it ends or is gone (terminating ones too)."""
    return bool((pod.get("spec") or {}).get("nodeName")) and (
        (pod.get("status") or {}).get("phase") not in TERMINAL)


def allocatable_of(status: Obj) -> dict[str, int]:
    out = {}
    for resource, value in (status.get("allocatable") or {}).items():
        try:
            out[str(resource)] = canonical(value, str(resource), "status.allocatable")
        except ObjectError:
            out[str(resource)] = 0  # a node that reports nonsense offers nothing of it
    out.setdefault(PODS, DEFAULT_PODS)
    return out


def requests_of(pod: Obj) -> dict[str, int]:
    """What a bound pod takes of its node (its effective requests and one pod slot)."""
    try:
        out = pod_requests(pod.get("spec") or {})
    except ObjectError:
        out = {}
    out[PODS] = 1
    return out


def node_info(obj: Obj, settings: KubernetesSettings) -> NodeInfo:
    meta, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
    labels = dict(meta.get("labels") or {})
    ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                for c in status.get("conditions") or [])
    levels = settings.topology_labels[:-1]  # the last level is the node itself
    return NodeInfo(
        name=meta["name"],
        gpus=quantity((status.get("allocatable") or {}).get(settings.gpu_resource, 0)),
        gpu_type=labels.get(settings.gpu_type_label) or DEFAULT_GPU_TYPE,
        topology=tuple(labels.get(level) for level in levels),
        ready=ready,
        schedulable=not spec.get("unschedulable"),
        labels=labels,
        taints=tuple(spec.get("taints") or ()),
        allocatable=allocatable_of(status),
    )


def core_node(info: NodeInfo, gpus: int) -> Node:
    """The core's Node: the level above the node is its leaf, the levels above that its
    spine (joined, so equal names under different parents stay apart)."""
    levels = list(info.topology)
    leaf = spine = None
    if levels and levels[-1] is not None:
        leaf = "/".join(v or "-" for v in levels)
    if len(levels) > 1 and any(v is not None for v in levels[:-1]):
        spine = "/".join(v or "-" for v in levels[:-1])
    return Node(info.name, gpus, info.gpu_type, leaf=leaf, spine=spine)


class ClusterView:
    def __init__(self, settings: KubernetesSettings | None = None,
                 owner_label: str = JOB_LABEL) -> None:
        self.settings = settings or KubernetesSettings()
        self.owner_label = owner_label
        self.lock = threading.RLock()
        self.node_infos: dict[str, NodeInfo] = {}
        self.pods: dict[PodKey, tuple[str, str | None, int]] = {}  # -> (node, owner, GPUs)
        self.by_node: dict[str, dict[PodKey, tuple[str | None, int]]] = {}
        # bound pod -> (node, owner, requests); node -> owner -> summed requests
        self.bound: dict[PodKey, tuple[str, str | None, Mapping[str, int]]] = {}
        self.requests_on: dict[str, dict[str | None, dict[str, int]]] = {}
        self.claims: dict[str, dict[str, int]] = {}  # owner -> {node: GPUs}
        self.claims_on: dict[str, dict[str, int]] = {}  # node -> {owner: GPUs}, the same
        self.version = 0
        self.listeners: list[Callable[[], None]] = []
        # Others fed by the view's watches (the pod scheduler): called with each Node and
        # Pod event after the view took it; `informers` (set by watch_cluster) let a late
        # subscriber replay what was listed before it came.
        self.node_handlers: list[Callable[[str, Obj, Obj | None], None]] = []
        self.pod_handlers: list[Callable[[str, Obj, Obj | None], None]] = []
        self.informers: list[Any] = []

    # ----- feeding ---------------------------------------------------------------------------
    def on_node(self, kind: str, obj: Obj, old: Obj | None = None) -> None:
        name = obj["metadata"]["name"]
        with self.lock:
            if kind == "DELETED":
                changed = self.node_infos.pop(name, None) is not None
            else:
                info = node_info(obj, self.settings)
                changed = self.node_infos.get(name) != info
                self.node_infos[name] = info
            if changed:
                self.version += 1
        if changed:
            self._notify()

    def on_pod(self, kind: str, obj: Obj, old: Obj | None = None) -> None:
        meta = obj["metadata"]
        key = (meta.get("namespace", ""), meta["name"])
        entry = None
        taking = None
        if kind != "DELETED" and holds(obj):
            owner = (meta.get("labels") or {}).get(self.owner_label)
            taking = (obj["spec"]["nodeName"], owner, requests_of(obj))
            gpus = pod_gpus(obj, self.settings.gpu_resource)
            if gpus:
                entry = (obj["spec"]["nodeName"], owner, gpus)
        with self.lock:
            changed = self._take(key, taking)
            before = self.pods.get(key)
            if before == entry:
                if changed:
                    self.version += 1
            else:
                self._hold(key, before, entry)
        if changed or before != entry:
            self._notify()

    def _take(self, key: PodKey, taking: tuple[str, str | None, Mapping[str, int]] | None
              ) -> bool:
        """Index what a bound pod requests (under the lock); whether that changed."""
        before = self.bound.get(key)
        if before == taking:
            return False
        for sign, entry in ((-1, before), (1, taking)):
            if entry is None:
                continue
            node, owner, requests = entry
            owners = self.requests_on.setdefault(node, {})
            summed = owners.setdefault(owner, {})
            for resource, amount in requests.items():
                summed[resource] = summed.get(resource, 0) + sign * amount
            if sign < 0 and not any(summed.values()):
                del owners[owner]
                if not owners:
                    del self.requests_on[node]
        if taking is None:
            self.bound.pop(key, None)
        else:
            self.bound[key] = taking
        return True

    def _hold(self, key: PodKey, before: tuple[str, str | None, int] | None,
              entry: tuple[str, str | None, int] | None) -> None:
        """Index the GPUs a bound pod holds, by owner (under the lock)."""
        if before is not None:
            self.by_node.get(before[0], {}).pop(key, None)
            del self.pods[key]
        if entry is not None:
            self.pods[key] = entry
            self.by_node.setdefault(entry[0], {})[key] = (entry[1], entry[2])
        self.version += 1

    def _notify(self) -> None:
        for listener in list(self.listeners):
            listener()

    # ----- reads --------------------------------------------------------------------------------
    def nodes(self) -> list[NodeInfo]:
        with self.lock:
            return [self.node_infos[n] for n in sorted(self.node_infos)]

    def node(self, name: str) -> NodeInfo | None:
        with self.lock:
            return self.node_infos.get(name)

    def requested(self, node: str) -> dict[str, int]:
        """What the pods bound to `node` request, summed (terminating ones included)."""
        with self.lock:
            return self._requested(node)

    def _requested(self, node: str, counted: Callable[[str | None], bool] | None = None
                   ) -> dict[str, int]:
        out: dict[str, int] = {}
        for owner, summed in self.requests_on.get(node, {}).items():
            if counted is None or counted(owner):
                for resource, amount in summed.items():
                    out[resource] = out.get(resource, 0) + amount
        return out

    def held(self, node: str) -> dict[str | None, int]:
        """GPUs held by bound pods on `node`, by owner (None: no owner Voda knows)."""
        with self.lock:
            out: dict[str | None, int] = {}
            for owner, gpus in self.by_node.get(node, {}).values():
                out[owner] = out.get(owner, 0) + gpus
            return out

    def _taken(self, node: str, exclude: Collection[str] = (),
               counted: Callable[[str], bool] | None = None) -> int:
        """GPUs on `node` held or claimed by anyone not in `exclude` (and, given `counted`,
        only by owners it accepts; pods of no known owner always count). An owner's bound
        pods and claims on a node count once: the larger of the two."""
        held = self.held(node)
        claimed = self.claims_on.get(node, {})
        taken = held.get(None, 0)
        for owner in ({o for o in held if o is not None} | set(claimed)) - set(exclude):
            if counted is None or counted(owner):
                taken += max(held.get(owner, 0), claimed.get(owner, 0))
        return taken

    def free(self, node: str, exclude: Collection[str] = ()) -> int:
        with self.lock:
            info = self.node_infos.get(node)
            if info is None or not info.usable:
                return 0
            return max(0, info.gpus - self._taken(node, exclude))

    def capacity(self, owners: Callable[[str], bool] | Collection[str] = (),
                 shapes: Mapping[str, Mapping[str, int]] | None = None) -> list[Node]:
        """Usable nodes as the core sees them, less the GPUs of owners outside `owners`
        (a set of owner names, or a predicate on them).

        `shapes`: per node, what one GPU's worker needs of other resources (CPU, memory,
        pods...); a node then offers no more GPUs than such workers fit in what the pods
        of everyone outside `owners` leave (what `owners` run there themselves, workers
        and launchers, is theirs to share out)."""
        with self.lock:
            outside = ((lambda o: not owners(o)) if callable(owners)
                       else (lambda o, s=frozenset(owners): o not in s))
            out = []
            for name, info in sorted(self.node_infos.items()):
                if not info.usable:
                    continue
                gpus = max(0, info.gpus - self._taken(name, counted=outside))
                shape = None if shapes is None else shapes.get(name)
                if shape:
                    others = self._requested(name, lambda o: o is None or outside(o))
                    gpus = min(gpus, self._slots(info, shape, others))
                out.append(core_node(info, gpus))
            return out

    @staticmethod
    def _slots(info: NodeInfo, shape: Mapping[str, int], used: Mapping[str, int]) -> int:
        """Workers of `shape` that fit in what `used` leaves of the node."""
        most = None
        for resource, amount in shape.items():
            if amount > 0:
                left = max(0, info.allocatable.get(resource, 0) - used.get(resource, 0))
                most = left // amount if most is None else min(most, left // amount)
        return info.gpus if most is None else most

    # ----- claims ---------------------------------------------------------------------------------
    def claim(self, owner: str, node: str, gpus: int) -> bool:
        """Claim `gpus` more GPUs on `node` for `owner`, if they are free."""
        if gpus < 0:
            raise ValueError(f"gpus: must not be negative, got {gpus}")
        with self.lock:
            info = self.node_infos.get(node)
            if info is None or not info.usable:
                return False
            mine = self.claims.get(owner, {}).get(node, 0)
            if self._taken(node, exclude=(owner,)) + mine + gpus > info.gpus:
                return False
            self._set_claim(owner, node, mine + gpus)
            self.version += 1
        self._notify()
        return True

    def set_claims(self, owner: str, per_node: Mapping[str, int]) -> list[str]:
        """Replace `owner`'s claims; returns the nodes where they do not fit now (they are
        kept: the owner must not use those GPUs until they do)."""
        with self.lock:
            wanted = {n: c for n, c in per_node.items() if c > 0}
            if self.claims.get(owner, {}) == wanted:
                return self._overbooked(owner)
            for node in set(self.claims.get(owner, {})) | set(wanted):
                self._set_claim(owner, node, wanted.get(node, 0))
            self.version += 1
            over = self._overbooked(owner)
        self._notify()
        return over

    def fits(self, owner: str, node: str, gpus: int) -> bool:
        """Whether `owner` may have `gpus` GPUs on `node` in all: they are free of
        everyone else's pods and claims."""
        with self.lock:
            info = self.node_infos.get(node)
            if info is None or not info.usable:
                return False
            return self._taken(node, exclude=(owner,)) + gpus <= info.gpus

    def _overbooked(self, owner: str) -> list[str]:
        return sorted(n for n, c in self.claims.get(owner, {}).items()
                      if not self.fits(owner, n, c))

    def release(self, owner: str, node: str | None = None) -> None:
        with self.lock:
            claims = self.claims.get(owner)
            if not claims:
                return
            for name in list(claims) if node is None else [node]:
                self._set_claim(owner, name, 0)
            self.version += 1
        self._notify()

    def _set_claim(self, owner: str, node: str, gpus: int) -> None:
        """The one place claims change (under the lock): both indexes at once."""
        if gpus > 0:
            self.claims.setdefault(owner, {})[node] = gpus
            self.claims_on.setdefault(node, {})[owner] = gpus
            return
        mine, theirs = self.claims.get(owner), self.claims_on.get(node)
        if mine is not None:
            mine.pop(node, None)
            if not mine:
                del self.claims[owner]
        if theirs is not None:
            theirs.pop(owner, None)
            if not theirs:
                del self.claims_on[node]

    def claimed(self, owner: str) -> dict[str, int]:
        with self.lock:
            return dict(self.claims.get(owner, {}))


# Pods that have not ended, as kube-scheduler watches them: an ended pod holds nothing, and
# in a batch cluster the ended ones are most of the pods. One leaving the selection is
# DELETED for the watch's handlers.
NOT_ENDED = "status.phase!=Succeeded,status.phase!=Failed"


def watch_cluster(api: Any, view: ClusterView, watch_seconds: int = 300,
                  on_pod: Callable[[str, Obj, Obj | None], None] | None = None,
                  idle_seconds: float = 60.0) -> list[Any]:
    """Informers feeding `view`: every Node, and every pod that has not ended in every
    namespace (also handed to `on_pod` and the view's handlers, so no one else needs a
    second watch of them)."""
    from voda.backends.kubernetes.api import NODES, PODS
    from voda.backends.kubernetes.informer import Informer
    from voda.backends.kubernetes.slim import slim, slim_pod

    def nodes(kind: str, obj: Obj, old: Obj | None) -> None:
        view.on_node(kind, obj, old)
        for handler in list(view.node_handlers):
            handler(kind, obj, old)

    def pods(kind: str, obj: Obj, old: Obj | None) -> None:
        view.on_pod(kind, obj, old)
        if on_pod is not None:
            on_pod(kind, obj, old)
        for handler in list(view.pod_handlers):
            handler(kind, obj, old)

    view.informers = [Informer(api, NODES, nodes, watch_seconds=watch_seconds,
                               idle_seconds=idle_seconds, transform=slim),
                      Informer(api, PODS, pods, field_selector=NOT_ENDED,
                               watch_seconds=watch_seconds, idle_seconds=idle_seconds,
                               transform=lambda pod: slim_pod(pod, view.owner_label))]
    return list(view.informers)

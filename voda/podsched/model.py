"""Value types of the pod scheduler's decisions: pods, nodes, gangs, snapshots, outcomes.

Everything here is a frozen snapshot read from Kubernetes objects (voda.podsched.read
builds them); the decision functions never see the API objects themselves.
Resources are integers in their canonical unit: `cpu` in millicores, `memory`
and storage in bytes, everything else (`nvidia.com/gpu`, `pods`) in units.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

GPU = "nvidia.com/gpu"
CPU = "cpu"
MEMORY = "memory"
PODS = "pods"

_EMPTY: Mapping = MappingProxyType({})


def frozen(m: Mapping | None) -> Mapping:
    return MappingProxyType(dict(m)) if m else _EMPTY


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"  # NoSchedule, PreferNoSchedule, NoExecute


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""  # "" with operator Exists tolerates every taint
    operator: str = "Equal"  # Equal or Exists
    value: str = ""
    effect: str = ""  # "" tolerates every effect
    seconds: float | None = None  # tolerationSeconds (NoExecute): None tolerates for good


@dataclass(frozen=True, slots=True)
class Requirement:
    """One node selector requirement: `key operator values`."""

    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist, Gt, Lt
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SelectorTerm:
    """Requirements that must all hold; `fields` only knows `metadata.name`."""

    expressions: tuple[Requirement, ...] = ()
    fields: tuple[Requirement, ...] = ()


@dataclass(frozen=True, slots=True)
class VolumeTopology:
    """Where a pod's volume can be used: one of `terms` must match the node.

    From a bound PersistentVolume's required node affinity (`reason` is then
    kube-scheduler's "node(s) had volume node affinity conflict"), or from the
    StorageClass's allowedTopologies of a claim provisioned on the chosen node.
    """

    reason: str
    terms: tuple[SelectorTerm, ...]


@dataclass(frozen=True, slots=True)
class PodTerm:
    """A required pod anti-affinity term by `kubernetes.io/hostname`: no pod in `namespaces`
    whose labels meet every requirement of `selector` may share the node."""

    selector: tuple[Requirement, ...]
    namespaces: frozenset[str]


@dataclass(frozen=True, slots=True)
class Owner:
    kind: str
    name: str
    uid: str = ""


@dataclass(frozen=True, slots=True)
class Pod:
    """A pod as the scheduler sees it."""

    namespace: str
    name: str
    uid: str = ""
    requests: Mapping[str, int] = field(default_factory=dict)  # effective, per resource
    node_selector: Mapping[str, str] = field(default_factory=dict)
    # Required node affinity: any term must match. None: no required affinity.
    affinity: tuple[SelectorTerm, ...] | None = None
    tolerations: tuple[Toleration, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)
    owner: Owner | None = None  # the controlling owner reference
    priority: int = 0
    created: str = ""  # creationTimestamp, RFC 3339 (sorts in time order)
    node: str = ""  # spec.nodeName: "" while unbound
    phase: str = "Pending"
    labels: Mapping[str, str] = field(default_factory=dict)
    claims: tuple[str, ...] = ()  # PersistentVolumeClaims its volumes name (ephemeral too)
    host_ports: frozenset[tuple[str, str, int]] = frozenset()  # (hostIP, protocol, port)
    anti_affinity: tuple[PodTerm, ...] = ()  # required, by hostname
    preempts: bool = True  # preemptionPolicy is not Never
    nominated: str = ""  # status.nominatedNodeName
    # Constraints the scheduler does not evaluate (kube-scheduler's plugins do), named.
    unsupported: tuple[str, ...] = ()  # required ones: the pod waits
    ignored: tuple[str, ...] = ()  # preferences: the pod is placed without them
    # Resolved from the claims by the controller (voda.podsched.volumes) before a cycle.
    volume_topology: tuple[VolumeTopology, ...] = ()
    volume_error: str = ""  # why no node can take the pod's volumes now
    provision: tuple[str, ...] = ()  # unbound WaitForFirstConsumer claims: bound where it goes

    def __post_init__(self) -> None:
        object.__setattr__(self, "requests", frozen(self.requests))
        object.__setattr__(self, "node_selector", frozen(self.node_selector))
        object.__setattr__(self, "annotations", frozen(self.annotations))
        object.__setattr__(self, "labels", frozen(self.labels))

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def gpus(self) -> int:
        return self.requests.get(GPU, 0)

    @property
    def is_terminal(self) -> bool:
        return self.phase in ("Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class NodeState:
    """A node: what it offers and whether it takes pods."""

    name: str
    allocatable: Mapping[str, int] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    ready: bool = True
    unreachable: bool = False  # not Ready because its Ready condition is Unknown (or absent)
    unschedulable: bool = False  # cordoned
    leaf: str | None = None
    spine: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "allocatable", frozen(self.allocatable))
        object.__setattr__(self, "labels", frozen(self.labels))

    @property
    def gpus(self) -> int:
        return self.allocatable.get(GPU, 0)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The cluster at one moment: nodes in topology order and what is taken on each.

    `requested[node][resource]` sums the requests of every pod that holds the
    node (bound, or assumed by a binding not yet seen back, of any scheduler),
    plus GPUs the elastic backend planned there; `sensitive[node]` counts the
    latency-sensitive pods on it.
    """

    nodes: tuple[NodeState, ...] = ()
    requested: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    sensitive: Mapping[str, int] = field(default_factory=dict)
    # The pods that hold each node with host ports or required anti-affinity (always), or
    # every pod that holds it when `everyone` (the cycle has a pod with anti-affinity).
    neighbours: Mapping[str, tuple[Pod, ...]] = field(default_factory=dict)
    everyone: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "requested", MappingProxyType({n: frozen(r) for n, r in self.requested.items()})
        )
        object.__setattr__(self, "sensitive", frozen(self.sensitive))
        object.__setattr__(self, "neighbours", frozen(self.neighbours))

    def free(self, node: NodeState, resource: str) -> int:
        used = self.requested.get(node.name, _EMPTY).get(resource, 0)
        return node.allocatable.get(resource, 0) - used


class Strategy(StrEnum):
    CONSOLIDATED = "consolidated"
    DISTRIBUTED = "distributed"
    BALANCED = "balanced"


@dataclass(frozen=True, slots=True)
class Hints:
    """What a workload asks of its placement (annotations on the pod or its owners)."""

    gpu_count: int | None = None  # the whole gang's GPUs; None: every pod on its own
    strategy: Strategy = Strategy.CONSOLIDATED
    preferred_domain: str | None = None
    network_bandwidth: float | None = None  # Gbit/s
    latency_sensitive: bool = False
    required_topology: str | None = None  # a node label key: one domain of that level
    preferred_topology: str | None = None


@dataclass(frozen=True, slots=True)
class Gang:
    """The pods of one workload that wait for a node, with what the workload already holds.

    `key` names the workload (its top owner: a Deployment rather than its
    ReplicaSet, so a rollout stays one gang). `members` are its pods that hold
    a node now (node -> pods), `member_gpus` their GPUs (succeeded pods count:
    they were part of the gang). `recovering` says a pod of it was lost.
    """

    key: str
    pending: tuple[Pod, ...]
    hints: Hints = Hints()
    hint_errors: tuple[str, ...] = ()
    members: Mapping[str, int] = field(default_factory=dict)
    member_gpus: int = 0
    recovering: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "members", frozen(self.members))

    @property
    def is_gang(self) -> bool:
        return self.hints.gpu_count is not None


@dataclass(frozen=True, slots=True)
class Binding:
    pod: Pod
    node: str


class Outcome(StrEnum):
    BOUND = "bound"
    UNSCHEDULABLE = "unschedulable"
    WAITING = "waiting"  # a gang whose pods are not all there yet
    INVALID = "invalid"  # bad annotations


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do with a gang: bind pods (and why there), or leave it Pending (and why)."""

    gang: Gang
    outcome: Outcome
    bindings: tuple[Binding, ...] = ()
    reason: str = ""  # one sentence for the Event
    level: str = ""  # node, leaf, spine, cluster (bound only)
    domain: str = ""
    score: float = 0.0

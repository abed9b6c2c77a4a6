"""Value types of the decision path.

All types are frozen: policies and placers receive snapshots and return new
values, they never mutate what they are given.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from operator import attrgetter
from types import MappingProxyType
from typing import TYPE_CHECKING, NewType

if TYPE_CHECKING:  # numpy and scipy load only where the models are used
    from voda.core.allocation.reasons import Reason
    from voda.core.goodput import GoodputModel
    from voda.core.oracle import StepOracle

JobName = NewType("JobName", str)
NodeName = NewType("NodeName", str)

DEFAULT_GPU_TYPE = "default"
ANY_GPU_TYPE = "*"  # in Job.gpu_types: every GPU type the cluster has
MAX_GPU_TYPES = 16  # GPU types one job may name


class JobStatus(StrEnum):
    SUBMITTED = "Submitted"
    WAITING = "Waiting"
    RUNNING = "Running"
    COMPLETED = "Completed"
    FAILED = "Failed"
    CANCELED = "Canceled"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_STATUSES

    @property
    def is_active(self) -> bool:
        """Active jobs are the ones the allocation algorithm sees."""
        return not self.is_terminal


TERMINAL_STATUSES = frozenset({JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELED})

# The one table of allowed status changes; see transition() in voda.core.lifecycle.
ALLOWED_TRANSITIONS: Mapping[JobStatus, frozenset[JobStatus]] = MappingProxyType(
    {
        JobStatus.SUBMITTED: frozenset(
            {JobStatus.WAITING, JobStatus.RUNNING, JobStatus.CANCELED, JobStatus.FAILED}
        ),
        JobStatus.WAITING: frozenset({JobStatus.RUNNING, JobStatus.CANCELED, JobStatus.FAILED}),
        JobStatus.RUNNING: frozenset(
            {JobStatus.WAITING, JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELED}
        ),
        JobStatus.COMPLETED: frozenset(),
        JobStatus.FAILED: frozenset(),
        JobStatus.CANCELED: frozenset(),
    }
)


class InvalidTransition(ValueError):
    pass


def transition(current: JobStatus, to: JobStatus) -> JobStatus:
    """Check a status change against ALLOWED_TRANSITIONS and return the new status."""
    if to == current:
        return to
    if to not in ALLOWED_TRANSITIONS[current]:
        raise InvalidTransition(f"a job cannot go from {current} to {to}")
    return to


_EMPTY_MAP: Mapping = MappingProxyType({})


def _frozen_map(m: Mapping | None) -> Mapping:
    return MappingProxyType(dict(m)) if m else _EMPTY_MAP


@dataclass(frozen=True, slots=True)
class Job:
    """What the allocation algorithms see of one active job.

    Workers are GPUs: one worker holds one GPU.

    Attained service: totals count the job's whole life; the "since_start"
    counters are reset by the engine on every (re)start, so for a waiting job
    `running_seconds_since_start` is the length of its last run and
    `waiting_seconds_since_start` the time since it was preempted, queued or lost
    its GPUs. The "since_promotion" counters follow the Tiresias reference
    simulator: they count from submission and are reset only when the algorithm
    promotes the job (starvation rule), never by a preemption or a restart;
    `waiting_seconds_since_promotion` counts only once the job has run since then.

    `epoch_time_by_workers` holds
    observed (or category-history) seconds per epoch for a worker count; the
    estimators in voda.core.estimate turn it into speedup and remaining time.
    Unknown speed means linear speedup.
    """

    name: str
    min_workers: int = 1
    max_workers: int = 1
    preferred_workers: int | None = None
    priority: int = 0  # 0 is highest
    submit_time: float = 0.0
    epochs: int = 1
    completed_epochs: float = 0.0
    category: str = ""
    gpu_type: str = DEFAULT_GPU_TYPE
    # The team queue it belongs to (voda.core.quotas); "default" when it names none.
    queue: str = "default"
    status: JobStatus = JobStatus.SUBMITTED
    # Current allocation (GPUs held right now); 0 when waiting.
    current_workers: int = 0
    # Attained service. "since start" counts from the last (re)start of the job.
    attained_gpu_seconds: float = 0.0
    attained_gpu_seconds_since_start: float = 0.0
    running_seconds: float = 0.0
    running_seconds_since_start: float = 0.0
    # Seconds run, and GPU-seconds held, since the last epoch it reported ended: how far
    # into the epoch under way it is, and on how many GPUs on average. Reset by an epoch
    # report, and by a (re)start, resize or move unless the backend resumes a job where it
    # stopped within an epoch (Backend.resumes_within_epoch).
    running_seconds_since_epoch: float = 0.0
    attained_gpu_seconds_since_epoch: float = 0.0
    waiting_seconds: float = 0.0
    waiting_seconds_since_start: float = 0.0  # waiting since it was last preempted/queued
    attained_gpu_seconds_since_promotion: float = 0.0
    running_seconds_since_promotion: float = 0.0
    waiting_seconds_since_promotion: float = 0.0
    first_start_time: float | None = None
    # When the job entered its current priority class (e.g. Tiresias queue), as
    # noted by the engine at a scheduling step; None before the engine saw it.
    queue_since: float | None = None
    epoch_time_by_workers: Mapping[int, float] = field(default_factory=dict)
    # Placement hints, consumed by the placement manager.
    placement_strategy: str = "consolidated"
    preferred_domain: str | None = None
    network_bandwidth: float | None = None
    latency_sensitive: bool = False
    # Samples per second by (workers, nodes spanned), for the job's category: how
    # fast each layout shape ran (voda.core.placement.layout).
    layout_throughput: Mapping[tuple[int, int], float] = field(default_factory=dict)
    # Allocation changes since the first start (resumes, rescales, migrations).
    restarts: int = 0
    # What a batch-adaptive job last reported: its throughput model, gradient
    # statistics and batch limits (voda.core.goodput); None for other jobs.
    goodput: GoodputModel | None = None
    # The throughput model the job's category measured on the most GPUs of its GPU type,
    # reported by any of its jobs, finished ones included (the engine keeps it); None
    # when no job of the category has reported one.
    category_goodput: GoodputModel | None = None
    # Simulator-only truth (voda.core.oracle), read only by oracle baselines.
    oracle: StepOracle | None = None
    # Seconds a change of its workers costs it on the backend that runs it, on top of the
    # checkpoint and restart the policies charge (`restart_penalty`): on Kubernetes an
    # MPIJob's new size takes effect only once the kubelet has propagated its hostfile
    # ConfigMap to the launcher. 0 where a change costs nothing more (the simulator).
    rescale_delay: float = 0.0
    # Seconds one restart (checkpoint and restore) costs this job, where its backend knows
    # (the simulator under the `sia` preset: its model's checkpoint-restore time); 0:
    # unknown, the policies charge their own `restart_penalty`. Read by the heterogeneity
    # policies and by Voda's restart charge (voda.core.allocation.voda).
    restart_cost: float = 0.0
    # Seconds of a restart still under way (the job holds its GPUs but does not train yet);
    # 0 when none or where the backend does not say. A heterogeneity policy leaves such a
    # job where it is, as Sia's artifact does.
    restoring_seconds: float = 0.0
    # The nodes of its GPU type the job may use, when the backend knows it cannot use
    # them all (a Kubernetes template's taints, selectors and requests); None: any.
    nodes: frozenset[str] | None = None
    # The GPU types the job accepts (ANY_GPU_TYPE: every type); empty: only `gpu_type`,
    # as before. A job that accepts several runs on one at a time: `gpu_type` is the one
    # it runs on (or was last given), chosen by the heterogeneity policy
    # (voda.core.allocation.hetero).
    gpu_types: tuple[str, ...] = ()
    # The throughput model for each accepted GPU type that the engine knows of (its own
    # reports there, else its category's), for the heterogeneity policy.
    goodput_by_type: Mapping[str, GoodputModel] = field(default_factory=dict)
    # Of a job that accepts several types: its category's gradient statistics (grad_sqr,
    # grad_var) as its jobs first reported them, averaged (the engine keeps them); None
    # when none has. A new job is early in its training, where the noise scale is small.
    category_early_gradient: tuple[float, float] | None = None
    # The accepted types whose goodput_by_type entry is its category's, not a report of its
    # own there (the engine fills it; empty: every entry is its own). Sia, as its artifact,
    # judges a job only by what the job itself measured.
    category_model_types: tuple[str, ...] = ()
    # Its category's speed on one GPU of each type, profiled beforehand ((type, speed) in any
    # unit; empty: none given): the per-model ratios Sia (ours) and Voda's policy project a
    # job's model onto other types with.
    category_type_speeds: tuple[tuple[str, float], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "epoch_time_by_workers", _frozen_map(self.epoch_time_by_workers))
        object.__setattr__(self, "layout_throughput", _frozen_map(self.layout_throughput))
        object.__setattr__(self, "goodput_by_type", _frozen_map(self.goodput_by_type))

    @property
    def preferred(self) -> int:
        """Preferred size, falling back to min when none was given."""
        return self.preferred_workers if self.preferred_workers is not None else self.min_workers

    @property
    def remaining_epochs(self) -> float:
        return max(0.0, self.epochs - self.completed_epochs)

    @property
    def sort_key(self) -> tuple[int, float, str]:
        """The order every algorithm falls back on: priority (0 first), submit time, name.

        FIFO-like algorithms walk jobs in this order, so raising a job's priority
        moves it ahead of the queue; within one priority it is plain submit order.
        """
        return SORT_KEY(self)


# `Job.sort_key` as a key function: sorting many jobs by it skips the property call.
SORT_KEY: Callable[[Job], tuple[int, float, str]] = attrgetter("priority", "submit_time", "name")


def validate_job(job: Job) -> list[str]:
    """Reasons a job is malformed, as 'field: reason' strings (empty when valid)."""
    errors: list[str] = []
    if not job.name:
        errors.append("name: must not be empty")
    if job.min_workers < 1:
        errors.append(f"min: must be at least 1, got {job.min_workers}")
    if job.max_workers < job.min_workers:
        errors.append(f"max: must be at least min ({job.min_workers}), got {job.max_workers}")
    if job.preferred_workers is not None and not (
        job.min_workers <= job.preferred_workers <= job.max_workers
    ):
        errors.append(
            f"preferred: must lie in [min, max] = [{job.min_workers}, {job.max_workers}], "
            f"got {job.preferred_workers}"
        )
    if job.epochs < 1:
        errors.append(f"epochs: must be at least 1, got {job.epochs}")
    if job.completed_epochs < 0:
        errors.append(f"completed_epochs: must not be negative, got {job.completed_epochs}")
    if job.restarts < 0:
        errors.append(f"restarts: must not be negative, got {job.restarts}")
    if not (job.rescale_delay >= 0 and math.isfinite(job.rescale_delay)):
        errors.append(f"rescale_delay: must be a finite number >= 0, got {job.rescale_delay}")
    if not (job.restart_cost >= 0 and math.isfinite(job.restart_cost)):
        errors.append(f"restart_cost: must be a finite number >= 0, got {job.restart_cost}")
    if not (job.restoring_seconds >= 0 and math.isfinite(job.restoring_seconds)):
        errors.append(
            f"restoring_seconds: must be a finite number >= 0, got {job.restoring_seconds}")
    if job.priority < 0:
        errors.append(f"priority: must not be negative (0 is highest), got {job.priority}")
    for workers, seconds in job.epoch_time_by_workers.items():
        if workers < 1 or not seconds > 0:
            errors.append(
                f"epoch_time_by_workers: {workers} workers -> {seconds} s; "
                "workers must be >= 1 and seconds > 0"
            )
    if len(job.gpu_types) > MAX_GPU_TYPES:
        errors.append(f"gpu_types: at most {MAX_GPU_TYPES} types, got {len(job.gpu_types)}")
    if any(not t or not isinstance(t, str) for t in job.gpu_types):
        errors.append(f"gpu_types: each must be a non-empty name, got {list(job.gpu_types)}")
    for (workers, nodes), rate in job.layout_throughput.items():
        if not (1 <= nodes <= workers) or not rate > 0:
            errors.append(
                f"layout_throughput: ({workers} workers, {nodes} nodes) -> {rate} samples/s; "
                "nodes must lie in [1, workers] and the rate be > 0"
            )
    return errors


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    gpus: int
    gpu_type: str = DEFAULT_GPU_TYPE
    leaf: str | None = None  # network domain (leaf switch); None: the node is its own leaf
    spine: str | None = None  # None: the one default spine

    @property
    def leaf_name(self) -> str:
        return self.leaf if self.leaf is not None else f"leaf-{self.name}"

    @property
    def spine_name(self) -> str:
        return self.spine if self.spine is not None else "spine"


@dataclass(frozen=True, slots=True)
class Cluster:
    nodes: tuple[Node, ...] = ()

    def gpu_types(self) -> list[str]:
        return sorted({n.gpu_type for n in self.nodes})

    def of_type(self, gpu_type: str) -> Cluster:
        return Cluster(tuple(n for n in self.nodes if n.gpu_type == gpu_type))

    def capacity(self, gpu_type: str | None = None) -> int:
        return sum(n.gpus for n in self.nodes if gpu_type is None or n.gpu_type == gpu_type)

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    @staticmethod
    def uniform(nodes: int, gpus_per_node: int, gpu_type: str = DEFAULT_GPU_TYPE) -> Cluster:
        return Cluster(
            tuple(Node(f"node-{i}", gpus_per_node, gpu_type) for i in range(nodes))
        )


# {job: GPUs}. Jobs absent or at 0 get nothing.
Allocation = Mapping[str, int]

# {job: ((node, workers), ...)}, nodes in a deterministic order.
JobPlacement = tuple[tuple[str, int], ...]
Placement = Mapping[str, JobPlacement]


def placement_workers(p: JobPlacement) -> int:
    return sum(count for _, count in p)


class ActionKind(StrEnum):
    """Applied in this order, so GPUs are freed before they are taken."""

    HALT = "halt"
    SCALE_IN = "scale-in"
    MIGRATE = "migrate"
    START = "start"
    SCALE_OUT = "scale-out"


ACTION_ORDER: tuple[ActionKind, ...] = tuple(ActionKind)


@dataclass(frozen=True, slots=True)
class Action:
    kind: ActionKind
    job: str
    old: JobPlacement
    new: JobPlacement

    @property
    def workers_before(self) -> int:
        return placement_workers(self.old)

    @property
    def workers_after(self) -> int:
        return placement_workers(self.new)


@dataclass(frozen=True, slots=True)
class Plan:
    """The outcome of one decision: allocation, placement and the actions to get there."""

    allocation: Allocation
    placement: Placement
    actions: tuple[Action, ...] = ()
    migrated_workers: int = 0
    # GPU types whose decision was refused, with the reason: their jobs keep the
    # placement in force (and are absent from `actions`); the other types go on.
    errors: Mapping[str, str] = field(default_factory=dict)
    # Why each job left below its max holds what it holds (voda.core.allocation.reasons);
    # empty when the decision was made without explanations.
    reasons: Mapping[str, Reason] = field(default_factory=dict)

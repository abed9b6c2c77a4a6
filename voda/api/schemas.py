"""What the API accepts and returns."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from voda.core.placement.manager import STRATEGIES
from voda.spec.parse import (
    COMMAND_MAX,
    DOMAIN_MAX,
    IMAGE_MAX,
    MAX_EPOCHS,
    MAX_PRIORITY,
    MAX_WORKERS,
    NAME_MAX,
    TOKEN_MAX,
)

# Bounds of what a training process may report about one epoch.
MAX_EPOCH_SECONDS = 1e7
MAX_SAMPLES_PER_SECOND = 1e12
MAX_RATE_LIMIT_SECONDS = 86_400.0
MAX_NODE_GPUS = 1_024
NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
TOKEN_PATTERN = r"^[A-Za-z0-9]([-_.A-Za-z0-9]*[A-Za-z0-9])?$"
_STRICT = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class FieldProblem(BaseModel):
    field: str
    reason: str


class ErrorBody(BaseModel):
    error: str
    errors: list[FieldProblem] = []
    valid: list[str] | None = None


class PlacementEntry(BaseModel):
    node: str
    workers: int


class JobSummary(BaseModel):
    name: str
    user: str
    kind: str
    status: str
    gpu_type: str
    min_workers: int
    max_workers: int
    priority: int
    workers: int
    epochs: int
    completed_epochs: float
    submit_time: float


class JobEvent(BaseModel):
    time: float
    field: str  # status, priority or event
    old: str | None
    new: str
    message: str | None


class JobDetail(JobSummary):
    preferred_workers: int | None
    command: str | None
    image: str | None
    profile: str | None
    category: str
    placement: list[PlacementEntry]
    placement_strategy: str
    preferred_domain: str | None
    first_start_time: float | None
    finish_time: float | None
    waiting_seconds: float
    running_seconds: float
    total_seconds: float
    gpu_seconds: float
    estimated_remaining_seconds: float | None
    epoch_time_by_workers: dict[int, float]
    # Samples per second of the job's category by layout, keyed "WORKERSxNODES".
    layout_throughput: dict[str, float]
    speedup: dict[int, float]
    rescales: int
    migrations: int
    preemptions: int
    failure_reason: str | None
    # Why the job cannot run as the cluster is now (its min does not fit), else null.
    unschedulable: str | None = None
    # The newest changes of the job (GET of one job only).
    events: list[JobEvent] = []


class JobList(BaseModel):
    items: list[JobSummary]
    total: int
    offset: int
    limit: int
    next_offset: int | None


class PriorityPatch(BaseModel):
    model_config = _STRICT
    priority: int = Field(ge=0, le=MAX_PRIORITY, description="0 is the highest priority")


class EpochReport(BaseModel):
    """Checked against the job too: epoch <= its epochs, workers <= its workers now."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    epoch: int = Field(ge=1, le=MAX_EPOCHS, strict=True)
    epoch_seconds: float = Field(gt=0, le=MAX_EPOCH_SECONDS)
    workers: int = Field(ge=1, le=MAX_WORKERS, strict=True)
    # Training throughput over the epoch: the placer learns packed or spread from it.
    samples_per_second: float | None = Field(default=None, gt=0, le=MAX_SAMPLES_PER_SECOND)


class CompactJob(BaseModel):
    """The Voda compact job spec (the request body schema; the service checks more: min
    <= preferred <= max, counts within the cluster, known GPU types and domains)."""

    model_config = ConfigDict(extra="forbid", title="VodaJob")
    name: str = Field(min_length=1, max_length=NAME_MAX, pattern=NAME_PATTERN)
    kind: Literal["VodaJob"] | None = None
    command: str | None = Field(default=None, min_length=1, max_length=COMMAND_MAX)
    image: str | None = Field(default=None, min_length=1, max_length=IMAGE_MAX)
    gpu_type: str | None = Field(default=None, max_length=TOKEN_MAX, pattern=TOKEN_PATTERN)
    min: int | None = Field(default=None, ge=1, le=MAX_WORKERS)
    max: int | None = Field(default=None, ge=1, le=MAX_WORKERS)
    preferred: int | None = Field(default=None, ge=1, le=MAX_WORKERS)
    epochs: int | None = Field(default=None, ge=1, le=MAX_EPOCHS)
    priority: int | None = Field(default=None, ge=0, le=MAX_PRIORITY)
    placement_strategy: Literal[STRATEGIES] | None = None  # type: ignore[valid-type]
    preferred_domain: str | None = Field(default=None, max_length=DOMAIN_MAX,
                                         pattern=TOKEN_PATTERN)
    profile: str | None = Field(default=None, max_length=TOKEN_MAX, pattern=TOKEN_PATTERN)
    category: str | None = Field(default=None, max_length=TOKEN_MAX, pattern=TOKEN_PATTERN)


class KubeflowJob(BaseModel):
    """A Kubeflow MPIJob (kubeflow.org/v2beta1) or PyTorchJob (kubeflow.org/v1), checked
    against the CRD's openAPIV3Schema; Voda fields in `voda.io/*` annotations."""

    model_config = ConfigDict(extra="allow", title="KubeflowJob")
    apiVersion: Literal["kubeflow.org/v2beta1", "kubeflow.org/v1"]
    kind: Literal["MPIJob", "PyTorchJob"]
    metadata: dict[str, Any]
    spec: dict[str, Any]


class SchedulerView(BaseModel):
    gpu_type: str
    algorithm: str
    params: dict[str, Any]
    rate_limit_seconds: float
    valid_algorithms: list[str]


class SchedulerUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    algorithm: str | None = Field(default=None, min_length=1, max_length=200)
    params: dict[str, Any] | None = None
    rate_limit_seconds: float | None = Field(default=None, ge=0, le=MAX_RATE_LIMIT_SECONDS)


class NodeView(BaseModel):
    name: str
    gpu_type: str
    gpus: int
    used: int
    free: int
    leaf: str
    # Your jobs by name; others' jobs only as GPUs in use (an administrator sees all).
    jobs: dict[str, int]
    others: int = 0
    schedulable: bool = True


class NodeAdd(BaseModel):
    """A node added at run time (emulated and local backends)."""

    model_config = _STRICT
    name: str = Field(min_length=1, max_length=63, pattern=NAME_PATTERN)
    gpus: int = Field(ge=1, le=MAX_NODE_GPUS)
    gpu_type: str = Field(default="default", max_length=TOKEN_MAX, pattern=TOKEN_PATTERN)
    leaf: str | None = Field(default=None, max_length=DOMAIN_MAX, pattern=TOKEN_PATTERN)
    spine: str | None = Field(default=None, max_length=DOMAIN_MAX, pattern=TOKEN_PATTERN)


class NodePatch(BaseModel):
    """schedulable: false drains the node (its jobs stop and wait for other nodes); true
    takes a drained node back."""

    model_config = _STRICT
    schedulable: bool


class NodeChange(BaseModel):
    name: str
    gpus: int
    gpu_type: str
    leaf: str
    spine: str
    schedulable: bool
    removed: bool


class GpuTypeView(BaseModel):
    gpu_type: str
    total: int
    used: int
    free: int
    algorithm: str
    error: str | None = None  # why the last decision for this type was refused, if it was


class ClusterView(BaseModel):
    nodes: list[NodeView]
    gpu_types: list[GpuTypeView]
    plan: dict[str, list[PlacementEntry]]
    allocation: dict[str, int]
    last_reschedule: float | None
    last_error: str | None
    errors: dict[str, str] = {}  # refused decisions in force, by GPU type ('*': every type)


class Health(BaseModel):
    status: str
    backend: str
    jobs: int
    started_at: float
    recovered_jobs: int
    adopted_running_jobs: int
    first_schedule_seconds: float | None
    store: str  # "ok", or "store: REASON" while writes fail


class Readiness(BaseModel):
    status: Literal["ready", "unready"]
    reasons: list[str]

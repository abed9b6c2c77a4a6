"""What the API accepts and returns."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from voda.core.goodput_report import (
    MAX_BATCH,
    MAX_EPOCH_SAMPLES,
    MAX_GRADIENT_STATISTIC,
    MAX_OBSERVATIONS,
    MAX_STEP_SECONDS,
    MIN_STEP_SECONDS,
    BatchLimits,
    GoodputReport,
    StepObservation,
)
from voda.core.placement.manager import STRATEGIES
from voda.spec.parse import (
    COMMAND_MAX,
    DOMAIN_MAX,
    IMAGE_MAX,
    MAX_EPOCHS,
    MAX_PRIORITY,
    MAX_WORKERS,
    NAME_MAX,
    PREFIX_MAX,
    TOKEN_MAX,
)

# Bounds of what a training process may report about one epoch.
MAX_EPOCH_SECONDS = 1e7
MAX_SAMPLES_PER_SECOND = 1e12
MAX_RATE_LIMIT_SECONDS = 86_400.0
MAX_NODE_GPUS = 1_024
NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
PREFIX_PATTERN = r"^[a-z0-9][-a-z0-9]*$"
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


class JobReasonView(BaseModel):
    """Why the job holds fewer GPUs than its max, as of the last decision."""

    code: str  # stable: Queued, Preempted, Shrunk, DoesNotFit, NodeLost, RateLimited, ...
    message: str  # one sentence with the facts
    since: float  # when its code became this one (service clock)


class JobForecast(BaseModel):
    """When the job starts and finishes (seconds since the epoch, the service's clock), as
    forecast after the last decision by running the scheduler forward, assuming no new
    arrivals. start: null for a job that runs; finish: null when it cannot run as
    things are."""

    start: float | None
    finish: float | None
    running: bool = False
    basis: str = "assuming no new arrivals"
    computed_at: float


class WhatIf(BaseModel):
    """POST /v1/forecast: when a job would start and finish if submitted now."""

    name: str
    min_workers: int
    max_workers: int
    gpu_type: str
    epochs: int
    forecast: JobForecast | None
    epoch_time_by_workers: dict[int, float]


class JobSummary(BaseModel):
    # The name it was submitted with (or generated from generate_name): unique among live
    # jobs; finished jobs keep theirs, so several may share one.
    name: str
    # Unique for ever; GET /v1/jobs/{uid} reaches this job whatever its name's later jobs.
    uid: str
    user: str
    kind: str
    status: str
    gpu_type: str  # the type it runs on (or was last given, when it accepts several)
    gpu_types: list[str] = []  # the types it accepts ("*": any); empty: only gpu_type
    gpu_type_reason: str | None = None  # why the heterogeneity policy chose gpu_type
    min_workers: int
    max_workers: int
    priority: int
    workers: int
    epochs: int
    completed_epochs: float
    submit_time: float
    gpu_seconds: float
    # The priority queue (0 is the top) under algorithms that keep queues (Tiresias).
    queue: int | None = None
    # Its team queue (docs/design/013-queues.md; "default" when it names none).
    team_queue: str = "default"
    estimated_remaining_seconds: float | None
    # Why it holds fewer GPUs than its max; null when it holds its max (or has ended).
    reason: JobReasonView | None = None
    # Its start and finish, assuming no new arrivals (none before the first forecast).
    forecast: JobForecast | None = None


class JobEvent(BaseModel):
    time: float
    # status, priority, event, or an allocation change: start, scale-in, scale-out,
    # migrate, halt (old and new are then worker counts)
    field: str
    old: str | None
    new: str
    message: str | None


class GoodputBatch(BaseModel):
    """The batch the job's model picks on the GPUs it holds now."""

    gpus: int
    nodes: int
    batch_size: int
    atomic_bsz: int
    accum_steps: int
    goodput: float  # M0-equivalent samples per second


class GoodputSummary(BaseModel):
    reported: bool  # the job reported its own model
    measured_gpus: int | None  # the most GPUs the job measured a step on
    category_measured_gpus: int | None  # the same for its category's best model
    # Whose throughput model the Voda policy sizes the job with: "job", "category" or null.
    throughput_from: str | None
    grad_sqr: float | None
    grad_var: float | None
    batch_now: GoodputBatch | None  # null while it holds no GPUs or reported nothing


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
    # Who holds the job suspended outside Voda (Kueue, until it admits the job), and what to
    # do about it; else null. Such a job waits for that admission, not for Voda's GPUs.
    suspended: str | None = None
    # The goodput model reported (POST /v1/jobs/{name}/goodput) or its category's; or null.
    goodput: GoodputSummary | None = None
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


class StepObservationBody(BaseModel):
    """One configuration the job ran: `replicas` GPUs over `nodes` nodes at per-GPU
    micro-batch `atomic_bsz`; its compute time (one micro-batch forward and backward, no
    gradient sync) and its optimiser step time (compute, gradient sync, update)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, title="StepObservation")
    nodes: int = Field(ge=1, le=MAX_WORKERS, strict=True)
    replicas: int = Field(ge=1, le=MAX_WORKERS, strict=True)
    atomic_bsz: int = Field(ge=1, le=MAX_BATCH, strict=True)
    compute_seconds: float = Field(ge=MIN_STEP_SECONDS, le=MAX_STEP_SECONDS)
    step_seconds: float = Field(ge=MIN_STEP_SECONDS, le=MAX_STEP_SECONDS)


class BatchLimitsBody(BaseModel):
    """The batch sizes the job may train at: M0 (`init_batch`, what its learning rate is
    set for) up to `max_batch`, split into per-GPU micro-batches of `min_local` to
    `max_local`; `fixed_batch` for a job that does not adapt its batch."""

    model_config = ConfigDict(extra="forbid", strict=True, title="BatchLimits")
    init_batch: int = Field(ge=1, le=MAX_BATCH)
    max_batch: int = Field(ge=1, le=MAX_BATCH)
    min_local: int = Field(ge=1, le=MAX_BATCH)
    max_local: int = Field(ge=1, le=MAX_BATCH)
    fixed_batch: int | None = Field(default=None, ge=1, le=MAX_BATCH)


class GoodputReportBody(BaseModel):
    """What a batch-adaptive job measures (as Pollux/AdaptDL jobs do). Checked against
    itself and the job too: nodes <= replicas <= the job's max workers, min_local <=
    atomic_bsz <= max_local, compute <= step time, init_batch <= max_batch; the fitted
    step-time model must reproduce every measured time within a factor of 3."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, title="GoodputReport")
    observations: list[StepObservationBody] = Field(min_length=1, max_length=MAX_OBSERVATIONS)
    grad_sqr: float = Field(ge=0, le=MAX_GRADIENT_STATISTIC,
                            description="Squared norm of the true gradient (estimate)")
    grad_var: float = Field(ge=0, le=MAX_GRADIENT_STATISTIC,
                            description="Variance of the gradient at the initial batch")
    limits: BatchLimitsBody
    epoch_samples: float | None = Field(default=None, gt=0, le=MAX_EPOCH_SAMPLES,
                                        description="One epoch in samples")

    def to_report(self) -> GoodputReport:
        return GoodputReport(
            observations=tuple(StepObservation(o.nodes, o.replicas, o.atomic_bsz,
                                               o.compute_seconds, o.step_seconds)
                               for o in self.observations),
            grad_sqr=self.grad_sqr, grad_var=self.grad_var,
            limits=BatchLimits(**self.limits.model_dump()),
            epoch_samples=self.epoch_samples)


class CompactJob(BaseModel):
    """The Voda compact job spec (the request body schema; the service checks more: min
    <= preferred <= max, counts within the cluster, known GPU types and domains)."""

    model_config = ConfigDict(extra="forbid", title="VodaJob")
    name: str | None = Field(default=None, min_length=1, max_length=NAME_MAX,
                             pattern=NAME_PATTERN, description=(
                                 "The job's name, unique among live jobs (409 otherwise); "
                                 "required unless generate_name is given"))
    generate_name: str | None = Field(
        default=None, min_length=1, max_length=PREFIX_MAX, pattern=PREFIX_PATTERN,
        description="Instead of name: a prefix to which the service adds five random "
                    "characters for a name no live job has (as Kubernetes' generateName)")
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
    queue: str | None = Field(default=None, max_length=TOKEN_MAX, pattern=TOKEN_PATTERN,
                              description="Its team queue (GET /v1/queues); by default its "
                                          "user's, else its namespace's, else default")
    adaptive: bool | None = Field(default=None, description=(
        "A batch-adaptive job: it picks its batch by goodput for the GPUs it holds and "
        "reports its goodput model (the emulated cluster runs it from its profile)"))
    batch_size: int | None = Field(default=None, ge=1, le=MAX_BATCH, description=(
        "With adaptive: the global batch it keeps (it still measures and reports)"))


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
    spine: str
    state: str  # ready; cordoned: drained (takes no workers); lost: see lost_nodes
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
    waiting_jobs: int
    utilization: float
    # Share of free GPUs that waiting jobs cannot use because of how they are scattered.
    fragmentation: float


class ClusterJob(BaseModel):
    """A job of yours holding GPUs (an administrator sees every job), keyed by its uid."""

    name: str = ""  # the name it was submitted with
    user: str
    workers: int
    status: str
    gpu_type: str = ""  # the GPU type it runs on


class ClusterView(BaseModel):
    nodes: list[NodeView]  # ready and cordoned (drained) nodes
    # Nodes the cluster had since the service started and has no more: removed, or gone
    # from the backend (state lost).
    lost_nodes: list[NodeView] = []
    gpu_types: list[GpuTypeView]
    jobs: dict[str, ClusterJob]
    plan: dict[str, list[PlacementEntry]]
    allocation: dict[str, int]
    last_reschedule: float | None
    last_error: str | None
    errors: dict[str, str] = {}  # refused decisions in force, by GPU type ('*': every type)


class HistoryPoint(BaseModel):
    """One point of the cluster's history: the mean of the samples in its span of time."""
    time: float  # the mean time of the samples it averages (Unix seconds)
    gpus: float  # GPUs in service
    allocated: float  # held by jobs
    in_use: float  # held by running jobs
    running: float  # jobs running
    waiting: float  # active jobs holding no GPU
    wait_mean_seconds: float  # how long the waiting jobs waited, on average
    wait_max_seconds: float  # and at most (the longest wait of the span)


class HistoryWindow(BaseModel):
    gpu_type: str
    range: Literal["hour", "day", "week"]
    seconds: float  # the range, in seconds, ending now
    sample_seconds: float  # the service samples the cluster (and the queues) this often


class ClusterHistory(HistoryWindow):
    points: list[HistoryPoint]  # oldest first


class QueueHistoryPoint(BaseModel):
    """One point of a queue's history: the mean of its samples in its span of time."""
    time: float  # the mean time of the samples it averages (Unix seconds)
    used: float  # GPUs its jobs hold
    guarantee: float
    borrowed: float  # held beyond its guarantee
    lent: float  # of its idle guarantee, held by other queues' jobs
    waiting: float  # its active jobs holding no GPU
    borrowing_limit: float | None  # null: unlimited throughout the span


class QueueHistory(HistoryWindow):
    queue: str
    points: list[QueueHistoryPoint]  # oldest first


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


class Liveness(BaseModel):
    status: Literal["alive", "wedged"]
    reasons: list[str]


# ----- team queues (docs/design/013-queues.md) ---------------------------------------
class QueueTypeUsage(BaseModel):
    gpu_type: str
    used: int
    guarantee: int
    borrowed: int
    lent: int
    waiting_jobs: int
    borrowing_limit: int | None  # null: unlimited
    lending_limit: int | None  # null: all of its idle guarantee
    reclaimed_by_shrinking: int  # GPUs taken back from its jobs by shrinking, since start
    reclaimed_by_preemption: int


class QueueView(BaseModel):
    name: str
    guarantee: dict[str, int]
    borrowing_limit: dict[str, int] | None
    lending_limit: dict[str, int] | None
    weight: float
    match: dict[str, str]
    declared: bool  # false: the implicit default queue
    source: str  # config (the queue file or config.toml), api, or implicit
    usage: list[QueueTypeUsage]


class QueueList(BaseModel):
    queues: list[QueueView]


class QueueUpdate(BaseModel):
    """PUT /v1/queues/{name}: the queue as a queue file's entry (without its name)."""

    model_config = _STRICT
    name: str | None = Field(default=None, max_length=63)  # if given, the path's
    guarantee: dict[str, int] | None = None
    borrowing_limit: dict[str, int] | None = None
    lending_limit: dict[str, int] | None = None
    weight: float | None = None
    match: dict[str, str] | None = None

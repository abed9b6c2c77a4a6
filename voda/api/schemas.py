"""What the API accepts and returns."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


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


class JobList(BaseModel):
    items: list[JobSummary]
    total: int
    offset: int
    limit: int
    next_offset: int | None


class PriorityPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    priority: int = Field(ge=0, description="0 is the highest priority")


class EpochReport(BaseModel):
    model_config = ConfigDict(extra="forbid")
    epoch: int = Field(ge=1)
    epoch_seconds: float = Field(gt=0)
    workers: int = Field(ge=1)
    # Training throughput over the epoch: the placer learns packed or spread from it.
    samples_per_second: float | None = Field(default=None, gt=0)


class SchedulerView(BaseModel):
    gpu_type: str
    algorithm: str
    params: dict[str, Any]
    rate_limit_seconds: float
    valid_algorithms: list[str]


class SchedulerUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    algorithm: str | None = None
    params: dict[str, Any] | None = None
    rate_limit_seconds: float | None = Field(default=None, ge=0)


class NodeView(BaseModel):
    name: str
    gpu_type: str
    gpus: int
    used: int
    free: int
    leaf: str
    jobs: dict[str, int]


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

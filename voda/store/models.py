"""Tables of the job store. Alembic migrations in voda/store/migrations create them."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Float, Index, Integer, String, Text, text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


LIVE_NAME_INDEX = "ux_jobs_live_given_name"
# The rows whose given_name must be unique: jobs that have not finished.
LIVE_ONLY = text("status NOT IN ('Completed', 'Failed', 'Canceled')")


class JobRow(Base):
    """One job: its submission, its state, its attained service and its priority.

    `name` is the job's uid (the key of its history and of its backend objects, unique
    for ever); `given_name` the name it was submitted with, unique among the jobs that
    have not finished (a partial unique index: two submissions of one name cannot both
    be stored, whichever process writes them). See voda.api.job_names."""

    __tablename__ = "jobs"

    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    given_name: Mapped[str] = mapped_column(String(200))
    user: Mapped[str] = mapped_column(String(100), index=True)
    kind: Mapped[str] = mapped_column(String(40))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    command: Mapped[str | None] = mapped_column(Text, nullable=True)
    image: Mapped[str | None] = mapped_column(Text, nullable=True)
    profile: Mapped[str | None] = mapped_column(String(100), nullable=True)
    category: Mapped[str] = mapped_column(String(200), default="")
    gpu_type: Mapped[str] = mapped_column(String(100), index=True)
    gpu_types: Mapped[list[str]] = mapped_column(JSON, default=list)  # accepted (empty: gpu_type)
    min_workers: Mapped[int] = mapped_column(Integer)
    max_workers: Mapped[int] = mapped_column(Integer)
    preferred_workers: Mapped[int | None] = mapped_column(Integer, nullable=True)
    priority: Mapped[int] = mapped_column(Integer, default=0)
    epochs: Mapped[int] = mapped_column(Integer)
    completed_epochs: Mapped[float] = mapped_column(Float, default=0.0)
    status: Mapped[str] = mapped_column(String(20), index=True)
    submit_time: Mapped[float] = mapped_column(Float)
    current_workers: Mapped[int] = mapped_column(Integer, default=0)
    placement: Mapped[list[Any]] = mapped_column(JSON, default=list)
    attained_gpu_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    attained_gpu_seconds_since_start: Mapped[float] = mapped_column(Float, default=0.0)
    running_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    running_seconds_since_start: Mapped[float] = mapped_column(Float, default=0.0)
    running_seconds_since_epoch: Mapped[float] = mapped_column(Float, default=0.0)
    attained_gpu_seconds_since_epoch: Mapped[float] = mapped_column(Float, default=0.0)
    waiting_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    waiting_seconds_since_start: Mapped[float] = mapped_column(Float, default=0.0)
    attained_gpu_seconds_since_promotion: Mapped[float] = mapped_column(Float, default=0.0)
    running_seconds_since_promotion: Mapped[float] = mapped_column(Float, default=0.0)
    waiting_seconds_since_promotion: Mapped[float] = mapped_column(Float, default=0.0)
    first_start_time: Mapped[float | None] = mapped_column(Float, nullable=True)
    finish_time: Mapped[float | None] = mapped_column(Float, nullable=True)
    queue_since: Mapped[float | None] = mapped_column(Float, nullable=True)
    epoch_time_by_workers: Mapped[dict[str, float]] = mapped_column(JSON, default=dict)
    placement_strategy: Mapped[str] = mapped_column(String(40), default="consolidated")
    preferred_domain: Mapped[str | None] = mapped_column(String(200), nullable=True)
    failure_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    rescales: Mapped[int] = mapped_column(Integer, default=0)
    migrations: Mapped[int] = mapped_column(Integer, default=0)
    preemptions: Mapped[int] = mapped_column(Integer, default=0)
    promotions: Mapped[int] = mapped_column(Integer, default=0)
    # The time up to which the service counters above are accounted.
    accounted_at: Mapped[float] = mapped_column(Float)
    # A submission's Idempotency-Key (unique per user) and the SHA-256 of its body.
    idempotency_key: Mapped[str | None] = mapped_column(String(200), nullable=True)
    request_hash: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # The goodput model the job reported last (voda.core.goodput_report.model_to_dict).
    goodput: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    queue: Mapped[str] = mapped_column(String(100), default="default")  # its team queue

    __table_args__ = (Index("ux_jobs_user_idempotency_key", "user", "idempotency_key",
                            unique=True),
                      Index(LIVE_NAME_INDEX, "given_name", unique=True,
                            sqlite_where=LIVE_ONLY, postgresql_where=LIVE_ONLY),
                      Index("ix_jobs_given_name", "given_name"))


class JobHistoryRow(Base):
    """Status and priority changes of a job, in order."""

    __tablename__ = "job_history"
    __table_args__ = (Index("ix_job_history_job_id", "job", "id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job: Mapped[str] = mapped_column(String(200))
    time: Mapped[float] = mapped_column(Float)
    field: Mapped[str] = mapped_column(String(20))  # "status", "priority" or "event"
    old: Mapped[str | None] = mapped_column(String(40), nullable=True)
    new: Mapped[str] = mapped_column(String(40))
    message: Mapped[str | None] = mapped_column(Text, nullable=True)


class CategorySpeedRow(Base):
    """Seconds per epoch of a job category on a GPU type at a worker count (smoothed)."""

    __tablename__ = "category_speed"

    category: Mapped[str] = mapped_column(String(200), primary_key=True)
    gpu_type: Mapped[str] = mapped_column(String(100), primary_key=True)
    workers: Mapped[int] = mapped_column(Integer, primary_key=True)
    epoch_seconds: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)


class CategoryLayoutRow(Base):
    """Samples per second of a job category on a GPU type and a layout: workers over
    nodes (smoothed)."""

    __tablename__ = "category_layout"

    category: Mapped[str] = mapped_column(String(200), primary_key=True)
    gpu_type: Mapped[str] = mapped_column(String(100), primary_key=True)
    workers: Mapped[int] = mapped_column(Integer, primary_key=True)
    nodes: Mapped[int] = mapped_column(Integer, primary_key=True)
    samples_per_second: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)


class CategoryGoodputRow(Base):
    """The goodput model of a job category on a GPU type measured on the most GPUs."""

    __tablename__ = "category_goodput"

    category: Mapped[str] = mapped_column(String(200), primary_key=True)
    gpu_type: Mapped[str] = mapped_column(String(100), primary_key=True)
    model: Mapped[dict[str, Any]] = mapped_column(JSON)
    measured_gpus: Mapped[int] = mapped_column(Integer)
    updated_at: Mapped[float] = mapped_column(Float)


class SchedulerSettingsRow(Base):
    """Algorithm per GPU type; gpu_type '*' holds the default and the rate limit."""

    __tablename__ = "scheduler_settings"

    gpu_type: Mapped[str] = mapped_column(String(100), primary_key=True)
    algorithm: Mapped[str] = mapped_column(String(200))
    params: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    rate_limit_seconds: Mapped[float | None] = mapped_column(Float, nullable=True)


class BackendStateRow(Base):
    """State a backend needs to survive a restart (the emulated cluster's running jobs)."""

    __tablename__ = "backend_state"

    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    data: Mapped[dict[str, Any]] = mapped_column(JSON)
    updated_at: Mapped[float] = mapped_column(Float)


class NodeRow(Base):
    """A node added, drained or removed at run time (over what the backend offers)."""

    __tablename__ = "nodes"

    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    gpus: Mapped[int] = mapped_column(Integer)
    gpu_type: Mapped[str] = mapped_column(String(100))
    leaf: Mapped[str | None] = mapped_column(String(200), nullable=True)
    spine: Mapped[str | None] = mapped_column(String(200), nullable=True)
    state: Mapped[str] = mapped_column(String(20))  # active, drained or removed
    updated_at: Mapped[float] = mapped_column(Float)


class ServiceStateRow(Base):
    """Small facts of the service; written at start, which proves the store takes writes."""

    __tablename__ = "service_state"

    key: Mapped[str] = mapped_column(String(100), primary_key=True)
    value: Mapped[str] = mapped_column(Text)
    updated_at: Mapped[float] = mapped_column(Float)


class ClusterSampleRow(Base):
    """One GPU type's state at one time (voda.api.history takes them)."""

    __tablename__ = "cluster_samples"
    __table_args__ = (Index("ix_cluster_samples_type_time", "gpu_type", "time"),
                      Index("ix_cluster_samples_time", "time"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    time: Mapped[float] = mapped_column(Float)
    gpu_type: Mapped[str] = mapped_column(String(100))
    gpus: Mapped[int] = mapped_column(Integer)  # in service (schedulable nodes)
    allocated: Mapped[int] = mapped_column(Integer)  # held by jobs
    in_use: Mapped[int] = mapped_column(Integer)  # held by jobs that run
    running: Mapped[int] = mapped_column(Integer)
    waiting: Mapped[int] = mapped_column(Integer)  # active jobs holding no GPU
    wait_mean_seconds: Mapped[float] = mapped_column(Float)
    wait_max_seconds: Mapped[float] = mapped_column(Float)


class QueueSampleRow(Base):
    """One team queue's usage of one GPU type at one time (voda.api.history takes them
    with the cluster's samples, while queues are configured)."""

    __tablename__ = "queue_samples"
    __table_args__ = (Index("ix_queue_samples_queue_type_time", "queue", "gpu_type", "time"),
                      Index("ix_queue_samples_time", "time"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    time: Mapped[float] = mapped_column(Float)
    gpu_type: Mapped[str] = mapped_column(String(100))
    queue: Mapped[str] = mapped_column(String(100))
    used: Mapped[int] = mapped_column(Integer)  # GPUs its jobs hold
    guarantee: Mapped[int] = mapped_column(Integer)
    borrowed: Mapped[int] = mapped_column(Integer)  # held beyond its guarantee
    lent: Mapped[int] = mapped_column(Integer)  # of its idle guarantee, held by others
    waiting: Mapped[int] = mapped_column(Integer)  # its active jobs holding no GPU
    borrowing_limit: Mapped[int | None] = mapped_column(Integer, nullable=True)  # None: unlimited


class NodeEventRow(Base):
    """A change of a node: drained, active (added or back in service), removed."""

    __tablename__ = "node_events"
    __table_args__ = (Index("ix_node_events_node_id", "node", "id"),
                      Index("ix_node_events_time", "time"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    node: Mapped[str] = mapped_column(String(200))
    time: Mapped[float] = mapped_column(Float)
    state: Mapped[str] = mapped_column(String(20))
    message: Mapped[str | None] = mapped_column(Text, nullable=True)


class QueueRow(Base):
    """A team queue an administrator set over the API (voda.api.queues), over the queue
    file and config.toml; `entry` None: deleted (the file's queue of that name is gone)."""

    __tablename__ = "queues"

    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    entry: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    updated_at: Mapped[float] = mapped_column(Float)

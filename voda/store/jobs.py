"""Store functions. Each takes a session and never commits: callers own transactions."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import bindparam, delete, insert, select, update
from sqlalchemy.orm import Session

from voda.core.goodput import GoodputModel
from voda.core.goodput_report import model_from_dict
from voda.core.model import JobStatus
from voda.engine.scheduler import HistoryKey, JobRecord
from voda.store.models import (
    BackendStateRow,
    CategoryGoodputRow,
    CategoryLayoutRow,
    CategorySpeedRow,
    JobHistoryRow,
    JobRow,
    NodeRow,
    QueueRow,
    SchedulerSettingsRow,
    ServiceStateRow,
)

DEFAULT_SETTINGS_KEY = "*"

# JobRecord fields that change while the job lives (written on every state save).
STATE_FIELDS: tuple[str, ...] = (
    "priority",
    "gpu_type",  # a job that accepts several GPU types runs on the one last chosen
    "completed_epochs",
    "status",
    "current_workers",
    "attained_gpu_seconds",
    "attained_gpu_seconds_since_start",
    "running_seconds",
    "running_seconds_since_start",
    "running_seconds_since_epoch",
    "attained_gpu_seconds_since_epoch",
    "waiting_seconds",
    "waiting_seconds_since_start",
    "attained_gpu_seconds_since_promotion",
    "running_seconds_since_promotion",
    "waiting_seconds_since_promotion",
    "first_start_time",
    "finish_time",
    "queue_since",
    "failure_reason",
    "rescales",
    "migrations",
    "preemptions",
    "promotions",
)


def state_values(record: JobRecord, accounted_at: float) -> dict[str, Any]:
    """The changing part of a job row, taken from the engine's record."""
    values: dict[str, Any] = {name: getattr(record, name) for name in STATE_FIELDS}
    values["status"] = str(record.status)
    values["placement"] = [[node, count] for node, count in record.placement]
    values["epoch_time_by_workers"] = {str(k): v for k, v in record.epoch_time_by_workers.items()}
    values["accounted_at"] = accounted_at
    values["name"] = record.name
    return values


def new_job_values(record: JobRecord, meta: Mapping[str, Any], accounted_at: float) -> dict:
    values = state_values(record, accounted_at)
    values.update(
        user=meta["user"],
        kind=meta["kind"],
        spec=meta["spec"],
        command=meta.get("command"),
        image=meta.get("image"),
        profile=meta.get("profile"),
        category=record.category,
        gpu_type=record.gpu_type,
        gpu_types=list(record.gpu_types),
        min_workers=record.min_workers,
        max_workers=record.max_workers,
        preferred_workers=record.preferred_workers,
        epochs=record.epochs,
        submit_time=record.submit_time,
        placement_strategy=record.placement_strategy,
        preferred_domain=record.preferred_domain,
        idempotency_key=meta.get("idempotency_key"),
        request_hash=meta.get("request_hash"),
        given_name=meta.get("given_name") or record.name,
        queue=record.queue,
    )
    return values


_JOBS = JobRow.__table__


def insert_jobs(session: Session, rows: Sequence[Mapping[str, Any]]) -> None:
    if rows:
        session.execute(insert(_JOBS), [dict(r) for r in rows])


def job_exists(session: Session, name: str) -> bool:
    return session.get(JobRow, name) is not None


def save_states(session: Session, rows: Sequence[Mapping[str, Any]]) -> None:
    """Bulk update of job state rows by name (all rows carry the same columns)."""
    if not rows:
        return
    columns = [c for c in rows[0] if c != "name"]
    statement = update(_JOBS).where(_JOBS.c.name == bindparam("b_name")).values(
        {c: bindparam(c) for c in columns})
    session.execute(statement, [{**r, "b_name": r["name"]} for r in rows])


def mark_status(session: Session, names: Sequence[str], status: str, chunk: int = 500) -> None:
    """Set the status of many jobs, nothing else."""
    for i in range(0, len(names), chunk):
        part = list(names[i:i + chunk])
        session.execute(update(_JOBS).where(_JOBS.c.name.in_(part)).values(status=status))


def add_history(session: Session, entries: Sequence[Mapping[str, Any]]) -> None:
    if entries:
        session.execute(insert(JobHistoryRow.__table__), [dict(e) for e in entries])


def history(session: Session, job: str, last: int | None = None) -> list[JobHistoryRow]:
    """A job's history in order; with `last`, only its newest `last` entries."""
    if last is None:
        query = select(JobHistoryRow).where(JobHistoryRow.job == job).order_by(JobHistoryRow.id)
        return list(session.scalars(query))
    query = select(JobHistoryRow).where(JobHistoryRow.job == job).order_by(
        JobHistoryRow.id.desc()).limit(last)
    return list(reversed(list(session.scalars(query))))


def load_jobs(session: Session) -> list[JobRow]:
    return list(session.scalars(select(JobRow).order_by(JobRow.submit_time, JobRow.name)))


def count_jobs(session: Session) -> int:
    return len(session.scalars(select(JobRow.name)).all())


def row_to_record(row: JobRow) -> JobRecord:
    """The engine's record of a stored job, with its counters as of `row.accounted_at`."""
    return JobRecord(
        name=row.name,
        min_workers=row.min_workers,
        max_workers=row.max_workers,
        preferred_workers=row.preferred_workers,
        priority=row.priority,
        submit_time=row.submit_time,
        epochs=row.epochs,
        completed_epochs=row.completed_epochs,
        category=row.category,
        gpu_type=row.gpu_type,
        gpu_types=tuple(row.gpu_types or ()),
        queue=row.queue or "default",
        status=JobStatus(row.status),
        current_workers=row.current_workers,
        attained_gpu_seconds=row.attained_gpu_seconds,
        attained_gpu_seconds_since_start=row.attained_gpu_seconds_since_start,
        running_seconds=row.running_seconds,
        running_seconds_since_start=row.running_seconds_since_start,
        running_seconds_since_epoch=row.running_seconds_since_epoch,
        attained_gpu_seconds_since_epoch=row.attained_gpu_seconds_since_epoch,
        waiting_seconds=row.waiting_seconds,
        waiting_seconds_since_start=row.waiting_seconds_since_start,
        attained_gpu_seconds_since_promotion=row.attained_gpu_seconds_since_promotion,
        running_seconds_since_promotion=row.running_seconds_since_promotion,
        waiting_seconds_since_promotion=row.waiting_seconds_since_promotion,
        first_start_time=row.first_start_time,
        queue_since=row.queue_since,
        epoch_time_by_workers={int(k): float(v) for k, v in row.epoch_time_by_workers.items()},
        placement_strategy=row.placement_strategy,
        preferred_domain=row.preferred_domain,
        placement=tuple((str(node), int(count)) for node, count in row.placement),
        finish_time=row.finish_time,
        rescales=row.rescales,
        migrations=row.migrations,
        preemptions=row.preemptions,
        promotions=row.promotions,
        failure_reason=row.failure_reason,
        goodput=model_from_dict(row.goodput) if row.goodput else None,
        extra={
            "given_name": row.given_name,
            "user": row.user,
            "kind": row.kind,
            "command": row.command,
            "image": row.image,
            "profile": row.profile,
            "idempotency_key": row.idempotency_key,
            "request_hash": row.request_hash,
            "spec": row.spec,
        },
    )


# ----- speed and layout history, per (category, GPU type) -------------------------
def save_category_speed(
    session: Session, key: HistoryKey, workers: int, seconds: float, now: float
) -> None:
    category, gpu_type = key
    session.merge(CategorySpeedRow(category=category, gpu_type=gpu_type, workers=workers,
                                   epoch_seconds=seconds, updated_at=now))


def load_category_history(session: Session) -> dict[HistoryKey, dict[int, float]]:
    """What Scheduler.category_history held: seconds per epoch by workers."""
    history_: dict[HistoryKey, dict[int, float]] = {}
    for row in session.scalars(select(CategorySpeedRow)):
        history_.setdefault((row.category, row.gpu_type), {})[row.workers] = row.epoch_seconds
    return history_


def save_category_layout(
    session: Session, key: HistoryKey, layout: tuple[int, int], rate: float, now: float
) -> None:
    category, gpu_type = key
    workers, nodes = layout
    session.merge(CategoryLayoutRow(category=category, gpu_type=gpu_type, workers=workers,
                                    nodes=nodes, samples_per_second=rate, updated_at=now))


def load_layout_history(session: Session) -> dict[HistoryKey, dict[tuple[int, int], float]]:
    """What Scheduler.layout_history held: samples per second by (workers, nodes)."""
    history_: dict[HistoryKey, dict[tuple[int, int], float]] = {}
    for row in session.scalars(select(CategoryLayoutRow)):
        key = (row.category, row.gpu_type)
        history_.setdefault(key, {})[(row.workers, row.nodes)] = row.samples_per_second
    return history_


# ----- goodput models: each job's own, and each category's best-measured -------------
def save_job_goodput(session: Session, name: str, model: Mapping[str, Any]) -> None:
    session.execute(update(_JOBS).where(_JOBS.c.name == name).values(goodput=dict(model)))


def save_category_goodput(session: Session, key: HistoryKey, model: Mapping[str, Any],
                          now: float) -> None:
    category, gpu_type = key
    session.merge(CategoryGoodputRow(category=category, gpu_type=gpu_type, model=dict(model),
                                     measured_gpus=int(model["max_profiled_replicas"]),
                                     updated_at=now))


def load_goodput_history(session: Session) -> dict[HistoryKey, GoodputModel]:
    """What Scheduler.goodput_history held: the best-measured model per category."""
    return {(row.category, row.gpu_type): model_from_dict(row.model)
            for row in session.scalars(select(CategoryGoodputRow))}


# ----- scheduler settings ---------------------------------------------------------
def save_algorithm(
    session: Session, gpu_type: str | None, algorithm: str, params: Mapping[str, Any]
) -> None:
    key = gpu_type or DEFAULT_SETTINGS_KEY
    row = session.get(SchedulerSettingsRow, key)
    if row is None:
        session.add(SchedulerSettingsRow(gpu_type=key, algorithm=algorithm, params=dict(params)))
    else:
        row.algorithm = algorithm
        row.params = dict(params)


def save_rate_limit(session: Session, seconds: float, default_algorithm: str) -> None:
    row = session.get(SchedulerSettingsRow, DEFAULT_SETTINGS_KEY)
    if row is None:
        session.add(SchedulerSettingsRow(gpu_type=DEFAULT_SETTINGS_KEY,
                                         algorithm=default_algorithm, params={},
                                         rate_limit_seconds=seconds))
    else:
        row.rate_limit_seconds = seconds


def load_settings(session: Session) -> list[SchedulerSettingsRow]:
    return list(session.scalars(select(SchedulerSettingsRow)))


# ----- team queues set over the API (voda.api.queues) ------------------------------
def save_queue(session: Session, name: str, entry: Mapping[str, Any] | None,
               now: float) -> None:
    """The queue `name` as an administrator set it; None: deleted."""
    session.merge(QueueRow(name=name, entry=None if entry is None else dict(entry),
                           updated_at=now))


def load_queues(session: Session) -> list[QueueRow]:
    return list(session.scalars(select(QueueRow).order_by(QueueRow.updated_at, QueueRow.name)))


# ----- backend state ---------------------------------------------------------------
def save_backend_state(session: Session, name: str, data: Mapping[str, Any], now: float) -> None:
    session.merge(BackendStateRow(name=name, data=dict(data), updated_at=now))


def load_backend_state(session: Session, name: str) -> dict[str, Any] | None:
    row = session.get(BackendStateRow, name)
    return dict(row.data) if row is not None else None


def delete_jobs(session: Session, names: Iterable[str]) -> None:
    """Remove jobs and their history for good (not used by DELETE, which cancels)."""
    names = list(names)
    session.execute(delete(JobHistoryRow).where(JobHistoryRow.job.in_(names)))
    session.execute(delete(JobRow).where(JobRow.name.in_(names)))


# ----- nodes changed at run time ------------------------------------------------------
def save_node(session: Session, values: Mapping[str, Any]) -> None:
    session.merge(NodeRow(**dict(values)))


def load_nodes(session: Session) -> list[NodeRow]:
    return list(session.scalars(select(NodeRow).order_by(NodeRow.name)))


# ----- the write probe ----------------------------------------------------------------
def touch(session: Session, key: str, value: str, now: float) -> None:
    """Write one small row: at start, proof that the store takes writes."""
    session.merge(ServiceStateRow(key=key, value=value, updated_at=now))
    session.flush()


def state_value(session: Session, key: str) -> str | None:
    row = session.get(ServiceStateRow, key)
    return None if row is None else row.value


def add_state_value(session: Session, key: str, value: str, now: float) -> None:
    """Insert a fact that must never be overwritten (a second writer fails on the key)."""
    session.add(ServiceStateRow(key=key, value=value, updated_at=now))
    session.flush()


def delete_state_value(session: Session, key: str) -> None:
    session.query(ServiceStateRow).filter_by(key=key).delete()
    session.flush()

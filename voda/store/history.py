"""The cluster's history in the store: samples per GPU type over time (and per team queue
and GPU type, while queues are configured), and node changes.

Both are appended as they happen and deleted once older than the retention the service
gives (`history_days`), so the tables stay bounded: one row per GPU type per sample
interval, and one per node change."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import ColumnElement, Integer, Result, delete, func, insert, select
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import Session
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from voda.store.models import ClusterSampleRow, NodeEventRow, QueueSampleRow

SAMPLE_FIELDS = ("gpus", "allocated", "in_use", "running", "waiting", "wait_mean_seconds",
                 "wait_max_seconds")
QUEUE_SAMPLE_FIELDS = ("used", "guarantee", "borrowed", "lent", "waiting", "borrowing_limit")


class whole(FunctionElement[int]):  # an SQL function, named as one
    """The whole part of a non-negative number: FLOOR, or on SQLite (whose FLOOR is not
    always built in) a CAST, which truncates there (PostgreSQL's CAST rounds)."""

    type = Integer()
    inherit_cache = True


@compiles(whole)
def _whole(element: whole, compiler: SQLCompiler, **kw: Any) -> str:
    return f"CAST(FLOOR({compiler.process(element.clauses, **kw)}) AS INTEGER)"


@compiles(whole, "sqlite")
def _whole_sqlite(element: whole, compiler: SQLCompiler, **kw: Any) -> str:
    return f"CAST({compiler.process(element.clauses, **kw)} AS INTEGER)"


def add_samples(session: Session, rows: Sequence[Mapping[str, Any]], keep_after: float,
                queue_rows: Sequence[Mapping[str, Any]] = ()) -> None:
    """Append the cluster's samples (and the queues') and delete those (and node
    changes) older than `keep_after`."""
    if rows:
        session.execute(insert(ClusterSampleRow), [dict(r) for r in rows])
    if queue_rows:
        session.execute(insert(QueueSampleRow), [dict(r) for r in queue_rows])
    for table in (ClusterSampleRow, QueueSampleRow, NodeEventRow):
        session.execute(delete(table).where(table.time < keep_after))


def add_node_events(session: Session, rows: Sequence[Mapping[str, Any]]) -> None:
    if rows:
        session.execute(insert(NodeEventRow), [dict(r) for r in rows])


def node_events(session: Session, node: str, last: int) -> list[NodeEventRow]:
    """The node's `last` changes, oldest first."""
    rows = session.scalars(select(NodeEventRow).where(NodeEventRow.node == node)
                           .order_by(NodeEventRow.id.desc()).limit(last))
    return list(reversed(list(rows)))


def samples(session: Session, gpu_type: str, start: float, end: float,
            buckets: int) -> list[dict[str, float]]:
    """The samples of `gpu_type` in [start, end), averaged over at most `buckets` equal
    spans of time (the longest wait: its maximum), oldest first; each with the mean
    time of the samples it averages."""
    rows = _averaged(session, ClusterSampleRow, SAMPLE_FIELDS, ("wait_max_seconds",),
                     [ClusterSampleRow.gpu_type == gpu_type], start, end, buckets)
    return [_point(row, SAMPLE_FIELDS) for row in rows]


def queue_samples(session: Session, queue: str, gpu_type: str, start: float, end: float,
                  buckets: int) -> list[dict[str, float | None]]:
    """The queue's samples of `gpu_type` in [start, end), averaged as `samples` averages
    the cluster's (the borrowing limit: None where it was unlimited throughout)."""
    rows = _averaged(session, QueueSampleRow, QUEUE_SAMPLE_FIELDS, (),
                     [QueueSampleRow.queue == queue, QueueSampleRow.gpu_type == gpu_type],
                     start, end, buckets)
    return [_point(row, QUEUE_SAMPLE_FIELDS) for row in rows]


Sampled = type[ClusterSampleRow] | type[QueueSampleRow]


def _averaged(session: Session, table: Sampled, fields: Sequence[str], maxima: Sequence[str],
              where: Sequence[ColumnElement[bool]], start: float, end: float,
              buckets: int) -> Result[Any]:
    """The rows of `table` matching `where` in [start, end), grouped into at most
    `buckets` equal spans of time: each span's mean time, and per field its mean (for
    those in `maxima`, its maximum), oldest first."""
    width = max((end - start) / max(1, buckets), 1e-9)
    bucket = whole((table.time - start) / width).label("bucket")
    columns = [(func.max if name in maxima else func.avg)(getattr(table, name)).label(name)
               for name in fields]
    query = (select(bucket, func.avg(table.time).label("time"), *columns)
             .where(table.time >= start, table.time < end, *where)
             .group_by(bucket).order_by(bucket))
    return session.execute(query)


def _point(row: Any, fields: Sequence[str]) -> dict[str, Any]:
    values = {name: getattr(row, name) for name in fields}
    return {"time": float(row.time),
            **{k: None if v is None else float(v) for k, v in values.items()}}

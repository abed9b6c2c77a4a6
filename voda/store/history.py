"""The cluster's history in the store: samples per GPU type over time, and node changes.

Both are appended as they happen and deleted once older than the retention the service
gives (`history_days`), so the tables stay bounded: one row per GPU type per sample
interval, and one per node change."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Integer, delete, func, insert, select
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import Session
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from voda.store.models import ClusterSampleRow, NodeEventRow

SAMPLE_FIELDS = ("gpus", "allocated", "in_use", "running", "waiting", "wait_mean_seconds",
                 "wait_max_seconds")


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


def add_samples(session: Session, rows: Sequence[Mapping[str, Any]], keep_after: float) -> None:
    """Append samples and delete those (and node changes) older than `keep_after`."""
    if rows:
        session.execute(insert(ClusterSampleRow), [dict(r) for r in rows])
    session.execute(delete(ClusterSampleRow).where(ClusterSampleRow.time < keep_after))
    session.execute(delete(NodeEventRow).where(NodeEventRow.time < keep_after))


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
    width = max((end - start) / max(1, buckets), 1e-9)
    bucket = whole((ClusterSampleRow.time - start) / width).label("bucket")
    columns = [func.avg(getattr(ClusterSampleRow, name)).label(name)
               for name in SAMPLE_FIELDS if name != "wait_max_seconds"]
    query = (select(bucket, func.avg(ClusterSampleRow.time).label("time"), *columns,
                    func.max(ClusterSampleRow.wait_max_seconds).label("wait_max_seconds"))
             .where(ClusterSampleRow.gpu_type == gpu_type, ClusterSampleRow.time >= start,
                    ClusterSampleRow.time < end)
             .group_by(bucket).order_by(bucket))
    return [{"time": float(row.time), **{name: float(getattr(row, name))
                                         for name in SAMPLE_FIELDS}}
            for row in session.execute(query)]

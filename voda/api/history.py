"""The cluster's history: what the service samples for the dashboard's History page
(docs/design/008-dashboard.md), and how a time range is read back.

Every `history_sample_seconds` the scheduling loop takes one sample per GPU type
(`cluster_samples`), and while team queues are configured one per queue and GPU type
(`queue_samples`); the store keeps them `history_days` (voda.store.history)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from voda.core.model import Cluster, JobStatus
from voda.core.quotas.usage import TypeUsage
from voda.engine.scheduler import JobRecord

# The ranges the History page offers: name -> (seconds, label).
RANGES: dict[str, tuple[float, str]] = {
    "hour": (3600.0, "last hour"),
    "day": (86400.0, "last day"),
    "week": (7 * 86400.0, "last week"),
}
# Points per chart at most: a week of one-minute samples is averaged into this many.
MAX_POINTS = 240


def cluster_samples(cluster: Cluster, records: Iterable[JobRecord], now: float,
                    time_scale: float) -> list[dict[str, Any]]:
    """One sample per GPU type of the cluster: GPUs in service, allocated (held by jobs),
    in use (held by running jobs), jobs running and waiting (active, holding no GPU), and
    how long the waiting jobs have waited since they last queued, in seconds of wall
    time (the records count job seconds: `time_scale` of them a second)."""
    by_type: dict[str, list[JobRecord]] = {t: [] for t in cluster.gpu_types()}
    for record in records:
        if record.gpu_type in by_type and not record.status.is_terminal:
            by_type[record.gpu_type].append(record)
    scale = time_scale if time_scale > 0 else 1.0
    out = []
    for gpu_type, jobs in by_type.items():
        running = [r for r in jobs if r.status is JobStatus.RUNNING]
        waits = [r.waiting_seconds_since_start / scale for r in jobs if r.current_workers == 0]
        out.append({
            "time": now, "gpu_type": gpu_type, "gpus": cluster.capacity(gpu_type),
            "allocated": sum(r.current_workers for r in jobs),
            "in_use": sum(r.current_workers for r in running),
            "running": len(running), "waiting": len(waits),
            "wait_mean_seconds": sum(waits) / len(waits) if waits else 0.0,
            "wait_max_seconds": max(waits, default=0.0),
        })
    return out


def queue_samples(usage: Mapping[str, Mapping[str, TypeUsage]], now: float
                  ) -> list[dict[str, Any]]:
    """One sample per queue and GPU type of its usage (voda.api.queues.usage_of): GPUs
    held, guarantee, borrowed, lent, jobs waiting and the borrowing limit (None:
    unlimited)."""
    return [{"time": now, "gpu_type": gpu_type, "queue": queue, "used": u.used,
             "guarantee": u.guarantee, "borrowed": u.borrowed, "lent": u.lent,
             "waiting": u.waiting, "borrowing_limit": u.borrowing_limit}
            for queue, types in usage.items() for gpu_type, u in types.items()]

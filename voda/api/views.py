"""What the routes return, built from the scheduler's records (callers hold the lock)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from voda.config import User
from voda.core import estimate
from voda.core.model import Cluster
from voda.engine.scheduler import ALL_GPU_TYPES, JobRecord, Scheduler

REDACTED = "the last decision for this GPU type was refused (details for administrators)"

# The speedup table of a job: every worker count up to this, then powers of two and the
# job's own sizes, so its length never follows a number the user gave.
SPEEDUP_DENSE_UP_TO = 16


def owner_of(record: JobRecord) -> str:
    return str(record.extra.get("user", ""))


def visible(user: User, record: JobRecord) -> bool:
    return user.admin or owner_of(record) == user.name


def user_category(category: str) -> str:
    """The category as its user gave it: history is kept under 'OWNER/category'."""
    return category.split("/", 1)[1] if "/" in category else category


def speedup_counts(r: JobRecord, capacity: int) -> list[int]:
    top = min(r.max_workers, max(capacity, r.min_workers))
    counts = set(range(1, min(top, SPEEDUP_DENSE_UP_TO) + 1))
    power = 1
    while power <= top:
        counts.add(power)
        power *= 2
    counts.update(c for c in (r.min_workers, r.preferred_workers, r.current_workers, top)
                  if c and c <= top)
    return sorted(counts)


def summary(r: JobRecord) -> dict[str, Any]:
    return {
        "name": r.name, "user": owner_of(r), "kind": r.extra.get("kind", ""),
        "status": str(r.status), "gpu_type": r.gpu_type, "min_workers": r.min_workers,
        "max_workers": r.max_workers, "priority": r.priority, "workers": r.current_workers,
        "epochs": r.epochs, "completed_epochs": r.completed_epochs,
        "submit_time": r.submit_time,
    }


def describe(r: JobRecord, now: float, accounted: float, cluster: Cluster,
             unschedulable: str | None) -> dict[str, Any]:
    # Counters are accounted up to the last step; carry them to `now` for display.
    since = max(accounted, r.submit_time)
    dt = 0.0 if r.status.is_terminal else max(0.0, now - since)
    running = r.current_workers > 0
    job = r.snapshot()
    model = estimate.speed_model(job)
    workers_for_estimate = r.current_workers or r.preferred_workers or r.min_workers
    remaining = None
    if not r.status.is_terminal:
        value = estimate.remaining_time(job, workers_for_estimate, model)
        remaining = value if math.isfinite(value) else None
    end = r.finish_time if r.finish_time is not None else now
    capacity = cluster.capacity(r.gpu_type)
    return {
        **summary(r),
        "preferred_workers": r.preferred_workers,
        "command": r.extra.get("command"),
        "image": r.extra.get("image"),
        "profile": r.extra.get("profile"),
        "category": user_category(r.category),
        "placement": [{"node": n, "workers": c} for n, c in r.placement],
        "placement_strategy": r.placement_strategy,
        "preferred_domain": r.preferred_domain,
        "first_start_time": r.first_start_time,
        "finish_time": r.finish_time,
        "waiting_seconds": r.waiting_seconds + (0.0 if running else dt),
        "running_seconds": r.running_seconds + (dt if running else 0.0),
        "total_seconds": max(0.0, end - r.submit_time),
        "gpu_seconds": r.attained_gpu_seconds + dt * r.current_workers,
        "estimated_remaining_seconds": remaining,
        "epoch_time_by_workers": dict(sorted(r.epoch_time_by_workers.items())),
        "layout_throughput": {f"{w}x{n}": rate
                              for (w, n), rate in sorted(r.layout_throughput.items())},
        "speedup": {k: round(model.speedup(k), 4) for k in speedup_counts(r, capacity)},
        "rescales": r.rescales,
        "migrations": r.migrations,
        "preemptions": r.preemptions,
        "failure_reason": r.failure_reason,
        "unschedulable": unschedulable,
        "events": [],
    }


def cluster_view(s: Scheduler, user: User, algorithms: dict[str, str],
                 drained: Iterable[Any]) -> dict[str, Any]:
    """Nodes, GPU types and the plan; a non-admin sees others' jobs as anonymous usage."""
    used: dict[str, dict[str, int]] = {}
    others: dict[str, int] = {}
    mine: dict[str, Any] = {}
    for name, placement in s.placement().items():
        record = s.jobs[name]
        shown = visible(user, record)
        if shown:
            mine[name] = placement
        for node, count in placement:
            if shown:
                used.setdefault(node, {})[name] = count
            else:
                others[node] = others.get(node, 0) + count
    nodes = []
    for n in (*s.cluster.nodes, *drained):
        jobs = used.get(n.name, {})
        taken = sum(jobs.values()) + others.get(n.name, 0)
        nodes.append({"name": n.name, "gpu_type": n.gpu_type, "gpus": n.gpus,
                      "used": taken, "free": max(0, n.gpus - taken), "leaf": n.leaf_name,
                      "jobs": jobs, "others": others.get(n.name, 0),
                      "schedulable": n in s.cluster.nodes})
    # A refusal's reason may name jobs: only administrators read it.
    errors = {t: e.reason if user.admin else REDACTED for t, e in sorted(s.errors.items())}
    types = []
    for t in s.cluster.gpu_types():
        total = s.cluster.capacity(t)
        taken = sum(x["used"] for x in nodes if x["gpu_type"] == t and x["schedulable"])
        types.append({"gpu_type": t, "total": total, "used": taken,
                      "free": max(0, total - taken), "algorithm": algorithms[t],
                      "error": errors.get(t) or errors.get(ALL_GPU_TYPES)})
    plan = s.last_plan
    allocation = {k: v for k, v in (plan.allocation if plan else {}).items()
                  if k in s.jobs and visible(user, s.jobs[k])}
    return {
        "nodes": nodes,
        "gpu_types": types,
        "plan": {name: [{"node": n, "workers": c} for n, c in p]
                 for name, p in sorted(mine.items())},
        "allocation": allocation,
        "last_reschedule": s.last_reschedule,
        "last_error": (str(s.last_error) if s.last_error else None) if user.admin else None,
        "errors": errors,
    }

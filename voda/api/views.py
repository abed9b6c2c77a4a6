"""What the routes return, built from the scheduler's records (callers hold the lock)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from voda.api.job_labels import named
from voda.config import User
from voda.core import estimate
from voda.core.model import Cluster, Node
from voda.core.placement.metrics import fragmentation_ratio
from voda.engine.scheduler import ALL_GPU_TYPES, JobReason, JobRecord, Scheduler

REDACTED = "the last decision for this GPU type was refused (details for administrators)"
NODE_READY, NODE_CORDONED, NODE_LOST = "ready", "cordoned", "lost"

# The speedup table of a job: every worker count up to this, then powers of two and the
# job's own sizes, so its length never follows a number the user gave.
SPEEDUP_DENSE_UP_TO = 16


def owner_of(record: JobRecord) -> str:
    return str(record.extra.get("user", ""))


def name_of(record: JobRecord) -> str:
    """The job's name as submitted; `record.name` is its uid (voda.api.job_names)."""
    return str(record.extra.get("given_name") or record.name)


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


def reason_view(reason: JobReason | None) -> dict[str, Any] | None:
    if reason is None:
        return None
    return {"code": str(reason.code), "message": reason.message, "since": reason.since}


def summary(r: JobRecord, queue: int | None = None,
            model: estimate.SpeedModel | None = None,
            reason: JobReason | None = None) -> dict[str, Any]:
    """A job in a list. `queue`: its priority queue (0 is the top) under an algorithm that
    keeps queues (Tiresias)."""
    return {
        "name": name_of(r), "uid": r.name, "user": owner_of(r), "kind": r.extra.get("kind", ""),
        "status": str(r.status), "gpu_type": r.gpu_type, "min_workers": r.min_workers,
        "max_workers": r.max_workers, "priority": r.priority, "workers": r.current_workers,
        "epochs": r.epochs, "completed_epochs": r.completed_epochs,
        "submit_time": r.submit_time, "gpu_seconds": r.attained_gpu_seconds,
        "queue": queue,
        "team_queue": r.queue,
        "estimated_remaining_seconds": remaining_seconds(r, model),
        "reason": reason_view(reason),
        "gpu_types": list(r.gpu_types),
        "gpu_type_reason": r.type_reason,
    }


def remaining_seconds(r: JobRecord, model: estimate.SpeedModel | None = None) -> float | None:
    """The estimated time left at its current (or else preferred, or min) worker count."""
    if r.status.is_terminal:
        return None
    job = r.snapshot()
    workers = r.current_workers or r.preferred_workers or r.min_workers
    value = estimate.remaining_time(job, workers, model or estimate.speed_model(job))
    return value if math.isfinite(value) else None


def describe(r: JobRecord, now: float, accounted: float, cluster: Cluster,
             unschedulable: str | None, queue: int | None = None,
             time_scale: float = 1.0, suspended: str | None = None,
             reason: JobReason | None = None) -> dict[str, Any]:
    """Timestamps are the service's clock; durations (waiting, running, total, GPU-seconds,
    the estimated remaining time) are in the backend's seconds, `time_scale` per second of
    the service's clock (an emulated cluster's: the epoch times' unit)."""
    # Counters are accounted up to the last step; carry them to `now` for display.
    since = max(accounted, r.submit_time)
    dt = 0.0 if r.status.is_terminal else max(0.0, now - since) * time_scale
    running = r.current_workers > 0
    model = estimate.speed_model(r.snapshot())
    end = r.finish_time if r.finish_time is not None else now
    capacity = cluster.capacity(r.gpu_type)
    return {
        **summary(r, queue, model, reason),
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
        "total_seconds": max(0.0, end - r.submit_time) * time_scale,
        "gpu_seconds": r.attained_gpu_seconds + dt * r.current_workers,
        "epoch_time_by_workers": dict(sorted(r.epoch_time_by_workers.items())),
        "layout_throughput": {f"{w}x{n}": rate
                              for (w, n), rate in sorted(r.layout_throughput.items())},
        "speedup": {k: round(model.speedup(k), 4) for k in speedup_counts(r, capacity)},
        "rescales": r.rescales,
        "migrations": r.migrations,
        "preemptions": r.preemptions,
        "failure_reason": r.failure_reason,
        "unschedulable": unschedulable,
        "suspended": suspended,
        "goodput": goodput_summary(r),
        "events": [],
    }


def goodput_summary(r: JobRecord) -> dict[str, Any] | None:
    """What the job reported of its goodput, and its category's best-measured model; the
    batch it would train at now on the GPUs it holds. None: neither is known."""
    own, category = r.goodput, r.category_goodput
    if own is None and category is None:
        return None
    own_gpus = own.max_profiled_replicas if own is not None else None
    category_gpus = category.max_profiled_replicas if category is not None else None
    if own is not None and own.perf is not None and (category_gpus or 0) <= (own_gpus or 0):
        throughput_from = "job"
    else:
        throughput_from = "category" if category is not None else None
    batch = None
    if own is not None and r.current_workers > 0:
        nodes = max(1, len({node for node, count in r.placement if count > 0}))
        choice = own.choose(nodes, r.current_workers)
        batch = {"gpus": r.current_workers, "nodes": nodes,
                 "batch_size": choice.batch_size(r.current_workers),
                 "atomic_bsz": choice.atomic_bsz, "accum_steps": choice.accum_steps,
                 "goodput": choice.goodput}
    return {"reported": own is not None, "measured_gpus": own_gpus,
            "category_measured_gpus": category_gpus, "throughput_from": throughput_from,
            "grad_sqr": own.grad_sqr if own is not None else None,
            "grad_var": own.grad_var if own is not None else None,
            "batch_now": batch}


def refusals(s: Scheduler, user: User, name_of: Mapping[str, str]) -> dict[str, str]:
    """Refused decisions in force, by GPU type ('*': every type). A reason may name jobs:
    only administrators read it, with the jobs said by name (`name_of`: uid -> name)."""
    return {t: named(e.reason, name_of) if user.admin else REDACTED
            for t, e in sorted(s.errors.items())}


def cluster_view(s: Scheduler, user: User, algorithms: dict[str, str],
                 drained: Iterable[Node], lost: Iterable[Node] = (),
                 names: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Nodes (ready, or cordoned: drained), the nodes the cluster lost (removed, or gone
    from the backend), GPU types and the plan; a non-admin sees others' jobs as anonymous
    usage."""
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
    def node_view(n: Node, state: str) -> dict[str, Any]:
        jobs = used.get(n.name, {})
        taken = sum(jobs.values()) + others.get(n.name, 0)
        return {"name": n.name, "gpu_type": n.gpu_type, "gpus": n.gpus, "used": taken,
                "free": max(0, n.gpus - taken) if state != NODE_LOST else 0,
                "leaf": n.leaf_name, "spine": n.spine_name, "state": state, "jobs": jobs,
                "others": others.get(n.name, 0), "schedulable": state == NODE_READY}

    nodes = [node_view(n, NODE_READY) for n in s.cluster.nodes]
    nodes += [node_view(n, NODE_CORDONED) for n in drained]
    errors = refusals(s, user, names or {})  # names: uid -> name, for the reasons
    types = []
    for t in s.cluster.gpu_types():
        total = s.cluster.capacity(t)
        taken = sum(x["used"] for x in nodes if x["gpu_type"] == t and x["schedulable"])
        waiting = [r for r in s.active.values() if r.gpu_type == t and r.current_workers == 0]
        of_type = {r.name: r.placement for r in s.active.values()
                   if r.gpu_type == t and r.placement}
        # It reads only min_workers and gpu_type: the live records will do (a frozen copy
        # of 10,000 waiting jobs would cost more than the rest of the view).
        fragmentation = float(fragmentation_ratio(s.cluster.of_type(t), of_type,
                                                  waiting))  # type: ignore[arg-type]
        types.append({"gpu_type": t, "total": total, "used": taken,
                      "free": max(0, total - taken), "algorithm": algorithms[t],
                      "error": errors.get(t) or errors.get(ALL_GPU_TYPES),
                      "waiting_jobs": len(waiting),
                      "utilization": taken / total if total else 0.0,
                      "fragmentation": fragmentation})
    plan = s.last_plan
    allocation = {k: v for k, v in (plan.allocation if plan else {}).items()
                  if k in s.jobs and visible(user, s.jobs[k])}
    return {
        "nodes": nodes,
        "lost_nodes": [node_view(n, NODE_LOST) for n in lost],
        "gpu_types": types,
        "jobs": {name: {"name": name_of(s.jobs[name]), "user": owner_of(s.jobs[name]),
                        "workers": s.jobs[name].current_workers,
                        "gpu_type": s.jobs[name].gpu_type,
                        "status": str(s.jobs[name].status)} for name in sorted(mine)},
        "plan": {name: [{"node": n, "workers": c} for n, c in p]
                 for name, p in sorted(mine.items())},
        "allocation": allocation,
        "last_reschedule": s.last_reschedule,
        "last_error": (str(s.last_error) if s.last_error else None) if user.admin else None,
        "errors": errors,
    }


NAME_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*[A-Za-z0-9]|[A-Za-z0-9]")
OTHERS_JOB = "another user's job"


def redact_names(message: str, hidden: Callable[[str], bool]) -> str:
    """A reason's sentence with every job name the viewer may not see (`hidden(name)`)
    said as "another user's job" (sentences name the jobs ahead and the takers)."""
    return NAME_TOKEN.sub(lambda m: OTHERS_JOB if hidden(m.group(0)) else m.group(0),
                          message)

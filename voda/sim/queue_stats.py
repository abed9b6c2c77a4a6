"""Per-queue figures of a simulation with queues (docs/design/013-queues.md): JCTs,
guarantee violations, how long an owed guarantee took to come back, and the GPUs
reclaimed by shrinking against by preemption."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from voda.core.quotas.share import QuotaDecision


@dataclass
class QueueCounters:
    violations: int = 0
    by_shrinking: int = 0
    by_preemption: int = 0
    owed_since: float | None = None
    reclaim_seconds: list[float] = field(default_factory=list)


class QueueStats:
    """An observer of every quota decision (SchedulerSettings.queue_observer).

    A queue is owed GPUs when what its algorithm takes on its guarantee exceeds what its
    jobs hold going into a decision. A reclaim starts at such a decision in which other
    queues give GPUs back (a queue owed GPUs that idle ones cover is waiting for a
    decision, not reclaiming) and ends at the first decision after which the queue holds
    what it is owed, plus `penalty` (the restart penalty: the GPUs given back are in use
    again only once the jobs given them have restarted). A violation is a decision after
    which it holds less than its algorithm takes on its guarantee."""

    def __init__(self, clock: Callable[[], float], penalty: float = 0.0) -> None:
        self.clock = clock
        self.penalty = penalty
        self.queues: dict[str, QueueCounters] = {}

    def __call__(self, gpu_type: str, decision: QuotaDecision) -> None:
        now = self.clock()
        reclaiming = any(o.reclaimed for o in decision.queues.values())
        for name, outcome in decision.queues.items():
            c = self.queues.setdefault(name, QueueCounters())
            c.by_shrinking += outcome.reclaimed_by_shrinking
            c.by_preemption += outcome.reclaimed_by_preemption
            if outcome.used < outcome.within_guarantee:
                c.violations += 1
            if (c.owed_since is None and reclaiming
                    and outcome.held_before < outcome.within_guarantee):
                c.owed_since = now
            if c.owed_since is not None and outcome.used >= outcome.within_guarantee:
                c.reclaim_seconds.append(now - c.owed_since + self.penalty)
                c.owed_since = None


def queue_report(stats: QueueStats, jcts: Mapping[str, Sequence[float]]) -> list[dict[str, Any]]:
    """One entry per queue, by name: the `queues` list of `voda simulate --json`."""
    out = []
    for name in sorted(set(stats.queues) | set(jcts)):
        c = stats.queues.get(name, QueueCounters())
        mine = np.array(jcts.get(name, ()), dtype=float)
        waits = np.array(c.reclaim_seconds, dtype=float)
        out.append({
            "name": name,
            "jobs": len(mine),
            "avg_jct": float(mine.mean()) if len(mine) else None,
            "p99_jct": float(np.percentile(mine, 99)) if len(mine) else None,
            "guarantee_violations": c.violations,
            "reclaim_seconds_p50": float(np.percentile(waits, 50)) if len(waits) else None,
            "reclaim_seconds_p99": float(np.percentile(waits, 99)) if len(waits) else None,
            "gpus_reclaimed_by_shrinking": c.by_shrinking,
            "gpus_reclaimed_by_preemption": c.by_preemption,
        })
    return out


def finish_time_fairness(rhos: Sequence[float | None]) -> dict[str, Any] | None:
    """The share of jobs with rho <= 1 and the worst rho (None when no rho is known)."""
    known = [r for r in rhos if r is not None]
    if not known:
        return None
    return {"share_at_most_1": sum(1 for r in known if r <= 1.0) / len(known),
            "worst": max(known)}

"""Events the scheduler reacts to."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from voda.core.model import Node


class EventKind(StrEnum):
    JOB_SUBMITTED = "job-submitted"
    JOB_COMPLETED = "job-completed"
    JOB_FAILED = "job-failed"
    JOB_DELETED = "job-deleted"
    NODE_ADDED = "node-added"
    NODE_REMOVED = "node-removed"
    PRIORITY_CHANGED = "priority-changed"
    ALGORITHM_CHANGED = "algorithm-changed"
    EPOCH_REPORTED = "epoch-reported"  # a running job finished an epoch
    QUEUE_CHANGED = "queue-changed"  # attained service moved a job to another priority queue
    GOODPUT_REPORTED = "goodput-reported"  # a batch-adaptive job's model changed
    # The backend found a node the job cannot use after all (node, data["reason"]); the
    # backend's job_nodes leaves it out from now on, so the engine plans again.
    PLACEMENT_REFUSED = "placement-refused"


# Events that change what the allocation should be. A progress report only refines
# estimates; it reschedules only for algorithms whose decisions follow progress
# (`decides_on_progress`, e.g. Optimus and Pollux).
PROGRESS_EVENTS = frozenset({EventKind.EPOCH_REPORTED, EventKind.GOODPUT_REPORTED})
RESCHEDULING_EVENTS = frozenset(set(EventKind) - PROGRESS_EVENTS)


@dataclass(frozen=True, slots=True)
class Event:
    kind: EventKind
    time: float
    job: str | None = None
    node: Node | None = None
    # EPOCH_REPORTED: epoch (int), epoch_seconds (float), workers (int), and
    # optionally samples_per_second (float, throughput on the current layout).
    # GOODPUT_REPORTED: goodput (voda.core.goodput.GoodputModel).
    # JOB_FAILED: exit_code, reason. PRIORITY_CHANGED: priority.
    data: dict[str, Any] = field(default_factory=dict)

"""The engine's events as log records (logger `voda.activity`): what the service does.

One INFO record per submission (`submitted`, said by the service where it admits a
job), per decision that changed something (`decision`: each job started, scaled,
preempted or migrated with its GPUs before -> after, and the kinds of events that
called for it), per completion, failure and deletion, and when a GPU type refused
before is decided again (`recovered`). A decision that changes nothing is a DEBUG
record. Refusals and backend failures are the engine's own ERROR records
(voda.engine.scheduler), not repeated here.

Messages name jobs as they were submitted (voda.api.job_labels: "name (uid)" where two
jobs of one name meet in a message). Each record carries its facts as fields (`extra=`)
for the JSON log: `event`, `job` (the uid), `job_name`, `user`, `changes`, ... Nothing
is formatted when the logger would drop the record: the observer runs on the decision
path.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from voda.api.job_labels import labels, named
from voda.api.views import name_of, owner_of
from voda.core.model import Action, ActionKind, JobStatus, Plan
from voda.engine.scheduler import ALL_GPU_TYPES, JobRecord, SchedulerObserver

log = logging.getLogger("voda.activity")

CHANGES_SAID = 20  # a decision's message names this many jobs (its `changes` field: all)
_VERBS = {ActionKind.START: "started", ActionKind.SCALE_OUT: "scaled out",
          ActionKind.SCALE_IN: "scaled in", ActionKind.HALT: "preempted",
          ActionKind.MIGRATE: "migrated"}


def submitted(record: JobRecord) -> None:
    """A job the service admitted (stored, queued for the scheduler)."""
    if not log.isEnabledFor(logging.INFO):
        return
    user, name = owner_of(record), name_of(record)
    log.info("submitted job %s (uid %s) by %s: min %d, max %d, GPU type %s", name,
             record.name, user, record.min_workers, record.max_workers, record.gpu_type,
             extra={"event": "submitted", "job": record.name, "job_name": name, "user": user,
                    "min_workers": record.min_workers, "max_workers": record.max_workers,
                    "gpu_type": record.gpu_type, "priority": record.priority})
    command = record.extra.get("command")
    if command and log.isEnabledFor(logging.DEBUG):  # may hold what its user keeps private
        log.debug("job %s runs %s", name, command,
                  extra={"event": "command", "job": record.name, "job_name": name,
                         "command": command})


class ActivityLog(SchedulerObserver):
    """`reasons`: what called for the last decision (Scheduler.last_reasons); `name_of`:
    uid -> the job's name (JobNames.name_of), read when a message is rendered."""

    def __init__(self, reasons: Callable[[], Sequence[str]],
                 name_of: Mapping[str, str] | None = None) -> None:
        self.reasons = reasons
        self.name_of: Mapping[str, str] = name_of if name_of is not None else {}

    def on_status(self, record: JobRecord, old: JobStatus, new: JobStatus, now: float) -> None:
        if new is JobStatus.COMPLETED:
            self._ended(record, "completed", "job %s of %s completed after %d epochs",
                        record.epochs)
        elif new is JobStatus.FAILED:
            self._ended(record, "failed", "job %s of %s failed: %s",
                        record.failure_reason or "no reason given",
                        reason=record.failure_reason)
        elif new is JobStatus.CANCELED:
            self._ended(record, "deleted", "deleted job %s of %s (it was %s)", str(old),
                        was=str(old))
        elif log.isEnabledFor(logging.DEBUG):  # a decision's record says why
            log.debug("job %s: %s -> %s", name_of(record), old, new,
                      extra={"event": "status", "job": record.name,
                             "job_name": name_of(record), "old": str(old), "new": str(new)})

    @staticmethod
    def _ended(record: JobRecord, event: str, message: str, detail: object,
               **fields: Any) -> None:
        if not log.isEnabledFor(logging.INFO):
            return
        user, name = owner_of(record), name_of(record)
        log.info(message, name, user, detail,
                 extra={"event": event, "job": record.name, "job_name": name, "user": user,
                        "gpu_type": record.gpu_type, **fields})

    def on_plan(self, plan: Plan, now: float, seconds: float, allocation_seconds: float) -> None:
        level = logging.INFO if plan.actions else logging.DEBUG
        if not log.isEnabledFor(level):
            return
        reasons = [named(str(r), self.name_of) for r in self.reasons()]
        why = ", ".join(reasons) or "no new event"  # start-up, or a retry after a refusal
        if not plan.actions:
            log.debug("decision (%s): nothing changed", why,
                      extra={"event": "decision", "reasons": reasons, "changes": []})
            return
        said_as = labels((a.job for a in plan.actions), self.name_of)
        log.info("decision (%s): %s", why, said(plan.actions, said_as),
                 extra={"event": "decision", "reasons": reasons,
                        "changes": [change(a, self.name_of) for a in plan.actions],
                        "migrated_workers": plan.migrated_workers,
                        "seconds": round(seconds, 6)})

    def on_recovered(self, gpu_type: str, now: float) -> None:
        if not log.isEnabledFor(logging.INFO):
            return
        where = "every GPU type" if gpu_type == ALL_GPU_TYPES else f"GPU type {gpu_type}"
        log.info("decisions for %s are made again", where,
                 extra={"event": "recovered", "gpu_type": gpu_type})


def said(actions: Sequence[Action], said_as: Mapping[str, str] | None = None) -> str:
    """'started a (0 -> 2 GPUs), preempted b (2 -> 0 GPUs)', the first CHANGES_SAID;
    `said_as`: uid -> how the job is said (job_labels.labels; default: its uid)."""
    as_ = said_as or {}
    text = ", ".join(f"{_VERBS[a.kind]} {as_.get(a.job, a.job)} ({a.workers_before} -> "
                     f"{a.workers_after} GPUs)" for a in actions[:CHANGES_SAID])
    more = len(actions) - CHANGES_SAID
    return f"{text} and {more} more" if more > 0 else text


def change(action: Action, name_of: Mapping[str, str]) -> dict[str, Any]:
    return {"job": action.job, "job_name": name_of.get(action.job, action.job),
            "action": str(action.kind), "before": action.workers_before,
            "after": action.workers_after}

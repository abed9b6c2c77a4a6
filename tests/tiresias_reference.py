"""Tiresias's queue order as it was at ce6fffe: one sort by the whole key, sort_key last;
the reference tests/test_decisions_unchanged.py compares Tiresias.order with."""

from __future__ import annotations

from collections.abc import Sequence

from voda.core.allocation.tiresias import Tiresias
from voda.core.model import Job


def order_reference(self: Tiresias, jobs: Sequence[Job]) -> list[Job]:
    def key(job: Job) -> tuple:
        queue = self.priority_class(job)
        if self.queue_order == "queue_entry":
            since = job.queue_since if job.queue_since is not None else job.submit_time
            return (job.priority, queue, since, job.sort_key)
        if job.first_start_time is not None:
            return (job.priority, queue, 0, job.first_start_time, job.sort_key)
        return (job.priority, queue, 1, 0.0, job.sort_key)
    return sorted(jobs, key=key)

"""SRJF's queue order as it was at ce6fffe: one (estimate, sort_key, job) tuple per job
sorted by its first two, the reference tests/test_decisions_unchanged.py compares
voda.core.allocation.srjf.shortest_first with."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from voda.core.estimate import EpochTimes
from voda.core.model import Job


def shortest_first_reference(jobs: Sequence[Job], size_of: Callable[[Job], int]) -> list[Job]:
    keyed = [
        (round(job.remaining_epochs * EpochTimes(job)(size_of(job)), 6)
         if job.remaining_epochs > 0 else 0.0, job.sort_key, job)
        for job in jobs
    ]
    keyed.sort(key=lambda t: (t[0], t[1]))
    return [job for _, _, job in keyed]

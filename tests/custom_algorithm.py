"""Custom allocation algorithms, loaded by import path in the registry tests."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from voda.core.model import Job


@dataclass(frozen=True)
class MinForAll:
    """Every job at min, in submit order, while they fit; `extra` more for the first."""

    name: str = "MinForAll"
    extra: int = 0

    def __call__(self, jobs: Sequence[Job], capacity: int) -> dict[str, int]:
        free, result = capacity, {}
        for job in sorted(jobs, key=lambda j: j.sort_key):
            take = job.min_workers if job.min_workers <= free else 0
            result[job.name] = take
            free -= take
        first = min(jobs, key=lambda j: j.sort_key, default=None)
        if first is not None and result[first.name] > 0:
            grow = min(self.extra, free, first.max_workers - result[first.name])
            result[first.name] += max(grow, 0)
        return result


def nothing_for_anyone(jobs: Sequence[Job], capacity: int) -> dict[str, int]:
    """A ready algorithm object (a plain function): everyone waits."""
    return {job.name: 0 for job in jobs}


nothing_for_anyone.name = "NothingForAnyone"  # type: ignore[attr-defined]


def everyone_at_min(jobs: Sequence[Job], capacity: int) -> dict[str, int]:
    """A plain function with no `name`: every job at min while they fit, in submit order."""
    free, result = capacity, {}
    for job in sorted(jobs, key=lambda j: j.sort_key):
        result[job.name] = job.min_workers if job.min_workers <= free else 0
        free -= result[job.name]
    return result


def over_capacity(jobs: Sequence[Job], capacity: int) -> dict[str, int]:
    """Breaks the contract: every job at max, whatever the capacity (its decisions are
    refused)."""
    return {job.name: job.max_workers for job in jobs}


over_capacity.name = "OverCapacity"  # type: ignore[attr-defined]

"""Where one schedule's average JCT gains and loses against another's, job by job.

Two runs of the same workload (say Voda's and Sia's) differ in average JCT; this splits the
difference by model (a job's category: its name up to the last "-", as the Sia workloads
name jobs "cifar10-12") into the hours the first run saves on the jobs it finishes sooner
and the hours it loses on the jobs it finishes later. `no_loss_mean_jct` is the first run's
average had it lost nothing: each job at the sooner of its two JCTs. It is not a schedule
either policy could run, but it bounds what removing the first run's losses alone could
win: when it is above a target, the target needs gains the first run does not make yet
(docs/design/014-heterogeneous.md). Only jobs that finished in both runs are compared.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from voda.sim.report import JobResult


@dataclass(frozen=True)
class CategoryGap:
    category: str
    jobs: int
    jct_hours: float  # the first run's JCTs, summed
    other_jct_hours: float  # the other run's, over the same jobs
    saved_hours: float  # summed over the jobs the first run finishes sooner
    lost_hours: float  # summed over the jobs it finishes later
    later_jobs: int  # how many it finishes later


def category_of(name: str) -> str:
    """A job's model: its name up to the last "-" ("cifar10-12" -> "cifar10")."""
    head, sep, _ = name.rpartition("-")
    return head if sep and head else name


def paired_jcts(first: Sequence[JobResult], other: Sequence[JobResult]
                ) -> list[tuple[str, float, float]]:
    """(name, first JCT, other JCT) of every job that finished in both runs, in the first
    run's order."""
    theirs = {j.name: j.jct for j in other if j.jct is not None}
    return [(j.name, j.jct, theirs[j.name]) for j in first
            if j.jct is not None and theirs.get(j.name) is not None]


def category_gaps(first: Sequence[JobResult], other: Sequence[JobResult]
                  ) -> list[CategoryGap]:
    """Per model (sorted by name), the first run's JCTs against the other's."""
    by_category: dict[str, list[tuple[float, float]]] = {}
    for name, mine, theirs in paired_jcts(first, other):
        by_category.setdefault(category_of(name), []).append((mine, theirs))
    out = []
    for category in sorted(by_category):
        pairs = by_category[category]
        out.append(CategoryGap(
            category=category,
            jobs=len(pairs),
            jct_hours=sum(m for m, _ in pairs) / 3600,
            other_jct_hours=sum(t for _, t in pairs) / 3600,
            saved_hours=sum(t - m for m, t in pairs if m < t) / 3600,
            lost_hours=sum(m - t for m, t in pairs if m > t) / 3600,
            later_jobs=sum(1 for m, t in pairs if m > t)))
    return out


def merge_gaps(runs: Sequence[Sequence[CategoryGap]]) -> list[CategoryGap]:
    """The gaps of several workloads summed per model."""
    total: dict[str, CategoryGap] = {}
    for gaps in runs:
        for g in gaps:
            t = total.get(g.category)
            total[g.category] = g if t is None else CategoryGap(
                g.category, t.jobs + g.jobs, t.jct_hours + g.jct_hours,
                t.other_jct_hours + g.other_jct_hours, t.saved_hours + g.saved_hours,
                t.lost_hours + g.lost_hours, t.later_jobs + g.later_jobs)
    return [total[c] for c in sorted(total)]


def no_loss_mean_jct(first: Sequence[JobResult], other: Sequence[JobResult]) -> float:
    """The first run's mean JCT (seconds) had each job finished no later than in the other
    run; NaN when no job finished in both."""
    pairs = paired_jcts(first, other)
    return statistics.fmean(min(m, t) for _, m, t in pairs) if pairs else float("nan")

"""A policy's longest JCTs against a baseline's over a set of runs, read four ways.

"p99 no worse than the baseline's" over many runs can mean: on average (the mean of
the runs' p99s), in every run, in every group of runs (a workload at every load), or
over every job of every run pooled. The runs' p99 is their 99th percentile JCT, which
in a run of a few hundred jobs is set by its few longest, so the readings can disagree:
the benches print all four rather than pick one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TailRun:
    """One run: the group it belongs to (its workload) and both sides' JCTs."""

    group: str
    ours: Sequence[float]
    theirs: Sequence[float]


@dataclass(frozen=True)
class TailReadings:
    mean_p99: float  # mean of our runs' p99s over the mean of theirs
    runs_above: int  # runs whose p99 is above theirs
    runs: int
    worst_group: str  # the group whose p99s, summed over its runs, are highest against theirs
    worst_group_ratio: float
    pooled: float  # the p99 of every JCT of every run over theirs


def p99(values: Sequence[float]) -> float:
    """The 99th percentile JCT (NaN where no job finished, as SimResult.p99_jct)."""
    if not len(values):
        return math.nan
    return float(np.percentile(np.asarray(values, dtype=float), 99))


def tail_readings(runs: Sequence[TailRun]) -> TailReadings:
    if not runs:
        raise ValueError("tail_readings: no runs")
    ours = [p99(r.ours) for r in runs]
    theirs = [p99(r.theirs) for r in runs]
    sums: dict[str, list[float]] = {}
    for run, mine, base in zip(runs, ours, theirs, strict=True):
        sums.setdefault(run.group, [0.0, 0.0])
        sums[run.group][0] += mine
        sums[run.group][1] += base
    worst = max(sums, key=lambda g: sums[g][0] / sums[g][1])
    return TailReadings(
        mean_p99=float(np.mean(ours) / np.mean(theirs)),
        runs_above=sum(m > b for m, b in zip(ours, theirs, strict=True)),
        runs=len(runs),
        worst_group=worst,
        worst_group_ratio=sums[worst][0] / sums[worst][1],
        pooled=p99([j for r in runs for j in r.ours]) / p99([j for r in runs for j in r.theirs]),
    )

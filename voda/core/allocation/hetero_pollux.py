"""Pollux on a heterogeneous cluster, as the Sia paper adapted it: Pollux decides GPU counts
as if every GPU were alike, then each job runs on one type, "the most GPUs of one type":
jobs in decreasing count, each on the accepted type with the most GPUs still free, at the
largest count that packs there and is at most what Pollux gave it."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping, Sequence

from voda.core.allocation.counts import packs
from voda.core.allocation.hetero import TypeChoice
from voda.core.allocation.hetero_models import TypeShape, accepted
from voda.core.allocation.pollux import Pollux
from voda.core.model import Job


def _unaware(job: Job, types: Sequence[str]) -> Job:
    """The job as a type-unaware Pollux sees it: the model of the type it runs on (or of
    the first accepted type that has one)."""
    order = ([job.gpu_type] if job.gpu_type in types else []) + list(types)
    model = next((job.goodput_by_type[t] for t in order if t in job.goodput_by_type),
                 job.goodput)
    return dataclasses.replace(job, goodput=model, category_goodput=None)


def pollux_choice(flexible: Sequence[Job], shapes: Mapping[str, TypeShape],
                  free: Mapping[str, int], penalty: float) -> TypeChoice:
    types = sorted(shapes)
    sizes = Counter(s.per_node for s in shapes.values())
    per_node = max(sizes, key=lambda g: (sizes[g], g))
    jobs = [_unaware(j, accepted(j, types)) for j in flexible]
    counts = Pollux(restart_penalty=penalty, gpus_per_node=per_node)(jobs, sum(free.values()))
    left = dict(free)
    choice: dict[str, str] = {}
    given: dict[str, int] = {}
    why: dict[str, str] = {}
    for job in sorted(flexible, key=lambda j: (-counts.get(j.name, 0), j.sort_key)):
        options = accepted(job, types)
        if not options:
            continue
        want = counts.get(job.name, 0)
        t = max(options, key=lambda o: (left[o], o == job.gpu_type, o))
        fits = packs(min(want, left[t]), shapes[t].per_node).nonzero()[0]
        n = int(fits[-1]) if len(fits) and want > 0 else 0
        if n < job.min_workers:
            n = 0
        choice[job.name], given[job.name] = t, n
        left[t] -= n
        why[job.name] = f"on {t}: the accepted type with the most GPUs free ({left[t] + n})"
    return TypeChoice(choice, given, why)

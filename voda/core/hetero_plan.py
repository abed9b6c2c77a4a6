"""decide() on a cluster of several GPU types, for jobs that accept more than one.

The heterogeneity policy (voda.core.allocation.hetero) gives each flexible job a type
(and, for Sia and Pollux, a count; for Voda, a count when Voda is the per-type algorithm,
else the user's algorithm counts on the types it chose); the job is then seen as a job
of that type, with its throughput model there (its own on that type, else its category's,
else projected), and the one decide() runs per type as always. A job given another type
than the one it holds GPUs of moves: decide() places it afresh on the new type's nodes,
and the backend restarts it there. With no flexible job this is decide() itself, unchanged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from voda.core.allocation.base import AllocationAlgorithm, checked_allocate
from voda.core.allocation.counts import FROM_CLUSTER
from voda.core.allocation.hetero import (
    DEFAULT_HETERO_POLICY,
    TypeChoice,
    choose_types,
    flexible_jobs,
)
from voda.core.allocation.hetero_models import hardware_ratios, type_model, type_ratios
from voda.core.allocation.voda import Voda
from voda.core.model import Cluster, Job, Placement, Plan
from voda.core.placement.base import Placer
from voda.core.plan import decide


@dataclass(frozen=True)
class FixedCounts:
    """The counts a heterogeneity policy set (Sia, Pollux) for its jobs, and `rest` for the
    type's other jobs, on what those leave."""

    counts: Mapping[str, int]
    rest: AllocationAlgorithm
    name: str = "fixed counts"
    gpus_per_node: int = FROM_CLUSTER
    decides_on_progress = True

    def __call__(self, jobs: Sequence[Job], capacity: int) -> dict[str, int]:
        out = {j.name: self.counts[j.name] for j in jobs if j.name in self.counts}
        others = [j for j in jobs if j.name not in self.counts]
        if others:
            rest = self.rest
            if getattr(rest, "gpus_per_node", None) == FROM_CLUSTER and \
                    self.gpus_per_node != FROM_CLUSTER and dataclasses.is_dataclass(rest):
                rest = dataclasses.replace(rest, gpus_per_node=self.gpus_per_node)
            out.update(checked_allocate(rest, others, max(0, capacity - sum(out.values()))))
        return out


def held_count(job: Job, gpu_type: str) -> int:
    """The GPUs a job keeps because its restart is under way there (Job.restoring_seconds):
    the type's algorithm may not change its count until the restart is done; 0: free."""
    if job.restoring_seconds > 0 and job.current_workers > 0 and gpu_type == job.gpu_type:
        return job.current_workers
    return 0


def retyped(jobs: Sequence[Job], choice: TypeChoice, policy: str = "") -> list[Job]:
    """The jobs as the per-type decision sees them: each flexible one on its chosen type,
    with its throughput model there (its own gradient statistics kept), and one whose
    restart is under way on that type held at its count (`held_count`) where the type's
    algorithm sets the counts (a policy that sets them, Sia, holds it itself). The types'
    speed ratios are the `policy`'s: Voda's from step times, the others' Sia's."""
    if not choice.types:
        return list(jobs)
    ratios_of = hardware_ratios if policy == "voda" else type_ratios
    ratios = ratios_of(flexible_jobs(jobs))
    out = []
    for job in jobs:
        t = choice.types.get(job.name)
        if t is None:
            out.append(job)
            continue
        model = type_model(job, t, ratios)
        goodput = job.goodput
        if model is not None and goodput is not None:
            goodput = dataclasses.replace(
                goodput, perf=model.perf, max_profiled_replicas=model.max_profiled_replicas,
                min_local=model.min_local, max_local=model.max_local)
        moved = t != job.gpu_type
        held = held_count(job, t) if choice.counts is None else 0
        out.append(dataclasses.replace(
            job, gpu_type=t, goodput=goodput, category_goodput=model,
            epoch_time_by_workers={} if moved else job.epoch_time_by_workers,
            layout_throughput={} if moved else job.layout_throughput,
            min_workers=held or job.min_workers, max_workers=held or job.max_workers,
            preferred_workers=held or job.preferred_workers))
    return out


def decide_hetero(
    jobs: Sequence[Job],
    cluster: Cluster,
    previous: Placement,
    algorithm: AllocationAlgorithm | Mapping[str, AllocationAlgorithm],
    placer: Placer,
    policy: str = DEFAULT_HETERO_POLICY,
    penalty: float = 30.0,
    explain_reasons: bool = True,
) -> tuple[Plan, TypeChoice, list[Job]]:
    """decide() after the policy chose the flexible jobs' types; (plan, choice, the jobs as
    the per-type decision saw them)."""
    if not flexible_jobs(jobs):
        plan = decide(jobs, cluster, previous, algorithm, placer, explain_reasons)
        return plan, TypeChoice(), list(jobs)
    choice = choose_types(policy, jobs, cluster, penalty)
    per_type = algorithm.values() if isinstance(algorithm, Mapping) else [algorithm]
    if policy == "voda" and not all(isinstance(a, Voda) for a in per_type):
        choice = dataclasses.replace(choice, counts=None)  # the user's algorithm counts
    typed = retyped(jobs, choice, policy)
    types = {j.gpu_type for j in typed} | set(cluster.gpu_types())
    algorithms: dict[str, AllocationAlgorithm] = {
        t: algorithm[t] if isinstance(algorithm, Mapping) else algorithm
        for t in types if not isinstance(algorithm, Mapping) or t in algorithm}
    if choice.counts is not None:
        algorithms = {t: FixedCounts(choice.counts, a) for t, a in algorithms.items()}
    plan = decide(typed, cluster, previous, algorithms, placer, explain_reasons)
    return plan, choice, typed

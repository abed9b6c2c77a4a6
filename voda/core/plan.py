"""decide(): the one pipeline every backend uses.

1. allocate: per GPU type, the algorithm maps the active jobs to GPU counts
   (checked against the contract);
2. place: the placer maps counts to nodes, keeping workers where they are;
3. diff: old and new placements become actions, ordered so GPUs are freed
   (halt, scale-in, migrate) before they are taken (start, scale-out).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from voda.core.allocation.base import AllocationAlgorithm, checked_allocate
from voda.core.model import (
    ACTION_ORDER,
    Action,
    ActionKind,
    Cluster,
    Job,
    JobPlacement,
    Placement,
    Plan,
    placement_workers,
)
from voda.core.placement.base import Placer, placement_problems


class PlacementFailed(ValueError):
    pass


def classify(old: JobPlacement, new: JobPlacement) -> ActionKind | None:
    """The action that turns `old` into `new`, or None when nothing changes."""
    before, after = placement_workers(old), placement_workers(new)
    if before == 0 and after == 0:
        return None
    if after == 0:
        return ActionKind.HALT
    if before == 0:
        return ActionKind.START
    if after < before:
        return ActionKind.SCALE_IN
    if after > before:
        return ActionKind.SCALE_OUT
    if dict(old) != dict(new):
        return ActionKind.MIGRATE
    return None


def moved_workers(old: JobPlacement, new: JobPlacement) -> int:
    """Workers taken off a node only to run elsewhere (a plain shrink moves none)."""
    if not old or not new:
        return 0
    after = dict(new)
    removed = sum(max(0, count - after.get(node, 0)) for node, count in old)
    shrink = max(0, placement_workers(old) - placement_workers(new))
    return removed - shrink


def diff(old: Placement, new: Placement) -> tuple[Action, ...]:
    actions = []
    for job in sorted(set(old) | set(new)):
        o, n = tuple(old.get(job, ())), tuple(new.get(job, ()))
        if o == n:
            continue
        kind = classify(o, n)
        if kind is not None:
            actions.append(Action(kind, job, o, n))
    rank = {kind: i for i, kind in enumerate(ACTION_ORDER)}
    return tuple(sorted(actions, key=lambda a: (rank[a.kind], a.job)))


def decide(
    jobs: Sequence[Job],
    cluster: Cluster,
    previous: Placement,
    algorithm: AllocationAlgorithm | Mapping[str, AllocationAlgorithm],
    placer: Placer,
) -> Plan:
    """Allocate, place and diff on an immutable snapshot.

    `algorithm` is one algorithm for every GPU type, or one per GPU type (one
    sub-scheduler per type). Raises AllocationRejected when an algorithm breaks
    its contract and PlacementFailed when the placer does: the caller keeps the
    plan in force.
    """
    allocation: dict[str, int] = {}
    gpu_types = sorted({*cluster.gpu_types(), *(j.gpu_type for j in jobs)})
    for gpu_type in gpu_types:
        of_type = [j for j in jobs if j.gpu_type == gpu_type]
        if not of_type:
            continue
        algo = algorithm[gpu_type] if isinstance(algorithm, Mapping) else algorithm
        allocation.update(checked_allocate(algo, of_type, cluster.capacity(gpu_type)))
    # 2. place
    by_name = {j.name: j for j in jobs}
    active_previous = {name: p for name, p in previous.items() if name in by_name}
    try:
        placement = placer(allocation, by_name, cluster, active_previous)
    except ValueError as exc:
        raise PlacementFailed(str(exc)) from exc
    problems = placement_problems(allocation, by_name, cluster, placement)
    if problems:
        raise PlacementFailed("; ".join(problems))
    # 3. diff (jobs that left the active set are not halted here: they are gone)
    actions = diff(active_previous, placement)
    migrated = sum(moved_workers(a.old, a.new) for a in actions)
    return Plan(allocation=allocation, placement=placement, actions=actions,
                migrated_workers=migrated)

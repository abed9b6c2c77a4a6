"""The simple placer: keep what can stay, then fill the first free GPUs in node order."""

from __future__ import annotations

from collections.abc import Mapping
from itertools import pairwise

from voda.core.model import Allocation, Cluster, Job, JobPlacement, Placement
from voda.core.placement.base import normalize


def shrink(current: Mapping[str, int], to: int) -> dict[str, int]:
    """Drop workers from the nodes where the job has fewest, so it stays consolidated."""
    kept = dict(current)
    excess = sum(kept.values()) - to
    for node in sorted(kept, key=lambda n: (kept[n], n)):
        if excess <= 0:
            break
        drop = min(kept[node], excess)
        kept[node] -= drop
        excess -= drop
    return {n: c for n, c in kept.items() if c > 0}


def first_fit(
    allocation: Allocation,
    jobs: Mapping[str, Job],
    cluster: Cluster,
    previous: Placement,
) -> Placement:
    order = {n.name: i for i, n in enumerate(cluster.nodes)}
    free = {n.name: n.gpus for n in cluster.nodes}
    node_type = {n.name: n.gpu_type for n in cluster.nodes}
    kept: dict[str, dict[str, int]] = {}
    # 1. Keep every surviving worker in place (shrinking jobs lose their smallest shards).
    for name in sorted(allocation):
        gpus = allocation[name]
        if gpus <= 0:
            continue
        gpu_type = jobs[name].gpu_type if name in jobs else None
        current = {
            n: c for n, c in previous.get(name, ())
            if n in free and (gpu_type is None or node_type[n] == gpu_type)
        }
        mine = current if sum(current.values()) <= gpus else shrink(current, gpus)
        for node, count in mine.items():
            take = min(count, free[node])
            if take:
                kept.setdefault(name, {})[node] = take
                free[node] -= take
    # 2. Fill what is still missing on the first nodes of the job's GPU type with room.
    result: dict[str, tuple] = {}
    for name in sorted(allocation, key=lambda n: jobs[n].sort_key if n in jobs else (0, 0.0, n)):
        gpus = allocation[name]
        if gpus <= 0:
            continue
        mine = kept.get(name, {})
        missing = gpus - sum(mine.values())
        gpu_type = jobs[name].gpu_type if name in jobs else None
        for node in cluster.nodes:
            if missing <= 0:
                break
            if gpu_type is not None and node.gpu_type != gpu_type:
                continue
            take = min(free[node.name], missing)
            if take:
                mine[node.name] = mine.get(node.name, 0) + take
                free[node.name] -= take
                missing -= take
        if missing > 0:
            raise ValueError(f"job {name!r}: {missing} GPUs could not be placed")
        result[name] = _reuse_if_unchanged(previous.get(name, ()), mine, order)
    return result


def _reuse_if_unchanged(
    before: JobPlacement, now: Mapping[str, int], order: Mapping[str, int]
) -> JobPlacement:
    """`before` itself when it already says `now` in node order (most jobs, most rounds)."""
    if (
        len(before) == len(now)
        and all(now.get(node) == count for node, count in before)
        and all(order[a] < order[b] for (a, _), (b, _) in pairwise(before))
    ):
        return tuple(before)
    return normalize(now, order)

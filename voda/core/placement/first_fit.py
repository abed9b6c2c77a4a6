"""The simple placer: keep what can stay, then fill the first free GPUs in node order."""

from __future__ import annotations

from collections.abc import Mapping
from itertools import pairwise
from operator import attrgetter

from voda.core.allocation.base import by_submit
from voda.core.model import SORT_KEY, Allocation, Cluster, Job, JobPlacement, Placement
from voda.core.placement.base import NodeMaps, node_maps, normalize

_NAME = attrgetter("name")


def shrink(current: Mapping[str, int], to: int) -> dict[str, int]:
    """Drop workers from the nodes where the job has fewest, so it stays consolidated."""
    kept = dict(current)
    excess = sum(kept.values()) - to
    if excess <= 0:  # most jobs: nothing to drop, no order to work out
        return {n: c for n, c in kept.items() if c > 0}
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
    maps = node_maps(cluster)
    order, node_type, nodes_of = maps.order, maps.gpu_type, maps.nodes_of
    free = dict(maps.capacity)
    kept: dict[str, dict[str, int]] = {}
    whole: set[str] = set()  # jobs that keep every worker where it is, and need no more
    # Jobs that keep their placement in force as it is: handed back as it is.
    same: dict[str, JobPlacement] = {}
    placed = [name for name, gpus in allocation.items() if gpus > 0]
    shapes: dict[int, _Shape] = {}  # of the placements of several shards met this time
    # 1. Keep every surviving worker in place (shrinking jobs lose their smallest shards).
    for name in sorted(placed):
        gpus = allocation[name]
        before = previous.get(name)
        if not before:
            continue
        job = jobs.get(name)
        gpu_type = None if job is None else job.gpu_type
        if len(before) == 1:  # _keeps_whole of one shard, inline: most jobs, most decisions
            node, count = before[0]
            if count == gpus and 0 < count <= free.get(node, 0) and (
                    gpu_type is None or node_type[node] == gpu_type):
                free[node] -= count
                same[name] = tuple(before)
                continue
        elif _keeps_whole_as_before(before, gpus, gpu_type, free, maps, shapes):
            same[name] = tuple(before)
            continue
        current = {
            n: c for n, c in before
            if n in free and (gpu_type is None or node_type[n] == gpu_type)
        }
        held = sum(current.values())
        mine = current if held <= gpus else shrink(current, gpus)
        mine_kept = kept[name] = {}
        for node, count in mine.items():
            take = min(count, free[node])
            if take:
                mine_kept[node] = take
                free[node] -= take
        if held == gpus and len(mine_kept) == len(before) and all(
                mine_kept.get(node) == count for node, count in before):
            whole.add(name)
    # 2. Fill what is still missing on the first nodes of the job's GPU type with room.
    # Free GPUs only go down here, so the nodes before the first one of a type with room
    # stay full: each type's scan starts there (None: a job of no known type, any node).
    first_with_room = dict.fromkeys(nodes_of, 0)
    result: dict[str, tuple] = {}
    for name in _in_job_order(placed, jobs):
        kept_as_is = same.get(name)
        if kept_as_is is not None:
            result[name] = kept_as_is
            continue
        gpus = allocation[name]
        if name in whole:  # most jobs, most decisions: nothing to add, nothing moved
            result[name] = _reuse_if_unchanged(previous[name], kept[name], order)
            continue
        mine = kept.get(name, {})
        missing = gpus - sum(mine.values())
        gpu_type = jobs[name].gpu_type if name in jobs else None
        candidates = nodes_of.get(gpu_type, ())
        i = first_with_room.get(gpu_type, 0)
        while i < len(candidates) and free[candidates[i]] == 0:
            i += 1
        if gpu_type in first_with_room:
            first_with_room[gpu_type] = i
        while missing > 0 and i < len(candidates):
            node_name = candidates[i]
            take = min(free[node_name], missing)
            if take:
                mine[node_name] = mine.get(node_name, 0) + take
                free[node_name] -= take
                missing -= take
            i += 1
        if missing > 0:
            raise ValueError(f"job {name!r}: {missing} GPUs could not be placed")
        result[name] = _reuse_if_unchanged(previous.get(name, ()), mine, order)
    _last_shapes[:] = [shapes]
    return result


def _in_job_order(names: list[str], jobs: Mapping[str, Job]) -> list[str]:
    """`names` by their jobs' sort key (a name without a job: by (0, 0.0, name))."""
    known = [jobs[n] for n in names if n in jobs]
    if len(known) == len(names) and list(map(_NAME, known)) == names:
        # Each job under its own name: by_submit's three stable sorts by one key each,
        # the same order as sorting by the key tuple (names are unique), for less.
        return list(map(_NAME, by_submit(known)))
    return sorted(names, key=lambda n: SORT_KEY(jobs[n]) if n in jobs else (0, 0.0, n))


def _keeps_whole(before: JobPlacement, gpus: int, gpu_type: str | None,
                 free: dict[str, int], maps: NodeMaps) -> bool:
    """Whether a job keeps its placement `before` as it is: `gpus` GPUs on the same nodes,
    in node order, each of its type with the room still free (then taken off `free`). The
    general path would keep every worker and hand `before` back too."""
    order, node_type = maps.order, maps.gpu_type
    total, last = 0, -1
    for node, count in before:
        position = order.get(node)
        if position is None or position <= last or count <= 0 or free[node] < count or (
                gpu_type is not None and node_type[node] != gpu_type):
            return False
        last = position
        total += count
    if total != gpus:
        return False
    for node, count in before:
        free[node] -= count
    return True


# What `_keeps_whole` reads of a placement that does not change while it is held: (the
# placement, the NodeMaps read, the one GPU type of its nodes (_MIXED: several; _NOT_KEPT:
# an unknown node, nodes out of order or a count below 1), its workers).
_Shape = tuple[JobPlacement, NodeMaps, object, int]
_MIXED, _NOT_KEPT = object(), object()
_last_shapes: list[dict[int, _Shape]] = [{}]  # by id() of the placement, from the last call


def _keeps_whole_as_before(before: JobPlacement, gpus: int, gpu_type: str | None,
                           free: dict[str, int], maps: NodeMaps,
                           shapes: dict[int, _Shape]) -> bool:
    """`_keeps_whole`, the order, counts and GPU types of `before` read once while it is
    held (a job keeps its placement tuple from one decision to the next): only the room
    left is looked at each time. `shapes` gets what was read, for the next call."""
    key = id(before)
    shape = _last_shapes[0].get(key)
    if shape is None or shape[0] is not before or shape[1] is not maps:
        shape = _shape_of(before, maps)
    shapes[key] = shape
    kind, total = shape[2], shape[3]
    if kind is _NOT_KEPT or total != gpus or (gpu_type is not None and kind != gpu_type):
        return False
    for node, count in before:
        if free[node] < count:
            return False
    for node, count in before:
        free[node] -= count
    return True


def _shape_of(before: JobPlacement, maps: NodeMaps) -> _Shape:
    order, node_type = maps.order, maps.gpu_type
    total, last = 0, -1
    kind: object = None
    for node, count in before:
        position = order.get(node)
        if position is None or position <= last or count <= 0:
            return before, maps, _NOT_KEPT, 0
        last = position
        total += count
        here = node_type[node]
        kind = here if kind is None or kind == here else _MIXED
    return before, maps, kind, total


def _reuse_if_unchanged(
    before: JobPlacement, now: Mapping[str, int], order: Mapping[str, int]
) -> JobPlacement:
    """`before` itself when it already says `now` in node order (most jobs, most rounds)."""
    if len(before) == 1 and len(now) == 1:
        node, count = before[0]
        if now.get(node) == count:
            return tuple(before)
    if (
        len(before) == len(now)
        and all(now.get(node) == count for node, count in before)
        and all(order[a] < order[b] for (a, _), (b, _) in pairwise(before))
    ):
        return tuple(before)
    return normalize(now, order)

"""The simple placer: keep what can stay, then fill the first free GPUs in node order.

`first_fit` works from its last result on the same cluster (`_since_last`): decision after
decision almost every job keeps the very tuple it was handed, at the same GPU count, and
only the jobs that changed are placed again. `plain_first_fit` places every job, and is
the reference (tests/test_first_fit_since_last.py compares the two call after call).
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import dataclass
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
) -> dict[str, JobPlacement]:
    """`plain_first_fit`, working from the last result on the same cluster where it can:
    the jobs that keep the very tuple they were handed last time at the same GPU count,
    GPU type and place in the job order are handed it back unlooked at; the others are
    placed as the plain placer would place them, on what the kept ones leave."""
    maps = node_maps(cluster)
    with _taking:  # one caller takes it: it is updated in place, then handed on
        last = _last_fit.pop() if _last_fit else None
        _last_fit.clear()
    result = None
    if last is not None and last.maps is maps:
        result = _since_last(last, allocation, jobs, maps, previous)
    if result is None:
        result = plain_first_fit(allocation, jobs, cluster, previous)
        last = _fit_of(dict(result), allocation, jobs, maps)
    if last is not None:
        with _taking:
            _last_fit[:] = [last]
    return result


def forget_last_fit() -> None:
    """Drop the last result (the next call places every job)."""
    _last_fit.clear()


# A job's part of the last result and what it was placed for: (its JobPlacement tuple,
# its GPUs, its sort key: its place in the job order, and the Job itself: handed the same
# object again, its type, priority and submit time are the same, as a Job's are frozen and
# the engine's kept snapshot, voda.engine.snapshots.LiveJob, takes new values only in its
# counters and maps).
_Entry = tuple[JobPlacement, int, tuple[int, float, str], Job]


@dataclass
class _Fit:
    """The last result on the cluster `maps` are of: the jobs in job order, what each
    was placed for, and the GPUs it leaves free on each node."""

    maps: NodeMaps
    result: dict[str, JobPlacement]
    entries: dict[str, _Entry]
    free: dict[str, int]


_last_fit: list[_Fit] = []
_taking = threading.Lock()  # decisions may run in several threads (several schedulers)


def _fit_of(result: dict[str, JobPlacement], allocation: Allocation,
            jobs: Mapping[str, Job], maps: NodeMaps) -> _Fit | None:
    """What the next call works from, after a plain placement (None: a job it cannot
    vouch for, such as one placed without a Job)."""
    entries: dict[str, _Entry] = {}
    free = dict(maps.capacity)
    for name, placement in result.items():
        job = jobs.get(name)
        if job is None or job.name != name:
            return None
        entries[name] = _entry(placement, allocation[name], job)
        held = 0
        for node, count in placement:
            if type(count) is not int or count <= 0 or maps.gpu_type.get(node) != job.gpu_type:
                return None  # made of a placement in force no placer made
            free[node] -= count
            held += count
        if held != allocation[name]:
            return None  # topped up past a negative count in force: no placer made that
    if any(count < 0 for count in free.values()):
        return None  # over-full, from such a placement: the plain placer goes on deciding
    return _Fit(maps, result, entries, free)


def _entry(placement: JobPlacement, gpus: int, job: Job) -> _Entry:
    return placement, gpus, SORT_KEY(job), job


def _since_last(last: _Fit, allocation: Allocation, jobs: Mapping[str, Job],
                maps: NodeMaps, previous: Placement) -> dict[str, JobPlacement] | None:
    """The plain placer's result, from `last` (updated to it), or None where it cannot
    tell for sure: the caller places every job then.

    Why it is the plain result: a kept job holds a tuple the plain placer made for the same
    GPUs and type on these nodes (in node order, counts above 0), and the changed jobs'
    workers in force fit beside the kept jobs' (checked below). Then no job in the plain
    placer's first pass lacks room for a worker it keeps, whatever the order, so a kept job
    keeps its tuple as it is, a changed one keeps what it would keep there, and the GPUs
    left free are the same. The second pass adds GPUs in job order only to jobs that do
    not keep all they hold (changed ones), on the first nodes with room: the same nodes
    here, as the kept jobs take nothing in it."""
    entries = last.entries
    kept: dict[str, _Entry] = {}
    changed: list[str] = []
    job_of, held, entry_of = jobs.get, previous.get, entries.get
    for name, gpus in allocation.items():
        if gpus <= 0:
            continue
        job = job_of(name)
        if job is None:
            return None  # placed without a Job: the plain placer decides
        entry = entry_of(name)
        if entry is not None and entry[0] is held(name) and entry[1] == gpus:
            old = entry[3]
            if old is job:
                kept[name] = entry
                continue
            if (old.gpu_type == job.gpu_type and old.priority == job.priority
                    and old.submit_time == job.submit_time and job.name == name):
                kept[name] = entries[name] = (*entry[:3], job)  # the same, told by a new Job
                continue
        if job.name != name:
            return None  # a Job under another name: the plain placer decides
        changed.append(name)
    free = last.free
    for name in entries.keys() - kept.keys():  # changed or gone: its GPUs are given back
        for node, count in entries.pop(name)[0]:
            free[node] += count
    if changed and not _fits_beside(changed, allocation, jobs, previous, free, maps):
        return None
    placed = _place_changed(changed, allocation, jobs, previous, free, maps)
    if placed is None:
        return None
    for name, placement in placed.items():
        job = jobs[name]
        entries[name] = _entry(placement, allocation[name], job)
    last.result = _in_order(last.result, kept, placed, jobs)
    return dict(last.result)  # the caller's to change


def _fits_beside(changed: list[str], allocation: Allocation, jobs: Mapping[str, Job],
                 previous: Placement, free: dict[str, int], maps: NodeMaps) -> bool:
    """Whether the workers the changed jobs hold (on nodes of their type: the ones the
    plain placer would keep) fit in what the kept jobs leave free."""
    node_type = maps.gpu_type
    need: dict[str, int] = {}
    for name in changed:
        gpu_type = jobs[name].gpu_type
        before = previous.get(name) or ()
        seen = set()
        for node, count in before:
            if node in seen or type(count) is not int or count <= 0:
                return False  # a placement no placer made: the plain placer says what
            seen.add(node)
            if node in free and node_type[node] == gpu_type:
                need[node] = need.get(node, 0) + count
    return all(count <= free[node] for node, count in need.items())


def _place_changed(changed: list[str], allocation: Allocation, jobs: Mapping[str, Job],
                   previous: Placement, free: dict[str, int], maps: NodeMaps
                   ) -> dict[str, JobPlacement] | None:
    """The plain placer's two passes over the changed jobs alone, `free` the room the kept
    jobs leave (updated). None where a job cannot be placed (the plain placer says so)."""
    kept: dict[str, dict[str, int]] = {}
    whole: set[str] = set()
    for name in sorted(changed):
        before = previous.get(name)
        if before:
            kept[name], keeps_all = _keep_survivors(before, allocation[name],
                                                    jobs[name].gpu_type, free, maps.gpu_type)
            if keeps_all:
                whole.add(name)
    first_with_room: dict[str | None, int] = dict.fromkeys(maps.nodes_of, 0)
    placed: dict[str, JobPlacement] = {}
    for name in sorted(changed, key=lambda n: SORT_KEY(jobs[n])):
        mine = kept.get(name, {})
        if name not in whole:
            try:
                mine = _fill(name, allocation[name], mine, jobs[name].gpu_type, free,
                             maps.nodes_of, first_with_room)
            except ValueError:
                return None
        placed[name] = _reuse_if_unchanged(previous.get(name, ()), mine, maps.order)
    return placed


def _in_order(last: dict[str, JobPlacement], kept: Mapping[str, _Entry],
              placed: dict[str, JobPlacement], jobs: Mapping[str, Job]
              ) -> dict[str, JobPlacement]:
    """The kept jobs (in `last`'s order, the job order) and the placed ones merged in job
    order, as the plain placer lists them."""
    names = [name for name in last if name in kept]
    if not placed:
        return {name: kept[name][0] for name in names}
    keys = [kept[name][2] for name in names]
    out: dict[str, JobPlacement] = {}
    start = 0
    for name in sorted(placed, key=lambda n: SORT_KEY(jobs[n])):
        end = bisect_left(keys, SORT_KEY(jobs[name]), start)
        out.update((kept_name, kept[kept_name][0]) for kept_name in names[start:end])
        out[name] = placed[name]
        start = end
    out.update((kept_name, kept[kept_name][0]) for kept_name in names[start:])
    return out


def plain_first_fit(
    allocation: Allocation,
    jobs: Mapping[str, Job],
    cluster: Cluster,
    previous: Placement,
) -> dict[str, JobPlacement]:
    """Keep every surviving worker in place, then place what is missing on the first
    nodes of the job's type with room, in job order; every job looked at."""
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
        kept[name], keeps_all = _keep_survivors(before, gpus, gpu_type, free, node_type)
        if keeps_all:
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
        gpu_type = jobs[name].gpu_type if name in jobs else None
        mine = _fill(name, gpus, kept.get(name, {}), gpu_type, free, nodes_of, first_with_room)
        result[name] = _reuse_if_unchanged(previous.get(name, ()), mine, order)
    _last_shapes[:] = [shapes]
    return result


def _keep_survivors(before: JobPlacement, gpus: int, gpu_type: str | None,
                    free: dict[str, int], node_type: Mapping[str, str]
                    ) -> tuple[dict[str, int], bool]:
    """The workers of `before` a job at `gpus` keeps where they are (a shrinking job loses
    its smallest shards), taken off `free`; and whether it keeps all it held, no more."""
    current = {
        n: c for n, c in before
        if n in free and (gpu_type is None or node_type[n] == gpu_type)
    }
    held = sum(current.values())
    mine = current if held <= gpus else shrink(current, gpus)
    mine_kept = {}
    for node, count in mine.items():
        take = min(count, free[node])
        if take:
            mine_kept[node] = take
            free[node] -= take
    keeps_all = held == gpus and len(mine_kept) == len(before) and all(
        mine_kept.get(node) == count for node, count in before)
    return mine_kept, keeps_all


def _fill(name: str, gpus: int, mine: dict[str, int], gpu_type: str | None,
          free: dict[str, int], nodes_of: Mapping[str | None, list[str]],
          first_with_room: dict[str | None, int]) -> dict[str, int]:
    """`mine` topped up to `gpus` from the first nodes of the job's GPU type with room
    (taken off `free`). Free GPUs only go down, so the nodes before the first one of a type
    with room stay full: each type's scan starts there (`first_with_room`)."""
    missing = gpus - sum(mine.values())
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
    return mine


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

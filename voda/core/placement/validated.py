"""placement_problems, checked against the last valid placement: the same answer for less.

Decision after decision, almost every job keeps the very JobPlacement tuple it held (a
placer that keeps a job hands its tuple back), with the same allocation, GPU type and
allowed nodes, on the same Cluster object. Such a job was found valid last time and is
not checked shard by shard again; each node's use is carried over and updated from the
jobs that changed, and only a node whose use went up can newly go over its capacity.

Only "valid" is decided here. Anything else (a problem, or anything unusual such as a
shard that raises) is handed to the full check, `placement_problems`, which says it in
its own words: the problems (and their order) are always the full check's.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from operator import countOf

from voda.core.model import Allocation, Cluster, Job, JobPlacement, Placement
from voda.core.placement.base import node_maps, placement_problems

# A job's part of a valid placement, and what it was valid for: (the very JobPlacement
# tuple it was handed, all (str, int) tuples; its allocation, an int; its job's GPU type
# and allowed nodes). Trusted again only for the same objects (an equal set of allowed
# nodes too): an object that is the one checked cannot say anything else.
_Entry = tuple[JobPlacement, int, str | None, frozenset[str] | None]


@dataclass
class _Valid:
    """The last placement found valid on `cluster`: its jobs, and each node's use."""

    cluster: Cluster
    jobs: dict[str, _Entry]
    used: dict[str, int]


_last_valid: list[_Valid] = []
_taking = threading.Lock()  # decisions may run in several threads (several schedulers)


def placement_problems_since_last(
    allocation: Allocation, jobs: Mapping[str, Job], cluster: Cluster, placement: Placement
) -> list[str]:
    """`placement_problems(allocation, jobs, cluster, placement)`, working from the last
    placement it found valid on the same Cluster object."""
    with _taking:  # one caller takes it: it is updated in place, then dropped
        last = _last_valid.pop() if _last_valid else None
        _last_valid.clear()
    if last is not None and last.cluster is not cluster:
        last = None
    try:
        valid, kept = _valid_from(last, allocation, jobs, cluster, placement)
    except Exception:  # a malformed placement: the full check says how (or raises)
        valid, kept = False, None
    if not valid:
        return placement_problems(allocation, jobs, cluster, placement)
    if kept is not None:
        with _taking:
            _last_valid[:] = [kept]
    return []


def forget_valid() -> None:
    """Drop the last valid placement (the next check is a full one)."""
    _last_valid.clear()


def _valid_from(last: _Valid | None, allocation: Allocation, jobs: Mapping[str, Job],
                cluster: Cluster, placement: Placement) -> tuple[bool, _Valid | None]:
    """Whether the placement is surely valid, and then what to work from next time (None
    where something in it could change behind an entry's back: nothing is kept)."""
    maps = node_maps(cluster)
    nodes, type_of, capacity = maps.nodes, maps.gpu_type, maps.capacity
    before: dict[str, _Entry] = last.jobs if last is not None else {}
    used: dict[str, int] = last.used if last is not None else {}  # taken over: `last` is dropped
    entries: dict[str, _Entry] = {}
    raised: list[str] = []  # nodes whose use went up
    keep = True
    allocated, job_of, used_on = allocation.get, jobs.get, used.get
    for name, job_placement in placement.items():
        gpus = allocated(name, 0)
        job = job_of(name)
        entry = before.get(name)
        if entry is not None and entry[0] is job_placement and entry[1] is gpus and (
                job is not None and entry[2] is job.gpu_type):
            allowed = job.nodes
            if entry[3] is allowed or (type(allowed) is frozenset and entry[3] == allowed):
                entries[name] = entry  # as it was, valid for the same things
                continue
        if gpus == 0:
            return False, None  # placed but not allocated
        gpu_type = job.gpu_type if job is not None else None
        allowed = job.nodes if job is not None else None
        placed = 0
        for node_name, count in job_placement:
            # The full check's test of a shard that raises nothing (see placement_problems).
            if not (count > 0 and (type_of.get(node_name) == gpu_type and (
                    allowed is None or node_name in allowed) if gpu_type is not None
                    else node_name in nodes)):
                return False, None
            placed += count
            used[node_name] = used_on(node_name, 0) + count
            raised.append(node_name)
        if placed != gpus:
            return False, None
        if keep and job is not None and _reusable(job_placement, gpus, gpu_type, allowed):
            entries[name] = (job_placement, gpus, gpu_type, allowed)
        else:
            keep = False
    for name, entry in before.items():
        if entries.get(name) is not entry:  # changed or gone: its GPUs are given back
            for node_name, count in entry[0]:
                used[node_name] -= count
    if any(used[node_name] > capacity[node_name] for node_name in raised):
        return False, None
    # Every job placed is allocated GPUs: as many allocated as placed, none is left out
    # (counted in C: the jobs left waiting, at 0, may be thousands).
    if len(allocation) - countOf(allocation.values(), 0) != len(placement):
        return False, None  # allocated but not placed
    return True, _Valid(cluster, entries, used) if keep else None


def _reusable(job_placement: JobPlacement, gpus: object, gpu_type: object,
              allowed: object) -> bool:
    """Whether nothing the entry was checked on can change behind its back."""
    return (type(job_placement) is tuple and type(gpus) is int
            and (gpu_type is None or type(gpu_type) is str)
            and (allowed is None or type(allowed) is frozenset)
            and all(type(shard) is tuple and len(shard) == 2 and type(shard[0]) is str
                    and type(shard[1]) is int for shard in job_placement))

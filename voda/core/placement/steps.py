"""Steps 1-3 of one placement call for one GPU type: keep, add, defragment.

Also the modes (MODES) that redo them with less freedom until the plan is
reachable. See voda.core.placement.manager for the steps.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from voda.core.model import Allocation, Job, Node, Placement
from voda.core.placement.first_fit import shrink
from voda.core.placement.packer import NodeCounts, Packer
from voda.core.placement.rebuild import rebuild
from voda.core.placement.settings import DISTRIBUTED, PlacementSettings, strategy_of
from voda.core.placement.topology import FreeIndex, Topology
from voda.core.placement.unreachable import UnreachableWatch

# How much of steps 2-3 a call may use, in this order, until the actions that lead
# from the previous placement to the new one can be applied one by one (see
# sequence_problems): everything; no defragmentation; running jobs only grow in
# place. The last one is always applicable when the previous placement is valid:
# its actions only free GPUs before they only take free ones. (A rebuild, 3a, is
# checked where it is made and dropped when it is not applicable.)
FULL, NO_DEFRAGMENT, IN_PLACE = "full", "no-defragment", "in-place"
MODES = (FULL, NO_DEFRAGMENT, IN_PLACE)
# Step 2 places a job afresh only when the free GPUs allow a lower penalty than it has
# (Packer.penalty_floor); False: it always tries (the reference the tests compare with).
SKIP_HOPELESS_AFRESH = True


def run_steps(
    jobs: Sequence[Job],
    allocation: Allocation,
    nodes: Sequence[Node],
    topology: Topology,
    previous: Placement,
    settings: PlacementSettings,
    mode: str,
    reachable: Callable[[Mapping[str, NodeCounts]], bool],
    kept: Kept | None = None,
    watch: UnreachableWatch | None = None,
) -> tuple[dict[str, NodeCounts] | None, Packer, Kept]:
    """Steps 1-3 of voda.core.placement.manager's doc for the jobs and nodes of one GPU type.

    Returns {job: {node id: workers}}, the packer, whose flags tell what it did, and
    step 1's result, to pass back when the steps are redone in another mode. With a
    `watch`, None instead of the placements when, once reservations were given back, the
    result is proven unreachable part-way (voda.core.placement.unreachable).
    """
    packer = Packer(FreeIndex.of(nodes, topology), settings, {j.name: j for j in jobs})
    ix = packer.ix
    # 1. keep; `steady`: jobs whose count stays (moving them is a migration, applied
    # before any start)
    if kept is None:
        current, short, steady = _keep(jobs, allocation, previous, ix)
        short.sort(key=lambda j: (-(allocation[j.name] - sum(current[j.name].values())),
                                  j.sort_key))
        kept = Kept(list(ix.free), list(ix.sensitive), dict(current), list(short), steady)
    else:
        current, short, steady = kept.replay(ix)
    # 2. add, the jobs short of most workers first
    started = {j.name for j in short if not current[j.name]}
    changed = {j.name for j in short}
    if mode == IN_PLACE:
        watch = None
    for pos, job in enumerate(short):
        had = current[job.name]
        current[job.name] = counts = _add(packer, job, allocation[job.name], had,
                                          afresh=mode != IN_PLACE)
        if watch is None or not packer.released:
            continue
        if watch.started:
            proven = watch.placed(packer, job, had, counts)
        elif _watchable(jobs, settings, mode, steady, changed):
            proven = watch.start(packer, current, short[:pos + 1], short[pos + 1:])
        else:
            watch = None
            continue
        if proven:
            return None, packer, kept
    movable = started | (steady - changed)
    if changed and settings.defragment and mode == FULL:
        _relayout(packer, jobs, current, steady - changed)
    # 3. defragment: many changes -> rebuild and match; else make room on one node
    if changed and settings.defragment and mode == FULL:
        penalty = sum(packer.penalty(j, current[j.name]) for j in short)
        rebuilt = None
        if penalty > 0 and len(changed) >= settings.rebuild_changed_share * len(jobs):
            rebuilt = rebuild(packer, jobs, allocation, current, previous, movable, started,
                              topology)
            if rebuilt is not None and not reachable(rebuilt):
                rebuilt = None
        if rebuilt is not None:
            current = rebuilt
        elif penalty > 0:
            residents = _residents(current, len(ix.nodes))
            for job in sorted(short, key=lambda j: (-allocation[j.name], j.sort_key)):
                k = allocation[job.name]
                if k <= ix.max_cap and packer.penalty(job, current[job.name]) > 0:
                    _make_room(packer, job, current, residents, movable, started, settings)
    return current, packer, kept


def _watchable(jobs: Sequence[Job], settings: PlacementSettings, mode: str,
               steady: set[str], changed: set[str]) -> bool:
    """Whether an UnreachableWatch's proof holds in this mode: no rebuild (step 3a) may
    run and no job of unchanged size may be moved for its learned layout (step 2b)."""
    if mode != FULL or not settings.defragment:
        return True
    if len(changed) >= settings.rebuild_changed_share * len(jobs):
        return False
    return not any(j.layout_throughput for j in jobs if j.name in steady
                   and j.name not in changed)


@dataclass(frozen=True, slots=True)
class Kept:
    """Step 1's result, the same in every mode: the index's free and latency-sensitive
    counts after it, and what `_keep` returns (the jobs short of workers sorted for step 2).
    Nothing changes a job's node counts in place (steps 2-3 replace them), so the
    counts are shared."""

    free: list[int]
    sensitive: list[int]
    current: dict[str, NodeCounts]
    short: list[Job]
    steady: set[str]

    def replay(self, ix: FreeIndex) -> tuple[dict[str, NodeCounts], list[Job], set[str]]:
        """Step 1 again on a fresh index of the same nodes, as `_keep` leaves it."""
        if self.free != ix.free:
            ix.set_free(self.free)
        ix.sensitive[:] = self.sensitive
        return dict(self.current), list(self.short), self.steady


def _keep(
    jobs: Sequence[Job], allocation: Allocation, previous: Placement, ix: FreeIndex
) -> tuple[dict[str, NodeCounts], list[Job], set[str]]:
    """Step 1: every job keeps its workers on the nodes that still exist, in job order,
    each node giving what it has left (a job that shrinks drops its smallest shards).

    Returns the kept node counts per job, the jobs short of workers (in job order) and
    the jobs whose count stays (`steady`). The free GPUs are counted on a copy and set
    on the index once, which leaves it as taking the jobs' workers one by one would.
    """
    index, free, sensitive = ix.index, list(ix.free), ix.sensitive
    current: dict[str, NodeCounts] = {}
    short: list[Job] = []
    steady: set[str] = set()
    for job in jobs:
        name = job.name
        k = allocation[name]
        shards = previous.get(name, ())
        counts: NodeCounts = {}
        if len(shards) == 1:  # most jobs: one node, nothing to merge or sort
            node, count = shards[0]
            i = index.get(node)
            held = 0 if i is None else count
            if i is not None and count > 0:
                take = min(count, k, free[i])
                if take:
                    counts[i] = take
        else:
            mine: dict[str, int] = {}
            held = 0
            for node, count in shards:
                if node in index:
                    held += count
                    if count > 0:
                        mine[node] = mine.get(node, 0) + count
            for node, count in sorted(shrink(mine, k).items()):
                i = index[node]
                take = min(count, free[i])
                if take:
                    counts[i] = take
        placed = 0
        for i, c in counts.items():
            free[i] -= c
            placed += c
            if job.latency_sensitive:
                sensitive[i] += c
        current[name] = counts
        if placed < k:
            short.append(job)
        if held == k:
            steady.add(name)
    if free != ix.free:
        ix.set_free(free)
    return current, short, steady


def _add(packer: Packer, job: Job, k: int, have: NodeCounts, afresh: bool = True) -> NodeCounts:
    """Bring a job to k workers: grow on and near its nodes, or place it afresh if tighter.

    The GPUs a job placed afresh leaves stay taken for the rest of the call: they
    are freed only when its scale-out is applied, after every other start.
    """
    ix = packer.ix
    counts = dict(have)
    missing = k - sum(counts.values())
    if counts and not (strategy_of(job) == DISTRIBUTED or job.latency_sensitive):
        # (a node's room: its free GPUs up to the request's per-node cap, as Packer.room)
        node_cap = packer.node_cap(job, k)
        free = ix.free
        for i in (counts if len(counts) == 1 else sorted(counts, key=lambda i: (-counts[i], i))):
            extra = min(free[i], node_cap, missing)
            if extra > 0:
                ix.move(i, -extra)
                counts[i] += extra
                missing -= extra
    if missing > 0:
        more = packer.place(packer.ask(job, missing, counts))
        packer.take(job, more)
        for i, c in more.items():
            counts[i] = counts.get(i, 0) + c
    if afresh and have and (penalty := packer.penalty(job, counts)) > 0:
        packer.release(job, counts)
        # (a fresh placement can only win when the free GPUs allow a lower penalty)
        if not SKIP_HOPELESS_AFRESH or packer.penalty_floor(job, k) < penalty:
            fresh = packer.place(packer.ask(job, k, {}))
            if packer.penalty(job, fresh) < penalty:
                left = {i: c - fresh.get(i, 0) for i, c in have.items() if c > fresh.get(i, 0)}
                counts = fresh
                packer.reserve(job, left)
        packer.take(job, counts)
    return counts


def _relayout(
    packer: Packer, jobs: Sequence[Job], current: dict[str, NodeCounts], steady: set[str]
) -> None:
    """Move running jobs of unchanged size whose layout is known to be slow (step 2b).

    At most `defragment_max_moved_jobs` per call, earliest jobs first; a job
    moves only when its new layout is nearer to what it should have.
    """
    moved = 0
    for job in jobs:
        if moved >= packer.s.defragment_max_moved_jobs:
            return
        counts = current[job.name]
        # (no layout learned: not slow)
        if (job.name not in steady or not job.layout_throughput
                or not packer.slow_layout(job, counts)):
            continue
        packer.release(job, counts)
        fresh = packer.place(packer.ask(job, sum(counts.values()), {}))
        if packer.penalty(job, fresh) < packer.penalty(job, counts):
            counts, moved = fresh, moved + 1
            packer.defragmented = True
        packer.take(job, counts)
        current[job.name] = counts


def _residents(current: Mapping[str, NodeCounts], size: int) -> list[dict[str, int]]:
    """{job: workers} per node id."""
    residents: list[dict[str, int]] = [{} for _ in range(size)]
    for name, counts in current.items():
        for i, c in counts.items():
            residents[i][name] = c
    return residents


def _make_room(
    packer: Packer,
    job: Job,
    current: dict[str, NodeCounts],
    residents: list[dict[str, int]],
    movable: set[str],
    started: set[str],
    settings: PlacementSettings,
) -> None:
    """Step 3b: put a job that fits on one node on one node, moving a few one-node jobs.

    The candidate nodes are the freest ones; on each, the fewest one-node jobs
    to move away are the largest. Only `movable` jobs move: jobs started in
    this call (for free) and at most `defragment_max_moved_jobs` jobs that keep
    their size, each to a single node; resized jobs never move (a plan frees
    their GPUs too late).
    Changes `current`, `residents` and the index only when it succeeds.
    """
    ix = packer.ix
    mine = current[job.name]
    k = sum(mine.values())
    packer.release(job, mine)
    best: tuple[tuple[int, int, int], int, list[str]] | None = None
    scanned = 0
    for free in range(ix.max_cap, 0, -1):
        if scanned >= settings.candidates:
            break
        for i in ix.buckets[free]:
            if ix.cap[i] < k or (job.latency_sensitive and ix.sensitive[i] > 0):
                continue
            scanned += 1
            movable = sorted(
                (
                    name for name in residents[i]
                    if len(current[name]) == 1 and name in movable
                ),
                key=lambda n: (n not in started, -residents[i][n], n),
            )
            chosen, room = [], free
            for name in movable:
                if room >= k:
                    break
                chosen.append(name)
                room += residents[i][name]
            paid = sum(1 for name in chosen if name not in started)
            if room >= k and paid <= settings.defragment_max_moved_jobs:
                key = (paid, len(chosen), i)
                if best is None or key < best[0]:
                    best = (key, i, chosen)
            if scanned >= settings.candidates:
                break
    if best is None:
        packer.take(job, mine)
        return
    _, node, evicted = best
    old = {name: current[name] for name in evicted}
    for name in evicted:
        packer.release(packer.jobs[name], old[name])
    packer.take(job, {node: k})
    # A resized job frees its old GPUs only when its scale-out is applied: keep them.
    held = {} if job.name in started else {
        i: c - (k if i == node else 0) for i, c in mine.items() if c > (k if i == node else 0)
    }
    packer.reserve(job, held)
    moved: dict[str, NodeCounts] = {}
    for name in sorted(evicted, key=lambda n: (-sum(old[n].values()), n)):
        other = packer.jobs[name]
        counts = packer.place(packer.ask(other, sum(old[name].values()), {}))
        packer.take(other, counts)
        moved[name] = counts
        if len(counts) > 1:  # it would get wider: undo everything
            for n, c in moved.items():
                packer.release(packer.jobs[n], c)
            packer.release(job, {node: k})
            packer.unreserve(job, held)
            for n, c in old.items():
                packer.take(packer.jobs[n], c)
            packer.take(job, mine)
            return
    packer.defragmented = True
    for name, counts in [*moved.items(), (job.name, {node: k})]:
        for i in current[name]:
            residents[i].pop(name, None)
        for i, c in counts.items():
            residents[i][name] = c
        current[name] = counts


"""Restart-aware packing: a job that grows restarts anyway, so it is placed afresh, tightly.

A job whose GPU count changes is checkpointed and restarted whatever the placer
does, so keeping its old workers buys nothing; keeping them scatters a job that
grows step by step over half-empty nodes. This placer:

1. keeps every job whose GPU count is unchanged exactly where it is (moving it
   would cost a restart), and a shrinking job on the nodes where it has most
   (so it only frees GPUs);
2. places every growing or starting job afresh, largest first: spread evenly over
   the nodes that fit its share most tightly when its goodput model predicts it runs
   faster so (voda.core.goodput.best_layouts: yolov3, say, syncs faster as 4 x 2
   than as 2 x 4), else as many whole free nodes as it fills, then its remainder
   on the node whose free GPUs fit it most tightly (best fit); a remainder no
   single node can hold goes to the nodes with the most free GPUs. Ties go to the
   node listed first. A growing job may reuse its
   own GPUs; those it leaves stay idle until the next decision, because plan.diff
   applies scale-outs last and no other job may take them before. When the GPUs
   left that way are needed to place every job, growing jobs keep what they hold
   and add what they lack instead.

`make_repack(simultaneous=True)` is the simulator's variant for the Pollux preset:
there, as in the Pollux artifact, all changes of a round happen at once, so every
job whose count changes is placed afresh and the GPUs it leaves are free to any
job at once. With `free_whole_nodes` (Voda's placer under that preset) it also frees
whole nodes for the jobs placed afresh that fill nodes, when too few are free: it moves
the one-node jobs kept on the emptiest nodes into the free GPUs of other partly used
nodes (`_free_whole_nodes`). A job of a whole node split over two runs 1.4-3.7x slower in
the Pollux artifact's measurements (4 GPUs as 2 + 2 against one node of 4), and a small
job moved pays one restart. With `consolidate_penalty` it also moves a job whose count is
unchanged but which spans more nodes than it needs (placed so when the cluster was
full) onto fewer nodes once GPUs there are free, when its goodput model says the
move is worth a restart: goodput packed x max(age - penalty x restarts, 0) /
(age + penalty) above its goodput where it is. The artifact's search reaches the
same end, since it scores each job at the nodes it really spans, with that factor.

It is the placement Pollux's goodput model assumes (a job of n GPUs on
ceil(n / GPUs per node) nodes), and what the simulator's Pollux preset uses.
"""

from __future__ import annotations

from collections.abc import Mapping

from voda.core.allocation.pollux import restart_factor
from voda.core.goodput import best_layouts
from voda.core.model import Allocation, Cluster, Job, JobPlacement, Placement
from voda.core.placement.base import Placer
from voda.core.placement.first_fit import shrink


def make_repack(simultaneous: bool = False, consolidate_penalty: float | None = None,
                free_whole_nodes: bool = False) -> Placer:
    """The packer; `simultaneous`: every change happens at once (a simulator's rule, as in
    the Pollux artifact), so a growing job's old GPUs are free to others at once;
    `consolidate_penalty` (simultaneous only): the seconds a restart costs when weighing
    whether to gather a job that spans more nodes than it needs (None: never move it);
    `free_whole_nodes` (simultaneous only): move kept one-node jobs to free whole nodes
    for the jobs placed afresh that fill them (`_free_whole_nodes`)."""
    if free_whole_nodes and not simultaneous:
        # Otherwise a moved job's GPUs are free only once it has stopped, after the plan
        # that counted on them.
        raise ValueError("free_whole_nodes: only where every change happens at once "
                         "(simultaneous=True)")

    def placer(allocation: Allocation, jobs: Mapping[str, Job], cluster: Cluster,
               previous: Placement) -> Placement:
        if simultaneous:
            placed = _repack(allocation, jobs, cluster, previous, mode="release",
                             free_whole=free_whole_nodes)
            if consolidate_penalty is not None:
                placed = _consolidate(placed, allocation, jobs, cluster, previous,
                                      consolidate_penalty)
            return placed
        try:
            return _repack(allocation, jobs, cluster, previous, mode="reserve")
        except ValueError:  # the GPUs growing jobs leave were needed: grow where they are
            return _repack(allocation, jobs, cluster, previous, mode="keep")

    placer.applies_at_once = simultaneous  # type: ignore[attr-defined]
    return placer


def _repack(allocation: Allocation, jobs: Mapping[str, Job], cluster: Cluster,
            previous: Placement, mode: str, free_whole: bool = False) -> Placement:
    """mode: what a growing job does with the GPUs it holds: "release" (free to all at
    once), "reserve" (free to itself only) or "keep" (it grows where it is);
    `free_whole` ("release" only): free whole nodes for the fresh jobs first."""
    size = {n.name: n.gpus for n in cluster.nodes}
    free = dict(size)
    node_type = {n.name: n.gpu_type for n in cluster.nodes}
    result: dict[str, JobPlacement] = {}
    fresh: list[str] = []
    reserved: dict[str, dict[str, int]] = {}  # what a growing job holds until it moves
    for name in sorted(allocation):
        gpus = allocation[name]
        if gpus <= 0:
            continue
        job = jobs.get(name)
        held: dict[str, int] = {}
        for n, c in previous.get(name, ()):
            if n in free and c > 0 and (job is None or node_type[n] == job.gpu_type):
                take = min(c, free[n])
                held[n] = held.get(n, 0) + take
                free[n] -= take
        if sum(held.values()) < gpus or (mode == "release" and sum(held.values()) > gpus):
            fresh.append(name)
            reserved[name] = held
            if mode == "release":
                for node, count in held.items():
                    free[node] += count
            continue
        counts = shrink(held, gpus)
        result[name] = tuple((n, counts[n]) for n in held if counts.get(n))
        for node, count in held.items():
            free[node] += count - counts.get(node, 0)
    if free_whole and mode == "release":
        _free_whole_nodes(allocation, jobs, cluster, result, fresh, free)
    fresh.sort(key=lambda n: (-allocation[n], jobs[n].sort_key if n in jobs else (0, 0.0, n)))
    for name in fresh:
        job = jobs.get(name)
        usable = [n.name for n in cluster.nodes
                  if job is None or node_type[n.name] == job.gpu_type]
        mine = reserved[name]
        spread = _spread(job, allocation[name], [size[n] for n in usable])
        if mode == "release":
            result[name] = _pack(allocation[name], usable, size, free, name, spread)
        elif mode == "reserve":
            for node, count in mine.items():  # its own GPUs are free to it
                free[node] += count
            result[name] = _pack(allocation[name], usable, size, free, name, spread)
            for node, count in mine.items():  # those it left are free only once it moved
                free[node] -= min(count, free[node])
        else:
            added = _pack(allocation[name] - sum(mine.values()), usable, size, free, name)
            merged = dict(mine)
            for node, count in added:
                merged[node] = merged.get(node, 0) + count
            result[name] = tuple((n, c) for n, c in merged.items() if c)
    return result


def _free_whole_nodes(allocation: Allocation, jobs: Mapping[str, Job], cluster: Cluster,
                      result: dict[str, JobPlacement], fresh: list[str],
                      free: dict[str, int]) -> None:
    """While the jobs to place afresh need more whole nodes of a GPU type than are free
    (their GPUs over the type's largest node, rounded down), empty the partly used node
    with the fewest GPUs in use, when every job on it is kept on that node alone and fits,
    largest first, in the free GPUs of another partly used node (the tightest). Updates
    `result` and `free` in place; a node that cannot be emptied is left as it is."""
    for gpu_type in sorted({n.gpu_type for n in cluster.nodes}):
        size = {n.name: n.gpus for n in cluster.nodes if n.gpu_type == gpu_type}
        per_node = max(size.values())
        needed = sum(allocation[name] // per_node for name in fresh
                     if name in jobs and jobs[name].gpu_type == gpu_type)
        whole = sum(1 for n in size if free[n] == size[n])
        if needed <= whole:
            continue
        residents: dict[str, list[str]] = {n: [] for n in size}
        pinned: set[str] = set()  # nodes holding part of a kept job that spans several
        for name, placement in result.items():
            for node, _ in placement:
                if node in size:
                    if len(placement) == 1:
                        residents[node].append(name)
                    else:
                        pinned.add(node)
        rank = {n: i for i, n in enumerate(size)}
        emptiest = sorted((n for n in size if 0 < free[n] < size[n] and n not in pinned),
                          key=lambda n: (size[n] - free[n], rank[n]))
        for node in emptiest:
            if whole >= needed:
                break
            moves = _rehome(residents[node], allocation, node, size, free, rank)
            if moves is None:
                continue
            for name, target in moves.items():
                free[target] -= allocation[name]
                result[name] = ((target, allocation[name]),)
                residents[target].append(name)
            residents[node] = []
            free[node] = size[node]
            whole += 1


def _rehome(names: list[str], allocation: Allocation, node: str, size: Mapping[str, int],
            free: Mapping[str, int], rank: Mapping[str, int]) -> dict[str, str] | None:
    """Where each job on `node` goes, largest first, into the free GPUs of another partly
    used node that fit it most tightly; None when one of them fits nowhere."""
    left = dict(free)
    moves: dict[str, str] = {}
    for name in sorted(names, key=lambda n: (-allocation[n], n)):
        gpus = allocation[name]
        fitting = [n for n in size if n != node and gpus <= left[n] < size[n]]
        if not fitting:
            return None
        target = min(fitting, key=lambda n: (left[n], rank[n]))
        left[target] -= gpus
        moves[name] = target
    return moves


def _consolidate(placed: Placement, allocation: Allocation, jobs: Mapping[str, Job],
                 cluster: Cluster, previous: Placement, penalty: float) -> Placement:
    """Gather jobs kept where they were that span more nodes than they need, largest
    first, onto the GPUs left free, where the job's model says it is worth a restart."""
    size = {n.name: n.gpus for n in cluster.nodes}
    free = dict(size)
    for placement in placed.values():
        for node, count in placement:
            free[node] -= count
    result = dict(placed)
    kept = [name for name, placement in placed.items()
            if name in jobs and tuple(placement) == tuple(previous.get(name, ()))]
    kept.sort(key=lambda n: (-allocation[n], jobs[n].sort_key))
    for name in kept:
        job = jobs[name]
        model = job.goodput
        gpus = allocation[name]
        spans = sum(1 for _, c in placed[name] if c)
        usable = [n.name for n in cluster.nodes if n.gpu_type == job.gpu_type]
        sizes = [size[n] for n in usable]
        if model is None or model.perf is None or spans <= -(-gpus // max(sizes)):
            continue
        if _spread(job, gpus, sizes):
            continue  # its model prefers it spread
        trial = dict(free)
        for node, count in placed[name]:
            trial[node] += count
        try:
            moved = _pack(gpus, usable, size, trial, name)
        except ValueError:
            continue
        if len(moved) >= spans:
            continue
        goodput, _, _ = model.optimize([spans, len(moved)], [gpus, gpus])
        if goodput[1] * restart_factor(job, penalty) > goodput[0]:
            result[name] = moved
            free = trial
    return result


def _spread(job: Job | None, gpus: int, sizes: list[int]) -> int:
    """Nodes to spread `gpus` over evenly, when the job's goodput model prefers that to
    packing (voda.core.goodput.best_layouts); 0: pack."""
    model = job.goodput if job is not None else None
    if model is None or model.perf is None or not sizes or gpus < 2:
        return 0
    per_node = max(sizes)
    nodes = int(best_layouts(model, gpus, per_node, len(sizes))[1][gpus - 1])
    return nodes if nodes > -(-gpus // per_node) and gpus % nodes == 0 else 0


def _pack(gpus: int, nodes: list[str], size: Mapping[str, int], free: dict[str, int],
          job: str, spread: int = 0) -> JobPlacement:
    """Spread evenly over `spread` nodes where they fit most tightly, or else take whole
    empty nodes while the job fills them, then fit the rest tightly."""
    rank = {n: i for i, n in enumerate(nodes)}
    if spread:
        share = gpus // spread
        fitting = sorted((n for n in nodes if free[n] >= share), key=lambda n: (free[n], rank[n]))
        if len(fitting) >= spread:
            chosen = sorted(fitting[:spread], key=lambda n: rank[n])
            for node in chosen:
                free[node] -= share
            return tuple((node, share) for node in chosen)
    taken: dict[str, int] = {}
    missing = gpus
    for node in nodes:
        if 0 < free[node] == size[node] <= missing:
            taken[node] = free[node]
            missing -= free[node]
            free[node] = 0
    while missing > 0:
        fitting = [n for n in nodes if free[n] >= missing]
        if fitting:
            node = min(fitting, key=lambda n: (free[n], rank[n]))
        else:
            node = max(nodes, key=lambda n: (free[n], -rank[n]))
            if free[node] <= 0:
                raise ValueError(f"job {job!r}: {missing} GPUs could not be placed")
        take = min(free[node], missing)
        taken[node] = taken.get(node, 0) + take
        free[node] -= take
        missing -= take
    return tuple(taken.items())


repack: Placer = make_repack()

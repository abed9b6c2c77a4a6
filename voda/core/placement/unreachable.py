"""Knowing, part-way through step 2, that a call's result will not be reachable.

A mode other than `in-place` is thrown away when its result fails the reachability check
(voda.core.plan.sequence_applicable: a plan's actions applied one at a time, halts,
scale-ins, migrations and starts before scale-outs, no node over capacity on the way).
Once reservations were given back (`Packer.released`) the next mode is `in-place` in any
case, so a mode proven unreachable part-way can stop there: the call's placements stay
those it would return after finishing the mode and rejecting it.

The proof. Let S be the jobs whose plan action is a scale-out (more workers than they
held, having held some: voda.core.plan.classify); every other job's action comes before
any scale-out. When the starts are applied, node X holds

    U(X) = sum over jobs not in S of their new workers on X
           + sum over jobs in S of their old workers on X.

If U(X) exceeds X's capacity and X held no more than its capacity before, some job not in
S adds workers on X (else U(X) would be at most what X held), and right after the last such
action before the scale-outs the use of X is at least U(X): the check reports X. So the
result is rejected once, at its end, U(X) > capacity(X) and X held at most its capacity.

During step 2, V(X) is U(X) with each job's current workers for its new ones. A node X is
*settled* when it has no free GPU, no reservation on it, no job still to be placed in
step 2 holds workers on it, and no job that step 3b may move (short of workers, at most a
node's GPUs, with a penalty) holds workers on it. Then nothing after can change X:

- step 2: a job takes only free GPUs and gives back only its own (those held or just
  taken; reservations are of its own old GPUs); reservations given back are none on X;
- step 2b moves jobs of unchanged size with a learned layout: the watch is not used when
  there is one; step 3a (rebuild) neither, when it may run (enough jobs changed);
- step 3b puts a job on a node with free GPUs (X has none and gets none), evicting only
  that node's one-node jobs, and moves the job from its own nodes (not X); a job it
  evicts, or undoes, takes free GPUs only and gives back what it took. (Whether a job
  has a penalty there is known when step 2 placed it: its workers move after only by
  its own step 3b, or when it is evicted, which leaves it on one node, no penalty.)

So V(X) at the end is V(X) now: a settled node X with V(X) > capacity(X) that held at most
its capacity proves the result unreachable.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from voda.core.model import Allocation, Job, Placement
from voda.core.placement.packer import NodeCounts, Packer


class UnreachableWatch:
    """Settled nodes over capacity (see the module doc), watched once reservations were
    given back, job by job through step 2."""

    def __init__(self, before: Placement, allocation: Allocation) -> None:
        self.before = before  # what the type's jobs held (every job, finished ones too)
        self.allocation = allocation
        self.started = False

    def start(self, packer: Packer, current: Mapping[str, NodeCounts], done: Sequence[Job],
              waiting: Sequence[Job]) -> bool:
        """Set up the counts with step 2 at this point (`done`: the jobs placed in it so far,
        `waiting`: those still to place); whether some node is proven over capacity."""
        self.started = True
        index, allocation = packer.ix.index, self.allocation
        self.capacity = packer.ix.cap
        nodes = len(self.capacity)
        self.held = [0] * nodes  # what every job held before, per node
        self.scale_outs: set[str] = set()
        self.use = [0] * nodes  # V(X)
        for name, shards in self.before.items():
            held = 0
            for node, count in shards:
                held += count
                i = index.get(node)
                if i is not None:
                    self.held[i] += count
            if held != 0 and held < allocation.get(name, 0) and name in current:  # classify
                self.scale_outs.add(name)
                for node, count in shards:
                    i = index.get(node)
                    if i is not None:
                        self.use[i] += count
        for name, counts in current.items():
            if name not in self.scale_outs:
                for i, c in counts.items():
                    self.use[i] += c
        self.waiting = [0] * nodes  # jobs still to place in step 2 holding workers
        for job in waiting:
            for i in current[job.name]:
                self.waiting[i] += 1
        self.movable = [0] * nodes  # placed jobs step 3b may move
        for job in done:
            self._count_movable(packer, job, current[job.name])
        return self._any_settled_over(packer, range(nodes))

    def placed(self, packer: Packer, job: Job, had: NodeCounts, counts: NodeCounts) -> bool:
        """Step 2 took a job from `had` to `counts`; whether some node is proven over
        capacity."""
        if job.name not in self.scale_outs:
            use = self.use
            for i, c in had.items():
                use[i] -= c
            for i, c in counts.items():
                use[i] += c
        for i in had:
            self.waiting[i] -= 1
        self._count_movable(packer, job, counts)
        return self._any_settled_over(packer, [*had, *counts])

    def _count_movable(self, packer: Packer, job: Job, counts: NodeCounts) -> None:
        # (on one node a job of at most a node's GPUs has no penalty)
        if (len(counts) > 1 and self.allocation[job.name] <= packer.ix.max_cap
                and packer.penalty(job, counts) > 0):
            for i in counts:
                self.movable[i] += 1

    def _any_settled_over(self, packer: Packer, nodes: Iterable[int]) -> bool:
        free, reservations = packer.ix.free, packer.reservations
        use, held, capacity, waiting, movable = (
            self.use, self.held, self.capacity, self.waiting, self.movable)
        return any(
            use[i] > capacity[i] and free[i] == 0 and not reservations[i] and not waiting[i]
            and not movable[i] and held[i] <= capacity[i]
            for i in nodes
        )

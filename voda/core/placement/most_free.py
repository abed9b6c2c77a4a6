"""Most-free placement: the placement of the Pollux artifact's simulator (SIMULATION.md §5).

1. A job whose GPU count is unchanged keeps exactly the workers it has.
2. A job that shrinks keeps its workers on the nodes where it has most, and one
   that grows keeps those it has (unless `keep_resized` is off: then a job whose
   count changes gives all its GPUs back and is placed afresh, the rule of the
   artifact's Optimus baseline, SIMULATION.md §6).
3. Every other job, in order (submit order unless an `order` is given; with
   `fewest_first`, ascending GPU count first), takes GPUs from the node with the
   most free GPUs of its type (ties: the lowest node index), as many as it still
   needs there, until it has all it needs.

The resulting JobPlacement lists nodes in the order they were taken, which is
the order the throughput model reads a multi-node placement in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from voda.core.allocation.base import by_submit
from voda.core.model import Allocation, Cluster, Job, Placement
from voda.core.placement.base import Placer
from voda.core.placement.first_fit import shrink

Order = Callable[[Sequence[Job]], list[Job]]


def make_most_free(order: Order | None = None, *, keep_resized: bool = True,
                   fewest_first: bool = False) -> Placer:
    """A most-free placer; `order` sorts the jobs that need new GPUs (default: submit order)."""
    order_jobs = order or by_submit

    def most_free(
        allocation: Allocation,
        jobs: Mapping[str, Job],
        cluster: Cluster,
        previous: Placement,
    ) -> Placement:
        index = {n.name: i for i, n in enumerate(cluster.nodes)}
        gpu_type = {n.name: n.gpu_type for n in cluster.nodes}
        free = {n.name: n.gpus for n in cluster.nodes}
        result: dict[str, tuple[tuple[str, int], ...]] = {}
        kept: dict[str, list[tuple[str, int]]] = {}
        # 1-2. Unchanged jobs keep their workers; shrinking jobs keep their largest shards.
        for name in sorted(allocation):
            gpus = allocation[name]
            if gpus <= 0:
                continue
            job = jobs.get(name)
            usable = [
                (n, c) for n, c in previous.get(name, ())
                if n in free and c > 0 and (job is None or gpu_type[n] == job.gpu_type)
            ]
            if not keep_resized and sum(c for _, c in usable) != gpus:
                usable = []
            if sum(c for _, c in usable) > gpus:
                counts = shrink(dict(usable), gpus)
                usable = [(n, counts[n]) for n, _ in usable if counts.get(n)]
            mine = []
            for n, c in usable:
                take = min(c, free[n])
                if take > 0:
                    free[n] -= take
                    mine.append((n, take))
            kept[name] = mine
        # 3. Jobs that need more GPUs, in order, from the nodes with most free GPUs.
        growing = [n for n in sorted(kept) if sum(c for _, c in kept[n]) < allocation[n]]
        for name in sorted(kept):
            if name not in growing:
                result[name] = tuple(kept[name])
        known = [jobs[n] for n in growing if n in jobs]
        ordered = [j.name for j in order_jobs(known)] + [n for n in growing if n not in jobs]
        if fewest_first:
            ordered.sort(key=lambda n: allocation[n])  # stable: `order` among equal counts
        for name in ordered:
            job = jobs.get(name)
            mine = kept[name]
            missing = allocation[name] - sum(c for _, c in mine)
            candidates = [
                n.name for n in cluster.nodes if job is None or n.gpu_type == job.gpu_type
            ]
            while missing > 0:
                best = max(candidates, key=lambda n: (free[n], -index[n]), default=None)
                if best is None or free[best] <= 0:
                    raise ValueError(f"job {name!r}: {missing} GPUs could not be placed")
                take = min(free[best], missing)
                free[best] -= take
                missing -= take
                mine.append((best, take))
            merged: dict[str, int] = {}
            for n, c in mine:
                merged[n] = merged.get(n, 0) + c
            result[name] = tuple(merged.items())
        return result

    # Moving a resized job elsewhere is the artifact's rule for its simulator, where every
    # change of a round happens at once (voda.core.plan.sequence_problems).
    most_free.applies_at_once = not keep_resized  # type: ignore[attr-defined]
    return most_free


most_free: Placer = make_most_free()

"""Step 3a of a placement call: the ideal layout packed from scratch, matched onto the nodes.

See voda.core.placement.manager for when it runs, and voda.core.placement.matching
for the matching.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from voda.core.model import Allocation, Job, Node, Placement
from voda.core.placement.matching import apply_mapping, match_layouts
from voda.core.placement.packer import NodeCounts, Packer
from voda.core.placement.topology import FreeIndex, Topology


def rebuild(
    packer: Packer,
    jobs: Sequence[Job],
    allocation: Allocation,
    current: Mapping[str, NodeCounts],
    previous: Placement,
    movable: set[str],
    started: set[str],
    topology: Topology,
) -> dict[str, NodeCounts] | None:
    """Step 3a: the ideal layout packed from scratch, matched onto the current nodes.

    Only `movable` jobs (started in this call, or keeping their size) are
    rebuilt: resized jobs and the GPUs reserved for them stay as step 2 left
    them, since a plan frees their old GPUs too late for others to use. Returns
    the new node counts when they are tighter than `current` and move at most
    `defragment_max_moved_jobs` jobs that ran before; else None.
    """
    ix, settings = packer.ix, packer.s
    fresh = Packer(FreeIndex.of(ix.nodes, topology), settings, packer.jobs)
    fixed_used = [0] * len(ix.nodes)
    for job in jobs:
        if job.name not in movable:
            fresh.take(job, current[job.name])
            for i, c in current[job.name].items():
                fixed_used[i] += c
    for job, counts in packer._reserved:
        fresh.take(job, counts)
        for i, c in counts.items():
            fixed_used[i] += c
    ideal: dict[str, dict[str, int]] = {}
    pinned: set[str] = set()
    rebuilt = [j for j in jobs if j.name in movable]
    for job in sorted(rebuilt, key=lambda j: (-allocation[j.name], j.sort_key)):
        counts = fresh.place(fresh.ask(job, allocation[job.name], {}))
        fresh.take(job, counts)
        for i, c in counts.items():
            ideal.setdefault(ix.nodes[i].name, {})[job.name] = c
        if job.preferred_domain in ix.leaf_ids:
            pinned.add(job.preferred_domain)
    now: dict[str, dict[str, int]] = {}
    for job in rebuilt:
        for node, count in previous.get(job.name, ()):
            if node in ix.index and count > 0:
                per_node = now.setdefault(node, {})
                per_node[job.name] = per_node.get(job.name, 0) + count
    room = [Node(n.name, n.gpus - fixed_used[i], n.gpu_type, n.leaf, n.spine)
            for i, n in enumerate(ix.nodes)]
    mapping = match_layouts(ideal, now, room, topology, frozenset(pinned))
    result: dict[str, NodeCounts] = {
        j.name: ({} if j.name in movable else dict(current[j.name])) for j in jobs
    }
    for node, per_job in apply_mapping(ideal, mapping).items():
        for name, c in per_job.items():
            result[name][ix.index[node]] = c
    before = sum(packer.penalty(j, current[j.name]) for j in jobs)
    after = sum(packer.penalty(j, result[j.name]) for j in jobs)
    paid = sum(1 for j in rebuilt if j.name not in started and result[j.name] != current[j.name])
    if after < before and paid <= settings.defragment_max_moved_jobs:
        return result
    return None

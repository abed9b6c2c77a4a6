"""The topology-aware placer: pack each job on few nodes and leaves, move few workers.

Per GPU type, one call:

1. keep: every job keeps its workers on the nodes that still exist (a job that
   shrinks drops its smallest shards first);
2. add: jobs short of workers (new, grown, or that lost a node) are placed,
   largest first. A job that already runs grows on its own nodes, then near
   them; if that spans more nodes or leaves than the job needs, the whole job
   is placed afresh when that is tighter;
3. defragment, only when step 2 left a consolidated job wider than it needs:
   a. when at least `rebuild_changed_share` of the jobs changed, the ideal
      layout of the jobs that start or keep their size is packed from scratch
      around the resized ones and matched onto the current nodes with
      voda.core.placement.matching (linear sum assignment, most workers kept in
      place); it is taken when it is tighter, reachable (below) and moves at
      most `defragment_max_moved_jobs` jobs that ran before;
   b. otherwise each such job that fits on one node gets one, by moving at most
      `defragment_max_moved_jobs` unchanged one-node jobs elsewhere.

The result must also be reachable: a plan applies halts, scale-ins and
migrations before starts and scale-outs, one at a time, and no node may go
over capacity on the way (`sequence_problems`). GPUs that a resized job leaves
stay reserved for the rest of the call, and when a result is still not
reachable the call is redone with less freedom (MODES), down to "running jobs
only grow in place", which always is. Once reservations had to be given back, a
mode whose result is proven unreachable part-way stops there
(voda.core.placement.unreachable).

Packing a request of k GPUs (consolidated): one node when one has room (best
fit: the fullest node that fits), else one leaf (fewest nodes: largest free
nodes first, the rest on the best-fitting node), else leaves of one spine
(largest first, then the best-fitting leaf), else several spines. Among
candidates with the same span, the weighted score decides: resource
availability, topology alignment, domain utilization, historical performance.

The parts live beside this module, one job each: settings.py (the strategies
and PlacementSettings), packer.py (packing one request: Packer), steps.py
(steps 1-3 and MODES), rebuild.py (step 3a). This module holds the placer,
TopologyPlacer, and `counts_only` (`--placement off`), and re-exports the
public names of the others.
See docs/design/003-placement.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from voda.core.model import (
    DEFAULT_GPU_TYPE,
    SORT_KEY,
    Allocation,
    Cluster,
    Job,
    JobPlacement,
    Node,
    Placement,
)
from voda.core.placement.first_fit import first_fit
from voda.core.placement.packer import NodeCounts
from voda.core.placement.settings import (
    BALANCED,
    CONSOLIDATED,
    DISTRIBUTED,
    STRATEGIES,
    PlacementSettings,
    settings_problems,
    strategy_of,
)
from voda.core.placement.steps import FULL, IN_PLACE, MODES, NO_DEFRAGMENT, run_steps
from voda.core.placement.topology import Topology
from voda.core.placement.unreachable import UnreachableWatch
from voda.core.plan import sequence_applicable, sequence_problems

# Re-exported: the public names of the parts this module was split into.
__all__ = [
    "BALANCED",
    "CONSOLIDATED",
    "DISTRIBUTED",
    "FULL",
    "IN_PLACE",
    "MODES",
    "NO_DEFRAGMENT",
    "STRATEGIES",
    "NodeCounts",
    "PlacementSettings",
    "TopologyPlacer",
    "counts_only",
    "sequence_problems",
    "settings_problems",
    "strategy_of",
]


# Stop a mode once its result is proven unreachable (voda.core.placement.unreachable);
# False: finish it and let the check reject it (the reference the tests compare with).
PROVE_UNREACHABLE_EARLY = True


class TopologyPlacer:
    """The topology-aware Placer (see the module doc)."""

    def __init__(self, settings: PlacementSettings | None = None) -> None:
        self.settings = settings or PlacementSettings()

    def __call__(
        self,
        allocation: Allocation,
        jobs: Mapping[str, Job],
        cluster: Cluster,
        previous: Placement,
    ) -> Placement:
        topology = Topology.of(cluster)
        by_type: dict[str, list[Job]] = {}
        for name in sorted(allocation):
            if allocation[name] > 0:
                job = jobs.get(name) or Job(name=name)
                by_type.setdefault(job.gpu_type, []).append(job)
        result: dict[str, JobPlacement] = {}
        for gpu_type in sorted(by_type):
            nodes = [n for n in cluster.nodes if n.gpu_type == gpu_type]
            typed = sorted(by_type[gpu_type], key=SORT_KEY)
            need = sum(allocation[j.name] for j in typed)
            have = sum(n.gpus for n in nodes)
            if need > have:
                raise ValueError(
                    f"allocation: jobs of GPU type {gpu_type!r} get {need} GPUs, "
                    f"the cluster has {have}"
                )
            result.update(self._place_type(typed, allocation, jobs, nodes, topology, previous))
        return dict(sorted(result.items()))

    def _place_type(
        self,
        typed: Sequence[Job],
        allocation: Allocation,
        jobs: Mapping[str, Job],
        nodes: Sequence[Node],
        topology: Topology,
        previous: Placement,
    ) -> dict[str, JobPlacement]:
        """One GPU type: steps 1-3, redone with less freedom until applicable (MODES)."""
        gpu_type = nodes[0].gpu_type
        capacity = {n.name: n.gpus for n in nodes}
        before = {
            name: shards for name, shards in previous.items()
            if (jobs[name].gpu_type if name in jobs else DEFAULT_GPU_TYPE) == gpu_type
        }

        names = [n.name for n in nodes]  # by node id: the nodes in cluster order

        def reachable(placed: Mapping[str, NodeCounts]) -> bool:
            return sequence_applicable(before, _placements(placed, names, previous), capacity)

        mode, kept = FULL, None
        while True:
            watch = (UnreachableWatch(before, allocation)
                     if PROVE_UNREACHABLE_EARLY and mode != IN_PLACE else None)
            placed, packer, kept = run_steps(typed, allocation, nodes, topology, previous,
                                              self.settings, mode, reachable, kept, watch)
            if placed is None:  # proven unreachable part-way, after reservations were
                mode = IN_PLACE  # given back: a rejection would have led here too
                continue
            result = _placements(placed, names, previous)
            if mode == IN_PLACE or sequence_applicable(before, result, capacity):
                return result
            # Less freedom: without step 3b if it acted (and nothing else was forced).
            defragmented = packer.defragmented and not packer.released
            mode = NO_DEFRAGMENT if mode == FULL and defragmented else IN_PLACE


def _placements(
    placed: Mapping[str, NodeCounts], names: Sequence[str], previous: Placement
) -> dict[str, JobPlacement]:
    """Each job's workers by node name in cluster order (node ids follow it); the
    previous placement itself (the same tuple) where it is unchanged, which tells a
    plan's diff so without comparing."""
    result: dict[str, JobPlacement] = {}
    before_of = previous.get
    for name, counts in placed.items():
        before = before_of(name)
        if len(counts) == 1:  # most jobs: its one shard compared without building a tuple
            [(i, c)] = counts.items()
            shard = (names[i], c)
            result[name] = before if (type(before) is tuple and len(before) == 1
                                      and before[0] == shard) else (shard,)
            continue
        shards = tuple([(names[i], counts[i]) for i in sorted(counts)])
        result[name] = before if (before is not None and type(before) is tuple
                                  and before == shards) else shards
    return result


def counts_only(
    allocation: Allocation,
    jobs: Mapping[str, Job],
    cluster: Cluster,
    previous: Placement,
) -> Placement:
    """The placer of `--placement off`: only the GPU counts matter.

    It returns a valid placement (the first-fit one, which keeps every worker
    where it is), so the pipeline and its checks run unchanged; a consumer that
    sees `ignores_topology` (the simulator) runs every job at the speed of its
    most compact layout. First fit never moves a worker, so `off` makes no
    migrations.
    """
    node_type = {n.name: n.gpu_type for n in cluster.nodes}
    own_type = {
        name: tuple(
            (node, count) for node, count in shards
            if name not in jobs or node_type.get(node) == jobs[name].gpu_type
        )
        for name, shards in previous.items()
    }
    return first_fit(allocation, jobs, cluster, own_type)


counts_only.ignores_topology = True  # type: ignore[attr-defined]

"""The placer contract and its checks."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from voda.core.model import Allocation, Cluster, Job, JobPlacement, Node, Placement


class Placer(Protocol):
    def __call__(
        self,
        allocation: Allocation,
        jobs: Mapping[str, Job],
        cluster: Cluster,
        previous: Placement,
    ) -> Placement:
        """Place every job with a non-zero allocation on nodes of its GPU type.

        `previous` is the placement in force; a good placer keeps workers where
        they are whenever it can. Jobs at 0 are absent from the result.
        """
        ...


def used_per_node(placement: Placement) -> dict[str, int]:
    used: dict[str, int] = {}
    for job_placement in placement.values():
        for node, count in job_placement:
            used[node] = used.get(node, 0) + count
    return used


def normalize(workers_by_node: Mapping[str, int], node_order: Mapping[str, int]) -> JobPlacement:
    """A JobPlacement in cluster node order, without empty entries."""
    return tuple(
        (node, count)
        for node, count in sorted(workers_by_node.items(), key=lambda kv: node_order[kv[0]])
        if count > 0
    )


@dataclass(frozen=True)
class NodeMaps:
    """What the placers and the checks read of a cluster's nodes, by node name (read-only)."""

    nodes: dict[str, Node]
    gpu_type: dict[str, str]
    capacity: dict[str, int]
    order: dict[str, int]  # a node's position
    nodes_of: dict[str | None, list[str]]  # the nodes of each GPU type (None: every node)
    total: int  # the cluster's GPUs


_last_maps: list[tuple[Cluster, NodeMaps]] = []
_MAPS_KEPT = 4  # a decision on a cluster of several GPU types asks of each type's too


def node_maps(cluster: Cluster) -> NodeMaps:
    """The cluster's NodeMaps, kept for the few clusters last asked about (the engine hands
    the same Cluster to every decision until a node joins or leaves)."""
    if _last_maps and _last_maps[0][0] is cluster:
        return _last_maps[0][1]
    for i, (kept, maps) in enumerate(_last_maps):
        if kept is cluster:
            _last_maps.insert(0, _last_maps.pop(i))
            return maps
    nodes_of: dict[str | None, list[str]] = {None: [n.name for n in cluster.nodes]}
    for node in cluster.nodes:
        nodes_of.setdefault(node.gpu_type, []).append(node.name)
    maps = NodeMaps(nodes={n.name: n for n in cluster.nodes},
                    gpu_type={n.name: n.gpu_type for n in cluster.nodes},
                    capacity={n.name: n.gpus for n in cluster.nodes},
                    order={n.name: i for i, n in enumerate(cluster.nodes)},
                    nodes_of=nodes_of, total=cluster.capacity())
    _last_maps.insert(0, (cluster, maps))
    del _last_maps[_MAPS_KEPT:]
    return maps


def placement_problems(
    allocation: Allocation, jobs: Mapping[str, Job], cluster: Cluster, placement: Placement
) -> list[str]:
    """Every way a placement breaks the rules (empty when valid)."""
    problems: list[str] = []
    maps = node_maps(cluster)
    nodes, type_of = maps.nodes, maps.gpu_type
    used: dict[str, int] = {}  # used_per_node(placement), counted on the way
    placed_of: dict[str, int] = {}  # each job's workers, counted on the way
    allocated, job_of, used_on = allocation.get, jobs.get, used.get
    for name, job_placement in placement.items():
        if allocated(name, 0) == 0:
            problems.append(f"job {name!r}: placed but not allocated")
        job = job_of(name)
        gpu_type = None if job is None else job.gpu_type
        allowed = None if job is None else job.nodes
        placed = 0
        for node_name, count in job_placement:
            placed += count
            used[node_name] = used_on(node_name, 0) + count
            # A node of the job's type is a node of the cluster.
            if count > 0 and (type_of.get(node_name) == gpu_type and (
                    allowed is None or node_name in allowed) if gpu_type is not None
                    else node_name in nodes):
                continue  # the common case: nothing to say
            node = nodes.get(node_name)
            if node is None:
                problems.append(f"job {name!r}: unknown node {node_name!r}")
            elif job is not None and node.gpu_type != job.gpu_type:
                problems.append(
                    f"job {name!r}: node {node_name!r} has GPU type {node.gpu_type}, "
                    f"the job needs {job.gpu_type}"
                )
            elif job is not None and job.nodes is not None and node_name not in job.nodes:
                problems.append(f"job {name!r}: node {node_name!r} is not one it may use")
            if count <= 0:
                problems.append(f"job {name!r}: non-positive count {count} on {node_name!r}")
        placed_of[name] = placed
    # Said first: a job whose placement does not hold its allocation.
    problems[:0] = [f"job {name!r}: allocated {gpus} GPUs but placed {placed}"
                    for name, gpus in allocation.items()
                    if (placed := placed_of.get(name, 0)) != gpus]
    for node_name, count in used.items():
        node = nodes.get(node_name)
        if node is not None and count > node.gpus:
            problems.append(f"node {node_name!r}: {count} GPUs used of {node.gpus}")
    return problems

"""Measures of a placement: fragmentation, per-domain utilization, job spans."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from voda.core.model import Cluster, Job, JobPlacement, Placement
from voda.core.placement.base import used_per_node
from voda.core.placement.topology import Topology


def fragmentation_ratio(cluster: Cluster, placement: Placement, waiting: Iterable[Job]) -> float:
    """Free GPUs that no waiting job can use because of how they are scattered, over free GPUs.

    A waiting job asks for `min_workers` GPUs of its type. A free GPU on node n
    is usable by it when the job fits on n (n has that many free GPUs), or when
    the job is larger than n and n is wholly free, so whole nodes can make it up.
    Jobs that ask for more GPUs than are free of their type are left out: no
    layout would help them. With no such job the ratio is 0.0.
    """
    used = used_per_node(placement)
    free = {n.name: max(0, n.gpus - used.get(n.name, 0)) for n in cluster.nodes}
    total_free = sum(free.values())
    if total_free == 0:
        return 0.0
    free_of_type: dict[str, int] = {}
    for node in cluster.nodes:
        free_of_type[node.gpu_type] = free_of_type.get(node.gpu_type, 0) + free[node.name]
    sizes: dict[str, set[int]] = {}
    for job in waiting:
        if job.min_workers <= free_of_type.get(job.gpu_type, 0):
            sizes.setdefault(job.gpu_type, set()).add(job.min_workers)
    if not sizes:
        return 0.0
    whole_free = {t: 0 for t in free_of_type}
    for node in cluster.nodes:
        if free[node.name] == node.gpus:
            whole_free[node.gpu_type] += node.gpus
    stranded = 0
    for node in cluster.nodes:
        f = free[node.name]
        if f == 0:
            continue
        usable = any(
            k <= f or (k > node.gpus and f == node.gpus and whole_free[node.gpu_type] >= k)
            for k in sizes.get(node.gpu_type, ())
        )
        if not usable:
            stranded += f
    return stranded / total_free


@dataclass(frozen=True, slots=True)
class DomainUtilization:
    """Used over total GPUs, per leaf and per spine."""

    leaves: Mapping[str, float]
    spines: Mapping[str, float]


def domain_utilization(cluster: Cluster, placement: Placement) -> DomainUtilization:
    topology = Topology.of(cluster)
    used = used_per_node(placement)
    gpus = {n.name: n.gpus for n in cluster.nodes}

    def share(nodes: Iterable[str]) -> float:
        names = list(nodes)
        total = sum(gpus[n] for n in names)
        return sum(min(used.get(n, 0), gpus[n]) for n in names) / total if total else 0.0

    return DomainUtilization(
        leaves={leaf: share(nodes) for leaf, nodes in topology.leaf_nodes.items()},
        spines={spine: share(topology.nodes_in(spine)) for spine in topology.spine_leaves},
    )


@dataclass(frozen=True, slots=True)
class Span:
    nodes: int
    leaves: int
    spines: int


def job_span(job_placement: JobPlacement, topology: Topology) -> Span:
    """How many nodes, leaves and spines a job's workers occupy."""
    nodes = {node for node, count in job_placement if count > 0}
    leaves = {topology.leaf_of[n] for n in nodes}
    return Span(len(nodes), len(leaves), len({topology.spine_of_leaf[leaf] for leaf in leaves}))

"""Prometheus metrics of the pod scheduler.

Counters and histograms are fed by the controller as it decides; the cluster
gauges (domain utilization, GPU allocation, fragmentation) are computed from
the scheduler's view when Prometheus scrapes, by a collector, so they are never
stale. Names are lint-clean (`promtool check metrics`) under `voda_pod_`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from voda.core.model import Cluster, Job, Node
from voda.core.placement.metrics import domain_utilization, fragmentation_ratio
from voda.podsched.model import GPU, Snapshot

DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                    30.0, 60.0, 120.0)


@dataclass(frozen=True, slots=True)
class ClusterFigures:
    gpu_allocation_ratio: float
    fragmentation_ratio: float
    leaves: dict[str, float]
    spines: dict[str, float]


def cluster_figures(snapshot: Snapshot, waiting_gpus: Iterable[int]) -> ClusterFigures:
    """GPU figures over Ready, schedulable nodes; `waiting_gpus` are the GPU requests of
    the pods that wait (a free GPU is fragmented when no waiting pod fits where it is)."""
    nodes, placement = [], {}
    for node in snapshot.nodes:
        if not node.ready or node.unschedulable or node.gpus <= 0:
            continue
        nodes.append(Node(node.name, node.gpus, leaf=node.leaf, spine=node.spine))
        used = min(node.gpus, max(0, snapshot.requested.get(node.name, {}).get(GPU, 0)))
        if used:
            placement[node.name] = ((node.name, used),)
    cluster = Cluster(tuple(nodes))
    total = cluster.capacity()
    if not total:
        return ClusterFigures(0.0, 0.0, {}, {})
    used_total = sum(c for shards in placement.values() for _, c in shards)
    waiting = [Job(f"w{i}", min_workers=g) for i, g in enumerate(sorted(set(waiting_gpus)))
               if g > 0]
    shares = domain_utilization(cluster, placement)
    return ClusterFigures(
        gpu_allocation_ratio=used_total / total,
        fragmentation_ratio=fragmentation_ratio(cluster, placement, waiting),
        leaves=dict(shares.leaves),
        spines=dict(shares.spines),
    )


class _ClusterCollector(Collector):
    def __init__(self, figures: Callable[[], ClusterFigures]) -> None:
        self._figures = figures

    def collect(self) -> Iterator[GaugeMetricFamily]:
        figures = self._figures()
        yield GaugeMetricFamily("voda_pod_gpu_allocation_ratio",
                                "Share of the GPUs of Ready nodes that pods request.",
                                value=figures.gpu_allocation_ratio)
        yield GaugeMetricFamily(
            "voda_pod_fragmentation_ratio",
            "Share of free GPUs that no waiting pod can use because of where they are.",
            value=figures.fragmentation_ratio)
        domains = GaugeMetricFamily("voda_pod_domain_utilization_ratio",
                                    "Share of a leaf's or spine's GPUs that pods request.",
                                    labels=["level", "domain"])
        for level, shares in (("leaf", figures.leaves), ("spine", figures.spines)):
            for domain, share in sorted(shares.items()):
                domains.add_metric([level, domain], share)
        yield domains

    def describe(self) -> Sequence[GaugeMetricFamily]:
        return []


class PodSchedulerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.decisions = Counter(
            "voda_pod_placement_decisions", "Placement decisions on pod gangs, by result.",
            ["result"], registry=r)
        self.placement_seconds = Histogram(
            "voda_pod_placement_duration_seconds",
            "Time from a gang becoming ready to place to its Bindings posted.",
            buckets=DURATION_BUCKETS, registry=r)
        self.recovery_seconds = Histogram(
            "voda_pod_recovery_duration_seconds",
            "Time from a bound pod lost (died, deleted, node NotReady) to its replacement "
            "bound.", buckets=DURATION_BUCKETS, registry=r)
        self.bind_failures = Counter(
            "voda_pod_binding_failures", "Bindings the API server refused.", registry=r)

    def watch_cluster(self, figures: Callable[[], ClusterFigures]) -> None:
        self.registry.register(_ClusterCollector(figures))

"""decide() with jobs confined to some nodes (Job.nodes): what a Kubernetes template's
taints, selectors and requests, or a node that refused a worker, leave a job."""

from __future__ import annotations

import pytest

from voda.core.allocation.fifo import ElasticFIFO
from voda.core.model import Cluster, Job
from voda.core.placement.first_fit import first_fit
from voda.core.placement.manager import TopologyPlacer
from voda.core.plan import decide

PLACERS = [first_fit, TopologyPlacer()]


@pytest.mark.parametrize("placer", PLACERS)
def test_a_confined_job_goes_only_to_its_nodes(placer: object) -> None:
    cluster = Cluster.uniform(3, 4)
    jobs = [Job("c", 2, 2, nodes=frozenset({"node-2"})), Job("f", 4, 4, submit_time=1)]
    plan = decide(jobs, cluster, {}, ElasticFIFO(), placer)  # type: ignore[arg-type]
    assert plan.placement["c"] == (("node-2", 2),)
    assert sum(c for _, c in plan.placement["f"]) == 4
    assert not plan.errors


@pytest.mark.parametrize("placer", PLACERS)
def test_workers_on_a_node_the_job_may_no_longer_use_move_and_the_rest_stay(
        placer: object) -> None:
    cluster = Cluster.uniform(3, 4)
    previous = {"c": (("node-0", 2), ("node-1", 2)), "f": (("node-2", 3),)}
    jobs = [Job("c", 4, 4, current_workers=4, nodes=frozenset({"node-1", "node-2"})),
            Job("f", 3, 3, submit_time=1, current_workers=3)]
    plan = decide(jobs, cluster, previous, ElasticFIFO(), placer)  # type: ignore[arg-type]
    placed = dict(plan.placement["c"])
    assert set(placed) <= {"node-1", "node-2"} and sum(placed.values()) == 4
    assert placed["node-1"] >= 2  # those already there stay
    assert plan.placement["f"] == (("node-2", 3),)  # not displaced by the confined job
    assert not plan.errors


def test_a_confined_job_gets_no_more_than_its_nodes_hold_and_nothing_below_its_minimum(
        ) -> None:
    cluster = Cluster.uniform(2, 4)
    jobs = [Job("small", 1, 8, nodes=frozenset({"node-0"})),
            Job("big", 6, 6, submit_time=1, nodes=frozenset({"node-1"}))]
    plan = decide(jobs, cluster, {}, ElasticFIFO(), TopologyPlacer())
    # big's 6 do not fit on its one node: decided again without it, small gets its node
    assert plan.allocation == {"small": 4, "big": 0}
    assert plan.placement == {"small": (("node-0", 4),)}
    assert not plan.errors


def test_without_confined_jobs_nothing_changes() -> None:
    cluster = Cluster.uniform(2, 4)
    jobs = [Job("a", 2, 6), Job("b", 1, 2, submit_time=1)]
    free = decide(jobs, cluster, {}, ElasticFIFO(), TopologyPlacer())
    everywhere = frozenset({"node-0", "node-1"})
    confined = decide([Job("a", 2, 6, nodes=everywhere), Job("b", 1, 2, submit_time=1)],
                      cluster, {}, ElasticFIFO(), TopologyPlacer())
    assert free.allocation == confined.allocation
    assert sum(c for _, c in confined.placement["a"]) == sum(
        c for _, c in free.placement["a"])

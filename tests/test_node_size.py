"""Voda and Pollux pack for the nodes they allocate on, unless told a node size."""

from __future__ import annotations

import pytest
from builders import make_cluster, make_job

from voda.core.allocation import registry
from voda.core.allocation.counts import FROM_CLUSTER, node_size, sized_to
from voda.core.allocation.voda import Voda
from voda.core.model import Cluster, Job
from voda.core.placement.repack import make_repack
from voda.core.plan import decide

PACKING = ("Voda", "Pollux")


def twelve_at_most() -> Job:
    """A job that scales linearly (nothing measured yet) up to 12 GPUs."""
    return make_job("a").workers(1, 12).epochs(10).obj()


def counts_on(cluster: Cluster, algorithm: str, **params: object) -> int:
    plan = decide([twelve_at_most()], cluster, {}, registry.create(algorithm, params),
                  make_repack(simultaneous=True))
    assert not plan.errors
    return plan.allocation["a"]


@pytest.mark.parametrize("algorithm", PACKING)
def test_on_eight_gpu_nodes_a_job_takes_a_whole_node_or_whole_nodes(algorithm: str) -> None:
    # 12 GPUs would split one 8-GPU node: on 2 x 8 the counts that pack are 1, 2, 4, 8, 16.
    assert counts_on(make_cluster().nodes(2, 8).obj(), algorithm) == 8
    # The same job on 4 x 4 nodes takes its 12 (three whole nodes).
    assert counts_on(make_cluster().nodes(4, 4).obj(), algorithm) == 12


@pytest.mark.parametrize("algorithm", PACKING)
def test_a_node_size_the_user_gives_is_kept(algorithm: str) -> None:
    assert counts_on(make_cluster().nodes(2, 8).obj(), algorithm, gpus_per_node=4) == 12


def test_a_gpu_type_is_packed_for_its_own_nodes() -> None:
    cluster = make_cluster().nodes(2, 8, gpu_type="a100").nodes(4, 4, gpu_type="t4").obj()
    jobs = [make_job("big").workers(1, 12).epochs(10).gpu_type("a100").obj(),
            make_job("small").workers(1, 12).epochs(10).gpu_type("t4").obj()]
    plan = decide(jobs, cluster, {}, Voda(), make_repack(simultaneous=True))
    assert plan.allocation == {"big": 8, "small": 12}


def test_node_size_is_the_most_common_node_ties_to_the_larger() -> None:
    assert node_size(make_cluster().nodes(3, 4).nodes(1, 8).obj()) == 4
    assert node_size(make_cluster().nodes(2, 4).nodes(2, 8).obj()) == 8
    assert node_size(Cluster(())) == 0


def test_sized_to_leaves_a_given_size_and_other_algorithms_alone() -> None:
    cluster = make_cluster().nodes(2, 8).obj()
    assert sized_to(Voda(), cluster).gpus_per_node == 8
    told = Voda(gpus_per_node=2)
    assert sized_to(told, cluster) is told
    fifo = registry.create("FIFO")
    assert sized_to(fifo, cluster) is fifo
    assert sized_to(Voda(), Cluster(())).gpus_per_node == FROM_CLUSTER


@pytest.mark.parametrize("algorithm", PACKING)
@pytest.mark.parametrize("bad", [-1, 1025, 2.5, True, "8"])
def test_node_size_knob_is_checked(algorithm: str, bad: object) -> None:
    with pytest.raises(ValueError, match="gpus_per_node"):
        registry.create(algorithm, {"gpus_per_node": bad})


def test_called_without_a_cluster_an_algorithm_packs_for_four_gpu_nodes() -> None:
    # On 16 GPUs, 12 packs for 4-GPU nodes: the default outside decide().
    assert Voda()([twelve_at_most()], 16) == {"a": 12}
    assert Voda(gpus_per_node=8)([twelve_at_most()], 16) == {"a": 8}

"""Issue #42, part 1: no job waits for ever while it could run, and no job is grown
into a measured slow-down.

The cases a new user met, through each algorithm alone and, for the ones that waited
for ever, through the engine: the job must be started.
"""

from __future__ import annotations

import pytest
from builders import make_cluster, make_job, run_until

from voda.backends.memory import InMemoryBackend
from voda.core.allocation import registry
from voda.core.allocation.counts import sized_to
from voda.core.model import Cluster, Job, JobStatus
from voda.engine.scheduler import Scheduler, SchedulerSettings

HOUR = 3600.0


def allocate(name: str, jobs: list[Job], cluster: Cluster) -> dict[str, int]:
    """What `name` gives on `cluster`, packing for its nodes as decide() has it."""
    return dict(sized_to(registry.create(name), cluster)(jobs, cluster.capacity()))


def run_engine(name: str, jobs: list[Job], nodes: int, gpus: int,
               until: float = HOUR) -> tuple[Scheduler, InMemoryBackend]:
    """Submit `jobs` to the engine running `name` and step it at every wake-up until
    `until` (virtual seconds)."""
    backend = InMemoryBackend(make_cluster().nodes(nodes, gpus=gpus).node_list())
    sched = Scheduler(backend, SchedulerSettings(algorithm=name, rate_limit_seconds=0.0))
    for job in jobs:
        sched.submit(job)
    run_until(sched, until)
    return sched, backend


# ----- a preferred size larger than the cluster ---------------------------------------

RIGID_SIZE = ["FIFO", "SRJF", "Tiresias"]


def wide() -> Job:
    return make_job("a").workers(1, 8).preferred(8).obj()


@pytest.mark.parametrize("name", RIGID_SIZE)
def test_a_preferred_size_larger_than_the_cluster_gives_the_largest_count_that_fits(
    name: str
) -> None:
    cluster = make_cluster().nodes(1, gpus=4).obj()
    assert allocate(name, [wide()], cluster) == {"a": 4}


@pytest.mark.parametrize("name", RIGID_SIZE)
def test_a_preferred_size_larger_than_the_cluster_is_started_by_the_engine(name: str) -> None:
    sched, backend = run_engine(name, [wide()], nodes=1, gpus=4)
    assert sched.jobs["a"].status is JobStatus.RUNNING
    assert sum(n for _, n in backend.running["a"]) == 4


# ----- rigid jobs whose size does not pack ------------------------------------------

PACKING = ["Pollux", "Voda"]


def rigid(name: str, workers: int) -> Job:
    return make_job(name).workers(workers, workers).epochs(10).obj()


@pytest.mark.parametrize("name", PACKING)
@pytest.mark.parametrize(("workers", "nodes", "gpus"), [(3, 1, 4), (6, 1, 8), (6, 2, 4),
                                                         (3, 2, 4), (5, 2, 4)])
def test_a_rigid_job_whose_size_does_not_pack_is_given_its_size(
    name: str, workers: int, nodes: int, gpus: int
) -> None:
    cluster = make_cluster().nodes(nodes, gpus=gpus).obj()
    job = rigid(f"r{workers}", workers)
    assert allocate(name, [job], cluster) == {job.name: workers}


@pytest.mark.parametrize("name", PACKING)
@pytest.mark.parametrize(("workers", "nodes", "gpus"), [(3, 1, 4), (6, 1, 8)])
def test_a_rigid_job_whose_size_does_not_pack_is_started_by_the_engine(
    name: str, workers: int, nodes: int, gpus: int
) -> None:
    job = rigid(f"r{workers}", workers)
    sched, backend = run_engine(name, [job], nodes=nodes, gpus=gpus)
    assert sched.jobs[job.name].status is JobStatus.RUNNING
    assert sum(n for _, n in backend.running[job.name]) == workers


@pytest.mark.parametrize("name", PACKING)
def test_a_job_whose_counts_that_pack_are_slower_than_its_min_starts_at_its_min(
    name: str
) -> None:
    # min 3 on 4-GPU nodes: 4 packs but is measured slower than 3, so 3 it is.
    job = (make_job("a").workers(3, 4).epochs(10).epoch_times({3: 10.0, 4: 20.0}).obj())
    cluster = make_cluster().nodes(1, gpus=4).obj()
    assert allocate(name, [job], cluster) == {"a": 3}


# ----- no growth into a measured slow-down ------------------------------------------

SLOWER_ON_TWO = {1: 10.0, 2: 20.0}


@pytest.mark.parametrize("epochs_left", [1, 2, 3])
@pytest.mark.parametrize("running", [0, 1, 2])
def test_voda_does_not_grow_a_short_job_into_a_measured_slow_down(
    epochs_left: int, running: int
) -> None:
    builder = (make_job("s").workers(1, 2).epochs(10, completed=10 - epochs_left)
               .epoch_times(SLOWER_ON_TWO))
    if running:
        builder = builder.running(running).ran_for(100.0)
    cluster = make_cluster().nodes(1, gpus=2).obj()
    assert allocate("Voda", [builder.obj()], cluster) == {"s": 1}


@pytest.mark.parametrize("name", ["ElasticFIFO", "ElasticSRJF", "AFS-L", "Pollux",
                                  "FfDLOptimizer", "ElasticTiresias", "Optimus"])
@pytest.mark.parametrize("max_workers", [2, 4, 8])
def test_an_elastic_algorithm_does_not_grow_a_job_into_a_measured_slow_down(
    name: str, max_workers: int
) -> None:
    job = (make_job("s").workers(1, max_workers).epochs(10).epoch_times(SLOWER_ON_TWO)
           .obj())
    cluster = make_cluster().nodes(1, gpus=max_workers).obj()
    assert allocate(name, [job], cluster) == {"s": 1}


@pytest.mark.parametrize("name", ["ElasticFIFO", "ElasticSRJF", "AFS-L"])
def test_growth_stops_at_the_first_count_slower_than_the_one_before(name: str) -> None:
    # 1 -> 2 -> 4 speeds up, 4 -> 5 slows down (a second node): the job stops at 4.
    job = (make_job("s").workers(1, 8).epochs(10)
           .epoch_times({1: 100.0, 2: 50.0, 4: 25.0, 5: 40.0}).obj())
    cluster = make_cluster().nodes(2, gpus=4).obj()
    assert allocate(name, [job], cluster) == {"s": 4}


@pytest.mark.parametrize("name", RIGID_SIZE)
def test_a_rigid_size_algorithm_runs_a_job_at_the_fastest_count_up_to_its_preferred(
    name: str
) -> None:
    job = (make_job("a").workers(1, 4).preferred(4).epochs(10)
           .epoch_times({1: 10.0, 2: 8.0, 4: 20.0}).obj())
    cluster = make_cluster().nodes(1, gpus=4).obj()
    assert allocate(name, [job], cluster) == {"a": 2}

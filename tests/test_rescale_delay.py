"""What a change of a job's workers costs on its backend is part of its price: on
Kubernetes an MPIJob's new size takes effect only once the kubelet has propagated its
hostfile ConfigMap to the launcher (`mpijob_rescale_delay_seconds`), so a policy that
prices rescales (Voda, Pollux) turns down a short gain there that it takes elsewhere;
the simulator adds nothing (its published-figure reproductions stand)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from voda.backends.kubernetes.settings import KubernetesSettings
from voda.core.allocation.pollux import Pollux
from voda.core.allocation.voda import Voda
from voda.core.model import Job, JobStatus, validate_job
from voda.engine.scheduler import JobRecord, Scheduler, SchedulerSettings, rescale_delays
from voda.sim.backend import SimBackend
from voda_testing.kube.harness import FakeCluster

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DELAY = KubernetesSettings().mpijob_rescale_delay_seconds
# Two epochs left: 200 s on one GPU, 110 s on two. Doubling pays back 30 s (the policies'
# restart charge) within those 110 s, not 60 (that and the ConfigMap wait).
SHORT_GAIN = {"min_workers": 1, "max_workers": 2, "epochs": 3, "completed_epochs": 1.0,
              "status": JobStatus.RUNNING, "current_workers": 1,
              "epoch_time_by_workers": {1: 100.0, 2: 55.0}}


@pytest.mark.parametrize("policy,age", [(Voda(), 600.0), (Pollux(), 60.0)],
                         ids=["Voda", "Pollux"])
def test_a_policy_pricing_rescales_turns_down_a_short_gain_that_costs_a_configmap_wait(
        policy: Any, age: float) -> None:
    free = Job("a", running_seconds=age, **SHORT_GAIN)  # type: ignore[arg-type]
    waits = Job("a", running_seconds=age, rescale_delay=DEFAULT_DELAY,
                **SHORT_GAIN)  # type: ignore[arg-type]
    assert policy([free], 2) == {"a": 2}
    assert policy([waits], 2) == {"a": 1}


def test_a_rescale_delay_is_a_finite_number_of_seconds() -> None:
    assert validate_job(Job("a", rescale_delay=-1.0)) == [
        "rescale_delay: must be a finite number >= 0, got -1.0"]


def test_the_simulator_adds_nothing_to_the_policies_restart_charge() -> None:
    assert rescale_delays(SimBackend([], {})) is None


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[FakeCluster]:
    with FakeCluster.running(tmp_path, nodes=1) as c:
        yield c


def document(kind: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / "examples" / f"{kind}.yaml").read_text())


@pytest.mark.parametrize("delay,grown", [
    (None, {"pt": 2, "mpi": 1}), (0.0, {"pt": 2, "mpi": 2})],
    ids=["the default ConfigMap wait", "no wait configured"])
def test_on_kubernetes_the_engine_prices_an_mpijobs_configmap_wait_and_not_a_pytorchjobs(
        cluster: FakeCluster, delay: float | None, grown: dict[str, int]) -> None:
    settings = KubernetesSettings(unschedulable_seconds=2.0) if delay is None else (
        KubernetesSettings(unschedulable_seconds=2.0, mpijob_rescale_delay_seconds=delay))
    backend = cluster.backend(settings)
    backend.specs.update(mpi=document("mpijob"), pt=document("pytorchjob"))
    scheduler = Scheduler(backend, SchedulerSettings(algorithm="Voda", rate_limit_seconds=0.0))
    for name in ("mpi", "pt"):
        scheduler.adopt(JobRecord(name=name, running_seconds=600.0, first_start_time=0.0,
                                  placement=(("n0", 1),), **SHORT_GAIN))  # type: ignore[arg-type]
    plan = scheduler.reschedule(0.0)
    assert plan is not None and plan.allocation == grown
    assert scheduler.jobs["mpi"].rescale_delay == (DEFAULT_DELAY if delay is None else delay)
    assert scheduler.jobs["pt"].rescale_delay == 0.0

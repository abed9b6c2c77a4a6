"""The engine keeps every per-job counter in the backend's seconds (Backend.time_scale).

An emulated cluster runs S times faster than the one it emulates and reports epoch times
in emulated seconds; the engine's clock is the wall clock. Running, waiting and attained
GPU-seconds are counted S times faster than the engine's clock, so what a policy compares
(a job's age, its attained service, its time into the epoch under way) is in one unit.
"""

from __future__ import annotations

import dataclasses

import pytest
from builders import make_cluster

from voda.backends.emulated import EmulatedBackend
from voda.backends.memory import InMemoryBackend
from voda.core.model import Job, JobStatus
from voda.engine.scheduler import JobRecord, Scheduler, SchedulerSettings, backend_time_scale

COUNTERS = ("running_seconds", "running_seconds_since_start", "running_seconds_since_epoch",
            "running_seconds_since_promotion", "attained_gpu_seconds",
            "attained_gpu_seconds_since_start", "attained_gpu_seconds_since_epoch",
            "attained_gpu_seconds_since_promotion", "waiting_seconds",
            "waiting_seconds_since_start")


class ScaledBackend(InMemoryBackend):
    """The in-memory backend on a clock `time_scale` times faster than the engine's."""

    def __init__(self, time_scale: float) -> None:
        super().__init__(make_cluster().nodes(1, gpus=2).node_list())
        self.time_scale = time_scale


def run(time_scale: float, algorithm: str = "ElasticFIFO") -> Scheduler:
    """Job a (2 GPUs) runs from t = 1, job b (2 GPUs) waits behind it from t = 2; t = 11."""
    sched = Scheduler(ScaledBackend(time_scale),
                      SchedulerSettings(algorithm=algorithm, rate_limit_seconds=0.0))
    sched.submit(Job("a", 2, 2, submit_time=1.0))
    sched.step(1.0)
    sched.submit(Job("b", 2, 2, submit_time=2.0))
    for now in (1.5, 2.0, 2.5, 6.0, 11.0):
        sched.step(now)
    return sched


@pytest.mark.parametrize("scale", [2.0, 60.0, 1000.0])
def test_the_counters_advance_time_scale_times_faster_than_the_engine_clock(
        scale: float) -> None:
    base, fast = run(1.0), run(scale)
    for name in ("a", "b"):
        for counter in COUNTERS:
            expected = getattr(base.jobs[name], counter) * scale
            assert getattr(fast.jobs[name], counter) == pytest.approx(expected), counter
    assert base.jobs["a"].running_seconds == pytest.approx(10.0)
    assert base.jobs["b"].waiting_seconds == pytest.approx(9.0)
    # Timestamps stay on the engine's clock.
    assert (fast.jobs["a"].first_start_time, fast.jobs["b"].submit_time) == (1.0, 2.0)


def test_a_policys_wake_up_in_job_seconds_comes_at_the_engine_time_it_means() -> None:
    """Tiresias moves a running job down a queue when its attained GPU-seconds reach a
    threshold: 100 GPU-seconds on 2 GPUs is 50 job seconds, 0.5 s of a clock 100 times
    faster."""
    params = {"queue_thresholds": [100.0], "starvation_knob": None}
    for scale, expected in ((1.0, 50.0), (100.0, 0.5)):
        sched = Scheduler(ScaledBackend(scale), SchedulerSettings(
            algorithm="Tiresias", algorithm_params=params, rate_limit_seconds=0.0))
        sched.submit(Job("a", 2, 2, submit_time=0.0))
        sched.step(0.0)
        wake = sched.next_wakeup(0.0)
        assert wake == pytest.approx(expected)
        sched.step(wake)
        assert sched.jobs["a"].attained_gpu_seconds == pytest.approx(100.0)


def test_the_epoch_under_way_is_counted_in_the_unit_of_the_reported_epoch_times() -> None:
    """On an emulated cluster 200 times faster, half an epoch of wall time is half of the
    epoch time the job reports (Voda's credit for the epoch under way reads both)."""
    now = [0.0]
    backend = EmulatedBackend(make_cluster().nodes(1, gpus=4).node_list(), time_scale=200.0,
                              clock=lambda: now[0])
    backend.profiles["a"] = "cifar10"
    sched = Scheduler(backend, SchedulerSettings(algorithm="ElasticFIFO",
                                                 rate_limit_seconds=0.0))
    sched.submit(Job("a", 4, 4, epochs=5, submit_time=0.0))
    sched.step(0.0)
    wall = backend.wall_epoch_seconds("cifar10", sched.jobs["a"].placement)
    now[0] = 1.5 * wall
    sched.step(now[0])
    record = sched.jobs["a"]
    assert record.completed_epochs == 1
    reported = wall * 200.0  # what the epoch report said (emulated seconds)
    assert record.running_seconds_since_epoch == pytest.approx(0.5 * reported)
    assert record.attained_gpu_seconds_since_epoch == pytest.approx(2.0 * reported)


@pytest.mark.parametrize("scale", [0.0, -1.0, float("nan"), float("inf"), "fast", True],
                         ids=repr)
def test_a_backend_with_a_bad_time_scale_is_refused(scale: object) -> None:
    backend = ScaledBackend(1.0)
    backend.time_scale = scale  # type: ignore[assignment]
    with pytest.raises(ValueError, match="time_scale"):
        Scheduler(backend)


def test_a_backend_without_a_time_scale_runs_on_the_engines_clock() -> None:
    assert backend_time_scale(InMemoryBackend([])) == 1.0


def test_the_api_shows_durations_in_the_backends_seconds() -> None:
    from voda.api import views
    from voda.core.model import Cluster

    record = JobRecord.from_job(dataclasses.replace(Job("a", 1, 2, submit_time=10.0),
                                                    status=JobStatus.RUNNING,
                                                    current_workers=2, running_seconds=600.0,
                                                    attained_gpu_seconds=1200.0))
    cluster = Cluster(tuple(make_cluster().nodes(1, gpus=2).node_list()))
    shown = views.describe(record, now=12.0, accounted=11.0, cluster=cluster,
                           unschedulable=None, time_scale=60.0)
    # One wall second since the last step is 60 job seconds on 2 GPUs.
    assert shown["running_seconds"] == pytest.approx(660.0)
    assert shown["gpu_seconds"] == pytest.approx(1320.0)
    assert shown["total_seconds"] == pytest.approx(120.0)  # 2 wall seconds since submission
    assert shown["submit_time"] == 10.0

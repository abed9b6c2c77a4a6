"""Forecasts refreshed off the decision path (voda.engine.forecasting.Forecaster)."""

from __future__ import annotations

import threading

from builders import make_cluster, make_job

from voda.backends.memory import InMemoryBackend
from voda.engine.forecasting import Forecaster
from voda.engine.scheduler import Scheduler, SchedulerSettings


def refusing_scheduler() -> Scheduler:
    """A cluster whose a100 decisions are all refused (the algorithm breaks its contract)."""
    nodes = make_cluster().nodes(1, gpus=4, prefix="d") \
        .nodes(1, gpus=4, gpu_type="a100", prefix="a").node_list()
    settings = SchedulerSettings(
        algorithm="ElasticFIFO", rate_limit_seconds=0.1,
        algorithm_by_gpu_type={"a100": ("tests.custom_algorithm:over_capacity", {})})
    sched = Scheduler(InMemoryBackend(nodes), settings)
    for name in ("x", "y"):
        sched.submit(make_job(name).workers(1, 4).gpu_type("a100").epochs(10)
                     .submitted_at(0).obj())
    sched.submit(make_job("z").workers(1, 2).epochs(10).submitted_at(0).obj())
    sched.step(0.0)
    assert set(sched.errors) == {"a100"}
    return sched


def test_a_forecast_under_a_refusing_algorithm_ends_and_leaves_no_thread_busy() -> None:
    forecaster = Forecaster()
    sched = refusing_scheduler()
    forecaster.after_decision(sched, 0.0)
    try:
        assert forecaster.wait(timeout=30.0), "the forecast retried the refusal for ever"
        assert forecaster.failures == 0
        assert forecaster.of("x")["finish"] is None and forecaster.of("x")["start"] is None
        assert forecaster.of("z")["finish"] is not None
    finally:
        forecaster.close()
    workers = [t for t in threading.enumerate() if t.name.startswith("voda-forecast")]
    for worker in workers:
        worker.join(timeout=10.0)
        assert not worker.is_alive()


def test_what_if_under_a_refusing_algorithm_answers() -> None:
    forecaster = Forecaster()
    sched = refusing_scheduler()
    job = make_job("w").workers(1, 4).gpu_type("a100").epochs(5).submitted_at(1).obj()
    view = forecaster.what_if(sched, job, 1.0)
    assert view["start"] is None and view["finish"] is None
    assert view["basis"] == "assuming no new arrivals"

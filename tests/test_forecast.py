"""The forecast (voda.engine.forecast): hand-checked cases, and the simulator's outcome of a
closed workload forecast exactly from its start."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from voda.core.model import Job, JobStatus, Node
from voda.core.placement.registry import get_placer
from voda.engine.forecast import ForecastInput, forecast
from voda.engine.scheduler import SchedulerSettings
from voda.sim.cluster_file import parse_cluster
from voda.sim.runner import SimSettings, simulate, to_job
from voda.sim.workloads import JobSpec, Workload

NODES = (Node("n0", 4), Node("n1", 4))


def given_state(jobs, placement=None, algorithm="FIFO", now=100.0, penalty=0.0,
                rate_limit=0.0, last_decision=None, nodes=NODES):
    return ForecastInput(
        jobs=tuple(jobs), nodes=nodes, placement=placement or {},
        settings=SchedulerSettings(algorithm=algorithm, rate_limit_seconds=rate_limit),
        placer=get_placer("naive"), now=now, penalty=penalty, last_decision=last_decision,
    )


def test_one_running_job_on_an_idle_cluster_finishes_after_its_remaining_epochs():
    job = Job("a", min_workers=4, max_workers=4, epochs=10, completed_epochs=4.0,
              status=JobStatus.RUNNING, current_workers=4,
              epoch_time_by_workers={4: 50.0}, running_seconds_since_start=1000.0)
    out = forecast(given_state([job], {"a": (("n0", 4),)}, last_decision=90.0))
    assert out.jobs["a"].running and out.jobs["a"].start is None
    assert out.jobs["a"].finish == pytest.approx(100.0 + 6 * 50.0)
    assert out.basis == "assuming no new arrivals"


def test_the_epoch_under_way_counts():
    job = Job("a", min_workers=2, max_workers=2, epochs=3, completed_epochs=1.0,
              status=JobStatus.RUNNING, current_workers=2, epoch_time_by_workers={2: 100.0},
              running_seconds_since_start=500.0, running_seconds_since_epoch=40.0)
    out = forecast(given_state([job], {"a": (("n0", 2),)}))
    assert out.jobs["a"].finish == pytest.approx(100.0 + 60.0 + 100.0)


def test_a_queued_fifo_job_starts_when_the_one_ahead_ends():
    first = Job("a", min_workers=8, max_workers=8, epochs=5, submit_time=0.0,
                status=JobStatus.RUNNING, current_workers=8, epoch_time_by_workers={8: 20.0},
                running_seconds_since_start=1000.0)
    second = Job("b", min_workers=6, max_workers=6, epochs=2, submit_time=10.0,
                 status=JobStatus.WAITING, epoch_time_by_workers={6: 30.0})
    out = forecast(given_state([first, second], {"a": (("n0", 4), ("n1", 4))},
                               penalty=30.0, last_decision=100.0))
    assert out.jobs["a"].finish == pytest.approx(200.0)
    assert out.jobs["b"].start == pytest.approx(200.0)
    assert out.jobs["b"].finish == pytest.approx(200.0 + 30.0 + 60.0)  # restart, then 2 epochs


def test_the_rate_limit_delays_the_next_start():
    first = Job("a", min_workers=8, max_workers=8, epochs=1, status=JobStatus.RUNNING,
                current_workers=8, epoch_time_by_workers={8: 10.0},
                running_seconds_since_start=1000.0)
    second = Job("b", min_workers=8, max_workers=8, epochs=1, submit_time=1.0,
                 epoch_time_by_workers={8: 10.0}, status=JobStatus.WAITING)
    out = forecast(given_state([first, second], {"a": (("n0", 4), ("n1", 4))},
                               rate_limit=60.0, last_decision=95.0))
    assert out.jobs["a"].finish == pytest.approx(110.0)
    assert out.jobs["b"].start == pytest.approx(155.0)  # 60 s after the last decision


def test_a_job_too_large_for_the_cluster_never_starts():
    job = Job("big", min_workers=16, max_workers=16, epochs=1, status=JobStatus.WAITING)
    out = forecast(given_state([job]))
    assert out.jobs["big"].start is None and out.jobs["big"].finish is None


def test_what_if_a_spec_is_submitted_now():
    running = Job("a", min_workers=8, max_workers=8, epochs=2, status=JobStatus.RUNNING,
                  current_workers=8, epoch_time_by_workers={8: 50.0},
                  running_seconds_since_start=1000.0)
    new = Job("new", min_workers=4, max_workers=4, epochs=1, submit_time=100.0,
              epoch_time_by_workers={4: 100.0})
    state = given_state([running], {"a": (("n0", 4), ("n1", 4))}, penalty=30.0,
                        last_decision=100.0)
    out = forecast(state, extra=[new])
    assert out.jobs["new"].start == pytest.approx(200.0)
    assert out.jobs["new"].finish == pytest.approx(330.0)
    assert "new" not in state.jobs  # the input is left alone


def test_coarse_resolution_keeps_finishes_and_bounds_decisions():
    jobs = [Job(f"j{i}", min_workers=1, max_workers=1, epochs=1, submit_time=float(i),
                status=JobStatus.WAITING, epoch_time_by_workers={1: 10.0 + i})
            for i in range(200)]
    out = forecast(given_state(jobs), max_decisions=20)
    assert out.decisions <= 2 * 20  # the bound on the horizon is a lower bound
    assert all(f.finish is not None for f in out.jobs.values())


# ----- the simulator's outcome, forecast from the start of a closed workload ------------

def spec_strategy():
    return st.builds(
        lambda i, lo, extra, epochs, work: (lo, lo + extra, epochs, work),
        st.integers(0, 0), st.integers(1, 6), st.integers(0, 4), st.integers(1, 5),
        st.floats(100.0, 20_000.0),
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(spec_strategy(), min_size=1, max_size=12, unique_by=lambda r: r[3]),
       algorithm=st.sampled_from(["FIFO", "ElasticFIFO", "Tiresias", "SRJF"]),
       interval=st.sampled_from([0.0, 60.0]))
def test_forecast_of_a_closed_workload_is_the_simulated_outcome(rows, algorithm, interval):
    # Distinct amounts of work: two jobs of equal work ending at one instant, one of them
    # one float rounding short in the simulator's epoch-by-epoch sum, is a tie either side
    # may break (the simulator then resizes a job that ends a nanosecond later).
    specs = []
    for i, (lo, hi, epochs, work) in enumerate(rows):
        if algorithm in ("FIFO", "SRJF", "Tiresias"):
            hi = lo
        if algorithm == "SRJF":
            epochs = 1  # the policy reads no epoch report before the job ends
        specs.append(JobSpec(name=f"job-{i}", submit=0.0, order=i, min_workers=lo,
                             max_workers=hi, preferred_workers=None, epochs=epochs,
                             work=work))
    workload = Workload("closed", tuple(specs))
    cluster = parse_cluster("2x4")
    result = simulate(workload, cluster, SimSettings(algorithm=algorithm, placement="naive",
                                                     penalty=30.0, interval=interval or 1e-9,
                                                     record_queue=False))
    by_name = {s.name: s for s in specs}

    def truth(job, placement):
        spec = by_name[job.name]
        return spec.work / spec.epochs / sum(c for _, c in placement)

    state = ForecastInput(
        jobs=tuple(to_job(s, workload) for s in specs), nodes=cluster.nodes, placement={},
        settings=SchedulerSettings(algorithm=algorithm, rate_limit_seconds=interval or 1e-9),
        placer=get_placer("naive"), now=0.0, penalty=30.0,
    )
    out = forecast(state, speed=truth, max_decisions=None)
    for job in result.jobs:
        assert out.jobs[job.name].finish == pytest.approx(job.finish, rel=1e-9, abs=1e-6), (
            job.name)


def test_a_type_whose_decisions_are_refused_gets_no_forecast_and_the_forecast_ends():
    """An algorithm that breaks its contract is refused again at every retry: the
    forecast stops once only those retries are left (it used to retry for ever), jobs of
    that type have no start or finish, and the other types are forecast as usual."""
    nodes = (Node("d", 4), Node("a", 4, gpu_type="a100"))
    refused = [Job(n, min_workers=1, max_workers=4, epochs=10, submit_time=0.0,
                   gpu_type="a100", epoch_time_by_workers={4: 10.0}) for n in ("x", "y")]
    fine = Job("z", min_workers=2, max_workers=2, epochs=3, submit_time=0.0,
               epoch_time_by_workers={2: 20.0})
    given = ForecastInput(
        jobs=(*refused, fine), nodes=nodes, placement={},
        settings=SchedulerSettings(
            algorithm="FIFO", rate_limit_seconds=1.0,
            algorithm_by_gpu_type={"a100": ("tests.custom_algorithm:over_capacity", {})}),
        placer=get_placer("naive"), now=0.0, penalty=0.0)
    out = forecast(given)
    assert out.jobs["x"].start is None and out.jobs["x"].finish is None
    assert out.jobs["y"].finish is None
    assert out.jobs["z"].start == pytest.approx(0.0)
    assert out.jobs["z"].finish == pytest.approx(60.0)


def test_a_forecast_told_to_stop_ends_where_it_got_to():
    jobs = [Job(f"j{i}", min_workers=8, max_workers=8, epochs=5, submit_time=float(i),
                epoch_time_by_workers={8: 10.0}) for i in range(3)]
    calls = iter(range(1_000))
    out = forecast(given_state(jobs), stop=lambda: next(calls) >= 2)
    assert out.jobs["j0"].start is not None
    assert out.jobs["j2"].start is None and out.jobs["j2"].finish is None

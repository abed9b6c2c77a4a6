"""The simulator drives the real scheduler: penalties, node events, placement, determinism."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from voda.core.model import Cluster, Job, Node
from voda.core.placement.most_free import make_most_free, most_free
from voda.core.placement.registry import get_placer
from voda.sim.cluster_file import parse_cluster
from voda.sim.presets import apply_preset
from voda.sim.runner import SimSettings, simulate
from voda.sim.workloads import load_workload


def workload(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "w.yaml"
    path.write_text(text)
    return load_workload(path)


def cluster(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return parse_cluster(str(path))


def finishes(result) -> dict[str, float]:  # type: ignore[no-untyped-def]
    return {j.name: j.finish for j in result.jobs}


ONE_JOB = "- {name: a, arrival: 0, duration: 100, min: 1, max: 1}\n"


@pytest.mark.parametrize(("penalty", "finish"), [(30.0, 130.0), (0.0, 100.0), (12.5, 112.5)])
def test_every_start_costs_the_restart_penalty(tmp_path, penalty, finish) -> None:
    settings = SimSettings(algorithm="FIFO", penalty=penalty, interval=1.0)
    result = simulate(workload(tmp_path, ONE_JOB), parse_cluster("1x1"), settings)
    assert finishes(result) == {"a": pytest.approx(finish)}
    assert result.avg_jct == pytest.approx(finish)


def test_a_failed_node_restarts_its_job_elsewhere_with_a_second_penalty(tmp_path) -> None:
    c = cluster(tmp_path,
                "nodes:\n  - {count: 2, gpus: 1}\nevents:\n  - {time: 50, fail: node-0}\n")
    settings = SimSettings(algorithm="FIFO", placement="naive", interval=1.0)
    result = simulate(workload(tmp_path, ONE_JOB), c, settings)
    # 20 s of work by t = 50; restart on node-1 at 50, penalty until 80, 80 s left.
    assert finishes(result) == {"a": pytest.approx(160.0)}


def test_a_joining_node_lets_the_waiting_job_start(tmp_path) -> None:
    c = cluster(tmp_path, "nodes:\n  - {gpus: 1}\nevents:\n"
                          "  - {time: 10, join: {name: extra, gpus: 1}}\n")
    jobs = ONE_JOB + "- {name: b, arrival: 0, duration: 100, min: 1, max: 1}\n"
    result = simulate(workload(tmp_path, jobs), c, SimSettings(algorithm="FIFO", interval=1.0))
    assert finishes(result) == {"a": pytest.approx(130.0), "b": pytest.approx(140.0)}


def test_elastic_jobs_rescale_and_pay_for_it(tmp_path) -> None:
    jobs = ("- {name: a, arrival: 0, duration: 400, min: 1, max: 4, preferred: 4}\n"
            "- {name: b, arrival: 100, duration: 100, min: 2, max: 2}\n")
    result = simulate(workload(tmp_path, jobs), parse_cluster("1x4"),
                      SimSettings(algorithm="ElasticFIFO", interval=1.0))
    # a holds 4 GPUs until b arrives at 100, then shrinks to 2; b (200 GPU-s on 2 GPUs)
    # starts after its penalty; a grows back when b is done.
    assert result.rescales >= 2
    assert finishes(result)["b"] == pytest.approx(100 + 30 + 100)
    assert result.unfinished == 0


def test_bert_runs_slower_across_nodes(tmp_path) -> None:
    text = "- {name: a, arrival: 0, model: bert, epochs: 1, min: 4, max: 4}\n"
    one_node = simulate(workload(tmp_path, text), parse_cluster("1x4"),
                        SimSettings(algorithm="FIFO", penalty=0.0))
    two_nodes = simulate(workload(tmp_path, text), parse_cluster("2x2"),
                         SimSettings(algorithm="FIFO", penalty=0.0))
    ratio = two_nodes.jobs[0].jct / one_node.jobs[0].jct
    assert ratio == pytest.approx(3.85 / 1.74, rel=0.01)


def test_same_inputs_give_identical_results() -> None:
    w = load_workload("workload-3")
    runs = [simulate(w, parse_cluster("16x4"), SimSettings(algorithm="ElasticTiresias"))
            for _ in range(2)]
    assert runs[0].to_dict() == runs[1].to_dict()
    assert runs[0].unfinished == 0


def test_pollux_preset_decides_on_minute_boundaries(tmp_path) -> None:
    text = "- {name: a, arrival: 16, duration: 100, min: 1, max: 1}\n"
    result = simulate(workload(tmp_path, text), parse_cluster("1x1"),
                      apply_preset("pollux", "FIFO"))
    # First considered at t = 60, penalty to 90, done at 190.
    assert finishes(result) == {"a": 190.0}
    assert result.jobs[0].jct == 174.0


def test_most_free_keeps_running_jobs_and_fills_the_emptiest_node_first() -> None:
    c = Cluster.uniform(3, 4)
    jobs = {n: Job(n, 1, 8, submit_time=t) for n, t in (("run", 0), ("new", 1), ("big", 2))}
    previous = {"run": (("node-1", 3),)}
    placement = most_free({"run": 3, "new": 2, "big": 6}, jobs, c, previous)
    assert placement["run"] == (("node-1", 3),)
    assert placement["new"] == (("node-0", 2),)  # node-0 and node-2 tie at 4 free: lowest index
    assert placement["big"] == (("node-2", 4), ("node-0", 2))  # in the order taken
    assert get_placer("most-free") is most_free


def test_most_free_places_in_the_given_order() -> None:
    c = Cluster((Node("n0", 4), Node("n1", 2)))
    jobs = {n: Job(n, 1, 4, submit_time=t) for n, t in (("early", 0), ("late", 1))}
    late_first = make_most_free(lambda js: sorted(js, key=lambda j: -j.submit_time))
    placement = late_first({"early": 2, "late": 3}, jobs, c, {})
    assert placement["late"] == (("n0", 3),)
    assert placement["early"] == (("n1", 2),)


def test_a_migration_costs_the_same_penalty_as_a_restart() -> None:
    from voda.engine.events import EventKind
    from voda.sim.backend import SimBackend
    from voda.sim.workloads import JobSpec

    spec = JobSpec("a", 0.0, 0, 1, 1, 1, epochs=1, work=100.0)
    backend = SimBackend(list(Cluster.uniform(2, 1).nodes), {"a": spec}, penalty=30.0)
    job = Job("a")
    backend.start(job, (("node-0", 1),))
    backend.advance(50.0)  # 20 s of work done
    backend.scale(job, (("node-1", 1),))  # same count, another node
    assert backend.next_completion() == pytest.approx(50.0 + 30.0 + 80.0)
    backend.advance(200.0)
    kinds = [e.kind for e in backend.events()]
    assert kinds == [EventKind.EPOCH_REPORTED, EventKind.JOB_COMPLETED]
    assert backend.jobs["a"].finished == pytest.approx(160.0)
    assert backend.busy_gpu_seconds == pytest.approx(160.0)


@pytest.mark.parametrize("preset", [None, "pollux"], ids=["event-driven", "fixed rounds"])
def test_a_job_larger_than_the_cluster_is_reported_unfinished(tmp_path, preset) -> None:
    jobs = ONE_JOB + "- {name: huge, arrival: 0, duration: 10, min: 8, max: 8}\n"
    result = simulate(workload(tmp_path, jobs), parse_cluster("1x4"),
                      apply_preset(preset, "FIFO"))
    assert result.unfinished == 1
    assert {j.name: j.finish is None for j in result.jobs} == {"a": False, "huge": True}


def test_gpu_hours_count_the_gpus_held_restarts_included(tmp_path) -> None:
    # a: 100 s on 1 GPU plus its 30 s start; b: 2 GPUs, 50 s of work, plus its start.
    jobs = ONE_JOB + "- {name: b, arrival: 0, duration: 50, min: 2, max: 2}\n"
    result = simulate(workload(tmp_path, jobs), parse_cluster("1x4"),
                      SimSettings(algorithm="FIFO", penalty=30.0, interval=1.0))
    assert finishes(result) == {"a": pytest.approx(130.0), "b": pytest.approx(80.0)}
    assert result.gpu_hours == pytest.approx((1 * 130.0 + 2 * 80.0) / 3600)
    assert result.to_dict()["gpu_hours"] == result.gpu_hours


def test_gpu_hours_agree_with_the_timeline_of_an_elastic_run(tmp_path) -> None:
    jobs = "".join(f"- {{name: j{i}, arrival: {20 * i}, duration: {300 + 50 * i}, min: 1, "
                   f"max: 4}}\n" for i in range(6))
    result = simulate(workload(tmp_path, jobs), parse_cluster("2x4"),
                      SimSettings(algorithm="ElasticFIFO", penalty=30.0, interval=1.0))
    finish = {j.name: j.finish for j in result.jobs}
    held: dict[str, tuple[float, int]] = {}
    gpu_seconds = 0.0
    for t, name, gpus in result.timeline:
        since, before = held.get(name, (t, 0))
        gpu_seconds += before * (t - since)
        held[name] = (t, gpus)
    for name, (since, gpus) in held.items():
        gpu_seconds += gpus * (finish[name] - since)
    assert result.unfinished == 0 and result.rescales > 0
    assert result.gpu_hours == pytest.approx(gpu_seconds / 3600, rel=1e-9)


def test_a_policy_that_decides_on_arrival_starts_jobs_between_rounds(tmp_path) -> None:
    # Voda decides on a submission, as in the service; the artifact's rounds wait for t = 60.
    text = "- {name: a, arrival: 16, duration: 100, min: 1, max: 1}\n"
    on_arrival = simulate(workload(tmp_path, text), parse_cluster("1x1"),
                          apply_preset("pollux", "Voda"))
    assert finishes(on_arrival) == {"a": 146.0}  # started at 16, penalty to 46
    rounds = apply_preset("pollux", "Voda")
    rounds.arrival_decisions = False
    assert finishes(simulate(workload(tmp_path, text), parse_cluster("1x1"), rounds)) == {
        "a": 190.0}


def test_decisions_at_arrivals_keep_the_services_rate_limit(tmp_path) -> None:
    from voda.sim.runner import ARRIVAL_RATE_LIMIT

    text = ("- {name: a, arrival: 70, duration: 100, min: 1, max: 1}\n"
            "- {name: b, arrival: 80, duration: 100, min: 1, max: 1}\n")
    result = simulate(workload(tmp_path, text), parse_cluster("1x2"),
                      apply_preset("pollux", "Voda"))
    # a starts on arrival; b waits until the rate limit has passed since a's decision.
    assert ARRIVAL_RATE_LIMIT == 30.0
    assert finishes(result) == {"a": 200.0, "b": 230.0}


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(jobs=st.lists(st.tuples(st.integers(0, 600), st.integers(10, 300), st.integers(1, 2)),
                     min_size=1, max_size=6))
def test_decisions_between_rounds_start_jobs_after_arrival_and_keep_the_rate_limit(
        tmp_path, jobs) -> None:
    text = "".join(f"- {{name: j{i}, arrival: {a}, duration: {d}, min: {n}, max: {n}}}\n"
                   for i, (a, d, n) in enumerate(jobs))
    result = simulate(workload(tmp_path, text), parse_cluster("1x4"),
                      apply_preset("pollux", "Voda"))
    assert result.unfinished == 0
    submit = {j.name: j.submit for j in result.jobs}
    starts = {}
    for t, name, gpus in result.timeline:
        if gpus and name not in starts:
            starts[name] = t
    assert all(starts[name] >= submit[name] for name in starts)
    between_rounds = sorted({t for t in starts.values() if t % 60})
    assert all(b - a >= 30 for a, b in itertools.pairwise(between_rounds))


def test_an_algorithm_whose_every_decision_is_refused_stops_the_simulation(tmp_path) -> None:
    from voda.sim.runner import SimulationStalled

    jobs = "- {name: a, arrival: 0, duration: 100, min: 1, max: 4}\n" \
           "- {name: b, arrival: 0, duration: 100, min: 1, max: 4}\n"
    settings = SimSettings(algorithm="tests.custom_algorithm:over_capacity", interval=1.0)
    with pytest.raises(SimulationStalled, match=r"every decision is refused.*capacity is 4"):
        simulate(workload(tmp_path, jobs), parse_cluster("1x4"), settings)

"""Tiresias in the engine: the queue a job sits in follows the reference simulator.

The service that places a job counts from its submission and is reset only by a
promotion (starvation rule), never by a preemption, a restart or a node loss.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from builders import make_cluster, make_job, run_until
from hypothesis import given, settings
from hypothesis import strategies as st

from voda.backends.memory import InMemoryBackend
from voda.core.allocation.tiresias import Tiresias
from voda.core.model import JobStatus
from voda.engine.scheduler import JobRecord, Scheduler, SchedulerObserver, SchedulerSettings


def tiresias(
    params: Mapping[str, object], nodes: int = 1, gpus: int = 4
) -> tuple[Scheduler, InMemoryBackend]:
    backend = InMemoryBackend(make_cluster().nodes(nodes, gpus=gpus).node_list())
    settings = SchedulerSettings(algorithm="Tiresias", algorithm_params=dict(params),
                                 rate_limit_seconds=0.0)
    return Scheduler(backend, settings), backend


def test_a_demoted_job_stays_demoted_when_it_restarts_and_a_fresh_job_preempts_it() -> None:
    # One 4-GPU node, rigid 4-GPU jobs, threshold 400 GPU-s (100 s on 4 GPUs), no promotion.
    sched, backend = tiresias({"queue_thresholds": [400.0], "starvation_knob": None})
    sched.submit(make_job("A").rigid(4).submitted_at(0).obj())
    run_until(sched, 150.0)  # A runs past the threshold: lower queue, alone, still runs
    assert backend.running == {"A": (("node-0", 4),)}
    sched.submit(make_job("B").rigid(4).submitted_at(150).obj())
    run_until(sched, 150.0)  # B, new in the top queue, preempts A
    assert backend.running == {"B": (("node-0", 4),)}
    run_until(sched, 260.0)  # B is demoted at 250 s: A (started first) restarts
    assert backend.running == {"A": (("node-0", 4),)}
    assert sched.jobs["A"].attained_gpu_seconds_since_start < 400.0, "A restarted"
    sched.submit(make_job("C").rigid(4).submitted_at(260).obj())
    run_until(sched, 260.0)
    assert backend.running == {"C": (("node-0", 4),)}, "A is still in the lower queue"
    assert sched.jobs["A"].status is JobStatus.WAITING


class Runs(SchedulerObserver):
    """Each job's runs, as (start, end) times from its status changes."""

    def __init__(self) -> None:
        self.runs: dict[str, list[list[float]]] = {}
        self.promoted: list[tuple[str, float]] = []

    def on_promoted(self, record: JobRecord, now: float) -> None:
        self.promoted.append((record.name, now))

    def on_status(self, record: JobRecord, old: JobStatus, new: JobStatus, now: float) -> None:
        if new is JobStatus.RUNNING:
            self.runs.setdefault(record.name, []).append([now, float("inf")])
        elif old is JobStatus.RUNNING:
            self.runs[record.name][-1][1] = now


def test_a_promoted_job_runs_a_threshold_worth_before_it_is_demoted_again() -> None:
    # Threshold 400 GPU-s (100 s on 4 GPUs), knob 2: a waiting job that ran r seconds
    # since its last promotion is promoted once it has waited 2 r since then. Three
    # rigid jobs on one node then take turns of 100 s; before, a promoted job went back
    # to its lower queue as soon as it ran again and was preempted at once (thrashing).
    runs = Runs()
    backend = InMemoryBackend(make_cluster().nodes(1, gpus=4).node_list())
    settings = SchedulerSettings(algorithm="Tiresias", rate_limit_seconds=0.0,
                                 algorithm_params={"queue_thresholds": [400.0],
                                                   "starvation_knob": 2.0})
    sched = Scheduler(backend, settings, observers=[runs])
    for name, at in (("A", 0), ("B", 100), ("D", 100)):
        sched.submit(make_job(name).rigid(4).epochs(1000).submitted_at(at).obj())
    run_until(sched, 100.0)
    run_until(sched, 3000.0)
    assert sched.jobs["A"].promotions >= 5
    assert runs.promoted[0] == ("A", pytest.approx(300.0)), "waited 200 s = 2 x its 100 s run"
    assert len(runs.promoted) == sum(sched.jobs[n].promotions for n in "ABD")
    for name in "ABD":
        finished = [end - start for start, end in runs.runs[name] if end < 3000.0]
        assert finished, name
        assert all(length == pytest.approx(100.0) for length in finished), (name, finished)


def test_losing_a_node_resets_the_wait_so_the_job_is_not_promoted_at_once() -> None:
    # Threshold 800 GPU-s (200 s on 4 GPUs), knob 2, two 4-GPU nodes.
    sched, backend = tiresias({"queue_thresholds": [800.0], "starvation_knob": 2.0}, nodes=2)
    sched.submit(make_job("F").rigid(4).submitted_at(0).obj())
    run_until(sched, 1.0)
    sched.submit(make_job("A").rigid(4).submitted_at(1).obj())
    run_until(sched, 201.0)  # both past the threshold; F started first
    sched.submit(make_job("B").rigid(4).submitted_at(201).obj())
    run_until(sched, 201.0)
    assert sorted(backend.running) == ["B", "F"], "A, the later start, is preempted"
    run_until(sched, 300.0)
    backend.complete("F", 300.0)
    sched.step(300.0)  # A restarts after waiting 99 s
    a = sched.jobs["A"]
    assert a.status is JobStatus.RUNNING
    assert a.waiting_seconds_since_start == 0.0, "the wait restarts with every start"
    run_until(sched, 310.0)
    backend.remove_node(a.placement[0][0], 310.0)
    sched.step(310.0)
    assert a.status is JobStatus.WAITING
    assert a.waiting_seconds_since_start == 0.0
    # 99 s waited against 210 s run since it was submitted (knob 2): not starved; before,
    # the 99 s against its last 10 s run promoted it at once and it preempted B.
    algorithm = sched.algorithm_for("default")
    assert not algorithm.promotion_due(a)  # type: ignore[attr-defined]
    assert [name for name, p in sorted(backend.running.items()) if p] == ["B"], "B runs on"
    until = algorithm.seconds_until_class_change(a)  # type: ignore[attr-defined]
    assert until == pytest.approx(2 * 210.0 - 99.0)


# ----- the queue hooks the engine asks of every job at every step ---------------------
def _reference_hooks(algorithm, job):  # type: ignore[no-untyped-def]
    """promotion_due, priority_class and seconds_until_class_change as first written, one
    call on another (the hooks now inline them)."""
    queue = algorithm.service_queue(job)
    knob = algorithm.starvation_knob
    ran = job.running_seconds_since_promotion
    due = (knob is not None and job.current_workers <= 0 and ran > 0 and queue > 0
           and job.waiting_seconds_since_promotion >= knob * ran)
    cls = 0 if due else queue
    if job.current_workers > 0:
        until = (None if queue >= len(algorithm.queue_thresholds) else
                 (algorithm.queue_thresholds[queue] - job.attained_gpu_seconds_since_promotion)
                 / job.current_workers)
    elif knob is None or queue == 0 or ran <= 0 or due:
        until = None
    else:
        until = knob * ran - job.waiting_seconds_since_promotion
    return due, cls, until


_seconds = st.one_of(st.sampled_from([0.0, 100.0, 400.0, 3600.0, float("nan")]),
                     st.floats(0.0, 1e5))


@settings(max_examples=400, deadline=None)
@given(workers=st.integers(0, 8), attained=_seconds, ran=_seconds, waited=_seconds,
       knob=st.sampled_from([None, 1.0, 2.0, 0.5]),
       thresholds=st.sampled_from([(400.0,), (100.0, 400.0, 3600.0)]))
def test_the_queue_hooks_say_what_the_reference_says(workers: int, attained: float,
                                                     ran: float, waited: float,
                                                     knob: float | None,
                                                     thresholds: tuple[float, ...]) -> None:
    algorithm = Tiresias(queue_thresholds=thresholds, starvation_knob=knob)
    record = JobRecord("j", current_workers=workers,
                       attained_gpu_seconds_since_promotion=attained,
                       running_seconds_since_promotion=ran,
                       waiting_seconds_since_promotion=waited)
    got = (algorithm.promotion_due(record), algorithm.priority_class(record),
           algorithm.seconds_until_class_change(record))
    assert repr(got) == repr(_reference_hooks(algorithm, record))

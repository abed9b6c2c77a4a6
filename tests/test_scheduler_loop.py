"""The scheduler loop on the in-memory backend: coalescing, rate limit, action order,
refused allocations, algorithm switches and Tiresias queue changes."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import pytest
from builders import make_cluster, make_job

from voda.backends.memory import InMemoryBackend
from voda.core.allocation import registry
from voda.core.allocation.registry import UnknownAlgorithm
from voda.core.model import ActionKind, Allocation, Cluster, Job, JobStatus, Placement
from voda.engine.events import Event
from voda.engine.scheduler import (
    DecisionRefused,
    JobRecord,
    Scheduler,
    SchedulerObserver,
    SchedulerSettings,
)


def scheduler(
    nodes: int = 2, gpus: int = 4, rate_limit: float = 30.0, algorithm: str = "ElasticFIFO",
    params: Mapping[str, object] | None = None, **kwargs: object,
) -> tuple[Scheduler, InMemoryBackend]:
    backend = InMemoryBackend(make_cluster().nodes(nodes, gpus=gpus).node_list())
    settings = SchedulerSettings(
        algorithm=algorithm, algorithm_params=dict(params or {}), rate_limit_seconds=rate_limit
    )
    return Scheduler(backend, settings, **kwargs), backend  # type: ignore[arg-type]


# ----- coalescing and rate limit --------------------------------------------------


def test_a_burst_of_submissions_is_one_rescheduling() -> None:
    sched, backend = scheduler()
    for name in "abc":
        sched.submit(make_job(name).workers(1, 2).submitted_at(0).obj())
    plan = sched.step(0.0)
    assert plan is not None
    assert sched.reschedules == 1
    assert [c.verb for c in backend.calls] == ["start", "start", "start"]
    assert sched.step(0.0) is None, "nothing changed since"
    assert sched.reschedules == 1


def test_a_burst_of_completions_is_one_rescheduling() -> None:
    sched, backend = scheduler(rate_limit=0.0)
    for name in "abcd":
        sched.submit(make_job(name).rigid(2).submitted_at(0).obj())
    sched.step(0.0)
    backend.complete("a", 10.0)
    backend.complete("b", 10.0)
    backend.fail("c", 10.0)
    sched.step(10.0)
    assert sched.reschedules == 2
    assert {n: r.status for n, r in sched.jobs.items()} == {
        "a": JobStatus.COMPLETED, "b": JobStatus.COMPLETED, "c": JobStatus.FAILED,
        "d": JobStatus.RUNNING,
    }


def test_the_rate_limit_delays_a_second_rescheduling() -> None:
    sched, backend = scheduler()  # 30 s by default
    assert sched.settings.rate_limit_seconds == 30.0
    sched.submit(make_job("a").rigid(2).submitted_at(0).obj())
    sched.step(0.0)
    sched.submit(make_job("b").rigid(2).submitted_at(5).obj())
    sched.submit(make_job("c").rigid(2).submitted_at(6).obj())
    assert sched.step(5.0) is None
    assert sched.step(6.0) is None
    assert sched.next_wakeup(6.0) == 30.0
    assert sched.step(29.9) is None
    assert sched.reschedules == 1
    assert sched.step(30.0) is not None
    assert sched.reschedules == 2, "both submissions are taken in one rescheduling"
    assert sorted(backend.running) == ["a", "b", "c"]


def test_a_rate_limit_of_zero_reschedules_at_once() -> None:
    sched, backend = scheduler(rate_limit=0.0)
    sched.submit(make_job("a").rigid(2).submitted_at(0).obj())
    sched.step(0.0)
    sched.submit(make_job("b").rigid(2).submitted_at(1).obj())
    assert sched.step(1.0) is not None
    assert sched.reschedules == 2
    assert sorted(backend.running) == ["a", "b"]


def test_a_negative_rate_limit_is_refused() -> None:
    sched, _ = scheduler()
    with pytest.raises(ValueError, match="rate_limit_seconds: must not be negative"):
        sched.set_rate_limit(-1.0)
    assert sched.settings.rate_limit_seconds == 30.0


# ----- scripted algorithm and placer -----------------------------------------------


@dataclass
class Scripted:
    """An algorithm that answers what the test says (or raises what it says)."""

    name: str = "Scripted"
    answer: dict[str, int] = field(default_factory=dict)
    error: Exception | None = None

    def __call__(self, jobs: Sequence[Job], capacity: int) -> dict[str, int]:
        if self.error is not None:
            raise self.error
        return dict(self.answer)


@dataclass
class ScriptedPlacer:
    wanted: dict[str, tuple[tuple[str, int], ...]] = field(default_factory=dict)

    def __call__(
        self, allocation: Allocation, jobs: Mapping[str, Job], cluster: Cluster,
        previous: Placement,
    ) -> Placement:
        return {name: self.wanted[name] for name, gpus in allocation.items() if gpus > 0}


@pytest.fixture
def scripted() -> Iterator[Scripted]:
    algorithm = Scripted()
    registry.register("Scripted", lambda: algorithm)
    yield algorithm
    registry.unregister("Scripted")


def test_actions_are_applied_halt_scale_in_migrate_start_scale_out(scripted: Scripted) -> None:
    placer = ScriptedPlacer()
    sched, backend = scheduler(nodes=4, gpus=2, rate_limit=0.0, algorithm="Scripted",
                               placer=placer)
    for name in "hsmg":
        sched.submit(make_job(name).workers(1, 2).submitted_at(0).obj())
    scripted.answer = {"h": 2, "s": 2, "m": 1, "g": 1}
    placer.wanted = {"h": (("node-0", 2),), "s": (("node-1", 2),), "m": (("node-2", 1),),
                     "g": (("node-3", 1),)}
    sched.step(0.0)
    backend.calls.clear()

    sched.submit(make_job("t").rigid(2).submitted_at(1).obj())
    scripted.answer = {"h": 0, "s": 1, "m": 1, "g": 2, "t": 2}
    placer.wanted = {"s": (("node-1", 1),), "m": (("node-3", 1),),
                     "g": (("node-2", 1), ("node-3", 1)), "t": (("node-0", 2),)}
    plan = sched.step(1.0)

    assert plan is not None
    assert [(a.kind, a.job) for a in plan.actions] == [
        (ActionKind.HALT, "h"), (ActionKind.SCALE_IN, "s"), (ActionKind.MIGRATE, "m"),
        (ActionKind.START, "t"), (ActionKind.SCALE_OUT, "g"),
    ]
    assert [(c.verb, c.job) for c in backend.calls] == [
        ("halt", "h"), ("scale", "s"), ("scale", "m"), ("start", "t"), ("scale", "g"),
    ]
    assert sched.jobs["h"].status is JobStatus.WAITING
    assert sched.jobs["m"].migrations == 1


# ----- refused allocations -------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "error", "reason"),
    [
        ({"a": 2, "b": 1}, None, "job 'b': 1 GPUs is neither 0 nor within [min, max] = [2, 4]"),
        ({"a": 4, "b": 4, "c": 2}, None, "10 GPUs allocated but the capacity is 8"),
        ({"a": 2, "z": 2}, None, "job 'z': not among the jobs given"),
        ({"a": 2.5}, None, "job 'a': GPU count 2.5 is not an integer"),
        ({}, RuntimeError("model server down"), "raised RuntimeError: model server down"),
    ],
    ids=[
        "an allocation below a job's min",
        "an allocation over the capacity",
        "an allocation for a job that does not exist",
        "a fractional GPU count",
        "an algorithm that raises",
    ],
)
def test_a_broken_allocation_is_refused_and_the_plan_in_force_stays(
    scripted: Scripted, answer: dict[str, int], error: Exception | None, reason: str
) -> None:
    sched, backend = scheduler(rate_limit=0.0, algorithm="Scripted")
    for name in "abc":
        sched.submit(make_job(name).workers(2, 4).submitted_at(0).obj())
    scripted.answer = {"a": 4, "b": 2, "c": 2}
    good = sched.step(0.0)
    assert good is not None
    calls, running = list(backend.calls), dict(backend.running)
    placements = {n: r.placement for n, r in sched.jobs.items()}

    scripted.answer, scripted.error = answer, error
    sched.submit(make_job("d").workers(2, 4).submitted_at(1).obj())
    plan = sched.step(1.0)

    assert plan is not None and plan.actions == ()
    assert set(plan.errors) == {"default"}
    assert isinstance(sched.last_error, DecisionRefused)
    assert sched.last_error.gpu_type == "default"
    assert "refused" in str(sched.last_error)
    assert reason in str(sched.last_error)
    assert set(sched.errors) == {"default"}
    assert backend.calls == calls
    assert backend.running == running
    assert {n: r.placement for n, r in sched.jobs.items() if n != "d"} == placements

    scripted.answer, scripted.error = {"a": 2, "b": 2, "c": 2, "d": 2}, None
    sched.submit(make_job("e").workers(2, 4).submitted_at(2).obj())
    assert sched.step(2.0) is not None
    assert sched.last_error is None, "a good allocation clears the error"
    assert sched.errors == {}


# ----- switching algorithms -----------------------------------------------------


def test_switching_to_an_unknown_algorithm_changes_nothing() -> None:
    sched, _ = scheduler(rate_limit=0.0)
    sched.submit(make_job("a").workers(1, 8).submitted_at(0).obj())
    sched.step(0.0)
    before = sched.algorithm_for("default")
    with pytest.raises(UnknownAlgorithm) as caught:
        sched.set_algorithm("Lottery")
    assert "valid names: FIFO, ElasticFIFO" in str(caught.value)
    assert "AFS-L" in str(caught.value)
    assert sched.settings.algorithm == "ElasticFIFO"
    assert sched.algorithm_for("default") is before
    assert not sched.dirty
    assert sched.step(1.0) is None


def test_switching_algorithm_reschedules_with_the_new_one() -> None:
    sched, _ = scheduler(rate_limit=0.0)
    sched.submit(make_job("a").workers(1, 8).submitted_at(0).obj())
    sched.submit(make_job("b").workers(1, 8).submitted_at(0).obj())
    sched.step(0.0)
    assert sched.last_plan is not None and dict(sched.last_plan.allocation) == {"a": 4, "b": 4}
    sched.set_algorithm("AFS-L")
    assert sched.dirty
    plan = sched.step(1.0)
    # AFS-L: a, the earlier of two equally short jobs, grows while b's relative gain as
    # the longer job does not beat a's
    assert plan is not None and dict(plan.allocation) == {"a": 5, "b": 3}


# ----- Tiresias queues ----------------------------------------------------------


def test_a_tiresias_queue_change_from_time_passing_triggers_a_rescheduling() -> None:
    sched, backend = scheduler(nodes=1, gpus=2, rate_limit=0.0, algorithm="Tiresias",
                               params={"queue_thresholds": (100.0,)})
    sched.submit(make_job("a").rigid(2).submitted_at(0).obj())
    sched.step(0.0)
    sched.submit(make_job("b").rigid(2).submitted_at(1).obj())
    sched.step(1.0)
    assert sched.reschedules == 2
    assert backend.running == {"a": (("node-0", 2),)}, "b waits: a started first"
    # a has 2 GPU-s of 100 after 1 s on 2 GPUs: it leaves the top queue at 50 s.
    assert sched.next_wakeup(1.0) == pytest.approx(50.0)
    assert sched.step(49.0) is None
    assert sched.reschedules == 2

    calls_before = len(backend.calls)
    plan = sched.step(50.0)

    assert plan is not None, "the queue change alone reschedules"
    assert sched.reschedules == 3
    assert [(c.verb, c.job) for c in backend.calls[calls_before:]] == [
        ("halt", "a"), ("start", "b"),
    ]
    assert sched.jobs["a"].queue_since == 50.0
    assert sched.jobs["b"].queue_since == 1.0


def test_a_starved_tiresias_job_is_promoted_when_its_wait_is_long_enough() -> None:
    sched, backend = scheduler(nodes=1, gpus=2, rate_limit=0.0, algorithm="Tiresias",
                               params={"queue_thresholds": (100.0,), "starvation_knob": 2.0})
    sched.submit(make_job("a").rigid(2).submitted_at(0).obj())
    sched.step(0.0)
    sched.submit(make_job("b").rigid(2).submitted_at(1).obj())
    sched.step(1.0)
    sched.step(50.0)  # a demoted after a 50 s run; b starts
    assert backend.running == {"b": (("node-0", 2),)}
    # b: 50 s to its own threshold; a: promoted after waiting 2 x 50 s = at 150 s.
    assert sched.next_wakeup(50.0) == pytest.approx(100.0)
    sched.step(100.0)  # b demoted too: both in queue 1, a (started first) runs
    assert backend.running == {"a": (("node-0", 2),)}


@pytest.mark.parametrize("name", registry.BUILTIN_NAMES)
def test_every_built_in_algorithm_drives_the_loop_within_the_cluster(name: str) -> None:
    sched, backend = scheduler(nodes=3, gpus=4, rate_limit=10.0, algorithm=name)
    sizes = [(1, 4), (2, 2), (1, 8), (4, 4), (2, 6), (1, 1), (3, 5)]
    for i, (lo, hi) in enumerate(sizes):
        sched.submit(make_job(f"j{i}").workers(lo, hi).epochs(5).submitted_at(i * 7).obj())
    now = 0.0
    finished: list[str] = []
    while now <= 400.0:
        sched.step(now)
        assert sched.last_error is None
        assert sum(sum(c for _, c in p) for p in backend.running.values()) <= 12
        for node, used in backend.used().items():
            assert used <= 4, f"{node} over capacity"
        for job, placement in sorted(backend.running.items()):
            record = sched.jobs[job]
            assert record.min_workers <= sum(c for _, c in placement) <= record.max_workers
        if now in (60.0, 150.0, 240.0) and backend.running:
            done = sorted(backend.running)[0]
            backend.complete(done, now)
            finished.append(done)
        now += 5.0
    assert sched.reschedules >= 4
    assert all(sched.jobs[j].status is JobStatus.COMPLETED for j in finished)
    assert len(finished) == 3


# ----- refused decisions are retried, GPU types are isolated -----------------------


def test_a_refused_decision_is_retried_after_the_rate_limit_with_backoff(
    scripted: Scripted,
) -> None:
    sched, backend = scheduler(rate_limit=30.0, algorithm="Scripted")
    sched.submit(make_job("a").workers(1, 4).submitted_at(0).obj())
    scripted.error = RuntimeError("model server down")
    assert sched.step(0.0) is not None
    assert set(sched.errors) == {"default"}
    assert not sched.dirty
    assert sched.next_wakeup(0.0) == 30.0, "retried after the rate limit"
    assert sched.step(29.0) is None
    assert sched.step(30.0) is not None, "nothing changed, yet it decides again"
    assert sched.next_wakeup(30.0) == 90.0, "a second refusal in a row doubles the wait"
    sched.step(90.0)
    assert sched.next_wakeup(90.0) == 210.0
    scripted.error, scripted.answer = None, {"a": 4}
    plan = sched.step(210.0)
    assert plan is not None and plan.allocation == {"a": 4}
    assert backend.running == {"a": (("node-0", 4),)}
    assert sched.errors == {} and sched.next_wakeup(210.0) is None


def test_a_refusal_is_logged_once_per_reason(scripted: Scripted, caplog) -> None:
    sched, _ = scheduler(rate_limit=1.0, algorithm="Scripted")
    sched.submit(make_job("a").workers(1, 4).submitted_at(0).obj())
    scripted.error = RuntimeError("model server down")
    with caplog.at_level("DEBUG", logger="voda.engine.scheduler"):
        for t in (0.0, 1.0, 3.0, 7.0):  # each retry, refused the same way
            sched.step(t)
        scripted.error = RuntimeError("model server gone")
        sched.step(15.0)
    said = [(r.levelname, r.getMessage()) for r in caplog.records
            if "the plan in force stays" in r.getMessage()]
    assert [level for level, _ in said] == ["ERROR", "DEBUG", "DEBUG", "DEBUG", "ERROR"]
    assert "server gone" in said[-1][1]


def test_a_refused_decision_with_no_rate_limit_is_retried_after_a_second() -> None:
    sched, _ = scheduler(rate_limit=0.0, algorithm="voda.core.allocation.afs:AFSL")
    sched.placer = lambda *args: (_ for _ in ()).throw(RuntimeError("no topology"))
    sched.submit(make_job("a").workers(1, 4).submitted_at(0).obj())
    sched.step(0.0)
    assert "placer raised RuntimeError: no topology" in sched.errors["default"].reason
    assert sched.next_wakeup(0.0) == 1.0


def test_one_gpu_types_refusal_does_not_freeze_the_others(scripted: Scripted) -> None:
    nodes = make_cluster().nodes(1, gpus=4, gpu_type="a100", prefix="a") \
        .nodes(1, gpus=4, gpu_type="v100", prefix="v").node_list()
    backend = InMemoryBackend(nodes)
    settings = SchedulerSettings(algorithm="ElasticFIFO", rate_limit_seconds=0.0,
                                 algorithm_by_gpu_type={"v100": ("Scripted", {})})
    sched = Scheduler(backend, settings)
    sched.submit(make_job("x").workers(1, 4).gpu_type("a100").submitted_at(0).obj())
    sched.submit(make_job("y").workers(1, 4).gpu_type("v100").submitted_at(0).obj())
    scripted.answer = {"y": 2}
    sched.step(0.0)
    assert backend.running == {"x": (("a-0", 4),), "y": (("v-0", 2),)}

    scripted.answer = {"y": 9}  # over the v100 capacity: refused
    sched.submit(make_job("x2").workers(1, 4).gpu_type("a100").submitted_at(1).obj())
    sched.submit(make_job("y2").workers(1, 4).gpu_type("v100").submitted_at(1).obj())
    plan = sched.step(1.0)

    assert plan is not None
    assert set(plan.errors) == {"v100"} and "capacity is 4" in plan.errors["v100"]
    assert backend.running["x"] == (("a-0", 2),) and backend.running["x2"] == (("a-0", 2),)
    assert backend.running["y"] == (("v-0", 2),), "the refused type keeps its plan"
    assert "y2" not in backend.running
    assert set(sched.errors) == {"v100"}
    assert sched.errors["v100"].gpu_type == "v100"


# ----- applying a plan: checked way, backend first, failures read back -------------------


def test_a_placement_that_goes_over_capacity_on_the_way_is_refused_for_any_placer(
    scripted: Scripted,
) -> None:
    placer = ScriptedPlacer()
    sched, backend = scheduler(nodes=2, gpus=2, rate_limit=0.0, algorithm="Scripted",
                               placer=placer)
    for name in "ab":
        sched.submit(make_job(name).workers(1, 2).submitted_at(0).obj())
    scripted.answer = {"a": 1, "b": 2}
    placer.wanted = {"a": (("node-0", 1),), "b": (("node-1", 2),)}
    sched.step(0.0)
    # The end state fits, but c starts (on node-0, 2 GPUs) before a leaves node-0 by a
    # scale-out: node-0 would hold 3 GPUs on the way.
    sched.submit(make_job("c").rigid(2).submitted_at(1).obj())
    scripted.answer = {"a": 2, "b": 0, "c": 2}
    placer.wanted = {"a": (("node-1", 2),), "c": (("node-0", 2),)}
    calls = list(backend.calls)
    plan = sched.step(1.0)
    assert plan is not None and "node 'node-0': 3 GPUs used of 2" in plan.errors["default"]
    assert backend.calls == calls


class FailingBackend(InMemoryBackend):
    """Fails the start of one job (as a cluster API may), once."""

    def __init__(self, *args: object, fail_start_of: str) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self.fail_start_of: str | None = fail_start_of

    def start(self, job: Job, placement: tuple) -> None:
        if job.name == self.fail_start_of:
            self.fail_start_of = None
            raise RuntimeError("API server unavailable")
        super().start(job, placement)


def test_a_backend_failure_stops_the_plan_rereads_what_runs_and_decides_again() -> None:
    backend = FailingBackend(make_cluster().nodes(2, gpus=4).node_list(), fail_start_of="b")
    sched = Scheduler(backend, SchedulerSettings(algorithm="FIFO", rate_limit_seconds=0.0))
    for name in "abc":
        sched.submit(make_job(name).rigid(2).submitted_at(0).obj())
    assert sched.step(0.0) is None
    # a started; b's start failed; c was not tried: the records say what the backend runs.
    assert backend.running == {"a": (("node-0", 2),)}
    assert sched.jobs["a"].status is JobStatus.RUNNING
    assert sched.jobs["b"].placement == () and sched.jobs["c"].placement == ()
    assert "backend failed to start b: API server unavailable" in str(sched.last_error)
    assert sched.dirty
    plan = sched.step(1.0)
    assert plan is not None
    assert sorted(backend.running) == ["a", "b", "c"]
    assert all(sched.jobs[n].status is JobStatus.RUNNING for n in "abc")
    assert sched.errors == {}


def test_the_backend_is_told_before_the_records_change() -> None:
    seen: list[tuple[str, int, int]] = []

    class Watching(InMemoryBackend):
        def start(self, job: Job, placement: tuple) -> None:
            record = sched.jobs[job.name]
            seen.append((job.name, job.current_workers, record.current_workers))
            super().start(job, placement)

    backend = Watching(make_cluster().nodes(1, gpus=4).node_list())
    sched = Scheduler(backend, SchedulerSettings(algorithm="FIFO", rate_limit_seconds=0.0))
    sched.submit(make_job("a").rigid(2).submitted_at(0).obj())
    sched.step(0.0)
    # the backend gets the job at its new size; the engine's record still says 0
    assert seen == [("a", 2, 0)]
    assert sched.jobs["a"].current_workers == 2


def test_an_event_that_cannot_be_applied_is_dropped_and_the_ones_after_it_are_not() -> None:
    failures: list[tuple[str, str | None, str]] = []

    class BrokenOnEpochs(SchedulerObserver):
        def on_epoch(self, record: JobRecord, epoch: int, seconds: float, workers: int) -> None:
            raise RuntimeError("observer broke")

        def on_event_failed(self, event: Event, error: Exception, now: float) -> None:
            failures.append((str(event.kind), event.job, str(error)))

    sched, backend = scheduler(rate_limit=0.0, observers=[BrokenOnEpochs()])
    for name in "ab":
        sched.submit(make_job(name).rigid(2).submitted_at(0).obj())
    sched.step(0.0)
    backend.report_epoch("a", 5.0, epoch=1, seconds=5.0, workers=2)
    backend.complete("b", 6.0)  # handed over in the same call, after the report that breaks
    sched.step(6.0)
    assert failures == [("epoch-reported", "a", "observer broke")]
    assert sched.failed_events == 1
    assert sched.jobs["b"].status is JobStatus.COMPLETED, "the completion after it is applied"
    assert "b" not in backend.running
    assert sched.jobs["a"].status is JobStatus.RUNNING


# ----- jobs submitted for a later time ----------------------------------------------


def test_a_job_submitted_for_a_later_time_is_scheduled_when_that_time_comes() -> None:
    sched, backend = scheduler(rate_limit=30.0)
    sched.submit(make_job("later").rigid(2).submitted_at(500).obj())
    assert sched.step(0.0) is not None  # the submission itself: nothing to run yet
    assert backend.running == {}
    assert sched.jobs["later"].status is JobStatus.SUBMITTED
    assert sched.next_wakeup(0.0) == 500.0
    assert sched.step(499.0) is None
    plan = sched.step(500.0)
    assert plan is not None
    assert backend.running == {"later": (("node-0", 2),)}
    assert sched.jobs["later"].waiting_seconds == 0.0, "no wait counted before it arrived"


class HalfDoneScale:
    """A backend whose rescale of one job stops the job, then fails (a crash mid-way);
    it can tell what runs (SupportsAdoption)."""

    def __init__(self, nodes: list, fail_scale_of: str) -> None:
        self.inner = InMemoryBackend(nodes)
        self.fail_scale_of: str | None = fail_scale_of

    def start(self, job: Job, placement: tuple) -> None:
        self.inner.start(job, placement)

    def scale(self, job: Job, placement: tuple) -> None:
        if job.name == self.fail_scale_of:
            self.fail_scale_of = None
            self.inner.halt(job)
            raise RuntimeError("launcher died while restarting")
        self.inner.scale(job, placement)

    def halt(self, job: Job) -> None:
        self.inner.halt(job)

    def nodes(self) -> list:
        return self.inner.nodes()

    def events(self) -> list:
        return self.inner.events()

    def running(self) -> dict:
        return dict(self.inner.running)


def test_after_a_backend_failure_the_records_follow_what_the_backend_runs() -> None:
    backend = HalfDoneScale(make_cluster().nodes(1, gpus=4).node_list(), fail_scale_of="a")
    sched = Scheduler(backend, SchedulerSettings(algorithm="ElasticFIFO",  # type: ignore[arg-type]
                                                 rate_limit_seconds=0.0))
    sched.submit(make_job("a").workers(1, 4).submitted_at(0).obj())
    sched.step(0.0)
    assert backend.running() == {"a": (("node-0", 4),)}
    sched.submit(make_job("b").workers(1, 4).submitted_at(1).obj())
    assert sched.step(1.0) is None  # a's scale-in to make room for b fails half-way
    a = sched.jobs["a"]
    assert a.status is JobStatus.WAITING and a.placement == () and a.preemptions == 1
    assert sched.jobs["b"].placement == ()
    plan = sched.step(2.0)
    assert plan is not None
    assert backend.running() == {"a": (("node-0", 2),), "b": (("node-0", 2),)}
    assert a.status is JobStatus.RUNNING


# ----- restarts, ages and progress-driven decisions ----------------------------------


def test_restarts_count_every_allocation_change_after_the_first_start() -> None:
    sched, backend = scheduler(nodes=1, gpus=4, rate_limit=0.0)
    sched.submit(make_job("a").workers(1, 4).submitted_at(0).obj())
    sched.step(0.0)
    assert sched.jobs["a"].restarts == 0  # the first start is no restart
    sched.submit(make_job("b").workers(1, 4).submitted_at(1).obj())
    sched.step(1.0)  # a shrinks to make room for b
    assert sched.jobs["a"].restarts == 1
    backend.complete("b", 2.0)
    sched.step(2.0)  # a grows back
    assert sched.jobs["a"].restarts == 2
    assert sched.jobs["a"].snapshot().restarts == 2


def test_a_job_submitted_between_steps_ages_from_its_submission() -> None:
    sched, _ = scheduler(nodes=1, gpus=1, rate_limit=0.0)
    sched.submit(make_job("a").rigid(1).submitted_at(0).obj())
    sched.step(0.0)
    sched.submit(make_job("b").rigid(1).submitted_at(40).obj())
    sched.step(60.0)
    b = sched.jobs["b"]
    assert b.running_seconds + b.waiting_seconds == pytest.approx(20.0)
    assert sched.jobs["a"].running_seconds == pytest.approx(60.0)


def test_a_forced_step_decides_even_when_nothing_changed() -> None:
    sched, _ = scheduler(rate_limit=30.0)
    sched.submit(make_job("a").workers(1, 2).submitted_at(0).obj())
    sched.step(0.0)
    assert sched.step(1.0) is None
    assert sched.step(1.0, force=True) is not None
    assert sched.reschedules == 2


@pytest.mark.parametrize(("algorithm", "reschedules"), [("Optimus", True), ("ElasticFIFO", False)])
def test_progress_reschedules_only_algorithms_that_decide_on_it(
    algorithm: str, reschedules: bool
) -> None:
    sched, backend = scheduler(rate_limit=0.0, algorithm=algorithm)
    sched.submit(make_job("a").workers(1, 2).epochs(5).submitted_at(0).obj())
    sched.step(0.0)
    backend.report_epoch("a", 5.0, epoch=1, seconds=5.0, workers=2)
    assert (sched.step(5.0) is not None) is reschedules


def test_what_a_restart_costs_is_measured_from_its_restore_epoch() -> None:
    """The restore epoch after a (re)start, less the steady epoch time at that size, is
    what the (re)start cost; a backend that cannot tell the policies a job's restart
    cost (the memory backend here, Kubernetes, local) has them use that."""
    sched, backend = scheduler(nodes=1, gpus=4, rate_limit=0.0)
    sched.submit(make_job("a").workers(1, 4).submitted_at(0).obj())
    sched.step(0.0)
    a = sched.jobs["a"]
    assert a.current_workers == 4
    backend.report_epoch("a", 30.0, 1, 30.0, 4)  # the first start's restore: speed unknown
    backend.report_epoch("a", 40.0, 2, 10.0, 4)  # steady on 4 GPUs: 10 s an epoch
    sched.step(40.0)
    assert a.measured_restart_cost == 0.0
    sched.submit(make_job("b").workers(1, 4).submitted_at(41).obj())
    sched.step(41.0)  # a shrinks for b: its speed there is not known, nor the cost
    shrunk = a.current_workers
    assert shrunk < 4
    backend.report_epoch("a", 70.0, 3, 29.0, shrunk)
    backend.complete("b", 71.0)
    sched.step(71.0)  # a grows back to 4
    assert a.current_workers == 4
    backend.report_epoch("a", 89.0, 4, 18.0, 4)  # 18 s after the restart, 10 s steady
    sched.step(89.0)
    assert a.measured_restart_cost == pytest.approx(8.0)
    assert a.epoch_time_by_workers[4] == pytest.approx(10.0)  # the restore is no speed
    sched.step(90.0, force=True)
    assert a.restart_cost == pytest.approx(8.0)
    assert a.snapshot().restart_cost == pytest.approx(8.0)

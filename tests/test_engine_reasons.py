"""The engine keeps each job's latest reason, and notes a change of code as an event."""

from __future__ import annotations

from builders import make_cluster, make_job

from voda.backends.memory import InMemoryBackend
from voda.core.allocation.reasons import ReasonCode
from voda.engine.scheduler import (
    JobReason,
    JobRecord,
    Scheduler,
    SchedulerObserver,
    SchedulerSettings,
)


class Changes(SchedulerObserver):
    def __init__(self) -> None:
        self.seen: list[tuple[str, str | None, str | None]] = []

    def on_reason(self, record: JobRecord, old: JobReason | None, new: JobReason | None,
                  now: float) -> None:
        self.seen.append((record.name, old and str(old.code), new and str(new.code)))


def setup(gpus: int = 4, rate: float = 30.0) -> tuple[Scheduler, InMemoryBackend, Changes]:
    backend = InMemoryBackend(make_cluster().nodes(1, gpus=gpus).node_list())
    changes = Changes()
    s = Scheduler(backend, SchedulerSettings(algorithm="FIFO", rate_limit_seconds=rate),
                  observers=[changes])
    return s, backend, changes


def test_a_queued_job_keeps_its_reason_and_since_until_its_code_changes() -> None:
    s, _, changes = setup()
    s.submit(make_job("a").rigid(4).submitted_at(0).obj())
    s.submit(make_job("b").rigid(4).submitted_at(0).obj())
    s.step(0.0)
    assert s.job_reasons["b"].code is ReasonCode.QUEUED
    assert "ahead of it a (4 GPUs)" in s.job_reasons["b"].message
    assert s.job_reasons["b"].since == 0.0
    assert "a" not in s.job_reasons  # at its max: no reason
    s.submit(make_job("c").rigid(1).submitted_at(1).obj())
    s.step(40.0)
    assert s.job_reasons["b"].since == 0.0  # the same code: no new event
    assert changes.seen.count(("b", None, "Queued")) == 1


def test_a_job_submitted_within_the_rate_limit_says_it_waits_for_the_next_decision() -> None:
    s, _, _ = setup()
    s.submit(make_job("a").rigid(1).submitted_at(0).obj())
    s.step(0.0)
    s.submit(make_job("b").rigid(1).submitted_at(5).obj())
    s.step(5.0)
    reason = s.job_reasons["b"]
    assert reason.code is ReasonCode.RATE_LIMITED
    assert "t=30" in reason.message and "30 s apart" in reason.message
    s.step(30.0)
    assert "b" not in s.job_reasons  # started at its max


def test_a_job_that_lost_its_node_says_so_until_it_runs_again() -> None:
    s, _, changes = setup(gpus=4)
    s.submit(make_job("a").rigid(4).submitted_at(0).obj())
    s.step(0.0)
    s.halt_jobs_on("node-0", 1.0)
    assert s.job_reasons["a"].code is ReasonCode.NODE_LOST
    assert "node-0" in s.job_reasons["a"].message
    assert ("a", None, "NodeLost") in changes.seen


def test_a_finished_job_has_no_reason() -> None:
    s, _, changes = setup()
    s.submit(make_job("a").rigid(4).submitted_at(0).obj())
    s.submit(make_job("b").rigid(4).submitted_at(0).obj())
    s.step(0.0)
    s.delete("b", 1.0)
    assert "b" not in s.job_reasons
    assert changes.seen[-1] == ("b", "Queued", None)


class ReasonsBackend(InMemoryBackend):
    """A backend with the SupportsReasons capability, failing on demand."""

    def __init__(self, *args: object, fail: bool = False) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self.noted: list[tuple[str, str | None, str]] = []
        self.fail = fail

    def note_reason(self, job: str, code: str | None, message: str, now: float) -> None:
        self.noted.append((job, code, message))
        if self.fail:
            raise RuntimeError("the cluster is down")


def test_a_backend_that_shows_reasons_hears_each_change_of_code_once() -> None:
    backend = ReasonsBackend(make_cluster().nodes(1, gpus=4).node_list())
    s = Scheduler(backend, SchedulerSettings(algorithm="FIFO", rate_limit_seconds=30.0))
    s.submit(make_job("a").rigid(4).submitted_at(0).obj())
    s.submit(make_job("b").rigid(4).submitted_at(0).obj())
    s.step(0.0)
    s.submit(make_job("c").rigid(1).submitted_at(1).obj())
    s.step(40.0)  # b is still queued: no second call
    assert [(j, c) for j, c, _ in backend.noted if j == "b"] == [("b", "Queued")]
    assert "ahead of it a (4 GPUs)" in backend.noted[0][2]
    s.delete("a", 41.0)
    s.step(80.0)  # b starts at its max
    assert ("b", None, "Holds its max of 4 GPUs.") in backend.noted


def test_a_backend_failing_to_take_a_reason_does_not_disturb_scheduling() -> None:
    backend = ReasonsBackend(make_cluster().nodes(1, gpus=4).node_list(), fail=True)
    s = Scheduler(backend, SchedulerSettings(algorithm="FIFO", rate_limit_seconds=30.0))
    s.submit(make_job("a").rigid(4).submitted_at(0).obj())
    s.submit(make_job("b").rigid(4).submitted_at(0).obj())
    s.step(0.0)
    assert backend.noted and s.job_reasons["b"].code is ReasonCode.QUEUED
    assert s.jobs["a"].current_workers == 4


def test_an_ended_job_is_not_shown_to_the_backend() -> None:
    backend = ReasonsBackend(make_cluster().nodes(1, gpus=4).node_list())
    s = Scheduler(backend, SchedulerSettings(algorithm="FIFO", rate_limit_seconds=30.0))
    s.submit(make_job("a").rigid(4).submitted_at(0).obj())
    s.submit(make_job("b").rigid(4).submitted_at(0).obj())
    s.step(0.0)
    s.delete("b", 1.0)
    assert [c for j, c, _ in backend.noted if j == "b"] == ["Queued"]

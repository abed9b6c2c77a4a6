"""Accounting steps added later, in one pass, against each step added at once.

- `account_steps(records, steps)` against `account_all(records, dt)` for each step in
  turn (the reference): the same floats in every counter;
- simulations whose engine leaves the steps of `take_events` to the next reader
  (`Scheduler.defers_accounting`) against ones that add each step at once: the same
  result, decisions and counters of every active job at every decision and at the end.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from voda.core.model import Job, Node
from voda.engine import scheduler as engine
from voda.engine.events import Event, EventKind
from voda.sim.cluster_file import parse_cluster
from voda.sim.presets import apply_preset
from voda.sim.report import SimResult
from voda.sim.runner import simulate

COUNTERS = (
    "attained_gpu_seconds", "attained_gpu_seconds_since_start", "running_seconds",
    "running_seconds_since_start", "running_seconds_since_epoch",
    "attained_gpu_seconds_since_epoch", "waiting_seconds", "waiting_seconds_since_start",
    "attained_gpu_seconds_since_promotion", "running_seconds_since_promotion",
    "waiting_seconds_since_promotion",
)
seconds = st.one_of(st.just(0.0), st.floats(0.0, 1e6, allow_nan=False),
                    st.floats(0.0, 1.0, allow_nan=False))


@st.composite
def records(draw: st.DrawFn) -> list[engine.JobRecord]:
    made = []
    for i in range(draw(st.integers(0, 6))):
        record = engine.JobRecord(name=f"j{i}", max_workers=8,
                                  current_workers=draw(st.sampled_from([0, 0, 1, 3, 8])))
        for name in COUNTERS:
            setattr(record, name, draw(seconds))
        made.append(record)
    return made


def counters(records: list[engine.JobRecord]) -> list[tuple[float, ...]]:
    return [tuple(getattr(r, name) for name in COUNTERS) for r in records]


@given(records(), st.lists(st.one_of(st.floats(1e-9, 1e5), st.just(60.0), st.just(0.1)),
                           min_size=1, max_size=5))
def test_the_steps_in_one_pass_give_the_floats_of_one_pass_per_step(
        given_records: list[engine.JobRecord], steps: list[float]) -> None:
    reference = [dataclasses.replace(r) for r in given_records]
    for dt in steps:
        engine.account_all(reference, dt)
    engine.account_steps(given_records, steps)
    assert counters(given_records) == counters(reference)


class Counters(engine.SchedulerObserver):
    """Every active job's counters at each decision."""

    def __init__(self, scheduler: engine.Scheduler) -> None:
        self.scheduler = scheduler
        self.seen: list[tuple[float, list[tuple[str, tuple[float, ...]]]]] = []

    def on_plan(self, plan: Any, now: float, seconds: float, allocation_seconds: float) -> None:
        active = list(self.scheduler.active.values())
        self.seen.append((now, list(zip([r.name for r in active], counters(active),
                                        strict=True))))


def run(rows: int, algorithm: str, params: dict[str, Any]
        ) -> tuple[SimResult, int, list[Any], dict[str, tuple[float, ...]]]:
    """A simulation of Philly's first `rows` jobs: its result, decisions, the counters at
    each decision and every job's at the end."""
    from tests.results_digest import philly_prefix
    seen: list[Counters] = []

    def observe(scheduler: engine.Scheduler) -> engine.SchedulerObserver:
        seen.append(Counters(scheduler))
        return seen[0]

    result = simulate(philly_prefix(rows), parse_cluster("16x4"),
                      apply_preset(None, algorithm, placement="naive", params=params),
                      observe=observe)
    scheduler = seen[0].scheduler
    ends = {name: counters([r])[0] for name, r in scheduler.jobs.items()}
    return result, scheduler.reschedules, seen[0].seen, ends


@pytest.mark.parametrize(("rows", "algorithm", "params"), [
    (150, "ElasticFIFO", {}),
    (100, "Tiresias", {}),
    (40, "Tiresias", {"queue_thresholds": [3600.0], "starvation_knob": 4.0})])
def test_simulations_adding_the_steps_later_match_adding_each_at_once(
        monkeypatch: pytest.MonkeyPatch, rows: int, algorithm: str,
        params: dict[str, Any]) -> None:
    deferred = run(rows, algorithm, params)
    monkeypatch.setattr(engine.Scheduler, "defers_accounting", False)
    at_once = run(rows, algorithm, params)
    assert deferred[1:] == at_once[1:]
    assert deferred[0] == at_once[0]


class _Backend:
    """Two nodes of 4 GPUs; the events handed over are the test's."""

    def __init__(self) -> None:
        self.pending: list[Event] = []

    def nodes(self) -> list[Node]:
        return [Node("n1", 4), Node("n2", 4)]

    def events(self) -> list[Event]:
        out, self.pending = self.pending, []
        return out

    def start(self, job: Job, placement: Any) -> None:
        pass

    def scale(self, job: Job, placement: Any) -> None:
        pass

    def halt(self, job: Job) -> None:
        pass


def _calls(defers: bool) -> list[tuple[str, tuple[float, ...]]]:
    """Arrivals taken in between decisions, an epoch report and a completion among them,
    then the counters read through `accounted_until`."""
    backend = _Backend()
    scheduler = engine.Scheduler(backend, engine.SchedulerSettings(algorithm="ElasticFIFO",
                                                                   rate_limit_seconds=60.0),
                                 explain=False)
    scheduler.defers_accounting = defers
    scheduler.submit(Job(name="a", min_workers=2, max_workers=4, epochs=9))
    scheduler.submit(Job(name="b", min_workers=4, max_workers=8, epochs=9))
    scheduler.step(0.0)
    scheduler.take_events(10.0)
    scheduler.submit(Job(name="c", min_workers=4, max_workers=4, submit_time=10.0))
    backend.pending = [Event(EventKind.EPOCH_REPORTED, 13.0, job="a",
                             data={"workers": 4, "epoch_seconds": 13.0, "epoch": 1})]
    scheduler.take_events(25.5)
    scheduler.submit(Job(name="d", min_workers=1, max_workers=1, submit_time=25.5))
    backend.pending = [Event(EventKind.JOB_COMPLETED, 30.0, job="b")]
    scheduler.take_events(31.25)
    scheduler.take_events(47.0)
    assert scheduler.accounted_until == 47.0
    records = scheduler.jobs
    return [(name, counters([records[name]])[0]) for name in sorted(records)]


def test_steps_left_by_take_events_are_added_before_anything_reads_the_counters() -> None:
    assert _calls(defers=True) == _calls(defers=False)

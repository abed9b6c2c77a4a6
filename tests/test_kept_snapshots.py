"""Kept snapshots (voda.engine.snapshots.KeptSnapshots) against fresh ones.

A replay of the engine (the simulator, a forecast) keeps each job's snapshot between
decisions and refreshes its counters in place; the engine drops it wherever it changes
another field. At every decision each kept snapshot must read as a fresh `snapshot_of`
of its record: checked here decision by decision in simulations under several algorithms,
and on random sequences of record changes (hypothesis).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import fields
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from voda.core.model import Job, JobStatus
from voda.engine import scheduler as engine
from voda.engine import snapshots
from voda.engine.scheduler import JobRecord
from voda.engine.snapshots import (
    REFRESHED,
    KeptSnapshots,
    LiveJob,
    _refresher,
    snapshot_of,
)
from voda.sim.cluster_file import parse_cluster
from voda.sim.presets import apply_preset
from voda.sim.runner import simulate
from voda.sim.workloads import Workload, load_workload

JOB_FIELDS = [f.name for f in fields(Job)]


def values(job: Job) -> dict[str, Any]:
    return {name: getattr(job, name) for name in JOB_FIELDS}


def stale(jobs: list[Job], records: list[JobRecord]) -> list[str]:
    """The jobs that do not read as a fresh snapshot of their record."""
    assert len(jobs) == len(records)
    return [record.name for job, record in zip(jobs, records, strict=True)
            if values(job) != values(snapshot_of(record))]


def assert_reads_as_fresh(jobs: list[Job], records: list[JobRecord]) -> None:
    assert stale(jobs, records) == []


@pytest.fixture
def checked_decisions(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Every decision's snapshots compared with fresh ones; yields [decisions checked]
    and, after the test, says which decisions had stale ones (noted, not raised inside the
    engine, which would take a raise for a refused decision and go on)."""
    seen = [0]
    found: list[tuple[int, list[str]]] = []
    decide = engine.Scheduler._decide

    def checking(self: engine.Scheduler, records: list[JobRecord], jobs: list[Job],
                 previous: Any) -> Any:
        if not self.explain:
            wrong = stale(jobs, records)
            if wrong:
                found.append((seen[0], wrong))
            seen[0] += 1
        return decide(self, records, jobs, previous)

    monkeypatch.setattr(engine.Scheduler, "_decide", checking)
    yield seen
    assert found == [], f"stale snapshots at {len(found)} decisions, first: {found[:3]}"


def philly(rows: int) -> Workload:
    from tests.results_digest import philly_prefix
    return philly_prefix(rows)


@pytest.mark.parametrize("algorithm", ["ElasticFIFO", "Tiresias", "SRJF", "Voda", "Pollux"])
def test_every_decision_reads_fresh_snapshots_on_philly(
        algorithm: str, checked_decisions: list[int]) -> None:
    simulate(philly(300), parse_cluster("16x4"), apply_preset(None, algorithm,
                                                               placement="naive"))
    assert checked_decisions[0] > 50


@pytest.mark.parametrize("algorithm", ["Tiresias", "Voda", "Pollux", "Optimus"])
def test_every_decision_reads_fresh_snapshots_under_the_pollux_preset(
        algorithm: str, checked_decisions: list[int]) -> None:
    simulate(load_workload("workload-1@1.0"), parse_cluster("16x4"),
             apply_preset("pollux", algorithm))
    assert checked_decisions[0] > 20


@pytest.mark.parametrize("case", [
    "test_a_queued_fifo_job_starts_when_the_one_ahead_ends",
    "test_the_rate_limit_delays_the_next_start",
    "test_what_if_a_spec_is_submitted_now",
    "test_coarse_resolution_keeps_finishes_and_bounds_decisions",
])
def test_every_decision_of_a_forecast_reads_fresh_snapshots(
        case: str, checked_decisions: list[int]) -> None:
    from tests import test_forecast
    getattr(test_forecast, case)()
    assert checked_decisions[0] > 0


def test_a_kept_snapshot_is_a_job_refreshed_in_place() -> None:
    record = JobRecord("j", status=JobStatus.RUNNING, current_workers=2,
                       epoch_time_by_workers={2: 10.0})
    kept = KeptSnapshots()
    [first] = kept.take([record])
    assert isinstance(first, Job) and type(first) is LiveJob
    record.running_seconds += 30.0
    record.completed_epochs = 2.0
    [again] = kept.take([record])
    assert again is first and again.running_seconds == 30.0 and again.completed_epochs == 2.0
    kept.forget("j")
    assert kept.take([record])[0] is not first
    other = JobRecord("j")  # another record under the name: never its snapshot
    assert kept.take([other])[0].current_workers == 0


def test_the_counters_a_job_moves_running_or_not_are_the_refreshed_ones() -> None:
    assert set(COUNTERS) == set(REFRESHED) == set(MOVED_WHILE_RUNNING) | set(
        MOVED_WHILE_WAITING)
    assert set(snapshots.MOVED_WHILE_RUNNING) == MOVED_WHILE_RUNNING
    assert set(snapshots.MOVED_WHILE_WAITING) == MOVED_WHILE_WAITING


def test_a_kept_snapshot_of_a_job_not_running_gets_its_waiting_counters() -> None:
    record = JobRecord("w", status=JobStatus.WAITING)
    kept = KeptSnapshots()
    [first] = kept.take([record])
    engine.account_all([record], 7.0)
    record.running_seconds_since_epoch = 0.0  # its last epoch's report, after it stopped
    record.completed_epochs = 1.0
    [again] = kept.take([record])
    assert again is first
    assert_reads_as_fresh([again], [record])


# --- random sequences of changes -------------------------------------------------------
NAMES = ("a", "b", "c")
# What the engine changes without a word (the clock's counters, a forecast's progress),
# listed here apart from the module's own list.
COUNTERS = (
    "completed_epochs", "attained_gpu_seconds", "attained_gpu_seconds_since_start",
    "running_seconds", "running_seconds_since_start", "running_seconds_since_epoch",
    "attained_gpu_seconds_since_epoch", "waiting_seconds", "waiting_seconds_since_start",
    "attained_gpu_seconds_since_promotion", "running_seconds_since_promotion",
    "waiting_seconds_since_promotion",
)
# Of those, the ones accounting and epoch reports move for a job that runs, and for one
# that does not (a job's workers change only with its placement, which drops its snapshot).
MOVED_WHILE_RUNNING = frozenset(COUNTERS) - {
    "waiting_seconds", "waiting_seconds_since_start", "waiting_seconds_since_promotion"}
MOVED_WHILE_WAITING = frozenset(COUNTERS) - {
    "attained_gpu_seconds", "attained_gpu_seconds_since_start", "running_seconds",
    "running_seconds_since_start", "attained_gpu_seconds_since_promotion",
    "running_seconds_since_promotion"}
FLOATS = st.floats(min_value=0.0, max_value=1e6, allow_nan=False)
CHANGES = st.one_of(
    st.tuples(st.just("count"), st.sampled_from(NAMES), st.sampled_from(COUNTERS), FLOATS),
    st.tuples(st.just("epoch_map"), st.sampled_from(NAMES), st.integers(1, 8), FLOATS),
    st.tuples(st.just("layout"), st.sampled_from(NAMES), st.integers(1, 8), FLOATS),
    st.tuples(st.just("field"), st.sampled_from(NAMES),
              st.sampled_from(("priority", "current_workers", "restarts")), st.integers(0, 9)),
    st.tuples(st.just("status"), st.sampled_from(NAMES),
              st.sampled_from((JobStatus.RUNNING, JobStatus.WAITING)), st.just(0)),
    st.tuples(st.just("new_record"), st.sampled_from(NAMES), st.just(""), st.just(0)),
    st.tuples(st.just("decide"), st.just(""), st.just(""), st.just(0)),
)


def apply_change(change: tuple[Any, ...], records: dict[str, JobRecord],
                 kept: KeptSnapshots, shared_layout: dict[tuple[int, int], float]) -> None:
    """One change, told to `kept` as the engine tells it."""
    kind, name, what, value = change
    record = records.get(name)
    if kind == "count":
        moved = MOVED_WHILE_RUNNING if record.current_workers > 0 else MOVED_WHILE_WAITING
        if what in moved:
            setattr(record, what, value)  # the clock or a forecast's progress: nothing said
    elif kind == "epoch_map":
        record.epoch_time_by_workers[what] = value  # an epoch report, in place
        kept.map_changed(record, "epoch_time_by_workers")
    elif kind == "layout":
        shared_layout[(what, 1)] = value  # the category learned a layout: nothing said
    elif kind in ("field", "status"):
        setattr(record, what if kind == "field" else "status", value)
        kept.forget(name)
    elif kind == "new_record":
        records[name] = JobRecord(name, layout_throughput=shared_layout)


@given(st.lists(CHANGES, max_size=40), st.booleans())
def test_kept_snapshots_read_as_fresh_ones_after_any_changes(
        changes: list[tuple[Any, ...]], reference: bool) -> None:
    shared: dict[tuple[int, int], float] = {}
    records = {n: JobRecord(n, layout_throughput=shared) for n in NAMES}
    # The reference: refreshed through Job's slot setters, one call per job, every map read.
    kept = KeptSnapshots(refresh=_refresher(setters=True)) if reference else KeptSnapshots()
    assert_reads_as_fresh(kept.take(list(records.values())), list(records.values()))
    for change in changes:
        apply_change(change, records, kept, shared)
        if change[0] == "decide":
            assert_reads_as_fresh(kept.take(list(records.values())), list(records.values()))
    assert_reads_as_fresh(kept.take(list(records.values())), list(records.values()))

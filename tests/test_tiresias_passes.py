"""Tiresias's passes at every step and decision against the per-job reference.

`promotions_and_classes`, `earliest_class_change` and `priority_classes` (one loop over
the jobs) against `promotion_due`, `priority_class` and `seconds_until_class_change` per
job; the lazy `fill_at_rigid_size` against `plain_fill_at_rigid_size`; `order` against
every sort; `by_submit` (its name sort only at a tie) against its three sorts; a class
allocated from its submit order against `order`; and simulations with the engine's
batch paths against the per-job ones, job by job.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from voda.core.allocation.base import allocate_by_priority, by_submit, plain_by_submit
from voda.core.allocation.fifo import fill_at_rigid_size, plain_fill_at_rigid_size
from voda.core.allocation.tiresias import Tiresias
from voda.core.model import Job
from voda.engine import scheduler as engine
from voda.sim.cluster_file import parse_cluster
from voda.sim.presets import apply_preset
from voda.sim.report import SimResult
from voda.sim.runner import simulate

seconds = st.one_of(st.just(0.0), st.floats(0.0, 2e5, allow_nan=False),
                    st.sampled_from([100.0, 400.0, 57600.0, 1600.0]))
epoch_maps = st.dictionaries(st.integers(1, 8), st.floats(1.0, 100.0), max_size=3)


@st.composite
def jobs(draw: st.DrawFn, count: int = 12) -> list[Job]:
    made = []
    for i in range(draw(st.integers(0, count))):
        low = draw(st.integers(1, 4))
        high = draw(st.integers(low, 8))
        started = draw(st.one_of(st.none(), st.floats(0.0, 1e4)))
        made.append(Job(
            name=f"j{i}", min_workers=low, max_workers=high,
            preferred_workers=draw(st.one_of(st.none(), st.integers(low, high))),
            priority=draw(st.integers(0, 1)), submit_time=draw(st.sampled_from([0.0, 5.0, 9.0])),
            current_workers=draw(st.sampled_from([0, 0, low, high])),
            attained_gpu_seconds_since_promotion=draw(seconds),
            running_seconds_since_promotion=draw(seconds),
            waiting_seconds_since_promotion=draw(seconds),
            first_start_time=started, epoch_time_by_workers=draw(epoch_maps)))
    return made


algorithms = st.builds(
    Tiresias,
    queue_thresholds=st.sampled_from([(400.0,), (57600.0,), (100.0, 1600.0)]),
    starvation_knob=st.sampled_from([None, 2.0, 16.0]),
    queue_order=st.sampled_from(["first_start", "queue_entry"]))


def per_job_promotions_and_classes(algorithm: Tiresias, given: Sequence[Job]
                                   ) -> tuple[list[int], list[int]]:
    """What the engine's per-job pass does: promote where due, then read the class."""
    due, classes = [], []
    for i, job in enumerate(given):
        if algorithm.promotion_due(job):
            due.append(i)
            job = dataclasses.replace(job, attained_gpu_seconds_since_promotion=0.0,
                                      running_seconds_since_promotion=0.0,
                                      waiting_seconds_since_promotion=0.0)
        classes.append(algorithm.priority_class(job))
    return due, classes


def per_job_earliest(algorithm: Tiresias, given: Sequence[Job]) -> float | None:
    found = [s for s in map(algorithm.seconds_until_class_change, given)
             if s is not None and s >= 0]
    return min(found) if found else None


@given(algorithms, jobs())
def test_the_one_loop_passes_match_the_per_job_hooks(algorithm: Tiresias,
                                                     given_jobs: list[Job]) -> None:
    assert algorithm.promotions_and_classes(given_jobs) == \
        per_job_promotions_and_classes(algorithm, given_jobs)
    assert algorithm.earliest_class_change(given_jobs) == per_job_earliest(algorithm, given_jobs)
    assert algorithm.priority_classes(given_jobs) == \
        list(map(algorithm.priority_class, given_jobs))


def plain_order(algorithm: Tiresias, given_jobs: Sequence[Job]) -> list[Job]:
    """`Tiresias.order` with every stable sort made (the reference)."""
    ordered = by_submit(given_jobs)
    if algorithm.queue_order == "queue_entry":
        keys: list[list[Any]] = [[j.submit_time if j.queue_since is None else j.queue_since
                                  for j in ordered]]
    else:
        keys = [[0.0 if j.first_start_time is None else j.first_start_time for j in ordered],
                [j.first_start_time is None for j in ordered]]
    keys += [algorithm.priority_classes(ordered), [j.priority for j in ordered]]
    positions = list(range(len(ordered)))
    for key in keys:
        positions.sort(key=key.__getitem__)
    return [ordered[i] for i in positions]


@given(algorithms, jobs(), st.data())
def test_the_order_skipping_sorts_of_one_value_matches_every_sort(
        algorithm: Tiresias, given_jobs: list[Job], data: st.DataObject) -> None:
    entered = [dataclasses.replace(job, queue_since=data.draw(st.sampled_from([None, 1.0, 3.0])))
               for job in given_jobs]
    assert algorithm.order(entered) == plain_order(algorithm, entered)


submit_times = st.one_of(st.sampled_from([0.0, -0.0, 5.0, 9.0, math.nan, math.inf]),
                        st.floats(-1e6, 1e6))


@given(st.lists(st.tuples(submit_times, st.integers(0, 2)), max_size=12), st.randoms())
def test_by_submit_sorting_by_name_only_at_a_tie_matches_its_three_sorts(
        drawn: list[tuple[float, int]], shuffle: random.Random) -> None:
    given_jobs = [Job(name=f"j{shuffle.randrange(10**6)}-{i}", min_workers=1, max_workers=1,
                      submit_time=submitted, priority=priority)
                  for i, (submitted, priority) in enumerate(drawn)]
    shuffle.shuffle(given_jobs)
    assert by_submit(given_jobs) == plain_by_submit(given_jobs)


@given(jobs(), st.integers(0, 24))
def test_the_lazy_fill_matches_the_plain_one(given_jobs: list[Job], capacity: int) -> None:
    assert fill_at_rigid_size(given_jobs, capacity) == \
        plain_fill_at_rigid_size(given_jobs, capacity)


@given(jobs(count=3), st.integers(0, 8))  # few jobs, capacities below their preferred sizes
def test_the_fill_reading_the_memo_matches_the_plain_one(given_jobs: list[Job],
                                                        capacity: int) -> None:
    # the plain fill first: never_slower's memo then holds every job's map, and the lazy
    # fill reads its answers without the call
    plain = plain_fill_at_rigid_size(given_jobs, capacity)
    assert fill_at_rigid_size(given_jobs, capacity) == plain


@given(algorithms, jobs(), st.integers(0, 24))
def test_a_class_allocated_from_submit_order_matches_the_order_of_it(
        algorithm: Tiresias, given_jobs: list[Job], capacity: int) -> None:
    def reference(members: Sequence[Job], free: int) -> dict[str, int]:
        return plain_fill_at_rigid_size(algorithm.order(members), free)

    assert algorithm(given_jobs, capacity) == \
        allocate_by_priority(given_jobs, capacity, reference)


class Promotions(engine.SchedulerObserver):
    def __init__(self) -> None:
        self.seen: list[tuple[str, float]] = []

    def on_promoted(self, record: engine.JobRecord, now: float) -> None:
        self.seen.append((record.name, now))


def run(rows: int, params: dict[str, Any]) -> tuple[SimResult, int, list[tuple[str, float]],
                                                    dict[str, tuple[float | None, int]]]:
    """A simulation of Philly's first `rows` jobs: its result, decisions, promotions, and
    each job's queue entry time and promotions at the end."""
    from tests.results_digest import philly_prefix
    seen: list[engine.Scheduler] = []
    promotions = Promotions()

    def observe(scheduler: engine.Scheduler) -> engine.SchedulerObserver:
        seen.append(scheduler)
        return promotions

    result = simulate(philly_prefix(rows), parse_cluster("16x4"),
                      apply_preset(None, "Tiresias", placement="naive", params=params),
                      observe=observe)
    queues = {name: (r.queue_since, r.promotions) for name, r in seen[0].jobs.items()}
    return result, seen[0].reschedules, promotions.seen, queues


@pytest.mark.parametrize(("rows", "params"), [
    (150, {}),
    (40, {"queue_thresholds": [3600.0, 36000.0], "starvation_knob": 4.0}),
    (40, {"queue_thresholds": [3600.0], "queue_order": "queue_entry"})])
def test_simulations_with_the_batch_passes_match_the_per_job_ones(
        monkeypatch: pytest.MonkeyPatch, rows: int, params: dict[str, Any]) -> None:
    fast = run(rows, params)
    monkeypatch.setattr(engine.Scheduler, "_sole_algorithm", lambda self: None)
    plain = run(rows, params)
    assert fast == plain
    if params:
        assert plain[2], "promotions were made"


@dataclasses.dataclass(frozen=True)
class _NoPromotion(Tiresias):
    """A subclass with its own class rule (never promoted) and its own wake-up."""

    def priority_class(self, job: Job) -> int:
        return self.service_queue(job)

    def seconds_until_class_change(self, job: Job) -> float | None:
        return None


@given(jobs())
def test_a_subclass_s_own_hooks_are_the_ones_applied(given_jobs: list[Job]) -> None:
    algorithm = _NoPromotion(queue_thresholds=(400.0,), starvation_knob=2.0)
    assert algorithm.priority_classes(given_jobs) == list(map(algorithm.priority_class,
                                                              given_jobs))
    # the engine finds no one-loop form, and asks each job
    assert getattr(algorithm, "promotions_and_classes", None) is None
    assert getattr(algorithm, "earliest_class_change", None) is None
    assert Tiresias.promotions_and_classes is not None  # Tiresias's own keep theirs

"""The engine's fast Job snapshots equal Job's own constructor, and their maps stay frozen."""

from __future__ import annotations

from dataclasses import fields, replace

import pytest

from voda.core.model import Job, JobStatus
from voda.engine.scheduler import JobRecord
from voda.engine.snapshots import _builder, snapshot_with

JOB_FIELDS = [f.name for f in fields(Job)]


def constructed(record: JobRecord) -> Job:
    return Job(**{name: getattr(record, name) for name in JOB_FIELDS})


def busy_record() -> JobRecord:
    return JobRecord("j", min_workers=2, max_workers=8, preferred_workers=4, priority=1,
                     submit_time=12.5, epochs=9, completed_epochs=3.0, category="resnet",
                     status=JobStatus.RUNNING, current_workers=4,
                     attained_gpu_seconds=0.1 + 0.2, running_seconds=7.0,
                     epoch_time_by_workers={2: 30.0, 4: 16.5},
                     layout_throughput={(4, 1): 210.0}, nodes=frozenset({"n1"}),
                     gpu_types=("a100", "v100"), queue_since=3.0)


@pytest.mark.parametrize("record", [JobRecord("plain"), busy_record()],
                         ids=["defaults", "every-kind-of-field"])
def test_a_snapshot_equals_the_job_the_constructor_builds(record: JobRecord) -> None:
    snap = record.snapshot()
    assert type(snap) is Job
    assert snap == constructed(record)
    for name in JOB_FIELDS:
        assert getattr(snap, name) == getattr(record, name), name


def test_maps_are_frozen_copies_that_follow_the_record() -> None:
    record = busy_record()
    first = record.snapshot()
    with pytest.raises(TypeError):
        first.epoch_time_by_workers[8] = 9.0  # type: ignore[index]
    again = record.snapshot()
    assert again.epoch_time_by_workers is first.epoch_time_by_workers  # unchanged: reused
    record.epoch_time_by_workers[8] = 9.5  # an epoch report, in place
    record.layout_throughput[(8, 2)] = 380.0  # the category learned a layout
    later = record.snapshot()
    assert later.epoch_time_by_workers == {2: 30.0, 4: 16.5, 8: 9.5}
    assert later.layout_throughput == {(4, 1): 210.0, (8, 2): 380.0}
    assert first.epoch_time_by_workers == {2: 30.0, 4: 16.5}  # the earlier one kept its own
    assert first.layout_throughput == {(4, 1): 210.0}
    record.epoch_time_by_workers = {}
    assert record.snapshot().epoch_time_by_workers == {}


def test_a_snapshot_is_frozen_and_apart_from_the_record() -> None:
    record = busy_record()
    snap = record.snapshot()
    record.attained_gpu_seconds += 4.0
    assert snap.attained_gpu_seconds == pytest.approx(0.3)
    assert record.snapshot().attained_gpu_seconds == pytest.approx(4.3)
    with pytest.raises(AttributeError):
        snap.priority = 0  # type: ignore[misc]


@pytest.mark.parametrize("record", [JobRecord("plain"), busy_record()],
                         ids=["defaults", "every-kind-of-field"])
def test_a_snapshot_with_a_change_equals_dataclasses_replace(record: JobRecord) -> None:
    changed = snapshot_with(record, current_workers=7, status=JobStatus.WAITING)
    assert type(changed) is Job
    assert changed == replace(constructed(record), current_workers=7, status=JobStatus.WAITING)
    assert record.snapshot() == constructed(record)  # the record itself is unchanged
    with pytest.raises(ValueError):
        snapshot_with(record, layout_throughput={})


@pytest.mark.parametrize("record", [JobRecord("plain"), busy_record()],
                         ids=["defaults", "every-kind-of-field"])
def test_the_drafted_and_the_descriptor_builders_agree(record: JobRecord) -> None:
    drafted, by_descriptor = _builder()(record), _builder(None)(record)
    assert type(drafted) is type(by_descriptor) is Job
    assert drafted == by_descriptor == constructed(record)
    with pytest.raises(AttributeError):
        drafted.name = "other"  # type: ignore[misc]  # a Job: frozen


def test_a_draft_of_another_layout_falls_back_to_the_descriptors() -> None:
    class Other:
        __slots__ = ("name",)

    record = busy_record()
    assert _builder(Other)(record) == constructed(record)

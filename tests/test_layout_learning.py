"""Layouts learned from reported throughput: the engine's records, the simulator's
reports, a category learning that spread runs faster, and jittered arrivals."""

from __future__ import annotations

from pathlib import Path

import pytest
from builders import make_cluster, make_job

from voda.backends.memory import InMemoryBackend
from voda.core.model import Job, JobPlacement
from voda.core.placement.layout import spread_pays
from voda.engine.events import EventKind
from voda.engine.scheduler import Scheduler, SchedulerSettings
from voda.sim.backend import SimBackend
from voda.sim.cluster_file import parse_cluster
from voda.sim.profiles import load_profile
from voda.sim.runner import SimSettings, simulate
from voda.sim.throughput import split_batch, step_time
from voda.sim.workloads import JobSpec, jitter_arrivals, load_workload


def engine(nodes: int = 4) -> tuple[Scheduler, InMemoryBackend]:
    backend = InMemoryBackend(make_cluster().nodes(nodes, gpus=4).node_list())
    return Scheduler(backend, SchedulerSettings(rate_limit_seconds=0.0)), backend


def test_throughput_is_recorded_by_workers_and_nodes_and_shared_by_the_category() -> None:
    sched, backend = engine()
    sched.submit(make_job("a").rigid(8).category("yolov3").submitted_at(0).obj())
    sched.step(0.0)
    nodes = len(sched.jobs["a"].placement)
    backend.report_epoch("a", 10.0, 1, 100.0, 8, samples_per_second=64.0)
    backend.report_epoch("a", 20.0, 2, 100.0, 8, samples_per_second=96.0)
    sched.step(20.0)
    # Exponential average of the two reports, under (workers, nodes spanned).
    assert sched.layout_history["yolov3"] == {(8, nodes): 80.0}
    sched.submit(make_job("b").rigid(4).category("yolov3").submitted_at(30).obj())
    assert sched.jobs["b"].snapshot().layout_throughput == {(8, nodes): 80.0}
    assert sched.jobs["b"].layout_throughput is sched.jobs["a"].layout_throughput


def test_reports_without_throughput_or_of_another_size_teach_nothing() -> None:
    sched, backend = engine()
    sched.submit(make_job("a").rigid(8).category("yolov3").submitted_at(0).obj())
    sched.step(0.0)
    backend.report_epoch("a", 10.0, 1, 100.0, 8)  # no throughput
    backend.report_epoch("a", 20.0, 2, 100.0, 6, samples_per_second=50.0)  # resized since
    sched.step(20.0)
    assert sched.layout_history["yolov3"] == {}
    assert sched.jobs["a"].epoch_time_by_workers  # epoch times are still recorded


def test_the_simulator_reports_the_throughput_of_the_layout_a_job_runs_on() -> None:
    spec = JobSpec("x", 0.0, 0, 1, 16, None, epochs=2, profile="yolov3", per_gpu_batch=16)
    backend = SimBackend(list(parse_cluster("4x4").nodes), {"x": spec})
    backend.start(make_job("x").obj(), (("node-0", 2), ("node-1", 2), ("node-2", 2),
                                        ("node-3", 2)))
    backend.advance(100_000.0)
    reports = [e for e in backend.events() if e.kind is EventKind.EPOCH_REPORTED]
    profile = load_profile("yolov3")
    split = split_batch(profile, spec.batch_for(profile, 8), 8)
    expected = split.effective_batch / step_time(profile, (2, 2, 2, 2), split)
    assert reports and all(
        e.data["samples_per_second"] == pytest.approx(expected) for e in reports)


def write_yolov3_jobs(tmp_path: Path, count: int) -> Path:
    """Jobs of 8 GPUs an hour apart: only the first runs before anything is known."""
    path = tmp_path / "yolov3.yaml"
    lines = [f"- {{name: y{i}, arrival: {i * 3600}, model: yolov3, min: 8, max: 8, epochs: 3}}"
             for i in range(count)]
    path.write_text("\n".join(lines) + "\n")
    return path


def first_layouts(
    tmp_path: Path, placement: str, monkeypatch: pytest.MonkeyPatch
) -> list[tuple[int, ...]]:
    """GPUs per node of each job's first start, as the simulated cluster saw it."""
    starts: dict[str, tuple[int, ...]] = {}
    start = SimBackend.start

    def recording_start(self: SimBackend, job: Job, placement: JobPlacement) -> None:
        starts.setdefault(job.name, tuple(sorted(c for _, c in placement)))
        start(self, job, placement)

    monkeypatch.setattr(SimBackend, "start", recording_start)
    workload = load_workload(write_yolov3_jobs(tmp_path, 4))
    result = simulate(workload, parse_cluster("8x4"), SimSettings(placement=placement))
    assert result.unfinished == 0
    return [starts[f"y{i}"] for i in range(4)]


def test_a_category_learns_that_spread_runs_faster_and_later_jobs_are_spread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    layouts = first_layouts(tmp_path, "topology", monkeypatch)
    assert layouts[0] == (4, 4), "nothing known: packed"
    assert layouts[1] == (2, 2, 2, 2), "packed seen: spread is tried"
    assert layouts[2:] == [(2, 2, 2, 2)] * 2, "spread measured faster: kept"
    assert first_layouts(tmp_path, "topology-packed", monkeypatch) == [(4, 4)] * 4


def test_yolov3_spread_is_measured_faster_than_packed_in_the_profiles() -> None:
    # What the previous test relies on, from the model itself.
    profile = load_profile("yolov3")
    split = split_batch(profile, 8 * 16, 8)
    packed = split.effective_batch / step_time(profile, (4, 4), split)
    spread = split.effective_batch / step_time(profile, (2, 2, 2, 2), split)
    assert spread > 1.25 * packed
    assert spread_pays({(8, 2): packed, (8, 4): spread}, 8, 4, margin=0.25)


def test_jittered_arrivals_are_seeded_bounded_and_keep_every_job() -> None:
    workload = load_workload("workload-1")
    a = jitter_arrivals(workload, 60.0, seed=1)
    assert a == jitter_arrivals(workload, 60.0, seed=1)
    assert a != jitter_arrivals(workload, 60.0, seed=2)
    assert jitter_arrivals(workload, 0.0, seed=1) is workload
    before = {j.name: j.submit for j in workload.jobs}
    assert sorted(j.name for j in a.jobs) == sorted(before)
    assert all(abs(j.submit - before[j.name]) <= 60.0 for j in a.jobs)
    assert [j.order for j in a.jobs] == list(range(len(a.jobs)))
    assert [j.submit for j in a.jobs] == sorted(j.submit for j in a.jobs)
    with pytest.raises(ValueError, match="jitter: must be"):
        jitter_arrivals(workload, -1.0, seed=1)

"""Layouts learned from reported throughput: the engine's records, the simulator's
reports, a category learning that spread runs faster, and jittered arrivals."""

from __future__ import annotations

from pathlib import Path

import pytest
from builders import make_cluster, make_job

from voda.backends.memory import InMemoryBackend
from voda.core.model import Job, JobPlacement, Node
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
    backend.report_epoch("a", 10.0, 1, 150.0, 8, samples_per_second=40.0)  # restore included
    backend.report_epoch("a", 20.0, 2, 100.0, 8, samples_per_second=64.0)
    backend.report_epoch("a", 30.0, 3, 100.0, 8, samples_per_second=96.0)
    sched.step(30.0)
    # The first epoch after the start is not a measure; the exponential average of the
    # two others is kept under (workers, nodes spanned), for the category on this GPU type.
    assert sched.layout_history[("yolov3", "default")] == {(8, nodes): 80.0}
    sched.submit(make_job("b").rigid(4).category("yolov3").submitted_at(30).obj())
    assert sched.jobs["b"].snapshot().layout_throughput == {(8, nodes): 80.0}
    assert sched.jobs["b"].layout_throughput is sched.jobs["a"].layout_throughput


def test_reports_without_throughput_or_of_another_size_teach_nothing() -> None:
    sched, backend = engine()
    sched.submit(make_job("a").rigid(8).category("yolov3").submitted_at(0).obj())
    sched.step(0.0)
    backend.report_epoch("a", 5.0, 1, 100.0, 8, samples_per_second=50.0)  # the restore
    backend.report_epoch("a", 10.0, 2, 100.0, 8)  # no throughput
    backend.report_epoch("a", 20.0, 3, 100.0, 6, samples_per_second=50.0)  # resized since
    sched.step(20.0)
    assert sched.layout_history[("yolov3", "default")] == {}
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
    """Jobs of 8 GPUs an hour apart: the first two start before anything is measured."""
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
    workload = load_workload(write_yolov3_jobs(tmp_path, 5))
    result = simulate(workload, parse_cluster("8x4"), SimSettings(placement=placement))
    assert result.unfinished == 0
    return [starts[f"y{i}"] for i in range(5)]


def test_a_category_learns_that_spread_runs_faster_and_later_jobs_are_spread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    layouts = first_layouts(tmp_path, "topology", monkeypatch)
    # y0's first epoch (the only one done when y1 arrives) includes the start: no measure.
    assert layouts[:2] == [(4, 4)] * 2, "nothing measured yet: packed"
    assert layouts[2] == (2, 2, 2, 2), "packed seen: spread is tried"
    assert layouts[3:] == [(2, 2, 2, 2)] * 2, "spread measured faster: kept"
    assert first_layouts(tmp_path, "topology-packed", monkeypatch) == [(4, 4)] * 5


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


@pytest.mark.parametrize(("placement", "split", "cross_leaf"), [
    ((("a", 4),), 0.0, 0.0),
    ((("a", 2), ("b", 2)), 1.0, 0.0),  # fits on one node, spans two of one leaf
    ((("a", 2), ("c", 2)), 1.0, 1.0),  # ... and two leaves
    ((("a", 4), ("b", 4)), 0.0, 0.0),  # 8 GPUs: needs two nodes, fits the leaf
    ((("a", 4), ("c", 4)), 0.0, 1.0),  # 8 GPUs over two leaves
], ids=["one node", "split in a leaf", "split across leaves", "wide in a leaf",
        "wide across leaves"])
def test_gpu_time_is_counted_by_how_well_the_job_is_placed(
    placement: JobPlacement, split: float, cross_leaf: float
) -> None:
    nodes = [Node("a", 4, leaf="l0"), Node("b", 4, leaf="l0"),
             Node("c", 4, leaf="l1"), Node("d", 4, leaf="l1")]
    spec = JobSpec("x", 0.0, 0, 1, 16, None, epochs=2, profile="cifar10", per_gpu_batch=128)
    backend = SimBackend(nodes, {"x": spec})
    backend.start(make_job("x").obj(), placement)
    backend.advance(10.0)
    backend.scale(make_job("x").obj(), (("d", 1),))  # one GPU: placed well
    backend.advance(1_000_000.0)
    done = backend.jobs["x"].finished
    assert done is not None
    seconds = backend.layout_gpu_seconds
    assert seconds["total"] == pytest.approx(sum(c for _, c in placement) * 10.0 + (done - 10.0))
    assert seconds["split"] == pytest.approx(split * sum(c for _, c in placement) * 10.0)
    assert seconds["cross_leaf"] == pytest.approx(cross_leaf * sum(c for _, c in placement) * 10.0)


def test_simulation_results_report_the_share_of_split_gpu_time(tmp_path: Path) -> None:
    # One GPU taken first; naive then puts the 4-GPU job on 3 + 1 GPUs of two nodes.
    path = tmp_path / "two.yaml"
    path.write_text("- {name: small, arrival: 0, model: cifar10, min: 1, max: 1, epochs: 3}\n"
                    "- {name: large, arrival: 60, model: bert, min: 4, max: 4, epochs: 1}\n")
    workload = load_workload(path)
    naive = simulate(workload, parse_cluster("2x4"), SimSettings(placement="naive"))
    topology = simulate(workload, parse_cluster("2x4"), SimSettings(placement="topology"))
    assert naive.split_share > 0.5 and naive.to_dict()["split_share"] == naive.split_share
    assert topology.split_share == 0.0 and topology.cross_leaf_share == 0.0
    assert topology.avg_jct < naive.avg_jct

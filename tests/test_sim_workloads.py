"""Workload files become jobs as docs/design/002-simulator.md says; bad files are refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from voda.sim.cluster_file import ClusterFileError, parse_cluster
from voda.sim.workloads import WorkloadError, load_workload

POLLUX_HEADER = "name,time,application,num_replicas,batch_size\n"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_pollux_row_is_rigid_with_rigid_and_elastic_without(tmp_path: Path) -> None:
    rows = "cifar10-0,107,cifar10,6,2048\nncf-1,9,ncf,1,32768\n"
    path = write(tmp_path, "w.csv", POLLUX_HEADER + rows)
    rigid = load_workload(path, rigid=True)
    assert [j.name for j in rigid.jobs] == ["ncf-1", "cifar10-0"]  # arrival order
    cifar = rigid.jobs[1]
    assert (cifar.min_workers, cifar.max_workers, cifar.batch_size) == (6, 6, 2048)
    assert cifar.epochs == 100 and cifar.submit == 107
    elastic = {j.name: j for j in load_workload(path).jobs}
    # Per-GPU batch ceil(2048 / 6) = 342; max = min(2 x 6, 4096 // 342 = 11, 64).
    assert (elastic["cifar10-0"].min_workers, elastic["cifar10-0"].max_workers) == (1, 11)
    assert elastic["cifar10-0"].per_gpu_batch == 342
    assert elastic["ncf-1"].max_workers == 1  # 32768 per GPU is already the batch limit


def test_a_fixed_batch_job_keeps_its_global_batch_on_up_to_batch_over_min_local_gpus(
    tmp_path: Path,
) -> None:
    rows = "cifar10-0,107,cifar10,6,2048\nncf-1,9,ncf,1,32768\nimagenet-2,5,imagenet,24,3200\n"
    path = write(tmp_path, "w.csv", POLLUX_HEADER + rows)
    jobs = {j.name: j for j in load_workload(path, job_model="fixed-batch").jobs}
    cifar = jobs["cifar10-0"]
    # 2048 / min local batch 32 = 64 GPUs; the batch stays 2048 on any of them.
    assert (cifar.min_workers, cifar.max_workers, cifar.preferred_workers) == (1, 64, 6)
    assert cifar.batch_size == 2048 and not cifar.adaptive
    assert jobs["imagenet-2"].max_workers == 64  # 3200 / 20 = 160, capped at 64 profiled GPUs
    assert jobs["ncf-1"].max_workers == 1


def test_an_adaptive_job_picks_its_batch_and_ncf_stays_on_one_gpu(tmp_path: Path) -> None:
    rows = "cifar10-0,107,cifar10,6,2048\nncf-1,9,ncf,1,32768\nbert-2,5,bert,8,384\n"
    path = write(tmp_path, "w.csv", POLLUX_HEADER + rows)
    jobs = {j.name: j for j in load_workload(path, job_model="adaptive").jobs}
    assert jobs["cifar10-0"].adaptive and jobs["cifar10-0"].batch_size is None
    assert (jobs["cifar10-0"].min_workers, jobs["cifar10-0"].max_workers) == (1, 64)  # 4096/32
    assert jobs["bert-2"].max_workers == 64  # 384 / 4 = 96, capped at 64
    ncf = jobs["ncf-1"]
    assert (ncf.max_workers, ncf.batch_size, ncf.adaptive) == (1, 32768, True)


def test_an_unknown_job_model_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="job_model: must be one of"):
        load_workload("workload-1", job_model="elastic-ish")


@pytest.mark.parametrize(("name", "jobs"), [("workload-2@0.5", 80), ("workload-2@1.0", 160),
                                            ("workload-2@1.5", 240), ("workload-2@2.0", 320)])
def test_the_load_variants_load_by_name(name: str, jobs: int) -> None:
    assert len(load_workload(name).jobs) == jobs


def test_an_unknown_load_is_no_built_in_workload() -> None:
    with pytest.raises(WorkloadError, match="no such file"):
        load_workload("workload-2@3.0")


def test_equal_arrivals_keep_row_order_for_the_engine(tmp_path: Path) -> None:
    path = write(tmp_path, "w.csv", POLLUX_HEADER + "b-0,60,ncf,1,32768\na-1,60,ncf,1,32768\n")
    w = load_workload(path)
    first, second = w.jobs
    assert (first.name, second.name) == ("b-0", "a-1")
    assert w.engine_submit(first) < w.engine_submit(second) <= 60


def test_philly_rows_are_fixed_work_at_linear_speedup(tmp_path: Path) -> None:
    path = write(tmp_path, "p.csv", "timestamp,duration,num_gpus,gpu_time,cluster\n"
                 "2017-10-09 07:01:55,66.0,1,66.0,x\n2017-10-09 07:00:55,100.0,4,400.0,y\n")
    jobs = load_workload(path).jobs
    assert [j.submit for j in jobs] == [0.0, 60.0]
    assert jobs[0].work == 400.0 and (jobs[0].min_workers, jobs[0].max_workers) == (1, 4)
    rigid = load_workload(path, rigid=True).jobs
    assert (rigid[0].min_workers, rigid[0].max_workers) == (4, 4)
    # A row names no model: no category, so no job inherits another's epoch times.
    assert [j.category for j in jobs] == ["", ""]


def test_native_yaml_jobs(tmp_path: Path) -> None:
    path = write(tmp_path, "w.yaml", """
jobs:
  - {name: train, arrival: 0, model: cifar10, epochs: 5, min: 1, max: 8, priority: 1}
  - {name: batch, arrival: 30, duration: 600, min: 2, max: 4, preferred: 2}
""")
    train, batch = load_workload(path).jobs
    assert (train.profile, train.epochs, train.max_workers, train.priority) == ("cifar10", 5, 8, 1)
    assert batch.work == 1200.0 and batch.preferred_workers == 2


def test_native_csv_jobs(tmp_path: Path) -> None:
    path = write(tmp_path, "w.csv", "arrival,name,model,epochs,duration,min,max\n"
                 "0,a,bert,1,,1,4\n5,b,,,100,1,2\n")
    a, b = load_workload(path).jobs
    assert a.profile == "bert" and b.work == 100.0


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        ("name,time,application,num_replicas\nx,1,bert,1\n", 1, "missing column 'batch_size'"),
        (POLLUX_HEADER + "a,1,bert,6,384\nb,-5,bert,6,384\n", 3, "time: must not be negative"),
        (POLLUX_HEADER + "a,1,resnet,6,384\n", 2, "unknown application 'resnet'"),
        (POLLUX_HEADER + "a,1,bert,0,384\n", 2, "num_replicas: must be at least 1"),
        (POLLUX_HEADER + "a,1,bert,six,384\n", 2, "num_replicas: 'six' is not a number"),
        ("timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,66,0,0,x\n", 2,
         "num_gpus: must be at least 1"),
        ("arrival,min,max\n0,1,2\n", 2, "give a model"),
    ],
    ids=["missing column", "negative time", "unknown application", "zero GPUs",
         "not a number", "zero GPUs in a Philly row", "no work given"],
)
def test_bad_rows_are_refused_with_file_line_and_reason(tmp_path, text, line, reason) -> None:
    path = write(tmp_path, "bad.csv", text)
    with pytest.raises(WorkloadError) as caught:
        load_workload(path)
    assert caught.value.line == line
    assert str(caught.value).startswith(f"{path}:{line}: ")
    assert reason in str(caught.value)


def test_bad_yaml_entries_name_their_line(tmp_path: Path) -> None:
    text = "- {arrival: 0, duration: 10}\n- {arrival: -1, duration: 10}\n"
    path = write(tmp_path, "w.yaml", text)
    with pytest.raises(WorkloadError, match=r"w.yaml:2: arrival: must not be negative"):
        load_workload(path)


@pytest.mark.parametrize("kind", ["missing", "directory", "binary"])
def test_unreadable_files_are_refused(tmp_path: Path, kind: str) -> None:
    if kind == "missing":
        path = tmp_path / "nope.csv"
    elif kind == "directory":
        path = tmp_path
    else:
        path = tmp_path / "w.csv"
        path.write_bytes(b"\xff\xfe\x00\x81garbage")
    with pytest.raises(WorkloadError) as caught:
        load_workload(path)
    assert str(path) in str(caught.value)


def test_built_in_workloads_load_by_name() -> None:
    assert len(load_workload("workload-3").jobs) == 160


def test_clusters_from_shape_and_yaml(tmp_path: Path) -> None:
    assert parse_cluster("16x4").cluster.capacity() == 64
    path = write(tmp_path, "c.yaml", """
nodes:
  - {name: a, gpus: 4, gpu_type: t4, leaf: l0}
  - {count: 2, gpus: 2}
events:
  - {time: 20, join: {name: z, gpus: 8}}
  - {time: 10, fail: a}
""")
    c = parse_cluster(str(path))
    assert [n.name for n in c.nodes] == ["a", "node-1", "node-2"]
    events = [(e.time, e.kind, e.node.name) for e in c.events]
    assert events == [(10, "fail", "a"), (20, "join", "z")]
    with pytest.raises(ClusterFileError, match="16y4"):
        parse_cluster("16y4")
    bad = write(tmp_path, "bad.yaml", "nodes:\n  - {gpus: 0}\n")
    with pytest.raises(ClusterFileError, match=r"nodes\[0\]: gpus"):
        parse_cluster(str(bad))


def test_the_philly_trace_ships_with_the_package() -> None:
    from voda.sim.workloads import builtin_workload

    path = builtin_workload("philly")
    assert path is not None
    with path.open() as f:
        assert f.readline().strip() == "timestamp,duration,num_gpus,gpu_time,cluster"
        assert sum(1 for line in f if line.strip()) == 82247


def test_line_numbers_count_blank_lines(tmp_path: Path) -> None:
    path = write(tmp_path, "w.csv", POLLUX_HEADER + "a,1,bert,6,384\n\nb,2,bert,-6,384\n")
    with pytest.raises(WorkloadError, match=r"w.csv:4: num_replicas"):
        load_workload(path)


def test_a_trace_not_in_arrival_order_gets_each_job_s_place_as_a_copy_would(
        tmp_path: Path) -> None:
    import dataclasses

    from voda.sim import workloads

    path = tmp_path / "shuffled.csv"
    path.write_text("timestamp,duration,num_gpus\n2017-10-09 07:01:55,66.0,1\n"
                    "2017-10-09 06:13:03,2951.0,2\n2017-10-09 06:13:03,10.0,4\n"
                    "2017-10-09 06:00:00,5.0,1\n")
    loaded = load_workload(path).jobs
    parsed = workloads._csv(path, path.read_text(), "elastic")
    parsed.sort(key=lambda j: (j.submit, j.order))
    copies = tuple(dataclasses.replace(j, order=i) for i, j in enumerate(parsed))
    assert loaded == copies
    assert [j.order for j in loaded] == [0, 1, 2, 3]
    assert [j.name for j in loaded] == ["philly-4", "philly-2", "philly-3", "philly-1"]

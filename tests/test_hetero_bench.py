"""bench/hetero.py's choice of cluster (the simulations themselves are the bench's)."""

from __future__ import annotations

from pathlib import Path

from bench_modules import load_bench

bench = load_bench("hetero")


def test_a_bundled_cluster_is_found_by_its_name() -> None:
    for name in ("heterogeneous-64", "physical-44"):
        found = bench.cluster_file(name)
        assert found.is_file() and found.name == f"{name}.yaml"
        assert found.parent == bench.DATA / "clusters"


def test_any_other_name_is_taken_as_a_path(tmp_path: Path) -> None:
    own = tmp_path / "mine.yaml"
    assert bench.cluster_file(str(own)) == own
    assert bench.cluster_file("no-such-cluster") == Path("no-such-cluster")


def test_a_load_divides_every_arrival_time_and_keeps_the_rest(tmp_path: Path) -> None:
    source = tmp_path / "saturn" / "workload-9.csv"
    source.parent.mkdir()
    source.write_text("name,time,application,num_replicas,batch_size\n"
                      "a-0,0.0,cifar10,1,128\nb-1,300.0,imagenet,4,256\n")
    denser = bench.at_load(source, 2.0, tmp_path)
    header, *rows = denser.read_text().splitlines()
    assert header == "name,time,application,num_replicas,batch_size"
    assert rows == ["a-0,0.0,cifar10,1,128", "b-1,150.0,imagenet,4,256"]
    sparser = bench.at_load(source, 0.5, tmp_path)
    assert sparser.read_text().splitlines()[2] == "b-1,600.0,imagenet,4,256"
    assert denser != sparser

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

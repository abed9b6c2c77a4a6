"""Resampled Pollux workloads: drawn from the pool, reproducible, loadable."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from voda.sim.resample import (
    POLLUX_WINDOW_SECONDS,
    pollux_sources,
    resampled_rows,
    write_resampled,
)
from voda.sim.workloads import load_workload


def _pool() -> set[tuple[str, str, str]]:
    jobs = set()
    for path in pollux_sources():
        with open(path, newline="") as f:
            jobs |= {(r["application"], r["num_replicas"], r["batch_size"])
                     for r in csv.DictReader(f)}
    return jobs


def test_the_four_pollux_workloads_are_the_pool() -> None:
    assert [p.stem for p in pollux_sources()] == [f"workload-{i}" for i in range(1, 5)]


def test_rows_are_drawn_from_the_pool_and_arrive_in_order_within_the_window() -> None:
    rows = resampled_rows(240, seed=7)
    assert len(rows) == 240
    pool = _pool()
    assert all((r["application"], r["num_replicas"], r["batch_size"]) in pool for r in rows)
    times = [int(r["time"]) for r in rows]
    assert times == sorted(times)
    assert times[0] >= 0 and times[-1] < POLLUX_WINDOW_SECONDS
    assert len({r["application"] for r in rows}) >= 4  # a mix, not one job repeated


def test_a_seed_gives_the_same_rows_and_another_seed_others() -> None:
    assert resampled_rows(80, seed=1) == resampled_rows(80, seed=1)
    assert resampled_rows(80, seed=1) != resampled_rows(80, seed=2)
    # the count is part of the draw: 80 jobs are not the first 80 of 160
    assert resampled_rows(80, seed=1) != resampled_rows(160, seed=1)[:80]


def test_a_written_workload_loads_with_unique_names(tmp_path: Path) -> None:
    path = write_resampled(tmp_path / "w.csv", 160, seed=3)
    workload = load_workload(path, job_model="adaptive")
    assert len(workload.jobs) == 160
    assert len({j.name for j in workload.jobs}) == 160


@pytest.mark.parametrize("count", [0, -1, 100_001, 1.5, True])
def test_a_count_out_of_bounds_is_refused(count: object) -> None:
    with pytest.raises(ValueError, match="count: must be a whole number"):
        resampled_rows(count, seed=1)  # type: ignore[arg-type]


def test_no_jobs_to_draw_from_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty.csv"
    empty.write_text("name,time,application,num_replicas,batch_size\n")
    with pytest.raises(ValueError, match="sources: no jobs"):
        resampled_rows(10, seed=1, sources=[empty])

"""The Sia artifact's own simulator's runs kept in voda/data/sia/published, and which of them
a simulation of a workload, or of its first jobs, compares with."""

from __future__ import annotations

import csv
import json
import re
import statistics
from pathlib import Path

import pytest
from bench_modules import load_bench

from voda.sim.compare import RunRequest, run_one
from voda.sim.hetero_published import artifact_jcts, published_dir

bench = load_bench("hetero")
WORKLOADS = bench.DATA / "workloads"
RUN_NAME = re.compile(r"sia-(?P<set>\w+)-workload-(?P<n>\d+)(-first-(?P<first>\d+))?\.json")


def job_names(workload_set: str, number: int) -> list[str]:
    with (WORKLOADS / workload_set / f"workload-{number}.csv").open() as f:
        return [row["name"] for row in csv.DictReader(f)]


def stored_runs() -> list[Path]:
    return sorted(published_dir().glob("sia-*.json"))


def test_every_set_has_a_run_of_the_artifact_for_each_of_its_workloads() -> None:
    names = {p.name for p in stored_runs()}
    for workload_set, count in (("saturn", 5), ("philly", 4), ("newtrace", 3)):
        for n in range(1, count + 1):
            run = f"sia-{workload_set}-workload-{n}"
            assert {f"{run}.json", f"{run}-first-160.json"} & names, run


@pytest.mark.parametrize("path", stored_runs(), ids=lambda p: p.stem)
def test_a_stored_run_has_a_jct_for_each_job_it_ran_and_its_own_mean(path: Path) -> None:
    match = RUN_NAME.fullmatch(path.name)
    assert match, path.name
    names = job_names(match["set"], int(match["n"]))
    if match["first"]:
        names = names[: int(match["first"])]
    runs = json.loads(path.read_text())
    jcts = next(iter(runs["jcts"].values()))
    assert sorted(jcts) == sorted(names)
    assert all(v > 0 for v in jcts.values())
    assert runs["mean"] == pytest.approx(statistics.fmean(jcts.values()))


def test_a_whole_workloads_run_compares_only_with_a_simulation_of_all_its_jobs() -> None:
    whole = artifact_jcts("saturn", 1)
    assert whole is not None and len(whole) == len(job_names("saturn", 1))
    assert artifact_jcts("saturn", 1, len(whole)) == whole
    assert artifact_jcts("saturn", 1, 10 * len(whole)) == whole  # a slice past the end is all
    assert artifact_jcts("saturn", 1, 100) is None  # no run of saturn-1's first 100 jobs


def test_a_run_of_a_workloads_first_jobs_compares_only_with_that_slice() -> None:
    assert artifact_jcts("newtrace", 1) is None  # its 960 jobs were not run whole
    first = artifact_jcts("newtrace", 1, 160)
    assert first is not None and len(first) == 160
    assert artifact_jcts("newtrace", 1, 100) is None
    assert artifact_jcts("helios", 1) is None


@pytest.mark.slow
@pytest.mark.parametrize(("workload_set", "number", "first"),
                         [("philly", 1, None), ("newtrace", 1, 160)])
def test_our_sia_averages_within_5_percent_of_the_artifacts_own_simulator(
        tmp_path: Path, workload_set: str, number: int, first: int | None) -> None:
    """The baseline's check in issue #47: Sia (ours), run on Sia's cluster and setting as
    bench/hetero.py runs it, against the artifact's `multi_simulator.py --policy=sia` on the
    same jobs."""
    workload = WORKLOADS / workload_set / f"workload-{number}.csv"
    if first is not None:
        workload = bench.first_jobs(workload, first, tmp_path)  # the bench's own slice
    cluster = bench.cluster_file(bench.SIA_CLUSTER)
    ours = run_one(RunRequest(str(workload), str(cluster), "Pollux", preset="sia",
                              job_model="adaptive", hetero_policy="sia"))
    theirs = artifact_jcts(workload_set, number, first)
    assert theirs is not None and ours.unfinished == 0
    assert len(ours.jobs) == len(theirs)
    assert ours.avg_jct / statistics.fmean(theirs) == pytest.approx(1.0, abs=0.05)

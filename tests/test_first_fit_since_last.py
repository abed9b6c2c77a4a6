"""First fit from its last result places every job where the plain first fit places it,
call after call, in the same order: kept tuples, changed counts, jobs gone and new, moved
or broken placements in force, other GPU types and orders, another cluster."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from voda.core.model import Cluster, Job, JobPlacement, Node
from voda.core.placement.first_fit import first_fit, forget_last_fit, plain_first_fit

CLUSTERS = [
    Cluster(tuple(Node(f"n{i}", 4, "v100" if i % 3 else "t4") for i in range(6))),
    Cluster(tuple(Node(f"n{i}", 2 + i % 3, "v100") for i in range(5))),
]
NAMES = [f"j{i}" for i in range(7)]
NODES = ["n0", "n1", "n2", "n3", "n4", "n5", "gone"]


@pytest.fixture(autouse=True)
def _fresh() -> None:
    forget_last_fit()


def both(allocation: dict, jobs: dict, cluster: Cluster, previous: dict
         ) -> dict[str, JobPlacement] | str:
    """first_fit's answer (or its error), after asserting it is the plain placer's, in the
    same order."""
    try:
        expected: dict | str = plain_first_fit(allocation, jobs, cluster, previous)
    except ValueError as error:
        expected = str(error)
    try:
        got: dict | str = first_fit(allocation, jobs, cluster, previous)
    except ValueError as error:
        got = str(error)
    assert got == expected
    if isinstance(got, dict):
        assert list(got.items()) == list(expected.items())  # type: ignore[union-attr]
    return got


step = st.fixed_dictionaries({
    # Mostly as many GPUs as last time (None).
    "gpus": st.lists(st.one_of(st.none(), st.none(), st.none(), st.integers(0, 6)),
                     min_size=len(NAMES), max_size=len(NAMES)),
    "types": st.lists(st.sampled_from(["v100", "v100", "t4"]), min_size=len(NAMES),
                      max_size=len(NAMES)),
    "priority": st.lists(st.integers(0, 1), min_size=len(NAMES), max_size=len(NAMES)),
    "submit": st.lists(st.sampled_from([0.0, 1.0, 2.0]), min_size=len(NAMES),
                       max_size=len(NAMES)),
    # What happens to the placement in force before the call, per job: kept as handed
    # back, an equal copy, dropped, another placement, or one on another job's GPUs.
    "force": st.lists(st.sampled_from(["kept"] * 5 + ["copy", "dropped", "other", "theirs"]),
                      min_size=len(NAMES), max_size=len(NAMES)),
    "other": st.lists(st.tuples(st.sampled_from(NODES), st.integers(-1, 4)), max_size=3),
    "cluster": st.integers(0, 9),
})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(step, min_size=1, max_size=8), sticky=st.booleans())
def test_it_places_every_job_where_the_plain_first_fit_does(steps: list[dict],
                                                            sticky: bool) -> None:
    cluster = CLUSTERS[0]
    in_force: dict[str, JobPlacement] = {}
    allocation = dict.fromkeys(NAMES, 2)
    for drawn in steps:
        if drawn["cluster"] == 0:  # another cluster: nothing is taken from the last result
            cluster = CLUSTERS[1] if cluster is CLUSTERS[0] else CLUSTERS[0]
        # Mostly the jobs keep their type and place in the order from one call to the next.
        jobs = {name: Job(name=name, max_workers=8,
                          gpu_type="v100" if sticky else drawn["types"][i],
                          priority=0 if sticky else drawn["priority"][i],
                          submit_time=float(i) if sticky else drawn["submit"][i])
                for i, name in enumerate(NAMES)}
        allocation = {name: allocation[name] if gpus is None else gpus
                      for name, gpus in zip(NAMES, drawn["gpus"], strict=True)}
        previous: dict[str, JobPlacement] = {}
        for name, force in zip(NAMES, drawn["force"], strict=True):
            held = in_force.get(name)
            if force == "kept" and held:
                previous[name] = held
            elif force == "copy" and held:
                previous[name] = tuple(list(held))
            elif force == "other":
                previous[name] = tuple(drawn["other"])
            elif force == "theirs":  # what the next job holds, also in force: over-full
                theirs = in_force.get(NAMES[(NAMES.index(name) + 1) % len(NAMES)])
                if theirs:
                    previous[name] = tuple(list(theirs))
        got = both(allocation, jobs, cluster, previous)
        if isinstance(got, dict):
            in_force = got


def test_a_job_that_grows_takes_the_first_free_gpus_left_by_the_kept_jobs() -> None:
    cluster = CLUSTERS[1]  # n0..n4 with 2, 3, 4, 2, 3 GPUs
    jobs = {n: Job(name=n, max_workers=8, gpu_type="v100", submit_time=float(i))
            for i, n in enumerate(["a", "b", "c"])}
    first = both({"a": 2, "b": 3, "c": 1}, jobs, cluster, {})
    assert first == {"a": (("n0", 2),), "b": (("n1", 3),), "c": (("n2", 1),)}
    # a leaves, c grows: c keeps n2 and takes the rest of it, then n0's freed GPUs.
    second = both({"b": 3, "c": 6}, jobs, cluster, {"b": first["b"], "c": first["c"]})
    assert second == {"b": (("n1", 3),), "c": (("n0", 2), ("n2", 4))}
    assert second["b"] is first["b"]  # handed back as it was


def test_a_job_whose_priority_changes_is_placed_in_its_new_place_in_the_order() -> None:
    cluster = CLUSTERS[1]
    jobs = {n: Job(name=n, max_workers=8, gpu_type="v100", submit_time=float(i))
            for i, n in enumerate(["a", "b", "c"])}
    first = both({"a": 2, "b": 3, "c": 4}, jobs, cluster, {})
    jobs["c"] = dataclasses.replace(jobs["c"], priority=0, submit_time=-1.0)
    second = both({"a": 2, "b": 3, "c": 4}, jobs, cluster, dict(first))
    assert list(second) == ["c", "a", "b"]


def test_a_result_topped_up_past_a_negative_count_in_force_is_not_worked_from() -> None:
    """The plain placer counts a worker held at -1 GPUs as -1 and tops the job up past its
    GPUs; the next call must shrink it back as the plain placer does, not hand it back."""
    cluster = CLUSTERS[0]
    jobs = {"a": Job(name="a", max_workers=8, gpu_type="v100")}
    first = both({"a": 2}, jobs, cluster, {"a": (("n5", -1),)})
    assert sum(count for _, count in first["a"]) == 3
    second = both({"a": 2}, jobs, cluster, dict(first))
    assert sum(count for _, count in second["a"]) == 2

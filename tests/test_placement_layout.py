"""Learned layouts: packed or spread for jobs wider than a node, from measured throughput.

Nodes of 4 GPUs unless said otherwise: an 8-worker job is packed on 2 nodes and
spread on 4 (at most 2 workers per node).
"""

from __future__ import annotations

import pytest
from builders import make_cluster, make_job

from voda.core.model import Cluster, Job, validate_job
from voda.core.placement.base import placement_problems
from voda.core.placement.layout import (
    is_wide,
    layout_throughputs,
    spread_pays,
    spread_speedup,
    worth_moving,
)
from voda.core.placement.manager import PlacementSettings, TopologyPlacer, settings_problems
from voda.core.placement.registry import get_placer

PACKED_8, SPREAD_8 = (8, 2), (8, 4)


def test_only_jobs_wider_than_a_node_have_a_choice() -> None:
    assert not is_wide(4, 4)
    assert is_wide(5, 4)
    assert not is_wide(3, 1)  # one-GPU nodes: every layout is spread
    assert not is_wide(3, 0)
    assert not spread_pays({PACKED_8: 10.0, SPREAD_8: 50.0}, 4, 4)


def test_layouts_between_packed_and_spread_are_neither() -> None:
    packed, spread = layout_throughputs({(8, 2): 1.0, (8, 3): 2.0, (8, 4): 3.0, (3, 1): 9.0}, 4)
    assert (packed, spread) == ({8: 1.0}, {8: 3.0})


@pytest.mark.parametrize(
    ("history", "expected"),
    [
        pytest.param({}, False, id="nothing seen: packed"),
        pytest.param({PACKED_8: 10.0}, True, id="only packed seen: try spread"),
        pytest.param({SPREAD_8: 10.0}, False, id="only spread seen: try packed"),
        pytest.param({PACKED_8: 10.0, SPREAD_8: 15.0}, True, id="spread 50 % faster"),
        pytest.param({PACKED_8: 10.0, SPREAD_8: 12.0}, False, id="spread 20 %: under the margin"),
        pytest.param({PACKED_8: 15.0, SPREAD_8: 10.0}, False, id="packed faster"),
    ],
)
def test_spread_pays_at_the_same_worker_count(
    history: dict[tuple[int, int], float], expected: bool
) -> None:
    assert spread_pays(history, 8, 4, margin=0.25) is expected


def test_other_worker_counts_are_compared_by_their_geometric_mean_ratio() -> None:
    history = {(6, 2): 10.0, (6, 3): 20.0, (12, 3): 10.0, (12, 6): 12.5}
    assert spread_speedup(history, 8, 4) == pytest.approx((2.0 * 1.25) ** 0.5)
    assert spread_pays(history, 8, 4, margin=0.25)


def test_without_a_common_count_the_nearest_pair_is_compared_per_gpu() -> None:
    history = {(8, 2): 80.0, (10, 5): 150.0, (16, 4): 100.0}
    # 10 spread vs 8 packed (nearest): 15 against 10 samples/s per GPU.
    assert spread_speedup(history, 12, 4) == pytest.approx(1.5)


def test_a_running_job_moves_only_when_the_other_layout_wins_by_the_margin() -> None:
    history = {PACKED_8: 10.0, SPREAD_8: 13.0}
    assert worth_moving(history, 8, 2, 4, margin=0.2)
    assert not worth_moving(history, 8, 2, 4, margin=0.3)
    assert not worth_moving(history, 8, 4, 4, margin=0.0)  # already spread
    assert worth_moving({PACKED_8: 13.0, SPREAD_8: 10.0}, 8, 4, 4, margin=0.2)
    assert not worth_moving(history, 8, 3, 4, margin=0.0)  # neither layout
    assert not worth_moving({PACKED_8: 10.0}, 8, 2, 4, margin=0.0)  # exploring never moves


def cluster_of(nodes: int, gpus: int = 4) -> Cluster:
    builder = make_cluster()
    for i in range(nodes):
        builder.node(f"n{i}", gpus, leaf=f"l{i // 4}")
    return builder.obj()


def wide_job(name: str, history: dict[tuple[int, int], float], **hints: object) -> Job:
    return (make_job(name).workers(1, 16).category("yolov3")
            .with_(layout_throughput=history, **hints).obj())


def nodes_used(placement: dict, name: str) -> list[int]:
    return sorted(c for _, c in placement[name])


@pytest.mark.parametrize(
    ("history", "expected"),
    [
        pytest.param({}, [4, 4], id="unknown: packed"),
        pytest.param({PACKED_8: 64.0, SPREAD_8: 96.0}, [2, 2, 2, 2], id="spread 50 % faster"),
        pytest.param({PACKED_8: 96.0, SPREAD_8: 64.0}, [4, 4], id="packed faster"),
    ],
)
def test_the_placer_follows_what_the_category_learned(
    history: dict[tuple[int, int], float], expected: list[int]
) -> None:
    jobs = {"a": wide_job("a", history)}
    cluster = cluster_of(8)
    placement = TopologyPlacer()({"a": 8}, jobs, cluster, {})
    assert placement_problems({"a": 8}, jobs, cluster, placement) == []
    assert nodes_used(placement, "a") == expected


def test_packed_and_spread_placers_ignore_what_was_learned() -> None:
    jobs = {"a": wide_job("a", {PACKED_8: 64.0, SPREAD_8: 96.0})}
    packed = get_placer("topology-packed")({"a": 8}, jobs, cluster_of(8), {})
    assert nodes_used(packed, "a") == [4, 4]
    jobs = {"a": wide_job("a", {PACKED_8: 96.0, SPREAD_8: 64.0})}
    spread = get_placer("topology-spread")({"a": 8}, jobs, cluster_of(8), {})
    assert nodes_used(spread, "a") == [2, 2, 2, 2]


def test_a_spread_job_that_keeps_its_size_is_not_moved_back_to_packed() -> None:
    history = {PACKED_8: 64.0, SPREAD_8: 96.0}
    jobs = {"a": wide_job("a", history), "b": make_job("b").workers(1, 4).obj()}
    previous = {"a": (("n0", 2), ("n1", 2), ("n2", 2), ("n3", 2))}
    placement = TopologyPlacer()({"a": 8, "b": 2}, jobs, cluster_of(8), previous)
    assert placement["a"] == previous["a"]


def test_a_running_packed_job_moves_to_spread_when_something_else_changes() -> None:
    history = {PACKED_8: 50.0, SPREAD_8: 100.0}
    jobs = {"a": wide_job("a", history), "b": make_job("b").workers(1, 4).obj()}
    cluster = cluster_of(8)
    previous = {"a": (("n0", 4), ("n1", 4))}
    # Nothing changed: nothing moves, however slow the layout.
    assert TopologyPlacer()({"a": 8}, jobs, cluster, previous) == previous
    placement = TopologyPlacer()({"a": 8, "b": 2}, jobs, cluster, previous)
    assert nodes_used(placement, "a") == [2, 2, 2, 2]
    assert placement_problems({"a": 8, "b": 2}, jobs, cluster, placement) == []


def test_at_most_the_allowed_number_of_running_jobs_move_per_call() -> None:
    history = {PACKED_8: 50.0, SPREAD_8: 100.0}
    jobs = {name: wide_job(name, history) for name in ("a", "b", "c")}
    jobs["d"] = make_job("d").workers(1, 4).obj()
    cluster = cluster_of(16)
    previous = {"a": (("n0", 4), ("n1", 4)), "b": (("n2", 4), ("n3", 4)),
                "c": (("n4", 4), ("n5", 4))}
    allocation = {"a": 8, "b": 8, "c": 8, "d": 1}
    placement = TopologyPlacer(PlacementSettings(defragment_max_moved_jobs=2))(
        allocation, jobs, cluster, previous
    )
    moved = [name for name in ("a", "b", "c") if placement[name] != previous[name]]
    assert moved == ["a", "b"]  # earliest first


def test_bad_margins_and_bad_histories_are_refused_with_the_field_named() -> None:
    assert settings_problems(PlacementSettings()) == []
    with pytest.raises(ValueError, match="spread_margin: must lie in"):
        PlacementSettings(spread_margin=1.5)
    with pytest.raises(ValueError, match="relayout_margin: must lie in"):
        PlacementSettings(relayout_margin=-0.1)
    job = make_job("a").with_(layout_throughput={(4, 5): 1.0}).obj()
    assert any(p.startswith("layout_throughput: (4 workers, 5 nodes)") for p in validate_job(job))

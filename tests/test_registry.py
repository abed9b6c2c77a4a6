"""Finding algorithms by name: built in, registered, by entry point, by import path."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from builders import make_job

from voda.core.allocation import registry
from voda.core.allocation.base import checked_allocate
from voda.core.allocation.registry import UnknownAlgorithm

JOBS = [
    make_job("a").workers(1, 4).submitted_at(0).obj(),
    make_job("b").workers(2, 4).submitted_at(1).obj(),
]


@pytest.fixture
def registered() -> Iterator[list[str]]:
    names: list[str] = []
    yield names
    for name in names:
        registry.unregister(name)


@pytest.mark.parametrize("name", registry.BUILTIN_NAMES)
def test_each_built_in_algorithm_is_created_by_its_name_and_keeps_it(name: str) -> None:
    algorithm = registry.create(name)
    assert algorithm.name == name
    assert sum(checked_allocate(algorithm, JOBS, 4).values()) <= 4


def test_a_registered_algorithm_is_created_by_name_with_its_parameters(
    registered: list[str],
) -> None:
    from custom_algorithm import MinForAll

    registry.register("MinForAll", MinForAll)
    registered.append("MinForAll")
    assert "MinForAll" in registry.available()
    algorithm = registry.create("MinForAll", {"extra": 2})
    assert algorithm(JOBS, 5) == {"a": 3, "b": 2}


def test_a_built_in_name_cannot_be_replaced() -> None:
    with pytest.raises(ValueError, match="built-in"):
        registry.register("FIFO", lambda: None)  # type: ignore[arg-type,return-value]


def test_an_algorithm_class_is_created_by_import_path() -> None:
    algorithm = registry.create("custom_algorithm:MinForAll", {"extra": 1})
    assert algorithm.name == "MinForAll"
    assert algorithm(JOBS, 4) == {"a": 2, "b": 2}


def test_a_ready_algorithm_object_is_used_as_is_by_import_path() -> None:
    algorithm = registry.create("custom_algorithm:nothing_for_anyone")
    assert algorithm.name == "NothingForAnyone"
    assert algorithm(JOBS, 4) == {"a": 0, "b": 0}


def test_a_ready_algorithm_object_refuses_parameters() -> None:
    with pytest.raises(ValueError, match="takes no parameters"):
        registry.create("custom_algorithm:nothing_for_anyone", {"extra": 1})


def test_an_algorithm_is_found_through_the_entry_point_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dist = tmp_path / "voda_plugin_example-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: voda-plugin-example\nVersion: 0.1\n"
    )
    (dist / "entry_points.txt").write_text(
        "[voda.algorithms]\nPluginMinForAll = custom_algorithm:MinForAll\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "PluginMinForAll" in registry.available()
    algorithm = registry.create("PluginMinForAll", {"extra": 2})
    assert algorithm(JOBS, 5) == {"a": 3, "b": 2}


def test_an_unknown_name_is_refused_with_the_valid_names() -> None:
    with pytest.raises(UnknownAlgorithm) as caught:
        registry.create("Lottery")
    message = str(caught.value)
    assert "'Lottery'" in message
    for name in registry.BUILTIN_NAMES:
        assert name in message
    assert caught.value.valid == registry.available()


@pytest.mark.parametrize(
    "path",
    ["no_such_module_anywhere:Algo", "custom_algorithm:NoSuchAttribute"],
    ids=["a module that does not exist", "an attribute the module lacks"],
)
def test_an_import_path_that_does_not_resolve_is_an_unknown_algorithm(path: str) -> None:
    with pytest.raises(UnknownAlgorithm, match="valid names: FIFO"):
        registry.create(path)


@pytest.mark.parametrize(
    ("name", "params", "reason"),
    [
        ("FIFO", {"speed": 2}, "algorithm 'FIFO' has no parameter 'speed'; its parameters: none"),
        ("Tiresias", {"service": "total"}, "has no parameter 'service'; its parameters: "
                                           "queue_thresholds, starvation_knob, queue_order"),
        ("Tiresias", {"queue_thresholds": [10.0, 5.0]}, "queue_thresholds: must be strictly"),
        ("Tiresias", {"queue_thresholds": []}, "queue_thresholds: must hold at least one"),
        ("Tiresias", {"queue_thresholds": "soon"}, "queue_thresholds: must be"),
        ("Tiresias", {"queue_thresholds": [float("inf")]}, "queue_thresholds: must be positive"),
        ("Tiresias", {"starvation_knob": 0}, "starvation_knob: must be a positive number"),
        ("Tiresias", {"starvation_knob": "often"}, "starvation_knob: must be a positive number"),
        ("Tiresias", {"queue_order": "random"}, "queue_order: must be one of"),
        ("ElasticTiresias", {"compaction_threshold": -1}, "compaction_threshold"),
        ("ElasticTiresias", {"compaction_threshold": 2.5}, "compaction_threshold: must be a whole"),
        ("SRJF", {"order": "random"}, "order: must be one of"),
        ("ElasticFIFO", {"growth": "sideways"}, "growth: must be one of"),
        ("FfDLOptimizer", {"max_jobs": 0}, "max_jobs: must be a whole number >= 1"),
        ("FfDLOptimizer", {"horizon_factor": 2}, "has no parameter 'horizon_factor'"),
    ],
    ids=[
        "an unknown knob",
        "a knob that no longer exists",
        "thresholds out of order",
        "no threshold",
        "thresholds that are not numbers",
        "an infinite threshold",
        "a starvation knob of zero",
        "a starvation knob that is not a number",
        "an unknown queue order",
        "a negative compaction threshold",
        "a fractional compaction threshold",
        "an unknown SRJF order",
        "an unknown way to grow",
        "an admission limit of no jobs",
        "the horizon factor FIFO admission replaced",
    ],
)
def test_bad_parameters_are_refused_naming_the_knob(
    name: str, params: dict, reason: str
) -> None:
    with pytest.raises(ValueError, match=reason):
        registry.create(name, params)


def test_thresholds_given_as_a_list_become_a_tuple() -> None:
    algorithm = registry.create("Tiresias", {"queue_thresholds": [100, 1000]})
    assert algorithm.queue_thresholds == (100.0, 1000.0)  # type: ignore[attr-defined]
    assert hash(algorithm)


def test_one_threshold_given_as_a_number_makes_two_queues() -> None:
    algorithm = registry.create("Tiresias", {"queue_thresholds": 7200})
    assert algorithm.queue_thresholds == (7200.0,)  # type: ignore[attr-defined]


def test_a_plain_function_of_jobs_and_capacity_is_used_as_an_algorithm() -> None:
    algorithm = registry.create("tests.custom_algorithm:everyone_at_min")
    jobs = [make_job("a").workers(2, 4).submitted_at(0).obj(),
            make_job("b").workers(3, 3).submitted_at(1).obj()]
    assert checked_allocate(algorithm, jobs, 4) == {"a": 2, "b": 0}

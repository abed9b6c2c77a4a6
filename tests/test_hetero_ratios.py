"""The speed ratios of GPU types behind the heterogeneity policies' projections: Voda's are
of step times only (hardware), Sia's of goodput at one GPU (kept as validated)."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from voda.core.allocation.hetero_models import (
    hardware_ratios,
    mean_type_speed,
    type_model,
    type_ratios,
    type_speeds,
)
from voda.core.goodput import GoodputModel, PerfParams
from voda.core.model import ANY_GPU_TYPE, Job


def _model(speed: float, grad_sqr: float = 1.0, grad_var: float = 100.0) -> GoodputModel:
    perf = PerfParams(0.1 / speed, 0.01 / speed, 0.05 / speed, 0.01 / speed, 0.01 / speed,
                      0.001 / speed, 1.0)
    return GoodputModel(perf, grad_sqr, grad_var, 32, 32 * 64, 32, 64, max_profiled_replicas=8)


def _job(name: str, models: dict[str, GoodputModel], category: str = "c") -> Job:
    return Job(name, 1, 4, epochs=10, gpu_types=(ANY_GPU_TYPE,), goodput=models.get("slow"),
               goodput_by_type=models, category=category, gpu_type="slow")


# The category measured both types, "fast" twice as fast; a young job of it reported on
# "slow" with its own, early gradient statistics (a small noise scale: on one GPU it gains
# nothing from a larger batch, where the category's statistics do).
SETTLED = _job("settled", {"slow": _model(1.0), "fast": _model(2.0)})
YOUNG = _job("young", {"slow": _model(1.0, grad_sqr=1.0, grad_var=0.01), "fast": _model(2.0)})


def test_a_ratio_is_the_types_step_times_whatever_the_jobs_statistics() -> None:
    assert hardware_ratios([YOUNG])[("slow", "fast")] == pytest.approx(2.0)
    assert hardware_ratios([SETTLED])[("fast", "slow")] == pytest.approx(0.5)


def test_a_ratio_does_not_move_when_a_job_of_the_category_comes_or_goes() -> None:
    alone = hardware_ratios([SETTLED])
    assert hardware_ratios([YOUNG, SETTLED]) == pytest.approx(alone)
    assert hardware_ratios([SETTLED, YOUNG]) == pytest.approx(alone)


def test_sias_ratios_mix_in_the_first_jobs_statistics_as_validated() -> None:
    # Sia (ours) keeps its goodput ratios: the young job's small noise scale shows as speed.
    assert type_ratios([YOUNG, SETTLED])[("slow", "fast")] != pytest.approx(2.0)
    assert type_ratios([SETTLED])[("slow", "fast")] == pytest.approx(2.0, rel=0.05)


def test_a_category_is_one_vote_its_jobs_median() -> None:
    other = _job("other", {"slow": _model(1.0), "fast": _model(4.0)}, category="d")
    ratios = hardware_ratios([SETTLED, YOUNG, other])
    assert ratios[("slow", "fast")] == pytest.approx((2.0 * 4.0) ** 0.5)


def test_a_job_measured_on_one_type_is_projected_at_the_hardware_ratio() -> None:
    new = _job("new", {"slow": _model(1.0, grad_var=5.0)})
    model = type_model(new, "fast", hardware_ratios([YOUNG, new]))
    assert model is not None and model.perf is not None
    assert model.perf.alpha_c == pytest.approx(0.05)
    assert model.grad_var == 5.0  # its own statistics, the type's speed


def test_type_speeds_do_not_depend_on_the_order_of_the_other_types() -> None:
    ratios = {("a", "b"): 2.0, ("b", "a"): 0.5, ("b", "c"): 3.0, ("c", "b"): 1 / 3}
    for rest in itertools.permutations(["b", "c"]):
        speeds = type_speeds(ratios, ["a", *rest])
        assert speeds == pytest.approx({"a": 1.0, "b": 2.0, "c": 6.0})
    # Sia's: "c" read before "b" was set, so relative to a "b" of 1
    assert mean_type_speed(ratios, ["a", "c", "b"])["c"] == pytest.approx(3.0)


def test_a_type_no_category_compares_with_the_first_is_at_its_speed() -> None:
    assert type_speeds({}, ["a", "b"]) == {"a": 1.0, "b": 1.0}
    assert type_speeds({}, []) == {}


def test_an_unmeasured_model_gives_no_ratio() -> None:
    blank = dataclasses.replace(_model(1.0), perf=None)
    assert hardware_ratios([_job("x", {"slow": blank, "fast": _model(2.0)})]) == {}

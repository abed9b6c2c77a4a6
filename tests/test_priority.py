"""Priority means one thing in all eight algorithms: strict classes (0 is highest).

The jobs of priority 0 are served first, by the algorithm's own rules, on the whole
capacity; priority 1 shares what they leave; and so on. Neither a shorter remaining
time (SRJF, AFS-L), a lower Tiresias queue, a better speedup (FfDL, ElasticTiresias)
nor an earlier submission lets a job of a lower class take a GPU a higher class wants.
The property test in test_allocation_properties.py checks the same for generated jobs.
"""

import pytest
from builders import make_job

from voda.core.allocation import create
from voda.core.allocation.registry import BUILTIN_NAMES
from voda.core.model import Job


@pytest.mark.parametrize("algorithm", BUILTIN_NAMES)
def test_a_later_job_with_higher_priority_goes_first(algorithm: str) -> None:
    early = make_job("early").rigid(4).priority(1).submitted_at(0).obj()
    urgent = make_job("urgent").rigid(4).priority(0).submitted_at(100).obj()
    assert create(algorithm)([early, urgent], 4) == {"urgent": 4, "early": 0}


HIGH_BUT_LONG = make_job("high").workers(1, 4).priority(0).epochs(100).submitted_at(5).obj()
LOW_BUT_SHORT = make_job("low").workers(1, 4).priority(1).epochs(1).submitted_at(0).obj()


@pytest.mark.parametrize(
    ("algorithm", "jobs", "capacity", "expected"),
    [
        pytest.param("SRJF", [HIGH_BUT_LONG, LOW_BUT_SHORT], 1, {"high": 1, "low": 0},
                     id="SRJF does not let a shorter job of a lower class go first"),
        pytest.param("AFS-L", [HIGH_BUT_LONG, LOW_BUT_SHORT], 4, {"high": 4, "low": 0},
                     id="AFS-L grows the higher class to max before a lower class starts"),
        pytest.param("ElasticSRJF", [HIGH_BUT_LONG, LOW_BUT_SHORT], 5, {"high": 4, "low": 1},
                     id="ElasticSRJF gives a lower class what the higher class leaves"),
        pytest.param(
            "Tiresias",
            [make_job("high").rigid(2).priority(0).submitted_at(0).running(2)
             .attained(90000.0).obj(),
             make_job("low").rigid(2).priority(1).submitted_at(1).obj()],
            2, {"high": 2, "low": 0},
            id="Tiresias serves a higher class in a lower queue before a lower class in the top"),
        pytest.param(
            "FfDLOptimizer",
            [make_job("high").workers(1, 4).priority(0).epoch_times({1: 100.0, 4: 90.0}).obj(),
             make_job("low").workers(1, 4).priority(1).epoch_times({1: 100.0, 4: 25.0}).obj()],
            4, {"high": 4, "low": 0},
            id="FfDLOptimizer does not trade a higher class for a better speedup"),
        pytest.param(
            "ElasticTiresias",
            [make_job("high").workers(1, 3).priority(0).epoch_times({1: 100.0, 3: 90.0}).obj(),
             make_job("low").workers(1, 4).priority(1).epoch_times({1: 100.0, 4: 25.0}).obj()],
            4, {"high": 3, "low": 1},
            id="ElasticTiresias grows a higher class even on a smaller gain"),
    ],
)
def test_no_rule_of_an_algorithm_lets_a_lower_class_take_a_higher_class_gpu(
    algorithm: str, jobs: list[Job], capacity: int, expected: dict[str, int]
) -> None:
    assert create(algorithm)(jobs, capacity) == expected


@pytest.mark.parametrize("algorithm", BUILTIN_NAMES)
def test_equal_priorities_fall_back_to_the_algorithms_own_order(algorithm: str) -> None:
    a = make_job("a").rigid(4).priority(2).submitted_at(0).obj()
    b = make_job("b").rigid(4).priority(2).submitted_at(1).obj()
    assert create(algorithm)([b, a], 4) == {"a": 4, "b": 0}

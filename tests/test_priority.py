"""Priority (0 highest) orders the queue ahead of submit time."""

import pytest

from voda.core.allocation import create
from voda.core.model import Job


@pytest.mark.parametrize("algorithm", ["FIFO", "ElasticFIFO", "Tiresias", "FfDLOptimizer"])
def test_a_later_job_with_higher_priority_goes_first(algorithm: str) -> None:
    early = Job("early", 4, 4, preferred_workers=4, priority=1, submit_time=0)
    urgent = Job("urgent", 4, 4, preferred_workers=4, priority=0, submit_time=100)
    allocation = create(algorithm)([early, urgent], 4)
    assert allocation["urgent"] == 4
    assert allocation["early"] == 0


def test_equal_priorities_fall_back_to_submit_order() -> None:
    a = Job("a", 4, 4, priority=2, submit_time=0)
    b = Job("b", 4, 4, priority=2, submit_time=1)
    assert create("FIFO")([b, a], 4) == {"a": 4, "b": 0}

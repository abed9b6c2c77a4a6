"""Pollux's restart factors for all jobs at once (pollux.restart_factors) are
`restart_factor` of each job, the reference: the same bits, ages and restarts of any kind."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from voda.core.allocation.pollux import restart_factor, restart_factors
from voda.core.model import Job

seconds = st.sampled_from([0.0, -0.0, 30.0, 1e-9, math.inf, math.nan]) | st.floats(-100, 1e6)


@settings(max_examples=200, deadline=None)
@given(ages=st.lists(st.tuples(seconds, seconds, st.integers(0, 50), seconds), max_size=20),
       penalty=st.sampled_from([0.0, 30.0, 250.0]))
def test_restart_factors_are_those_of_each_job(ages: list[tuple], penalty: float) -> None:
    jobs = [Job(name=f"j{i}", running_seconds=run, waiting_seconds=wait, restarts=restarts,
                rescale_delay=delay) for i, (run, wait, restarts, delay) in enumerate(ages)]
    mine = restart_factors(jobs, penalty)
    theirs = np.array([restart_factor(j, penalty + j.rescale_delay) for j in jobs], dtype=float)
    assert mine.tobytes() == theirs.tobytes()

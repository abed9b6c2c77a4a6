"""A measured placement's step and sync times in Python floats (`MeasuredLine`) against
SciPy's `interp1d`, the reference (`measured_step_sync_time`): the same floats."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.interpolate import interp1d

from voda.sim.profiles import profile_names
from voda.sim.throughput import MeasuredLine, _measured, measured_step_sync_time

PROFILES = profile_names()


def _lines(name: str) -> list[tuple[interp1d, MeasuredLine]]:
    return [(f, MeasuredLine.of(f)) for f in _measured(name).values()]


def test_every_measured_batch_and_midpoint_gives_the_reference() -> None:
    for name in PROFILES:
        for f, line in _lines(name):
            assert f._call is interp1d._call_linear  # the operations MeasuredLine mirrors
            xs = f.x.tolist()
            batches = {*xs, *((a + b) / 2 for a, b in itertools.pairwise(xs)),
                       *range(int(xs[0]) - 2, int(xs[-1]) + 3)}
            for batch in batches:
                assert line.at(batch) == measured_step_sync_time(f, batch), (name, batch)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(PROFILES), st.integers(min_value=0, max_value=10_000),
       st.one_of(st.integers(min_value=0, max_value=5_000),
                 st.floats(min_value=0.0, max_value=5_000.0)))
def test_any_batch_gives_the_reference(name: str, pick: int, batch: float) -> None:
    lines = _lines(name)
    f, line = lines[pick % len(lines)]
    got = line.at(batch)
    assert got == measured_step_sync_time(f, batch)
    assert all(type(v) is float for v in got)

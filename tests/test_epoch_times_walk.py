"""`SpeedModel.epoch_times` (one walk over the observed counts) against `epoch_time` asked
count by count, and the engine's `layout_key` against its plain definition."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from voda.core.estimate import fit_speed
from voda.engine.scheduler import layout_key

observed = st.dictionaries(st.integers(min_value=-1, max_value=40),
                           st.floats(min_value=-1.0, max_value=1e4, allow_nan=False),
                           max_size=6)


@settings(max_examples=400, deadline=None)
@given(observed, st.integers(min_value=-2, max_value=50), st.integers(min_value=0, max_value=70))
def test_epoch_times_are_epoch_time_count_by_count(points: dict[int, float], first: int,
                                                   count: int) -> None:
    model = fit_speed(points)
    expected = [model.epoch_time(k) for k in range(first, first + count)]
    assert _bits(model.epoch_times(first, count)) == _bits(expected)


def _bits(values: list[float]) -> list[bytes]:
    """Bit for bit (NaN, -0.0 and all)."""
    return [struct.pack("<d", v) for v in values]


def plain_layout_key(placement: tuple[tuple[str, int], ...]) -> tuple[int, int]:
    counts = [c for _, c in placement if c > 0]
    return sum(counts), len(counts)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abcd"), st.integers(min_value=-1, max_value=8)),
                max_size=4))
def test_layout_key_is_the_plain_one(shards: list[tuple[str, int]]) -> None:
    placement = tuple(shards)
    assert layout_key(placement) == plain_layout_key(placement)

"""The dynamic program over GPU counts that Pollux and Voda share (voda.core.allocation.counts)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from voda.core.allocation.counts import best_counts, packs


def every_count_folded(utilities: list[np.ndarray], capacity: int) -> list[int]:
    """The same program with a row for every count, -inf ones included (slow, plain)."""
    columns = np.arange(capacity + 1)
    best = np.zeros(capacity + 1)
    choices = []
    for u in reversed(utilities):
        options = np.arange(len(u))
        source = columns[None, :] - options[:, None]
        candidate = np.where(source >= 0, best[np.maximum(source, 0)], -np.inf) + u[:, None]
        pick = len(u) - 1 - np.argmax(candidate[::-1], axis=0)
        best = candidate[pick, columns]
        choices.append(pick)
    counts = []
    left = capacity
    for pick in reversed(choices):
        counts.append(int(pick[left]))
        left -= counts[-1]
    return counts


@st.composite
def utility(draw: st.DrawFn) -> np.ndarray:
    top = draw(st.integers(0, 20))
    lo = draw(st.integers(1, max(1, top)))
    per_node = draw(st.sampled_from([1, 2, 4, 8]))
    values = draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 1.0, 2.5, 3.0, -1.0, 7.25]),
                           min_size=top + 1, max_size=top + 1))
    u = np.array(values)
    u[0] = 0.0
    allowed = packs(top, per_node) if draw(st.booleans()) else np.ones(top + 1, dtype=bool)
    allowed[1:lo] = False
    allowed[0] = True
    u[~allowed] = -np.inf
    return u


@settings(max_examples=300, deadline=None)
@given(utilities=st.lists(utility(), max_size=8), capacity=st.integers(0, 40))
def test_best_counts_equals_the_program_over_every_count(
    utilities: list[np.ndarray], capacity: int
) -> None:
    assert best_counts(utilities, capacity) == every_count_folded(utilities, capacity)


def test_best_counts_takes_the_larger_count_on_a_tie() -> None:
    # 2 GPUs: a alone at 2 (3.0) ties a at 1 + b at 1 (1.5 + 1.5): a, first, takes 2.
    a = np.array([0.0, 1.5, 3.0])
    b = np.array([0.0, 1.5, -np.inf])
    assert best_counts([a, b], 2) == [2, 0]

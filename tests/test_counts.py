"""The dynamic program over GPU counts that Pollux and Voda share (voda.core.allocation.counts)."""

from __future__ import annotations

from unittest import mock

import numpy as np
from counts_reference import best_counts_every_column
from hypothesis import given, settings
from hypothesis import strategies as st

from voda.core.allocation import counts
from voda.core.allocation.count_bounds import column_bound
from voda.core.allocation.counts import FoldTables, best_counts, packs


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


@st.composite
def any_utility(draw: st.DrawFn) -> np.ndarray:
    """A job's values: exact ties (small multiples of 0.5), float noise, -inf counts; its
    value at 0 any finite number (a floored job's is far below)."""
    top = draw(st.integers(0, 24))
    finite = st.one_of(st.sampled_from([0.0, 0.5, 1.0, 1.5, 3.0, -2.0]),
                       st.floats(-1e7, 1e7, allow_nan=False, allow_infinity=False))
    values = draw(st.lists(st.one_of(finite, st.just(-np.inf)), min_size=top + 1,
                           max_size=top + 1))
    values[0] = draw(finite)
    return np.array(values)


@settings(max_examples=400, deadline=None)
@given(utilities=st.lists(any_utility(), max_size=12), capacity=st.integers(0, 80))
def test_best_counts_equals_the_program_over_every_column(
    utilities: list[np.ndarray], capacity: int
) -> None:
    # The fold over every column, as it was (tests/counts_reference.py): bands of columns
    # change no count, however the capacity sits against what the jobs can take.
    assert best_counts(utilities, capacity) == best_counts_every_column(utilities, capacity)


@settings(max_examples=200, deadline=None)
@given(utilities=st.lists(any_utility(), max_size=12), capacity=st.integers(0, 80),
       narrow=st.sampled_from([0, 1, 3, 1_000]))
def test_folds_on_python_floats_and_on_arrays_give_the_same_counts(
    utilities: list[np.ndarray], capacity: int, narrow: int
) -> None:
    # Folds narrower than NARROW_COLUMNS run on Python floats: every fold one way (0: all
    # on arrays; 1,000: all on floats) or split, with and without stored tables, the
    # counts of the program over every column.
    expected = best_counts_every_column(utilities, capacity)
    with mock.patch.object(counts, "NARROW_COLUMNS", narrow):
        assert best_counts(utilities, capacity) == expected
        tables = FoldTables()
        keys = list(range(len(utilities)))
        for at in (capacity, capacity // 2, capacity + 7):
            assert (best_counts(utilities, at, tables, keys)
                    == best_counts_every_column(utilities, at))


def test_best_counts_equals_the_program_over_every_column_at_scale() -> None:
    rng = np.random.default_rng(45)
    for jobs, capacity in ((300, 512), (300, 1_500), (40, 4_096)):
        utilities = []
        for _ in range(jobs):
            top = int(rng.integers(0, 17))
            u = np.round(rng.uniform(0, 8, top + 1), 1)  # rounded: many exact ties
            u[rng.random(top + 1) < 0.5] = -np.inf
            u[0] = 0.0
            utilities.append(u)
        assert best_counts(utilities, capacity) == best_counts_every_column(utilities, capacity)


@settings(max_examples=200, deadline=None)
@given(utilities=st.lists(any_utility(), min_size=1, max_size=10),
       capacities=st.lists(st.integers(0, 80), min_size=2, max_size=6),
       changed=st.lists(st.integers(0, 9), max_size=3))
def test_fold_tables_kept_over_calls_at_other_capacities_change_no_count(
    utilities: list[np.ndarray], capacities: list[int], changed: list[int]
) -> None:
    # One store over calls at rising and falling capacities, some calls with a job's
    # values changed (a new key): each call's counts are those of a call on its own.
    tables = FoldTables()
    for step, capacity in enumerate(capacities):
        rows = [u + 1.0 if step % 2 and j in changed else u for j, u in enumerate(utilities)]
        keys = [(j, step % 2 and j in changed) for j in range(len(rows))]
        assert best_counts(rows, capacity, tables, keys) == best_counts(rows, capacity)


@settings(max_examples=150, deadline=None)
@given(utilities=st.lists(any_utility(), min_size=20, max_size=80),
       share=st.floats(0.0, 1.2), offset=st.floats(-1e6, 1e6, allow_nan=False))
def test_columns_left_out_by_the_bound_change_no_count(
    utilities: list[np.ndarray], share: float, offset: float
) -> None:
    # Tables wide enough to be trimmed (voda.core.allocation.count_bounds), with exact
    # ties, float noise and every job's values shifted alike: the counts of the fold
    # that keeps every column of its band.
    shifted = [np.where(np.isfinite(u), u + offset, u) for u in utilities]
    capacity = int(share * sum(len(u) - 1 for u in utilities))
    assert (best_counts(shifted, capacity, bounded=True)
            == best_counts(shifted, capacity, bounded=False)
            == best_counts_every_column(shifted, capacity))


def test_the_bound_trims_wide_tables_and_changes_no_count() -> None:
    rng = np.random.default_rng(7)
    for jobs, capacity in ((2_000, 4_000), (600, 900)):
        utilities = []
        for _ in range(jobs):
            top = int(rng.integers(1, 17))
            u = np.sort(np.round(rng.uniform(0, 40, top + 1), 1))  # rounded: exact ties
            u[rng.random(top + 1) < 0.4] = -np.inf
            u[0] = 0.0
            utilities.append(u)
        tops = [len(u) - 1 for u in utilities]
        assert sum(tops) > capacity  # the capacity binds: the bound has columns to drop
        assert column_bound(utilities, capacity,
                            np.concatenate(utilities).tolist()) is not None
        assert (best_counts(utilities, capacity, bounded=True)
                == best_counts(utilities, capacity, bounded=False)
                == best_counts(utilities, capacity))


def test_counts_left_out_by_the_bound_change_no_count() -> None:
    # Jobs left with one count the decision may take (their table moved and added to in
    # place), with the capacity past what the jobs after one can take: random values,
    # exact ties and -inf counts, against the fold that keeps every count and column.
    rng = np.random.default_rng(11)
    for _ in range(150):
        utilities = []
        for _ in range(int(rng.integers(20, 80))):
            u = np.where(rng.random(int(rng.integers(1, 26))) < 0.5,
                         rng.choice([0.0, 0.5, 1.0, 1.5, 3.0, -2.0]),
                         rng.uniform(-1e7, 1e7))
            u[rng.random(len(u)) < 0.3] = -np.inf
            u[0] = 0.0 if u[0] == -np.inf else u[0]
            utilities.append(u)
        capacity = int(rng.uniform(0, 1.2) * sum(len(u) - 1 for u in utilities))
        assert (best_counts(utilities, capacity, bounded=True)
                == best_counts(utilities, capacity, bounded=False))


@settings(max_examples=200, deadline=None)
@given(utilities=st.lists(st.lists(st.one_of(st.floats(allow_infinity=True, allow_nan=True),
                                             st.just(-np.inf)), min_size=1, max_size=12),
                          max_size=40))
def test_the_layout_of_a_few_jobs_on_floats_is_the_layout_on_arrays(
    utilities: list[list[float]]
) -> None:
    # NaN, -inf and every other float: the same starts, counts, values and NaN test.
    rows = [np.array(u) for u in utilities]
    with mock.patch.object(counts, "PYTHON_LAYOUT_JOBS", 0):
        on_arrays = counts._layout(rows)
    starts, options, values, exact = counts._layout_each(rows)
    assert (starts, options, exact) == (on_arrays[0], on_arrays[1], on_arrays[3])
    assert np.array(values).tobytes() == np.array(on_arrays[2]).tobytes()


EXTREMES = [-np.inf, -np.inf, np.nan, -0.0, 0.0, 1.0, 2.5, -3.0, 1e300, np.inf]


@settings(max_examples=300, deadline=None)
@given(utilities=st.lists(st.lists(st.sampled_from(EXTREMES), min_size=1, max_size=7),
                          max_size=8),
       capacity=st.integers(0, 25))
def test_folds_on_floats_read_inf_less_inf_as_arrays_do(utilities: list[list[float]],
                                                        capacity: int) -> None:
    # inf + -inf is NaN: a column of NaN (as NumPy's maximum keeps it), and the count
    # worked out again where a total is NaN or a count is worth +inf.
    rows = [np.array(u) for u in utilities]
    with mock.patch.object(counts, "NARROW_COLUMNS", 0):
        on_arrays = best_counts(rows, capacity)
    with mock.patch.object(counts, "NARROW_COLUMNS", 1_000):
        assert best_counts(rows, capacity) == on_arrays


def test_a_fold_on_floats_of_inf_less_inf_picks_as_on_arrays() -> None:
    rows = [np.array([0.0, -np.inf]), np.array([0.0, np.inf])]  # column 2: inf, NaN
    with mock.patch.object(counts, "NARROW_COLUMNS", 0):
        assert best_counts(rows, 2) == [1, 1]
    assert best_counts(rows, 2) == [1, 1]


@settings(max_examples=300, deadline=None)
@given(utilities=st.lists(any_utility(), min_size=1, max_size=12), spare=st.integers(0, 5),
       scale=st.sampled_from([1.0, 1e-300, 1e300, 1e308]))
def test_jobs_decided_apart_when_every_count_fits_as_by_the_folds(
    utilities: list[np.ndarray], spare: int, scale: float
) -> None:
    # A capacity that holds every job at its largest count: each job decided apart
    # (`_counts_apart`), with exact ties, float noise, tiny and huge values (sums past
    # the largest float go to the folds), against the folds; and against the every-column
    # program where no value is +inf (scaled past the largest float), where the two differ
    # on their own.
    with np.errstate(over="ignore"):
        rows = [u * scale for u in utilities]
    capacity = sum(len(u) - 1 for u in rows) + spare
    with mock.patch.object(counts, "_counts_apart", lambda *_: None):
        folded = best_counts(rows, capacity)
    assert best_counts(rows, capacity) == folded
    if all(not (u == np.inf).any() for u in rows):
        assert folded == best_counts_every_column(rows, capacity)


def test_jobs_decided_apart_only_where_every_count_fits() -> None:
    rows = [np.array([0.0, 1.0, 3.0]), np.array([0.0, 2.0])]
    assert counts._counts_apart(rows, 3) == [2, 1]
    assert counts._counts_apart(rows, 2) is None  # the folds decide: 2 and 0
    assert counts._counts_apart([np.array([0.0, np.inf])], 5) is None
    assert counts._counts_apart([np.array([0.0, 1e308]), np.array([0.0, 1e308])], 5) is None

"""FfDLOptimizer's bounded program (voda.core.allocation.ffdl_bounded) picks the extras the
program over every job (ffdl_program.program_extras) picks, to the last GPU and in every
tie: on random objectives (concave, linear, with rounding dips, with the -1 of a slower
count, with many equal values), and on random jobs through the algorithm itself."""

from __future__ import annotations

import sys
from pathlib import Path
from unittest import mock

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_allocation_properties import jobs_strategy

from voda.core.allocation import ffdl
from voda.core.allocation.ffdl import FfDLOptimizer, reference_counts
from voda.core.allocation.ffdl_bounded import bounded_extras
from voda.core.allocation.ffdl_program import program_extras

sys.path.insert(0, str(Path(__file__).parent.parent / "bench"))
from allocate import make_jobs


@st.composite
def table_strategy(draw: st.DrawFn, span: int) -> list[int]:
    """One job's objectives at 0..span extra GPUs, of one of several shapes."""
    shape = draw(st.sampled_from(["concave", "linear", "noisy", "slower", "any", "few"]))
    if shape == "any":
        return draw(st.lists(st.integers(-50, 50), min_size=span + 1, max_size=span + 1))
    if shape == "few":  # a handful of values: ties everywhere
        return draw(st.lists(st.integers(0, 2), min_size=span + 1, max_size=span + 1))
    start = draw(st.integers(0, 40))
    if shape == "linear":
        step = draw(st.integers(0, 6))
        return [start + step * e for e in range(span + 1)]
    gains = sorted(draw(st.lists(st.integers(-3, 12), min_size=span, max_size=span)),
                   reverse=True)
    if shape == "noisy":  # a concave shape rounded: a gain may come one above the last
        gains = [g + draw(st.integers(-1, 1)) for g in gains]
    values = [start]
    for gain in gains:
        values.append(values[-1] + gain)
    if shape == "slower" and span:  # counts slower than a smaller one are worth -1 speedup
        cut = draw(st.integers(1, span))
        values[cut:] = [-100 if draw(st.booleans()) else v for v in values[cut:]]
    return values


@st.composite
def program_strategy(draw: st.DrawFn) -> tuple[int, list[int], list[np.ndarray]]:
    rest = draw(st.integers(0, 30))
    count = draw(st.integers(0, 12))
    spans = [min(draw(st.integers(0, 8)), rest) for _ in range(count)]
    scale = draw(st.sampled_from([1, 1_000_003]))  # small, and as the weighted objectives
    tables = [np.array(draw(table_strategy(span)), dtype=np.int64) * scale for span in spans]
    return rest, spans, tables


def bounded(rest: int, spans: list[int], tables: list[np.ndarray]) -> list[int] | None:
    lengths = np.array(spans, dtype=np.int64) + 1
    values = np.concatenate(tables) if tables else np.zeros(0, dtype=np.int64)
    return bounded_extras(rest, np.array(spans, dtype=np.int64), values,
                          np.cumsum(lengths) - lengths, program_extras)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=program_strategy())
def test_bounded_program_picks_what_the_whole_program_picks(
        problem: tuple[int, list[int], list[np.ndarray]]) -> None:
    rest, spans, tables = problem
    assert bounded(rest, spans, tables) == program_extras(rest, spans, tables)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(copies=st.integers(2, 12), rest=st.integers(0, 40), step=st.integers(0, 5))
def test_bounded_program_breaks_ties_between_equal_jobs_as_the_whole_program(
        copies: int, rest: int, step: int) -> None:
    """Equal linear jobs: every split is optimal, the first jobs take the most."""
    spans = [min(4, rest)] * copies
    tables = [np.arange(span + 1, dtype=np.int64) * step for span in spans]
    picked = bounded(rest, spans, tables)
    assert picked == program_extras(rest, spans, tables)
    if step:
        assert picked == sorted(picked, reverse=True)


def test_bounded_program_hands_over_where_int64_could_overflow() -> None:
    tables = [np.array([0, 2**61, 2**62 - 1], dtype=np.int64), np.array([0, 1], dtype=np.int64)]
    assert bounded(2, [2, 1], tables) is None


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs=jobs_strategy(max_jobs=14), capacity=st.integers(0, 64))
def test_ffdl_decides_as_with_the_program_over_every_job(jobs: list, capacity: int) -> None:
    fast = FfDLOptimizer()(jobs, capacity)
    with mock.patch.object(ffdl, "best_counts", reference_counts):
        assert fast == FfDLOptimizer()(jobs, capacity)


def test_ffdl_decides_as_with_the_program_over_every_job_at_the_bench_sizes() -> None:
    for count, capacity, seed in ((1_000, 4_096, 5), (2_000, 2_048, 6), (3_000, 16_384, 7)):
        jobs = make_jobs(count, seed)
        fast = FfDLOptimizer()(jobs, capacity)
        with mock.patch.object(ffdl, "best_counts", reference_counts):
            assert fast == FfDLOptimizer()(jobs, capacity)

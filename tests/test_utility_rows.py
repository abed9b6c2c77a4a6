"""Voda and Pollux price many jobs at once (Voda.curves, Voda.utilities, voda_rows,
Pollux.utilities) exactly as one job at a time (Voda.curve, Voda.utility, Pollux.utility,
kept as the references): the same bits, on random jobs (some with goodput models), random
curves and the bench's mixed jobs, and so the same decisions."""

from __future__ import annotations

import dataclasses
import math
import random
import sys
from pathlib import Path
from unittest import mock

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_allocation_properties import jobs_strategy

from voda.core.allocation import pollux
from voda.core.allocation.pollux import Pollux
from voda.core.allocation.voda import Curve, Voda, category_models, with_floors
from voda.core.goodput import GoodputModel, PerfParams
from voda.core.model import Job, JobStatus

sys.path.insert(0, str(Path(__file__).parent.parent / "bench"))
from allocate import make_jobs

PERF = PerfParams(0.1, 0.01, 0.1, 0.01, 0.1, 0.01, 1.1)
POLLUX = [Pollux(), Pollux(gpus_per_node=2, fairness=0.0, aligned=False),
          Pollux(fairness=0.5, restart_penalty=0.0, gpus_per_node=8)]
CONFIGS = [Voda(), Voda(gpus_per_node=8, tail_floor=0.5, aging=0.0),
           Voda(aligned=False, throughput_estimates=False, restart_penalty=0.0),
           Voda(gpus_per_node=2, horizon=1.0, elapsed_floor=True)]
SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal to the last bit, but for which NaN: a NaN's sign and payload depend on the
    instructions that made it, and no comparison or max that reads one tells them apart
    (NaNs arise only from degenerate curves, such as a time of 0 seconds)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    nan = np.isnan(a) if a.dtype.kind == "f" else np.zeros(a.shape, dtype=bool)
    if nan.any() and not (nan == np.isnan(b)).all():
        return False
    return a[~nan].tobytes() == b[~nan].tobytes()


def one_by_one(voda: Voda, jobs: list[Job], capacity: int,
               weights: np.ndarray) -> tuple[list[Curve], list[np.ndarray]]:
    borrowed = category_models(jobs, voda.category_history) if voda.share_models else {}
    curves = [voda.curve(job, borrowed.get(job.category), capacity) for job in jobs]
    return curves, [voda.utility(job, c, float(w))
                    for job, c, w in zip(jobs, curves, weights, strict=True)]


def check_alike(voda: Voda, jobs: list[Job], capacity: int, weights: np.ndarray) -> None:
    curves, utilities = one_by_one(voda, jobs, capacity, weights)
    borrowed = category_models(jobs, voda.category_history) if voda.share_models else {}
    batch = voda.curves(jobs, borrowed, capacity)
    for mine, theirs in zip(batch, curves, strict=True):
        assert mine.cap == theirs.cap
        assert same_bits(mine.seconds, theirs.seconds)
        assert mine.size == theirs.size or (math.isnan(mine.size) and math.isnan(theirs.size))
        assert mine.model == theirs.model
        assert (mine.pace is None) == (theirs.pace is None)
        if mine.pace is not None:
            assert same_bits(mine.pace, theirs.pace)
    for mine, theirs in zip(voda.utilities(jobs, curves, weights), utilities, strict=True):
        assert same_bits(mine, theirs)


def with_models(jobs: list[Job], seed: int) -> list[Job]:
    """Some of the jobs with a goodput model (fitted or not yet, in two categories)."""
    rng = random.Random(seed)
    out = []
    for job in jobs:
        pick = rng.random()
        if pick < 0.5:
            out.append(job)
            continue
        model = GoodputModel(perf=PERF if pick < 0.85 else None, grad_sqr=1.0,
                             grad_var=rng.choice([0.0, 1.0]), init_batch=128, max_batch=4096,
                             min_local=32, max_local=256,
                             max_profiled_replicas=rng.choice([0, 1, 2, 8]),
                             epoch_samples=rng.choice([0.0, 50_000.0]))
        out.append(dataclasses.replace(job, goodput=model, category=rng.choice(["a", "b"])))
    return out


@SETTINGS
@given(jobs=jobs_strategy(max_jobs=14), capacity=st.integers(1, 48),
       which=st.integers(0, len(CONFIGS) - 1),
       seed=st.integers(0, 2**32 - 1))
def test_curves_and_utilities_of_all_jobs_are_those_of_each(
    jobs: list[Job], capacity: int, which: int, seed: int
) -> None:
    jobs = with_models(jobs, seed)
    rng = np.random.default_rng(seed)
    weights = rng.choice([0.0, 1e-3, 0.5, 1.0, 7.25, 1e6], size=len(jobs))
    check_alike(CONFIGS[which], jobs, capacity, weights)


@st.composite
def curves_strategy(draw: st.DrawFn) -> tuple[list[Job], list[Curve], list[float]]:
    """Curves of any shape (inf, zero and tied times, a pace or none) with the jobs'
    min, current count and restart delay, and weights."""
    count = draw(st.integers(1, 12))
    jobs, curves, weights = [], [], []
    times = st.sampled_from([math.inf, 0.0, 1e-3, 0.5, 30.0, 30.0, 240.0, 241.0, 1e5])
    for i in range(count):
        cap = draw(st.integers(0, 9))
        seconds = np.array([math.inf, *draw(st.lists(times, min_size=cap, max_size=cap))])
        pace = (np.array([math.inf, *draw(st.lists(times, min_size=cap, max_size=cap))])
                if draw(st.booleans()) else None)
        finite = seconds[np.isfinite(seconds)]
        size = draw(st.sampled_from([
            float(seconds[1]) if cap >= 1 else math.inf,
            float(finite.min()) if len(finite) else math.inf, math.inf]))
        lo = draw(st.integers(0, 10))
        current = draw(st.integers(0, 10))
        jobs.append(Job(name=f"j{i}", min_workers=max(lo, 1), max_workers=max(lo, 1, cap),
                        epochs=3, status=JobStatus.RUNNING if current else JobStatus.WAITING,
                        current_workers=current,
                        rescale_delay=draw(st.sampled_from([0.0, 5.0, 300.0])),
                        # a known restart cost grows the horizon and charges past restarts
                        restart_cost=draw(st.sampled_from([0.0, 0.0, 45.0, 250.0])),
                        restarts=draw(st.integers(0, 5)),
                        running_seconds=draw(st.sampled_from([0.0, 100.0, 5e4])),
                        waiting_seconds=draw(st.sampled_from([0.0, 30.0]))))
        curves.append(Curve(cap, seconds, size, None, pace))
        weights.append(draw(st.sampled_from([0.0, 0.25, 1.0, 3.0, 1e9])))
    return jobs, curves, weights


@SETTINGS
@given(case=curves_strategy(), which=st.integers(0, len(CONFIGS) - 1))
def test_utilities_of_any_curves_are_those_of_each(
    case: tuple[list[Job], list[Curve], list[float]], which: int
) -> None:
    jobs, curves, weights = case
    voda = CONFIGS[which]
    batch = voda.utilities(jobs, curves, np.array(weights))
    for job, curve, weight, mine in zip(jobs, curves, weights, batch, strict=True):
        assert same_bits(mine, voda.utility(job, curve, weight))


def test_the_bench_jobs_are_priced_and_decided_alike() -> None:
    jobs = make_jobs(400, 3)
    weights = np.array([random.Random(i).uniform(0.1, 3.0) for i in range(len(jobs))])
    for voda in CONFIGS:
        for capacity in (64, 1024):
            check_alike(voda, jobs, capacity, weights)


def floors_one_by_one(utilities: list[np.ndarray], floored: list[bool]) -> list[np.ndarray]:
    """voda.with_floors as it was: each job's largest |u| found on its own."""
    finite = [np.abs(u[np.isfinite(u)]) for u in utilities]
    below = 1.0 + sum(float(f.max()) for f in finite if len(f))
    out = list(utilities)
    for i, floor in enumerate(floored):
        if floor:
            out[i] = utilities[i].copy()
            out[i][0] = -below
    return out


@SETTINGS
@given(utilities=st.lists(st.lists(st.sampled_from(
    [-math.inf, math.inf, math.nan, -0.0, 0.0, 1e-9, 2.5, -7.0, 1e300]), min_size=1,
    max_size=6), min_size=1, max_size=10), seed=st.integers(0, 2**32 - 1))
def test_floors_are_set_as_one_job_at_a_time(utilities: list[list[float]], seed: int) -> None:
    arrays = [np.array(u) for u in utilities]
    floored = np.random.default_rng(seed).random(len(arrays)) < 0.4
    for mine, theirs in zip(with_floors(arrays, floored.tolist()),
                            floors_one_by_one(arrays, floored.tolist()), strict=True):
        assert same_bits(mine, theirs)


def check_pollux_alike(pollux: Pollux, jobs: list[Job], capacity: int) -> None:
    fair = math.ceil(capacity / max(len(jobs), 1))
    scale = 1.0 / (pollux.gpus_per_node or 4)
    for job, mine in zip(jobs, pollux.utilities(jobs, fair, capacity, scale), strict=True):
        assert same_bits(mine, pollux.utility(job, fair, capacity, scale))


@SETTINGS
@given(jobs=jobs_strategy(max_jobs=14), capacity=st.integers(1, 48),
       which=st.integers(0, len(POLLUX) - 1), seed=st.integers(0, 2**32 - 1))
def test_pollux_utilities_of_all_jobs_are_those_of_each(
    jobs: list[Job], capacity: int, which: int, seed: int
) -> None:
    check_pollux_alike(POLLUX[which], with_models(jobs, seed), capacity)


def test_the_bench_jobs_are_priced_alike_by_pollux() -> None:
    jobs = with_models(make_jobs(400, 4), 4)
    # caps below 64 priced in one padded array, or by cap (no padding is cheap enough)
    for pad_cells in (10**9, 0):
        with mock.patch.object(pollux, "PAD_CELLS", pad_cells):
            for algorithm in POLLUX:
                for capacity in (64, 1024):
                    check_pollux_alike(algorithm, jobs, capacity)


def test_a_known_restart_cost_is_priced_alike_one_by_one_and_all_at_once() -> None:
    """A job's own restart cost (its horizon grown, the share of its life lost to restarts
    charged) reaches the jobs x counts path as it reaches `Voda.utility`."""
    seconds = np.array([math.inf, 1000.0, 600.0, 500.0, 450.0])
    jobs = [Job(name=f"j{i}", min_workers=1, max_workers=4, epochs=3,
                status=JobStatus.RUNNING, current_workers=2, restart_cost=cost,
                restarts=restarts, running_seconds=ran, waiting_seconds=30.0)
            for i, (cost, restarts, ran) in enumerate(
                [(0.0, 0, 100.0), (250.0, 3, 5e4), (45.0, 1, 900.0), (250.0, 0, 10.0)])]
    curves = [Curve(4, seconds, 1000.0, None, None) for _ in jobs]
    for voda in CONFIGS:
        batch = voda.utilities(jobs, curves, np.ones(len(jobs)))
        for job, curve, mine in zip(jobs, curves, batch, strict=True):
            assert same_bits(mine, voda.utility(job, curve, 1.0)), (voda, job.name)
    plain, charged = Voda().utilities(jobs[:2], curves[:2], np.ones(2))
    assert not same_bits(plain, charged)  # the cost is not lost on the way

"""The Voda policy: what it reads, and how it shares a category's measurements."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
from builders import make_job
from hypothesis import given, settings
from hypothesis import strategies as st

from voda.core.allocation import registry
from voda.core.allocation.base import water_level
from voda.core.allocation.voda import (
    Voda,
    aged_sizes,
    category_models,
    hardware_efficiency,
    inelastic_first,
    measured_cap,
    own_model,
    prefix_water_levels,
    rank_weights,
    share_left,
    short_start_bonus,
    tail_floors,
    with_floors,
)
from voda.core.goodput import GoodputModel, PerfParams

PERF = PerfParams(0.1, 0.01, 0.1, 0.01, 0.1, 0.01, 1.1)


def model(replicas: int, perf: PerfParams | None = PERF, grad_var: float = 1.0) -> GoodputModel:
    return GoodputModel(perf=perf, grad_sqr=1.0, grad_var=grad_var, init_batch=128,
                        max_batch=4096, min_local=32, max_local=256,
                        max_profiled_replicas=replicas, epoch_samples=50_000.0)


class Untouchable:
    """Simulator-only truth that fails on any use."""

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"Voda read the oracle ({name})")


def test_voda_never_reads_the_oracle() -> None:
    jobs = [
        make_job("a").workers(1, 8).epochs(5).with_(goodput=model(2), category="c").obj(),
        make_job("b").workers(1, 8).epochs(40).with_(goodput=model(4), category="c")
        .running(4).obj(),
        make_job("d").workers(1, 8).epochs(10).epoch_times({1: 60.0, 2: 31.0}).obj(),
    ]
    plain = registry.create("Voda", {})(jobs, 12)
    guarded = [dataclasses.replace(j, oracle=Untouchable()) for j in jobs]
    assert registry.create("Voda", {})(guarded, 12) == plain


def test_a_new_job_borrows_the_throughput_of_its_category_but_keeps_its_own_statistics() -> None:
    measured = make_job("old").with_(goodput=model(8), category="bert").obj()
    new = make_job("new").with_(goodput=model(0, perf=None, grad_var=5.0), category="bert").obj()
    other = make_job("x").with_(goodput=model(16), category="yolo").obj()
    borrowed = category_models([measured, new, other])
    assert borrowed["bert"] is measured.goodput
    seen = own_model(new, borrowed["bert"])
    assert seen is not None and seen.perf == PERF and seen.max_profiled_replicas == 8
    assert seen.grad_var == 5.0
    # twice what the category measured, as far as its batch range allows
    assert measured_cap(new, seen) == 16
    assert measured_cap(new, own_model(new, None)) == new.max_workers


def test_without_sharing_a_new_job_is_sized_on_what_it_measured_itself() -> None:
    measured = make_job("old").workers(1, 32).epochs(10).with_(goodput=model(8),
                                                                category="c").obj()
    new = make_job("new").workers(1, 32).epochs(10).with_(goodput=model(1),
                                                           category="c").obj()
    shared = Voda()(
        [measured, new], 64)
    alone = Voda(share_models=False)([measured, new], 64)
    assert alone["new"] <= 2 < shared["new"]


def test_a_new_job_starts_from_what_its_category_measured_before() -> None:
    # No other job of the category is active: what a finished one measured is all there is.
    new = make_job("new").workers(1, 32).epochs(10).with_(
        goodput=model(0, perf=None), category_goodput=model(8), category="c").obj()
    assert category_models([new])["c"] is new.category_goodput
    assert category_models([new], history=False) == {}
    as_if_measured = dataclasses.replace(new, goodput=model(8), category_goodput=None)
    assert Voda()([new], 64) == Voda()([as_if_measured], 64)
    assert Voda()([new], 64)["new"] > 2


def test_rank_weights_follow_the_order_of_sizes_not_their_ratio() -> None:
    sizes = [1000.0, 10.0, 1001.0, 500.0]
    weights = rank_weights(sizes, 0.8)
    order = sorted(range(len(sizes)), key=sizes.__getitem__)
    assert all(weights[a] > weights[b] for a, b in itertools.pairwise(order))
    # the heSRPT shares (weights ** c) sum to one
    assert abs(sum(weights ** 5) - 1.0) < 1e-9
    # two long jobs of almost equal size are not treated alike
    assert weights[0] > 1.5 * weights[2]
    assert list(rank_weights(sizes, 0.0)) == [1.0] * 4
    assert len(rank_weights([], 0.8)) == 0


def test_the_epoch_under_way_counts_as_partly_done_by_the_time_run_in_it() -> None:
    # Two running jobs on 2 GPUs each, 2 of 10 epochs left at 1,000 s an epoch (linear
    # speedup); "late" was submitted second but is 900 s into its epoch: 1.1 epochs left.
    times = {1: 2000.0, 2: 1000.0, 4: 500.0}
    early, late = (make_job(name).workers(1, 4).epochs(10, completed=8).epoch_times(times)
                   .running(2).submitted_at(at).obj() for name, at in (("early", 0), ("late", 1)))
    late = dataclasses.replace(late, running_seconds_since_epoch=900.0,
                               attained_gpu_seconds_since_epoch=1800.0)
    seconds = np.array([np.inf, 4000.0, 2000.0, 1500.0, 1000.0])
    assert share_left(late, seconds, 0.9) == (2 - 0.9) / 2
    assert share_left(late, seconds, 0.5) == (2 - 0.5) / 2  # at most
    assert share_left(early, seconds, 0.9) == 1.0  # nothing run in the epoch under way
    # halted part-way it keeps what it did; timed at the GPUs it held on average there
    # (300 s on 4 GPUs, 500 s an epoch there: 0.6 of it done)
    halted = dataclasses.replace(late, current_workers=0, running_seconds_since_epoch=300.0,
                                 attained_gpu_seconds_since_epoch=1200.0)
    assert share_left(halted, seconds, 0.9) == pytest.approx((2 - 0.6) / 2)
    # (on 2 GPUs, then 4: 3 on average, 750 s an epoch: 0.4 of it done)
    resized = dataclasses.replace(halted, attained_gpu_seconds_since_epoch=900.0)
    assert share_left(resized, seconds, 0.9) == pytest.approx((2 - 0.4) / 2)
    assert share_left(halted, seconds, 0.0) == 1.0  # counting off
    # the one nearer its end is ranked first: it takes the 2 GPUs left over
    both = Voda()([early, late], 6)
    assert (both["late"], both["early"]) == (4, 2)
    # counting epochs only once reported, the two would tie and the first submitted would
    # go first (share_left(..., 0.0) is 1 for both, above)


def test_a_job_sized_on_the_default_guess_lasts_at_least_as_long_as_its_epoch_under_way(
) -> None:
    # A 2-epoch job with no epoch time of its own or its category's (it measures none before
    # it finishes) is sized on the default 60 s an epoch: 2 minutes on one GPU. It has run
    # 3,000 s on 2 GPUs in its first epoch: on the guess, more GPUs finish it within the
    # restart's 30 s and are worth nothing; the epoch under way says it is far longer.
    job = dataclasses.replace(
        make_job("bert").workers(1, 12).epochs(2).running(2).obj(),
        running_seconds_since_epoch=3000.0, attained_gpu_seconds_since_epoch=6000.0)
    guessed = Voda().curve(job, None, 16)
    floored = Voda(elapsed_floor=True).curve(job, None, 16)
    assert guessed.seconds[2] == pytest.approx(60.0 * (2 - 0.9) / 2)
    # an epoch on 2 GPUs at least the 3,000 s run: 6,000 s left, 0.9 of an epoch done
    assert floored.seconds[2] == pytest.approx(6000.0 * (2 - 0.9) / 2)
    assert floored.seconds[4] == pytest.approx(floored.seconds[2] / 2)  # the shape kept
    assert Voda()([job], 16) == {"bert": 2}
    assert Voda(elapsed_floor=True)([job], 16)["bert"] >= 8
    # an epoch time measured anywhere (its own or its category's) is not second-guessed
    measured = dataclasses.replace(job, epoch_time_by_workers={4: 20.0})
    assert Voda(elapsed_floor=True).curve(measured, None, 16).seconds[2] == pytest.approx(
        Voda().curve(measured, None, 16).seconds[2])
    # nor is a job that reports a goodput model, fitted or not yet: its first fit corrects
    # the guess within its first steps
    reporting = dataclasses.replace(job, goodput=model(0, perf=None))
    assert Voda(elapsed_floor=True).curve(reporting, None, 16).seconds[2] == pytest.approx(
        Voda().curve(reporting, None, 16).seconds[2])


def test_a_short_job_is_not_kept_waiting_by_a_long_one_holding_the_cluster() -> None:
    # "big" holds both 4-GPU nodes, 50 epochs of 100 s there (5,000 s) left; "short" is
    # 80 s of work on one GPU. Freeing a GPU means restarting big on one node (half its
    # speed): by rates alone that costs more than short's one GPU brings, and short would
    # wait 5,000 s; started now it saves them, for two restarts of big.
    big = (make_job("big").workers(1, 8).epochs(50).epoch_times({8: 100.0}).running(8)
           .submitted_at(0).obj())
    short = make_job("short").workers(1, 1).epochs(1).epoch_times({1: 80.0}).submitted_at(1).obj()
    by_rate = Voda(short_start=1.0, gpus_per_node=4)([big, short], 8)
    assert by_rate == {"big": 8, "short": 0}
    started = Voda(gpus_per_node=4)([big, short], 8)
    assert started == {"big": 4, "short": 1}
    # a job that would not finish within the restart horizon is left to the rank order
    longer = dataclasses.replace(short, epoch_time_by_workers={1: 300.0})
    assert Voda(gpus_per_node=4)([big, longer], 8) == {"big": 8, "short": 0}


def test_the_short_start_bonus_counts_the_wait_it_spares() -> None:
    voda = Voda(gpus_per_node=4)
    big = make_job("big").workers(1, 8).epochs(5).epoch_times({8: 100.0}).running(8).obj()
    short = make_job("short").epochs(1).epoch_times({1: 100.0}).obj()
    curves = [voda.curve(j, None, 8) for j in (big, short)]
    # big ends in 500 s at its count: short is spared 500 s against its 100 s
    assert list(short_start_bonus([big, short], curves, 240.0, 10.0)) == [1.0, 6.0]
    assert list(short_start_bonus([big, short], curves, 240.0, 3.0)) == [1.0, 3.0]  # at most
    assert list(short_start_bonus([big, short], curves, 240.0, 1.0)) == [1.0, 1.0]  # off
    idle = dataclasses.replace(big, current_workers=0)  # nothing to wait for
    assert list(short_start_bonus([idle, short], curves, 240.0, 10.0)) == [1.0, 1.0]


def test_a_job_that_scales_poorly_is_weighed_up_by_its_efficiency_at_an_even_share() -> None:
    voda = Voda(gpus_per_node=4)
    linear = make_job("linear").workers(1, 8).epochs(10).epoch_times(
        {1: 100.0, 2: 50.0, 4: 25.0, 8: 12.5}).obj()
    poor = make_job("poor").workers(1, 8).epochs(10).epoch_times(
        {1: 100.0, 2: 80.0, 4: 70.0, 8: 70.0}).obj()
    jobs = [linear, poor]

    def factors(capacity: int, exponent: float) -> list[float]:
        curves = [voda.curve(j, None, capacity) for j in jobs]
        return [round(float(f), 3) for f in inelastic_first(jobs, curves, capacity, exponent, 4)]

    # an even share of 8 GPUs is 4: poor runs 100 / 70 times faster there, 1 / 2.8 efficient
    assert factors(8, 1.0) == [1.0, 2.8]
    assert factors(8, 2.0) == [1.0, 7.84]
    assert factors(8, 0.0) == [1.0, 1.0]  # off
    # with GPUs for every job's cap, the share is the cap (8, where poor is 1 / 5.6)
    assert factors(64, 1.0) == [1.0, 5.6]
    # more jobs than GPUs: the share is one GPU, where every job is fully efficient
    crowd = [dataclasses.replace(poor, name=f"p{i}") for i in range(3)]
    curves = [voda.curve(j, None, 2) for j in crowd]
    assert list(inelastic_first(crowd, curves, 2, 1.0, 4)) == [1.0, 1.0, 1.0]


def test_a_long_job_that_scales_poorly_is_weighed_at_the_share_it_would_hold_later() -> None:
    # Three short jobs that scale linearly and one long job that scales poorly, on 8 GPUs:
    # the even share now is 2 GPUs; once the short ones have finished, the long job could
    # hold all 8, where it would use them badly. Deferred, it runs then.
    poor = make_job("poor").workers(1, 8).epochs(10).epoch_times(
        {1: 100.0, 2: 80.0, 4: 70.0, 8: 70.0}).submitted_at(0).obj()
    short = [make_job(f"short{i}").workers(1, 8).epochs(10).epoch_times(
        {1: 30.0, 2: 15.0, 4: 7.5, 8: 3.75}).submitted_at(i + 1).obj() for i in range(3)]
    jobs = [poor, *short]

    def factors(share: str) -> list[float]:
        curves = [Voda(gpus_per_node=4).curve(j, None, 8) for j in jobs]
        return [round(float(f), 3) for f in inelastic_first(jobs, curves, 8, 1.0, 4, share)]

    assert factors("even") == [1.6, 1.0, 1.0, 1.0]  # 100 / 80 on 2 GPUs: 1 / 1.6 efficient
    assert factors("later") == [5.6, 1.0, 1.0, 1.0]  # 100 / 70 on 8
    assert factors("between") == [2.8, 1.0, 1.0, 1.0]  # 100 / 70 on 4, sqrt(2 x 8)
    # (without the floor for the tail, which would start it on one GPU under either share)
    assert Voda(gpus_per_node=4, inelastic_share="even", tail_floor=0)(jobs, 8)["poor"] == 0
    assert Voda(gpus_per_node=4, tail_floor=0)(jobs, 8)["poor"] == 1  # it starts now, on one GPU
    assert Voda(gpus_per_node=4, inelastic_share="even")(jobs, 8)["poor"] == 1


@settings(max_examples=300, deadline=None)
@given(rooms=st.lists(st.integers(0, 64), min_size=1, max_size=30), free=st.integers(0, 400))
def test_prefix_water_levels_are_each_prefixs_water_level(rooms: list[int], free: int) -> None:
    levels = prefix_water_levels(rooms, free)
    for k in range(len(rooms)):
        prefix = rooms[:k + 1]
        # Where every room fits, any level from the largest room up is the water level.
        assert min(int(levels[k]), max(prefix)) == water_level(sorted(prefix), free)


def test_a_job_that_scales_poorly_is_served_before_a_slightly_shorter_one_that_scales_well(
) -> None:
    # "elastic" is a little shorter, so it ranks first; by rank alone it takes the node.
    # "inelastic" runs barely faster on 2 GPUs than on 1: it cannot make up later for
    # waiting now, while elastic can take more GPUs once inelastic is done.
    elastic = make_job("elastic").workers(1, 4).epochs(10).epoch_times(
        {1: 100.0, 2: 52.6, 4: 38.5}).submitted_at(0).obj()
    inelastic = make_job("inelastic").workers(1, 4).epochs(11).epoch_times(
        {1: 100.0, 2: 91.0, 4: 85.0}).submitted_at(1).obj()
    by_rank = Voda(inelastic_first=0, gpus_per_node=4)([elastic, inelastic], 4)
    assert by_rank == {"elastic": 4, "inelastic": 0}
    assert Voda(gpus_per_node=4)([elastic, inelastic], 4) == {"elastic": 2, "inelastic": 2}


def test_rank_exponent_is_checked() -> None:
    for bad in (-0.1, 1.0, "0.5", float("nan")):
        with pytest.raises(ValueError, match="rank_exponent"):
            Voda(rank_exponent=bad)  # type: ignore[arg-type]
    for gone in ("epoch_progress", "size_exponent", "aging_limit"):  # constants now
        with pytest.raises(TypeError, match=gone):
            Voda(**{gone: 0.5})
    for bad in (0.5, 101, "10", float("nan")):
        with pytest.raises(ValueError, match="short_start"):
            Voda(short_start=bad)  # type: ignore[arg-type]
    for bad in (-0.1, 4.5, "1", float("nan"), True):
        with pytest.raises(ValueError, match="inelastic_first"):
            Voda(inelastic_first=bad)  # type: ignore[arg-type]
    for bad in ("mean", "", 1, None):
        with pytest.raises(ValueError, match="inelastic_share: must be one of even, between"):
            Voda(inelastic_share=bad)  # type: ignore[arg-type]


def test_a_job_that_has_not_measured_its_gradients_yet_prices_batches_with_its_categorys() -> None:
    # A job reports its gradient statistics after its first steps; until then they are
    # zeros, which would make every batch above the initial one worth 1 / scale of its
    # samples: a fixed-batch job at 64 x its initial batch would look 64 times longer.
    fixed = dataclasses.replace(model(1), grad_sqr=2.0, grad_var=50.0, init_batch=64,
                                max_batch=4096, fixed_batch=4096)
    fresh = make_job("new").workers(1, 1).epochs(10).with_(
        goodput=dataclasses.replace(fixed, perf=None, grad_sqr=0.0, grad_var=0.0,
                                    max_profiled_replicas=0),
        category_goodput=fixed, category="ncf").obj()
    seen = own_model(fresh, fixed)
    assert seen is not None and (seen.grad_sqr, seen.grad_var) == (2.0, 50.0)
    voda = Voda()
    as_if_measured = dataclasses.replace(fresh, goodput=fixed, category_goodput=None)
    assert voda.curve(fresh, fixed, 64).size == voda.curve(as_if_measured, None, 64).size
    # what it measured itself, once it has, is kept
    own = dataclasses.replace(fresh.goodput, grad_sqr=1.0, grad_var=9.0)
    assert own_model(dataclasses.replace(fresh, goodput=own), fixed).grad_var == 9.0


def test_a_job_grows_past_a_dip_in_its_speedup_when_more_gpus_pay() -> None:
    # Crossing to a second node costs a slow network step (8 GPUs run slower than 4),
    # but more nodes then pay for it: the job is sized on its best speed, not on the
    # first count where its speed drops.
    perf = PerfParams(alpha_c=0.25, beta_c=0.011, alpha_n=1.5, beta_n=1e-8, alpha_r=0.17,
                      beta_r=0.13, gamma=2.9)
    dip = GoodputModel(perf=perf, grad_sqr=380.0, grad_var=17_000.0, init_batch=8,
                       max_batch=512, min_local=4, max_local=8, max_profiled_replicas=40,
                       epoch_samples=16_500.0)
    job = make_job("yolo").workers(1, 64).epochs(40).with_(goodput=dip).running(4).obj()
    curve = Voda().curve(job, None, 64)
    speed = curve.size / curve.seconds
    assert speed[8] < speed[4] < speed[16]
    chosen = Voda()([job], 64)["yolo"]
    assert chosen > 4 and speed[chosen] == max(speed[n] for n in (1, 2, 4, *range(8, 65, 4)))


def test_past_what_it_measured_a_job_is_sized_hopefully_and_within_it_as_measured() -> None:
    # Fitted on 2, 4 and 8 GPUs: one multi-node count, so how the network time grows
    # with more nodes is a guess, here a steep one. Voda holds the network time at the
    # measured count's beyond it: the job grows to 16 and measures it, and its next fit
    # corrects the guess; where it measured, the fitted model stands.
    perf = PerfParams(alpha_c=0.19, beta_c=0.057, alpha_n=0.23, beta_n=0.25, alpha_r=0.06,
                      beta_r=0.017, gamma=1.02)
    steep = GoodputModel(perf=perf, grad_sqr=6.5e12, grad_var=6.1e15, init_batch=12,
                         max_batch=384, min_local=4, max_local=12, max_profiled_replicas=8,
                         epoch_samples=88_644.0)
    job = make_job("bert").workers(1, 64).epochs(2).with_(goodput=steep).running(8).obj()
    hopeful, fitted = Voda().curve(job, None, 64), Voda(explore=False).curve(job, None, 64)
    assert list(hopeful.seconds[:9]) == list(fitted.seconds[:9])
    assert fitted.seconds[16] > fitted.seconds[8] > hopeful.seconds[16]
    assert fitted.cap == hopeful.cap == 16  # never past twice what it measured
    assert Voda(explore=False)([job], 64)["bert"] == 8
    assert Voda()([job], 64)["bert"] == 16


def test_epoch_times_of_other_phases_of_training_do_not_keep_a_job_at_one_gpu() -> None:
    # Measured in a simulated run: the category's epochs took 443 s on 16 GPUs, 709 s on 48
    # (early in training, when a simulated epoch takes longer) and 243 s on 52. From epoch
    # times alone, 48 looks slower than 16 and the fit has no speed-up at all: one GPU as
    # fast as sixteen, and a job on one GPU stayed there with 15 GPUs idle for hours. Its
    # throughput (samples/s per layout) scales: that carries its epoch time across counts.
    rates = {(1, 1): 130.0, (16, 4): 1800.0, (48, 12): 4300.0, (52, 13): 4600.0}
    job = make_job("imagenet").workers(1, 48).epochs(90, completed=10).epoch_times(
        {16: 443.0, 48: 709.0, 52: 243.0}).running(1).with_(layout_throughput=rates).obj()
    by_epochs = registry.create("Voda", {"throughput_estimates": False})([job], 16)
    assert by_epochs == {"imagenet": 1}
    assert registry.create("Voda")([job], 16) == {"imagenet": 16}


def test_switches_must_be_booleans() -> None:
    import pytest

    for knob in ("aligned", "share_models", "category_history", "explore",
                 "throughput_estimates", "elapsed_floor"):
        with pytest.raises(ValueError, match=knob):
            registry.create("Voda", {knob: "false"})


def long_poor_and_short_linear(count: int) -> list:
    """One long job whose hardware scales poorly (70 s an epoch from 4 GPUs up, 100 s on
    one) and `count` shorter ones that scale linearly, submitted after it."""
    poor = make_job("poor").workers(1, 16).epochs(30).epoch_times(
        {1: 100.0, 2: 80.0, 4: 70.0, 8: 70.0, 16: 70.0}).submitted_at(0).obj()
    short = [make_job(f"short{i}").workers(1, 4).epochs(10).epoch_times(
        {1: 30.0, 2: 15.0, 4: 7.5}).submitted_at(i + 1).obj() for i in range(count)]
    return [poor, *short]


def test_a_tail_floor_holds_a_long_job_that_scales_poorly_at_one_gpu() -> None:
    jobs = long_poor_and_short_linear(3)
    assert Voda(gpus_per_node=4, tail_floor=0)(jobs, 4)["poor"] == 0  # the rank order defers it
    floored = Voda(gpus_per_node=4, tail_floor=0.25)(jobs, 4)
    assert floored["poor"] == 1
    assert sum(floored.values()) == 4


def test_a_tail_floor_spares_jobs_that_scale_well_short_jobs_and_its_budget() -> None:
    voda = Voda(gpus_per_node=4)
    jobs = long_poor_and_short_linear(3)
    well = make_job("well").workers(1, 16).epochs(30).epoch_times(
        {1: 100.0, 2: 50.0, 4: 25.0, 8: 12.5, 16: 6.25}).submitted_at(0).obj()
    second = dataclasses.replace(jobs[0], name="poor2", submit_time=0.5)
    jobs = [jobs[0], well, second, *jobs[1:]]
    curves = [voda.curve(j, None, 8) for j in jobs]
    # poor and poor2 are long and 100 / 70 / 16 efficient on 16 GPUs; well is linear;
    # the short jobs are the shorter half. The budget goes in submit order.
    assert tail_floors(curves, 8, 4) == [True, False, True, False, False, False]
    assert tail_floors(curves, 1, 4) == [True, False, False, False, False, False]
    assert tail_floors(curves, 0, 4) == [False] * 6


def test_hardware_efficiency_is_throughput_without_the_statistical_efficiency() -> None:
    curve = Voda(gpus_per_node=4).curve(make_job("j").workers(1, 16).obj(), None, 16)
    no_network = PerfParams(0.1, 0.01, 0.0, 0.0, 0.0, 0.0, 1.0)
    slow_network = PerfParams(0.1, 0.01, 1.0, 0.5, 1.0, 0.5, 1.0)
    assert hardware_efficiency(curve, model(4, no_network), 16, 4) == pytest.approx(1.0)
    assert hardware_efficiency(curve, model(4, slow_network), 16, 4) < 0.5
    # the gradient statistics, which change as a job trains, do not enter
    assert hardware_efficiency(curve, model(4, slow_network, grad_var=100.0), 16, 4) == \
        hardware_efficiency(curve, model(4, slow_network, grad_var=0.01), 16, 4)
    # nothing measured: taken to scale linearly, so never floored
    assert hardware_efficiency(curve, None, 16, 4) == pytest.approx(1.0)


def test_with_floors_puts_a_floored_jobs_value_at_none_below_any_other_choice() -> None:
    utilities = [np.array([0.0, 5.0, 9.0]), np.array([0.0, 3.0, -np.inf])]
    floored = with_floors(utilities, [False, True])
    assert floored[0] is utilities[0]
    assert floored[1][0] < -(9.0 + 3.0)
    assert list(floored[1][1:]) == [3.0, -np.inf]


def test_tail_floor_is_checked() -> None:
    for bad in (-0.1, 1.5, "0.1", float("nan"), True):
        with pytest.raises(ValueError, match="tail_floor"):
            Voda(tail_floor=bad)  # type: ignore[arg-type]


def linear_job(name: str, epochs: int, age: float, submitted: float = 0.0):
    """A job that scales linearly (60 s an epoch on one GPU), `age` seconds since its
    submission, waiting."""
    return make_job(name).workers(1, 4).epochs(epochs).epoch_times(
        {1: 60.0, 2: 30.0, 4: 15.0}).submitted_at(submitted).with_(waiting_seconds=age).obj()


def test_aging_takes_seconds_of_age_off_a_jobs_size_up_to_its_limit() -> None:
    voda = Voda(gpus_per_node=4)
    jobs = [linear_job("old", 100, age=1_000.0), linear_job("new", 100, age=0.0),
            linear_job("older", 10, age=1_000_000.0),
            make_job("ran").workers(1, 4).epochs(100).epoch_times({1: 60.0})
            .with_(waiting_seconds=200.0, running_seconds=300.0).obj()]
    curves = [voda.curve(j, None, 4) for j in jobs]
    assert [c.size for c in curves] == pytest.approx([6_000.0, 6_000.0, 600.0, 6_000.0])
    aged = aged_sizes(jobs, curves, 2.0, 0.9)
    # 2 s a second of age; at most 0.9 of the size; waiting and running both count
    assert aged == pytest.approx([4_000.0, 6_000.0, 60.0, 5_000.0])
    assert aged_sizes(jobs, curves, 0.0, 0.9) == [c.size for c in curves]
    assert aged_sizes(jobs, curves, 2.0, 0.0) == [c.size for c in curves]


def test_a_long_job_that_has_waited_outranks_a_shorter_job_that_arrived_much_later() -> None:
    # 'old' has 6,000 s of work left and has waited 2,000 s; 'new' has 5,000 s and just
    # arrived. Least work first gives 'new' the GPUs; aged, 'old' is due first.
    jobs = [linear_job("old", 100, age=2_000.0), linear_job("new", 83, age=0.0, submitted=2_000)]
    plain = Voda(gpus_per_node=4, aging=0, tail_floor=0)(jobs, 4)
    aged = Voda(gpus_per_node=4, tail_floor=0)(jobs, 4)
    assert plain["new"] > plain["old"]
    assert aged["old"] > aged["new"]
    assert sum(aged.values()) <= 4


def test_aging_moves_a_short_jobs_rank_past_jobs_at_most_ten_times_shorter() -> None:
    # however long 'waited' has waited, a job a tenth of its size or less still goes first
    jobs = [linear_job("waited", 100, age=1e9), linear_job("tenth", 9, age=0.0, submitted=1e9)]
    weights_by = aged_sizes(jobs, [Voda(gpus_per_node=4).curve(j, None, 4) for j in jobs],
                            2.0, 0.9)
    assert weights_by[1] < weights_by[0]
    assert rank_weights(weights_by, 0.5)[1] > rank_weights(weights_by, 0.5)[0]


def test_aging_knobs_are_checked() -> None:
    for bad in (-1.0, 2e6, "2", float("nan"), True):
        with pytest.raises(ValueError, match="aging"):
            Voda(aging=bad)  # type: ignore[arg-type]

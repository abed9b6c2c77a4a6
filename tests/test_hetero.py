"""Heterogeneous GPUs: typed profiles, the simulator's per-type speed, the policies."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path
from unittest import mock

import numpy as np
import pytest

from voda.core.allocation import hetero_voda
from voda.core.allocation.hetero import TypeChoice, choose_types
from voda.core.allocation.hetero_models import type_model, type_ratio, type_ratios, type_shapes
from voda.core.allocation.hetero_voda import (
    LONG_JOB_FLOOR,
    calm_horizon,
    floored_weights,
    rank_weights_large_m,
    voda_choice,
    with_one_statistics,
)
from voda.core.allocation.registry import create
from voda.core.goodput import GoodputModel, PerfParams
from voda.core.hetero_plan import decide_hetero
from voda.core.model import ANY_GPU_TYPE, Cluster, Job, Node, validate_job
from voda.core.placement.registry import get_placer
from voda.core.plan import decide
from voda.sim.backend import SimBackend
from voda.sim.profiles import ProfileError, load_profile
from voda.sim.throughput import throughput
from voda.sim.workloads import JobSpec


# ----- profiles ------------------------------------------------------------------------------
def test_typed_profiles_differ_by_type_and_share_gradient_statistics() -> None:
    t4, a100 = load_profile("imagenet@aws"), load_profile("imagenet@dgx-ext")
    assert throughput(a100, (1,), 100) > 2.5 * throughput(t4, (1,), 100)
    assert a100.max_local_bsz == 800 and t4.max_local_bsz == 200  # batch limits per type
    assert a100.validation == load_profile("imagenet").validation
    assert t4.placements == load_profile("imagenet").placements  # aws is the Pollux T4


def test_unknown_type_is_refused_by_name() -> None:
    with pytest.raises(ProfileError, match="imagenet@h100"):
        load_profile("imagenet@h100")


# ----- simulator -----------------------------------------------------------------------------
def _spec(name: str = "j", profile: str = "imagenet") -> JobSpec:
    return JobSpec(name, 0.0, 0, 1, 8, 1, 2, profile=profile, category=profile,
                   per_gpu_batch=100)


def _finish(node: Node, spec: JobSpec) -> float:
    backend = SimBackend([node], {spec.name: spec})
    backend.start(Job(spec.name), ((node.name, 1),))
    done = backend.next_completion()
    assert done is not None
    return done


def test_a_job_runs_at_its_types_speed() -> None:
    spec = dataclasses.replace(_spec(), epochs=90)
    on_t4 = _finish(Node("a", 4, "aws"), spec)
    on_a100 = _finish(Node("b", 8, "dgx-ext"), spec)
    on_untyped = _finish(Node("c", 4), spec)
    assert on_a100 < on_t4 / 2
    assert on_untyped == on_t4  # a node of no measured type: the job's own profile


def test_moving_between_types_is_a_restart() -> None:
    spec = dataclasses.replace(_spec(), epochs=90)
    nodes = [Node("t4", 4, "aws"), Node("a100", 8, "dgx-ext")]
    backend = SimBackend(nodes, {spec.name: spec}, penalty=30.0)
    backend.start(Job("j"), (("t4", 1),))
    backend.advance(1000.0)
    backend.scale(Job("j"), (("a100", 1),))
    sim = backend.jobs["j"]
    before = sim.progress
    assert before > 0
    assert sim.restarts == 1 and sim.countdown == 30.0
    assert sim.gpu_type == "dgx-ext" and sim.profile is not None
    assert sim.profile.name == "imagenet@dgx-ext"
    backend.advance(1029.0)
    backend._catch_up(sim)
    assert sim.progress == pytest.approx(before)  # the restart penalty: no progress


def test_the_profiled_speeds_are_the_artifacts_one_gpu_throughputs() -> None:
    """Sia's artifact ranks a model's types by the largest per-GPU batch over the largest
    step time among its one-GPU profile rows; the simulator hands Sia those."""
    import csv

    from voda.sim.hetero_profiles import profiled_type_speeds
    from voda.sim.profiles import typed_dir

    def artifacts(model: str, gpu_type: str) -> float:
        folder = typed_dir(model, gpu_type)
        assert folder is not None
        with open(Path(folder) / f"placements-{gpu_type}.csv") as f:
            rows = [r for r in csv.DictReader(f) if sum(map(int, r["placement"])) == 1]
        return max(float(r["local_bsz"]) for r in rows) / max(float(r["step_time"]) for r in rows)

    speeds = profiled_type_speeds({"cifar10": "cifar10", "yolo": "yolov3"},
                                  ["aws", "rtx", "dgx-ext", "h100"])
    assert set(speeds) == {"cifar10", "yolo"}
    assert set(speeds["yolo"]) == {"aws", "rtx", "dgx-ext"}, "h100 was not measured"
    for category, model in (("cifar10", "cifar10"), ("yolo", "yolov3")):
        for t, v in speeds[category].items():
            assert v == pytest.approx(artifacts(model, t))
    assert speeds["yolo"]["rtx"] < speeds["yolo"]["aws"] < speeds["yolo"]["dgx-ext"]


# ----- policies ------------------------------------------------------------------------------
def _model(speed: float, samples: float = 1e6) -> GoodputModel:
    perf = PerfParams(0.1 / speed, 0.01 / speed, 0.05 / speed, 0.01 / speed, 0.01 / speed,
                      0.001 / speed, 1.0)
    return GoodputModel(perf, 1.0, 1.0, 32, 32 * 64, 32, 32, max_profiled_replicas=8,
                        epoch_samples=samples)


def _flexible(name: str, fast_gain: float, epochs: int = 10, **kw: object) -> Job:
    models = {"slow": _model(1.0), "fast": _model(fast_gain)}
    return Job(name, 1, 1, epochs=epochs, gpu_types=(ANY_GPU_TYPE,), goodput=models["slow"],
               goodput_by_type=models, category=name, **kw)  # type: ignore[arg-type]


CLUSTER = Cluster((Node("s0", 1, "slow"), Node("f0", 1, "fast")))


def test_voda_gives_the_fast_type_to_the_job_that_gains_most_and_says_why() -> None:
    jobs = [_flexible("little", 1.2), _flexible("lots", 3.0)]
    choice = choose_types("voda", jobs, CLUSTER)
    assert choice.types == {"lots": "fast", "little": "slow"}
    assert choice.why["little"].startswith("on slow: fast is full and this job gains 1.2x")
    assert "lots's 3.0x" in choice.why["little"]


def test_voda_prefers_the_fast_type_for_the_shorter_job_when_gains_are_equal() -> None:
    jobs = [_flexible("long", 2.0, epochs=100), _flexible("short", 2.0, epochs=5)]
    assert choose_types("voda", jobs, CLUSTER).types == {"short": "fast", "long": "slow"}


def test_voda_does_not_move_a_running_job_for_less_than_a_restart() -> None:
    running = dataclasses.replace(_flexible("r", 1.001), gpu_type="slow", current_workers=1,
                                  running_seconds=100.0)
    shapes = type_shapes(Cluster((Node("s0", 1, "slow"), Node("f0", 1, "fast"))))
    assert voda_choice([running], shapes, {"slow": 1, "fast": 1}, 1e9).types == {"r": "slow"}
    assert voda_choice([running], shapes, {"slow": 1, "fast": 1}, 0.0).types == {"r": "fast"}


def test_heSRPT_weights_favour_shorter_jobs_and_leave_none_at_zero() -> None:
    weights = rank_weights_large_m(np.array([10.0, 1000.0, 100.0, 1.0]))
    assert weights.tolist() == pytest.approx([0.75 ** 0.5, 0.25 ** 0.5, 0.5 ** 0.5, 1.0])
    assert rank_weights_large_m(np.array([5.0]), power=1.0).tolist() == [1.0]


def test_a_job_longer_than_the_mean_weighs_at_least_the_floor() -> None:
    weights = rank_weights_large_m(np.array([1000.0, 10.0, 20.0, 30.0, 40.0, 50.0]))
    floor = float(np.sqrt(np.mean(weights ** 2))) * LONG_JOB_FLOOR
    floored = floored_weights(weights, np.array([1000.0, 10.0, 20.0, 30.0, 40.0, 50.0]),
                              np.zeros(6))  # every job younger than its remaining time
    assert weights[0] < floor and floored[0] == floor  # above the mean (191.7): raised
    assert floored[1:].tolist() == weights[1:].tolist()  # below it: as they were
    assert floored_weights(np.zeros(0), np.zeros(0), np.zeros(0)).tolist() == []


def test_voda_gives_the_longest_job_a_gpu_rather_than_leave_it_behind_short_ones() -> None:
    """Eight short jobs and a long one on 4 + 4 GPUs: ranked last (weight 1/3 of the
    shortest's), the long job would wait for all of them; at the floor it runs."""
    shapes = type_shapes(Cluster((Node("s0", 4, "slow"), Node("f0", 4, "fast"))))
    jobs = [_flexible("long", 2.0, epochs=100)]
    jobs += [_flexible(f"short{i}", 2.0, epochs=5) for i in range(8)]
    choice = voda_choice(jobs, shapes, {"slow": 4, "fast": 4}, 30.0)
    assert choice.counts["long"] == 1
    assert sum(choice.counts.values()) == 8


def test_voda_stops_a_running_job_only_for_more_than_its_restart_costs() -> None:
    """A long job holds the one free GPU; a short one comes. Stopping the long job costs it
    a restart when it resumes: dear (1,000 s) it keeps the GPU, cheap (10 s) it yields."""
    shapes = type_shapes(CLUSTER)
    short = _flexible("short", 1.0, epochs=5)
    for cost, holder in ((1000.0, "long"), (10.0, "short")):
        long = dataclasses.replace(_flexible("long", 1.0, epochs=100), gpu_type="slow",
                                   current_workers=1, running_seconds=1e4, restart_cost=cost)
        choice = voda_choice([long, short], shapes, {"slow": 1, "fast": 0}, 30.0)
        assert {n for n, c in choice.counts.items() if c} == {holder}


def test_voda_charges_a_shrunk_job_the_restart_it_pays_to_grow_back() -> None:
    """A long job holds both slow GPUs; a short one comes that can run only there. Shrunk
    to one GPU, the long job restarts now and again when it grows back: dear to restart
    (250 s) it keeps both for a newcomer worth less than that, where charged for one
    restart it would have yielded one; cheap to restart (10 s) it yields one."""
    shapes = type_shapes(Cluster((Node("s0", 2, "slow"), Node("f0", 1, "fast"))))
    free = {"slow": 2, "fast": 0}
    short = dataclasses.replace(_flexible("short", 1.5, epochs=5), max_workers=2)

    def long_job(cost: float) -> Job:
        return dataclasses.replace(_flexible("long", 1.0, epochs=100), max_workers=2,
                                   gpu_type="slow", current_workers=2, running_seconds=1e4,
                                   restart_cost=cost)

    assert voda_choice([long_job(250.0), short], shapes, free, 30.0).counts == {
        "long": 2, "short": 0}
    charged_once = hetero_voda._charged

    def one_restart(*args: object) -> np.ndarray:
        *rest, shrunk = args
        return charged_once(*rest, np.zeros_like(shrunk))  # type: ignore[arg-type]

    with mock.patch.object(hetero_voda, "_charged", one_restart):
        assert voda_choice([long_job(250.0), short], shapes, free, 30.0).counts == {
            "long": 1, "short": 1}
    assert voda_choice([long_job(10.0), short], shapes, free, 30.0).counts == {
        "long": 1, "short": 1}


def test_voda_leaves_idle_a_gpu_that_adds_less_than_its_price() -> None:
    """One job on 16 idle GPUs whose goodput barely grows past 4 (its batch's statistical
    efficiency falls as fast as its throughput rises): past 4 GPUs each adds less than
    GPU_PRICE of one GPU's speed, and the job takes 4; with no price it took 8."""
    models = {t: GoodputModel(PerfParams(0.1, 0.01, 0.0, 0.0, 0.0, 0.0, 1.0), 1.0, 1.0, 32,
                              32 * 64, 32, 32, max_profiled_replicas=8, epoch_samples=1e6)
              for t in ("slow", "fast")}
    job = Job("j", 1, 16, epochs=10, gpu_types=(ANY_GPU_TYPE,), goodput=models["slow"],
              goodput_by_type=models, category="j")
    shapes = type_shapes(Cluster((Node("s0", 8, "slow"), Node("f0", 8, "fast"))))
    free = {"slow": 8, "fast": 8}
    assert hetero_voda.GPU_PRICE == 0.05
    assert voda_choice([job], shapes, free, 30.0).counts == {"j": 4}
    with mock.patch.object(hetero_voda, "GPU_PRICE", 0.0):
        assert voda_choice([job], shapes, free, 30.0).counts == {"j": 8}


def test_voda_sizes_a_job_with_no_statistics_of_its_own_on_its_categorys_early_ones() -> None:
    """Its category's model was measured late in training, where the noise scale is large
    and a large batch (many GPUs) pays; the category's first reports say that early on it
    does not. A job with none of its own takes fewer GPUs on the early ones; a job with its
    own statistics keeps to them."""
    late = {t: GoodputModel(PerfParams(0.1, 0.01, 0.0, 0.0, 0.0, 0.0, 1.0), 1.0, 1000.0, 32,
                            32 * 64, 32, 32, max_profiled_replicas=8, epoch_samples=1e6)
            for t in ("slow", "fast")}
    job = Job("new", 1, 16, epochs=10, gpu_types=(ANY_GPU_TYPE,), goodput=None,
              goodput_by_type=late, category="c")
    shapes = type_shapes(Cluster((Node("s0", 8, "slow"), Node("f0", 8, "fast"))))
    free = {"slow": 8, "fast": 8}
    on_late = voda_choice([job], shapes, free, 30.0).counts["new"]
    early = dataclasses.replace(job, category_early_gradient=(1.0, 1.0))
    on_early = voda_choice([early], shapes, free, 30.0).counts["new"]
    assert on_early < on_late
    own = dataclasses.replace(early, goodput=late["slow"])
    assert voda_choice([own], shapes, free, 30.0).counts["new"] == on_late


def test_voda_moves_a_dear_job_to_idle_gpus_only_while_no_job_waits() -> None:
    """A long job dear to restart (250 s) runs on the slow GPU; the fast one (1.3x) is idle.
    Charged over its cost's horizon (693 s: 36 %) the move is not worth it; while no job
    waits, the charge is spread over the time since the last job came (its own age, 10^4 s)
    and it moves. Once a job waits, the charge is the one before and it stays."""
    shapes, free = type_shapes(CLUSTER), {"slow": 1, "fast": 1}
    long = dataclasses.replace(_flexible("long", 1.3, epochs=100), gpu_type="slow",
                               current_workers=1, running_seconds=1e4, restart_cost=250.0)
    assert calm_horizon([long], free) == 1e4
    assert voda_choice([long], shapes, free, 30.0).types == {"long": "fast"}
    waiting = _flexible("new", 1.3, epochs=100, waiting_seconds=60.0)
    assert calm_horizon([long, waiting], free) == 0.0
    choice = voda_choice([long, waiting], shapes, free, 30.0)
    assert (choice.types["long"], choice.counts["long"]) == ("slow", 1)
    busy = dataclasses.replace(long, current_workers=2)  # no GPU idle
    assert calm_horizon([busy], free) == 0.0


def test_isolated_keeps_a_job_on_its_first_type() -> None:
    jobs = [_flexible("a", 3.0), _flexible("b", 3.0)]
    first = choose_types("isolated", jobs, CLUSTER)
    assert sorted(first.types.values()) == ["fast", "slow"]
    again = [dataclasses.replace(j, gpu_type=first.types[j.name]) for j in jobs]
    assert choose_types("isolated", again, CLUSTER).types == first.types


def test_sia_fills_each_type_within_its_capacity() -> None:
    cluster = Cluster((Node("s0", 4, "slow"), Node("f0", 4, "fast")))
    jobs = [dataclasses.replace(_flexible(f"j{i}", 1.0 + i), max_workers=4) for i in range(5)]
    choice = choose_types("sia", jobs, cluster)
    assert choice.counts is not None
    for t in ("slow", "fast"):
        assert sum(choice.counts[n] for n, tt in choice.types.items() if tt == t) <= 4
    assert sum(choice.counts.values()) == 8  # every GPU used: λ_n rewards each job run


def test_sia_gives_a_job_measured_nowhere_one_gpu() -> None:
    job = Job("new", 1, 8, gpu_types=(ANY_GPU_TYPE,),
              goodput=dataclasses.replace(_model(1.0), perf=None, max_profiled_replicas=0))
    choice = choose_types("sia", [job], Cluster((Node("s0", 4, "slow"), Node("f0", 4, "fast"))))
    assert choice.counts == {"new": 1}


@pytest.mark.parametrize("policy", ["voda", "sia"])
def test_a_type_no_model_covers_is_projected_with_the_categorys_profiled_speeds(
        policy: str) -> None:
    cluster = Cluster((Node("s0", 4, "slow"), Node("f0", 4, "fast")))
    job = Job("j", 1, 4, epochs=10, gpu_types=(ANY_GPU_TYPE,), goodput=_model(1.0),
              goodput_by_type={"slow": _model(1.0)}, category="c", gpu_type="slow")
    faster = dataclasses.replace(job, category_type_speeds=(("fast", 5.0), ("slow", 1.0)))
    slower = dataclasses.replace(job, category_type_speeds=(("fast", 0.2), ("slow", 1.0)))
    assert choose_types(policy, [faster], cluster).types == {"j": "fast"}
    assert choose_types(policy, [slower], cluster).types == {"j": "slow"}
    nonsense = dataclasses.replace(job, category_type_speeds=(("fast", math.inf), ("slow", 0.0)))
    assert choose_types(policy, [nonsense], cluster) == choose_types(policy, [job], cluster)


def test_a_projection_takes_the_profiled_speeds_over_the_measured_ratios() -> None:
    """One mechanism for every consumer of a job's model on a type (the policies, and the
    model the per-type decision is handed): hetero_models.type_model."""
    from voda.core.allocation.hetero_models import one_gpu_goodput

    slow = _model(1.0)
    job = Job("j", 1, 4, goodput=slow, goodput_by_type={"slow": slow}, gpu_type="slow",
              category_type_speeds=(("fast", 5.0), ("slow", 1.0)))
    measured = {("slow", "fast"): 2.0}
    fast = type_model(job, "fast", measured)
    assert fast is not None
    assert one_gpu_goodput(fast) == pytest.approx(5.0 * one_gpu_goodput(slow), rel=1e-6)
    plain = type_model(dataclasses.replace(job, category_type_speeds=()), "fast", measured)
    assert plain is not None
    assert one_gpu_goodput(plain) == pytest.approx(2.0 * one_gpu_goodput(slow), rel=1e-6)


def test_sia_judges_a_job_only_by_the_models_it_reported_itself() -> None:
    """As in Sia's artifact: a job whose models are all its category's (Voda's policy
    borrows them) is measured nowhere, and starts on one GPU."""
    cluster = Cluster((Node("s0", 4, "slow"), Node("f0", 4, "fast")))
    own = dataclasses.replace(_flexible("j", 2.0), max_workers=4)
    assert choose_types("sia", [own], cluster).counts == {"j": 4}
    borrowed = dataclasses.replace(own, category_model_types=("fast", "slow"))
    assert choose_types("sia", [borrowed], cluster).counts == {"j": 1}
    half = dataclasses.replace(own, category_model_types=("fast",))  # its own on slow
    assert choose_types("sia", [half], cluster).counts == {"j": 4}


def test_sia_prices_every_type_at_the_statistics_of_the_jobs_latest_report() -> None:
    """As in Sia's artifact, where a job keeps a step-time fit per type and one set of
    gradient statistics: a job that left `a` early in its training (a small noise scale:
    more GPUs gain little) and has since measured a large one on `b` is priced on `a` at the
    large one, so it moves back to grow there; at the stale statistics it stayed on one GPU."""
    early, late = (dataclasses.replace(_model(1.0), grad_var=v) for v in (0.01, 100.0))
    job = Job("j", 1, 4, epochs=10, gpu_types=(ANY_GPU_TYPE,), goodput=late,
              goodput_by_type={"a": early, "b": late}, category="c", gpu_type="b",
              current_workers=1, running_seconds=70.0)
    cluster = Cluster((Node("a0", 4, "a"), Node("b0", 1, "b")))
    choice = choose_types("sia", [job], cluster)
    assert (choice.types, choice.counts) == ({"j": "a"}, {"j": 4})
    stale = dataclasses.replace(job, goodput_by_type={"a": early, "b": early}, goodput=early)
    choice = choose_types("sia", [stale], cluster)  # where the job itself is early
    assert (choice.types, choice.counts) == ({"j": "b"}, {"j": 1})


def test_a_job_measured_on_one_type_is_projected_onto_types_no_category_compared() -> None:
    only_slow = {"slow": _model(1.0)}
    jobs = [Job(f"j{i}", 1, 4, epochs=10, gpu_types=(ANY_GPU_TYPE,), goodput=_model(1.0),
                goodput_by_type=only_slow, category="c", gpu_type="slow") for i in range(2)]
    assert type_model(jobs[0], "fast", type_ratios(jobs)) is not None
    choice = choose_types("sia", jobs, Cluster((Node("s0", 1, "slow"), Node("f0", 1, "fast"))))
    assert sorted(choice.types.values()) == ["fast", "slow"]  # neither waits for the other
    assert choice.counts == {"j0": 1, "j1": 1}


def test_a_ratio_no_category_measured_goes_through_a_type_measured_with_both() -> None:
    ratios = {("a", "b"): 2.0, ("b", "c"): 3.0}
    assert type_ratio(ratios, "a", "b") == 2.0
    assert type_ratio(ratios, "a", "c") == pytest.approx(6.0)
    assert type_ratio(ratios, "c", "a") == 1.0


def test_pollux_adapted_puts_the_biggest_job_on_the_type_with_most_free_gpus() -> None:
    cluster = Cluster((Node("s0", 4, "slow"), Node("s1", 4, "slow"), Node("f0", 4, "fast")))
    jobs = [dataclasses.replace(_flexible("big", 2.0), max_workers=8)]
    choice = choose_types("pollux", jobs, cluster)
    assert choice.types == {"big": "slow"}


def test_decide_hetero_without_flexible_jobs_is_decide() -> None:
    cluster = Cluster((Node("s0", 4, "slow"), Node("f0", 8, "fast")))
    jobs = [Job("a", 1, 4, gpu_type="slow"), Job("b", 1, 8, gpu_type="fast"),
            Job("c", 2, 8, gpu_type="fast", submit_time=1.0)]
    algorithm, placer = create("ElasticFIFO"), get_placer("topology")
    plan, choice, typed = decide_hetero(jobs, cluster, {}, algorithm, placer)
    assert choice == TypeChoice() and typed == jobs
    assert plan == decide(jobs, cluster, {}, algorithm, placer)


def test_decide_hetero_moves_a_job_to_its_new_type() -> None:
    job = dataclasses.replace(_flexible("m", 3.0), gpu_type="slow", current_workers=1)
    plan, _choice, typed = decide_hetero([job], CLUSTER, {"m": (("s0", 1),)},
                                        create("ElasticFIFO"), get_placer("topology"),
                                        penalty=0.0)
    assert typed[0].gpu_type == "fast"
    assert plan.placement == {"m": (("f0", 1),)}


def test_gpu_types_are_bounded() -> None:
    assert any("gpu_types" in e for e in validate_job(Job("x", gpu_types=("",))))
    many = tuple(f"t{i}" for i in range(17))
    assert any("at most 16" in e for e in validate_job(Job("x", gpu_types=many)))


# ----- the engine and the REST view ----------------------------------------------------------
def test_the_scheduler_gives_a_flexible_job_a_type_and_the_job_view_says_why() -> None:
    from voda.api import views
    from voda.api.schemas import JobDetail
    from voda.backends.memory import InMemoryBackend
    from voda.engine.scheduler import Scheduler, SchedulerSettings

    nodes = [Node("s0", 4, "slow"), Node("f0", 4, "fast")]
    s = Scheduler(InMemoryBackend(nodes), SchedulerSettings(algorithm="ElasticFIFO"))
    s.submit(dataclasses.replace(_flexible("a", 3.0), max_workers=4))
    s.submit(Job("pinned", 1, 4, gpu_type="slow"))
    s.step(0.0)
    a = s.jobs["a"]
    assert a.gpu_type == "fast" and dict(a.placement) == {"f0": 4}
    assert s.jobs["pinned"].gpu_type == "slow" and dict(s.jobs["pinned"].placement) == {"s0": 4}
    doc = views.describe(a, 1.0, s.accounted_until, s.cluster, None)
    JobDetail.model_validate({**doc, "user": "u", "kind": "k"})
    assert doc["gpu_types"] == [ANY_GPU_TYPE]
    assert doc["gpu_type_reason"].startswith("on fast: its fastest type")


def test_a_cluster_of_one_type_decides_as_before() -> None:
    """Every job naming one type: the scheduler takes decide()'s path, not the policy's."""
    from voda.backends.memory import InMemoryBackend
    from voda.engine.scheduler import Scheduler, SchedulerSettings

    nodes = [Node("s0", 4, "slow"), Node("f0", 8, "fast")]
    jobs = [Job("a", 1, 4, gpu_type="slow"), Job("b", 2, 8, gpu_type="fast")]
    s = Scheduler(InMemoryBackend(nodes), SchedulerSettings(algorithm="ElasticFIFO"))
    for job in jobs:
        s.submit(job)
    plan = s.step(0.0)
    assert plan is not None
    expected = decide(jobs, Cluster(tuple(nodes)), {}, create("ElasticFIFO"), s.placer)
    assert plan.placement == expected.placement and plan.allocation == expected.allocation
    assert all(r.type_reason is None for r in s.jobs.values())


# ----- voda simulate on Sia's cluster ----------------------------------------------------------
def test_sia_workload_runs_on_the_heterogeneous_cluster_on_several_types(tmp_path) -> None:
    from importlib import resources

    from voda.engine.scheduler import Scheduler, SchedulerObserver
    from voda.sim.cluster_file import parse_cluster
    from voda.sim.presets import apply_preset
    from voda.sim.runner import simulate
    from voda.sim.workloads import load_workload

    data = resources.files("voda") / "data" / "sia"
    # 12 jobs: more than the A100s (16) serve at their best counts, so some run elsewhere
    rows = (data / "workloads" / "saturn" / "workload-1.csv").read_text().splitlines()[:13]
    small = tmp_path / "small.csv"
    small.write_text("\n".join(rows) + "\n")
    cluster = parse_cluster(str(data / "clusters" / "heterogeneous-64.yaml"))
    schedulers: list[Scheduler] = []

    def keep(scheduler: Scheduler) -> SchedulerObserver:
        schedulers.append(scheduler)
        return SchedulerObserver()

    result = simulate(load_workload(small, job_model="adaptive"), cluster,
                      apply_preset("sia", "Voda"), observe=keep)
    assert result.unfinished == 0 and len(result.jobs) == 12
    backend = schedulers[0].backend
    types = {sim.gpu_type for sim in backend.jobs.values()}  # type: ignore[attr-defined]
    assert len(types) >= 2 and types <= {"aws", "rtx", "dgx-ext"}
    cifar = backend.jobs["cifar10-0"]  # type: ignore[attr-defined]
    assert cifar.slowdown == 1.8  # the sia preset's calibration
    speeds = schedulers[0].settings.type_speeds  # each model's profiled speeds, for Sia
    assert set(speeds) == {spec.category for spec in load_workload(small).jobs}
    assert all(set(v) == {"aws", "rtx", "dgx-ext"} for v in speeds.values())


def test_voda_prices_every_type_at_the_jobs_own_gradient_statistics() -> None:
    """A young job runs on `slow`; its own statistics there (a small noise scale: large
    batches gain little) against its category's later ones on `fast`, a type no faster,
    made `fast` look 4x better: Voda moved it for nothing. Its statistics are its own on
    every type, so it stays, and the category's serve only a job that has measured none."""
    early, late = dataclasses.replace(_model(1.0), grad_var=0.01), \
        dataclasses.replace(_model(1.0), grad_var=100.0, max_profiled_replicas=16)
    shapes = type_shapes(Cluster((Node("s0", 4, "slow"), Node("f0", 4, "fast"))))
    running = Job("r", 1, 4, epochs=10, gpu_types=(ANY_GPU_TYPE,), goodput=early,
                  goodput_by_type={"slow": early, "fast": late}, category="c",
                  gpu_type="slow", current_workers=1, running_seconds=100.0)
    assert voda_choice([running], shapes, {"slow": 4, "fast": 4}, 30.0).types == {"r": "slow"}
    unmeasured = dataclasses.replace(running, goodput=dataclasses.replace(
        early, grad_sqr=0.0, grad_var=0.0), current_workers=0)
    assert with_one_statistics(unmeasured).goodput_by_type["slow"].grad_var == 100.0


def test_the_solvers_stray_prints_never_reach_standard_output(
        capfd: pytest.CaptureFixture[str]) -> None:
    """SciPy 1.17's HiGHS prints a debug line to the C stdout on this program whatever its
    output options; `voda simulate --json` must still print only its JSON there."""
    from voda.core.allocation.hetero_program import solve_rows

    doc = json.loads((Path(__file__).parent / "data" / "highs-stray-print.json").read_text())
    rows = [(int(i), str(t), int(n)) for i, t, n in doc["rows"]]
    taken = solve_rows(rows, np.array(doc["cost"]), doc["jobs"], doc["types"], doc["free"],
                       doc["fixed"], doc["gap"])
    out, err = capfd.readouterr()
    assert "Highs" not in out and "Highs" not in err
    assert taken.sum() >= 1  # a solution, as before


def test_what_else_reaches_standard_output_during_a_solve_is_kept(
        capfd: pytest.CaptureFixture[str]) -> None:
    from voda.core.allocation import hetero_program

    with hetero_program._without_solver_debug_lines():
        print("kept line", flush=True)
        os.write(1, b"HighsMipSolverData::transformNewIntegerFeasibleSolution x;\nraw kept\n")
    out, _ = capfd.readouterr()
    assert out == "kept line\nraw kept\n"


def test_a_long_job_older_than_its_remaining_time_weighs_at_least_the_equal_share() -> None:
    remaining = np.array([1000.0, 900.0, 10.0, 20.0, 30.0, 40.0])
    weights = rank_weights_large_m(remaining)
    equal = float(np.sqrt(np.mean(weights ** 2)))
    young, old = 100.0, 5000.0  # ages: below and above their remaining time (1000, 900)
    floored = floored_weights(weights, remaining, np.array([young, old, 1e6, 0, 0, 0]))
    assert floored[0] == pytest.approx(equal * LONG_JOB_FLOOR)  # young: half the share
    assert floored[1] == pytest.approx(equal)  # starved: the whole equal share
    assert floored[2:].tolist() == weights[2:].tolist()  # short jobs: as they were

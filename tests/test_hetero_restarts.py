"""Each job's own restart cost, and restarts under way, on heterogeneous GPUs: the simulator
reports them, the engine hands them to the policies, Sia and Voda price and respect them."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from voda.core.allocation.hetero import choose_types
from voda.core.allocation.hetero_models import type_shapes
from voda.core.allocation.hetero_voda import voda_choice
from voda.core.allocation.registry import create
from voda.core.allocation.voda import RestartCharge, Voda, restart_charge
from voda.core.goodput import GoodputModel, PerfParams
from voda.core.hetero_plan import decide_hetero
from voda.core.model import ANY_GPU_TYPE, Cluster, Job, Node, validate_job
from voda.core.placement.registry import get_placer
from voda.sim.backend import SimBackend
from voda.sim.workloads import JobSpec


def _spec() -> JobSpec:
    return JobSpec("j", 0.0, 0, 1, 8, 90, 2, profile="imagenet", category="imagenet",
                   per_gpu_batch=100)


def _model(speed: float) -> GoodputModel:
    perf = PerfParams(0.1 / speed, 0.01 / speed, 0.05 / speed, 0.01 / speed, 0.01 / speed,
                      0.001 / speed, 1.0)
    return GoodputModel(perf, 1.0, 1.0, 32, 32 * 64, 32, 32, max_profiled_replicas=8,
                        epoch_samples=1e6)


def _running(fast_gain: float, **kw: object) -> Job:
    """A job on one slow GPU that would run `fast_gain` times faster on the fast type."""
    models = {"slow": _model(1.0), "fast": _model(fast_gain)}
    return Job("r", 1, 1, epochs=10, gpu_types=(ANY_GPU_TYPE,), goodput=models["slow"],
               goodput_by_type=models, category="r", gpu_type="slow", current_workers=1,
               **kw)  # type: ignore[arg-type]


TWO = Cluster((Node("s0", 1, "slow"), Node("f0", 1, "fast")))


# ----- the simulator and the engine ----------------------------------------------------------
def test_the_simulator_reports_a_jobs_own_restart_cost_and_the_restart_left() -> None:
    spec = _spec()
    backend = SimBackend([Node("t4", 4, "aws")], {"j": spec}, penalties={"imagenet": 250.0})
    assert backend.restart_cost("j") == 250.0 and backend.restoring_seconds("j") == 0.0
    backend.start(Job("j"), (("t4", 1),))
    assert backend.restoring_seconds("j") == 250.0
    backend.advance(100.0)
    assert backend.restoring_seconds("j") == pytest.approx(150.0)
    backend.advance(400.0)
    assert backend.restoring_seconds("j") == 0.0
    told = SimBackend([Node("t4", 4, "aws")], {"j": spec}, penalties={"imagenet": 250.0},
                      told_penalties={"imagenet": 200.0})  # what the policies are told
    told.start(Job("j"), (("t4", 1),))
    assert told.restart_cost("j") == 200.0 and told.restoring_seconds("j") == 250.0
    plain = SimBackend([Node("t4", 4, "aws")], {"j": spec})  # no per-model penalty: unknown
    plain.start(Job("j"), (("t4", 1),))
    assert plain.restart_cost("j") == 0.0 and plain.restoring_seconds("j") == 0.0


def test_the_engine_hands_the_backends_restart_cost_to_the_policies() -> None:
    from voda.engine.scheduler import Scheduler, SchedulerSettings

    backend = SimBackend([Node("t4", 4, "aws")], {"j": _spec()}, penalties={"imagenet": 250.0})
    s = Scheduler(backend, SchedulerSettings(algorithm="ElasticFIFO"))
    s.submit(Job("j", 1, 1, gpu_type="aws"))
    s.step(0.0)
    backend.advance(60.0)
    s.reschedule(60.0)  # a decision at t = 60
    record = s.jobs["j"]
    assert record.restart_cost == 250.0
    assert record.restoring_seconds == pytest.approx(190.0)
    assert record.snapshot().restoring_seconds == pytest.approx(190.0)


def test_a_backend_that_charges_no_restarts_is_not_asked_per_job() -> None:
    """charges_restarts() False: every job's restart figures are 0, as asking would say."""
    from voda.engine.scheduler import Scheduler, SchedulerSettings

    plain = SimBackend([Node("t4", 4, "aws")], {"j": _spec()})
    charged = SimBackend([Node("t4", 4, "aws")], {"j": _spec()}, penalties={"imagenet": 1.0})
    assert not plain.charges_restarts() and charged.charges_restarts()
    asked: list[str] = []
    plain.restart_cost = lambda name: asked.append(name) or 0.0  # type: ignore[method-assign]
    s = Scheduler(plain, SchedulerSettings(algorithm="ElasticFIFO"))
    s.submit(Job("j", 1, 1, gpu_type="aws", restart_cost=30.0, restoring_seconds=5.0))
    s.reschedule(0.0)
    assert asked == []
    record = s.jobs["j"]
    assert record.restart_cost == 0.0 and record.restoring_seconds == 0.0


def test_restart_figures_are_validated_by_name() -> None:
    assert any("restart_cost" in e for e in validate_job(Job("x", restart_cost=-1.0)))
    assert any("restoring_seconds" in e
               for e in validate_job(Job("x", restoring_seconds=math.inf)))


# ----- Sia -----------------------------------------------------------------------------------
def test_sia_charges_a_job_its_own_restart_cost() -> None:
    # Age 1000 s, 3 restarts: at 30 s a restart keeps 0.88 of a 3x gain (worth it), at the
    # job's own 250 s it keeps 0.2 (not worth it).
    cheap = _running(3.0, running_seconds=1000.0, restarts=3)
    dear = dataclasses.replace(cheap, restart_cost=250.0)
    assert choose_types("sia", [cheap], TWO).types == {"r": "fast"}
    assert choose_types("sia", [dear], TWO).types == {"r": "slow"}


def test_sia_leaves_a_job_where_it_is_while_its_restart_is_under_way() -> None:
    job = _running(10.0, running_seconds=1000.0)
    assert choose_types("sia", [job], TWO).types == {"r": "fast"}
    held = choose_types("sia", [dataclasses.replace(job, restoring_seconds=40.0)], TWO)
    assert held.types == {"r": "slow"} and held.counts == {"r": 1}


# ----- Voda ----------------------------------------------------------------------------------
def test_voda_prices_a_dear_restart_over_a_longer_horizon() -> None:
    job = Job("x")
    assert restart_charge(job, 30.0, 240.0) == RestartCharge(30.0, 240.0)
    assert restart_charge(dataclasses.replace(job, rescale_delay=5.0), 30.0, 240.0) == \
        RestartCharge(35.0, 240.0)
    dear = restart_charge(dataclasses.replace(job, restart_cost=250.0), 30.0, 240.0)
    assert dear.penalty == 250.0 and dear.horizon == pytest.approx(240.0 * math.sqrt(250 / 30))
    long = np.array([1e5])
    assert dear.share(long)[0] > 30.0 / 240.0  # a larger share of a long job's speed
    assert dear.share(long)[0] < 1.0  # yet never the whole of it: it can still be moved


def test_a_job_that_restarted_often_is_charged_the_share_of_its_life_it_lost() -> None:
    job = Job("x", restart_cost=100.0, running_seconds=1000.0, restarts=3)
    charge = restart_charge(job, 30.0, 240.0)
    assert charge.lost == pytest.approx(0.3)  # 3 x 100 s of its 1,000 s
    fresh = restart_charge(dataclasses.replace(job, restarts=0), 30.0, 240.0)
    assert charge.share(np.array([1e5]))[0] == pytest.approx(fresh.share(np.array([1e5]))[0] + 0.3)


def test_voda_moves_a_dear_job_less_readily() -> None:
    """Growing from 1 to 2 GPUs at a 1.5x speedup pays at 30 s, not at 250 s."""
    model = dataclasses.replace(_model(1.0), epoch_samples=1e9)
    base = Job("g", 1, 2, epochs=100, goodput=model, category="g", gpu_type="slow",
               current_workers=1, running_seconds=1e4)
    voda = Voda(gpus_per_node=2)
    curve = voda.curve(base, None, 2)
    cheap = voda.utility(base, curve, 1.0)
    dear = voda.utility(dataclasses.replace(base, restart_cost=250.0), curve, 1.0)
    assert dear[1] == cheap[1]  # staying costs nothing either way
    assert 0 < dear[2] < cheap[2]  # the change keeps less of its speed, but some


def test_voda_leaves_a_job_where_it_is_while_its_restart_is_under_way() -> None:
    shapes = type_shapes(TWO)
    job = _running(10.0, running_seconds=1000.0)
    assert voda_choice([job], shapes, {"slow": 1, "fast": 1}, 0.0).types == {"r": "fast"}
    held = dataclasses.replace(job, restoring_seconds=40.0)
    assert voda_choice([held], shapes, {"slow": 1, "fast": 1}, 0.0).types == {"r": "slow"}


def test_the_per_type_decision_holds_a_restarting_jobs_count() -> None:
    """Another algorithm than Voda counts on the type Voda's policy chose, and holds a
    restarting job; with Voda, the policy's program holds it itself."""
    cluster = Cluster((Node("s0", 4, "slow"), Node("f0", 4, "fast")))
    job = dataclasses.replace(_running(1.0), max_workers=4, restoring_seconds=40.0)
    fifo = create("ElasticFIFO")
    _plan, _choice, typed = decide_hetero([job], cluster, {"r": (("s0", 1),)}, fifo,
                                          get_placer("topology"))
    assert typed[0].gpu_type == "slow"
    assert (typed[0].min_workers, typed[0].max_workers) == (1, 1)
    free = dataclasses.replace(job, restoring_seconds=0.0)
    _plan, _choice, typed = decide_hetero([free], cluster, {"r": (("s0", 1),)}, fifo,
                                          get_placer("topology"))
    assert typed[0].max_workers == 4
    plan, choice, _typed = decide_hetero([job], cluster, {"r": (("s0", 1),)}, create("Voda"),
                                         get_placer("topology"))
    assert choice.counts == {"r": 1} and dict(plan.placement["r"]) == {"s0": 1}


# ----- what people see -----------------------------------------------------------------------
def test_top_and_the_job_page_show_the_type_a_job_runs_on_and_why() -> None:
    from rich.console import Console

    from voda.api import views
    from voda.api.ui import views as ui_views
    from voda.api.ui.routes import allocation_chart, epoch_chart, render, speedup_chart
    from voda.backends.memory import InMemoryBackend
    from voda.cli.cluster import cluster_screen
    from voda.config import User
    from voda.engine.scheduler import Scheduler, SchedulerSettings

    models = {"slow": _model(1.0), "fast": _model(3.0)}
    nodes = [Node("s0", 4, "slow"), Node("f0", 4, "fast")]
    s = Scheduler(InMemoryBackend(nodes), SchedulerSettings(algorithm="ElasticFIFO"))
    s.submit(Job("a", 1, 4, epochs=10, gpu_types=(ANY_GPU_TYPE,), goodput=models["slow"],
                 goodput_by_type=models, category="a"))
    s.step(0.0)
    shown = views.cluster_view(s, User("admin", admin=True), {"slow": "ElasticFIFO",
                                                              "fast": "ElasticFIFO"}, ())
    assert [j["gpu_type"] for j in shown["jobs"].values()] == ["fast"]
    console = Console(width=160, no_color=True)
    with console.capture() as captured:
        console.print(cluster_screen(shown))
    row = next(line for line in captured.get().splitlines() if "│ a " in line)
    assert row.split("│")[-2].strip() == "fast"
    doc = {**views.describe(s.jobs["a"], 1.0, s.accounted_until, s.cluster, None),
           "user": "alice", "kind": "k"}
    speed = ui_views.speed_series(doc["epoch_time_by_workers"], doc["max_workers"])
    html = render("_job.html", job=doc, history=[], log=None, now=1.0, log_lines=10,
                  allocation_chart=allocation_chart(ui_views.allocation_series(doc, [], 1.0)),
                  measured=False, epoch_chart=epoch_chart(speed),
                  speedup_chart=speedup_chart(speed))
    assert "(accepts any type): on fast: its fastest type" in html

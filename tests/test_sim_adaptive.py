"""Batch-adaptive jobs in the simulator: they measure, fit, pick their batch and report it."""

from __future__ import annotations

from pathlib import Path

from voda.core.model import Job, Node
from voda.engine.events import EventKind
from voda.sim.backend import ADAPT_SECONDS, SimBackend
from voda.sim.cluster_file import parse_cluster
from voda.sim.presets import apply_preset
from voda.sim.runner import simulate
from voda.sim.workloads import load_workload

POLLUX_HEADER = "name,time,application,num_replicas,batch_size\n"


def specs(tmp_path: Path, rows: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "w.csv"
    path.write_text(POLLUX_HEADER + rows)
    return {j.name: j for j in load_workload(path, job_model="adaptive").jobs}


def backend(tmp_path: Path, rows: str, integer_time: bool = True) -> SimBackend:
    nodes = [Node(f"node-{i}", 4) for i in range(4)]
    return SimBackend(nodes, specs(tmp_path, rows), penalty=30.0, integer_time=integer_time)


def reports(b: SimBackend) -> list:  # type: ignore[type-arg]
    return [e for e in b.events() if e.kind is EventKind.GOODPUT_REPORTED]


def test_a_new_job_starts_at_its_smallest_batch_then_picks_one_by_goodput(tmp_path) -> None:
    b = backend(tmp_path, "cifar10-0,0,cifar10,4,2048\n")
    b.start(Job("cifar10-0"), (("node-0", 4),))
    sim = b.jobs["cifar10-0"]
    assert sim.split is not None and sim.split.effective_batch == 128  # max(M0, 32 x 4)
    b.advance(30.0)  # the restart penalty: nothing measured yet
    assert reports(b) == [] and sim.agent is not None and not sim.agent.measured
    b.advance(60.0)
    first = reports(b)[0]  # an epoch of cifar10 takes seconds: one report per stretch
    model = first.data["goodput"]
    assert first.time == 30.0 and model.perf is not None and model.max_profiled_replicas == 4
    assert model.init_batch == 128 and model.max_batch == 4096
    assert (1, 4, 32) in sim.agent.measured  # 128 on 4 GPUs: micro-batch 32
    choice = sim.agent.model().choose(1, 4)  # what it picks is the best of its own model
    assert (sim.split.atomic_bsz, sim.split.accum_steps) == (choice.atomic_bsz,
                                                             choice.accum_steps)


def test_a_fixed_batch_job_keeps_its_batch_but_reports_its_goodput(tmp_path) -> None:
    b = backend(tmp_path, "ncf-0,0,ncf,1,32768\n")
    b.start(Job("ncf-0"), (("node-0", 1),))
    b.advance(120.0)
    assert {r.data["goodput"].fixed_batch for r in reports(b)} == {32768}
    assert b.jobs["ncf-0"].split.effective_batch == 32768


def test_in_the_lazy_mode_a_job_measures_and_re_picks_long_before_its_epoch_ends(tmp_path):
    b = backend(tmp_path, "imagenet-0,0,imagenet,4,3200\n", integer_time=False)
    b.start(Job("imagenet-0"), (("node-0", 4),))
    b.advance(30.0 + ADAPT_SECONDS)
    sim = b.jobs["imagenet-0"]
    assert sim.epoch == 0, "an ImageNet epoch takes far longer than a minute"
    assert [r.time for r in reports(b)] == [30.0]
    assert sim.agent is not None and (1, 4, 50) in sim.agent.measured  # max(200, 20 x 4) / 4


def test_the_scheduler_hands_the_reported_model_to_the_algorithm(tmp_path) -> None:
    from voda.engine.scheduler import Scheduler, SchedulerSettings

    b = backend(tmp_path, "cifar10-0,0,cifar10,4,2048\n")
    sched = Scheduler(b, SchedulerSettings(algorithm="Pollux", rate_limit_seconds=0.0))
    sched.submit(Job("cifar10-0", 1, 64, submit_time=0.0, epochs=100))
    sched.step(0.0)
    b.advance(120.0)
    sched.step(120.0)
    snapshot = sched.jobs["cifar10-0"].snapshot()
    assert snapshot.goodput is not None and snapshot.goodput.perf is not None
    assert snapshot.restarts >= 0


def test_adaptive_jobs_finish_sooner_under_pollux_than_at_their_smallest_batch(tmp_path) -> None:
    rows = "cifar10-0,0,cifar10,4,2048\ncifar10-1,30,cifar10,4,2048\n"
    path = tmp_path / "w.csv"
    path.write_text(POLLUX_HEADER + rows)
    settings = apply_preset("pollux", "Pollux")
    adaptive = simulate(load_workload(path, job_model="adaptive"), parse_cluster("2x4"), settings)
    assert adaptive.unfinished == 0
    fixed = simulate(load_workload(path, job_model="fixed-batch"), parse_cluster("2x4"),
                     apply_preset("pollux", "Pollux"))
    assert adaptive.avg_jct < fixed.avg_jct

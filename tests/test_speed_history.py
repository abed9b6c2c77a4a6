"""What the engine learns from epoch reports: not the restore epoch, and per GPU type."""

from __future__ import annotations

import pytest
from builders import make_cluster, make_job

from voda.backends.memory import InMemoryBackend
from voda.engine.scheduler import Scheduler, SchedulerSettings


def engine(**kwargs: object) -> tuple[Scheduler, InMemoryBackend]:
    nodes = make_cluster().nodes(1, gpus=4, gpu_type="a100", prefix="a") \
        .nodes(1, gpus=4, gpu_type="v100", prefix="v").node_list()
    backend = InMemoryBackend(nodes)
    settings = SchedulerSettings(algorithm="ElasticFIFO", rate_limit_seconds=0.0)
    return Scheduler(backend, settings, **kwargs), backend  # type: ignore[arg-type]


def test_the_first_epoch_after_a_start_or_a_resize_is_progress_but_not_a_speed() -> None:
    sched, backend = engine()
    sched.submit(make_job("x").workers(1, 4).epochs(10).category("resnet").gpu_type("a100")
                 .submitted_at(0).obj())
    sched.step(0.0)
    backend.report_epoch("x", 90.0, 1, 90.0, 4)  # includes restoring the checkpoint
    sched.step(90.0)
    record = sched.jobs["x"]
    assert record.completed_epochs == 1
    assert record.epoch_time_by_workers == {}
    backend.report_epoch("x", 120.0, 2, 30.0, 4)
    sched.step(120.0)
    assert record.epoch_time_by_workers == {4: 30.0}
    # a second job on the type makes x shrink: its next epoch is a restore again
    sched.submit(make_job("y").workers(1, 4).category("other").gpu_type("a100")
                 .submitted_at(121).obj())
    sched.step(121.0)
    assert record.current_workers == 2
    backend.report_epoch("x", 200.0, 3, 79.0, 2)
    backend.report_epoch("x", 250.0, 4, 50.0, 2)
    sched.step(250.0)
    assert record.epoch_time_by_workers == {4: 30.0, 2: 50.0}
    assert record.completed_epochs == 4


def test_speed_learned_on_one_gpu_type_does_not_seed_another() -> None:
    sched, backend = engine()
    sched.submit(make_job("fast").workers(4, 4).epochs(10).category("resnet").gpu_type("a100")
                 .submitted_at(0).obj())
    sched.step(0.0)
    backend.report_epoch("fast", 30.0, 1, 30.0, 4)
    backend.report_epoch("fast", 40.0, 2, 10.0, 4)
    sched.step(40.0)
    assert sched.category_history == {("resnet", "a100"): {4: 10.0}}
    sched.submit(make_job("slow").workers(4, 4).category("resnet").gpu_type("v100")
                 .submitted_at(41).obj())
    sched.submit(make_job("twin").workers(4, 4).category("resnet").gpu_type("a100")
                 .submitted_at(41).obj())
    assert sched.jobs["slow"].epoch_time_by_workers == {}, "an A100 speed says nothing of V100"
    assert sched.jobs["twin"].epoch_time_by_workers == {4: 10.0}
    sched.step(41.0)
    backend.report_epoch("slow", 100.0, 1, 60.0, 4)
    backend.report_epoch("slow", 140.0, 2, 40.0, 4)
    sched.step(140.0)
    assert sched.category_history == {("resnet", "a100"): {4: 10.0},
                                      ("resnet", "v100"): {4: 40.0}}, "nothing overwritten"


def test_layouts_are_shared_per_category_and_gpu_type() -> None:
    sched, _ = engine(layout_history={("yolo", "a100"): {(4, 1): 80.0}})
    sched.submit(make_job("a").rigid(4).category("yolo").gpu_type("a100").submitted_at(0).obj())
    sched.submit(make_job("v").rigid(4).category("yolo").gpu_type("v100").submitted_at(0).obj())
    assert dict(sched.jobs["a"].layout_throughput) == {(4, 1): 80.0}
    assert dict(sched.jobs["v"].layout_throughput) == {}
    assert sched.jobs["v"].layout_throughput is sched.layout_history[("yolo", "v100")]


@pytest.mark.parametrize("gpu_type", ["a100", "v100"])
def test_history_given_at_start_seeds_only_its_own_type(gpu_type: str) -> None:
    sched, _ = engine(category_history={("resnet", "a100"): {1: 100.0, 2: 55.0}})
    sched.submit(make_job("j").workers(1, 2).category("resnet").gpu_type(gpu_type)
                 .submitted_at(0).obj())
    expected = {1: 100.0, 2: 55.0} if gpu_type == "a100" else {}
    assert sched.jobs["j"].epoch_time_by_workers == expected


def test_only_the_epoch_that_includes_the_restore_is_left_out() -> None:
    sched, backend = engine()
    sched.submit(make_job("x").workers(4, 4).epochs(10).epochs(10, completed=3)
                 .gpu_type("a100").submitted_at(0).obj())
    sched.step(0.0)  # starts from its checkpoint after epoch 3: epoch 4 holds the restore
    backend.report_epoch("x", 60.0, 5, 20.0, 4)  # epoch 4's report never came
    sched.step(60.0)
    assert sched.jobs["x"].epoch_time_by_workers == {4: 20.0}


def test_a_category_keeps_its_best_measured_throughput_model_per_gpu_type() -> None:
    from voda.core.goodput import GoodputModel, PerfParams
    from voda.engine.events import Event, EventKind

    def reported(replicas: int) -> GoodputModel:
        return GoodputModel(perf=PerfParams(0.1, 0.01, 0.1, 0.01, 0.1, 0.01, 1.1),
                            grad_sqr=1.0, grad_var=1.0, init_batch=128, max_batch=4096,
                            min_local=32, max_local=256, max_profiled_replicas=replicas)

    sched, _ = engine()
    for name in ("a", "b"):
        sched.submit(make_job(name).workers(1, 4).category("bert").gpu_type("a100")
                     .submitted_at(0).obj())
    wide, narrow = reported(4), reported(2)
    sched.handle(Event(EventKind.GOODPUT_REPORTED, 10.0, job="a", data={"goodput": wide}))
    sched.handle(Event(EventKind.GOODPUT_REPORTED, 11.0, job="b", data={"goodput": narrow}))
    assert sched.goodput_history == {("bert", "a100"): wide}, "the model measured on more GPUs"
    assert sched.jobs["b"].goodput is narrow, "a job keeps its own report"
    assert sched.jobs["b"].category_goodput is wide
    sched.delete("a", 12.0)
    later = sched.submit(make_job("c").category("bert").gpu_type("a100").submitted_at(13).obj())
    other_type = sched.submit(make_job("d").category("bert").gpu_type("v100")
                              .submitted_at(13).obj())
    assert later.snapshot().category_goodput is wide, "a finished job's measurement is kept"
    assert other_type.category_goodput is None, "an A100 model says nothing of a V100"


def test_a_category_keeps_the_mean_of_its_jobs_first_gradient_statistics() -> None:
    """Only a job's first report with gradient statistics counts (early in its training);
    the decision hands the mean to the category's jobs that accept several types."""
    from voda.core.goodput import GoodputModel, PerfParams
    from voda.engine.events import Event, EventKind
    from voda.engine.hetero import fill_type_models

    def reported(sqr: float, var: float) -> GoodputModel:
        return GoodputModel(perf=PerfParams(0.1, 0.01, 0.1, 0.01, 0.1, 0.01, 1.1),
                            grad_sqr=sqr, grad_var=var, init_batch=128, max_batch=4096,
                            min_local=32, max_local=256, max_profiled_replicas=2)

    sched, _ = engine()
    for name in ("a", "b", "c"):
        sched.submit(make_job(name).workers(1, 4).category("bert").gpu_type("a100")
                     .submitted_at(0).obj())
    sched.submit(make_job("x").workers(1, 4).category("yolo").gpu_type("a100")
                 .submitted_at(0).obj())
    for time, name, sqr, var in ((10.0, "a", 0.0, 0.0), (11.0, "a", 2.0, 1.0),
                                 (12.0, "a", 9.0, 9.0), (13.0, "b", 4.0, 3.0)):
        sched.handle(Event(EventKind.GOODPUT_REPORTED, time, job=name,
                           data={"goodput": reported(sqr, var)}))
    assert sched.early_gradients.of("bert") == (3.0, 2.0), "a's first with statistics, b's"
    assert sched.early_gradients.of("yolo") is None
    flexible = sched.jobs["c"]
    flexible.gpu_types = ("a100", "v100")
    fill_type_models([flexible, sched.jobs["x"]], sched.goodput_history, ["a100", "v100"],
                     sched.early_gradients)
    assert flexible.snapshot().category_early_gradient == (3.0, 2.0)
    assert sched.jobs["x"].category_early_gradient is None, "a job of one type: untouched"


def test_a_decision_names_the_types_whose_model_is_the_categorys_and_its_profiled_speeds(
) -> None:
    """A flexible job's model on a type it reported on is its own; on another, its
    category's (named, for Sia, which judges a job by its own only); and the category's
    profiled speeds (SchedulerSettings.type_speeds) come with it."""
    from voda.core.goodput import GoodputModel, PerfParams
    from voda.engine.events import Event, EventKind
    from voda.engine.hetero import fill_type_models

    model = GoodputModel(perf=PerfParams(0.1, 0.01, 0.1, 0.01, 0.1, 0.01, 1.1),
                         grad_sqr=1.0, grad_var=1.0, init_batch=128, max_batch=4096,
                         min_local=32, max_local=256, max_profiled_replicas=2)
    sched, _ = engine()
    for name, gpu_type in (("a", "a100"), ("b", "v100")):
        sched.submit(make_job(name).workers(1, 4).category("bert").gpu_type(gpu_type)
                     .submitted_at(0).obj())
    sched.handle(Event(EventKind.GOODPUT_REPORTED, 10.0, job="a", data={"goodput": model}))
    sched.handle(Event(EventKind.GOODPUT_REPORTED, 11.0, job="b", data={"goodput": model}))
    for record in sched.jobs.values():
        record.gpu_types = ("a100", "v100")
    fill_type_models(sched.jobs.values(), sched.goodput_history, ["a100", "v100"], None,
                     {"bert": {"a100": 3.0, "v100": 1.0}, "yolo": {"a100": 9.0}})
    a, b = sched.jobs["a"].snapshot(), sched.jobs["b"].snapshot()
    assert sorted(a.goodput_by_type) == sorted(b.goodput_by_type) == ["a100", "v100"]
    assert a.category_model_types == ("v100",) and b.category_model_types == ("a100",)
    assert a.category_type_speeds == (("a100", 3.0), ("v100", 1.0)) == b.category_type_speeds
    fill_type_models(sched.jobs.values(), sched.goodput_history, ["a100", "v100"])
    assert sched.jobs["a"].snapshot().category_type_speeds == (), "none given: none"


def test_an_epoch_the_old_size_finishes_after_a_resize_moves_the_restore_epoch() -> None:
    sched, backend = engine()
    sched.submit(make_job("x").workers(1, 4).epochs(10).gpu_type("a100").submitted_at(0).obj())
    sched.step(0.0)
    backend.report_epoch("x", 90.0, 1, 90.0, 4)
    backend.report_epoch("x", 120.0, 2, 30.0, 4)
    sched.step(120.0)
    sched.submit(make_job("y").workers(1, 4).gpu_type("a100").submitted_at(121).obj())
    sched.step(121.0)  # x shrinks to 2 after epoch 2: epoch 3 should hold the restore
    record = sched.jobs["x"]
    assert record.current_workers == 2
    # The 4 workers, stopping gracefully, finish epoch 3 (a speed of 4: their restore was
    # epoch 1); the 2 start from its checkpoint.
    backend.report_epoch("x", 150.0, 3, 30.0, 4)
    backend.report_epoch("x", 230.0, 4, 80.0, 2)  # includes the restore: not a speed
    sched.step(230.0)
    assert record.epoch_time_by_workers == {4: 30.0}
    backend.report_epoch("x", 280.0, 5, 50.0, 2)
    sched.step(280.0)
    assert record.epoch_time_by_workers == {4: 30.0, 2: 50.0}
    assert record.completed_epochs == 5


def test_a_size_changed_again_before_its_second_epoch_is_reported_keeps_that_epoch() -> None:
    sched, backend = engine()
    sched.submit(make_job("x").workers(1, 4).epochs(10).gpu_type("a100").submitted_at(0).obj())
    sched.step(0.0)
    backend.report_epoch("x", 90.0, 1, 90.0, 4)  # the restore
    sched.submit(make_job("y").workers(1, 4).gpu_type("a100").submitted_at(91).obj())
    sched.step(91.0)  # x shrinks to 2 after epoch 1
    record = sched.jobs["x"]
    assert record.current_workers == 2
    backend.report_epoch("x", 100.0, 2, 30.0, 4)  # the 4 finish epoch 2: a speed of 4
    backend.report_epoch("x", 180.0, 3, 80.0, 2)  # the 2's restore
    sched.step(180.0)
    assert record.epoch_time_by_workers == {4: 30.0}
    sched.delete("y", 181.0)
    sched.step(181.0)  # x grows back to 4 while the 2 run epoch 4
    assert record.current_workers == 4
    backend.report_epoch("x", 230.0, 4, 50.0, 2)  # the 2 finish epoch 4: a speed of 2
    backend.report_epoch("x", 320.0, 5, 90.0, 4)  # the 4's restore
    sched.step(320.0)
    assert record.epoch_time_by_workers == {4: 30.0, 2: 50.0}
    backend.report_epoch("x", 350.0, 6, 28.0, 4)
    sched.step(350.0)
    assert set(record.epoch_time_by_workers) == {4, 2}
    assert record.epoch_time_by_workers[4] != 30.0  # epoch 6 measured, epoch 5 not
    assert record.epoch_time_by_workers[4] < 30.0


# ----- how far into the epoch under way a job is ---------------------------------------
class ResumingBackend(InMemoryBackend):
    """A backend whose jobs go on from where they stopped within an epoch."""

    resumes_within_epoch = True


@pytest.mark.parametrize("resumes", [False, True])
def test_the_epoch_under_way_counts_running_time_until_its_report_or_a_restart(
        resumes: bool) -> None:
    nodes = make_cluster().nodes(1, gpus=4).node_list()
    backend = (ResumingBackend if resumes else InMemoryBackend)(nodes)
    sched = Scheduler(backend, SchedulerSettings(algorithm="ElasticFIFO",  # type: ignore[arg-type]
                                                 rate_limit_seconds=0.0))
    sched.submit(make_job("x").workers(1, 4).epochs(10).submitted_at(0).obj())
    sched.step(0.0)
    sched.step(40.0)
    record = sched.jobs["x"]
    assert record.snapshot().running_seconds_since_epoch == 40.0
    assert record.snapshot().attained_gpu_seconds_since_epoch == 160.0
    backend.report_epoch("x", 50.0, 1, 50.0, 4)
    sched.step(50.0)
    assert record.running_seconds_since_epoch == 0.0  # the epoch ended
    assert record.attained_gpu_seconds_since_epoch == 0.0
    sched.step(70.0)
    assert record.running_seconds_since_epoch == 20.0
    # a second job makes x shrink at 70 s: it restarts from its checkpoint
    sched.submit(make_job("y").workers(1, 4).submitted_at(70).obj())
    sched.step(70.0)
    assert record.current_workers == 2 and record.restarts == 1
    assert record.running_seconds_since_epoch == (20.0 if resumes else 0.0)
    sched.step(100.0)
    assert record.running_seconds_since_epoch == (50.0 if resumes else 30.0)
    # 20 s on 4 GPUs before the resize, if it resumes within the epoch; 30 s on 2 after
    assert record.attained_gpu_seconds_since_epoch == (140.0 if resumes else 60.0)
    # an epoch reported again (a late duplicate) does not end the one under way
    backend.report_epoch("x", 100.0, 1, 50.0, 4)
    sched.step(100.0)
    assert record.running_seconds_since_epoch == (50.0 if resumes else 30.0)

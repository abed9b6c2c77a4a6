"""A trace replayed through the real service (HTTP, emulated cluster) matches the simulator.

The service runs `voda serve --backend emulated` 200 times faster than the trace; the
simulator runs the same jobs (the emulated backend's job model) arriving when the service
took them in, on the same clock, without a restart charge. See voda_testing/replay.py and
docs/design/002-simulator.md, "Replayed through the service".
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from pathlib import Path

import pytest

from voda.sim.report import SimResult
from voda.sim.workloads import Workload, as_emulated, load_workload
from voda_testing.replay import (
    Replay,
    ReplayError,
    ReplaySettings,
    ServiceJob,
    average_ratio_allowance,
    comparable_replay,
    disagreements,
    event_order_flip,
    jct_tolerance,
    job_document,
    longest_step_period,
    replay_workload,
    run_once_problems,
    simulate_twin,
)

# Ten jobs of workload-1 (cifar10, deepspeech2, ncf; elastic) on 16 GPUs: they queue, grow
# and shrink (27 rescales and 3 migrations under ElasticFIFO), about 30 s of wall time.
SMALL = ReplaySettings(workload="workload-1", jobs=10, cluster="4x4", time_scale=200.0,
                       rate_limit=60.0, step_interval=0.05, timeout=300.0)
# Wall seconds a step may take beyond its interval on a loaded 2-core machine; where the
# service measured longer periods between its steps, the checks allow those instead.
LATENCY = 0.1


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> Replay:
    """SMALL through the service, once for the module's tests."""
    return comparable_replay(SMALL, lambda: tmp_path_factory.mktemp("replay"), LATENCY)


@pytest.mark.slow
def test_the_service_schedules_a_replayed_trace_as_the_simulator_does(replayed: Replay) -> None:
    assert run_once_problems(replayed, replay_workload(SMALL)) == []
    assert disagreements(replayed, LATENCY) == []
    figures = replayed.figures()
    assert figures["avg_ratio"] == pytest.approx(
        1.0, abs=average_ratio_allowance(replayed, LATENCY))
    assert figures["service_rescales"] > 0  # the replay exercises elastic changes
    assert figures["service_preemptions"] == figures["sim_preemptions"]
    service_jct, sim_jct = figures["worst_job_jct"]
    assert abs(service_jct - sim_jct) / sim_jct == pytest.approx(figures["worst_rel_diff"])


def twin_of_another_algorithm(replay: Replay, algorithm: str) -> Replay:
    """The same service run, compared with the simulator running `algorithm` instead (as
    though the service had run another algorithm than its twin)."""
    settings = dataclasses.replace(replay.settings, algorithm=algorithm)
    arrivals = {name: job.submit for name, job in replay.service.items()}
    return dataclasses.replace(replay, settings=settings, simulated=simulate_twin(
        replay_workload(settings), settings, arrivals))


@pytest.mark.slow
def test_the_comparison_fails_when_the_service_runs_another_algorithm(replayed: Replay) -> None:
    """AFS-L differs from ElasticFIFO on this trace by 4 % in the mean JCT, in a few jobs
    by a third: the check must see it."""
    assert disagreements(twin_of_another_algorithm(replayed, "AFS-L"), LATENCY,
                         measured=False) != []


def test_the_emulated_job_model_runs_epochs_at_the_emulated_backends_speed() -> None:
    from voda.backends.emulated import EmulatedBackend
    from voda.backends.emulated import parse_cluster as emulated_cluster
    from voda.core.model import Job
    from voda.engine.events import EventKind
    from voda.sim.backend import SimBackend

    workload = as_emulated(replay_workload(dataclasses.replace(SMALL, jobs=1)), 10.0)
    spec = workload.jobs[0]
    placement = (("node-0", 4), ("node-1", 2))
    sim = SimBackend(emulated_cluster("4x4"), {spec.name: spec}, penalty=0.0)
    job = Job(spec.name, spec.min_workers, spec.max_workers, epochs=spec.epochs)
    sim.start(job, placement)
    emulated = EmulatedBackend(emulated_cluster("4x4"), time_scale=10.0, clock=lambda: 0.0)
    emulated.profiles[spec.name] = str(spec.profile)
    wall = emulated.wall_epoch_seconds(spec.profile, placement)
    sim.advance(2.5 * wall)
    reports = [e for e in sim.events() if e.kind is EventKind.EPOCH_REPORTED]
    assert [e.data["epoch"] for e in reports] == [1, 2]
    assert reports[1].time == pytest.approx(2 * wall)
    # Both report epoch times in emulated seconds (wall x time scale).
    assert reports[0].data["epoch_seconds"] == pytest.approx(wall * 10.0)
    sim.halt(job)  # the half epoch under way is lost, as on the emulated cluster
    assert sim.jobs[spec.name].progress == 2.0


@pytest.mark.parametrize("algorithm", ["ElasticFIFO", "Voda", "AFS-L", "ElasticSRJF", "Tiresias",
                                       "Pollux"])
def test_the_time_scale_changes_no_decision(algorithm: str) -> None:
    """Epoch times are reported in emulated seconds, so a policy whose constants are in
    seconds (Voda's restart charge and horizon, the epoch time assumed before one is
    measured) decides the same 200 times faster as on the trace's own clock."""
    settings = dataclasses.replace(SMALL, algorithm=algorithm)
    workload = replay_workload(settings)
    fast = simulate_twin(workload, settings)
    trace = simulate_twin(workload, settings, time_scale=1.0)
    assert [j.jct for j in fast.jobs] == pytest.approx([j.jct for j in trace.jobs], rel=1e-6)
    assert (fast.rescales, fast.migrations) == (trace.rescales, trace.migrations)


@pytest.mark.parametrize(("algorithm", "params", "jobs", "cluster"), [
    ("Voda", {}, 60, "16x4"),
    ("Tiresias", {"queue_thresholds": [1000.0]}, 10, "4x4"),
], ids=["Voda's credit for the epoch under way", "Tiresias's queues"])
def test_policies_that_read_job_time_decide_the_same_at_any_time_scale(
        algorithm: str, params: dict[str, object], jobs: int, cluster: str) -> None:
    """The engine counts a job's running, waiting and attained GPU-seconds in the backend's
    seconds (emulated: wall x S), so Voda's credit for the epoch under way and Tiresias's
    queues read the same figures 256 times faster. Counted in wall seconds they did not
    (at S = 200: Voda 2405 s against 2636 s, Tiresias 4223 s against 4457 s).

    S is a power of two so that every time divided by it is exact in binary floating point
    and rounds as on the trace's clock: at S = 200 an arrival due at the same instant as a
    decision can fall before it on one clock and after it on the other, and the two runs
    part from there (one job of these 60 moved; since jobs that scale poorly are weighed
    up, the parting grows to 5 % of the average JCT). At S = 256 the runs make the same
    decisions; the JCTs agree to within float noise (Tiresias's within 5e-7 of each)."""
    settings = dataclasses.replace(SMALL, algorithm=algorithm, params=params, jobs=jobs,
                                   cluster=cluster, time_scale=256.0)
    workload = replay_workload(settings)
    fast = simulate_twin(workload, settings)
    trace = simulate_twin(workload, settings, time_scale=1.0)
    assert [j.jct for j in fast.jobs] == pytest.approx([j.jct for j in trace.jobs], rel=1e-6)
    assert (fast.rescales, fast.preemptions) == (trace.rescales, trace.preemptions)


def test_the_emulated_cluster_reports_the_same_epoch_times_at_any_time_scale() -> None:
    from voda.backends.emulated import EmulatedBackend
    from voda.backends.emulated import parse_cluster as emulated_cluster
    from voda.core.model import Job
    from voda.engine.events import EventKind

    reported = []
    for scale in (1.0, 60.0, 500.0):
        now = [0.0]
        backend = EmulatedBackend(emulated_cluster("2x4"), time_scale=scale,
                                  clock=lambda now=now: now[0])
        backend.profiles["a"] = "cifar10"
        backend.start(Job("a", 1, 4, epochs=3), (("node-0", 4),))
        now[0] = 2.5 * backend.wall_epoch_seconds("cifar10", (("node-0", 4),))
        epochs = [e.data for e in backend.events() if e.kind is EventKind.EPOCH_REPORTED]
        assert len(epochs) == 2
        reported.append((epochs[0]["epoch_seconds"], epochs[0]["samples_per_second"]))
    assert reported[1] == pytest.approx(reported[0]) and reported[2] == pytest.approx(
        reported[0])


def test_tolerance_grows_with_the_changes_and_the_clock() -> None:
    assert jct_tolerance(1000.0, 0, SMALL, LATENCY) == pytest.approx(30 + 2 * 0.15 * 200)
    assert jct_tolerance(1000.0, 3, SMALL, LATENCY) > jct_tolerance(1000.0, 0, SMALL, LATENCY)
    # A measured step period counts where it is longer than the interval + latency only.
    assert jct_tolerance(1000.0, 0, SMALL, LATENCY, 0.1) == jct_tolerance(1000.0, 0, SMALL,
                                                                         LATENCY)
    assert jct_tolerance(1000.0, 0, SMALL, LATENCY, 0.5) == pytest.approx(30 + 2 * 0.5 * 200)


def _period_metrics(counts: dict[str, int]) -> str:
    lines = ["# HELP voda_scheduler_step_period_seconds x",
             "# TYPE voda_scheduler_step_period_seconds histogram"]
    lines += [f'voda_scheduler_step_period_seconds_bucket{{le="{le}"}} {n}'
              for le, n in counts.items()]
    lines += [f"voda_scheduler_step_period_seconds_count {max(counts.values())}",
              "voda_scheduler_step_period_seconds_sum 1.0"]
    return "\n".join(lines) + "\n"


def test_the_average_allows_only_the_lag_measured_beyond_the_interval() -> None:
    workload = replay_workload(dataclasses.replace(SMALL, jobs=3))
    simulated = simulate_twin(workload, SMALL)
    service = {j.name: ServiceJob(name=j.name, submit=0.0, finish=j.jct, status="Completed",
                                  min_workers=1, max_workers=2, rescales=1, migrations=0,
                                  preemptions=0, starts=1, completions=1, worker_counts=(1, 2))
               for j in simulated.jobs}
    quiet = Replay(settings=SMALL, service=service, simulated=simulated, wall_seconds=1.0,
                   step_period=SMALL.step_interval)
    assert average_ratio_allowance(quiet, LATENCY) == 0.03
    loaded = dataclasses.replace(quiet, step_period=1.0)
    # Each job's 3 decisions (start, one change, the completion before) came up to
    # (1.0 - 0.15) s x 200 later than on a quiet machine.
    average = statistics.fmean(j.jct for j in simulated.jobs)
    assert average_ratio_allowance(loaded, LATENCY) == pytest.approx(
        0.03 + 3 * 0.85 * 200 / average)


def test_the_longest_step_period_is_the_first_bucket_holding_every_step() -> None:
    assert longest_step_period(_period_metrics(
        {"0.05": 0, "0.075": 7, "0.1": 9, "0.15": 10, "+Inf": 10})) == 0.15
    assert longest_step_period(_period_metrics({"0.05": 0, "0.1": 3, "+Inf": 4})) == math.inf
    assert longest_step_period(_period_metrics({"0.05": 0, "+Inf": 0})) == 0.0
    with pytest.raises(ReplayError):
        longest_step_period("# TYPE other_total counter\nother_total 1\n")


def test_jobs_are_submitted_with_their_trace_range() -> None:
    spec = load_workload("workload-1").jobs[0]
    doc = job_document(spec)
    assert (doc["min"], doc["max"], doc["preferred"], doc["profile"], doc["epochs"]) == (
        spec.min_workers, spec.max_workers, spec.preferred_workers, spec.profile, spec.epochs)


@pytest.mark.parametrize(("field", "value"), [
    ("jobs", 0), ("jobs", 10_000), ("time_scale", 0.0), ("time_scale", float("inf")),
    ("rate_limit", -1.0), ("step_interval", 0.0), ("timeout", 1e9), ("cluster", "100x8"),
    ("algorithm", "NoSuchPolicy"),
], ids=lambda v: str(v))
def test_every_replay_setting_is_bounded(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field if field != "algorithm" else "NoSuchPolicy"):
        dataclasses.replace(SMALL, **{field: value}).check()


def test_a_job_without_a_profile_cannot_be_emulated() -> None:
    workload = load_workload("workload-1")
    duration = dataclasses.replace(workload.jobs[0], profile=None, work=100.0)
    with pytest.raises(ValueError, match="profiled jobs only"):
        as_emulated(Workload(workload.source, (duration,)))


def test_the_event_loop_decides_on_epoch_reports_when_asked() -> None:
    """The service decides again on an epoch report for a policy that decides on progress;
    the simulator's event loop does so with `progress_decisions` (off by default)."""
    from voda.sim.cluster_file import parse_cluster
    from voda.sim.runner import SimSettings, simulate

    workload = as_emulated(replay_workload(SMALL))
    cluster = parse_cluster("4x4")

    def run(algorithm: str, progress: bool):  # type: ignore[no-untyped-def]
        return simulate(workload, cluster, SimSettings(
            algorithm=algorithm, penalty=0.0, interval=60.0, progress_decisions=progress))

    fifo = run("ElasticFIFO", False), run("ElasticFIFO", True)
    # No decision on progress: the same changes (stepping at more instants moves float sums).
    assert [(j, g) for _, j, g in fifo[0].timeline] == [(j, g) for _, j, g in fifo[1].timeline]
    assert [t for t, _, _ in fifo[0].timeline] == pytest.approx(
        [t for t, _, _ in fifo[1].timeline], rel=1e-9)
    voda = run("Voda", False), run("Voda", True)
    assert voda[0].timeline != voda[1].timeline
    arrivals = {spec.submit for spec in workload.jobs}
    finishes = {j.finish for j in voda[1].jobs}
    # Changes at instants that are neither an arrival nor a completion nor the rate limit
    # after one: decisions on epoch reports.
    moments = {t for t, _, _ in voda[1].timeline} - arrivals - finishes
    assert any(all(abs(t - (e + 60.0)) > 1e-6 for e in arrivals | finishes) for t in moments)


def test_the_simulated_backend_says_when_a_job_reports_progress() -> None:
    from voda.core.model import Job
    from voda.sim.backend import SimBackend
    from voda.sim.cluster_file import parse_cluster

    spec = as_emulated(replay_workload(dataclasses.replace(SMALL, jobs=1))).jobs[0]
    sim = SimBackend(list(parse_cluster("4x4").nodes), {spec.name: spec}, penalty=0.0)
    assert sim.next_boundary() is None
    sim.start(Job(spec.name, 1, 8, epochs=spec.epochs), (("node-0", 4),))
    first = sim.next_boundary()
    assert first is not None and first > 0
    sim.advance(first / 2)
    assert not sim.take_progressed()
    sim.advance(first)
    assert sim.take_progressed() and not sim.take_progressed()
    assert sim.next_boundary() == pytest.approx(2 * first)


def test_simulate_decides_on_progress_with_the_flag() -> None:
    import json

    from typer.testing import CliRunner

    from voda.cli.main import app

    def avg_jct(*extra: str) -> float:
        result = CliRunner().invoke(app, ["simulate", "--workload", "workload-1", "--cluster",
                                          "16x4", "--algorithm", "Voda", "--json", *extra])
        assert result.exit_code == 0, result.output
        return float(json.loads(result.stdout)["results"][0]["avg_jct"])

    assert avg_jct("--progress-decisions") != avg_jct()


@pytest.mark.parametrize(("changes", "reason"), [
    ({"workload": "philly", "jobs": 3}, "profiled jobs only"),
    ({"workload": "no-such-workload"}, "no such file"),
    ({"jobs": 200}, "workload-1 has 160 jobs"),
], ids=["a trace of durations", "an unknown workload", "more jobs than the workload has"])
def test_a_replay_refuses_what_the_emulated_service_cannot_run(changes: dict[str, object],
                                                                reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        dataclasses.replace(SMALL, **changes).check()  # type: ignore[arg-type]


def test_the_twin_counts_the_epoch_under_way_as_the_emulated_backend_does() -> None:
    """The engine restarts the count of the epoch under way on every (re)start unless the
    backend resumes within an epoch: the emulated backend does not say so, nor its twin."""
    from voda.backends.emulated import EmulatedBackend
    from voda.sim.backend import SimBackend
    from voda.sim.cluster_file import parse_cluster

    trace = replay_workload(dataclasses.replace(SMALL, jobs=2))
    nodes = list(parse_cluster("4x4").nodes)
    assert not getattr(EmulatedBackend, "resumes_within_epoch", False)
    twin = SimBackend(nodes, {s.name: s for s in as_emulated(trace).jobs})
    assert twin.resumes_within_epoch is False
    assert SimBackend(nodes, {s.name: s for s in trace.jobs}).resumes_within_epoch is True


# Ten jobs of workload-1 as the Pollux workload's own batch-adaptive jobs (cifar10,
# deepspeech2, ncf; they pick their batch by goodput and report their goodput models) on 16
# GPUs, 100 times faster than the trace: about 45 s of wall time. A rate limit of 10 s, not
# 60: each decision of the service comes up to a step late, and a decision held back by the
# rate limit inherits the lag of the one before it, so with 60 s the lags of a chain of
# decisions a minute apart (five in a row on this trace) add up before a short job (ncf,
# 46 s alone) starts, beyond what the per-job tolerance counts.
ADAPTIVE = dataclasses.replace(SMALL, job_model="adaptive", time_scale=100.0, rate_limit=10.0)


@pytest.fixture(scope="module")
def replayed_adaptive(tmp_path_factory: pytest.TempPathFactory) -> Replay:
    return comparable_replay(ADAPTIVE, lambda: tmp_path_factory.mktemp("adaptive"), LATENCY)


@pytest.mark.slow
def test_the_service_runs_batch_adaptive_jobs_as_the_simulator_does(
        replayed_adaptive: Replay) -> None:
    """The emulated cluster runs the simulator's adaptive job model in emulated time; under
    ElasticFIFO (whose decisions do not depend on when events come) every job's JCT is
    within the same tolerance as the epoch jobs': each decision of the service comes up to a
    step (+ latency) late, x S in trace seconds, per change of the job's workers."""
    assert run_once_problems(replayed_adaptive, replay_workload(ADAPTIVE)) == []
    assert disagreements(replayed_adaptive, LATENCY) == []
    figures = replayed_adaptive.figures()
    assert figures["avg_ratio"] == pytest.approx(
        1.0, abs=average_ratio_allowance(replayed_adaptive, LATENCY))
    assert figures["service_rescales"] > 0


@pytest.mark.slow
def test_the_adaptive_comparison_fails_when_the_service_runs_another_algorithm(
        replayed_adaptive: Replay) -> None:
    assert disagreements(twin_of_another_algorithm(replayed_adaptive, "Pollux"), LATENCY,
                         measured=False) != []


def test_adaptive_jobs_are_submitted_as_batch_adaptive() -> None:
    jobs = replay_workload(ADAPTIVE).jobs
    documents = [job_document(spec) for spec in jobs]
    assert all(d["adaptive"] is True for d in documents)
    ncf = next(d for d, s in zip(documents, jobs, strict=True) if s.profile == "ncf")
    assert ncf["batch_size"] == 32768 and ncf["max"] == 1
    # A job's max is capped at the cluster's GPUs on both sides (the service refuses more).
    assert max(d["max"] for d in documents) == 16


def test_the_adaptive_twin_runs_the_simulators_adaptive_job_model() -> None:
    workload = replay_workload(ADAPTIVE)
    result = simulate_twin(workload, ADAPTIVE)
    # On the trace's own clock whatever the service's time scale (the service's job
    # counters are emulated seconds): the same result at any time_scale.
    again = simulate_twin(workload, dataclasses.replace(ADAPTIVE, time_scale=7.0))
    assert [j.jct for j in result.jobs] == [j.jct for j in again.jobs]
    assert result.avg_jct != simulate_twin(workload, SMALL).avg_jct  # not the epoch jobs


def _service_as_simulated(simulated: SimResult, late: dict[str, float]) -> dict[str, ServiceJob]:
    """Each job as the service would report it had it finished when simulated, + `late`."""
    return {j.name: ServiceJob(name=j.name, submit=j.submit,
                               finish=None if j.finish is None else j.finish + late.get(j.name, 0),
                               status="Completed", min_workers=1, max_workers=2, rescales=0,
                               migrations=0, preemptions=0, starts=1, completions=1,
                               worker_counts=(1,))
            for j in simulated.jobs}


def test_an_event_met_in_another_order_is_named() -> None:
    simulated = simulate_twin(replay_workload(dataclasses.replace(SMALL, jobs=4)), SMALL)
    same = Replay(settings=SMALL, service=_service_as_simulated(simulated, {}),
                  simulated=simulated, wall_seconds=1.0)
    assert event_order_flip(same) is None
    first = min((j for j in simulated.jobs if j.finish is not None), key=lambda j: j.finish or 0)
    last = max(t for j in simulated.jobs for t in (j.submit, j.finish or 0))
    late = dataclasses.replace(same, service=_service_as_simulated(
        simulated, {first.name: last - (first.finish or 0) + 1.0}))
    flip = event_order_flip(late)
    assert flip is not None and "met" in flip
    # a little late, in the same order: no flip
    assert event_order_flip(dataclasses.replace(same, service=_service_as_simulated(
        simulated, {first.name: 1e-6}))) is None


def test_a_replay_is_run_again_only_when_it_disagrees_with_the_events_reordered(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import voda_testing.replay as replay_module

    simulated = simulate_twin(replay_workload(dataclasses.replace(SMALL, jobs=4)), SMALL)
    agreeing = Replay(settings=SMALL, service=_service_as_simulated(simulated, {}),
                      simulated=simulated, wall_seconds=1.0)
    first = min((j for j in simulated.jobs if j.finish is not None), key=lambda j: j.finish or 0)
    last = max(t for j in simulated.jobs for t in (j.submit, j.finish or 0))
    reordered = dataclasses.replace(agreeing, service=_service_as_simulated(
        simulated, {first.name: last - (first.finish or 0) + 1e4}))
    ending = max((j for j in simulated.jobs if j.finish is not None), key=lambda j: j.finish or 0)
    in_order = dataclasses.replace(agreeing, service=_service_as_simulated(  # the last, later
        simulated, {ending.name: 1e4}))
    assert disagreements(reordered, LATENCY) and event_order_flip(reordered)
    assert disagreements(in_order, LATENCY) and event_order_flip(in_order) is None

    def replays(*queued: Replay) -> list[Replay]:
        pending = list(queued)
        monkeypatch.setattr(replay_module, "run_replay", lambda settings, folder: pending.pop(0))
        return pending

    left = replays(reordered, agreeing)
    assert comparable_replay(SMALL, lambda: tmp_path, LATENCY) is agreeing and left == []
    left = replays(in_order, agreeing)  # a fault in the same order: not hidden by a rerun
    assert comparable_replay(SMALL, lambda: tmp_path, LATENCY) is in_order and left == [agreeing]
    left = replays(reordered, reordered, reordered, agreeing)  # at most three tries
    assert comparable_replay(SMALL, lambda: tmp_path, LATENCY) is reordered and left == [agreeing]

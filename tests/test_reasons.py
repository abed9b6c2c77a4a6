"""Every decision says why: each job left below its max gets a code and one sentence.

Each case states the jobs (running ones hold their GPUs on one node of the capacity), the
algorithm and, per job below max, the code and facts its message must name.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pytest
from builders import make_job
from custom_algorithm import MinForAll

from voda.core.allocation import registry
from voda.core.allocation.reasons import ReasonCode
from voda.core.model import Cluster, Job, Node, Placement, Plan
from voda.core.placement.registry import DEFAULT_PLACER, get_placer
from voda.core.plan import decide

Q, P, S, SH = ReasonCode.QUEUED, ReasonCode.PREEMPTED, ReasonCode.SHRUNK, ReasonCode.SHARED
POOR = {1: 100.0, 2: 90.0, 4: 85.0}
LINEAR = {1: 100.0, 2: 50.0, 4: 25.0}


def decide_on(algorithm: object, jobs: Sequence[Job], nodes: Sequence[Node],
              explain: bool = True) -> Plan:
    """Running jobs hold their GPUs on the first node of their type."""
    previous: Placement = {}
    for job in jobs:
        if job.current_workers:
            node = next(n for n in nodes if n.gpu_type == job.gpu_type)
            previous[job.name] = ((node.name, job.current_workers),)
    algo = registry.create(algorithm) if isinstance(algorithm, str) else algorithm
    return decide(jobs, Cluster(tuple(nodes)), previous, algo, get_placer(DEFAULT_PLACER),
                  explain_reasons=explain)


def one_node(gpus: int, gpu_type: str = "default") -> list[Node]:
    return [Node(f"{gpu_type}-0", gpus, gpu_type)]


def case(id: str, algorithm: object, jobs: Sequence[Job], nodes: Sequence[Node],
         expected: Mapping[str, tuple[ReasonCode, Sequence[str]]]):
    return pytest.param(algorithm, list(jobs), list(nodes), expected, id=id)


CASES = [
    case("FIFO queues a job behind the jobs submitted before it, and names them", "FIFO",
         [make_job("a").rigid(4).submitted_at(0).running(4).obj(),
          make_job("b").rigid(2).submitted_at(1).obj()], one_node(4),
         {"b": (Q, ["2nd of 2 in priority class 0", "FIFO's submit order", "a (4 GPUs)",
                    "min of 2 GPUs does not fit in the 0 left free"])}),
    case("FIFO preempts a lower-priority job and names the rule and who took the GPUs",
         "FIFO",
         [make_job("a").rigid(4).priority(1).submitted_at(0).running(4).obj(),
          make_job("b").rigid(4).priority(0).submitted_at(1).obj()], one_node(4),
         {"a": (P, ["its 4 GPUs went to b (+4 GPUs)", "priority class 0 is served before"])}),
    case("FIFO runs a job at its preferred size", "FIFO",
         [make_job("a").workers(1, 8).preferred(2).obj()], one_node(8),
         {"a": (ReasonCode.PREFERRED_SIZE, ["preferred size: 2 of its max 8"])}),
    case("ElasticFIFO shrinks a grown job to start a later one at its min", "ElasticFIFO",
         [make_job("a").workers(1, 8).submitted_at(0).running(8).obj(),
          make_job("b").rigid(2).submitted_at(1).obj()], one_node(8),
         {"a": (S, ["Shrunk from 8 to 6 GPUs", "b (+2 GPUs)",
                    "every job's min comes before any job's growth"])}),
    case("ElasticFIFO says jobs below max share the GPUs round-robin", "ElasticFIFO",
         [make_job("a").workers(1, 8).submitted_at(0).obj(),
          make_job("b").workers(1, 8).submitted_at(1).obj()], one_node(4),
         {"a": (SH, ["2 of its max 8", "4 of 4 default GPUs are in use", "round-robin"]),
          "b": (SH, ["round-robin"])}),
    case("SRJF preempts the longer job for the shorter one", "SRJF",
         [make_job("a").rigid(4).epochs(10).submitted_at(0).running(4).obj(),
          make_job("b").rigid(4).epochs(1).submitted_at(1).obj()], one_node(4),
         {"a": (P, ["went to b", "b's estimated remaining time 1.0 min is shorter than a's "
                                 "10.0 min"])}),
    case("Tiresias preempts a job demoted past the queue threshold", "Tiresias",
         [make_job("a").rigid(4).submitted_at(0).running(4).attained(60_000.0).obj(),
          make_job("b").rigid(4).submitted_at(1).obj()], one_node(4),
         {"a": (P, ["b is in queue 0, a in queue 1", "threshold is 57600"])}),
    case("ElasticTiresias keeps a job at its best count when one more GPU slows it",
         "ElasticTiresias",
         [make_job("a").workers(1, 4).epoch_times({1: 100.0, 2: 60.0, 3: 70.0}).obj()],
         one_node(8),
         {"a": (ReasonCode.AT_BEST_COUNT, ["on 3 GPUs an epoch would take 1.2 min against "
                                           "1.0 min on 2"])}),
    case("AFS-L shrinks a job for one waiting to start, by relative gain", "AFS-L",
         [make_job("a").workers(1, 4).epoch_times(POOR).submitted_at(0).running(4).obj(),
          make_job("b").workers(1, 4).epoch_times(LINEAR).submitted_at(1).obj()],
         one_node(4),
         {"a": (S, ["went to b", "AFS-L: b starts (a job at 0 has relative gain 1.00"]),
          "b": (SH, ["relative gain"])}),
    case("FfDLOptimizer queues a job behind the ones it admitted in submit order",
         "FfDLOptimizer",
         [make_job("a").rigid(4).submitted_at(0).running(4).obj(),
          make_job("b").rigid(2).submitted_at(1).obj()], one_node(4),
         {"b": (Q, ["FfDLOptimizer's submit order", "a (4 GPUs)"])}),
    case("Optimus stops growing a job once one more GPU would not cut its time", "Optimus",
         [make_job("a").workers(1, 4).epoch_times({1: 100.0, 2: 100.0}).obj()], one_node(8),
         {"a": (ReasonCode.AT_BEST_COUNT, ["would not cut its remaining time"])}),
    case("Pollux queues a job behind those of less attained service", "Pollux",
         [make_job("a").rigid(4).submitted_at(1).running(4).obj(),
          make_job("b").rigid(4).submitted_at(0).attained(5_000.0).obj()], one_node(4),
         {"b": (Q, ["2nd of 2", "Pollux's order of least attained service", "a (4 GPUs)"])}),
    case("Voda names the job that took the GPUs and its smaller remaining work", "Voda",
         [make_job("a").rigid(4).epochs(1000).submitted_at(0).running(4).attained(1.0).obj(),
          make_job("b").rigid(4).epochs(20).submitted_at(1).obj()], one_node(4),
         {"a": (P, ["went to b (+4 GPUs)", "b has less work left (20.0 min on one GPU"])}),
    case("A job whose min exceeds every GPU of its type does not fit", "ElasticFIFO",
         [make_job("a").rigid(16).obj()], one_node(8),
         {"a": (ReasonCode.DOES_NOT_FIT, ["Needs 16 GPUs (its min)", "8 default GPUs in all"])}),
    case("A job of a GPU type that no node has waits for that type", "ElasticFIFO",
         [make_job("a").rigid(1).gpu_type("a100").obj()], one_node(8),
         {"a": (ReasonCode.NO_FREE_GPU_TYPE, ["No node has a100 GPUs"])}),
    case("A queued job waits for its busy GPU type while another type has free GPUs",
         "FIFO",
         [make_job("a").rigid(4).gpu_type("a100").submitted_at(0).running(4).obj(),
          make_job("b").rigid(4).gpu_type("a100").submitted_at(1).obj()],
         [*one_node(4, "a100"), *one_node(8, "v100")],
         {"b": (ReasonCode.NO_FREE_GPU_TYPE, ["free a100 GPU while v100 has 8 free",
                                              "queued: 2nd of 2"])}),
    case("A job confined to a node other jobs hold does not fit", "FIFO",
         [make_job("a").rigid(4).submitted_at(0).running(4).obj(),
          make_job("b").rigid(2).submitted_at(1).with_(nodes=frozenset({"default-0"})).obj()],
         [Node("default-0", 4), Node("default-1", 4)],
         {"b": (ReasonCode.DOES_NOT_FIT, ["may use only 1 of the 2 default nodes",
                                          "0 GPUs free", "min of 2"])}),
    case("A custom algorithm that gives no reason gets a generic one", MinForAll(),
         [make_job("a").workers(1, 4).obj()], one_node(8),
         {"a": (ReasonCode.GENERIC, ["'MinForAll' gave it 1 of its max 4 GPUs",
                                     "gave no reason"])}),
]


@pytest.mark.parametrize(("algorithm", "jobs", "nodes", "expected"), CASES)
def test_reason(algorithm: object, jobs: list[Job], nodes: list[Node],
                expected: Mapping[str, tuple[ReasonCode, Sequence[str]]]) -> None:
    plan = decide_on(algorithm, jobs, nodes)
    assert not plan.errors
    below = {j.name for j in jobs if plan.allocation[j.name] < j.max_workers}
    assert set(plan.reasons) == below  # every job below max, and only those
    for name, (code, facts) in expected.items():
        reason = plan.reasons[name]
        assert reason.code is code, reason
        for fact in facts:
            assert fact in reason.message, (fact, reason.message)


@dataclass(frozen=True)
class BrokenExplain(MinForAll):
    name: str = "Broken"

    def explain(self, jobs: Sequence[Job], capacity: int,
                allocation: Mapping[str, int]) -> Mapping[str, object]:
        raise RuntimeError("no")


@dataclass(frozen=True)
class TooGreedy:
    name: str = "TooGreedy"

    def __call__(self, jobs: Sequence[Job], capacity: int) -> dict[str, int]:
        return {j.name: j.max_workers for j in jobs}


def test_an_explain_that_raises_gives_the_generic_reason() -> None:
    plan = decide_on(BrokenExplain(), [make_job("a").workers(1, 4).obj()], one_node(8))
    assert plan.reasons["a"].code is ReasonCode.GENERIC


def test_a_refused_decision_says_the_plan_in_force_stays() -> None:
    jobs = [make_job("a").workers(1, 4).running(2).obj(), make_job("b").rigid(4).obj()]
    plan = decide_on(TooGreedy(), jobs, one_node(4))
    assert plan.errors
    assert plan.reasons["a"].code is ReasonCode.PLAN_REFUSED
    assert "holds 2 of its max 4 GPUs" in plan.reasons["a"].message
    assert plan.reasons["b"].code is ReasonCode.PLAN_REFUSED


def test_jobs_at_max_have_no_reason_and_explanations_can_be_left_out() -> None:
    jobs = [make_job("a").rigid(2).obj(), make_job("b").workers(1, 8).obj()]
    assert set(decide_on("ElasticFIFO", jobs, one_node(4)).reasons) == {"b"}
    assert decide_on("ElasticFIFO", jobs, one_node(4), explain=False).reasons == {}


def mixed_jobs(count: int, seed: int) -> list[Job]:
    rng = random.Random(seed)
    jobs = []
    for i in range(count):
        lo = rng.choice((1, 1, 2, 4))
        builder = make_job(f"j{i:03d}").workers(lo, lo * rng.choice((1, 2, 4)))
        builder = builder.submitted_at(float(rng.randint(0, 50))).priority(rng.choice((0, 0, 1)))
        builder = builder.epochs(rng.randint(1, 30))
        if rng.random() < 0.6:
            builder = builder.epoch_times({1: 100.0, 2: rng.uniform(50.0, 95.0)})
        if rng.random() < 0.4:
            builder = builder.running(lo).attained(rng.uniform(0.0, 90_000.0))
        jobs.append(builder.obj())
    return jobs


@pytest.mark.parametrize("name", registry.BUILTIN_NAMES)
def test_every_built_in_algorithm_explains_every_job_below_max_in_its_own_terms(
        name: str) -> None:
    jobs = mixed_jobs(40, seed=3)
    plan = decide_on(name, jobs, [Node(f"n{i}", 4) for i in range(8)])
    assert not plan.errors
    below = {j.name for j in jobs if plan.allocation[j.name] < j.max_workers}
    assert below and set(plan.reasons) == below
    for reason in plan.reasons.values():
        assert reason.code is not ReasonCode.GENERIC
        assert reason.message.endswith(".") and "\n" not in reason.message
    codes = {r.code for r in plan.reasons.values()}
    assert codes & {Q, P, S, SH, ReasonCode.PREFERRED_SIZE, ReasonCode.AT_BEST_COUNT}


class CountingExplainer:
    """Every job at min; counts the calls of its explain."""

    name = "Counting"

    def __init__(self) -> None:
        self.explained = 0

    def __call__(self, jobs: Sequence[Job], capacity: int) -> dict[str, int]:
        return {j.name: j.min_workers for j in jobs}

    def explain(self, jobs, capacity, allocation):  # type: ignore[no-untyped-def]
        self.explained += 1
        return {}


def test_reasons_are_worked_out_when_first_read_and_once() -> None:
    algorithm = CountingExplainer()
    plan = decide_on(algorithm, [make_job("a").workers(1, 4).obj()], one_node(4))
    assert algorithm.explained == 0, "explained before the plan was handed over"
    assert plan.reasons["a"].code is ReasonCode.GENERIC
    assert set(plan.reasons) == {"a"} and len(plan.reasons) == 1
    assert algorithm.explained == 1


def test_a_failure_to_explain_leaves_the_reasons_and_the_engine_goes_on(monkeypatch,
                                                                        caplog) -> None:
    from voda.backends.memory import InMemoryBackend
    from voda.core import plan as plan_module
    from voda.engine.scheduler import Scheduler, SchedulerSettings

    sched = Scheduler(InMemoryBackend(one_node(4)),
                      SchedulerSettings(algorithm="FIFO", rate_limit_seconds=0.0))
    sched.submit(make_job("a").rigid(4).submitted_at(0).obj())
    sched.submit(make_job("b").rigid(4).submitted_at(1).obj())
    sched.step(1.0)
    assert sched.job_reasons["b"].code is ReasonCode.QUEUED

    def broken(*args: object) -> dict:
        raise RuntimeError("explanation bug")

    monkeypatch.setattr(plan_module, "_explain_type", broken)
    sched.submit(make_job("c").rigid(2).submitted_at(2).obj())
    plan = sched.step(2.0)
    assert plan is not None and plan.allocation["a"] == 4  # decided and applied
    assert sched.job_reasons["b"].code is ReasonCode.QUEUED  # kept
    assert "reasons could not be worked out" in caplog.text

"""Hand-worked allocations: each case states the jobs, the capacity and the answer.

Speeds: with no epoch times a job scales linearly (60 s per epoch on one GPU).
POOR scales badly (1.11x on 2 GPUs, 1.18x on 4); LINEAR doubles with each doubling.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from builders import make_job

from voda.core.allocation import registry
from voda.core.goodput import GoodputModel
from voda.core.model import Job
from voda.core.oracle import StepOracle

POOR = {1: 100.0, 2: 90.0, 4: 85.0}
LINEAR = {1: 100.0, 2: 50.0, 4: 25.0}
# Oracle step times (s) on 1, 2, 3, 4 GPUs; 50 steps left at 0 epochs done of 2.
FAST = StepOracle((1.0, 0.6, 0.5, 0.45), (50.0, 100.0))
SLOW = StepOracle((1.0, 0.9, 0.85, 0.8), (50.0, 100.0))
WORSE_AFTER_2 = StepOracle((1.0, 0.5, 0.6, 0.7), (50.0, 100.0))
LONG_AGO = 1e6  # seconds since submission: the restart factor is about 1
UNMEASURED = GoodputModel(perf=None, grad_sqr=0.0, grad_var=0.0, init_batch=128,
                          max_batch=4096, min_local=32, max_local=256)


def case(
    id: str, algorithm: str, jobs: Sequence[Job], capacity: int, expected: dict[str, int],
    **params: object,
):
    return pytest.param(algorithm, params, list(jobs), capacity, expected, id=id)


# t = {1: 100, 2: 53.85, 3: 38.46, 4: 30.77}: a third GPU adds 0.74 to S(2) = 1.86,
# starting a second job at 1 adds 1.0.
CONCAVE = {1: 100.0, 2: 53.85, 3: 38.46, 4: 30.77}

CASES = [
    # ----- FIFO and ElasticFIFO
    case(
        "FIFO gives each job its preferred size in submit order",
        "FIFO",
        [
            make_job("a").workers(1, 4).preferred(2).submitted_at(0).obj(),
            make_job("b").rigid(2).submitted_at(1).obj(),
            make_job("c").rigid(1).submitted_at(2).obj(),
        ],
        4, {"a": 2, "b": 2, "c": 0},
    ),
    case(
        "FIFO lets a later smaller job fill the gap a larger one leaves",
        "FIFO",
        [
            make_job("a").rigid(3).submitted_at(0).obj(),
            make_job("b").rigid(2).submitted_at(1).obj(),
            make_job("c").rigid(1).submitted_at(2).obj(),
        ],
        4, {"a": 3, "b": 0, "c": 1},
    ),
    case(
        "ElasticFIFO hands spare GPUs round-robin, one per job per pass, as the Go Voda does",
        "ElasticFIFO",
        [
            make_job("b").workers(1, 4).submitted_at(1).obj(),
            make_job("a").workers(1, 4).submitted_at(0).obj(),
        ],
        6, {"a": 3, "b": 3},
    ),
    case(
        "ElasticFIFO gives the last odd GPU of a pass to the earlier job",
        "ElasticFIFO",
        [
            make_job("a").workers(1, 4).submitted_at(0).obj(),
            make_job("b").workers(1, 4).submitted_at(1).obj(),
            make_job("c").workers(1, 2).submitted_at(2).obj(),
        ],
        8, {"a": 3, "b": 3, "c": 2},
    ),
    case(
        "ElasticFIFO skips jobs at max in later passes",
        "ElasticFIFO",
        [
            make_job("a").workers(1, 2).submitted_at(0).obj(),
            make_job("b").workers(1, 8).submitted_at(1).obj(),
        ],
        7, {"a": 2, "b": 5},
    ),
    # ----- SRJF and ElasticSRJF
    case(
        "SRJF serves the shortest estimated remaining time first",
        "SRJF",
        [
            make_job("a").rigid(2).epochs(10).submitted_at(0).obj(),
            make_job("b").rigid(2).epochs(2).submitted_at(1).obj(),
            make_job("c").rigid(2).epochs(4).submitted_at(2).obj(),
        ],
        4, {"a": 0, "b": 2, "c": 2},
    ),
    case(
        "SRJF breaks equal estimates by submit time",
        "SRJF",
        [
            make_job("a").rigid(1).epochs(2).submitted_at(1).obj(),
            make_job("b").rigid(1).epochs(2).submitted_at(0).obj(),
        ],
        1, {"a": 0, "b": 1},
    ),
    case(
        "SRJF uses measured epoch times over the default estimate",
        "SRJF",
        [
            make_job("a").rigid(2).epochs(10).epoch_times({2: 10.0}).submitted_at(0).obj(),
            make_job("b").rigid(2).epochs(5).submitted_at(1).obj(),  # 5 x 60 s on one GPU
        ],
        2, {"a": 2, "b": 0},
    ),
    case(
        "SRJF by remaining GPU time does not let a wide job look short",
        "SRJF",
        [
            make_job("a").rigid(8).epochs(10).submitted_at(0).obj(),  # 600 GPU-s, 75 s at 8
            make_job("b").rigid(1).epochs(2).submitted_at(1).obj(),  # 120 GPU-s, 120 s at 1
        ],
        8, {"a": 0, "b": 1},
    ),
    case(
        "SRJF by remaining wall time at the requested size serves the wide job first",
        "SRJF",
        [
            make_job("a").rigid(8).epochs(10).submitted_at(0).obj(),
            make_job("b").rigid(1).epochs(2).submitted_at(1).obj(),
        ],
        8, {"a": 8, "b": 0},
        order="wall_time",
    ),
    case(
        "ElasticSRJF hands spare GPUs round-robin in shortest-first order",
        "ElasticSRJF",
        [
            make_job("a").workers(1, 4).epochs(10).submitted_at(0).obj(),
            make_job("b").workers(1, 4).epochs(1).submitted_at(1).obj(),
        ],
        5, {"a": 2, "b": 3},
    ),
    case(
        "ElasticSRJF counts only the epochs left",
        "ElasticSRJF",
        [
            make_job("a").workers(1, 2).epochs(10, completed=9).submitted_at(0).obj(),
            make_job("b").workers(1, 2).epochs(5).submitted_at(1).obj(),
        ],
        3, {"a": 2, "b": 1},
    ),
    # ----- Tiresias
    case(
        "Tiresias puts a job past the threshold behind a new job",
        "Tiresias",
        [
            make_job("a").rigid(4).submitted_at(0).running(4).attained(60000.0).obj(),
            make_job("b").rigid(4).submitted_at(1).obj(),
        ],
        4, {"a": 0, "b": 4},
    ),
    case(
        "Tiresias keeps a demoted job in the lower queue after it restarts",
        "Tiresias",
        [
            make_job("a").rigid(2).submitted_at(0).running(2, since=0)
            .attained(60000.0, since_start=100.0).obj(),
            make_job("b").rigid(2).submitted_at(1).obj(),
        ],
        2, {"a": 0, "b": 2},
    ),
    case(
        "Tiresias puts a promoted job back in the top queue",
        "Tiresias",
        [
            make_job("a").rigid(2).submitted_at(0).started_at(0).waiting()
            .attained(90000.0, since_promotion=0.0).obj(),
            make_job("b").rigid(2).submitted_at(1).running(2, since=10)
            .attained(60000.0).obj(),
        ],
        2, {"a": 2, "b": 0},
    ),
    case(
        "Tiresias serves a started job before a never-started one of the same queue",
        "Tiresias",
        [
            make_job("a").rigid(2).submitted_at(0).obj(),
            make_job("b").rigid(2).submitted_at(1).running(2, since=5).attained(100.0).obj(),
        ],
        2, {"a": 0, "b": 2},
    ),
    case(
        "Tiresias promotes a job that waited 16 times as long as it ran since its promotion",
        "Tiresias",
        [
            make_job("a").rigid(2).submitted_at(0).started_at(0).waiting()
            .attained(60000.0).ran_for(2500.0).waited_for(40000.0).obj(),
            make_job("b").rigid(2).submitted_at(1).running(2, since=10).attained(200.0).obj(),
        ],
        2, {"a": 2, "b": 0},
    ),
    case(
        "Tiresias does not promote a job that waited less than 16 times as long as it ran",
        "Tiresias",
        [
            make_job("a").rigid(2).submitted_at(0).started_at(0).waiting()
            .attained(60000.0).ran_for(2500.0).waited_for(39999.0).obj(),
            make_job("b").rigid(2).submitted_at(1).running(2, since=10).attained(200.0).obj(),
        ],
        2, {"a": 0, "b": 2},
    ),
    case(
        "Tiresias weighs the whole run since the last promotion, not only the last run",
        "Tiresias",
        [
            make_job("a").rigid(2).submitted_at(0).started_at(0).waiting()
            .attained(60000.0).ran_for(2500.0, since_start=10.0)
            .waited_for(40000.0, since_start=100.0).obj(),
            make_job("b").rigid(2).submitted_at(1).running(2, since=10).attained(200.0).obj(),
        ],
        2, {"a": 2, "b": 0},
    ),
    case(
        "Tiresias with the starvation knob off never promotes",
        "Tiresias",
        [
            make_job("a").rigid(2).submitted_at(0).started_at(0).waiting()
            .attained(60000.0).ran_for(2500.0).waited_for(90000.0).obj(),
            make_job("b").rigid(2).submitted_at(1).running(2, since=10).attained(200.0).obj(),
        ],
        2, {"a": 0, "b": 2},
        starvation_knob=None,
    ),
    case(
        "Tiresias in queue-entry order serves the job that entered its queue first",
        "Tiresias",
        [
            make_job("a").rigid(2).submitted_at(0).queue_since(50.0).obj(),
            make_job("b").rigid(2).submitted_at(1).queue_since(20.0).obj(),
        ],
        2, {"a": 0, "b": 2},
        queue_order="queue_entry",
    ),
    case(
        "Tiresias with two thresholds serves three queues top down",
        "Tiresias",
        [
            make_job("a").rigid(2).submitted_at(0).running(2).attained(2000.0).obj(),
            make_job("b").rigid(2).submitted_at(1).running(2).attained(500.0).obj(),
            make_job("c").rigid(2).submitted_at(2).obj(),
        ],
        4, {"a": 0, "b": 2, "c": 2},
        queue_thresholds=(100.0, 1000.0),
    ),
    case(
        "Tiresias lets a smaller job of a lower queue fill the gap",
        "Tiresias",
        [
            make_job("a").rigid(3).submitted_at(0).obj(),
            make_job("b").rigid(2).submitted_at(1).obj(),
            make_job("c").rigid(1).submitted_at(2).running(1).attained(60000.0).obj(),
        ],
        4, {"a": 3, "b": 0, "c": 1},
    ),
    case(
        "The Pollux preset moves a job to the tail of the second queue at 16 GPU-hours",
        "Tiresias",
        [
            make_job("a").rigid(2).submitted_at(0).queue_since(0.0).running(2)
            .attained(57600.0, since_start=10.0).obj(),
            make_job("b").rigid(2).submitted_at(5).queue_since(5.0).obj(),
            make_job("c").rigid(2).submitted_at(6).queue_since(6.0).obj(),
        ],
        4, {"a": 0, "b": 2, "c": 2},
        queue_thresholds=(57600.0,), starvation_knob=None, queue_order="queue_entry",
    ),
    # ----- ElasticTiresias
    case(
        "ElasticTiresias starts a pending elastic job at less than preferred on idle GPUs",
        "ElasticTiresias",
        [
            make_job("a").workers(2, 2).submitted_at(0).obj(),
            make_job("b").workers(1, 4).preferred(4).submitted_at(1).obj(),
        ],
        4, {"a": 2, "b": 2},
    ),
    case(
        "ElasticTiresias starts a second job rather than give the first a weak third GPU",
        "ElasticTiresias",
        [
            make_job("a").workers(1, 4).preferred(2).epoch_times(CONCAVE).submitted_at(0).obj(),
            make_job("b").workers(1, 4).preferred(2).epoch_times(CONCAVE).submitted_at(1).obj(),
        ],
        3, {"a": 2, "b": 1},
    ),
    case(
        "ElasticTiresias leaves a GPU idle that would slow its job down",
        "ElasticTiresias",
        [make_job("a").workers(1, 2).preferred(1).epoch_times({1: 10.0, 2: 20.0}).obj()],
        2, {"a": 1},
    ),
    case(
        "ElasticTiresias gives no GPU past the measured range a gain above the measured one",
        "ElasticTiresias",
        [
            make_job("x").workers(1, 8).preferred(4).submitted_at(0)
            .epoch_times({1: 100.0, 2: 50.0, 4: 40.0}).obj(),
            make_job("y").workers(1, 4).preferred(2).submitted_at(1)
            .epoch_times({1: 100.0, 2: 60.0, 3: 46.0}).obj(),
        ],
        7, {"x": 4, "y": 3},
    ),
    case(
        "ElasticTiresias hands leftover GPUs to the job with the largest marginal speedup",
        "ElasticTiresias",
        [
            make_job("a").workers(1, 4).submitted_at(0).epoch_times(POOR).obj(),
            make_job("b").workers(1, 4).submitted_at(1).epoch_times(LINEAR).obj(),
        ],
        5, {"a": 1, "b": 4},
    ),
    case(
        "ElasticTiresias grows the earlier job in queue order when gains are equal",
        "ElasticTiresias",
        [
            make_job("a").workers(1, 3).submitted_at(0).obj(),
            make_job("b").workers(1, 3).submitted_at(1).obj(),
        ],
        5, {"a": 3, "b": 2},
    ),
    case(
        "ElasticTiresias shrinks lower queues to min when too many jobs are pending",
        "ElasticTiresias",
        [
            make_job("q").workers(1, 2).preferred(2).submitted_at(5).obj(),
            make_job("l1").workers(1, 4).preferred(4).submitted_at(0)
            .running(4, since=0).attained(60000.0).obj(),
            make_job("l2").workers(1, 4).preferred(4).submitted_at(1)
            .running(4, since=1).attained(60000.0).obj(),
            make_job("l3").workers(1, 4).preferred(4).submitted_at(2)
            .running(4, since=2).attained(60000.0).obj(),
        ],
        4, {"q": 2, "l1": 1, "l2": 1, "l3": 0},
        compaction_threshold=1,
    ),
    case(
        "ElasticTiresias lets pending jobs of a lower queue compete for the GPUs left",
        "ElasticTiresias",
        [
            make_job("q").workers(1, 2).preferred(2).submitted_at(5).obj(),
            make_job("l1").workers(1, 4).preferred(4).submitted_at(0)
            .running(4, since=0).attained(60000.0).obj(),
            make_job("l2").workers(1, 4).preferred(4).submitted_at(1)
            .running(4, since=1).attained(60000.0).obj(),
        ],
        4, {"q": 2, "l1": 2, "l2": 0},
    ),
    # ----- FfDLOptimizer
    case(
        "FfDLOptimizer does not starve the head of the queue for small jobs behind it",
        "FfDLOptimizer",
        [
            make_job("A").rigid(4).epoch_times({1: 100.0, 4: 40.0}).submitted_at(0).obj(),
            *(make_job(f"b{i}").rigid(1).submitted_at(i).obj() for i in range(1, 6)),
        ],
        4, {"A": 4, "b1": 0, "b2": 0, "b3": 0, "b4": 0, "b5": 0},
    ),
    case(
        "FfDLOptimizer spreads GPUs over fresh jobs of unknown speed",
        "FfDLOptimizer",
        [make_job(name).workers(1, 4).submitted_at(i).obj() for i, name in enumerate("abcd")],
        4, {"a": 1, "b": 1, "c": 1, "d": 1},
    ),
    case(
        "FfDLOptimizer spreads the GPUs beyond the mins when speedups tie",
        "FfDLOptimizer",
        [
            make_job("b").workers(1, 4).submitted_at(1).obj(),
            make_job("a").workers(1, 4).submitted_at(0).obj(),
        ],
        6, {"a": 3, "b": 3},
    ),
    case(
        "FfDLOptimizer gives an odd GPU left over an even split to the earlier job",
        "FfDLOptimizer",
        [
            make_job("b").workers(1, 4).submitted_at(1).obj(),
            make_job("a").workers(1, 4).submitted_at(0).obj(),
        ],
        5, {"a": 3, "b": 2},
    ),
    case(
        "FfDLOptimizer admits in FIFO order and gives the rest to the job that scales well",
        "FfDLOptimizer",
        [
            make_job("a").workers(2, 4).submitted_at(0).epoch_times(POOR).obj(),
            make_job("b").workers(1, 4).submitted_at(1).epoch_times(LINEAR).obj(),
        ],
        4, {"a": 2, "b": 2},
    ),
    case(
        "FfDLOptimizer starts a poorly scaling job at min and grows the one that scales",
        "FfDLOptimizer",
        [
            make_job("a").workers(2, 4).submitted_at(0).epoch_times(POOR).obj(),
            make_job("b").workers(1, 4).submitted_at(1).epoch_times(LINEAR).obj(),
        ],
        6, {"a": 2, "b": 4},
    ),
    case(
        "FfDLOptimizer passes over a job larger than the cluster",
        "FfDLOptimizer",
        [
            make_job("a").rigid(8).submitted_at(0).obj(),
            make_job("b").workers(1, 2).submitted_at(1).obj(),
        ],
        4, {"a": 0, "b": 2},
    ),
    case(
        "FfDLOptimizer stops admitting at the first job whose min does not fit",
        "FfDLOptimizer",
        [
            make_job("a").workers(1, 1).submitted_at(0).obj(),
            make_job("b").rigid(4).submitted_at(1).obj(),
            make_job("c").workers(1, 4).submitted_at(2).obj(),
        ],
        4, {"a": 1, "b": 0, "c": 0},
    ),
    case(
        "FfDLOptimizer admits at most max_jobs jobs in submit order",
        "FfDLOptimizer",
        [
            make_job("a").rigid(1).submitted_at(0).obj(),
            make_job("b").rigid(1).submitted_at(1).obj(),
        ],
        2, {"a": 1, "b": 0},
        max_jobs=1,
    ),
    # ----- AFS-L
    case(
        "AFS-L follows the paper's asymmetric rule, not a symmetric one",
        "AFS-L",
        [
            make_job("a").workers(1, 2).epochs(2).epoch_times({1: 10.0, 2: 6.25}).obj(),
            make_job("b").workers(1, 2).epochs(20).epoch_times({1: 10.0, 2: 5.0}).obj(),
        ],
        3, {"a": 2, "b": 1},
    ),
    case(
        "AFS-L gives a short job on one GPU of linear speed its second GPU before a start",
        "AFS-L",
        [
            make_job("a").workers(1, 4).submitted_at(0).obj(),
            make_job("b").workers(1, 4).submitted_at(1).obj(),
            make_job("c").workers(1, 4).submitted_at(2).obj(),
        ],
        3, {"a": 2, "b": 1, "c": 0},
    ),
    case(
        "AFS-L starts waiting jobs before running jobs grow at less than linear speed",
        "AFS-L",
        [
            make_job("a").workers(1, 4).submitted_at(0).epoch_times(POOR).obj(),
            make_job("b").workers(1, 4).submitted_at(1).epoch_times(POOR).obj(),
            make_job("c").workers(1, 4).submitted_at(2).epoch_times(POOR).obj(),
        ],
        3, {"a": 1, "b": 1, "c": 1},
    ),
    case(
        "AFS-L gives the GPU to the shorter job when relative gains are equal",
        "AFS-L",
        [
            make_job("a").workers(1, 4).epochs(10).submitted_at(0).obj(),
            make_job("b").workers(1, 4).epochs(1).submitted_at(1).obj(),
        ],
        3, {"a": 1, "b": 2},
    ),
    case(
        "AFS-L gives the GPUs to a longer job with a larger relative gain",
        "AFS-L",
        [
            make_job("a").workers(1, 4).epochs(1).submitted_at(0).epoch_times(POOR).obj(),
            make_job("b").workers(1, 4).epochs(10).submitted_at(1).epoch_times(LINEAR).obj(),
        ],
        5, {"a": 1, "b": 4},
    ),
    case(
        "AFS-L grows the poorly scaling job once the other is at max",
        "AFS-L",
        [
            make_job("a").workers(1, 4).epochs(1).submitted_at(0).epoch_times(POOR).obj(),
            make_job("b").workers(1, 4).epochs(10).submitted_at(1).epoch_times(LINEAR).obj(),
        ],
        6, {"a": 2, "b": 4},
    ),
    # ----- Optimus (+Oracle)
    case(
        "Optimus starts every job at one GPU, then adds the GPU that cuts most time",
        "Optimus",
        [
            make_job("a").workers(1, 4).epochs(2).submitted_at(0).with_(oracle=FAST).obj(),
            make_job("b").workers(1, 4).epochs(2).submitted_at(1).with_(oracle=SLOW).obj(),
        ],
        # gains x 50 steps: a 20 then 5 (tie with b's 5: the earlier job), b 5
        4, {"a": 3, "b": 1},
    ),
    case(
        "Optimus leaves GPUs idle once one more would slow every job down",
        "Optimus",
        [make_job("a").workers(1, 4).epochs(2).with_(oracle=WORSE_AFTER_2).obj()],
        8, {"a": 2},
    ),
    case(
        "Optimus without the oracle judges by measured epoch times",
        "Optimus",
        [
            make_job("a").workers(1, 4).epochs(10).submitted_at(0).epoch_times(POOR)
            .with_(oracle=FAST).obj(),
            make_job("b").workers(1, 4).epochs(10).submitted_at(1).epoch_times(LINEAR).obj(),
        ],
        # b gains 500 s, then 167 s; a's 100 s comes next
        4, {"a": 1, "b": 3}, oracle=False,
    ),
    # ----- Pollux
    case(
        "Pollux starts every job before it grows any",
        "Pollux",
        [
            make_job("a").workers(1, 4).submitted_at(0).waited_for(60).obj(),
            make_job("b").workers(1, 4).submitted_at(1).waited_for(60).obj(),
        ],
        4, {"a": 2, "b": 2},
    ),
    case(
        "Pollux gives more GPUs to the job that speeds up more",
        "Pollux",
        [
            make_job("a").workers(1, 4).epoch_times(POOR).waited_for(LONG_AGO).obj(),
            make_job("b").workers(1, 4).epoch_times(LINEAR).waited_for(LONG_AGO).obj(),
        ],
        6, {"a": 2, "b": 4},
    ),
    case(
        "Pollux gives a batch-adaptive job that has measured nothing one GPU, as the artifact",
        "Pollux",
        [make_job("a").workers(1, 16).with_(goodput=UNMEASURED).waited_for(LONG_AGO).obj()],
        16, {"a": 1},
    ),
    case(
        "Pollux keeps a job that was restarted often where it is",
        "Pollux",
        [make_job("a").workers(1, 4).running(2).ran_for(100).with_(restarts=3).obj()],
        4, {"a": 2},
    ),
    case(
        "Pollux grows an old job that was seldom restarted",
        "Pollux",
        [make_job("a").workers(1, 4).running(2).ran_for(1000).obj()],
        4, {"a": 4},
    ),
    # ----- Voda: weight T(1)^-0.35 on the speedup; a change keeps 1 - 30 / min(T(n), 240)
    case(
        "Voda gives the GPUs to the job with the least work left",
        "Voda",
        [
            # a: 500 s on one GPU, 0.114 x (4 x 0.76) at 4; b: 5,000 s, 0.051 x 4 x 0.875
            make_job("a").workers(1, 4).epochs(5).epoch_times(LINEAR).submitted_at(1).obj(),
            make_job("b").workers(1, 4).epochs(50).epoch_times(LINEAR).submitted_at(0).obj(),
        ],
        4, {"a": 4, "b": 0},
    ),
    case(
        "Voda leaves a short job that scales poorly one GPU and gives a long one the rest",
        "Voda",
        [
            make_job("a").workers(1, 4).epochs(5).epoch_times(POOR).submitted_at(0).obj(),
            make_job("b").workers(1, 4).epochs(50).epoch_times(LINEAR).submitted_at(1).obj(),
        ],
        5, {"a": 1, "b": 4},
    ),
    case(
        "Voda does not restart a running job for an 11 % gain",
        "Voda",
        [make_job("a").workers(1, 4).epochs(50).epoch_times({1: 100.0, 2: 50.0, 4: 45.0})
         .running(2).obj()],
        4, {"a": 2},
    ),
    case(
        "Voda grows a running job when the gain pays for the restart",
        "Voda",
        [make_job("a").workers(1, 4).epochs(50).epoch_times({1: 100.0, 2: 50.0, 4: 26.0})
         .running(2).obj()],
        4, {"a": 4},
    ),
    case(
        "AFS-L skips a starting block that does not fit for a smaller one",
        "AFS-L",
        [
            make_job("a").rigid(4).epochs(1).submitted_at(0).obj(),  # 15 s at 4
            make_job("b").rigid(2).epochs(1).submitted_at(1).obj(),  # 30 s at 2
            make_job("c").rigid(1).epochs(10).submitted_at(2).obj(),  # 600 s at 1
        ],
        5, {"a": 4, "b": 0, "c": 1},
    ),
]


@pytest.mark.parametrize(("algorithm", "params", "jobs", "capacity", "expected"), CASES)
def test_allocation(
    algorithm: str, params: dict, jobs: list[Job], capacity: int, expected: dict[str, int]
) -> None:
    assert registry.create(algorithm, params)(jobs, capacity) == expected


def test_every_built_in_algorithm_has_hand_worked_cases() -> None:
    covered = {p.values[0] for p in CASES}
    assert covered == set(registry.BUILTIN_NAMES)

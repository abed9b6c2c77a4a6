"""Why a job under queues holds what it holds, in the queues' terms
(docs/design/013-queues.md, "Explanations").

A job whose queue took back GPUs from it is "Reclaimed for team-a's guarantee"; a job
below max in a queue at its borrowing limit is "waiting: team-b is at its borrowing
limit"; a job of a queue holding its weighted share of what is beyond the guarantees
says so; every other job gets its algorithm's reason within its queue's share.
"""

from __future__ import annotations

from collections.abc import Sequence

from voda.core.allocation.reasons import Reason, ReasonCode, explain, plural
from voda.core.model import Job
from voda.core.quotas.share import QueueOutcome, QuotaDecision


def explain_queues(algorithm: object, jobs: Sequence[Job],
                   decision: QuotaDecision) -> dict[str, Reason]:
    out: dict[str, Reason] = {}
    allocation = decision.allocation
    groups: dict[str, list[Job]] = {}
    for job in jobs:
        groups.setdefault(decision.job_queue[job.name], []).append(job)
    for name, members in groups.items():
        outcome = decision.queues[name]
        own = explain(algorithm, members, outcome.share, allocation)
        for job in members:
            gpus = allocation.get(job.name, 0)
            if gpus >= job.max_workers:
                continue
            if job.name in decision.reclaimed:
                out[job.name] = _reclaimed(job, gpus, outcome, decision)
            elif outcome.at_borrowing_limit and outcome.used > outcome.guarantee:
                out[job.name] = _at_limit(job, gpus, outcome)
            elif job.name in own:
                out[job.name] = own[job.name]
    return out


def _held(job: Job, gpus: int) -> str:
    return (f"it holds {gpus} of its max {job.max_workers}" if gpus
            else f"it needs at least its min of {job.min_workers}")


def _reclaimed(job: Job, gpus: int, outcome: QueueOutcome,
               decision: QuotaDecision) -> Reason:
    takers = sorted((q for q in decision.queues.values() if q.used > q.held_before
                     and q.name != outcome.name),
                    key=lambda q: (q.used > q.guarantee, -(q.used - q.held_before), q.name))
    if takers and takers[0].used <= takers[0].guarantee:
        why = f"{takers[0].name}'s guarantee"
    elif takers:
        why = f"{takers[0].name}'s weighted share"
    else:
        why = "other queues"
    how = (f"shrunk from {job.current_workers} to {gpus} GPUs" if gpus
           else f"preempted ({plural(job.current_workers)})")
    return Reason(ReasonCode.RECLAIMED,
                  f"Reclaimed for {why}: {outcome.name} held {outcome.held_before} GPUs, "
                  f"beyond its guarantee of {outcome.guarantee}, and now has a share of "
                  f"{outcome.share}; this job was {how}.")


def _at_limit(job: Job, gpus: int, outcome: QueueOutcome) -> Reason:
    state = "Waiting" if gpus == 0 else "Held below max"
    return Reason(ReasonCode.BORROWING_LIMIT,
                  f"{state}: {outcome.name} is at its borrowing limit (it holds "
                  f"{outcome.used} GPUs, its guarantee of {outcome.guarantee} plus "
                  f"{outcome.used - outcome.guarantee} borrowed); {_held(job, gpus)}.")

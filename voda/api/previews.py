"""What an administrator's action would do, said before it is done (the dashboard's
confirmations, voda.api.ui.actions): the jobs an algorithm switch would start, grow,
shrink, move or preempt at once, and the jobs a drain would stop.

The switch is previewed as the scheduler would decide now: the new algorithm on the
active jobs of the GPU type and the placement in force, with a placer of its own (the
scheduler's is not shared across threads). Nothing is changed."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from voda.core.allocation import registry
from voda.core.model import Action, JobStatus
from voda.core.placement.registry import get_placer
from voda.core.plan import decide

if TYPE_CHECKING:
    from voda.api.service import Service


def switch_actions(service: Service, gpu_type: str, algorithm: str) -> tuple[Action, ...]:
    """The actions the first decision under `algorithm` would take on `gpu_type`'s jobs.
    Raises UnknownAlgorithm or ValueError as the switch itself would."""
    view = service.scheduler_view(gpu_type)  # 404 for an unknown GPU type
    params = view["params"] if algorithm == view["algorithm"] else {}
    chosen = registry.create(algorithm, params, service.import_paths)
    now = time.time()
    with service.lock:
        s = service.scheduler
        records = [r for r in s.active.values() if r.gpu_type == gpu_type
                   and (r.status is not JobStatus.SUBMITTED or r.submit_time <= now)]
        jobs = [r.snapshot() for r in records]
        previous = {r.name: r.placement for r in records if r.placement}
        cluster = s.cluster.of_type(gpu_type)
    settings = service.settings
    plan = decide(jobs, cluster, previous, {gpu_type: chosen},
                  get_placer(settings.placement, settings.placement_settings),
                  explain_reasons=False)
    return plan.actions


def jobs_on(service: Service, node: str) -> dict[str, int]:
    """The jobs holding GPUs of `node`, with how many."""
    with service.lock:
        return {name: count for name, placement in service.scheduler.placement().items()
                for where, count in placement if where == node}

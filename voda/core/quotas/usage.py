"""What each queue holds now, per GPU type, against its guarantee: used, borrowed, lent
and waiting (docs/design/013-queues.md, "What the service shows"). Pure: the service
feeds it the live jobs' holdings; the API, the CLI, /metrics and the dashboard show it.

Borrowed GPUs come first from the GPUs no queue is guaranteed; only the rest is lent out
of idle guarantees, and it is told against the lenders in proportion to what each may
lend (its idle guarantee within its lending limit), largest remainders first.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from voda.core.quotas.model import DEFAULT_QUEUE, QueueSet

Key = tuple[str, str]  # (queue, GPU type)


@dataclass(frozen=True, slots=True)
class TypeUsage:
    gpu_type: str
    used: int  # GPUs its jobs hold
    guarantee: int
    borrowed: int  # held beyond its guarantee
    lent: int  # of its idle guarantee, held by other queues' jobs
    waiting: int  # its active jobs holding no GPU
    borrowing_limit: int | None  # None: unlimited
    lending_limit: int | None  # None: all of its idle guarantee


def queue_usage(queues: QueueSet, held: Mapping[Key, int], waiting: Mapping[Key, int],
                capacity: Mapping[str, int]) -> dict[str, dict[str, TypeUsage]]:
    """Per queue (declared ones, and `default` always), per GPU type (the
    cluster's, the guaranteed and the held ones): its usage. `held` and `waiting` are
    keyed by the queue each job runs in (QueueSet.queue_of of the name it gives)."""
    names = [q.name for q in queues]
    if DEFAULT_QUEUE not in names:
        names.append(DEFAULT_QUEUE)
    types = sorted(set(capacity) | {t for q in queues for t in q.guarantee}
                   | {t for _, t in (*held, *waiting)})
    out: dict[str, dict[str, TypeUsage]] = {name: {} for name in names}
    for gpu_type in types:
        lent = _lent(queues, names, held, capacity.get(gpu_type, 0), gpu_type)
        for name in names:
            queue = queues.get(name)
            used = held.get((name, gpu_type), 0)
            guarantee = queue.guaranteed(gpu_type)
            out[name][gpu_type] = TypeUsage(
                gpu_type, used, guarantee, max(0, used - guarantee), lent.get(name, 0),
                waiting.get((name, gpu_type), 0), queue.may_borrow(gpu_type),
                queue.may_lend(gpu_type))
    return out


def _lent(queues: QueueSet, names: list[str], held: Mapping[Key, int], capacity: int,
          gpu_type: str) -> dict[str, int]:
    guarantees = {n: queues.get(n).guaranteed(gpu_type) for n in names}
    borrowed = sum(max(0, held.get((n, gpu_type), 0) - g) for n, g in guarantees.items())
    unguaranteed = max(0, capacity - sum(guarantees.values()))
    owed = max(0, borrowed - unguaranteed)
    lendable = {}
    for name, guarantee in guarantees.items():
        idle = max(0, guarantee - held.get((name, gpu_type), 0))
        limit = queues.get(name).may_lend(gpu_type)
        lendable[name] = idle if limit is None else min(idle, limit)
    total = sum(lendable.values())
    if owed <= 0 or total <= 0:
        return {}
    lent = apportion(min(owed, total), lendable)
    return {n: v for n, v in lent.items() if v}


def apportion(total: int, weights: Mapping[str, float]) -> dict[str, int]:
    """`total` whole units split in proportion to `weights` (their sum above 0): each its
    share rounded down, then one more to the largest remainders (ties by name)."""
    whole = sum(weights.values())
    exact = {n: total * w / whole for n, w in weights.items()}
    out = {n: math.floor(x) for n, x in exact.items()}
    for name in sorted(exact, key=lambda n: (out[n] - exact[n], n))[:total - sum(out.values())]:
        out[name] += 1
    return out

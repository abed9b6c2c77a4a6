"""The quota layer as an allocation algorithm: `with_queues(algorithm, queues)` is what
decide() runs per GPU type when queues are configured (docs/design/013-queues.md).

It keeps the allocation contract (`voda.core.allocation.base`), so decide() needs no
change: it allocates through `share` and explains through `explain_queues`. With no
queues, `with_queues` returns the algorithm itself: every result is exactly today's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from voda.core.allocation.base import AllocationAlgorithm
from voda.core.allocation.reasons import Reason
from voda.core.model import Job
from voda.core.quotas.explain import explain_queues
from voda.core.quotas.model import QueueSet
from voda.core.quotas.share import QuotaDecision, share

Observer = Callable[[str, QuotaDecision], None]
_FIELDS = frozenset({"inner", "queues", "gpus_per_node", "observe"})


@dataclass(frozen=True)
class QueuedAlgorithm:
    """`inner` run per queue on the share the queues give it.

    `gpus_per_node` mirrors the inner algorithm's knob, so that decide() sizes it to the
    cluster's nodes (`sized_to`) as it would the algorithm alone. `observe(gpu_type,
    decision)` is told every decision (the simulator counts reclaims with it); for it each
    queue's `within_guarantee` is exact, which can cost a run of the algorithm per queue
    that borrows, unless the observer has `reads_within_guarantee = False`."""

    inner: AllocationAlgorithm
    queues: QueueSet
    gpus_per_node: int | None = None
    observe: Observer | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        own = getattr(self.inner, "gpus_per_node", None)
        if self.gpus_per_node is None:
            object.__setattr__(self, "gpus_per_node", own)
        elif own is not None and own != self.gpus_per_node and dataclasses.is_dataclass(
                self.inner):
            object.__setattr__(self, "inner",
                               dataclasses.replace(self.inner,  # type: ignore[type-var]
                                                   gpus_per_node=self.gpus_per_node))

    @property
    def name(self) -> str:
        return str(getattr(self.inner, "name", type(self.inner).__name__))

    def __getattr__(self, item: str) -> Any:  # the inner algorithm's knobs, read-only
        if item.startswith("__") or item in _FIELDS:
            raise AttributeError(item)
        return getattr(self.inner, item)

    def decision(self, jobs: Sequence[Job], capacity: int, exact: bool = True) -> QuotaDecision:
        gpu_type = jobs[0].gpu_type if jobs else ""
        return share(self.inner, jobs, capacity, self.queues, gpu_type, exact)

    def __call__(self, jobs: Sequence[Job], capacity: int) -> Mapping[str, int]:
        if not jobs:
            return {}
        # an observer reads `within_guarantee` exact unless it says it does not read it
        exact = self.observe is not None and getattr(self.observe, "reads_within_guarantee",
                                                     True)
        decided = self.decision(jobs, capacity, exact=bool(exact))
        if self.observe is not None:
            self.observe(jobs[0].gpu_type, decided)
        return decided.allocation

    def explain(self, jobs: Sequence[Job], capacity: int,
                allocation: Mapping[str, int]) -> Mapping[str, Reason]:
        if not jobs:
            return {}
        return explain_queues(self.inner, jobs, self.decision(jobs, capacity))


def with_queues(algorithm: AllocationAlgorithm, queues: QueueSet | None,
                observe: Observer | None = None) -> AllocationAlgorithm:
    """`algorithm` under `queues`; `algorithm` itself when there are none."""
    if not queues:
        return algorithm
    return QueuedAlgorithm(algorithm, queues, observe=observe)

"""Placement: {job: GPUs} -> {job: ((node, workers), ...)}.

A placer is a pure callable with the `Placer` signature. `first_fit` is the
simple one; the topology-aware manager lives beside it.
"""

from voda.core.placement.base import Placer, placement_problems
from voda.core.placement.first_fit import first_fit

__all__ = ["Placer", "first_fit", "placement_problems"]

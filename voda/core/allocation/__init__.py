"""Allocation algorithms: active jobs + capacity -> {job: GPUs}."""

from voda.core.allocation.base import (
    AllocationAlgorithm,
    AllocationRejected,
    allocation_problems,
    checked_allocate,
)
from voda.core.allocation.registry import (
    BUILTIN_NAMES,
    DEFAULT_ALGORITHM,
    UnknownAlgorithm,
    available,
    create,
    register,
)

__all__ = [
    "BUILTIN_NAMES",
    "DEFAULT_ALGORITHM",
    "AllocationAlgorithm",
    "AllocationRejected",
    "UnknownAlgorithm",
    "allocation_problems",
    "available",
    "checked_allocate",
    "create",
    "register",
]

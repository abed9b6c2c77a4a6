"""The GPU types a job accepts, as a submission names them.

Compact spec: `gpu_types: [a100, t4]` (or the string `"a100,t4"`); on an MPIJob or
PyTorchJob the annotation `voda.io/gpu-types: "a100,t4"`. `any` (or `*`) accepts every type
the cluster has. A job that names none of them keeps `gpu_type` (one type, as before); one
that names both is refused (the field names the conflict).
"""

from __future__ import annotations

import re
from typing import Any

from voda.core.model import ANY_GPU_TYPE, MAX_GPU_TYPES
from voda.spec.errors import FieldError

TYPE_RE = re.compile(r"^[A-Za-z0-9]([-_.A-Za-z0-9]*[A-Za-z0-9])?$")
TYPE_MAX = 100
ANY_WORDS = ("any", ANY_GPU_TYPE)


def parse_gpu_types(value: Any, label: str, errors: list[FieldError]) -> tuple[str, ...]:
    """The accepted types from a list or a comma-separated string; () with an error added
    when malformed (too many, empty, not a name)."""
    if isinstance(value, str):
        items: list[Any] = [part.strip() for part in value.split(",")]
    elif isinstance(value, list):
        items = value
    else:
        errors.append(FieldError(label, "must be a list of GPU type names or a comma-separated "
                                 f"string, got {type(value).__name__}"))
        return ()
    if not items or len(items) > MAX_GPU_TYPES:
        errors.append(FieldError(label, f"must name 1 to {MAX_GPU_TYPES} GPU types (or 'any'), "
                                 f"got {len(items)}"))
        return ()
    out: list[str] = []
    for item in items:
        if not isinstance(item, str) or not item:
            errors.append(FieldError(label, f"each GPU type must be a non-empty name, got "
                                     f"{item!r}"[:200]))
            return ()
        if item in ANY_WORDS:
            return (ANY_GPU_TYPE,)
        if len(item) > TYPE_MAX or not TYPE_RE.match(item):
            errors.append(FieldError(label, f"{item[:TYPE_MAX]!r} is not a GPU type name "
                                     "(letters, digits, '-', '_', '.')"))
            return ()
        if item not in out:
            out.append(item)
    return tuple(out)


def check_one_way(gpu_type: str | None, gpu_types: tuple[str, ...], label: str,
                  errors: list[FieldError]) -> None:
    if gpu_type and gpu_types:
        errors.append(FieldError(label, "name one GPU type (gpu_type) or the types it accepts "
                                 "(gpu_types), not both"))

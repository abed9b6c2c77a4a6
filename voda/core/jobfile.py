"""Jobs for a dry-run allocation, from parsed YAML or JSON data.

The input is a list of mappings, one per job, with these fields (only `name`
is required):

    name                   non-empty string, unique in the list
    min, max, preferred    worker counts (max defaults to min, preferred to none)
    priority               0 is highest
    submit_time            seconds
    epochs                 total epochs, completed_epochs done so far
    attained_gpu_seconds   service so far; counted in total, since the last start
                           and since the last promotion, as if the job had run
                           since it started and had never been promoted
    epoch_time_by_workers  {workers: seconds per epoch}

`jobs_from_data` is pure: the caller reads and parses the file. Every problem is
reported, each as "job 'x': field: reason" (a job without a usable name is
named by its position, "job #3").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from voda.core.model import Job, validate_job

FIELDS: tuple[str, ...] = (
    "name",
    "min",
    "max",
    "preferred",
    "priority",
    "submit_time",
    "epochs",
    "completed_epochs",
    "attained_gpu_seconds",
    "epoch_time_by_workers",
)


class JobFileError(ValueError):
    """The jobs are malformed; `messages` lists every problem found."""

    def __init__(self, messages: Sequence[str]) -> None:
        self.messages = list(messages)
        super().__init__("\n".join(self.messages))


class _Problem(Exception):
    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return repr(value)


def _integer(field: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Problem(field, f"must be an integer, got {_type_name(value)}")
    return value


def _number(field: str, value: Any, minimum: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Problem(field, f"must be a number, got {_type_name(value)}")
    if not math.isfinite(value):
        raise _Problem(field, f"must be finite, got {value}")
    if minimum is not None and value < minimum:
        raise _Problem(field, f"must be at least {minimum:g}, got {value}")
    return float(value)


def _workers_key(value: Any) -> int:
    """Worker counts as mapping keys: integers, or integer strings (JSON keys)."""
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Problem(
            "epoch_time_by_workers", f"worker count {value!r} is not a positive integer"
        )
    return value


def _epoch_times(value: Any) -> dict[int, float]:
    field = "epoch_time_by_workers"
    if not isinstance(value, Mapping):
        raise _Problem(field, f"must be a mapping of workers to seconds, got {_type_name(value)}")
    times: dict[int, float] = {}
    for key, seconds in value.items():
        workers = _workers_key(key)
        if workers < 1:
            raise _Problem(field, f"worker count {key!r} is not a positive integer")
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not (
            math.isfinite(seconds) and seconds > 0
        ):
            raise _Problem(
                field, f"seconds for {workers} workers must be a positive number, got {seconds!r}"
            )
        times[workers] = float(seconds)
    return times


def _label(entry: Any, index: int) -> str:
    if isinstance(entry, Mapping):
        name = entry.get("name")
        if isinstance(name, str) and name:
            return f"job {name!r}"
    return f"job #{index + 1}"


def _job(entry: Mapping[str, Any]) -> tuple[Job | None, list[tuple[str, str]]]:
    """One job, or the (field, reason) problems that prevent it."""
    unknown = [
        (str(key), f"unknown field; known fields: {', '.join(FIELDS)}")
        for key in entry
        if key not in FIELDS
    ]
    problems: list[tuple[str, str]] = []
    values: dict[str, Any] = {}

    def take(field: str, convert: Any) -> None:
        if field in entry:
            try:
                values[field] = convert(entry[field])
            except _Problem as problem:
                problems.append((problem.field, problem.reason))

    name = entry.get("name")
    if "name" not in entry:
        problems.append(("name", "required"))
    elif not isinstance(name, str) or not name:
        problems.append(("name", f"must be a non-empty string, got {_type_name(name)}"))
    take("min", lambda v: _integer("min", v))
    take("max", lambda v: _integer("max", v))
    take("preferred", lambda v: None if v is None else _integer("preferred", v))
    take("priority", lambda v: _integer("priority", v))
    take("epochs", lambda v: _integer("epochs", v))
    take("submit_time", lambda v: _number("submit_time", v))
    take("completed_epochs", lambda v: _number("completed_epochs", v, minimum=0))
    take("attained_gpu_seconds", lambda v: _number("attained_gpu_seconds", v, minimum=0))
    take("epoch_time_by_workers", _epoch_times)
    if problems:
        return None, unknown + problems

    lo = values.get("min", 1)
    attained = values.get("attained_gpu_seconds", 0.0)
    job = Job(
        name=name,
        min_workers=lo,
        max_workers=values.get("max", lo),
        preferred_workers=values.get("preferred"),
        priority=values.get("priority", 0),
        submit_time=values.get("submit_time", 0.0),
        epochs=values.get("epochs", 1),
        completed_epochs=values.get("completed_epochs", 0.0),
        attained_gpu_seconds=attained,
        attained_gpu_seconds_since_start=attained,
        attained_gpu_seconds_since_promotion=attained,
        epoch_time_by_workers=values.get("epoch_time_by_workers", {}),
    )
    problems = list(unknown)
    for message in validate_job(job):
        field, _, reason = message.partition(": ")
        problems.append((field, reason))
    return (None, problems) if problems else (job, [])


def jobs_from_data(data: Any) -> list[Job]:
    """The jobs described by `data` (a parsed YAML/JSON document), in the order given.

    Raises JobFileError listing every problem, each naming the job, the field
    and the reason.
    """
    if not isinstance(data, list):
        raise JobFileError(
            [f"the jobs must be a list of job mappings, got {_type_name(data)}"]
        )
    jobs: list[Job] = []
    messages: list[str] = []
    seen: dict[str, int] = {}
    for index, entry in enumerate(data):
        label = _label(entry, index)
        if not isinstance(entry, Mapping):
            messages.append(f"{label}: must be a mapping of fields, got {_type_name(entry)}")
            continue
        name = entry.get("name")
        if isinstance(name, str) and name:
            if name in seen:
                messages.append(
                    f"{label}: name: duplicate of job #{seen[name] + 1} (names must be unique)"
                )
                continue
            seen[name] = index
        job, problems = _job(entry)
        messages.extend(f"{label}: {field}: {reason}" for field, reason in problems)
        if job is not None:
            jobs.append(job)
    if messages:
        raise JobFileError(messages)
    return jobs

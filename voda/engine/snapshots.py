"""Frozen Job snapshots of the engine's mutable records, built cheaply.

The engine hands every decision a frozen `Job` per active job. Built through Job's own
constructor, a snapshot sets its 40 fields one `object.__setattr__` at a time (a frozen
dataclass) and `__post_init__` copies its three maps again; on a long trace that was a
fifth of the simulator's time. Here a snapshot is built by a function generated once from
Job's fields (as dataclasses generates `__init__`), on a mutable twin of Job's slots that
then becomes a Job (`_Draft`), and each map's
frozen copy is kept with the record and handed out again while the record's dict still
equals it: an epoch report or a category's new measurement makes a new copy.

The result equals `Job(**fields of the record)` field for field.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import fields
from types import MappingProxyType
from typing import Any, Protocol

from voda.core.model import Job

# The fields Job freezes into a read-only copy (Job.__post_init__).
MAP_FIELDS = ("epoch_time_by_workers", "layout_throughput", "goodput_by_type")
_EMPTY: Mapping[Any, Any] = MappingProxyType({})


class Snapshotable(Protocol):
    """Anything with every Job field as an attribute, plus a cache for the frozen maps."""

    frozen_maps: dict[str, tuple[dict[Any, Any], Mapping[Any, Any]]]


def frozen(record: Snapshotable, name: str) -> Mapping[Any, Any]:
    """A read-only copy of the record's map `name`, reused while the map is unchanged."""
    source = getattr(record, name)
    if not source:
        return _EMPTY
    cached = record.frozen_maps.get(name)
    if cached is not None and cached[0] == source:
        return cached[1]
    copy = dict(source)
    view = MappingProxyType(copy)
    record.frozen_maps[name] = (copy, view)
    return view


class _Draft:
    """A mutable object with Job's slots, in Job's order: filled by plain attribute stores
    (no call per field), then made a Job by setting its class, which Python allows
    between classes of one slot layout. About three times faster than a setter call per
    field."""

    __slots__ = Job.__slots__


def _builder(draft: type | None = _Draft) -> Callable[[Snapshotable], Job]:
    """`build(record) -> Job`: one line per field, no per-field loop or check. With
    `draft` None (or where Python refuses the class change), each slot is set through
    Job's own slot descriptor instead."""
    names = [f.name for f in fields(Job)]
    env: dict[str, Any] = {"new": object.__new__, "Job": Job, "Draft": draft,
                           "frozen": frozen, "EMPTY": _EMPTY}
    drafted = draft is not None and _class_change_allowed(draft)
    lines = ["def build(r):", f"    job = new({'Draft' if drafted else 'Job'})"]
    for i, name in enumerate(names):
        value = f"r.{name}"
        if name in MAP_FIELDS:
            # An empty map (most jobs' most maps) is handed the shared empty view directly,
            # an unchanged one its kept view (frozen(), inline: no call per map per job).
            lines += [f"    s = r.{name}",
                      f"    c = r.frozen_maps.get({name!r}) if s else None",
                      f"    m = EMPTY if not s else c[1] if c is not None and c[0] == s "
                      f"else frozen(r, {name!r})"]
            value = "m"
        if drafted:
            lines.append(f"    job.{name} = {value}")
        else:
            env[f"set{i}"] = getattr(Job, name).__set__  # the slot's descriptor
            lines.append(f"    set{i}(job, {value})")
    if drafted:
        lines.append("    job.__class__ = Job")
    lines.append("    return job")
    exec("\n".join(lines), env)  # the source is built above from Job's field names only
    build: Callable[[Snapshotable], Job] = env["build"]
    return build


def _class_change_allowed(draft: type) -> bool:
    if tuple(getattr(draft, "__slots__", ())) != tuple(f.name for f in fields(Job)):
        return False
    try:
        object.__new__(draft).__class__ = Job
    except TypeError:
        return False
    return True


snapshot_of = _builder()


def snapshot_with(record: Snapshotable, **changes: Any) -> Job:
    """`dataclasses.replace(snapshot_of(record), **changes)` without Job's constructor (the
    fields set are Job's own; the maps are the snapshot's frozen copies)."""
    job = snapshot_of(record)
    for name, value in changes.items():
        if name in MAP_FIELDS:
            raise ValueError(f"snapshot_with: {name} is a map; change it on the record")
        getattr(Job, name).__set__(job, value)
    return job

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

A replay of the engine that reads no reasons (the simulator, a forecast) keeps each job's
snapshot from one decision to the next (`KeptSnapshots`): between two decisions a job
that nothing happened to has only its clock-driven counters and its completed epochs
moved, so the kept snapshot (a `LiveJob`) gets those refreshed in place and is handed out
again; the engine tells it of an epoch time measured (`map_changed`) and drops it
(`forget`) wherever it changes any other field. No one holds a replay's snapshots past
its decision (no reasons are worked out from them later).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
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


def _builder(draft: type | None = _Draft, into: type | None = None
             ) -> Callable[[Snapshotable], Job]:
    """`build(record) -> Job`: one line per field, no per-field loop or check. With
    `draft` None (or where Python refuses the class change), each slot is set through
    Job's own slot descriptor instead. `into`: a Job subclass that takes plain stores
    (LiveJob), built as one directly."""
    names = [f.name for f in fields(Job)]
    env: dict[str, Any] = {"new": object.__new__, "Job": Job, "Draft": draft,
                           "frozen": frozen, "EMPTY": _EMPTY, "Into": into}
    drafted = into is not None or (draft is not None and _class_change_allowed(draft))
    made = "Into" if into is not None else "Draft" if drafted else "Job"
    lines = ["def build(r):", f"    job = new({made})",
             *_store_lines(names, not drafted, env, "    ")]
    if drafted and into is None:
        lines.append("    job.__class__ = Job")
    lines.append("    return job")
    exec("\n".join(lines), env)  # the source is built above from Job's field names only
    build: Callable[[Snapshotable], Job] = env["build"]
    return build


def _store_lines(names: Iterable[str], setters: bool, env: dict[str, Any],
                 indent: str) -> list[str]:
    """The statements that set the fields `names` of `job` from the record `r`: plain
    stores, or (`setters`) calls of Job's slot descriptors, put in `env`."""
    lines = []
    for i, name in enumerate(names):
        value = f"r.{name}"
        if name in MAP_FIELDS:
            # An empty map (most jobs' most maps) is handed the shared empty view directly,
            # an unchanged one its kept view (frozen(), inline: no call per map per job).
            lines += [f"s = r.{name}",
                      f"c = r.frozen_maps.get({name!r}) if s else None",
                      f"m = EMPTY if not s else c[1] if c is not None and c[0] == s "
                      f"else frozen(r, {name!r})"]
            value = "m"
        if setters:
            env[f"set{i}"] = getattr(Job, name).__set__  # the slot's descriptor
            lines.append(f"set{i}(job, {value})")
        else:
            lines.append(f"job.{name} = {value}")
    return [indent + line for line in lines]


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


# The fields that move without the engine saying so: the counters every step adds to, the
# progress an epoch report or a forecast's replay writes. A kept snapshot gets these (and
# the maps) again at each decision; a change to any other field drops it.
REFRESHED = (
    "completed_epochs",
    "attained_gpu_seconds", "attained_gpu_seconds_since_start",
    "running_seconds", "running_seconds_since_start",
    "running_seconds_since_epoch", "attained_gpu_seconds_since_epoch",
    "waiting_seconds", "waiting_seconds_since_start",
    "attained_gpu_seconds_since_promotion", "running_seconds_since_promotion",
    "waiting_seconds_since_promotion",
)


# Of REFRESHED, the fields that can move for a job that runs (current_workers > 0) and for
# one that does not, between two decisions that keep its snapshot: accounting adds to the
# running or the waiting counters as the job holds workers or not (account_all), and an
# epoch report may still move either's progress and its epoch under way (a halted job's
# last epoch ends after it stopped). Its workers change only with its placement, which
# drops the kept snapshot.
MOVED_WHILE_RUNNING = (
    "completed_epochs", "running_seconds_since_epoch", "attained_gpu_seconds_since_epoch",
    "attained_gpu_seconds", "attained_gpu_seconds_since_start",
    "running_seconds", "running_seconds_since_start",
    "attained_gpu_seconds_since_promotion", "running_seconds_since_promotion",
)
MOVED_WHILE_WAITING = (
    "completed_epochs", "running_seconds_since_epoch", "attained_gpu_seconds_since_epoch",
    "waiting_seconds", "waiting_seconds_since_start", "waiting_seconds_since_promotion",
)


class LiveJob(Job):
    """A Job whose fields take plain stores: the engine's kept snapshot (KeptSnapshots),
    refreshed in place between decisions. (Setting a frozen Job's class back and forth to
    store into it costs about as much as building a new one.) Read as any Job; it equals
    only another LiveJob with the same fields, as dataclasses compare."""

    __slots__ = ()
    __setattr__ = object.__setattr__
    __delattr__ = object.__delattr__


# The maps a kept snapshot reads again at each decision. The engine changes a job's
# `epoch_time_by_workers` in place only where its epoch reports are taken in, and tells the
# kept snapshot then (`KeptSnapshots.map_changed`); the others, a category's shared layout
# history among them, may change behind its back (most are empty: a cheap test).
REREAD_MAPS = ("layout_throughput", "goodput_by_type")


def _refresher(setters: bool = False) -> Callable[[Snapshotable, Job], Job]:
    """`refresh(record, job) -> job`: every REFRESHED field and every map of `job` (an
    earlier snapshot of the record) set from the record, in place: the reference for what
    `KeptSnapshots.take` refreshes of a job as it is. `setters`: through Job's slot
    descriptors (any Job) rather than plain stores (a LiveJob)."""
    env: dict[str, Any] = {"frozen": frozen, "EMPTY": _EMPTY}
    lines = ["def refresh(r, job):", *_store_lines((*REFRESHED, *MAP_FIELDS), setters, env,
                                                    "    "), "    return job"]
    exec("\n".join(lines), env)  # the source is built above from Job's field names only
    refresh: Callable[[Snapshotable, Job], Job] = env["refresh"]
    return refresh


Kept = dict[str, tuple[Any, Job]]


def _taker() -> Callable[[Kept, list[Any], Callable[[Any], Job]], list[Job]]:
    """`take(kept, records, build) -> jobs`: each record's kept LiveJob refreshed (inline:
    no call per job; of the counters, only those that move for a job running or not, as it
    is; of the maps, REREAD_MAPS), or a new one built and kept where none is kept for that
    very record."""
    env: dict[str, Any] = {"frozen": frozen, "EMPTY": _EMPTY}
    indent = " " * 16
    lines = ["def take(kept, records, build):",
             "    out = []",
             "    append = out.append",
             "    get = kept.get",
             "    for r in records:",
             "        entry = get(r.name)",
             "        if entry is not None and entry[0] is r:",
             "            job = entry[1]",
             "            if r.current_workers > 0:",
             *_store_lines((*MOVED_WHILE_RUNNING, *REREAD_MAPS), False, env, indent),
             "            else:",
             *_store_lines((*MOVED_WHILE_WAITING, *REREAD_MAPS), False, env, indent),
             "        else:",
             "            job = build(r)",
             "            kept[r.name] = (r, job)",
             "        append(job)",
             "    return out"]
    exec("\n".join(lines), env)  # the source is built above from Job's field names only
    take: Callable[[Kept, list[Any], Callable[[Any], Job]], list[Job]] = env["take"]
    return take


live_snapshot_of = _builder(into=LiveJob)
_take = _taker()


class Named(Snapshotable, Protocol):
    name: str


class KeptSnapshots:
    """Each record's snapshot, kept from one decision to the next and refreshed in place
    (see the module's note); `forget(name)` wherever the engine changes another field."""

    def __init__(self, refresh: Callable[[Snapshotable, Job], Job] | None = None,
                 build: Callable[[Snapshotable], Job] = live_snapshot_of) -> None:
        """`refresh`: a kept snapshot refreshed by it instead (tests: `_refresher`, the
        reference)."""
        self.kept: Kept = {}
        self.refresh = refresh
        self.build = build

    def take(self, records: list[Named]) -> list[Job]:
        """The records' snapshots, in their order (their `epoch_time_by_workers` as last
        told: see map_changed)."""
        refresh = self.refresh
        if refresh is None:
            return _take(self.kept, records, self.build)
        kept, build = self.kept, self.build
        out = []
        for record in records:
            entry = kept.get(record.name)
            if entry is not None and entry[0] is record:
                out.append(refresh(record, entry[1]))
            else:
                job = build(record)
                kept[record.name] = (record, job)
                out.append(job)
        return out

    def map_changed(self, record: Named, name: str) -> None:
        """The record's map `name` was changed in place: its kept snapshot gets a copy."""
        entry = self.kept.get(record.name)
        if entry is not None and entry[0] is record:
            setattr(entry[1], name, frozen(record, name) if getattr(record, name) else _EMPTY)

    def forget(self, name: str) -> None:
        self.kept.pop(name, None)

    def clear(self) -> None:
        self.kept.clear()

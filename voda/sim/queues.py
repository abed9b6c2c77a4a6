"""The queue file of `voda simulate --queues FILE` (and of `voda serve`):

    queues:
      - name: team-a
        guarantee: {default: 64}        # GPUs per GPU type
        borrowing_limit: {default: 32}  # optional; absent: unlimited
        lending_limit: {default: 16}    # optional; absent: all of its idle guarantee
        weight: 2                       # optional; default 1
        match: {cluster: 6214e9}        # which workload rows belong, by column

A job matching no queue is in `default` (no guarantee unless declared).
docs/design/013-queues.md says what the queues do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from voda.core.quotas import DEFAULT_QUEUE, Queue, QueueSet
from voda.core.quotas.model import MAX_QUEUES, queue_problems

_KEYS = frozenset({"name", "guarantee", "borrowing_limit", "lending_limit", "weight", "match"})
MAX_FILE_BYTES = 1_000_000
MAX_GPU_TYPES = 64  # GPU types in one queue's guarantee or limit
MAX_MATCH_KEYS = 16
MAX_TEXT = 100  # a GPU type's name, a match column or value


class QueueFileError(ValueError):
    """A bad queue file or entry; `field` names the entry's field at fault (e.g.
    `guarantee.a100`, empty when it is the whole file) and `index` the entry."""

    def __init__(self, message: str, field: str = "", index: int | None = None) -> None:
        super().__init__(message)
        self.field, self.index = field, index

    @property
    def reason(self) -> str:
        """The message without where it was read ("FILE: queues[i].FIELD: ")."""
        return str(self).split(": ", 2)[-1]


@dataclass(frozen=True)
class QueueFile:
    queues: QueueSet
    matches: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def queue_of(self, columns: Mapping[str, str]) -> str:
        """The first queue (in file order) whose `match` the row's columns all satisfy."""
        for queue in self.queues:
            match = self.matches.get(queue.name)
            if match and all(columns.get(k) == v for k, v in match.items()):
                return queue.name
        return DEFAULT_QUEUE

    def entry(self, name: str) -> dict[str, Any]:
        """One queue as the file (and the API) writes it; parse_queues reads it back."""
        return queue_entry(self.queues.get(name), self.matches.get(name) or {})


def queue_entry(queue: Queue, match: Mapping[str, str]) -> dict[str, Any]:
    def counts(m: Mapping[str, int] | None) -> dict[str, int] | None:
        return None if m is None else dict(sorted(m.items()))

    return {"name": queue.name, "guarantee": counts(queue.guarantee),
            "borrowing_limit": counts(queue.borrowing_limit),
            "lending_limit": counts(queue.lending_limit), "weight": queue.weight,
            "match": dict(sorted(match.items()))}


def load_queue_file(path: str | Path) -> QueueFile:
    return parse_queues(read_queue_document(path), str(path))


def read_queue_document(path: str | Path) -> Any:
    """The YAML document of a queue file (parse_queues checks it)."""
    p = Path(path)
    try:
        if p.stat().st_size > MAX_FILE_BYTES:
            raise QueueFileError(f"{p}: larger than {MAX_FILE_BYTES} bytes")
        return yaml.safe_load(p.read_text())
    except OSError as exc:
        raise QueueFileError(f"{p}: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise QueueFileError(f"{p}: not YAML: {exc}") from exc


def parse_queues(data: Any, where: str = "queues") -> QueueFile:
    """The queues of a queue file, of config.toml's [[queues]] tables, or of the API's
    entries: the one reader of every queue definition."""
    if not isinstance(data, Mapping) or not isinstance(data.get("queues"), list):
        raise QueueFileError(f"{where}: expected a mapping with a list under 'queues'")
    items = data["queues"]
    if len(items) > MAX_QUEUES:
        raise QueueFileError(f"{where}: queues: at most {MAX_QUEUES}, got {len(items)}")
    queues, matches = [], {}
    for i, item in enumerate(items):
        at = f"{where}: queues[{i}]"
        if not isinstance(item, Mapping):
            raise QueueFileError(f"{at}: expected a mapping", "", i)
        unknown = sorted(set(item) - _KEYS)
        if unknown:
            raise QueueFileError(f"{at}: unknown field {unknown[0]!r}; fields: "
                                 f"{', '.join(sorted(_KEYS))}", str(unknown[0]), i)
        name = item.get("name")
        if not isinstance(name, str):
            raise QueueFileError(f"{at}.name: expected a string, got {name!r}", "name", i)
        queue = Queue(name, _counts(item, "guarantee", at, i) or {},
                      _counts(item, "borrowing_limit", at, i),
                      _counts(item, "lending_limit", at, i), item.get("weight", 1.0))
        problems = queue_problems(queue)
        if problems:
            field_, _, reason = problems[0].partition(": ")
            raise QueueFileError(f"{at}.{field_}: {reason}", field_, i)
        queues.append(queue)
        match = item.get("match") or {}
        if not isinstance(match, Mapping) or len(match) > MAX_MATCH_KEYS:
            raise QueueFileError(f"{at}.match: expected a mapping of at most {MAX_MATCH_KEYS} "
                                 f"columns to values", "match", i)
        matches[name] = {str(k): str(v) for k, v in match.items()}
        for key, value in matches[name].items():
            if len(key) > MAX_TEXT or len(value) > MAX_TEXT:
                raise QueueFileError(f"{at}.match.{key[:MAX_TEXT]}: at most {MAX_TEXT} "
                                     f"characters", f"match.{key[:MAX_TEXT]}", i)
    try:
        return QueueFile(QueueSet(tuple(queues)), matches)
    except ValueError as exc:
        raise QueueFileError(f"{where}: {exc}", "name") from exc


def _counts(item: Mapping[str, Any], key: str, at: str, i: int) -> dict[str, int] | None:
    value = item.get(key)
    if value is None:
        return None
    if not isinstance(value, Mapping) or len(value) > MAX_GPU_TYPES:
        raise QueueFileError(f"{at}.{key}: expected GPUs per GPU type (at most "
                             f"{MAX_GPU_TYPES} types), e.g. {{default: 8}}", key, i)
    for gpu_type in value:
        if not isinstance(gpu_type, str) or not 0 < len(gpu_type) <= MAX_TEXT:
            raise QueueFileError(f"{at}.{key}: GPU types are names of 1 to {MAX_TEXT} "
                                 f"characters, got {gpu_type!r}", key, i)
    return {str(k): v for k, v in value.items()}

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
from voda.core.quotas.model import MAX_QUEUES

_KEYS = frozenset({"name", "guarantee", "borrowing_limit", "lending_limit", "weight", "match"})
MAX_FILE_BYTES = 1_000_000


class QueueFileError(ValueError):
    pass


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


def load_queue_file(path: str | Path) -> QueueFile:
    p = Path(path)
    try:
        if p.stat().st_size > MAX_FILE_BYTES:
            raise QueueFileError(f"{p}: larger than {MAX_FILE_BYTES} bytes")
        data = yaml.safe_load(p.read_text())
    except OSError as exc:
        raise QueueFileError(f"{p}: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise QueueFileError(f"{p}: not YAML: {exc}") from exc
    return parse_queues(data, str(p))


def parse_queues(data: Any, where: str = "queues") -> QueueFile:
    if not isinstance(data, Mapping) or not isinstance(data.get("queues"), list):
        raise QueueFileError(f"{where}: expected a mapping with a list under 'queues'")
    items = data["queues"]
    if len(items) > MAX_QUEUES:
        raise QueueFileError(f"{where}: queues: at most {MAX_QUEUES}, got {len(items)}")
    queues, matches = [], {}
    for i, item in enumerate(items):
        at = f"{where}: queues[{i}]"
        if not isinstance(item, Mapping):
            raise QueueFileError(f"{at}: expected a mapping")
        unknown = sorted(set(item) - _KEYS)
        if unknown:
            raise QueueFileError(f"{at}: unknown field {unknown[0]!r}; fields: "
                                 f"{', '.join(sorted(_KEYS))}")
        name = item.get("name")
        if not isinstance(name, str):
            raise QueueFileError(f"{at}.name: expected a string, got {name!r}")
        queues.append(Queue(name, _counts(item, "guarantee", at) or {},
                            _counts(item, "borrowing_limit", at),
                            _counts(item, "lending_limit", at), item.get("weight", 1.0)))
        match = item.get("match") or {}
        if not isinstance(match, Mapping):
            raise QueueFileError(f"{at}.match: expected a mapping of column to value")
        matches[name] = {str(k): str(v) for k, v in match.items()}
    try:
        return QueueFile(QueueSet(tuple(queues)), matches)
    except ValueError as exc:
        raise QueueFileError(f"{where}: {exc}") from exc


def _counts(item: Mapping[str, Any], key: str, at: str) -> dict[str, int] | None:
    value = item.get(key)
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise QueueFileError(f"{at}.{key}: expected GPUs per GPU type, e.g. {{default: 8}}")
    return {str(k): v for k, v in value.items()}

"""The configuration in force, and where it comes from: a ConfigMap's key (fed its watch
events) or a file (read again when its time or size changes).

A document that does not parse leaves the configuration in force and is kept as
`error` (logged, naming every field at fault) until a good one comes; a deleted
ConfigMap means the defaults.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from voda.podsched.config import ConfigError, SchedulerConfig, parse_text

log = logging.getLogger(__name__)


class ConfigSource:
    def __init__(self, on_change: Callable[[SchedulerConfig], None],
                 config_file: str | None = None, config_map: str | None = None,
                 config_key: str = "config.yaml") -> None:
        self.on_change = on_change
        self.config_file = config_file
        self.config_map = config_map
        self.config_key = config_key
        self.config = SchedulerConfig()
        self.error: str | None = None
        self._seen: tuple[float, int] | None = None

    def config_map_event(self, kind: str, obj: Mapping[str, Any], old: Any = None) -> None:
        where = f"ConfigMap {self.config_map}"
        if kind == "DELETED":
            log.info("pod scheduler: %s deleted: the defaults apply", where)
            self._set(SchedulerConfig())
            return
        text = (obj.get("data") or {}).get(self.config_key, "")
        self._apply(text, f"{where} key {self.config_key}")

    def poll_file(self) -> None:
        path = self.config_file
        if not path:
            return
        try:
            stat = os.stat(path)
            seen = (stat.st_mtime, stat.st_size)
            if seen == self._seen:
                return
            self._seen = seen
            text = Path(path).read_bytes()
        except OSError as exc:
            self._refuse(f"{path}: {exc.strerror}")
            return
        self._apply(text, path)

    def _apply(self, text: str | bytes, where: str) -> None:
        try:
            config = parse_text(text)
        except ConfigError as exc:
            self._refuse(f"{where}: {exc}")
            return
        self._set(config)

    def _refuse(self, error: str) -> None:
        self.error = error
        log.error("pod scheduler: %s; keeping the configuration in force", error)

    def _set(self, config: SchedulerConfig) -> None:
        self.error = None
        if config != self.config:
            self.config = config
            self.on_change(config)

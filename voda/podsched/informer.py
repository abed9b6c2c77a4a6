"""List, then watch from the list's resourceVersion, for ever.

A watch that ends is resumed from the last resourceVersion seen (bookmarks
included); 410 Gone, or a failure with nothing to resume from, lists again;
any other failure backs off (doubling, capped, or the server's Retry-After)
and resumes. Nothing the API server does ends the loop; only `stop`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

from voda.podsched.kubeapi import GONE, ApiFailure

log = logging.getLogger(__name__)

Obj = dict[str, Any]


class Backoff:
    def __init__(self, first: float = 0.2, cap: float = 5.0) -> None:
        self.first, self.cap = first, cap
        self.delay = first

    def next(self, failure: ApiFailure | None = None) -> float:
        if failure is not None and failure.retry_after is not None:
            return min(max(0.0, failure.retry_after), 60.0)
        delay = self.delay
        self.delay = min(self.cap, self.delay * 2)
        return delay

    def reset(self) -> None:
        self.delay = self.first


class Informer:
    def __init__(
        self,
        name: str,
        list_fn: Callable[[], tuple[list[Obj], str]],
        watch_fn: Callable[[str], Iterator[Obj]],
        on_list: Callable[[list[Obj]], None],
        on_event: Callable[[str, Obj], None],
        stop: threading.Event,
    ) -> None:
        self.name = name
        self.list_fn, self.watch_fn = list_fn, watch_fn
        self.on_list, self.on_event = on_list, on_event
        self.stop = stop
        self.synced = threading.Event()
        self.backoff = Backoff()
        self.relists = 0
        self._thread: threading.Thread | None = None

    def start(self) -> Informer:
        self._thread = threading.Thread(target=self.run, name=f"informer-{self.name}",
                                        daemon=True)
        self._thread.start()
        return self

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def run(self) -> None:
        version = ""
        while not self.stop.is_set():
            try:
                if not version:
                    items, version = self.list_fn()
                    self.on_list(items)
                    self.relists += 1
                    self.synced.set()
                version = self._follow(version)
                self.backoff.reset()
            except ApiFailure as failure:
                if self.stop.is_set():
                    return
                if failure.status == GONE:
                    version = ""
                    continue
                delay = self.backoff.next(failure)
                log.warning("%s: %s; again in %.1f s", self.name, failure, delay)
                self.stop.wait(delay)
            except Exception:  # a bug in a handler must not end the watch
                log.exception("%s: handler failed; listing again", self.name)
                version = ""
                self.stop.wait(self.backoff.next())

    def _follow(self, version: str) -> str:
        """Apply watch events until the watch ends; the resourceVersion to resume from."""
        for event in self.watch_fn(version):
            if self.stop.is_set():
                break
            kind = event.get("type")
            obj = event.get("object") or {}
            if kind == "ERROR":
                code = int(obj.get("code") or 0)
                raise ApiFailure(code, str(obj.get("message", "watch error")))
            version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
            if kind in ("ADDED", "MODIFIED", "DELETED"):
                self.on_event(kind, obj)
        return version

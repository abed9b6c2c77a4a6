"""List, then watch from the list's resourceVersion, forever.

A watch that ends is resumed from the last resourceVersion seen (bookmarks
included); 410 Gone means the history is compacted, so the informer lists again
and reports the differences; any other error backs off and retries. Nothing an
API server does stops the loop; only `stop()` does.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from voda.backends.kubernetes.api import ApiError, Kind, KubeApi, Obj

log = logging.getLogger(__name__)

Handler = Callable[[str, Obj, Obj | None], None]  # (ADDED|MODIFIED|DELETED, object, old)


class Informer:
    def __init__(self, api: KubeApi, kind: Kind, handler: Handler,
                 namespace: str | None = None, label_selector: str | None = None,
                 field_selector: str | None = None, watch_seconds: int = 300,
                 backoff: float = 0.2, max_backoff: float = 5.0) -> None:
        self.api = api
        self.kind = kind
        self.handler = handler
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.watch_seconds = watch_seconds
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.cache: dict[tuple[str, str], Obj] = {}
        self.lock = threading.Lock()
        self.synced = threading.Event()
        self.resource_version: str | None = None
        self.relists = 0
        self.errors = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._response: Any = None

    @staticmethod
    def key(obj: Obj) -> tuple[str, str]:
        meta = obj["metadata"]
        return meta.get("namespace", ""), meta["name"]

    def start(self) -> Informer:
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"informer-{self.kind.plural}")
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        response = self._response
        if response is not None:
            try:
                response.shutdown()
            except Exception:
                log.debug("closing a watch failed", exc_info=True)
        if self._thread is not None:
            self._thread.join(5)

    def items(self) -> list[Obj]:
        with self.lock:
            return list(self.cache.values())

    def _run(self) -> None:
        delay = self.backoff
        while not self._stop.is_set():
            try:
                if self.resource_version is None:
                    self._relist()
                self._watch()
                delay = self.backoff
            except ApiError as exc:
                if exc.status == 410:
                    self.resource_version = None
                    continue
                self._failed(exc, delay)
                delay = min(self.max_backoff, delay * 2)
            except Exception as exc:
                self._failed(exc, delay)
                delay = min(self.max_backoff, delay * 2)

    def _failed(self, exc: Exception, delay: float) -> None:
        if self._stop.is_set():
            return
        self.errors += 1
        log.warning("%s informer: %s; retrying in %.1f s", self.kind.plural, exc, delay)
        self._stop.wait(delay)

    def _relist(self) -> None:
        listed = self.api.list(self.kind, self.namespace, self.label_selector,
                               self.field_selector)
        fresh = {self.key(o): o for o in listed.get("items") or []}
        with self.lock:
            old, self.cache = self.cache, dict(fresh)
        for key, obj in fresh.items():
            before = old.get(key)
            if before is None:
                self.handler("ADDED", obj, None)
            elif before["metadata"].get("resourceVersion") != obj["metadata"].get(
                    "resourceVersion"):
                self.handler("MODIFIED", obj, before)
        for key, obj in old.items():
            if key not in fresh:
                self.handler("DELETED", obj, obj)
        self.resource_version = listed["metadata"]["resourceVersion"]
        self.relists += 1
        self.synced.set()

    def _watch(self) -> None:
        assert self.resource_version is not None
        for event in self.api.watch(self.kind, self.namespace, self.resource_version,
                                    self.watch_seconds, self.label_selector,
                                    self.field_selector, opened=self._opened):
            if self._stop.is_set():
                return
            kind, obj = event.get("type"), event.get("object") or {}
            if kind == "ERROR":
                raise ApiError(int(obj.get("code", 500)), str(obj.get("reason", "")),
                               str(obj.get("message", "")))
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            if kind == "BOOKMARK":
                self.resource_version = rv or self.resource_version
                continue
            key = self.key(obj)
            with self.lock:
                before = self.cache.get(key)
                if kind == "DELETED":
                    self.cache.pop(key, None)
                else:
                    self.cache[key] = obj
            if rv:
                self.resource_version = rv
            self.handler(str(kind), obj, before)


    def _opened(self, response: Any) -> None:
        self._response = response


def watch_all(informers: list[Informer], timeout: float = 30.0) -> bool:
    """Start informers and wait until each has listed once."""
    for informer in informers:
        informer.start()
    return all(i.synced.wait(timeout) for i in informers)

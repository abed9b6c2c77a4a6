"""List, then watch from the list's resourceVersion, forever.

A watch that ends is resumed from the last resourceVersion seen (bookmarks
included); 410 Gone means the history is compacted, so the informer lists again
(in pages) and reports the differences; any other error backs off and retries. A
watch that sends nothing, not even a bookmark, for `idle_seconds` is taken for a
dead connection and opened again. Nothing an API server does stops the loop; only
`stop()` does.

A handler that raises does not lose its event: the event waits in a per-object
queue and is delivered again (with backoff) before any later event of the same
object, so each object's events still arrive in order.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from voda.backends.kubernetes.api import (
    ApiError,
    Kind,
    KubeApi,
    Obj,
    WatchIdle,
    no_collection,
)

log = logging.getLogger(__name__)

Handler = Callable[[str, Obj, Obj | None], None]  # (ADDED|MODIFIED|DELETED, object, old)
Transform = Callable[[Obj], Obj]  # what of an object is cached and handed on


class Informer:
    def __init__(self, api: KubeApi, kind: Kind, handler: Handler,
                 namespace: str | None = None, label_selector: str | None = None,
                 field_selector: str | None = None, watch_seconds: int = 300,
                 backoff: float = 0.2, max_backoff: float = 5.0,
                 idle_seconds: float = 60.0, transform: Transform | None = None) -> None:
        self.api = api
        self.kind = kind
        self.handler = handler
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.watch_seconds = watch_seconds
        self.idle_seconds = idle_seconds
        self.transform = transform
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.cache: dict[tuple[str, str], Obj] = {}
        self.lock = threading.Lock()
        self.synced = threading.Event()
        self.resource_version: str | None = None
        self.relists = 0
        self.errors = 0
        self.idle_restarts = 0
        self.handler_errors = 0
        # object key -> events its handler has yet to take, oldest first (a handler raised)
        self.undelivered: dict[tuple[str, str], deque[tuple[str, Obj, Obj | None]]] = {}
        self._retry_at = 0.0
        self._retry_delay = backoff
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
                    delay = self.backoff  # the server answers again
                self._redeliver()
                self._watch()
                delay = self.backoff
            except WatchIdle as exc:
                self.idle_restarts += 1
                log.warning("%s informer: %s; watching again", self.kind.plural, exc.message)
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
        """List in pages and report the differences. An object whose resourceVersion is
        the cached one's keeps the cached copy (the listed one is dropped with its page),
        so a relist holds little more than the cache."""
        with self.lock:
            old = self.cache
        fresh: dict[tuple[str, str], Obj] = {}
        changed: list[tuple[tuple[str, str], Obj]] = []
        version = None
        with no_collection():
            for page in self.api.list_pages(self.kind, self.namespace, self.label_selector,
                                            self.field_selector):
                version = page["metadata"]["resourceVersion"]
                for obj in page.get("items") or []:
                    key = self.key(obj)
                    before = old.get(key)
                    if before is not None and before["metadata"].get(
                            "resourceVersion") == obj["metadata"].get("resourceVersion"):
                        fresh[key] = before
                        continue
                    fresh[key] = obj if self.transform is None else self.transform(obj)
                    changed.append((key, fresh[key]))
        with self.lock:
            old, self.cache = self.cache, fresh
        for key, obj in changed:
            before = old.get(key)
            self._deliver(key, "ADDED" if before is None else "MODIFIED", obj, before)
        for key, obj in old.items():
            if key not in fresh:
                self._deliver(key, "DELETED", obj, obj)
        self.resource_version = version
        self.relists += 1
        self.synced.set()

    def _watch_seconds(self) -> int:
        """How long one watch asks to last: shorter than the idle limit (the server ends a
        healthy watch, with a bookmark just before, before it would look dead), spread
        as client-go spreads its watches so informers do not reconnect in step."""
        longest = min(float(self.watch_seconds), self.idle_seconds * 5 / 6)
        return max(1, int(longest * (0.8 + 0.2 * random.random())))

    def _watch(self) -> None:
        assert self.resource_version is not None
        for event in self.api.watch(self.kind, self.namespace, self.resource_version,
                                    self._watch_seconds(), self.label_selector,
                                    self.field_selector, opened=self._opened,
                                    idle_seconds=self.idle_seconds):
            if self._stop.is_set():
                return
            self._redeliver()
            kind, obj = event.get("type"), event.get("object") or {}
            if kind == "ERROR":
                raise ApiError(int(obj.get("code", 500)), str(obj.get("reason", "")),
                               str(obj.get("message", "")))
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            if kind == "BOOKMARK":
                self.resource_version = rv or self.resource_version
                continue
            if self.transform is not None:
                obj = self.transform(obj)
            key = self.key(obj)
            with self.lock:
                before = self.cache.get(key)
                if kind == "DELETED":
                    self.cache.pop(key, None)
                else:
                    self.cache[key] = obj
            if rv:
                self.resource_version = rv
            self._deliver(key, str(kind), obj, before)

    # ----- delivery -----------------------------------------------------------------------
    def _deliver(self, key: tuple[str, str], kind: str, obj: Obj, old: Obj | None) -> None:
        """Hand one event to the handler, after any of the same object's that wait."""
        queue = self.undelivered.get(key)
        if queue is not None:
            queue.append((kind, obj, old))
            self._drain(key)
            return
        if not self._call(kind, obj, old):
            self.undelivered[key] = deque([(kind, obj, old)])
            self._schedule_retry()

    def _call(self, kind: str, obj: Obj, old: Obj | None) -> bool:
        try:
            self.handler(kind, obj, old)
            return True
        except Exception:
            self.handler_errors += 1
            log.exception("%s informer: the handler failed on %s %s/%s; it gets the event "
                          "again", self.kind.plural, kind,
                          obj.get("metadata", {}).get("namespace", ""),
                          obj.get("metadata", {}).get("name", ""))
            return False

    def _drain(self, key: tuple[str, str]) -> bool:
        queue = self.undelivered[key]
        while queue:
            if not self._call(*queue[0]):
                return False
            queue.popleft()
        del self.undelivered[key]
        return True

    def _schedule_retry(self) -> None:
        self._retry_at = time.monotonic() + self._retry_delay
        self._retry_delay = min(self.max_backoff, self._retry_delay * 2)

    def _redeliver(self) -> None:
        """Retry the events a handler refused, once their backoff is over (called on each
        event and bookmark, and at least every `idle_seconds` by a quiet watch ending)."""
        if not self.undelivered or time.monotonic() < self._retry_at:
            return
        if all([self._drain(key) for key in list(self.undelivered)]):
            self._retry_delay = self.backoff
        else:
            self._schedule_retry()


    def _opened(self, response: Any) -> None:
        self._response = response


def watch_all(informers: list[Informer], timeout: float = 30.0) -> bool:
    """Start informers and wait until each has listed once."""
    for informer in informers:
        informer.start()
    return all(i.synced.wait(timeout) for i in informers)


def predates(obj: Obj, known: Obj | None) -> bool:
    """Whether a delivered `obj` is an older state of the same object than `known` (our
    own write's answer, which can arrive before the watch delivers the events that
    preceded it). resourceVersions are opaque to clients by convention, but every
    kube-apiserver serves etcd revisions: integers that only grow. Anything else is
    taken as new, which costs at most one repeated, idempotent write."""
    if known is None:
        return False
    meta, seen = obj.get("metadata") or {}, known.get("metadata") or {}
    if meta.get("uid") != seen.get("uid"):
        return False
    try:
        return int(meta.get("resourceVersion", "")) < int(seen.get("resourceVersion", ""))
    except ValueError:
        return False

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
        self.last_relist: dict[str, float] = {}  # what the last list took (see _relist)
        # object key -> events its handler has yet to take, oldest first (a handler raised)
        self.undelivered: dict[tuple[str, str], deque[tuple[str, Obj, Obj | None]]] = {}
        self._retry_at = 0.0
        self._retry_delay = backoff
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._response: Any = None
        self._watch_opened: float | None = None  # when the current watch's answer came
        self._watch_heard = False  # whether it has sent anything (an event, a bookmark)

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
            self._watch_opened, self._watch_heard = None, False
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
                if self._dropped():
                    log.warning("%s informer: %s; watching again", self.kind.plural, exc)
                    continue
                self._failed(exc, delay)
                delay = min(self.max_backoff, delay * 2)

    def _dropped(self) -> bool:
        """Whether the error ended a watch that had been open (its connection dropped: the
        server restarted, or ended it, or a proxy closed it) for a second or more, or that
        had sent something: watched again at once, as client-go's reflector does; a
        shorter, silent one is "a very short watch" and waits the backoff, so a server
        that drops every watch is not asked again and again."""
        opened = self._watch_opened
        return opened is not None and (self._watch_heard
                                       or time.monotonic() - opened >= 1.0)

    def _failed(self, exc: Exception, delay: float) -> None:
        if self._stop.is_set():
            return
        self.errors += 1
        log.warning("%s informer: %s; retrying in %.1f s", self.kind.plural, exc, delay)
        self._stop.wait(delay)

    def _relist(self) -> None:
        """List in pages and report the differences. Items come undecoded but for their
        names and resourceVersions: one whose resourceVersion is the cached one's keeps the
        cached copy and is never decoded (most of a relist after 410 Gone); the others are
        decoded and transformed one at a time, so a relist holds little more than the cache
        and two pages (the next is fetched while this one is digested). What it took is
        logged and kept in `last_relist` (seconds: `waited` for pages; `fetch`, from each
        request to its body's last byte, and `decode`, the pages' metadata and items'
        heads, both a page ahead; `digest`, comparing, decoding and transforming the
        changed items; `deliver`, the handlers)."""
        began = time.perf_counter()
        with self.lock:
            old = self.cache
        fresh: dict[tuple[str, str], Obj] = {}
        changed: list[tuple[tuple[str, str], Obj]] = []
        version = None
        timings: dict[str, float] = {"fetch": 0.0, "decode": 0.0}
        pages = 0
        waited = 0.0
        with no_collection():
            listed = self.api.list_pages(self.kind, self.namespace, self.label_selector,
                                         self.field_selector, lazy=True, timings=timings,
                                         prefetch=True)
            while True:
                asked = time.perf_counter()
                page = next(listed, None)
                waited += time.perf_counter() - asked
                if page is None:
                    break
                pages += 1
                version = page["metadata"]["resourceVersion"]
                items = page.get("items")
                if not items:
                    continue
                for index, (namespace, name, rv) in enumerate(items.heads()):
                    key = (namespace, name)
                    before = old.get(key)
                    if before is not None and before["metadata"].get(
                            "resourceVersion") == rv:
                        fresh[key] = before
                        continue
                    obj = items[index]
                    fresh[key] = obj if self.transform is None else self.transform(obj)
                    changed.append((key, fresh[key]))
        listed_at = time.perf_counter()
        with self.lock:
            old, self.cache = self.cache, fresh
        deleted = 0
        for key, obj in changed:
            before = old.get(key)
            self._deliver(key, "ADDED" if before is None else "MODIFIED", obj, before)
        for key, obj in old.items():
            if key not in fresh:
                deleted += 1
                self._deliver(key, "DELETED", obj, obj)
        done = time.perf_counter()
        self.resource_version = version
        self.relists += 1
        self.last_relist = {
            "objects": len(fresh), "changed": len(changed), "deleted": deleted,
            "pages": pages, "seconds": done - began, "waited": waited,
            "fetch": timings["fetch"], "decode": timings["decode"],
            "digest": listed_at - began - waited, "deliver": done - listed_at}
        log.info("%s informer%s: listed %d (%d new or changed, %d gone) in %d pages in "
                 "%.2f s: %.2f s waiting for pages (fetched in %.2f s, request to last byte, "
                 "and their heads decoded in %.2f s, a page ahead), %.2f s digesting, "
                 "%.2f s delivering", self.kind.plural, self._scope(), len(fresh),
                 len(changed), deleted, pages, done - began, waited, timings["fetch"],
                 timings["decode"], self.last_relist["digest"], done - listed_at)
        self.synced.set()

    def _scope(self) -> str:
        where = f" in {self.namespace}" if self.namespace else ""
        chosen = ",".join(s for s in (self.label_selector, self.field_selector) if s)
        return f"{where}{f' ({chosen})' if chosen else ''}"

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
            self._watch_heard = True
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
        self._watch_opened = time.monotonic()


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

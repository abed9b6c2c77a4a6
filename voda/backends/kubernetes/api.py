"""Requests to the API server through the official `kubernetes` client.

The client supplies the configuration (kubeconfig or in-cluster), authentication,
TLS and transport; objects stay plain dicts (its model classes are slow and lose
fields they do not know). Every patch names its content type explicitly: the
Python clients' defaults differ, and one of them is refused by a real server.

Transient failures (429, 5xx, connection errors, timeouts) are retried with
exponential backoff, honouring Retry-After, a bounded number of times; then
`Unavailable` is raised for the caller's own loop to retry later. Writes pass
through a fence: when the process is not (or no longer) the leader, nothing is
sent (`NotLeader`). A fence that tells how long the process may still act (the
leader elector's `time_left`) also bounds every write in flight: each attempt's
timeout, client side and server side (the `timeout` query parameter, which
kube-apiserver turns into the request's deadline, as client-go sends it), ends
before the lease it was sent under can pass to a standby, and a retry whose
back-off would outlast the lease is not sent.
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypedDict

import msgspec
import orjson

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
TRANSIENT = frozenset({429, 500, 502, 503, 504})

Obj = dict[str, Any]
# Seconds this process may still act as the leader (0 or less: not at all); a fence that
# answers only True or False puts no bound on a write's duration.
Fence = Callable[[], float | bool]


@dataclass(frozen=True)
class Kind:
    group: str
    version: str
    plural: str
    namespaced: bool = True

    def path(self, namespace: str | None = None, name: str | None = None,
             sub: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
        if sub:
            base += f"/{sub}"
        return base


NODES = Kind("", "v1", "nodes", namespaced=False)
PODS = Kind("", "v1", "pods")
SECRETS = Kind("", "v1", "secrets")
EVENTS = Kind("", "v1", "events")
LEASES = Kind("coordination.k8s.io", "v1", "leases")
MPIJOBS = Kind("kubeflow.org", "v2beta1", "mpijobs")
PYTORCHJOBS = Kind("kubeflow.org", "v1", "pytorchjobs")


class ApiError(Exception):
    def __init__(self, status: int, reason: str, message: str,
                 retry_after: float | None = None) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.retry_after = retry_after

    @property
    def transient(self) -> bool:
        return self.status in TRANSIENT or self.status == 0


class Unavailable(ApiError):
    """The server could not be reached or kept failing; try again later."""


class WatchIdle(Unavailable):
    """A watch sent nothing (no event, no bookmark) for longer than its idle limit: the
    connection is most likely dead without having been closed."""


class NotLeader(RuntimeError):
    """A write was refused because this process does not hold the lease."""


def go_duration(seconds: float) -> str:
    """`seconds` as a Go duration (time.ParseDuration), rounded down to a millisecond."""
    return f"{math.floor(seconds * 1000)}ms"


_gc_lock = threading.Lock()
_gc_paused = 0
_gc_was_enabled = False


@contextlib.contextmanager
def no_collection() -> Iterator[None]:
    """Python's cycle collector paused while responses are decoded and digested: JSON
    builds no cycles (what is dropped is freed by reference counting), and collections
    scanning a cache of 100,000 pods made a page of 500 take four times as long."""
    global _gc_paused, _gc_was_enabled
    with _gc_lock:
        if _gc_paused == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_paused += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_paused -= 1
            if _gc_paused == 0 and _gc_was_enabled:
                gc.enable()


def decode(raw: bytes) -> Any:
    """A JSON body. orjson parses a page of pods in about half json's time (a relist of
    100,000 pods is mostly parsing) and shares the repeated keys between documents."""
    with no_collection():
        return orjson.loads(raw)


class _HeadMeta(msgspec.Struct):
    name: str = ""
    namespace: str = ""
    resourceVersion: str | None = None


class _Head(msgspec.Struct):
    metadata: _HeadMeta = msgspec.field(default_factory=_HeadMeta)


class _ListHeads(TypedDict, total=False):
    kind: str
    apiVersion: str
    metadata: dict[str, Any]
    items: list[_Head] | None


class _ListRaw(TypedDict, total=False):
    items: list[msgspec.Raw] | None


_list_heads = msgspec.json.Decoder(_ListHeads)
_list_raw = msgspec.json.Decoder(_ListRaw)


class LazyItems:
    """A list body's items, decoded only as far as asked. `heads()` gives each item's
    (namespace, name, resourceVersion), read in the one pass that decoded the list's
    metadata, skipping everything else; `items[i]` decodes item i whole (the first asks
    where each item begins and ends). A relist needs most items only to see that they have
    not changed: their heads cost about a tenth of decoding them."""

    __slots__ = ("_body", "_heads", "_raws")

    def __init__(self, body: bytes, heads: list[_Head]) -> None:
        self._body = body
        self._heads = heads
        self._raws: list[msgspec.Raw] | None = None

    def __len__(self) -> int:
        return len(self._heads)

    def heads(self) -> list[tuple[str, str, str | None]]:
        return [(h.metadata.namespace, h.metadata.name, h.metadata.resourceVersion)
                for h in self._heads]

    def __getitem__(self, index: int) -> Obj:
        if self._raws is None:
            with no_collection():
                self._raws = _list_raw.decode(self._body).get("items") or []
        with no_collection():
            return orjson.loads(memoryview(self._raws[index]))  # type: ignore[no-any-return]

    def __iter__(self) -> Iterator[Obj]:
        return (self[i] for i in range(len(self)))


def decode_lazy_list(raw: bytes) -> Any:
    """A list body as a dict whose `items` are LazyItems."""
    page: dict[str, Any] = dict(_list_heads.decode(raw))
    page["items"] = LazyItems(raw, page.get("items") or [])
    return page


def _retry_after(headers: Any) -> float | None:
    try:
        value = headers.get("Retry-After") if headers is not None else None
        return float(value) if value else None
    except (TypeError, ValueError):
        return None


class KubeApi:
    def __init__(self, api_client: Any, timeout: float = 10.0, attempts: int = 4,
                 backoff: float = 0.2, max_backoff: float = 5.0,
                 fence: Fence | None = None,
                 sleep: Callable[[float], None] = time.sleep,
                 min_write_seconds: float = 0.1, page_size: int = 500) -> None:
        self.client = api_client
        self.page_size = page_size
        self.timeout = timeout
        self.attempts = attempts
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.fence = fence
        self.sleep = sleep
        # A write with less of the lease left than this is not sent: it could not finish.
        self.min_write_seconds = min_write_seconds
        self.writes = 0

    @classmethod
    def connect(cls, kubeconfig: str = "", **kwargs: Any) -> KubeApi:
        """From a kubeconfig file, or the in-cluster service account when none is given."""
        from kubernetes import client, config

        configuration = client.Configuration()
        try:
            if kubeconfig:
                config.load_kube_config(kubeconfig, client_configuration=configuration)
            else:
                config.load_incluster_config(client_configuration=configuration)
        except (config.ConfigException, OSError, ValueError, TypeError) as exc:
            where = kubeconfig or "the in-cluster service account (no --kubeconfig given)"
            raise ValueError(f"kubeconfig: cannot load {where}: "
                             f"{' '.join(str(exc).split())[:300]}") from None
        return cls._with(configuration, **kwargs)

    @classmethod
    def connect_token_dir(cls, folder: str, **kwargs: Any) -> KubeApi:
        """In a pod, as the ServiceAccount whose `token` and `ca.crt` are in `folder` (a
        mounted service-account-token Secret) instead of the pod's own."""
        from kubernetes import client, config
        from kubernetes.config.incluster_config import InClusterConfigLoader

        configuration = client.Configuration()
        try:
            InClusterConfigLoader(token_filename=os.path.join(folder, "token"),
                                  cert_filename=os.path.join(folder, "ca.crt")
                                  ).load_and_set(configuration)
        except (config.ConfigException, OSError, ValueError) as exc:
            raise ValueError(f"token_dir: cannot load {folder}: "
                             f"{' '.join(str(exc).split())[:300]}") from None
        return cls._with(configuration, **kwargs)

    @classmethod
    def _with(cls, configuration: Any, **kwargs: Any) -> KubeApi:
        from kubernetes import client

        configuration.retries = 0  # this module does the retrying
        configuration.connection_pool_maxsize = max(
            configuration.connection_pool_maxsize or 0, 16)  # the reconciler's workers
        api_client = client.ApiClient(configuration)
        api_client.user_agent = f"voda/0.1 (pid {os.getpid()})"
        return cls(api_client, **kwargs)

    # ----- transport -----------------------------------------------------------------------
    def _send(self, method: str, path: str, query: dict[str, Any] | None, body: Any,
              content_type: str | None, timeout: Any, stream: bool = False,
              decoder: Callable[[bytes], Any] = decode) -> Any:
        import urllib3

        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        params = [(k, v) for k, v in (query or {}).items() if v is not None]
        try:
            prepared = self.client.param_serialize(method, path, query_params=params,
                                                   header_params=headers, body=body,
                                                   auth_settings=["BearerToken"])
            response = self.client.call_api(*prepared[:4], _request_timeout=timeout)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise Unavailable(0, "Unreachable", f"{method} {path}: {exc}") from exc
        except Exception as exc:  # the client wraps some transport errors in ApiException
            status = int(getattr(exc, "status", 0) or 0)
            if status == 0:
                raise Unavailable(0, "Unreachable", f"{method} {path}: {exc}") from exc
            raise
        if response.status >= 400:
            raw = response.read()
            try:
                status = json.loads(raw)
            except ValueError:
                status = {"message": raw.decode(errors="replace")[:300]}
            raise ApiError(response.status, str(status.get("reason", "")),
                           str(status.get("message", "")), _retry_after(response.getheaders()))
        if stream:
            return response.response
        raw = response.read()
        if not raw:
            return {}
        with no_collection():
            return decoder(raw)

    def lease_left(self) -> float:
        """Seconds a write sent now may take and still land while this process leads."""
        if self.fence is None:
            return math.inf
        left = self.fence()
        if isinstance(left, bool):
            return math.inf if left else 0.0
        return float(left)

    def _write_timeout(self, method: str, path: str, timeout: float) -> float:
        """The timeout of one write attempt: within what is left of the lease; NotLeader
        when too little is left for the write to finish."""
        left = self.lease_left()
        if left < self.min_write_seconds:
            raise NotLeader(f"not the leader: {method} {path} not sent "
                            f"({max(left, 0.0):.2f} s of the lease left)")
        return min(timeout, left)

    def request(self, method: str, path: str, query: dict[str, Any] | None = None,
                body: Any = None, content_type: str | None = None,
                timeout: float | None = None, attempts: int | None = None,
                decoder: Callable[[bytes], Any] = decode) -> Obj:
        """One request, retried on transient failures; raises ApiError or Unavailable.
        `decoder` turns the body into the answer (default: all of it, as dicts)."""
        write = method != "GET"
        tries = attempts or self.attempts
        delay = self.backoff
        for attempt in range(tries):
            limit = timeout or self.timeout
            sent_query = query
            if write:
                limit = self._write_timeout(method, path, limit)
                sent_query = {**(query or {}), "timeout": go_duration(limit)}
            try:
                result = self._send(method, path, sent_query, body, content_type, limit,
                                    decoder=decoder)
                if write:
                    self.writes += 1
                return result  # type: ignore[no-any-return]
            except ApiError as exc:
                if not exc.transient or attempt == tries - 1:
                    if exc.transient:
                        raise Unavailable(exc.status, exc.reason, exc.message,
                                          exc.retry_after) from exc
                    raise
                wait = exc.retry_after if exc.retry_after is not None else delay
                pause = min(self.max_backoff, wait) * (0.5 + random.random() / 2)
                if write and pause + self.min_write_seconds > self.lease_left():
                    raise NotLeader(f"not the leader: {method} {path} not retried (the "
                                    f"lease ends within the {pause:.2f} s back-off)") from exc
                self.sleep(pause)
                delay = min(self.max_backoff, delay * 2)
        raise AssertionError("unreachable")

    # ----- verbs -----------------------------------------------------------------------------
    def get(self, kind: Kind, namespace: str | None, name: str, sub: str | None = None) -> Obj:
        return self.request("GET", kind.path(namespace, name, sub))

    def try_get(self, kind: Kind, namespace: str | None, name: str) -> Obj | None:
        try:
            return self.get(kind, namespace, name)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def list(self, kind: Kind, namespace: str | None = None, label_selector: str | None = None,
             field_selector: str | None = None, page_size: int | None = None) -> Obj:
        """Every object, fetched in pages (see list_pages); one list with the first page's
        resourceVersion."""
        items: dict[tuple[str, str], Obj] = {}
        last: Obj = {}
        for page in self.list_pages(kind, namespace, label_selector, field_selector,
                                    page_size):
            last = page
            for obj in page.get("items") or []:
                meta = obj.get("metadata") or {}
                items[(meta.get("namespace", ""), meta.get("name", ""))] = obj
        meta = {k: v for k, v in (last.get("metadata") or {}).items()
                if k not in ("continue", "remainingItemCount")}
        return {**last, "metadata": meta, "items": list(items.values())}

    def list_pages(self, kind: Kind, namespace: str | None = None,
                   label_selector: str | None = None, field_selector: str | None = None,
                   page_size: int | None = None, lazy: bool = False,
                   timings: dict[str, float] | None = None,
                   prefetch: bool = False) -> Iterator[Obj]:
        """The list in pages of `page_size` (limit/continue, as client-go's pager: a large
        list is never one huge response, and a caller can digest a page before the next
        arrives); every page carries the first page's resourceVersion. A continue token
        that expired meanwhile (410) ends the pages with the whole list in one request, as
        the pager does: the caller sees every object at least once, and the last page's
        resourceVersion is the one to watch from.

        `lazy`: each page's `items` are LazyItems, decoded only as far as the caller asks.
        `timings` adds up, in seconds, `fetch` (from sending each request to its body's
        last byte: the server's work and the transfer) and `decode`. `prefetch`: each
        page's request goes out as the page before it is handed over (another thread
        fetches it while the caller digests this one), as far ahead as the continue token
        allows: one page."""
        limit = self.page_size if page_size is None else page_size
        query: dict[str, Any] = {"labelSelector": label_selector,
                                 "fieldSelector": field_selector,
                                 "limit": str(limit) if limit > 0 else None}
        parse = decode_lazy_list if lazy else decode
        spent = {"decode": 0.0}

        def decoder(raw: bytes) -> Any:
            began = time.perf_counter()
            try:
                return parse(raw)
            finally:
                spent["decode"] += time.perf_counter() - began

        def fetch(sent: dict[str, Any]) -> Obj:
            began, decoding = time.perf_counter(), spent["decode"]
            try:
                return self.request("GET", kind.path(namespace), sent, decoder=decoder)
            finally:
                if timings is not None:
                    took = spent["decode"] - decoding
                    timings["fetch"] = timings.get("fetch", 0.0) + (
                        time.perf_counter() - began - took)
                    timings["decode"] = timings.get("decode", 0.0) + took

        def following(token: str) -> tuple[Obj, bool]:
            """The page after `token`; (the whole list, True) when the token expired."""
            try:
                return fetch({**query, "continue": token}), False
            except ApiError as exc:
                if exc.status != 410:
                    raise
                return fetch({**query, "limit": None}), True

        page = fetch(query)
        version = (page.get("metadata") or {}).get("resourceVersion")
        ahead = ThreadPoolExecutor(1, thread_name_prefix="list-ahead") if prefetch else None
        try:
            while True:
                token = (page.get("metadata") or {}).get("continue")
                page.setdefault("metadata", {})["resourceVersion"] = version
                coming = ahead.submit(following, token) if ahead is not None and token else None
                yield page
                if not token:
                    return
                page, restarted = coming.result() if coming is not None else following(token)
                if restarted:
                    version = (page.get("metadata") or {}).get("resourceVersion")
                    page.setdefault("metadata", {}).pop("continue", None)
        finally:
            if ahead is not None:
                ahead.shutdown(wait=False, cancel_futures=True)

    def create(self, kind: Kind, namespace: str | None, body: Obj) -> Obj:
        return self.request("POST", kind.path(namespace), body=body)

    def replace(self, kind: Kind, namespace: str | None, name: str, body: Obj,
                timeout: float | None = None, attempts: int | None = None) -> Obj:
        return self.request("PUT", kind.path(namespace, name), body=body, timeout=timeout,
                            attempts=attempts)

    def patch(self, kind: Kind, namespace: str | None, name: str, body: Any,
              content_type: str = MERGE_PATCH, sub: str | None = None) -> Obj:
        return self.request("PATCH", kind.path(namespace, name, sub), body=body,
                            content_type=content_type)

    def delete(self, kind: Kind, namespace: str | None, name: str,
               propagation: str | None = "Background", uid: str | None = None) -> Obj | None:
        """Delete; an object already gone is no error (None)."""
        body: Obj = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if propagation:
            body["propagationPolicy"] = propagation
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            return self.request("DELETE", kind.path(namespace, name), body=body)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def watch(self, kind: Kind, namespace: str | None, resource_version: str,
              timeout_seconds: int = 300, label_selector: str | None = None,
              field_selector: str | None = None,
              opened: Callable[[Any], None] | None = None,
              idle_seconds: float | None = None) -> Iterator[Obj]:
        """Events of one watch request from `resource_version` (bookmarks included);
        `opened` receives the response; its `shutdown()` ends the watch from another
        thread. A watch that sends nothing for `idle_seconds` raises WatchIdle: a
        connection that died without a FIN (a NAT or load balancer forgot it) would
        otherwise hang until timeoutSeconds."""
        import urllib3

        query = {"watch": "true", "resourceVersion": resource_version,
                 "allowWatchBookmarks": "true", "timeoutSeconds": str(timeout_seconds),
                 "labelSelector": label_selector, "fieldSelector": field_selector}
        read = idle_seconds if idle_seconds is not None else timeout_seconds + self.timeout
        response = self._send("GET", kind.path(namespace), query, None, None,
                              (self.timeout, read), stream=True)
        if opened is not None:
            opened(response)
        try:
            buffer = b""
            try:
                for chunk in response.stream(65536, decode_content=False):
                    *lines, buffer = (buffer + chunk).split(b"\n")
                    for line in lines:
                        if line.strip():
                            yield orjson.loads(line)
            except (urllib3.exceptions.ReadTimeoutError, TimeoutError) as exc:
                raise WatchIdle(0, "Idle", f"watch of {kind.plural} sent nothing for "
                                f"{read:g} s") from exc
            except urllib3.exceptions.ProtocolError as exc:
                if isinstance(exc.__context__, TimeoutError) or "timed out" in str(exc):
                    raise WatchIdle(0, "Idle", f"watch of {kind.plural} sent nothing for "
                                    f"{read:g} s") from exc
                raise
            if buffer.strip():
                yield orjson.loads(buffer)
        finally:
            response.release_conn()

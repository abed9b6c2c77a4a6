"""The fake Kubernetes API server: the Store behind real HTTP on loopback (aiohttp).

It speaks the REST protocol the official clients and kubectl speak: discovery,
create/get/list (label and field selectors, limit/continue), PUT and the three
patch formats with 409 on a stale resourceVersion, the status and scale
subresources, pods/binding and pods/eviction, delete with DeleteOptions, and
watches from a resourceVersion with bookmarks, timeoutSeconds and 410 Gone.

Faults are injected per request (`add_fault`: 500, 429, 409, ... for a verb and
resource, a number of times, and/or a delay before the request is served) or for
the whole server (`outage`: connections refused and dropped, or requests that
hang). A request honours its `timeout` query parameter as kube-apiserver does
(see deadline.py): one still delayed when it passes is answered 504, not applied.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import secrets
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import yaml
from aiohttp import web

from voda_testing.kube.authz import Authorizer, User, query_of, request_attributes
from voda_testing.kube.deadline import check_deadline, request_deadline
from voda_testing.kube.errors import ApiError
from voda_testing.kube.eviction import evict
from voda_testing.kube.resources import Resource
from voda_testing.kube.selectors import field_matcher, label_matcher
from voda_testing.kube.store import Admit, Change, Obj, Store, get_path, set_path

WATCH_REQUEST = web.ResponseKey("watch_request", web.BaseRequest)  # a watch's own request
VERB_OF = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch",
           "DELETE": "delete"}


@dataclass
class Fault:
    """Answer matching requests with `status` (`times` times; None: until removed),
    after `delay` seconds; status 0 with a delay: serve them, late."""

    status: int
    verb: str | None = None  # get, list, watch, create, update, patch, delete
    resource: str | None = None  # plural, with subresource as pods/binding
    times: int | None = 1
    retry_after: int | None = None
    message: str = "injected fault"
    delay: float = 0.0

    def matches(self, verb: str, resource: str) -> bool:
        return (self.verb is None or self.verb == verb) and (
            self.resource is None or self.resource == resource)


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: str
    content_type: str
    verb: str
    resource: str
    user_agent: str = ""
    time: float = 0.0
    user: str = ""  # the authenticated user's name, when the server authenticates
    # A list's: seconds from receiving it to its body built ("built") and to the body's
    # last byte handed to the socket ("sent"), and the body's size ("bytes")
    timing: dict[str, float] = field(default_factory=dict, compare=False)


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(text=json.dumps(body), status=status, content_type="application/json",
                        headers=headers)


def _quoted(text: str) -> str:
    """A warning's text inside the quoted-string of a Warning header (RFC 7234)."""
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _error(exc: ApiError, headers: dict[str, str] | None = None) -> web.Response:
    return _json(exc.status(), exc.code, headers)


class FakeApiServer:
    def __init__(self, store: Store | None = None, bookmark_interval: float = 1.0,
                 host: str = "127.0.0.1", port: int = 0,
                 extra_routes: list[tuple[str, str, Any]] | None = None,
                 authorizer: Authorizer | None = None, tls: bool = False) -> None:
        self.store = store or Store()
        # HTTPS with a CA of its own (in the kubeconfigs it writes): kubectl sends a bearer
        # token over TLS only.
        self.tls = tls
        self._ca: Any = None
        # None: every request is allowed, unauthenticated (the conformance tests' server);
        # set (see `enforce_rbac`): bearer tokens and RBAC as kube-apiserver does them.
        self.authorizer = authorizer
        self.extra_routes = extra_routes or []
        self.bookmark_interval = bookmark_interval
        self.host = host
        self.port = port
        self.faults: list[Fault] = []
        self.requests: deque[Request] = deque(maxlen=100_000)
        self.denied: deque[str] = deque(maxlen=1000)  # the 403s' messages, for tests
        self.outage_mode: str | None = None  # None, "refuse" or "hang"
        # Validating admission webhooks (e.g. an operator's): they see every create and
        # update of a resource sent over HTTP, not its subresources.
        self.webhooks: list[Admit] = []
        self.in_flight = 0  # resource requests (watches aside) being served now
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self._watches: set[web.StreamResponse] = set()
        self._stalled: set[web.StreamResponse] = set()  # open watches that send nothing
        # the lists that paged requests continue (snapshot id -> every object in key order,
        # unfiltered, and the resourceVersion), oldest first; a continue token whose
        # snapshot is gone is 410 Gone
        self._snapshots: OrderedDict[str, tuple[list[Obj], int]] = OrderedDict()
        self.snapshot_limit = 16
        # uid -> (resourceVersion, JSON): objects are never changed in place, so a list
        # serializes each version once (as kube-apiserver's watch cache keeps encodings)
        self._encoded: dict[str, tuple[str, bytes]] = {}
        self._outage_over: asyncio.Event | None = None
        self._lock = threading.Lock()

    # ----- life cycle --------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    def start(self) -> FakeApiServer:
        ready = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._start())
            except BaseException as exc:  # reported to start()
                errors.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup() if self._runner else asyncio.sleep(0))
            loop.close()

        self._thread = threading.Thread(target=run, name="fake-apiserver", daemon=True)
        self._thread.start()
        ready.wait(30)
        if errors:
            raise errors[0]
        return self

    async def _start(self) -> None:
        app = web.Application(middlewares=[self._middleware], client_max_size=64 << 20)
        for method, path, handler in self.extra_routes:
            app.router.add_route(method, path, handler)
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False,
                                     shutdown_timeout=0.5)
        await self._runner.setup()
        await self._listen()
        self._outage_over = asyncio.Event()
        self._outage_over.set()

    async def _listen(self) -> None:
        assert self._runner is not None
        self._site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True,
                                 ssl_context=self._ssl_context())
        await self._site.start()
        if not self.port:
            server = self._site._server
            assert server is not None
            self.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    @property
    def ca_certificate(self) -> bytes | None:
        """The PEM of the CA that signed the server's certificate (with tls=True)."""
        return self._ca.cert_pem.bytes() if self._ca is not None else None

    def _ssl_context(self) -> Any:
        if not self.tls:
            return None
        import ssl

        import trustme

        if self._ca is None:
            self._ca = trustme.CA()
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._ca.issue_cert(self.host, "localhost").configure_cert(context)
        return context

    def stop(self) -> None:
        if self._loop is None:
            return
        loop = self._loop

        async def close_watches() -> None:
            for response in list(self._watches):
                with contextlib.suppress(Exception):
                    if response.task is not None:
                        response.task.cancel()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(close_watches(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        self._loop = None

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def enforce_rbac(self) -> Authorizer:
        """From now on, authenticate and authorize every request (see authz.py)."""
        if self.authorizer is None:
            self.authorizer = Authorizer(self.store)
        return self.authorizer

    def write_kubeconfig(self, path: str | Path, namespace: str = "default",
                         token: str | None = None) -> Path:
        """A kubeconfig for this server; `token`: the bearer token its user sends."""
        path = Path(path)
        config = {
            "apiVersion": "v1", "kind": "Config", "preferences": {},
            "clusters": [{"name": "fake", "cluster": {"server": self.url, **(
                {"certificate-authority-data": base64.b64encode(
                    self.ca_certificate or b"").decode()} if self.tls else {})}}],
            "users": [{"name": "fake", "user": {"token": token} if token else {}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake",
                                                      "namespace": namespace}}],
            "current-context": "fake",
        }
        path.write_text(yaml.safe_dump(config))
        return path

    # ----- faults ------------------------------------------------------------------------
    def add_fault(self, fault: Fault) -> Fault:
        with self._lock:
            self.faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        with self._lock:
            self.faults.clear()

    def _take_fault(self, verb: str, resource: str) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.matches(verb, resource):
                    if fault.times is not None:
                        fault.times -= 1
                        if fault.times <= 0:
                            self.faults.remove(fault)
                    return fault
        return None

    def set_outage(self, mode: str | None) -> None:
        """'refuse': the server stops listening and drops open connections; 'hang': it
        accepts requests and never answers them until the outage ends; None: back."""
        if mode not in (None, "refuse", "hang"):
            raise ValueError(f"outage mode: 'refuse', 'hang' or None, got {mode!r}")
        assert self._loop is not None
        asyncio.run_coroutine_threadsafe(self._set_outage(mode), self._loop).result(10)

    async def _set_outage(self, mode: str | None) -> None:
        assert self._outage_over is not None
        previous, self.outage_mode = self.outage_mode, mode
        if mode is not None:
            self._outage_over.clear()
            for response in list(self._watches):
                self._end_watch(response)
            if mode == "refuse" and self._site is not None:
                await self._site.stop()
                self._site = None
        else:
            if previous == "refuse" and self._site is None:
                await self._listen()
            self._outage_over.set()

    def close_watches(self) -> int:
        """End every open watch (the clients resume from their resourceVersion: after a
        compaction, a 410 and a relist). Returns how many."""
        assert self._loop is not None

        async def close() -> int:
            return self.close_watches_now()

        return asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)

    def close_watches_now(self) -> int:
        """close_watches() from the server's own loop (an extra route's handler)."""
        open_now = list(self._watches)
        for response in open_now:
            self._end_watch(response)
        return len(open_now)

    def _end_watch(self, response: web.StreamResponse) -> None:
        """Cancel a watch's handler and drop its connection. The abort is what a client
        sees for sure: before Python 3.12, a cancel that lands as the watch's queue
        delivers an event is swallowed by asyncio.wait_for."""
        self._stalled.discard(response)
        if response.task is not None:
            response.task.cancel()
        request = response.get(WATCH_REQUEST)
        if request is not None and request.transport is not None:
            request.transport.abort()

    def stall_watches(self) -> int:
        """Every watch open now goes silent for good, its connection left open (no event,
        no bookmark, no end): a connection a NAT or load balancer forgot. Returns how many."""
        assert self._loop is not None

        async def stall() -> int:
            return self.stall_watches_now()

        return asyncio.run_coroutine_threadsafe(stall(), self._loop).result(10)

    def stall_watches_now(self) -> int:
        """stall_watches() from the server's own loop (an extra route's handler)."""
        self._stalled |= self._watches
        return len(self._watches)

    @contextlib.contextmanager
    def outage(self, mode: str = "refuse") -> Iterator[None]:
        self.set_outage(mode)
        try:
            yield
        finally:
            self.set_outage(None)

    # ----- HTTP ---------------------------------------------------------------------------
    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        assert self._outage_over is not None
        if self.outage_mode is not None:
            if self.outage_mode == "hang":
                await self._outage_over.wait()
            if request.transport is not None:
                request.transport.abort()
            raise ConnectionResetError("outage")
        return await handler(request)

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        path = request.path.rstrip("/") or "/"
        try:
            if path in ("/healthz", "/livez", "/readyz"):
                return web.Response(text="ok")
            user = self._authenticate(request)
            if path == "/version":
                return _json({"major": "1", "minor": "32", "gitVersion": "v1.32.0-voda-fake",
                              "platform": "linux/amd64"})
            if path == "/api":
                return _json({"kind": "APIVersions", "versions": ["v1"],
                              "serverAddressByClientCIDRs": [
                                  {"clientCIDR": "0.0.0.0/0", "serverAddress": self.url}]})
            if path == "/apis":
                return _json(self._group_list())
            if path == "/openapi/v3" or path.startswith("/openapi/v3/"):
                return _json(self._openapi_v3(path.removeprefix("/openapi/v3").strip("/")))
            parts = path.strip("/").split("/")
            if parts[0] == "api" and len(parts) >= 2:
                group, version, rest = "", parts[1], parts[2:]
            elif parts[0] == "apis" and len(parts) >= 3:
                group, version, rest = parts[1], parts[2], parts[3:]
            elif parts[0] == "apis" and len(parts) == 2:
                return _json(self._group(parts[1]))
            else:
                raise ApiError(404, "the server could not find the requested resource")
            if not rest:
                return _json(self._resource_list(group, version))
            if user is not None:
                assert self.authorizer is not None
                try:
                    self.authorizer.authorize(user, request_attributes(
                        request.method, group, rest, query_of(request.query_string)))
                except ApiError as exc:
                    self.denied.append(exc.message)
                    raise
            return await self._resource_request(request, group, version, rest,
                                                user.name if user else "")
        except ApiError as exc:
            return _error(exc)

    def _authenticate(self, request: web.Request) -> User | None:
        """The caller, when the server authenticates (401 without a known token)."""
        if self.authorizer is None:
            return None
        return self.authorizer.authenticate(request.headers.get("Authorization", ""))

    # ----- discovery ------------------------------------------------------------------------
    def _versions(self) -> dict[str, list[str]]:
        groups: dict[str, list[str]] = {}
        for g, v, _ in self.store.resources:
            if g and v not in groups.setdefault(g, []):
                groups[g].append(v)
        return groups

    def _group(self, name: str) -> dict[str, Any]:
        versions = self._versions().get(name)
        if not versions:
            raise ApiError(404, "the server could not find the requested resource")
        entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
        return {"kind": "APIGroup", "apiVersion": "v1", "name": name, "versions": entries,
                "preferredVersion": entries[0]}

    def _group_list(self) -> dict[str, Any]:
        return {"kind": "APIGroupList", "apiVersion": "v1",
                "groups": [self._group(g) for g in sorted(self._versions())]}

    def _resource_list(self, group: str, version: str) -> dict[str, Any]:
        resources = [r for (g, v, _), r in self.store.resources.items()
                     if g == group and v == version]
        if not resources:
            raise ApiError(404, "the server could not find the requested resource")
        return {"kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": f"{group}/{version}" if group else version,
                "resources": [e for r in resources for e in r.discovery()]}

    def _openapi_v3(self, group_version: str) -> dict[str, Any]:
        """Enough OpenAPI v3 for kubectl to see that the server validates fields itself
        (so kubectl sends fieldValidation=Strict instead of validating client-side)."""
        gvs = {("api/" + v if not g else f"apis/{g}/{v}"): (g, v)
               for g, v, _ in self.store.resources}
        if not group_version:
            return {"paths": {gv: {"serverRelativeURL": f"/openapi/v3/{gv}?hash=fake"}
                              for gv in sorted(gvs)}}
        if group_version not in gvs:
            raise ApiError(404, "the server could not find the requested resource")
        group, version = gvs[group_version]
        paths: dict[str, Any] = {}
        param = {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}}
        for (g, v, _), r in self.store.resources.items():
            if (g, v) != (group, version):
                continue
            gvk = {"group": g, "version": v, "kind": r.kind}
            scope = "namespaces/{namespace}/" if r.namespaced else ""
            base = f"/{group_version}/{scope}{r.plural}"
            paths[base] = {"post": {"x-kubernetes-group-version-kind": gvk,
                                    "parameters": [param]}}
            paths[base + "/{name}"] = {
                verb: {"x-kubernetes-group-version-kind": gvk, "parameters": [param]}
                for verb in ("put", "patch")}
        return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.32.0"},
                "paths": paths, "components": {"schemas": {}}}

    # ----- resources ---------------------------------------------------------------------------
    def _parse(self, group: str, version: str, rest: list[str]
               ) -> tuple[Resource, str, str | None, str | None]:
        namespace = ""
        if rest[0] == "namespaces" and len(rest) >= 3 and (group, version, rest[2]) in (
                self.store.resources):
            namespace, rest = rest[1], rest[2:]
        resource = self.store.find(group, version, rest[0])
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if len(rest) > 3 or (sub is not None and sub not in resource.subresources):
            raise ApiError(404, "the server could not find the requested resource")
        if resource.namespaced and name is not None and not namespace:
            raise ApiError(404, "the server could not find the requested resource")
        return resource, namespace, name, sub

    async def _resource_request(self, request: web.Request, group: str, version: str,
                                rest: list[str], user: str = "") -> web.StreamResponse:
        if request.query.get("watch") in ("1", "true", "True"):
            return await self._serve(request, group, version, rest, user)
        self.in_flight += 1
        try:
            return await self._serve(request, group, version, rest, user)
        finally:
            self.in_flight -= 1

    async def _serve(self, request: web.Request, group: str, version: str,
                     rest: list[str], user: str = "") -> web.StreamResponse:
        received = time.monotonic()
        resource, namespace, name, sub = self._parse(group, version, rest)
        q = request.query
        method = request.method
        watching = q.get("watch") in ("1", "true", "True")
        verb = "watch" if watching else ("list" if method == "GET" and name is None else
                                         VERB_OF.get(method, method.lower()))
        shown = f"{resource.plural}/{sub}" if sub else resource.plural
        record = Request(method, request.path, request.query_string,
                         request.headers.get("Content-Type", ""), verb, shown,
                         request.headers.get("User-Agent", ""), time.monotonic(), user)
        self.requests.append(record)
        deadline = None if watching else request_deadline(q.get("timeout"), received)
        fault = self._take_fault(verb, shown)
        if fault is not None and fault.delay:
            await asyncio.sleep(fault.delay)
        if fault is not None and fault.status:
            headers = {"Retry-After": str(fault.retry_after)} if fault.retry_after else None
            return _error(ApiError(fault.status, fault.message), headers)
        if deadline is not None:
            check_deadline(deadline)
        store = self.store
        dry_run = q.get("dryRun") == "All"
        validation = q.get("fieldValidation")
        if watching:
            return await self._watch(request, resource, namespace)
        if method == "GET" and name is None:
            response = self._list_response(self._list(resource, namespace, q))
            built = time.monotonic()
            await response.prepare(request)  # sent here, to time it (aiohttp sends nothing
            await response.write_eof()  # twice)
            record.timing.update(built=built - received, sent=time.monotonic() - received,
                                 bytes=float(response.content_length or 0))
            return response
        if method == "GET":
            obj = store.get(resource, namespace, name or "")
            return _json(self._scale(resource, obj) if sub == "scale" else obj)
        body = await self._body(request) if method in ("POST", "PUT", "PATCH") else None
        if method == "POST" and name is None:
            created = store.create(resource, namespace, body, dry_run, validation,
                                   self._admit)
            return self._answer(created, 201)
        if method == "POST" and sub == "binding":
            target = (body or {}).get("target") or {}
            if not target.get("name"):
                raise ApiError(422, "Binding is invalid: target.name: Required value")
            meta = (body or {}).get("metadata") or {}
            store.bind(namespace, name or "", target["name"], meta.get("uid") or None,
                       meta.get("resourceVersion") or None)
            return _json({"kind": "Status", "apiVersion": "v1", "status": "Success",
                          "code": 201}, 201)
        if method == "POST" and sub == "eviction":
            evict(store, namespace, name or "", body)
            return _json({"kind": "Status", "apiVersion": "v1", "status": "Success",
                          "code": 201}, 201)
        if method in ("PUT", "PATCH") and sub == "scale":
            return _json(self._write_scale(request, resource, namespace, name or "", body))
        if method == "PUT":
            return self._answer(store.update(resource, namespace, name or "", body, sub,
                                             dry_run, validation,
                                             None if sub else self._admit))
        if method == "PATCH":
            ctype = request.headers.get("Content-Type", "")
            return self._answer(store.patch(resource, namespace, name or "", body, ctype, sub,
                                            dry_run, validation,
                                            None if sub else self._admit))
        if method == "DELETE" and name is not None:
            opts = body if isinstance(body, dict) else {}
            if not opts:
                with contextlib.suppress(ValueError):
                    text = await request.text()
                    opts = json.loads(text) if text else {}
            grace = q.get("gracePeriodSeconds", opts.get("gracePeriodSeconds"))
            gone = store.delete(resource, namespace, name,
                                q.get("propagationPolicy", opts.get("propagationPolicy")),
                                None if grace is None else int(grace),
                                opts.get("preconditions"), dry_run)
            return _json(gone)
        if method == "DELETE":
            items, _ = store.list(resource, namespace, q.get("labelSelector"),
                                  q.get("fieldSelector"))
            for item in items:
                with contextlib.suppress(ApiError):
                    store.delete(resource, item["metadata"].get("namespace", ""),
                                 item["metadata"]["name"])
            return _json({"kind": "Status", "apiVersion": "v1", "status": "Success"})
        raise ApiError(405, f"the server does not allow this method on {shown}")

    def _admit(self, resource: Resource, new: Obj, old: Obj | None) -> None:
        for webhook in list(self.webhooks):
            webhook(resource, new, old)

    def _list_response(self, listed: dict[str, Any]) -> web.Response:
        parts = []
        for obj in listed["items"]:
            meta = obj["metadata"]
            uid, rv = meta.get("uid", ""), meta.get("resourceVersion", "")
            cached = self._encoded.get(uid)
            if cached is None or cached[0] != rv:
                cached = (rv, orjson.dumps(obj))
                self._encoded[uid] = cached
            parts.append(cached[1])
        if len(self._encoded) > 2 * max(1, len(self.store.uids)):
            live = self.store.uids
            self._encoded = {u: e for u, e in self._encoded.items() if u in live}
        head = orjson.dumps({k: v for k, v in listed.items() if k != "items"})
        return web.Response(body=b"".join((head[:-1], b',"items":[', b",".join(parts), b"]}")),
                            content_type="application/json")

    def _answer(self, obj: Obj, status: int = 200) -> web.Response:
        warnings = self.store.warnings()
        headers = {"Warning": ", ".join(f'299 - "{_quoted(w)}"' for w in warnings)
                   } if warnings else None
        return _json(obj, status, headers)

    @staticmethod
    async def _body(request: web.Request) -> Any:
        text = await request.text()
        if not text:
            return None
        try:
            return json.loads(text)
        except ValueError:
            try:
                return yaml.safe_load(text)
            except yaml.YAMLError:
                raise ApiError(400, "the body of the request is not valid JSON or YAML"
                               ) from None

    def _list(self, resource: Resource, namespace: str, q: Any) -> dict[str, Any]:
        """A list, whole or in pages (limit/continue). The first page takes a snapshot of
        the objects in key order that later pages continue, so the pages together are one
        consistent list at its resourceVersion, as etcd serves them; a snapshot forgotten
        since is 410 Gone. As kube-apiserver does, each page reads on from where the last
        one stopped until it holds `limit` objects that match the selectors (a page may
        come out empty), and tells remainingItemCount only of a list without selectors."""
        limit = int(q.get("limit") or 0)
        labels = label_matcher(q.get("labelSelector"))
        fields = field_matcher(q.get("fieldSelector"), resource.field_labels)
        start = 0
        if q.get("continue"):
            try:
                token = json.loads(base64.b64decode(q["continue"]))
                start, snapshot = int(token["start"]), str(token["id"])
            except (ValueError, KeyError, TypeError):
                raise ApiError(400, "continue key is not valid") from None
            if snapshot not in self._snapshots:
                raise ApiError(410, "The provided continue parameter is too old to display a "
                               "consistent list result. You can start a new list without the "
                               "continue parameter.")
            objects, rv = self._snapshots[snapshot]
        else:
            objects, rv = self.store.ordered(resource, namespace or None)
            snapshot = ""

        def wanted(obj: Obj) -> bool:
            return (labels is None or labels(obj)) and (fields is None or fields(obj))

        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if limit <= 0:
            return {"kind": f"{resource.kind}List", "apiVersion": resource.api_version,
                    "metadata": meta, "items": [o for o in objects[start:] if wanted(o)]}
        items: list[Obj] = []
        at = start
        while at < len(objects) and len(items) < limit:
            if wanted(objects[at]):
                items.append(objects[at])
            at += 1
        if at < len(objects):
            if not snapshot:
                snapshot = secrets.token_hex(8)
                self._snapshots[snapshot] = (objects, rv)
                while len(self._snapshots) > self.snapshot_limit:
                    self._snapshots.popitem(last=False)
            token = {"start": at, "id": snapshot, "rv": rv}
            meta["continue"] = base64.b64encode(json.dumps(token).encode()).decode()
            if labels is None and fields is None:
                meta["remainingItemCount"] = len(objects) - at
        elif snapshot:
            self._snapshots.pop(snapshot, None)
        return {"kind": f"{resource.kind}List", "apiVersion": resource.api_version,
                "metadata": meta, "items": items}

    # ----- scale subresource ------------------------------------------------------------------
    @staticmethod
    def _scale(resource: Resource, obj: Obj) -> dict[str, Any]:
        assert resource.scale is not None
        meta = obj["metadata"]
        status: dict[str, Any] = {"replicas": int(get_path(obj, resource.scale.status_replicas)
                                                  or 0)}
        if resource.scale.label_selector:
            selector = get_path(obj, resource.scale.label_selector)
            if isinstance(selector, dict):
                selector = ",".join(f"{k}={v}" for k, v in
                                    sorted((selector.get("matchLabels") or {}).items()))
            if selector:
                status["selector"] = selector
        return {"kind": "Scale", "apiVersion": "autoscaling/v1",
                "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion",
                                                  "creationTimestamp") if k in meta},
                "spec": {"replicas": int(get_path(obj, resource.scale.spec_replicas) or 0)},
                "status": status}

    def _write_scale(self, request: web.Request, resource: Resource, namespace: str,
                     name: str, body: Any) -> dict[str, Any]:
        from voda_testing.kube.store import apply_patch

        assert resource.scale is not None
        with self.store.lock:
            obj = self.store.get(resource, namespace, name)
            scale = self._scale(resource, obj)
            if request.method == "PUT":
                new_scale = body
            else:
                scale_resource = Resource("autoscaling", "v1", "scales", "Scale")
                new_scale = apply_patch(scale_resource, scale, body,
                                        request.headers.get("Content-Type", ""))
            replicas = (new_scale or {}).get("spec", {}).get("replicas")
            if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
                raise ApiError(422, f'Scale.autoscaling "{name}" is invalid: spec.replicas: '
                               f"Invalid value: {replicas!r}: must be a non-negative integer")
            rv = (new_scale.get("metadata") or {}).get("resourceVersion")
            updated = json.loads(json.dumps(obj))
            set_path(updated, resource.scale.spec_replicas, replicas)
            if rv:
                updated["metadata"]["resourceVersion"] = rv
            else:
                updated["metadata"].pop("resourceVersion", None)
            stored = self.store.update(resource, namespace, name, updated)
            return self._scale(resource, stored)

    # ----- watch ----------------------------------------------------------------------------------
    async def _watch(self, request: web.Request, resource: Resource, namespace: str
                     ) -> web.StreamResponse:
        q = request.query
        labels = label_matcher(q.get("labelSelector"))
        fields = field_matcher(q.get("fieldSelector"), resource.field_labels)
        bookmarks = q.get("allowWatchBookmarks") in ("1", "true", "True")
        timeout = float(q.get("timeoutSeconds") or 1800)
        raw_rv = q.get("resourceVersion") or ""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Change] = asyncio.Queue()

        def listener(change: Change) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, change)

        def matches(obj: Obj | None) -> bool:
            if obj is None:
                return False
            if namespace and obj["metadata"].get("namespace") != namespace:
                return False
            return (labels is None or labels(obj)) and (fields is None or fields(obj))

        response = web.StreamResponse(headers={"Content-Type": "application/json",
                                               "Transfer-Encoding": "chunked"})
        initial: list[Obj] = []
        try:
            if raw_rv in ("", "0"):
                with self.store.lock:
                    initial, rv = self.store.list(resource, namespace or None)
                    replay, unsubscribe = self.store.subscribe(None, listener)
            else:
                try:
                    since = int(raw_rv)
                except ValueError:
                    raise ApiError(400, f"invalid resourceVersion {raw_rv!r}") from None
                replay, unsubscribe = self.store.subscribe(since, listener, resource)
                rv = since
        except ApiError as exc:
            if exc.code != 410:
                raise
            await response.prepare(request)
            await response.write(json.dumps({"type": "ERROR", "object": exc.status()}
                                            ).encode() + b"\n")
            return response
        last_rv = rv
        self._watches.add(response)
        response[WATCH_REQUEST] = request
        try:
            await response.prepare(request)
            for obj in initial:
                if matches(obj):
                    await self._send(response, "ADDED", obj)
            deadline = loop.time() + timeout
            pending = deque(replay)
            while True:
                if pending:
                    change = pending.popleft()
                else:
                    wait = min(deadline - loop.time(), self.bookmark_interval)
                    if wait <= 0:
                        await self._stall_point(response)
                        break
                    try:
                        change = await asyncio.wait_for(queue.get(), wait)
                    except TimeoutError:
                        await self._stall_point(response)
                        if bookmarks and loop.time() < deadline:
                            await self._send(response, "BOOKMARK", {
                                "kind": resource.kind, "apiVersion": resource.api_version,
                                "metadata": {"resourceVersion": str(last_rv)}})
                        continue
                last_rv = max(last_rv, change.rv)
                if change.resource.key != resource.key:
                    continue
                kind = self._event_type(change, matches(change.old), matches(change.object))
                if kind is not None:
                    await self._stall_point(response)
                    await self._send(response, kind, change.object)
        except asyncio.CancelledError:
            if request.transport is not None:
                request.transport.abort()
            raise
        except ConnectionResetError:  # the client went away
            return response
        finally:
            unsubscribe()
            self._watches.discard(response)
            self._stalled.discard(response)
        with contextlib.suppress(ConnectionResetError):
            await response.write_eof()
        return response

    async def _stall_point(self, response: web.StreamResponse) -> None:
        while response in self._stalled:  # silent until the watch is ended
            await asyncio.sleep(0.2)

    @staticmethod
    def _event_type(change: Change, was: bool, now: bool) -> str | None:
        """What a filtered watch sees: an object entering the selection is ADDED, one
        leaving it DELETED."""
        if change.type == "DELETED":
            return "DELETED" if was else None
        if change.type == "ADDED":
            return "ADDED" if now else None
        if was and now:
            return "MODIFIED"
        return "ADDED" if now else ("DELETED" if was else None)

    @staticmethod
    async def _send(response: web.StreamResponse, kind: str, obj: Obj) -> None:
        await response.write(orjson.dumps({"type": kind, "object": obj}) + b"\n")

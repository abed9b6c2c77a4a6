"""The few Kubernetes API calls the pod scheduler makes, on the official client, as JSON.

Objects stay plain JSON dicts (`_preload_content=False`): the client's model
classes cost about a millisecond per pod to build and the scheduler reads a
handful of fields. Every failure becomes an ApiFailure with the HTTP status
(0: no answer) and the server's Retry-After, so callers decide what to retry.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import urllib3
from kubernetes import client

from voda.podsched.model import Pod

Obj = dict[str, Any]
GONE = 410


@dataclass
class ApiFailure(Exception):
    status: int  # 0 when the server did not answer
    reason: str
    retry_after: float | None = None

    def __str__(self) -> str:
        return f"{self.status or 'no answer'}: {self.reason}"

    @property
    def retriable(self) -> bool:
        return self.status in (0, 429) or self.status >= 500


def _failure(exc: Exception) -> ApiFailure:
    if isinstance(exc, client.ApiException):
        retry = None
        headers = exc.headers or {}
        if headers.get("Retry-After"):
            try:
                retry = float(headers["Retry-After"])
            except ValueError:
                retry = None
        message = exc.reason or ""
        if exc.body:
            with contextlib.suppress(ValueError, AttributeError):
                message = json.loads(exc.body).get("message", message)
        return ApiFailure(int(exc.status or 0), str(message)[:500], retry)
    return ApiFailure(0, f"{type(exc).__name__}: {exc}"[:500])


def _json(response: Any) -> Obj:
    return json.loads(response.data)


# What the scheduler lists and watches, by name: (list call, kwargs).
OWNER_KINDS = ("Job", "ReplicaSet", "Deployment", "StatefulSet")


class KubeApi:
    def __init__(self, api_client: client.ApiClient, request_timeout: float = 10.0) -> None:
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.apps = client.AppsV1Api(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.timeout = request_timeout
        self._open: set[Any] = set()
        self._lock = threading.Lock()

    # ----- list and watch -----------------------------------------------------------------
    def _list_call(self, kind: str, namespace: str | None) -> Any:
        if kind == "pods":
            return self.core.list_pod_for_all_namespaces
        if kind == "nodes":
            return self.core.list_node
        if kind == "configmaps" and namespace:
            return lambda **kw: self.core.list_namespaced_config_map(namespace, **kw)
        raise ValueError(f"kind: cannot list {kind!r}")

    def list(self, kind: str, namespace: str | None = None,
             field_selector: str | None = None) -> tuple[list[Obj], str]:
        """Items and the list's resourceVersion."""
        call = self._list_call(kind, namespace)
        kwargs: dict[str, Any] = {"_preload_content": False, "_request_timeout": self.timeout}
        if field_selector:
            kwargs["field_selector"] = field_selector
        try:
            body = _json(call(**kwargs))
        except Exception as exc:  # every client error becomes an ApiFailure
            raise _failure(exc) from None
        return list(body.get("items") or []), str((body.get("metadata") or {}).get(
            "resourceVersion", ""))

    def watch(self, kind: str, resource_version: str, timeout_seconds: int,
              namespace: str | None = None, field_selector: str | None = None
              ) -> Iterator[Obj]:
        """Watch events (type, object) from a resourceVersion, with bookmarks, until the
        server ends the watch; ERROR events are passed on (410 Gone among them)."""
        call = self._list_call(kind, namespace)
        kwargs: dict[str, Any] = {
            "watch": True, "resource_version": resource_version,
            "allow_watch_bookmarks": True, "timeout_seconds": timeout_seconds,
            "_preload_content": False, "_request_timeout": (self.timeout, timeout_seconds + 15),
        }
        if field_selector:
            kwargs["field_selector"] = field_selector
        try:
            response = call(**kwargs)
        except Exception as exc:
            raise _failure(exc) from None
        with self._lock:
            self._open.add(response)
        try:
            buffer = b""
            for chunk in response.stream(64 * 1024, decode_content=False):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line)
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            raise _failure(exc) from None
        finally:
            with self._lock:
                self._open.discard(response)
            response.release_conn()

    def close_watches(self) -> None:
        """End every open watch (on shutdown)."""
        with self._lock:
            open_ = list(self._open)
        for response in open_:
            with contextlib.suppress(Exception):  # closing is best effort
                response.shutdown() if hasattr(response, "shutdown") else response.close()

    # ----- writes ---------------------------------------------------------------------------
    def bind(self, pod: Pod, node: str) -> None:
        body = {"apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": pod.name, "namespace": pod.namespace,
                             **({"uid": pod.uid} if pod.uid else {})},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        try:
            self.core.create_namespaced_pod_binding(
                pod.name, pod.namespace, body, _preload_content=False,
                _request_timeout=self.timeout)
        except Exception as exc:
            raise _failure(exc) from None

    def create_event(self, namespace: str, body: Mapping[str, Any]) -> None:
        try:
            self.core.create_namespaced_event(namespace, dict(body), _preload_content=False,
                                              _request_timeout=self.timeout)
        except Exception as exc:
            raise _failure(exc) from None

    def delete_pod(self, pod: Pod) -> None:
        """Delete a pod (default grace), only if it is still the same pod (uid precondition)."""
        options = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if pod.uid:
            options["preconditions"] = {"uid": pod.uid}
        try:
            self.core.delete_namespaced_pod(pod.name, pod.namespace, body=options,
                                            _preload_content=False,
                                            _request_timeout=self.timeout)
        except Exception as exc:
            raise _failure(exc) from None

    # ----- reads ------------------------------------------------------------------------------
    def get_owner(self, kind: str, namespace: str, name: str) -> Obj | None:
        """A Job, ReplicaSet, Deployment or StatefulSet; None when it is gone."""
        calls = {
            "Job": self.batch.read_namespaced_job,
            "ReplicaSet": self.apps.read_namespaced_replica_set,
            "Deployment": self.apps.read_namespaced_deployment,
            "StatefulSet": self.apps.read_namespaced_stateful_set,
        }
        if kind not in calls:
            raise ValueError(f"kind: cannot read owners of kind {kind!r}")
        try:
            return _json(calls[kind](name, namespace, _preload_content=False,
                                     _request_timeout=self.timeout))
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise _failure(exc) from None
        except Exception as exc:
            raise _failure(exc) from None

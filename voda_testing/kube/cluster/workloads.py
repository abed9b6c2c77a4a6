"""The workload controllers of kube-controller-manager, as far as a scheduler can tell:
batch Jobs, Deployments and ReplicaSets, played on the fake API server's store.

- Job (batch/v1): `parallelism` pods (fewer when fewer completions remain) named
  `<job>-<5 letters>` from the template, labelled `batch.kubernetes.io/job-name`
  and owned by the Job; a pod that fails, or is terminating (the default
  podReplacementPolicy TerminatingOrFailed), or is deleted before it succeeded, is
  replaced until `backoffLimit` failures; the Job is Complete once `completions`
  pods succeeded, Failed past its backoff limit (its active pods deleted).
- Deployment (apps/v1): one ReplicaSet per pod template (`<deploy>-<hash>`, the
  Deployment's annotations copied, as the deployment controller does), the current
  one scaled to `replicas` and older ones to 0.
- ReplicaSet: `replicas` active pods (not ending, not terminating); extra ones are
  deleted, unbound ones first, then the newest.
- A running pod of a Job whose template carries the annotation
  `sim.voda.io/run-seconds` succeeds after running that long (its container exits 0).

Like ClusterSimulator it reacts to the store's change stream; `start()` runs it in a
thread, `step()` runs one round.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import secrets
import time
from collections import deque
from typing import Any

from voda_testing.kube.cluster.ticker import Ticker
from voda_testing.kube.errors import ApiError
from voda_testing.kube.patches import MERGE
from voda_testing.kube.store import Change, Store, timestamp

Obj = dict[str, Any]
RUN_ANNOTATION = "sim.voda.io/run-seconds"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
HASH_LABEL = "pod-template-hash"
KINDS = {"jobs.batch": "Job", "replicasets.apps": "ReplicaSet",
         "deployments.apps": "Deployment"}
_SKIPPED_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration",
                        "deployment.kubernetes.io/revision")


def _owner_ref(obj: Obj) -> Obj:
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"],
            "name": obj["metadata"]["name"], "uid": obj["metadata"]["uid"],
            "controller": True, "blockOwnerDeletion": True}


def _controller_uid(obj: Obj) -> str | None:
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid"))
    return None


def _phase(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def _deleting(obj: Obj) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))


def _active(pod: Obj) -> bool:
    return _phase(pod) not in ("Succeeded", "Failed") and not _deleting(pod)


def _condition(obj: Obj, kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


class WorkloadControllers(Ticker):
    thread_name = "workload-controllers"

    def __init__(self, store: Store, tick_seconds: float = 0.02) -> None:
        super().__init__(tick_seconds)
        self.store = store
        self._changes: deque[Change] = deque()
        self.dirty: set[tuple[str, str, str]] = set()  # (resource key, namespace, name)
        self.running_since: dict[str, float] = {}  # pod uid -> when it started running
        self.lost: dict[str, set[str]] = {}  # job uid -> pods gone before they succeeded
        with store.lock:
            _, self._unsubscribe = store.subscribe(None, self._changes.append)
            for key in KINDS:
                for obj in store.list(key)[0]:
                    meta = obj["metadata"]
                    self.dirty.add((key, meta["namespace"], meta["name"]))

    def closed(self) -> None:
        self._unsubscribe()

    def step(self) -> None:
        self._drain()
        for key in sorted(self.dirty):
            self.dirty.discard(key)
            resource, ns, name = key
            obj = self.store.try_get(resource, ns, name)
            if obj is None or _deleting(obj):
                continue
            {"jobs.batch": self._job, "replicasets.apps": self._replica_set,
             "deployments.apps": self._deployment}[resource](obj)
        self._finish_runs()

    # ----- the change stream -------------------------------------------------------------------
    def _drain(self) -> None:
        while self._changes:
            change = self._changes.popleft()
            key, obj = change.resource.key, change.object
            meta = obj["metadata"]
            if key in KINDS:
                if change.type != "DELETED":
                    self.dirty.add((key, meta["namespace"], meta["name"]))
                    self._owner_dirty(obj)
                continue
            if key != "pods":
                continue
            uid = meta["uid"]
            if change.type == "DELETED" or not (_phase(obj) == "Running" and not _deleting(obj)):
                self.running_since.pop(uid, None)
            elif uid not in self.running_since:
                self.running_since[uid] = time.monotonic()
            if change.type == "DELETED" and _phase(obj) != "Succeeded":
                owner = _controller_uid(obj)
                if owner is not None:
                    self.lost.setdefault(owner, set()).add(uid)
            self._owner_dirty(obj)

    def _owner_dirty(self, obj: Obj) -> None:
        for ref in obj["metadata"].get("ownerReferences") or []:
            resource = {"Job": "jobs.batch", "ReplicaSet": "replicasets.apps",
                        "Deployment": "deployments.apps"}.get(ref.get("kind", ""))
            if resource is not None:
                self.dirty.add((resource, obj["metadata"]["namespace"], ref["name"]))

    def _owned(self, owner: Obj) -> list[Obj]:
        ns, uid = owner["metadata"]["namespace"], owner["metadata"]["uid"]
        with self.store.lock:
            found = [self.store._by_uid(dep) for dep in sorted(self.store.owned.get(uid, ()))]
        return [obj for _, obj in (f for f in found if f is not None)
                if obj["metadata"].get("namespace") == ns and obj["kind"] == "Pod"]

    # ----- pods from templates -------------------------------------------------------------------
    def _create_pod(self, owner: Obj, template: Obj, labels: dict[str, str]) -> None:
        template = copy.deepcopy(template or {})
        meta, spec = template.get("metadata") or {}, template.get("spec") or {}
        name = f"{owner['metadata']['name']}-{secrets.token_hex(3)[:5]}"
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": owner["metadata"]["namespace"],
                            "labels": {**(meta.get("labels") or {}), **labels},
                            "annotations": dict(meta.get("annotations") or {}),
                            "ownerReferences": [_owner_ref(owner)]},
               "spec": spec}
        try:
            self.store.create("pods", owner["metadata"]["namespace"], pod)
        except ApiError as exc:
            if exc.code != 409:
                self.errors.append(f"create pod of {owner['metadata']['name']}: {exc.message}")

    def _delete(self, pod: Obj) -> None:
        with contextlib.suppress(ApiError):
            self.store.delete("pods", pod["metadata"]["namespace"], pod["metadata"]["name"])

    def _status(self, obj: Obj, resource: str, status: Obj) -> None:
        current = obj.get("status") or {}
        if all(current.get(k) == v for k, v in status.items()):
            return
        with contextlib.suppress(ApiError):
            self.store.patch(resource, obj["metadata"]["namespace"], obj["metadata"]["name"],
                             {"status": status}, MERGE, subresource="status")

    # ----- Job ------------------------------------------------------------------------------------
    def _job(self, job: Obj) -> None:
        if _condition(job, "Complete") or _condition(job, "Failed"):
            return
        if any(r.get("kind") == "MPIJob" for r in job["metadata"].get("ownerReferences") or []):
            return  # a launcher: the cluster simulator plays its pod (Horovod runs in it)
        spec = job.get("spec") or {}
        parallelism = int(spec.get("parallelism", 1) or 0)
        completions = int(spec.get("completions") or parallelism or 1)
        backoff = int(spec.get("backoffLimit", 6))
        pods = self._owned(job)
        succeeded = sum(1 for p in pods if _phase(p) == "Succeeded")
        failed_uids = {p["metadata"]["uid"] for p in pods if _phase(p) == "Failed"}
        failed_uids |= self.lost.get(job["metadata"]["uid"], set())
        active = [p for p in pods if _active(p)]
        now = timestamp(self.store.clock())
        if succeeded >= completions:
            self._status(job, "jobs.batch", {
                "succeeded": succeeded, "active": 0, "completionTime": now,
                "conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": now}]})
            return
        if len(failed_uids) > backoff:
            for pod in active:
                self._delete(pod)
            self._status(job, "jobs.batch", {
                "failed": len(failed_uids), "active": 0,
                "conditions": [{"type": "Failed", "status": "True",
                                "reason": "BackoffLimitExceeded", "lastTransitionTime": now}]})
            return
        want = min(parallelism, completions - succeeded)
        labels = {JOB_NAME_LABEL: job["metadata"]["name"], "job-name": job["metadata"]["name"],
                  "batch.kubernetes.io/controller-uid": job["metadata"]["uid"]}
        for _ in range(want - len(active)):
            self._create_pod(job, spec.get("template") or {}, labels)
        for pod in sorted(active, key=lambda p: p["metadata"]["name"])[want:]:
            self._delete(pod)
        self._status(job, "jobs.batch", {"active": min(len(active), want) if want >= 0 else 0,
                                         "succeeded": succeeded, "failed": len(failed_uids)})

    def _finish_runs(self) -> None:
        now = time.monotonic()
        for uid, since in list(self.running_since.items()):
            found = self.store._by_uid(uid)
            if found is None:
                self.running_since.pop(uid, None)
                continue
            _, pod = found
            annotations = pod["metadata"].get("annotations") or {}
            try:
                seconds = float(annotations[RUN_ANNOTATION])
            except (KeyError, ValueError):
                continue
            if now - since >= seconds and _phase(pod) == "Running":
                self.running_since.pop(uid, None)
                with contextlib.suppress(ApiError):
                    self.store.patch("pods", pod["metadata"]["namespace"],
                                     pod["metadata"]["name"], {"status": {"phase": "Succeeded"}},
                                     MERGE, subresource="status")

    # ----- ReplicaSet and Deployment --------------------------------------------------------
    def _replica_set(self, rs: Obj) -> None:
        spec = rs.get("spec") or {}
        replicas = int(spec.get("replicas", 1) or 0)
        template = spec.get("template") or {}
        labels = dict(rs["metadata"].get("labels") or {})
        active = [p for p in self._owned(rs) if _active(p)]
        for _ in range(replicas - len(active)):
            self._create_pod(rs, template, {k: v for k, v in labels.items() if k == HASH_LABEL})
        extra = sorted(active, key=lambda p: (bool((p.get("spec") or {}).get("nodeName")),
                                              p["metadata"]["creationTimestamp"],
                                              p["metadata"]["name"]), )
        for pod in extra[: max(0, len(active) - replicas)]:
            self._delete(pod)
        ready = sum(1 for p in active if _phase(p) == "Running")
        self._status(rs, "replicasets.apps", {"replicas": min(len(active), replicas),
                                              "readyReplicas": ready})

    def _deployment(self, deployment: Obj) -> None:
        spec = deployment.get("spec") or {}
        template = spec.get("template") or {}
        digest = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]
        meta = deployment["metadata"]
        name = f"{meta['name']}-{digest}"
        annotations = {k: v for k, v in (meta.get("annotations") or {}).items()
                       if k not in _SKIPPED_ANNOTATIONS}
        replicas = int(spec.get("replicas", 1) if spec.get("replicas") is not None else 1)
        with self.store.lock:
            owned = [self.store._by_uid(d) for d in sorted(self.store.owned.get(meta["uid"], ()))]
        sets = [obj for _, obj in (o for o in owned if o is not None)
                if obj["kind"] == "ReplicaSet"]
        current = next((rs for rs in sets if rs["metadata"]["name"] == name), None)
        hashed = {HASH_LABEL: digest}
        body = {"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "metadata": {"name": name, "namespace": meta["namespace"],
                             "labels": {**((template.get("metadata") or {}).get("labels") or {}),
                                        **hashed},
                             "annotations": annotations,
                             "ownerReferences": [_owner_ref(deployment)]},
                "spec": {"replicas": replicas,
                         "selector": {"matchLabels": {**((spec.get("selector") or {}).get(
                             "matchLabels") or {}), **hashed}},
                         "template": {**template, "metadata": {
                             **(template.get("metadata") or {}),
                             "labels": {**((template.get("metadata") or {}).get("labels") or {}),
                                        **hashed}}}}}
        try:
            if current is None:
                self.store.create("replicasets.apps", meta["namespace"], body)
            elif (current["spec"].get("replicas") != replicas
                  or current["metadata"].get("annotations") != annotations):
                self.store.patch("replicasets.apps", meta["namespace"], name,
                                 {"metadata": {"annotations": annotations},
                                  "spec": {"replicas": replicas}}, MERGE)
            for rs in sets:
                if rs["metadata"]["name"] != name and rs["spec"].get("replicas"):
                    self.store.patch("replicasets.apps", meta["namespace"],
                                     rs["metadata"]["name"], {"spec": {"replicas": 0}}, MERGE)
        except ApiError as exc:
            if exc.code != 409:
                self.errors.append(f"deployment {meta['name']}: {exc.message}")

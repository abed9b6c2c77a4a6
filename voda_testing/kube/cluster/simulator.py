"""A cluster simulator on the fake API server's store: the controllers a real cluster
runs beside Voda.

- kube-scheduler binds ungated pods of the default scheduler (pods naming another
  scheduler are left to it) with its filters (voda_testing.kube.cluster.fit: cordons,
  readiness, taints, nodeSelector, required node affinity, CPU, memory, pods and
  extended resources; terminating pods still hold theirs), preferring nodes whose
  PreferNoSchedule taints the pod tolerates, then the least allocated; a pod that fits
  nowhere gets `PodScheduled=False`, reason Unschedulable, with kube-scheduler's
  message (once per pod uid, again whenever the message changes); a NoExecute taint a
  running pod does not tolerate evicts it (the taint manager; not-ready and unreachable
  taints are the node lifecycle controller's);
- kubelets pull images (once per node) and start bound pods (Pending -> Running, with
  containerStatuses), restart containers that exit under restartPolicy Always or
  OnFailure after a CrashLoopBackOff back-off (10 s doubling to 300 s, times
  `restart_backoff_scale`), finish terminating pods, and stop doing anything on a
  NotReady node; pods can be evicted (Failed, reason Evicted);
- the node lifecycle controller taints a NotReady node `node.kubernetes.io/not-ready`
  and an unreachable one (Ready Unknown) `node.kubernetes.io/unreachable` (NoSchedule
  and NoExecute); the taint manager deletes a pod on a NoExecute-tainted node at once
  if it does not tolerate the taint, else once its tolerationSeconds are over (times
  `toleration_seconds_scale`; every pod gets 300 s for both at creation, as the
  DefaultTolerationSeconds admission plugin gives them); pod GC force-deletes the pods
  of a deleted node;
- the disruption controller keeps PodDisruptionBudgets' status (voda_testing.kube.eviction);
- mpi-operator and the training operator (voda_testing.kube.cluster.operators), for
  the kinds the store serves, with Horovod's elastic driver in MPIJob launchers; a
  ConfigMap change reaches a launcher `configmap_seconds` after it was written (the
  kubelet's ConfigMap-volume refresh);
- training itself: a job finishes once its running workers have done its work
  (annotation `sim.voda.io/work-seconds`, worker-seconds at `speed` per second).

It works on the store in-process (the controllers' requests are not subject to the
HTTP fault injection) and reacts to the store's change stream. `start()` runs it
in a thread; `step()` runs one round, for tests that drive it by hand.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from voda_testing.kube.cluster import fit
from voda_testing.kube.cluster.kubelet import (
    RESET_AFTER_SECONDS,
    Container,
    backoff_seconds,
    containers_of,
    exit_plan,
    restarts_on,
    statuses,
)
from voda_testing.kube.cluster.ledger import GpuLedger
from voda_testing.kube.cluster.nodes import (
    GPU,
    HOSTNAME,
    Obj,
    holds_resources,
    make_node,
    node_ready,
)
from voda_testing.kube.cluster.operators import (
    JOB_NAME,
    JOB_ROLE,
    REPLICA_TYPE,
    Operator,
    default_operators,
    finished,
)
from voda_testing.kube.cluster.ticker import Ticker
from voda_testing.kube.errors import ApiError
from voda_testing.kube.eviction import PDBS, refresh_budgets
from voda_testing.kube.patches import MERGE
from voda_testing.kube.store import Change, Store, timestamp

WORK_ANNOTATION = "sim.voda.io/work-seconds"
LIFECYCLE_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
GATED_MESSAGE = "Scheduling is blocked due to non-empty scheduling gates"
NOT_READY, UNREACHABLE = LIFECYCLE_TAINTS
PodKey = tuple[str, str]
JobKey = tuple[str, str, str]  # resource key, namespace, name


@dataclass
class SimSettings:
    tick_seconds: float = 0.02
    start_seconds: float = 0.05  # containers created and started -> Running
    image_pull_seconds: float = 0.05  # per image a node has not pulled yet
    terminate_seconds: float = 0.05  # terminating pod -> gone
    restart_backoff_scale: float = 1.0  # wall seconds per second of CrashLoopBackOff
    toleration_seconds_scale: float = 1.0  # wall seconds per tolerationSeconds second
    speed: float = 1.0  # work done per running worker per wall second
    default_work_seconds: float = 30.0
    # A ConfigMap change reaches the pods that mount it this long after it is written
    # (kubelet sync period plus its ConfigMap cache: tens of seconds on a real cluster).
    configmap_seconds: float = 0.2


class ClusterSimulator(Ticker):
    thread_name = "cluster-sim"

    def __init__(self, store: Store, settings: SimSettings | None = None,
                 operators: tuple[Operator, ...] | None = None) -> None:
        self.settings = settings or SimSettings()
        super().__init__(self.settings.tick_seconds)
        self.store = store
        # An operator runs where its kind is served in its version (a CRD of another
        # version, such as the training operator's v1 MPIJob, has no controller here).
        self.operators = {op.resource: op for op in operators or default_operators()
                          if op.resource in store.by_name
                          and store.by_name[op.resource].version == op.version}
        self.ledger = GpuLedger(store)
        self._changes: deque[Change] = deque()
        self._pod_rv: dict[PodKey, int] = {}
        self.nodes: dict[str, Obj] = {}
        # node -> its NoExecute taints other than the lifecycle ones (only nodes with some):
        # each tick visits these, not every node (5,000 nodes x 50 ticks a second)
        self.no_execute: dict[str, list[Obj]] = {}
        self.usage: dict[str, dict[PodKey, fit.Resources]] = {}  # node -> pod -> requests
        self._held_on: dict[PodKey, str] = {}
        self.pending: set[PodKey] = set()
        self.unschedulable: dict[str, str] = {}  # pod uid -> the message it was given
        self._no_execute_since: dict[str, float] = {}  # pod uid -> under a NoExecute taint
        self.job_pods: dict[tuple[str, str], set[str]] = {}
        self.running_workers: dict[tuple[str, str], set[str]] = {}
        # Workers that stopped running since their operator last looked, in the order the
        # change stream told it: what a peer of theirs noticed, however late a reconcile.
        self.departed: dict[tuple[str, str], set[str]] = {}
        self.dirty: set[JobKey] = set()
        self.active: dict[JobKey, str] = {}  # running jobs -> uid
        self.progress: dict[str, float] = {}
        self.work: dict[str, float] = {}  # job uid -> worker-seconds it needs
        self.containers: dict[PodKey, dict[str, Container]] = {}  # started pods' containers
        self.images: dict[str, set[str]] = {}  # node -> images it has pulled
        self.tainted_since: dict[str, dict[str, float]] = {}  # node -> NoExecute taint -> when
        self._budgets_dirty = True
        self._timers: list[tuple[float, int, str, PodKey]] = []
        self._seq = itertools.count()
        self._retry_pending = True
        self._last_tick = time.monotonic()
        with store.lock:
            _, self._unsubscribe = store.subscribe(None, self._changes.append)
            for key in ("nodes", "pods", *self.operators):
                for obj in store.list(key)[0]:
                    self._changes.append(Change(store.rv, store.resource(key), "ADDED", obj,
                                                None))

    # ----- running ----------------------------------------------------------------------
    def closed(self) -> None:
        self._unsubscribe()
        self.ledger.close()

    def step(self) -> None:
        now = time.monotonic()
        dt, self._last_tick = now - self._last_tick, now
        self._drain()
        for key in sorted(self.dirty):
            self.dirty.discard(key)
            self._reconcile(key)
        self._drain()
        self._schedule()
        self._evict_untolerated(now)
        self._fire_timers(now)
        self._node_lifecycle(now)
        if self._budgets_dirty:
            self._budgets_dirty = False
            if self.store.objects.get(PDBS):
                refresh_budgets(self.store)
        self._train(dt)

    # ----- the change stream -------------------------------------------------------------------
    def _drain(self) -> None:
        while self._changes:
            change = self._changes.popleft()
            plural = change.resource.key
            if plural in ("pods", PDBS):
                self._budgets_dirty = True
            if plural == "pods":
                self._on_pod(change)
            elif plural == "nodes":
                self._on_node(change)
            elif plural in self.operators:
                meta = change.object["metadata"]
                key = (plural, meta["namespace"], meta["name"])
                if change.type == "DELETED":
                    self.active.pop(key, None)
                    self.departed.pop((meta["namespace"], meta["name"]), None)
                    self.operators[plural].forget(meta["uid"])
                    self.progress.pop(meta["uid"], None)
                    self.work.pop(meta["uid"], None)
                else:
                    self.dirty.add(key)

    def _on_pod(self, change: Change) -> None:
        pod = change.object
        meta = pod["metadata"]
        key = (meta["namespace"], meta["name"])
        if change.rv <= self._pod_rv.get(key, 0) and change.type != "DELETED":
            return
        self._pod_rv[key] = change.rv
        self._index_pod(key, None if change.type == "DELETED" else pod)
        if change.type == "DELETED":
            self._pod_rv.pop(key, None)
            self.unschedulable.pop(meta.get("uid", ""), None)
            self.containers.pop(key, None)
        job = (meta.get("labels") or {}).get(JOB_NAME)
        if job:
            for resource in self.operators:
                self.dirty.add((resource, meta["namespace"], job))

    def _index_pod(self, key: PodKey, pod: Obj | None) -> None:
        held = self._held_on.pop(key, None)  # the node whose usage counts the pod
        if held is not None and key in self.usage.get(held, {}):
            del self.usage[held][key]
            self._retry_pending = True
        was_pending = {key} & self.pending
        self.pending.discard(key)
        ns, name = key
        labels = (pod or {}).get("metadata", {}).get("labels") or {}
        job = labels.get(JOB_NAME)
        for job_key in ((ns, job),) if job else ():
            members = self.job_pods.setdefault(job_key, set())
            running = self.running_workers.setdefault(job_key, set())
            was_running = name in running
            if pod is None:
                members.discard(name)
                running.discard(name)
            else:
                members.add(name)
                if self.is_running(pod) and self._role(pod) == "worker":
                    running.add(name)
                else:
                    running.discard(name)
            if was_running and name not in running:
                self.departed.setdefault(job_key, set()).add(name)
        if pod is None:
            return
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        node = spec.get("nodeName")
        if node and holds_resources(pod):
            self.usage.setdefault(node, {})[key] = fit.pod_requests(pod)
            self._held_on[key] = node
        deleting = bool(pod["metadata"].get("deletionTimestamp"))
        meta_uid = pod["metadata"].get("uid", "")
        if not node and not deleting and not spec.get("schedulingGates") and spec.get(
                "schedulerName", "default-scheduler") == "default-scheduler" and status.get(
                "phase") == "Pending":
            if key not in was_pending and self.unschedulable.get(meta_uid) in (None,
                                                                          GATED_MESSAGE):
                self._retry_pending = True  # a pod kube-scheduler has not tried yet
            self.pending.add(key)
        elif not node and not deleting and spec.get("schedulingGates") and spec.get(
                "schedulerName", "default-scheduler") == "default-scheduler":
            self._mark(key, pod, "SchedulingGated", GATED_MESSAGE)
        if node and self._node_up(node):
            if deleting:
                self._timer(self.settings.terminate_seconds, "terminate", key)
            elif status.get("phase") == "Pending":
                images = {str(c.get("image", "")) for c in spec.get("containers") or []}
                pulls = len(images - self.images.get(node, set()))
                self._timer(self.settings.start_seconds + pulls * self.settings.image_pull_seconds,
                            "start", key)

    def _on_node(self, change: Change) -> None:
        node = change.object
        name = node["metadata"]["name"]
        self._retry_pending = True
        if change.type == "DELETED":
            self.nodes.pop(name, None)
            self.no_execute.pop(name, None)
            self.tainted_since.pop(name, None)
            self.images.pop(name, None)
            self._gc_node(name)
            return
        was_up = self._node_up(name)
        self.nodes[name] = node
        taints = [t for t in (node.get("spec") or {}).get("taints") or []
                  if t.get("effect") == "NoExecute" and t.get("key") not in LIFECYCLE_TAINTS]
        if taints:
            self.no_execute[name] = taints
        else:
            self.no_execute.pop(name, None)
        self._taint_by_condition(node)
        if node_ready(node) and not was_up:  # the kubelet is back: it catches up on its pods
            for key in list(self.usage.get(name, {})):
                pod = self.store.try_get("pods", *key)
                if pod is not None:
                    self._index_pod(key, pod)

    # ----- helpers the operators use ------------------------------------------------------------
    @staticmethod
    def _role(pod: Obj) -> str | None:
        labels = pod["metadata"].get("labels") or {}
        return labels.get(JOB_ROLE) or labels.get(REPLICA_TYPE)

    @staticmethod
    def is_running(pod: Obj) -> bool:
        return (pod.get("status") or {}).get("phase") == "Running" and not pod[
            "metadata"].get("deletionTimestamp")

    def pods_of(self, job: Obj, role: str) -> list[Obj]:
        ns, name, uid = (job["metadata"]["namespace"], job["metadata"]["name"],
                         job["metadata"]["uid"])
        out = []
        for pod_name in sorted(self.job_pods.get((ns, name), ())):
            pod = self.store.try_get("pods", ns, pod_name)
            if pod is None or self._role(pod) != role:
                continue
            if any(r.get("uid") == uid for r in pod["metadata"].get("ownerReferences") or []):
                out.append(pod)
        return out

    def pods_of_owner(self, namespace: str, job: str, role: str, owner_uid: str) -> list[Obj]:
        """The pods of `job` in `role` whose owner has `owner_uid` (e.g. a launcher Job)."""
        out = []
        for pod_name in sorted(self.job_pods.get((namespace, job), ())):
            pod = self.store.try_get("pods", namespace, pod_name)
            if pod is not None and self._role(pod) == role and any(
                    r.get("uid") == owner_uid for r in pod["metadata"].get("ownerReferences")
                    or []):
                out.append(pod)
        return out

    def record_event(self, obj: Obj, kind: str, reason: str, message: str) -> None:
        """A core v1 Event about `obj`, as a controller's event recorder writes it."""
        meta = obj["metadata"]
        now = timestamp(self.store.clock())
        self.create({"apiVersion": "v1", "kind": "Event", "metadata": {
            "generateName": f"{meta['name']}.", "namespace": meta.get("namespace", "default")},
            "involvedObject": {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
                               "name": meta["name"], "namespace": meta.get("namespace"),
                               "uid": meta.get("uid")},
            "type": kind, "reason": reason, "message": message, "count": 1,
            "firstTimestamp": now, "lastTimestamp": now,
            "source": {"component": "cluster-simulator"}})

    def restart_container(self, pod: Obj, message: str) -> None:
        """The pod's first container exited 1 and the kubelet restarted it at once (torchrun
        exits; the kubelet's first restart is not delayed)."""
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        containers = self.containers.get(key)
        if not containers:
            return  # not started by the kubelet: nothing runs to exit
        container = next(iter(containers.values()))
        container.last = {"exitCode": 1, "reason": "Error", "message": message,
                          "startedAt": container.started,
                          "finishedAt": timestamp(self.store.clock())}
        container.exit_code = 1
        self._run_container(key, pod, container)
        self._write_containers(pod)

    def create(self, obj: Obj) -> Obj | None:
        meta = obj["metadata"]
        try:
            return self.store.create(_resource_of(obj), meta.get("namespace", ""), obj)
        except ApiError as exc:
            if exc.code != 409:
                self.errors.append(f"create {meta.get('name')}: {exc.message}")
            return None

    def delete_pod(self, pod: Obj, grace: int | None = None) -> None:
        with contextlib.suppress(ApiError):
            self.store.delete("pods", pod["metadata"]["namespace"], pod["metadata"]["name"],
                              grace_seconds=grace)

    def set_phase(self, pod: Obj, phase: str, reason: str | None = None,
                  message: str | None = None, ready: bool | None = None) -> None:
        status: dict[str, Any] = {"phase": phase}
        if reason:
            status["reason"] = reason
        if message:
            status["message"] = message
        shown = "True" if (phase == "Running" if ready is None else ready) else "False"
        status["conditions"] = [c for c in (pod.get("status") or {}).get("conditions") or []
                                if c.get("type") not in ("Ready", "ContainersReady")] + [
            {"type": "Ready", "status": shown}, {"type": "ContainersReady", "status": shown}]
        if phase == "Running":
            status["startTime"] = (pod.get("status") or {}).get("startTime") or timestamp(
                self.store.clock())
            status["podIP"] = "10.1.0.1"
            status["hostIP"] = "10.0.0.1"
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        if key in self.containers:
            status["containerStatuses"] = statuses(pod, self.containers[key])
        with contextlib.suppress(ApiError):
            self.store.patch("pods", pod["metadata"]["namespace"], pod["metadata"]["name"],
                             {"status": status}, MERGE, subresource="status")

    # ----- controllers -----------------------------------------------------------------------
    def _reconcile(self, key: JobKey) -> None:
        resource, ns, name = key
        job = self.store.try_get(resource, ns, name)
        if job is None:
            return
        operator = self.operators[resource]
        operator.reconcile(self, job)
        job = self.store.try_get(resource, ns, name) or job
        if finished(job) or job["metadata"].get("deletionTimestamp"):
            self.active.pop(key, None)
        else:
            self.active[key] = job["metadata"]["uid"]
            self.work[job["metadata"]["uid"]] = self.work_of(job)

    def _train(self, dt: float) -> None:
        """Progress of every running job: its running workers (from the pod index, so a
        tick costs little however many jobs run)."""
        for key, uid in list(self.active.items()):
            resource, ns, name = key
            workers = len(self.running_workers.get((ns, name), ()))
            if not workers:
                continue
            if resource == "mpijobs.kubeflow.org":  # Horovod's hosts, while the launcher runs
                job = self.store.try_get(resource, ns, name)
                workers = self.operators[resource].training(self, job) if job else 0
                if not workers:
                    continue
            done = self.progress.get(uid, 0.0) + workers * dt * self.settings.speed
            self.progress[uid] = done
            if done >= self.work.get(uid, self.settings.default_work_seconds):
                job = self.store.try_get(resource, ns, name)
                if job is None or job["metadata"]["uid"] != uid:
                    continue
                self.operators[resource].complete(self, job)
                self.active.pop(key, None)
                self.dirty.add(key)

    def work_of(self, job: Obj) -> float:
        raw = (job["metadata"].get("annotations") or {}).get(WORK_ANNOTATION)
        try:
            return float(raw) if raw is not None else self.settings.default_work_seconds
        except ValueError:
            return self.settings.default_work_seconds

    def _schedule(self) -> None:
        """kube-scheduler: bind every pending pod that fits somewhere."""
        if not self.pending or not self._retry_pending:
            return
        self._retry_pending = False
        for key in sorted(self.pending):
            pod = self.store.try_get("pods", *key)
            if pod is None:
                self.pending.discard(key)
                continue
            node, reasons = self._fit(pod)
            if node is None:
                self._mark_unschedulable(key, pod, reasons)
                continue
            try:
                bound = self.store.bind(key[0], key[1], node)
            except ApiError:
                continue
            self._pod_rv[key] = int(bound["metadata"]["resourceVersion"])
            self.unschedulable.pop(pod["metadata"].get("uid", ""), None)
            self._index_pod(key, bound)

    def _fit(self, pod: Obj) -> tuple[str | None, dict[str, list[str]]]:
        """The node kube-scheduler binds the pod to, else why each node refused it."""
        need = fit.pod_requests(pod)
        reasons: dict[str, list[str]] = {}
        best: tuple[tuple[int, float], str] | None = None
        pinned = ((pod.get("spec") or {}).get("nodeSelector") or {}).get(HOSTNAME)
        names = sorted(self.nodes)
        if pinned in self.nodes:  # no other node can pass: try that one first
            names = [pinned, *(n for n in names if n != pinned)]
        for name in names:
            if best is not None and pinned == best[1]:
                break
            node = self.nodes[name]
            problem = fit.static_problem(pod, node)
            if problem is not None:
                reasons[name] = [problem]
                continue
            have, used = fit.allocatable(node), self.used(name)
            lacking = fit.short(need, have, used)
            if lacking:
                reasons[name] = lacking
                continue
            preferred = fit.untolerated(pod, (node.get("spec") or {}).get("taints") or [],
                                        ("PreferNoSchedule",)) is None
            left = have.get(GPU, 0) - used.get(GPU, 0) - need.get(GPU, 0)
            # TaintToleration scores first here; then the least allocated (GPUs, then CPU)
            cpu_left = (have.get("cpu", 0) - used.get("cpu", 0)) / max(1, have.get("cpu", 1))
            score = (int(preferred), left + cpu_left)
            if best is None or score > best[0]:
                best = (score, name)
        return (best[1] if best else None), reasons

    def used(self, node: str) -> fit.Resources:
        """What the pods bound to `node` request, summed."""
        out: fit.Resources = {}
        for requests in self.usage.get(node, {}).values():
            for resource, value in requests.items():
                out[resource] = out.get(resource, 0) + value
        return out

    def _mark_unschedulable(self, key: PodKey, pod: Obj, reasons: dict[str, list[str]]) -> None:
        self._mark(key, pod, "Unschedulable", fit.message(len(self.nodes), reasons))

    def _mark(self, key: PodKey, pod: Obj, reason: str, text: str) -> None:
        """PodScheduled=False with `reason` and `text`, once per pod uid and message."""
        uid = pod["metadata"].get("uid", "")
        if self.unschedulable.get(uid) == text:
            return
        self.unschedulable[uid] = text
        conditions = [c for c in (pod.get("status") or {}).get("conditions") or []
                      if c.get("type") != "PodScheduled"]
        conditions.append({"type": "PodScheduled", "status": "False", "reason": reason,
                           "message": text, "lastProbeTime": None,
                           "lastTransitionTime": timestamp(self.store.clock())})
        with self.store.lock, contextlib.suppress(ApiError):
            current = self.store.try_get("pods", *key)
            if current is not None and current["metadata"].get("uid") == uid:
                self.store.patch("pods", *key, {"status": {"conditions": conditions}}, MERGE,
                                 subresource="status")

    def _evict_untolerated(self, now: float) -> None:
        """The taint manager: a pod bound to a node with a NoExecute taint it does not
        tolerate is deleted at once; one it tolerates for `tolerationSeconds` is deleted
        when they have passed (the node lifecycle controller's own not-ready and
        unreachable taints are left to its part)."""
        under: set[str] = set()
        for name, taints in self.no_execute.items():
            for key in list(self.usage.get(name, {})):
                pod = self.store.try_get("pods", *key)
                if pod is None or pod["metadata"].get("deletionTimestamp"):
                    continue
                seconds = fit.toleration_seconds(pod, taints)
                if seconds is None:
                    continue
                uid = pod["metadata"].get("uid", "")
                under.add(uid)
                if now - self._no_execute_since.setdefault(uid, now) >= seconds:
                    self.delete_pod(pod)
        for uid in set(self._no_execute_since) - under:
            del self._no_execute_since[uid]

    def _timer(self, delay: float, kind: str, key: PodKey) -> None:  # kind: what[:container:n]
        heapq.heappush(self._timers, (time.monotonic() + delay, next(self._seq), kind, key))

    def _fire_timers(self, now: float) -> None:
        while self._timers and self._timers[0][0] <= now:
            _, _, kind, key = heapq.heappop(self._timers)
            pod = self.store.try_get("pods", *key)
            if pod is None:
                continue
            node = (pod.get("spec") or {}).get("nodeName")
            if not node or not self._node_up(node):
                continue
            if kind == "terminate" and pod["metadata"].get("deletionTimestamp"):
                self.delete_pod(pod, grace=0)
            elif pod["metadata"].get("deletionTimestamp"):
                continue
            elif kind == "start" and (pod.get("status") or {}).get("phase") == "Pending":
                self._start_containers(key, pod, node)
            elif kind.startswith(("exit:", "restart:")):
                what, name, count = kind.split(":")
                container = self.containers.get(key, {}).get(name)
                if container is None or container.restarts != int(count):
                    continue  # a timer of an earlier start
                if what == "exit" and container.state == "running":
                    self._exit(key, pod, name, container.exit_code)
                elif what == "restart" and container.state == "waiting":
                    self._run_container(key, pod, container)
                    self._write_containers(pod)

    # ----- the kubelet's containers ----------------------------------------------------------
    def _start_containers(self, key: PodKey, pod: Obj, node: str) -> None:
        self.images.setdefault(node, set()).update(
            str(c.get("image", "")) for c in (pod.get("spec") or {}).get("containers") or [])
        self.containers[key] = containers_of(pod)
        for container in self.containers[key].values():
            self._run_container(key, pod, container, restart=False)
        self.set_phase(pod, "Running")

    def _run_container(self, key: PodKey, pod: Obj, container: Container,
                       restart: bool = True) -> None:
        if restart:
            container.restarts += 1
        container.state, container.reason, container.message = "running", "", ""
        container.started = timestamp(self.store.clock())
        container.started_at = time.monotonic()
        plan = exit_plan(pod)
        if plan is not None:
            container.exit_code = plan[1]
            self._timer(plan[0], f"exit:{container.name}:{container.restarts}", key)

    def _write_containers(self, pod: Obj) -> None:
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        containers = self.containers.get(key, {})
        if containers and all(c.state == "terminated" for c in containers.values()):
            failed = any(c.exit_code for c in containers.values())
            self.set_phase(pod, "Failed" if failed else "Succeeded")
            return
        self.set_phase(pod, "Running", ready=all(c.state == "running"
                                                 for c in containers.values()))

    def _exit(self, key: PodKey, pod: Obj, name: str, exit_code: int) -> None:
        """A container's process ends: restarted after its back-off, or terminated."""
        container = self.containers[key][name]
        if time.monotonic() - container.started_at >= (
                RESET_AFTER_SECONDS * self.settings.restart_backoff_scale):
            container.crashes = 0
        now = timestamp(self.store.clock())
        reason = "Error" if exit_code else "Completed"
        container.last = {"exitCode": exit_code, "reason": reason,
                          "startedAt": container.started, "finishedAt": now}
        container.exit_code = exit_code
        policy = (pod.get("spec") or {}).get("restartPolicy", "Always")
        if restarts_on(policy, exit_code):
            container.crashes += 1
            wait = backoff_seconds(container.crashes)
            meta = pod["metadata"]
            container.state, container.reason = "waiting", "CrashLoopBackOff"
            container.message = (f"back-off {wait:g}s restarting failed container={name} "
                                 f"pod={meta['name']}_{meta['namespace']}({meta['uid']})")
            self._timer(wait * self.settings.restart_backoff_scale,
                        f"restart:{name}:{container.restarts}", key)
        else:
            container.state, container.reason = "terminated", reason
        self._write_containers(pod)

    def _node_up(self, name: str) -> bool:
        node = self.nodes.get(name)
        return node is not None and node_ready(node)

    def _taint_by_condition(self, node: Obj) -> None:
        """The node lifecycle controller: not-ready / unreachable taints from Ready."""
        name = node["metadata"]["name"]
        wanted: list[Obj] = []
        if not node_ready(node):
            ready = [c for c in (node.get("status") or {}).get("conditions") or []
                     if c.get("type") == "Ready"]
            key = NOT_READY if ready and ready[0].get("status") == "False" else UNREACHABLE
            wanted = [{"key": key, "effect": "NoSchedule"},
                      {"key": key, "effect": "NoExecute",
                       "timeAdded": timestamp(self.store.clock())}]
        taints = list((node.get("spec") or {}).get("taints") or [])
        ours = [t for t in taints if t.get("key") in (NOT_READY, UNREACHABLE)]
        if [(t["key"], t["effect"]) for t in ours] != [(t["key"], t["effect"]) for t in wanted]:
            taints = [t for t in taints if t.get("key") not in (NOT_READY, UNREACHABLE)]
            taints += wanted
            with contextlib.suppress(ApiError):
                self.store.patch("nodes", "", name, {"spec": {"taints": taints or None}},
                                 MERGE)
        # when each NoExecute taint came, as the taint manager counts tolerationSeconds
        since = self.tainted_since.setdefault(name, {})
        present = {t.get("key", "") for t in taints if t.get("effect") == "NoExecute"
                   and t.get("key") in LIFECYCLE_TAINTS}
        for key in set(since) - present:
            del since[key]
        for key in present:
            since.setdefault(key, time.monotonic())
        if not since:  # the taint manager's loop visits tainted nodes only
            del self.tainted_since[name]

    def _node_lifecycle(self, now: float) -> None:
        """The taint manager for the not-ready and unreachable taints: pods leave once they
        do not tolerate one, or once the shortest tolerationSeconds of those they do are over
        (times toleration_seconds_scale; other NoExecute taints: `_evict_untolerated`)."""
        for name, since in list(self.tainted_since.items()):
            node = self.nodes.get(name)
            if not since or node is None:
                continue
            taints = [t for t in (node.get("spec") or {}).get("taints") or []
                      if t.get("effect") == "NoExecute" and t.get("key") in LIFECYCLE_TAINTS]
            for key in list(self.usage.get(name, {})):
                pod = self.store.try_get("pods", *key)
                if pod is None or pod["metadata"].get("deletionTimestamp"):
                    continue
                due = self._eviction_due(pod, taints, since)
                if due is not None and now >= due:
                    self.delete_pod(pod)  # stays Terminating while the kubelet is gone

    def _eviction_due(self, pod: Obj, taints: list[Obj], since: dict[str, float]
                      ) -> float | None:
        """When the pod must go: each taint counted from when it came, for the least
        tolerationSeconds of the tolerations it uses (fit.toleration_seconds, as the taint
        manager's getMinTolerationTime); None: tolerated for ever."""
        due: float | None = None
        for taint in taints:
            seconds = fit.toleration_seconds(pod, [taint])
            if seconds is None:
                continue
            if seconds == 0:
                return 0.0
            start = since.get(taint.get("key", ""), time.monotonic())
            at = start + seconds * self.settings.toleration_seconds_scale
            due = at if due is None else min(due, at)
        return due

    def _gc_node(self, name: str) -> None:
        pods, _ = self.store.list("pods", field_selector=f"spec.nodeName={name}")
        for pod in pods:
            self.delete_pod(pod, grace=0)

    # ----- test controls ---------------------------------------------------------------------
    def add_node(self, name: str, gpus: int, labels: dict[str, str] | None = None,
                 taints: list[Obj] | None = None, resources: dict[str, str] | None = None
                 ) -> Obj:
        return self.store.create("nodes", "", make_node(name, gpus, labels, taints, resources))

    def remove_node(self, name: str) -> None:
        self.store.delete("nodes", "", name)

    def cordon(self, name: str, unschedulable: bool = True) -> None:
        self.store.patch("nodes", "", name, {"spec": {"unschedulable": unschedulable or None}},
                         MERGE)

    def set_ready(self, name: str, ready: bool, unreachable: bool = True) -> None:
        """Ready, or not: Unknown (the kubelet stopped posting status: unreachable) or,
        with `unreachable=False`, False (the kubelet reports itself not ready)."""
        node = self.store.get("nodes", "", name)
        conditions = [c for c in node["status"].get("conditions") or [] if c["type"] != "Ready"]
        status = "True" if ready else ("Unknown" if unreachable else "False")
        conditions.append({"type": "Ready", "status": status, "reason": {
            "True": "KubeletReady", "Unknown": "NodeStatusUnknown",
            "False": "KubeletNotReady"}[status]})
        self.store.patch("nodes", "", name, {"status": {"conditions": conditions}}, MERGE,
                         subresource="status")

    def exit_container(self, namespace: str, name: str, exit_code: int = 1,
                       container: str | None = None) -> None:
        """A running container of a pod exits (its first, or the one named)."""
        key = (namespace, name)
        pod = self.store.get("pods", namespace, name)
        containers = self.containers.get(key) or {}
        target = container or next(iter(containers), None)
        if target is None or containers[target].state != "running":
            raise ValueError(f"pod {namespace}/{name} has no running container {target}")
        self._exit(key, pod, target, exit_code)

    def evict(self, namespace: str, name: str) -> None:
        """The kubelet evicts a pod (node pressure): Failed, reason Evicted."""
        pod = self.store.get("pods", namespace, name)
        self.set_phase(pod, "Failed", "Evicted", "The node was low on resource: memory.")

    def wait_idle(self, timeout: float = 10.0) -> None:
        """Let a started simulator catch up with what is pending now."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and (self._changes or self.dirty):
            time.sleep(self.settings.tick_seconds)


def _resource_of(obj: Obj) -> str:
    api_version, kind = obj.get("apiVersion", "v1"), obj["kind"]
    group = api_version.split("/")[0] if "/" in api_version else ""
    plural = {"Pod": "pods", "Service": "services", "ConfigMap": "configmaps",
              "Job": "jobs", "Event": "events",
              "HorizontalPodAutoscaler": "horizontalpodautoscalers"}[kind]
    return f"{plural}.{group}" if group else plural

"""A cluster simulator on the fake API server's store: the controllers a real cluster
runs beside Voda.

- kube-scheduler binds ungated pods of the default scheduler (pods naming another
  scheduler are left to it), honouring readiness, cordons, taints, nodeSelector,
  required node affinity and GPU capacity (terminating pods still hold theirs);
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
- mpi-operator and the training operator (voda_testing.kube.cluster.operators);
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
    HOSTNAME,
    Obj,
    affinity_allows,
    holds_resources,
    make_node,
    node_gpus,
    node_ready,
    pod_gpus,
    tolerates,
)
from voda_testing.kube.cluster.operators import (
    JOB_NAME,
    JOB_ROLE,
    OPERATORS,
    REPLICA_TYPE,
    Operator,
    finished,
)
from voda_testing.kube.cluster.ticker import Ticker
from voda_testing.kube.errors import ApiError
from voda_testing.kube.eviction import PDBS, refresh_budgets
from voda_testing.kube.patches import MERGE
from voda_testing.kube.store import Change, Store, timestamp

WORK_ANNOTATION = "sim.voda.io/work-seconds"
NOT_READY = "node.kubernetes.io/not-ready"
UNREACHABLE = "node.kubernetes.io/unreachable"
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


class ClusterSimulator(Ticker):
    thread_name = "cluster-sim"

    def __init__(self, store: Store, settings: SimSettings | None = None,
                 operators: tuple[Operator, ...] = OPERATORS) -> None:
        self.settings = settings or SimSettings()
        super().__init__(self.settings.tick_seconds)
        self.store = store
        self.operators = {op.resource: op for op in operators}
        self.ledger = GpuLedger(store)
        self._changes: deque[Change] = deque()
        self._pod_rv: dict[PodKey, int] = {}
        self.nodes: dict[str, Obj] = {}
        self.usage: dict[str, dict[PodKey, int]] = {}
        self._held_on: dict[PodKey, str] = {}
        self.pending: set[PodKey] = set()
        self.unschedulable: set[PodKey] = set()
        self.job_pods: dict[tuple[str, str], set[str]] = {}
        self.running_workers: dict[tuple[str, str], set[str]] = {}
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
        self.pending.discard(key)
        ns, name = key
        labels = (pod or {}).get("metadata", {}).get("labels") or {}
        job = labels.get(JOB_NAME)
        for job_key in ((ns, job),) if job else ():
            members = self.job_pods.setdefault(job_key, set())
            running = self.running_workers.setdefault(job_key, set())
            if pod is None:
                members.discard(name)
                running.discard(name)
            else:
                members.add(name)
                if self.is_running(pod) and self._role(pod) == "worker":
                    running.add(name)
                else:
                    running.discard(name)
        if pod is None:
            return
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        node = spec.get("nodeName")
        if node and holds_resources(pod):
            self.usage.setdefault(node, {})[key] = pod_gpus(pod)
            self._held_on[key] = node
        deleting = bool(pod["metadata"].get("deletionTimestamp"))
        if not node and not deleting and not spec.get("schedulingGates") and spec.get(
                "schedulerName", "default-scheduler") == "default-scheduler" and status.get(
                "phase") == "Pending":
            self.pending.add(key)
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
            self.tainted_since.pop(name, None)
            self.images.pop(name, None)
            self._gc_node(name)
            return
        was_up = self._node_up(name)
        self.nodes[name] = node
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
            if resource == "mpijobs.kubeflow.org":  # Horovod trains while the launcher runs
                launcher = self.store.try_get("pods", ns, f"{name}-launcher")
                if launcher is None or not self.is_running(launcher):
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
            node = self._fit(pod)
            if node is None:
                self._mark_unschedulable(key, pod)
                continue
            try:
                bound = self.store.bind(key[0], key[1], node)
            except ApiError:
                continue
            self._pod_rv[key] = int(bound["metadata"]["resourceVersion"])
            self.unschedulable.discard(key)
            self._index_pod(key, bound)

    def _fit(self, pod: Obj) -> str | None:
        spec = pod.get("spec") or {}
        selector = spec.get("nodeSelector") or {}
        gpus = pod_gpus(pod)
        if HOSTNAME in selector:
            candidates = [selector[HOSTNAME]] if selector[HOSTNAME] in self.nodes else []
        else:
            candidates = sorted(self.nodes)
        best: tuple[int, str] | None = None
        for name in candidates:
            node = self.nodes[name]
            labels = node["metadata"].get("labels") or {}
            if not node_ready(node) or (node.get("spec") or {}).get("unschedulable"):
                continue
            if any(labels.get(k) != v for k, v in selector.items()):
                continue
            if not affinity_allows(pod, labels):
                continue
            taints = [t for t in (node.get("spec") or {}).get("taints") or []
                      if t.get("effect") in ("NoSchedule", "NoExecute")]
            if any(not tolerates(pod, t) for t in taints):
                continue
            free = node_gpus(node) - sum(self.usage.get(name, {}).values())
            if gpus > free:
                continue
            if best is None or free - gpus > best[0]:  # least allocated, as the default
                best = (free - gpus, name)
        return best[1] if best else None

    def _mark_unschedulable(self, key: PodKey, pod: Obj) -> None:
        if key in self.unschedulable:
            return
        self.unschedulable.add(key)
        conditions = [c for c in (pod.get("status") or {}).get("conditions") or []
                      if c.get("type") != "PodScheduled"]
        conditions.append({"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                           "message": f"0/{len(self.nodes)} nodes are available",
                           "lastTransitionTime": timestamp(self.store.clock())})
        with contextlib.suppress(ApiError):
            self.store.patch("pods", *key, {"status": {"conditions": conditions}}, MERGE,
                             subresource="status")

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
        present = {t.get("key", "") for t in taints if t.get("effect") == "NoExecute"}
        for key in set(since) - present:
            del since[key]
        for key in present:
            since.setdefault(key, time.monotonic())
        if not since:  # the taint manager's loop visits tainted nodes only
            del self.tainted_since[name]

    def _node_lifecycle(self, now: float) -> None:
        """The taint manager: pods on a node with NoExecute taints leave once they do not
        tolerate one, or once the shortest tolerationSeconds of those they do are over."""
        for name, since in list(self.tainted_since.items()):
            node = self.nodes.get(name)
            if not since or node is None:
                continue
            taints = [t for t in (node.get("spec") or {}).get("taints") or []
                      if t.get("effect") == "NoExecute"]
            for key in list(self.usage.get(name, {})):
                pod = self.store.try_get("pods", *key)
                if pod is None or pod["metadata"].get("deletionTimestamp"):
                    continue
                due = self._eviction_due(pod, taints, since)
                if due is not None and now >= due:
                    self.delete_pod(pod)  # stays Terminating while the kubelet is gone

    def _eviction_due(self, pod: Obj, taints: list[Obj], since: dict[str, float]
                      ) -> float | None:
        due: float | None = None
        for taint in taints:
            matching = [t for t in (pod.get("spec") or {}).get("tolerations") or []
                        if tolerates({"spec": {"tolerations": [t]}}, taint)]
            if not matching:
                return 0.0
            limits = [t["tolerationSeconds"] for t in matching
                      if t.get("tolerationSeconds") is not None]
            if len(limits) < len(matching):
                continue  # tolerated for ever
            start = since.get(taint.get("key", ""), time.monotonic())
            at = start + max(0, min(limits)) * self.settings.toleration_seconds_scale
            due = at if due is None else min(due, at)
        return due

    def _gc_node(self, name: str) -> None:
        pods, _ = self.store.list("pods", field_selector=f"spec.nodeName={name}")
        for pod in pods:
            self.delete_pod(pod, grace=0)

    # ----- test controls ---------------------------------------------------------------------
    def add_node(self, name: str, gpus: int, labels: dict[str, str] | None = None,
                 taints: list[Obj] | None = None) -> Obj:
        return self.store.create("nodes", "", make_node(name, gpus, labels, taints))

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
              "Job": "jobs"}[kind]
    return f"{plural}.{group}" if group else plural

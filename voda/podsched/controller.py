"""The pod scheduler at work: watch, decide, bind, explain, recover.

It shares the elastic backend's cluster view (voda.backends.kubernetes.cluster_view):
the GPUs a node has left are the view's, counting the pods bound there and every
claim (the elastic backend claims GPUs for the workers it pins before they are
bound). Before posting Bindings the pod scheduler claims the GPUs of its pods in
the view, all of a gang or none; a claim fails when the elastic side took the
GPUs first, and the gang is tried again. So the two never hand out the same GPU.
A claim is released once the view counts the bound pod itself.

The view's own watches of Nodes and Pods (one each, shared with the elastic
backend) feed voda.podsched.state too, after the view; a watch of the
configuration's ConfigMap feeds voda.podsched.config_source. The loop wakes on any
change, and at least every `retry_seconds`, and runs one cycle:

1. read the configuration again if its file changed;
2. delete our pods on nodes NotReady for longer than the grace (their
   controllers recreate them; voda.podsched.recovery);
3. gather the pods that wait into gangs, one per workload, with the hints of
   the pod and its owners and what the workload holds or held;
4. decide (voda.podsched.decide.schedule) on a snapshot of the cluster;
5. claim, post the cycle's Bindings concurrently (each pod counted at once:
   "assumed"), write an Event on every pod saying where and why, or why it
   still waits.

A cycle after a change that only added pods looks at those pods' gangs; any
change that can free room (a pod ending or going away, a node added, Ready,
uncordoned or relabelled, a new configuration) and the periodic retry look at
every waiting gang.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from voda.backends.kubernetes.api import NODES, ApiError, KubeApi, NotLeader
from voda.backends.kubernetes.cluster_view import ClusterView, core_node, node_info, watch_cluster
from voda.backends.kubernetes.informer import Informer
from voda.podsched import events, filters, kube, preempt, read, volumes
from voda.podsched.claims import Claims
from voda.podsched.config import SchedulerConfig
from voda.podsched.config_source import ConfigSource
from voda.podsched.decide import Planner
from voda.podsched.hints import read_hints
from voda.podsched.metrics import ClusterFigures, PodSchedulerMetrics, cluster_figures
from voda.podsched.model import GPU, Binding, Decision, Gang, Hints, Outcome, Pod, Snapshot
from voda.podsched.owners import Owners, Workload
from voda.podsched.recovery import (
    NOT_READY_TAINT,
    UNREACHABLE_TAINT,
    RecoveryTracker,
    toleration_seconds,
)
from voda.podsched.state import ClusterState, PodRecord

log = logging.getLogger(__name__)

SCHEDULER_NAME = "voda-scheduler"
Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class PodSchedulerSettings:
    scheduler_name: str = SCHEDULER_NAME
    config_file: str | None = None  # a SchedulerConfig document, read again when it changes
    config_map: str | None = None  # "namespace/name" of a ConfigMap holding one
    config_key: str = "config.yaml"
    retry_seconds: float = 10.0
    watch_seconds: int = 300
    event_repeat_seconds: float = 60.0
    recovery_window_seconds: float = 600.0
    owner_ttl_seconds: float = 30.0
    instance: str = socket.gethostname()
    watch_volumes: bool = True  # PersistentVolumeClaims, PersistentVolumes, StorageClasses
    watch_budgets: bool = True  # PodDisruptionBudgets, which preemption spares when it can
    condition_refresh_seconds: float = 5.0  # a pod's PodScheduled message changes this often
    # A folder with `token` and `ca.crt` of the pod scheduler's own ServiceAccount (a
    # mounted service-account-token Secret): its requests use them, not the backend's.
    token_dir: str | None = None
    kubeconfig: str | None = None  # or a kubeconfig of its own (outside a pod)


@dataclass(frozen=True, slots=True)
class _Entry:
    """A pod of ours with its workload and the hints that apply to it."""

    record: PodRecord
    workload: Workload
    hints: Hints
    errors: tuple[str, ...]


class PodScheduler:
    def __init__(
        self,
        api: KubeApi,
        view: ClusterView,
        settings: PodSchedulerSettings | None = None,
        metrics: PodSchedulerMetrics | None = None,
        feed_view: bool = False,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        """`feed_view`: start informers for the view too (when no elastic backend runs
        beside it and feeds it)."""
        self.api = api
        self.view = view
        self.settings = settings or PodSchedulerSettings()
        s = self.settings
        self.metrics = metrics or PodSchedulerMetrics()
        self.metrics.watch_cluster(self.figures)
        self.feed_view = feed_view
        self.clock, self.wall = clock, wall
        self.state = ClusterState(s.scheduler_name, self._topology)
        self.owners = Owners(lambda kind, ns, name: kube.get_owner(api, kind, ns, name), clock,
                             s.owner_ttl_seconds)
        self.recovery = RecoveryTracker(s.recovery_window_seconds)
        self.limiter = events.EventLimiter(s.event_repeat_seconds)
        self.source = ConfigSource(lambda config: self._mark(everything=True),
                                   s.config_file, s.config_map, s.config_key)
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._lock = threading.Lock()  # guards what the informer threads hand over
        self._feed = threading.RLock()  # one Node or Pod event (or the replay) at a time
        self._everything = True  # the next cycle looks at every waiting gang
        self._fresh: set[str] = set()  # pod keys that arrived since the last cycle
        self._lost: list[tuple[Pod, float]] = []
        self._node_news: list[tuple[str, bool, float]] = []  # (node, ready, when)
        self._ready_since: dict[str, float] = {}  # when each waiting pod was first seen
        # pod uid -> the PodScheduled message written, and when
        self._conditions: dict[str, tuple[str, float]] = {}
        self.claims = Claims(view, self.state.alive)
        self._workloads: dict[str, Workload] = {}  # pod key -> workload, once known
        self._entries: dict[str, _Entry] = {}  # bound pods' entries, while their record holds
        self.planner = Planner()
        self._events = ThreadPoolExecutor(max_workers=2, thread_name_prefix="pod-events")
        self._binders = ThreadPoolExecutor(max_workers=8, thread_name_prefix="pod-binding")
        self._informers: list[Informer] = []
        self._volume_informers: dict[str, Informer] = {}
        self._budget_informer: Informer | None = None
        self._thread: threading.Thread | None = None
        self.cycles = 0
        view.listeners.append(self.claims.release_counted)

    @property
    def config(self) -> SchedulerConfig:
        return self.source.config

    @property
    def config_error(self) -> str | None:
        return self.source.error

    # ----- life cycle ---------------------------------------------------------------------
    def start(self) -> PodScheduler:
        """Take the view's Node and Pod events (starting its watches when `feed_view`, else
        replaying what its watches listed already) and start the loop."""
        s = self.settings
        self.source.poll_file()
        self._informers = []
        if s.config_map:
            namespace, _, name = s.config_map.partition("/")
            self._informers.append(Informer(
                self.api, kube.CONFIGMAPS, self.source.config_map_event, namespace=namespace,
                field_selector=f"metadata.name={name}", watch_seconds=s.watch_seconds))
        if s.watch_volumes:
            self._volume_informers = {kind.plural: Informer(
                self.api, kind, self._on_volume, watch_seconds=s.watch_seconds)
                for kind in (kube.CLAIMS, kube.VOLUMES, kube.STORAGE_CLASSES)}
            self._informers.extend(self._volume_informers.values())
        if s.watch_budgets:
            # Read when a pod preempts; a budget's change alone places no pod.
            self._budget_informer = Informer(self.api, kube.PDBS, lambda *_: None,
                                             watch_seconds=s.watch_seconds)
            self._informers.append(self._budget_informer)
        self.view.node_handlers.append(self._on_node)
        self.view.pod_handlers.append(self._on_pod)
        if self.feed_view:
            self._informers.extend(watch_cluster(self.api, self.view, s.watch_seconds))
        else:
            self._replay()
        for informer in self._informers:
            informer.start()
        self._thread = threading.Thread(target=self._run, name="pod-scheduler", daemon=True)
        self._thread.start()
        return self

    def _feeds(self) -> list[Informer]:
        return [*self._informers, *(i for i in self.view.informers if i not in self._informers)]

    def wait_synced(self, timeout: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout
        return all(i.synced.wait(max(0.0, deadline - time.monotonic())) for i in self._feeds())

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        for handlers, handler in ((self.view.node_handlers, self._on_node),
                                  (self.view.pod_handlers, self._on_pod),
                                  (self.view.listeners, self.claims.release_counted)):
            if handler in handlers:
                handlers.remove(handler)
        for informer in self._informers:
            informer.stop()
        if self._thread is not None:
            self._thread.join(10)
        self._binders.shutdown(wait=True)
        self._events.shutdown(wait=True)

    def _run(self) -> None:
        for informer in self._feeds():
            while not informer.synced.wait(0.5):
                if self._stop.is_set():
                    return
        while not self._stop.is_set():
            woken = self._wake.wait(self.settings.retry_seconds)
            if self._stop.is_set():
                return
            self._wake.clear()
            if not woken:
                self._mark(everything=True)
            try:
                self.cycle()
            except Exception:  # never let one bad cycle end the scheduler
                log.exception("pod scheduler: cycle failed")
                self._mark(everything=True)
                self._stop.wait(1.0)

    def _mark(self, everything: bool = False, pod: str | None = None) -> None:
        with self._lock:
            self._everything = self._everything or everything
            if pod is not None:
                self._fresh.add(pod)
        self._wake.set()

    # ----- the view's watches (their threads) ---------------------------------------------------
    def _on_node(self, kind: str, obj: Obj, old: Obj | None = None) -> None:
        with self._feed:
            try:
                self._node_event(kind, obj)
            except Exception:  # never into the view's informer: it would drop the event
                log.exception("pod scheduler: node event")

    def _on_pod(self, kind: str, obj: Obj, old: Obj | None = None) -> None:
        with self._feed:
            try:
                self._pod_event(kind, obj)
            except Exception:
                log.exception("pod scheduler: pod event")

    def _on_volume(self, kind: str, obj: Obj, old: Obj | None = None) -> None:
        self._mark(everything=True)  # a claim bound, a volume or class added: pods may fit

    def _cached(self, plural: str) -> volumes.Lookup:
        informer = self._volume_informers.get(plural)

        def lookup(namespace: str, name: str) -> Obj | None:
            if informer is None:
                return None
            with informer.lock:
                return informer.cache.get((namespace, name))

        return lookup

    def _budgets(self) -> list[preempt.Budget]:
        """The PodDisruptionBudgets preemption weighs, as last watched."""
        informer = self._budget_informer
        return [read.budget(b) for b in informer.items()] if informer else []

    def _with_volumes(self, pod: Pod) -> Pod:
        """The pod with what its claims ask of its node (voda.podsched.volumes)."""
        if not pod.claims or not self._volume_informers:
            return pod
        found = volumes.resolve(pod, self._cached("persistentvolumeclaims"),
                                self._cached("persistentvolumes"),
                                self._cached("storageclasses"))
        return replace(pod, volume_topology=found.topology, volume_error=found.error,
                       provision=found.provision)

    def _bind(self, pod: Pod, node: str) -> None:
        """Post one Binding, after naming the node on the claims provisioned there."""
        for claim in pod.provision:
            kube.select_node(self.api, pod.namespace, claim, node)
        kube.bind(self.api, pod, node)

    def _replay(self) -> None:
        """What the view's watches listed before this scheduler subscribed, as ADDED events
        (events that come meanwhile wait for the feed lock, and are newer)."""
        with self._feed:
            for informer in self.view.informers:
                handler = self._node_event if informer.kind == NODES else self._pod_event
                for obj in informer.items():
                    handler("ADDED", obj)

    def _topology(self, obj: Obj) -> tuple[str | None, str | None]:
        node = core_node(node_info(dict(obj), self.view.settings), 0)
        return node.leaf, node.spine

    def _node_event(self, kind: str, obj: Obj) -> None:
        before, after = self.state.node_event(kind, obj)
        now = self.clock()
        name = str((obj.get("metadata") or {}).get("name", ""))
        ready = after is not None and after.ready
        with self._lock:
            self._node_news.append((name, ready, now))
            if not ready and (before is None or before.ready or after is None):
                for record in self.state.on_node(name):
                    if record.ours and record.holds:
                        self._lost.append((record.pod, now))
        grew = after is not None and (
            before is None or (after.ready and not before.ready)
            or (before.unschedulable and not after.unschedulable)
            or after.labels != before.labels or after.taints != before.taints
            or after.allocatable != before.allocatable)
        self._mark(everything=grew or after is None)

    def _pod_event(self, kind: str, obj: Obj) -> None:
        change = self.state.pod_event(kind, obj)
        now = self.clock()
        if change.lost and change.before is not None:
            with self._lock:
                self._lost.append((change.before.pod, now))
        freed = change.before is not None and change.before.holds and (
            change.record is None or not change.record.holds)
        record = change.record
        waiting = record is not None and record.ours and not record.pod.node
        if record is not None and waiting:
            with self._lock:
                self._ready_since.setdefault(record.pod.key, now)
        if freed:
            self._mark(everything=True)
        elif record is not None and waiting and (
                change.before is None or change.before.pod != record.pod):
            self._mark(pod=record.pod.key)

    # ----- one cycle -----------------------------------------------------------------------------
    def cycle(self) -> list[Decision]:
        """Steps 1-5 of the module doc; returns the decisions taken."""
        self.cycles += 1
        now = self.clock()
        # 1. configuration
        self.source.poll_file()
        with self._lock:
            everything, fresh = self._everything, self._fresh
            self._everything, self._fresh = False, set()
            lost, self._lost = self._lost, []
            news, self._node_news = self._node_news, []
        # 2. losses and NotReady nodes
        for pod, when in lost:
            self.recovery.lost(pod, self._workload(pod).key, when)
        for node, ready, when in news:
            if ready:  # back before its pods were replaced: they were not lost
                self.recovery.node_ready(node)
                self.recovery.back(r.pod.key for r in self.state.on_node(node)
                                   if r.ours and r.holds and not r.deleting)
            else:
                self.recovery.node_not_ready(node, when)
        self.recovery.expire(now)
        self._evict_from_overdue_nodes(now)
        self.claims.release_counted()
        # 3. gangs
        ours = self.state.ours()
        self._tidy(ours)
        waiting = {r.pod.key for r in self.state.pending()}
        entries = [self._entry(r, r.pod.key in waiting) for r in ours]
        by_workload: dict[str, list[_Entry]] = {}
        for entry in entries:
            by_workload.setdefault(entry.workload.key, []).append(entry)
        ready = {key: [e for e in group if e.record.pod.key in waiting]
                 for key, group in by_workload.items()}
        ready = {key: group for key, group in ready.items() if group and (
            everything or any(e.record.pod.key in fresh or e.record.pod.nominated
                              for e in group))}
        if not ready:
            return []
        everyone = any(e.record.pod.anti_affinity for group in ready.values() for e in group)
        snapshot = self.snapshot(entries, everyone)
        gangs = [self._gang(key, group, by_workload[key], snapshot)
                 for key, group in sorted(ready.items())]
        # 4. decide
        decisions = self.planner.schedule(gangs, snapshot, self.config)
        # 5. act
        self._act(decisions, len(snapshot.nodes))
        self._preempt(decisions)
        return decisions

    def snapshot(self, entries: Iterable[_Entry] = (), everyone: bool = False) -> Snapshot:
        """The state's snapshot with the GPUs the shared view counts as taken."""
        gpus: dict[str, dict[str, int]] = {}
        for info in self.view.nodes():
            # The view gives no GPU of a cordoned or NotReady node to anyone, so neither
            # does the pod scheduler (pods without GPUs may still go to a cordoned node
            # that they tolerate).
            taken = info.gpus - self.view.free(info.name) if info.usable else info.gpus
            gpus[info.name] = {GPU: taken}
        return self.state.snapshot(gpus, self._sensitive(entries), everyone)

    def _workload(self, pod: Pod) -> Workload:
        known = self._workloads.get(pod.key)
        if known is not None:
            return known
        try:
            workload = self.owners.resolve(pod)
        except ApiError as failure:
            log.warning("pod scheduler: owners of %s: %s", pod.key, failure)
            owner = pod.owner
            return Workload(f"{pod.namespace}/{owner.kind if owner else 'Pod'}/"
                            f"{owner.name if owner else pod.name}", ())
        self._workloads[pod.key] = workload
        return workload

    def _entry(self, record: PodRecord, waiting: bool) -> _Entry:
        """The pod with its workload and hints; a waiting pod's owners are read again
        (their GETs are cached for `owner_ttl_seconds`), a bound pod's are kept."""
        pod = record.pod
        cached = self._entries.get(pod.key)
        if cached is not None and cached.record is record and not waiting:
            return cached
        workload = self._workload(pod)
        if waiting:
            try:
                workload = self.owners.resolve(pod)
                self._workloads[pod.key] = workload
            except ApiError:
                pass
        hints, errors = read_hints([pod.annotations, *workload.layers])
        if record.error:
            errors = [record.error, *errors]
        entry = _Entry(record, workload, hints, tuple(errors))
        if not waiting:
            self._entries[pod.key] = entry
        return entry

    def _gang(self, key: str, waiting: list[_Entry], workload: Iterable[_Entry],
              snapshot: Snapshot) -> Gang:
        """The waiting pods of a workload, with what its other pods hold or held."""
        members: dict[str, int] = dict(self.recovery.lost_nodes(key))
        member_gpus = 0
        for entry in workload:
            record = entry.record
            if record.holds:
                members[record.pod.node] = members.get(record.pod.node, 0) + 1
                if not record.deleting:
                    member_gpus += record.pod.gpus
            elif record.pod.phase == "Succeeded":
                member_gpus += record.pod.gpus
        hints = waiting[0].hints
        if hints.preferred_domain:
            hints = replace(hints, preferred_domain=self._domain_name(hints.preferred_domain,
                                                                      snapshot))
        errors = sorted({e for entry in waiting for e in entry.errors})
        return Gang(key=key, pending=tuple(self._with_volumes(e.record.pod) for e in waiting),
                    hints=hints,
                    hint_errors=tuple(errors), members=members, member_gpus=member_gpus,
                    recovering=self.recovery.recovering(key))

    def _domain_name(self, domain: str, snapshot: Snapshot) -> str:
        """A leaf or spine as users write it (its label value) -> the view's name for it."""
        labels = self.view.settings.topology_labels[:-1]
        for node in snapshot.nodes:
            if domain in (node.name, node.leaf, node.spine):
                return domain
        for node in snapshot.nodes:
            values = [node.labels.get(label) for label in labels]
            if values and values[-1] == domain and node.leaf:
                return node.leaf
            if len(values) > 1 and domain in values[:-1] and node.spine:
                return node.spine
        return domain

    def _sensitive(self, entries: Iterable[_Entry]) -> dict[str, int]:
        """Latency-sensitive pods of ours per node (bound, or with a Binding posted)."""
        counts: dict[str, int] = {}
        for entry in entries:
            if not entry.hints.latency_sensitive:
                continue
            record = entry.record
            node = record.pod.node if record.holds else (
                None if record.pod.node else self.state.assumed_node(record.pod.key))
            if node:
                counts[node] = counts.get(node, 0) + 1
        return counts

    def _tidy(self, ours: list[PodRecord]) -> None:
        """Forget what was kept about pods that are gone."""
        if max(len(self._workloads), len(self._entries), len(self._conditions)) <= (
                2 * len(ours) + 100) and self.cycles % 100:
            return
        alive = {r.pod.key for r in ours}
        self._workloads = {k: w for k, w in self._workloads.items() if k in alive}
        self._entries = {k: e for k, e in self._entries.items() if k in alive}
        uids = {r.pod.uid or r.pod.key for r in ours}
        with self._lock:
            self._ready_since = {k: t for k, t in self._ready_since.items() if k in alive}
            self._conditions = {k: m for k, m in self._conditions.items() if k in uids}
        self.limiter.keep_only(r.pod for r in ours)

    # ----- acting ------------------------------------------------------------------------------
    def _act(self, decisions: list[Decision], total_nodes: int) -> None:
        """Claim and bind what the cycle placed, and say why for the rest. The Bindings of
        the whole cycle are posted concurrently (each is one round trip to the server)."""
        now = self.clock()
        posted: list[tuple[Decision, float, list[tuple[Binding, Future[None]]]]] = []
        for decision in decisions:
            gang = decision.gang
            if decision.outcome != Outcome.BOUND:
                self.metrics.decisions.labels(decision.outcome.value).inc()
                kind = events.NORMAL if decision.outcome == Outcome.WAITING else events.WARNING
                reason = (events.WAITING_FOR_GANG if decision.outcome == Outcome.WAITING
                          else events.FAILED_SCHEDULING)
                # An incomplete gang's count of pods changes with each pod: not in the
                # condition, which would be rewritten on every pod of a large gang.
                message = filters.fit_error(total_nodes, decision.reason if (
                    decision.outcome != Outcome.WAITING) else (
                    f"gang of {gang.hints.gpu_count} GPUs: waiting for the rest of its pods, "
                    "holding nothing"))
                for pod in gang.pending:
                    self._event(pod, reason, decision.reason, kind)
                    self._unschedulable(pod, message)
                continue
            refused = self.claims.claim_all((b.pod, b.node) for b in decision.bindings)
            if refused is not None:
                log.info("pod scheduler: GPUs of %s on %s were taken meanwhile; trying again",
                         gang.key, refused)
                self.metrics.decisions.labels("conflict").inc()
                self._mark(everything=True)
                continue
            self.metrics.decisions.labels(decision.outcome.value).inc()
            with self._lock:
                started = min((self._ready_since.get(p.key, now) for p in gang.pending),
                              default=now)
            futures = []
            for binding in decision.bindings:
                self.state.assume(binding.pod, binding.node)
                futures.append((binding, self._binders.submit(
                    self._bind, binding.pod, binding.node)))
            posted.append((decision, started, futures))
        for decision, started, futures in posted:
            if sum(self._bound(decision, binding, future) for binding, future in futures):
                self.metrics.placement_seconds.observe(max(0.0, self.clock() - started))

    def _bound(self, decision: Decision, binding: Binding, future: Future[None]) -> bool:
        """The outcome of one posted Binding: its Event, and the recovery it ends."""
        pod = binding.pod
        try:
            future.result()
        except (ApiError, NotLeader) as failure:
            self.state.forget(pod)
            self.claims.release(pod)
            self.metrics.bind_failures.inc()
            log.warning("pod scheduler: binding %s to %s: %s", pod.key, binding.node, failure)
            self._event(pod, events.FAILED_SCHEDULING,
                        f"binding to {binding.node} failed: {failure}", events.WARNING)
            self._mark(everything=True)
            return False
        with self._lock:
            self._ready_since.pop(pod.key, None)
        message = f"Successfully assigned {pod.key} to {binding.node}; {decision.reason}"
        recovered = self.recovery.replaced(decision.gang.key, self.clock())
        if recovered is not None:
            self.metrics.recovery_seconds.observe(recovered)
            message += f"; replaces a lost pod, recovered in {recovered:.2f} s"
        self._event(pod, events.SCHEDULED, message, events.NORMAL)
        if pod.ignored:
            self._event(pod, events.NOT_EVALUATED,
                        f"{'; '.join(pod.ignored)}: not evaluated by this scheduler, placed "
                        f"without; {filters.USE_DEFAULT}", events.WARNING)
        return True

    def _preempt(self, decisions: list[Decision]) -> None:
        """Make room for pods that fit nowhere by preempting lower-priority pods of ours
        (voda.podsched.preempt): nominate the node, delete the victims gracefully; the
        pod binds in a later cycle, once they are gone."""
        waiting = sorted((d.gang.pending[0] for d in decisions
                          if d.outcome == Outcome.UNSCHEDULABLE and len(d.gang.pending) == 1
                          and not d.gang.hint_errors),
                         key=lambda p: (-p.priority, p.created, p.key))
        waiting = [p for p in waiting if p.preempts and not p.volume_error and not p.unsupported]
        if not waiting:
            return
        running: dict[str, list[Pod]] = {}
        terminating: dict[str, list[Pod]] = {}
        for record in self.state.ours():
            if record.holds:
                (terminating if record.deleting else running).setdefault(
                    record.pod.node, []).append(record.pod)
        # With the Bindings this cycle posted.
        snapshot = self.snapshot(everyone=any(p.anti_affinity for p in waiting))
        used: set[str] = set()
        budgets: list[preempt.Budget] | None = None
        for pod in waiting:
            if not preempt.eligible(pod, terminating):
                continue
            if budgets is None:
                budgets = self._budgets()
            nodes = [n for n in snapshot.nodes if n.name not in used]
            found = preempt.find(pod, nodes, snapshot, running, snapshot.neighbours, budgets)
            if found is None:
                continue
            used.add(found.node)
            try:
                kube.nominate(self.api, pod, found.node)
            except (ApiError, NotLeader) as failure:
                log.info("pod scheduler: nominating %s for %s: %s", found.node, pod.key, failure)
                continue
            names = ", ".join(v.key for v in found.victims)
            log.info("pod scheduler: %s preempts %s on %s%s", pod.key, names, found.node,
                     f" ({found.violating} against a PodDisruptionBudget)"
                     if found.violating else "")
            self._event(pod, events.PREEMPTING, f"preempting {len(found.victims)} pod(s) of "
                        f"lower priority on {found.node}: {names}", events.NORMAL)
            for victim in found.victims:
                try:
                    kube.delete_pod(self.api, victim)
                except (ApiError, NotLeader) as failure:
                    log.warning("pod scheduler: preempting %s: %s", victim.key, failure)
                    continue
                self._event(victim, events.PREEMPTED,
                            f"Preempted by {pod.key} on node {found.node}", events.NORMAL)
            running[found.node] = [p for p in running.get(found.node, ())
                                   if p not in found.victims]
            budgets = preempt.spend(budgets, found.victims)

    def _unschedulable(self, pod: Pod, message: str) -> None:
        """PodScheduled=False (Unschedulable) with the message, once per pod (by uid) and
        message: a pod recreated under the same name gets its own."""
        record = self.state.pods.get(pod.key)
        if record is None or record.pod.uid != pod.uid:
            return
        if record.scheduled == ("False", "Unschedulable", message):
            return  # the pod says so already (written by this scheduler, or its predecessor)
        ident = pod.uid or pod.key
        now = self.clock()
        with self._lock:
            said = self._conditions.get(ident)
            if said is not None and (said[0] == message or (
                    now - said[1] < self.settings.condition_refresh_seconds)):
                return  # said so, or said lately: a later cycle brings it up to date
            self._conditions[ident] = (message, now)
        since = None if record.scheduled is not None and record.scheduled[0] == "False" else (
            events.rfc3339(self.wall()))

        def patch() -> None:
            try:
                kube.set_unschedulable(self.api, pod, message, since)
            except (ApiError, NotLeader) as failure:
                log.info("pod scheduler: PodScheduled of %s not written: %s", pod.key, failure)
                with self._lock:  # said again next cycle
                    if self._conditions.get(ident, ("",))[0] == message:
                        del self._conditions[ident]

        if not self._stop.is_set():
            self._events.submit(patch)

    def _event(self, pod: Pod, reason: str, message: str, kind: str) -> None:
        if not self.limiter.allow(pod, reason, message, self.clock()):
            return
        body = events.event_body(pod, reason, message, kind, self.wall(),
                                 self.settings.scheduler_name, self.settings.instance)

        def post() -> None:
            try:
                kube.create_event(self.api, pod.namespace, body)
            except (ApiError, NotLeader) as failure:
                log.info("pod scheduler: event on %s not written: %s", pod.key, failure)

        if not self._stop.is_set():
            self._events.submit(post)

    def _evict_from_overdue_nodes(self, now: float) -> None:
        """Delete our pods whose toleration of their NotReady node ran out (voda.podsched.
        recovery), so their controllers replace them."""
        default = self.config.not_ready_grace_seconds
        for node, since in self.recovery.not_ready_nodes():
            state = self.state.nodes.get(node)
            taint = UNREACHABLE_TAINT if state is None or state.unreachable else NOT_READY_TAINT
            for record in self.state.on_node(node):
                if not (record.ours and record.holds and not record.deleting
                        and record.pod.owner is not None):
                    continue
                pod = record.pod
                seconds = toleration_seconds(pod, taint, default)
                if seconds is None or now - since < seconds:
                    continue
                try:
                    kube.delete_pod(self.api, pod)
                except (ApiError, NotLeader) as failure:
                    log.warning("pod scheduler: deleting %s from NotReady node %s: %s",
                                pod.key, node, failure)
                    continue
                owner = pod.owner.kind if pod.owner else "controller"
                self._event(pod, events.NODE_NOT_READY,
                            f"node {node} NotReady for {now - since:.1f} s, past the pod's "
                            f"toleration of {seconds:g} s for {taint}: pod deleted so its "
                            f"{owner} replaces it", events.WARNING)
        alive = set(self.state.nodes) | {r.pod.node for r in self.state.ours() if r.holds}
        self.recovery.forget_nodes(alive)

    # ----- metrics -------------------------------------------------------------------------
    def figures(self) -> ClusterFigures:
        waiting = [r.pod.gpus for r in self.state.pending()]
        return cluster_figures(self.snapshot(), waiting)

"""The pod scheduler at work: watch, decide, bind, explain, recover.

Informers keep voda.podsched.state up to date from the watches of Nodes and Pods
(and of the configuration's ConfigMap). The loop wakes on any change, and at
least every `retry_seconds`, and runs one cycle:

1. read the configuration again if its file changed;
2. delete our pods on nodes NotReady for longer than the grace (their
   controllers recreate them; voda.podsched.recovery);
3. gather the pods that wait into gangs, one per workload, with the hints of
   the pod and its owners and what the workload already holds;
4. decide (voda.podsched.decide.schedule) on a snapshot that also counts what
   the elastic backend has planned (`reserved`);
5. post a Binding per placed pod (counted at once: "assumed"), write an Event on
   every pod saying where and why, or why it still waits.

A cycle after a change that only added pods looks at those pods' gangs; any
change that can free room (a pod ending or going away, a node added, Ready,
uncordoned or relabelled, a new configuration) and the periodic retry look at
every waiting gang.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from voda.core.placement.topology import LEAF_LABEL, SPINE_LABEL
from voda.podsched import events
from voda.podsched.config import ConfigError, SchedulerConfig, parse_text
from voda.podsched.decide import schedule
from voda.podsched.hints import read_hints
from voda.podsched.informer import Informer
from voda.podsched.kubeapi import ApiFailure, KubeApi
from voda.podsched.metrics import ClusterFigures, PodSchedulerMetrics, cluster_figures
from voda.podsched.model import Decision, Gang, Hints, Outcome, Pod
from voda.podsched.owners import Owners, Workload
from voda.podsched.recovery import RecoveryTracker
from voda.podsched.state import ClusterState, PodRecord

log = logging.getLogger(__name__)

SCHEDULER_NAME = "voda-scheduler"


@dataclass(frozen=True, slots=True)
class PodSchedulerSettings:
    scheduler_name: str = SCHEDULER_NAME
    leaf_label: str = LEAF_LABEL
    spine_label: str = SPINE_LABEL
    config_file: str | None = None  # a SchedulerConfig document, read again when it changes
    config_map: str | None = None  # "namespace/name" of a ConfigMap holding one
    config_key: str = "config.yaml"
    retry_seconds: float = 10.0
    watch_timeout_seconds: int = 60
    event_repeat_seconds: float = 60.0
    recovery_window_seconds: float = 600.0
    owner_ttl_seconds: float = 30.0
    instance: str = socket.gethostname()


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
        settings: PodSchedulerSettings | None = None,
        metrics: PodSchedulerMetrics | None = None,
        reserved: Callable[[], Mapping[str, Mapping[str, int]]] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.api = api
        self.settings = settings or PodSchedulerSettings()
        s = self.settings
        self.metrics = metrics or PodSchedulerMetrics()
        self.metrics.watch_cluster(self.figures)
        self.reserved = reserved or (lambda: {})
        self.clock, self.wall = clock, wall
        self.state = ClusterState(s.scheduler_name, s.leaf_label, s.spine_label)
        self.owners = Owners(api.get_owner, clock, s.owner_ttl_seconds)
        self.recovery = RecoveryTracker(s.recovery_window_seconds)
        self.limiter = events.EventLimiter(s.event_repeat_seconds)
        self.config = SchedulerConfig()
        self.config_error: str | None = None
        self._config_seen: tuple[float, int] | None = None
        self.stop_event = threading.Event()
        self._wake = threading.Event()
        self._lock = threading.Lock()  # guards the flags below
        self._everything = True  # the next cycle looks at every waiting gang
        self._fresh: set[str] = set()  # pod keys that arrived since the last cycle
        self._lost: list[tuple[Pod, float]] = []  # losses seen by the informers
        self._node_news: list[tuple[str, bool, float]] = []  # (node, ready, when)
        self._ready_since: dict[str, float] = {}  # when each pending pod was first seen
        self._workloads: dict[str, Workload] = {}  # pod key -> workload, once known
        self._events = ThreadPoolExecutor(max_workers=2, thread_name_prefix="pod-events")
        self._informers: list[Informer] = []
        self._thread: threading.Thread | None = None
        self.cycles = 0

    # ----- life cycle ---------------------------------------------------------------------
    def start(self) -> PodScheduler:
        s, stop = self.settings, self.stop_event
        self._load_config_file()
        self._informers = [
            Informer("nodes", lambda: self.api.list("nodes"),
                     lambda rv: self.api.watch("nodes", rv, s.watch_timeout_seconds),
                     self._nodes_listed, self._node_event, stop),
            Informer("pods", lambda: self.api.list("pods"),
                     lambda rv: self.api.watch("pods", rv, s.watch_timeout_seconds),
                     self._pods_listed, self._pod_event, stop),
        ]
        if s.config_map:
            namespace, _, name = s.config_map.partition("/")
            selector = f"metadata.name={name}"
            self._informers.append(Informer(
                "config", lambda: self.api.list("configmaps", namespace, selector),
                lambda rv: self.api.watch("configmaps", rv, s.watch_timeout_seconds, namespace,
                                          selector),
                self._config_maps_listed, self._config_map_event, stop))
        for informer in self._informers:
            informer.start()
        self._thread = threading.Thread(target=self._run, name="pod-scheduler", daemon=True)
        self._thread.start()
        return self

    def wait_synced(self, timeout: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout
        return all(i.synced.wait(max(0.0, deadline - time.monotonic()))
                   for i in self._informers)

    def stop(self) -> None:
        self.stop_event.set()
        self._wake.set()
        self.api.close_watches()
        if self._thread is not None:
            self._thread.join(10)
        for informer in self._informers:
            informer.join(5)
        self._events.shutdown(wait=True, cancel_futures=False)

    def _run(self) -> None:
        for informer in self._informers:
            informer.synced.wait()
            if self.stop_event.is_set():
                return
        while not self.stop_event.is_set():
            woken = self._wake.wait(self.settings.retry_seconds)
            if self.stop_event.is_set():
                return
            self._wake.clear()
            if not woken:
                self._mark(everything=True)
            try:
                self.cycle()
            except Exception:  # never let one bad cycle end the scheduler
                log.exception("pod scheduler: cycle failed")
                self._mark(everything=True)
                self.stop_event.wait(1.0)

    def _mark(self, everything: bool = False, pod: str | None = None) -> None:
        with self._lock:
            self._everything = self._everything or everything
            if pod is not None:
                self._fresh.add(pod)
        self._wake.set()

    # ----- informer callbacks (informer threads) ----------------------------------------------
    def _nodes_listed(self, items: list[dict[str, Any]]) -> None:
        self.state.set_nodes(items)
        now = self.clock()
        with self._lock:
            for node in self.state.nodes.values():
                self._node_news.append((node.name, node.ready, now))
        self._mark(everything=True)

    def _node_event(self, kind: str, obj: dict[str, Any]) -> None:
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

    def _pods_listed(self, items: list[dict[str, Any]]) -> None:
        self.state.set_pods(items)
        self._mark(everything=True)

    def _pod_event(self, kind: str, obj: dict[str, Any]) -> None:
        change = self.state.pod_event(kind, obj)
        now = self.clock()
        if change.lost and change.before is not None:
            with self._lock:
                self._lost.append((change.before.pod, now))
        freed = change.before is not None and change.before.holds and (
            change.record is None or not change.record.holds)
        record = change.record
        waiting = record is not None and record.ours and not record.pod.node
        if waiting and record is not None:
            with self._lock:
                self._ready_since.setdefault(record.pod.key, now)
        if freed:
            self._mark(everything=True)
        elif waiting and record is not None and (
                change.before is None or change.before.pod != record.pod):
            self._mark(pod=record.pod.key)

    def _config_maps_listed(self, items: list[dict[str, Any]]) -> None:
        for obj in items:
            self._config_map_event("ADDED", obj)
        if not items:
            self._set_config(SchedulerConfig(), "config map absent: the defaults apply")

    def _config_map_event(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            self._set_config(SchedulerConfig(), "config map deleted: the defaults apply")
            return
        text = (obj.get("data") or {}).get(self.settings.config_key, "")
        self._apply_config_text(text, f"config map {self.settings.config_map}")

    # ----- configuration ----------------------------------------------------------------------
    def _apply_config_text(self, text: str, where: str) -> None:
        try:
            config = parse_text(text)
        except ConfigError as exc:
            self.config_error = f"{where}: {exc}"
            log.error("pod scheduler: %s; keeping the configuration in force", self.config_error)
            return
        self._set_config(config, None)

    def _set_config(self, config: SchedulerConfig, note: str | None) -> None:
        if note:
            log.info("pod scheduler: %s", note)
        self.config_error = None
        if config != self.config:
            self.config = config
            self._mark(everything=True)

    def _load_config_file(self) -> None:
        path = self.settings.config_file
        if not path:
            return
        try:
            stat = os.stat(path)
        except OSError as exc:
            self.config_error = f"{path}: {exc.strerror}"
            return
        seen = (stat.st_mtime, stat.st_size)
        if seen == self._config_seen:
            return
        self._config_seen = seen
        try:
            text = Path(path).read_bytes()
        except OSError as exc:
            self.config_error = f"{path}: {exc.strerror}"
            return
        try:
            self._set_config(parse_text(text), None)
        except ConfigError as exc:
            self.config_error = f"{path}: {exc}"
            log.error("pod scheduler: %s; keeping the configuration in force", self.config_error)

    # ----- one cycle -----------------------------------------------------------------------------
    def cycle(self) -> list[Decision]:
        """Steps 1-5 of the module doc; returns the decisions taken."""
        self.cycles += 1
        now = self.clock()
        # 1. configuration
        self._load_config_file()
        with self._lock:
            everything, fresh = self._everything, self._fresh
            self._everything, self._fresh = False, set()
            lost, self._lost = self._lost, []
            news, self._node_news = self._node_news, []
        # 2. losses and NotReady nodes
        for node, ready, when in news:
            if ready:
                self.recovery.node_ready(node)
            else:
                self.recovery.node_not_ready(node, when)
        for pod, when in lost:
            self.recovery.lost(pod, self._workload(pod).key, when)
        self.recovery.expire(now)
        self._evict_from_overdue_nodes(now)
        # 3. gangs
        ours = self.state.ours()
        self._tidy(ours)
        entries = {r.pod.key: self._entry(r) for r in ours}
        waiting_keys = {r.pod.key for r in self.state.pending()}
        pending = [e for key, e in entries.items() if key in waiting_keys]
        by_workload: dict[str, list[_Entry]] = {}
        for entry in pending:
            by_workload.setdefault(entry.workload.key, []).append(entry)
        if not everything:
            by_workload = {k: v for k, v in by_workload.items()
                           if any(e.record.pod.key in fresh for e in v)}
        if not by_workload:
            return []
        gangs = [self._gang(key, waiting, entries.values()) for key, waiting in
                 sorted(by_workload.items())]
        # 4. decide
        snapshot = self.state.snapshot(self.reserved())
        sensitive = self._sensitive(entries.values())
        snapshot = replace(snapshot, sensitive=sensitive)
        decisions = schedule(gangs, snapshot, self.config)
        # 5. act
        for decision in decisions:
            self._act(decision)
        return decisions

    def _workload(self, pod: Pod) -> Workload:
        known = self._workloads.get(pod.key)
        if known is not None:
            return known
        try:
            workload = self.owners.resolve(pod)
        except ApiFailure as failure:
            log.warning("pod scheduler: owners of %s: %s", pod.key, failure)
            return Workload(f"{pod.namespace}/{pod.owner.kind if pod.owner else 'Pod'}/"
                            f"{pod.owner.name if pod.owner else pod.name}", ())
        self._workloads[pod.key] = workload
        return workload

    def _entry(self, record: PodRecord) -> _Entry:
        pod = record.pod
        workload = self._workload(pod)
        if not pod.node:  # waiting: read the owners' annotations again (cached for a ttl)
            try:
                workload = self.owners.resolve(pod)
                self._workloads[pod.key] = workload
            except ApiFailure:
                pass
        hints, errors = read_hints([pod.annotations, *workload.layers])
        if record.error:
            errors = [record.error, *errors]
        return _Entry(record, workload, hints, tuple(errors))

    def _gang(self, key: str, waiting: list[_Entry], everyone: Any) -> Gang:
        members: dict[str, int] = dict(self.recovery.lost_nodes(key))
        member_gpus = 0
        for entry in everyone:
            if entry.workload.key != key:
                continue
            pod = entry.record.pod
            if entry.record.holds:
                members[pod.node] = members.get(pod.node, 0) + 1
                if not entry.record.deleting:
                    member_gpus += pod.gpus
            elif pod.phase == "Succeeded":
                member_gpus += pod.gpus
        first = waiting[0]
        errors = sorted({e for entry in waiting for e in entry.errors})
        return Gang(key=key, pending=tuple(e.record.pod for e in waiting), hints=first.hints,
                    hint_errors=tuple(errors), members=members, member_gpus=member_gpus,
                    recovering=self.recovery.recovering(key))

    def _sensitive(self, entries: Any) -> dict[str, int]:
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
        if len(self._workloads) <= 2 * len(ours) + 100 and self.cycles % 100:
            return
        alive = {r.pod.key for r in ours}
        self._workloads = {k: w for k, w in self._workloads.items() if k in alive}
        with self._lock:
            self._ready_since = {k: t for k, t in self._ready_since.items() if k in alive}
        self.limiter.keep_only(r.pod for r in ours)

    def _act(self, decision: Decision) -> None:
        now = self.clock()
        gang = decision.gang
        self.metrics.decisions.labels(decision.outcome.value).inc()
        if decision.outcome != Outcome.BOUND:
            kind = events.NORMAL if decision.outcome == Outcome.WAITING else events.WARNING
            reason = (events.WAITING_FOR_GANG if decision.outcome == Outcome.WAITING
                      else events.FAILED_SCHEDULING)
            for pod in gang.pending:
                self._event(pod, reason, decision.reason, kind)
            return
        started = min((self._ready_since.get(p.key, now) for p in gang.pending), default=now)
        bound = 0
        for binding in decision.bindings:
            pod = binding.pod
            self.state.assume(pod, binding.node)
            try:
                self.api.bind(pod, binding.node)
            except ApiFailure as failure:
                self.state.forget(pod)
                self.metrics.bind_failures.inc()
                log.warning("pod scheduler: binding %s to %s: %s", pod.key, binding.node,
                            failure)
                self._event(pod, events.FAILED_SCHEDULING,
                            f"binding to {binding.node} failed: {failure}", events.WARNING)
                self._mark(everything=True)
                continue
            bound += 1
            with self._lock:
                self._ready_since.pop(pod.key, None)
            message = f"Successfully assigned {pod.key} to {binding.node}; {decision.reason}"
            recovered = self.recovery.replaced(gang.key, self.clock())
            if recovered is not None:
                self.metrics.recovery_seconds.observe(recovered)
                message += f"; replaces a lost pod, recovered in {recovered:.2f} s"
            self._event(pod, events.SCHEDULED, message, events.NORMAL)
        if bound:
            self.metrics.placement_seconds.observe(max(0.0, self.clock() - started))

    def _event(self, pod: Pod, reason: str, message: str, kind: str) -> None:
        if not self.limiter.allow(pod, reason, message, self.clock()):
            return
        body = events.event_body(pod, reason, message, kind, self.wall(),
                                 self.settings.scheduler_name, self.settings.instance)

        def post() -> None:
            try:
                self.api.create_event(pod.namespace, body)
            except ApiFailure as failure:
                log.info("pod scheduler: event on %s not written: %s", pod.key, failure)

        if not self.stop_event.is_set():
            self._events.submit(post)

    def _evict_from_overdue_nodes(self, now: float) -> None:
        grace = self.config.not_ready_grace_seconds
        for node in self.recovery.overdue(now, grace):
            victims = [r for r in self.state.on_node(node)
                       if r.ours and r.holds and not r.deleting and r.pod.owner is not None]
            since = self.recovery.not_ready_since(node) or now
            for record in victims:
                pod = record.pod
                try:
                    self.api.delete_pod(pod)
                except ApiFailure as failure:
                    if failure.status != 404:
                        log.warning("pod scheduler: deleting %s from NotReady node %s: %s",
                                    pod.key, node, failure)
                    continue
                self._event(pod, events.NODE_NOT_READY,
                            f"node {node} NotReady for {now - since:.1f} s: pod deleted so its "
                            f"{pod.owner.kind if pod.owner else 'controller'} replaces it",
                            events.WARNING)
        alive = set(self.state.nodes) | {r.pod.node for r in self.state.ours() if r.holds}
        self.recovery.forget_nodes(alive)

    # ----- metrics ----------------------------------------------------------------------------
    def figures(self) -> ClusterFigures:
        waiting = [r.pod.gpus for r in self.state.pending()]
        return cluster_figures(self.state.snapshot(self.reserved()), waiting)

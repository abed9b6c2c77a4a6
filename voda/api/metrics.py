"""Prometheus metrics of the service, in a private registry (served at /metrics)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from voda.api.writes import StoreHealth
from voda.core.model import ActionKind, Cluster, JobStatus, Plan
from voda.core.placement.metrics import fragmentation_ratio
from voda.core.plan import moved_workers
from voda.core.quotas.usage import TypeUsage
from voda.engine.events import EventKind
from voda.engine.scheduler import JobReason, JobRecord

DURATION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                    5.0, 10.0)
# Scheduling loop periods: the step interval (0.5 s by default) and what comes on top.
PERIOD_BUCKETS = (0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0,
                  10.0, 30.0, 60.0, 120.0)


class ServiceMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        label = ["gpu_type"]
        self.created = Counter("voda_jobs_created", "Jobs submitted.", label, registry=r)
        self.deleted = Counter("voda_jobs_deleted", "Jobs deleted (canceled).", label, registry=r)
        self.completed = Counter("voda_jobs_completed", "Jobs completed.", label, registry=r)
        self.failed = Counter("voda_jobs_failed", "Jobs failed.", label, registry=r)
        self.reschedules = Counter("voda_reschedules", "Rescheduling decisions applied.", label,
                                   registry=r)
        self.migrated = Counter("voda_workers_migrated", "Workers moved to another node.", label,
                                registry=r)
        self.reschedule_seconds = Histogram(
            "voda_reschedule_duration_seconds",
            "Time to decide and apply one rescheduling.", buckets=DURATION_BUCKETS, registry=r)
        self.allocation_seconds = Histogram(
            "voda_allocation_duration_seconds",
            "Time the allocation algorithms took in one rescheduling.", buckets=DURATION_BUCKETS,
            registry=r)
        self.placement_seconds = Histogram(
            "voda_placement_duration_seconds",
            "Time the placer took in one rescheduling.", buckets=DURATION_BUCKETS, registry=r)
        self.ready = Gauge("voda_jobs_ready", "Jobs submitted, not yet seen by a decision.", label,
                           registry=r)
        self.waiting = Gauge("voda_jobs_waiting", "Jobs waiting for GPUs.", label, registry=r)
        self._reason_labels: set[tuple[str, str]] = set()
        self.running = Gauge("voda_jobs_running", "Jobs running.", label, registry=r)
        self.below_max = Gauge(
            "voda_jobs_waiting_by_reason",
            "Active jobs holding fewer GPUs than their max, by the reason the last decision "
            "gave (Queued, Preempted, Shrunk, DoesNotFit, ...).", ["gpu_type", "reason"],
            registry=r)
        self.gpus_total = Gauge("voda_gpus", "GPUs in the cluster.", label, registry=r)
        self.gpus_used = Gauge("voda_gpus_in_use", "GPUs held by running jobs.", label, registry=r)
        self.spanning = Gauge("voda_jobs_spanning_nodes", "Running jobs placed on several nodes.",
                              label, registry=r)
        self.domain_utilization = Gauge(
            "voda_domain_utilization_ratio", "Share of a network domain's GPUs in use.",
            ["gpu_type", "domain"], registry=r)
        self.store_up = Gauge("voda_store_up", "1 while the store takes writes, else 0.",
                              registry=r)
        self.store_unwritten = Gauge("voda_store_unwritten_batches",
                                     "Batches of changes waiting to be written.", registry=r)
        self.store_failures = Gauge("voda_store_write_failures",
                                    "Failed store writes since the service started.",
                                    registry=r)
        self.store_rejected = Gauge("voda_store_rejected_rows",
                                    "Rows the store refused for good and that were left out.",
                                    registry=r)
        self.lock_held = Gauge("voda_scheduler_lock_held_seconds",
                               "How long the scheduler lock has been held now (0: free).",
                               registry=r)
        self.refusals = Counter(
            "voda_reschedules_refused",
            "Rescheduling decisions refused for a GPU type ('*': every type); its plan in "
            "force stays.", label, registry=r)
        self.refused = Gauge(
            "voda_scheduling_refused",
            "1 while the last decision for a GPU type was refused, else 0.", label, registry=r)
        self.fragmentation = Gauge(
            "voda_fragmentation_ratio",
            "Share of free GPUs that waiting jobs cannot use because of how they are scattered.",
            label, registry=r)
        self.waiting_fitting = Gauge(
            "voda_jobs_waiting_fitting",
            "Waiting jobs whose minimum fits in the free GPUs of their type (GPUs idle while "
            "they wait).", label, registry=r)
        self.actions = Counter(
            "voda_job_actions", "Actions applied to jobs: start, scale-in, scale-out, migrate "
            "and halt (a preemption).", ["gpu_type", "action"], registry=r)
        self.last_step = Gauge(
            "voda_scheduler_last_step_timestamp_seconds",
            "When the scheduling loop last finished a step (Unix time).", registry=r)
        self.step_period = Histogram(
            "voda_scheduler_step_period_seconds",
            "Time between two scheduling steps that succeeded: the step interval, the step "
            "and how late the loop woke. An event waits up to this long for a decision.",
            buckets=PERIOD_BUCKETS, registry=r)
        self._last_step: float | None = None
        self.step_failures = Counter(
            "voda_scheduler_step_failures", "Scheduling steps that raised an error.", registry=r)
        self.events_failed = Counter(
            "voda_scheduler_events_failed",
            "Events from the backend (completions, epoch reports, node changes) that could "
            "not be applied and were dropped, by kind.", ["kind"], registry=r)
        for kind in EventKind:
            self.events_failed.labels(str(kind))
        # Store health beside voda_store_up and voda_store_write_failures: what was written.
        self.store_writes = Counter(
            "voda_store_writes", "Transactions of changes committed to the store.", registry=r)
        self.store_write_seconds = Histogram(
            "voda_store_write_duration_seconds", "Time to commit one group of changes.",
            buckets=DURATION_BUCKETS, registry=r)
        self.http_seconds = Histogram(
            "voda_http_request_duration_seconds",
            "Time to answer an HTTP request, by route (its path template) and status class.",
            ["method", "route", "status"], buckets=DURATION_BUCKETS, registry=r)

        # Team queues (docs/design/013-queues.md), per queue and GPU type.
        q = ["queue", "gpu_type"]
        self.queue_gauges = {
            "used": Gauge("voda_queue_gpus_used", "GPUs a queue's jobs hold.", q, registry=r),
            "guarantee": Gauge("voda_queue_gpus_guaranteed", "A queue's guaranteed GPUs.", q,
                               registry=r),
            "borrowed": Gauge("voda_queue_gpus_borrowed",
                              "GPUs a queue's jobs hold beyond its guarantee.", q, registry=r),
            "lent": Gauge("voda_queue_gpus_lent",
                          "GPUs of a queue's idle guarantee held by other queues' jobs.", q,
                          registry=r),
            "waiting": Gauge("voda_queue_jobs_waiting", "A queue's active jobs holding no GPU.",
                             q, registry=r),
        }
        self.queue_reclaimed = Counter(
            "voda_queue_gpus_reclaimed",
            "GPUs taken back from a queue's borrowing jobs for another queue's guarantee, by "
            "shrinking them or by preempting them.", [*q, "how"], registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def reclaimed(self, queue: str, gpu_type: str, shrinking: int, preemption: int) -> None:
        if shrinking:
            self.queue_reclaimed.labels(queue, gpu_type, "shrinking").inc(shrinking)
        if preemption:
            self.queue_reclaimed.labels(queue, gpu_type, "preemption").inc(preemption)

    def set_queues(self, usage: Mapping[str, Mapping[str, TypeUsage]]) -> None:
        """The queues' gauges, as of now (a deleted queue's are gone)."""
        for gauge in self.queue_gauges.values():
            gauge.clear()
        for queue, by_type in usage.items():
            for gpu_type, u in by_type.items():
                for key, value in (("used", u.used), ("guarantee", u.guarantee),
                                   ("borrowed", u.borrowed), ("lent", u.lent),
                                   ("waiting", u.waiting)):
                    self.queue_gauges[key].labels(queue, gpu_type).set(value)
                for how in ("shrinking", "preemption"):  # a series from 0, before any reclaim
                    self.queue_reclaimed.labels(queue, gpu_type, how)

    # ----- events ----------------------------------------------------------------------
    def job_created(self, gpu_type: str) -> None:
        self.created.labels(gpu_type).inc()

    def job_finished(self, gpu_type: str, status: JobStatus) -> None:
        counter = {JobStatus.COMPLETED: self.completed, JobStatus.FAILED: self.failed,
                   JobStatus.CANCELED: self.deleted}.get(status)
        if counter is not None:
            counter.labels(gpu_type).inc()

    def reasons(self, reasons: Mapping[str, JobReason], active: Mapping[str, JobRecord]) -> None:
        """Set the jobs below max by reason (a reason no job gives any more reads 0)."""
        counts: dict[tuple[str, str], int] = {}
        for name, reason in reasons.items():
            record = active.get(name)
            if record is not None:
                key = (record.gpu_type, str(reason.code))
                counts[key] = counts.get(key, 0) + 1
        for labels in self._reason_labels - set(counts):
            self.below_max.labels(*labels).set(0)
        for labels, count in counts.items():
            self.below_max.labels(*labels).set(count)
        self._reason_labels |= set(counts)

    def decision_refused(self, gpu_type: str) -> None:
        self.refusals.labels(gpu_type).inc()
        self.refused.labels(gpu_type).set(1)

    def decision_recovered(self, gpu_type: str) -> None:
        self.refused.labels(gpu_type).set(0)

    def plan_applied(self, plan: Plan, gpu_types: Mapping[str, str], cluster: Cluster,
                     seconds: float, decide_seconds: float, placement_seconds: float) -> None:
        for gpu_type in cluster.gpu_types():
            if gpu_type not in plan.errors:
                self.reschedules.labels(gpu_type).inc()
        for action in plan.actions:
            gpu_type = gpu_types.get(action.job, "")
            self.actions.labels(gpu_type, str(action.kind)).inc()
            moved = moved_workers(action.old, action.new)
            if moved:
                self.migrated.labels(gpu_type).inc(moved)
        self.reschedule_seconds.observe(seconds)
        self.placement_seconds.observe(placement_seconds)
        self.allocation_seconds.observe(max(0.0, decide_seconds - placement_seconds))

    def set_store(self, health: StoreHealth, unwritten: int, lock_held: float) -> None:
        self.store_up.set(1 if health.ok else 0)
        self.store_unwritten.set(unwritten)
        self.store_failures.set(health.failures_total)
        self.store_rejected.set(health.rejected_rows)
        self.lock_held.set(lock_held)

    def store_written(self, seconds: float) -> None:
        """A group of changes was committed (failures: voda_store_write_failures)."""
        self.store_write_seconds.observe(seconds)
        self.store_writes.inc()

    def event_failed(self, kind: str) -> None:
        self.events_failed.labels(kind).inc()

    def step(self, now: float, ok: bool) -> None:
        if ok:
            if self._last_step is not None:
                self.step_period.observe(max(now - self._last_step, 0.0))
            self._last_step = now
            self.last_step.set(now)
        else:
            self.step_failures.inc()

    def request(self, method: str, route: str, status: int, seconds: float) -> None:
        self.http_seconds.labels(method, route, f"{status // 100}xx").observe(seconds)

    def _zero_counters(self, gpu_types: Sequence[str]) -> None:
        """Every counter series exists from the start, at 0, so rate() and increase() see
        the first event."""
        for gpu_type in gpu_types:
            for counter in (self.created, self.deleted, self.completed, self.failed,
                            self.reschedules, self.migrated, self.refusals):
                counter.labels(gpu_type)
            for kind in ActionKind:
                self.actions.labels(gpu_type, str(kind))

    # ----- state -----------------------------------------------------------------------
    def set_state(self, cluster: Cluster, jobs: Sequence[JobRecord]) -> None:
        """Refresh the gauges from the active jobs and the cluster."""
        types = cluster.gpu_types()
        self._zero_counters(types)
        counts = {t: {"ready": 0, "waiting": 0, "running": 0, "spanning": 0} for t in types}
        used_by_node: dict[str, int] = {}
        for job in jobs:
            c = counts.setdefault(job.gpu_type, {"ready": 0, "waiting": 0, "running": 0,
                                                 "spanning": 0})
            if job.status is JobStatus.SUBMITTED:
                c["ready"] += 1
            elif job.status is JobStatus.WAITING:
                c["waiting"] += 1
            elif job.status is JobStatus.RUNNING:
                c["running"] += 1
                if len(job.placement) > 1:
                    c["spanning"] += 1
            for node, count in job.placement:
                used_by_node[node] = used_by_node.get(node, 0) + count
        for gpu_type, c in counts.items():
            self.ready.labels(gpu_type).set(c["ready"])
            self.waiting.labels(gpu_type).set(c["waiting"])
            self.running.labels(gpu_type).set(c["running"])
            self.spanning.labels(gpu_type).set(c["spanning"])
        for gpu_type in types:
            of_type = cluster.of_type(gpu_type)
            nodes = of_type.nodes
            total = sum(n.gpus for n in nodes)
            used = sum(min(n.gpus, used_by_node.get(n.name, 0)) for n in nodes)
            self.gpus_total.labels(gpu_type).set(total)
            self.refused.labels(gpu_type)  # present (0) before any refusal
            self.gpus_used.labels(gpu_type).set(used)
            self.fragmentation.labels(gpu_type).set(
                _fragmentation_of(of_type, [j for j in jobs if j.gpu_type == gpu_type]))
            free = total - used
            self.waiting_fitting.labels(gpu_type).set(sum(
                1 for j in jobs if j.gpu_type == gpu_type and j.status is JobStatus.WAITING
                and j.min_workers <= free))
            domains: dict[str, list[int]] = {}
            for n in nodes:
                d = domains.setdefault(n.leaf_name, [0, 0])
                d[0] += min(n.gpus, used_by_node.get(n.name, 0))
                d[1] += n.gpus
            for domain, (d_used, d_total) in domains.items():
                self.domain_utilization.labels(gpu_type, domain).set(
                    d_used / d_total if d_total else 0.0)


def _fragmentation_of(cluster: Cluster, jobs: Sequence[JobRecord]) -> float:
    """Free GPUs that no waiting job can use because of how they are scattered, over free GPUs."""
    placement = {j.name: j.placement for j in jobs if j.placement}
    waiting = [j for j in jobs if j.current_workers == 0]  # only min_workers and gpu_type read
    return float(fragmentation_ratio(cluster, placement, waiting))  # type: ignore[arg-type]

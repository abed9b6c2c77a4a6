"""The Kubernetes backend: the engine's actions become Kubeflow objects.

The engine's calls (start, scale, halt, delete) only change the *desired* state of
a job, under a lock, and return at once; a reconciler thread drives the cluster
toward it, so no API error or outage ever reaches the engine and nothing accepted
is lost: what could not be sent is sent when the server answers again.

Per job, the reconciler (`_reconcile`):
1. no desired state: delete the object (its pods go with it);
2. an object of another run (a restart): delete it, wait until it is gone;
3. no object: create it (an AlreadyExists is an object the informer has not shown
   yet, never a second copy);
   With a report URL configured, the job's report Secret is made first (and owned by
   the object once it exists); a Secret left by an earlier run is deleted first.
4. a size or plan that differs: one merge patch of the replicas and the plan
   annotation;
5. each worker pod: gated -> pin it where the plan says and ungate it, once its node
   has room (the cluster view); on another node -> delete it (the operator
   recreates it gated); pinned but unschedulable too long -> the node is excluded for
   the job (`job_nodes`; for `refused_node_seconds` or until the node changes) and the
   engine plans again (PLACEMENT_REFUSED); the pod is
   never deleted to be pinned to the same node again; a Failed MPIJob worker -> delete
   it (mpi-operator re-creates none it still has).

What the engine may place counts what kube-scheduler counts (voda.backends.kubernetes.fit):
`job_nodes` confines each job to the nodes its worker template may use (taints,
nodeSelector, required affinity, requests an empty node holds), less those that refused
it; `nodes()` offers on each node no more GPUs than the widest worker that may use it
fits in the CPU, memory and pods that pods other than Voda's elastic jobs' leave.

The kinds the cluster serves are discovered at start (`served_kinds`): a job of a
kind it lacks is refused at submission. An object the server returns without the
placement gate on its worker template (a CRD whose schema prunes schedulingGates)
fails its job with the reason, instead of workers placed by kube-scheduler and
deleted by Voda in a loop.

Completions and failures come from the objects' conditions. An MPIJob failed by
an evicted worker is recreated (it resumes from its checkpoint), up to
`max_evictions` times, instead of being reported failed.
"""

from __future__ import annotations

import copy
import gc
import itertools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from voda.backends.kubernetes.adapters import (
    KUEUE_QUEUE,
    JobState,
    MPIJobAdapter,
    Phase,
    PyTorchJobAdapter,
    Sizes,
    adapter_for,
    served_kinds,
)
from voda.backends.kubernetes.api import (
    EVENTS,
    MERGE_PATCH,
    PODS,
    SECRETS,
    ApiError,
    Fence,
    KubeApi,
    NotLeader,
    Obj,
)
from voda.backends.kubernetes.cluster_view import ClusterView, NodeInfo, watch_cluster
from voda.backends.kubernetes.fit import JobFit
from voda.backends.kubernetes.informer import Informer, predates
from voda.backends.kubernetes.manifests import (
    RUN_ANNOTATION,
    kubeflow_document,
    object_name,
    owner_reference,
    render_job,
    report_secret,
    report_secret_name,
    secret_token,
)
from voda.backends.kubernetes.pinning import (
    Plan,
    WorkerAction,
    assign,
    decide_worker,
    decode,
    encode,
    gated,
    pin_patch,
    pinned_node,
    placement_of,
)
from voda.backends.kubernetes.reasons import PendingReason, condition_patch
from voda.backends.kubernetes.refusals import Backoff, Refused, job_event, permanent
from voda.backends.kubernetes.settings import (
    GATE,
    JOB_LABEL,
    MANAGED_LABEL,
    MANAGER,
    PLAN_ANNOTATION,
    KubernetesSettings,
)
from voda.backends.kubernetes.slim import slim
from voda.backends.kubernetes.suspension import suspension_message
from voda.core.model import Job, JobPlacement, Node
from voda.engine.events import Event, EventKind
from voda.spec import JobSpec, SpecError
from voda.spec.errors import FieldError

log = logging.getLogger(__name__)
Adapter = MPIJobAdapter | PyTorchJobAdapter
_runs = itertools.count()
# Tries of the reason's condition against a fresh read after a conflict, per reconciliation.
CONDITION_ATTEMPTS = 3


def is_elastic_owner(owner: str) -> bool:
    """Pods labelled voda.io/job belong to Voda's elastic jobs; claims of other
    schedulers sharing the cluster view use owner names with a '/'."""
    return "/" not in owner


def new_run() -> str:
    return f"{int(time.time() * 1000):x}{next(_runs) % 1000:03d}"


@dataclass
class Desired:
    job: str
    kind: str
    sizes: Sizes
    plan: Plan
    run: str
    document: Obj | None = None  # None for an adopted job: its object is the template
    generation: int = 0
    changed_at: float = field(default_factory=time.perf_counter)

    @property
    def object_name(self) -> str:
        return object_name(self.job)


class KubernetesBackend:
    """Backend, SupportsDelete, SupportsAdoption and SupportsReasons on a Kubernetes
    cluster."""

    name = "kubernetes"

    def __init__(self, api: KubeApi, settings: KubernetesSettings | None = None,
                 view: ClusterView | None = None, resync_seconds: float = 5.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.api = api
        self.settings = settings or KubernetesSettings()
        self.view = view or ClusterView(self.settings)
        self.clock = clock
        self.resync_seconds = resync_seconds
        self.adapters: dict[str, Adapter] = {
            k: adapter_for(k, self.settings.gpu_resource, self.settings.horovod_blacklist_cooldown)
            for k in ("MPIJob", "PyTorchJob")}
        self.unserved: dict[str, str] = {}  # kind -> why the cluster cannot run it
        self.lock = threading.RLock()
        self.desired: dict[str, Desired] = {}
        self.specs: dict[str, Obj] = {}  # job -> submitted document (set by the service)
        # job -> its report token (set by the service), when pods get a report channel
        self.report_tokens: dict[str, str] | None = {} if self.settings.report_url else None
        self.report_checked: dict[str, tuple[str, float]] = {}  # job -> (object uid, when)
        self.objects: dict[str, Obj] = {}  # job -> its object, as last seen
        self.pods: dict[str, dict[str, Obj]] = {}  # job -> pod name -> pod
        self.evictions: dict[str, int] = {}
        self.suspensions: dict[str, str] = {}  # job -> why its object is suspended (Kueue)
        self.reported: set[tuple[str, str]] = set()  # (job, run) whose end was reported
        self.unschedulable_since: dict[str, float] = {}  # pod uid -> when first seen so
        # pod uid -> the resourceVersion we acted on: until the informer shows a newer
        # version, the cached pod does not show our pin or delete yet
        self.acted: dict[str, str] = {}
        # job -> pod uid -> node of each pin written, until the pod is seen gone or ended:
        # kube-scheduler may bind it before any watch shows it, so its GPUs stay claimed
        # when the plan moves on (the pod scheduler shares the view)
        self.pinned: dict[str, dict[str, str]] = {}
        self.stats: dict[str, int] = {}
        self.fit = JobFit(self.settings.gpu_resource)
        # job -> node that refused its workers -> (until when, the node as it was then)
        self.excluded: dict[str, dict[str, tuple[float, NodeInfo | None]]] = {}
        # Jobs whose reconciliation failed transiently wait their turn (per job).
        self.backoff = Backoff(self.settings.backoff_seconds, self.settings.max_backoff_seconds)
        self._events: list[Event] = []
        # Reasons on the job objects (voda.backends.kubernetes.reasons): the change not yet
        # written, per job, and the object uid and code of the condition last written.
        self.reasons: dict[str, PendingReason] = {}
        self.reason_shown: dict[str, tuple[str, str | None]] = {}
        # How a reason's sentence names other jobs: the engine says uids; the service sets
        # this to say the names people gave them (voda.api.job_labels), as it does in
        # its own answers.
        self.said: Callable[[str], str] = str
        self._nodes: dict[str, Node] = {}
        self._dirty: set[str] = set()
        self._waiting: set[str] = set()  # jobs with a gated worker waiting for room
        self._wake = threading.Event()
        self._stop = threading.Event()
        # Nothing is deleted before the jobs running now are adopted (running()) or the
        # engine acts: until then an object without desired state is not yet known.
        self._adopted = threading.Event()
        self._in_flight: set[str] = set()
        self._lost_lead = False
        self._thread: threading.Thread | None = None
        # When the reconciler's loop last went round (time.monotonic()): /livez fails when
        # it is older than kubernetes.liveness_seconds (a wedged reconciler).
        self.heartbeat = time.monotonic()
        self.informers: list[Informer] = []
        self.view.listeners.append(self._on_view_change)

    # ----- watching -------------------------------------------------------------------------
    def watch(self, timeout: float = 60.0) -> None:
        """Start the informers and the reconciler; return once every informer listed."""
        ns, seconds = self.settings.namespace, self.settings.watch_seconds
        managed = f"{MANAGED_LABEL}={MANAGER}"
        self.unserved = {k: why for k, why in served_kinds(self.api).items() if why}
        for kind, why in self.unserved.items():
            log.warning("%s jobs are refused: %s", kind, why)
        self.informers = [
            *watch_cluster(self.api, self.view, seconds,
                           idle_seconds=self.settings.watch_idle_seconds),
            # its own workers, ended ones included (an evicted worker fails its run)
            Informer(self.api, PODS, self._on_pod, ns, JOB_LABEL, watch_seconds=seconds,
                     idle_seconds=self.settings.watch_idle_seconds, transform=slim),
            *(Informer(self.api, a.kind, self._job_handler(kind), ns, managed,
                       watch_seconds=seconds, idle_seconds=self.settings.watch_idle_seconds,
                       transform=slim)
              for kind, a in self.adapters.items() if kind not in self.unserved),
        ]
        for informer in self.informers:
            informer.start()
        for informer in self.informers:
            if not informer.synced.wait(timeout):
                raise TimeoutError(f"listing {informer.kind.plural} took more than {timeout} s")
        self._thread = threading.Thread(target=self._run, name="k8s-reconciler", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        for informer in self.informers:
            informer.stop()
        if self._thread is not None:
            self._thread.join(10)

    def _job_handler(self, kind: str) -> Callable[[str, Obj, Obj | None], None]:
        def handle(event: str, obj: Obj, old: Obj | None) -> None:
            job = (obj["metadata"].get("labels") or {}).get(JOB_LABEL)
            if not job:
                return
            with self.lock:
                if event == "DELETED":
                    self.acted.pop(obj["metadata"]["uid"], None)
                    if self.objects.get(job, {}).get("metadata", {}).get("uid") == obj[
                            "metadata"]["uid"]:
                        del self.objects[job]
                else:
                    if not predates(obj, self.objects.get(job)):
                        self.objects[job] = obj
                    self._observe(job, kind, obj)
            self._mark(job)
        return handle

    def _on_pod(self, event: str, pod: Obj, old: Obj | None) -> None:
        """Worker pods of Voda's jobs (in its namespace), from the backend's own pod watch."""
        job = (pod["metadata"].get("labels") or {}).get(JOB_LABEL)
        if not job or pod["metadata"].get("namespace") != self.settings.namespace:
            return
        with self.lock:
            pods = self.pods.setdefault(job, {})
            uid = pod["metadata"].get("uid", "")
            if event == "DELETED":
                pods.pop(pod["metadata"]["name"], None)
                self.unschedulable_since.pop(uid, None)
                self.acted.pop(uid, None)
                self._unpin(job, uid)
                if not pods:
                    del self.pods[job]
            else:
                pods[pod["metadata"]["name"]] = pod
                if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                    self._unpin(job, uid)
        self._mark(job)

    def _on_view_change(self) -> None:
        with self.lock:
            waiting = set(self._waiting)
        for job in waiting:
            self._mark(job)

    def _act(self, job: str) -> None:
        """The engine acted on `job`: adoption, if any, is over."""
        self._adopted.set()
        self._mark(job)

    def _mark(self, job: str) -> None:
        with self.lock:
            self._dirty.add(job)
        self._wake.set()

    # ----- the engine's calls -------------------------------------------------------------------
    def check_spec(self, spec: JobSpec) -> None:
        """Refuse at submission a job this backend could never create (SpecError)."""
        from voda.backends.kubernetes.manifests import check_document

        kind = str(kubeflow_document(spec.document).get("kind"))
        if kind in self.unserved:
            raise SpecError([FieldError("kind", self.unserved[kind])])
        try:
            check_document(spec.document, spec.min_workers, spec.max_workers, self.settings,
                           job=spec.name)
        except SpecError as exc:
            if spec.kind != "VodaJob":
                raise
            raise SpecError([FieldError("name" if e.field == "metadata.name" else e.field,
                                        e.reason) for e in exc.errors], exc.status) from None

    def start(self, job: Job, placement: JobPlacement) -> None:
        with self.lock:
            document = self.specs.get(job.name)
            old = self.desired.get(job.name)
            if document is None and old is not None:
                document = old.document
            if document is None and job.name in self.objects:
                document = self._template(self.objects[job.name])
            if document is None:
                log.error("job %s: no document to create it from; reporting it failed",
                          job.name)
                self._events.append(Event(EventKind.JOB_FAILED, self.clock(), job=job.name,
                                          data={"reason": "no job document to create"}))
                return
            kind = str(kubeflow_document(document).get("kind"))
            if kind in self.unserved:
                self._events.append(Event(EventKind.JOB_FAILED, self.clock(), job=job.name,
                                          data={"reason": self.unserved[kind]}))
                return
            plan = assign({}, placement)
            self.desired[job.name] = Desired(job.name, kind, self._sizes(job, plan), plan,
                                             new_run(), document)
            self._count("starts")
        self._act(job.name)

    def scale(self, job: Job, placement: JobPlacement) -> None:
        with self.lock:
            d = self.desired.get(job.name)
            if d is None:
                self.start(job, placement)
                return
            d.plan = assign(d.plan, placement)
            d.sizes = self._sizes(job, d.plan)
            d.generation += 1
            d.changed_at = time.perf_counter()
            self._count("scales")
        self._act(job.name)

    def halt(self, job: Job) -> None:
        self._drop(job.name)

    def delete(self, job: str) -> None:
        self._drop(job)
        with self.lock:
            self.specs.pop(job, None)
            self.excluded.pop(job, None)
            self.fit.forget(job)
            self.reasons.pop(job, None)
            self.reason_shown.pop(job, None)
            if self.report_tokens is not None:
                self.report_tokens.pop(job, None)

    def note_reason(self, job: str, code: str | None, message: str, now: float) -> None:
        """The code of the job's reason changed: the reconciler writes it on the job's
        object (an Event and the VodaAtMax condition), off the engine's thread. A job with
        no object (queued, never started) has nothing to write it on."""
        with self.lock:
            if job not in self.desired and job not in self.objects:
                self.reasons.pop(job, None)
                return
            self.reasons[job] = PendingReason(code, self.said(message))
        self._mark(job)

    def _drop(self, job: str) -> None:
        with self.lock:
            self.desired.pop(job, None)
            self.suspensions.pop(job, None)
            self._count("halts")
        self.view.set_claims(job, self._worker_claims(job))
        self._act(job)

    def rescale_delay(self, job: str) -> float:
        """Seconds a change of the job's workers costs beyond its restart: an MPIJob's new
        hosts reach Horovod only with the kubelet's update of its hostfile ConfigMap; a
        PyTorchJob's workers meet at torchrun's rendezvous, with no such wait."""
        with self.lock:
            document = self.specs.get(job)
            d = self.desired.get(job)
            obj = self.objects.get(job)
        if d is not None:
            kind = d.kind
        elif document is not None:
            kind = str(document.get("kind") or "")  # a compact job is a PyTorchJob
        else:
            kind = str((obj or {}).get("kind", ""))
        return self.settings.mpijob_rescale_delay_seconds if kind == "MPIJob" else 0.0

    @staticmethod
    def _sizes(job: Job, plan: Plan) -> Sizes:
        return Sizes(len(plan), job.min_workers, job.max_workers)

    def nodes(self) -> list[Node]:
        nodes = self._capacity()
        with self.lock:
            self._nodes = {n.name: n for n in nodes}
        return nodes

    def _capacity(self) -> list[Node]:
        with self.lock:
            jobs = sorted(set(self.desired) | set(self.specs))
        templates = {t for t in (self._template_of(j) for j in jobs) if t is not None}
        shapes = self.fit.shapes(templates, self.view.nodes()) if templates else None
        return self.view.capacity(is_elastic_owner, shapes)

    def _template_of(self, job: str) -> int | None:
        def source() -> Obj | None:
            with self.lock:
                d = self.desired.get(job)
                return self.specs.get(job) or (d.document if d else None) or self.objects.get(
                    job)
        return self.fit.template(job, source)

    def job_nodes(self, names: list[str]) -> dict[str, frozenset[str]]:
        """The nodes each job may use, where that is not every usable node: those its
        worker template may use, less those that refused its workers."""
        usable = [i for i in self.view.nodes() if i.usable]
        everywhere = frozenset(i.name for i in usable)
        out = {}
        per_template: dict[int, frozenset[str]] = {}
        for name in names:
            template = self._template_of(name)
            if template is None:
                allowed = everywhere
            else:
                if template not in per_template:
                    per_template[template] = self.fit.allowed(template, usable)
                allowed = per_template[template]
            refused = self._refusing(name)
            if refused:
                allowed = allowed - refused
            if len(allowed) < len(usable):
                out[name] = allowed
        return out

    def events(self) -> list[Event]:
        now = self.clock()
        current = {n.name: n for n in self._capacity()}
        with self.lock:
            out, self._events = self._events, []
            for name in sorted(set(self._nodes) - set(current)):
                out.append(Event(EventKind.NODE_REMOVED, now, node=self._nodes[name]))
                self._leave_node(name)
            for name in sorted(current):
                if self._nodes.get(name) != current[name]:
                    out.append(Event(EventKind.NODE_ADDED, now, node=current[name]))
            self._nodes = current
        return out

    def _leave_node(self, node: str) -> None:
        """Mirror of the engine's own bookkeeping when a node goes: workers there are
        gone from the job (a job left with none is halted)."""
        for job, d in list(self.desired.items()):
            if node not in d.plan.values():
                continue
            kept = tuple((n, c) for n, c in placement_of(d.plan) if n != node)
            if not kept:
                self.desired.pop(job)
                self.view.release(job)
            else:
                d.plan = assign(d.plan, kept)
                d.sizes = Sizes(len(d.plan), d.sizes.min_workers, d.sizes.max_workers)
                d.generation += 1
                d.changed_at = time.perf_counter()
            self._dirty.add(job)
        self._wake.set()

    # ----- adoption ----------------------------------------------------------------------------
    def running(self) -> dict[str, JobPlacement]:
        """Jobs whose objects run now, as their plans place them; they become desired
        state as they are (a restarted or new leader adopts them, restarting nothing)."""
        out: dict[str, JobPlacement] = {}
        with self.lock:
            for job, obj in self.objects.items():
                adapter = self._adapter(obj)
                if adapter is None or obj["metadata"].get("deletionTimestamp"):
                    continue
                if adapter.observe(obj).phase not in (Phase.PENDING, Phase.RUNNING):
                    continue
                replicas = adapter.replicas(obj)
                annotations = obj["metadata"].get("annotations") or {}
                plan = {i: n for i, n in decode(annotations.get(PLAN_ANNOTATION)).items()
                        if i < replicas}
                if len(plan) != replicas:
                    continue  # a plan we cannot read: the job waits and starts afresh
                if job not in self.desired:
                    sizes = self._adopted_sizes(adapter, obj, replicas)
                    self.desired[job] = Desired(job, adapter.kind_name, sizes, plan,
                                                str(annotations.get(RUN_ANNOTATION, "")))
                out[job] = placement_of(plan)
        self._adopted.set()
        for job in out:
            self._mark(job)
        return out

    @staticmethod
    def _adopted_sizes(adapter: Adapter, obj: Obj, replicas: int) -> Sizes:
        annotations = obj["metadata"].get("annotations") or {}
        elastic = (obj.get("spec") or {}).get("elasticPolicy") or {}
        low = int(annotations.get("voda.io/min-workers", elastic.get("minReplicas", replicas)))
        high = int(annotations.get("voda.io/max-workers", elastic.get("maxReplicas", replicas)))
        return Sizes(replicas, min(low, replicas), max(high, replicas))

    def _adapter(self, obj: Obj) -> Adapter | None:
        return self.adapters.get(str(obj.get("kind")))

    @staticmethod
    def _template(obj: Obj) -> Obj:
        out = copy.deepcopy(obj)
        out.pop("status", None)
        return out

    # ----- conditions -> events ------------------------------------------------------------------
    def _observe(self, job: str, kind: str, obj: Obj) -> None:
        """Completions and failures of the desired run (under the lock)."""
        d = self.desired.get(job)
        run = (obj["metadata"].get("annotations") or {}).get(RUN_ANNOTATION)
        if d is None or d.run != run or (job, str(run)) in self.reported:
            return
        state = self.adapters[kind].observe(obj)
        self._note_suspension(job, d, state, obj)
        now = self.clock()
        if state.phase is Phase.SUCCEEDED:
            self._end(job, str(run), Event(EventKind.JOB_COMPLETED, now, job=job))
        elif state.phase is Phase.EVICTED:
            self.evictions[job] = self.evictions.get(job, 0) + 1
            if self.evictions[job] > self.settings.max_evictions:
                self._end(job, str(run), Event(EventKind.JOB_FAILED, now, job=job, data={
                    "reason": f"workers evicted {self.evictions[job]} times: {state.message}"}))
            else:
                log.warning("job %s: a worker was evicted (%s); recreating it", job,
                            state.message)
                self.reported.add((job, str(run)))
                d.run = new_run()
                d.generation += 1
                self._count("eviction_restarts")
        elif state.phase is Phase.FAILED:
            self._end(job, str(run), Event(EventKind.JOB_FAILED, now, job=job,
                                           data={"reason": state.message}))

    def _note_suspension(self, job: str, d: Desired, state: JobState, obj: Obj) -> None:
        was = self.suspensions.get(job)
        if not state.suspended_by:
            self.suspensions.pop(job, None)
            if was is not None:
                log.info("job %s: resumed (admitted)", job)
            return
        labelled = KUEUE_QUEUE in (obj["metadata"].get("labels") or {})
        self.suspensions[job] = suspension_message(d.kind, self.settings.namespace,
                                                   state.suspended_by, len(d.plan), labelled)
        if was is None:
            log.warning("job %s: %s", job, self.suspensions[job])

    def suspended(self) -> dict[str, str]:
        """Jobs whose objects something outside Voda holds suspended (Kueue), with why."""
        with self.lock:
            return {job: why for job, why in self.suspensions.items() if job in self.desired}

    def _end(self, job: str, run: str, event: Event) -> None:
        self.reported.add((job, run))
        self.desired.pop(job, None)
        self.suspensions.pop(job, None)
        self.specs.pop(job, None)  # an ended job is never created again
        self.excluded.pop(job, None)
        self.fit.forget(job)
        self.reasons.pop(job, None)  # an ended job's object keeps the operator's last word
        if self.report_tokens is not None:
            self.report_tokens.pop(job, None)
        self._events.append(event)
        self.view.set_claims(job, self._worker_claims(job))

    # ----- the reconciler -------------------------------------------------------------------------
    def _run(self) -> None:
        """Reconcile dirty jobs on a pool of workers, one job in one worker at a time."""
        while not self._adopted.wait(0.1):
            self.heartbeat = time.monotonic()
            if self._stop.is_set():
                return
        last_resync = time.monotonic()
        with ThreadPoolExecutor(self.settings.workers, "k8s-reconcile") as pool:
            wait = self.resync_seconds
            while not self._stop.is_set() and not self._lost_lead:
                self.heartbeat = time.monotonic()
                self._wake.wait(wait)
                self._wake.clear()
                now = time.monotonic()
                if now - last_resync >= self.resync_seconds:
                    last_resync = now
                    with self.lock:
                        self._dirty |= set(self.desired) | set(self.objects)
                with self.lock:
                    waiting = self._dirty - self._in_flight
                    jobs = sorted(j for j in waiting if self.backoff.due(j, now))
                    self._dirty -= set(jobs)
                    self._in_flight |= set(jobs)
                    later = self.backoff.next_due(waiting - set(jobs), now)
                wait = self.resync_seconds - (time.monotonic() - last_resync)
                if later is not None:
                    wait = min(wait, later)
                wait = max(wait, 0.001)
                for job in jobs:
                    pool.submit(self._reconcile_safely, job)

    def _reconcile_safely(self, job: str) -> None:
        """One job's reconciliation; whatever goes wrong, the job is tried again later."""
        retry = False
        try:
            if not self._stop.is_set() and not self._lost_lead:
                self._reconcile(job)
        except NotLeader:
            log.error("not the leader any more: the reconciler stops")
            self._lost_lead = True
        except SpecError as exc:  # a document that can never be created
            log.error("job %s: %s", job, exc)
            self._fail(job, str(exc))
        except Refused as exc:
            self._count("refusals")
            log.error("job %s: %s", job, exc)
            self._fail(job, str(exc))
            self._post_refusal(exc)
        except ApiError as exc:
            self._count("api_errors")
            retry = True
            log.warning("job %s: %s; retrying", job, exc)
        except Exception:
            self._count("errors")
            log.exception("job %s: reconciling failed; retrying", job)
            retry = True
        with self.lock:
            self._in_flight.discard(job)
            if retry:
                self.backoff.failed(job, time.monotonic())
                self._dirty.add(job)
            else:
                self.backoff.succeeded(job)
        self._wake.set()

    def _fail(self, job: str, reason: str) -> None:
        with self.lock:
            d = self.desired.get(job)
            if d is not None:
                self._end(job, d.run, Event(EventKind.JOB_FAILED, self.clock(), job=job,
                                            data={"reason": reason}))

    def _post_refusal(self, refused: Refused) -> None:
        """A Warning Event on the refused job object, for `kubectl describe`; best effort
        (the job's failure reason already says it)."""
        if refused.obj is None:
            return
        body = job_event(refused.obj, "FailedCreate" if refused.obj["metadata"].get(
            "uid") is None else "FailedUpdate", str(refused), self.clock())
        try:
            self.api.create(EVENTS, self.settings.namespace, body)
        except ApiError as exc:
            log.warning("could not post an Event on %s: %s", refused.obj["metadata"]["name"],
                        exc)

    def _reconcile(self, job: str) -> None:
        with self.lock:
            d = copy.copy(self.desired.get(job))
            obj = self.objects.get(job)
            pods = list(self.pods.get(job, {}).values())
        # 1. not wanted: delete
        if d is None:
            self._waiting.discard(job)
            self.view.set_claims(job, self._worker_claims(job))
            if obj is not None:
                self._show_reason(job, obj, None)  # preempted: the Event, no condition
            if obj is not None and not obj["metadata"].get("deletionTimestamp"):
                adapter = self._adapter(obj)
                if adapter is not None and adapter.observe(obj).phase in (Phase.PENDING,
                                                                          Phase.RUNNING):
                    self._delete_object(adapter, obj)
            if self.report_checked.pop(job, None) is not None:
                # Owned by the object, the collector deletes it too; not yet owned, only this
                self.api.delete(SECRETS, self.settings.namespace, report_secret_name(job),
                                propagation=None)
            return
        adapter = self.adapters[d.kind]
        planned, workers = _counts(d.plan), self._worker_claims(job)
        self.view.set_claims(job, {node: max(planned.get(node, 0), workers.get(node, 0))
                                   for node in planned.keys() | workers.keys()})
        # 2. another run: delete it first
        run = (obj or {}).get("metadata", {}).get("annotations", {}).get(RUN_ANNOTATION)
        if obj is not None and run != d.run:
            if not obj["metadata"].get("deletionTimestamp"):
                self._delete_object(adapter, obj)
            return
        # 3. create
        if obj is None:
            self._create(d, adapter)
            return
        if adapter.observe(obj).phase not in (Phase.PENDING, Phase.RUNNING):
            return
        self._check_report_secret(d, adapter, obj)
        # 4. size and plan
        self._resize(d, adapter, obj)
        # 5. workers
        self._pin_workers(d, adapter, pods)
        # 6. a change of its reason (best effort: never fails the reconciliation)
        self._show_reason(job, obj, adapter)

    # ----- reasons on the job objects (voda.backends.kubernetes.reasons) -----------------------
    def _show_reason(self, job: str, obj: Obj, adapter: Adapter | None) -> None:
        """Write the job's latest change of reason on its object: the Event, then (with an
        adapter: the object stays) the condition. Failures are logged, never raised."""
        with self.lock:
            pending = self.reasons.pop(job, None)
            shown = self.reason_shown.get(job)
        if pending is None:
            return
        meta = obj["metadata"]
        uid = meta.get("uid", "")
        if pending.code is None and (shown is None or shown[0] != uid or shown[1] is None):
            return  # nothing said on this object: holding its max needs no word
        now = self.clock()
        if not pending.evented:
            pending.evented = True
            body = job_event(obj, pending.event_reason, pending.message, now,
                             pending.event_type)
            try:
                self.api.create(EVENTS, self.settings.namespace, body)
                self._count("reason_events")
            except ApiError as exc:
                self._count("reason_failures")
                log.warning("job %s: could not post its %s Event: %s", job,
                            pending.event_reason, exc)
        if adapter is None:
            return
        try:
            written = self._patch_condition(adapter, obj, pending, now)
        except ApiError as exc:
            self._count("reason_failures")
            log.warning("job %s: could not set its condition %s: %s", job,
                        pending.event_reason, exc)
            return
        if not written:  # the object kept moving on: again, once the informer shows it
            with self.lock:
                self.reasons.setdefault(job, pending)
            return
        self._count("reason_conditions")
        with self.lock:
            self.reason_shown[job] = (uid, pending.code)

    def _patch_condition(self, adapter: Adapter, obj: Obj, pending: PendingReason,
                         now: float) -> bool:
        """Patch the condition against the version read; on a conflict, read the object
        afresh and patch against that (the informer's copy may lag far behind), a few
        times. False: still conflicting, or the object is gone or replaced."""
        meta = obj["metadata"]
        for _ in range(CONDITION_ATTEMPTS):
            try:
                self.api.patch(adapter.kind, self.settings.namespace, meta["name"],
                               condition_patch(obj, pending, now), MERGE_PATCH, sub="status")
                return True
            except ApiError as exc:
                if exc.status != 409:
                    raise
                self._count("reason_conflicts")
            fresh = self.api.try_get(adapter.kind, self.settings.namespace, meta["name"])
            if fresh is None or fresh["metadata"].get("uid") != meta.get("uid"):
                return False
            obj = fresh
        return False

    def _delete_object(self, adapter: Adapter, obj: Obj) -> None:
        """Delete a job object (its pods first: Foreground), once per version seen."""
        meta = obj["metadata"]
        if self.acted.get(meta["uid"]) == meta.get("resourceVersion"):
            return  # already asked; the informer has not shown it yet
        self.acted[meta["uid"]] = meta.get("resourceVersion", "")
        self.api.delete(adapter.kind, self.settings.namespace, meta["name"], "Foreground",
                        uid=meta["uid"])
        self._count("deletes")

    def _create(self, d: Desired, adapter: Adapter) -> None:
        document = d.document if d.document is not None else self._template(
            self.objects.get(d.job) or {})
        token = self._report_token(d.job)
        # Checked against the CRD at submission (check_spec); the server validates it too.
        obj = render_job(document, d.job, d.sizes, d.plan, d.run, self.settings,
                         validate=False, report=token is not None)
        secret = None
        if token is not None:  # the pods' env names the Secret: it comes first
            try:
                secret = self._ensure_report_secret(d, adapter, token, None)
            except ApiError as exc:
                if permanent(exc, creating=True):
                    raise Refused(f"making the report Secret of {obj['metadata']['name']}",
                                  exc, obj) from exc
                raise
        try:
            created = self.api.create(adapter.kind, self.settings.namespace, obj)
        except ApiError as exc:
            if permanent(exc, creating=True):
                raise Refused(f"creating {obj['kind']} {obj['metadata']['name']}", exc,
                              obj) from exc
            if exc.status != 409:
                raise
            return  # already there: the informer shows it soon
        self._count("creates")
        with self.lock:
            self.objects.setdefault(d.job, created)
        self._check_gate(adapter, created)
        if token is not None:
            self._ensure_report_secret(d, adapter, token, created, secret)

    @staticmethod
    def _check_gate(adapter: Adapter, created: Obj) -> None:
        """The server kept the placement gate on the worker template, or the job fails
        (its workers would be placed by kube-scheduler, then moved by Voda, forever)."""
        worker = ((created.get("spec") or {}).get(adapter.replicas_key) or {}).get(
            "Worker") or {}
        gates = ((worker.get("template") or {}).get("spec") or {}).get("schedulingGates")
        if any(g.get("name") == GATE for g in gates or ()):
            return
        field = f"spec.{adapter.replicas_key}.Worker.template.spec.schedulingGates"
        raise SpecError([FieldError(field, f"the cluster's {adapter.kind_name} CRD dropped "
                                    "this field (its pod template schema predates "
                                    "scheduling gates, e.g. mpi-operator before v0.5): Voda "
                                    f"cannot place the workers; install the {adapter.kind_name}"
                                    " CRD of mpi-operator v0.8 or the training operator 1.9")])

    # ----- the report Secret ------------------------------------------------------------------
    def _report_token(self, job: str) -> str | None:
        return None if self.report_tokens is None else self.report_tokens.get(job)

    def _check_report_secret(self, d: Desired, adapter: Adapter, obj: Obj) -> None:
        """Now and then (and for each new object), see that the running job's Secret is
        there, holds its token and is owned by its object; recreate or fix it if not."""
        token = self._report_token(d.job)
        if token is None:
            return
        uid, now = obj["metadata"].get("uid", ""), time.monotonic()
        last = self.report_checked.get(d.job)
        if last is not None and last[0] == uid and (
                now - last[1] < self.settings.report_secret_check_seconds):
            return
        self._ensure_report_secret(d, adapter, token, obj)

    def _ensure_report_secret(self, d: Desired, adapter: Adapter, token: str,
                              owner: Obj | None, known: Obj | None = None) -> Obj:
        """The job's Secret, holding `token`, owned by `owner` (None: the object is not
        created yet); `known`: the Secret as this pass just left it (not read again).
        Raises ApiError (retried) while a stale Secret is being removed."""
        ns, name = self.settings.namespace, report_secret_name(d.job)
        self.report_checked[d.job] = ("", 0.0)  # touched (deleted with the job), unchecked
        secret = known if known is not None else self.api.try_get(SECRETS, ns, name)
        if secret is None:
            # a 409 (a concurrent create) is retried
            secret = self.api.create(SECRETS, ns, report_secret(d.job, token, self.settings,
                                                                 owner))
            self._count("report_secrets")
        else:
            secret = self._fix_report_secret(d, adapter, token, owner, secret)
        if owner is not None:
            self.report_checked[d.job] = (owner["metadata"]["uid"], time.monotonic())
        return secret

    def _fix_report_secret(self, d: Desired, adapter: Adapter, token: str,
                           owner: Obj | None, secret: Obj) -> Obj:
        ns, name = self.settings.namespace, secret["metadata"]["name"]
        wanted = report_secret(d.job, token, self.settings, owner)
        meta = secret["metadata"]
        if meta.get("deletionTimestamp"):
            raise ApiError(409, "Conflict", f"secret {name} is being deleted; waiting")
        owners = {r.get("uid") for r in meta.get("ownerReferences") or ()}
        ours = owner["metadata"]["uid"] if owner is not None else self._current_uid(
            d, adapter, owners)
        if owners and ours not in owners:  # left by an earlier run's object
            self.api.delete(SECRETS, ns, name, propagation=None, uid=meta["uid"])
            raise ApiError(409, "Conflict", f"secret {name} belonged to an earlier run; "
                           "recreating it")
        patch: Obj = {}
        if secret_token(secret) != token:
            patch["data"] = wanted["data"]
        if owner is not None and not owners:
            patch["metadata"] = {"ownerReferences": [owner_reference(owner)]}
        if patch:
            return self.api.patch(SECRETS, ns, name, patch, MERGE_PATCH)
        return secret

    def _current_uid(self, d: Desired, adapter: Adapter, owners: set[str | None]) -> str:
        """Before creating: the uid of an object of this run already there (created by an
        earlier leader, not yet shown by the informer), else ""."""
        if not owners:
            return ""
        obj = self.api.try_get(adapter.kind, self.settings.namespace, d.object_name)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return ""
        run = (obj["metadata"].get("annotations") or {}).get(RUN_ANNOTATION)
        return str(obj["metadata"]["uid"]) if run == d.run else ""

    def _resize(self, d: Desired, adapter: Adapter, obj: Obj) -> None:
        try:
            self._resize_once(d, adapter, obj)
        except ApiError as exc:
            if permanent(exc):
                raise Refused(f"resizing {obj.get('kind')} {obj['metadata']['name']}", exc,
                              obj) from exc
            raise

    def _resize_once(self, d: Desired, adapter: Adapter, obj: Obj) -> None:
        ns, name = self.settings.namespace, obj["metadata"]["name"]
        annotations = obj["metadata"].get("annotations") or {}
        plan_text = encode(d.plan)
        replicas = len(d.plan)
        if annotations.get(PLAN_ANNOTATION) == plan_text and adapter.replicas(obj) == replicas:
            return
        # One write: a resize never leaves the plan and the size apart.
        updated = self.api.patch(adapter.kind, ns, name, {
            "metadata": {"annotations": {PLAN_ANNOTATION: plan_text}},
            **adapter.replicas_patch(replicas)}, MERGE_PATCH)
        self._count("resizes")
        with self.lock:
            if self.objects.get(d.job, {}).get("metadata", {}).get("uid") == updated[
                    "metadata"]["uid"]:
                self.objects[d.job] = updated

    def _pin_workers(self, d: Desired, adapter: Adapter, pods: list[Obj]) -> None:
        counts = _counts(d.plan)
        waiting = False
        now = time.monotonic()
        seen = self.view.version  # a change after this may come before we note we wait
        for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
            index = adapter.worker_index(pod)
            uid = pod["metadata"].get("uid", "")
            if index is None or self.acted.get(uid) == pod["metadata"].get("resourceVersion"):
                continue
            if adapter.replaces_failed_workers() and _failed_not_evicted(pod):
                self.acted[uid] = pod["metadata"].get("resourceVersion", "")
                self.api.delete(PODS, self.settings.namespace, pod["metadata"]["name"],
                                propagation=None, uid=uid)
                self._count("replaced_failed")
                continue
            target = d.plan.get(index)
            room = target is not None and self.view.fits(d.job, target, counts[target])
            action = decide_worker(pod, target, room, self._unschedulable_for(pod, now),
                                   self.settings.unschedulable_seconds)
            # What was done is noted only once its write succeeded: a failed pin or move
            # (5xx, timeout, 422) raises, and the job is tried again (backing off).
            if action is WorkerAction.PIN:
                assert target is not None
                self._pin(d.job, pod, target)
            elif action is WorkerAction.WAIT:
                waiting = True
            elif action is WorkerAction.REFUSED:
                assert target is not None
                self._refused(d.job, target, pod)
            elif action is WorkerAction.MOVE:
                self.api.delete(PODS, self.settings.namespace, pod["metadata"]["name"],
                                propagation=None, uid=pod["metadata"].get("uid"))
                self.acted[uid] = pod["metadata"].get("resourceVersion", "")
                self._count("moves")
        with self.lock:
            if waiting:
                self._waiting.add(d.job)
            else:
                self._waiting.discard(d.job)
        if waiting and self.view.version != seen:
            self._mark(d.job)  # room may have come while we looked: look again

    def _unpin(self, job: str, uid: str) -> None:
        pins = self.pinned.get(job)
        if pins is not None:
            pins.pop(uid, None)
            if not pins:
                del self.pinned[job]

    def _worker_claims(self, job: str) -> dict[str, int]:
        """GPUs the job's workers may hold now, per node: those bound or pinned (as the
        cache shows them, and as our own pins not yet shown), until they end or go."""
        with self.lock:
            nodes = dict(self.pinned.get(job, {}))
            for pod in self.pods.get(job, {}).values():
                node = pinned_node(pod)
                if node and not gated(pod) and (pod.get("status") or {}).get("phase") not in (
                        "Succeeded", "Failed"):
                    nodes[pod["metadata"].get("uid", "")] = node
        out: dict[str, int] = {}
        for node in nodes.values():
            out[node] = out.get(node, 0) + 1
        return out

    def _pin(self, job: str, pod: Obj, node: str) -> None:
        ns, name = self.settings.namespace, pod["metadata"]["name"]
        uid, seen = pod["metadata"].get("uid", ""), pod["metadata"].get("resourceVersion", "")
        for attempt in range(3):
            try:
                self.api.patch(PODS, ns, name, pin_patch(pod, node), MERGE_PATCH)
                with self.lock:  # until the informer shows a newer pod than `seen`
                    self.acted[uid] = seen
                    self.pinned.setdefault(job, {})[uid] = node
                self._count("pins")
                return
            except ApiError as exc:
                if exc.status == 404:
                    return
                if exc.status not in (409, 422) or attempt == 2:  # 422: look again too
                    raise
                self._count("conflicts")
                fresh = self.api.try_get(PODS, ns, name)  # re-read and try again
                if fresh is None or fresh["metadata"].get("uid") != pod["metadata"].get("uid"):
                    return
                pod = fresh
                if not gated(pod):
                    return

    def _refusing(self, job: str) -> set[str]:
        """The nodes the job is kept off: each refused its workers less than
        `refused_node_seconds` ago and has not changed since (a node whose labels, taints,
        allocatable or readiness changed may take the worker now)."""
        now = time.monotonic()
        with self.lock:
            refused = self.excluded.get(job)
            if not refused:
                return set()
            for node, (until, seen) in list(refused.items()):
                if now >= until or self.view.node(node) != seen:
                    del refused[node]
            return set(refused)

    def _refused(self, job: str, node: str, pod: Obj) -> None:
        """kube-scheduler kept refusing a worker pinned to `node`: the engine plans again
        without it, for `refused_node_seconds` or until the node changes (once per job
        and node meanwhile)."""
        with self.lock:
            if node in self._refusing(job):
                return
            self.excluded.setdefault(job, {})[node] = (
                time.monotonic() + self.settings.refused_node_seconds, self.view.node(node))
            message = next((str(c.get("message") or "") for c in (pod.get("status") or {}).get(
                "conditions") or () if c.get("type") == "PodScheduled"), "")
            self._events.append(Event(EventKind.PLACEMENT_REFUSED, self.clock(), job=job,
                                      node=self._nodes.get(node), data={"reason": message}))
            self._count("refused_nodes")
        log.warning("job %s: kube-scheduler refuses its worker on %s (%s); planning again "
                    "without that node", job, node, message)

    def _unschedulable_for(self, pod: Obj, now: float) -> float:
        uid = pod["metadata"].get("uid", "")
        unschedulable = any(c.get("type") == "PodScheduled" and c.get("status") == "False"
                            and c.get("reason") == "Unschedulable"
                            for c in (pod.get("status") or {}).get("conditions") or ())
        with self.lock:
            if not unschedulable or (pod.get("spec") or {}).get("nodeName"):
                self.unschedulable_since.pop(uid, None)
                return 0.0
            since = self.unschedulable_since.setdefault(uid, now)
        return now - since

    def _count(self, what: str) -> None:
        with self.lock:
            self.stats[what] = self.stats.get(what, 0) + 1

    # ----- views for tests and the service -------------------------------------------------------
    def plan(self, job: str) -> Plan:
        with self.lock:
            d = self.desired.get(job)
            return dict(d.plan) if d else {}

    def stalled(self) -> str | None:
        """Why the process should be restarted (its reconciler has not looped for longer
        than kubernetes.liveness_seconds), or None."""
        age = time.monotonic() - self.heartbeat
        if self._thread is not None and not self._stop.is_set() and (
                age > self.settings.liveness_seconds):
            return f"kubernetes: the reconciler has not looped for {age:.0f} s"
        return None

    def idle(self) -> bool:
        with self.lock:
            return not self._dirty and not self._wake.is_set()


def _failed_not_evicted(pod: Obj) -> bool:
    """A worker that failed on its own (an evicted one fails its MPIJob instead)."""
    status = pod.get("status") or {}
    return status.get("phase") == "Failed" and status.get("reason") != "Evicted" and not pod[
        "metadata"].get("deletionTimestamp")


def _counts(plan: Plan) -> dict[str, int]:
    out: dict[str, int] = {}
    for node in plan.values():
        out[node] = out.get(node, 0) + 1
    return out


def from_settings(server_settings: Any, fence: Fence | None = None) -> KubernetesBackend:
    """The backend `voda serve --backend kubernetes` runs (see voda.api.backends); its
    writes pass `fence` (the leader elector's) before they are sent."""
    from voda.backends.kubernetes.config import kubernetes_settings

    settings = kubernetes_settings(server_settings)
    api = KubeApi.connect(settings.kubeconfig, timeout=settings.request_timeout_seconds,
                          fence=fence, page_size=settings.list_page_size)
    backend = KubernetesBackend(api, settings)
    try:
        backend.watch(settings.sync_timeout_seconds)
    except (TimeoutError, ApiError) as exc:  # ApiError: discovery of the served kinds
        backend.close()
        where = settings.kubeconfig or "the in-cluster API server"
        raise ValueError(f"kubernetes: {exc}; is {where} reachable?") from None
    # The caches just listed (millions of objects with 100,000 pods) live long and hold no
    # cycles: out of the cycle collector's sight, a full collection no longer scans them
    # (one took about a second, several per relist). Done here, where the process is
    # `voda serve`'s own, not in watch(), which tests run many times in one process.
    gc.freeze()
    return backend

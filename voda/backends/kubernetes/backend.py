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
4. a size or plan that differs: one patch (MPIJob: merge patch of replicas and the
   plan annotation; PyTorchJob: the annotation, then /scale);
5. each worker pod: gated -> pin it where the plan says and ungate it, once its node
   has room (the cluster view); on another node -> delete it (the operator
   recreates it gated); pinned but unschedulable too long -> delete and pin again.

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
    MPIJobAdapter,
    Phase,
    PyTorchJobAdapter,
    Sizes,
    adapter_for,
)
from voda.backends.kubernetes.api import (
    MERGE_PATCH,
    PODS,
    SECRETS,
    ApiError,
    KubeApi,
    NotLeader,
    Obj,
)
from voda.backends.kubernetes.cluster_view import ClusterView, watch_cluster
from voda.backends.kubernetes.informer import Informer
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
    placement_of,
)
from voda.backends.kubernetes.settings import (
    JOB_LABEL,
    MANAGED_LABEL,
    MANAGER,
    PLAN_ANNOTATION,
    KubernetesSettings,
)
from voda.backends.kubernetes.slim import slim
from voda.core.model import Job, JobPlacement, Node
from voda.engine.events import Event, EventKind
from voda.spec import JobSpec, SpecError

log = logging.getLogger(__name__)
Adapter = MPIJobAdapter | PyTorchJobAdapter
_runs = itertools.count()


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
    """Backend, SupportsDelete and SupportsAdoption on a Kubernetes cluster."""

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
            k: adapter_for(k, self.settings.gpu_resource) for k in ("MPIJob", "PyTorchJob")}
        self.lock = threading.RLock()
        self.desired: dict[str, Desired] = {}
        self.specs: dict[str, Obj] = {}  # job -> submitted document (set by the service)
        # job -> its report token (set by the service), when pods get a report channel
        self.report_tokens: dict[str, str] | None = {} if self.settings.report_url else None
        self.report_checked: dict[str, tuple[str, float]] = {}  # job -> (object uid, when)
        self.objects: dict[str, Obj] = {}  # job -> its object, as last seen
        self.pods: dict[str, dict[str, Obj]] = {}  # job -> pod name -> pod
        self.evictions: dict[str, int] = {}
        self.reported: set[tuple[str, str]] = set()  # (job, run) whose end was reported
        self.unschedulable_since: dict[str, float] = {}  # pod uid -> when first seen so
        # pod uid -> the resourceVersion we acted on: until the informer shows a newer
        # version, the cached pod does not show our pin or delete yet
        self.acted: dict[str, str] = {}
        self.stats: dict[str, int] = {}
        self._events: list[Event] = []
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
        self.informers: list[Informer] = []
        self.view.listeners.append(self._on_view_change)

    # ----- watching -------------------------------------------------------------------------
    def watch(self, timeout: float = 60.0) -> None:
        """Start the informers and the reconciler; return once every informer listed."""
        ns, seconds = self.settings.namespace, self.settings.watch_seconds
        managed = f"{MANAGED_LABEL}={MANAGER}"
        self.informers = [
            *watch_cluster(self.api, self.view, seconds,
                           idle_seconds=self.settings.watch_idle_seconds),
            # its own workers, ended ones included (an evicted worker fails its run)
            Informer(self.api, PODS, self._on_pod, ns, JOB_LABEL, watch_seconds=seconds,
                     idle_seconds=self.settings.watch_idle_seconds, transform=slim),
            *(Informer(self.api, a.kind, self._job_handler(kind), ns, managed,
                       watch_seconds=seconds, idle_seconds=self.settings.watch_idle_seconds,
                       transform=slim)
              for kind, a in self.adapters.items()),
        ]
        for informer in self.informers:
            informer.start()
        for informer in self.informers:
            if not informer.synced.wait(timeout):
                raise TimeoutError(f"listing {informer.kind.plural} took more than {timeout} s")
        # The caches just listed (millions of objects with 100,000 pods) live long and hold
        # no cycles: out of the cycle collector's sight, a full collection no longer scans
        # them (one took about a second, several per relist).
        gc.freeze()
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
            if event == "DELETED":
                pods.pop(pod["metadata"]["name"], None)
                self.unschedulable_since.pop(pod["metadata"].get("uid", ""), None)
                self.acted.pop(pod["metadata"].get("uid", ""), None)
                if not pods:
                    del self.pods[job]
            else:
                pods[pod["metadata"]["name"]] = pod
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

        check_document(spec.document, spec.min_workers, spec.max_workers, self.settings)

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
            if self.report_tokens is not None:
                self.report_tokens.pop(job, None)

    def _drop(self, job: str) -> None:
        with self.lock:
            self.desired.pop(job, None)
            self._count("halts")
        self.view.release(job)
        self._act(job)

    @staticmethod
    def _sizes(job: Job, plan: Plan) -> Sizes:
        return Sizes(len(plan), job.min_workers, job.max_workers)

    def nodes(self) -> list[Node]:
        nodes = self.view.capacity(is_elastic_owner)
        with self.lock:
            self._nodes = {n.name: n for n in nodes}
        return nodes

    def events(self) -> list[Event]:
        now = self.clock()
        current = {n.name: n for n in self.view.capacity(is_elastic_owner)}
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

    def _end(self, job: str, run: str, event: Event) -> None:
        self.reported.add((job, run))
        self.desired.pop(job, None)
        self.specs.pop(job, None)  # an ended job is never created again
        if self.report_tokens is not None:
            self.report_tokens.pop(job, None)
        self._events.append(event)
        self.view.release(job)

    # ----- the reconciler -------------------------------------------------------------------------
    def _run(self) -> None:
        """Reconcile dirty jobs on a pool of workers, one job in one worker at a time."""
        while not self._adopted.wait(0.1):
            if self._stop.is_set():
                return
        last_resync = time.monotonic()
        with ThreadPoolExecutor(self.settings.workers, "k8s-reconcile") as pool:
            while not self._stop.is_set() and not self._lost_lead:
                self._wake.wait(self.resync_seconds)
                self._wake.clear()
                if time.monotonic() - last_resync >= self.resync_seconds:
                    last_resync = time.monotonic()
                    with self.lock:
                        self._dirty |= set(self.desired) | set(self.objects)
                with self.lock:
                    jobs = sorted(self._dirty - self._in_flight)
                    self._dirty -= set(jobs)
                    self._in_flight |= set(jobs)
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
            with self.lock:
                d = self.desired.get(job)
                if d is not None:
                    self._end(job, d.run, Event(EventKind.JOB_FAILED, self.clock(), job=job,
                                                data={"reason": str(exc)}))
        except ApiError as exc:
            self._count("api_errors")
            log.warning("job %s: %s; retrying", job, exc)
            retry = True
        except Exception:
            self._count("errors")
            log.exception("job %s: reconciling failed; retrying", job)
            retry = True
        if retry:
            self._stop.wait(0.2)
        with self.lock:
            self._in_flight.discard(job)
            if retry:
                self._dirty.add(job)
        self._wake.set()

    def _reconcile(self, job: str) -> None:
        with self.lock:
            d = copy.copy(self.desired.get(job))
            obj = self.objects.get(job)
            pods = list(self.pods.get(job, {}).values())
        # 1. not wanted: delete
        if d is None:
            self._waiting.discard(job)
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
        self.view.set_claims(job, _counts(d.plan))
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
        secret = None
        if token is not None:  # the pods' env names the Secret: it comes first
            secret = self._ensure_report_secret(d, adapter, token, None)
        # Checked against the CRD at submission (check_spec); the server validates it too.
        obj = render_job(document, d.job, d.sizes, d.plan, d.run, self.settings,
                         validate=False, report=token is not None)
        try:
            created = self.api.create(adapter.kind, self.settings.namespace, obj)
        except ApiError as exc:
            if exc.status != 409:
                raise
            return  # already there: the informer shows it soon
        self._count("creates")
        with self.lock:
            self.objects.setdefault(d.job, created)
        if token is not None:
            self._ensure_report_secret(d, adapter, token, created, secret)

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
        ns, name = self.settings.namespace, obj["metadata"]["name"]
        annotations = obj["metadata"].get("annotations") or {}
        plan_text = encode(d.plan)
        replicas = len(d.plan)
        if annotations.get(PLAN_ANNOTATION) == plan_text and adapter.replicas(obj) == replicas:
            return
        if isinstance(adapter, MPIJobAdapter):
            updated = self.api.patch(adapter.kind, ns, name, {
                "metadata": {"annotations": {PLAN_ANNOTATION: plan_text}},
                "spec": {"mpiReplicaSpecs": {"Worker": {"replicas": replicas}}}}, MERGE_PATCH)
        else:
            updated = self.api.patch(adapter.kind, ns, name, {
                "metadata": {"annotations": {PLAN_ANNOTATION: plan_text}}}, MERGE_PATCH)
            if adapter.replicas(obj) != replicas:
                adapter.set_replicas(self.api, obj, replicas)
                updated = copy.deepcopy(updated)  # what the informer will show next
                updated["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = replicas
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
            target = d.plan.get(index)
            room = target is not None and self.view.fits(d.job, target, counts[target])
            action = decide_worker(pod, target, room, self._unschedulable_for(pod, now),
                                   self.settings.unschedulable_seconds)
            if action in (WorkerAction.PIN, WorkerAction.MOVE, WorkerAction.REPIN):
                self.acted[uid] = pod["metadata"].get("resourceVersion", "")
            if action is WorkerAction.PIN:
                assert target is not None
                self._pin(pod, target)
            elif action is WorkerAction.WAIT:
                waiting = True
            elif action in (WorkerAction.MOVE, WorkerAction.REPIN):
                self.api.delete(PODS, self.settings.namespace, pod["metadata"]["name"],
                                propagation=None, uid=pod["metadata"].get("uid"))
                self._count("moves" if action is WorkerAction.MOVE else "repins")
        with self.lock:
            if waiting:
                self._waiting.add(d.job)
            else:
                self._waiting.discard(d.job)
        if waiting and self.view.version != seen:
            self._mark(d.job)  # room may have come while we looked: look again

    def _pin(self, pod: Obj, node: str) -> None:
        ns, name = self.settings.namespace, pod["metadata"]["name"]
        for _ in range(3):
            try:
                self.api.patch(PODS, ns, name, pin_patch(pod, node), MERGE_PATCH)
                self._count("pins")
                return
            except ApiError as exc:
                if exc.status == 404:
                    return
                if exc.status != 409:
                    raise
                self._count("conflicts")
                fresh = self.api.try_get(PODS, ns, name)  # re-read and try again
                if fresh is None or fresh["metadata"].get("uid") != pod["metadata"].get("uid"):
                    return
                pod = fresh
                if not gated(pod):
                    return

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

    def idle(self) -> bool:
        with self.lock:
            return not self._dirty and not self._wake.is_set()


def _counts(plan: Plan) -> dict[str, int]:
    out: dict[str, int] = {}
    for node in plan.values():
        out[node] = out.get(node, 0) + 1
    return out


def from_settings(server_settings: Any, fence: Callable[[], bool] | None = None
                  ) -> KubernetesBackend:
    """The backend `voda serve --backend kubernetes` runs (see voda.api.backends); its
    writes pass `fence` (the leader elector's) before they are sent."""
    from voda.backends.kubernetes.config import kubernetes_settings

    settings = kubernetes_settings(server_settings)
    api = KubeApi.connect(settings.kubeconfig, timeout=settings.request_timeout_seconds,
                          fence=fence, page_size=settings.list_page_size)
    backend = KubernetesBackend(api, settings)
    try:
        backend.watch(settings.sync_timeout_seconds)
    except TimeoutError as exc:
        backend.close()
        where = settings.kubeconfig or "the in-cluster API server"
        raise ValueError(f"kubernetes: {exc}; is {where} reachable?") from None
    return backend

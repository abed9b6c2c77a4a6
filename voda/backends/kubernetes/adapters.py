"""One adapter per elastic job kind, behind one interface.

An adapter knows its kind's object: how to render it from a submitted document
(workers, elastic range, the placement gate on the worker template), how to read
its state (conditions) and size, how to resize it, which pods are its workers
and their indices, and how its workers meet (rendezvous). Pinning, deletion and
everything else are the backend's, the same for every kind.

- MPIJob kubeflow.org/v2beta1 (mpi-operator v0.8, Horovod elastic): the launcher
  runs `horovodrun -np N --min-np MIN --max-np MAX --host-discovery-script
  /etc/mpi/discover_hosts.sh --slots-per-host 1 --blacklist-cooldown-range LOW HIGH`
  (Horovod blacklists a host whose worker died for the rest of the run unless a
  cooldown is set; a worker Voda moves or replaces comes back under the same
  hostname); resize = JSON merge patch of spec.mpiReplicaSpecs.Worker.replicas (there
  is no scale subresource and strategic merge does not apply to custom resources).
  Any evicted worker fails the MPIJob; mpi-operator re-creates no Failed worker.
- PyTorchJob kubeflow.org/v1 with elasticPolicy (torchrun, PET_NNODES=min:max):
  resize = one merge patch of spec.pytorchReplicaSpecs.Worker.replicas (with the
  plan). torchrun counts a worker leaving the group (a scale-down, a move) against
  elasticPolicy.maxRestarts, so Voda sets it to at least TORCHRUN_MAX_RESTARTS; an
  elasticPolicy.metrics would make the operator create an HPA that resizes the job
  behind Voda's back, so it is refused.

`served_kinds` asks the API server which of the kinds it serves (discovery): either
operator alone is enough for its kind.
"""

from __future__ import annotations

import copy
import shlex
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from voda.backends.kubernetes.api import (
    MERGE_PATCH,
    MPIJOBS,
    PYTORCHJOBS,
    ApiError,
    Kind,
    KubeApi,
    Obj,
)
from voda.backends.kubernetes.operator_rules import (
    PYTORCH_CONTAINER,
    mpijob_errors,
    pytorchjob_errors,
)
from voda.spec.errors import FieldError, SpecError

KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
REPLICA_INDEX = "training.kubeflow.org/replica-index"
JOB_NAME = "training.kubeflow.org/job-name"
DISCOVER_HOSTS = "/etc/mpi/discover_hosts.sh"
HOROVOD_FLAGS_WITH_VALUE = frozenset({"-np", "--num-proc", "--min-np", "--min-num-proc",
                                      "--max-np", "--max-num-proc", "--host-discovery-script",
                                      "--slots-per-host", "-H", "--hosts", "--hostfile"})
HOROVOD_FLAGS_WITH_TWO = frozenset({"--blacklist-cooldown-range"})
# A moved worker's host may rejoin Horovod after this many seconds (low, high).
BLACKLIST_COOLDOWN = (10, 60)
TORCHRUN_MAX_RESTARTS = 1_000_000  # each scale-down or move is one torchrun restart
DEFAULT_RDZV_PORT = 23456  # the training operator's default for port `pytorchjob-port`


class Phase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    EVICTED = "Evicted"  # failed because a worker was evicted: a restart, not a failure


@dataclass(frozen=True)
class JobState:
    phase: Phase
    message: str = ""
    # Who holds a pending job suspended (spec.runPolicy.suspend: Kueue, until it admits
    # the job), in words; empty when it is not suspended.
    suspended_by: str = ""


@dataclass(frozen=True)
class Sizes:
    workers: int
    min_workers: int
    max_workers: int


class ElasticJobAdapter(Protocol):
    kind: Kind
    kind_name: str

    def render(self, document: Obj, sizes: Sizes) -> Obj: ...

    def observe(self, obj: Obj) -> JobState: ...

    def replicas(self, obj: Obj) -> int: ...

    def set_replicas(self, api: KubeApi, obj: Obj, replicas: int) -> None: ...

    def worker_index(self, pod: Obj) -> int | None: ...

    def rendezvous(self, obj: Obj) -> dict[str, str]: ...


def _condition(obj: Obj, kind: str) -> Obj | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind and c.get("status") == "True":
            return c
    return None


def suspended_by(obj: Obj) -> str:
    """Who holds the job suspended, in words ('' when it is not). Voda never suspends a
    job: Kueue does (its webhook, for a job naming a LocalQueue or in a namespace it
    manages), until it admits the job against its own quota."""
    if not ((obj.get("spec") or {}).get("runPolicy") or {}).get("suspend"):
        return ""
    queue = (obj.get("metadata", {}).get("labels") or {}).get(KUEUE_QUEUE)
    if queue:
        return f"Kueue (LocalQueue {queue!r})"
    return "spec.runPolicy.suspend, set outside Voda (Kueue sets it in the namespaces it manages)"


def _state(obj: Obj, evicted_reason: str | None = None) -> JobState:
    if (c := _condition(obj, "Succeeded")) is not None:
        return JobState(Phase.SUCCEEDED, str(c.get("message", "")))
    if (c := _condition(obj, "Failed")) is not None:
        if evicted_reason is not None and c.get("reason") == evicted_reason:
            return JobState(Phase.EVICTED, str(c.get("message", "")))
        return JobState(Phase.FAILED, f"{c.get('reason', 'Failed')}: {c.get('message', '')}")
    if by := suspended_by(obj):
        return JobState(Phase.PENDING, "not admitted yet", suspended_by=by)
    if _condition(obj, "Running") is not None:
        return JobState(Phase.RUNNING)
    return JobState(Phase.PENDING)


def _index_label(pod: Obj) -> int | None:
    try:
        index = int((pod["metadata"].get("labels") or {})[REPLICA_INDEX])
    except (KeyError, ValueError, TypeError):
        return None
    return index if index >= 0 else None


def _one_gpu_workers(template: Obj, field: str, gpu_resource: str) -> list[FieldError]:
    """Every worker holds one GPU: Voda's unit. A template asking for another count is
    refused; one asking for none gets one."""
    containers = (template.get("spec") or {}).get("containers") or []
    if not containers:
        return [FieldError(f"{field}.template.spec.containers", "required")]
    errors = []
    for i, container in enumerate(containers):
        limits = (container.get("resources") or {}).get("limits") or {}
        if i > 0 and gpu_resource in limits:
            errors.append(FieldError(f"{field}.template.spec.containers[{i}].resources",
                                     "only the first container of a worker may ask for GPUs"))
        if i == 0 and str(limits.get(gpu_resource, "1")) != "1":
            errors.append(FieldError(
                f"{field}.template.spec.containers[0].resources.limits.{gpu_resource}",
                f"each worker holds one GPU on Voda; got {limits[gpu_resource]!r}"))
    return errors


def _with_gpu_and_labels(template: Obj, gpu_resource: str, labels: dict[str, str]) -> Obj:
    out = copy.deepcopy(template)
    meta = out.setdefault("metadata", {})
    meta["labels"] = {**(meta.get("labels") or {}), **labels}
    container = out.setdefault("spec", {}).setdefault("containers", [{}])[0]
    resources = container.setdefault("resources", {})
    resources.setdefault("limits", {})[gpu_resource] = "1"
    if gpu_resource in (resources.get("requests") or {}):
        resources["requests"][gpu_resource] = "1"
    return out


class _ReplicaJobAdapter:
    """What both kinds share: a map of replica specs whose Worker Voda sizes and gates."""

    kind: Kind
    kind_name: str
    replicas_key: str

    def __init__(self, gpu_resource: str = "nvidia.com/gpu",
                 blacklist_cooldown: tuple[int, int] = BLACKLIST_COOLDOWN) -> None:
        self.gpu_resource = gpu_resource
        self.blacklist_cooldown = blacklist_cooldown

    def worker_errors(self, document: Obj) -> list[FieldError]:
        specs = (document.get("spec") or {}).get(self.replicas_key) or {}
        field = f"spec.{self.replicas_key}.Worker"
        if "Worker" not in specs:
            return [FieldError(field, "required")]
        return _one_gpu_workers(specs["Worker"].get("template") or {}, field,
                                self.gpu_resource)

    def render_workers(self, obj: Obj, sizes: Sizes, labels: dict[str, str] | None,
                       gates: list[Obj] | None) -> Obj:
        worker = obj["spec"][self.replicas_key]["Worker"]
        worker["replicas"] = sizes.workers
        worker["template"] = _gated(_with_gpu_and_labels(worker.get("template") or {},
                                                         self.gpu_resource, labels or {}),
                                    gates)
        return worker

    def replicas(self, obj: Obj) -> int:
        worker = ((obj.get("spec") or {}).get(self.replicas_key) or {}).get("Worker") or {}
        return int(worker.get("replicas", 1) or 0)

    def replicas_patch(self, replicas: int) -> Obj:
        """The merge patch that sets the worker count (with the plan, one write)."""
        return {"spec": {self.replicas_key: {"Worker": {"replicas": replicas}}}}

    def set_replicas(self, api: KubeApi, obj: Obj, replicas: int) -> None:
        meta = obj["metadata"]
        api.patch(self.kind, meta["namespace"], meta["name"], self.replicas_patch(replicas),
                  MERGE_PATCH)


class MPIJobAdapter(_ReplicaJobAdapter):
    kind = MPIJOBS
    kind_name = "MPIJob"
    replicas_key = "mpiReplicaSpecs"

    def check(self, document: Obj, sizes: Sizes) -> list[FieldError]:
        spec = document.get("spec") or {}
        errors = self.worker_errors(document)
        if int(spec.get("slotsPerWorker", 1) or 1) != 1:
            errors.append(FieldError("spec.slotsPerWorker",
                                     "must be 1 on Voda: each worker holds one GPU"))
        command = self._launcher_command(document)
        if sizes.min_workers < sizes.max_workers and (not command or
                                                     command[0] != "horovodrun"):
            errors.append(FieldError(
                "spec.mpiReplicaSpecs.Launcher.template.spec.containers[0].command",
                "an elastic MPIJob (min < max) must run horovodrun (Horovod elastic); "
                f"got {shlex.join(command) if command else 'no command'!r}"))
        return errors

    @staticmethod
    def _launcher_command(document: Obj) -> list[str]:
        launcher = ((document.get("spec") or {}).get("mpiReplicaSpecs") or {}).get(
            "Launcher") or {}
        containers = ((launcher.get("template") or {}).get("spec") or {}).get("containers")
        if not containers:
            return []
        return [str(p) for p in (containers[0].get("command") or []) + (
            containers[0].get("args") or [])]

    @staticmethod
    def horovodrun(command: list[str], sizes: Sizes,
                   cooldown: tuple[int, int] = BLACKLIST_COOLDOWN) -> list[str]:
        """The launcher's command with Voda's elastic flags in place of any given."""
        rest, skip = [], 0
        for part in command[1:]:
            if skip:
                skip -= 1
                continue
            flag = part.split("=", 1)[0]
            if flag in HOROVOD_FLAGS_WITH_VALUE:
                skip = 0 if "=" in part else 1
                continue
            if flag in HOROVOD_FLAGS_WITH_TWO:
                skip = 2
                continue
            rest.append(part)
        return ["horovodrun", "-np", str(sizes.workers), "--min-np", str(sizes.min_workers),
                "--max-np", str(sizes.max_workers), "--host-discovery-script", DISCOVER_HOSTS,
                "--slots-per-host", "1", "--blacklist-cooldown-range", str(cooldown[0]),
                str(cooldown[1]), *rest]

    def render(self, document: Obj, sizes: Sizes, worker_labels: dict[str, str] | None = None,
               gates: list[Obj] | None = None) -> Obj:
        obj = copy.deepcopy(document)
        spec = obj.setdefault("spec", {})
        spec["slotsPerWorker"] = 1
        run_policy = spec.setdefault("runPolicy", {})
        if run_policy.get("cleanPodPolicy") not in ("Running", "All"):
            run_policy["cleanPodPolicy"] = "Running"  # finished workers free their GPUs
        specs = spec["mpiReplicaSpecs"]
        self.render_workers(obj, sizes, worker_labels, gates)
        command = self._launcher_command(document)
        if command and command[0] == "horovodrun":
            container = specs["Launcher"]["template"]["spec"]["containers"][0]
            container["command"] = self.horovodrun(command, sizes, self.blacklist_cooldown)
            container.pop("args", None)
        return obj

    def observe(self, obj: Obj) -> JobState:
        return _state(obj, evicted_reason="MPIJobEvicted")

    @staticmethod
    def operator_errors(obj: Obj, sizes: Sizes) -> list[FieldError]:
        """What mpi-operator would refuse in the rendered object."""
        return mpijob_errors(obj, sizes.max_workers)

    @staticmethod
    def replaces_failed_workers() -> bool:
        """mpi-operator leaves a Failed worker as it is: Voda deletes it (the operator
        then creates it again, gated)."""
        return True

    def worker_index(self, pod: Obj) -> int | None:
        labels = pod["metadata"].get("labels") or {}
        if labels.get("training.kubeflow.org/job-role") != "worker":
            return None
        return _index_label(pod)

    def rendezvous(self, obj: Obj) -> dict[str, str]:
        name = obj["metadata"]["name"]
        return {"discovery": DISCOVER_HOSTS, "configmap": f"{name}-config",
                "service": name, "hosts": f"<pod>.{name}.{obj['metadata'].get('namespace')}.svc"}


class PyTorchJobAdapter(_ReplicaJobAdapter):
    kind = PYTORCHJOBS
    kind_name = "PyTorchJob"
    replicas_key = "pytorchReplicaSpecs"

    def check(self, document: Obj, sizes: Sizes) -> list[FieldError]:
        specs = (document.get("spec") or {}).get(self.replicas_key) or {}
        errors = self.worker_errors(document)
        if "Master" in specs:
            errors.append(FieldError("spec.pytorchReplicaSpecs.Master",
                                     "an elastic PyTorchJob runs Workers only (torchrun "
                                     "rendezvous); remove the Master"))
        if ((document.get("spec") or {}).get("elasticPolicy") or {}).get("metrics"):
            errors.append(FieldError("spec.elasticPolicy.metrics",
                                     "Voda sizes the job: the training operator would make "
                                     "an HPA from these metrics that resizes it too; remove "
                                     "them"))
        return errors

    def render(self, document: Obj, sizes: Sizes, worker_labels: dict[str, str] | None = None,
               gates: list[Obj] | None = None) -> Obj:
        obj = copy.deepcopy(document)
        spec = obj.setdefault("spec", {})
        elastic = spec.setdefault("elasticPolicy", {})
        elastic["minReplicas"] = sizes.min_workers
        elastic["maxReplicas"] = sizes.max_workers
        elastic.setdefault("rdzvBackend", "c10d")
        elastic["maxRestarts"] = max(int(elastic.get("maxRestarts") or 0),
                                     TORCHRUN_MAX_RESTARTS)
        spec["nprocPerNode"] = "1"
        self.render_workers(obj, sizes, worker_labels, gates).setdefault("restartPolicy",
                                                                          "OnFailure")
        return obj

    def observe(self, obj: Obj) -> JobState:
        return _state(obj)

    @staticmethod
    def operator_errors(obj: Obj, sizes: Sizes) -> list[FieldError]:
        """What the training operator's webhook would refuse in the rendered object."""
        return pytorchjob_errors(obj)

    @staticmethod
    def replaces_failed_workers() -> bool:
        return False  # the training operator restarts its failed pods itself

    def worker_index(self, pod: Obj) -> int | None:
        labels = pod["metadata"].get("labels") or {}
        if labels.get("training.kubeflow.org/replica-type", "").lower() != "worker":
            return None
        return _index_label(pod)

    def rendezvous(self, obj: Obj) -> dict[str, str]:
        name = obj["metadata"]["name"]
        elastic = (obj.get("spec") or {}).get("elasticPolicy") or {}
        return {"endpoint": f"{elastic.get('rdzvHost', f'{name}-worker-0')}:"
                            f"{rendezvous_port(obj)}",
                "nnodes": f"{elastic.get('minReplicas', 1)}:{elastic.get('maxReplicas', 1)}",
                "backend": str(elastic.get("rdzvBackend", "c10d"))}


def rendezvous_port(obj: Obj) -> int:
    """elasticPolicy.rdzvPort, else the port `pytorchjob-port` of the Worker's container
    `pytorch`, else the operator's default."""
    spec = obj.get("spec") or {}
    port = (spec.get("elasticPolicy") or {}).get("rdzvPort")
    if port is not None:
        return int(port)
    worker = (spec.get("pytorchReplicaSpecs") or {}).get("Worker") or {}
    for container in ((worker.get("template") or {}).get("spec") or {}).get("containers") or []:
        if container.get("name") == PYTORCH_CONTAINER:
            for entry in container.get("ports") or []:
                if entry.get("name") == "pytorchjob-port":
                    return int(entry["containerPort"])
    return DEFAULT_RDZV_PORT


def _gated(template: Obj, gates: list[Obj] | None) -> Obj:
    spec = template.setdefault("spec", {})
    existing = [g for g in spec.get("schedulingGates") or () if g not in (gates or [])]
    if gates:
        spec["schedulingGates"] = [*existing, *gates]
    return template


ADAPTERS: dict[str, type[MPIJobAdapter] | type[PyTorchJobAdapter]] = {
    "MPIJob": MPIJobAdapter, "PyTorchJob": PyTorchJobAdapter}


def adapter_for(kind_name: str, gpu_resource: str = "nvidia.com/gpu",
                blacklist_cooldown: tuple[int, int] = BLACKLIST_COOLDOWN
                ) -> MPIJobAdapter | PyTorchJobAdapter:
    try:
        return ADAPTERS[kind_name](gpu_resource, blacklist_cooldown)
    except KeyError:
        raise SpecError([FieldError("kind", f"the Kubernetes backend runs MPIJob and "
                                    f"PyTorchJob, not {kind_name!r}")]) from None


def any_adapter(obj: Any) -> MPIJobAdapter | PyTorchJobAdapter | None:
    kind = obj.get("kind") if isinstance(obj, dict) else None
    cls = ADAPTERS.get(str(kind))
    return cls() if cls else None


def served_kinds(api: KubeApi) -> dict[str, str]:
    """Which of the kinds Voda runs the API server serves (discovery): kind name -> ""
    when served as Voda needs it, else why not (a line for an error message)."""
    out = {}
    for name, cls in ADAPTERS.items():
        kind = cls.kind
        versions = _served_versions(api, kind)
        if kind.version in versions:
            out[name] = ""
        elif versions:
            out[name] = (f"this cluster serves {name} only as {kind.group}/"
                         f"{', '.join(sorted(versions))}, not {kind.group}/{kind.version}"
                         + (" (the training operator's own MPIJob CRD: install mpi-operator "
                            "v0.8's CRD instead)" if name == "MPIJob" else ""))
        else:
            out[name] = (f"this cluster serves no {name} ({kind.plural}.{kind.group} is not "
                         f"installed: install "
                         + ("mpi-operator v0.8" if name == "MPIJob"
                            else "the training operator (release-1.9)") + ")")
    return out


def _served_versions(api: KubeApi, kind: Kind) -> set[str]:
    try:
        group = api.request("GET", f"/apis/{kind.group}")
    except ApiError as exc:
        if exc.status == 404:
            return set()
        raise
    out = set()
    for entry in group.get("versions") or []:
        version = str(entry.get("version", ""))
        try:
            resources = api.request("GET", f"/apis/{kind.group}/{version}")
        except ApiError as exc:
            if exc.status == 404:
                continue
            raise
        if any(r.get("name") == kind.plural for r in resources.get("resources") or []):
            out.add(version)
    return out

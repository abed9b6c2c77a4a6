"""One adapter per elastic job kind, behind one interface.

An adapter knows its kind's object: how to render it from a submitted document
(workers, elastic range, the placement gate on the worker template), how to read
its state (conditions) and size, how to resize it, which pods are its workers
and their indices, and how its workers meet (rendezvous). Pinning, deletion and
everything else are the backend's, the same for every kind.

- MPIJob kubeflow.org/v2beta1 (mpi-operator v0.8, Horovod elastic): the launcher
  runs `horovodrun -np N --min-np MIN --max-np MAX --host-discovery-script
  /etc/mpi/discover_hosts.sh --slots-per-host 1`; resize = JSON merge patch of
  spec.mpiReplicaSpecs.Worker.replicas (there is no scale subresource and strategic
  merge does not apply to custom resources). Any evicted worker fails the MPIJob.
- PyTorchJob kubeflow.org/v1 with elasticPolicy (torchrun, PET_NNODES=min:max):
  resize through the /scale subresource.
"""

from __future__ import annotations

import copy
import shlex
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from voda.backends.kubernetes.api import MERGE_PATCH, MPIJOBS, PYTORCHJOBS, Kind, KubeApi, Obj
from voda.spec.errors import FieldError, SpecError

KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
REPLICA_INDEX = "training.kubeflow.org/replica-index"
JOB_NAME = "training.kubeflow.org/job-name"
DISCOVER_HOSTS = "/etc/mpi/discover_hosts.sh"
HOROVOD_FLAGS_WITH_VALUE = frozenset({"-np", "--num-proc", "--min-np", "--min-num-proc",
                                      "--max-np", "--max-num-proc", "--host-discovery-script",
                                      "--slots-per-host", "-H", "--hosts", "--hostfile"})


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

    def __init__(self, gpu_resource: str = "nvidia.com/gpu") -> None:
        self.gpu_resource = gpu_resource

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
    def horovodrun(command: list[str], sizes: Sizes) -> list[str]:
        """The launcher's command with Voda's elastic flags in place of any given."""
        rest, skip = [], False
        for part in command[1:]:
            if skip:
                skip = False
                continue
            flag = part.split("=", 1)[0]
            if flag in HOROVOD_FLAGS_WITH_VALUE:
                skip = "=" not in part
                continue
            rest.append(part)
        return ["horovodrun", "-np", str(sizes.workers), "--min-np", str(sizes.min_workers),
                "--max-np", str(sizes.max_workers), "--host-discovery-script", DISCOVER_HOSTS,
                "--slots-per-host", "1", *rest]

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
            container["command"] = self.horovodrun(command, sizes)
            container.pop("args", None)
        return obj

    def observe(self, obj: Obj) -> JobState:
        return _state(obj, evicted_reason="MPIJobEvicted")

    def set_replicas(self, api: KubeApi, obj: Obj, replicas: int) -> None:
        meta = obj["metadata"]
        api.patch(self.kind, meta["namespace"], meta["name"],
                  {"spec": {"mpiReplicaSpecs": {"Worker": {"replicas": replicas}}}},
                  MERGE_PATCH)

    def worker_index(self, pod: Obj) -> int | None:
        labels = pod["metadata"].get("labels") or {}
        if labels.get("training.kubeflow.org/job-role") != "worker":
            return None
        return _index_label(pod)

    def rendezvous(self, obj: Obj) -> dict[str, str]:
        name = obj["metadata"]["name"]
        return {"discovery": DISCOVER_HOSTS, "configmap": f"{name}-config",
                "service": f"{name}-worker"}


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
        return errors

    def render(self, document: Obj, sizes: Sizes, worker_labels: dict[str, str] | None = None,
               gates: list[Obj] | None = None) -> Obj:
        obj = copy.deepcopy(document)
        spec = obj.setdefault("spec", {})
        elastic = spec.setdefault("elasticPolicy", {})
        elastic["minReplicas"] = sizes.min_workers
        elastic["maxReplicas"] = sizes.max_workers
        elastic.setdefault("rdzvBackend", "c10d")
        spec["nprocPerNode"] = "1"
        self.render_workers(obj, sizes, worker_labels, gates).setdefault("restartPolicy",
                                                                          "OnFailure")
        return obj

    def observe(self, obj: Obj) -> JobState:
        return _state(obj)

    def set_replicas(self, api: KubeApi, obj: Obj, replicas: int) -> None:
        meta = obj["metadata"]
        api.patch(self.kind, meta["namespace"], meta["name"], {"spec": {"replicas": replicas}},
                  MERGE_PATCH, sub="scale")

    def worker_index(self, pod: Obj) -> int | None:
        labels = pod["metadata"].get("labels") or {}
        if labels.get("training.kubeflow.org/replica-type", "").lower() != "worker":
            return None
        return _index_label(pod)

    def rendezvous(self, obj: Obj) -> dict[str, str]:
        name = obj["metadata"]["name"]
        elastic = (obj.get("spec") or {}).get("elasticPolicy") or {}
        return {"endpoint": f"{name}-worker-0:29400",
                "nnodes": f"{elastic.get('minReplicas', 1)}:{elastic.get('maxReplicas', 1)}",
                "backend": str(elastic.get("rdzvBackend", "c10d"))}


def _gated(template: Obj, gates: list[Obj] | None) -> Obj:
    spec = template.setdefault("spec", {})
    existing = [g for g in spec.get("schedulingGates") or () if g not in (gates or [])]
    if gates:
        spec["schedulingGates"] = [*existing, *gates]
    return template


ADAPTERS: dict[str, type[MPIJobAdapter] | type[PyTorchJobAdapter]] = {
    "MPIJob": MPIJobAdapter, "PyTorchJob": PyTorchJobAdapter}


def adapter_for(kind_name: str, gpu_resource: str = "nvidia.com/gpu"
                ) -> MPIJobAdapter | PyTorchJobAdapter:
    try:
        return ADAPTERS[kind_name](gpu_resource)
    except KeyError:
        raise SpecError([FieldError("kind", f"the Kubernetes backend runs MPIJob and "
                                    f"PyTorchJob, not {kind_name!r}")]) from None


def any_adapter(obj: Any) -> MPIJobAdapter | PyTorchJobAdapter | None:
    kind = obj.get("kind") if isinstance(obj, dict) else None
    cls = ADAPTERS.get(str(kind))
    return cls() if cls else None

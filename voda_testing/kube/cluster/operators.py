"""The Kubeflow operators, played as far as a scheduler can tell them apart.

mpi-operator v0.8 (MPIJob v2beta1): worker pods `<job>-worker-<i>` from the worker
template with the replica-index label, a headless Service, a ConfigMap holding the
hostfile and `discover_hosts.sh` (Running workers only), a launcher batch Job and its
pod; on scale-down the highest indices are deleted; a deleted worker is recreated
under the same name; any evicted worker marks the whole MPIJob Failed; on success
the workers are deleted when `runPolicy.cleanPodPolicy` is Running or All.

Both honour `spec.runPolicy.suspend` (what Kueue sets until it admits a job): no pods
run (those there are deleted), the Suspended condition is True and Running False;
on resume the Suspended condition turns False and the pods are created again.

training operator v1 (PyTorchJob with elasticPolicy): worker pods `<job>-worker-<i>`
with the PET_* environment torchrun reads, failed pods restarted under
restartPolicy OnFailure/Always, the highest indices deleted on scale-down, and the
replica status the /scale subresource reads.
"""

from __future__ import annotations

import contextlib
import copy
from typing import TYPE_CHECKING

from voda_testing.kube.cluster.nodes import Obj
from voda_testing.kube.errors import ApiError
from voda_testing.kube.patches import MERGE
from voda_testing.kube.store import timestamp

if TYPE_CHECKING:
    from voda_testing.kube.cluster.simulator import ClusterSimulator

JOB_NAME = "training.kubeflow.org/job-name"
JOB_ROLE = "training.kubeflow.org/job-role"
REPLICA_INDEX = "training.kubeflow.org/replica-index"
REPLICA_TYPE = "training.kubeflow.org/replica-type"
OPERATOR_NAME = "training.kubeflow.org/operator-name"


def owner_ref(job: Obj) -> Obj:
    return {"apiVersion": job["apiVersion"], "kind": job["kind"],
            "name": job["metadata"]["name"], "uid": job["metadata"]["uid"],
            "controller": True, "blockOwnerDeletion": True}


def condition(job: Obj, kind: str) -> Obj | None:
    for c in (job.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind and c.get("status") == "True":
            return c
    return None


def finished(job: Obj) -> bool:
    return condition(job, "Succeeded") is not None or condition(job, "Failed") is not None


def set_condition(conditions: list[Obj], kind: str, reason: str, message: str, now: str
                  ) -> list[Obj]:
    out = [c for c in conditions if c.get("type") != kind]
    if kind in ("Running", "Succeeded", "Failed"):
        out = [{**c, "status": "False"} if c.get("type") == "Running" and kind != "Running"
               else c for c in out]
    out.append({"type": kind, "status": "True", "reason": reason, "message": message,
                "lastTransitionTime": now, "lastUpdateTime": now})
    return out


def pod_from_template(job: Obj, replica_spec: Obj, name: str, labels: dict[str, str],
                      hostname: str | None = None, subdomain: str | None = None) -> Obj:
    template = copy.deepcopy(replica_spec.get("template") or {})
    meta = template.get("metadata") or {}
    spec = template.get("spec") or {}
    if hostname:
        spec["hostname"] = hostname
    if subdomain:
        spec["subdomain"] = subdomain
    spec.setdefault("restartPolicy", replica_spec.get("restartPolicy") or "Never")
    if spec["restartPolicy"] == "ExitCode":
        spec["restartPolicy"] = "Never"
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": job["metadata"]["namespace"],
                         "labels": {**(meta.get("labels") or {}), **labels},
                         "annotations": dict(meta.get("annotations") or {}),
                         "ownerReferences": [owner_ref(job)]},
            "spec": spec}


def _index(pod: Obj) -> int:
    try:
        return int(pod["metadata"]["labels"][REPLICA_INDEX])
    except (KeyError, ValueError):
        return -1


class Operator:
    """What both operators share: worker pods by index, scale-down from the top."""

    resource = ""
    replicas_key = ""
    operator_name = ""

    def worker_spec(self, job: Obj) -> Obj:
        return ((job.get("spec") or {}).get(self.replicas_key) or {}).get("Worker") or {}

    def worker_labels(self, job: Obj, index: int) -> dict[str, str]:
        raise NotImplementedError

    def worker_pod(self, job: Obj, index: int) -> Obj:
        raise NotImplementedError

    def reconcile(self, sim: ClusterSimulator, job: Obj) -> None:
        raise NotImplementedError

    def complete(self, sim: ClusterSimulator, job: Obj) -> None:
        raise NotImplementedError

    def running_workers(self, sim: ClusterSimulator, job: Obj) -> int:
        return sum(1 for p in sim.pods_of(job, "worker") if sim.is_running(p))

    def unless_suspended(self, sim: ClusterSimulator, job: Obj) -> Obj | None:
        """None while `runPolicy.suspend` holds the job (its pods deleted, the conditions
        saying so); else the job to reconcile (as written, when it was just resumed)."""
        suspend = bool(((job.get("spec") or {}).get("runPolicy") or {}).get("suspend"))
        if not suspend and condition(job, "Suspended") is None:
            return job
        ns, name, kind = job["metadata"]["namespace"], job["metadata"]["name"], job["kind"]
        status = self.base_status(sim, job)
        now = timestamp(sim.store.clock())
        if suspend:
            for role in ("launcher", "worker"):
                for pod in sim.pods_of(job, role):
                    if not pod["metadata"].get("deletionTimestamp"):
                        sim.delete_pod(pod)
            message = f"{kind} {ns}/{name} is suspended."
            conditions = set_condition(status["conditions"], "Suspended", f"{kind}Suspended",
                                       message, now)
            status["conditions"] = [
                {**c, "status": "False", "reason": f"{kind}Suspended", "message": message}
                if c.get("type") == "Running" else c for c in conditions]
            self.write_status(sim, job, status)
            return None
        status["conditions"] = [
            {**c, "status": "False", "reason": f"{kind}Resumed",
             "message": f"{kind} {ns}/{name} is resumed.", "lastTransitionTime": now}
            if c.get("type") == "Suspended" else c for c in status["conditions"]]
        self.write_status(sim, job, status)
        return sim.store.try_get(self.resource, ns, name)

    def sync_workers(self, sim: ClusterSimulator, job: Obj) -> list[Obj]:
        """Create missing workers below `replicas`, delete those at or above it."""
        replicas = int(self.worker_spec(job).get("replicas", 1) or 0)
        pods = {_index(p): p for p in sim.pods_of(job, "worker")}
        for index, pod in pods.items():
            if index >= replicas and not pod["metadata"].get("deletionTimestamp"):
                sim.delete_pod(pod)
        for index in range(replicas):
            if index not in pods:
                sim.create(self.worker_pod(job, index))
        return [p for i, p in sorted(pods.items()) if i < replicas]

    def write_status(self, sim: ClusterSimulator, job: Obj, status: Obj) -> None:
        if {k: v for k, v in status.items() if k != "lastReconcileTime"} == {
                k: v for k, v in (job.get("status") or {}).items() if k != "lastReconcileTime"}:
            return
        ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
        with contextlib.suppress(ApiError):  # gone meanwhile
            sim.store.patch(self.resource, ns, name, {"status": status}, MERGE,
                            subresource="status")

    def base_status(self, sim: ClusterSimulator, job: Obj) -> Obj:
        status = copy.deepcopy(job.get("status") or {})
        now = timestamp(sim.store.clock())
        if not status.get("conditions"):
            status["conditions"] = set_condition([], "Created", f"{job['kind']}Created",
                                                 f"{job['kind']} {job['metadata']['name']} "
                                                 "is created.", now)
            status["startTime"] = now
        return status


class MPIOperator(Operator):
    resource = "mpijobs.kubeflow.org"
    replicas_key = "mpiReplicaSpecs"
    operator_name = "mpi-operator"

    def worker_labels(self, job: Obj, index: int) -> dict[str, str]:
        return {OPERATOR_NAME: self.operator_name, JOB_NAME: job["metadata"]["name"],
                JOB_ROLE: "worker", REPLICA_INDEX: str(index)}

    def worker_pod(self, job: Obj, index: int) -> Obj:
        name = job["metadata"]["name"]
        return pod_from_template(job, self.worker_spec(job), f"{name}-worker-{index}",
                                 self.worker_labels(job, index), hostname=f"{name}-worker-{index}",
                                 subdomain=f"{name}-worker")

    def reconcile(self, sim: ClusterSimulator, job: Obj) -> None:
        if job["metadata"].get("deletionTimestamp"):
            return
        held = job if finished(job) else self.unless_suspended(sim, job)
        if held is None:
            return
        job = held
        name, ns = job["metadata"]["name"], job["metadata"]["namespace"]
        status = self.base_status(sim, job)
        now = timestamp(sim.store.clock())
        if finished(job):
            if condition(job, "Succeeded") and (job["spec"].get("runPolicy") or {}).get(
                    "cleanPodPolicy", "None") in ("Running", "All"):
                for pod in sim.pods_of(job, "worker"):
                    if not pod["metadata"].get("deletionTimestamp"):
                        sim.delete_pod(pod)
            return
        slots = int(job["spec"].get("slotsPerWorker", 1) or 1)
        if sim.store.try_get("services", ns, f"{name}-worker") is None:
            sim.create({"apiVersion": "v1", "kind": "Service", "metadata": {
                "name": f"{name}-worker", "namespace": ns, "ownerReferences": [owner_ref(job)]},
                "spec": {"clusterIP": "None", "selector": {JOB_NAME: name, JOB_ROLE: "worker"}}})
        workers = self.sync_workers(sim, job)
        evicted = [p for p in workers if (p.get("status") or {}).get("reason") == "Evicted"]
        if evicted:
            status["conditions"] = set_condition(
                status["conditions"], "Failed", "MPIJobEvicted",
                f"{len(evicted)}/{len(workers)} workers are evicted", now)
            status["completionTime"] = now
            self.write_status(sim, job, status)
            return
        running = [p for p in workers if sim.is_running(p)]
        hosts = "".join(f"{p['metadata']['name']}.{name}-worker.{ns}.svc slots={slots}\n"
                        for p in workers)
        discover = "#!/bin/sh\n" + "".join(
            f"echo {p['metadata']['name']}.{name}-worker.{ns}.svc:{slots}\n" for p in running)
        config = {"hostfile": hosts, "discover_hosts.sh": discover}
        existing = sim.store.try_get("configmaps", ns, f"{name}-config")
        if existing is None:
            sim.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
                "name": f"{name}-config", "namespace": ns, "ownerReferences": [owner_ref(job)]},
                "data": config})
        elif existing.get("data") != config:
            sim.store.patch("configmaps", ns, f"{name}-config", {"data": config}, MERGE)
        launcher = self.ensure_launcher(sim, job)
        launcher_phase = (launcher or {}).get("status", {}).get("phase")
        if launcher_phase == "Running" and not condition(job, "Running"):
            status["conditions"] = set_condition(status["conditions"], "Running",
                                                 "MPIJobRunning",
                                                 f"MPIJob {ns}/{name} is running.", now)
        if launcher_phase == "Failed":
            status["conditions"] = set_condition(status["conditions"], "Failed",
                                                 "MPIJobFailed", "launcher failed", now)
        status["replicaStatuses"] = {
            "Launcher": {"active": int(launcher_phase == "Running"),
                         "failed": int(launcher_phase == "Failed")},
            "Worker": {"active": len(running)}}
        self.write_status(sim, job, status)

    def ensure_launcher(self, sim: ClusterSimulator, job: Obj) -> Obj | None:
        name, ns = job["metadata"]["name"], job["metadata"]["namespace"]
        batch = sim.store.try_get("jobs.batch", ns, f"{name}-launcher")
        spec = (job["spec"].get(self.replicas_key) or {}).get("Launcher") or {}
        labels = {OPERATOR_NAME: self.operator_name, JOB_NAME: name, JOB_ROLE: "launcher"}
        if batch is None:
            template = copy.deepcopy(spec.get("template") or {})
            template.setdefault("metadata", {}).setdefault("labels", {}).update(labels)
            template.setdefault("spec", {})["restartPolicy"] = "OnFailure"
            batch = sim.create({"apiVersion": "batch/v1", "kind": "Job", "metadata": {
                "name": f"{name}-launcher", "namespace": ns, "labels": labels,
                "ownerReferences": [owner_ref(job)]},
                "spec": {"backoffLimit": 6, "template": template}})
            if batch is None:
                return None
        pod = sim.store.try_get("pods", ns, f"{name}-launcher")
        if pod is None:
            pod = pod_from_template(batch, {"template": batch["spec"]["template"]},
                                    f"{name}-launcher", labels)
            pod = sim.create(pod)
        return pod

    def running_workers(self, sim: ClusterSimulator, job: Obj) -> int:
        launcher = sim.store.try_get("pods", job["metadata"]["namespace"],
                                     f"{job['metadata']['name']}-launcher")
        if launcher is None or not sim.is_running(launcher):
            return 0
        return super().running_workers(sim, job)

    def complete(self, sim: ClusterSimulator, job: Obj) -> None:
        name, ns = job["metadata"]["name"], job["metadata"]["namespace"]
        now = timestamp(sim.store.clock())
        launcher = sim.store.try_get("pods", ns, f"{name}-launcher")
        if launcher is not None:
            sim.set_phase(launcher, "Succeeded")
        with_status = sim.store.try_get("jobs.batch", ns, f"{name}-launcher")
        if with_status is not None:
            sim.store.patch("jobs.batch", ns, f"{name}-launcher", {"status": {
                "succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}},
                MERGE, subresource="status")
        status = self.base_status(sim, job)
        status["conditions"] = set_condition(status["conditions"], "Succeeded",
                                             "MPIJobSucceeded",
                                             f"MPIJob {ns}/{name} successfully completed.", now)
        status["completionTime"] = now
        status["replicaStatuses"] = {"Launcher": {"succeeded": 1}, "Worker": {}}
        self.write_status(sim, job, status)


class PyTorchOperator(Operator):
    resource = "pytorchjobs.kubeflow.org"
    replicas_key = "pytorchReplicaSpecs"
    operator_name = "pytorchjob-controller"

    def worker_labels(self, job: Obj, index: int) -> dict[str, str]:
        return {OPERATOR_NAME: self.operator_name, JOB_NAME: job["metadata"]["name"],
                REPLICA_TYPE: "worker", REPLICA_INDEX: str(index)}

    def worker_pod(self, job: Obj, index: int) -> Obj:
        name = job["metadata"]["name"]
        pod = pod_from_template(job, self.worker_spec(job), f"{name}-worker-{index}",
                                self.worker_labels(job, index))
        elastic = job["spec"].get("elasticPolicy") or {}
        replicas = int(self.worker_spec(job).get("replicas", 1) or 1)
        env = [{"name": "PET_NNODES", "value": f"{elastic.get('minReplicas', replicas)}:"
                                                f"{elastic.get('maxReplicas', replicas)}"},
               {"name": "PET_RDZV_BACKEND", "value": elastic.get("rdzvBackend", "c10d")},
               {"name": "PET_RDZV_ENDPOINT", "value": f"{name}-worker-0:29400"},
               {"name": "PET_NPROC_PER_NODE", "value": str(job["spec"].get("nprocPerNode",
                                                                           "auto"))},
               {"name": "PET_MAX_RESTARTS", "value": str(elastic.get("maxRestarts", 3))}]
        for container in pod["spec"].get("containers") or []:
            container["env"] = [*(container.get("env") or []), *env]
        return pod

    def reconcile(self, sim: ClusterSimulator, job: Obj) -> None:
        if job["metadata"].get("deletionTimestamp") or finished(job):
            return
        held = self.unless_suspended(sim, job)
        if held is None:
            return
        job = held
        name, ns = job["metadata"]["name"], job["metadata"]["namespace"]
        status = self.base_status(sim, job)
        now = timestamp(sim.store.clock())
        restart = self.worker_spec(job).get("restartPolicy", "OnFailure")
        for pod in sim.pods_of(job, "worker"):
            if (pod.get("status") or {}).get("phase") == "Failed" and not pod["metadata"].get(
                    "deletionTimestamp"):
                if restart in ("OnFailure", "Always", "ExitCode"):
                    sim.delete_pod(pod)  # recreated below once gone
                    status["conditions"] = set_condition(status["conditions"], "Restarting",
                                                         "PyTorchJobRestarting",
                                                         f"{pod['metadata']['name']} failed",
                                                         now)
                else:
                    status["conditions"] = set_condition(status["conditions"], "Failed",
                                                         "PyTorchJobFailed",
                                                         f"{pod['metadata']['name']} failed",
                                                         now)
                    self.write_status(sim, job, status)
                    return
        workers = self.sync_workers(sim, job)
        running = [p for p in workers if sim.is_running(p)]
        if running and not condition(job, "Running"):
            status["conditions"] = set_condition(status["conditions"], "Running",
                                                 "PyTorchJobRunning",
                                                 f"PyTorchJob {ns}/{name} is running.", now)
        selector = f"{JOB_NAME}={name},{OPERATOR_NAME}={self.operator_name},{REPLICA_TYPE}=worker"
        status["replicaStatuses"] = {"Worker": {"active": len(running), "selector": selector}}
        self.write_status(sim, job, status)

    def complete(self, sim: ClusterSimulator, job: Obj) -> None:
        name, ns = job["metadata"]["name"], job["metadata"]["namespace"]
        now = timestamp(sim.store.clock())
        for pod in sim.pods_of(job, "worker"):
            if sim.is_running(pod):
                sim.set_phase(pod, "Succeeded")
        status = self.base_status(sim, job)
        status["conditions"] = set_condition(status["conditions"], "Succeeded",
                                             "PyTorchJobSucceeded",
                                             f"PyTorchJob {ns}/{name} is successfully completed.",
                                             now)
        status["completionTime"] = now
        self.write_status(sim, job, status)


OPERATORS: tuple[Operator, ...] = (MPIOperator(), PyTorchOperator())

"""The Kubeflow operators, played as far as a scheduler can tell them apart.

mpi-operator v0.8.2 (MPIJob v2beta1). Its controller defaults a copy of the job and
validates it (voda_testing.kube.cluster.kubeflow_rules): an invalid job gets a Warning
Event `ValidationError` and nothing else. A valid one gets worker pods
`<job>-worker-<i>` (hostname the pod name, subdomain the job) from the worker template
with the replica-index label and restartPolicy Never by default; one headless Service
named after the job; a ConfigMap `<job>-config` holding the hostfile (every worker) and
`discover_hosts.sh` (running workers), both as `<pod>.<job>.<ns>.svc`; and a launcher
batch Job `<job>-launcher` whose pod has a generated name `<job>-launcher-xxxxx`. The
highest indices go on scale-down; a missing worker is created again under its name,
but a Failed one is left as it is (restartPolicy Never: mpi-operator re-creates nothing
that still exists). The MPIJob is Running only once the launcher and every worker run;
any evicted worker fails it; a failed launcher fails it. Horovod elastic in the launcher
is played by voda_testing.kube.cluster.horovod (training counts only the hosts Horovod
uses). The Job controller's retries of a failed launcher pod are not played: one
failure fails the launcher Job.

training operator release-1.9 (PyTorchJob with elasticPolicy): its webhook refuses
what kubeflow_rules.pytorchjob_errors names; worker pods `<job>-worker-<i>` and a
Service per replica of the same name; the PET_* environment torchrun reads, with the
rendezvous port of the container `pytorch` (its port `pytorchjob-port`, 23456 when
unset) and PET_MAX_RESTARTS only when `elasticPolicy.maxRestarts` is set; an HPA
(autoscaling/v2, named after the job) when `elasticPolicy.metrics` is set; failed pods
restarted under restartPolicy OnFailure/Always; the highest indices deleted on
scale-down; the replica status the /scale subresource reads. torchrun on the workers
treats a peer that leaves (scale-down, move, failure) as a failure of the worker group:
it restarts the group while it has restarts left (PET_MAX_RESTARTS, torchrun's default
0) and otherwise exits, so the kubelet restarts its container (restartCount grows).

Both honour `spec.runPolicy.suspend` (what Kueue sets until it admits a job): no pods
run (those there are deleted), the Suspended condition is True and Running False;
on resume the Suspended condition turns False and the pods are created again.
"""

from __future__ import annotations

import contextlib
import copy
import time
from typing import TYPE_CHECKING

from voda_testing.kube.cluster.horovod import ElasticLauncher
from voda_testing.kube.cluster.kubeflow_rules import (
    PYTORCH_CONTAINER,
    PYTORCH_DEFAULT_PORT,
    PYTORCH_PORT_NAME,
    aggregate,
    mpijob_defaulted,
    mpijob_errors,
    rendezvous_port,
)
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
    version = ""
    replicas_key = ""
    operator_name = ""

    def forget(self, uid: str) -> None:
        """The job is gone: drop what is kept about it."""

    def training(self, sim: ClusterSimulator, job: Obj) -> int:
        """How many workers do the job's work now."""
        return self.running_workers(sim, job)

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
        meta = job["metadata"]
        ns, name = meta["namespace"], meta["name"]
        # As the operators' UpdateStatus: against the version read, so that a condition
        # another writer set meanwhile (Voda's VodaAtMax) is never written over from a
        # stale copy; a conflict requeues the job, read afresh on the next tick.
        patch: Obj = {"status": status}
        if meta.get("resourceVersion"):
            patch["metadata"] = {"resourceVersion": meta["resourceVersion"]}
        try:
            sim.store.patch(self.resource, ns, name, patch, MERGE, subresource="status")
        except ApiError as exc:  # else: gone meanwhile
            if exc.code == 409:
                sim.dirty.add((self.resource, ns, name))

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
    version = "v2beta1"
    replicas_key = "mpiReplicaSpecs"
    operator_name = "mpi-operator"

    def __init__(self) -> None:
        self.launchers: dict[str, ElasticLauncher] = {}  # MPIJob uid -> Horovod's driver
        self.refused: dict[str, str] = {}  # MPIJob uid -> the validation message sent

    def forget(self, uid: str) -> None:
        self.launchers.pop(uid, None)
        self.refused.pop(uid, None)

    def worker_labels(self, job: Obj, index: int) -> dict[str, str]:
        return {OPERATOR_NAME: self.operator_name, JOB_NAME: job["metadata"]["name"],
                JOB_ROLE: "worker", REPLICA_INDEX: str(index)}

    def worker_pod(self, job: Obj, index: int) -> Obj:
        name = job["metadata"]["name"]
        return pod_from_template(job, self.worker_spec(job), f"{name}-worker-{index}",
                                 self.worker_labels(job, index), hostname=f"{name}-worker-{index}",
                                 subdomain=name)

    @staticmethod
    def host(pod: Obj, job: Obj) -> str:
        meta = job["metadata"]
        return f"{pod['metadata']['name']}.{meta['name']}.{meta['namespace']}.svc"

    def reconcile(self, sim: ClusterSimulator, job: Obj) -> None:
        if job["metadata"].get("deletionTimestamp"):
            return
        job = mpijob_defaulted(job)
        errors = mpijob_errors(job)
        if errors:
            self._refuse(sim, job, "Found validation errors: " + aggregate(errors))
            return
        held = job if finished(job) else self.unless_suspended(sim, job)
        if held is None:
            return
        job = held
        name, ns = job["metadata"]["name"], job["metadata"]["namespace"]
        status = self.base_status(sim, job)
        now = timestamp(sim.store.clock())
        if finished(job):
            if condition(job, "Succeeded") and job["spec"]["runPolicy"]["cleanPodPolicy"] in (
                    "Running", "All"):
                for pod in sim.pods_of(job, "worker"):
                    if not pod["metadata"].get("deletionTimestamp"):
                        sim.delete_pod(pod)
            return
        slots = int(job["spec"].get("slotsPerWorker", 1))
        if sim.store.try_get("services", ns, name) is None:
            sim.create({"apiVersion": "v1", "kind": "Service", "metadata": {
                "name": name, "namespace": ns, "labels": {"app": name},
                "ownerReferences": [owner_ref(job)]},
                "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                         "selector": {OPERATOR_NAME: self.operator_name, JOB_NAME: name}}})
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
        replicas = int(self.worker_spec(job).get("replicas", 0))
        hosts = "".join(f"{name}-worker-{i}.{name}.{ns}.svc slots={slots}\n"
                        for i in range(replicas))
        discover = "#!/bin/sh\n" + "".join(f"echo {self.host(p, job)}\n" for p in running)
        config = {"hostfile": hosts, "discover_hosts.sh": discover}
        existing = sim.store.try_get("configmaps", ns, f"{name}-config")
        if existing is None:
            sim.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
                "name": f"{name}-config", "namespace": ns, "labels": {"app": name},
                "ownerReferences": [owner_ref(job)]}, "data": config})
        elif existing.get("data") != config:
            sim.store.patch("configmaps", ns, f"{name}-config", {"data": config}, MERGE)
        launcher = self.launcher(job)
        launcher.write_script(frozenset(self.host(p, job) for p in running), time.monotonic(),
                              sim.settings.configmap_seconds)
        batch, pods = self.ensure_launcher(sim, job)
        launcher_running = sum(1 for p in pods if sim.is_running(p))
        failed = next((p for p in pods if (p.get("status") or {}).get("phase") == "Failed"),
                      None)
        if failed is not None:
            self._launcher_failed(sim, job, batch, failed, status, now)
            return
        if launcher_running and len(running) == len(workers) and not condition(job,
                                                                                "Running"):
            status["conditions"] = set_condition(status["conditions"], "Running",
                                                 "MPIJobRunning",
                                                 f"MPIJob {ns}/{name} is running.", now)
        status["replicaStatuses"] = {
            "Launcher": {"active": launcher_running},
            "Worker": {"active": len(running),
                       "failed": sum(1 for p in workers
                                     if (p.get("status") or {}).get("phase") == "Failed")}}
        self.write_status(sim, job, status)

    def _refuse(self, sim: ClusterSimulator, job: Obj, message: str) -> None:
        uid = job["metadata"]["uid"]
        if self.refused.get(uid) == message:
            return
        self.refused[uid] = message
        sim.record_event(job, "Warning", "ValidationError", message[:1024])

    def _launcher_failed(self, sim: ClusterSimulator, job: Obj, batch: Obj | None, pod: Obj,
                         status: Obj, now: str) -> None:
        ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
        pod_status = pod.get("status") or {}
        reason = f"BackoffLimitExceeded/{pod_status.get('reason') or 'Error'}"
        message = (f"Job has reached the specified backoff limit: "
                   f"{pod_status.get('message', '')}")
        if batch is not None:
            with contextlib.suppress(ApiError):
                sim.store.patch("jobs.batch", ns, batch["metadata"]["name"], {"status": {
                    "failed": 1, "active": 0, "conditions": [{
                        "type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                        "message": "Job has reached the specified backoff limit"}]}},
                    MERGE, subresource="status")
        status["conditions"] = set_condition(status["conditions"], "Failed", reason,
                                             message, now)
        status["completionTime"] = now
        status["replicaStatuses"] = {"Launcher": {"failed": 1}, "Worker": {}}
        self.write_status(sim, job, status)
        sim.record_event(job, "Warning", reason, f"MPIJob {ns}/{name}: {message}")

    def launcher(self, job: Obj) -> ElasticLauncher:
        uid = job["metadata"]["uid"]
        if uid not in self.launchers:
            spec = (job["spec"].get(self.replicas_key) or {}).get("Launcher") or {}
            containers = ((spec.get("template") or {}).get("spec") or {}).get(
                "containers") or [{}]
            self.launchers[uid] = ElasticLauncher.of(containers[0])
        return self.launchers[uid]

    def launcher_pods(self, sim: ClusterSimulator, job: Obj) -> tuple[Obj | None, list[Obj]]:
        ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
        batch = sim.store.try_get("jobs.batch", ns, f"{name}-launcher")
        if batch is None:
            return None, []
        uid = batch["metadata"]["uid"]
        return batch, sim.pods_of_owner(ns, name, "launcher", uid)

    def ensure_launcher(self, sim: ClusterSimulator, job: Obj) -> tuple[Obj | None, list[Obj]]:
        """The launcher batch Job and its pods; its pod created as the Job controller
        would (a generated name)."""
        name, ns = job["metadata"]["name"], job["metadata"]["namespace"]
        batch, pods = self.launcher_pods(sim, job)
        spec = (job["spec"].get(self.replicas_key) or {}).get("Launcher") or {}
        labels = {OPERATOR_NAME: self.operator_name, JOB_NAME: name, JOB_ROLE: "launcher"}
        if batch is None:
            template = copy.deepcopy(spec.get("template") or {})
            template.setdefault("metadata", {}).setdefault("labels", {}).update(labels)
            pod_spec = template.setdefault("spec", {})
            pod_spec["restartPolicy"] = spec.get("restartPolicy", "OnFailure")
            pod_spec["hostname"] = f"{name}-launcher"
            pod_spec["subdomain"] = name
            batch = sim.create({"apiVersion": "batch/v1", "kind": "Job", "metadata": {
                "name": f"{name}-launcher", "namespace": ns, "labels": labels,
                "ownerReferences": [owner_ref(job)]},
                "spec": {"backoffLimit": 6, "template": template}})
            if batch is None:
                return None, []
        if not pods:
            pod = pod_from_template(batch, {"template": batch["spec"]["template"]}, "", labels)
            del pod["metadata"]["name"]
            pod["metadata"]["generateName"] = f"{name}-launcher-"
            created = sim.create(pod)
            pods = [created] if created is not None else []
        return batch, pods

    def training(self, sim: ClusterSimulator, job: Obj) -> int:
        """How many workers Horovod trains on now; fails the launcher after its timeout."""
        _, pods = self.launcher_pods(sim, job)
        launcher_pod = next((p for p in pods if sim.is_running(p)), None)
        if launcher_pod is None:
            return 0
        running = {self.host(p, job) for p in sim.pods_of(job, "worker") if sim.is_running(p)}
        driver = self.launcher(job)
        hosts = driver.step(running, time.monotonic())
        if driver.failure is not None:
            sim.set_phase(launcher_pod, "Failed", "Error", driver.failure)
        return len(hosts)

    def running_workers(self, sim: ClusterSimulator, job: Obj) -> int:
        _, pods = self.launcher_pods(sim, job)
        if not any(sim.is_running(p) for p in pods):
            return 0
        return super().running_workers(sim, job)

    def complete(self, sim: ClusterSimulator, job: Obj) -> None:
        name, ns = job["metadata"]["name"], job["metadata"]["namespace"]
        now = timestamp(sim.store.clock())
        batch, pods = self.launcher_pods(sim, job)
        for pod in pods:
            if sim.is_running(pod):
                sim.set_phase(pod, "Succeeded")
        if batch is not None:
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
    version = "v1"
    replicas_key = "pytorchReplicaSpecs"
    operator_name = "pytorchjob-controller"

    def __init__(self) -> None:
        self.restarts: dict[str, int] = {}  # job uid -> worker-group restarts used

    def forget(self, uid: str) -> None:
        self.restarts.pop(uid, None)

    def worker_labels(self, job: Obj, index: int) -> dict[str, str]:
        return {OPERATOR_NAME: self.operator_name, JOB_NAME: job["metadata"]["name"],
                REPLICA_TYPE: "worker", REPLICA_INDEX: str(index)}

    def worker_pod(self, job: Obj, index: int) -> Obj:
        name = job["metadata"]["name"]
        pod = pod_from_template(job, self.worker_spec(job), f"{name}-worker-{index}",
                                self.worker_labels(job, index))
        elastic = job["spec"].get("elasticPolicy") or {}
        replicas = int(self.worker_spec(job).get("replicas", 1) or 1)
        env = [{"name": "PYTHONUNBUFFERED", "value": "0"},
               {"name": "PET_RDZV_ENDPOINT",
                "value": f"{elastic.get('rdzvHost', f'{name}-worker-0')}:"
                         f"{rendezvous_port(job)}"},
               {"name": "PET_RDZV_BACKEND", "value": elastic.get("rdzvBackend", "c10d")},
               {"name": "PET_NNODES", "value": f"{elastic.get('minReplicas', replicas)}:"
                                               f"{elastic.get('maxReplicas', replicas)}"},
               {"name": "PET_NPROC_PER_NODE", "value": str(job["spec"].get("nprocPerNode",
                                                                           "auto"))}]
        if elastic.get("maxRestarts") is not None:
            env.append({"name": "PET_MAX_RESTARTS", "value": str(elastic["maxRestarts"])})
        for container in pod["spec"].get("containers") or []:
            container["env"] = [*(container.get("env") or []), *env]
            if container.get("name") == PYTORCH_CONTAINER and not any(
                    p.get("name") == PYTORCH_PORT_NAME for p in container.get("ports") or []):
                container["ports"] = [*(container.get("ports") or []), {
                    "name": PYTORCH_PORT_NAME, "containerPort": PYTORCH_DEFAULT_PORT,
                    "protocol": "TCP"}]
        return pod

    def reconcile(self, sim: ClusterSimulator, job: Obj) -> None:
        # Taken first, so that workers a suspension or the job's end stopped are no peers
        # lost to the group a resumed job starts afresh.
        left = sim.departed.pop((job["metadata"]["namespace"], job["metadata"]["name"]), set())
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
        self.sync_services(sim, job)
        self.sync_hpa(sim, job)
        running = [p for p in workers if sim.is_running(p)]
        self.torchrun(sim, job, running, left)
        if running and not condition(job, "Running"):
            status["conditions"] = set_condition(status["conditions"], "Running",
                                                 "PyTorchJobRunning",
                                                 f"PyTorchJob {ns}/{name} is running.", now)
        selector = f"{JOB_NAME}={name},{OPERATOR_NAME}={self.operator_name},{REPLICA_TYPE}=worker"
        status["replicaStatuses"] = {"Worker": {"active": len(running), "selector": selector}}
        self.write_status(sim, job, status)

    def sync_services(self, sim: ClusterSimulator, job: Obj) -> None:
        """A headless Service per worker replica, `<job>-worker-<i>`."""
        name, ns = job["metadata"]["name"], job["metadata"]["namespace"]
        replicas = int(self.worker_spec(job).get("replicas", 1) or 0)
        for i in range(replicas):
            if sim.store.try_get("services", ns, f"{name}-worker-{i}") is None:
                sim.create({"apiVersion": "v1", "kind": "Service", "metadata": {
                    "name": f"{name}-worker-{i}", "namespace": ns,
                    "labels": self.worker_labels(job, i), "ownerReferences": [owner_ref(job)]},
                    "spec": {"clusterIP": "None", "selector": self.worker_labels(job, i),
                             "ports": [{"name": PYTORCH_PORT_NAME,
                                        "port": rendezvous_port(job)}]}})
        services, _ = sim.store.list("services", ns, f"{JOB_NAME}={name},{REPLICA_TYPE}=worker")
        for service in services:
            index = _index(service)
            if index >= replicas:
                with contextlib.suppress(ApiError):
                    sim.store.delete("services", ns, service["metadata"]["name"])

    def sync_hpa(self, sim: ClusterSimulator, job: Obj) -> None:
        """The training operator autoscales a job whose elasticPolicy has metrics."""
        elastic = job["spec"].get("elasticPolicy") or {}
        name, ns = job["metadata"]["name"], job["metadata"]["namespace"]
        if not elastic.get("metrics") or sim.store.try_get(
                "horizontalpodautoscalers.autoscaling", ns, name) is not None:
            return
        sim.create({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                    "metadata": {"name": name, "namespace": ns,
                                 "ownerReferences": [owner_ref(job)]},
                    "spec": {"scaleTargetRef": {"apiVersion": job["apiVersion"],
                                                "kind": job["kind"], "name": name},
                             "minReplicas": elastic.get("minReplicas"),
                             "maxReplicas": elastic.get("maxReplicas"),
                             "metrics": elastic["metrics"]}})

    def torchrun(self, sim: ClusterSimulator, job: Obj, running: list[Obj],
                 left: set[str]) -> None:
        """A worker that left the group (`left`: stopped running since the last look) fails
        it for torchrun on the others: they restart the group while restarts are left, else
        exit and their containers restart."""
        uid = job["metadata"]["uid"]
        survivors = {p["metadata"]["name"] for p in running} - left
        if not left or not survivors:
            return
        self.restarts[uid] = self.restarts.get(uid, 0) + 1
        limit = int((job["spec"].get("elasticPolicy") or {}).get("maxRestarts") or 0)
        if self.restarts[uid] <= limit:
            return
        self.restarts[uid] = 0  # the restarted containers run torchrun afresh
        for pod in running:
            if pod["metadata"]["name"] in survivors:
                sim.restart_container(pod, "torchrun: max restarts exceeded "
                                           f"({limit}); a peer left the worker group")

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


def default_operators() -> tuple[Operator, ...]:
    """Fresh operators (they keep per-job state) for one simulator."""
    return (MPIOperator(), PyTorchOperator())

"""Kueue's job integration, as far as a job's owner and a scheduler beside it can tell.

Kueue (kubernetes-sigs/kueue) gates MPIJobs and PyTorchJobs through their
`spec.runPolicy.suspend`: its webhook suspends every such job that names a
LocalQueue (label `kueue.x-k8s.io/queue-name`), and, with
`manageJobsWithoutQueueName`, every one in the namespaces it manages; the job stays
suspended (Kueue suspends it again if anyone else resumes it) until its Workload is
admitted against a ClusterQueue's quota, when Kueue sets `suspend: false`.

The stand-in plays that in the simulator's pass over a job, before its operator
sees it, as the webhook does at creation: `Kueue().install(sim)`; `admit(...)` plays
the admission. Workloads, ClusterQueues and quota are not played: a test admits.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from voda_testing.kube.cluster.nodes import Obj
from voda_testing.kube.cluster.operators import Operator
from voda_testing.kube.errors import ApiError
from voda_testing.kube.patches import MERGE

if TYPE_CHECKING:
    from voda_testing.kube.cluster.simulator import ClusterSimulator

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


class Kueue:
    def __init__(self, managed_namespaces: Iterable[str] = ()) -> None:
        self.managed_namespaces = frozenset(managed_namespaces)  # manageJobsWithoutQueueName
        self.admitted: set[str] = set()  # uids of admitted jobs
        self.suspensions = 0  # how many times it suspended a job

    def install(self, sim: ClusterSimulator) -> Kueue:
        sim.operators = {r: _Queued(op, self) for r, op in sim.operators.items()}
        return self

    def manages(self, job: Obj) -> bool:
        meta = job["metadata"]
        return bool((meta.get("labels") or {}).get(QUEUE_LABEL)) or (
            meta.get("namespace") in self.managed_namespaces)

    def hold(self, sim: ClusterSimulator, resource: str, job: Obj) -> Obj:
        """The job as the operator should see it: suspended unless admitted."""
        if not self.manages(job) or job["metadata"]["uid"] in self.admitted:
            return job
        if ((job.get("spec") or {}).get("runPolicy") or {}).get("suspend"):
            return job
        meta = job["metadata"]
        try:
            held = sim.store.patch(resource, meta["namespace"], meta["name"],
                                   {"spec": {"runPolicy": {"suspend": True}}}, MERGE)
        except ApiError:
            return job
        self.suspensions += 1
        return held

    def admit(self, sim: ClusterSimulator, resource: str, namespace: str, name: str) -> None:
        """The job's Workload is admitted: Kueue resumes it."""
        job = sim.store.get(resource, namespace, name)
        self.admitted.add(job["metadata"]["uid"])
        sim.store.patch(resource, namespace, name, {"spec": {"runPolicy": {"suspend": False}}},
                        MERGE)


class _Queued:
    """An operator behind Kueue: it sees a job only once Kueue had its say."""

    def __init__(self, operator: Operator, kueue: Kueue) -> None:
        self.operator = operator
        self.kueue = kueue

    def reconcile(self, sim: ClusterSimulator, job: Obj) -> None:
        self.operator.reconcile(sim, self.kueue.hold(sim, self.operator.resource, job))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.operator, name)

"""Settings of the Kubernetes backend, read at the edge (config.toml [kubernetes],
VODA_K8S_* variables, `voda serve` flags)."""

from __future__ import annotations

from dataclasses import dataclass, field

GATE = "voda.io/placement"
PLAN_ANNOTATION = "voda.io/plan"
JOB_LABEL = "voda.io/job"
MANAGED_LABEL = "app.kubernetes.io/managed-by"
MANAGER = "voda"
HOSTNAME = "kubernetes.io/hostname"


@dataclass(frozen=True)
class ElectorSettings:
    """client-go's defaults; tests shrink them."""

    lease_name: str = "voda-leader"
    lease_seconds: float = 15.0
    renew_deadline_seconds: float = 10.0
    retry_seconds: float = 2.0
    identity: str = ""  # default: the pod name (HOSTNAME) plus a random suffix

    def problems(self) -> list[str]:
        out = []
        if not self.lease_seconds > self.renew_deadline_seconds:
            out.append("lease_seconds: must be greater than renew_deadline_seconds")
        if not self.renew_deadline_seconds > self.retry_seconds:
            out.append("renew_deadline_seconds: must be greater than retry_seconds")
        if not self.retry_seconds > 0:
            out.append("retry_seconds: must be positive")
        return out


@dataclass(frozen=True)
class KubernetesSettings:
    namespace: str = "default"  # the training jobs' (never Voda's own: see voda_namespace)
    # Voda's own namespace: its leader Lease, ServiceAccounts and Secrets. Empty: in a pod
    # (in-cluster configuration), the pod's; elsewhere `namespace`. Set, or in a pod, the
    # jobs' namespace must differ from it.
    voda_namespace: str = ""
    # What a job's pods may not use (isolation.py): Voda's ServiceAccounts and Secrets.
    service_accounts: tuple[str, ...] = ("voda", "voda-pod-scheduler")
    secrets: tuple[str, ...] = ("voda-db", "voda-tokens", "voda-postgres",
                                "voda-pod-scheduler-token")
    kubeconfig: str = ""  # empty: in-cluster configuration
    gpu_resource: str = "nvidia.com/gpu"
    gpu_type_label: str = "voda.io/gpu-type"
    # Ordered from the widest domain to the node; the last level names the node.
    topology_labels: tuple[str, ...] = ("voda.io/spine", "voda.io/leaf", HOSTNAME)
    # A worker pinned to a node but still unschedulable after this long is a refusal of
    # that node: it is excluded for the job and the engine plans again.
    unschedulable_seconds: float = 60.0
    # ...and is offered to the job again after this long, or once the node changes.
    refused_node_seconds: float = 600.0
    # A job whose reconciliation failed transiently (429, 5xx, timeouts) is tried again
    # after this, doubled on each failure in a row up to max_backoff_seconds (jittered).
    backoff_seconds: float = 0.5
    max_backoff_seconds: float = 60.0
    # Restarts after an eviction failed an MPIJob, before Voda reports it failed.
    max_evictions: int = 3
    request_timeout_seconds: float = 10.0
    workers: int = 8  # jobs reconciled at once (each with its own requests)
    watch_seconds: int = 300
    # /livez fails once the reconciler's loop (which goes round at least every resync)
    # has not gone round for this long: the kubelet then restarts a wedged process.
    liveness_seconds: float = 60.0
    # Set (the Service's name, e.g. voda): the leader writes its own address into that
    # selector-less Service's Endpoints (POD_IP, the serve port), so only it gets traffic
    # while the standby is Ready too; it withdraws it when it steps down.
    leader_service: str = ""
    # A watch silent this long (no event, no bookmark; kube-apiserver bookmarks every
    # minute and just before a watch's end) is taken for a dead connection and reopened.
    watch_idle_seconds: float = 60.0
    list_page_size: int = 500  # objects per page when listing (limit/continue)
    # How long `voda serve` waits for the first lists (100,000 pods take about a minute).
    sync_timeout_seconds: float = 600.0
    # The URL at which the jobs' pods reach the service (e.g. http://voda.voda.svc:8080).
    # Set: each job gets a Secret with its report token and the env VODA_REPORT, VODA_JOB
    # and VODA_TOKEN in every container. Empty: nothing is injected.
    report_url: str = ""
    # How often a running job's report Secret is checked (and recreated when missing).
    report_secret_check_seconds: float = 30.0
    # horovodrun --blacklist-cooldown-range LOW HIGH: a worker's host blacklisted after
    # its process died (a move, a replaced failed worker) may rejoin after LOW..HIGH s.
    horovod_blacklist_cooldown: tuple[int, int] = (10, 60)
    # What a change of an MPIJob's workers costs beyond the restart the policies charge: the
    # launcher's Horovod discovers the new hosts only once the kubelet has propagated the
    # hostfile ConfigMap to its volume, at the kubelet's next periodic sync (syncFrequency,
    # 1 min by default; with the default Watch change detection the cache adds little):
    # 30 s on average, up to about 60 s (90 s with a TTL cache). See docs/design/006.
    mpijob_rescale_delay_seconds: float = 30.0
    elector: ElectorSettings = field(default_factory=ElectorSettings)

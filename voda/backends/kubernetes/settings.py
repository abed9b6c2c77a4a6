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
    namespace: str = "default"
    kubeconfig: str = ""  # empty: in-cluster configuration
    gpu_resource: str = "nvidia.com/gpu"
    gpu_type_label: str = "voda.io/gpu-type"
    # Ordered from the widest domain to the node; the last level names the node.
    topology_labels: tuple[str, ...] = ("voda.io/spine", "voda.io/leaf", HOSTNAME)
    # A gated worker pinned to a node but still unschedulable after this long is
    # deleted and pinned again.
    unschedulable_seconds: float = 60.0
    # Restarts after an eviction failed an MPIJob, before Voda reports it failed.
    max_evictions: int = 3
    request_timeout_seconds: float = 10.0
    workers: int = 8  # jobs reconciled at once (each with its own requests)
    watch_seconds: int = 300
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
    elector: ElectorSettings = field(default_factory=ElectorSettings)

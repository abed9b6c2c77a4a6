"""Where a job's workers fit, counted as kube-scheduler counts: the worker template's
taints and tolerations, nodeSelector and required node affinity (voda.podsched.filters,
the pure filters the secondary scheduler uses), and its requests of CPU, memory, pods and
any other resource against what a node's bound pods leave.

A worker is the job's Worker pod template (one GPU: Voda's unit) with its requests as
Kubernetes makes them (voda.podsched.read.pod_requests: a limit alone is the request,
init containers, overhead). The Node pinning adds (`kubernetes.io/hostname`) is not part
of the template: the filters see only what the user wrote.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from voda.backends.kubernetes.adapters import adapter_for
from voda.backends.kubernetes.manifests import kubeflow_document
from voda.podsched.filters import static_problem
from voda.podsched.model import PODS, NodeState, Pod, Toleration
from voda.podsched.read import ObjectError, read_pod

Obj = dict[str, Any]


def worker_pod(document: Obj, gpu_resource: str) -> Pod | None:
    """One worker of the job `document` (a submitted document or the job object) as the
    filters see it; None when it has no worker template Voda can read."""
    try:
        source = kubeflow_document(document)
        adapter = adapter_for(str(source.get("kind")), gpu_resource)
        worker = (source.get("spec") or {}).get(adapter.replicas_key, {}).get("Worker") or {}
        template = worker.get("template") or {}
        spec = dict(template.get("spec") or {})
        if not spec.get("containers"):
            return None
        pod = read_pod({"metadata": {"name": "worker"}, "spec": spec})
    except (ObjectError, ValueError, KeyError, TypeError, AttributeError):
        return None
    requests = {r: v for r, v in pod.requests.items() if r != gpu_resource}
    requests[gpu_resource] = 1  # whatever the template says, Voda renders one GPU
    requests[PODS] = 1
    # Clusters that taint GPU nodes `nvidia.com/gpu:NoSchedule` usually run the
    # ExtendedResourceToleration admission plugin, which gives every pod requesting the
    # resource that toleration: assumed here (where the plugin is off, kube-scheduler
    # refuses the pinned worker and the node is excluded for the job then).
    tolerations = (*pod.tolerations, Toleration(gpu_resource, "Exists", "", "NoSchedule"))
    return Pod(pod.namespace, pod.name, requests=requests, node_selector=pod.node_selector,
               affinity=pod.affinity, tolerations=tolerations)


def room(worker: Pod, node: NodeState, used: Mapping[str, int]) -> int:
    """How many more such workers fit in what `used` leaves of the node's allocatable
    (0 when a filter refuses the node)."""
    if static_problem(worker, node) is not None:
        return 0
    most: int | None = None
    for resource, amount in worker.requests.items():
        if amount <= 0:
            continue
        fits = max(0, node.allocatable.get(resource, 0) - used.get(resource, 0)) // amount
        most = fits if most is None else min(most, fits)
    return most or 0


def may_use(worker: Pod, node: NodeState) -> bool:
    """Whether the node could take one such worker at all (empty, filters passed)."""
    return room(worker, node, {}) > 0


def widest(workers: Iterable[Pod]) -> dict[str, int]:
    """Per resource, the most any of `workers` requests."""
    out: dict[str, int] = {}
    for worker in workers:
        for resource, amount in worker.requests.items():
            out[resource] = max(out.get(resource, 0), amount)
    return out


Signature = tuple[Any, ...]


def signature(worker: Pod) -> Signature:
    """What the filters read of a worker: jobs of one template share their answers."""
    return (tuple(sorted(worker.requests.items())), tuple(sorted(worker.node_selector.items())),
            worker.affinity, worker.tolerations)


class JobFit:
    """Each job's worker template, and which nodes each template may use, remembered per
    node as last seen (worked out again only for a node that changed). Jobs of one
    template (the same signature) share every answer."""

    def __init__(self, gpu_resource: str) -> None:
        self.gpu_resource = gpu_resource
        self.templates: dict[str, int | None] = {}  # job -> its template
        self._ids: dict[Signature, int] = {}
        self._pods: dict[int, Pod] = {}
        self._answers: dict[tuple[int, str], tuple[object, bool]] = {}
        self._allowed: dict[int, tuple[list[Any], frozenset[str]]] = {}
        self._shapes: tuple[frozenset[int], list[Any], dict[str, dict[str, int]]] | None = None

    def template(self, job: str, source: Callable[[], Obj | None]) -> int | None:
        """The job's template, read from `source()` (its document or object) the first time
        it gives one; None when it has no worker Voda can read."""
        if job not in self.templates:
            document = source()
            if document is None:
                return None
            worker = worker_pod(document, self.gpu_resource)
            tid = None
            if worker is not None:
                tid = self._ids.setdefault(signature(worker), len(self._ids))
                self._pods.setdefault(tid, worker)
            self.templates[job] = tid
        return self.templates[job]

    def worker(self, template: int) -> Pod:
        return self._pods[template]

    def forget(self, job: str) -> None:
        self.templates.pop(job, None)

    def may_use(self, template: int, info: Any) -> bool:
        """`info`: the cluster view's NodeInfo (frozen: a new one when the node changed)."""
        key = (template, info.name)
        known = self._answers.get(key)
        if known is not None and known[0] is info:
            return known[1]
        answer = may_use(self._pods[template], info.state())
        self._answers[key] = (info, answer)
        return answer

    def allowed(self, template: int, infos: list[Any]) -> frozenset[str]:
        """The nodes of `infos` the template may use."""
        known = self._allowed.get(template)
        if known is not None and _same(known[0], infos):
            return known[1]
        answer = frozenset(i.name for i in infos if self.may_use(template, i))
        self._allowed[template] = (list(infos), answer)
        return answer

    def shapes(self, templates: Iterable[int], infos: list[Any]) -> dict[str, dict[str, int]]:
        """Per node, the widest worker (GPUs aside) of the templates that may use it: what
        one more worker needs there, counted so that none is promised room it lacks."""
        wanted = frozenset(templates)
        if self._shapes is not None and self._shapes[0] == wanted and _same(
                self._shapes[1], infos):
            return self._shapes[2]
        cache: dict[frozenset[int], dict[str, int]] = {}
        out = {}
        for info in infos:
            fitting = frozenset(t for t in wanted if self.may_use(t, info))
            if fitting:
                if fitting not in cache:
                    shape = widest(self._pods[t] for t in fitting)
                    shape.pop(self.gpu_resource, None)
                    cache[fitting] = shape
                out[info.name] = cache[fitting]
        self._shapes = (wanted, list(infos), out)
        return out


def _same(a: list[Any], b: list[Any]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))

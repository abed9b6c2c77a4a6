"""What the Kubernetes backend does when the API server says no.

- a pin or a move that fails (5xx past the client's retries, 422) is not noted as done:
  the worker is pinned on a later pass instead of staying gated for good;
- a permanent refusal (400, 403, 422, a webhook's denial, 404 on create) fails the job
  with the server's message, and a Warning Event names it on the job object;
- a transient one (5xx) is tried again after a per-job exponential backoff, never in a
  hot loop, and the job goes on once the server answers again."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.test_k8s_backend import document, job, running_on, start
from voda.backends.kubernetes.backend import KubernetesBackend
from voda.backends.kubernetes.refusals import Backoff
from voda.backends.kubernetes.settings import KubernetesSettings
from voda.engine.events import EventKind
from voda_testing.kube import Fault
from voda_testing.kube.harness import FakeCluster, eventually

WEBHOOK = ('admission webhook "validation.pytorchjob.kubeflow.org" denied the request: '
           'PyTorchJobSpec is not valid: There is no container named pytorch in Worker')


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[FakeCluster]:
    with FakeCluster.running(tmp_path, nodes=2) as c:
        yield c


@pytest.fixture
def backend(cluster: FakeCluster) -> KubernetesBackend:
    return cluster.backend()


def failures(backend: KubernetesBackend, seen: list[Any]) -> list[Any]:
    seen.extend(e for e in backend.events() if e.kind is EventKind.JOB_FAILED)
    return seen


def warnings_on(cluster: FakeCluster, name: str) -> list[dict[str, Any]]:
    events, _ = cluster.server.store.list("events", "default")
    return [e for e in events if e["involvedObject"]["name"] == name and e["type"] == "Warning"]


@pytest.mark.parametrize("status", [500, 422])
def test_a_failed_pin_is_tried_again_instead_of_leaving_the_worker_gated(
        cluster: FakeCluster, backend: KubernetesBackend, status: int) -> None:
    # 500: more times than the client retries one request; 422: the pod changed under us
    cluster.server.add_fault(Fault(status, verb="patch", resource="pods", times=6))
    start(backend, "g", "mpijob", (("n0", 1), ("n1", 1)))
    eventually(lambda: running_on(cluster, "g") == {0: "n0", 1: "n1"}, timeout=60)
    assert not cluster.server.faults  # every injected failure was met


def test_a_failed_move_is_tried_again(cluster: FakeCluster, backend: KubernetesBackend) -> None:
    j = start(backend, "mv", "mpijob", (("n0", 1),))
    eventually(lambda: running_on(cluster, "mv") == {0: "n0"})
    cluster.server.add_fault(Fault(503, verb="delete", resource="pods", times=6))
    backend.scale(j, (("n1", 1),))
    eventually(lambda: running_on(cluster, "mv") == {0: "n1"}, timeout=60)


@pytest.mark.parametrize("status, verb, message", [
    (422, "create", WEBHOOK),
    (403, "create", 'pytorchjobs.kubeflow.org is forbidden: User "system:serviceaccount:voda:'
                    'voda" cannot create resource "pytorchjobs"'),
    (404, "create", 'the server could not find the requested resource'),
    (400, "patch", 'admission webhook "kueue" denied the request: spec: Invalid value'),
])
def test_a_permanent_refusal_fails_the_job_with_the_servers_message(
        cluster: FakeCluster, backend: KubernetesBackend, status: int, verb: str,
        message: str) -> None:
    j = start(backend, "p", "pytorchjob", (("n0", 1),))
    if verb == "patch":
        eventually(lambda: running_on(cluster, "p") == {0: "n0"})
    cluster.server.add_fault(Fault(status, verb=verb, resource="pytorchjobs", times=None,
                                   message=message))
    if verb == "patch":
        backend.scale(j, (("n0", 2),))
    seen: list[Any] = []
    failed = eventually(lambda: failures(backend, seen), timeout=60)
    assert [e.job for e in failed] == ["p"]
    assert message in failed[0].data["reason"]
    assert f"({status})" in failed[0].data["reason"]
    posted = eventually(lambda: warnings_on(cluster, "p"))
    assert message in posted[0]["message"]
    assert posted[0]["involvedObject"]["kind"] == "PyTorchJob"
    assert backend.plan("p") == {}  # the failed job is not tried again


def test_a_persistent_server_error_backs_off_per_job_and_the_job_goes_on_after_it(
        cluster: FakeCluster) -> None:
    settings = KubernetesSettings(backoff_seconds=0.2, max_backoff_seconds=1.6)
    # one attempt per request, so each request the server sees is one reconcile pass
    backend = KubernetesBackend(cluster.api(attempts=1), settings, resync_seconds=0.1)
    backend.watch()
    cluster.backends.append(backend)
    cluster.server.add_fault(Fault(500, verb="create", resource="mpijobs", times=None))
    backend.specs["b"] = document("mpijob")
    backend.start(job("b"), (("n0", 1),))

    def creates() -> list[float]:
        return [r.time for r in list(cluster.server.requests)
                if r.verb == "create" and r.resource == "mpijobs"]

    eventually(lambda: len(creates()) >= 6, timeout=60)
    times = creates()
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # doubling from 0.1-0.2 s to the cap of 0.8-1.6 s: no hot loop, however long it lasts
    assert gaps[-1] >= 0.7, gaps
    assert gaps[-1] > gaps[0], gaps
    assert not [e for e in backend.events() if e.kind is EventKind.JOB_FAILED]
    cluster.server.clear_faults()
    eventually(lambda: running_on(cluster, "b") == {0: "n0"}, timeout=60)


def test_the_backoff_doubles_to_its_cap_with_jitter_and_resets() -> None:
    backoff = Backoff(base=1.0, cap=8.0, jitter=lambda: 1.0)
    assert [backoff.failed("j", 0.0) for _ in range(6)] == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert not backoff.due("j", 7.9) and backoff.due("j", 8.0) and backoff.due("other", 0.0)
    assert backoff.next_due({"j", "other"}, 5.0) == 3.0
    backoff.succeeded("j")
    assert backoff.due("j", 0.0) and backoff.next_due({"j"}, 0.0) is None
    low = Backoff(base=1.0, cap=8.0, jitter=lambda: 0.0)
    assert low.failed("j", 0.0) == 0.5  # jitter: half to all of the delay


def test_the_refusal_is_the_failure_reason_voda_describe_and_the_dashboard_show(
        cluster: FakeCluster, backend: KubernetesBackend, tmp_path: Path) -> None:
    import yaml

    from voda.api.service import Service
    from voda.config import ServerSettings, User
    from voda.spec import parse_submission

    service = Service(ServerSettings(db=f"sqlite:///{tmp_path / 'v.db'}",
                                     backend="kubernetes"), backend)
    service.start()
    admin = User("root", admin=True)
    cluster.server.add_fault(Fault(422, verb="create", resource="pytorchjobs", times=None,
                                   message=WEBHOOK))
    accepted, _ = service.submit(parse_submission(yaml.safe_dump(document("pytorchjob"))
                                                  .encode()), admin)

    def failed() -> dict[str, Any] | None:
        service.tick()
        detail = service.get(accepted["name"], admin)
        return detail if detail["status"] == "Failed" else None
    detail = eventually(failed, timeout=60)
    assert WEBHOOK in detail["failure_reason"]  # `voda describe` prints it as "Failure"
    service.close()


def test_a_report_secret_refused_for_good_fails_the_job_before_its_object_is_made(
        cluster: FakeCluster) -> None:
    backend = cluster.backend(KubernetesSettings(report_url="http://voda.voda.svc:8470"))
    assert backend.report_tokens is not None
    backend.report_tokens["s"] = "vr1.report-token"
    forbidden = ('secrets is forbidden: User "system:serviceaccount:voda:voda" cannot create '
                 'resource "secrets" in API group "" in the namespace "default"')
    cluster.server.add_fault(Fault(403, verb="create", resource="secrets", times=None,
                                   message=forbidden))
    start(backend, "s", "mpijob", (("n0", 1),))
    seen: list[Any] = []
    (failed,) = eventually(lambda: failures(backend, seen), timeout=60)
    assert forbidden in failed.data["reason"]
    assert not cluster.server.store.list("mpijobs", "default")[0]

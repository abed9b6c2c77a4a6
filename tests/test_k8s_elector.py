"""The Lease elector fails closed: a leader that cannot renew stops acting before a
standby can take over, so there is never a second leader."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from urllib.parse import parse_qs

import pytest

from voda.backends.kubernetes.api import Kind, KubeApi, NotLeader, Unavailable
from voda.backends.kubernetes.elector import LeaseElector, activate, active_fence
from voda.backends.kubernetes.settings import ElectorSettings
from voda_testing.kube import FakeApiServer, Fault
from voda_testing.kube.deadline import parse_go_duration
from voda_testing.kube.harness import eventually

FAST = ElectorSettings(lease_name="voda-test", lease_seconds=2.0, renew_deadline_seconds=1.0,
                       retry_seconds=0.2)


@pytest.fixture
def make(fake_api: FakeApiServer, namespace: str) -> Iterator:
    made: list[LeaseElector] = []

    def factory(identity: str, lost: threading.Event | None = None) -> LeaseElector:
        api = KubeApi.connect(str(fake_api.kubeconfig), attempts=1)
        elector = LeaseElector(api, namespace, ElectorSettings(
            **{**FAST.__dict__, "identity": identity}),
            on_lost=(lost.set if lost is not None else None))
        made.append(elector)
        return elector

    yield factory
    for elector in made:
        elector.stop()


class TwoLeaders:
    """Samples both electors' fences until stopped; any moment both may act is noted."""

    def __init__(self, a: LeaseElector, b: LeaseElector) -> None:
        self.both = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.a, self.b = a, b
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            if self.a.may_act() and self.b.may_act():
                self.both += 1

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.both


def test_one_leader_and_a_standby_that_takes_over_when_it_dies(make) -> None:
    a, b = make("a"), make("b")
    assert a.acquire()
    a.start_renewing()
    stop_b = threading.Event()
    got = []
    thread = threading.Thread(target=lambda: got.append(b.acquire(stop_b)))
    thread.start()
    time.sleep(1.0)
    assert a.may_act() and not b.may_act() and not got  # renewals keep the lease
    watch = TwoLeaders(a, b)
    a.stop()  # dies: no release, no renewals
    died = time.monotonic()
    thread.join(10)
    took_over = time.monotonic() - died
    assert got == [True] and b.may_act()
    assert took_over <= FAST.lease_seconds + 0.3
    assert watch.stop() == 0


@pytest.mark.parametrize("mode", ["refuse", "hang"])
def test_a_leader_cut_off_from_the_api_server_stops_before_the_standby_starts(
        make, fake_api: FakeApiServer, mode: str) -> None:
    lost = threading.Event()
    a, b = make("a", lost), make("b")
    assert a.acquire()
    a.start_renewing()
    watch = TwoLeaders(a, b)
    with fake_api.outage(mode):
        assert lost.wait(FAST.renew_deadline_seconds + FAST.retry_seconds + 1.0)
        cut = time.monotonic()
        assert not a.may_act()
    assert b.acquire()
    assert time.monotonic() - cut < FAST.lease_seconds + 1.0
    assert watch.stop() == 0
    assert a.failed_renewals > 0


def test_every_failed_renewal_counts(make, fake_api: FakeApiServer) -> None:
    lost = threading.Event()
    a = make("a", lost)
    assert a.acquire()
    a.start_renewing()
    fake_api.add_fault(Fault(500, verb="update", resource="leases", times=None))
    try:
        assert lost.wait(3.0)
    finally:
        fake_api.clear_faults()
    assert not a.may_act() and a.failed_renewals >= 3


def test_a_released_lease_is_taken_at_once(make) -> None:
    a, b = make("a"), make("b")
    assert a.acquire()
    a.start_renewing()
    stop_b = threading.Event()
    started = time.monotonic()
    assert not b._try_acquire_or_renew()
    assert a.release()
    assert not a.may_act()
    assert b.acquire(stop_b)
    assert time.monotonic() - started < FAST.retry_seconds * 3


# ----- the fence covers writes in flight ----------------------------------------------------------
CONFIGMAPS = Kind("", "v1", "configmaps")


def configmap(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
            "data": {"k": "v"}}


def fenced_api(kubeconfig: str, elector: LeaseElector, **kwargs) -> KubeApi:
    """A client whose writes pass the fence `voda serve` gives the backend."""
    activate(elector)
    try:
        return KubeApi.connect(kubeconfig, fence=active_fence(), **kwargs)
    finally:
        activate(None)


class Clock:
    """A monotonic clock that moves only when told (or when the client sleeps)."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def leading_on(clock: Clock, fake_api: FakeApiServer, namespace: str) -> LeaseElector:
    elector = LeaseElector(KubeApi.connect(str(fake_api.kubeconfig), attempts=1), namespace,
                           ElectorSettings(**{**FAST.__dict__, "identity": "a"}),
                           monotonic=clock)
    assert elector.acquire()
    return elector


def test_a_write_delayed_past_the_lease_never_lands_after_a_standby_took_over(
        make, fake_api: FakeApiServer, namespace: str) -> None:
    a, b = make("a"), make("b")
    assert a.acquire()
    a.start_renewing()
    api = fenced_api(str(fake_api.kubeconfig), a, attempts=1, timeout=10.0)
    a.stop()  # dies: no more renewals, while its write is held up on the way
    fake_api.add_fault(Fault(0, verb="create", resource="configmaps",
                             delay=FAST.lease_seconds + 1.0))
    with pytest.raises((Unavailable, NotLeader)):
        api.create(CONFIGMAPS, namespace, configmap("late"))
    assert b.acquire()
    eventually(lambda: fake_api.in_flight == 0)  # the held-up request has been served
    assert fake_api.store.list("configmaps", namespace)[0] == []


def test_a_write_is_not_sent_with_too_little_of_the_lease_left(
        fake_api: FakeApiServer, namespace: str) -> None:
    clock = Clock()
    a = leading_on(clock, fake_api, namespace)
    api = fenced_api(str(fake_api.kubeconfig), a, attempts=1)
    clock.now += FAST.renew_deadline_seconds - api.min_write_seconds / 2
    assert a.may_act()
    sent = len(fake_api.requests)
    with pytest.raises(NotLeader, match="of the lease left"):
        api.create(CONFIGMAPS, namespace, configmap("too-late"))
    assert not [r for r in list(fake_api.requests)[sent:] if r.verb == "create"]


def test_every_attempt_of_a_write_ends_before_the_lease_and_no_back_off_outlasts_it(
        fake_api: FakeApiServer, namespace: str) -> None:
    clock = Clock()
    a = leading_on(clock, fake_api, namespace)
    api = fenced_api(str(fake_api.kubeconfig), a, attempts=4, timeout=10.0, backoff=0.1,
                     sleep=clock.sleep)
    deadline = clock.now + FAST.renew_deadline_seconds
    sent = len(fake_api.requests)
    fake_api.add_fault(Fault(503, verb="create", resource="configmaps", times=2))
    api.create(CONFIGMAPS, namespace, configmap("retried"))
    creates = [r for r in list(fake_api.requests)[sent:] if r.verb == "create"]
    assert len(creates) == 3 and len(clock.slept) == 2
    for i, request in enumerate(creates):
        (timeout,) = parse_qs(request.query)["timeout"]
        left = deadline - (clock.now - sum(clock.slept) + sum(clock.slept[:i]))
        assert 0 < parse_go_duration(timeout) <= left + 1e-9  # the clock in floats

    fake_api.add_fault(Fault(503, verb="create", resource="configmaps", retry_after=5))
    with pytest.raises(NotLeader, match="back-off"):
        api.create(CONFIGMAPS, namespace, configmap("never"))
    assert len(clock.slept) == 2  # it did not wait past the lease to try again


def test_a_standby_honours_the_duration_the_holder_wrote_not_its_own(
        make, fake_api: FakeApiServer, namespace: str) -> None:
    slow = ElectorSettings(lease_name=FAST.lease_name, lease_seconds=4.0,
                           renew_deadline_seconds=3.0, retry_seconds=0.2, identity="a")
    a = LeaseElector(KubeApi.connect(str(fake_api.kubeconfig), attempts=1), namespace, slow)
    assert a.acquire()
    a.start_renewing()
    b = make("b")  # its own setting: 2 s
    stop_b = threading.Event()
    got: list[bool] = []
    thread = threading.Thread(target=lambda: got.append(b.acquire(stop_b)))
    thread.start()
    eventually(lambda: b._observed is not None)  # it has seen a hold the lease
    a.stop()  # dies
    thread.join(20)
    took_over = time.monotonic()
    assert got == [True]
    assert a.last_renewed_sent is not None
    assert took_over >= a.last_renewed_sent + slow.lease_seconds - FAST.retry_seconds - 0.05

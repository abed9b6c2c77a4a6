"""The Lease elector fails closed: a leader that cannot renew stops acting before a
standby can take over, so there is never a second leader."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from voda.backends.kubernetes.api import KubeApi
from voda.backends.kubernetes.elector import LeaseElector
from voda.backends.kubernetes.settings import ElectorSettings
from voda_testing.kube import FakeApiServer, Fault

FAST = ElectorSettings(lease_name="voda-test", lease_seconds=1.5, renew_deadline_seconds=1.0,
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

"""Leader election on a coordination.k8s.io Lease that fails closed.

The client libraries' electors keep the leader's work running when renewals fail
(the API server is unreachable, a renewal raises): once the lease expires a
standby takes over and two leaders act. This one:

- counts every failed renewal (an error, a timeout, a 409) and stops acting the
  moment no renewal has succeeded within `renew_deadline_seconds`, measured from
  when the last successful renewal was *sent* (`may_act()` is the fence every
  write passes); then it calls `on_lost` (the process exits);
- tells how long it may still act (`time_left()`): the API client bounds every
  write's timeout by it, so no write sent under the lease lands after it;
- takes the lease only when its holder's lease has expired as observed on this
  process's own clock, from the earliest moment the holder's last renewal can
  have happened (the previous read that still saw the older record), so no clock
  skew between machines matters, and a standby takes over within the lease's
  duration of the leader's last renewal: the `leaseDurationSeconds` the holder
  wrote in the record (as client-go does), not the standby's own setting;
- releases the lease on shutdown (SIGTERM), so a standby takes over at once.

Timings default to client-go's: lease 15 s, renew deadline 10 s, retry 2 s; with
them a deposed leader has stopped at least 3 s before a standby can act.
"""

from __future__ import annotations

import logging
import math
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from voda.backends.kubernetes.api import LEASES, ApiError, KubeApi, Obj
from voda.backends.kubernetes.settings import ElectorSettings

log = logging.getLogger(__name__)

_ACTIVE: LeaseElector | None = None


def micro_time(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def default_identity() -> str:
    return f"{os.environ.get('HOSTNAME') or socket.gethostname()}_{secrets.token_hex(4)}"


class LeaseElector:
    def __init__(self, api: KubeApi, namespace: str, settings: ElectorSettings | None = None,
                 on_lost: Callable[[], None] | None = None,
                 monotonic: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.api = api
        self.namespace = namespace
        self.settings = settings or ElectorSettings()
        problems = self.settings.problems()
        if problems:
            raise ValueError("; ".join(problems))
        self.identity = self.settings.identity or default_identity()
        self.on_lost = on_lost
        self.monotonic = monotonic
        self.wall = wall
        self.leading = False
        self.lost = False
        self.released = False
        self.last_renewed_sent: float | None = None  # monotonic send time of the last success
        self.acquired_at: float | None = None
        self.renewals = 0
        self.failed_renewals = 0
        self._observed: tuple[str, str] | None = None  # (holder, renewTime) last seen
        self._observed_at = 0.0  # earliest moment that record can have been written
        self._observed_duration = self.settings.lease_seconds  # the record's own duration
        self._last_read_sent: float | None = None
        self._record: Obj | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # ----- the fence ------------------------------------------------------------------------
    def may_act(self) -> bool:
        with self._lock:
            if not self.leading or self.lost or self.released or self.last_renewed_sent is None:
                return False
            return self.monotonic() < self.last_renewed_sent + self.settings.renew_deadline_seconds

    def time_left(self) -> float:
        """Seconds this process may still act (0 when it may not): a write must have
        landed by then, before a standby can hold the lease."""
        with self._lock:
            if not self.leading or self.lost or self.released or self.last_renewed_sent is None:
                return 0.0
            deadline = self.last_renewed_sent + self.settings.renew_deadline_seconds
            return max(0.0, deadline - self.monotonic())

    # ----- acquiring ----------------------------------------------------------------------------
    def acquire(self, stop: threading.Event | None = None) -> bool:
        """Block until this process leads (True) or `stop` is set (False)."""
        stop = stop or self._stop
        while not stop.is_set():
            wait = self.settings.retry_seconds
            try:
                if self._try_acquire_or_renew():
                    log.info("%s leads (lease %s/%s)", self.identity, self.namespace,
                             self.settings.lease_name)
                    return True
                expiry = self._observed_at + self._observed_duration - self.monotonic()
                wait = max(0.01, min(wait, expiry))
            except ApiError as exc:
                log.warning("lease %s: %s", self.settings.lease_name, exc)
            except Exception as exc:
                log.warning("lease %s: %s", self.settings.lease_name, exc)
            stop.wait(wait)
        return False

    def _expired(self, holder: str, renew_time: str, duration: float, now: float,
                 read_sent: float) -> bool:
        self._observed_duration = duration
        record = (holder, renew_time)
        if record != self._observed:
            previous_read = self._last_read_sent
            self._observed = record
            # The holder wrote this record after our previous read (which still saw the
            # old one) was sent: the earliest moment it can date from.
            self._observed_at = previous_read if previous_read is not None else read_sent
        return now >= self._observed_at + duration

    def _duration(self, spec: Obj) -> float:
        """The lease duration its holder wrote; this process's setting when it wrote none."""
        try:
            seconds = float(spec.get("leaseDurationSeconds") or 0)
        except (TypeError, ValueError):
            seconds = 0.0
        return seconds if seconds > 0 else self.settings.lease_seconds

    def _try_acquire_or_renew(self) -> bool:
        """One attempt, as client-go's tryAcquireOrRenew; True when this process leads."""
        name = self.settings.lease_name
        sent = self.monotonic()
        timeout = self.settings.retry_seconds
        try:
            lease: Obj | None = self.api.request("GET", LEASES.path(self.namespace, name),
                                                 timeout=timeout, attempts=1)
        except ApiError as exc:
            if exc.status != 404:
                raise
            lease = None
        now_wall = self.wall()
        spec = dict((lease or {}).get("spec") or {})
        holder = str(spec.get("holderIdentity") or "")
        mine = holder == self.identity
        if lease is not None and holder and not mine and not self._expired(
                holder, str(spec.get("renewTime", "")), self._duration(spec),
                self.monotonic(), sent):
            self._last_read_sent = sent
            return False
        self._last_read_sent = sent
        new_spec = {
            "holderIdentity": self.identity,
            # whole seconds (int32): rounded up, so a standby never waits less than we assume
            "leaseDurationSeconds": math.ceil(self.settings.lease_seconds),
            "acquireTime": spec.get("acquireTime") if mine else micro_time(now_wall),
            "renewTime": micro_time(now_wall),
            "leaseTransitions": int(spec.get("leaseTransitions") or 0) + (0 if mine else 1),
        }
        if lease is None:
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": name, "namespace": self.namespace},
                    "spec": {**new_spec, "leaseTransitions": 0}}
            try:
                self._record = self.api.request("POST", LEASES.path(self.namespace), body=body,
                                                timeout=timeout, attempts=1)
            except ApiError as exc:
                if exc.status == 409:
                    return False
                raise
        else:
            body = {**lease, "spec": new_spec}
            self._record = self.api.request("PUT", LEASES.path(self.namespace, name),
                                            body=body, timeout=timeout, attempts=1)
        with self._lock:
            self.leading = True
            self.last_renewed_sent = sent
            if not mine or self.acquired_at is None:
                self.acquired_at = self.monotonic()
        return True

    # ----- renewing -------------------------------------------------------------------------------
    def start_renewing(self) -> None:
        self._thread = threading.Thread(target=self._renew_loop, name="lease-renew",
                                        daemon=True)
        self._thread.start()

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.settings.retry_seconds):
            if self.released:
                return
            try:
                if self._renew():
                    self.renewals += 1
                    continue
                self.failed_renewals += 1
                log.warning("lease %s: another holder has it", self.settings.lease_name)
            except Exception as exc:
                self.failed_renewals += 1
                log.warning("lease %s: renewal failed: %s", self.settings.lease_name, exc)
            if not self.may_act():
                self._lose()
                return

    def _renew(self) -> bool:
        """Renew the lease we hold: PUT on the record we last wrote (a 409 means someone
        else wrote it: not renewed)."""
        record = self._record
        if record is None:
            return self._try_acquire_or_renew()
        sent = self.monotonic()
        remaining = (self.last_renewed_sent or sent) + self.settings.renew_deadline_seconds - sent
        timeout = max(0.05, min(self.settings.retry_seconds, remaining))
        spec = dict(record.get("spec") or {})
        if spec.get("holderIdentity") != self.identity:
            return False
        spec["renewTime"] = micro_time(self.wall())
        try:
            updated = self.api.request("PUT", LEASES.path(self.namespace,
                                                          self.settings.lease_name),
                                       body={**record, "spec": spec}, timeout=timeout,
                                       attempts=1)
        except ApiError as exc:
            if exc.status == 409:  # re-read: renewing is still ours if nobody took it
                fresh = self.api.request("GET", LEASES.path(self.namespace,
                                                            self.settings.lease_name),
                                         timeout=timeout, attempts=1)
                if (fresh.get("spec") or {}).get("holderIdentity") != self.identity:
                    return False
                self._record = fresh
                return False
            raise
        with self._lock:
            self._record = updated
            self.last_renewed_sent = sent
        return True

    def _lose(self) -> None:
        with self._lock:
            if self.lost:
                return
            self.lost = True
        log.error("lease %s: no renewal within %.1f s; stopping (fail closed)",
                  self.settings.lease_name, self.settings.renew_deadline_seconds)
        if self.on_lost is not None:
            self.on_lost()

    # ----- releasing -----------------------------------------------------------------------------
    def release(self) -> bool:
        """Give the lease up (on shutdown), if it is still ours; True when released."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(self.settings.retry_seconds * 2)
        if not self.may_act() or self._record is None:
            return False
        with self._lock:
            self.released = True  # the fence closes before the lease is given up
        path = LEASES.path(self.namespace, self.settings.lease_name)
        record = self._record
        for _ in range(3):
            spec = dict(record.get("spec") or {})
            if spec.get("holderIdentity") != self.identity:
                return False
            now = micro_time(self.wall())
            spec.update(holderIdentity="", leaseDurationSeconds=1, renewTime=now,
                        acquireTime=now)
            try:
                self.api.request("PUT", path, body={**record, "spec": spec},
                                 timeout=self.settings.retry_seconds, attempts=1)
                log.info("%s released the lease", self.identity)
                return True
            except ApiError as exc:
                if exc.status != 409:
                    log.warning("lease %s: release failed: %s", self.settings.lease_name, exc)
                    return False
                record = self.api.request("GET", path, timeout=self.settings.retry_seconds,
                                          attempts=1)
        return False

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)


def activate(elector: LeaseElector | None) -> None:
    """Make `elector` the process's fence (the backend's writes pass it)."""
    global _ACTIVE
    _ACTIVE = elector


def active_fence() -> Callable[[], float] | None:
    """What the backend's writes pass: the seconds the process may still act."""
    return _ACTIVE.time_left if _ACTIVE is not None else None


def describe(elector: LeaseElector) -> dict[str, Any]:
    return {"identity": elector.identity, "leading": elector.may_act(),
            "renewals": elector.renewals, "failed_renewals": elector.failed_renewals}

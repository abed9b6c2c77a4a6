"""Horovod's elastic driver in an MPIJob launcher, as far as a scheduler can tell.

`horovodrun --min-np MIN --host-discovery-script discover_hosts.sh` trains on the hosts
the script lists whose worker processes run. The launcher reads the script from the
job's ConfigMap through a ConfigMap volume, which the kubelet refreshes only now and
then: a change reaches the launcher `configmap_seconds` after it was written (tens of
seconds on a real cluster). A host whose worker process died while it was in use (its
pod failed or was deleted before the launcher saw it leave the script) is blacklisted:
for the rest of the run, unless `--blacklist-cooldown-range LOW HIGH` is given, when it
may come back after LOW seconds. With fewer than MIN usable hosts for
`HOROVOD_ELASTIC_TIMEOUT` seconds (600 by default) the launcher fails.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

DEFAULT_ELASTIC_TIMEOUT = 600.0


def _flag(command: list[str], names: tuple[str, ...], count: int = 1) -> list[str] | None:
    for i, part in enumerate(command):
        flag, _, inline = part.partition("=")
        if flag in names:
            if inline:
                return [inline]
            return command[i + 1:i + 1 + count]
    return None


@dataclass
class ElasticLauncher:
    min_np: int = 1
    timeout: float = DEFAULT_ELASTIC_TIMEOUT
    cooldown: float | None = None  # None: a blacklisted host never comes back
    blacklist: dict[str, float] = field(default_factory=dict)  # host -> usable again at
    active: set[str] = field(default_factory=set)
    short_since: float | None = None
    failure: str | None = None
    # (visible at, hosts): discover_hosts.sh versions, as the kubelet will deliver them
    _script: list[tuple[float, frozenset[str]]] = field(default_factory=list)
    _written: frozenset[str] | None = None

    @classmethod
    def of(cls, container: dict[str, Any]) -> ElasticLauncher:
        command = [str(p) for p in (container.get("command") or []) + (
            container.get("args") or [])]
        low = _flag(command, ("--min-np", "--min-num-proc"))
        cooldown = _flag(command, ("--blacklist-cooldown-range",), 2)
        env = {e.get("name"): e.get("value") for e in container.get("env") or []}
        out = cls()
        if low:
            out.min_np = int(low[0])
        if cooldown:
            out.cooldown = float(cooldown[0])
        if env.get("HOROVOD_ELASTIC_TIMEOUT"):
            out.timeout = float(env["HOROVOD_ELASTIC_TIMEOUT"])
        return out

    def write_script(self, hosts: frozenset[str], now: float, delay: float) -> None:
        """mpi-operator wrote discover_hosts.sh listing `hosts`."""
        if hosts != self._written:
            self._written = hosts
            self._script.append((now + delay, hosts))

    def discovered(self, now: float) -> frozenset[str]:
        while len(self._script) > 1 and self._script[1][0] <= now:
            self._script.pop(0)
        if self._script and self._script[0][0] <= now:
            return self._script[0][1]
        return frozenset()

    def step(self, running: set[str], now: float) -> set[str]:
        """The hosts training now, given those whose pods run."""
        listed = self.discovered(now)
        for host in self.active - running:
            if host in listed:  # it died while in use: not a removal Horovod was told of
                self.blacklist[host] = now + self.cooldown if self.cooldown is not None \
                    else math.inf
        self.active = {h for h in listed & running if self.blacklist.get(h, 0.0) <= now}
        if len(self.active) >= self.min_np:
            self.short_since = None
        elif self.short_since is None:
            self.short_since = now
        elif now - self.short_since >= self.timeout and self.failure is None:
            self.failure = ("Timed out waiting for minimum number of slots to become "
                            "available. Please check that you have enough resources to run "
                            f"at least {self.min_np} Horovod processes.")
        return set(self.active) if self.failure is None else set()

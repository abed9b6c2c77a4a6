"""An in-memory backend for tests and the scripted demo: it records what it is told."""

from __future__ import annotations

from dataclasses import dataclass

from voda.core.model import Job, JobPlacement, Node
from voda.engine.events import Event, EventKind


@dataclass(frozen=True)
class Call:
    verb: str  # start, scale, halt, delete
    job: str
    placement: JobPlacement


class InMemoryBackend:
    def __init__(self, nodes: list[Node]) -> None:
        self._nodes = list(nodes)
        self.calls: list[Call] = []
        self.running: dict[str, JobPlacement] = {}
        self._pending: list[Event] = []

    # Backend protocol
    def start(self, job: Job, placement: JobPlacement) -> None:
        self._check(job, placement)
        self.calls.append(Call("start", job.name, placement))
        self.running[job.name] = placement

    def scale(self, job: Job, placement: JobPlacement) -> None:
        self._check(job, placement)
        self.calls.append(Call("scale", job.name, placement))
        self.running[job.name] = placement

    def halt(self, job: Job) -> None:
        self.calls.append(Call("halt", job.name, ()))
        self.running.pop(job.name, None)

    def delete(self, job: str) -> None:
        self.calls.append(Call("delete", job, ()))
        self.running.pop(job, None)

    def nodes(self) -> list[Node]:
        return list(self._nodes)

    def events(self) -> list[Event]:
        out, self._pending = self._pending, []
        return out

    # Test controls
    def complete(self, job: str, time: float) -> None:
        self.running.pop(job, None)
        self._pending.append(Event(EventKind.JOB_COMPLETED, time, job=job))

    def fail(self, job: str, time: float, reason: str = "exit code 1") -> None:
        self.running.pop(job, None)
        self._pending.append(Event(EventKind.JOB_FAILED, time, job=job, data={"reason": reason}))

    def report_epoch(
        self, job: str, time: float, epoch: int, seconds: float, workers: int,
        samples_per_second: float | None = None,
    ) -> None:
        data: dict[str, float] = {"epoch": epoch, "epoch_seconds": seconds, "workers": workers}
        if samples_per_second is not None:
            data["samples_per_second"] = samples_per_second
        self._pending.append(Event(EventKind.EPOCH_REPORTED, time, job=job, data=data))

    def add_node(self, node: Node, time: float) -> None:
        self._nodes.append(node)
        self._pending.append(Event(EventKind.NODE_ADDED, time, node=node))

    def remove_node(self, name: str, time: float) -> None:
        node = next(n for n in self._nodes if n.name == name)
        self._nodes.remove(node)
        for job, placement in list(self.running.items()):
            kept = tuple((n, c) for n, c in placement if n != name)
            if kept != placement:
                self.running[job] = kept
        self._pending.append(Event(EventKind.NODE_REMOVED, time, node=node))

    def used(self) -> dict[str, int]:
        used: dict[str, int] = {}
        for placement in self.running.values():
            for node, count in placement:
                used[node] = used.get(node, 0) + count
        return used

    def _check(self, job: Job, placement: JobPlacement) -> None:
        capacity = {n.name: n.gpus for n in self._nodes}
        for node, _ in placement:
            if node not in capacity:
                raise ValueError(f"job {job.name!r}: no node {node!r}")
        used = self.used()
        for node, count in self.running.get(job.name, ()):
            used[node] -= count
        for node, count in placement:
            used[node] = used.get(node, 0) + count
            if used[node] > capacity[node]:
                raise ValueError(f"node {node!r} over capacity: {used[node]} > {capacity[node]}")

"""Builders for test values, in the style of Kueue's `MakeWorkload(...).Obj()`.

    make_job("a").workers(1, 4).submitted_at(0).obj()
    make_cluster().nodes(4, gpus=4).obj()

Each setter returns the builder, so a test states only what matters to it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from voda.core.model import DEFAULT_GPU_TYPE, Cluster, Job, JobStatus, Node

if TYPE_CHECKING:
    from voda.engine.scheduler import Scheduler


class JobBuilder:
    def __init__(self, name: str) -> None:
        self._job = Job(name=name)

    def _set(self, **changes: Any) -> JobBuilder:
        self._job = replace(self._job, **changes)
        return self

    # sizes
    def workers(self, min_workers: int, max_workers: int | None = None) -> JobBuilder:
        """min and max workers (max defaults to min: a rigid job)."""
        return self._set(
            min_workers=min_workers,
            max_workers=min_workers if max_workers is None else max_workers,
        )

    def rigid(self, workers: int) -> JobBuilder:
        """min = max = preferred = `workers`."""
        return self._set(min_workers=workers, max_workers=workers, preferred_workers=workers)

    def preferred(self, workers: int | None) -> JobBuilder:
        return self._set(preferred_workers=workers)

    # identity and queueing
    def submitted_at(self, time: float) -> JobBuilder:
        return self._set(submit_time=float(time))

    def priority(self, priority: int) -> JobBuilder:
        return self._set(priority=priority)

    def category(self, category: str) -> JobBuilder:
        return self._set(category=category)

    def gpu_type(self, gpu_type: str) -> JobBuilder:
        return self._set(gpu_type=gpu_type)

    def status(self, status: JobStatus) -> JobBuilder:
        return self._set(status=status)

    def in_queue(self, queue: str) -> JobBuilder:
        """The team queue it belongs to (voda.core.quotas)."""
        return self._set(queue=queue)

    def queue_since(self, time: float | None) -> JobBuilder:
        return self._set(queue_since=time)

    # progress and speed
    def epochs(self, epochs: int, completed: float = 0.0) -> JobBuilder:
        return self._set(epochs=epochs, completed_epochs=float(completed))

    def epoch_times(self, times: Mapping[int, float]) -> JobBuilder:
        """Seconds per epoch by worker count."""
        return self._set(epoch_time_by_workers=dict(times))

    # current state and attained service
    def running(self, workers: int, since: float | None = None) -> JobBuilder:
        """Holds `workers` GPUs now; `since` is its first start time (defaults to submit)."""
        first = self._job.submit_time if since is None else float(since)
        return self._set(
            current_workers=workers,
            status=JobStatus.RUNNING,
            first_start_time=self._job.first_start_time
            if self._job.first_start_time is not None
            else first,
        )

    def waiting(self) -> JobBuilder:
        return self._set(current_workers=0, status=JobStatus.WAITING)

    def started_at(self, time: float | None) -> JobBuilder:
        return self._set(first_start_time=None if time is None else float(time))

    def attained(
        self, gpu_seconds: float, since_start: float | None = None,
        since_promotion: float | None = None,
    ) -> JobBuilder:
        """Attained GPU-seconds in total, since the last start and since the last promotion
        (both default to the total: never restarted, never promoted)."""
        return self._set(
            attained_gpu_seconds=float(gpu_seconds),
            attained_gpu_seconds_since_start=float(
                gpu_seconds if since_start is None else since_start
            ),
            attained_gpu_seconds_since_promotion=float(
                gpu_seconds if since_promotion is None else since_promotion
            ),
        )

    def ran_for(
        self, seconds: float, since_start: float | None = None,
        since_promotion: float | None = None,
    ) -> JobBuilder:
        """Running seconds in total, in its last (or current) run, and since its last
        promotion (both default to the total)."""
        return self._set(
            running_seconds=float(seconds),
            running_seconds_since_start=float(seconds if since_start is None else since_start),
            running_seconds_since_promotion=float(
                seconds if since_promotion is None else since_promotion
            ),
        )

    def waited_for(
        self, seconds: float, since_start: float | None = None,
        since_promotion: float | None = None,
    ) -> JobBuilder:
        """Waiting seconds in total, since it was last queued or preempted, and since its
        last promotion (both default to the total)."""
        return self._set(
            waiting_seconds=float(seconds),
            waiting_seconds_since_start=float(seconds if since_start is None else since_start),
            waiting_seconds_since_promotion=float(
                seconds if since_promotion is None else since_promotion
            ),
        )

    def with_(self, **changes: Any) -> JobBuilder:
        """Any other Job field."""
        return self._set(**changes)

    def obj(self) -> Job:
        return self._job


class ClusterBuilder:
    def __init__(self) -> None:
        self._nodes: list[Node] = []

    def nodes(
        self,
        count: int,
        gpus: int,
        gpu_type: str = DEFAULT_GPU_TYPE,
        leaf: str | None = None,
        spine: str | None = None,
        prefix: str = "node",
    ) -> ClusterBuilder:
        """Add `count` nodes of `gpus` GPUs each, named prefix-0, prefix-1, ... ."""
        start = sum(1 for n in self._nodes if n.name.startswith(f"{prefix}-"))
        for i in range(start, start + count):
            self._nodes.append(Node(f"{prefix}-{i}", gpus, gpu_type, leaf, spine))
        return self

    def node(
        self,
        name: str,
        gpus: int,
        gpu_type: str = DEFAULT_GPU_TYPE,
        leaf: str | None = None,
        spine: str | None = None,
    ) -> ClusterBuilder:
        self._nodes.append(Node(name, gpus, gpu_type, leaf, spine))
        return self

    def node_list(self) -> list[Node]:
        return list(self._nodes)

    def obj(self) -> Cluster:
        return Cluster(tuple(self._nodes))


def make_job(name: str) -> JobBuilder:
    return JobBuilder(name)


def make_cluster() -> ClusterBuilder:
    return ClusterBuilder()


def run_until(sched: Scheduler, end: float, steps: int = 10_000) -> None:
    """Step the engine at every wake-up it asks for, from where it is up to `end`
    (virtual seconds; at most `steps` wake-ups)."""
    now = sched.accounted_until
    sched.step(now)
    for _ in range(steps):
        wake = sched.next_wakeup(now)
        if wake is None or wake > end:
            break
        now = max(wake, now)
        sched.step(now)
    sched.step(end)

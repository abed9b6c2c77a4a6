"""The Backend protocol: the port the engine drives, and its optional capabilities.

About five methods, optional capabilities apart (SupportsDelete, SupportsAdoption).
It lives beside the engine so that the engine needs no backend: voda.backends and
voda.sim implement it, and the engine imports neither (checked by lint-imports).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from voda.core.model import Job, JobPlacement, Node
from voda.engine.events import Event


@runtime_checkable
class Backend(Protocol):
    def start(self, job: Job, placement: JobPlacement) -> None:
        """Start (or resume from checkpoint) a job on these workers."""

    def scale(self, job: Job, placement: JobPlacement) -> None:
        """Change a running job's workers: scale in, scale out or migrate."""

    def halt(self, job: Job) -> None:
        """Stop a job, keeping its checkpoint (preemption)."""

    def nodes(self) -> list[Node]:
        """The nodes the backend offers now."""

    def events(self) -> list[Event]:
        """Events since the last call: completions, failures, epoch reports, node changes."""

    # A backend may set `resumes_within_epoch = True` when a job it (re)starts, resizes or
    # moves goes on from where it stopped within an epoch (the engine then keeps counting
    # the epoch under way, Job.running_seconds_since_epoch); without it, from the last
    # epoch's end. Not part of the protocol: an attribute read with a default of False.
    # A backend that decides per job gives `job_resumes_within_epoch(name) -> bool` instead.
    #
    # A backend whose cluster runs on a clock of its own may set `time_scale`: how many of
    # its seconds pass per second of the engine's clock (an emulated cluster `time_scale`
    # times faster than the one it emulates). The engine keeps every per-job counter
    # (running, waiting, attained GPU-seconds) in those seconds, the unit of the epoch
    # times the backend reports, so a policy compares like with like. An attribute read
    # with a default of 1 (see voda.engine.scheduler.backend_time_scale).
    #
    # A backend on which a change of a job's workers costs more than the checkpoint and
    # restart the policies charge may give `rescale_delay(name) -> float`: those extra
    # seconds (its own seconds), which the engine hands the policies as Job.rescale_delay
    # (Kubernetes: an MPIJob waits for its hostfile ConfigMap to reach the launcher).
    #
    # A backend that knows what one restart costs each job may give `restart_cost(name)`
    # (seconds; 0: unknown) and `restoring_seconds(name)` (seconds of a restart still under
    # way): the engine hands them to the policies as Job.restart_cost and
    # Job.restoring_seconds (the simulator under the `sia` preset).
    #
    # A backend whose jobs cannot each use every node of their GPU type (Kubernetes: a
    # template's taints, selectors and requests, or a node that refused a worker) gives
    # `job_nodes(names) -> {job: nodes it may use}`; the engine reads it at each decision
    # (Job.nodes) and places those jobs only there (voda.engine.scheduler.backend_job_nodes).


@runtime_checkable
class SupportsDelete(Protocol):
    def delete(self, job: str) -> None:
        """Forget a job for good (stop it and drop its checkpoint)."""


@runtime_checkable
class SupportsSuspension(Protocol):
    def suspended(self) -> dict[str, str]:
        """Jobs that something outside Voda holds suspended (Kueue on Kubernetes), with
        why: they wait for it to admit them, not for Voda's GPUs."""


@runtime_checkable
class SupportsAdoption(Protocol):
    def running(self) -> dict[str, JobPlacement]:
        """Jobs the backend is running right now, for adoption after a restart."""


@runtime_checkable
class SupportsReasons(Protocol):
    def note_reason(self, job: str, code: str | None, message: str, now: float) -> None:
        """The code of a running or waiting job's reason changed (None: it holds its max
        again; `message` then says so). Called on the engine's thread only on a change of
        code, never on every decision: the backend records it and returns at once (it
        writes it to its cluster, if it does, off the decision path). The engine logs and
        ignores whatever it raises."""

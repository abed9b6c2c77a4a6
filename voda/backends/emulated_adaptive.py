"""Batch-adaptive jobs on the emulated cluster: the simulator's job model in emulated time.

A job submitted with `adaptive: true` is a Pollux/AdaptDL job: it measures its step times
and gradient statistics, picks its batch by goodput for the GPUs it holds and reports its
goodput model (GOODPUT_REPORTED) and its epochs. The simulator already runs that job
(voda.sim.backend.SimBackend with voda.sim.adaptive.AdaptiveAgent); here the same backend
runs it on the emulated clock, wall seconds x `time_scale`, so nothing of the job model
is written twice. Event times come back in wall seconds; the epoch times, throughputs and
step times the job reports stay in emulated seconds, as the epoch jobs' do.

Progress is continuous: a job halted, resized or moved goes on from where it stopped
(an AdaptDL checkpoint holds the position within the epoch), after `restart_seconds`
(emulated) without progress; the emulated cluster charges none by default.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from voda.blas import serial_blas
from voda.core.goodput import GoodputModel
from voda.core.model import Job, JobPlacement, Node
from voda.engine.events import Event, EventKind

if TYPE_CHECKING:
    from voda.sim.backend import SimBackend
    from voda.sim.workloads import JobSpec as SimJobSpec

NODE_EVENTS = {EventKind.NODE_ADDED, EventKind.NODE_REMOVED}


def declared_model(profile: str, fixed_batch: int | None) -> GoodputModel:
    """What a batch-adaptive job of `profile` declares when it is submitted (its batch
    limits and epoch length, nothing measured): voda.sim.adaptive.initial_model."""
    from voda.sim.adaptive import initial_model
    from voda.sim.profiles import load_profile

    return initial_model(load_profile(profile), fixed_batch)


class AdaptiveJobs:
    """The emulated cluster's batch-adaptive jobs, on a simulated backend in emulated time."""

    def __init__(self, nodes: list[Node], time_scale: float, restart_seconds: float = 0.0
                 ) -> None:
        self.time_scale = time_scale
        self.restart_seconds = restart_seconds
        self._nodes = list(nodes)
        self._inner: SimBackend | None = None  # built with the first job (loads SciPy)
        # Emulated time counts from here (wall seconds): from 0, not from the epoch of the
        # wall clock, where a float no longer holds the simulator's small steps.
        self._origin: float | None = None

    # ----- the jobs ------------------------------------------------------------------------
    def start(self, job: Job, profile: str, fixed_batch: int | None,
              placement: JobPlacement, wall: float) -> None:
        inner = self._at(wall)
        if job.name not in inner.specs:
            inner.specs[job.name] = self._spec(job, profile, fixed_batch)
        inner.start(job, placement)

    def scale(self, job: Job, placement: JobPlacement, wall: float) -> None:
        self._at(wall).scale(job, placement)

    def halt(self, name: str, wall: float) -> None:
        inner = self._at(wall)
        if name in inner.running:
            inner.halt(Job(name))

    def forget(self, name: str, wall: float) -> None:
        """The job is deleted (or ended): its state goes."""
        if self._inner is None or name not in self._inner.specs:
            return
        self.halt(name, wall)  # if it still runs: deleted while running
        self._inner.jobs.pop(name, None)
        self._inner.specs.pop(name, None)

    def knows(self, name: str) -> bool:
        return self._inner is not None and name in self._inner.jobs

    def running(self) -> dict[str, JobPlacement]:
        if self._inner is None:
            return {}
        return {name: sim.placement for name, sim in self._inner.running.items()}

    def events(self, wall: float) -> list[Event]:
        """What the jobs reported up to `wall`, at wall times."""
        if self._inner is None:
            return []
        inner = self._at(wall)
        inner.timeline.clear()  # the simulator's report of who held what: not kept here
        del inner.capacity_changes[:-1]
        # An ended job's state goes when the emulated cluster forgets it (`forget`).
        return [replace(event, time=self._wall(event.time)) for event in inner.events()
                if event.kind not in NODE_EVENTS]

    # ----- nodes ---------------------------------------------------------------------------
    def add_node(self, node: Node, wall: float) -> None:
        self._nodes.append(node)
        if self._inner is not None:
            self._at(wall).join_node(node)

    def remove_node(self, name: str, wall: float) -> None:
        """The node goes; jobs with workers on it stop (as the emulated cluster's do)."""
        self._nodes = [n for n in self._nodes if n.name != name]
        if self._inner is None:
            return
        inner = self._at(wall)
        for job, placement in self.running().items():
            if any(node == name for node, _ in placement):
                inner.halt(Job(job))
        inner.fail_node(name)

    # ----- state across restarts -------------------------------------------------------------
    def export_state(self) -> dict[str, Any]:
        if self._inner is None:
            return {}
        jobs = {}
        for name, sim in self._inner.jobs.items():
            if sim.finished is not None or sim.agent is None:
                continue
            spec = sim.spec
            jobs[name] = {
                "profile": spec.profile, "fixed_batch": spec.batch_size, "epochs": spec.epochs,
                "min": spec.min_workers, "max": spec.max_workers,
                "progress": sim.progress, "epoch": sim.epoch,
                "placement": [[node, count] for node, count in sim.placement],
                "measured": [[*config, step, sync]
                             for config, (step, sync) in sim.agent.measured.items()],
                "grad": list(sim.agent.grad),
            }
        return {"origin": self._origin, "jobs": jobs}

    def import_state(self, state: dict[str, Any], wall: float) -> None:
        """Take the jobs back where they were (their measurements refitted); a job whose
        nodes are gone waits."""
        self._inner = None
        jobs = state.get("jobs") or {}
        if not jobs:
            return
        self._origin = float(state["origin"])
        inner = self._at(wall)
        names = {n.name for n in self._nodes}
        for name, values in jobs.items():
            job = Job(name, int(values["min"]), int(values["max"]), epochs=int(values["epochs"]))
            inner.specs[name] = self._spec(job, str(values["profile"]), values["fixed_batch"])
            sim = inner._job(name)
            sim.progress, sim.epoch = float(values["progress"]), int(values["epoch"])
            assert sim.agent is not None
            grad = (float(values["grad"][0]), float(values["grad"][1]))
            for nodes, replicas, atomic, step, sync in values["measured"]:
                sim.agent.observe((int(nodes), int(replicas), int(atomic)), float(step),
                                  float(sync), grad)
            sim.reported = sim.agent.model()
            placement = tuple((str(n), int(c)) for n, c in values["placement"])
            if placement and all(node in names for node, _ in placement):
                inner.start(job, placement)

    # ----- internals ---------------------------------------------------------------------------
    def _at(self, wall: float) -> SimBackend:
        """The simulated backend, advanced to `wall` (emulated seconds: wall x time_scale)."""
        if self._origin is None:
            self._origin = wall
        now = (wall - self._origin) * self.time_scale
        if self._inner is None:
            from voda.sim.backend import SimBackend

            self._inner = SimBackend(list(self._nodes), {}, penalty=self.restart_seconds,
                                     start=now)
        with serial_blas():  # the jobs' goodput fits: tiny linear algebra
            self._inner.advance(now)
        return self._inner

    def _wall(self, emulated: float) -> float:
        assert self._origin is not None
        return self._origin + emulated / self.time_scale

    @staticmethod
    def _spec(job: Job, profile: str, fixed_batch: int | None) -> SimJobSpec:
        from voda.sim.workloads import JobSpec

        return JobSpec(job.name, 0.0, 0, job.min_workers, job.max_workers, None, job.epochs,
                       category=profile, profile=profile, batch_size=fixed_batch,
                       adaptive=True)

"""SimBackend: the Backend protocol on a virtual clock with a throughput model.

The scheduler drives it exactly as it drives a real cluster (start, scale,
halt); the runner moves time forward with `advance(to)`, which makes running
jobs progress and queues their epoch reports and completions as events.

Every change of a job's workers (a start, a resume, a rescale, a migration, a
restart after a node failure) costs `penalty` seconds during which the job
holds its GPUs and makes no progress. A halt costs nothing at that moment.

Progress follows SIMULATION.md §3: profiled jobs advance in M0-equivalent
iterations at rate gain / step time; duration-based jobs advance in GPU-seconds
at one per GPU per second (linear speedup). With `integer_time`, the time to
reach an epoch boundary is rounded to whole seconds as in the reference
simulator, and every running job is stepped at each `advance` (so results match
the artifact's interval-by-interval arithmetic); otherwise jobs are advanced
lazily, only when they cross an epoch boundary or change allocation, which keeps
long traces fast.

A batch-adaptive job (`JobSpec.adaptive`) carries an `AdaptiveAgent`: on every
stretch it runs it measures its configuration and gradient statistics, reports
its goodput model to the scheduler (GOODPUT_REPORTED) when that changed, and
picks its batch again, as the Pollux artifact's jobs do after every step of the
simulation. In the lazy mode it also picks again at most `ADAPT_SECONDS` after
it starts on a configuration it has not measured.

A job's speed follows its layout: with `layout_speed` "actual" the GPUs per node
it holds, slowed by `spine_oversubscription` when they span more than one leaf;
with "packed" its GPU count packed onto as few nodes as possible; with "best" the
fastest layout with at most as many GPUs per node as the largest node has, on at
most 16 nodes: an upper bound on what any placer reaches. Both of the latter
count as one leaf.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from voda.core.goodput import GoodputModel
from voda.core.model import Job, JobPlacement, Node
from voda.engine.events import Event, EventKind
from voda.sim.adaptive import AdaptiveAgent
from voda.sim.hetero_profiles import measured_types, typed_profile
from voda.sim.profiles import Profile, load_profile
from voda.sim.progress import gains, grad_stats
from voda.sim.speed import default_batch
from voda.sim.speed import epoch_seconds as profile_epoch_seconds
from voda.sim.throughput import (
    BatchSplit,
    best_placement,
    packed_placement,
    split_batch,
    step_sync_time,
    step_time,
)
from voda.sim.workloads import JobSpec

DEFAULT_PENALTY = 30.0
ADAPT_SECONDS = 60.0  # lazy mode: an adaptive job re-picks its batch this soon on a new config
LAYOUT_SPEEDS = ("actual", "packed", "best")


def emulated_epoch_seconds(profile: str, layout: tuple[int, ...]) -> float:
    """Seconds per epoch as the emulated backend computes them (GPUs per node, largest
    first: voda.backends.emulated.EmulatedBackend.wall_epoch_seconds)."""
    return profile_epoch_seconds(profile, tuple(sorted(layout, reverse=True)))


def check_layout_speed(value: str) -> str:
    if value not in LAYOUT_SPEEDS:
        raise ValueError(
            f"layout_speed: must be one of {', '.join(LAYOUT_SPEEDS)}, got {value!r}"
        )
    return value


@dataclass(slots=True)
class SimJob:
    """The backend's state of one job."""

    spec: JobSpec
    profile: Profile | None
    boundaries: tuple[float, ...]  # progress at the start of each epoch and at completion
    placement: JobPlacement = ()
    counts: tuple[int, ...] = ()  # GPUs per node, in placement order
    gpus: int = 0  # sum(counts), kept with it
    split: BatchSplit | None = None
    t: float = 0.0  # the time the state below is at
    countdown: float = 0.0
    progress: float = 0.0
    epoch: int = 0
    finished: float | None = None
    restarts: int = -1  # 0 after the first start
    version: int = 0  # bumped on every allocation change (invalidates heap entries)
    # Its rate at every epoch (index: epoch) on the current layout and split, worked out
    # all at once when first needed (`rates_by_epoch`); None after a change.
    rates: tuple[float, ...] | None = None
    # Seconds per optimiser step on the current layout and split, slowdown included: the
    # same for every epoch, so it is worked out once (kept and dropped with `rates`).
    step_seconds: float | None = None
    layout: tuple[int, ...] = ()  # the GPUs per node its speed follows (see layout_speed)
    placed_at: float = 0.0  # when the current placement began
    spine: float = 1.0  # oversubscription its all-reduce crosses (1: one leaf)
    agent: AdaptiveAgent | None = None  # batch-adaptive jobs only
    reported: GoodputModel | None = None  # the goodput model last reported
    gpu_type: str | None = None  # the GPU type it last ran on (None: not yet run)
    slowdown: float = 1.0  # its application's step-time calibration (SimBackend.calibration)
    agents: dict[str, AdaptiveAgent] = field(default_factory=dict)  # by GPU type

    def rate(self) -> float:
        """Progress units per second at its current epoch."""
        rates = self.rates
        if rates is None:
            rates = self.rates_by_epoch()
        return rates[self.epoch]

    def rates_by_epoch(self) -> tuple[float, ...]:
        """Its rate at each epoch (up to its last boundary) if nothing changes."""
        epochs = len(self.boundaries)
        if self.spec.emulated_speed is not None and self.profile is not None:
            rates = (self.spec.emulated_speed / emulated_epoch_seconds(self.profile.name,
                                                                       self.layout),) * epochs
        elif self.profile is not None and self.split is not None:
            step = self.step_seconds
            if step is None:
                step = self.step_seconds = self.slowdown * step_time(
                    self.profile, self.layout, self.split, self.spine)
            rates = tuple([g / step for g in gains(
                self.profile.name, self.profile.init_batch_size, self.split.effective_batch,
                epochs)])
        else:
            rates = (float(self.gpus),) * epochs
        self.rates = rates
        return rates

    def forget_rates(self) -> None:
        """Its placement, layout, split or GPU type changed: its speed must be worked out
        again."""
        self.rates = None
        self.step_seconds = None

    def samples_per_second(self) -> float | None:
        """Training throughput on the current layout (None for duration-based jobs)."""
        if self.profile is None or self.split is None:
            return None
        if self.spec.emulated_speed is not None:  # as the emulated backend reports it
            return self.profile.samples_per_epoch * self.rate() / self.spec.emulated_speed
        seconds = self.step_seconds
        if seconds is None:
            seconds = self.step_seconds = self.slowdown * step_time(
                self.profile, self.layout, self.split, self.spine)
        return self.split.effective_batch / seconds


def _boundaries(spec: JobSpec, profile: Profile | None) -> tuple[float, ...]:
    if spec.emulated_speed is not None:  # progress in epochs
        return tuple(float(k) for k in range(spec.epochs + 1))
    if profile is not None:
        if spec.epochs == profile.epochs:
            return profile.boundaries
        return (0.0, *(min(v.progress[k] for v in profile.validation) for k in range(spec.epochs)))
    work = float(spec.work or 0.0)
    return tuple(work * k / spec.epochs for k in range(spec.epochs + 1))


class SimBackend:
    # A job's progress is continuous (the Pollux artifact's model): a restart costs the
    # penalty, not the part of an epoch done. Not so for the emulated backend's jobs
    # (JobSpec.emulated_speed), whose backend does not say it resumes within an epoch.
    resumes_within_epoch: bool
    # The emulated backend's jobs run on a clock `emulated_speed` times faster and report in
    # emulated seconds: the engine then keeps its counters in those (Backend.time_scale).
    time_scale: float

    def __init__(
        self,
        nodes: list[Node],
        specs: dict[str, JobSpec],
        penalty: float = DEFAULT_PENALTY,
        integer_time: bool = False,
        start: float = 0.0,
        report_epochs: bool = True,
        spine_oversubscription: float = 1.0,
        layout_speed: str = "actual",
        calibration: Mapping[str, float] | None = None,
        penalties: Mapping[str, float] | None = None,
        told_penalties: Mapping[str, float] | None = None,
    ) -> None:
        if penalty < 0:
            raise ValueError(f"penalty: must not be negative, got {penalty}")
        if not spine_oversubscription >= 1:
            raise ValueError(
                f"spine_oversubscription: must be a number >= 1, got {spine_oversubscription}"
            )
        self.layout_speed = check_layout_speed(layout_speed)
        self.resumes_within_epoch = all(s.emulated_speed is None for s in specs.values())
        speeds = {s.emulated_speed for s in specs.values()}
        if len(speeds) > 1:
            raise ValueError("emulated_speed: the jobs of one simulation run on one clock, "
                             f"got {sorted(speeds, key=str)}")
        self.time_scale = next(iter(speeds), None) or 1.0
        self.spine_oversubscription = float(spine_oversubscription)
        self._nodes = {n.name: n for n in nodes}
        self._leaf: dict[str, str] = {}  # node -> leaf, kept with _nodes
        self._refresh_shape()
        self.specs = specs
        self.penalty = penalty
        # Per application (profile name): a factor on every step time (the Sia artifact's
        # calibration to its physical cluster), and the restart penalty instead of `penalty`.
        self.calibration = dict(calibration or {})
        self.penalties = dict(penalties or {})
        # What it tells the policies a restart costs (restart_cost), where that differs.
        self.told_penalties = dict(told_penalties or {})
        self.integer_time = integer_time
        self.report_epochs = report_epochs
        self.now = start
        self.jobs: dict[str, SimJob] = {}
        self.running: dict[str, SimJob] = {}
        self._pending: list[Event] = []
        self._boundary_heap: list[tuple[float, int, str]] = []  # (time, version, job)
        self._completion_heap: list[tuple[float, int, str]] = []
        self._held = 0
        self._changed = False  # a completion or node change since take_changed()
        self._progressed = False  # an epoch or goodput report since take_progressed()
        self._advancing_to = start
        # Accounting for reports.
        self.busy_gpu_seconds = 0.0
        self.capacity_changes: list[tuple[float, int]] = [(start, self.capacity())]
        self.timeline: list[tuple[float, str, int]] = []  # (time, job, GPUs held from then)
        # GPU-seconds held: in all, by jobs that fit on one node but span several
        # ("split"), and by jobs that fit in one leaf but span several ("cross_leaf").
        self.layout_gpu_seconds = {"total": 0.0, "split": 0.0, "cross_leaf": 0.0}

    # ----- Backend protocol ------------------------------------------------------
    def start(self, job: Job, placement: JobPlacement) -> None:
        self._reallocate(self._job(job.name), placement)

    def scale(self, job: Job, placement: JobPlacement) -> None:
        self._reallocate(self._job(job.name), placement)

    def halt(self, job: Job) -> None:
        sim = self._job(job.name)
        self._catch_up(sim)
        self._set_placement(sim, ())
        if sim.spec.emulated_speed is not None:  # it resumes from its last whole epoch
            sim.progress = sim.boundaries[sim.epoch]

    def nodes(self) -> list[Node]:
        return list(self._nodes.values())

    def events(self) -> list[Event]:
        out, self._pending = self._pending, []
        return out

    def take_changed(self) -> bool:
        """Whether a job completed or a node changed since the last call."""
        changed, self._changed = self._changed, False
        return changed

    def take_progressed(self) -> bool:
        """Whether a job reported an epoch or a goodput model since the last call."""
        progressed, self._progressed = self._progressed, False
        return progressed

    def next_boundary(self) -> float | None:
        """Lazy mode: the earliest time a running job crosses an epoch boundary (or, adaptive,
        measures again) if nothing changes."""
        heap = self._boundary_heap
        while heap and self._stale(heap[0][1], heap[0][2]):
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def _stale(self, version: int, name: str) -> bool:
        """A heap entry made before the job's last change, or for a job that stopped or
        was forgotten (the emulated cluster drops a deleted or ended job's state)."""
        sim = self.jobs.get(name)
        return (sim is None or version != sim.version or sim.finished is not None
                or not sim.counts)

    # ----- cluster changes ---------------------------------------------------------
    def _refresh_shape(self) -> None:
        """Leaves and the largest node and leaf, after the nodes changed."""
        self._leaf = {n.name: n.leaf_name for n in self._nodes.values()}
        leaf_gpus: dict[str, int] = {}
        for n in self._nodes.values():
            leaf_gpus[n.leaf_name] = leaf_gpus.get(n.leaf_name, 0) + n.gpus
        self._max_node_gpus = max((n.gpus for n in self._nodes.values()), default=1)
        self._max_leaf_gpus = max(leaf_gpus.values(), default=1)

    def capacity(self) -> int:
        return sum(n.gpus for n in self._nodes.values())

    def fail_node(self, name: str) -> None:
        """The node leaves now; jobs on it restart on their other workers (or stop)."""
        node = self._nodes.pop(name)
        for sim in list(self.running.values()):
            if any(n == name for n, _ in sim.placement):
                kept = tuple((n, c) for n, c in sim.placement if n != name)
                if kept:
                    self._reallocate(sim, kept)
                else:
                    self._catch_up(sim)
                    self._set_placement(sim, ())
        self._refresh_shape()
        self.capacity_changes.append((self.now, self.capacity()))
        self._pending.append(Event(EventKind.NODE_REMOVED, self.now, node=node))
        self._changed = True

    def join_node(self, node: Node) -> None:
        self._nodes[node.name] = node
        self._refresh_shape()
        self.capacity_changes.append((self.now, self.capacity()))
        self._pending.append(Event(EventKind.NODE_ADDED, self.now, node=node))
        self._changed = True

    # ----- time ----------------------------------------------------------------------
    def advance(self, to: float) -> None:
        """Move time to `to`: running jobs progress, epoch ends and completions become events."""
        if to <= self.now:
            return
        self._advancing_to = to
        self.busy_gpu_seconds += (to - self.now) * self._held
        if self.integer_time:
            for sim in list(self.running.values()):
                self._step(sim, to)
        else:
            heap = self._boundary_heap
            jobs = self.jobs
            while heap and heap[0][0] <= to:
                when, version, name = heapq.heappop(heap)
                sim = jobs.get(name)
                if (sim is None or version != sim.version or sim.finished is not None
                        or not sim.counts):  # stale (see _stale)
                    continue
                t = sim.t
                self._step(sim, t if t > when else when)  # max(when, sim.t)
                self._schedule(sim)
        self.now = to

    def next_completion(self) -> float | None:
        """The earliest time a running job completes if nothing changes."""
        heap = self._completion_heap
        while heap:
            t, version, name = heap[0]
            if self._stale(version, name):
                heapq.heappop(heap)
                continue
            sim = self.jobs[name]
            if t <= self.now:  # float noise left the job just short: predict afresh
                heapq.heappop(heap)
                self._catch_up(sim)
                heapq.heappush(heap, (self._predict(sim), sim.version, name))
                if heap[0][0] <= self.now and heap[0][2] == name:
                    return self.now
                continue
            return t
        return None

    # ----- internals -------------------------------------------------------------------
    def _job(self, name: str) -> SimJob:
        sim = self.jobs.get(name)
        if sim is None:
            spec = self.specs.get(name)
            if spec is None:
                raise KeyError(f"job {name!r}: not in the simulated workload")
            profile = load_profile(spec.profile) if spec.profile else None
            sim = SimJob(spec, profile, _boundaries(spec, profile), t=self.now,
                         slowdown=self.calibration.get(spec.profile or "", 1.0))
            if spec.adaptive and profile is not None:
                sim.agent = AdaptiveAgent(profile, fixed_batch=spec.batch_size)
            self.jobs[name] = sim
        if sim.finished is not None:
            raise ValueError(f"job {name!r}: already completed at {sim.finished}")
        return sim

    def _catch_up(self, sim: SimJob) -> None:
        if sim.counts and sim.t < self.now:
            self._step(sim, self.now)
        sim.t = self.now

    def _reallocate(self, sim: SimJob, placement: JobPlacement) -> None:
        for node, _ in placement:
            if node not in self._nodes:
                raise ValueError(f"job {sim.spec.name!r}: no node {node!r}")
        self._catch_up(sim)
        self._set_placement(sim, placement)
        if not placement:
            return
        self._set_type(sim, self._nodes[placement[0][0]].gpu_type)
        replicas = sim.gpus
        if sim.profile is not None:
            if sim.agent is not None:
                sim.split = sim.agent.split(len(sim.counts), replicas)
            elif sim.spec.emulated_speed is not None:
                sim.split = split_batch(sim.profile, default_batch(sim.profile, replicas),
                                        replicas)
            else:
                batch = sim.spec.batch_for(sim.profile, replicas)
                sim.split = split_batch(sim.profile, batch, replicas)
            self._set_layout(sim)
        sim.countdown = self._penalty_of(sim.spec)
        sim.restarts += 1
        self._schedule(sim)
        if sim.agent is None:  # _schedule predicts adaptive jobs' completions itself
            self._push_completion(sim)

    def _set_type(self, sim: SimJob, gpu_type: str) -> None:
        """The job runs on `gpu_type` from now: its speed follows that type's profile
        (voda.sim.hetero_profiles); a batch-adaptive job keeps what it measured on each type
        apart, as its throughput differs by type. A job on one type only never changes."""
        if sim.profile is None or gpu_type == sim.gpu_type:
            return
        if sim.gpu_type is None and not measured_types(sim.profile.name, [gpu_type]):
            sim.gpu_type = gpu_type  # no typed profile: the job's own, as before
            return
        base = sim.spec.profile or sim.profile.name
        if sim.agent is not None:
            sim.agents[sim.gpu_type or ""] = sim.agent
        sim.gpu_type = gpu_type
        sim.profile = typed_profile(base, gpu_type)
        if sim.agent is not None:
            agent = sim.agents.get(gpu_type)
            if agent is None:
                agent = AdaptiveAgent(sim.profile, fixed_batch=sim.agent.fixed_batch)
            sim.agent = agent
            sim.reported = None
        sim.forget_rates()

    def _penalty_of(self, spec: JobSpec) -> float:
        return self.penalties.get(spec.profile or "", self.penalty)

    def charges_restarts(self) -> bool:
        """Whether `restart_cost` or `restoring_seconds` may be non-zero for any job."""
        return bool(self.penalties or self.told_penalties)

    def restart_cost(self, name: str) -> float:
        """What one restart costs the job, as the backend tells the policies: where its
        model has its own penalty (`told_penalties`, else `penalties`: the `sia` preset); 0
        otherwise: the policies charge their own."""
        if not self.penalties and not self.told_penalties:  # most runs: no model has one
            return 0.0
        spec = self.specs.get(name)
        if spec is None:
            return 0.0
        model = spec.profile or ""
        return self.told_penalties.get(model, self.penalties.get(model, 0.0))

    def restoring_seconds(self, name: str) -> float:
        """Seconds of the job's restart still under way at `now`, where its model has its
        own penalty (0 otherwise, and for a job holding no GPUs)."""
        if not self.penalties:
            return 0.0
        sim = self.jobs.get(name)
        if sim is None or not sim.counts or not self.penalties.get(sim.spec.profile or ""):
            return 0.0
        return max(0.0, sim.countdown - max(0.0, self.now - sim.t))

    def _push_completion(self, sim: SimJob) -> None:
        heapq.heappush(self._completion_heap, (self._predict(sim), sim.version, sim.spec.name))

    def _account_layout(self, sim: SimJob, until: float) -> None:
        """Add the GPU-seconds of the job's current placement up to `until`."""
        if not sim.counts:
            return
        gpu_seconds = sim.gpus * max(until - sim.placed_at, 0.0)
        acc = self.layout_gpu_seconds
        acc["total"] += gpu_seconds
        if len(sim.counts) > 1 and sim.gpus <= self._max_node_gpus:
            acc["split"] += gpu_seconds
        if sim.gpus <= self._max_leaf_gpus and len(
            {self._leaf.get(n) for n, c in sim.placement if c}
        ) > 1:
            acc["cross_leaf"] += gpu_seconds

    def _set_placement(self, sim: SimJob, placement: JobPlacement) -> None:
        self._account_layout(sim, self.now)
        sim.placed_at = self.now
        self._held -= sim.gpus
        sim.placement = tuple(placement)
        sim.counts = tuple(c for _, c in placement if c)
        sim.gpus = sum(sim.counts)
        self._held += sim.gpus
        sim.forget_rates()
        sim.version += 1
        if sim.counts:
            self.running[sim.spec.name] = sim
        else:
            self.running.pop(sim.spec.name, None)
            sim.split = None
        self.timeline.append((self.now, sim.spec.name, sim.gpus))

    def _set_layout(self, sim: SimJob) -> None:
        """The layout and spine factor the job's speed follows (profiled jobs only)."""
        sim.spine = 1.0
        if self.layout_speed == "packed":
            sim.layout = packed_placement(sim.gpus, self._max_node_gpus)
        elif self.layout_speed == "best":
            assert sim.profile is not None and sim.split is not None
            sim.layout = best_placement(sim.profile.name, sim.gpus, sim.split.atomic_bsz,
                                        sim.split.accum_steps, self._max_node_gpus)
        else:
            sim.layout = sim.counts
            if self.spine_oversubscription != 1.0:
                leaves = {self._leaf[n] for n, c in sim.placement if c}
                if len(leaves) > 1:
                    sim.spine = self.spine_oversubscription
        sim.forget_rates()

    def _schedule(self, sim: SimJob) -> None:
        """Lazy mode: note when the job next crosses an epoch boundary (or, adaptive, when
        it re-picks its batch on a configuration it has not measured)."""
        if self.integer_time or sim.finished is not None or not sim.counts:
            return
        r = sim.rate()
        if r <= 0:
            return
        need = (sim.boundaries[sim.epoch + 1] - sim.progress) / r
        if need < 0.0:  # max(need, 0.0)
            need = 0.0
        if sim.agent is not None:
            if not sim.agent.knows(self._config(sim)):
                need = min(need, ADAPT_SECONDS)
            self._push_completion(sim)
        heapq.heappush(self._boundary_heap,
                       (sim.t + sim.countdown + need, sim.version, sim.spec.name))

    # ----- batch-adaptive jobs ---------------------------------------------------------
    @staticmethod
    def _config(sim: SimJob) -> tuple[int, int, int]:
        assert sim.split is not None
        return len(sim.layout), sim.gpus, sim.split.atomic_bsz

    def _observe(self, sim: SimJob, t: float) -> None:
        """The job measures its step and gradients; a changed model is reported."""
        assert sim.agent is not None and sim.profile is not None and sim.split is not None
        step, sync = step_sync_time(sim.profile.name, sim.layout, sim.split.atomic_bsz)
        step, sync = step * sim.slowdown, sync * sim.slowdown
        if sim.spine != 1.0:
            step, sync = step + (sim.spine - 1.0) * sync, sim.spine * sync
        stats = grad_stats(sim.profile.name, sim.split.effective_batch, sim.epoch)
        sim.agent.observe(self._config(sim), step, sync, stats)
        model = sim.agent.model()
        if model != sim.reported:
            sim.reported = model
            self._pending.append(Event(EventKind.GOODPUT_REPORTED, t, job=sim.spec.name,
                                       data={"goodput": model}))
            self._progressed = True

    def _adapt(self, sim: SimJob) -> None:
        """The job picks its batch again for the GPUs it holds."""
        assert sim.agent is not None
        split = sim.agent.split(len(sim.counts), sim.gpus)
        if split != sim.split:
            sim.split = split
            self._set_layout(sim)

    def _step(self, sim: SimJob, to: float) -> None:
        """Run `sim` from its own time to `to` on its current placement."""
        t = sim.t
        seconds = to - t
        countdown = sim.countdown
        delay = seconds if seconds < countdown else countdown  # min(countdown, seconds)
        sim.countdown = countdown - delay
        t += delay
        seconds -= delay
        sim.t = to
        boundaries = sim.boundaries
        last = len(boundaries) - 1
        integer_time = self.integer_time
        while seconds > 0 and sim.finished is None:
            if sim.agent is not None:
                self._observe(sim, t)
            r = sim.rate()
            progress = sim.progress
            target = boundaries[sim.epoch + 1]
            if integer_time:
                if progress + r * seconds < target:
                    sim.progress = progress + r * seconds
                    if sim.agent is not None:
                        self._adapt(sim)
                    return
                delta: float = round(float((target - progress) / r))
            else:
                need = (target - progress) / r
                if need > seconds * (1 + 1e-12) + 1e-9:
                    sim.progress = progress + r * seconds
                    if sim.agent is not None:
                        self._adapt(sim)
                    return
                delta = 0.0 if need < 0.0 else need  # min(max(need, 0.0), seconds)
                if seconds < delta:
                    delta = seconds
            epoch = sim.epoch = sim.epoch + 1
            sim.progress = target
            t += delta
            seconds -= delta
            if self.report_epochs:
                self._report_epoch(sim, t, (target - boundaries[epoch - 1]) / r)
            if epoch >= last:
                self._complete(sim, t)
            elif sim.agent is not None:
                self._adapt(sim)

    def _report_epoch(self, sim: SimJob, t: float, took: float) -> None:
        """The job ended an epoch at `t` after `took` seconds at its current rate."""
        spec = sim.spec
        if spec.emulated_speed is not None:  # emulated: in its own units
            took *= spec.emulated_speed
        throughput = sim.samples_per_second()
        data = {"epoch": sim.epoch, "epoch_seconds": 1e-9 if took < 1e-9 else took,
                "workers": sim.gpus}
        if throughput is not None:
            data["samples_per_second"] = throughput
        # positional: a frozen dataclass reads keyword arguments at about twice the cost
        self._pending.append(Event(EventKind.EPOCH_REPORTED, t, spec.name, None, data))
        self._progressed = True

    def _complete(self, sim: SimJob, t: float) -> None:
        """The job ended its last epoch at `t`."""
        self._account_layout(sim, t)
        sim.finished = t
        sim.t = t
        self.busy_gpu_seconds -= max(self._advancing_to - t, 0.0) * sim.gpus
        self._held -= sim.gpus
        self.running.pop(sim.spec.name, None)
        self.timeline.append((t, sim.spec.name, 0))
        self._pending.append(Event(EventKind.JOB_COMPLETED, t, job=sim.spec.name))
        self._changed = True

    def _predict(self, sim: SimJob) -> float:
        """Completion time if the placement stays, without changing the job."""
        t = sim.t + sim.countdown
        progress = sim.progress
        boundaries = sim.boundaries
        rates = sim.rates if sim.rates is not None else sim.rates_by_epoch()
        first = sim.epoch
        # (rate, end of epoch) of each epoch left
        ahead = zip(rates[first:len(boundaries) - 1], boundaries[first + 1:], strict=True)
        if self.integer_time:
            for r, target in ahead:
                if r <= 0:
                    return math.inf
                t += round((target - progress) / r)
                progress = target
            return t
        for r, target in ahead:
            if r <= 0:
                return math.inf
            need = (target - progress) / r
            t += 0.0 if need < 0.0 else need  # max(need, 0.0), without the call
            progress = target
        return t

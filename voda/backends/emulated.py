"""An emulated cluster: jobs progress in real time, `time_scale` times faster.

A job with a measured profile runs at the profile's speed on its placement
(`voda.sim.speed.epoch_seconds`); a job without one takes
`default_epoch_seconds` per epoch on one GPU, with linear speedup. Epoch
boundaries become EPOCH_REPORTED events, the last one JOB_COMPLETED. The epoch
times and throughputs they report are in emulated seconds (wall x time_scale),
so a policy decides as it would on the slower cluster emulated
(docs/design/002-simulator.md, "Replayed through the service").

Progress is a function of the wall clock from the moment of the last start or
rescale, so the emulated cluster behaves like a real one that keeps running
while the service is down: `export_state` / `import_state` carry the running
jobs across a restart, and `running()` lets the restarted service adopt them.
A halted job resumes from its last completed epoch (its checkpoint).

A job submitted with `adaptive: true` (and a profile) is a batch-adaptive job instead:
the simulator's job model run in emulated time (voda.backends.emulated_adaptive). It
declares its batch limits when it is registered, then reports its goodput model and its
epochs as the simulator's jobs do, and goes on from where it stopped after a halt,
resize or move. Its progress is carried across a restart as of the last export (at most
an epoch behind), not as if it had kept running.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from voda.backends.emulated_adaptive import AdaptiveJobs, declared_model
from voda.core.model import DEFAULT_GPU_TYPE, Job, JobPlacement, Node
from voda.engine.events import Event, EventKind
from voda.spec import JobSpec
from voda.spec.errors import FieldError, SpecError

DEFAULT_EPOCH_SECONDS = 60.0
EpochSeconds = Callable[[str, tuple[int, ...]], float]


class ClusterSpecError(ValueError):
    pass


def parse_cluster(spec: str) -> list[Node]:
    """`4x4`, `2x8:a100,4x4:t4` (nodes x GPUs[:type]) or the path of a YAML cluster file.

    A cluster file lists nodes, one by one or in groups:

        nodes:
          - {name: a, gpus: 8, gpu_type: a100, leaf: rack-1}
          - {count: 4, gpus: 4, gpu_type: t4, leaf: rack-2}
    """
    path = Path(spec)
    if path.suffix in (".yaml", ".yml", ".json") or path.is_file():
        return _cluster_file(path)
    nodes: list[Node] = []
    for i, part in enumerate(p.strip() for p in spec.split(",")):
        shape, _, gpu_type = part.partition(":")
        count, sep, gpus = shape.partition("x")
        if not sep or not count.isdigit() or not gpus.isdigit() or int(count) < 1 or (
            int(gpus) < 1
        ):
            raise ClusterSpecError(
                f"cluster: expected NODESxGPUS[:TYPE] (e.g. 4x4 or 2x8:a100), got {part!r}"
            )
        kind = gpu_type or DEFAULT_GPU_TYPE
        prefix = "node" if len(spec.split(",")) == 1 else f"{kind}-{i}"
        nodes.extend(Node(f"{prefix}-{j}", int(gpus), kind) for j in range(int(count)))
    return nodes


def _cluster_file(path: Path) -> list[Node]:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ClusterSpecError(f"cluster file {path}: {exc}") from None
    entries = data.get("nodes") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ClusterSpecError(f"cluster file {path}: expected a non-empty 'nodes' list")
    nodes: list[Node] = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("gpus"), int) or (
            entry["gpus"] < 1
        ):
            raise ClusterSpecError(f"cluster file {path}: nodes[{i}].gpus must be an integer >= 1")
        count = int(entry.get("count", 1))
        for j in range(count):
            default_name = f"node-{len(nodes)}"
            name = entry.get("name", default_name)
            nodes.append(Node(
                name=f"{name}-{j}" if count > 1 and "name" in entry else name,
                gpus=int(entry["gpus"]),
                gpu_type=str(entry.get("gpu_type", DEFAULT_GPU_TYPE)),
                leaf=entry.get("leaf"),
                spine=entry.get("spine"),
            ))
    names = [n.name for n in nodes]
    if len(set(names)) != len(names):
        raise ClusterSpecError(f"cluster file {path}: node names must be unique")
    return nodes


@dataclass(slots=True)
class Run:
    placement: JobPlacement
    epochs: int
    base_epochs: float  # progress at base_time
    base_time: float
    epoch_seconds: float  # wall seconds per epoch on this placement
    reported: int  # last epoch reported
    profile: str | None = None

    def progress(self, now: float) -> float:
        elapsed = (now - self.base_time) / self.epoch_seconds
        return min(float(self.epochs), self.base_epochs + elapsed)


def _profile_epoch_seconds(profile: str, gpus_per_node: tuple[int, ...]) -> float:
    from voda.sim.speed import epoch_seconds  # loads scipy: only when a profiled job runs

    return epoch_seconds(profile, gpus_per_node)


def _samples_per_epoch(profile: str) -> float | None:
    """Samples in one epoch of a measured profile; None for a name the profiles lack."""
    from voda.sim.profiles import ProfileError, load_profile

    try:
        return float(load_profile(profile).samples_per_epoch)
    except ProfileError:
        return None


class EmulatedBackend:
    """Backend, SupportsDelete and SupportsAdoption for an emulated cluster."""

    name = "emulated"

    def __init__(
        self,
        nodes: list[Node],
        time_scale: float = 60.0,
        clock: Callable[[], float] = time.time,
        default_epoch_seconds: float = DEFAULT_EPOCH_SECONDS,
        profile_epoch_seconds: EpochSeconds = _profile_epoch_seconds,
    ) -> None:
        if time_scale <= 0:
            raise ValueError(f"time_scale: must be positive, got {time_scale}")
        self._nodes = list(nodes)
        self.time_scale = time_scale
        self.clock = clock
        self.default_epoch_seconds = default_epoch_seconds
        self._profile_epoch_seconds = profile_epoch_seconds
        self.runs: dict[str, Run] = {}
        self.profiles: dict[str, str] = {}  # job -> profile, set by the service at submission
        # job -> its submitted document, set by the service (`adaptive`, `batch_size`).
        self.specs: dict[str, dict[str, Any]] = {}
        self.adaptive_jobs = AdaptiveJobs(self._nodes, time_scale)
        self.declared: set[str] = set()  # adaptive jobs whose batch limits were reported
        self.version = 0  # bumped on every change of exported state
        # Events made but not yet handed over: a call that fails part-way keeps those it
        # made (their state changes are done) for the next call.
        self._outbox: list[Event] = []

    # ----- batch-adaptive jobs ---------------------------------------------------------
    def adaptive_batch(self, name: str) -> tuple[bool, int | None]:
        """Whether the job is batch-adaptive (with a profile), and the batch it keeps."""
        document = self.specs.get(name) or {}
        if document.get("adaptive") is not True or not self.profiles.get(name):
            return False, None
        batch = document.get("batch_size")
        return True, batch if isinstance(batch, int) and not isinstance(batch, bool) else None

    def job_resumes_within_epoch(self, name: str) -> bool:
        """Adaptive jobs go on from where they stopped; epoch jobs from their last epoch."""
        return self.adaptive_batch(name)[0]

    def check_spec(self, spec: JobSpec) -> None:
        """Refuse at submission an adaptive job this cluster cannot run (SpecError)."""
        if not spec.adaptive:
            return
        if not spec.profile:
            raise SpecError([FieldError("profile", "a batch-adaptive job (adaptive: true) "
                                        "needs a profile on the emulated cluster")])
        from voda.sim.profiles import load_profile

        profile = load_profile(spec.profile)
        errors = []
        epochs = min(len(v.progress) for v in profile.validation)
        if spec.epochs > epochs:
            errors.append(FieldError("epochs", f"{profile.name} is profiled for {epochs} "
                                     f"epochs at most, got {spec.epochs}"))
        batch = profile.max_batch_size
        if spec.batch_size is not None:
            if not profile.init_batch_size <= spec.batch_size <= profile.max_batch_size:
                errors.append(FieldError("batch_size", f"must lie in {profile.name}'s range "
                                         f"[{profile.init_batch_size}, "
                                         f"{profile.max_batch_size}], got {spec.batch_size}"))
            batch = spec.batch_size
        most = max(batch // profile.min_local_bsz, 1)
        if spec.max_workers > most:
            errors.append(FieldError("max", f"a batch of at most {batch} runs on at most "
                                     f"{most} GPUs ({profile.name}'s smallest per-GPU batch "
                                     f"is {profile.min_local_bsz}), got {spec.max_workers}"))
        if errors:
            raise SpecError(errors)

    def _declarations(self, now: float) -> list[Event]:
        """Adaptive jobs registered since the last call declare their batch limits."""
        out = []
        for name in sorted(set(self.specs) - self.declared):
            adaptive, batch = self.adaptive_batch(name)
            if adaptive and not self.adaptive_jobs.knows(name):
                model = declared_model(self.profiles[name], batch)
                out.append(Event(EventKind.GOODPUT_REPORTED, now, job=name,
                                 data={"goodput": model}))
            self.declared.add(name)
        return out

    # ----- Backend ------------------------------------------------------------------
    def start(self, job: Job, placement: JobPlacement) -> None:
        self._check(job.name, placement)
        now = self.clock()
        profile = self.profiles.get(job.name)
        adaptive, batch = self.adaptive_batch(job.name)
        if adaptive and profile:
            self.adaptive_jobs.start(job, profile, batch, placement, now)
            self.version += 1
            return
        self.runs[job.name] = Run(
            placement=tuple(placement),
            epochs=job.epochs,
            base_epochs=float(math.floor(job.completed_epochs)),
            base_time=now,
            epoch_seconds=self.wall_epoch_seconds(profile, placement),
            reported=math.floor(job.completed_epochs),
            profile=profile,
        )
        self.version += 1

    def scale(self, job: Job, placement: JobPlacement) -> None:
        self._check(job.name, placement)
        if self.adaptive_jobs.knows(job.name):
            self.adaptive_jobs.scale(job, placement, self.clock())
            self.version += 1
            return
        run = self.runs.get(job.name)
        if run is None:
            self.start(job, placement)
            return
        now = self.clock()
        run.base_epochs = run.progress(now)
        run.base_time = now
        run.placement = tuple(placement)
        run.epoch_seconds = self.wall_epoch_seconds(run.profile, placement)
        self.version += 1

    def halt(self, job: Job) -> None:
        if self.adaptive_jobs.knows(job.name):
            self.adaptive_jobs.halt(job.name, self.clock())
            self.version += 1
        if self.runs.pop(job.name, None) is not None:
            self.version += 1

    def delete(self, job: str) -> None:
        self._forget(job)
        if self.runs.pop(job, None) is not None:
            self.version += 1

    def _forget(self, job: str) -> None:
        self.profiles.pop(job, None)
        self.specs.pop(job, None)
        self.declared.discard(job)
        if self.adaptive_jobs.knows(job):
            self.adaptive_jobs.forget(job, self.clock())
            self.version += 1

    def nodes(self) -> list[Node]:
        return list(self._nodes)

    # ----- nodes changed at run time ---------------------------------------------------
    def add_node(self, node: Node) -> None:
        if any(n.name == node.name for n in self._nodes):
            raise ValueError(f"name: node {node.name!r} exists")
        self._nodes.append(node)
        self.adaptive_jobs.add_node(node, self.clock())
        self.version += 1

    def remove_node(self, name: str) -> None:
        """Forget a node; jobs with workers on it (none after a drain) stop."""
        self._nodes = [n for n in self._nodes if n.name != name]
        for job, run in list(self.runs.items()):
            if any(node == name for node, _ in run.placement):
                del self.runs[job]
        self.adaptive_jobs.remove_node(name, self.clock())
        self.version += 1

    def events(self) -> list[Event]:
        now = self.clock()
        out = self._outbox
        out.extend(self._declarations(now))
        adaptive = self.adaptive_jobs.events(now)
        if adaptive:
            self.version += 1
        out.extend(adaptive)
        for event in adaptive:
            if event.kind is EventKind.JOB_COMPLETED and event.job is not None:
                self._forget(event.job)
        for name in sorted(self.runs):
            run = self.runs[name]
            progress = run.progress(now)
            workers = sum(c for _, c in run.placement)
            done = min(run.epochs, math.floor(progress + 1e-9))
            reporting = run.profile and done > run.reported
            samples = _samples_per_epoch(run.profile) if reporting else None
            # Speeds in emulated seconds, as the job would measure them on a cluster
            # `time_scale` times slower: the policies' own constants (a restart charge, the
            # epoch time assumed before any is measured) are in those seconds too.
            measured = run.epoch_seconds * self.time_scale
            for epoch in range(run.reported + 1, done + 1):
                at = run.base_time + (epoch - run.base_epochs) * run.epoch_seconds
                data: dict[str, float] = {"epoch": epoch, "epoch_seconds": measured,
                                          "workers": workers}
                if samples is not None:
                    data["samples_per_second"] = samples / measured
                out.append(Event(EventKind.EPOCH_REPORTED, min(at, now), job=name, data=data))
            if done > run.reported:
                run.reported = done
                self.version += 1
            if done >= run.epochs:
                at = run.base_time + (run.epochs - run.base_epochs) * run.epoch_seconds
                out.append(Event(EventKind.JOB_COMPLETED, min(at, now), job=name))
                del self.runs[name]
                self._forget(name)
                self.version += 1
        self._outbox = []
        return out

    # ----- SupportsAdoption and state across restarts ------------------------------------
    def running(self) -> dict[str, JobPlacement]:
        return {**{name: run.placement for name, run in self.runs.items()},
                **self.adaptive_jobs.running()}

    def export_state(self) -> dict[str, Any]:
        return {"runs": {name: asdict(run) for name, run in self.runs.items()},
                "profiles": dict(self.profiles), "declared": sorted(self.declared),
                "adaptive": self.adaptive_jobs.export_state()}

    def import_state(self, state: dict[str, Any]) -> None:
        self.profiles = dict(state.get("profiles", {}))
        self.declared = {str(name) for name in state.get("declared", [])}
        self.adaptive_jobs.import_state(state.get("adaptive") or {}, self.clock())
        self.runs = {}
        capacity = {n.name for n in self._nodes}
        for name, values in state.get("runs", {}).items():
            run = Run(**{**values, "placement": tuple((str(n), int(c))
                                                      for n, c in values["placement"])})
            if all(node in capacity for node, _ in run.placement):
                self.runs[name] = run
        self.version += 1

    # ----- speed -------------------------------------------------------------------------
    def wall_epoch_seconds(self, profile: str | None, placement: JobPlacement) -> float:
        """Wall seconds per epoch on `placement` (emulated seconds / time_scale)."""
        workers = sum(c for _, c in placement)
        if workers <= 0:
            return math.inf
        if profile:
            per_node = tuple(sorted((c for _, c in placement if c > 0), reverse=True))
            seconds = self._profile_epoch_seconds(profile, per_node)
        else:
            seconds = self.default_epoch_seconds / workers
        return seconds / self.time_scale

    def _check(self, job: str, placement: JobPlacement) -> None:
        capacity = {n.name: n.gpus for n in self._nodes}
        used: dict[str, int] = {}
        for name, held in self.running().items():
            if name == job:
                continue
            for node, count in held:
                used[node] = used.get(node, 0) + count
        for node, count in placement:
            if node not in capacity:
                raise ValueError(f"job {job!r}: no node {node!r}")
            if used.get(node, 0) + count > capacity[node]:
                raise ValueError(f"job {job!r}: node {node!r} over capacity")

"""Workload files -> simulated jobs. See docs/design/002-simulator.md for the mapping.

Three formats, told apart by extension and header:

- Pollux CSV `name,time,application,num_replicas,batch_size`: a profiled job,
  under one of four job models (`JOB_MODELS`). Rigid: exactly num_replicas GPUs
  at the global batch batch_size. Elastic (default): 1..max GPUs at a fixed
  per-GPU batch l = ceil(batch_size / num_replicas), where
  max = min(2 x num_replicas, floor(max batch / l), 64). Fixed-batch (the Pollux
  artifact's Optimus jobs): the global batch batch_size on 1..floor(batch_size /
  min local batch) GPUs. Adaptive (its Pollux jobs): the job picks its batch for
  the GPUs it holds by goodput, on 1..floor(max batch / min local batch) GPUs.
  Under both, ncf runs on one GPU (adaptive: at a fixed batch of 32768).
- Philly CSV `timestamp,duration,num_gpus,gpu_time,cluster`: a job of fixed work,
  duration x num_gpus GPU-seconds at linear speedup, in 10 epochs. Rigid: exactly
  num_gpus; elastic: 1..num_gpus. Arrival is seconds after the earliest timestamp.
- Native YAML (a list, or {jobs: [...]}) or CSV with `arrival`: fields arrival,
  name, model (a profile) with epochs, or duration (seconds at the preferred size),
  min, max, preferred, priority, batch_size (per GPU), gpu_type.

Every error names the file, the line and the reason.
"""

from __future__ import annotations

import csv
import functools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from voda.core.model import ANY_GPU_TYPE, DEFAULT_GPU_TYPE
from voda.sim.profiles import Profile, ProfileError, ceil_div, load_profile, profile_names

POLLUX_COLUMNS = ("name", "time", "application", "num_replicas", "batch_size")
PHILLY_COLUMNS = ("timestamp", "duration", "num_gpus")
PHILLY_EPOCHS = 10
MAX_PROFILED_GPUS = 64
# How a profiled job uses GPUs and batch size (docs/design/002-simulator.md).
JOB_MODELS = ("elastic", "rigid", "fixed-batch", "adaptive")
# The Pollux artifact pins ncf to one GPU (and to this batch when adaptive).
ONE_GPU_APPLICATIONS = {"ncf": 32768}
LOADS = ("0.5", "1.0", "1.5", "2.0")  # the Pollux workloads' load variants
# Row order is kept as a tie-break among equal arrival times: the engine sees
# submit_time = arrival - (rows - row) * ORDER_EPSILON (see JobSpec.engine_submit).
ORDER_EPSILON = 1e-7


class WorkloadError(ValueError):
    def __init__(self, path: str | Path, line: int | None, reason: str) -> None:
        self.path = str(path)
        self.line = line
        self.reason = reason
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {reason}")


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One simulated job: its request to the scheduler and the work it has to do."""

    name: str
    submit: float  # seconds from the start of the simulation
    order: int  # row index in arrival order
    min_workers: int
    max_workers: int
    preferred_workers: int | None
    epochs: int
    priority: int = 0
    gpu_type: str = DEFAULT_GPU_TYPE
    category: str = ""
    # The GPU types it accepts (Job.gpu_types; ANY_GPU_TYPE: every one); empty: gpu_type.
    gpu_types: tuple[str, ...] = ()
    # Profiled work: the application, and either a fixed global batch or a per-GPU batch.
    profile: str | None = None
    batch_size: int | None = None  # fixed global batch (rigid Pollux jobs)
    per_gpu_batch: int | None = None  # elastic jobs: global batch = per-GPU batch x GPUs
    # The job picks its batch by goodput for the GPUs it holds (voda.sim.adaptive);
    # with `batch_size` set too it keeps that batch but still reports its goodput.
    adaptive: bool = False
    # Duration-based work: GPU-seconds at linear speedup.
    work: float | None = None
    # The emulated backend's job (`as_emulated`): epochs of one length at the default batch,
    # `voda.sim.speed.epoch_seconds(profile, layout) / emulated_speed` seconds each (reported
    # in emulated seconds, x emulated_speed), no statistical efficiency; a halt loses the
    # epoch under way. None: the job model above.
    emulated_speed: float | None = None
    # The row's columns as the file wrote them (CSV workloads): what a queue file's
    # `match` reads (voda.sim.queues), e.g. the Philly trace's virtual `cluster`.
    columns: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    def batch_for(self, profile: Profile, replicas: int) -> int:
        """The global batch on `replicas` GPUs, within the profile's validated range."""
        if self.batch_size is not None:
            return self.batch_size
        per_gpu = self.per_gpu_batch or profile.init_batch_size
        return min(max(per_gpu * replicas, profile.init_batch_size), profile.max_batch_size)


@dataclass(frozen=True)
class Workload:
    source: str
    jobs: tuple[JobSpec, ...]  # in arrival order

    def engine_submit(self, spec: JobSpec) -> float:
        """The submit time the engine sees: arrival, nudged so row order breaks ties."""
        return spec.submit - (len(self.jobs) - spec.order) * ORDER_EPSILON


def jitter_arrivals(workload: Workload, seconds: float, seed: int) -> Workload:
    """The same jobs, each arriving up to `seconds` earlier or later (uniform, seeded).

    One trace gives one sample of a scheduler's behaviour, and average JCT can
    move by several percent when a few jobs arrive a minute apart; replicas with
    jittered arrivals show what is effect and what is chance.
    """
    if not seconds >= 0:
        raise ValueError(f"jitter: must be a number of seconds >= 0, got {seconds}")
    if seconds == 0:
        return workload
    rng = np.random.default_rng(seed)
    shifts = rng.uniform(-seconds, seconds, len(workload.jobs))
    moved = sorted(
        (max(0.0, spec.submit + float(shift)), spec.order, spec)
        for shift, spec in zip(shifts, workload.jobs, strict=True)
    )
    jobs = tuple(replace(spec, submit=submit, order=i)
                 for i, (submit, _, spec) in enumerate(moved))
    return Workload(workload.source, jobs)


def as_emulated(workload: Workload, time_scale: float = 1.0) -> Workload:
    """The profiled jobs of `workload` as `voda serve --backend emulated` runs them, on a
    clock `time_scale` times faster: arrivals divided by it, epochs that many times shorter.

    The emulated backend knows a job only by its profile, epochs and worker range: its
    epochs take `speed.epoch_seconds` at the default batch (M0 per GPU), whatever the job
    model said about batch sizes (docs/design/002-simulator.md, "Replayed through the
    service"). Raises ValueError for a job without a profile.
    """
    if not (math.isfinite(time_scale) and time_scale > 0):
        raise ValueError(f"time_scale: must be a positive number, got {time_scale!r}")
    jobs = []
    for spec in workload.jobs:
        if spec.profile is None:
            raise ValueError(f"job {spec.name!r}: the emulated backend runs profiled jobs "
                             "only (this one has a duration, not a model)")
        jobs.append(replace(spec, submit=spec.submit / time_scale, batch_size=None,
                            per_gpu_batch=None, adaptive=False, emulated_speed=time_scale))
    return Workload(workload.source, tuple(jobs))


def check_job_model(value: str) -> str:
    if value not in JOB_MODELS:
        raise ValueError(f"job_model: must be one of {', '.join(JOB_MODELS)}, got {value!r}")
    return value


def _builtin_folders() -> tuple[Path, ...]:
    base = Path(str(resources.files("voda") / "data"))
    return (base / "pollux" / "workloads", base / "philly")


def builtin_names() -> list[str]:
    """The built-in workloads: `workload-1`..`workload-4` (Pollux) and `philly`; each
    Pollux workload also comes at other loads as `workload-N@L` (L in LOADS)."""
    return sorted(p.stem for folder in _builtin_folders() for p in folder.glob("*.csv"))


def builtin_workload(name: str) -> Path | None:
    """The file of a built-in workload (see `builtin_names`; `workload-N@1.0` is
    `workload-N`), or None."""
    stem, _, load = name.removesuffix(".csv").partition("@")
    if load and load not in LOADS:
        return None
    folders = _builtin_folders()
    if load and load != "1.0":
        folders = (Path(str(resources.files("voda") / "data" / "pollux" / f"workloads-{load}")),)
    for folder in folders:
        candidate = folder / f"{stem}.csv"
        if candidate.is_file():
            return candidate
    return None


def accepting_any_type(workload: Workload) -> Workload:
    """The workload with every job that names no GPU type accepting every type (on a
    cluster of several types, a job that names none may run on any)."""
    jobs = tuple(replace(spec, gpu_types=(ANY_GPU_TYPE,))
                 if spec.gpu_type == DEFAULT_GPU_TYPE and not spec.gpu_types else spec
                 for spec in workload.jobs)
    return replace(workload, jobs=jobs)


def with_gpu_type(workload: Workload, gpu_type: str) -> Workload:
    """The workload with every job that names no GPU type put on `gpu_type`."""
    jobs = tuple(replace(spec, gpu_type=gpu_type) if spec.gpu_type == DEFAULT_GPU_TYPE
                 else spec for spec in workload.jobs)
    return Workload(workload.source, jobs)


def load_workload(path: str | Path, rigid: bool = False, job_model: str | None = None
                  ) -> Workload:
    """Read a workload file (or a built-in name); raises WorkloadError on bad input.

    `job_model` (one of JOB_MODELS) says how profiled jobs use GPUs and batch size;
    `rigid=True` is the same as "rigid". Default: elastic.
    """
    model = check_job_model(job_model or ("rigid" if rigid else "elastic"))
    p = Path(path)
    if not p.exists():
        found = builtin_workload(str(path))
        if found is None:
            raise WorkloadError(path, None, "no such file, nor a built-in workload "
                                            f"(built in: {', '.join(builtin_names())}; "
                                            f"workload-N@L at load L of {', '.join(LOADS)})")
        p = found
    if p.is_dir():
        raise WorkloadError(p, None, "is a directory, not a workload file")
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise WorkloadError(p, None, f"cannot read: {exc}") from None
    return _parsed(p, text, model)


@functools.lru_cache(maxsize=8)
def _parsed(p: Path, text: str, model: str) -> Workload:
    """The workload `text` of file `p` describes (cached: a comparison reads one file once
    per algorithm and check; Workload and JobSpec are frozen)."""
    if p.suffix.lower() in (".yaml", ".yml"):
        jobs = _native_yaml(p, text, model == "rigid")
    else:
        jobs = _csv(p, text, model)
    if not jobs:
        raise WorkloadError(p, None, "no jobs")
    jobs.sort(key=lambda j: (j.submit, j.order))
    ordered = in_arrival_order(jobs)
    names: dict[str, int] = {}
    for j in ordered:
        if j.name in names:
            raise WorkloadError(p, None, f"job name {j.name!r} appears twice")
        names[j.name] = j.order
    return Workload(str(p), ordered)


def in_arrival_order(jobs: list[JobSpec]) -> tuple[JobSpec, ...]:
    """The jobs (sorted by arrival), each with its index as its `order`. Each was just
    built by the parser and is held nowhere else, so its order is set as its frozen
    __init__ sets a field (`dataclasses.replace`, a copy per job of a trace not in arrival
    order, took most of reading the Philly trace)."""
    for i, job in enumerate(jobs):
        if job.order != i:
            object.__setattr__(job, "order", i)
    return tuple(jobs)


# ----- CSV ------------------------------------------------------------------------
def _csv(path: Path, text: str, model: str) -> list[JobSpec]:
    rigid = model == "rigid"
    reader = csv.DictReader(text.splitlines())
    header = [h.strip() for h in (reader.fieldnames or [])]
    if not header:
        raise WorkloadError(path, 1, "empty file: expected a header row")
    reader.fieldnames = header
    if "timestamp" in header or "num_gpus" in header:
        kind, needed = "philly", PHILLY_COLUMNS
    elif "arrival" in header:
        kind, needed = "native", ("arrival",)
    else:
        kind, needed = "pollux", POLLUX_COLUMNS
    missing = [c for c in needed if c not in header]
    if missing:
        raise WorkloadError(
            path, 1, f"missing column {missing[0]!r} (a {kind} workload needs {', '.join(needed)})"
        )
    rows = [(reader.line_num, row) for row in reader]  # blank lines are skipped
    if kind == "pollux":
        specs = [_pollux_row(path, line, row, i, model) for i, (line, row) in enumerate(rows)]
    elif kind == "philly":
        specs = _philly(path, rows, rigid)
    else:
        specs = [_native(path, line, row, i, rigid) for i, (line, row) in enumerate(rows)]
    for spec, (_, row) in zip(specs, rows, strict=True):
        # Each spec was just built and is held nowhere else: its columns are set as its
        # frozen __init__ sets a field (dataclasses.replace would copy it, for 5x more).
        object.__setattr__(spec, "columns",
                           {k: (v or "").strip() for k, v in row.items() if k})
    return specs


def _field(path: Path, line: int, row: Mapping[str, Any], column: str) -> str:
    value = row.get(column)
    if value is None or str(value).strip() == "":
        raise WorkloadError(path, line, f"{column}: missing value")
    return str(value).strip()


def _number(path: Path, line: int, row: Mapping[str, Any], column: str) -> float:
    raw = _field(path, line, row, column)
    try:
        value = float(raw)
    except ValueError:
        raise WorkloadError(path, line, f"{column}: {raw!r} is not a number") from None
    if not math.isfinite(value):
        raise WorkloadError(path, line, f"{column}: {raw!r} is not a finite number")
    return value


def _integer(path: Path, line: int, row: Mapping[str, Any], column: str, least: int) -> int:
    value = _number(path, line, row, column)
    if value != int(value):
        raise WorkloadError(path, line, f"{column}: {value:g} is not a whole number")
    if value < least:
        raise WorkloadError(path, line, f"{column}: must be at least {least}, got {value:g}")
    return int(value)


def _time(path: Path, line: int, row: Mapping[str, Any], column: str) -> float:
    value = _number(path, line, row, column)
    if value < 0:
        raise WorkloadError(path, line, f"{column}: must not be negative, got {value:g}")
    return value


def _profile(path: Path, line: int, name: str) -> Profile:
    try:
        return load_profile(name)
    except ProfileError:
        raise WorkloadError(
            path, line,
            f"unknown application {name!r}; known: {', '.join(profile_names())}",
        ) from None


def elastic_max(profile: Profile, replicas: int, per_gpu_batch: int) -> int:
    """The elastic ceiling: twice the requested GPUs, within the batch limit and 64 GPUs."""
    by_batch = max(1, profile.max_batch_size // per_gpu_batch)
    return max(1, min(2 * replicas, by_batch, MAX_PROFILED_GPUS))


def _pollux_row(path: Path, line: int, row: Mapping[str, Any], i: int, model: str) -> JobSpec:
    name = _field(path, line, row, "name")
    submit = _time(path, line, row, "time")
    profile = _profile(path, line, _field(path, line, row, "application"))
    replicas = _integer(path, line, row, "num_replicas", 1)
    batch = _integer(path, line, row, "batch_size", 1)
    if not profile.init_batch_size <= batch <= profile.max_batch_size:
        raise WorkloadError(
            path, line,
            f"batch_size: {batch} outside {profile.name}'s range "
            f"{profile.init_batch_size}..{profile.max_batch_size}",
        )
    if model == "rigid":
        return JobSpec(name, submit, i, replicas, replicas, replicas, profile.epochs,
                       category=profile.name, profile=profile.name, batch_size=batch)
    if model == "fixed-batch":
        top = 1 if profile.name in ONE_GPU_APPLICATIONS else min(
            max(batch // profile.min_local_bsz, 1), MAX_PROFILED_GPUS)
        return JobSpec(name, submit, i, 1, top, min(replicas, top), profile.epochs,
                       category=profile.name, profile=profile.name, batch_size=batch)
    if model == "adaptive":
        fixed = ONE_GPU_APPLICATIONS.get(profile.name)
        top = 1 if fixed is not None else min(
            max(profile.max_batch_size // profile.min_local_bsz, 1), MAX_PROFILED_GPUS)
        return JobSpec(name, submit, i, 1, top, min(replicas, top), profile.epochs,
                       category=profile.name, profile=profile.name, batch_size=fixed,
                       adaptive=True)
    per_gpu = ceil_div(batch, replicas)
    top = elastic_max(profile, replicas, per_gpu)
    return JobSpec(name, submit, i, 1, top, min(replicas, top), profile.epochs,
                   category=profile.name, profile=profile.name, per_gpu_batch=per_gpu)


def _parse_timestamp(path: Path, line: int, raw: str) -> float:
    try:
        stamp = datetime.fromisoformat(raw)
        return (stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)).timestamp()
    except ValueError:
        raise WorkloadError(path, line, f"timestamp: {raw!r} is not a date and time") from None


def _philly(path: Path, rows: list[tuple[int, dict[str, str]]], rigid: bool) -> list[JobSpec]:
    parsed = []
    for line, row in rows:
        stamp = _parse_timestamp(path, line, _field(path, line, row, "timestamp"))
        duration = _number(path, line, row, "duration")
        if duration <= 0:
            raise WorkloadError(path, line, f"duration: must be positive, got {duration:g}")
        gpus = _integer(path, line, row, "num_gpus", 1)
        parsed.append((line, stamp, duration, gpus))
    start = min((p[1] for p in parsed), default=0.0)
    jobs = []
    for i, (line, stamp, duration, gpus) in enumerate(parsed):
        low = gpus if rigid else 1
        # No category, as for native duration jobs: a category says its jobs train one
        # model (the engine gives a new job its category's epoch times), and a Philly row
        # names none; its jobs of one GPU count run from a minute to ten days.
        jobs.append(JobSpec(f"philly-{line - 1}", stamp - start, i, low, gpus, gpus,
                            PHILLY_EPOCHS, work=duration * gpus))
    return jobs


# ----- native ----------------------------------------------------------------------
NATIVE_FIELDS = frozenset({"arrival", "name", "model", "profile", "epochs", "duration", "min",
                           "max", "preferred", "priority", "batch_size", "gpu_type"})


def _native_yaml(path: Path, text: str, rigid: bool) -> list[JobSpec]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise WorkloadError(path, line, f"not valid YAML: {getattr(exc, 'problem', exc)}") from None
    if isinstance(data, dict):
        data = data.get("jobs")
    if not isinstance(data, list):
        raise WorkloadError(path, 1, "expected a list of jobs (or a mapping with 'jobs')")
    lines = _yaml_item_lines(text, len(data))
    jobs = []
    for i, item in enumerate(data):
        line = lines[i] if i < len(lines) else None
        if not isinstance(item, dict):
            raise WorkloadError(path, line, f"job {i + 1}: expected a mapping of fields")
        jobs.append(_native(path, line, item, i, rigid))
    return jobs


def _yaml_item_lines(text: str, count: int) -> list[int]:
    """Line numbers where each top-level list item starts."""
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return []
    if isinstance(node, yaml.MappingNode):
        node = next((v for k, v in node.value if getattr(k, "value", None) == "jobs"), None)
    if not isinstance(node, yaml.SequenceNode):
        return []
    return [item.start_mark.line + 1 for item in node.value][:count]


def _native(path: Path, line: int | None, row: Mapping[str, Any], i: int, rigid: bool) -> JobSpec:
    ln = line if line is not None else 0
    row = {k.strip() if isinstance(k, str) else k: v for k, v in row.items()}
    row = {k: v for k, v in row.items() if not (isinstance(v, str) and v.strip() == "")}
    unknown = sorted(str(k) for k in row if k not in NATIVE_FIELDS)
    if unknown:
        raise WorkloadError(path, line, f"unknown field {unknown[0]!r}")
    submit = _time(path, ln, row, "arrival")
    name = str(row.get("name") or f"job-{i}")
    low = _integer(path, ln, row, "min", 1) if "min" in row else 1
    high = _integer(path, ln, row, "max", 1) if "max" in row else low
    if high < low:
        raise WorkloadError(path, line, f"max: must be at least min ({low}), got {high}")
    preferred = _integer(path, ln, row, "preferred", 1) if "preferred" in row else None
    if preferred is not None and not low <= preferred <= high:
        raise WorkloadError(path, line, f"preferred: must lie in [{low}, {high}], got {preferred}")
    if rigid:
        size = preferred if preferred is not None else high
        low = high = preferred = size
    priority = _integer(path, ln, row, "priority", 0) if "priority" in row else 0
    gpu_type = str(row.get("gpu_type") or DEFAULT_GPU_TYPE)
    model = row.get("model") or row.get("profile")
    if model:
        profile = _profile(path, line or 0, str(model))
        if "duration" in row:
            raise WorkloadError(path, line, "give epochs or duration, not both with a model")
        epochs = _integer(path, ln, row, "epochs", 1) if "epochs" in row else profile.epochs
        available = min(len(v.progress) for v in profile.validation)
        if epochs > available:
            raise WorkloadError(
                path, line, f"epochs: {profile.name} is profiled for {available} epochs at most"
            )
        per_gpu = _integer(path, ln, row, "batch_size", 1) if "batch_size" in row else None
        cap = min(MAX_PROFILED_GPUS, profile.max_batch_size // (per_gpu or profile.init_batch_size))
        if high > max(cap, 1):
            raise WorkloadError(path, line, f"max: {profile.name} runs on at most {cap} GPUs "
                                            "at this batch size")
        return JobSpec(name, submit, i, low, high, preferred, epochs, priority, gpu_type,
                       category=profile.name, profile=profile.name, per_gpu_batch=per_gpu)
    if "duration" not in row:
        raise WorkloadError(path, line, "give a model (with epochs) or a duration")
    duration = _number(path, ln, row, "duration")
    if duration <= 0:
        raise WorkloadError(path, line, f"duration: must be positive, got {duration:g}")
    epochs = _integer(path, ln, row, "epochs", 1) if "epochs" in row else PHILLY_EPOCHS
    size = preferred if preferred is not None else low
    return JobSpec(name, submit, i, low, high, preferred, epochs, priority, gpu_type,
                   category="", work=duration * size)


def specs_by_name(jobs: Iterable[JobSpec]) -> dict[str, JobSpec]:
    return {j.name: j for j in jobs}

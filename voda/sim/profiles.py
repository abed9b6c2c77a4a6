"""Measured application profiles: throughput per placement and per-epoch gradient statistics.

A profile directory holds `placements.csv` (placement, local_bsz, step_time,
sync_time), `scalability.csv` (num_nodes, num_replicas, local_bsz, step_time,
sync_time) and one `validation-<B>.csv` per validated global batch B
(progress, iteration, metric, grad_sqr, grad_var; one row per epoch).

The six built-in profiles come from the Pollux OSDI'21 artifact (voda/data/pollux,
Apache-2.0). More can be added with `add_profile_dir` (a directory of profile
directories). Profiles are loaded on first use and cached.

A profile named `<model>@<type>` is `<model>` measured on GPU type `<type>`: its step and
sync times come from `placements-<type>.csv` (and `scalability-<type>.csv`) beside the
model's profile or in the Sia data (voda/data/sia/profiles), its gradient statistics from
the model's own `validation-*.csv` (voda.sim.hetero_profiles).
"""

from __future__ import annotations

import csv
import functools
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

# Per-application overrides of the artifact (SIMULATION.md §1): epochs trained, max local batch.
_EPOCHS = {"bert": 2, "cifar10": 100, "ncf": 10, "imagenet": 90, "deepspeech2": 80, "yolov3": 50}
# Typed profiles (<model>@<type>) take their model's override, and deepspeech2 on the RTX
# 2080Ti at most 57 as in the Sia artifact (applications.py).
_MAX_LOCAL = {"yolov3": 8, "deepspeech2@rtx": 57}

_extra_dirs: list[Path] = []


class ProfileError(ValueError):
    """A profile is unknown or malformed."""


@dataclass(frozen=True)
class Validation:
    batch_size: int
    progress: tuple[float, ...]
    iteration: tuple[float, ...]
    grad_sqr: tuple[float, ...]
    grad_var: tuple[float, ...]


@dataclass(frozen=True)
class PlacementRow:
    placement: int  # canonical digit string as an integer, e.g. 132
    local_bsz: float
    step_time: float
    sync_time: float

    @property
    def num_nodes(self) -> int:
        return len(str(self.placement))

    @property
    def num_replicas(self) -> int:
        return sum(int(d) for d in str(self.placement))


@dataclass(frozen=True)
class Profile:
    name: str
    placements: tuple[PlacementRow, ...]
    scalability: tuple[tuple[float, float, float, float, float], ...]
    validation: tuple[Validation, ...]  # ascending batch size
    epochs: int  # epochs every job of this application trains (E)
    min_local_bsz: int
    max_local_bsz: int

    @property
    def init_batch_size(self) -> int:
        """M0: the smallest validated batch."""
        return self.validation[0].batch_size

    @property
    def max_batch_size(self) -> int:
        return self.validation[-1].batch_size

    @functools.cached_property
    def boundaries(self) -> tuple[float, ...]:
        """P_0..P_E: progress at each epoch boundary (the min over validated batches)."""
        return (0.0, *(min(v.progress[k] for v in self.validation) for k in range(self.epochs)))

    @property
    def samples_per_epoch(self) -> float:
        """M0 x P_1: samples in one epoch, implied by the M0-equivalent progress unit."""
        return self.init_batch_size * self.boundaries[1]

    def __hash__(self) -> int:
        return hash(self.name)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Profile) and other.name == self.name


def bracket(profile: Profile, batch_size: float) -> tuple[Validation, Validation]:
    """The validated batches just below and just above `batch_size` (the same one if it
    is validated); ProfileError outside the validated range."""
    lower = upper = None
    for v in profile.validation:
        if v.batch_size <= batch_size:
            lower = v
        if v.batch_size >= batch_size:
            upper = v
            break
    if lower is None or upper is None:
        raise ProfileError(
            f"profile {profile.name!r}: batch {batch_size} outside the validated "
            f"range {profile.validation[0].batch_size}..{profile.validation[-1].batch_size}"
        )
    return lower, upper


def between(lower: Validation, upper: Validation, batch_size: float,
            at_lower: float, at_upper: float) -> float:
    """A value linear in the batch from `at_lower` (at lower's batch) to `at_upper`."""
    if lower is upper:
        return at_lower
    lo, up = lower.batch_size, upper.batch_size
    return ((batch_size - lo) * at_upper + (up - batch_size) * at_lower) / (up - lo)


def add_profile_dir(path: str | Path) -> None:
    """Make the profiles in `path` (one sub-directory per application) available."""
    p = Path(path)
    if not p.is_dir():
        raise ProfileError(f"profile directory {p}: not a directory")
    if p not in _extra_dirs:
        _extra_dirs.insert(0, p)
        _directories.cache_clear()
        load_profile.cache_clear()


def builtin_dir() -> Path:
    return Path(str(resources.files("voda") / "data" / "pollux" / "profiles"))


@functools.cache
def _directories() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for base in [builtin_dir(), *reversed(_extra_dirs)]:
        if not base.is_dir():
            continue
        for d in sorted(base.iterdir()):
            if (d / "placements.csv").is_file():
                found[d.name] = d
    return found


def profile_names() -> list[str]:
    return sorted(_directories())


def _read(path: Path) -> list[dict[str, str]]:
    try:
        with path.open(newline="") as f:
            return list(csv.DictReader(f))
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read: {exc.strerror or exc}") from exc


def _float(path: Path, line: int, row: dict[str, str], column: str) -> float:
    try:
        return float(row[column])
    except (KeyError, TypeError, ValueError):
        raise ProfileError(f"{path}:{line}: column {column!r}: not a number") from None


def typed_dir(model: str, gpu_type: str) -> Path | None:
    """The directory holding `placements-<gpu_type>.csv` for `model` (its own profile
    directory first, then the Sia data); None when no profile of it was measured there."""
    own = _directories().get(model)
    for base in ([own] if own is not None else []) + [sia_dir() / model]:
        if (base / f"placements-{gpu_type}.csv").is_file():
            return base
    return None


def sia_dir() -> Path:
    return Path(str(resources.files("voda") / "data" / "sia" / "profiles"))


@functools.cache
def load_profile(name: str) -> Profile:
    model, _, gpu_type = name.partition("@")
    directory = _directories().get(model)
    typed = typed_dir(model, gpu_type) if gpu_type and directory is not None else None
    if directory is None or (gpu_type and typed is None):
        raise ProfileError(
            f"unknown profile {name!r}; known profiles: {', '.join(profile_names())}"
            + (" (each may be measured on a GPU type as <profile>@<type>)" if gpu_type else "")
        )
    suffix = f"-{gpu_type}" if gpu_type else ""
    measured = typed if typed is not None else directory
    path = measured / f"placements{suffix}.csv"
    placements = tuple(
        PlacementRow(
            int(_float(path, i + 2, r, "placement")),
            _float(path, i + 2, r, "local_bsz"),
            _float(path, i + 2, r, "step_time"),
            _float(path, i + 2, r, "sync_time"),
        )
        for i, r in enumerate(_read(path))
    )
    spath = measured / f"scalability{suffix}.csv"
    cols = ("num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time")
    scalability = (
        tuple(
            tuple(_float(spath, i + 2, r, c) for c in cols)  # type: ignore[misc]
            for i, r in enumerate(_read(spath))
        )
        if spath.is_file()
        else ()
    )
    validation = []
    for vpath in directory.glob("validation-*.csv"):
        try:
            batch = int(vpath.stem.split("-")[-1])
        except ValueError:
            raise ProfileError(f"{vpath}: batch size in the name is not an integer") from None
        rows = _read(vpath)
        cols_v = ("progress", "iteration", "grad_sqr", "grad_var")
        values = {c: tuple(_float(vpath, i + 2, r, c) for i, r in enumerate(rows)) for c in cols_v}
        validation.append(Validation(batch, **values))
    if not placements or not validation:
        raise ProfileError(f"profile {name!r}: needs placements.csv and validation-*.csv")
    validation.sort(key=lambda v: v.batch_size)
    epochs = _EPOCHS.get(model, min(len(v.progress) for v in validation))
    min_local = int(min(r.local_bsz for r in placements))
    max_local = _MAX_LOCAL.get(name, _MAX_LOCAL.get(model, int(max(r.local_bsz
                                                                  for r in placements))))
    return Profile(
        name=name,
        placements=placements,
        scalability=scalability,
        validation=tuple(validation),
        epochs=epochs,
        min_local_bsz=min_local,
        max_local_bsz=max_local,
    )


def ceil_div(a: float, b: float) -> int:
    """ceil(a / b) as the artifact computes it (with a 1e-8 guard against float noise)."""
    return math.ceil(a / b - 1e-8)

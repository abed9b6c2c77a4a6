"""`voda sweep`'s grid: workloads x loads x clusters x algorithms x knobs x seeds.

A grid file (YAML or JSON) is a mapping of the fields below; options on the command line
replace the file's field of the same name. Every list and count is bounded, and a bad
grid is refused with a GridError that names the field:

    workloads: [workload-1, workload-2]   # built-in names or files (required)
    loads: [1.0, 2.0]                     # built-in workload-N only: workload-N@LOAD
    clusters: [16x4, 8x8]                 # NODESxGPUS or cluster YAML files (default 16x4)
    algorithms: [ElasticFIFO, Tiresias]   # or [all] (default ElasticFIFO)
    knobs:                                # each knob's values; every combination runs
      starvation_knob: [none, 2, 8]       #   for the algorithms that take that knob
      queue_thresholds: ["3600", "3600,14400"]   # a list value: a string, as --param
                                                 # reads it, or a nested list
    seeds: 3                              # arrival jitterings per cell (1..100)
    first_seed: 0
    jitter: 300                           # seconds (default 0; 300 with seeds > 1)
    rigid: false                          # and preset, placement, penalty, interval,
                                          # until, layout_speed, job_model, gpu_type,
                                          # restart_scale (0 to 10, default 1)

Each run is one voda.sim.compare.RunRequest; the runs of one cell differ in their seed only.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from voda.sim.compare import RunRequest
from voda.sim.seeds import DEFAULT_JITTER, MAX_SEEDS, MIN_SEEDS

MAX_VALUES = 100  # values of one axis (workloads, loads, clusters, algorithms, one knob)
MAX_RUNS = 10_000  # runs in one sweep, seeds included
LIST_FIELDS = ("workloads", "loads", "clusters", "algorithms")
SCALAR_FIELDS = ("seeds", "first_seed", "jitter", "rigid", "preset", "placement", "penalty",
                 "interval", "until", "layout_speed", "job_model", "gpu_type",
                 "restart_scale")
FIELDS = (*LIST_FIELDS, "knobs", *SCALAR_FIELDS)
ALL = "all"


class GridError(ValueError):
    """A grid refused; the message starts with the field at fault."""

    def __init__(self, field: str, message: str) -> None:
        # A check shared with other callers (compare.check_request) names the field itself.
        named = message.startswith(f"{field}:")
        super().__init__(message if named else f"{field}: {message}")
        self.field = field


@dataclass(frozen=True)
class Grid:
    runs: tuple[RunRequest, ...]
    seeds: int
    jitter: float

    @property
    def cells(self) -> int:
        return len(self.runs) // self.seeds


def read_grid_file(path: str | Path) -> dict[str, Any]:
    """The mapping a grid file holds (YAML, of which JSON is a subset)."""
    import yaml

    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise GridError("grid", f"cannot read {p}: {exc}") from None
    except yaml.YAMLError as exc:
        raise GridError("grid", f"{p} is neither YAML nor JSON: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise GridError("grid", f"{p} must hold a mapping of fields, got {type(data).__name__}")
    return data


def build_grid(spec: Mapping[str, Any]) -> Grid:
    """The runs of a grid spec (a grid file's mapping with the options laid over it)."""
    from voda.core.allocation import registry

    unknown = sorted(set(map(str, spec)) - set(FIELDS))
    if unknown:
        raise GridError(unknown[0], f"not a grid field (fields: {', '.join(FIELDS)})")
    workloads = _strings(spec, "workloads", required=True)
    loads = [_load(v) for v in _list(spec, "loads")]
    clusters = _strings(spec, "clusters") or ["16x4"]
    algorithms = _strings(spec, "algorithms") or [registry.DEFAULT_ALGORITHM]
    if ALL in algorithms:
        algorithms = list(dict.fromkeys(
            a for name in algorithms
            for a in (registry.BUILTIN_NAMES if name == ALL else (name,))))
    for name in algorithms:
        if not registry.is_known(name):
            raise GridError("algorithms", str(registry.UnknownAlgorithm(name,
                                                                        registry.available())))
    knobs = _knobs(spec.get("knobs"))
    seeds = _int(spec, "seeds", 1, MIN_SEEDS, MAX_SEEDS)
    first_seed = _int(spec, "first_seed", 0, 0, 2**31 - 1)
    default_jitter = DEFAULT_JITTER if seeds > 1 else 0.0
    jitter = _number(spec, "jitter", default_jitter, 0.0)
    restart_scale = _number(spec, "restart_scale", 1.0, 0.0)  # its top: check_request's
    base = RunRequest(
        workload="", cluster="", algorithm="",
        rigid=_bool(spec, "rigid"), preset=_optional_str(spec, "preset"),
        placement=_optional_str(spec, "placement"),
        penalty=_optional_number(spec, "penalty", 0.0),
        interval=_optional_number(spec, "interval", 0.0, strict=True),
        layout_speed=_optional_str(spec, "layout_speed") or "actual",
        jitter=jitter, until=_optional_number(spec, "until", 0.0, strict=True),
        job_model=_optional_str(spec, "job_model"), gpu_type=_optional_str(spec, "gpu_type"),
        restart_scale=restart_scale)
    names = [_at_load(w, load) for w in workloads for load in (loads or [None])]
    combos = {a: _combos(a, knobs) for a in algorithms}
    used = {k for cs in combos.values() for c in cs for k, _ in c}
    for knob in knobs:
        if knob not in used:
            raise GridError(f"knobs.{knob}", "none of the algorithms takes that knob")
    count = len(names) * len(clusters) * sum(len(c) for c in combos.values()) * seeds
    if count > MAX_RUNS:
        raise GridError("grid", f"{count} runs; at most {MAX_RUNS} in one sweep (split it)")
    runs = tuple(
        replace(base, workload=w, cluster=c, algorithm=a, params=combo, seed=first_seed + k)
        for w in names for c in clusters for a in algorithms for combo in combos[a]
        for k in range(seeds))
    check_runs(runs[::seeds], workloads=names, clusters=clusters)
    return Grid(runs, seeds, jitter)


def check_runs(cells: tuple[RunRequest, ...], workloads: list[str], clusters: list[str]
               ) -> None:
    """Load every workload and cluster once and validate each cell's settings, naming the
    field of the grid at fault."""
    from voda.core.allocation import registry
    from voda.sim.cluster_file import ClusterFileError, parse_cluster
    from voda.sim.compare import check_request
    from voda.sim.profiles import ProfileError
    from voda.sim.workloads import WorkloadError, load_workload

    first = cells[0]
    for w in workloads:
        try:
            load_workload(w, rigid=first.rigid, job_model=first.job_model)
        except (WorkloadError, ProfileError, ValueError) as exc:
            raise GridError("job_model" if "job_model" in str(exc) else "workloads",
                            str(exc)) from None
    for c in clusters:
        try:
            parse_cluster(c)
        except (ClusterFileError, ValueError) as exc:
            raise GridError("clusters", str(exc)) from None
    for cell in cells:
        try:
            check_request(cell)
        except registry.UnknownAlgorithm as exc:
            raise GridError("algorithms", str(exc)) from None
        except ValueError as exc:
            head, _, rest = str(exc).partition(":")
            if head.strip() in dict(cell.params) and rest:
                raise GridError(f"knobs.{head.strip()}", rest.strip()) from None
            raise GridError(_field_of(str(exc), cell), str(exc)) from None


def _field_of(message: str, cell: RunRequest) -> str:
    """The grid field a check_request message is about."""
    head = message.split(":", 1)[0].strip()
    if head in FIELDS:
        return head
    if "GPU type" in message:
        return "gpu_type"
    if cell.params:
        return "knobs"
    return "grid"


def _combos(algorithm: str, knobs: dict[str, list[Any]]) -> list[tuple[tuple[str, Any], ...]]:
    """Every combination of the knobs `algorithm` takes (one empty one when none)."""
    from voda.core.allocation import registry

    accepted = registry.parameter_names(registry.resolve(algorithm)) or []
    mine = {k: v for k, v in sorted(knobs.items()) if k in accepted}
    return [tuple(zip(mine, values, strict=True)) for values in itertools.product(*mine.values())]


def _at_load(workload: str, load: str | None) -> str:
    if load is None:
        return workload
    from voda.sim.workloads import builtin_workload

    if "@" in workload or not workload.startswith("workload-") or \
            builtin_workload(workload) is None:
        raise GridError("loads", f"only the built-in workload-N take a load; {workload!r} "
                                 "does not (name its load in the workload instead)")
    return f"{workload}@{load}"


def _load(value: Any) -> str:
    from voda.sim.workloads import LOADS

    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise GridError("loads", f"each load must be one of {', '.join(LOADS)}, got {value!r}")
    try:
        text = f"{float(value):.1f}"
    except ValueError:
        text = str(value)
    if text not in LOADS:
        raise GridError("loads", f"each load must be one of {', '.join(LOADS)}, got {value!r}")
    return text


def _list(spec: Mapping[str, Any], field: str) -> list[Any]:
    value = spec.get(field)
    if value is None:
        return []
    if isinstance(value, str | int | float):
        value = [value]
    if not isinstance(value, list | tuple):
        raise GridError(field, f"must be a list, got {type(value).__name__}")
    if len(value) > MAX_VALUES:
        raise GridError(field, f"{len(value)} values; at most {MAX_VALUES}")
    if len(set(map(repr, value))) != len(value):
        raise GridError(field, "a value is given twice")
    return list(value)


def _strings(spec: Mapping[str, Any], field: str, required: bool = False) -> list[str]:
    values = _list(spec, field)
    if required and not values:
        raise GridError(field, "give at least one")
    for v in values:
        if not isinstance(v, str) or not v.strip():
            raise GridError(field, f"each value must be a non-empty string, got {v!r}")
    return [v.strip() for v in values]


def _knobs(value: Any) -> dict[str, list[Any]]:
    from voda.cli.params import parse_value

    if value is None:
        return {}
    if not isinstance(value, dict):
        raise GridError("knobs", f"must map each knob to its values, got {type(value).__name__}")
    out: dict[str, list[Any]] = {}
    for name, values in value.items():
        field = f"knobs.{name}"
        if not isinstance(name, str) or not name.strip():
            raise GridError("knobs", f"a knob's name must be a non-empty string, got {name!r}")
        if not isinstance(values, list):
            values = [values]
        if not values:
            raise GridError(field, "give at least one value")
        if len(values) > MAX_VALUES:
            raise GridError(field, f"{len(values)} values; at most {MAX_VALUES}")
        parsed = [parse_value(v) if isinstance(v, str) else v for v in values]
        if len(set(map(repr, parsed))) != len(parsed):
            raise GridError(field, "a value is given twice")
        out[name.strip()] = parsed
    return out


def _int(spec: Mapping[str, Any], field: str, default: int, low: int, high: int) -> int:
    value = spec.get(field, default)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, int):
        raise GridError(field, f"must be a whole number, got {value!r}")
    if not low <= value <= high:
        raise GridError(field, f"must be between {low} and {high}, got {value}")
    return value


def _number(spec: Mapping[str, Any], field: str, default: float, low: float) -> float:
    value = _optional_number(spec, field, low)
    return default if value is None else value


def _optional_number(spec: Mapping[str, Any], field: str, low: float, strict: bool = False
                     ) -> float | None:
    value = spec.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise GridError(field, f"must be a finite number, got {value!r}")
    if value < low or (strict and value == low):
        raise GridError(field, f"must be {'above' if strict else 'at least'} {low:g}, "
                               f"got {value}")
    return float(value)


def _optional_str(spec: Mapping[str, Any], field: str) -> str | None:
    value = spec.get(field)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise GridError(field, f"must be a non-empty string, got {value!r}")
    return value.strip()


def _bool(spec: Mapping[str, Any], field: str) -> bool:
    value = spec.get(field, False)
    if not isinstance(value, bool):
        raise GridError(field, f"must be true or false, got {value!r}")
    return value

"""Step and sync time of a placement, and the batch split (SIMULATION.md §2).

- A placement is the tuple of GPUs per node, in the order the job's workers were
  assigned. Its canonical form drops zeros and takes the lexicographically
  smallest rotation (a necklace, not a sort: (2, 1, 3) -> 132).
- Measured placements (4 nodes or fewer with at most 4 GPUs each) are
  interpolated linearly in the per-GPU batch; others by 3-D linear (Delaunay)
  interpolation over (nodes, replicas, per-GPU batch), nodes capped at 16.
- Placements the profile cannot answer (more than 4 GPUs on a node beyond the
  measured hull) fall back to the same GPU count packed 4 per node.
"""

from __future__ import annotations

import bisect
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.interpolate import LinearNDInterpolator, interp1d

from voda.blas import serial_blas
from voda.sim.profiles import Profile, ceil_div, load_profile


class ThroughputError(ValueError):
    pass


def canonical(placement: Sequence[int]) -> tuple[int, ...]:
    """Drop zeros, then the lexicographically smallest rotation."""
    p = tuple(int(c) for c in placement if c)
    if not p:
        return ()
    return min(p[i:] + p[:i] for i in range(len(p)))


def placement_id(placement: Sequence[int]) -> int:
    return int("".join(map(str, canonical(placement))))


@functools.cache
def _measured(profile_name: str) -> dict[int, interp1d]:
    profile = load_profile(profile_name)
    rows: dict[int, list[tuple[float, float, float]]] = {}
    for r in profile.placements:
        rows.setdefault(r.placement, []).append((r.local_bsz, r.step_time, r.sync_time))
    out = {}
    for pid, values in rows.items():
        arr = np.array(values)
        if len(arr) == 1:  # a single measurement: constant in the batch
            arr = np.vstack([arr, arr + np.array([1e-9, 0.0, 0.0])])
        out[pid] = interp1d(arr[:, 0], arr[:, 1:], axis=0)
    return out


@functools.cache
def _scattered(profile_name: str) -> LinearNDInterpolator:
    """Points: per-key means of placements.csv ascending by key, then scalability.csv rows."""
    profile = load_profile(profile_name)
    groups: dict[tuple[float, float, float], list[tuple[float, float]]] = {}
    for r in profile.placements:
        key = (float(r.num_nodes), float(r.num_replicas), r.local_bsz)
        groups.setdefault(key, []).append((r.step_time, r.sync_time))
    points, values = [], []
    for key in sorted(groups):
        vals = groups[key]
        points.append(key)
        values.append((sum(v[0] for v in vals) / len(vals), sum(v[1] for v in vals) / len(vals)))
    for row in profile.scalability:
        points.append(row[:3])
        values.append(row[3:])
    interpolator = LinearNDInterpolator(np.array(points), np.array(values))
    with serial_blas():
        interpolator.tri.transform  # noqa: B018 - the per-simplex transforms, built lazily
    return interpolator


@dataclass(frozen=True, slots=True)
class MeasuredLine:
    """A measured placement's (step, sync) times by per-GPU batch, interpolated as
    `interp1d(kind="linear")` does (`_call_linear`: the same float operations in the same
    order), in Python floats: SciPy's call costs about 0.1 ms, the arithmetic under 1 µs."""

    batches: tuple[float, ...]  # ascending, as interp1d sorted them
    steps: tuple[float, ...]
    syncs: tuple[float, ...]

    @classmethod
    def of(cls, f: interp1d) -> MeasuredLine:
        y = f._y  # (batch, [step, sync]), sorted with the batches
        return cls(tuple(f.x.tolist()), tuple(y[:, 0].tolist()), tuple(y[:, 1].tolist()))

    def at(self, local_bsz: float) -> tuple[float, float]:
        """What `f(a)` gives for `a` = local_bsz clamped into the measured batches."""
        xs = self.batches
        lo, hi = xs[0], xs[-1]
        a = min(max(local_bsz, lo), hi)  # the batch cap keeps jobs inside; clamp float noise
        i = min(max(bisect.bisect_left(xs, a), 1), len(xs) - 1)  # searchsorted, clipped
        x_lo = xs[i - 1]
        width, offset = xs[i] - x_lo, a - x_lo
        steps, syncs = self.steps, self.syncs
        return ((steps[i] - steps[i - 1]) / width * offset + steps[i - 1],
                (syncs[i] - syncs[i - 1]) / width * offset + syncs[i - 1])


@functools.cache
def _measured_lines(profile_name: str) -> dict[int, MeasuredLine]:
    """`_measured`'s interpolators as MeasuredLines (`_measured` stays the reference)."""
    return {pid: MeasuredLine.of(f) for pid, f in _measured(profile_name).items()}


def measured_step_sync_time(f: interp1d, local_bsz: float) -> tuple[float, float]:
    """The reference: SciPy's interpolator at the clamped batch (see MeasuredLine.at)."""
    lo, hi = f.x[0], f.x[-1]
    a = min(max(local_bsz, lo), hi)
    ret = f(a)
    return float(ret[0]), float(ret[1])


@functools.cache
def step_sync_time(
    profile_name: str, placement: tuple[int, ...], local_bsz: int
) -> tuple[float, float]:
    """(step_time, sync_time) in seconds of one step at per-GPU micro-batch `local_bsz`."""
    canon = canonical(placement)
    if not canon:
        raise ThroughputError("placement: a job needs at least one GPU")
    pid = int("".join(map(str, canon))) if max(canon) <= 9 else -1
    lines = _measured_lines(profile_name)
    if pid in lines:
        return lines[pid].at(local_bsz)
    nodes, replicas = len(canon), sum(canon)
    ret = _scattered(profile_name)([min(nodes, 16), replicas, local_bsz])[0]
    if not (math.isfinite(ret[0]) and math.isfinite(ret[1])):
        packed = packed_placement(replicas)
        smaller = local_bsz // 2
        if packed == canon and smaller >= load_profile(profile_name).min_local_bsz:
            # beyond what was measured at this many GPUs: the step at half the batch, twice
            # (a profile measured at fewer batch sizes on this GPU type)
            step, sync = step_sync_time(profile_name, placement, smaller)
            return 2 * step - sync, sync
        if packed == canon or replicas > 64:
            raise ThroughputError(
                f"profile {profile_name!r}: no throughput for placement {canon} "
                f"at per-GPU batch {local_bsz}"
            )
        return step_sync_time(profile_name, packed, local_bsz)
    return float(ret[0]), float(ret[1])


def packed_placement(replicas: int, per_node: int = 4) -> tuple[int, ...]:
    full, rest = divmod(replicas, per_node)
    return (per_node,) * full + ((rest,) if rest else ())


@dataclass(frozen=True, slots=True)
class BatchSplit:
    atomic_bsz: int  # per-GPU micro-batch
    accum_steps: int  # extra micro-batches per optimiser step (k)
    replicas: int

    @property
    def effective_batch(self) -> int:
        return self.replicas * self.atomic_bsz * (self.accum_steps + 1)


def split_batch(profile: Profile, batch_size: int, replicas: int) -> BatchSplit:
    """The fixed-batch split of `batch_size` over `replicas` GPUs (SIMULATION.md §2)."""
    local = ceil_div(batch_size, replicas)
    accum = ceil_div(local, profile.max_local_bsz) - 1
    if replicas == 1 and batch_size > profile.init_batch_size:
        accum = max(1, accum)
    atomic = ceil_div(local, accum + 1)
    atomic = min(atomic, int(profile.max_batch_size / (replicas * (accum + 1))))
    return BatchSplit(atomic, accum, replicas)


def step_time(
    profile: Profile, placement: tuple[int, ...], split: BatchSplit, spine: float = 1.0
) -> float:
    """Seconds per optimiser step: T = step + k (step - sync).

    `spine` is the oversubscription of the links the job's all-reduce crosses
    (1 inside one leaf): the synchronisation of each optimiser step takes
    `spine` times as long, T = step + (spine - 1) sync + k (step - sync);
    the k accumulation micro-steps do not synchronise.
    """
    step, sync = step_sync_time(profile.name, placement, split.atomic_bsz)
    if spine == 1.0:
        return step + split.accum_steps * (step - sync)
    return step + (spine - 1.0) * sync + split.accum_steps * (step - sync)


def candidate_layouts(replicas: int, max_per_node: int, max_nodes: int = 16
                      ) -> list[tuple[int, ...]]:
    """Layouts of `replicas` GPUs with at most `max_per_node` on each of at most `max_nodes`
    nodes, one per distinct step time: every arrangement on up to 4 nodes (the measured
    placements are ordered), and a balanced one per larger node count (beyond 4 nodes the
    model depends only on the node count). The packed layout when none fits."""
    out: dict[tuple[int, ...], None] = {}

    def arrange(prefix: tuple[int, ...], left: int, nodes: int) -> None:
        if nodes == 0:
            if left == 0:
                out.setdefault(canonical(prefix))
            return
        for c in range(max(1, left - max_per_node * (nodes - 1)), min(max_per_node, left) + 1):
            arrange((*prefix, c), left - c, nodes - 1)

    for nodes in range(1, min(4, replicas, max_nodes) + 1):
        arrange((), replicas, nodes)
    for nodes in range(5, min(replicas, max_nodes) + 1):
        if ceil_div(replicas, nodes) <= max_per_node:
            base, extra = divmod(replicas, nodes)
            out.setdefault(canonical((base + 1,) * extra + (base,) * (nodes - extra)))
    return list(out) or [packed_placement(replicas, max_per_node)]


@functools.cache
def best_placement(profile_name: str, replicas: int, atomic_bsz: int, accum_steps: int,
                   max_per_node: int) -> tuple[int, ...]:
    """The fastest of `candidate_layouts` for this batch split (single leaf)."""
    profile = load_profile(profile_name)
    split = BatchSplit(atomic_bsz, accum_steps, replicas)
    best: tuple[float, tuple[int, ...]] | None = None
    for layout in candidate_layouts(replicas, max_per_node):
        try:
            t = step_time(profile, layout, split)
        except ThroughputError:
            continue
        if math.isfinite(t) and (best is None or t < best[0]):
            best = (t, layout)
    return best[1] if best is not None else packed_placement(replicas, max_per_node)


def throughput(profile: Profile, placement: tuple[int, ...], batch_size: int) -> float:
    """Samples per second at global batch `batch_size` on `placement`."""
    split = split_batch(profile, batch_size, sum(placement))
    return split.effective_batch / step_time(profile, placement, split)


def warm(workload: object) -> None:
    """Build the interpolators of every profile a workload uses (before forking workers)."""
    for name in sorted({j.profile for j in getattr(workload, "jobs", ()) if j.profile}):
        _measured_lines(name)  # builds `_measured` too
        _scattered(name)([1.0, 1.0, float(load_profile(name).min_local_bsz)])

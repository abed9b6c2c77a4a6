"""Each job's run time alone, for slowdown and finish-time fairness (docs/design/002).

`isolated_seconds(spec, nodes, gpus, ...)` runs the job by itself on a fresh SimBackend:
started at time 0 on `gpus` GPUs of its type, packed (the leaf with most GPUs first, its
largest nodes first), never changed, one restart penalty paid. It is the simulator's own
model of the job (profiled throughput and statistical efficiency, a batch-adaptive
job's batch choice, or fixed work at linear speedup), with the run's layout speed and
spine oversubscription, in continuous time.

`with_job_details(result, workload, cluster, penalty)` fills every finished job's
- `alone`: its run time alone at min(its max GPUs, GPUs of its type); slowdown is JCT / alone;
- `fair_share`: Themis' 1/N of the cluster: the GPUs of its type at the start over the mean
  number of jobs of that type present (submitted, not finished, itself included) during
  its life in that run;
- `fair_alone`: its run time alone on that share. At or above its max GPUs, `alone`; between
  two whole GPU counts from its minimum up, the speeds (1/time) of the two interpolated
  linearly; below its minimum (or one GPU) g0, time-sliced: time(g0) x g0 / share.
  Finish-time fairness rho = JCT / fair_alone (Themis, NSDI'20): above 1, the job finished
  later than it would have on its own share of the cluster.
"""

from __future__ import annotations

import bisect
import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import replace

from voda.blas import serial_blas
from voda.core.model import Job, JobPlacement, Node
from voda.sim.backend import SimBackend
from voda.sim.cluster_file import SimCluster
from voda.sim.report import JobResult, SimResult
from voda.sim.workloads import JobSpec, Workload

ISOLATED_NAME = "alone"


def packed_on(nodes: Sequence[Node], gpus: int) -> JobPlacement:
    """`gpus` GPUs on as few nodes as possible: the leaf with most GPUs first, largest
    nodes first (ties: the given order)."""
    leaf_gpus: dict[str, int] = {}
    for n in nodes:
        leaf_gpus[n.leaf_name] = leaf_gpus.get(n.leaf_name, 0) + n.gpus
    order = sorted(range(len(nodes)), key=lambda i: (-leaf_gpus[nodes[i].leaf_name],
                                                     nodes[i].leaf_name, -nodes[i].gpus, i))
    placement: list[tuple[str, int]] = []
    left = gpus
    for i in order:
        if left <= 0:
            break
        take = min(nodes[i].gpus, left)
        placement.append((nodes[i].name, take))
        left -= take
    if left > 0:
        raise ValueError(f"gpus: {gpus} do not fit on {sum(n.gpus for n in nodes)} GPUs")
    return tuple(placement)


def isolated_seconds(spec: JobSpec, nodes: tuple[Node, ...], gpus: int, penalty: float,
                     layout_speed: str = "actual", spine: float = 1.0) -> float:
    """Seconds the job takes alone on `gpus` packed GPUs of `nodes`, from its start."""
    if spec.profile is None and spec.emulated_speed is None:  # fixed work, linear speedup
        return penalty + float(spec.work or 0.0) / gpus
    # What the run does not depend on is left out, so that jobs of one kind share it.
    core = replace(spec, name=ISOLATED_NAME, submit=0.0, order=0, min_workers=1,
                   max_workers=1, preferred_workers=None, priority=0, category="")
    return _isolated(core, nodes, gpus, penalty, layout_speed, spine)


# isolated_seconds by (spec, token of its nodes, gpus, penalty, layout speed, spine): the
# same job's run times are read again for every algorithm and seed of a comparison, and
# this key hashes the spec once and no Node at all (the nodes tuple is hashed once per
# result, for its token).
_ALONE_MEMO: dict[tuple[JobSpec, int, int, float, str, float], float] = {}
_NODE_TOKENS: dict[tuple[Node, ...], int] = {}
_MEMO_SIZE = 4096


def memo_isolated_seconds(spec: JobSpec, nodes_token: int, nodes: tuple[Node, ...],
                          gpus: int, penalty: float, layout_speed: str, spine: float) -> float:
    """`isolated_seconds`, remembered (`nodes_token` is `nodes_token_of(nodes)`)."""
    key = (spec, nodes_token, gpus, penalty, layout_speed, spine)
    seconds = _ALONE_MEMO.get(key)
    if seconds is None:
        if len(_ALONE_MEMO) >= _MEMO_SIZE:
            _ALONE_MEMO.clear()
        seconds = _ALONE_MEMO[key] = isolated_seconds(spec, nodes, gpus, penalty,
                                                      layout_speed, spine)
    return seconds


def nodes_token_of(nodes: tuple[Node, ...]) -> int:
    """A number that stands for these nodes (equal tuples, the same number)."""
    if len(_NODE_TOKENS) >= _MEMO_SIZE:
        _NODE_TOKENS.clear()
        _ALONE_MEMO.clear()  # its keys hold tokens that may be handed out again
    return _NODE_TOKENS.setdefault(nodes, len(_NODE_TOKENS))


@functools.lru_cache(maxsize=4096)
def _isolated(spec: JobSpec, nodes: tuple[Node, ...], gpus: int, penalty: float,
              layout_speed: str, spine: float) -> float:
    backend = SimBackend(list(nodes), {spec.name: spec}, penalty=penalty,
                         report_epochs=False, spine_oversubscription=spine,
                         layout_speed=layout_speed)
    backend.start(Job(name=spec.name, min_workers=spec.min_workers,
                      max_workers=spec.max_workers), packed_on(nodes, gpus))
    sim = backend.jobs[spec.name]
    while sim.finished is None:
        times = [t for t in (backend.next_boundary(), backend.next_completion())
                 if t is not None]
        if not times or math.isinf(min(times)):
            return math.inf
        backend.advance(max(min(times), backend.now + 1e-9))
        backend.events()  # completions only: nobody reads them
    return sim.finished


def fair_alone_seconds(alone_at: Callable[[int], float], spec: JobSpec, share: float,
                       capacity: int) -> float:
    """The run time on a (fractional) share of GPUs, from the run times at whole counts
    (`alone_at(g)`); see the module's docstring."""
    top = min(spec.max_workers, capacity)
    if share >= top:
        return alone_at(top)
    floor = max(1, min(spec.min_workers, top))
    if share < floor:
        return alone_at(floor) * floor / share
    lo = math.floor(share)
    f = share - lo
    if f == 0:
        return alone_at(lo)
    return 1.0 / ((1 - f) / alone_at(lo) + f / alone_at(lo + 1))


def mean_present(intervals: Sequence[tuple[float, float]]) -> list[float]:
    """For each (start, end) interval, the mean number of intervals open during it
    (itself included): the integral of the count of open intervals over its span, over
    the span. A zero-length interval counts the intervals open at its start; one without
    an end (infinite: a job that did not finish) has no mean (NaN), but counts for the
    others."""
    points = sorted({t for s, e in intervals for t in (s, e) if math.isfinite(t)})
    delta = [0] * (len(points) + 1)
    for s, e in intervals:
        delta[bisect.bisect_left(points, s)] += 1
        if math.isfinite(e):
            delta[bisect.bisect_left(points, e)] -= 1
    counts: list[int] = []  # open on [points[k], points[k+1])
    area = [0.0]  # integral from points[0] to points[k]
    open_ = 0
    for k, t in enumerate(points):
        open_ += delta[k]
        counts.append(open_)
        if k + 1 < len(points):
            area.append(area[-1] + open_ * (points[k + 1] - t))
    out = []
    for s, e in intervals:
        if not math.isfinite(e):
            out.append(math.nan)
            continue
        i, j = bisect.bisect_left(points, s), bisect.bisect_left(points, e)
        if e > s:
            out.append((area[j] - area[i]) / (e - s))
        else:
            out.append(float(counts[i]))
    return out


def with_job_details(result: SimResult, workload: Workload, cluster: SimCluster,
                     penalty: float) -> SimResult:
    """`result` with each finished job's alone, fair_share and fair_alone filled in."""
    with serial_blas():  # batch-adaptive jobs fit their goodput models: tiny BLAS calls
        return _with_job_details(result, workload, cluster, penalty)


def _with_job_details(result: SimResult, workload: Workload, cluster: SimCluster,
                      penalty: float) -> SimResult:
    specs = {s.name: s for s in workload.jobs}
    by_type: dict[str, list[int]] = {}
    for i, j in enumerate(result.jobs):
        by_type.setdefault(specs[j.name].gpu_type, []).append(i)
    present: dict[int, float] = {}
    for indices in by_type.values():
        spans = [(result.jobs[i].submit,
                  result.jobs[i].finish if result.jobs[i].finish is not None else math.inf)
                 for i in indices]
        for i, n in zip(indices, mean_present(spans), strict=True):
            present[i] = n
    of_type: dict[str, tuple[Node, ...]] = {}
    for gpu_type in by_type:  # the nodes at the start, or else those that join later
        of_type[gpu_type] = tuple(n for n in cluster.nodes if n.gpu_type == gpu_type) or tuple(
            e.node for e in cluster.events if e.kind == "join" and e.node.gpu_type == gpu_type)
    token = {gpu_type: nodes_token_of(nodes) for gpu_type, nodes in of_type.items()}
    capacity_of = {gpu_type: sum(n.gpus for n in nodes) for gpu_type, nodes in of_type.items()}
    spine = cluster.spine_oversubscription
    jobs: list[JobResult] = []
    for i, j in enumerate(result.jobs):
        spec = specs[j.name]
        nodes = of_type[spec.gpu_type]
        capacity = capacity_of[spec.gpu_type]
        if j.finish is None or capacity == 0 or spec.min_workers > capacity:
            jobs.append(j)
            continue

        def alone_at(g: int, spec: JobSpec = spec, nodes: tuple[Node, ...] = nodes,
                     token: int = token[spec.gpu_type]) -> float:
            return memo_isolated_seconds(spec, token, nodes, g, penalty, result.layout_speed,
                                         spine)

        share = capacity / max(present[i], 1.0)
        jobs.append(replace(j, alone=alone_at(min(spec.max_workers, capacity)),
                            fair_share=share,
                            fair_alone=fair_alone_seconds(alone_at, spec, share, capacity)))
    return replace(result, jobs=tuple(jobs))

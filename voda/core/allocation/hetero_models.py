"""Per-GPU-type speed of each job, for the heterogeneity policies (voda.core.allocation.hetero).

A job's throughput model on a GPU type is what it reported there, else its category's
there (`Job.goodput_by_type`, kept by the engine). For a type where neither has measured,
the model is projected from a type where it has: its step-time parameters divided by the
ratio of the two types' speeds, the geometric mean over the categories measured on both
(as Sia projects throughputs; Sia's ratios are of goodput at one GPU, `type_ratios`,
Voda's of step times at one micro-batch, `hardware_ratios`). A job measured nowhere runs
at one unit per GPU on every type, scaled by the types' mean speed ratio over every
category measured.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from voda.core.goodput import GoodputModel, PerfParams, best_goodput
from voda.core.model import ANY_GPU_TYPE, Cluster, Job

MAX_HETERO_GPUS = 64  # the most GPUs one job is given on one type (as the profiles measure)


@dataclass(frozen=True, slots=True)
class TypeShape:
    """One GPU type of the cluster: its capacity, node size and node count."""

    name: str
    capacity: int
    per_node: int
    nodes: int


def type_shapes(cluster: Cluster) -> dict[str, TypeShape]:
    out: dict[str, TypeShape] = {}
    for gpu_type in cluster.gpu_types():
        nodes = [n.gpus for n in cluster.nodes if n.gpu_type == gpu_type and n.gpus > 0]
        if nodes:
            out[gpu_type] = TypeShape(gpu_type, sum(nodes), max(nodes), len(nodes))
    return out


def accepted(job: Job, types: Iterable[str]) -> list[str]:
    """The cluster's types `job` may run on (its named types; every type for ANY_GPU_TYPE;
    only `gpu_type` for a job that names none)."""
    present = list(types)
    if not job.gpu_types:
        return [job.gpu_type] if job.gpu_type in present else []
    if ANY_GPU_TYPE in job.gpu_types:
        return present
    named = set(job.gpu_types)
    return [t for t in present if t in named]


def measured(model: GoodputModel | None) -> bool:
    return model is not None and model.perf is not None


@functools.lru_cache(maxsize=65536)
def one_gpu_goodput(model: GoodputModel) -> float:
    value = float(model.optimize([1], [1])[0][0])
    return value if math.isfinite(value) and value > 0 else 0.0


def type_ratios(jobs: Sequence[Job]) -> dict[tuple[str, str], float]:
    """speed(t) / speed(s) for each pair of types measured by one category: the geometric
    mean over the categories (or jobs, without one) measured on both, at one GPU."""
    return mean_ratios(category_speeds(jobs).values())


def category_speeds(jobs: Sequence[Job]) -> dict[str, dict[str, float]]:
    """Per category (or job, without one), its goodput on one GPU of each type some job of
    it has a model of (the first such job's)."""
    by_key: dict[str, dict[str, float]] = {}
    for job in jobs:
        key = job.category or job.name
        speeds = by_key.setdefault(key, {})
        for gpu_type, model in job.goodput_by_type.items():
            if measured(model) and gpu_type not in speeds:
                g = one_gpu_goodput(model)
                if g > 0:
                    speeds[gpu_type] = g
    return by_key


def mean_ratios(groups: Iterable[Mapping[str, float]]) -> dict[tuple[str, str], float]:
    """speed(t) / speed(s) for each pair of types: the geometric mean over the `groups`
    (each a speed per type) that have both."""
    logs: dict[tuple[str, str], list[float]] = {}
    for speeds in groups:
        for s, gs in speeds.items():
            for t, gt in speeds.items():
                if s != t:
                    logs.setdefault((s, t), []).append(math.log(gt / gs))
    return {pair: math.exp(sum(v) / len(v)) for pair, v in logs.items()}


@functools.lru_cache(maxsize=1024)
def profiled_ratios(speeds: tuple[tuple[str, float], ...]) -> dict[tuple[str, str], float]:
    """speed(t) / speed(s) from profiled `speeds` (Job.category_type_speeds), for each pair
    of types both positive and finite. (Cached: every projection of a job looks it up; the
    caller must not change the dict.)"""
    known = {t: v for t, v in speeds if math.isfinite(v) and v > 0}
    return {(s, t): known[t] / known[s] for s in known for t in known if s != t}


def reference_local_batch(a: GoodputModel, b: GoodputModel) -> int:
    """One per-GPU micro-batch both models can run: the smaller of their smallest ones on
    one GPU (max(M0, min-local), at most max-local)."""
    def smallest(m: GoodputModel) -> int:
        return max(min(max(m.init_batch, m.min_local), m.max_local), 1)
    return min(smallest(a), smallest(b))


@functools.lru_cache(maxsize=65536)
def step_time_ratio(source: GoodputModel, target: GoodputModel) -> float:
    """speed(target) / speed(source) as hardware: the ratio of their step times on one GPU
    at one common micro-batch (no gradient statistics, no batch choice); 0 when unknown."""
    batch = np.array([float(reference_local_batch(source, target))])
    one, none = np.ones(1), np.zeros(1)
    ts = float(source.step_time(one, one, batch, none)[0])
    tt = float(target.step_time(one, one, batch, none)[0])
    ok = all(math.isfinite(x) and x > 0 for x in (ts, tt))
    return ts / tt if ok else 0.0


def hardware_ratios(jobs: Sequence[Job]) -> dict[tuple[str, str], float]:
    """speed(t) / speed(s) for each pair of types some category measured both of, from step
    times alone (`step_time_ratio`): per category, the median over its jobs' log-ratios,
    then the geometric mean over the categories. Unlike `type_ratios` (Sia's: the first
    job's goodput at one GPU, i.e. two types' speeds times two jobs' or training stages'
    statistical efficiencies), a ratio does not move when a job of the category with other
    gradient statistics comes or goes."""
    per_key: dict[str, dict[tuple[str, str], list[float]]] = {}
    for job in jobs:
        pairs = per_key.setdefault(job.category or job.name, {})
        models = sorted((t, m) for t, m in job.goodput_by_type.items() if measured(m))
        for s, ms in models:
            for t, mt in models:
                r = step_time_ratio(ms, mt) if s != t else 0.0
                if r > 0:
                    pairs.setdefault((s, t), []).append(math.log(r))
    logs: dict[tuple[str, str], list[float]] = {}
    for pairs in per_key.values():
        for pair, values in pairs.items():
            logs.setdefault(pair, []).append(float(np.median(values)))
    return {pair: math.exp(sum(v) / len(v)) for pair, v in logs.items()}


def type_speeds(ratios: Mapping[tuple[str, str], float], types: Sequence[str]
                ) -> dict[str, float]:
    """Each type's speed relative to the first of `types` (`type_ratio`: measured, else
    through a type measured with both, else 1), whatever the order of the others."""
    if not types:
        return {}
    anchor = types[0]
    return {t: 1.0 if t == anchor else type_ratio(ratios, anchor, t) for t in types}


def projected(model: GoodputModel, ratio: float) -> GoodputModel:
    """`model` on a type `ratio` times as fast: every step-time parameter divided by it
    (the step time is homogeneous of degree one in them)."""
    p = model.perf
    assert p is not None
    perf = PerfParams(p.alpha_c / ratio, p.beta_c / ratio, p.alpha_n / ratio, p.beta_n / ratio,
                      p.alpha_r / ratio, p.beta_r / ratio, p.gamma)
    return dataclasses.replace(model, perf=perf)


def type_ratio(ratios: Mapping[tuple[str, str], float], source: str, target: str) -> float:
    """speed(target) / speed(source): measured by a category on both, else through one type
    measured with each, else 1 (nothing says they differ)."""
    if (source, target) in ratios:
        return ratios[(source, target)]
    via = sorted(u for (s, u) in ratios if s == source and (u, target) in ratios)
    if via:
        return math.exp(sum(math.log(ratios[(source, u)] * ratios[(u, target)]) for u in via)
                        / len(via))
    return 1.0


def type_model(job: Job, gpu_type: str, ratios: Mapping[tuple[str, str], float]
               ) -> GoodputModel | None:
    """The job's model on `gpu_type`: reported there, else projected from a measured type
    (one with a measured ratio first, the fastest such source first): as Sia projects a
    job's throughput onto every type once it has run on one; None when nothing is known.
    Its category's profiled speeds (Job.category_type_speeds) give the ratios where they
    cover the types, `ratios` the rest."""
    own = job.goodput_by_type.get(gpu_type)
    if measured(own):
        return own
    sources = sorted(s for s, m in job.goodput_by_type.items() if measured(m))
    if not sources:
        return None
    if job.category_type_speeds:
        ratios = {**ratios, **profiled_ratios(job.category_type_speeds)}
    source = max(sources, key=lambda s: ((s, gpu_type) in ratios,
                                         one_gpu_goodput(job.goodput_by_type[s])))
    return projected(job.goodput_by_type[source], type_ratio(ratios, source, gpu_type))


def mean_type_speed(ratios: Mapping[tuple[str, str], float], types: Sequence[str]
                    ) -> dict[str, float]:
    """Each type's speed relative to the first type that has a ratio to it (1 without);
    Sia's (it depends on the order of the types: Voda uses `type_speeds`)."""
    out = {t: 1.0 for t in types}
    for t in types:
        for s in types:
            if (s, t) in ratios:
                out[t] = ratios[(s, t)] * out[s] if s != t else 1.0
                break
    return out


def at_statistics(job: Job, stats: tuple[float, float]) -> Job:
    """`job` with every type's model at the gradient statistics `stats` (grad_sqr,
    grad_var): statistics belong to its training, not to the type a report came from."""
    if all((m.grad_sqr, m.grad_var) == stats for m in job.goodput_by_type.values()):
        return job
    models = {t: m if (m.grad_sqr, m.grad_var) == stats
              else dataclasses.replace(m, grad_sqr=stats[0], grad_var=stats[1])
              for t, m in job.goodput_by_type.items()}
    return dataclasses.replace(job, goodput_by_type=models)


def job_cap(job: Job, model: GoodputModel | None, shape: TypeShape) -> int:
    """The most GPUs `job` may take on a type: its max, the type's capacity, the profiles'
    limit, and (with a model) twice the most GPUs measured and what its batch range allows."""
    cap = min(job.max_workers, shape.capacity, MAX_HETERO_GPUS)
    if model is None and job.goodput is not None:
        cap = 1  # a batch-adaptive job that has measured nothing: one GPU to measure on
    elif model is not None:
        batch = model.fixed_batch if model.fixed_batch is not None else model.max_batch
        cap = min(cap, max(batch // max(model.min_local, 1), 1),
                  max(2 * model.max_profiled_replicas, 1))
    return max(cap, min(job.min_workers, shape.capacity))


def goodput_curve(job: Job, gpu_type: str, shape: TypeShape,
                  ratios: Mapping[tuple[str, str], float], unknown_speed: float,
                  cap: int | None = None) -> np.ndarray:
    """Goodput on n = 0..cap GPUs of `gpu_type` (0 at n = 0): the model's at its best even
    layout; linear at `unknown_speed` per GPU for a job measured nowhere. `cap`: the most
    GPUs (default `job_cap`), never more than the type has."""
    model = type_model(job, gpu_type, ratios)
    cap = job_cap(job, model, shape) if cap is None else min(cap, shape.capacity)
    curve = np.zeros(cap + 1)
    if cap < 1:
        return curve
    if model is None:
        curve[1:] = unknown_speed * np.arange(1, cap + 1)
    else:
        curve[1:] = best_goodput(model, cap, shape.per_node, max(shape.nodes, 1))
    return curve

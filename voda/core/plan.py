"""decide(): the one pipeline every backend uses.

For each GPU type on its own (one sub-scheduler per type):

1. allocate: the type's algorithm maps its active jobs to GPU counts (checked
   against the contract);
2. place: the placer maps the counts to the type's nodes, keeping workers where
   they are; the placement must be valid and reachable: applying the actions one
   at a time (frees before takes), no node may go over capacity on the way;

then 3. diff: old and new placements become actions, ordered so GPUs are freed
(halt, scale-in, migrate) before they are taken (start, scale-out).

A type whose algorithm or placer fails (or raises) keeps the placement in force
and its reason is reported in Plan.errors; the other types go on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from functools import partial
from itertools import compress
from operator import attrgetter, is_not, not_

from voda.core.allocation.base import AllocationAlgorithm, checked_allocate
from voda.core.allocation.counts import sized_to
from voda.core.allocation.reasons import Deferred, Reason, ReasonCode, explain
from voda.core.model import (
    ACTION_ORDER,
    Action,
    ActionKind,
    Cluster,
    Job,
    JobPlacement,
    Placement,
    Plan,
    placement_workers,
)
from voda.core.placement.base import Placer, node_maps
from voda.core.placement.validated import placement_problems_since_last

_NAME = attrgetter("name")


class PlacementFailed(ValueError):
    pass


def classify(old: JobPlacement, new: JobPlacement) -> ActionKind | None:
    """The action that turns `old` into `new`, or None when nothing changes."""
    before, after = placement_workers(old), placement_workers(new)
    if before == 0 and after == 0:
        return None
    if after == 0:
        return ActionKind.HALT
    if before == 0:
        return ActionKind.START
    if after < before:
        return ActionKind.SCALE_IN
    if after > before:
        return ActionKind.SCALE_OUT
    if dict(old) != dict(new):
        return ActionKind.MIGRATE
    return None


def moved_workers(old: JobPlacement, new: JobPlacement) -> int:
    """Workers taken off a node only to run elsewhere (a plain shrink moves none)."""
    if not old or not new:
        return 0
    after = dict(new)
    removed = sum(max(0, count - after.get(node, 0)) for node, count in old)
    shrink = max(0, placement_workers(old) - placement_workers(new))
    return removed - shrink


_RANK = {kind: i for i, kind in enumerate(ACTION_ORDER)}


def _action_order(action: Action) -> tuple[int, str]:
    return _RANK[action.kind], action.job


def diff(old: Placement, new: Placement) -> tuple[Action, ...]:
    """The actions that turn `old` into `new`: frees (halt, scale-in, migrate) before
    takes (start, scale-out), by job name within a kind."""
    get = old.get
    # A placer that keeps a job's placement hands the same tuple back: those jobs, and the
    # jobs still placed, are passed over in C (no Python line per job; plain_diff: one).
    changed = compress(new.items(), map(is_not, map(get, new), new.values()))
    gone = compress(old.items(), map(not_, map(new.__contains__, old)))
    return _actions(((job, get(job, ()), n) for job, n in changed), gone)


def plain_diff(old: Placement, new: Placement) -> tuple[Action, ...]:
    """`diff`, looking at every job (the reference in tests/test_engine_passes.py)."""
    return _actions(((job, old.get(job, ()), n) for job, n in new.items()),
                    ((job, o) for job, o in old.items() if job not in new))


def _actions(changed: Iterable[tuple[str, JobPlacement, JobPlacement]],
             gone: Iterable[tuple[str, JobPlacement]]) -> tuple[Action, ...]:
    """The actions of the jobs whose placement went from `o` to `n` (changed) and of the
    jobs no longer placed, in order."""
    actions = []
    for job, o, n in changed:
        if o is n:
            continue
        o, n = tuple(o), tuple(n)
        if o == n:
            continue
        kind = classify(o, n)
        if kind is not None:
            actions.append(Action(kind, job, o, n))
    for job, o in gone:
        if o:
            kind = classify(tuple(o), ())
            if kind is not None:
                actions.append(Action(kind, job, tuple(o), ()))
    return tuple(sorted(actions, key=_action_order))


def sequence_problems(
    previous: Placement, placement: Placement, capacity: Mapping[str, int],
    actions: Sequence[Action] | None = None,
) -> list[str]:
    """Nodes that go over capacity while the actions of `diff` are applied in order.

    Backends apply a plan's actions one at a time (halts, scale-ins and
    migrations first), so a placement whose end state fits can still be
    unusable, e.g. when a job starts on GPUs that a later scale-out frees.
    `actions`: `diff(previous, placement)` where the caller has it already.
    A placer marked `applies_at_once` (the Pollux artifact's rules, for the
    simulator, which moves every job of a round at once) is not held to it.
    """
    return list(_overflows(previous, placement, capacity, actions))


def sequence_applicable(
    previous: Placement, placement: Placement, capacity: Mapping[str, int]
) -> bool:
    """Whether `sequence_problems` is empty; stops at the first problem."""
    return next(_overflows(previous, placement, capacity, None), None) is None


def _overflows(
    previous: Placement, placement: Placement, capacity: Mapping[str, int],
    actions: Sequence[Action] | None,
) -> Iterator[str]:
    """sequence_problems, one at a time."""
    if actions is None:
        actions = diff(previous, placement)
    # Only a node an action takes GPUs on can go over: the use of those alone is counted.
    used = {node: 0 for action in actions for node, _ in action.new}
    if not used:
        return
    for shards in previous.values():
        for node, count in shards:
            if node in used:
                used[node] += count
    for action in actions:
        for node, count in action.old:
            if node in used:
                used[node] -= count
        for node, count in action.new:
            used[node] += count
            if node in capacity and used[node] > capacity[node]:
                yield (f"node {node!r}: {used[node]} GPUs used of {capacity[node]} "
                       f"after {action.kind} {action.job}")


def decide(
    jobs: Sequence[Job],
    cluster: Cluster,
    previous: Placement,
    algorithm: AllocationAlgorithm | Mapping[str, AllocationAlgorithm],
    placer: Placer,
    explain_reasons: bool = True,
) -> Plan:
    """Allocate, place and diff on an immutable snapshot, one GPU type at a time.

    `algorithm` is one algorithm for every GPU type, or one per GPU type. A type
    whose algorithm breaks its contract, whose placer fails or whose placement
    cannot be reached keeps the placement in force; Plan.errors names it and says
    why. Jobs that left the active set are not halted here: they are gone.

    `explain_reasons`: give every job left below its max a Reason (Plan.reasons): the
    algorithm's own (voda.core.allocation.reasons), or the placement's where the job's
    nodes held less, or the refusal's. They are worked out on first read (Deferred), from
    what each type's decision saw.
    """
    by_name = {j.name: j for j in jobs}
    allocation: dict[str, int] = {}
    placement: dict[str, JobPlacement] = {}
    errors: dict[str, str] = {}
    explained: list[Callable[[], dict[str, Reason]]] = []
    free: dict[str, int] = {}
    actions: list[Action] = []
    job_types = {j.gpu_type for j in jobs}
    cluster_types = [t for t in node_maps(cluster).nodes_of if t is not None]  # gpu_types()
    for gpu_type in sorted({*cluster_types, *job_types}):
        # One type for every job (most clusters): the jobs are that type's, as they are.
        of_type = (jobs if len(job_types) == 1 and gpu_type in job_types
                   else [j for j in jobs if j.gpu_type == gpu_type])
        if not of_type:
            free[gpu_type] = cluster.capacity(gpu_type)
            continue
        # What the type's jobs hold, in the jobs' order (C loops: no Python line per job).
        holding = list(filter(previous.__contains__, map(_NAME, of_type)))
        held_before = dict(zip(holding, map(previous.__getitem__, holding), strict=True))
        held = held_before
        algo = algorithm[gpu_type] if isinstance(algorithm, Mapping) else algorithm
        type_cluster = _of_type(cluster, gpu_type)
        if type_cluster is not cluster:
            held = _on_nodes(held, type_cluster, cluster)  # a job moved here from another type
        every_held = held is held_before and len(by_name) == len(jobs)
        caps: dict[str, int] = {}
        try:
            counts, placed, type_actions = _decide_type(
                of_type, type_cluster, held, algo, placer, caps,
                by_name if of_type is jobs else None)
            explained.append(partial(_explain_type, of_type, type_cluster, algo, counts, caps))
        except Exception as exc:  # a custom algorithm or placer may fail in any way
            errors[gpu_type] = str(exc) or type(exc).__name__
            counts = {j.name: placement_workers(held.get(j.name, ())) for j in of_type}
            placed = {name: p for name, p in held.items() if p}
            explained.append(partial(_refused, of_type, counts, gpu_type))
            type_actions = None
        if type_actions is None or not every_held:  # the diff from what each job held
            type_actions = diff(held_before, placed)
        free[gpu_type] = node_maps(type_cluster).total - sum(counts.values())
        allocation.update(counts)
        placement.update(placed)
        actions.extend(type_actions)
    reasons: Mapping[str, Reason] = (
        Deferred(partial(_all_reasons, explained, by_name, allocation, free))
        if explain_reasons else {})
    # Each type's actions are in order; the jobs of the types are apart: one stable sort.
    actions.sort(key=_action_order)
    migrated = sum(moved_workers(a.old, a.new) for a in actions)
    return Plan(allocation=allocation, placement=placement, actions=tuple(actions),
                migrated_workers=migrated, errors=errors, reasons=reasons)


def _of_type(cluster: Cluster, gpu_type: str) -> Cluster:
    """The cluster's nodes of `gpu_type`: the cluster itself when every node is (a placer
    may then keep what it works out of the nodes from one decision to the next)."""
    if len(node_maps(cluster).nodes_of.get(gpu_type, ())) == len(cluster.nodes):
        return cluster  # every node is of the type
    return cluster.of_type(gpu_type)


def _on_nodes(held: Placement, cluster: Cluster, whole: Cluster) -> Placement:
    """The placements held on no node of `whole` outside `cluster`: a job whose GPU type was changed
    (voda.core.allocation.hetero) starts afresh on its new type's nodes."""
    others = {n.name for n in whole.nodes} - {n.name for n in cluster.nodes}
    return {job: p for job, p in held.items() if not any(node in others for node, _ in p)}


def _all_reasons(explained: Sequence[Callable[[], dict[str, Reason]]],
                 jobs: Mapping[str, Job], allocation: Mapping[str, int],
                 free: Mapping[str, int]) -> dict[str, Reason]:
    """Every type's reasons, then the jobs waiting for their type while others are free."""
    reasons: dict[str, Reason] = {}
    for part in explained:
        reasons.update(part())
    _waiting_for_type(reasons, jobs, allocation, free)
    return reasons


def _explain_type(jobs: Sequence[Job], cluster: Cluster, algorithm: AllocationAlgorithm,
                  allocation: Mapping[str, int], caps: Mapping[str, int]) -> dict[str, Reason]:
    """The reasons of one GPU type's jobs below max: the algorithm's, and the placement's
    for jobs whose nodes held less than they were given."""
    capacity = cluster.capacity()
    if capacity == 0:
        return {j.name: Reason(ReasonCode.NO_FREE_GPU_TYPE,
                               f"No node has {j.gpu_type} GPUs, the type it asks for.")
                for j in jobs if allocation.get(j.name, 0) < j.max_workers}
    out = explain(sized_to(algorithm, cluster), jobs, capacity, allocation)
    for job in jobs:
        cap = caps.get(job.name)
        gpus = allocation.get(job.name, 0)
        if cap is None or gpus >= job.max_workers or job.nodes is None:
            continue
        usable = len(job.nodes)
        need = (f"it needs at least its min of {job.min_workers}" if gpus == 0
                else f"it holds {gpus} of its max {job.max_workers}")
        out[job.name] = Reason(
            ReasonCode.DOES_NOT_FIT,
            f"Does not fit: it may use only {usable} of the {len(cluster.nodes)} "
            f"{job.gpu_type} nodes (its template's taints, selectors and requests), which have "
            f"{cap} GPUs free of other jobs'; {need}.")
    return out


def _refused(jobs: Sequence[Job], counts: Mapping[str, int], gpu_type: str
             ) -> dict[str, Reason]:
    return {j.name: Reason(ReasonCode.PLAN_REFUSED,
                           f"The decision for {gpu_type} GPUs was refused, so the plan in "
                           f"force stays: it holds {counts.get(j.name, 0)} of its max "
                           f"{j.max_workers} GPUs until a retry succeeds.")
            for j in jobs if counts.get(j.name, 0) < j.max_workers}


def _waiting_for_type(reasons: dict[str, Reason], jobs: Mapping[str, Job],
                      allocation: Mapping[str, int], free: Mapping[str, int]) -> None:
    """A job queued on a GPU type with no GPU free while another type has some waits for
    its type: it says so."""
    elsewhere = {t: n for t, n in free.items() if n > 0}
    if not elsewhere:
        return
    for name, reason in reasons.items():
        job = jobs[name]
        if reason.code is not ReasonCode.QUEUED or free.get(job.gpu_type, 0) > 0:
            continue
        others = ", ".join(f"{t} has {n}" for t, n in sorted(elsewhere.items())
                           if t != job.gpu_type)
        if others:
            reasons[name] = Reason(
                ReasonCode.NO_FREE_GPU_TYPE,
                f"Waits for a free {job.gpu_type} GPU while {others} free; "
                f"{reason.message[0].lower()}{reason.message[1:]}")


def _decide_type(
    jobs: Sequence[Job],
    cluster: Cluster,
    previous: Placement,
    algorithm: AllocationAlgorithm,
    placer: Placer,
    caps: dict[str, int] | None = None,
    by_name: Mapping[str, Job] | None = None,
) -> tuple[dict[str, int], Placement, tuple[Action, ...]]:
    """Steps 1 and 2 for the jobs and nodes of one GPU type (raises when refused), and
    step 3 as the check of the way there saw it: the actions from `previous`.

    `caps` is filled with the confined jobs whose nodes held less than they were given
    (the GPUs their nodes had free). `by_name`: the jobs by name, where the caller has it."""
    if by_name is None:
        by_name = {j.name: j for j in jobs}
    confined = sum(1 for j in jobs if j.nodes is not None)
    if caps is None:
        caps = {}
    for _ in range(confined + 1):
        # 1. allocate (packing for this type's nodes, unless the algorithm was told a size)
        allocation = checked_allocate(sized_to(algorithm, cluster), _capped(jobs, caps),
                                      node_maps(cluster).total)
        allocation.update({name: 0 for name, cap in caps.items() if cap == 0})
        # 2. place, then check the result and the way to it
        if not confined:
            placement = _call(placer, allocation, by_name, cluster, previous)
            break
        given, placement = _place_confined(allocation, by_name, cluster, previous, placer)
        short = {name: n for name, n in given.items() if n < allocation.get(name, 0)}
        allocation = given
        if not short:
            break
        caps.update(short)  # allocate again: what they cannot use goes to the others
    problems = placement_problems_since_last(allocation, by_name, cluster, placement)
    actions = diff(previous, placement)
    if not problems and not getattr(placer, "applies_at_once", False):
        problems = sequence_problems(previous, placement, node_maps(cluster).capacity, actions)
    if problems:
        raise PlacementFailed("placement refused: " + "; ".join(problems))
    return allocation, placement, actions


def _capped(jobs: Sequence[Job], caps: Mapping[str, int]) -> list[Job]:
    """The jobs as the allocation sees them: at most `caps` workers; a cap below a job's
    minimum leaves it out."""
    if not caps:
        return list(jobs)
    out = []
    for job in jobs:
        cap = caps.get(job.name)
        if cap is None:
            out.append(job)
        elif cap >= job.min_workers and cap > 0:
            preferred = job.preferred_workers
            out.append(replace(job, max_workers=min(job.max_workers, cap),
                               preferred_workers=None if preferred is None else min(preferred,
                                                                                    cap)))
    return out


def _call(placer: Placer, allocation: Mapping[str, int], jobs: Mapping[str, Job],
          cluster: Cluster, previous: Placement) -> dict[str, JobPlacement]:
    try:
        placement = placer(allocation, jobs, cluster, previous)
    except Exception as exc:
        raise PlacementFailed(f"placer raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(placement, Mapping):
        raise PlacementFailed(f"placer returned {type(placement).__name__}, not a mapping")
    if type(placement) is dict and _all_placed_tuples(placement.values()):
        return dict(placement)  # what the comprehension below would give, copied in C
    return {name: tuple(p) for name, p in placement.items() if p}


def _all_placed_tuples(placements: Iterable[object]) -> bool:
    """Whether every placement is a tuple (not a subclass) and none is empty (C loops)."""
    return set(map(type, placements)) <= {tuple} and () not in placements


def _place_confined(
    allocation: Mapping[str, int],
    jobs: Mapping[str, Job],
    cluster: Cluster,
    previous: Placement,
    placer: Placer,
) -> tuple[dict[str, int], dict[str, JobPlacement]]:
    """Place jobs confined to some nodes (Job.nodes) first, one at a time in their order,
    each on what its nodes have free of every other job's GPUs (those placed so far, and
    what the others hold now); then the other jobs together on what is left. A confined
    job gets at most what its nodes have free (nothing when that is below its minimum);
    workers it holds on a node it may no longer use are placed again elsewhere."""
    allocation = dict(allocation)
    holding = {name: _counts(previous.get(name, ())) for name in jobs}
    placement: dict[str, JobPlacement] = {}
    confined = sorted((j for j in jobs.values() if j.nodes is not None), key=lambda j: j.sort_key)
    for job in confined:
        allowed = job.nodes or frozenset()
        own = tuple((n, c) for n, c in previous.get(job.name, ()) if n in allowed)
        holding[job.name] = {}
        taken = _taken(holding)
        room = tuple(replace(n, gpus=n.gpus - taken.get(n.name, 0)) for n in cluster.nodes
                     if n.name in allowed and n.gpus > taken.get(n.name, 0))
        free = sum(n.gpus for n in room)
        want = allocation.get(job.name, 0)
        if want > free:
            want = allocation[job.name] = free if free >= job.min_workers else 0
        if want > 0:
            placed = _call(placer, {job.name: want}, {job.name: job}, Cluster(room),
                           {job.name: own} if own else {})
            placement.update(placed)
        holding[job.name] = _counts(placement.get(job.name, ()))
    rest = {name: j for name, j in jobs.items() if j.nodes is None}
    taken = _taken({name: c for name, c in holding.items() if name not in rest})
    room = tuple(replace(n, gpus=n.gpus - taken.get(n.name, 0)) for n in cluster.nodes)
    placement.update(_call(placer, {n: c for n, c in allocation.items() if n in rest}, rest,
                           Cluster(room), {n: p for n, p in previous.items() if n in rest}))
    return allocation, placement


def _counts(job_placement: JobPlacement) -> dict[str, int]:
    out: dict[str, int] = {}
    for node, count in job_placement:
        out[node] = out.get(node, 0) + count
    return out


def _taken(holding: Mapping[str, Mapping[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for counts in holding.values():
        for node, count in counts.items():
            out[node] = out.get(node, 0) + count
    return out

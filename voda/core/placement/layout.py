"""Packed or spread: the layout a job wider than one node should get, learned from runs.

A job that needs more than one node's GPUs can be packed (as few nodes as its
workers need, each node full) or spread (at most half a node on each node, so
fewer of its workers share one node's network link). Which runs faster depends
on the model and the network: on the measured T4 nodes yolov3 and BERT train
30-50 % faster spread, ImageNet and CIFAR-10 about as fast either way. The
engine records the throughput (samples per second) that each layout of a job
category reached, keyed by (workers, nodes spanned); the placer asks
`spread_pays` before it places a wide consolidated job.

Throughput, not epoch time: epochs of one job can differ tenfold in length
(the first is often the longest), so epoch times of different jobs are not
comparable, while samples per second at a given layout are.

The rule, for a job of k workers on nodes of G GPUs:
- both layouts seen at k: the faster one;
- both seen at some common worker count: spread when it was faster on average
  there (geometric mean of the ratios);
- both seen, never at the same count: the nearest pair of counts, compared per
  GPU (samples per second / workers);
- only one seen: try the other, so the category learns it;
- nothing seen: packed (consolidation, the default).

A running job that keeps its size moves to the other layout only when that is
known to be faster by a margin (`worth_moving`): a move restarts it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping

LayoutKey = tuple[int, int]  # (workers, nodes spanned)


def half_node(node_gpus: int) -> int:
    """The most workers a spread job puts on one node."""
    return max(1, math.ceil(node_gpus / 2))


def packed_nodes(workers: int, node_gpus: int) -> int:
    return math.ceil(workers / node_gpus)


def spread_nodes(workers: int, node_gpus: int) -> int:
    return math.ceil(workers / half_node(node_gpus))


@functools.lru_cache(maxsize=4096)
def is_wide(workers: int, node_gpus: int) -> bool:
    """Whether the job needs more than one node, and spreading it would change anything
    (never on nodes of one GPU)."""
    return node_gpus >= 2 and workers > node_gpus and spread_nodes(
        workers, node_gpus) > packed_nodes(workers, node_gpus)


def layout_throughputs(
    history: Mapping[LayoutKey, float], node_gpus: int
) -> tuple[dict[int, float], dict[int, float]]:
    """Observed samples per second of wide layouts by worker count: (packed, spread).

    A layout between the two (more nodes than packed, fewer than spread) is
    neither and is left out.
    """
    packed: dict[int, float] = {}
    spread: dict[int, float] = {}
    for (workers, nodes), rate in history.items():
        if not (rate > 0 and is_wide(workers, node_gpus)):
            continue
        if nodes == packed_nodes(workers, node_gpus):
            packed[workers] = rate
        elif nodes >= spread_nodes(workers, node_gpus):
            spread[workers] = rate
    return packed, spread


def spread_speedup(
    history: Mapping[LayoutKey, float], workers: int, node_gpus: int
) -> float | None:
    """Estimated throughput spread / packed at `workers` (above 1: spread is faster).

    None until both layouts have been seen at some worker count.
    """
    return _speedup(*layout_throughputs(history, node_gpus), workers)


def _speedup(packed: Mapping[int, float], spread: Mapping[int, float], workers: int
             ) -> float | None:
    if workers in packed and workers in spread:
        return spread[workers] / packed[workers]
    common = packed.keys() & spread.keys()
    if common:
        return math.exp(sum(math.log(spread[w] / packed[w]) for w in common) / len(common))
    if packed and spread:
        _, wp, ws = min((abs(wp - ws), wp, ws) for wp in packed for ws in spread)
        return (spread[ws] / ws) / (packed[wp] / wp)
    return None


def spread_pays(
    history: Mapping[LayoutKey, float], workers: int, node_gpus: int, margin: float = 0.0
) -> bool:
    """Whether a consolidated job of `workers` should be spread at half a node per node.

    Spread only when it is known to be faster by more than `margin`: half-full
    nodes cost the jobs that would have had a whole node. Until both layouts
    have been seen, the one not seen yet is tried (packed first).
    """
    if not is_wide(workers, node_gpus):
        return False
    packed, spread = layout_throughputs(history, node_gpus)
    speedup = _speedup(packed, spread, workers)
    if speedup is None:
        return bool(packed)
    return speedup * (1 - margin) > 1


def worth_moving(
    history: Mapping[LayoutKey, float], workers: int, nodes: int, node_gpus: int, margin: float
) -> bool:
    """Whether a running job on `nodes` nodes should move to the other layout.

    Only when the other one is known to be faster by more than `margin` (a share
    of the throughput): a move restarts the job, and measurements are noisy.
    """
    if not is_wide(workers, node_gpus):
        return False
    speedup = spread_speedup(history, workers, node_gpus)
    if speedup is None:
        return False
    if nodes == packed_nodes(workers, node_gpus):
        return speedup * (1 - margin) > 1
    if nodes >= spread_nodes(workers, node_gpus):
        return speedup < 1 - margin
    return False

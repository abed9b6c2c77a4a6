"""The topology-aware placer's settings: the placement strategies and PlacementSettings.

Weights of the candidate score and the limits of the placer, validated by
`settings_problems`. See voda.core.placement.manager.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from voda.core.model import Job

CONSOLIDATED, DISTRIBUTED, BALANCED = "consolidated", "distributed", "balanced"
STRATEGIES = (CONSOLIDATED, DISTRIBUTED, BALANCED)


def strategy_of(job: Job) -> str:
    """The job's placement strategy; an unknown name counts as consolidated."""
    return job.placement_strategy if job.placement_strategy in STRATEGIES else CONSOLIDATED


@dataclass(frozen=True)
class PlacementSettings:
    """Weights of the candidate score and the limits of the topology-aware placer.

    `network_bandwidth` of a job and `leaf_uplink_bandwidth` share one unit
    (Gbit/s by convention). `max_nodes_per_leaf` / `max_gpus_per_leaf` bound
    what one job takes of one leaf (None: no bound); a job that cannot be placed
    within them is placed without them. `domain_performance` maps a leaf or
    spine name to a score in [0, 1] learned from past runs (absent: 0.5).
    """

    resource_weight: float = 0.4
    topology_weight: float = 0.3
    utilization_weight: float = 0.2
    history_weight: float = 0.1
    max_nodes_per_leaf: int | None = None
    max_gpus_per_leaf: int | None = None
    leaf_uplink_bandwidth: float = 100.0
    domain_performance: Mapping[str, float] = field(default_factory=dict)
    # Best-fit candidates scored per request: bounds the work on large clusters.
    candidates: int = 16
    # Step 3: whether it runs, how many unchanged jobs it may move, and the share of
    # changed jobs from which it rebuilds the whole layout.
    defragment: bool = True
    defragment_max_moved_jobs: int = 2
    rebuild_changed_share: float = 0.5
    # A consolidated job too large for one node is spread over nodes at most half
    # full of it, so fewer of its workers share each node's network link: always
    # (spread_multi_node), or when the job's category ran faster so (learn_layout).
    spread_multi_node: bool = False
    learn_layout: bool = True
    # A running job moves to the other layout only when it is known to be faster
    # by more than this share of the epoch time (a move restarts the job).
    relayout_margin: float = 0.3
    # A new placement is spread only when that is known to be faster by this share.
    spread_margin: float = 0.25

    def __post_init__(self) -> None:
        problems = settings_problems(self)
        if problems:
            raise ValueError("placement settings: " + "; ".join(problems))
        object.__setattr__(
            self, "domain_performance", MappingProxyType(dict(self.domain_performance))
        )

    def history(self, leaf: str, spine: str) -> float:
        perf = self.domain_performance
        return perf.get(leaf, perf.get(spine, 0.5))


def settings_problems(s: PlacementSettings) -> list[str]:
    """Reasons the settings are invalid, as 'field: reason' strings."""
    problems = []
    for name in ("resource_weight", "topology_weight", "utilization_weight", "history_weight"):
        value = getattr(s, name)
        if not (isinstance(value, int | float) and value >= 0):
            problems.append(f"{name}: must be a non-negative number, got {value!r}")
    for name in ("max_nodes_per_leaf", "max_gpus_per_leaf"):
        value = getattr(s, name)
        if value is not None and not (isinstance(value, int) and value >= 1):
            problems.append(f"{name}: must be None or an integer >= 1, got {value!r}")
    if not s.leaf_uplink_bandwidth > 0:
        problems.append(f"leaf_uplink_bandwidth: must be positive, got {s.leaf_uplink_bandwidth}")
    if not (isinstance(s.candidates, int) and s.candidates >= 1):
        problems.append(f"candidates: must be an integer >= 1, got {s.candidates!r}")
    for name in ("defragment", "spread_multi_node", "learn_layout"):
        if not isinstance(getattr(s, name), bool):
            problems.append(f"{name}: must be true or false, got {getattr(s, name)!r}")
    for name in ("relayout_margin", "spread_margin"):
        value = getattr(s, name)
        if not (isinstance(value, int | float) and 0 <= value < 1):
            problems.append(f"{name}: must lie in [0, 1), got {value!r}")
    if not 0 <= s.rebuild_changed_share <= 1:
        problems.append(
            f"rebuild_changed_share: must lie in [0, 1], got {s.rebuild_changed_share}"
        )
    if not (isinstance(s.defragment_max_moved_jobs, int) and s.defragment_max_moved_jobs >= 0):
        problems.append(
            "defragment_max_moved_jobs: must be an integer >= 0, "
            f"got {s.defragment_max_moved_jobs!r}"
        )
    for domain, score in s.domain_performance.items():
        if not 0 <= score <= 1:
            problems.append(f"domain_performance[{domain!r}]: must lie in [0, 1], got {score}")
    return problems

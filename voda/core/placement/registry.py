"""Placers by name, for `--placement` flags and scheduler settings."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from voda.core.placement.base import Placer
from voda.core.placement.first_fit import first_fit
from voda.core.placement.manager import PlacementSettings, TopologyPlacer, counts_only
from voda.core.placement.most_free import most_free
from voda.core.placement.repack import repack

DEFAULT_PLACER = "topology"

# Topology-aware placers: what each name sets of PlacementSettings.
_TOPOLOGY_PRESETS: dict[str, dict[str, Any]] = {
    # Packs, and spreads a job wider than a node when its category ran faster so.
    "topology": {},
    # Packs every consolidated job, whatever was learned.
    "topology-packed": {"learn_layout": False},
    # Spreads every job wider than a node over half-full nodes.
    "topology-spread": {"spread_multi_node": True},
}

# name -> factory returning a Placer. "off" keeps only the counts meaningful: see
# voda.core.placement.manager.counts_only and docs/design/003-placement.md.
_PLACERS: dict[str, Callable[[], Placer]] = {
    **{name: (lambda preset=preset: TopologyPlacer(PlacementSettings(**preset)))
       for name, preset in _TOPOLOGY_PRESETS.items()},
    "off": lambda: counts_only,
    "naive": lambda: first_fit,
    "most-free": lambda: most_free,
    "repack": lambda: repack,
}


def placer_names() -> list[str]:
    return sorted(_PLACERS)


def get_placer(name: str, settings: Mapping[str, Any] | None = None) -> Placer:
    """The placer called `name`; `settings` override PlacementSettings fields (topology
    placers only). Raises ValueError naming the setting and the reason."""
    if name not in _PLACERS:
        raise ValueError(
            f"placement: unknown placer {name!r}; valid names: {', '.join(placer_names())}"
        )
    if not settings:
        return _PLACERS[name]()
    if name not in _TOPOLOGY_PRESETS:
        raise ValueError(f"placement: placer {name!r} takes no settings; the topology placers "
                         f"({', '.join(sorted(_TOPOLOGY_PRESETS))}) do")
    known = {f.name for f in dataclasses.fields(PlacementSettings)}
    unknown = sorted(set(settings) - known)
    if unknown:
        raise ValueError(f"placement.{unknown[0]}: unknown setting; valid: "
                         f"{', '.join(sorted(known))}")
    try:
        values = {**_TOPOLOGY_PRESETS[name], **settings}
        return TopologyPlacer(PlacementSettings(**values))
    except (TypeError, ValueError) as exc:
        problems = str(exc).removeprefix("placement settings: ").split("; ")
        raise ValueError("; ".join(f"placement.{p}" for p in problems)) from None

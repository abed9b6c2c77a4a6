"""Placers by name, for `--placement` flags and scheduler settings."""

from __future__ import annotations

from collections.abc import Callable

from voda.core.placement.base import Placer
from voda.core.placement.first_fit import first_fit
from voda.core.placement.manager import PlacementSettings, TopologyPlacer, counts_only
from voda.core.placement.most_free import most_free

DEFAULT_PLACER = "topology"

# name -> factory returning a Placer. "off" keeps only the counts meaningful: see
# voda.core.placement.manager.counts_only and docs/design/003-placement.md.
_PLACERS: dict[str, Callable[[], Placer]] = {
    # Packs, and spreads a job wider than a node when its category ran faster so.
    "topology": TopologyPlacer,
    # Packs every consolidated job, whatever was learned.
    "topology-packed": lambda: TopologyPlacer(PlacementSettings(learn_layout=False)),
    # Spreads every job wider than a node over half-full nodes.
    "topology-spread": lambda: TopologyPlacer(PlacementSettings(spread_multi_node=True)),
    "off": lambda: counts_only,
    "naive": lambda: first_fit,
    "most-free": lambda: most_free,
}


def placer_names() -> list[str]:
    return sorted(_PLACERS)


def get_placer(name: str) -> Placer:
    try:
        return _PLACERS[name]()
    except KeyError:
        raise ValueError(
            f"placement: unknown placer {name!r}; valid names: {', '.join(placer_names())}"
        ) from None

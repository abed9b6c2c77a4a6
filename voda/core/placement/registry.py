"""Placers by name, for `--placement` flags and scheduler settings."""

from __future__ import annotations

from collections.abc import Callable

from voda.core.placement.base import Placer
from voda.core.placement.first_fit import first_fit

# name -> factory returning a Placer. The topology-aware manager registers "topology".
_PLACERS: dict[str, Callable[[], Placer]] = {
    "naive": lambda: first_fit,
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

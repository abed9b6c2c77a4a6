"""Backends `voda serve` can drive, by name: adding one is one line in BACKENDS."""

from __future__ import annotations

from collections.abc import Callable

from voda.config import ServerSettings
from voda.engine.backend import Backend


def _emulated(settings: ServerSettings) -> Backend:
    from voda.backends.emulated import EmulatedBackend, parse_cluster

    return EmulatedBackend(parse_cluster(settings.cluster), time_scale=settings.time_scale)


def _local(settings: ServerSettings) -> Backend:
    from voda.backends.local import from_settings

    return from_settings(settings)


def _kubernetes(settings: ServerSettings) -> Backend:
    from voda.backends.kubernetes.backend import from_settings
    from voda.backends.kubernetes.elector import active_fence

    return from_settings(settings, fence=active_fence())


BackendFactory = Callable[[ServerSettings], Backend]

BACKENDS: dict[str, BackendFactory] = {
    "emulated": _emulated,
    "local": _local,
    "kubernetes": _kubernetes,
}


def backend_names() -> list[str]:
    return sorted(BACKENDS)


def create_backend(settings: ServerSettings) -> Backend:
    try:
        factory = BACKENDS[settings.backend]
    except KeyError:
        raise ValueError(
            f"backend: unknown backend {settings.backend!r}; valid names: "
            f"{', '.join(backend_names())}"
        ) from None
    return factory(settings)

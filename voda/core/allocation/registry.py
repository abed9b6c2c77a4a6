"""Algorithms by name: the built-in ones, plus custom ones.

A custom algorithm is found, in this order, in what was registered at run time
(`register`), in the `voda.algorithms` entry-point group, or by import path
`package.module:attribute`. The attribute may be an algorithm class/factory
(called with the parameters) or a ready algorithm object.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import inspect
from collections.abc import Callable, Collection, Mapping
from importlib.metadata import entry_points
from typing import Any

from voda.core.allocation.base import AllocationAlgorithm

Factory = Callable[..., AllocationAlgorithm]

DEFAULT_ALGORITHM = "ElasticFIFO"

_BUILTIN: dict[str, str] = {
    "FIFO": "voda.core.allocation.fifo:FIFO",
    "ElasticFIFO": "voda.core.allocation.fifo:ElasticFIFO",
    "SRJF": "voda.core.allocation.srjf:SRJF",
    "ElasticSRJF": "voda.core.allocation.srjf:ElasticSRJF",
    "Tiresias": "voda.core.allocation.tiresias:Tiresias",
    "ElasticTiresias": "voda.core.allocation.tiresias:ElasticTiresias",
    "FfDLOptimizer": "voda.core.allocation.ffdl:FfDLOptimizer",
    "AFS-L": "voda.core.allocation.afs:AFSL",
    "Optimus": "voda.core.allocation.optimus:Optimus",
    "Pollux": "voda.core.allocation.pollux:Pollux",
    "Voda": "voda.core.allocation.voda:Voda",
}
BUILTIN_NAMES: tuple[str, ...] = tuple(_BUILTIN)
_BUILTIN_CLASSES = frozenset(_BUILTIN.values())


def is_builtin(algorithm: object) -> bool:
    """Whether `algorithm` is an instance of a built-in algorithm class (not a subclass):
    its results keep the contract on any input (tests/test_allocation_properties.py), so
    a caller that runs it many times per decision, as the quota layer does once per
    queue, may skip checking each result (decide() still checks the decision's)."""
    cls = type(algorithm)
    return f"{cls.__module__}:{cls.__qualname__}" in _BUILTIN_CLASSES

_registered: dict[str, Factory] = {}


class UnknownAlgorithm(KeyError):
    def __init__(self, name: str, valid: list[str]) -> None:
        self.name = name
        self.valid = valid
        super().__init__(f"unknown algorithm {name!r}; valid names: {', '.join(valid)}")

    def __str__(self) -> str:  # KeyError quotes its message otherwise
        return self.args[0]


def register(name: str, factory: Factory) -> None:
    """Register a custom algorithm under `name` (built-in names cannot be replaced)."""
    if name in _BUILTIN:
        raise ValueError(f"{name!r} is a built-in algorithm and cannot be replaced")
    _registered[name] = factory


def unregister(name: str) -> None:
    _registered.pop(name, None)


def _entry_point_names() -> dict[str, Any]:
    return {ep.name: ep for ep in entry_points(group="voda.algorithms")}


def available(import_paths: Collection[str] = ()) -> list[str]:
    """Names that `create` accepts: built-in, registered, entry points, then the import
    paths given."""
    names = [*BUILTIN_NAMES, *sorted(_registered), *sorted(_entry_point_names())]
    return [*names, *sorted(set(import_paths) - set(names))]


def _load_path(path: str) -> Any:
    module_name, _, attr = path.partition(":")
    module = importlib.import_module(module_name)
    obj: Any = module
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def _resolve(name: str, import_paths: Collection[str] | None = None) -> Any:
    """`import_paths`: the `module:attribute` names that may be imported; None: any.

    A service passes the paths of its own configuration, so that a request cannot make
    it import (and call) whatever it names."""
    if name in _BUILTIN:
        return _load_path(_BUILTIN[name])
    if name in _registered:
        return _registered[name]
    eps = _entry_point_names()
    if name in eps:
        return eps[name].load()
    allowed = import_paths is None or name in import_paths
    if ":" in name and allowed:
        try:
            return _load_path(name)
        except (ImportError, AttributeError) as exc:
            raise UnknownAlgorithm(name, available(import_paths or ())) from exc
    raise UnknownAlgorithm(name, available(import_paths or ()))


def resolve(name: str, import_paths: Collection[str] | None = None) -> Any:
    """What `name` stands for (a class, a factory or a ready algorithm); raises
    UnknownAlgorithm."""
    return _resolve(name, import_paths)


def is_known(name: str, import_paths: Collection[str] | None = None) -> bool:
    try:
        _resolve(name, import_paths)
    except UnknownAlgorithm:
        return False
    return True


def _is_factory(target: Any) -> bool:
    """A class, or a callable that does not take (jobs, capacity): called to build the algorithm.

    A ready algorithm (an object with `name`, or a plain function of jobs and
    capacity) is used as it is.
    """
    if isinstance(target, type):
        return True
    if not callable(target) or hasattr(target, "name"):
        return False
    try:
        parameters = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    required = [p for p in parameters if p.kind in positional and p.default is p.empty]
    return len(required) != 2


def parameter_names(target: Any) -> list[str] | None:
    """The knobs a dataclass algorithm takes (its fields but `name`), or None if unknown."""
    if dataclasses.is_dataclass(target) and isinstance(target, type):
        return [f.name for f in dataclasses.fields(target) if f.init and f.name != "name"]
    return None


def create(name: str, params: Mapping[str, Any] | None = None,
           import_paths: Collection[str] | None = None) -> AllocationAlgorithm:
    """Build the algorithm called `name` with `params` (its configurable knobs).

    Raises UnknownAlgorithm (listing the valid names) or ValueError for bad params.
    """
    target = _resolve(name, import_paths)
    params = dict(params or {})
    if _is_factory(target):
        knobs = parameter_names(target)
        unknown = sorted(set(params) - set(knobs)) if knobs is not None else []
        if unknown:
            valid = ", ".join(knobs) if knobs else "none"
            raise ValueError(f"algorithm {name!r} has no parameter {unknown[0]!r}; "
                             f"its parameters: {valid}")
        try:
            algorithm = target(**params)
        except TypeError as exc:
            raise ValueError(f"bad parameters for algorithm {name!r}: {exc}") from exc
    else:
        if params:
            raise ValueError(f"algorithm {name!r} is a ready object and takes no parameters")
        algorithm = target
    if not callable(algorithm):
        raise ValueError(f"{name!r} does not resolve to a callable algorithm")
    if not getattr(algorithm, "name", None):
        with contextlib.suppress(AttributeError):
            algorithm.name = name  # type: ignore[attr-defined]
    return algorithm

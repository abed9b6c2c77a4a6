"""The pod scheduler's configuration: scoring weights and topology limits.

Read from a file or from a ConfigMap key, and read again whenever it changes.
The document may be the bare mapping or a `SchedulerConfig` object with the
settings under `spec` (the form of the scheduler Voda learns from), in YAML or
JSON:

    apiVersion: voda.io/v1alpha1        # topology.scheduler/v1alpha1 is accepted too
    kind: SchedulerConfig
    spec:
      scoringWeights:
        resourceAvailability: 0.4
        topologyAlignment: 0.3
        domainUtilization: 0.2
        historicalPerformance: 0.1
      topologyConstraints:
        maxNodesPerLeaf: 4
        maxGPUsPerLeaf: 32
      domainPerformance: {leaf-1: 0.9}  # historical performance of a leaf or spine, in [0, 1]
      leafUplinkBandwidth: 100          # Gbit/s; a job asking more stays in one leaf
      notReadyGraceSeconds: 300         # a pod without a not-ready/unreachable toleration
                                        # is replaced after its node is NotReady this long

A bad document raises ConfigError naming every field at fault; the scheduler
then keeps the configuration it had.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import yaml

from voda.core.placement.manager import PlacementSettings

API_VERSIONS = ("voda.io/v1alpha1", "topology.scheduler/v1alpha1")
KIND = "SchedulerConfig"
MAX_DOCUMENT_BYTES = 1 << 20
MAX_DOMAINS = 10_000
MAX_LIMIT = 1 << 20
MAX_GRACE_SECONDS = 86_400.0

WEIGHTS = {
    "resourceAvailability": "resource_weight",
    "topologyAlignment": "topology_weight",
    "domainUtilization": "utilization_weight",
    "historicalPerformance": "history_weight",
}
CONSTRAINTS = ("maxNodesPerLeaf", "maxGPUsPerLeaf")
TOP_LEVEL = ("scoringWeights", "topologyConstraints", "domainPerformance",
             "leafUplinkBandwidth", "notReadyGraceSeconds")


class ConfigError(ValueError):
    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """The placement manager's settings the document sets (its weights, limits, domain
    history and leaf uplink; learning layouts is off: pods report no throughput), and
    the toleration of NotReady nodes assumed for a pod that has none (Kubernetes'
    DefaultTolerationSeconds)."""

    placement: PlacementSettings = field(
        default_factory=lambda: PlacementSettings(learn_layout=False))
    not_ready_grace_seconds: float = 300.0

    def placement_settings(self, gpus_per_unit: int) -> PlacementSettings:
        """The settings for requests whose unit is a pod of `gpus_per_unit` GPUs: the GPU
        limit per leaf becomes a limit in pods (at least one pod)."""
        per_leaf = self.placement.max_gpus_per_leaf
        if per_leaf is None or gpus_per_unit <= 0:
            return self.placement
        return replace(self.placement, max_gpus_per_leaf=max(1, per_leaf // gpus_per_unit))


def parse_text(text: str | bytes) -> SchedulerConfig:
    """A configuration from YAML or JSON text."""
    if isinstance(text, bytes):
        if len(text) > MAX_DOCUMENT_BYTES:
            raise ConfigError([f"document: larger than {MAX_DOCUMENT_BYTES} bytes"])
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise ConfigError(["document: not UTF-8 text"]) from None
    if len(text) > MAX_DOCUMENT_BYTES:
        raise ConfigError([f"document: larger than {MAX_DOCUMENT_BYTES} bytes"])
    if not text.strip():
        return SchedulerConfig()
    try:
        document = json.loads(text)
    except ValueError:
        try:
            document = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError([f"document: not valid YAML or JSON: {' '.join(str(exc).split())}"
                               [:300]]) from None
    return parse(document)


def parse(document: Any) -> SchedulerConfig:
    """A configuration from a parsed document; ConfigError names every bad field."""
    if document is None:
        return SchedulerConfig()
    if not isinstance(document, Mapping):
        raise ConfigError([f"document: must be a mapping, got {type(document).__name__}"])
    problems: list[str] = []
    body: Mapping[str, Any] = document
    where = ""
    if "kind" in document or "apiVersion" in document or "spec" in document:
        if document.get("kind", KIND) != KIND:
            problems.append(f"kind: must be {KIND}, got {document.get('kind')!r}")
        if document.get("apiVersion", API_VERSIONS[0]) not in API_VERSIONS:
            problems.append(f"apiVersion: must be one of {', '.join(API_VERSIONS)}, "
                            f"got {document.get('apiVersion')!r}")
        for key in sorted(set(document) - {"kind", "apiVersion", "metadata", "spec"}, key=str):
            problems.append(f"{key}: unknown field; known: apiVersion, kind, metadata, spec")
        spec = document.get("spec") or {}
        if not isinstance(spec, Mapping):
            raise ConfigError([*problems, f"spec: must be a mapping, got {type(spec).__name__}"])
        body, where = spec, "spec."
    values: dict[str, Any] = {}  # PlacementSettings fields
    grace = SchedulerConfig().not_ready_grace_seconds
    for key in sorted(set(body) - set(TOP_LEVEL), key=str):
        problems.append(f"{where}{key}: unknown field; known: {', '.join(TOP_LEVEL)}")
    weights = _section(body, "scoringWeights", where, problems)
    for key in sorted(set(weights) - set(WEIGHTS), key=str):
        problems.append(f"{where}scoringWeights.{key}: unknown field; known: "
                        f"{', '.join(WEIGHTS)}")
    for key, attr in WEIGHTS.items():
        if key in weights:
            value = _number(weights[key], f"{where}scoringWeights.{key}", problems, low=0.0,
                            high=1e6)
            if value is not None:
                values[attr] = value
    constraints = _section(body, "topologyConstraints", where, problems)
    for key in sorted(set(constraints) - set(CONSTRAINTS), key=str):
        problems.append(f"{where}topologyConstraints.{key}: unknown field; known: "
                        f"{', '.join(CONSTRAINTS)}")
    for key, attr in (("maxNodesPerLeaf", "max_nodes_per_leaf"),
                      ("maxGPUsPerLeaf", "max_gpus_per_leaf")):
        if constraints.get(key) is not None:
            limit = constraints[key]
            if isinstance(limit, bool) or not isinstance(limit, int) or not (
                1 <= limit <= MAX_LIMIT
            ):
                problems.append(f"{where}topologyConstraints.{key}: must be an integer in "
                                f"[1, {MAX_LIMIT}], got {limit!r}")
            else:
                values[attr] = limit
    performance = _section(body, "domainPerformance", where, problems)
    if len(performance) > MAX_DOMAINS:
        problems.append(f"{where}domainPerformance: at most {MAX_DOMAINS} domains, "
                        f"got {len(performance)}")
    else:
        scores = {}
        for domain, score in performance.items():
            value = _number(score, f"{where}domainPerformance.{domain}", problems, low=0.0,
                            high=1.0)
            if value is not None:
                scores[str(domain)] = value
        values["domain_performance"] = scores
    if "leafUplinkBandwidth" in body:
        value = _number(body["leafUplinkBandwidth"], f"{where}leafUplinkBandwidth", problems,
                        low=0.0, high=1e6, open_low=True)
        if value is not None:
            values["leaf_uplink_bandwidth"] = value
    if "notReadyGraceSeconds" in body:
        value = _number(body["notReadyGraceSeconds"], f"{where}notReadyGraceSeconds", problems,
                        low=0.0, high=MAX_GRACE_SECONDS)
        if value is not None:
            grace = value
    if problems:
        raise ConfigError(problems)
    return SchedulerConfig(PlacementSettings(learn_layout=False, **values), grace)


def _section(body: Mapping[str, Any], key: str, where: str, problems: list[str]
             ) -> Mapping[str, Any]:
    value = body.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        problems.append(f"{where}{key}: must be a mapping, got {type(value).__name__}")
        return {}
    return value


def _number(value: Any, name: str, problems: list[str], low: float, high: float,
            open_low: bool = False) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        problems.append(f"{name}: must be a number, got {value!r}")
        return None
    if value < low or value > high or (open_low and value == low):
        bounds = f"({low:g}, {high:g}]" if open_low else f"[{low:g}, {high:g}]"
        problems.append(f"{name}: must lie in {bounds}, got {value!r}")
        return None
    return float(value)

"""Placement hints from annotations: `voda.io/*`, and `topology.scheduler/*` for manifests
written for the scheduler Voda learns from.

Annotations are looked up on the pod first, then on each owner up the chain
(ReplicaSet, then its Deployment), so a template can override its workload.
On one object `voda.io/` wins over `topology.scheduler/`. Every value is checked
and bounded; a bad one is reported as "annotation: reason", never defaulted.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

from voda.podsched.model import Hints, Strategy

PREFIXES = ("voda.io/", "topology.scheduler/")

GPU_COUNT = "gpu-count"
STRATEGY = "placement-strategy"
PREFERRED_DOMAIN = "preferred-domain"
NETWORK_BANDWIDTH = "network-bandwidth"
LATENCY_SENSITIVE = "latency-sensitive"
REQUIRED_TOPOLOGY = "required-topology"
PREFERRED_TOPOLOGY = "preferred-topology"
NAMES = (GPU_COUNT, STRATEGY, PREFERRED_DOMAIN, NETWORK_BANDWIDTH, LATENCY_SENSITIVE,
         REQUIRED_TOPOLOGY, PREFERRED_TOPOLOGY)

MAX_GPU_COUNT = 65536
MAX_BANDWIDTH_GBPS = 1e6
MAX_DOMAIN_LENGTH = 253

_BANDWIDTH = re.compile(
    r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:b|bit)?(?:ps|/s)?\s*$", re.IGNORECASE
)
_BANDWIDTH_SCALE = {"": 1.0, "k": 1e-6, "m": 1e-3, "g": 1.0, "t": 1e3}
# A label key: an optional DNS subdomain prefix and "/", then a name of at most 63
# characters (alphanumerics, '-', '_', '.', starting and ending alphanumeric).
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DOMAIN = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def lookup(name: str, layers: Sequence[Mapping[str, str]]) -> tuple[str, str] | None:
    """(annotation, value) of the first layer that has `name` under either prefix."""
    for layer in layers:
        for prefix in PREFIXES:
            key = prefix + name
            if key in layer:
                return key, layer[key]
    return None


def read_hints(layers: Sequence[Mapping[str, str]]) -> tuple[Hints, list[str]]:
    """Hints from annotation layers, most specific first; and the problems, one per bad value.

    With problems the returned hints are not to be used: the caller leaves the
    pods Pending and says why.
    """
    problems: list[str] = []
    values: dict[str, object] = {}
    readers = {
        GPU_COUNT: _gpu_count,
        STRATEGY: _strategy,
        PREFERRED_DOMAIN: _domain,
        NETWORK_BANDWIDTH: _bandwidth,
        LATENCY_SENSITIVE: _boolean,
        REQUIRED_TOPOLOGY: _label_key,
        PREFERRED_TOPOLOGY: _label_key,
    }
    for name, reader in readers.items():
        found = lookup(name, layers)
        if found is None:
            continue
        key, raw = found
        if not isinstance(raw, str):
            problems.append(f"{key}: must be a string, got {raw!r}")
            continue
        try:
            values[name] = reader(raw)
        except ValueError as exc:
            problems.append(f"{key}: {exc}")
    hints = Hints(
        gpu_count=values.get(GPU_COUNT),  # type: ignore[arg-type]
        strategy=values.get(STRATEGY, Strategy.CONSOLIDATED),  # type: ignore[arg-type]
        preferred_domain=values.get(PREFERRED_DOMAIN),  # type: ignore[arg-type]
        network_bandwidth=values.get(NETWORK_BANDWIDTH),  # type: ignore[arg-type]
        latency_sensitive=bool(values.get(LATENCY_SENSITIVE, False)),
        required_topology=values.get(REQUIRED_TOPOLOGY),  # type: ignore[arg-type]
        preferred_topology=values.get(PREFERRED_TOPOLOGY),  # type: ignore[arg-type]
    )
    return hints, problems


def _shown(raw: str) -> str:
    return repr(raw if len(raw) <= 60 else raw[:60] + "...")


def _gpu_count(raw: str) -> int:
    text = raw.strip()
    if not re.fullmatch(r"\d{1,9}", text) or not 1 <= int(text) <= MAX_GPU_COUNT:
        raise ValueError(f"must be an integer in [1, {MAX_GPU_COUNT}], got {_shown(raw)}")
    return int(text)


def _strategy(raw: str) -> Strategy:
    try:
        return Strategy(raw.strip().lower())
    except ValueError:
        valid = ", ".join(s.value for s in Strategy)
        raise ValueError(f"must be one of {valid}; got {_shown(raw)}") from None


def _domain(raw: str) -> str:
    text = raw.strip()
    if not text or len(text) > MAX_DOMAIN_LENGTH or not _DOMAIN.match(text):
        raise ValueError(
            f"must be a leaf, spine or node name (letters, digits, '-', '_', '.', at most "
            f"{MAX_DOMAIN_LENGTH} characters), got {_shown(raw)}"
        )
    return text


def _bandwidth(raw: str) -> float:
    """'200Gb', '100Gbps', '25G', '400 Mbit/s' or a plain number of Gbit/s."""
    match = _BANDWIDTH.match(raw)
    if match is None:
        raise ValueError(f"must be a bandwidth such as '100Gb' or '400Mbps', got {_shown(raw)}")
    value = float(match.group(1)) * _BANDWIDTH_SCALE[match.group(2).lower()]
    if not (math.isfinite(value) and 0 < value <= MAX_BANDWIDTH_GBPS):
        raise ValueError(
            f"must be more than 0 and at most {MAX_BANDWIDTH_GBPS:g} Gbit/s, got {_shown(raw)}"
        )
    return value


def _boolean(raw: str) -> bool:
    text = raw.strip().lower()
    if text not in ("true", "false"):
        raise ValueError(f"must be 'true' or 'false', got {_shown(raw)}")
    return text == "true"


def _label_key(raw: str) -> str:
    text = raw.strip()
    prefix, _, name = text.rpartition("/")
    ok = bool(_LABEL_NAME.match(name)) and (
        not prefix or (len(prefix) <= 253 and _DNS_SUBDOMAIN.match(prefix) is not None)
    ) and text.count("/") <= 1
    if not ok:
        raise ValueError(
            f"must be a node label key such as 'voda.io/leaf' (a level of the topology), "
            f"got {_shown(raw)}"
        )
    return text

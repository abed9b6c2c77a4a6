"""Simulated clusters: `16x4` (16 nodes of 4 GPUs) or a YAML file.

YAML:

    nodes:
      - {name: a, gpus: 4, gpu_type: t4, leaf: leaf-0, spine: spine-0}
      - {count: 8, gpus: 4, leaf: leaf-1}        # eight nodes, named node-<i>
    spine_oversubscription: 2   # optional, >= 1 (default 1): see below
    events:
      - {time: 3600, fail: a}                    # the node leaves at t = 3600 s
      - {time: 7200, join: {name: b, gpus: 4}}   # a node joins at t = 7200 s

A job whose GPUs span more than one leaf synchronises over the spine; with
`spine_oversubscription` O its all-reduce takes O times as long (O = 1: the
spine is not a bottleneck). Nodes without a leaf are each their own leaf.

Errors name the file (and the entry) and the reason.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from voda.core.model import DEFAULT_GPU_TYPE, Cluster, Node

_SHAPE = re.compile(r"^\s*(\d+)\s*[xX]\s*(\d+)\s*$")


class ClusterFileError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class NodeEvent:
    time: float
    kind: str  # "fail" or "join"
    node: Node


@dataclass(frozen=True)
class SimCluster:
    nodes: tuple[Node, ...]
    events: tuple[NodeEvent, ...] = ()  # ascending time
    spine_oversubscription: float = 1.0  # slowdown of an all-reduce across leaves

    @property
    def cluster(self) -> Cluster:
        return Cluster(self.nodes)


def parse_cluster(spec: str) -> SimCluster:
    """`NxG` or the path of a YAML cluster file."""
    m = _SHAPE.match(spec)
    if m:
        count, gpus = int(m.group(1)), int(m.group(2))
        if count < 1 or gpus < 1:
            raise ClusterFileError(f"cluster {spec!r}: needs at least 1 node of at least 1 GPU")
        return SimCluster(Cluster.uniform(count, gpus).nodes)
    path = Path(spec)
    if not path.is_file():
        raise ClusterFileError(
            f"cluster {spec!r}: neither NODESxGPUS (e.g. 16x4) nor a readable YAML file"
        )
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ClusterFileError(f"{path}: cannot read the cluster: {exc}") from None
    return cluster_from_dict(data, str(path))


def _node(where: str, raw: Any, default_name: str) -> Node:
    if not isinstance(raw, dict):
        raise ClusterFileError(f"{where}: expected a mapping with gpus, got {raw!r}")
    gpus = raw.get("gpus")
    if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 1:
        raise ClusterFileError(f"{where}: gpus: must be a whole number >= 1, got {gpus!r}")
    return Node(
        name=str(raw.get("name", default_name)),
        gpus=gpus,
        gpu_type=str(raw.get("gpu_type", DEFAULT_GPU_TYPE)),
        leaf=None if raw.get("leaf") is None else str(raw["leaf"]),
        spine=None if raw.get("spine") is None else str(raw["spine"]),
    )


def cluster_from_dict(data: Any, source: str = "cluster") -> SimCluster:
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list):
        raise ClusterFileError(f"{source}: expected a mapping with a 'nodes' list")
    nodes: list[Node] = []
    for i, raw in enumerate(data["nodes"]):
        where = f"{source}: nodes[{i}]"
        count = raw.get("count", 1) if isinstance(raw, dict) else 1
        if not isinstance(count, int) or count < 1:
            raise ClusterFileError(f"{where}: count: must be a whole number >= 1, got {count!r}")
        for _ in range(count):
            entry = dict(raw) if isinstance(raw, dict) else raw
            if isinstance(entry, dict) and count > 1:
                entry.pop("name", None)
            nodes.append(_node(where, entry, f"node-{len(nodes)}"))
    names = [n.name for n in nodes]
    if len(set(names)) != len(names):
        raise ClusterFileError(f"{source}: node names must be unique")
    if not nodes:
        raise ClusterFileError(f"{source}: nodes: at least one node is needed")
    events: list[NodeEvent] = []
    known = set(names)
    by_name = {n.name: n for n in nodes}
    raw_events = data.get("events") or []
    if not isinstance(raw_events, list):
        raise ClusterFileError(f"{source}: events: expected a list")
    for i, raw in enumerate(sorted(raw_events, key=_event_time)):
        where = f"{source}: events[{i}]"
        t = _event_time(raw)
        if t < 0:
            raise ClusterFileError(f"{where}: time: must be a number >= 0")
        if "fail" in raw:
            name = str(raw["fail"])
            if name not in known:
                raise ClusterFileError(f"{where}: fail: no node {name!r} at that time")
            known.discard(name)
            events.append(NodeEvent(t, "fail", by_name[name]))
        elif "join" in raw:
            node = _node(f"{where}: join", raw["join"], f"node-{len(by_name)}")
            if node.name in known:
                raise ClusterFileError(f"{where}: join: node {node.name!r} is already there")
            known.add(node.name)
            by_name[node.name] = node
            events.append(NodeEvent(t, "join", node))
        else:
            raise ClusterFileError(f"{where}: expected 'fail: NODE' or 'join: {{...}}'")
    spine = _spine_oversubscription(source, data.get("spine_oversubscription", 1.0))
    return SimCluster(tuple(nodes), tuple(events), spine)


def _spine_oversubscription(source: str, raw: Any) -> float:
    ok = isinstance(raw, int | float) and not isinstance(raw, bool)
    if not ok or not math.isfinite(raw) or raw < 1:
        raise ClusterFileError(
            f"{source}: spine_oversubscription: must be a number >= 1, got {raw!r}"
        )
    return float(raw)


def _event_time(raw: Any) -> float:
    if not isinstance(raw, dict):
        return -1.0
    t = raw.get("time")
    if isinstance(t, bool) or not isinstance(t, int | float):
        return -1.0
    return float(t)

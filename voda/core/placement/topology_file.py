"""A cluster from a topology description (already parsed from YAML or JSON).

Format (every level optional except the nodes)::

    gpu_type: t4            # default GPU type of the nodes
    gpus: 4                 # default GPUs per node
    spines:
      - name: spine-0
        leaves:
          - name: leaf-0
            nodes: 2        # a count: nodes named <leaf>-node-<i>
          - name: leaf-1
            nodes:          # or a list
              - {name: big-0, gpus: 8, gpu_type: a100}

`leaves:` may stand at the top level (one spine, named "spine"), and
`nodes:` too (a flat list whose entries may carry `leaf`, `spine` or
`labels` with `voda.io/leaf` / `voda.io/spine`). Errors name the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from voda.core.model import DEFAULT_GPU_TYPE, Cluster, Node
from voda.core.placement.topology import LEAF_LABEL, SPINE_LABEL, Topology


class TopologyFileError(ValueError):
    pass


def cluster_from_topology(data: Any) -> Cluster:
    """The Cluster a topology description defines; TopologyFileError when malformed."""
    if not isinstance(data, Mapping):
        raise TopologyFileError("topology: must be a mapping with spines, leaves or nodes")
    gpu_type = _text(data.get("gpu_type", DEFAULT_GPU_TYPE), "gpu_type")
    gpus = _count(data.get("gpus", 1), "gpus")
    nodes: list[Node] = []
    if "spines" in data:
        for s, spine in enumerate(_list(data["spines"], "spines")):
            where = f"spines[{s}]"
            spine = _mapping(spine, where)
            name = _text(spine.get("name", f"spine-{s}"), f"{where}.name")
            for i, leaf in enumerate(_list(spine.get("leaves"), f"{where}.leaves")):
                nodes += _leaf(leaf, f"{where}.leaves[{i}]", name, gpu_type, gpus, f"leaf-{s}-{i}")
    if "leaves" in data:
        for i, leaf in enumerate(_list(data["leaves"], "leaves")):
            nodes += _leaf(leaf, f"leaves[{i}]", None, gpu_type, gpus, f"leaf-{i}")
    if "nodes" in data:
        for i, entry in enumerate(_list(data["nodes"], "nodes")):
            nodes.append(_node(entry, f"nodes[{i}]", None, None, gpu_type, gpus, f"node-{i}"))
    if not nodes:
        raise TopologyFileError("topology: no nodes (give spines, leaves or nodes)")
    seen: set[str] = set()
    for node in nodes:
        if node.name in seen:
            raise TopologyFileError(f"nodes: name {node.name!r} is used twice")
        seen.add(node.name)
    cluster = Cluster(tuple(nodes))
    try:
        Topology.of(cluster)
    except ValueError as exc:
        raise TopologyFileError(str(exc)) from None
    return cluster


def _leaf(data: Any, where: str, spine: str | None, gpu_type: str, gpus: int,
          default_name: str) -> list[Node]:
    data = _mapping(data, where)
    name = _text(data.get("name", default_name), f"{where}.name")
    gpu_type = _text(data.get("gpu_type", gpu_type), f"{where}.gpu_type")
    gpus = _count(data.get("gpus", gpus), f"{where}.gpus")
    entries = data.get("nodes")
    if isinstance(entries, int) and not isinstance(entries, bool):
        count = _count(entries, f"{where}.nodes")
        return [Node(f"{name}-node-{i}", gpus, gpu_type, name, spine) for i in range(count)]
    return [
        _node(entry, f"{where}.nodes[{i}]", name, spine, gpu_type, gpus, f"{name}-node-{i}")
        for i, entry in enumerate(_list(entries, f"{where}.nodes"))
    ]


def _node(data: Any, where: str, leaf: str | None, spine: str | None, gpu_type: str, gpus: int,
          default_name: str) -> Node:
    data = _mapping(data, where)
    labels = _mapping(data.get("labels", {}), f"{where}.labels")
    leaf = data.get("leaf", labels.get(LEAF_LABEL, leaf))
    spine = data.get("spine", labels.get(SPINE_LABEL, spine))
    return Node(
        name=_text(data.get("name", default_name), f"{where}.name"),
        gpus=_count(data.get("gpus", gpus), f"{where}.gpus"),
        gpu_type=_text(data.get("gpu_type", gpu_type), f"{where}.gpu_type"),
        leaf=None if leaf is None else _text(leaf, f"{where}.leaf"),
        spine=None if spine is None else _text(spine, f"{where}.spine"),
    )


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise TopologyFileError(f"{where}: must be a mapping, got {type(value).__name__}")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list) or not value:
        raise TopologyFileError(f"{where}: must be a non-empty list")
    return value


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise TopologyFileError(f"{where}: must be a non-empty string, got {value!r}")
    return value


def _count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise TopologyFileError(f"{where}: must be a positive integer, got {value!r}")
    return value

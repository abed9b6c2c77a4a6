"""The machine as the scheduler sees it: slots, (virtual) nodes, and which slot is which GPU."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Collection, Sequence

from voda.core.model import JobPlacement, Node

Slot = tuple[str, int]  # (node, index on the node)


def parse_nodes(spec: str | int | None, slots: int) -> list[Node]:
    """'2x2' -> two nodes of 2 slots; '4' or 4 -> four nodes of slots/4; None -> one node."""
    if spec is None or spec == "" or spec == 1 or spec == "1":
        return [Node("local", slots)]
    text = str(spec).strip().lower()
    match = re.fullmatch(r"(\d+)(?:x(\d+))?", text)
    if not match:
        raise ValueError(f"nodes: expected COUNT or COUNTxSLOTS such as '2x2', got {spec!r}")
    count = int(match.group(1))
    per_node = int(match.group(2)) if match.group(2) else (slots // count if count else 0)
    if count < 1 or per_node < 1:
        raise ValueError(f"nodes: need at least one node of at least one slot, got {spec!r}"
                         f" for {slots} slots")
    if match.group(2) is None and count * per_node != slots:
        raise ValueError(f"nodes: {slots} slots do not split evenly into {count} nodes")
    return [Node(f"local-{i}", per_node) for i in range(count)]


def detect_gpus() -> list[str]:
    """GPU ids usable here: CUDA_VISIBLE_DEVICES if set, else what nvidia-smi lists."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [d.strip() for d in visible.split(",") if d.strip() and d.strip() != "-1"]
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU ")]


def make_nodes(slots: int | None, nodes: str | int | None, gpus: Sequence[str]) -> list[Node]:
    """The backend's nodes from its `slots` and `nodes` arguments and the GPUs visible."""
    shape = re.fullmatch(r"\s*(\d+)\s*x\s*(\d+)\s*", str(nodes).lower()) if nodes else None
    if shape is not None:  # '2x2' says how many slots there are
        total = int(shape.group(1)) * int(shape.group(2))
        if slots is not None and slots != total:
            raise ValueError(f"slots: {slots} does not match nodes {nodes!r} ({total} slots)")
        slots = total
    if slots is None:
        slots = len(gpus) or os.cpu_count() or 1
    if slots < 1:
        raise ValueError(f"slots: must be at least 1, got {slots}")
    if gpus and slots > len(gpus):
        raise ValueError(f"slots: {slots} asked but only {len(gpus)} GPUs are visible")
    return parse_nodes(nodes, slots)


def map_slots_to_gpus(nodes: Sequence[Node], gpus: Sequence[str]) -> dict[Slot, str]:
    """Slots in node order take the GPUs in order (none when no GPU is visible)."""
    mapping: dict[Slot, str] = {}
    index = 0
    for node in nodes:
        for i in range(node.gpus):
            if index < len(gpus):
                mapping[(node.name, i)] = gpus[index]
            index += 1
    return mapping


def assign_slots(job: str, placement: JobPlacement, nodes: Sequence[Node],
                 taken: Collection[Slot], held: Collection[Slot]) -> tuple[Slot, ...]:
    """Slots for `placement`, none of them `taken` by other jobs, preferring the `held` ones."""
    capacity = {n.name: n.gpus for n in nodes}
    chosen: list[Slot] = []
    for node, count in placement:
        if node not in capacity:
            raise ValueError(f"job {job!r}: no node {node!r} on this backend "
                             f"(nodes: {', '.join(capacity)})")
        free = [(node, i) for i in range(capacity[node]) if (node, i) not in taken]
        # Keep the slots the job holds so a rescale moves as little as possible.
        free.sort(key=lambda s: (s not in held, s[1]))
        if len(free) < count:
            raise ValueError(f"node {node!r} over capacity: job {job!r} needs {count} "
                             f"slots, {len(free)} free of {capacity[node]}")
        chosen.extend(sorted(free[:count]))
    return tuple(chosen)

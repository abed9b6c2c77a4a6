"""What a kubelet writes into a pod's status: container statuses while running, in
CrashLoopBackOff and terminated, and the back-off between restarts (10 s doubling to
300 s, reset once a container has run for 10 minutes)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]
BACKOFF_SECONDS = 10.0
MAX_BACKOFF_SECONDS = 300.0
RESET_AFTER_SECONDS = 600.0  # a container that ran this long starts its back-off afresh
EXIT_AFTER = "sim.voda.io/exit-after-seconds"  # each start, the container exits after this
EXIT_CODE = "sim.voda.io/exit-code"


@dataclass
class Container:
    name: str
    image: str
    restarts: int = 0
    crashes: int = 0  # exits since the back-off last reset
    state: str = "waiting"  # waiting, running, terminated
    reason: str = "ContainerCreating"
    message: str = ""
    exit_code: int = 0
    started: str = ""  # RFC 3339, the last start
    started_at: float = 0.0  # monotonic, the last start
    last: Obj = field(default_factory=dict)  # lastState


def containers_of(pod: Obj) -> dict[str, Container]:
    return {c["name"]: Container(c["name"], str(c.get("image", "")))
            for c in (pod.get("spec") or {}).get("containers") or []}


def restarts_on(policy: str, exit_code: int) -> bool:
    return policy == "Always" or (policy == "OnFailure" and exit_code != 0)


def backoff_seconds(crashes: int) -> float:
    """The wait before the restart that follows the `crashes`-th exit (1: 10 s)."""
    return min(MAX_BACKOFF_SECONDS, BACKOFF_SECONDS * 2 ** max(0, crashes - 1))


def statuses(pod: Obj, containers: dict[str, Container]) -> list[Obj]:
    out = []
    for c in containers.values():
        status: Obj = {"name": c.name, "image": c.image, "imageID": f"{c.image}@sha256:sim",
                       "restartCount": c.restarts, "ready": c.state == "running",
                       "started": c.state == "running"}
        if c.state == "running":
            status["state"] = {"running": {"startedAt": c.started}}
            status["containerID"] = f"containerd://{pod['metadata']['uid']}-{c.restarts}"
        elif c.state == "terminated":
            status["state"] = {"terminated": {"exitCode": c.exit_code, "reason": c.reason,
                                              "startedAt": c.started}}
        else:
            waiting: Obj = {"reason": c.reason}
            if c.message:
                waiting["message"] = c.message
            status["state"] = {"waiting": waiting}
        if c.last:
            status["lastState"] = {"terminated": c.last}
        out.append(status)
    return out


def exit_plan(pod: Obj) -> tuple[float, int] | None:
    """(seconds after each start, exit code) from the pod's annotations, if any."""
    annotations = pod["metadata"].get("annotations") or {}
    if EXIT_AFTER not in annotations:
        return None
    try:
        return float(annotations[EXIT_AFTER]), int(annotations.get(EXIT_CODE, "1"))
    except ValueError:
        return None
